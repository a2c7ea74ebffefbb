//! `sync_set()`: a sync of more than two replicas in one run, with the
//! semantics of the sync semantics document ("More than two replicas"):
//! version vectors per path in each replica's own archive of the set,
//! reconciled by `accord_plan::reconcile_set`.
//!
//! The steps: name the set (every root's identity, in their own order,
//! which is also the order that gives each replica its index in the
//! vectors); lock and open every replica that can be reached, in that
//! order; count this run on each (what its changes count as); scan every
//! one against its own archive (`scan.rs`); reconcile; name the copies of
//! the versions `--keep-both` keeps (`keep.rs`), and find the conflicts
//! `--merge`'s program is to merge (`merge.rs`); check the deletion guard;
//! make those copies on their holders; run the program and write each
//! result on two replicas; propagate from a holder of each
//! settled version to each replica that lacks it (`propagate.rs`), with
//! renames and hard links as for two (`renames.rs`, `plan_links`). A replica that cannot be reached does
//! not stop the others: it is listed, and catches up at its next run.

pub(crate) mod keep;
pub(crate) mod merge;
mod places;
mod premerge;
pub(crate) mod propagate;
pub(crate) mod renames;
pub(crate) mod scan;

use crate::set::places::Places;
pub use crate::set::premerge::SetMergeNow;
use crate::set::scan::{each, scan_set, Member};
use crate::sync::{dry_run_scratch, lock_in_order, SyncConfig, SyncFailure, SyncFatal};
use accord_model::{Entry, RelPath};
use accord_plan::{
    reconcile_set, MaxDelete, Outcome, Receive, SetConflict, SetInputError, SetItem, SetOptions,
    SetPlanEdit, SetPreference, Version, MAX_REPLICAS,
};
use accord_replica::{Replica, SideCause, SideFailure, SideOptions};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// One root of a set, as the caller found it.
pub struct SetRoot<'r> {
    /// As written (for messages).
    pub name: String,
    /// The replica, or why it cannot be reached with the bytes that name
    /// it in the set (for a local root, as `side::local_identity` makes
    /// them of its path).
    pub replica: Result<&'r dyn Replica, Unreached>,
}

/// A root that cannot be reached this run.
pub struct Unreached {
    pub identity: Vec<u8>,
    pub why: String,
}

/// One change made to one replica. Kept small (32 bytes): a first sync
/// of a large tree lists one per path per receiver, and they are all held
/// at the end of the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SetChange {
    pub path: RelPath,
    /// The replica changed: its place among the roots as given.
    pub on: u8,
    /// The replica the version came from (its place).
    pub from: u8,
    pub receive: Receive,
    /// `--keep-both`: a losing version kept under `path` on a replica that
    /// holds it (a hard link, nothing received; `from` is `on`).
    pub kept: bool,
    /// A rename or a hard link made instead of a transfer.
    pub via: Option<Box<Via>>,
}

/// How a change was made without sending the version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Via {
    /// A rename: the path the receiver renamed to the change's path
    /// (`receive` is `Whole`).
    Renamed(RelPath),
    /// A copy made as a hard link: the name of its group it was linked to
    /// on the receiver.
    Linked(RelPath),
}

impl SetChange {
    /// A change on the root in `on` with the version of the root in `from`
    /// (places among the roots as given; a set has at most `MAX_REPLICAS`).
    pub fn new(path: RelPath, (on, from): (usize, usize), receive: Receive) -> SetChange {
        let place = |place: usize| u8::try_from(place).expect("at most MAX_REPLICAS roots");
        SetChange {
            path,
            on: place(on),
            from: place(from),
            receive,
            kept: false,
            via: None,
        }
    }

    /// A rename: the path the receiver renamed to `path`.
    pub fn renamed_from(&self) -> Option<&RelPath> {
        match self.via.as_deref() {
            Some(Via::Renamed(from)) => Some(from),
            _ => None,
        }
    }

    /// A copy made as a hard link: the name it was linked to.
    pub fn linked_to(&self) -> Option<&RelPath> {
        match self.via.as_deref() {
            Some(Via::Linked(to)) => Some(to),
            _ => None,
        }
    }
}

/// A path that failed on one replica.
#[derive(Debug)]
pub struct SetFailure {
    pub replica: String,
    pub failure: SyncFailure,
}

