//! The `Replica` seam: what the orchestrator asks of a replica. `LocalReplica`
//! implements it over `fsys`; a remote replica will implement the same calls
//! over the protocol.

use accord_fsys::{IgnoreRules, Root, Scan, ScanOptions};
use accord_model::{Fingerprint, RelPath};
use std::io;
use std::path::Path;

/// A replica as the engine sees it.
pub trait Replica: Sync {
    /// Walk the whole replica (in parallel), applying `rules`.
    fn scan(&self, rules: &IgnoreRules, opts: &ScanOptions) -> Scan;
    /// BLAKE3 of a regular file's contents.
    fn fingerprint(&self, path: &RelPath) -> io::Result<Fingerprint>;
    /// Identity of the root (device, inode), for the deletion guard.
    fn identity(&self) -> (u64, u64);
    /// Make everything written so far durable.
    fn sync_all(&self) -> io::Result<()>;
    /// A name for messages.
    fn describe(&self) -> String;
}

/// A replica on a local file system, confined under its root handle.
pub struct LocalReplica {
    root: Root,
}

impl LocalReplica {
    /// Open an existing directory.
    pub fn open(path: &Path) -> io::Result<LocalReplica> {
        Ok(LocalReplica {
            root: Root::open(path)?,
        })
    }

    /// Open a directory, creating it first if missing.
    pub fn create(path: &Path) -> io::Result<LocalReplica> {
        Ok(LocalReplica {
            root: Root::create(path)?,
        })
    }

    /// The root handle (local fast paths: copy_file_range, reflink, links).
    pub fn root(&self) -> &Root {
        &self.root
    }

    /// Scan this replica and `dst` together (see `accord_fsys::scan_pair`):
    /// both local, a destination directory that still holds exactly the
    /// source's names need not be listed.
    pub fn scan_pair(
        &self,
        dst: &LocalReplica,
        (s_rules, s_opts): (&IgnoreRules, &ScanOptions),
        (d_rules, d_opts): (&IgnoreRules, &ScanOptions),
    ) -> (Scan, Scan) {
        accord_fsys::scan_pair((&self.root, s_rules, s_opts), (&dst.root, d_rules, d_opts))
    }
}

impl Replica for LocalReplica {
    fn scan(&self, rules: &IgnoreRules, opts: &ScanOptions) -> Scan {
        accord_fsys::scan(&self.root, rules, opts)
    }

    fn fingerprint(&self, path: &RelPath) -> io::Result<Fingerprint> {
        let f = self.root.open_file(path)?;
        accord_fsys::hash_file(&f)
    }

    fn identity(&self) -> (u64, u64) {
        self.root.identity()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.root.syncfs()
    }

    fn describe(&self) -> String {
        self.root.path().display().to_string()
    }
}
