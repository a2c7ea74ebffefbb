//! Two-way reconciliation (the Unison paper, §3): from what changed on each
//! side of a path since the last agreement to what to do about it.
//!
//! - Changed on one side only: propagate it to the other.
//! - Changed on both sides to the same result (same kind, same fingerprint,
//!   same link target, same synced properties): agreed; only the archives
//!   learn it.
//! - Changed on both sides differently: a conflict, left alone.
//! - A directory deleted (or replaced by something else) on one side while
//!   something beneath it was created or changed on the other: a conflict
//!   for the whole directory, never a silent deletion of the change. Mere
//!   deletions beneath it on the other side do not conflict: they agree
//!   with the directory's deletion (Unison calls this a conflict too).
//! - A lost or unreadable archive is no archive: every present path is
//!   "created" on its side, so equal ones agree and differing ones conflict
//!   (the paper's "as though both replicas had been empty").
//!
//! Contents and properties are reconciled apart when they do not clash: a
//! file edited on one side whose permissions (owner, extended attributes)
//! changed on the other gets both changes
//! ([`Action::CopyContentsAndPropsBack`]), and two sides that reached the
//! same new contents while only one changed the permissions take that
//! side's ([`Action::CopyProps`]). Unison does this for a directory's
//! properties, but its reconciler reports both cases as conflicts for
//! files; we do not, since neither change is lost and neither clashes (a
//! comparison with Unison lists them as deliberate differences, with the
//! deletions beneath a deleted directory above). A changed mtime (under
//! `--times`) is not such a property: it belongs to the contents it dates,
//! so new contents from the other side replace it. Properties changed on
//! both sides differently are a conflict; so is a deletion on one side
//! against a property change on the other.
//!
//! Policies ([`ReconcileOptions::prefer`], [`ReconcileOptions::force`]) are
//! applied here, so the plan says which items a policy decided
//! ([`SyncItem::overridden`]) and a caller only maps flags to options.

use crate::detect::{mtime_differs, props_differ, SyncedProps, Update};
use accord_model::{Entry, Kind, Observed, RelPath};
use std::sync::Arc;

/// One of the two replicas, in the order the user named them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    A,
    B,
}

impl Side {
    pub fn other(self) -> Side {
        match self {
            Side::A => Side::B,
            Side::B => Side::A,
        }
    }
}

/// One side's state at one path, as reconciliation takes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SideState {
    pub update: Update,
    /// What the side holds at the path now. A regular file carries its
    /// fingerprint: from detection when its contents changed, from the
    /// archive when they did not (see [`SideState::new`]). Shared with the
    /// plan's items (see [`SyncItem::a`]).
    pub now: Option<Arc<Entry>>,
}

impl SideState {
    /// The state of a side whose detection said `update` for `current`
    /// against `archived`. A file whose contents did not change gets the
    /// archive's fingerprint, so that any two files can be compared.
    pub fn new(update: Update, archived: Option<&Observed>, current: Option<Entry>) -> SideState {
        let mut now = current;
        if let (Some(entry), Some(was)) = (now.as_mut(), archived) {
            if entry.hash.is_none() && !contents_updated(&update) {
                entry.hash = was.entry.hash;
            }
        }
        SideState {
            update,
            now: now.map(Arc::new),
        }
    }

    fn is_dir(&self) -> bool {
        self.now
            .as_ref()
            .is_some_and(|entry| entry.kind == Kind::Dir)
    }
}

/// Both sides at one path where at least one side has an update.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathUpdate {
    pub path: RelPath,
    pub a: SideState,
    pub b: SideState,
}

impl PathUpdate {
    pub fn side(&self, side: Side) -> &SideState {
        match side {
            Side::A => &self.a,
            Side::B => &self.b,
        }
    }
}

