//! Reconciliation of a set of more than two replicas (the sync semantics
//! document, "More than two replicas"): from what each replica that took
//! part holds at a path, and the version vector its archive recorded
//! there, to the version every one of them holds after the run.
//!
//! Per path ([`settle_path`]):
//! - each replica *offers* what it holds now, with its archive's vector;
//!   a replica whose detection found an update offers that vector with a
//!   change of its own, counted by the replica's count of its runs
//!   ([`Offer::vector`]);
//! - the *latest* offers are those whose vector no other vector strictly
//!   includes. One version among them (however many hold it): it is
//!   settled, every replica that holds something else receives it, and
//!   every replica records it with the vectors merged. A replica that
//!   missed runs offers an older vector, which the newer ones include, so
//!   it catches up without a conflict; the same change made on several
//!   replicas agrees silently;
//! - several versions among the latest: one conflict, listing every
//!   replica's version, left alone (records untouched) unless a policy
//!   decides it.
//!
//! A deletion is a version like any other, and its record (a vector
//! without an entry) is kept: a replica that was away when the path was
//! deleted learns of the deletion from it, where without it the replica's
//! old copy would look new and come back.
//!
//! Over the tree ([`reconcile_set`]), as for two replicas: a directory
//! removed (deleted, or replaced by a non-directory) while a path beneath
//! it is in conflict or still holds something after the run is one
//! conflict over the whole directory; so is any conflict over a path that
//! is not a directory on every replica. Nothing beneath a conflict that
//! covers its subtree is changed or recorded.
//!
//! Where this differs from two replicas (`reconcile.rs`) on purpose: the
//! contents changed on one replica and the permissions on another are a
//! conflict here (there, both changes are kept); with more than two
//! versions there is no common base to merge them against. Unison's
//! reconciler reports that case as a conflict too.

use crate::detect::{SyncedProps, Update};
use crate::reconcile::{is_update, same_contents, same_props};
use crate::version_vector::{VersionVector, MAX_REPLICAS};
use accord_model::{Entry, Kind, RelPath};
use std::sync::Arc;

/// What one replica that took part in the run holds at one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Offer {
    /// Its index in the set.
    pub replica: usize,
    /// Its update detection's answer against its own archive.
    pub update: Update,
    /// What it holds now; a regular file carries its fingerprint (from
    /// detection, or from the archive when its contents did not change).
    pub now: Option<Arc<Entry>>,
    /// The vector its archive recorded at the path (empty: no record).
    pub recorded: VersionVector,
    /// The entry its archive recorded there: what a change was made from
    /// (None: no record, or a deletion recorded).
    pub base: Option<Arc<Entry>>,
    /// What this run counts a change of this replica as: the replica's
    /// count of its runs, raised and kept in its archive before the run
    /// records anything, so that it is above every count of this replica
    /// any archive holds.
    pub change_count: u64,
}

impl Offer {
    /// The vector of the version offered: the record's, with a change of
    /// this replica's when it made one.
    pub fn vector(&self) -> VersionVector {
        if is_update(&self.update) {
            self.recorded.with_change(self.replica, self.change_count)
        } else {
            self.recorded.clone()
        }
    }

    pub(crate) fn is_dir(&self) -> bool {
        self.now
            .as_ref()
            .is_some_and(|entry| entry.kind == Kind::Dir)
    }
}

/// Every offer at one path: one per replica that took part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathOffers {
    pub path: RelPath,
    pub offers: Vec<Offer>,
}

/// One version held at a path, and which replicas hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// None: the path is absent there.
    pub entry: Option<Arc<Entry>>,
    /// Replica indices, increasing.
    pub holders: Vec<usize>,
    /// Is it one of the latest versions (no other vector includes its
    /// holders' vectors)? A conflict is between latest versions; an older
    /// one is listed so that a person sees every replica.
    pub latest: bool,
}

/// What a replica that does not hold the settled version must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Receive {
    /// Take the settled entry whole (kind, contents, properties).
    Whole,
    /// The contents are equal: take its properties.
    Props,
    /// Remove what it holds.
    Delete,
}

