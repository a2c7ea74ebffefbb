//! `LocalReplica`: a replica on this host's file system, confined under its
//! root handle (`fsys`), with its state files in a host state directory.

mod direct;
pub(crate) mod follow;
pub(crate) mod side;

use crate::error::{Action, Error, Side};
use crate::pending::{Deleted, Incoming};
use crate::seam::{recheck, Replica, ReplicaDir};
use crate::side::{SideFailure, SideSession};
use accord_delta::{Delta, PatchOptions, Signature, SignatureOptions};
use accord_fsys::{fstat, Dir, IgnoreRules, Listing, Mapped, PropsMask, Root, Scan, ScanOptions};
use accord_model::{Entry, Expect, Fingerprint, Found, Kind, Props, RelPath};
use side::LocalSide;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

/// Largest state file read (the memos hold up to 2^27 digests).
const MAX_STATE_BYTES: u64 = 1 << 31;

/// How a local replica writes.
#[derive(Clone, Copy, Debug)]
pub struct LocalOptions {
    /// fsync what must survive a crash (in-place markers and updates).
    pub fsync: bool,
    /// Most scratch memory an in-place patch may use.
    pub max_scratch: u64,
}

impl Default for LocalOptions {
    fn default() -> Self {
        LocalOptions {
            fsync: true,
            max_scratch: PatchOptions::default().max_scratch,
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
}

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
            rel: self.follows().then(|| path.clone()),
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
        match self.state_path(name) {
            Some(p) => accord_fsys::replace_host_file(&p, data, durable),
            None => Ok(()),
        }
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

    fn can_rename(&self) -> bool {
        true
    }

    fn local_root(&self) -> Option<&Root> {
        Some(&self.root)
    }
}

/// A directory of a [`LocalReplica`].
pub struct LocalDir<'a> {
    pub(crate) dir: Dir,
    pub(crate) replica: &'a LocalReplica,
    /// The directory's path, kept only while the replica follows links
    /// (the replica crate's local/follow.rs); None for a followed link's target directory.
    pub(crate) rel: Option<RelPath>,
    /// A followed link's target directory (`LocalDir::beyond`), where no
    /// partial file of ours is kept.
    pub(crate) beyond_link: bool,
}

