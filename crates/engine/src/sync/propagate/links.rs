//! Copies a sync plan makes as hard links (`accord_plan`'s `links.rs`
//! decides which, and to which leader): after every file of the plan is in
//! place, each such name is linked on the receiving side under a temp name
//! to its leader (`ReplicaDir::link_temp`), the leader is checked to be
//! still the entry the plan expected (what Y held when it was agreed, or
//! what this run's copy of it put there), and the temp is renamed over the
//! name after the usual re-check of what Y held there
//! (`ReplicaDir::commit`). Only existing seam calls: an `accord server` of
//! any version carries them out.
//!
//! A run stopped between a leader's copy and its links leaves a group the
//! next run completes as a group: the receiving side's archive records the
//! copied leader with an unknown ctime (`changed_entry`), so the next run
//! fingerprints it, finds it touched, and the plan holds it as agreed:
//! a leader for the names still to link.
//!
//! A leader that was to be copied and was not (its copy failed) is never
//! linked to: its old contents are not the name's new ones. The name
//! fails with its leader and the next run plans it again.
//!
//! The check of the leader comes after the link is made: a leader replaced
//! between the two is caught (another inode), one written in place too
//! (another size or mtime), and the temp is then removed, so the name keeps
//! its old contents. Writes through the leader after the check are the
//! leader's own changes, which the next run sees on the whole group.

use super::{changed_entry, index, split, Done, Propagation, CHUNK_FILES};
use crate::sync::{SyncError, SyncReport};
use accord_model::{Expect, Found, RelPath};
use accord_plan::{Action, LinkTo, Side, SyncItem};
use accord_replica::SideSession;
use accord_replica::{Pending, PendingTemp, ReplicaDir};
use std::collections::HashMap;

/// The sides of a copy to be made as a link, and where it links to.
pub(super) fn linked(item: &SyncItem) -> Option<(Side, Side, &LinkTo)> {
    match (item.action, item.link.as_deref()) {
        (Action::Copy { from, to }, Some(link)) => Some((from, to, link)),
        _ => None,
    }
}

/// The leaders this run copies, and what their copies put in place.
#[derive(Default)]
pub(super) struct Leaders {
    /// `(side, leader)` → what the copy left there, once committed;
    /// `None` until then (or when its commit failed).
    copied: HashMap<(Side, RelPath), Option<Found>>,
}

impl Leaders {
    /// The leaders that `items` link to and copy themselves.
    pub(super) fn of(items: &[SyncItem]) -> Leaders {
        let copied = items
            .iter()
            .filter_map(linked)
            .filter(|(_, _, link)| link.agreed.is_none())
            .map(|(_, to, link)| ((to, link.leader.clone()), None))
            .collect();
        Leaders { copied }
    }

    /// A copy to `to` at `path` was committed and `found` is there now.
    pub(super) fn written(&mut self, to: Side, path: &RelPath, found: Option<Found>) {
        if let Some(slot) = self.copied.get_mut(&(to, path.clone())) {
            *slot = found;
        }
    }

    /// Is the copy to `to` at `path` a leader that links follow later in
    /// the run?
    pub(super) fn leads(&self, to: Side, path: &RelPath) -> bool {
        self.copied.contains_key(&(to, path.clone()))
    }

    /// What a link to `link` must find at its leader on `to`; `None`: the
    /// leader was to be copied and was not.
    fn expected(&self, to: Side, link: &LinkTo) -> Option<Expect> {
        match &link.agreed {
            Some(entry) => Some(Expect::entry(entry)),
            None => {
                let found = self.copied.get(&(to, link.leader.clone()))?;
                found.map(Expect::Entry)
            }
        }
    }
}

/// A link on its way: its temp, and the leader's stat taken after it.
struct Started<'a, 'i> {
    item: &'i SyncItem,
    to: Side,
    dir: Box<dyn ReplicaDir + 'a>,
    expect: Expect,
    temp: PendingTemp,
    leader_now: Pending<std::io::Result<Option<Found>>>,
}

/// A link whose temp is made and whose leader was as expected.
struct Made<'a, 'i> {
    item: &'i SyncItem,
    to: Side,
    dir: Box<dyn ReplicaDir + 'a>,
    temp: Vec<u8>,
}