/// The version every replica that took part holds after the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settled {
    /// None: the path is gone.
    pub entry: Option<Arc<Entry>>,
    /// The replicas that hold it already (a transfer reads from one of
    /// them: the nearest to each receiver).
    pub holders: Vec<usize>,
    /// The others, and what each must do.
    pub receivers: Vec<(usize, Receive)>,
    /// What every replica that took part records with it (with no entry
    /// when the path is gone).
    pub vector: VersionVector,
    /// `--keep-both`: the other latest versions, each to be kept beside
    /// the path under a name of its own on every replica (empty
    /// otherwise).
    pub kept: Vec<Version>,
}

/// Why a path is a conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SetConflict {
    /// Two or more replicas changed the path apart, to different versions.
    ChangedApart,
    /// A directory was removed on a replica while a path beneath it was
    /// changed or created on another: the conflict is the whole directory.
    ChangedBeneathRemovedDirectory,
}

/// What a run does at one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Settled(Settled),
    /// Left alone everywhere: nothing changed, nothing recorded.
    Conflict {
        reason: SetConflict,
        versions: Vec<Version>,
    },
}

/// `--prefer` for a set: how a conflict is resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SetPreference {
    /// This replica's version.
    Replica(usize),
    /// The latest version with the latest mtime; against a deletion, what
    /// still exists. A tie leaves the conflict.
    Newer,
    /// The latest version with the earliest mtime. A deletion among the
    /// latest versions, or a tie, leaves the conflict.
    Older,
}

/// A policy that decided a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SetPolicy {
    Prefer(SetPreference),
    /// `--force`: this replica's version wins everywhere this run.
    Force(usize),
    /// `--keep-both`: the winner keeps the path, the other latest versions
    /// are kept beside it (`Settled::kept`).
    KeepBoth,
    /// A person chose this replica's version (the interactive mode), which
    /// is carried out as `--force` is at that path.
    Chosen(usize),
}

/// Options of a set's reconciliation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetOptions {
    /// How many replicas the set has (whether or not each took part).
    pub set_size: usize,
    pub props: SyncedProps,
    pub prefer: Option<SetPreference>,
    /// Wins over `prefer` and `keep_both`. The replica must have taken
    /// part.
    pub force: Option<usize>,
    /// `--keep-both`: a conflict between versions that are all present,
    /// none a directory, each with contents of its own, is settled to one
    /// of them (`--prefer`'s when it decides, else the newest), the others
    /// kept (see [`keep_both_winner`]).
    pub keep_both: bool,
}

/// One item of a set's plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetItem {
    pub path: RelPath,
    pub outcome: Outcome,
    /// Set when a policy settled a path reconciliation would have left as
    /// a conflict, or (`--force`) settled otherwise.
    pub decided_by: Option<SetPolicy>,
}

/// Input that breaks the rules [`reconcile_set`] relies on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetInputError {
    /// A set of fewer than two or more than [`MAX_REPLICAS`] replicas.
    SetSize(usize),
    /// Paths not in strictly increasing `RelPath` order.
    OutOfOrder(RelPath),
    /// A path without one offer from each replica that took part, in the
    /// same order as the first path's, or with an index outside the set.
    Offers(RelPath),
    /// `--force` names a replica that did not take part.
    ForcedAbsent(usize),
    /// A replica's change count is not above its own count in its record.
    StaleCount(RelPath),
}

/// Reconcile every path where a replica has an update or the replicas'
/// records differ, given in `RelPath` order with one offer per replica
/// that took part (the same replicas, in the same order, at every path).
pub fn reconcile_set(
    paths: &[PathOffers],
    options: &SetOptions,
) -> Result<Vec<SetItem>, SetInputError> {
    check_input(paths, options)?;
    // Each path settled on its own first, then planned in place: the plan
    // at a path replaces what was found there (a conflict over a subtree
    // takes its subtree's slots), so a plan of many paths is built without
    // a second table beside the first or a copy of each outcome.
    let mut items: Vec<SetItem> = paths
        .iter()
        .map(|at| SetItem {
            path: at.path.clone(),
            outcome: settle_path(&at.offers, &options.props),
            decided_by: None,
        })
        .collect();
    let (mut index, mut planned) = (0, 0);
    while index < paths.len() {
        (index, planned) = plan_at(paths, &mut items, (index, planned), options);
    }
    items.truncate(planned);
    Ok(items)
}