fn stat_now(dir: &Dir, name: &[u8]) -> io::Result<Option<Found>> {
    match dir.stat(name) {
        Ok(st) => Ok(Some(st.found())),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Safety rule 3 for an open file: `f` is what `expect` says.
pub fn check_open(f: &File, expect: &Expect, side: Side) -> Result<(), Error> {
    let st = fstat(f.as_fd()).map_err(Error::io(match side {
        Side::Source => Action::ReadSource,
        Side::Destination => Action::OpenDestination,
    }))?;
    if expect.still_holds(Some(&st.found())) {
        Ok(())
    } else {
        Err(Error::Changed(side))
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

impl LocalDir<'_> {
    fn open_checked(&self, name: &[u8], expect: &Expect, side: Side) -> Result<File, Error> {
        let action = match side {
            Side::Source => Action::OpenSource,
            Side::Destination => Action::OpenDestination,
        };
        if let Some((target, name)) = self.beyond(name).map_err(Error::io(action))? {
            return target.open_checked(&name, expect, side);
        }
        let f = match self.dir.open_read(name) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Err(Error::Changed(side)),
            Err(e) => return Err(Error::Io { action, source: e }),
        };
        check_open(&f, expect, side)?;
        Ok(f)
    }

    /// A new temp file for `name`, filled by `fill`, with `props`; removed
    /// again on any failure.
    fn temp_with(
        &self,
        name: &[u8],
        props: &Props,
        mask: PropsMask,
        fill: impl FnOnce(&File) -> Result<(), Error>,
    ) -> Result<Vec<u8>, Error> {
        self.temp_or_partial(name, props, mask, fill, || false)
    }

    /// `temp_with`, but on a failure the temp becomes `name`'s partial file
    /// when `keep` says what arrived is worth resuming from.
    fn temp_or_partial(
        &self,
        name: &[u8],
        props: &Props,
        mask: PropsMask,
        fill: impl FnOnce(&File) -> Result<(), Error>,
        keep: impl FnOnce() -> bool,
    ) -> Result<Vec<u8>, Error> {
        let (temp, tf) = self
            .dir
            .create_temp(name)
            .map_err(Error::io(Action::WriteTemp))?;
        // No partial file beside a followed link's target: nothing of ours
        // lingers outside the root.
        let keep = || !self.beyond_link && keep();
        let r = fill(&tf).and_then(|()| {
            accord_fsys::set_props_fd(tf.as_fd(), props, mask).map_err(Error::io(Action::SetProps))
        });
        match r {
            Ok(()) => Ok(temp),
            Err(e) => {
                let kept = keep()
                    && accord_model::partial_name(name)
                        .is_some_and(|p| self.dir.rename(&temp, &p).is_ok());
                if !kept {
                    let _ = self.dir.unlink(&temp);
                }
                Err(e)
            }
        }
    }

    /// Receive a whole file; if its source is cut off after `PARTIAL_MIN`
    /// bytes, what arrived stays as the name's partial file.
    fn receive_whole(
        &self,
        name: &[u8],
        data: &mut dyn Read,
        props: &Props,
        mask: PropsMask,
    ) -> Result<Vec<u8>, Error> {
        let arrived = std::cell::Cell::new((0, false));
        let fill = |tf: &File| {
            let mut src = Watched {
                inner: data,
                arrived: &arrived,
            };
            accord_fsys::write_sparse(&mut src, tf)
                .map(|_| ())
                .map_err(Error::io(Action::WriteTemp))
        };
        let keep = || {
            let (n, cut_off) = arrived.get();
            cut_off && n >= PARTIAL_MIN
        };
        let temp = self.temp_or_partial(name, props, mask, fill, keep)?;
        self.remove_partial(name);
        Ok(temp)
    }

    /// The temp of `name`, rebuilt from its partial file and `delta`; the
    /// partial file is removed once the result checked out.
    fn receive_resumed(
        &self,
        name: &[u8],
        delta: &[u8],
        props: &Props,
        mask: PropsMask,
    ) -> Result<Vec<u8>, Error> {
        let delta = Delta::parse(delta).map_err(delta_err(Action::WriteTemp))?;
        let partial = accord_model::partial_name(name).ok_or(Error::Changed(Side::Destination))?;
        let f = match self.dir.open_read(&partial) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                return Err(Error::Changed(Side::Destination))
            }
            Err(e) => return Err(Error::io(Action::OpenDestination)(e)),
        };
        let len = fstat(f.as_fd())
            .map_err(Error::io(Action::OpenDestination))?
            .size;
        if len != delta.old_len {
            return Err(Error::Changed(Side::Destination));
        }
        let m = map(&f, len).map_err(Error::io(Action::OpenDestination))?;
        let temp = self.temp_with(name, props, mask, |tf| {
            let mut w = io::BufWriter::with_capacity(1 << 20, tf);
            accord_delta::patch_to(m.as_deref().unwrap_or(&[]), &delta, &mut w)
                .map_err(delta_err(Action::WriteTemp))?;
            w.flush().map_err(Error::io(Action::WriteTemp))?;
            if m.as_ref().is_some_and(Mapped::damaged) {
                return Err(Error::Changed(Side::Destination));
            }
            Ok(())
        })?;
        self.remove_partial(name);
        Ok(temp)
    }

    fn remove_partial(&self, name: &[u8]) {
        if let Some(p) = accord_model::partial_name(name) {
            let _ = self.dir.unlink(&p);
        }
    }
}

/// The encoded signature of an open file (`verified`: see
/// `SignatureOptions::verified`).
fn signature_of(f: &File, verified: bool) -> Result<Vec<u8>, Error> {
    let len = fstat(f.as_fd())
        .map_err(Error::io(Action::OpenDestination))?
        .size;
    let m = map(f, len).map_err(Error::io(Action::OpenDestination))?;
    let opts = SignatureOptions {
        verified,
        ..SignatureOptions::default()
    };
    let sig = Signature::generate(m.as_deref().unwrap_or(&[]), &opts)
        .map_err(delta_err(Action::OpenDestination))?;
    if m.as_ref().is_some_and(Mapped::damaged) {
        return Err(Error::Changed(Side::Destination));
    }
    Ok(sig.encode())
}