impl<'a> Propagation<'a> {
    /// Make every planned link, a chunk at a time (each chunk's steps all
    /// started before any is waited for), and record them.
    pub(super) fn links(
        &mut self,
        items: &'a [SyncItem],
        archives: &mut [Box<dyn SideSession + '_>; 2],
        before: Option<&(dyn Fn() + Sync)>,
        report: &mut SyncReport,
    ) {
        let planned: Vec<&'a SyncItem> = items.iter().filter(|i| linked(i).is_some()).collect();
        if let (Some(hook), false) = (before, planned.is_empty()) {
            hook();
        }
        for chunk in planned.chunks(CHUNK_FILES) {
            self.link_chunk(chunk);
            self.flush(archives, report);
        }
    }

    fn link_chunk(&mut self, chunk: &[&'a SyncItem]) {
        let started: Vec<Started<'a, 'a>> = chunk
            .iter()
            .filter_map(|item| match self.start_link(item) {
                Ok(started) => Some(started),
                Err(error) => {
                    self.fail(&item.path, error);
                    None
                }
            })
            .collect();
        let made: Vec<Made<'a, '_>> = started
            .into_iter()
            .filter_map(|one| self.checked_link(one))
            .collect();
        let commits: Vec<_> = made
            .into_iter()
            .map(|one| {
                let (_, name) = split(&one.item.path);
                let expect = Expect::of(one.item.entry(one.to));
                let pending = one.dir.start_commit(&one.temp, name, &expect);
                (one, pending)
            })
            .collect();
        let mut committed = Vec::new();
        for (one, pending) in commits {
            match pending.wait() {
                Ok(()) => committed.push((one.item, one.to)),
                Err(error) => {
                    one.dir.discard(&one.temp);
                    self.fail(&one.item.path, error.into());
                }
            }
        }
        self.record_links(committed);
    }

    /// Start linking `item` to its leader, and a stat of the leader after
    /// it (the replica carries them out in that order).
    fn start_link(&self, item: &'a SyncItem) -> Result<Started<'a, 'a>, SyncError> {
        let (_, to, link) = linked(item).expect("only links are started");
        let not_written = || crate::Error::LeaderNotWritten(link.leader.clone());
        if self.failed_paths.contains(&link.leader) {
            return Err(not_written().into());
        }
        let expect = self.leaders.expected(to, link).ok_or_else(not_written)?;
        let (parent, name) = split(&item.path);
        let dir = self.dir(to, &parent, accord_replica::Action::MakeLink)?;
        let temp = dir.start_link_temp(name, &link.leader);
        let leader_now = self.start_stat_at(to, &link.leader);
        Ok(Started {
            item,
            to,
            dir,
            expect,
            temp,
            leader_now,
        })
    }

    /// The link's temp, if it was made and its leader is still what the
    /// plan expected; else the temp is removed and the name fails.
    fn checked_link<'i>(&mut self, one: Started<'a, 'i>) -> Option<Made<'a, 'i>> {
        let temp = match one.temp.wait() {
            Ok(temp) => temp,
            Err(error) => {
                self.fail(&one.item.path, error.into());
                return None;
            }
        };
        let dir = one.dir;
        let leader_now = one.leader_now.wait().ok().flatten();
        if !one.expect.still_holds(leader_now.as_ref()) {
            dir.discard(&temp);
            let changed = crate::Error::Changed(accord_replica::End::Written);
            self.fail(&one.item.path, changed.into());
            return None;
        }
        Some(Made {
            item: one.item,
            to: one.to,
            dir,
            temp,
        })
    }

    /// Record the committed links: the receiving side holds the source's
    /// entry at the linked inode; the source side is as scanned.
    fn record_links(&mut self, committed: Vec<(&'a SyncItem, Side)>) {
        let stats: Vec<_> = committed
            .iter()
            .map(|(item, to)| self.start_stat_at(*to, &item.path))
            .collect();
        for ((item, to), found) in committed.into_iter().zip(stats) {
            let (from, _, link) = linked(item).expect("only links are recorded");
            let source = item.entry(from).expect("a copy has a source");
            let recorded = changed_entry(source, found.wait().ok().flatten(), self.cfg);
            let mut records = [
                self.as_scanned(item, Side::A),
                self.as_scanned(item, Side::B),
            ];
            records[index(to)] = accord_replica::ArchiveRecord::Put(recorded);
            self.done.push(Done {
                path: item.path.clone(),
                action: item.action,
                records,
                from: Some(link.leader.clone()),
            });
        }
    }
}
