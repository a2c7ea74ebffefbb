//! `--keep-both` for a set: reconciliation settled a conflict to one
//! version (`Settled::kept` lists the other latest ones); each of those is
//! kept beside the path as `NAME.conflict-HOST-DATE`, one copy per losing
//! version however many replicas hold it (HOST: the host of its first
//! holder in the order the roots were written; DATE: its mtime in UTC).
//!
//! The copy is a path of the plan of its own (`name_copies`): its version
//! is the loser, its holders are the loser's, every other replica
//! receives it, and every replica records it with the path's new vector.
//! Before propagation, each holder makes it by a hard link to what it holds
//! at the path (`link_copies`, by `keep_beside` of the two-root
//! `--keep-both`), so when the winner then replaces the path there (by
//! rename, after the usual re-check) the loser is still under the new
//! name: at every moment each replica holds the path with its old or new
//! contents, and each version lives under some name. A holder that could
//! not make its link is not given the winner this run.
//!
//! A run killed half way leaves links, and perhaps copies received and
//! recorded: the next run names the copy the same way (the name depends
//! on the version only), and takes a replica that holds the loser there
//! already (its own link, or a copy of the same version) as a holder
//! rather than keeping the version a second time.

use crate::set::scan::{Held, HeldRow, Member, Scanned};
use crate::set::{SetChange, SetFailure};
use crate::sync::propagate::keep::keep_beside;
use crate::sync::propagate::keep_name::{first_accepted, host_of};
use crate::sync::{SyncConfig, SyncError, SyncFailure};
use accord_model::{Entry, Expect, Found, RelPath};
use accord_plan::replica_set::{offered_vectors, same_version};
use accord_plan::{
    settle_path, Outcome, PathOffers, Receive, SetItem, SetPolicy, Settled, SyncedProps, Version,
};
use accord_replica::side::UNKNOWN_CTIME;
use accord_replica::{Action as Step, Replica, ReplicaDir};
use std::sync::Arc;

/// One losing version kept beside its path.
pub(crate) struct KeptVersion {
    /// The path in conflict, and where the version is kept.
    of: RelPath,
    path: RelPath,
    /// The slots of the members that hold the version at `of`, and of
    /// those that hold it at `path` already (a link or a copy an
    /// interrupted run made).
    holders: Vec<usize>,
    made: Vec<usize>,
}

/// What making the copies did.
#[derive(Default)]
pub(crate) struct Linked {
    pub changes: Vec<SetChange>,
    pub failures: Vec<SetFailure>,
}

/// Name the copy of every losing version of every path `--keep-both`
/// settled, and add each copy to `items` (in path order). A path whose
/// copies cannot all be named (no free name, a replica that cannot be
/// read) is the conflict it was. `place_of`: by set index, the place of
/// the root as written.
pub(crate) fn name_copies(
    replicas: &[&dyn Replica],
    members: &[Member<'_>],
    scanned: &Scanned,
    items: &mut Vec<SetItem>,
    place_of: &[usize],
    synced: &SyncedProps,
) -> Vec<KeptVersion> {
    let mut kept = Vec::new();
    let mut added = Vec::new();
    for item in items.iter_mut() {
        let Outcome::Settled(settled) = &item.outcome else {
            continue;
        };
        if settled.kept.is_empty() {
            continue;
        }
        let at = offers_at(scanned, &item.path).expect("a settled path was scanned");
        let naming = Naming {
            replicas,
            members,
            scanned,
            at,
            place_of,
            synced,
        };
        match naming.name_all(settled, &kept) {
            Some(named) => {
                for (version, copy) in named {
                    added.push(naming.copy_item(settled, &version, &copy));
                    kept.push(copy);
                }
            }
            None => {
                item.outcome = settle_path(&at.offers, synced);
                item.decided_by = None;
            }
        }
    }
    merge_items(items, added);
    kept
}

/// What names the copies of one path's losing versions.
struct Naming<'n> {
    replicas: &'n [&'n dyn Replica],
    members: &'n [Member<'n>],
    scanned: &'n Scanned,
    /// The offers at the path, one per member (in the members' order).
    at: &'n PathOffers,
    place_of: &'n [usize],
    synced: &'n SyncedProps,
}

