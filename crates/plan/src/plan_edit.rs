//! A sync plan edited by a person between reconciliation and propagation
//! (the interactive `accord sync`): resolve a conflict toward A or B, turn
//! a propagation around, or leave a path alone this run.
//!
//! Choices are kept by path and the plan is reconciled again from the
//! updates after each one, so an edited plan is always one reconciliation
//! could make: a choice at a path that is not a directory on both sides
//! decides its whole subtree ([`choice_covers_subtree`]). Turning the
//! creation of a directory around deletes its subtree too; resolving a
//! conflict over a removed directory toward the side that kept it brings
//! its subtree back; skipping a new directory skips what is inside it.
//! Paths beneath such a path (one with an update, not a directory on both
//! sides) follow it and refuse choices of their own, chosen or not: a
//! child brought to a side where its directory is deleted or never made,
//! or kept where its directory is removed, would leave the plan unable to
//! run. The deletion guard is the engine's to run again on the edited
//! plan.

use crate::reconcile::{
    choice_covers_subtree, reconcile_chosen, Action, Choice, Choices, Override, PathUpdate, Policy,
    ReconcileOptions, Side, SyncItem,
};
use accord_model::RelPath;
use std::fmt;

/// Why a choice was not taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refused {
    /// The path lies beneath one that decides its subtree (a directory
    /// on one side only, or replaced): choose there.
    FollowsDirectory(RelPath),
    /// The path has no item in the plan.
    NotInPlan,
    /// The item has no direction to turn around (a conflict, an agreement,
    /// a skipped path): choose a side instead.
    NoDirection,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::FollowsDirectory(path) => {
                write!(f, "decided with {} (choose there)", path.display())
            }
            Refused::NotInPlan => f.write_str("not in the plan"),
            Refused::NoDirection => f.write_str("no direction to flip: choose A or B"),
        }
    }
}

/// The side whose state an action makes both sides hold, if it has one.
pub fn winner(action: Action) -> Option<Side> {
    match action {
        Action::Copy { from, .. }
        | Action::CopyProps { from, .. }
        | Action::CopyContentsAndPropsBack { from, .. } => Some(from),
        Action::KeepBoth { winner } => Some(winner),
        Action::Delete { on } | Action::Rename { on } | Action::MovedWith { on } => {
            Some(on.other())
        }
        Action::Nothing | Action::Agree | Action::Conflict(_) => None,
    }
}

/// What reconciliation (with the policies) planned for an item before a
/// person's choice, when the item carries one.
fn planned(item: &SyncItem) -> Action {
    match item.overridden {
        Some(Override {
            found,
            by: Policy::Chosen(_),
        }) => found,
        _ => item.action,
    }
}

/// A sync plan and the choices made on it.
pub struct PlanEdit<'u> {
    updates: &'u [PathUpdate],
    options: ReconcileOptions,
    choices: Choices,
    /// A rename's target and its source, once a choice was made on it: a
    /// choice there is made at both paths (skipping only the target would
    /// leave the source's deletion, flipping only one would delete both).
    partners: std::collections::BTreeMap<RelPath, RelPath>,
    items: Vec<SyncItem>,
}

