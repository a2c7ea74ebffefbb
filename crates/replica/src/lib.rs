//! The seam every job works through, and what runs on a replica's own host.
//!
//! - [`Replica`] and [`ReplicaDir`] (`seam.rs`): every call a job makes on
//!   a replica, a directory at a time; the pending handles of calls still on
//!   their way (`pending.rs`); the side-neutral [`Error`] (`error.rs`: it
//!   names the [`End`] of a copy, read from or written to; a job shows it
//!   in its own [`EndWords`]).
//! - A replica host's half of a two-way sync (`side/`): [`SideSession`],
//!   the ctime rules of what an archive may record, the side's ignore
//!   matcher (`side/rules.rs`) and `--follow`'s record rules
//!   (`side/follow.rs`); whether a root ignores case (`case_probe.rs`,
//!   run by a sync for a local root and by a server for its own); a file
//!   copied from another root on a replica's own host (`sibling.rs`).
//! - [`LocalReplica`] (`local/`): a directory of this host over `fsys`,
//!   its `--follow` view (`local/follow.rs`) and its side of a sync,
//!   [`LocalSide`] (`local/side.rs`).
//!
//! This crate imports no job: mirror, sync and task runs live in
//! `accord-engine` above it; the daemon and the ssh transport
//! (`accord-remote`) serve and implement the seam with this crate alone.

pub mod case_probe;
mod error;
mod local;
mod pending;
mod seam;
mod sibling;
pub mod side;

pub use error::{Action, End, EndWords, Error, InWords};
pub use local::side::LocalSide;
pub use local::{LocalOptions, LocalReplica};
pub use pending::{Deleted, Incoming, Pending, PendingTemp};
pub use seam::{delta_from_stream, recheck, DeltaWire, Replica, ReplicaDir, STREAM_DELTA_MAX};
pub use sibling::{identity_host_and_path, Fingerprinting, SiblingFile, SiblingRoot};
pub use side::rules::{SyncRules, BACKUP_DIR};
pub use side::{
    local_identity, ArchiveRecord, SideCause, SideChange, SideFailure, SideOptions, SideScan,
    SideSession,
};

/// The local fast paths' file checks, for a job that copies between two
/// local roots itself.
pub mod local_io {
    pub use crate::local::{check_open, guarded_in_place, map};
}
