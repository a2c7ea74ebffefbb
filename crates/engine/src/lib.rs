//! The jobs over two replicas, each in a module of its own:
//!
//! - `mirror/`: the one-way mirror ([`mirror`], [`MirrorConfig`],
//!   [`Report`]): scan, plan, transfer and commit a directory pair at a time.
//! - `sync/`: the two-way sync ([`sync`], [`SyncConfig`], [`SyncReport`]):
//!   each side's detection against its archive (the replica crate's
//!   `SideSession`), reconciliation, propagation.
//! - `set/`: a sync of more than two replicas ([`sync_set`], [`SetReport`]):
//!   each replica's detection against its archive of the set, with version
//!   vectors; reconciliation of the set; propagation through `sync/`'s.
//! - `tasks/`: the task model of a parallel or distributed mirror and its
//!   executors (worker threads in this process, `accord worker` over Redis).
//!
//! Everything a job does to a replica goes through `accord_replica`'s
//! `Replica` seam. `mirror/` and `sync/` never import each other, nothing
//! in the engine imports `tasks/`, and only the cli imports this crate
//! (`tests/layout.rs` checks the first two). The engine never parses
//! arguments or prints: it returns reports.

mod mirror;
mod progress;
mod set;
mod sync;
pub mod tasks;

pub use accord_fsys::{Reflink, XattrFilter};
pub use accord_plan::{ConflictReason, EditRefused, PlanEdit, Preference, SyncItem, SyncRefusal};

/// A sync plan's words, under the names the plan crate gives them: its
/// sides A and B, what each item does, a person's choice at a conflict.
pub mod sync_plan {
    pub use accord_plan::{winner, Action, Choice, Side};
}
pub use accord_plan::{utc_stamp, Receive, SetConflict, SetPreference};
/// A set's plan, as its interactive mode sees and edits it.
pub mod set_plan {
    pub use accord_plan::{
        Offer, Outcome, PathOffers, SetChoice, SetEditRefused, SetItem, SetPlanEdit, SetPolicy,
        Settled, Update, Version,
    };
}
pub use accord_plan::{
    Change, DeltaMode, Facts, Item as PlanItem, Kinds, MaxDelete, Method, MirrorOptions,
    MirrorPlan, Op, Refusal, Selection, Summary as PlanSummary, TransferOptions,
};
pub use accord_replica::{
    local_identity, Action, ArchiveRecord, Deleted, End, Error, Incoming, LocalOptions,
    LocalReplica, LocalSide, Pending, PendingTemp, Replica, ReplicaDir, SideCause, SideChange,
    SideFailure, SideOptions, SideScan, SideSession, SyncRules,
};
pub use mirror::dry_run::DryRun;
pub use mirror::error::{Failure, Fatal, MIRROR_WORDS};
pub use mirror::run::{mirror, mirror_replicas, open_local_root};
pub use mirror::{Backup, BackupPlace, MirrorConfig, Report};
pub use progress::Progress;
pub use set::{
    sync_set, sync_set_edited, EditSetPlan, SetChange, SetConflictReport, SetFailure, SetMergeNow,
    SetPolicies, SetReport, SetRoot, Unreached, Via,
};
pub use sync::merge_program::{MergeFailure, MergeProgram};
pub use sync::propagate::MergeNow;
pub use sync::{
    sync, sync_local, sync_with_local, EditPlanMerging, Propagated, SyncConfig, SyncError,
    SyncFailure, SyncFatal, SyncHooks, SyncReport,
};
pub use tasks::error::RunFailure;
pub use tasks::local_executor::run_workers;
pub use tasks::run::{
    lock_destination, read_spec, run_over, start_run, WorkerEnd, WorkerFigures, WorkerOptions,
};
pub use tasks::spec::RunSpec;
