//! The scan of a set's sync: every replica that took part walks its tree
//! against its own archive of the set, all at once; the paths to settle are
//! those where some replica has an update (or a touch), and those where
//! the replicas' recorded vectors differ (a replica that missed runs holds
//! an older agreement there, though nothing changed on it since). Each
//! replica is then asked for its state at the paths it did not report, and
//! the answers become one offer per replica per path.
//!
//! What a replica reports is checked before use, as for two replicas:
//! paths in strictly increasing order, every update decided, an answer for
//! every path asked.

use crate::set::SetFailure;
use crate::sync::{SyncError, SyncFailure, SyncFatal};
use accord_model::{Entry, Observed, RelPath, Time};
use accord_plan::reconcile::contents_updated;
use accord_plan::{Offer, PathOffers, SideCounts, VersionVector};
use accord_replica::side::UNKNOWN_CTIME;
use accord_replica::{SideChange, SideFailure, SideOptions, SideScan, SideSession};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// One replica that takes part: its side, its index in the set, its name
/// for messages, and what this run counts its changes as.
pub(crate) struct Member<'r> {
    pub side: Box<dyn SideSession + 'r>,
    pub index: usize,
    /// Its place among the roots as given.
    pub place: usize,
    pub name: String,
    pub change_count: u64,
}

/// What the scan found.
pub(crate) struct Scanned {
    /// Every path to settle, in order, with one offer per member (in the
    /// members' order).
    pub paths: Vec<PathOffers>,
    /// Per path (as `paths`), per member: the ctime its archive may
    /// record with what it holds there (one flat table, not an allocation
    /// per path).
    ctimes: Vec<Time>,
    /// Members that took part: the stride of `ctimes`.
    members: usize,
    /// Entries each member's archive held and its scan found.
    pub counts: Vec<SideCounts>,
    /// Paths left out of the run (with their subtrees), by replica.
    pub failures: Vec<SetFailure>,
}

