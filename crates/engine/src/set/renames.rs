//! Renames and moves in a set's propagation, as for two replicas
//! (`accord_plan::pair_renames`): for each receiver, a deletion of `p` and
//! a copy of a new entry `q` equal to what the receiver holds at `p`
//! (contents and synced properties; a directory with its whole subtree)
//! become one rename of `p` to `q` on that receiver. A file renamed on one
//! replica then costs the others nothing on the wire.
//!
//! The pairing runs on the receiver's whole two-replica plan (A: the
//! member each item is taken from, B: the receiver) before it is cut into
//! chunks, and only when the receiver has something to delete: a first
//! sync builds no plan of its whole tree. A pair is kept only when its
//! target, its source and every directory above either that the
//! receiver's plan changes are taken from one member: each member's items
//! are propagated in a call of their own, and a rename must run in the
//! call that makes its target's new directories and deletes its source's
//! old ones (after the rename). The chunking keeps both ends of a rename
//! in one chunk (`partner`). A directory rename that would move or land
//! on a path a scan could not read is not made, as for two replicas.
//!
//! Records: the target as for any copy, with the settled version's vector;
//! the source, and every path that moved with a directory, as the deletion
//! settled there (`moved_below`: the two-replica propagation records a
//! source's removal at its top only, which removes its subtree's entries
//! but not their vectors).

use accord_model::{Kind, RelPath};
use accord_plan::{pair_renames, Action, Moved, SyncItem, SyncedProps};
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;

/// The renames one receiver makes.
#[derive(Default)]
pub(crate) struct Renames {
    /// By target: `Rename` (the top) or `MovedWith`, and what moves there.
    targets: HashMap<RelPath, (Action, Box<Moved>)>,
    /// Every source: each rename's top and what moved with it.
    sources: BTreeSet<RelPath>,
    /// Each rename's two tops, both ways.
    partners: HashMap<RelPath, RelPath>,
}

impl Renames {
    /// Pair the renames of one receiver's `plan`: every item it takes, in
    /// path order, with the slot of the member it takes it from.
    /// `unread`: paths the scans could not read.
    pub(crate) fn pair(
        plan: Vec<(usize, SyncItem)>,
        synced: &SyncedProps,
        unread: &[RelPath],
    ) -> Renames {
        let slots: HashMap<RelPath, usize> = plan
            .iter()
            .map(|(slot, item)| (item.path.clone(), *slot))
            .collect();
        let items = plan.into_iter().map(|(_, item)| item).collect();
        let paired = pair_renames(items, synced);
        let mut renames = Renames::default();
        let mut at = 0;
        while at < paired.len() {
            let top = &paired[at];
            let below = moved_beneath(&paired[at + 1..], &top.path);
            let kept = matches!(top.action, Action::Rename { .. })
                && from_one_member(top, &slots)
                && !moves_unread(top, unread);
            if kept {
                renames.add(&paired[at..at + 1 + below]);
            }
            at += 1 + below;
        }
        renames
    }

    /// Keep one rename: its top, then what moves with it.
    fn add(&mut self, moved: &[SyncItem]) {
        let from_of = |item: &SyncItem| item.moved.clone().expect("a moved item has a source");
        let top = &moved[0];
        let from = from_of(top).from;
        self.partners.insert(from.clone(), top.path.clone());
        self.partners.insert(top.path.clone(), from);
        for item in moved {
            let source = from_of(item);
            self.sources.insert(source.from.clone());
            self.targets
                .insert(item.path.clone(), (item.action, Box::new(*source)));
        }
    }

    /// Make `item` (of the receiver's plan) what it is in a rename: a
    /// target becomes the rename, or moves with it; a source is left out
    /// (false), as the rename is its deletion.
    pub(crate) fn apply(&self, item: &mut SyncItem) -> bool {
        if self.sources.contains(&item.path) {
            return false;
        }
        if let Some((action, moved)) = self.targets.get(&item.path) {
            item.action = *action;
            item.moved = Some(moved.clone());
        }
        true
    }

    /// The other top of the rename whose source or target is `path`.
    pub(crate) fn partner(&self, path: &RelPath) -> Option<&RelPath> {
        self.partners.get(path)
    }

    /// The paths that moved with the directory at `path`, when it is a
    /// rename's source (none otherwise).
    pub(crate) fn moved_below<'s>(
        &'s self,
        path: &'s RelPath,
    ) -> impl Iterator<Item = &'s RelPath> + 's {
        let top = self.sources.contains(path) && self.partners.contains_key(path);
        self.sources
            .range((Bound::Excluded(path), Bound::Unbounded))
            .take_while(move |below| top && below.starts_with(path))
    }
}

/// How many of the items after a rename's top move with it.
fn moved_beneath(after: &[SyncItem], top: &RelPath) -> usize {
    after
        .iter()
        .take_while(|item| {
            matches!(item.action, Action::MovedWith { .. }) && item.path.starts_with(top)
        })
        .count()
}

/// Are the rename's target, its source and the directories above either
/// that the plan changes all taken from one member?
fn from_one_member(top: &SyncItem, slots: &HashMap<RelPath, usize>) -> bool {
    let from = &top.moved.as_ref().expect("a rename has a source").from;
    let slot = slots.get(&top.path);
    let ancestors = |path: &RelPath| {
        std::iter::successors(path.parent(), RelPath::parent).filter(|a| !a.is_root())
    };
    let same = |path: &RelPath| slots.get(path).is_none_or(|s| Some(s) == slot);
    slots.get(from) == slot
        && ancestors(from)
            .chain(ancestors(&top.path))
            .all(|a| same(&a))
}

/// Does a directory rename move, or land on, a path that could not be
/// read (so that the plan does not know the tree whole)?
fn moves_unread(top: &SyncItem, unread: &[RelPath]) -> bool {
    let moved = top.moved.as_ref().expect("a rename has a source");
    moved.entry.kind == Kind::Dir
        && unread
            .iter()
            .any(|path| path.starts_with(&moved.from) || path.starts_with(&top.path))
}