/// The checks of `accord_delta::patch_in_place` that come before any
/// write (layout, the target's length, the scratch budget).
fn refuse_in_place(target: &File, delta: &Delta<'_>, opts: &PatchOptions) -> Result<(), Error> {
    let refuse = |msg: String| {
        Err(Error::Delta {
            action: Action::UpdateInPlace,
            source: accord_delta::DeltaError::Usage(msg),
        })
    };
    if delta.layout != accord_delta::Layout::InPlace {
        return refuse("an in-place update needs a delta of the in-place layout".into());
    }
    if delta.scratch_len > opts.max_scratch {
        return refuse(format!(
            "the delta needs {} bytes of scratch memory, more than the {} allowed",
            delta.scratch_len, opts.max_scratch
        ));
    }
    let len = fstat(target.as_fd())
        .map_err(Error::io(Action::UpdateInPlace))?
        .size;
    if len != delta.old_len {
        return Err(Error::Delta {
            action: Action::UpdateInPlace,
            source: accord_delta::DeltaError::WrongBasis {
                expected: delta.old_len,
                actual: len,
            },
        });
    }
    Ok(())
}

/// Least of a cut-off transfer worth keeping as a partial file.
const PARTIAL_MIN: u64 = 1 << 20;

/// A whole file's incoming bytes, noting how many arrived and whether
/// reading them failed (the source was cut off; a failed write is not).
struct Watched<'a, 'c> {
    inner: &'a mut dyn Read,
    arrived: &'c std::cell::Cell<(u64, bool)>,
}

impl Read for Watched<'_, '_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (n, _) = self.arrived.get();
        match self.inner.read(buf) {
            Ok(k) => {
                self.arrived.set((n + k as u64, false));
                Ok(k)
            }
            Err(e) => {
                self.arrived
                    .set((n, e.kind() != io::ErrorKind::Interrupted));
                Err(e)
            }
        }
    }
}

fn delta_err(action: Action) -> impl Fn(accord_delta::DeltaError) -> Error {
    move |source| Error::Delta { action, source }
}

