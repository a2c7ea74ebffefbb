//! `sync()`: a two-way sync of two replicas with the Unison paper's
//! semantics, over the same `Replica` seam as the mirror. The steps, each a
//! function returning a value or a typed reason to stop: lock both
//! replicas and open both sides' archives (`open_archives`), walk both
//! trees against them and detect each side's updates (`sync_scan.rs`),
//! reconcile (`accord_plan::reconcile_tree`), check the deletion guard,
//! then propagate, recording each path in both archives only after it
//! succeeded on both sides (`sync_exec.rs`).
//!
//! Local roots only, for now: both archives live in this host's state
//! directory.

use crate::error::Fatal;
use crate::local::LocalReplica;
use crate::replica::Replica;
use crate::sync_exec::propagate;
use crate::sync_scan::{scan_pair, ScanStop, Scanned};
use accord_archive::{Archive, ArchiveError};
use accord_model::{RelPath, Time};
use accord_plan::{
    check_deletions, reconcile_tree, ConflictReason, DetectOptions, MaxDelete, Preference,
    ReconcileOptions, Side, SyncItem, SyncRefusal, SyncedProps,
};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Everything a sync run is told (user choices only).
#[derive(Clone, Debug)]
pub struct SyncConfig {
    /// `--checksum`: fingerprint every file instead of trusting metadata.
    pub checksum: bool,
    /// `--times`: keep regular files' mtimes in agreement.
    pub times: bool,
    /// `--prefer`: how conflicts are resolved (None: left alone).
    pub prefer: Option<Preference>,
    /// `--force`: this side wins everywhere this run.
    pub force: Option<Side>,
    pub max_delete: MaxDelete,
    /// Flush new contents to disk before they are renamed into place.
    pub fsync: bool,
    /// Where this host keeps the archives.
    pub state_dir: PathBuf,
}

impl SyncConfig {
    pub fn new(state_dir: PathBuf) -> SyncConfig {
        SyncConfig {
            checksum: false,
            times: false,
            prefer: None,
            force: None,
            max_delete: MaxDelete::Fraction(0.5),
            fsync: true,
            state_dir,
        }
    }

    /// The properties kept in agreement: permissions (never setuid or
    /// setgid), and mtimes under `--times`. Owner, extended attributes and
    /// ACLs are not synced yet.
    pub(crate) fn synced_props(&self) -> SyncedProps {
        SyncedProps {
            perms: true,
            owner: false,
            xattrs: false,
            times: self.times,
        }
    }

    pub(crate) fn detect_options(&self) -> DetectOptions {
        DetectOptions {
            checksum: self.checksum,
            props: self.synced_props(),
        }
    }

    fn reconcile_options(&self) -> ReconcileOptions {
        ReconcileOptions {
            props: self.synced_props(),
            prefer: self.prefer,
            force: self.force,
        }
    }
}

/// Calls the caller may want between the steps of a run.
#[derive(Default)]
pub struct SyncHooks<'a> {
    /// Called once the plan is made and checked, before any change. Tests
    /// use it to change a file between detection and propagation.
    pub before_propagating: Option<&'a (dyn Fn() + Sync)>,
}

/// Why one path failed in a sync (the run went on without it).
#[derive(Debug)]
pub enum SyncError {
    /// A replica refused or failed (`Error::Changed`: the path changed
    /// during the sync and was left alone).
    Replica(crate::Error),
    /// The new contents did not have the fingerprint update detection saw
    /// (the file was written while it was copied); nothing was replaced.
    ContentsChanged,
    /// A directory to delete still holds entries.
    DirectoryNotEmpty,
    /// Propagated, but the archives could not record it: the next run
    /// sees it as changed on both sides with equal results and agrees.
    Archive(ArchiveError),
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncError::Replica(crate::Error::Changed(_)) => {
                f.write_str("changed during sync; left alone")
            }
            SyncError::Replica(e) => write!(f, "{e}"),
            SyncError::ContentsChanged => {
                f.write_str("changed during sync (its contents moved while copied); left alone")
            }
            SyncError::DirectoryNotEmpty => f.write_str("directory not empty; left alone"),
            SyncError::Archive(e) => write!(f, "recording the agreement failed: {e}"),
        }
    }
}

