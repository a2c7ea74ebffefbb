//! One replica's side of a two-way sync, run on the replica's own host:
//! its archive (kept on that host, keyed by both roots' identities), the
//! walk of its tree against that archive (update detection, fingerprinting
//! where metadata cannot decide), the lookups the other side's updates ask
//! for, and the archive's writes. The engine holds two [`SideSession`]s and
//! merges what they report (the engine's sync/scan.rs); a replica of this host gives
//! a [`LocalSide`], a remote one a proxy whose host runs a `LocalSide`.
//!
//! Detection is local to each host because only that host can do it well:
//! its own clock says which ctimes have settled, and a file whose metadata
//! is in doubt is fingerprinted where it lies instead of being sent.

pub mod follow;
pub mod rules;
pub mod scratch;

use accord_archive::ArchiveError;
use accord_model::{Kind, Observed, PathFailure, RelPath, Time};
use accord_plan::VersionVector;
use accord_plan::{detect, DetectOptions, Detection, SideCounts, Update};
use rules::SyncRules;
use std::path::Path;

/// What one side holds at one path, and what its archive recorded there.
/// The entries are boxed: one of the two is often absent (every path of a
/// first sync, every path the other side alone reported), and a first
/// sync holds one of these per path on each side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SideChange {
    pub path: RelPath,
    pub archived: Option<Box<Observed>>,
    /// A regular file carries its fingerprint when detection needed it.
    pub current: Option<Box<Observed>>,
    /// The ctime the archive may record for `current` (see
    /// `ctime_to_record`: judged by the clock of the replica's host).
    pub record_ctime: Time,
}

impl SideChange {
    /// Detection's answer for this side, which must be decided: a side
    /// fingerprints every file whose metadata leaves it in doubt.
    pub fn update(&self, opts: &DetectOptions) -> Option<Update> {
        match detect(self.archived.as_deref(), self.current.as_deref(), opts) {
            Detection::Decided(update) => Some(update),
            Detection::NeedsFingerprint => None,
        }
    }
}

/// What a side's walk (or a batch of lookups) found.
#[derive(Debug, Default)]
pub struct SideScan {
    /// Paths with an update or a touch (for lookups: every path asked for
    /// that did not fail), in `RelPath` order.
    pub changes: Vec<SideChange>,
    /// Entries the archive held and the walk found (the root excluded).
    pub counts: SideCounts,
    /// Paths that could not be judged (a file that could not be
    /// fingerprinted): left out of the run with their subtrees.
    pub failures: Vec<PathFailure>,
    /// Lookups only: paths asked for that this side's ignore rules
    /// exclude, left out of the run on both sides with their subtrees
    /// (the engine's sync/ignore.rs and the replica crate's side/rules.rs).
    pub excluded: Vec<RelPath>,
}

/// How a side detects updates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SideOptions {
    pub detect: DetectOptions,
    /// False when the archives are lost: every path is new.
    pub use_archive: bool,
}

/// What the archive learns about one path once it is propagated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArchiveRecord {
    Put(Observed),
    /// The path and its subtree are gone from this side.
    Remove(RelPath),
}

/// Why a side could not go on. The four kinds are what a remote side
/// reports too (`accord_remote`'s sync replies carry the kind and the
/// cause's text).
#[derive(Debug, thiserror::Error)]
pub enum SideFailure {
    /// Another run holds this side's archive (its pid, when known).
    #[error("another accord sync of these roots is running{}; try again when it is done",
        holder.map(|pid| format!(" (pid {pid})")).unwrap_or_default())]
    Locked { holder: Option<u32> },
    /// The archive turned out damaged: to be treated as lost.
    #[error("the archive is damaged: {0}")]
    Damaged(#[source] SideCause),
    /// A directory could not be read: its entries would look deleted.
    #[error(transparent)]
    Unreadable(SideCause),
    /// The archive could not be used, or the side is gone.
    #[error(transparent)]
    Failed(SideCause),
}

