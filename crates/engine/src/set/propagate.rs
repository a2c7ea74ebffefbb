//! Propagation of a set's plan. Each replica that must receive something
//! takes it from one replica that holds the settled version (the first of
//! them in the set's order, so that one source gives a receiver a new
//! directory and what it holds), through the two-replica propagation
//! (`sync/propagate/`): the same checks before every change, temps and
//! renames, deletions deepest first, the same crash invariant. What it
//! records goes with the settled version's vector, in the same transaction
//! (`Versioned`).
//!
//! Each replica records a path as soon as it holds the settled version:
//! the receivers when their copy is in place, the holders once every
//! receiver has been tried. A receiver that failed keeps its older record,
//! which the holders' newer vector includes: the next run gives it the
//! version again, without a conflict.

use crate::set::scan::{Member, Scanned};
use crate::set::{SetChange, SetFailure};
use crate::sync::propagate::{propagate, Plan, Premerger};
use crate::sync::{SyncConfig, SyncHooks, SyncReport};
use accord_model::RelPath;
use accord_plan::{Action, Outcome, Receive, SetItem, Side, SyncItem, VersionVector};
use accord_replica::{
    ArchiveRecord, Replica, SideFailure, SideOptions, SideScan, SideSession, SyncRules,
};
use std::collections::BTreeMap;

/// Records written to a holder's archive per transaction.
const RECORDS_PER_BATCH: usize = 4096;

/// What propagation did.
#[derive(Default)]
pub(crate) struct Carried {
    pub changes: Vec<SetChange>,
    pub failures: Vec<SetFailure>,
    /// Files written (whole or as deltas) on every receiver, and their
    /// bytes.
    pub written: crate::Progress,
}