/// Scan every member, look up on each what the others reported, and make
/// the offers.
pub(crate) fn scan_set(
    members: &mut [Member<'_>],
    opts: &SideOptions,
) -> Result<Scanned, SyncFatal> {
    let scans = each(members, |member| {
        let scan = member.side.scan(opts)?;
        let digest = member.side.versions_digest()?;
        Ok((scan, digest))
    });
    let mut reported: Vec<BTreeMap<RelPath, SideChange>> = Vec::new();
    let mut digests = Vec::new();
    let mut counts = Vec::new();
    let mut failures = Vec::new();
    for (member, result) in members.iter().zip(scans) {
        let (scan, digest) = result.map_err(|failure| fatal(member, failure))?;
        check_order(&scan, member)?;
        counts.push(scan.counts);
        failures.extend(scan.failures.into_iter().map(|f| failure_of(member, f)));
        reported.push(
            scan.changes
                .into_iter()
                .map(|c| (c.path.clone(), c))
                .collect(),
        );
        digests.push(digest);
    }
    let same = digests.windows(2).all(|d| d[0] == d[1]);
    // The digest of an archive with no vectors is zero (of any rows, zero
    // only by a collision of their hashes): on a set's first sync there
    // is nothing to read, rather than one lookup per path on every member.
    let versions = match same && digests[0] == [0; 32] {
        true => vec![BTreeMap::new(); members.len()],
        false => read_versions(members, &reported, same)?,
    };
    let wanted = paths_to_settle(&reported, &versions);
    let asks: Vec<Vec<RelPath>> = reported
        .iter()
        .map(|mine| {
            wanted
                .iter()
                .filter(|p| !mine.contains_key(*p))
                .cloned()
                .collect()
        })
        .collect();
    let answers = each_with(members, &asks, |member, asked| match asked.is_empty() {
        true => Ok(SideScan::default()),
        false => member.side.lookup(asked, opts),
    });
    let mut left_out: BTreeSet<RelPath> = BTreeSet::new();
    for ((member, answer), asked) in members.iter().zip(answers).zip(&asks) {
        let answer = answer.map_err(|failure| fatal(member, failure))?;
        check_order(&answer, member)?;
        left_out.extend(answer.excluded.iter().cloned());
        left_out.extend(answer.failures.iter().map(|f| f.path.clone()));
        failures.extend(answer.failures.into_iter().map(|f| failure_of(member, f)));
        let index = members
            .iter()
            .position(|m| m.index == member.index)
            .unwrap();
        for change in answer.changes {
            reported[index].insert(change.path.clone(), change);
        }
        check_answered(asked, &reported[index], &left_out, member)?;
    }
    crate::set::release_freed_memory();
    left_out.extend(failures.iter().map(|f| f.failure.path.clone()));
    let mut scanned = Scanned {
        paths: Vec::new(),
        ctimes: Vec::new(),
        members: members.len(),
        counts,
        failures,
    };
    for path in wanted {
        // The backup directory is never part of the tree, whatever a side
        // says.
        let out = left_out.iter().any(|out| path.starts_with(out));
        if out || crate::sync::propagate::in_backup_dir(&path) {
            continue;
        }
        offers_at(&path, members, &mut reported, &versions, opts, &mut scanned)?;
    }
    Ok(scanned)
}

impl Scanned {
    /// What propagation reads once the plan is made: each member's entry
    /// and ctime at every path. The offers are let go of (the plan holds
    /// what it needs of them), so that what a run holds at once stays
    /// near what a run of two holds.
    pub fn hold(&mut self) -> Held {
        let paths = std::mem::take(&mut self.paths);
        let mut held = Held {
            paths: Vec::with_capacity(paths.len()),
            now: Vec::with_capacity(paths.len() * self.members),
            ctimes: std::mem::take(&mut self.ctimes),
            members: self.members,
        };
        for at in paths {
            held.paths.push(at.path);
            held.now
                .extend(at.offers.into_iter().map(|offer| offer.now));
        }
        held
    }
}

/// A path, and per member what it holds there and the ctime it may record.
pub(crate) type HeldRow = (RelPath, Vec<(Option<Arc<Entry>>, Time)>);

/// Every path of the plan with what each member holds there (see
/// [`Scanned::hold`]), in flat tables indexed by path, then slot.
#[derive(Default)]
pub(crate) struct Held {
    paths: Vec<RelPath>,
    now: Vec<Option<Arc<Entry>>>,
    ctimes: Vec<Time>,
    members: usize,
}

impl Held {
    /// The index of `path` (a path of the plan).
    pub fn index_of(&self, path: &RelPath) -> usize {
        self.paths
            .binary_search(path)
            .expect("the plan's paths are the scan's")
    }

    /// What the member in `slot` holds at the path of `index`.
    pub fn now(&self, index: usize, slot: usize) -> Option<&Arc<Entry>> {
        self.now[index * self.members + slot].as_ref()
    }

    /// The ctime the member in `slot` may record at the path of `index`.
    pub fn ctime(&self, index: usize, slot: usize) -> Time {
        self.ctimes[index * self.members + slot]
    }

    /// The index of `path`, if it is a path of the plan.
    pub fn find(&self, path: &RelPath) -> Option<usize> {
        self.paths.binary_search(path).ok()
    }

    /// Put `rows` in (each a path, and per slot what the member holds
    /// there and the ctime it may record), replacing those of their paths
    /// already here: the copies `--keep-both` adds to the plan
    /// (`set/keep.rs`).
    pub fn put_rows(&mut self, mut rows: Vec<HeldRow>) {
        if rows.is_empty() {
            return;
        }
        rows.sort_by(|x, y| x.0.cmp(&y.0));
        let total = self.paths.len() + rows.len();
        let mut merged = Held {
            paths: Vec::with_capacity(total),
            now: Vec::with_capacity(total * self.members),
            ctimes: Vec::with_capacity(total * self.members),
            members: self.members,
        };
        let old = std::mem::take(self);
        let mut new_rows = rows.into_iter().peekable();
        let stride = old.members;
        for (index, path) in old.paths.into_iter().enumerate() {
            while new_rows.peek().is_some_and(|row| row.0 < path) {
                merged.push(new_rows.next().expect("peeked"));
            }
            if new_rows.peek().is_some_and(|row| row.0 == path) {
                merged.push(new_rows.next().expect("peeked"));
                continue;
            }
            let cells = index * stride..(index + 1) * stride;
            merged.paths.push(path);
            merged.now.extend_from_slice(&old.now[cells.clone()]);
            merged.ctimes.extend_from_slice(&old.ctimes[cells]);
        }
        new_rows.for_each(|row| merged.push(row));
        *self = merged;
    }

    fn push(&mut self, (path, cells): HeldRow) {
        assert_eq!(cells.len(), self.members, "one cell per member");
        self.paths.push(path);
        for (now, ctime) in cells {
            self.now.push(now);
            self.ctimes.push(ctime);
        }
    }

    /// What the member in `slot` holds at `path` as its archive records it.
    pub fn observed(&self, path: &RelPath, slot: usize) -> Option<Observed> {
        let index = self.index_of(path);
        Some(Observed {
            entry: self.now(index, slot)?.as_ref().clone(),
            ctime: self.ctime(index, slot),
        })
    }
}

/// Each member's vectors: at the paths some member reported when every
/// member holds the same vectors (their digests are equal: a steady run
/// reads a few), else all of them, to find where they differ.
fn read_versions(
    members: &mut [Member<'_>],
    reported: &[BTreeMap<RelPath, SideChange>],
    same: bool,
) -> Result<Vec<BTreeMap<RelPath, VersionVector>>, SyncFatal> {
    let paths: Vec<RelPath> = match same {
        true => {
            let all: BTreeSet<&RelPath> = reported.iter().flat_map(|m| m.keys()).collect();
            all.into_iter().cloned().collect()
        }
        false => Vec::new(),
    };
    let read = each(members, |member| match same {
        true => {
            let vectors = member.side.versions_at(&paths)?;
            let recorded = paths.iter().cloned().zip(vectors);
            Ok(recorded.filter(|(_, v)| !v.is_empty()).collect())
        }
        false => Ok(member.side.versions()?.into_iter().collect()),
    });
    members
        .iter()
        .zip(read)
        .map(|(member, result)| result.map_err(|failure| fatal(member, failure)))
        .collect()
}

/// Every path some member reported, and every path whose recorded
/// vectors are not the same on every member.
fn paths_to_settle(
    reported: &[BTreeMap<RelPath, SideChange>],
    versions: &[BTreeMap<RelPath, VersionVector>],
) -> Vec<RelPath> {
    let mut wanted: BTreeSet<RelPath> = reported.iter().flat_map(|m| m.keys().cloned()).collect();
    let recorded: BTreeSet<&RelPath> = versions.iter().flat_map(|m| m.keys()).collect();
    let empty = VersionVector::default();
    for path in recorded {
        let first = versions[0].get(path).unwrap_or(&empty);
        if versions
            .iter()
            .any(|m| m.get(path).unwrap_or(&empty) != first)
        {
            wanted.insert(path.clone());
        }
    }
    // The root is never settled: it is each replica's own.
    wanted.remove(&RelPath::root());
    wanted.into_iter().collect()
}

/// The offers at `path`, one per member, and what each holds as recorded.
fn offers_at(
    path: &RelPath,
    members: &[Member<'_>],
    reported: &mut [BTreeMap<RelPath, SideChange>],
    versions: &[BTreeMap<RelPath, VersionVector>],
    opts: &SideOptions,
    scanned: &mut Scanned,
) -> Result<(), SyncFatal> {
    let mut offers = Vec::with_capacity(members.len());
    for (slot, member) in members.iter().enumerate() {
        let change = reported[slot]
            .remove(path)
            .expect("every member answered for every path (checked)");
        let update = change.update(&opts.detect).ok_or_else(|| {
            said(
                member,
                format!("left the update at {} undecided", path.display()),
            )
        })?;
        let mut now = change.current.as_deref().map(|o| o.entry.clone());
        if let (Some(entry), Some(was)) = (now.as_mut(), change.archived.as_deref()) {
            // A file whose contents did not change has the archive's
            // fingerprint, so that any two can be compared.
            if entry.hash.is_none() && !contents_updated(&update) {
                entry.hash = was.entry.hash;
            }
        }
        scanned.ctimes.push(record_ctime(&change));
        offers.push(Offer {
            replica: member.index,
            update,
            now: now.map(Arc::new),
            recorded: versions[slot].get(path).cloned().unwrap_or_default(),
            base: change
                .archived
                .as_deref()
                .map(|was| Arc::new(was.entry.clone())),
            change_count: member.change_count,
        });
    }
    scanned.paths.push(PathOffers {
        path: path.clone(),
        offers,
    });
    Ok(())
}

fn record_ctime(change: &SideChange) -> Time {
    match change.current {
        Some(_) => change.record_ctime,
        None => UNKNOWN_CTIME,
    }
}

/// Run `f` on every member at once (the last on this thread).
pub(crate) fn each<T: Send>(
    members: &mut [Member<'_>],
    f: impl Fn(&mut Member<'_>) -> Result<T, SideFailure> + Sync,
) -> Vec<Result<T, SideFailure>> {
    let asks = vec![(); members.len()];
    each_with(members, &asks, |member, ()| f(member))
}

fn each_with<A: Sync, T: Send>(
    members: &mut [Member<'_>],
    inputs: &[A],
    f: impl Fn(&mut Member<'_>, &A) -> Result<T, SideFailure> + Sync,
) -> Vec<Result<T, SideFailure>> {
    std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = members
            .iter_mut()
            .zip(inputs)
            .map(|(member, input)| s.spawn(move || f(member, input)))
            .collect();
        handles
            .into_iter()
            .map(|handle| match handle.join() {
                Ok(result) => result,
                Err(panic) => std::panic::resume_unwind(panic),
            })
            .collect()
    })
}

fn check_order(scan: &SideScan, member: &Member<'_>) -> Result<(), SyncFatal> {
    match scan
        .changes
        .windows(2)
        .find(|pair| pair[0].path >= pair[1].path)
    {
        Some(pair) => Err(said(
            member,
            format!("listed {} out of order", pair[1].path.display()),
        )),
        None => Ok(()),
    }
}

fn check_answered(
    asked: &[RelPath],
    now: &BTreeMap<RelPath, SideChange>,
    left_out: &BTreeSet<RelPath>,
    member: &Member<'_>,
) -> Result<(), SyncFatal> {
    let unanswered = asked
        .iter()
        .find(|path| !now.contains_key(*path) && !left_out.iter().any(|out| path.starts_with(out)));
    match unanswered {
        Some(path) => Err(said(
            member,
            format!("gave no answer for {}", path.display()),
        )),
        None => Ok(()),
    }
}

fn failure_of(member: &Member<'_>, failure: accord_model::PathFailure) -> SetFailure {
    SetFailure {
        replica: member.name.clone(),
        failure: SyncFailure {
            path: failure.path,
            error: SyncError::Detect(failure.message),
        },
    }
}

fn fatal(member: &Member<'_>, failure: SideFailure) -> SyncFatal {
    SyncFatal::Side {
        replica: member.name.clone(),
        failure,
    }
}

fn said(member: &Member<'_>, why: String) -> SyncFatal {
    fatal(member, SideFailure::said(why))
}