impl<'u> PlanEdit<'u> {
    /// `items` is what `reconcile_tree(updates, &options)` returned (not
    /// computed again).
    pub fn new(
        updates: &'u [PathUpdate],
        options: ReconcileOptions,
        items: Vec<SyncItem>,
    ) -> PlanEdit<'u> {
        PlanEdit {
            updates,
            options,
            choices: Choices::new(),
            partners: Default::default(),
            items,
        }
    }

    /// The plan as chosen so far, in path order.
    pub fn items(&self) -> &[SyncItem] {
        &self.items
    }

    pub fn into_items(self) -> Vec<SyncItem> {
        self.items
    }

    /// The choice made at `path` itself.
    pub fn choice(&self, path: &RelPath) -> Option<Choice> {
        self.choices.get(path).copied()
    }

    /// The ancestor that decides `path`: the highest one with an update
    /// that is not a directory on both sides.
    pub fn follows(&self, path: &RelPath) -> Option<RelPath> {
        let mut decider = None;
        let mut at = path.parent();
        while let Some(ancestor) = at {
            if self.update(&ancestor).is_some_and(choice_covers_subtree) {
                decider = Some(ancestor.clone());
            }
            at = ancestor.parent();
        }
        decider
    }

    fn update(&self, path: &RelPath) -> Option<&PathUpdate> {
        let index = self
            .updates
            .binary_search_by(|update| update.path.cmp(path))
            .ok()?;
        Some(&self.updates[index])
    }

    fn item(&self, path: &RelPath) -> Option<&SyncItem> {
        let index = self
            .items
            .binary_search_by(|item| item.path.cmp(path))
            .ok()?;
        Some(&self.items[index])
    }

    /// Make `choice` at `path` (None: back to what was planned).
    pub fn choose(&mut self, path: &RelPath, choice: Option<Choice>) -> Result<(), Refused> {
        if let Some(ancestor) = self.follows(path) {
            return Err(Refused::FollowsDirectory(ancestor));
        }
        self.update(path).ok_or(Refused::NotInPlan)?;
        let partner = self.partner(path);
        if let Some(ancestor) = partner.as_ref().and_then(|from| self.follows(from)) {
            return Err(Refused::FollowsDirectory(ancestor));
        }
        if let Some(from) = &partner {
            self.partners.insert(path.clone(), from.clone());
        }
        for at in std::iter::once(path).chain(partner.as_ref()) {
            match choice {
                Some(choice) => self.choices.insert(at.clone(), choice),
                None => self.choices.remove(at),
            };
        }
        self.items = reconcile_chosen(self.updates, &self.options, &self.choices);
        Ok(())
    }

    /// The source of the rename at `path` (planned now, or when a choice
    /// was first made there).
    fn partner(&self, path: &RelPath) -> Option<RelPath> {
        let renamed = self
            .item(path)
            .filter(|item| matches!(item.action, Action::Rename { .. }))
            .and_then(|item| item.moved.as_ref());
        match renamed {
            Some(moved) => Some(moved.from.clone()),
            None => self.partners.get(path).cloned(),
        }
    }

    /// Make both sides hold what `side` holds at `path`; choosing what was
    /// planned anyway drops the choice (so a merge of both sides' changes,
    /// `CopyContentsAndPropsBack`, comes back when flipped twice).
    pub fn take(&mut self, path: &RelPath, side: Side) -> Result<(), Refused> {
        let item = self.item(path).ok_or(Refused::NotInPlan)?;
        let choice = (winner(planned(item)) != Some(side)).then_some(Choice::Take(side));
        self.choose(path, choice)
    }

    /// Turn the item's direction around.
    pub fn flip(&mut self, path: &RelPath) -> Result<(), Refused> {
        let item = self.item(path).ok_or(Refused::NotInPlan)?;
        let side = winner(item.action).ok_or(Refused::NoDirection)?;
        self.take(path, side.other())
    }

    /// Skip `path` this run, or bring it back if it is skipped.
    pub fn toggle_skip(&mut self, path: &RelPath) -> Result<(), Refused> {
        let skipped = self.choice(path) == Some(Choice::Skip);
        self.choose(path, (!skipped).then_some(Choice::Skip))
    }

    /// Leave every path alone (the person quit): nothing is changed or
    /// recorded; what reconciliation found a conflict is reported as one.
    pub fn leave_all_alone(&mut self) {
        for item in &mut self.items {
            let found = item.overridden.map_or(item.action, |o| o.found);
            item.action = match found {
                Action::Conflict(_) => found,
                _ => Action::Nothing,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detect::Update;
    use crate::reconcile::{reconcile_tree, ConflictReason, SideState};
    use accord_model::{Entry, Kind, Props};

    fn path(text: &str) -> RelPath {
        RelPath::new(text.as_bytes()).unwrap()
    }

    fn entry(at: &str, kind: Kind, contents: u8) -> Entry {
        Entry {
            path: path(at),
            kind,
            size: 1,
            props: Props {
                mode: 0o644,
                ..Props::default()
            },
            dev: 1,
            ino: 1,
            nlink: 1,
            rdev: 0,
            blocks: 0,
            link_target: None,
            hash: (kind == Kind::File).then_some([contents; 32]),
        }
    }

    fn state(update: Update, now: Option<Entry>) -> SideState {
        SideState {
            update,
            now: now.map(std::sync::Arc::new),
        }
    }

    fn changed_contents(kind: Kind) -> Update {
        Update::Changed(crate::detect::Changes {
            was: kind,
            kind: false,
            contents: true,
            props: false,
            mtime: false,
        })
    }

    fn unchanged(at: &str, kind: Kind) -> SideState {
        state(Update::Unchanged, Some(entry(at, kind, 0)))
    }

    fn at(text: &str, a: SideState, b: SideState) -> PathUpdate {
        PathUpdate {
            path: path(text),
            a,
            b,
        }
    }

    /// A directory `new` created on A with a file inside; a file `both`
    /// changed on both sides; a file `one` changed on B; a directory `gone`
    /// deleted on A while B changed a file in it.
    fn updates() -> Vec<PathUpdate> {
        let created = |text: &str, kind| state(Update::Created, Some(entry(text, kind, 1)));
        let absent = || state(Update::Unchanged, None);
        vec![
            at(
                "both",
                state(
                    changed_contents(Kind::File),
                    Some(entry("both", Kind::File, 1)),
                ),
                state(
                    changed_contents(Kind::File),
                    Some(entry("both", Kind::File, 2)),
                ),
            ),
            at(
                "gone",
                state(Update::Deleted { was: Kind::Dir }, None),
                unchanged("gone", Kind::Dir),
            ),
            at(
                "gone/kept",
                state(Update::Deleted { was: Kind::File }, None),
                state(
                    changed_contents(Kind::File),
                    Some(entry("gone/kept", Kind::File, 3)),
                ),
            ),
            at("new", created("new", Kind::Dir), absent()),
            at("new/f", created("new/f", Kind::File), absent()),
            at(
                "one",
                unchanged("one", Kind::File),
                state(
                    changed_contents(Kind::File),
                    Some(entry("one", Kind::File, 4)),
                ),
            ),
        ]
    }

    fn edit(updates: &[PathUpdate]) -> PlanEdit<'_> {
        let options = ReconcileOptions::default();
        let items = reconcile_tree(updates, &options).unwrap();
        PlanEdit::new(updates, options, items)
    }

    fn action_at(edit: &PlanEdit, text: &str) -> Option<Action> {
        edit.item(&path(text)).map(|item| item.action)
    }

    fn copy(from: Side) -> Action {
        Action::Copy {
            from,
            to: from.other(),
        }
    }

    #[test]
    fn the_plan_starts_as_reconciled() {
        let updates = updates();
        let edit = edit(&updates);
        let paths: Vec<String> = edit.items().iter().map(|i| i.path.display()).collect();
        // The conflict over `gone` covers its subtree.
        assert_eq!(paths, ["both", "gone", "new", "new/f", "one"]);
        assert_eq!(
            action_at(&edit, "both"),
            Some(Action::Conflict(ConflictReason::BothChanged))
        );
        assert_eq!(action_at(&edit, "new/f"), Some(copy(Side::A)));
    }

    #[test]
    fn a_conflict_is_resolved_either_way() {
        let updates = updates();
        let mut edit = edit(&updates);
        edit.take(&path("both"), Side::B).unwrap();
        assert_eq!(action_at(&edit, "both"), Some(copy(Side::B)));
        assert_eq!(
            edit.item(&path("both")).unwrap().overridden.unwrap().by,
            Policy::Chosen(Choice::Take(Side::B))
        );
        edit.flip(&path("both")).unwrap();
        assert_eq!(action_at(&edit, "both"), Some(copy(Side::A)));
    }

    #[test]
    fn flipping_twice_returns_to_the_plan() {
        let updates = updates();
        let mut edit = edit(&updates);
        edit.flip(&path("one")).unwrap();
        assert_eq!(action_at(&edit, "one"), Some(copy(Side::A)));
        edit.flip(&path("one")).unwrap();
        assert_eq!(action_at(&edit, "one"), Some(copy(Side::B)));
        assert_eq!(edit.choice(&path("one")), None);
        assert_eq!(edit.flip(&path("both")), Err(Refused::NoDirection));
        assert_eq!(edit.flip(&path("nowhere")), Err(Refused::NotInPlan));
    }

    #[test]
    fn turning_a_new_directory_around_deletes_its_subtree() {
        let updates = updates();
        let mut edit = edit(&updates);
        edit.flip(&path("new")).unwrap();
        assert_eq!(
            action_at(&edit, "new"),
            Some(Action::Delete { on: Side::A })
        );
        assert_eq!(
            action_at(&edit, "new/f"),
            Some(Action::Delete { on: Side::A })
        );
        // The file inside follows its directory.
        assert_eq!(
            edit.flip(&path("new/f")),
            Err(Refused::FollowsDirectory(path("new")))
        );
        assert_eq!(edit.follows(&path("new/f")), Some(path("new")));
    }

    #[test]
    fn a_conflict_over_a_removed_directory_brings_its_subtree_along() {
        let updates = updates();
        let mut edit = edit(&updates);
        edit.take(&path("gone"), Side::B).unwrap();
        assert_eq!(action_at(&edit, "gone"), Some(copy(Side::B)));
        assert_eq!(action_at(&edit, "gone/kept"), Some(copy(Side::B)));
        edit.take(&path("gone"), Side::A).unwrap();
        assert_eq!(
            action_at(&edit, "gone"),
            Some(Action::Delete { on: Side::B })
        );
        assert_eq!(
            action_at(&edit, "gone/kept"),
            Some(Action::Delete { on: Side::B })
        );
    }

    #[test]
    fn a_skip_leaves_the_subtree_alone_and_a_conflict_reported() {
        let updates = updates();
        let mut edit = edit(&updates);
        edit.toggle_skip(&path("new")).unwrap();
        assert_eq!(action_at(&edit, "new"), Some(Action::Nothing));
        assert_eq!(action_at(&edit, "new/f"), Some(Action::Nothing));
        edit.toggle_skip(&path("both")).unwrap();
        assert!(matches!(
            action_at(&edit, "both"),
            Some(Action::Conflict(_))
        ));
        edit.toggle_skip(&path("gone")).unwrap();
        assert_eq!(action_at(&edit, "gone/kept"), None, "still covered");
        // A skip undone brings the plan back.
        edit.toggle_skip(&path("new")).unwrap();
        assert_eq!(action_at(&edit, "new/f"), Some(copy(Side::A)));
    }

    #[test]
    fn paths_beneath_a_one_sided_directory_follow_it() {
        let updates = updates();
        let mut edit = edit(&updates);
        // Unchosen, `new` still decides `new/f`: a file skipped inside a
        // directory whose creation is then turned around would block its
        // deletion.
        assert_eq!(
            edit.toggle_skip(&path("new/f")),
            Err(Refused::FollowsDirectory(path("new")))
        );
        assert_eq!(action_at(&edit, "new/f"), Some(copy(Side::A)));
    }

    #[test]
    fn quitting_changes_nothing_and_keeps_the_conflicts() {
        let updates = updates();
        let mut edit = edit(&updates);
        edit.take(&path("both"), Side::A).unwrap();
        edit.leave_all_alone();
        let actions: Vec<Action> = edit.items().iter().map(|i| i.action).collect();
        assert!(matches!(
            actions[0],
            Action::Conflict(ConflictReason::BothChanged)
        ));
        assert!(matches!(actions[1], Action::Conflict(_)));
        assert!(actions[2..].iter().all(|a| *a == Action::Nothing));
    }
}