impl From<crate::Error> for SyncError {
    fn from(e: crate::Error) -> SyncError {
        SyncError::Replica(e)
    }
}

/// A path that failed.
#[derive(Debug)]
pub struct SyncFailure {
    pub path: RelPath,
    pub error: SyncError,
}

/// Why a sync stopped before any change, or in the middle.
#[derive(Debug)]
pub enum SyncFatal {
    /// A root could not be opened or locked (the mirror's reasons).
    Root(Fatal),
    /// Both names lead to one directory.
    SameRoot,
    /// Only local roots are synced yet.
    NotLocal(String),
    /// An archive could not be used (locked by another run, newer format,
    /// storage failure).
    Archive(ArchiveError),
    /// A directory of one replica could not be read: its entries would
    /// look deleted.
    Unreadable { replica: String, detail: String },
}

impl fmt::Display for SyncFatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncFatal::Root(fatal) => write!(f, "{fatal}"),
            SyncFatal::SameRoot => f.write_str("both roots are the same directory"),
            SyncFatal::NotLocal(root) => write!(
                f,
                "{root}: sync with a remote root is not built yet; nothing was changed"
            ),
            SyncFatal::Archive(ArchiveError::Locked { holder, .. }) => {
                f.write_str("another accord sync of these roots is running")?;
                if let Some(pid) = holder {
                    write!(f, " (pid {pid})")?;
                }
                f.write_str("; try again when it is done")
            }
            SyncFatal::Archive(e) => write!(f, "{e}"),
            SyncFatal::Unreadable { replica, detail } => {
                write!(f, "cannot read {replica}: {detail}; nothing was changed")
            }
        }
    }
}

/// One change made to a replica.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Propagated {
    pub path: RelPath,
    /// What was done (`Copy`, `Delete`, `CopyProps`, ...), with its sides.
    pub action: accord_plan::Action,
}

/// What a sync run did.
#[derive(Debug, Default)]
pub struct SyncReport {
    /// Changes made, in path order.
    pub propagated: Vec<Propagated>,
    /// Conflicts left alone, in path order.
    pub conflicts: Vec<(RelPath, ConflictReason)>,
    /// Paths that failed; the run went on without them.
    pub errors: Vec<SyncFailure>,
    /// Paths where both sides already agreed and only the archives learnt it.
    pub agreed: u64,
    /// The archives were new, lost or damaged: the run was reconciled as if
    /// both replicas had been empty at the last sync.
    pub archives_lost: bool,
    pub refusal: Option<SyncRefusal>,
    pub fatal: Option<SyncFatal>,
    pub elapsed_s: f64,
}

impl SyncReport {
    /// Everything agreed: no conflicts, no failures, nothing stopped.
    pub fn all_agreed(&self) -> bool {
        self.conflicts.is_empty()
            && self.errors.is_empty()
            && self.fatal.is_none()
            && self.refusal.is_none()
    }
}

/// A ctime recorded when the real one cannot vouch for the contents: it
/// matches no file's, so the next run fingerprints the file.
pub(crate) const UNKNOWN_CTIME: Time = Time { sec: 0, nsec: 0 };

/// The ctime a scan reports when it could not read the real one: it
/// matches no recorded ctime (not even [`UNKNOWN_CTIME`]), so metadata
/// never vouches for the file and it is fingerprinted.
pub(crate) const UNSEEN_CTIME: Time = Time { sec: 0, nsec: 1 };

/// A ctime younger than this (in seconds, against the scan's start) is not
/// recorded: a write in the same clock tick as our stat would leave it
/// unchanged (file system timestamps are coarse), so it cannot vouch.
const CTIME_SETTLE_S: i64 = 2;

/// The ctime to record for an entry observed during a scan that began at
/// `scan_start_s`.
pub(crate) fn ctime_to_record(ctime: Time, scan_start_s: i64) -> Time {
    // A ctime of the epoch is one of ours: unknown or unseen.
    if ctime.sec > 0 && ctime.sec < scan_start_s - CTIME_SETTLE_S {
        ctime
    } else {
        UNKNOWN_CTIME
    }
}