/// What made a side fail: typed where this host saw the cause; a remote
/// side's cause arrives as its text ([`SideCause::Said`]).
#[derive(Debug, thiserror::Error)]
pub enum SideCause {
    #[error(transparent)]
    Archive(ArchiveError),
    #[error("an exclude pattern is not valid: {0}")]
    ExcludePattern(#[source] std::io::Error),
    #[error("a --follow pattern is not valid: {0}")]
    FollowPattern(#[source] std::io::Error),
    /// A directory of the side could not be read (`detail`: the scan's
    /// account of what failed where).
    #[error("cannot read {root}: {detail}")]
    Unreadable { root: String, detail: String },
    /// The root's name in archives could not be made.
    #[error("cannot name the root in the archives: {0}")]
    Identity(#[source] std::io::Error),
    #[error("this replica cannot take part in a sync")]
    Unsupported,
    /// In words: what a remote side reported, or what a job found wrong
    /// with a side's answers.
    #[error("{0}")]
    Said(String),
}

impl SideFailure {
    /// A failure told in words (see [`SideCause::Said`]).
    pub fn said(why: impl Into<String>) -> SideFailure {
        SideFailure::Failed(SideCause::Said(why.into()))
    }
}

impl From<ArchiveError> for SideFailure {
    fn from(e: ArchiveError) -> SideFailure {
        match e {
            ArchiveError::Locked { holder, .. } => SideFailure::Locked { holder },
            e if e.is_damaged() => SideFailure::Damaged(SideCause::Archive(e)),
            e => SideFailure::Failed(SideCause::Archive(e)),
        }
    }
}

/// One replica's side of a sync run, with its archive open and locked.
pub trait SideSession: Send {
    /// The archive was made by this open (none before, or a damaged one
    /// set aside): the pair's agreement is lost.
    fn created(&self) -> bool;
    /// Forget every recorded entry, in one transaction.
    fn forget(&mut self) -> Result<(), SideFailure>;
    /// The ignore rules of this run's scans and lookups (a side never
    /// told leaves out its backup directory only).
    fn set_rules(&mut self, rules: &SyncRules) -> Result<(), SideFailure>;
    /// Walk the replica against its archive and report every path with an
    /// update or a touch.
    fn scan(&mut self, opts: &SideOptions) -> Result<SideScan, SideFailure>;
    /// A hint: `scan(opts)` will be asked for next, unless the opening
    /// finds the archive new. A side across a wire that carries its calls
    /// out in order asks for it now, behind the opening and the rules, so
    /// that they all take one round trip.
    fn prefetch_scan(&mut self, _opts: &SideOptions) {}
    /// The state at each of `paths` (in `RelPath` order), judged now: one
    /// change per path, or a failure.
    fn lookup(&mut self, paths: &[RelPath], opts: &SideOptions) -> Result<SideScan, SideFailure>;
    /// Apply `records` in one transaction. A side across a wire may send
    /// them and check their outcome with its next call, or at `finish`
    /// (its failure then names the records it was about).
    fn record(&mut self, records: &[ArchiveRecord]) -> Result<(), SideFailure>;
    /// The run is over: no call follows, on this side or on its replica.
    /// Waits for the outcome of what was sent and not yet answered. A side
    /// across a wire first ends its sending half of the connection, so
    /// that the server's closing travels with those answers.
    fn finish(&mut self) -> Result<(), SideFailure> {
        Ok(())
    }

    /// In a sync of more than two replicas (a side opened with
    /// `Replica::open_set_side`): count one more run of this replica,
    /// durably, before anything is recorded; the count is what this run's
    /// changes of this replica count as (the plan crate's
    /// `version_vector.rs`).
    fn count_run(&mut self) -> Result<u64, SideFailure> {
        Err(SideFailure::Failed(SideCause::Unsupported))
    }

    /// In a sync of more than two replicas: every version vector the
    /// archive holds, in `RelPath` order, checked.
    fn versions(&mut self) -> Result<Vec<(RelPath, VersionVector)>, SideFailure> {
        Err(SideFailure::Failed(SideCause::Unsupported))
    }

    /// In a sync of more than two replicas: the digest of every vector
    /// the archive holds (equal on two replicas that hold the same ones).
    fn versions_digest(&mut self) -> Result<[u8; 32], SideFailure> {
        Err(SideFailure::Failed(SideCause::Unsupported))
    }

    /// In a sync of more than two replicas: the vector at each of `paths`
    /// (empty where there is none), checked.
    fn versions_at(&mut self, _paths: &[RelPath]) -> Result<Vec<VersionVector>, SideFailure> {
        Err(SideFailure::Failed(SideCause::Unsupported))
    }

    /// In a sync of more than two replicas: apply `records` and store
    /// `versions`, in one transaction.
    fn record_versions(
        &mut self,
        _records: &[ArchiveRecord],
        _versions: &[(RelPath, VersionVector)],
    ) -> Result<(), SideFailure> {
        Err(SideFailure::Failed(SideCause::Unsupported))
    }
}

/// What every root identity starts with (`local_identity`).
pub(crate) const IDENTITY_PREFIX: &[u8] = b"accord root 1\0";

/// The bytes that name a root of this host in archives: a name of the
/// host, then the root's canonical path. Two hosts must never share one,
/// or a server would take one client's archive for another's.
pub fn local_identity(root: &Path) -> Vec<u8> {
    let mut identity = IDENTITY_PREFIX.to_vec();
    identity.extend_from_slice(&host_name());
    identity.push(0);
    identity.extend_from_slice(accord_fsys::canonical(root).as_os_str().as_encoded_bytes());
    identity
}

/// The machine id (stable across renames of the host) and the host name.
fn host_name() -> Vec<u8> {
    let mut name = std::fs::read("/etc/machine-id").unwrap_or_default();
    name.truncate(name.trim_ascii_end().len());
    name.push(b'/');
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname writes at
    // most that many bytes.
    if unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0 {
        let len = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        name.extend_from_slice(&buf[..len]);
    }
    name
}

/// A ctime recorded when the real one cannot vouch for the contents: it
/// matches no file's, so the next run fingerprints the file.
pub const UNKNOWN_CTIME: Time = Time { sec: 0, nsec: 0 };

/// The ctime a scan reports when it could not read the real one: it
/// matches no recorded ctime (not even [`UNKNOWN_CTIME`]), so metadata
/// never vouches for the file and it is fingerprinted.
pub const UNSEEN_CTIME: Time = Time { sec: 0, nsec: 1 };

/// A ctime younger than this (in seconds, against the scan's start) is not
/// recorded where timestamps are coarse: a write in the same clock tick as
/// our stat would leave it unchanged, so it cannot vouch.
const CTIME_SETTLE_S: i64 = 2;

/// The ctime to record for `observed`, seen during a scan that began at
/// `scan_start_s`: its own once settled, or at once where its file
/// system's change times move after a stat read them (multigrain
/// timestamps, see `accord_fsys::ctime_moves_after_stat`), so a file
/// written just before a sync is not read again by the next run. An
/// entry seen through a followed link keeps to the settle rule: the link
/// may be pointed elsewhere without a change of the ctime read.
pub fn ctime_to_record(observed: &Observed, scan_start_s: i64) -> Time {
    let ctime = observed.ctime;
    // A ctime of the epoch is one of ours: unknown or unseen.
    if ctime.sec <= 0 {
        return UNKNOWN_CTIME;
    }
    let settled = ctime.sec < scan_start_s - CTIME_SETTLE_S;
    let entry = &observed.entry;
    let at_once = || {
        (entry.link_target.is_none() || entry.kind == Kind::Symlink)
            && accord_fsys::ctime_moves_after_stat(entry.dev)
    };
    if settled || at_once() {
        ctime
    } else {
        UNKNOWN_CTIME
    }
}

/// The bytes an archive keeps to say which attributes its lists were
/// read under (`accord_archive`'s xattr_scope.rs).
pub fn xattr_scope(filter: &accord_fsys::XattrFilter) -> Vec<u8> {
    let yes = |on: bool| if on { "yes" } else { "no" };
    format!(
        "xattrs={} acls={} user_only={}",
        yes(filter.xattrs),
        yes(filter.acls),
        yes(filter.user_only)
    )
    .into_bytes()
}

/// The extended attributes a sync reads, compares and writes.
pub fn xattr_filter(props: &accord_plan::SyncedProps) -> accord_fsys::XattrFilter {
    accord_fsys::XattrFilter {
        xattrs: props.xattrs,
        acls: props.acls,
        user_only: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(ctime: Time, dev: u64) -> Observed {
        Observed {
            entry: accord_model::Entry {
                path: RelPath::new(b"f").unwrap(),
                kind: Kind::File,
                size: 0,
                props: Default::default(),
                dev,
                ino: 1,
                nlink: 1,
                rdev: 0,
                blocks: 0,
                link_target: None,
                hash: None,
            },
            ctime,
        }
    }

    /// Where the device is unknown (so timestamps count as coarse), only a
    /// settled ctime is recorded.
    #[test]
    fn only_a_settled_ctime_is_recorded_where_timestamps_are_coarse() {
        let scan_start_s = 1_000_000;
        let nowhere = u64::MAX;
        assert!(!accord_fsys::ctime_moves_after_stat(nowhere));
        let old = Time {
            sec: scan_start_s - 3,
            nsec: 5,
        };
        assert_eq!(ctime_to_record(&file(old, nowhere), scan_start_s), old);
        let unseen = file(UNSEEN_CTIME, nowhere);
        assert_eq!(ctime_to_record(&unseen, scan_start_s), UNKNOWN_CTIME);
        assert_ne!(UNSEEN_CTIME, UNKNOWN_CTIME);
        for sec in [scan_start_s - 2, scan_start_s, scan_start_s + 10] {
            let young = file(Time { sec, nsec: 0 }, nowhere);
            assert_eq!(ctime_to_record(&young, scan_start_s), UNKNOWN_CTIME);
        }
    }

    /// A file just written, on a real file system: its ctime is recorded at
    /// once exactly where that file system's change times move after a
    /// stat; never for what a followed link showed.
    #[test]
    fn a_young_ctime_is_recorded_where_it_moves_after_a_stat() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        let st = std::fs::metadata(dir.path().join("f")).unwrap();
        let ctime = Time {
            sec: st.ctime(),
            nsec: st.ctime_nsec() as u32,
        };
        let young = file(ctime, st.dev());
        let at_once = accord_fsys::ctime_moves_after_stat(st.dev());
        let want = if at_once { ctime } else { UNKNOWN_CTIME };
        assert_eq!(ctime_to_record(&young, ctime.sec), want);
        let mut followed = young.clone();
        followed.entry.link_target = Some(b"elsewhere".to_vec());
        assert_eq!(ctime_to_record(&followed, ctime.sec), UNKNOWN_CTIME);
    }
}