fn check_input(paths: &[PathOffers], options: &SetOptions) -> Result<(), SetInputError> {
    if !(2..=MAX_REPLICAS).contains(&options.set_size) {
        return Err(SetInputError::SetSize(options.set_size));
    }
    if let Some(pair) = paths.windows(2).find(|pair| pair[0].path >= pair[1].path) {
        return Err(SetInputError::OutOfOrder(pair[1].path.clone()));
    }
    let Some(first) = paths.first() else {
        return Ok(());
    };
    let took_part: Vec<usize> = first.offers.iter().map(|offer| offer.replica).collect();
    let valid = |at: &PathOffers| {
        at.offers.len() == took_part.len()
            && at
                .offers
                .iter()
                .zip(&took_part)
                .all(|(offer, &replica)| offer.replica == replica)
    };
    let mut sorted = took_part.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.len() != took_part.len() || sorted.iter().any(|&r| r >= options.set_size) {
        return Err(SetInputError::Offers(first.path.clone()));
    }
    if let Some(bad) = paths.iter().find(|at| !valid(at)) {
        return Err(SetInputError::Offers(bad.path.clone()));
    }
    let stale = |offer: &Offer| offer.change_count <= offer.recorded.count(offer.replica);
    if let Some(bad) = paths.iter().find(|at| at.offers.iter().any(stale)) {
        return Err(SetInputError::StaleCount(bad.path.clone()));
    }
    match options.force {
        Some(replica) if !took_part.contains(&replica) => Err(SetInputError::ForcedAbsent(replica)),
        _ => Ok(()),
    }
}

/// Plan `paths[index]` (and its subtree when a conflict covers it).
/// `items` holds, from `index` on, what `settle_path` found at each path;
/// the plan goes to `items[planned..]` (never past `index`: a path is
/// planned into at most one slot). Returns the index of the next path to
/// plan and the next slot.
fn plan_at(
    paths: &[PathOffers],
    items: &mut [SetItem],
    (index, planned): (usize, usize),
    options: &SetOptions,
) -> (usize, usize) {
    let at = &paths[index];
    let end = subtree_end(paths, index);
    let conflict = match &items[index].outcome {
        _ if options.force.is_some() => None,
        Outcome::Conflict { reason, .. } => Some(*reason),
        Outcome::Settled(settled)
            if removes_directory(&at.offers, settled, &items[index + 1..end]) =>
        {
            Some(SetConflict::ChangedBeneathRemovedDirectory)
        }
        Outcome::Settled(_) => None,
    };
    let keep = keep_both_winner(at, conflict, options);
    let winner = match keep {
        Some(replica) => Some((replica, SetPolicy::KeepBoth)),
        None => policy_winner(at, conflict, options),
    };
    let covers = conflict.is_some() && !at.offers.iter().all(Offer::is_dir);
    let to = if covers { end } else { index + 1 };
    match (conflict, winner) {
        (_, Some((replica, policy))) => {
            for (offset, beneath) in paths[index..to].iter().enumerate() {
                let found = take_found(&mut items[index + offset]);
                // The conflict over a directory is the tree's, not its own.
                let decided = (offset == 0 && conflict.is_some()) || found_differs(&found, replica);
                items[planned + offset] = if decided {
                    let mut settled = make_equal_to(replica, &beneath.offers, &options.props);
                    if offset == 0 && keep.is_some() {
                        settled.kept = losing_versions(&beneath.offers, replica, &options.props);
                    }
                    SetItem {
                        path: beneath.path.clone(),
                        outcome: Outcome::Settled(settled),
                        decided_by: Some(policy),
                    }
                } else {
                    SetItem {
                        path: beneath.path.clone(),
                        outcome: found,
                        decided_by: None,
                    }
                };
            }
            (to, planned + (to - index))
        }
        (Some(reason), None) => {
            items[planned] = SetItem {
                path: at.path.clone(),
                outcome: conflict_outcome(&at.offers, reason, &options.props),
                decided_by: None,
            };
            (to, planned + 1)
        }
        (None, None) => {
            let found = take_found(&mut items[index]);
            items[planned] = SetItem {
                path: at.path.clone(),
                outcome: found,
                decided_by: None,
            };
            (to, planned + 1)
        }
    }
}

/// What `settle_path` found in a slot of [`plan_at`]'s table, leaving an
/// empty outcome (no allocation) in its place.
fn take_found(item: &mut SetItem) -> Outcome {
    let empty = Outcome::Conflict {
        reason: SetConflict::ChangedApart,
        versions: Vec::new(),
    };
    std::mem::replace(&mut item.outcome, empty)
}