/// Sync two local directories.
pub fn sync_local(a: &Path, b: &Path, cfg: &SyncConfig, hooks: &SyncHooks) -> SyncReport {
    let start = Instant::now();
    // One root inside the other would copy itself into itself, one level
    // deeper on every run.
    let opened = match nested(a, b) {
        Some(why) => Err(SyncFatal::Root(Fatal::Nested(why))),
        None => open_local(a).and_then(|ra| Ok((ra, open_local(b)?))),
    };
    let mut report = match opened {
        Ok((ra, rb)) => sync(&ra, &rb, cfg, hooks),
        Err(fatal) => SyncReport {
            fatal: Some(fatal),
            ..SyncReport::default()
        },
    };
    report.elapsed_s = start.elapsed().as_secs_f64();
    report
}

/// Is one root inside the other, by canonical path? (Through a bind
/// mount it is not seen here.)
fn nested(a: &Path, b: &Path) -> Option<String> {
    let (a, b) = (accord_fsys::canonical(a), accord_fsys::canonical(b));
    let inside = |inner: &Path, outer: &Path| inner != outer && inner.starts_with(outer);
    (inside(&a, &b) || inside(&b, &a)).then(|| {
        format!(
            "{} and {} lie one inside the other; nothing was changed",
            a.display(),
            b.display()
        )
    })
}

/// A root must exist: a missing one is never "everything was deleted".
fn open_local(path: &Path) -> Result<LocalReplica, SyncFatal> {
    LocalReplica::open(path).map_err(|source| {
        SyncFatal::Root(Fatal::OpenSource {
            path: path.to_path_buf(),
            source,
        })
    })
}

/// Sync two replicas (local ones, for now).
pub fn sync(a: &dyn Replica, b: &dyn Replica, cfg: &SyncConfig, hooks: &SyncHooks) -> SyncReport {
    let start = Instant::now();
    let mut report = SyncReport::default();
    if let Err(fatal) = run(a, b, cfg, hooks, &mut report) {
        report.fatal = Some(fatal);
    }
    report.elapsed_s = start.elapsed().as_secs_f64();
    report
}

fn run(
    a: &dyn Replica,
    b: &dyn Replica,
    cfg: &SyncConfig,
    hooks: &SyncHooks,
    report: &mut SyncReport,
) -> Result<(), SyncFatal> {
    let identities = [root_identity(a)?, root_identity(b)?];
    if a.identity() == b.identity() {
        return Err(SyncFatal::SameRoot);
    }
    lock_both([a, b], &identities)?;
    let mut archives = open_archives(&cfg.state_dir, &identities)?;
    let mut scanned = scan_with_archives([a, b], &mut archives, cfg)?;
    report.archives_lost = scanned.archives_lost;
    let items = reconcile_tree(&scanned.updates, &cfg.reconcile_options())
        .expect("the walk lists paths in RelPath order");
    if let Err(refusal) =
        check_deletions(&items, scanned.counts[0], scanned.counts[1], cfg.max_delete)
    {
        report.refusal = Some(refusal);
        return Ok(());
    }
    report.conflicts = conflicts_of(&items);
    report.errors.append(&mut scanned.failures);
    if let Some(hook) = hooks.before_propagating {
        hook();
    }
    propagate([a, b], &mut archives, &scanned, &items, cfg, report);
    Ok(())
}

fn conflicts_of(items: &[SyncItem]) -> Vec<(RelPath, ConflictReason)> {
    items
        .iter()
        .filter_map(|item| item.conflict().map(|reason| (item.path.clone(), reason)))
        .collect()
}

/// The bytes that name a root in its archive's file name: its canonical
/// path on this host.
fn root_identity(replica: &dyn Replica) -> Result<Vec<u8>, SyncFatal> {
    match replica.local() {
        Some(local) => {
            let canonical = accord_fsys::canonical(local.root().path());
            let mut identity = b"local:".to_vec();
            identity.extend_from_slice(canonical.as_os_str().as_encoded_bytes());
            Ok(identity)
        }
        None => Err(SyncFatal::NotLocal(replica.describe())),
    }
}