/// Why a path is a conflict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConflictReason {
    /// Both sides changed (or created) the path with different results:
    /// other contents, another link target, another kind.
    BothChanged,
    /// One side deleted the path; the other changed its contents or its
    /// properties.
    DeletedAndChanged { deleted_on: Side },
    /// Both sides changed the properties (permissions, owner, extended
    /// attributes, a file's mtime under `--times`) to different values.
    BothChangedProps,
    /// A directory was deleted or replaced on one side while something
    /// beneath it was created or changed on the other. The conflict is the
    /// whole directory.
    ChangedBeneathRemovedDirectory { removed_on: Side },
}

/// What to do at one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Nothing to do: what [`reconcile_path`] says of a path without
    /// updates (never in a plan made by [`reconcile_tree`]), and what a
    /// path skipped by a person's [`Choice::Skip`] gets.
    Nothing,
    /// Both sides already hold the same thing: only the archives are
    /// updated (equal changes on both sides, a touch).
    Agree,
    /// `to` takes `from`'s entry whole: kind, contents, properties.
    Copy { from: Side, to: Side },
    /// The path is removed from `on` (its subtree has items of its own).
    Delete { on: Side },
    /// The contents are equal; `to` takes `from`'s properties.
    CopyProps { from: Side, to: Side },
    /// `from` changed the contents, `to` only the permissions, owner or
    /// extended attributes: `to` takes `from`'s contents (and their mtime)
    /// keeping its own permissions, owner and extended attributes, and
    /// `from` takes those of `to`. Both changes survive.
    CopyContentsAndPropsBack { from: Side, to: Side },
    /// Left alone on both sides.
    Conflict(ConflictReason),
    /// `on` renames what it holds at [`SyncItem::moved`]'s path to this
    /// path, where it then holds what the other side holds here (equal
    /// contents and synced properties): in place of deleting it there and
    /// copying the other side's entry here, with the same end state and
    /// nothing on the wire. A directory's subtree moves with it (its paths
    /// follow as [`Action::MovedWith`]). See `renames.rs`.
    Rename { on: Side },
    /// Beneath a renamed directory: moved by that directory's rename,
    /// nothing of its own to do but be recorded.
    MovedWith { on: Side },
    /// `--keep-both`: two non-directories changed differently; `winner`'s
    /// version keeps the path on both sides and the loser's is kept on
    /// both beside it under a conflict name (`keep_both.rs`).
    KeepBoth { winner: Side },
}

/// `--prefer`: how a conflict is resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Preference {
    Side(Side),
    /// The side whose entry has the later mtime; against a deletion, the
    /// side that still has the entry. Equal mtimes leave the conflict.
    Newer,
    /// The side whose entry has the earlier mtime. A deletion or equal
    /// mtimes leave the conflict.
    Older,
}

/// A policy that overrode what reconciliation found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// `--prefer`: conflicts resolved.
    Prefer(Preference),
    /// `--force`: this side's state wins everywhere this run (one-way).
    Force(Side),
    /// A person chose this in the interactive mode ([`crate::PlanEdit`]).
    Chosen(Choice),
    /// `--keep-both`: both versions kept, this side's under the name.
    KeepBoth(Side),
}

/// A person's decision about one path of a sync plan (and its subtree when
/// the path is not a directory on both sides: see [`crate::PlanEdit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Choice {
    /// Make both sides hold what this side holds.
    Take(Side),
    /// Leave the path alone this run: nothing is changed or recorded, and
    /// a conflict stays a conflict.
    Skip,
}

/// Options of reconciliation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReconcileOptions {
    pub props: SyncedProps,
    pub prefer: Option<Preference>,
    /// Wins over `prefer`.
    pub force: Option<Side>,
    /// Pair deletions with equal creations into renames (`renames.rs`).
    pub renames: bool,
    /// Make copies of a hard-link group's names links on the receiving
    /// side (`links.rs`).
    pub hard_links: bool,
    /// `--keep-both`: resolve conflicts between two changed non-directories
    /// by keeping both versions (`keep_both.rs`). `force` wins over it;
    /// `prefer` picks its winner.
    pub keep_both: bool,
}

