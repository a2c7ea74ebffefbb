//! `--keep-both`: naming the copy of each losing version before
//! propagation (`sync_exec/keep.rs` makes it). The name is
//! `NAME.conflict-HOST-DATE` (`accord_plan::conflict_name`): HOST the host
//! of the side whose version lost, DATE that version's mtime in UTC. It is
//! chosen so that it is free on both sides and no path of the plan, with
//! `-2`, `-3`… when it is not.
//!
//! The date comes from the losing version, not from the clock, so a run
//! interrupted after it linked the loser under its new name (the first
//! step, on the losing side) finds that link the next time under the same
//! name: the copy is then taken as made (its plan item, a "creation" on
//! the losing side, is folded into the keep-both) instead of being kept a
//! second time as `-2`.

use crate::sync::propagate::{index, split};
use accord_model::{Entry, Expect, Found, RelPath};
use accord_plan::{conflict_name, utc_stamp, Action, ConflictReason, Side, SyncItem};
use accord_replica::{Replica, ReplicaDir};
use std::collections::{HashMap, HashSet};

/// Names tried before the conflict is left to the user.
const MAX_ATTEMPTS: u32 = 100;

/// Where one path's losing version is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeptCopy {
    pub path: RelPath,
    /// The losing side holds it already: a hard link to the loser made by
    /// an interrupted run.
    pub linked: bool,
}

/// By the path of each `KeepBoth` item.
pub(crate) type KeptCopies = HashMap<RelPath, KeptCopy>;

/// Name the copy of every `KeepBoth` item's loser. An item that cannot be
/// named (no free name, a side that cannot be read) is left as the
/// conflict it was; the plan items of copies an interrupted run made are
/// taken out of the plan (the keep-both makes them).
pub(crate) fn name_kept_copies(
    replicas: [&dyn Replica; 2],
    items: &mut Vec<SyncItem>,
) -> KeptCopies {
    let mut kept = KeptCopies::new();
    if !items
        .iter()
        .any(|item| matches!(item.action, Action::KeepBoth { .. }))
    {
        return kept;
    }
    let hosts = replicas.map(host_of);
    let planned: HashSet<RelPath> = items.iter().map(|item| item.path.clone()).collect();
    for item in items.iter_mut() {
        let Action::KeepBoth { winner } = item.action else {
            continue;
        };
        match name_one(
            replicas,
            item,
            winner,
            &hosts[index(winner.other())],
            &planned,
        ) {
            Some(copy) => {
                kept.insert(item.path.clone(), copy);
            }
            None => {
                item.action = Action::Conflict(ConflictReason::BothChanged);
                item.overridden = None;
            }
        }
    }
    let folded: HashSet<RelPath> = kept
        .values()
        .filter(|copy| copy.linked)
        .map(|copy| copy.path.clone())
        .collect();
    items.retain(|item| !folded.contains(&item.path));
    kept
}

/// The first candidate name that is free on both sides (or holds, on the
/// losing side only, a link to the loser), and no other path of the plan.
fn name_one(
    replicas: [&dyn Replica; 2],
    item: &SyncItem,
    winner: Side,
    loser_host: &str,
    planned: &HashSet<RelPath>,
) -> Option<KeptCopy> {
    let loser = winner.other();
    let lost = item.entry(loser)?;
    let (parent, _) = split(&item.path);
    let dirs = vec![
        replicas[0].open_dir(&parent).ok()?,
        replicas[1].open_dir(&parent).ok()?,
    ];
    let accepted = first_accepted(&dirs, &item.path, lost, loser_host, |path, found| {
        let linked = match (&found[index(loser)], &found[index(winner)]) {
            (None, None) => false,
            (Some(there), None) if Expect::entry(lost).still_holds(Some(there)) => true,
            _ => return None,
        };
        (linked || !planned.contains(path)).then_some(linked)
    });
    accepted.map(|(path, linked)| KeptCopy { path, linked })
}

/// The first name for the copy of `lost` (the version at `path`, kept
/// from `host`) that `verdict` accepts, and its answer; `verdict` is given
/// the candidate's path and what each replica holds there (`dirs`: the
/// path's directory on each, in their order). `None` when no candidate
/// is accepted, or a replica cannot be read. Used by a set's
/// `--keep-both` too (`set/keep.rs`).
pub(crate) fn first_accepted<T>(
    dirs: &[Box<dyn ReplicaDir + '_>],
    path: &RelPath,
    lost: &Entry,
    host: &str,
    mut verdict: impl FnMut(&RelPath, &[Option<Found>]) -> Option<T>,
) -> Option<(RelPath, T)> {
    let (parent, name) = split(path);
    let date = utc_stamp(lost.props.mtime);
    for attempt in 1..=MAX_ATTEMPTS {
        let candidate = conflict_name(name, host, &date, attempt)?;
        let at = parent.join(&candidate).ok()?;
        let stats: Vec<_> = dirs.iter().map(|dir| dir.start_stat(&candidate)).collect();
        let found: Vec<Option<Found>> = stats
            .into_iter()
            .map(|pending| pending.wait().ok())
            .collect::<Option<_>>()?;
        if let Some(answer) = verdict(&at, &found) {
            return Some((at, answer));
        }
    }
    None
}

/// The host name in a replica's sync identity (`accord root 1`, NUL, the
/// machine id, `/`, the host name, NUL, the path), made safe for a file
/// name; "unknown" when it cannot be read.
pub(crate) fn host_of(replica: &dyn Replica) -> String {
    let identity = replica.sync_identity().unwrap_or_default();
    let host = identity
        .split(|&b| b == 0)
        .nth(1)
        .and_then(|machine_and_host| {
            let slash = machine_and_host.iter().position(|&b| b == b'/')?;
            Some(&machine_and_host[slash + 1..])
        })
        .filter(|host| !host.is_empty())
        .unwrap_or(b"unknown");
    accord_plan::host_label(host)
}

/// What a found entry is, as an expectation (a copy that turned out not to
/// hold the loser is removed only if it is still what was found).
pub(crate) fn expect_found(found: Option<Found>) -> Expect {
    match found {
        Some(found) => Expect::Entry(found),
        None => Expect::Absent,
    }
}