/// Take both replicas' write locks in the order of their identities, so
/// that of two runs over overlapping roots one gets both.
fn lock_both(replicas: [&dyn Replica; 2], identities: &[Vec<u8>; 2]) -> Result<(), SyncFatal> {
    let order = if identities[0] <= identities[1] {
        [0, 1]
    } else {
        [1, 0]
    };
    for index in order {
        let replica = replicas[index];
        match replica.try_lock() {
            Ok(true) => {}
            Ok(false) => return Err(SyncFatal::Root(Fatal::Busy(replica.describe().into()))),
            Err(source) => {
                return Err(SyncFatal::Root(Fatal::Lock {
                    path: replica.describe().into(),
                    source,
                }))
            }
        }
    }
    Ok(())
}

/// Both sides' archives, open and locked (in the order of the identities).
pub(crate) struct Archives {
    pub sides: [Archive; 2],
    /// The archives no longer describe one agreement (one or both new,
    /// damaged or lost): every path is reconciled as if both replicas had
    /// been empty.
    pub lost: bool,
}

fn open_archives(state_dir: &Path, identities: &[Vec<u8>; 2]) -> Result<Archives, SyncFatal> {
    let [a_id, b_id] = identities;
    let (first, second) = if a_id <= b_id { (0, 1) } else { (1, 0) };
    let mut opened: [Option<Archive>; 2] = [None, None];
    let mut lost = false;
    for index in [first, second] {
        let (this, other) = (&identities[index], &identities[1 - index]);
        let archive = match Archive::open(state_dir, this, other) {
            Err(e) if e.is_damaged() => {
                lost = true;
                Archive::recreate(state_dir, this, other).map_err(SyncFatal::Archive)?
            }
            result => result.map_err(SyncFatal::Archive)?,
        };
        lost |= archive.was_created();
        opened[index] = Some(archive);
    }
    let [Some(a), Some(b)] = opened else {
        unreachable!("both archives were opened")
    };
    let mut archives = Archives {
        sides: [a, b],
        lost,
    };
    if archives.lost {
        forget_both(&mut archives)?;
    }
    Ok(archives)
}

/// Empty both archives: when one side's is new, the other's entries no
/// longer describe an agreement (a path deleted on the side that forgot
/// would look unchanged there and never reach the other side). Emptied,
/// the next run also sees "both were empty" should this one stop.
fn forget_both(archives: &mut Archives) -> Result<(), SyncFatal> {
    for archive in &mut archives.sides {
        let mut batch = archive.batch().map_err(SyncFatal::Archive)?;
        batch.remove(&RelPath::root()).map_err(SyncFatal::Archive)?;
        batch
            .remove_subtree(&RelPath::root())
            .map_err(SyncFatal::Archive)?;
        batch.commit().map_err(SyncFatal::Archive)?;
    }
    Ok(())
}

/// Walk both replicas against their archives. An archive found damaged
/// during the walk is treated as lost: both are emptied and the walk runs
/// again without them (an archive too damaged to be emptied stops the run;
/// opening it again moves it aside).
fn scan_with_archives(
    replicas: [&dyn Replica; 2],
    archives: &mut Archives,
    cfg: &SyncConfig,
) -> Result<Scanned, SyncFatal> {
    match scan_pair(replicas, archives, cfg) {
        Err(ScanStop::ArchiveDamaged(_)) => {}
        Err(ScanStop::Fatal(fatal)) => return Err(fatal),
        Ok(scanned) => return Ok(scanned),
    }
    archives.lost = true;
    forget_both(archives)?;
    match scan_pair(replicas, archives, cfg) {
        Ok(scanned) => Ok(scanned),
        Err(ScanStop::Fatal(fatal)) => Err(fatal),
        Err(ScanStop::ArchiveDamaged(e)) => Err(SyncFatal::Archive(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_settled_ctime_is_recorded() {
        let scan_start_s = 1_000_000;
        let old = Time {
            sec: scan_start_s - 3,
            nsec: 5,
        };
        assert_eq!(ctime_to_record(old, scan_start_s), old);
        assert_eq!(ctime_to_record(UNSEEN_CTIME, scan_start_s), UNKNOWN_CTIME);
        assert_ne!(UNSEEN_CTIME, UNKNOWN_CTIME);
        for sec in [scan_start_s - 2, scan_start_s, scan_start_s + 10] {
            let young = Time { sec, nsec: 0 };
            assert_eq!(ctime_to_record(young, scan_start_s), UNKNOWN_CTIME);
        }
    }
}