/// A policy's decision: what reconciliation had found, and which policy
/// replaced it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Override {
    pub found: Action,
    pub by: Policy,
}

/// One item of a sync plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncItem {
    pub path: RelPath,
    pub action: Action,
    /// Set when a policy chose `action` (a conflict "resolved by --prefer",
    /// a propagation reversed by `--force`).
    pub overridden: Option<Override>,
    /// What each side held when the plan was made: what a step must find
    /// there before it changes anything (safety rule 3). Shared with the
    /// updates the plan was made from, which stay alive while a person may
    /// still change the plan: a first sync has an update and an item for
    /// every path, and two copies of every entry would double its memory.
    pub a: Option<Arc<Entry>>,
    pub b: Option<Arc<Entry>>,
    /// For [`Action::Rename`] and [`Action::MovedWith`]: where the renaming
    /// side's entry comes from (it holds nothing at `path` yet).
    pub moved: Option<Box<Moved>>,
    /// For an [`Action::Copy`] of a regular file that is one name of a
    /// hard-link group on the side it comes from: the receiving side makes
    /// it a hard link of another name of the group instead of taking the
    /// contents again. See `links.rs`.
    pub link: Option<Box<LinkTo>>,
}

/// Where a copy made as a hard link links to, on the receiving side.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkTo {
    /// The group's name the link is made to (its leader).
    pub leader: RelPath,
    /// What the receiving side holds at `leader` and must still hold when
    /// the link is made, when the plan leaves the leader alone there (its
    /// contents already agree). `None`: the plan copies the leader to the
    /// receiving side itself, and the link is made to that copy once it is
    /// in place.
    pub agreed: Option<Entry>,
}

/// The source of a rename: a path and what the renaming side holds there
/// (what the rename must still find before it moves it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Moved {
    pub from: RelPath,
    pub entry: Entry,
}

impl SyncItem {
    /// The reason, when the item is a conflict left to the user.
    pub fn conflict(&self) -> Option<ConflictReason> {
        match self.action {
            Action::Conflict(reason) => Some(reason),
            _ => None,
        }
    }

    /// What `side` holds at the item's path.
    pub fn entry(&self, side: Side) -> Option<&Entry> {
        match side {
            Side::A => self.a.as_deref(),
            Side::B => self.b.as_deref(),
        }
    }
}

/// The paths given to [`reconcile_tree`] were not strictly in `RelPath`
/// order (the first one out of place).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfOrder {
    pub path: RelPath,
}

/// Is this an update of the contents (presence, kind, bytes, target)?
pub fn contents_updated(update: &Update) -> bool {
    match update {
        Update::Created | Update::Deleted { .. } => true,
        Update::Changed(changes) => changes.kind || changes.contents,
        Update::Unchanged | Update::Touched => false,
    }
}

/// Is this an update of the permissions, owner or extended attributes?
pub fn props_updated(update: &Update) -> bool {
    matches!(update, Update::Changed(changes) if changes.props)
}

fn mtime_updated(update: &Update) -> bool {
    matches!(update, Update::Changed(changes) if changes.mtime)
}

/// Is this any update at all (a touch is not)?
pub fn is_update(update: &Update) -> bool {
    !matches!(update, Update::Unchanged | Update::Touched)
}

/// Do two entries (or absences) hold the same contents? Files compare by
/// fingerprint; a file without one equals nothing.
pub fn same_contents(x: Option<&Entry>, y: Option<&Entry>) -> bool {
    let (x, y) = match (x, y) {
        (None, None) => return true,
        (Some(x), Some(y)) if x.kind == y.kind => (x, y),
        _ => return false,
    };
    match x.kind {
        Kind::File => x.hash.is_some() && x.hash == y.hash,
        Kind::Symlink => x.link_target == y.link_target,
        Kind::CharDev | Kind::BlockDev => x.rdev == y.rdev,
        Kind::Dir | Kind::Fifo | Kind::Socket => true,
    }
}