/// A conflict: every replica's version, by the names of its holders.
#[derive(Clone, Debug)]
pub struct SetConflictReport {
    pub path: RelPath,
    pub reason: SetConflict,
    /// Each distinct version with the replicas that hold it (as written);
    /// `latest`: not older than another.
    pub versions: Vec<(Option<Entry>, Vec<String>, bool)>,
    /// `--merge`: why the program did not merge it, when it was given to
    /// it (or its versions' properties kept it from it).
    pub not_merged: Option<String>,
}

/// What a run of a set did.
#[derive(Debug, Default)]
pub struct SetReport {
    /// Changes made (or, in a dry run, to be made), in path order.
    pub changes: Vec<SetChange>,
    pub conflicts: Vec<SetConflictReport>,
    /// `--keep-both`: each path settled by keeping its other latest
    /// versions, and where each was kept (one entry per version), in
    /// path order.
    pub kept: Vec<(RelPath, RelPath)>,
    /// `--merge`: the paths whose versions the program merged, in path
    /// order (their changes are the result, written to each root).
    pub merged: Vec<RelPath>,
    pub errors: Vec<SetFailure>,
    /// Paths settled where every replica already held the version.
    pub agreed: u64,
    /// Files written on the replicas that received them, and their bytes
    /// (a file written on two replicas counts twice).
    pub files_written: u64,
    pub bytes_written: u64,
    /// Roots that could not be reached, with why.
    pub unreached: Vec<(String, String)>,
    pub refusal: Option<String>,
    pub fatal: Option<SyncFatal>,
    pub dry_run: bool,
    pub elapsed_s: f64,
}

impl SetReport {
    /// Everything reached agreed: no conflicts, no failures, nothing stopped.
    pub fn all_agreed(&self) -> bool {
        self.conflicts.is_empty()
            && self.errors.is_empty()
            && self.fatal.is_none()
            && self.refusal.is_none()
    }
}

/// `--prefer` and `--force` of a set, by the roots' places on the command
/// line.
#[derive(Clone, Copy, Debug, Default)]
pub struct SetPolicies {
    pub prefer: Option<SetPreference>,
    pub force: Option<usize>,
}

/// The interactive mode's edit of a set's plan, called between
/// reconciliation and propagation with the plan, by set index each
/// replica's place in the roots as given (the plan's replicas are in the
/// set's own order), and what runs the merge program on a conflict now
/// (`m`). In an edited plan, `--merge` merges only the conflicts merged so.
pub type EditSetPlan<'a> = dyn Fn(&mut SetPlanEdit<'_>, &[usize], &dyn SetMergeNow) + Sync + 'a;

