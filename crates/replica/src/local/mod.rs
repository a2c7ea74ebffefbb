//! `LocalReplica`: a replica on this host's file system, confined under its
//! root handle (`fsys`), with its state files in a host state directory.

mod dir;
mod direct;
pub use dir::LocalDir;
pub(crate) mod follow;
mod set_side;
pub(crate) mod side;

use crate::error::{Action, End, Error};
use crate::seam::{Replica, ReplicaDir};
use crate::side::{SideFailure, SideSession};
use accord_delta::PatchOptions;
use accord_fsys::{fstat, Dir, IgnoreRules, Listing, Mapped, Root, Scan, ScanOptions};
use accord_model::{Expect, Fingerprint, RelPath};
use side::LocalSide;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// Largest state file read (the memos hold up to 2^27 digests).
const MAX_STATE_BYTES: u64 = 1 << 31;
/// Most state files one root keeps (the engine writes a few: the source
/// root a mirror came from, the listing and extended attribute memos).
const MAX_STATE_FILES: usize = 16;

/// How a local replica writes.
#[derive(Clone, Copy, Debug)]
pub struct LocalOptions {
    /// fsync what must survive a crash (in-place markers and updates).
    pub fsync: bool,
    /// Most scratch memory an in-place patch may use.
    pub max_scratch: u64,
    /// Whole files may be received into this replica (from a wire, or by
    /// a sync's propagation): it then notes the directories it makes
    /// (`LocalReplica::made_dirs`). A mirror between two local roots
    /// copies instead, and would only hold the paths.
    pub receives: bool,
}

impl Default for LocalOptions {
    fn default() -> Self {
        LocalOptions {
            fsync: true,
            max_scratch: PatchOptions::default().max_scratch,
            receives: true,
        }
    }
}

/// A replica on a local file system, confined under its root handle.
pub struct LocalReplica {
    root: Root,
    /// Where this replica's state files live (None: it keeps none).
    state_dir: Option<PathBuf>,
    /// The state files' key: a digest of the canonical root path.
    state_key: String,
    opts: LocalOptions,
    /// The links a sync follows (`--follow`), and the temps written
    /// through them (the replica crate's local/follow.rs).
    pub(crate) follow: follow::FollowState,
    /// Directories this replica made (and directory temps it made, by
    /// their temp's path, until committed), when it receives files
    /// (`LocalOptions::receives`): no partial file of an earlier
    /// run is in them, so a whole file received into one has none to
    /// remove (one failed unlink a file fewer in an initial push). At
    /// most `MADE_DIRS_MAX` of them, so that memory does not grow with the
    /// tree: a directory made beyond that is looked in as any other.
    pub(crate) made_dirs: std::sync::Mutex<std::collections::HashSet<RelPath>>,
}

/// How many directories a replica remembers making (about 100 bytes each).
pub(crate) const MADE_DIRS_MAX: usize = 8192;

impl LocalReplica {
    /// Open an existing directory.
    pub fn open(path: &Path) -> io::Result<LocalReplica> {
        Ok(LocalReplica::new(Root::open(path)?))
    }

    /// Open a directory, creating it first if missing.
    pub fn create(path: &Path) -> io::Result<LocalReplica> {
        Ok(LocalReplica::new(Root::create(path)?))
    }

    /// A replica over a root opened by the caller (e.g. confined with
    /// `Root::open_beneath`).
    pub fn from_root(root: Root) -> LocalReplica {
        LocalReplica::new(root)
    }

    fn new(root: Root) -> LocalReplica {
        let canonical = accord_fsys::canonical(root.path());
        let key = blake3::hash(canonical.as_os_str().as_encoded_bytes()).to_hex();
        LocalReplica {
            root,
            state_dir: None,
            state_key: key.as_str()[..24].to_string(),
            opts: LocalOptions::default(),
            follow: Default::default(),
            made_dirs: Default::default(),
        }
    }

    /// Keep state files in `dir`.
    pub fn with_state_dir(mut self, dir: Option<PathBuf>) -> LocalReplica {
        self.state_dir = dir;
        self
    }

    pub fn with_options(mut self, opts: LocalOptions) -> LocalReplica {
        self.opts = opts;
        self
    }

    /// The root handle (local fast paths: copy_file_range, reflink, links).
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// How many state files this root has.
    fn state_files(&self) -> usize {
        let Some(dir) = &self.state_dir else {
            return 0;
        };
        let suffix = format!("-{}", self.state_key);
        std::fs::read_dir(dir).map_or(0, |entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(&suffix))
                .count()
        })
    }

    fn state_path(&self, name: &str) -> Option<PathBuf> {
        self.state_dir
            .as_ref()
            .map(|d| d.join(format!("{name}-{}", self.state_key)))
    }
}