/// Did reconciliation find something other than making every replica
/// equal to `replica` at this path (so that a policy decides it)?
fn found_differs(found: &Outcome, replica: usize) -> bool {
    match found {
        Outcome::Conflict { .. } => true,
        Outcome::Settled(settled) => !settled.holders.contains(&replica),
    }
}

/// The index just past the subtree of `paths[index]`.
pub(crate) fn subtree_end(paths: &[PathOffers], index: usize) -> usize {
    let dir = &paths[index].path;
    index
        + 1
        + paths[index + 1..]
            .iter()
            .take_while(|beneath| beneath.path.starts_with(dir))
            .count()
}

/// Does settling this path remove a directory some replica holds while
/// something beneath it is in conflict or still held after the run?
fn removes_directory(offers: &[Offer], settled: &Settled, beneath: &[SetItem]) -> bool {
    let settles_a_dir = settled.entry.as_ref().is_some_and(|e| e.kind == Kind::Dir);
    !settles_a_dir
        && offers.iter().any(Offer::is_dir)
        && beneath.iter().any(|item| match &item.outcome {
            Outcome::Conflict { .. } => true,
            Outcome::Settled(settled) => settled.entry.is_some(),
        })
}

/// The vector of each offer's version, as reconciliation compares them.
///
/// A replica whose change made its path equal to a version another replica
/// holds unchanged, and whose record that version's vector adds to, made no
/// change of its own: it took a version that already was (the same edit
/// made on two replicas in runs apart, one of them agreed on meanwhile).
/// Its offer carries that version's vector rather than a new change, so
/// that a replica which based a later change on that version is seen to
/// come after it. (Counted as a change of its own, the two would look made
/// apart, and that later change a conflict Unison's state-based rule does
/// not make.) A change back to a version its record already includes is a
/// change: the vector says nothing new about it.
///
/// And a change made from what another replica holds now (its record's
/// version equals that replica's) includes that replica's vector: the
/// other replica holds the very state this change was made from, and
/// whatever it did to get there (a file made and deleted again, a change
/// undone) this change undoes nothing of it.
pub fn offered_vectors(offers: &[Offer], synced: &SyncedProps) -> Vec<VersionVector> {
    let taken: Vec<Option<VersionVector>> = offers
        .iter()
        .map(|offer| version_taken(offers, offer, synced))
        .collect();
    let first: Vec<VersionVector> = offers
        .iter()
        .zip(&taken)
        .map(|(offer, taken)| taken.clone().unwrap_or_else(|| offer.vector()))
        .collect();
    // A change made from what another replica holds now comes after that
    // replica's version, whatever its history: Unison's rule is the
    // states', and that replica made no change this one would undo.
    offers
        .iter()
        .zip(&taken)
        .enumerate()
        .map(|(i, (offer, taken))| {
            let changed = is_update(&offer.update) && taken.is_none();
            let from_base = (0..offers.len()).filter(|&j| {
                changed
                    && j != i
                    && same_version(offers[j].now.as_deref(), offer.base.as_deref(), synced)
            });
            from_base.fold(first[i].clone(), |v, j| v.merged(&first[j]))
        })
        .collect()
}

/// The vector of a version `offer`'s change took from another replica
/// that holds it unchanged, when that adds to its own record (see
/// [`offered_vectors`]).
fn version_taken(offers: &[Offer], offer: &Offer, synced: &SyncedProps) -> Option<VersionVector> {
    if !is_update(&offer.update) {
        return None;
    }
    let held_unchanged = offers.iter().filter(|other| {
        !is_update(&other.update)
            && same_version(other.now.as_deref(), offer.now.as_deref(), synced)
    });
    let taken = held_unchanged.fold(offer.recorded.clone(), |v, other| v.merged(&other.recorded));
    taken.strictly_includes(&offer.recorded).then_some(taken)
}

/// Settle one path on its own (without regard to its subtree).
pub fn settle_path(offers: &[Offer], synced: &SyncedProps) -> Outcome {
    let vectors = offered_vectors(offers, synced);
    let latest: Vec<usize> = (0..offers.len())
        .filter(|&i| {
            !vectors
                .iter()
                .any(|other| other.strictly_includes(&vectors[i]))
        })
        .collect();
    let winner = latest[0];
    let one_version = latest.iter().all(|&i| {
        same_version(
            offers[i].now.as_deref(),
            offers[winner].now.as_deref(),
            synced,
        )
    });
    if !one_version {
        return conflict_outcome(offers, SetConflict::ChangedApart, synced);
    }
    let vector = vectors
        .iter()
        .fold(VersionVector::default(), |merged, v| merged.merged(v));
    Outcome::Settled(settled_as(offers, winner, vector, synced))
}