/// Do two entries of one kind agree on every synced property?
pub fn same_props(x: &Entry, y: &Entry, synced: &SyncedProps) -> bool {
    !props_differ(x, y, synced) && !mtime_differs(x, y, synced)
}

/// Reconcile one path on its own (without regard to its subtree).
pub fn reconcile_path(a: &SideState, b: &SideState, synced: &SyncedProps) -> Action {
    match (contents_updated(&a.update), contents_updated(&b.update)) {
        (true, true) => both_changed_contents(a, b, synced),
        (true, false) => one_changed_contents(Side::A, a, b, synced),
        (false, true) => one_changed_contents(Side::B, b, a, synced),
        (false, false) => only_props(a, b, synced),
    }
}

fn both_changed_contents(a: &SideState, b: &SideState, synced: &SyncedProps) -> Action {
    let (x, y) = (a.now.as_deref(), b.now.as_deref());
    if !same_contents(x, y) {
        return Action::Conflict(match (x, y) {
            (None, _) => ConflictReason::DeletedAndChanged {
                deleted_on: Side::A,
            },
            (_, None) => ConflictReason::DeletedAndChanged {
                deleted_on: Side::B,
            },
            _ => ConflictReason::BothChanged,
        });
    }
    match (x, y) {
        (Some(x), Some(y)) if !same_props(x, y, synced) => {
            props_after_equal_contents(&a.update, &b.update)
        }
        _ => Action::Agree,
    }
}

/// Both sides reached the same contents with other properties: the side
/// that changed its properties (or made the entry anew) wins if the other
/// did not.
fn props_after_equal_contents(a: &Update, b: &Update) -> Action {
    let fresh_props = |update: &Update| match update {
        Update::Created => true,
        Update::Changed(changes) => changes.kind || changes.props || changes.mtime,
        _ => false,
    };
    match (fresh_props(a), fresh_props(b)) {
        (true, false) => Action::CopyProps {
            from: Side::A,
            to: Side::B,
        },
        (false, true) => Action::CopyProps {
            from: Side::B,
            to: Side::A,
        },
        _ => Action::Conflict(ConflictReason::BothChangedProps),
    }
}

/// `winner` changed the contents; `other` did not.
fn one_changed_contents(
    winner_side: Side,
    winner: &SideState,
    other: &SideState,
    synced: &SyncedProps,
) -> Action {
    if !props_updated(&other.update) {
        // Untouched, touched, or only its mtime moved, which the new
        // contents bring anew.
        return take_whole(winner_side, winner, other, synced);
    }
    let (Some(new), Some(kept)) = (winner.now.as_ref(), other.now.as_ref()) else {
        return Action::Conflict(match winner.now {
            None => ConflictReason::DeletedAndChanged {
                deleted_on: winner_side,
            },
            Some(_) => ConflictReason::BothChanged,
        });
    };
    match winner.update {
        Update::Changed(changes) if !changes.kind => {
            if !changes.props {
                Action::CopyContentsAndPropsBack {
                    from: winner_side,
                    to: winner_side.other(),
                }
            } else if props_differ(new, kept, synced) {
                Action::Conflict(ConflictReason::BothChangedProps)
            } else {
                copy(winner_side)
            }
        }
        // A new entry (or a new kind) against a change of the old one's
        // properties: one of them would be lost.
        _ => Action::Conflict(ConflictReason::BothChanged),
    }
}

/// Make the other side hold what `winner_side` holds.
fn take_whole(
    winner_side: Side,
    winner: &SideState,
    other: &SideState,
    synced: &SyncedProps,
) -> Action {
    match (winner.now.as_ref(), other.now.as_ref()) {
        (None, None) => Action::Agree,
        (None, Some(_)) => Action::Delete {
            on: winner_side.other(),
        },
        // Already equal (the archives lagged behind a propagation).
        (Some(x), Some(y)) if same_contents(Some(x), Some(y)) && same_props(x, y, synced) => {
            Action::Agree
        }
        (Some(_), _) => copy(winner_side),
    }
}

