//! `--keep-both` carried out (the name was chosen by `sync/propagate/keep_name.rs`). For
//! a path P whose winner W keeps it and whose loser L is kept as C, one
//! path at a time:
//!
//! 1. on L, C is made a hard link to P (a regular file: `link_temp` +
//!    `commit` to an absent C; no data is copied), or a copy of the node
//!    (a symlink, a fifo…); a link found not to be the loser's version (P
//!    changed since the scan) is removed again and the path fails;
//! 2. W's version is received into a temp for P on L, and L's version
//!    (read from C) into a temp for C on W, each checked against its
//!    fingerprint;
//! 3. both replicas are flushed; on L the temp replaces P after the
//!    re-check that P is still the loser; on W the temp takes C if C is
//!    still free;
//! 4. P and C are recorded on both sides (C only when both hold it).
//!
//! At every moment each version exists under some name on its own side
//! and P is never missing: L's P is replaced by a rename, after C holds
//! the loser. An interrupted run leaves either L's link (found and used by
//! the next run, see `sync/propagate/keep_name.rs`), or P agreed on both sides with C
//! created on L only (a plain copy next time).

use super::{changed_entry, index, split, synced_props, Done, Propagation, Record};
use crate::sync::propagate::keep_name::{expect_found, KeptCopies, KeptCopy};
use crate::sync::propagate::transfer::{receive_all, FileCopy};
use crate::sync::SyncError;
use accord_model::{Entry, Expect, Kind, Props};
use accord_plan::{Action, Side, SyncItem};
use accord_replica::Action as Step;
use accord_replica::ReplicaDir;

/// The temps of one keep-both, once received: for P on the loser's side,
/// for C on the winner's.
struct Temps {
    winner_on_loser: Vec<u8>,
    loser_on_winner: Vec<u8>,
}

impl<'a> Propagation<'a> {
    /// Keep both versions of every `KeepBoth` item that was named.
    pub(super) fn keep_both(&mut self, items: &'a [SyncItem], kept: &KeptCopies) {
        for item in items {
            let Action::KeepBoth { winner } = item.action else {
                continue;
            };
            let Some(copy) = kept.get(&item.path) else {
                continue;
            };
            if let Err(error) = self.keep_one(item, winner, copy) {
                self.fail(&item.path, error);
            }
        }
    }

    fn keep_one(
        &mut self,
        item: &SyncItem,
        winner: Side,
        copy: &KeptCopy,
    ) -> Result<(), SyncError> {
        let loser = winner.other();
        let lost = item.entry(loser).expect("a keep-both has two versions");
        let at_copy = Entry {
            path: copy.path.clone(),
            ..lost.clone()
        };
        let (parent, _) = split(&item.path);
        let dirs = [
            self.dir(Side::A, &parent, Step::OpenDestination)?,
            self.dir(Side::B, &parent, Step::OpenDestination)?,
        ];
        if !copy.linked {
            // Step 1: on the losing side, the loser also under the copy's
            // name.
            let (replica, dir) = (self.replicas[index(loser)], dirs[index(loser)].as_ref());
            keep_beside(replica, dir, lost, &at_copy, self.cfg)?;
        }
        let temps = self.receive_both(item, winner, &at_copy, &dirs)?;
        self.flush_replicas();
        self.commit_both(item, winner, &at_copy, &dirs, temps)
    }