/// Sync the roots of a set (at least three). `policies` name roots by
/// their place in `roots`.
pub fn sync_set(roots: &[SetRoot<'_>], cfg: &SyncConfig, policies: SetPolicies) -> SetReport {
    sync_set_edited(roots, cfg, policies, None)
}

/// `sync_set` with the plan given to `edit_plan` (when there is one)
/// before anything is changed; what it skips is left alone, as a conflict
/// is.
pub fn sync_set_edited(
    roots: &[SetRoot<'_>],
    cfg: &SyncConfig,
    policies: SetPolicies,
    edit_plan: Option<&EditSetPlan<'_>>,
) -> SetReport {
    let start = Instant::now();
    let mut report = SetReport {
        dry_run: cfg.dry_run,
        ..SetReport::default()
    };
    if let Err(fatal) = run(roots, cfg, (policies, edit_plan), &mut report) {
        report.fatal = Some(fatal);
    }
    report.elapsed_s = start.elapsed().as_secs_f64();
    report
}

/// Give back to the system the memory freed since the last call. The
/// members' scans and the receivers' propagations run on threads of their
/// own, and glibc's allocator keeps what a thread frees in that thread's
/// arena, where the next phase (on other threads) does not reuse it: a
/// first sync of three roots held 2.2 times a sync of two resident
/// rather than 1.4 times as much heap (100,000 files). Called between
/// phases and chunks; it costs a walk of the free lists.
pub(crate) fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages; it takes the
    // allocator's own locks.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn run(
    roots: &[SetRoot<'_>],
    cfg: &SyncConfig,
    (policies, edit_plan): (SetPolicies, Option<&EditSetPlan<'_>>),
    report: &mut SetReport,
) -> Result<(), SyncFatal> {
    let identities = identities(roots)?;
    let order = set_order(&identities);
    let set_name = set_identity(&identities, &order);
    let rank = |place: usize| order.iter().position(|&p| p == place).expect("every place");
    let reached: Vec<usize> = order
        .iter()
        .copied()
        .filter(|&place| roots[place].replica.is_ok())
        .collect();
    for root in roots {
        if let Err(unreached) = &root.replica {
            report
                .unreached
                .push((root.name.clone(), unreached.why.clone()));
        }
    }
    if reached.len() < 2 {
        return Err(SyncFatal::Unreachable(
            "fewer than two of the roots can be reached (run again once two or more can)".into(),
        ));
    }
    let replicas: Vec<&dyn Replica> = reached
        .iter()
        .map(|&place| *roots[place].replica.as_ref().ok().expect("reached"))
        .collect();
    lock_in_order(&replicas)?;
    // Copied under the locks: no other run writes them meanwhile.
    let archives = replicas
        .iter()
        .zip(&reached)
        .map(|(&replica, &place)| (replica, identities[place].as_slice(), set_name.as_slice()));
    let scratch = dry_run_scratch(archives, cfg)?;
    let archive_dir = scratch
        .as_ref()
        .map_or(cfg.state_dir.as_path(), |s| s.dir());
    let opening = (roots, reached.as_slice(), set_name.as_slice(), archive_dir);
    let mut members = open_members(&replicas, opening, cfg, rank)?;
    let opts = SideOptions {
        detect: cfg.detect_options(),
        use_archive: true,
    };
    let mut scanned = scan_set(&mut members, &opts)?;
    release_freed_memory();
    let options = SetOptions {
        set_size: roots.len(),
        props: cfg.synced_props(),
        prefer: policies.prefer.map(|p| match p {
            SetPreference::Replica(place) => SetPreference::Replica(rank(place)),
            other => other,
        }),
        force: policies.force.map(rank),
        keep_both: cfg.keep_both,
    };
    let mut items =
        reconcile_set(&scanned.paths, &options).map_err(|e| input_fatal(e, roots, &order))?;
    let mut quit = false;
    let mut premerged = None;
    if let Some(edit_plan) = edit_plan {
        // Not shown a plan the guard refuses; it checks the edited one below.
        if let Err(refusal) = guard(&items, &members, &scanned, cfg.max_delete) {
            report.refusal = Some(refusal);
            return Ok(());
        }
        let premerger = premerge::SetPremerger {
            replicas: &replicas,
            members: &members,
            scanned: &scanned,
            place_of: &order,
            cfg,
            results: Default::default(),
        };
        let mut edit = SetPlanEdit::new(&scanned.paths, options, items);
        edit_plan(&mut edit, &order, &premerger);
        quit = edit.quit();
        (items, _) = edit.into_items();
        premerged = Some(premerger.into_results());
    }
    let props = options.props;
    let kept = keep::name_copies(&replicas, &members, &scanned, &mut items, &order, &props);
    let mut not_merged = Vec::new();
    // A person who quit changes nothing: the conflicts left are listed.
    let mut to_merge = match cfg.merge.is_some() && !cfg.dry_run && !quit {
        true => merge::candidates(&items, &members, &scanned, &order, cfg, &mut not_merged),
        false => Vec::new(),
    };
    if let Some(chosen) = &premerged {
        // An edited plan: only what the person merged (`m`).
        to_merge.retain(|candidate| chosen.contains_key(&candidate.path));
        not_merged.retain(|(path, _)| chosen.contains_key(path));
    }
    let names: Vec<String> = order
        .iter()
        .map(|&place| roots[place].name.clone())
        .collect();
    report.conflicts = conflicts_of(&items, &names);
    report.errors = std::mem::take(&mut scanned.failures);
    if let Err(refusal) = guard(&items, &members, &scanned, cfg.max_delete) {
        report.refusal = Some(refusal);
        return Ok(());
    }
    report.agreed = agreed(&items);
    let places = Places::of(order.iter().map(|&place| {
        let replica = roots[place].replica.as_ref().ok().copied();
        (replica, identities[place].as_slice())
    }));
    if cfg.dry_run {
        report.changes = would_change(&items, &order, &places);
        report.changes.extend(keep::would_link(&kept, &members));
        report.kept = keep::kept_paths(&kept, &items);
        sort_changes(&mut report.changes);
        return Ok(());
    }
    let mut held = scanned.hold();
    release_freed_memory();
    let linked = keep::link_copies(&replicas, &members, &kept, &mut items, &mut held, cfg);
    report.errors.extend(linked.failures);
    report.kept = keep::kept_paths(&kept, &items);
    let unread: Vec<RelPath> = report
        .errors
        .iter()
        .map(|e| e.failure.path.clone())
        .collect();
    let merges = merge::Merging {
        replicas: &replicas,
        members: &mut members,
        items: &mut items,
        held: &mut held,
        cfg,
        premerged: premerged.unwrap_or_default(),
    }
    .merge_all(&to_merge);
    report.errors.extend(merges.failures);
    not_merged.extend(merges.not_merged);
    merge::settle_conflicts(&mut report.conflicts, &merges.merged, not_merged);
    report.merged = merges.merged;
    let plan = (items.as_slice(), &held);
    let carried = propagate::carry_out(&replicas, &mut members, plan, &places, cfg, &unread);
    let done = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    report.files_written = done(&carried.written.files_done);
    report.bytes_written = done(&carried.written.bytes_done);
    report.changes = carried.changes;
    report.changes.extend(linked.changes);
    report.changes.extend(merges.changes);
    sort_changes(&mut report.changes);
    report.errors.extend(carried.failures);
    Ok(())
}

/// Every root's identity; two roots that are one are refused.
fn identities(roots: &[SetRoot<'_>]) -> Result<Vec<Vec<u8>>, SyncFatal> {
    if roots.len() > MAX_REPLICAS {
        return Err(SyncFatal::Unreachable(format!(
            "a sync takes at most {MAX_REPLICAS} roots"
        )));
    }
    let mut identities = Vec::with_capacity(roots.len());
    for root in roots {
        identities.push(match &root.replica {
            Ok(replica) => replica.sync_identity().map_err(|e| SyncFatal::Side {
                replica: root.name.clone(),
                failure: SideFailure::Failed(SideCause::Identity(e)),
            })?,
            Err(unreached) => unreached.identity.clone(),
        });
    }
    let mut sorted = identities.clone();
    sorted.sort();
    if sorted.windows(2).any(|pair| pair[0] == pair[1]) {
        return Err(SyncFatal::SameRoot);
    }
    Ok(identities)
}

/// The roots' places in the order of their identities: the set's order.
fn set_order(identities: &[Vec<u8>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..identities.len()).collect();
    order.sort_by(|&x, &y| identities[x].cmp(&identities[y]));
    order
}

/// The bytes that name the set in each replica's archive file: every
/// root's identity in the set's order, each preceded by its length.
fn set_identity(identities: &[Vec<u8>], order: &[usize]) -> Vec<u8> {
    let mut name = b"accord set 1\0".to_vec();
    for &place in order {
        name.extend_from_slice(&(identities[place].len() as u64).to_le_bytes());
        name.extend_from_slice(&identities[place]);
    }
    name
}

/// What opens the members: the roots, the places of those reached, the
/// set's name, and the directory of this host's archives.
type Opening<'o> = (
    &'o [SetRoot<'o>],
    &'o [usize],
    &'o [u8],
    &'o std::path::Path,
);

/// Open every reached replica's side (in the set's order), give it the
/// ignore rules, and count this run on it.
fn open_members<'r>(
    replicas: &[&'r dyn Replica],
    (roots, reached, set_name, archive_dir): Opening<'_>,
    cfg: &SyncConfig,
    rank: impl Fn(usize) -> usize,
) -> Result<Vec<Member<'r>>, SyncFatal> {
    let mut members = Vec::with_capacity(reached.len());
    for (replica, &place) in replicas.iter().zip(reached) {
        let name = roots[place].name.clone();
        let fail = |failure| SyncFatal::Side {
            replica: name.clone(),
            failure,
        };
        let side =
            replica
                .open_set_side(set_name, archive_dir)
                .map_err(|failure| match failure {
                    SideFailure::Failed(SideCause::Unsupported) => SyncFatal::Side {
                        replica: name.clone(),
                        failure: SideFailure::said(
                            "this root cannot take part in a sync of more than two roots; \
                         sync it with one other root in a run of two",
                        ),
                    },
                    failure => fail(failure),
                })?;
        members.push(Member {
            side,
            index: rank(place),
            place,
            name,
            change_count: 0,
        });
    }
    let counts = each(&mut members, |member| {
        member.side.set_rules(&cfg.rules)?;
        member.side.count_run()
    });
    for (member, count) in members.iter_mut().zip(counts) {
        member.change_count = count.map_err(|failure| SyncFatal::Side {
            replica: member.name.clone(),
            failure,
        })?;
    }
    Ok(members)
}

fn input_fatal(error: SetInputError, roots: &[SetRoot<'_>], order: &[usize]) -> SyncFatal {
    let why = match error {
        SetInputError::ForcedAbsent(rank) => format!(
            "--force names {}, which cannot be reached",
            roots[order[rank]].name
        ),
        SetInputError::SetSize(size) => {
            format!("a sync takes 2 to {MAX_REPLICAS} roots, not {size}")
        }
        SetInputError::OutOfOrder(path)
        | SetInputError::Offers(path)
        | SetInputError::StaleCount(path) => format!(
            "the roots' scans disagree at {} (a bug of accord; please report it)",
            path.display()
        ),
    };
    SyncFatal::Unreachable(why)
}

fn conflicts_of(items: &[SetItem], names: &[String]) -> Vec<SetConflictReport> {
    items
        .iter()
        .filter_map(|item| match &item.outcome {
            Outcome::Conflict { reason, versions } => Some(SetConflictReport {
                path: item.path.clone(),
                reason: *reason,
                versions: versions.iter().map(|v| version_of(v, names)).collect(),
                not_merged: None,
            }),
            Outcome::Settled(_) => None,
        })
        .collect()
}

fn version_of(version: &Version, names: &[String]) -> (Option<Entry>, Vec<String>, bool) {
    (
        version.entry.as_deref().cloned(),
        version.holders.iter().map(|&h| names[h].clone()).collect(),
        version.latest,
    )
}

fn agreed(items: &[SetItem]) -> u64 {
    let agreed = items.iter().filter(|item| match &item.outcome {
        Outcome::Settled(settled) => settled.receivers.is_empty(),
        Outcome::Conflict { .. } => false,
    });
    agreed.count() as u64
}

/// Changes in path order, then by the replica changed (a real run's and
/// a dry run's alike).
fn sort_changes(changes: &mut [SetChange]) {
    // In place: a first sync's changes are many, and no two name one path
    // on one root.
    changes.sort_unstable_by(|x, y| x.path.cmp(&y.path).then(x.on.cmp(&y.on)));
}

/// A dry run's changes: what each receiver would take, and from which
/// holder (`Places::source_for`); `order`: each set index's place among
/// the roots as given.
fn would_change(items: &[SetItem], order: &[usize], places: &Places) -> Vec<SetChange> {
    let mut changes = Vec::new();
    for item in items {
        let Outcome::Settled(settled) = &item.outcome else {
            continue;
        };
        for &(receiver, receive) in &settled.receivers {
            let source = places.source_for(settled.holders.iter().copied(), receiver);
            let (on, from) = (order[receiver], order[source]);
            changes.push(SetChange::new(item.path.clone(), (on, from), receive));
        }
    }
    changes
}

/// The deletion guard of each replica, as for two: a replica found empty
/// that held entries at its last run never makes the others delete, and
/// no replica loses more than `--max-delete` of its entries.
fn guard(
    items: &[SetItem],
    members: &[Member<'_>],
    scanned: &scan::Scanned,
    max_delete: MaxDelete,
) -> Result<(), String> {
    let deletions_on = |index: usize| {
        let deletes = |item: &&SetItem| match &item.outcome {
            Outcome::Settled(settled) => settled
                .receivers
                .iter()
                .any(|&(r, receive)| r == index && receive == Receive::Delete),
            Outcome::Conflict { .. } => false,
        };
        items.iter().filter(deletes).count()
    };
    let any_deletion = members.iter().any(|m| deletions_on(m.index) > 0);
    for (member, counts) in members.iter().zip(&scanned.counts) {
        if counts.scanned == 0 && counts.archived > 0 && any_deletion {
            return Err(format!(
                "replica {} is empty but held {} entries at its last sync; nothing was changed \
                 (is it mounted?)",
                member.name, counts.archived
            ));
        }
    }
    for (member, counts) in members.iter().zip(&scanned.counts) {
        let would_delete = deletions_on(member.index);
        let limit = match max_delete {
            MaxDelete::Count(count) => count,
            MaxDelete::Fraction(fraction) => (counts.scanned as f64 * fraction).floor() as usize,
        };
        if would_delete > limit {
            return Err(format!(
                "the sync would delete {would_delete} of replica {}'s {} entries, more than \
                 the limit of {limit} (--max-delete)",
                member.name, counts.scanned
            ));
        }
    }
    Ok(())
}