fn copy(from: Side) -> Action {
    Action::Copy {
        from,
        to: from.other(),
    }
}

/// Neither side changed the contents.
fn only_props(a: &SideState, b: &SideState, synced: &SyncedProps) -> Action {
    let changed = |state: &SideState| props_updated(&state.update) || mtime_updated(&state.update);
    let (changed_a, changed_b) = (changed(a), changed(b));
    if !changed_a && !changed_b {
        let touched = a.update == Update::Touched || b.update == Update::Touched;
        return if touched {
            Action::Agree
        } else {
            Action::Nothing
        };
    }
    let (Some(x), Some(y)) = (a.now.as_ref(), b.now.as_ref()) else {
        // The archives disagree about whether the path exists: make the
        // side without it take it.
        let winner = if a.now.is_some() { Side::A } else { Side::B };
        let (w, o) = if winner == Side::A { (a, b) } else { (b, a) };
        return take_whole(winner, w, o, synced);
    };
    match (changed_a, changed_b) {
        _ if same_props(x, y, synced) => Action::Agree,
        (true, false) => Action::CopyProps {
            from: Side::A,
            to: Side::B,
        },
        (false, true) => Action::CopyProps {
            from: Side::B,
            to: Side::A,
        },
        _ => Action::Conflict(ConflictReason::BothChangedProps),
    }
}

/// Reconcile a tree: `updates` holds, in strictly increasing `RelPath`
/// order, every path where at least one side has an update (or a touch),
/// with both sides' states. Paths without updates need nothing and are not
/// listed. Items come out in the same order; a conflict over a path that is
/// not a directory on both sides covers its subtree (no items beneath it).
pub fn reconcile_tree(
    updates: &[PathUpdate],
    options: &ReconcileOptions,
) -> Result<Vec<SyncItem>, OutOfOrder> {
    check_order(updates)?;
    Ok(reconcile_chosen(updates, options, &Choices::new()))
}

/// Choices by path.
pub(crate) type Choices = std::collections::BTreeMap<RelPath, Choice>;

/// [`reconcile_tree`] over paths known to be in order, with a person's
/// choices taking the place of what was found (and of the policies) where
/// they were made.
pub(crate) fn reconcile_chosen(
    updates: &[PathUpdate],
    options: &ReconcileOptions,
    choices: &Choices,
) -> Vec<SyncItem> {
    let mut items = Vec::with_capacity(updates.len());
    let mut index = 0;
    while index < updates.len() {
        index = match choices.get(&updates[index].path) {
            Some(choice) => chosen_at(updates, index, *choice, &options.props, &mut items),
            None => reconcile_at(updates, index, options, &mut items),
        };
    }
    if options.renames {
        items = crate::renames::pair_renames(items, &options.props);
    }
    crate::links::plan_links(&mut items, &options.props, options.hard_links);
    items
}

/// Does a choice at this path decide its subtree too? Yes unless it is a
/// directory on both sides: beneath a path that is a directory on one side
/// only, everything exists on that side only, so whatever the path becomes
/// (created, deleted, replaced) its subtree must follow, or the plan would
/// fill a directory that is not made or delete one that is not emptied.
pub fn choice_covers_subtree(update: &PathUpdate) -> bool {
    !(update.a.is_dir() && update.b.is_dir())
}

/// Plan `updates[index]` as `choice` says (and its subtree when the choice
/// covers it); returns the index of the next path to plan.
fn chosen_at(
    updates: &[PathUpdate],
    index: usize,
    choice: Choice,
    synced: &SyncedProps,
    items: &mut Vec<SyncItem>,
) -> usize {
    let update = &updates[index];
    let found = found_at(updates, index, synced);
    items.push(chosen_item(update, found, choice, synced));
    if !choice_covers_subtree(update) {
        return index + 1;
    }
    let end = subtree_end(updates, index);
    // A skipped conflict over a subtree keeps its subtree out of the plan,
    // as reconciliation left it.
    let covered_conflict = choice == Choice::Skip && covers_subtree(update, found);
    if !covered_conflict {
        for beneath in &updates[index + 1..end] {
            let found_beneath = reconcile_path(&beneath.a, &beneath.b, synced);
            items.push(chosen_item(beneath, found_beneath, choice, synced));
        }
    }
    end
}

