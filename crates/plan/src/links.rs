//! Hard-link groups in a two-way sync: names of one inode on one side stay
//! names of one inode on the other (Unison and the other two-way tools copy
//! each name as a separate file).
//!
//! Like rename pairing (`renames.rs`), this works on the reconciled plan
//! and never changes what a path ends up holding, only how it gets there.
//! Reconciliation decides each name on its own, so conflicts stay
//! conflicts and every name's item is what it would be without groups;
//! then, on each side X, the items that copy a regular file from X to the
//! other side Y whose entry on X has more than one link are grouped by X's
//! (device, inode) (so by the names of the group within the root: a link
//! outside the root is never seen) and given a leader on Y:
//!
//! 1. a name of the group the plan leaves alone on Y (`Agree`) that Y holds
//!    with the group's contents and synced properties: the common case of
//!    a name linked to an agreed file, and of a name added to a group;
//! 2. else a name of the group that Y renames into place from an equal
//!    entry (a rename leaves its entry whole);
//! 3. else the group's first copied name, in path order, which is
//!    transferred as usual: a new group, or a group whose contents changed
//!    (an edit through one name changes every name at once).
//!
//! Every other copied name of the group becomes a link to the leader
//! ([`LinkTo`]): propagation links it under a temp name on Y
//! (`ReplicaDir::link_temp`), checks that Y's leader is still the entry the
//! plan expected (for a leader of case 3: the one its copy put there), and
//! renames the temp over the name after the usual re-check of what Y held
//! there. Each name therefore always has its old or its new contents (the
//! crash invariant), and the group ends as one inode on Y holding what X's
//! group holds: X's names share one inode, so one contents and one set of
//! properties, which is what the leader holds on Y.
//!
//! What stays per name, as without groups (never a wrong or lost state):
//!
//! - anything that is not a plain `Copy` (a conflict, a deletion, a copy
//!   that keeps the other side's permissions): a name of a group broken
//!   on one side, or in conflict there, is reconciled on its own and
//!   linking never spans it;
//! - a group whose copied names do not all carry the same fingerprint and
//!   synced properties (a file written or changed while it was scanned):
//!   copied one by one;
//! - a copy that replaces a directory on Y (the directory's removal goes
//!   with the ordinary copy's commit);
//! - a name whose leader's copy fails: the link fails too (the leader was
//!   not written), nothing is replaced, and the next run plans it again.
//!
//! Property changes are set in place, on the inode, so they are first kept
//! to the names they belong to, with or without groups
//! ([`keep_props_to_their_names`], "property changes in place" below).
//!
//! A leader of case 1 may be linked on Y to names the plan does not see
//! (Y's own group, agreed long ago): the new link joins that inode, whose
//! contents are the group's. Only the paths the plan holds are grouped; a
//! name of the group that is unchanged and was not even touched is not in
//! the plan, so its group on Y is not known (linking a new name moves the
//! ctime of every name of the inode, so detection reports them as touched
//! and they are in the plan as `Agree`).

use crate::detect::SyncedProps;
use crate::reconcile::{same_contents, same_props, Action, LinkTo, Side, SyncItem};
use accord_model::{Entry, Kind};
use std::collections::HashMap;

/// What hard links make of a plan (see the module's comment): in-place
/// property changes kept to their names, then, with `hard_links`, each
/// group's copies made one copy (or none) and links. `items` are in
/// `RelPath` order, with their renames paired: a reconciled plan, or one
/// receiver's plan in a sync of more than two replicas.
pub fn plan_links(items: &mut [SyncItem], synced: &SyncedProps, hard_links: bool) {
    keep_props_to_their_names(items);
    if hard_links {
        link_groups(items, synced);
    }
}

/// Turn the copies of each hard-link group's names into one copy (or
/// none) and links (see the module's comment). `items` are in `RelPath`
/// order.
pub(crate) fn link_groups(items: &mut [SyncItem], synced: &SyncedProps) {
    for from in [Side::A, Side::B] {
        for group in groups(items, from).into_values() {
            plan_group(items, &group, from, synced);
        }
    }
}

/// The inode of an entry on one side: device and inode number.
type InodeKey = (u64, u64);

/// The indices of the items touching each multi-linked inode of `from`, in
/// path order.
fn groups(items: &[SyncItem], from: Side) -> HashMap<InodeKey, Vec<usize>> {
    let mut groups: HashMap<InodeKey, Vec<usize>> = HashMap::new();
    for (index, item) in items.iter().enumerate() {
        if let Some(entry) = item.entry(from).filter(|e| is_linked_file(e)) {
            groups
                .entry((entry.dev, entry.ino))
                .or_default()
                .push(index);
        }
    }
    groups.retain(|_, members| members.len() > 1);
    groups
}

fn is_linked_file(entry: &Entry) -> bool {
    entry.kind == Kind::File && entry.nlink > 1 && entry.hash.is_some()
}

/// Is `item` a plain copy of a file from `from` that may become a link?
fn linkable_copy(item: &SyncItem, from: Side) -> bool {
    let to = from.other();
    item.action == Action::Copy { from, to }
        && item.link.is_none()
        && item.entry(to).is_none_or(|held| held.kind != Kind::Dir)
}

