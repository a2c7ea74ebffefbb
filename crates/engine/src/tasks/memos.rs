//! The extended-attribute memos of a task run in one process: the same
//! memos the walk keeps (`mirror/run.rs`: entries and directories' groups of
//! files known to have no extended attributes while their inode and
//! ctime are unchanged), read once when the run starts, shared by its
//! worker threads, and written with what the run's listings found when
//! it ends. A no-change run then reads no attribute list of a file
//! unchanged since the last run, as the walk does (`rsync -a` reads none).
//!
//! Only the local executor keeps them: workers of a cluster run would
//! each see part of the tree, and the next run's memo would be the last
//! worker's part.

use accord_fsys::DigestMemo;
use accord_replica::LocalReplica;
use accord_replica::Replica;
use std::sync::Mutex;

/// The memos of both roots, and the keys this run's listings found.
pub struct TaskMemos {
    src: DigestMemo,
    dst: DigestMemo,
    /// Keys found on (the source, the destination).
    found: [Mutex<Vec<u64>>; 2],
    /// The walk's listing memo of the destination (only where directory
    /// ctimes are kept by the local kernel), and the listings found.
    pub(crate) listing: Option<DigestMemo>,
    listings: Mutex<Vec<u64>>,
}

impl TaskMemos {
    /// Read both roots' memos (a memo missing or damaged is empty).
    pub fn load(src: &LocalReplica, dst: &LocalReplica) -> TaskMemos {
        let read = |r: &LocalReplica| {
            r.read_state(crate::mirror::run::XATTR_MEMO)
                .and_then(|b| DigestMemo::decode(&b))
                .unwrap_or_default()
        };
        let listing = dst.is_local_disk().then(|| {
            dst.read_state(crate::mirror::run::LISTING_MEMO)
                .and_then(|b| DigestMemo::decode(&b))
                .unwrap_or_default()
        });
        TaskMemos {
            src: read(src),
            dst: read(dst),
            found: Default::default(),
            listing,
            listings: Mutex::default(),
        }
    }

    /// Keep the listing digests one destination listing found
    /// (`Scan::listings`).
    pub fn keep_listings(&self, keys: &mut Vec<u64>) {
        if self.listing.is_some() && !keys.is_empty() {
            self.listings.lock().unwrap().append(keys);
        }
    }

    /// The memo of the source's side or the destination's.
    pub fn memo(&self, source: bool) -> &DigestMemo {
        match source {
            true => &self.src,
            false => &self.dst,
        }
    }

    /// Keep the keys one listing found (`Scan::xattr_free`).
    pub fn keep(&self, source: bool, keys: &mut Vec<u64>) {
        if !keys.is_empty() {
            self.found[usize::from(!source)]
                .lock()
                .unwrap()
                .append(keys);
        }
    }

    /// Write what the run found as the roots' memos. Only an accelerator:
    /// a memo that cannot be written costs speed next time.
    pub fn save(self, src: &LocalReplica, dst: &LocalReplica) {
        let [s, d] = self.found.map(|m| m.into_inner().unwrap());
        for (r, keys) in [(src, s), (dst, d)] {
            let memo = DigestMemo::from_keys(keys).encode();
            let _ = r.write_state(crate::mirror::run::XATTR_MEMO, &memo, false);
        }
        if self.listing.is_some() {
            let keys = self.listings.into_inner().unwrap();
            let memo = DigestMemo::from_keys(keys).encode();
            let _ = dst.write_state(crate::mirror::run::LISTING_MEMO, &memo, false);
        }
    }
}
