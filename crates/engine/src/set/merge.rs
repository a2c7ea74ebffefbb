//! `--merge CMD` for a set: a conflict whose latest versions are all
//! regular files (no replica holding a directory there), with the same
//! synced properties, is given to the merge program (`sync/merge_program.rs`,
//! run on this host), and its result becomes a new version every reached
//! replica receives.
//!
//! The versions are taken in the order of their first holders as the roots
//! were written, each distinct contents once; with two, CURRENT1 is the
//! first and CURRENT2 the other; with more, the program folds them: the
//! first two, then that result with the third, … (`run_fold`), each copy
//! named by the letter of the version's first holder (`A-NAME`), the result
//! so far by the letters it merged (`AB-NAME`). A step that fails leaves
//! the conflict as it was, nothing changed. A deletion, a directory or a
//! symlink among the latest versions is never given to the program, as
//! with two roots; an older version (a replica that missed runs) is
//! replaced by the result as by any settled version.
//!
//! The result's vector is every offer's merged, with a change of the first
//! member counted by a count of its own (`count_run` once more: above
//! every count any archive holds, this run's changes too), so it comes
//! after every version it replaced. It is written in three steps, each
//! safe to be killed after:
//!
//! 1. every replica holding a latest version records it, as the scan found
//!    it, with the offers' merged vector (`before`) and an unknown ctime:
//!    a run killed now reads them again and sees the same versions with
//!    equal vectors, the same conflict;
//! 2. the result is written over the nearest holder of the first version
//!    and of the second by the two-root merge (`sync/propagate/merge.rs`,
//!    with the re-checks, backups, temps and renames it makes), each
//!    recording it with the new vector: a replica it replaced but did not
//!    record offers `before` with a change of its own, which comes after
//!    every other replica's, so the next run carries it without a
//!    conflict;
//! 3. it is settled as a version those two hold, which every other member
//!    receives as any settled version (`propagate.rs`).

use crate::set::keep::offers_at;
use crate::set::propagate::{source_of, Vectors, Versioned};
use crate::set::renames::Renames;
use crate::set::scan::{Held, HeldRow, Member, Scanned};
use crate::set::{SetChange, SetConflictReport, SetFailure};
use crate::sync::propagate::{
    changed_entry, merged_version, propagate, props_agree, run_fold, split, MergeInput, Merged,
    NotMerged, Plan, Premerger,
};
use crate::sync::{SyncConfig, SyncError, SyncFailure, SyncHooks, SyncReport};
use accord_model::{Entry, Kind, RelPath};
use accord_plan::reconcile::same_contents;
use accord_plan::replica_set::offered_vectors;
use accord_plan::{
    Action, ConflictReason, Outcome, Receive, SetConflict, SetItem, Settled, SyncItem,
    VersionVector,
};
use accord_replica::side::UNKNOWN_CTIME;
use accord_replica::{Action as Step, ArchiveRecord, Replica, ReplicaDir, SideSession};
use std::sync::Arc;

/// A conflict the program is to merge.
pub(crate) struct Candidate {
    pub(crate) path: RelPath,
    /// The versions, in the order the program takes them.
    inputs: Vec<Input>,
    /// The slots of the members holding a latest version.
    latest: Vec<usize>,
    /// Every offer's vector merged.
    before: VersionVector,
}

/// One version the program reads.
struct Input {
    /// The slots of its holders.
    holders: Vec<usize>,
    /// The letter of its first holder as the roots were written.
    label: String,
}

/// What the merges did.
#[derive(Default)]
pub(crate) struct Merges {
    /// The paths merged, in path order.
    pub merged: Vec<RelPath>,
    /// Conflicts left as conflicts, with why.
    pub not_merged: Vec<(RelPath, String)>,
    pub changes: Vec<SetChange>,
    pub failures: Vec<SetFailure>,
}