impl Naming<'_> {
    /// A name for every losing version, none of them a name already taken
    /// by this run (`kept`).
    fn name_all(
        &self,
        settled: &Settled,
        kept: &[KeptVersion],
    ) -> Option<Vec<(Version, KeptVersion)>> {
        let (parent, _) = crate::sync::propagate::split(&self.at.path);
        let dirs: Vec<Box<dyn ReplicaDir + '_>> = self
            .replicas
            .iter()
            .map(|replica| replica.open_dir(&parent).ok())
            .collect::<Option<_>>()?;
        let mut named: Vec<(Version, KeptVersion)> = Vec::new();
        for version in &settled.kept {
            let lost = version.entry.as_deref()?;
            let holders: Vec<usize> = version.holders.iter().map(|&h| self.slot(h)).collect();
            let first = version.holders.iter().min_by_key(|&&h| self.place_of[h])?;
            let host = host_of(self.replicas[self.slot(*first)]);
            let taken = |path: &RelPath| {
                kept.iter()
                    .chain(named.iter().map(|(_, k)| k))
                    .any(|k| k.path == *path)
            };
            let (path, made) = first_accepted(&dirs, &self.at.path, lost, &host, |path, found| {
                if taken(path) {
                    return None;
                }
                self.made_at(path, found, lost, &holders)
            })?;
            let copy = KeptVersion {
                of: self.at.path.clone(),
                path,
                holders,
                made,
            };
            named.push((version.clone(), copy));
        }
        Some(named)
    }

    /// The slots that hold `lost` at the candidate `path` already, when
    /// every other slot holds nothing there; `None`: the name is taken.
    fn made_at(
        &self,
        path: &RelPath,
        found: &[Option<Found>],
        lost: &Entry,
        holders: &[usize],
    ) -> Option<Vec<usize>> {
        let planned = offers_at(self.scanned, path);
        let mut made = Vec::new();
        for (slot, found) in found.iter().enumerate() {
            let Some(found) = found else {
                continue;
            };
            // A holder's own link to what it holds at the path.
            let own = self.at.offers[slot].now.as_deref();
            let linked = holders.contains(&slot)
                && own.is_some_and(|own| Expect::entry(own).still_holds(Some(found)));
            // A copy of the version, received by an interrupted run.
            let copied = planned.is_some_and(|there| {
                let held = there.offers[slot].now.as_deref();
                held.is_some() && same_version(held, Some(lost), self.synced)
            });
            if !(linked || copied) {
                return None;
            }
            made.push(slot);
        }
        Some(made)
    }

    /// The slot of the member with set index `index`.
    fn slot(&self, index: usize) -> usize {
        self.members
            .iter()
            .position(|member| member.index == index)
            .expect("a version's holders took part")
    }

    /// The copy as an item of the plan: held by the version's holders
    /// (and any member holding it there already), received by the others,
    /// recorded with the path's new vector (and whatever an interrupted
    /// run recorded there).
    fn copy_item(&self, settled: &Settled, version: &Version, copy: &KeptVersion) -> SetItem {
        let mut vector = settled.vector.clone();
        if let Some(there) = offers_at(self.scanned, &copy.path) {
            vector = offered_vectors(&there.offers, self.synced)
                .iter()
                .fold(vector, |merged, v| merged.merged(v));
        }
        let mut holders = Vec::new();
        let mut receivers = Vec::new();
        for (slot, member) in self.members.iter().enumerate() {
            match copy.holders.contains(&slot) || copy.made.contains(&slot) {
                true => holders.push(member.index),
                false => receivers.push((member.index, Receive::Whole)),
            }
        }
        let entry = version.entry.as_deref().map(|lost| {
            Arc::new(Entry {
                path: copy.path.clone(),
                ..lost.clone()
            })
        });
        SetItem {
            path: copy.path.clone(),
            outcome: Outcome::Settled(Settled {
                entry,
                holders,
                receivers,
                vector,
                kept: Vec::new(),
            }),
            decided_by: Some(SetPolicy::KeepBoth),
        }
    }
}

/// The offers at `path`, if it is a path of the scan.
pub(crate) fn offers_at<'s>(scanned: &'s Scanned, path: &RelPath) -> Option<&'s PathOffers> {
    let index = scanned
        .paths
        .binary_search_by(|at| at.path.cmp(path))
        .ok()?;
    Some(&scanned.paths[index])
}

/// Put `added` into `items` (both in path order), each replacing the item
/// of its path if there is one.
fn merge_items(items: &mut Vec<SetItem>, mut added: Vec<SetItem>) {
    if added.is_empty() {
        return;
    }
    added.sort_by(|x, y| x.path.cmp(&y.path));
    let old = std::mem::take(items);
    items.reserve(old.len() + added.len());
    let mut added = added.into_iter().peekable();
    for item in old {
        while added.peek().is_some_and(|new| new.path < item.path) {
            items.push(added.next().expect("peeked"));
        }
        if added.peek().is_some_and(|new| new.path == item.path) {
            items.push(added.next().expect("peeked"));
            continue;
        }
        items.push(item);
    }
    items.extend(added);
}

/// Each path with a version kept beside it, and where: the copies still
/// in the plan (one that no holder could make is not).
pub(crate) fn kept_paths(kept: &[KeptVersion], items: &[SetItem]) -> Vec<(RelPath, RelPath)> {
    let planned = |path: &RelPath| items.binary_search_by(|item| item.path.cmp(path)).is_ok();
    kept.iter()
        .filter(|copy| planned(&copy.path))
        .map(|copy| (copy.of.clone(), copy.path.clone()))
        .collect()
}

