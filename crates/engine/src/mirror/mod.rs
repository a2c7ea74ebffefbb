//! The one-way mirror: make a destination equal a source. [`run::mirror`]
//! walks both trees a directory pair at a time (`walk.rs`), plans each pair
//! with `accord_plan`'s mirror planner and carries the plan out
//! (`exec.rs`, `transfer.rs`; `transfer_local.rs` when both roots are on
//! this host); `dry_run.rs` is the destination of `-n`.

pub(crate) mod backup;
pub(crate) mod dry_run;
pub(crate) mod error;
pub(crate) mod exec;
pub(crate) mod run;
pub(crate) mod stream;
pub(crate) mod transfer;
pub(crate) mod transfer_local;
pub(crate) mod walk;

use crate::{Change, MirrorOptions, MirrorPlan, Reflink, Refusal, XattrFilter};
use accord_model::RelPath;
use error::{Failure, Fatal};
use std::path::PathBuf;

/// Everything a mirror run is told.
#[derive(Clone, Debug)]
pub struct MirrorConfig {
    pub plan: MirrorOptions,
    pub xattrs: XattrFilter,
    /// `--exclude` patterns and `--exclude-from` lines (gitignore syntax).
    pub excludes: Vec<String>,
    /// Read `.accordignore` files in the source.
    pub ignore_files: bool,
    pub reflink: Reflink,
    pub fsync: bool,
    pub dry_run: bool,
    /// Worker threads (0: twice the cores, at least 4).
    pub jobs: usize,
    /// Where the replicas keep their state: the deletion guard's memory of
    /// the source root and the memos (None: nowhere).
    pub state_dir: Option<PathBuf>,
    /// `--link-dest`: a new file equal to the file at its path in this
    /// directory (an earlier snapshot) is made a hard link to it rather
    /// than a copy. Two local roots only.
    pub link_dest: Option<PathBuf>,
    /// `-b`/`--backup`: keep what the run overwrites or deletes.
    pub backup: Option<Backup>,
    /// rsync's `-x` given this many times (0: cross mount points; 1: a
    /// mount point is copied as an empty directory; 2: left out). No
    /// deletion crosses a mount point in the destination.
    pub one_file_system: u8,
    /// `--bwlimit` in bytes per second (0: none): of the file data written
    /// with two local roots (a remote root's connection is limited by the
    /// cli).
    pub bwlimit: u64,
    /// Keep each change's path for the report (`Report::changes`, for
    /// `--itemize`); off, only the counts are kept, so a copy of a large
    /// tree does not hold a path per entry.
    pub list_changes: bool,
    /// A progress display is shown: an initial copy made as it is walked
    /// counts the source first, for the display's totals.
    pub count_first: bool,
}

/// `-b`: where the old versions go, and the suffix added to their names.
#[derive(Clone, Debug)]
pub struct Backup {
    pub place: BackupPlace,
    /// `--suffix` (rsync's `~` beside the file, nothing in a backup dir).
    pub suffix: Vec<u8>,
}

/// Where `-b` keeps an old version of `PATH`.
#[derive(Clone, Debug)]
pub enum BackupPlace {
    /// Beside it in the destination, as `PATH` + suffix.
    Beside,
    /// `--backup-dir` inside the destination (this path of it): kept at
    /// `DIR/PATH` + suffix. The directory is left out of the mirror (by
    /// an exclude line: its path must be UTF-8 text, the caller checks).
    Inside(RelPath),
    /// `--backup-dir` outside the destination, on this host (made if
    /// missing): kept at `DIR/PATH` + suffix.
    Outside(PathBuf),
}

impl MirrorConfig {
    /// `-x` for one side whose root is on device `dev`.
    pub fn same_fs(&self, dev: u64) -> Option<accord_fsys::SameFs> {
        (self.one_file_system > 0).then_some(accord_fsys::SameFs {
            dev,
            mount_dirs: self.one_file_system == 1,
        })
    }
}

impl Default for MirrorConfig {
    fn default() -> Self {
        MirrorConfig {
            plan: MirrorOptions::default(),
            xattrs: XattrFilter {
                xattrs: true,
                acls: true,
                user_only: false,
            },
            excludes: Vec::new(),
            ignore_files: true,
            reflink: Reflink::Auto,
            fsync: true,
            dry_run: false,
            jobs: 0,
            state_dir: None,
            link_dest: None,
            backup: None,
            one_file_system: 0,
            bwlimit: 0,
            list_changes: true,
            count_first: false,
        }
    }
}

/// What a run did. Every count is of the same things in the plan's summary,
/// the progress display and these totals (see docs/mirror.md).
#[derive(Debug, Default)]
pub struct Report {
    /// The plan (always set once planning succeeded).
    pub plan: Option<MirrorPlan>,
    /// The deletion guard stopped the run before any change.
    pub refusal: Option<Refusal>,
    /// The run stopped (disk full, root unusable, ...).
    pub fatal: Option<Fatal>,
    /// Paths that failed; the run went on without them.
    pub errors: Vec<Failure>,
    /// Changes made, in path order, for `--itemize`.
    pub changes: Vec<(Change, RelPath)>,
    /// Regular files in the source, and their bytes.
    pub files_total: u64,
    pub bytes_total: u64,
    /// Regular files whose contents were written (whole, delta or in place).
    pub files_transferred: u64,
    /// Symlinks, fifos, sockets and device nodes made.
    pub others_created: u64,
    /// Hard links made.
    pub links_created: u64,
    /// Directories made.
    pub dirs_created: u64,
    /// Entries whose properties alone were changed.
    pub metadata_updated: u64,
    /// Entries deleted from the destination (directories included).
    pub files_deleted: u64,
    pub bytes_written: u64,
    pub literal_bytes: u64,
    pub matched_bytes: u64,
    /// Deletions were suspended because a source directory could not be read.
    pub deletions_suspended: bool,
    pub elapsed_s: f64,
    /// Seconds spent scanning both sides, planning, and carrying out the plan.
    pub scan_s: f64,
    pub plan_s: f64,
    pub execute_s: f64,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.fatal.is_none() && self.refusal.is_none() && self.errors.is_empty()
    }
}