/// The conflicts of `items` the program may merge; those it may not for a
/// reason worth saying go to `not_merged`. `place_of`: by set index, the
/// place of the root as written.
pub(crate) fn candidates(
    items: &[SetItem],
    members: &[Member<'_>],
    scanned: &Scanned,
    place_of: &[usize],
    cfg: &SyncConfig,
    not_merged: &mut Vec<(RelPath, String)>,
) -> Vec<Candidate> {
    let slot = |index: usize| {
        members
            .iter()
            .position(|m| m.index == index)
            .expect("a version's holders took part")
    };
    let mut found = Vec::new();
    for item in items {
        let Outcome::Conflict {
            reason: SetConflict::ChangedApart,
            versions,
        } = &item.outcome
        else {
            continue;
        };
        let at = offers_at(scanned, &item.path).expect("a conflict was scanned");
        let any_dir = at
            .offers
            .iter()
            .any(|o| o.now.as_ref().is_some_and(|e| e.kind == Kind::Dir));
        let mut latest: Vec<_> = versions.iter().filter(|v| v.latest).collect();
        let all_files = latest
            .iter()
            .all(|v| v.entry.as_ref().is_some_and(|e| e.kind == Kind::File));
        if any_dir || !all_files {
            continue;
        }
        let first_place = |holders: &[usize]| holders.iter().map(|&h| place_of[h]).min();
        latest.sort_by_key(|v| first_place(&v.holders));
        let entry = |v: &accord_plan::Version| v.entry.clone().expect("a file");
        let first = entry(latest[0]);
        if latest.iter().any(|v| !props_agree(&first, &entry(v), cfg)) {
            not_merged.push((
                item.path.clone(),
                "not merged: the versions' permissions, owners, extended attributes or ACLs \
                 differ"
                    .into(),
            ));
            continue;
        }
        let mut inputs: Vec<(Arc<Entry>, Input)> = Vec::new();
        for version in &latest {
            let held = entry(version);
            let slots: Vec<usize> = version.holders.iter().map(|&h| slot(h)).collect();
            match inputs
                .iter_mut()
                .find(|(e, _)| same_contents(Some(e), Some(&held)))
            {
                // The same contents with other times: one input.
                Some((_, input)) => input.holders.extend(slots),
                None => {
                    let place = first_place(&version.holders).expect("a holder");
                    let label = label_of(place);
                    inputs.push((
                        held,
                        Input {
                            holders: slots,
                            label,
                        },
                    ));
                }
            }
        }
        if inputs.len() < 2 {
            continue;
        }
        let before = offered_vectors(&at.offers, &cfg.synced_props())
            .iter()
            .fold(VersionVector::default(), |merged, v| merged.merged(v));
        found.push(Candidate {
            path: item.path.clone(),
            inputs: inputs.into_iter().map(|(_, input)| input).collect(),
            latest: latest
                .iter()
                .flat_map(|v| v.holders.iter().map(|&h| slot(h)))
                .collect(),
            before,
        });
    }
    found
}

/// Each version's source: its nearest holder, which writes it too.
pub(crate) fn sources(replicas: &[&dyn Replica], candidate: &Candidate) -> Vec<usize> {
    let far: Vec<bool> = replicas.iter().map(|r| r.local_root().is_none()).collect();
    candidate
        .inputs
        .iter()
        .map(|input| source_of(input.holders.iter().copied(), |s| far[s]))
        .collect()
}

/// The program over a candidate's versions, each read from its source
/// (`version`: what the member in a slot holds at the path).
pub(crate) fn fold_versions<'v>(
    (replicas, cfg): (&[&dyn Replica], &SyncConfig),
    candidate: &Candidate,
    sources: &[usize],
    version: impl Fn(usize) -> &'v Arc<Entry>,
) -> Result<Merged, NotMerged> {
    let program = cfg.merge.as_ref().expect("merges run with --merge");
    let (parent, _) = split(&candidate.path);
    let mut dirs: Vec<Box<dyn ReplicaDir + '_>> = Vec::new();
    for &slot in sources {
        let dir = replicas[slot].open_dir(&parent);
        dirs.push(dir.map_err(crate::Error::io(Step::OpenSource))?);
    }
    let inputs: Vec<MergeInput<'_>> = candidate
        .inputs
        .iter()
        .zip(sources)
        .zip(&dirs)
        .map(|((input, &slot), dir)| MergeInput {
            dir: dir.as_ref(),
            version: version(slot),
            label: input.label.clone(),
        })
        .collect();
    run_fold(&candidate.path, &inputs, program)
}