/// Give one group's copies a leader and make the others links to it.
fn plan_group(items: &mut [SyncItem], members: &[usize], from: Side, synced: &SyncedProps) {
    let copies: Vec<usize> = members
        .iter()
        .copied()
        .filter(|&i| linkable_copy(&items[i], from))
        .collect();
    let Some(&first) = copies.first() else {
        return;
    };
    let model = items[first]
        .entry(from)
        .expect("a copy has a source")
        .clone();
    let like_model = |&i: &usize| {
        let entry = items[i].entry(from).expect("a copy has a source");
        same_contents(Some(entry), Some(&model)) && same_props(entry, &model, synced)
    };
    if !copies.iter().all(like_model) {
        // Written or changed while it was scanned: each name on its own.
        return;
    }
    let settled = members
        .iter()
        .find_map(|&i| settled_leader(&items[i], from, &model, synced));
    let (leader, expect, linked) = match settled {
        Some((leader, expect)) => (leader, Some(expect), &copies[..]),
        None if copies.len() > 1 => (items[first].path.clone(), None, &copies[1..]),
        None => return,
    };
    for &index in linked {
        items[index].link = Some(Box::new(LinkTo {
            leader: leader.clone(),
            agreed: expect.clone(),
        }));
    }
}

/// The path and the entry `to` will hold there when the plan has carried
/// out its other steps, if `item` is a name of the group that `to` holds
/// (or will hold, by a rename) with `model`'s contents and properties.
fn settled_leader(
    item: &SyncItem,
    from: Side,
    model: &Entry,
    synced: &SyncedProps,
) -> Option<(accord_model::RelPath, Entry)> {
    let to = from.other();
    let held = match item.action {
        Action::Agree => item.entry(to)?.clone(),
        Action::Rename { on } if on == to => {
            let moved = item.moved.as_ref()?;
            Entry {
                path: item.path.clone(),
                ..moved.entry.clone()
            }
        }
        _ => return None,
    };
    let fits = held.kind == Kind::File
        && same_contents(Some(&held), Some(model))
        && same_props(&held, model, synced);
    fits.then(|| (item.path.clone(), held))
}

// ---- property changes in place ----
//
// Permissions (and mtimes under `--times`) are set in place, on the inode:
// through one name of a group they change every name of it. That is right
// only when every name of the inode on that side takes the same change in
// this plan (a chmod through one name on the other side changed every
// name there too, and groups agree). Otherwise another name of the group,
// maybe in conflict, maybe outside the root, would change silently; so
// the name is given its new properties on a new inode instead: a
// `CopyProps` becomes a `Copy` of the equal contents (which may then be
// linked to the rest of its group on the other side's terms), and the
// properties a `CopyContentsAndPropsBack` would set back in place on a
// shared inode make it a conflict, left to the user.

/// What an item sets in place on `on`'s entry, if anything: the mode and
/// mtime it gives it.
fn props_set_in_place(item: &SyncItem, on: Side) -> Option<(u32, accord_model::Time)> {
    match item.action {
        Action::CopyProps { from, to } if to == on => {
            let source = item.entry(from)?;
            Some((source.props.mode, source.props.mtime))
        }
        Action::CopyContentsAndPropsBack { to, .. } if to.other() == on => {
            let kept = item.entry(to)?;
            Some((kept.props.mode, kept.props.mtime))
        }
        _ => None,
    }
}

/// Keep each in-place property change to the names it is for (see above);
/// with or without hard-link groups, since per name is what a sync without
/// them promises too.
pub(crate) fn keep_props_to_their_names(items: &mut [SyncItem]) {
    for on in [Side::A, Side::B] {
        props_off_shared_inodes(items, on);
    }
}

fn props_off_shared_inodes(items: &mut [SyncItem], on: Side) {
    let mut setters: HashMap<InodeKey, Vec<usize>> = HashMap::new();
    for (index, item) in items.iter().enumerate() {
        let shared = item
            .entry(on)
            .filter(|e| e.kind == Kind::File && e.nlink > 1);
        if let (Some(entry), Some(_)) = (shared, props_set_in_place(item, on)) {
            setters
                .entry((entry.dev, entry.ino))
                .or_default()
                .push(index);
        }
    }
    for members in setters.into_values() {
        let nlink = items[members[0]].entry(on).map_or(0, |e| e.nlink);
        let wanted = props_set_in_place(&items[members[0]], on);
        let all_alike = members
            .iter()
            .all(|&i| props_set_in_place(&items[i], on) == wanted);
        if all_alike && members.len() as u64 == nlink {
            continue;
        }
        for index in members {
            items[index].action = off_the_inode(items[index].action);
        }
    }
}

/// The action that gives a name its new properties without changing the
/// inode it shares with other names.
fn off_the_inode(action: Action) -> Action {
    match action {
        Action::CopyProps { from, to } => Action::Copy { from, to },
        _ => Action::Conflict(crate::reconcile::ConflictReason::BothChanged),
    }
}

#[cfg(test)]
mod tests;