    /// Step 2: the winner's version for P on the losing side, the loser's
    /// for C on the winning side, each in a temp.
    fn receive_both(
        &self,
        item: &SyncItem,
        winner: Side,
        at_copy: &Entry,
        dirs: &[Box<dyn ReplicaDir + 'a>; 2],
    ) -> Result<Temps, SyncError> {
        let loser = winner.other();
        let won = item.entry(winner).expect("a keep-both has two versions");
        let copy_item = copy_item(at_copy, loser);
        let mut files = Vec::new();
        for (what, from, to) in [(item, winner, loser), (&copy_item, loser, winner)] {
            let source = what.entry(from).expect("a version to copy");
            if source.kind == Kind::File {
                let (props, mask) = synced_props(source, self.cfg);
                files.push(FileCopy {
                    item: what,
                    from,
                    to,
                    props,
                    mask,
                });
            }
        }
        let mut received = receive_all(self.replicas, files, None, &|_| {}).into_iter();
        let mut take = |entry: &Entry, to: Side, name: &[u8]| -> Result<Vec<u8>, SyncError> {
            if entry.kind == Kind::File {
                return received.next().expect("one result per copy").1;
            }
            let (props, mask) = synced_props(entry, self.cfg);
            let node = Entry {
                props,
                ..entry.clone()
            };
            Ok(dirs[index(to)].make_node(name, &node, mask)?)
        };
        let winner_on_loser = take(won, loser, item.path.file_name());
        let loser_on_winner = take(at_copy, winner, at_copy.path.file_name());
        match (winner_on_loser, loser_on_winner) {
            (Ok(winner_on_loser), Ok(loser_on_winner)) => Ok(Temps {
                winner_on_loser,
                loser_on_winner,
            }),
            (Ok(temp), Err(e)) => {
                dirs[index(loser)].discard(&temp);
                Err(e)
            }
            (Err(e), Ok(temp)) => {
                dirs[index(winner)].discard(&temp);
                Err(e)
            }
            (Err(e), Err(_)) => Err(e),
        }
    }

    /// Steps 3 and 4: both temps renamed into place after their re-checks,
    /// then what succeeded on both sides recorded.
    fn commit_both(
        &mut self,
        item: &SyncItem,
        winner: Side,
        at_copy: &Entry,
        dirs: &[Box<dyn ReplicaDir + 'a>; 2],
        temps: Temps,
    ) -> Result<(), SyncError> {
        let loser = winner.other();
        let lost = item.entry(loser).expect("a keep-both has two versions");
        let (on_loser, on_winner) = (dirs[index(loser)].as_ref(), dirs[index(winner)].as_ref());
        let name = item.path.file_name();
        let replaced = on_loser.commit(&temps.winner_on_loser, name, &Expect::entry(lost));
        if replaced.is_err() {
            on_loser.discard(&temps.winner_on_loser);
        }
        let copy_name = at_copy.path.file_name();
        let copied = on_winner.commit(&temps.loser_on_winner, copy_name, &Expect::Absent);
        if copied.is_err() {
            on_winner.discard(&temps.loser_on_winner);
        }
        if copied.is_ok() {
            self.record_copy(at_copy, dirs);
        }
        replaced?;
        let won = item.entry(winner).expect("a keep-both has two versions");
        let now = on_loser.stat(name).ok().flatten();
        let mut records = [
            Record::Remove(item.path.clone()),
            Record::Remove(item.path.clone()),
        ];
        records[index(loser)] = Record::Put(changed_entry(&taken(won, self.cfg), now, self.cfg));
        records[index(winner)] = self.as_scanned(item, winner);
        self.done.push(Done {
            path: item.path.clone(),
            action: item.action,
            records,
            from: Some(at_copy.path.clone()),
        });
        copied?;
        Ok(())
    }

    /// C holds the loser on both sides: record it there.
    fn record_copy(&mut self, at_copy: &Entry, dirs: &[Box<dyn ReplicaDir + 'a>; 2]) {
        let taken = taken(at_copy, self.cfg);
        let name = at_copy.path.file_name();
        let records = [0, 1].map(|side| {
            let now = dirs[side].stat(name).ok().flatten();
            Record::Put(changed_entry(&taken, now, self.cfg))
        });
        self.done.push(Done {
            path: at_copy.path.clone(),
            action: Action::Nothing,
            records,
            from: None,
        });
    }
}

/// On a replica that holds `lost`, the same version also under the name of
/// `at_copy` (in `dir`, the directory of both): a hard link for a regular
/// file (no data is copied), a copy of the node otherwise. A link found
/// not to be of `lost` (the file changed since the scan) is removed again
/// and the path fails. Also the first step of `--keep-both` for a set
/// (`set/keep.rs`).
pub(crate) fn keep_beside(
    replica: &dyn accord_replica::Replica,
    dir: &dyn ReplicaDir,
    lost: &Entry,
    at_copy: &Entry,
    cfg: &crate::sync::SyncConfig,
) -> Result<(), SyncError> {
    let name = at_copy.path.file_name();
    let temp = if lost.kind == Kind::File {
        dir.link_temp(name, &lost.path)?
    } else {
        let (props, mask) = synced_props(lost, cfg);
        let node = Entry {
            props,
            ..at_copy.clone()
        };
        dir.make_node(name, &node, mask)?
    };
    if cfg.fsync {
        replica.sync_all().map_err(crate::Error::io(Step::Flush))?;
    }
    if let Err(e) = dir.commit(&temp, name, &Expect::Absent) {
        dir.discard(&temp);
        return Err(e.into());
    }
    if lost.kind != Kind::File {
        return Ok(());
    }
    // The link is of whatever P held: it must be the loser's version.
    let found = dir.stat(name).map_err(crate::Error::io(Step::MakeLink))?;
    if Expect::entry(lost).still_holds(found.as_ref()) {
        return Ok(());
    }
    dir.delete(name, &expect_found(found))?;
    Err(SyncError::Replica(crate::Error::Changed(
        accord_replica::End::Written,
    )))
}

/// The entry a side is made to hold: `entry` with the synced properties.
fn taken(entry: &Entry, cfg: &crate::sync::SyncConfig) -> Entry {
    let (props, _) = synced_props(entry, cfg);
    Entry {
        props: Props {
            mtime: entry.props.mtime,
            ..props
        },
        ..entry.clone()
    }
}

/// The copy at C as a plan item of its own: `from` holds the loser there
/// (after step 1), the other side nothing yet.
fn copy_item(at_copy: &Entry, from: Side) -> SyncItem {
    let (mut a, mut b) = (None, None);
    match from {
        Side::A => a = Some(std::sync::Arc::new(at_copy.clone())),
        Side::B => b = Some(std::sync::Arc::new(at_copy.clone())),
    }
    SyncItem {
        path: at_copy.path.clone(),
        action: Action::Copy {
            from,
            to: from.other(),
        },
        overridden: None,
        a,
        b,
        moved: None,
        link: None,
    }
}
