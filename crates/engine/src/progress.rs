//! Live counters that a job updates and a progress display reads from
//! another thread (a mirror's and a sync's alike).

use std::sync::atomic::{AtomicBool, AtomicU64};

/// Live counters for a progress display (read from another thread). They
/// count regular files whose contents are written, as a mirror's `Report` and a
/// sync's `SyncReport` do.
#[derive(Debug, Default)]
pub struct Progress {
    pub planned: AtomicBool,
    pub files_total: AtomicU64,
    pub bytes_total: AtomicU64,
    pub files_done: AtomicU64,
    pub bytes_done: AtomicU64,
}