/// Every replica made equal to what `offers[winner]` holds, recording
/// `vector`.
fn settled_as(
    offers: &[Offer],
    winner: usize,
    vector: VersionVector,
    synced: &SyncedProps,
) -> Settled {
    let entry = offers[winner].now.clone();
    let mut holders = Vec::new();
    let mut receivers = Vec::new();
    for offer in offers {
        let held = offer.now.as_deref();
        if same_version(held, entry.as_deref(), synced) {
            holders.push(offer.replica);
        } else {
            receivers.push((offer.replica, receive(held, entry.as_deref())));
        }
    }
    holders.sort_unstable();
    receivers.sort_unstable_by_key(|&(replica, _)| replica);
    Settled {
        entry,
        holders,
        receivers,
        vector,
        kept: Vec::new(),
    }
}

fn receive(held: Option<&Entry>, settled: Option<&Entry>) -> Receive {
    match settled {
        None => Receive::Delete,
        Some(_) if same_contents(held, settled) => Receive::Props,
        Some(_) => Receive::Whole,
    }
}

/// Are these the same version: the same contents and synced properties,
/// or both absent?
pub fn same_version(x: Option<&Entry>, y: Option<&Entry>, synced: &SyncedProps) -> bool {
    match (x, y) {
        (Some(x), Some(y)) => same_contents(Some(x), Some(y)) && same_props(x, y, synced),
        (x, y) => x.is_none() && y.is_none(),
    }
}

/// Every replica made equal to `replica`'s version, by a policy: the
/// vector includes every offer's and a change of the winner's, so that no
/// replica's older record can later look as new as the result.
fn make_equal_to(replica: usize, offers: &[Offer], synced: &SyncedProps) -> Settled {
    let winner = offers
        .iter()
        .position(|offer| offer.replica == replica)
        .expect("a policy's winner took part (checked)");
    let merged = offered_vectors(offers, synced)
        .iter()
        .fold(VersionVector::default(), |merged, v| merged.merged(v));
    let count = offers[winner].change_count;
    let vector = if merged.count(replica) < count {
        merged.with_change(replica, count)
    } else {
        merged
    };
    settled_as(offers, winner, vector, synced)
}

/// The versions of a conflict: each distinct one with its holders.
fn conflict_outcome(offers: &[Offer], reason: SetConflict, synced: &SyncedProps) -> Outcome {
    let vectors = offered_vectors(offers, synced);
    let mut versions: Vec<Version> = Vec::new();
    for (i, offer) in offers.iter().enumerate() {
        let latest = !vectors
            .iter()
            .any(|other| other.strictly_includes(&vectors[i]));
        let held = offer.now.as_deref();
        match versions
            .iter_mut()
            .find(|v| same_version(v.entry.as_deref(), held, synced))
        {
            Some(version) => {
                version.holders.push(offer.replica);
                version.latest |= latest;
            }
            None => versions.push(Version {
                entry: offer.now.clone(),
                holders: vec![offer.replica],
                latest,
            }),
        }
    }
    for version in &mut versions {
        version.holders.sort_unstable();
    }
    Outcome::Conflict { reason, versions }
}

/// The replica a policy makes win at `at`: `--force` everywhere,
/// `--prefer` on the conflicts it can decide.
fn policy_winner(
    at: &PathOffers,
    conflict: Option<SetConflict>,
    options: &SetOptions,
) -> Option<(usize, SetPolicy)> {
    if let Some(replica) = options.force {
        return Some((replica, SetPolicy::Force(replica)));
    }
    let preference = options.prefer?;
    let reason = conflict?;
    let replica = match preference {
        SetPreference::Replica(replica) => at
            .offers
            .iter()
            .any(|o| o.replica == replica)
            .then_some(replica),
        // Over a whole directory the versions' times say nothing of what
        // beneath them changed last: only a named replica decides.
        _ if reason == SetConflict::ChangedBeneathRemovedDirectory => None,
        SetPreference::Newer | SetPreference::Older => {
            by_mtime(&at.offers, preference, &options.props)
        }
    }?;
    Some((replica, SetPolicy::Prefer(preference)))
}