/// The letter of the root written at `place`: A, B, C … (then numbers).
fn label_of(place: usize) -> String {
    match u8::try_from(place) {
        Ok(at) if at < 26 => char::from(b'A' + at).to_string(),
        _ => format!("R{}", place + 1),
    }
}

/// What every merge of a run works with.
pub(crate) struct Merging<'m, 'r> {
    pub replicas: &'m [&'r dyn Replica],
    pub members: &'m mut [Member<'r>],
    pub items: &'m mut Vec<SetItem>,
    pub held: &'m mut Held,
    pub cfg: &'m SyncConfig,
    /// Results the interactive mode's `m` made (`premerge.rs`), by path:
    /// written instead of running the program again.
    pub premerged: std::collections::HashMap<RelPath, Merged>,
}

impl Merging<'_, '_> {
    /// Merge every candidate, path by path; each one merged becomes a
    /// settled version in `items` (held by the two replicas the merge was
    /// written on, received by the others), and what those two hold now
    /// goes into `held`.
    pub(crate) fn merge_all(&mut self, candidates: &[Candidate]) -> Merges {
        let mut merges = Merges::default();
        let mut fresh_count = None;
        let mut rows = Vec::new();
        for candidate in candidates {
            match self.merge_one(candidate, &mut fresh_count, &mut merges) {
                Ok(row) => {
                    rows.push(row);
                    merges.merged.push(candidate.path.clone());
                }
                Err(why) => merges.not_merged.push((candidate.path.clone(), why)),
            }
        }
        self.held.put_rows(rows);
        merges
    }

    fn merge_one(
        &mut self,
        candidate: &Candidate,
        fresh_count: &mut Option<u64>,
        merges: &mut Merges,
    ) -> Result<HeldRow, String> {
        let path = &candidate.path;
        let sources = sources(self.replicas, candidate);
        let merged = match self.premerged.remove(path) {
            Some(merged) => merged,
            None => self
                .run_program(candidate, &sources)
                .map_err(|not| self.not_merged_why(path, sources[0], not, merges))?,
        };
        let count = match fresh_count {
            Some(count) => *count,
            None => {
                let counted = self.members[0].side.count_run();
                let count = counted
                    .map_err(|failure| self.fail(0, path, SyncError::Archive(failure), merges))?;
                *fresh_count.insert(count)
            }
        };
        let vector = candidate.before.with_change(self.members[0].index, count);
        self.record_before(candidate, merges)?;
        let pair = [sources[0], sources[1]];
        let facts = merged.facts();
        let at = self.items_index(path);
        let settled = Outcome::Settled(self.settled(path, pair, facts, vector));
        let conflict = std::mem::replace(&mut self.items[at].outcome, settled);
        match self.write_pair(path, pair, merged, merges) {
            Ok(()) => Ok(self.row_after(path, pair, facts)),
            Err(why) => {
                self.items[at].outcome = conflict;
                Err(why)
            }
        }
    }

    /// The program over the versions, each read from its source.
    fn run_program(&self, candidate: &Candidate, sources: &[usize]) -> Result<Merged, NotMerged> {
        let at = self.held.index_of(&candidate.path);
        let version = |slot: usize| self.held.now(at, slot).expect("a holder holds its version");
        fold_versions((self.replicas, self.cfg), candidate, sources, version)
    }

