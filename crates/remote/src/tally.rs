//! What one server session did, counted as its requests succeed, for the
//! daemon's line about the session when it ends.

use accord_proto::Request;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Counts of one session's requests that succeeded.
#[derive(Debug, Default)]
pub struct Tally {
    /// Files, links and nodes put in place (committed or patched in place).
    pub written: AtomicU64,
    /// Files whose contents were sent to the client (whole or as a delta).
    pub sent: AtomicU64,
    /// Entries deleted.
    pub deleted: AtomicU64,
    /// An owner asked for was not set (the server does not run as root).
    pub owners_not_kept: AtomicBool,
}

impl Tally {
    /// Count `req`, which succeeded.
    pub fn count(&self, req: &Request) {
        let counter = match req {
            Request::Commit { .. } | Request::PatchInPlace { .. } => &self.written,
            Request::OpenRead { .. } | Request::MakeDelta { .. } => &self.sent,
            Request::Delete { .. } => &self.deleted,
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// "3 files written, 1 deleted" (the counts that are not zero).
    pub fn words(&self) -> String {
        let parts: Vec<String> = [
            (&self.written, "written"),
            (&self.sent, "sent"),
            (&self.deleted, "deleted"),
        ]
        .into_iter()
        .filter_map(|(n, what)| {
            let n = n.load(Ordering::Relaxed);
            let files = match (what, n) {
                ("deleted", _) => "",
                (_, 1) => " file",
                _ => " files",
            };
            (n > 0).then(|| format!("{n}{files} {what}"))
        })
        .collect();
        let mut words = if parts.is_empty() {
            "no files written or sent".to_string()
        } else {
            parts.join(", ")
        };
        if self.owners_not_kept.load(Ordering::Relaxed) {
            words.push_str(", owners not kept (not running as root)");
        }
        words
    }
}