/// The replica whose version keeps the path when `--keep-both` settles the
/// conflict at `at`: the conflict is between latest versions that are all
/// present, none of them a directory (nor is any older one: a directory's
/// subtree is not a version to keep), and no two of them with the same
/// contents (a conflict over properties only has nothing to keep). The
/// winner: `--prefer`'s when it names a replica holding a latest version
/// or decides by mtime; else the version with the newest mtime, on a tie
/// the one held by the first replica in the set's order. `None`: the
/// option is off, `--force` decides, or the conflict is not of that kind.
fn keep_both_winner(
    at: &PathOffers,
    conflict: Option<SetConflict>,
    options: &SetOptions,
) -> Option<usize> {
    if !options.keep_both
        || options.force.is_some()
        || conflict != Some(SetConflict::ChangedApart)
        || at.offers.iter().any(Offer::is_dir)
    {
        return None;
    }
    let latest = latest_versions(&at.offers, &options.props);
    let apart = latest.iter().enumerate().all(|(i, x)| {
        x.entry.is_some()
            && latest[i + 1..]
                .iter()
                .all(|y| !same_contents(x.entry.as_deref(), y.entry.as_deref()))
    });
    if !apart {
        return None;
    }
    let preferred = options.prefer.and_then(|preference| match preference {
        SetPreference::Replica(replica) => latest
            .iter()
            .any(|v| v.holders.contains(&replica))
            .then_some(replica),
        SetPreference::Newer | SetPreference::Older => {
            by_mtime(&at.offers, preference, &options.props)
        }
    });
    preferred.or_else(|| newest(&latest))
}

/// The first holder of the version with the newest mtime; on a tie, the
/// version whose first holder comes first in the set's order.
fn newest(versions: &[Version]) -> Option<usize> {
    let time = |v: &Version| v.entry.as_ref().map(|entry| entry.props.mtime);
    versions
        .iter()
        .filter(|v| v.entry.is_some())
        .min_by_key(|v| (std::cmp::Reverse(time(v)), v.holders[0]))
        .map(|v| v.holders[0])
}

/// The distinct latest versions at a path, each with its holders.
fn latest_versions(offers: &[Offer], synced: &SyncedProps) -> Vec<Version> {
    match conflict_outcome(offers, SetConflict::ChangedApart, synced) {
        Outcome::Conflict { versions, .. } => versions.into_iter().filter(|v| v.latest).collect(),
        Outcome::Settled(_) => unreachable!("conflict_outcome lists versions"),
    }
}

/// The latest versions `--keep-both` keeps beside the path: all but the
/// winner's.
fn losing_versions(offers: &[Offer], winner: usize, synced: &SyncedProps) -> Vec<Version> {
    let mut versions = latest_versions(offers, synced);
    versions.retain(|v| !v.holders.contains(&winner));
    versions
}

/// The replica holding the latest version with the latest (`Newer`) or
/// earliest (`Older`) mtime, when exactly one version has it.
fn by_mtime(offers: &[Offer], preference: SetPreference, synced: &SyncedProps) -> Option<usize> {
    let vectors = offered_vectors(offers, synced);
    let latest: Vec<&Offer> = (0..offers.len())
        .filter(|&i| {
            !vectors
                .iter()
                .any(|other| other.strictly_includes(&vectors[i]))
        })
        .map(|i| &offers[i])
        .collect();
    let present: Vec<&Offer> = latest.iter().copied().filter(|o| o.now.is_some()).collect();
    if present.len() < latest.len() && preference == SetPreference::Older {
        return None;
    }
    let time = |offer: &Offer| offer.now.as_ref().map(|entry| entry.props.mtime);
    let best = match preference {
        SetPreference::Older => present.iter().filter_map(|o| time(o)).min(),
        _ => present.iter().filter_map(|o| time(o)).max(),
    }?;
    let mut at_best = present.iter().filter(|o| time(o) == Some(best));
    let first = at_best.next()?;
    let tie =
        at_best.any(|other| !same_version(other.now.as_deref(), first.now.as_deref(), synced));
    (!tie).then_some(first.replica)
}

#[cfg(test)]
#[path = "replica_set_tests.rs"]
mod tests;