    /// Why a merge was not made, as the two-root merge says it; a failure
    /// of a replica is also this run's error.
    fn not_merged_why(
        &self,
        path: &RelPath,
        slot: usize,
        not: NotMerged,
        merges: &mut Merges,
    ) -> String {
        match not {
            NotMerged::Ineligible(why) => format!(
                "not merged: {}",
                why.unwrap_or("the versions are not all regular files")
            ),
            NotMerged::Program(failure) => failure.to_string(),
            NotMerged::Sync(error) => self.fail(slot, path, error, merges),
        }
    }

    /// Record `error` at `path` on the member in `slot`; why not merged.
    fn fail(&self, slot: usize, path: &RelPath, error: SyncError, merges: &mut Merges) -> String {
        let why = format!("not merged: {error}");
        merges.failures.push(SetFailure {
            replica: self.members[slot].name.clone(),
            failure: SyncFailure {
                path: path.clone(),
                error,
            },
        });
        why
    }

    /// Step 1: every holder of a latest version records it with the
    /// offers' merged vector.
    fn record_before(&mut self, candidate: &Candidate, merges: &mut Merges) -> Result<(), String> {
        let path = &candidate.path;
        for &slot in &candidate.latest {
            let mut observed = self.held.observed(path, slot).expect("a holder");
            // Recorded as not yet vouched for: were the run stopped before
            // the merge is written, every holder would otherwise match its
            // record and hold the same vector, so no scan would report the
            // path and the conflict would never be seen again. The next
            // run reads it again and finds the conflict.
            observed.ctime = UNKNOWN_CTIME;
            let recorded = self.members[slot].side.record_versions(
                &[ArchiveRecord::Put(observed)],
                &[(path.clone(), candidate.before.clone())],
            );
            if let Err(failure) = recorded {
                return Err(self.fail(slot, path, SyncError::Archive(failure), merges));
            }
        }
        Ok(())
    }

    fn items_index(&self, path: &RelPath) -> usize {
        self.items
            .binary_search_by(|item| item.path.cmp(path))
            .expect("a candidate is an item")
    }

    /// The merge as the plan's version: held by the pair it is written
    /// on, received whole by every other member.
    fn settled(
        &self,
        path: &RelPath,
        pair: [usize; 2],
        facts: Facts,
        vector: VersionVector,
    ) -> Settled {
        let at = self.held.index_of(path);
        let first = self.held.now(at, pair[0]).expect("a holder");
        let entry = merged_version(first, facts, self.cfg);
        let mut holders = Vec::new();
        let mut receivers = Vec::new();
        for (slot, member) in self.members.iter().enumerate() {
            match pair.contains(&slot) {
                true => holders.push(member.index),
                false => receivers.push((member.index, Receive::Whole)),
            }
        }
        holders.sort_unstable();
        receivers.sort_unstable_by_key(|&(index, _)| index);
        Settled {
            entry: Some(Arc::new(entry)),
            holders,
            receivers,
            vector,
            kept: Vec::new(),
        }
    }

    /// Step 2: the merge written over both versions of `pair` by the
    /// two-root merge, each recording it with the settled vector.
    fn write_pair(
        &mut self,
        path: &RelPath,
        pair: [usize; 2],
        merged: Merged,
        merges: &mut Merges,
    ) -> Result<(), String> {
        let at = self.held.index_of(path);
        let item = SyncItem {
            path: path.clone(),
            action: Action::Conflict(ConflictReason::BothChanged),
            overridden: None,
            a: self.held.now(at, pair[0]).cloned(),
            b: self.held.now(at, pair[1]).cloned(),
            moved: None,
            link: None,
        };
        let ctimes = [self.held.ctime(at, pair[0]), self.held.ctime(at, pair[1])];
        let scanned = crate::sync::scan::Scanned::of_ctimes(vec![(path.clone(), ctimes)]);
        let replicas = [self.replicas[pair[0]], self.replicas[pair[1]]];
        let premerger = Premerger::new(replicas, self.cfg);
        premerger.keep(path.clone(), merged);
        let items = std::slice::from_ref(&item);
        let kept = Default::default();
        let plan = Plan {
            items,
            kept: &kept,
            premerged: &premerger,
            // The merged result is on this host.
            sibling: None,
        };
        let vectors = Vectors(self.items);
        // A merge's result is written in place of a version: no rename.
        let no_renames = Renames::default();
        let [first, second] = pair_of(self.members, pair);
        let mut sides: [Box<dyn SideSession + '_>; 2] = [
            Box::new(Versioned::new(first.side.as_mut(), &vectors, &no_renames)),
            Box::new(Versioned::new(second.side.as_mut(), &vectors, &no_renames)),
        ];
        let mut report = SyncReport::default();
        let hooks = SyncHooks::default();
        propagate(
            replicas,
            &mut sides,
            &scanned,
            plan,
            self.cfg,
            &hooks,
            &mut report,
        );
        drop(sides);
        self.take_report(path, pair, report, merges)
    }