fn chosen_item(
    update: &PathUpdate,
    found: Action,
    choice: Choice,
    synced: &SyncedProps,
) -> SyncItem {
    let action = match choice {
        Choice::Take(winner) => make_equal_to(winner, update, synced),
        // A conflict left alone is still reported as one.
        Choice::Skip if matches!(found, Action::Conflict(_)) => found,
        Choice::Skip => Action::Nothing,
    };
    let overridden = (action != found).then_some(Override {
        found,
        by: Policy::Chosen(choice),
    });
    sync_item(update, action, overridden)
}

fn check_order(updates: &[PathUpdate]) -> Result<(), OutOfOrder> {
    match updates.windows(2).find(|pair| pair[0].path >= pair[1].path) {
        Some(pair) => Err(OutOfOrder {
            path: pair[1].path.clone(),
        }),
        None => Ok(()),
    }
}

/// Plan `updates[index]` (and its subtree when a conflict covers it);
/// returns the index of the next path to plan.
fn reconcile_at(
    updates: &[PathUpdate],
    index: usize,
    options: &ReconcileOptions,
    items: &mut Vec<SyncItem>,
) -> usize {
    let update = &updates[index];
    let found = found_at(updates, index, &options.props);
    if let Some(winner) = crate::keep_both::keep_both_winner(update, found, options) {
        items.push(sync_item(
            update,
            Action::KeepBoth { winner },
            Some(Override {
                found,
                by: Policy::KeepBoth(winner),
            }),
        ));
        // Two non-directories: what an archive held beneath is gone on
        // both sides, and agreed as such.
        let end = subtree_end(updates, index);
        for beneath in &updates[index + 1..end] {
            let action = reconcile_path(&beneath.a, &beneath.b, &options.props);
            if action != Action::Nothing {
                items.push(sync_item(beneath, action, None));
            }
        }
        return end;
    }
    let decision = policy_decision(update, found, options);
    let decide = |at: &PathUpdate| match decision {
        Some((winner, policy)) => decided_by(at, found, winner, policy, &options.props),
        None => sync_item(at, found, None),
    };
    let planned = decide(update);
    // A path listed without an update on either side needs no item.
    if planned.action != Action::Nothing {
        items.push(planned);
    }
    // Under --force every path is made equal on its own.
    if options.force.is_some() || !covers_subtree(update, found) {
        return index + 1;
    }
    let end = subtree_end(updates, index);
    if decision.is_some() {
        items.extend(updates[index + 1..end].iter().map(decide));
    }
    end
}

/// The side a policy makes win at `update`, if any: `--force` everywhere,
/// `--prefer` on the conflicts it can decide.
fn policy_decision(
    update: &PathUpdate,
    found: Action,
    options: &ReconcileOptions,
) -> Option<(Side, Policy)> {
    if let Some(side) = options.force {
        return Some((side, Policy::Force(side)));
    }
    let preference = options.prefer?;
    if !matches!(found, Action::Conflict(_)) {
        return None;
    }
    preferred_side(update, preference).map(|side| (side, Policy::Prefer(preference)))
}

/// A conflict over a path that is not a directory on both sides is a
/// conflict over its whole subtree: nothing beneath can be placed.
fn covers_subtree(update: &PathUpdate, found: Action) -> bool {
    matches!(found, Action::Conflict(_)) && !(update.a.is_dir() && update.b.is_dir())
}

/// What reconciliation finds at `updates[index]`, the rule for removed
/// directories included.
fn found_at(updates: &[PathUpdate], index: usize, synced: &SyncedProps) -> Action {
    let found = reconcile_path(&updates[index].a, &updates[index].b, synced);
    if matches!(found, Action::Conflict(_)) {
        return found;
    }
    match removed_directory_with_changes_beneath(updates, index) {
        Some(removed_on) => {
            Action::Conflict(ConflictReason::ChangedBeneathRemovedDirectory { removed_on })
        }
        None => found,
    }
}