impl ReplicaDir for LocalDir<'_> {
    fn stat(&self, name: &[u8]) -> io::Result<Option<Found>> {
        if let Some(target) = self.through(name)? {
            return Ok(Some(target.stat.found()));
        }
        stat_now(&self.dir, name)
    }

    fn open_read(&self, name: &[u8], expect: &Expect) -> Result<Box<dyn Read + Send + '_>, Error> {
        Ok(Box::new(self.open_checked(name, expect, Side::Source)?))
    }

    fn signature(&self, name: &[u8], expect: &Expect, in_place: bool) -> Result<Vec<u8>, Error> {
        let f = self.open_checked(name, expect, Side::Destination)?;
        signature_of(&f, !in_place)
    }

    fn partial_signature(&self, name: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        if self.beyond_link || self.follows(name) {
            return Ok(None);
        }
        let Some(partial) = accord_model::partial_name(name) else {
            return Ok(None);
        };
        match self.dir.open_read(&partial) {
            // A delta against it is applied to a temp and checked whole.
            Ok(f) => signature_of(&f, true).map(Some),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(Error::io(Action::OpenDestination)(e)),
        }
    }

    fn receive(
        &self,
        name: &[u8],
        incoming: Incoming<'_>,
        props: &Props,
        mask: PropsMask,
    ) -> Result<Vec<u8>, Error> {
        if let Some((target, name)) = self.beyond(name).map_err(Error::io(Action::WriteTemp))? {
            return self.receive_through(target, &name, incoming, props, mask);
        }
        match incoming {
            // Zero blocks become holes: a sparse file that comes as a
            // stream (from a replica across a wire) stays sparse.
            Incoming::Whole(data) => self.receive_whole(name, data, props, mask),
            Incoming::Resume { delta } => self.receive_resumed(name, delta, props, mask),
            Incoming::Delta { basis, delta } => {
                let delta = Delta::parse(delta).map_err(delta_err(Action::WriteTemp))?;
                if let Expect::Entry(old) = basis {
                    if old.size != delta.old_len {
                        return Err(Error::Delta {
                            action: Action::WriteTemp,
                            source: accord_delta::DeltaError::WrongBasis {
                                expected: delta.old_len,
                                actual: old.size,
                            },
                        });
                    }
                }
                let old = self.open_checked(name, &basis, Side::Destination)?;
                let m = map(&old, delta.old_len).map_err(Error::io(Action::OpenDestination))?;
                self.temp_with(name, props, mask, |tf| {
                    let mut w = io::BufWriter::with_capacity(1 << 20, tf);
                    accord_delta::patch_to(m.as_deref().unwrap_or(&[]), &delta, &mut w)
                        .map_err(delta_err(Action::WriteTemp))?;
                    w.flush().map_err(Error::io(Action::WriteTemp))?;
                    if m.as_ref().is_some_and(Mapped::damaged) {
                        return Err(Error::Changed(Side::Destination));
                    }
                    Ok(())
                })
            }
        }
    }

    fn patch_in_place(
        &self,
        name: &[u8],
        expect: &Expect,
        delta: &[u8],
        props: &Props,
        mask: PropsMask,
    ) -> Result<(), Error> {
        if let Some((target, name)) = self
            .beyond(name)
            .map_err(Error::io(Action::UpdateInPlace))?
        {
            return target.patch_in_place(&name, expect, delta, props, mask);
        }
        let delta = Delta::parse(delta).map_err(delta_err(Action::UpdateInPlace))?;
        let mut target = self
            .dir
            .open_rw(name)
            .map_err(Error::io(Action::UpdateInPlace))?;
        check_open(&target, expect, Side::Destination)?;
        let fsync = self.replica.opts.fsync;
        let opts = PatchOptions {
            max_scratch: self.replica.opts.max_scratch,
            sync: false,
        };
        // What `patch_in_place` refuses before it writes is refused here,
        // before the guard: a delta that never touched the file must not
        // move it to a recovery name.
        refuse_in_place(&target, &delta, &opts)?;
        guarded_in_place(&self.dir, name, fsync, || {
            accord_delta::patch_in_place(&mut target, &delta, &opts).map_err(|e| Error::Delta {
                action: Action::UpdateInPlace,
                source: e.error,
            })?;
            accord_fsys::set_props_fd(target.as_fd(), props, mask)
                .map_err(Error::io(Action::SetProps))?;
            if fsync {
                accord_fsys::fsync(&target).map_err(Error::io(Action::Flush))?;
            }
            Ok(())
        })
    }

    fn make_node(&self, name: &[u8], entry: &Entry, mask: PropsMask) -> Result<Vec<u8>, Error> {
        let temp = match entry.kind {
            Kind::Symlink => self
                .dir
                .symlink_temp(entry.link_target.as_deref().unwrap_or_default(), name),
            kind => self.dir.mknod_temp(kind, entry.rdev, name),
        }
        .map_err(Error::io(Action::MakeNode))?;
        if let Err(e) = self.dir.set_props_at(&temp, entry.kind, &entry.props, mask) {
            let _ = self.dir.unlink(&temp);
            return Err(Error::io(Action::SetProps)(e));
        }
        Ok(temp)
    }

    fn link_temp(&self, name: &[u8], leader: &RelPath) -> Result<Vec<u8>, Error> {
        let ldir = self
            .replica
            .open_dir_following(&leader.parent().unwrap_or_default())
            .map_err(Error::io(Action::MakeLink))?;
        let lst = ldir
            .stat(leader.file_name())
            .map_err(Error::io(Action::MakeLink))?;
        if lst.kind != Kind::File {
            return Err(Error::LeaderNotFile(leader.clone()));
        }
        self.dir
            .link_temp(&ldir, leader.file_name(), name)
            .map_err(Error::io(Action::MakeLink))
    }

    fn commit(&self, temp: &[u8], name: &[u8], expect: &Expect) -> Result<(), Error> {
        if let Some(dir) = self.replica.follow.take_temp(temp) {
            return self.commit_through(dir, temp, name, expect);
        }
        recheck(self, name, expect, Side::Destination)?;
        self.dir
            .rename(temp, name)
            .map_err(Error::io(Action::Replace))
    }

    fn discard(&self, temp: &[u8]) {
        if let Some(dir) = self.replica.follow.take_temp(temp) {
            let _ = dir.unlink(temp);
            return;
        }
        let _ = self.dir.unlink(temp);
    }

    fn set_props(
        &self,
        name: &[u8],
        expect: &Expect,
        kind: Kind,
        props: &Props,
        mask: PropsMask,
    ) -> Result<(), Error> {
        recheck(self, name, expect, Side::Destination)?;
        if let Some(target) = self.through(name).map_err(Error::io(Action::SetProps))? {
            return target
                .set_props(props, mask)
                .map_err(Error::io(Action::SetProps));
        }
        self.dir
            .set_props_at(name, kind, props, mask)
            .map_err(Error::io(Action::SetProps))
    }

    fn set_own_props(&self, expect: &Expect, props: &Props, mask: PropsMask) -> Result<(), Error> {
        let st = self.dir.stat_self().map_err(Error::io(Action::SetProps))?;
        if !expect.still_holds(Some(&st.found())) {
            return Err(Error::Changed(Side::Destination));
        }
        accord_fsys::set_props_fd(self.dir.as_fd(), props, mask)
            .map_err(Error::io(Action::SetProps))
    }

    fn mkdir(&self, name: &[u8]) -> Result<(), Error> {
        match self.dir.mkdir(name, 0o700) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                match ReplicaDir::stat(self, name) {
                    Ok(Some(st)) if st.kind == Kind::Dir => Ok(()),
                    _ => Err(Error::io(Action::MakeDir)(e)),
                }
            }
            r => r.map_err(Error::io(Action::MakeDir)),
        }
    }

    fn delete(&self, name: &[u8], expect: &Expect) -> Result<Deleted, Error> {
        if let Some(target) = self.through(name).map_err(Error::io(Action::Delete))? {
            return self.delete_link(name, &target, expect);
        }
        let now = match stat_now(&self.dir, name).map_err(Error::io(Action::Delete))? {
            None => return Ok(Deleted::Gone),
            Some(f) => f,
        };
        if !expect.still_holds(Some(&now)) {
            return Err(Error::Changed(Side::Destination));
        }
        let r = if now.kind == Kind::Dir {
            self.dir.rmdir(name)
        } else {
            self.dir.unlink(name)
        };
        match r {
            Ok(()) => Ok(Deleted::Done),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTEMPTY) | Some(libc::EEXIST)) => {
                Ok(Deleted::NotEmpty)
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Deleted::Gone),
            Err(e) => Err(Error::io(Action::Delete)(e)),
        }
    }

    fn rename_from(&self, name: &[u8], from: &RelPath, expect: &Expect) -> Result<(), Error> {
        let (parent, from_name) = (from.parent().unwrap_or_default(), from.file_name());
        let source = self
            .replica
            .open_dir_following(&parent)
            .map_err(Error::io(Action::Rename))?;
        let now = stat_now(&source, from_name).map_err(Error::io(Action::Rename))?;
        if !expect.still_holds(now.as_ref()) {
            return Err(Error::Changed(Side::Source));
        }
        match source.rename_into_noreplace(from_name, &self.dir, name) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                Err(Error::Changed(Side::Destination))
            }
            r => r.map_err(Error::io(Action::Rename)),
        }
    }

    fn remove_stale_temp(&self, name: &[u8]) {
        if name.starts_with(accord_fsys::TEMP_PREFIX)
            || name.starts_with(accord_fsys::PARTIAL_PREFIX)
        {
            let _ = self.dir.unlink(name);
        }
    }

    fn local(&self) -> Option<&Dir> {
        Some(&self.dir)
    }
}