    /// What the pair's run did: its changes, or why it did not merge.
    fn take_report(
        &self,
        path: &RelPath,
        pair: [usize; 2],
        report: SyncReport,
        merges: &mut Merges,
    ) -> Result<(), String> {
        let merged = report
            .propagated
            .iter()
            .any(|c| c.merged && c.path == *path);
        for failure in report.errors {
            let slot = match &failure.error {
                SyncError::MergedOnOneSide { .. } => pair[1],
                _ => pair[0],
            };
            merges.failures.push(SetFailure {
                replica: self.members[slot].name.clone(),
                failure,
            });
        }
        if !merged {
            let why = report.not_merged.into_iter().map(|(_, why)| why).next();
            return Err(why.unwrap_or_else(|| "not merged".into()));
        }
        for slot in pair {
            let place = self.members[slot].place;
            let change = SetChange::new(path.clone(), (place, place), Receive::Whole);
            merges.changes.push(change);
        }
        Ok(())
    }

    /// What each member holds at `path` once the pair holds the merge:
    /// the pair's files as found now (the others' as scanned), for the
    /// members that receive it from them.
    fn row_after(&self, path: &RelPath, pair: [usize; 2], facts: Facts) -> HeldRow {
        let at = self.held.index_of(path);
        let (parent, name) = split(path);
        let cells = (0..self.members.len())
            .map(|slot| {
                let now = self.held.now(at, slot);
                if !pair.contains(&slot) {
                    return (now.cloned(), self.held.ctime(at, slot));
                }
                let version = now.expect("a holder");
                let taken = merged_version(version, facts, self.cfg);
                let dir = self.replicas[slot].open_dir(&parent).ok();
                let found = dir.and_then(|dir| dir.stat(name).ok().flatten());
                let observed = changed_entry(&taken, found, self.cfg);
                (Some(Arc::new(observed.entry)), UNKNOWN_CTIME)
            })
            .collect();
        (path.clone(), cells)
    }
}

/// A merge's fingerprint, size and mtime.
type Facts = (accord_model::Fingerprint, u64, accord_model::Time);

/// The members in the two slots of `pair` (which differ), mutably.
fn pair_of<'a, 'r>(members: &'a mut [Member<'r>], [x, y]: [usize; 2]) -> [&'a mut Member<'r>; 2] {
    assert_ne!(x, y, "two versions have two holders");
    let (low, high) = (x.min(y), x.max(y));
    let (left, right) = members.split_at_mut(high);
    let (at_low, at_high) = (&mut left[low], &mut right[0]);
    if x < y {
        [at_low, at_high]
    } else {
        [at_high, at_low]
    }
}

/// The conflicts the program merged are no longer conflicts; each one it
/// did not merge says why.
pub(crate) fn settle_conflicts(
    conflicts: &mut Vec<SetConflictReport>,
    merged: &[RelPath],
    not_merged: Vec<(RelPath, String)>,
) {
    conflicts.retain(|conflict| merged.binary_search(&conflict.path).is_err());
    for (path, why) in not_merged {
        if let Some(conflict) = conflicts.iter_mut().find(|c| c.path == path) {
            conflict.not_merged = Some(why);
        }
    }
}