/// The side that deleted or replaced the directory at `updates[index]`
/// while the other side, still holding it, created or changed something
/// beneath it.
fn removed_directory_with_changes_beneath(updates: &[PathUpdate], index: usize) -> Option<Side> {
    let update = &updates[index];
    [Side::A, Side::B].into_iter().find(|&side| {
        let keeper = side.other();
        removed_directory(&update.side(side).update)
            && update.side(keeper).is_dir()
            && updates[index + 1..subtree_end(updates, index)]
                .iter()
                .any(|beneath| created_or_changed(&beneath.side(keeper).update))
    })
}

fn removed_directory(update: &Update) -> bool {
    match update {
        Update::Deleted { was } => *was == Kind::Dir,
        Update::Changed(changes) => changes.kind && changes.was == Kind::Dir,
        _ => false,
    }
}

fn created_or_changed(update: &Update) -> bool {
    matches!(update, Update::Created | Update::Changed(_))
}

/// The index just past the subtree of `updates[index]` (its descendants
/// follow it contiguously in `RelPath` order).
fn subtree_end(updates: &[PathUpdate], index: usize) -> usize {
    let dir = &updates[index].path;
    let beneath = updates[index + 1..]
        .iter()
        .take_while(|update| update.path.starts_with(dir))
        .count();
    index + 1 + beneath
}

/// The side `preference` picks for a conflict at `update`, if it can.
pub(crate) fn preferred_side(update: &PathUpdate, preference: Preference) -> Option<Side> {
    // The side that wins when A's mtime is the later one.
    let winner_if_a_is_later = match preference {
        Preference::Side(side) => return Some(side),
        Preference::Newer => Side::A,
        Preference::Older => Side::B,
    };
    match (update.a.now.as_ref(), update.b.now.as_ref()) {
        (Some(x), Some(y)) => match x.props.mtime.cmp(&y.props.mtime) {
            std::cmp::Ordering::Greater => Some(winner_if_a_is_later),
            std::cmp::Ordering::Less => Some(winner_if_a_is_later.other()),
            std::cmp::Ordering::Equal => None,
        },
        // A deletion has no time: what still exists counts as newer.
        (Some(_), None) if preference == Preference::Newer => Some(Side::A),
        (None, Some(_)) if preference == Preference::Newer => Some(Side::B),
        _ => None,
    }
}

/// The item that makes both sides hold what `winner` holds, marked as the
/// policy's decision when it differs from what was found.
fn decided_by(
    update: &PathUpdate,
    found: Action,
    winner: Side,
    policy: Policy,
    synced: &SyncedProps,
) -> SyncItem {
    let action = make_equal_to(winner, update, synced);
    let overridden = (action != found).then_some(Override { found, by: policy });
    sync_item(update, action, overridden)
}

/// What makes the loser hold what `winner` holds at this path.
fn make_equal_to(winner: Side, update: &PathUpdate, synced: &SyncedProps) -> Action {
    let loser = winner.other();
    match (
        update.side(winner).now.as_ref(),
        update.side(loser).now.as_ref(),
    ) {
        (None, None) => Action::Agree,
        (None, Some(_)) => Action::Delete { on: loser },
        (Some(x), Some(y)) if same_contents(Some(x), Some(y)) => {
            if same_props(x, y, synced) {
                Action::Agree
            } else {
                Action::CopyProps {
                    from: winner,
                    to: loser,
                }
            }
        }
        (Some(_), _) => copy(winner),
    }
}

fn sync_item(update: &PathUpdate, action: Action, overridden: Option<Override>) -> SyncItem {
    SyncItem {
        path: update.path.clone(),
        action,
        overridden,
        a: update.a.now.clone(),
        b: update.b.now.clone(),
        moved: None,
        link: None,
    }
}