/// Carry out `items` on the members (`replicas` in the members' order).
pub(crate) fn carry_out(
    replicas: &[&dyn Replica],
    members: &mut [Member<'_>],
    items: &[SetItem],
    scanned: &Scanned,
    cfg: &SyncConfig,
) -> Carried {
    let vectors = Vectors(items);
    let mut carried = Carried::default();
    for receiver in 0..members.len() {
        for (source, pair_items) in receives_of(members, receiver, items, scanned) {
            let pair = Pair {
                replicas: [replicas[source], replicas[receiver]],
                slots: [source, receiver],
            };
            pair.run(members, pair_items, scanned, &vectors, cfg, &mut carried);
        }
    }
    for holder in 0..members.len() {
        record_holder(members, holder, items, scanned, &mut carried);
    }
    carried
}

/// The slot of the member with set index `index`.
fn slot_of(members: &[Member<'_>], index: usize) -> usize {
    members
        .iter()
        .position(|member| member.index == index)
        .expect("the plan names members only")
}

/// What `receiver` takes, grouped by the member it takes it from, each as
/// an item of a two-replica plan (A: the source, B: the receiver).
fn receives_of(
    members: &[Member<'_>],
    receiver: usize,
    items: &[SetItem],
    scanned: &Scanned,
) -> BTreeMap<usize, Vec<SyncItem>> {
    let mut groups: BTreeMap<usize, Vec<SyncItem>> = BTreeMap::new();
    let index = members[receiver].index;
    for item in items {
        let Outcome::Settled(settled) = &item.outcome else {
            continue;
        };
        let Some(&(_, receive)) = settled.receivers.iter().find(|(r, _)| *r == index) else {
            continue;
        };
        let source = settled
            .holders
            .iter()
            .map(|&holder| slot_of(members, holder))
            .min()
            .expect("a settled version has a holder");
        let offers = &scanned.paths[scanned.index_of(&item.path)].offers;
        let entry = |slot: usize| offers[slot].now.clone();
        let action = match receive {
            Receive::Whole => Action::Copy {
                from: Side::A,
                to: Side::B,
            },
            Receive::Props => Action::CopyProps {
                from: Side::A,
                to: Side::B,
            },
            Receive::Delete => Action::Delete { on: Side::B },
        };
        groups.entry(source).or_default().push(SyncItem {
            path: item.path.clone(),
            action,
            overridden: None,
            a: entry(source),
            b: entry(receiver),
            moved: None,
            link: None,
        });
    }
    groups
}

/// Two members, as the two-replica propagation takes them.
struct Pair<'a> {
    replicas: [&'a dyn Replica; 2],
    /// The members' slots: the source's, the receiver's.
    slots: [usize; 2],
}

impl Pair<'_> {
    fn run(
        &self,
        members: &mut [Member<'_>],
        items: Vec<SyncItem>,
        scanned: &Scanned,
        vectors: &Vectors<'_>,
        cfg: &SyncConfig,
        carried: &mut Carried,
    ) {
        let [source, receiver] = self.slots;
        let names = [members[source].name.clone(), members[receiver].name.clone()];
        let ctimes = items
            .iter()
            .map(|item| {
                let ctimes = &scanned.ctimes[scanned.index_of(&item.path)];
                (item.path.clone(), [ctimes[source], ctimes[receiver]])
            })
            .collect();
        let pair_scanned = crate::sync::scan::Scanned::of_ctimes(ctimes);
        let Ok([a, b]) = members.get_disjoint_mut([source, receiver]) else {
            unreachable!("a member never receives from itself");
        };
        let mut sides: [Box<dyn SideSession + '_>; 2] = [
            Box::new(Versioned::new(a.side.as_mut(), vectors)),
            Box::new(Versioned::new(b.side.as_mut(), vectors)),
        ];
        let premerger = Premerger::new(self.replicas, cfg);
        let kept = Default::default();
        let plan = Plan {
            items: &items,
            kept: &kept,
            premerged: &premerger,
        };
        let mut report = SyncReport::default();
        let hooks = SyncHooks {
            progress: Some(&carried.written),
            ..SyncHooks::default()
        };
        propagate(
            self.replicas,
            &mut sides,
            &pair_scanned,
            plan,
            cfg,
            &hooks,
            &mut report,
        );
        carried
            .changes
            .extend(report.propagated.into_iter().map(|change| SetChange {
                receive: receive_of(change.action),
                path: change.path,
                on: names[1].clone(),
                from: names[0].clone(),
            }));
        carried
            .failures
            .extend(report.errors.into_iter().map(|failure| SetFailure {
                replica: names[1].clone(),
                failure,
            }));
    }
}

fn receive_of(action: Action) -> Receive {
    match action {
        Action::Delete { .. } => Receive::Delete,
        Action::CopyProps { .. } => Receive::Props,
        _ => Receive::Whole,
    }
}

/// Record in `holder`'s archive every settled version it holds, with its
/// vector (what it already held, as the scan found it).
fn record_holder(
    members: &mut [Member<'_>],
    holder: usize,
    items: &[SetItem],
    scanned: &Scanned,
    carried: &mut Carried,
) {
    let index = members[holder].index;
    let mut records = Vec::new();
    let mut versions = Vec::new();
    for item in items {
        let Outcome::Settled(settled) = &item.outcome else {
            continue;
        };
        if !settled.holders.contains(&index) {
            continue;
        }
        records.push(match scanned.observed(&item.path, holder) {
            Some(observed) => ArchiveRecord::Put(observed),
            None => ArchiveRecord::Remove(item.path.clone()),
        });
        versions.push((item.path.clone(), settled.vector.clone()));
        if records.len() == RECORDS_PER_BATCH {
            write_records(&mut members[holder], &mut records, &mut versions, carried);
        }
    }
    write_records(&mut members[holder], &mut records, &mut versions, carried);
}

fn write_records(
    member: &mut Member<'_>,
    records: &mut Vec<ArchiveRecord>,
    versions: &mut Vec<(RelPath, VersionVector)>,
    carried: &mut Carried,
) {
    if records.is_empty() {
        return;
    }
    if let Err(failure) = member.side.record_versions(records, versions) {
        // The next run finds these paths as this run did, and settles
        // them again.
        let why = failure.to_string();
        carried
            .failures
            .extend(versions.iter().map(|(path, _)| SetFailure {
                replica: member.name.clone(),
                failure: crate::sync::SyncFailure {
                    path: path.clone(),
                    error: crate::sync::SyncError::Archive(SideFailure::said(why.clone())),
                },
            }));
    }
    records.clear();
    versions.clear();
}

/// The settled versions' vectors, by path (the plan is in path order).
struct Vectors<'i>(&'i [SetItem]);

impl Vectors<'_> {
    fn get(&self, path: &RelPath) -> Option<&VersionVector> {
        let index = self.0.binary_search_by(|item| item.path.cmp(path)).ok()?;
        match &self.0[index].outcome {
            Outcome::Settled(settled) => Some(&settled.vector),
            Outcome::Conflict { .. } => None,
        }
    }
}

/// A member's side whose records carry the settled versions' vectors.
struct Versioned<'s, 'v> {
    inner: &'s mut (dyn SideSession + 's),
    vectors: &'v Vectors<'v>,
}

impl<'s, 'v> Versioned<'s, 'v> {
    fn new(inner: &'s mut (dyn SideSession + 's), vectors: &'v Vectors<'v>) -> Self {
        Versioned { inner, vectors }
    }
}

impl SideSession for Versioned<'_, '_> {
    fn created(&self) -> bool {
        self.inner.created()
    }

    fn forget(&mut self) -> Result<(), SideFailure> {
        self.inner.forget()
    }

    fn set_rules(&mut self, rules: &SyncRules) -> Result<(), SideFailure> {
        self.inner.set_rules(rules)
    }

    fn scan(&mut self, opts: &SideOptions) -> Result<SideScan, SideFailure> {
        self.inner.scan(opts)
    }

    fn lookup(&mut self, paths: &[RelPath], opts: &SideOptions) -> Result<SideScan, SideFailure> {
        self.inner.lookup(paths, opts)
    }

    fn record(&mut self, records: &[ArchiveRecord]) -> Result<(), SideFailure> {
        let versions: Vec<(RelPath, VersionVector)> = records
            .iter()
            .filter_map(|record| {
                let path = match record {
                    ArchiveRecord::Put(observed) => &observed.entry.path,
                    ArchiveRecord::Remove(path) => path,
                };
                self.vectors.get(path).map(|v| (path.clone(), v.clone()))
            })
            .collect();
        self.inner.record_versions(records, &versions)
    }
}