impl Replica for LocalReplica {
    fn describe(&self) -> String {
        self.root.path().display().to_string()
    }

    fn identity(&self) -> (u64, u64) {
        self.root.identity()
    }

    fn try_lock(&self) -> io::Result<bool> {
        self.root.try_lock()
    }

    fn list_dir(
        &self,
        dir: &RelPath,
        rules: &IgnoreRules,
        opts: &ScanOptions,
    ) -> (Option<Listing>, Scan) {
        accord_fsys::list_dir(&self.root, dir, rules, opts)
    }

    fn fingerprint(&self, path: &RelPath) -> Result<Fingerprint, Error> {
        let f = self
            .open_file_following(path)
            .map_err(Error::io(Action::OpenSource))?;
        accord_fsys::hash_file(&f).map_err(Error::io(Action::Fingerprint))
    }

    fn open_dir(&self, path: &RelPath) -> io::Result<Box<dyn ReplicaDir + '_>> {
        Ok(Box::new(LocalDir {
            dir: self.open_dir_following(path)?,
            replica: self,
            rel: Some(path.clone()),
            beyond_link: false,
        }))
    }

    fn sync_all(&self) -> io::Result<()> {
        self.root.syncfs()
    }

    fn read_state(&self, name: &str) -> Option<Vec<u8>> {
        let mut buf = Vec::new();
        File::open(self.state_path(name)?)
            .and_then(|f| f.take(MAX_STATE_BYTES).read_to_end(&mut buf))
            .ok()?;
        Some(buf)
    }

    fn write_state(&self, name: &str, data: &[u8], durable: bool) -> io::Result<()> {
        let Some(p) = self.state_path(name) else {
            return Ok(());
        };
        if !p.exists() && self.state_files() >= MAX_STATE_FILES {
            // A remote client names the state it writes: it may not make
            // this host keep a file for every name it makes up.
            return Err(io::Error::other(format!(
                "this root already has {MAX_STATE_FILES} state files, the most it may have"
            )));
        }
        accord_fsys::replace_host_file(&p, data, durable)
    }

    fn sync_identity(&self) -> io::Result<Vec<u8>> {
        Ok(crate::side::local_identity(self.root.path()))
    }

    fn open_sync_side(
        &self,
        other: &[u8],
        archive_dir: &Path,
    ) -> Result<Box<dyn SideSession + '_>, SideFailure> {
        Ok(Box::new(LocalSide::open(self, other, archive_dir)?))
    }

    fn open_set_side(
        &self,
        set: &[u8],
        archive_dir: &Path,
    ) -> Result<Box<dyn SideSession + '_>, SideFailure> {
        Ok(Box::new(LocalSide::open_set(self, set, archive_dir)?))
    }

    fn can_rename(&self) -> bool {
        true
    }

    fn local_root(&self) -> Option<&Root> {
        Some(&self.root)
    }
}

/// Safety rule 3 for an open file: `f` is what `expect` says.
pub fn check_open(f: &File, expect: &Expect, end: End) -> Result<(), Error> {
    let st = fstat(f.as_fd()).map_err(Error::io(match end {
        End::Read => Action::ReadSource,
        End::Written => Action::OpenDestination,
    }))?;
    if expect.still_holds(Some(&st.found())) {
        Ok(())
    } else {
        Err(Error::Changed(end))
    }
}

/// A mapping that a truncation by another process cannot crash the run with.
pub fn map(f: &File, len: u64) -> io::Result<Option<Mapped>> {
    if len == 0 {
        return Ok(None);
    }
    Mapped::new(f, len).map(Some)
}

/// Run `update` on the file `name` in place, behind an in-place marker: if
/// it fails (or this process dies) after writing began, the file holds
/// neither version and is moved to a hidden recovery name beside it.
pub fn guarded_in_place<T>(
    dir: &Dir,
    name: &[u8],
    fsync: bool,
    update: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    let marker = dir
        .create_inplace_marker(name, fsync)
        .map_err(Error::io(Action::UpdateInPlace))?;
    match update() {
        Ok(v) => {
            let _ = dir.unlink(&marker);
            Ok(v)
        }
        Err(e) => {
            let rec = accord_fsys::recovery_name(name);
            let moved = dir.rename_noreplace(name, &rec);
            if moved.is_ok() {
                let _ = dir.unlink(&marker);
            }
            Err(Error::InPlaceFailed {
                cause: Box::new(e),
                recovery: moved.map(|()| rec),
            })
        }
    }
}