/// The copies a dry run would make on the versions' holders.
pub(crate) fn would_link(kept: &[KeptVersion], members: &[Member<'_>]) -> Vec<SetChange> {
    let mut changes = Vec::new();
    for copy in kept {
        for &slot in copy.holders.iter().filter(|s| !copy.made.contains(s)) {
            changes.push(kept_change(&copy.path, &members[slot]));
        }
    }
    changes
}

fn kept_change(path: &RelPath, member: &Member<'_>) -> SetChange {
    SetChange {
        kept: true,
        ..SetChange::new(path.clone(), (member.place, member.place), Receive::Whole)
    }
}

/// Make every copy on its version's holders, and put what each member
/// then holds there into `held`. A holder that could not make it keeps
/// its version at the path this run: it neither receives the winner there
/// nor holds the copy (the next run names the copy the same way and tries
/// again); a copy no holder made is left out of the plan.
pub(crate) fn link_copies(
    replicas: &[&dyn Replica],
    members: &[Member<'_>],
    kept: &[KeptVersion],
    items: &mut Vec<SetItem>,
    held: &mut Held,
    cfg: &SyncConfig,
) -> Linked {
    let mut linked = Linked::default();
    let mut rows = Vec::with_capacity(kept.len());
    for copy in kept {
        let mut failed = Vec::new();
        let row = link_one(replicas, members, copy, held, cfg, &mut linked, &mut failed);
        rows.push(row);
        if !failed.is_empty() {
            let indexes: Vec<usize> = failed.iter().map(|&s| members[s].index).collect();
            leave_unlinked(items, copy, &indexes);
        }
    }
    held.put_rows(rows);
    linked
}

/// Make one copy on every holder that lacks it; what each member holds at
/// the copy's path afterwards.
fn link_one(
    replicas: &[&dyn Replica],
    members: &[Member<'_>],
    copy: &KeptVersion,
    held: &Held,
    cfg: &SyncConfig,
    linked: &mut Linked,
    failed: &mut Vec<usize>,
) -> HeldRow {
    let at = held.index_of(&copy.of);
    let there = held.find(&copy.path);
    let mut cells: Vec<(Option<Arc<Entry>>, accord_model::Time)> = (0..members.len())
        .map(|slot| match there {
            Some(index) => (held.now(index, slot).cloned(), held.ctime(index, slot)),
            None => (None, UNKNOWN_CTIME),
        })
        .collect();
    for &slot in copy.holders.iter().filter(|s| !copy.made.contains(s)) {
        let lost = held.now(at, slot).expect("a holder holds its version");
        let at_copy = Entry {
            path: copy.path.clone(),
            ..lost.as_ref().clone()
        };
        match link(replicas[slot], lost, &at_copy, cfg) {
            Ok(()) => {
                cells[slot] = (Some(Arc::new(at_copy)), UNKNOWN_CTIME);
                linked.changes.push(kept_change(&copy.path, &members[slot]));
            }
            Err(error) => {
                failed.push(slot);
                linked.failures.push(SetFailure {
                    replica: members[slot].name.clone(),
                    failure: SyncFailure {
                        path: copy.path.clone(),
                        error,
                    },
                });
            }
        }
    }
    (copy.path.clone(), cells)
}

/// `lost` also under `at_copy`'s name, on one replica.
fn link(
    replica: &dyn Replica,
    lost: &Entry,
    at_copy: &Entry,
    cfg: &SyncConfig,
) -> Result<(), SyncError> {
    let (parent, _) = crate::sync::propagate::split(&lost.path);
    let dir = replica
        .open_dir(&parent)
        .map_err(crate::Error::io(Step::OpenDestination))?;
    keep_beside(replica, dir.as_ref(), lost, at_copy, cfg)
}

/// The members (by set index) in `failed` could not make `copy`: they
/// keep what they hold at its path, and neither hold nor receive the
/// copy; a copy no holder made is not carried out at all.
fn leave_unlinked(items: &mut Vec<SetItem>, copy: &KeptVersion, failed: &[usize]) {
    fn find(items: &[SetItem], path: &RelPath) -> usize {
        items
            .binary_search_by(|item| item.path.cmp(path))
            .expect("the path and its copy are in the plan")
    }
    let at = find(items, &copy.of);
    if let Outcome::Settled(settled) = &mut items[at].outcome {
        settled.receivers.retain(|(r, _)| !failed.contains(r));
    }
    let at = find(items, &copy.path);
    if let Outcome::Settled(settled) = &mut items[at].outcome {
        settled.holders.retain(|h| !failed.contains(h));
        settled.receivers.retain(|(r, _)| !failed.contains(r));
        if settled.holders.is_empty() {
            items.remove(at);
        }
    }
}
