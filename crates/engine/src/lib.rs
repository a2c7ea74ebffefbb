//! The orchestrator: `mirror()` runs scan → plan → transfer → commit over two
//! replicas. It never parses arguments or prints; it returns a [`Report`].
//! `sync()` is the same pipeline with a second planner, two-way
//! (`sync.rs`, `sync_scan.rs`, `sync_exec.rs`); it returns a [`SyncReport`].
//!
//! Everything it does to a replica goes through the [`Replica`] trait
//! (`replica.rs`); when both replicas are on this host it takes the local
//! fast paths (`transfer_local.rs`, the paired scan). The steps of a run are
//! in `run.rs`, the execution of a plan in `exec.rs` and `transfer.rs`.

mod dry_run;
mod error;
mod exec;
mod run;
mod sync;
mod sync_case;
mod sync_case_replica;
mod sync_case_scan;
mod sync_exec;
mod sync_ignore;
mod sync_keep;
mod sync_merge;
mod sync_scan;
mod sync_transfer;
pub mod task;
mod task_big;
mod task_defer;
mod task_do;
mod task_group;
pub mod task_guard;
mod task_held;
mod task_ignore;
mod task_link;
mod task_local;
mod task_memo;
pub mod task_run;
mod task_scan;
pub mod task_spec;
mod transfer;
mod transfer_local;
mod walk;

pub use accord_fsys::{Reflink, XattrFilter};
pub use accord_plan::{
    winner as sync_winner, Action as SyncAction, Choice as SyncChoice, ConflictReason, EditRefused,
    PlanEdit, Preference, Side as SyncSide, SyncItem, SyncRefusal,
};
pub use accord_plan::{
    Change, DeltaMode, Facts, Item as PlanItem, Kinds, MaxDelete, Method, MirrorOptions,
    MirrorPlan, Op, Refusal, TransferOptions,
};
pub use accord_replica::{
    local_identity, Action, ArchiveRecord, Deleted, Error, Incoming, LocalOptions, LocalReplica,
    LocalSide, Pending, PendingTemp, Replica, ReplicaDir, Side, SideChange, SideFailure,
    SideOptions, SideScan, SideSession, SyncRules,
};
pub use dry_run::DryRun;
pub use error::{Failure, Fatal};
pub use run::{mirror, mirror_replicas, open_local_root};
pub use sync::{
    sync, sync_local, sync_with_local, EditPlanMerging, Propagated, SyncConfig, SyncError,
    SyncFailure, SyncFatal, SyncHooks, SyncReport,
};
pub use sync_exec::MergeNow;
pub use sync_merge::{MergeFailure, MergeProgram};
pub use task_local::run_workers;
pub use task_run::{
    lock_destination, read_spec, run_over, start_run, WorkerEnd, WorkerFigures, WorkerOptions,
};
pub use task_spec::RunSpec;

use accord_model::RelPath;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};

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
        }
    }
}

/// Live counters for a progress display (read from another thread). They
/// count regular files whose contents are written, as `Report` does.
#[derive(Debug, Default)]
pub struct Progress {
    pub planned: AtomicBool,
    pub files_total: AtomicU64,
    pub bytes_total: AtomicU64,
    pub files_done: AtomicU64,
    pub bytes_done: AtomicU64,
}

/// What a run did. Every count is of the same things in the plan's summary,
/// the progress display and these totals (see the README).
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
