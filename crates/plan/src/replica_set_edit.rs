//! A set's plan edited by a person between reconciliation and propagation
//! (the interactive `accord sync A B C …`): a path's version chosen from
//! one replica, or the path left alone this run.
//!
//! Choosing replica R's version at a path is what `--force R` does there:
//! every replica made equal to R's version, recorded with a vector above
//! every version it replaces (a change of R's over all the offers'), so
//! that the next run finds nothing to do and a replica that was away
//! catches up without a conflict. A skipped path is left out of the plan:
//! nothing changed, nothing recorded, so the next run finds it as this
//! one did.
//!
//! As in reconciliation, a path that is not a directory on every replica
//! decides its subtree: a choice there covers every path beneath it, and
//! the paths beneath it refuse choices of their own (a child made where
//! its directory is deleted, or kept where it is removed, would leave the
//! plan unable to run).

use crate::replica_set::{
    reconcile_set, subtree_end, Outcome, PathOffers, SetItem, SetOptions, SetPolicy,
};
use accord_model::RelPath;
use std::collections::BTreeMap;
use std::fmt;

/// A person's choice at one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SetChoice {
    /// This replica's version (its index in the set) wins, as `--force`.
    Take(usize),
    /// Leave the path alone this run.
    Skip,
}

/// Why a choice was not taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetEditRefused {
    /// The path lies beneath one that decides its subtree: choose there.
    FollowsDirectory(RelPath),
    /// The path has no item in the plan.
    NotInPlan,
    /// The replica chosen did not take part in this run.
    NotReached,
}

impl fmt::Display for SetEditRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetEditRefused::FollowsDirectory(path) => {
                write!(f, "decided with {} (choose there)", path.display())
            }
            SetEditRefused::NotInPlan => f.write_str("not in the plan"),
            SetEditRefused::NotReached => {
                f.write_str("that root could not be reached this run; choose another")
            }
        }
    }
}

/// A set's plan and the choices made on it.
pub struct SetPlanEdit<'p> {
    /// What reconciliation was given (in path order).
    paths: &'p [PathOffers],
    options: SetOptions,
    /// The plan as reconciled.
    found: Vec<SetItem>,
    choices: BTreeMap<RelPath, SetChoice>,
    /// The plan with the choices made (skipped paths still listed).
    items: Vec<SetItem>,
    /// The person quit: nothing is changed or recorded.
    quit: bool,
}

impl<'p> SetPlanEdit<'p> {
    /// `items` is what `reconcile_set(paths, &options)` returned (not
    /// computed again).
    pub fn new(paths: &'p [PathOffers], options: SetOptions, items: Vec<SetItem>) -> Self {
        SetPlanEdit {
            paths,
            options,
            found: items.clone(),
            choices: BTreeMap::new(),
            items,
            quit: false,
        }
    }

    /// The plan as chosen so far, in path order; skipped paths are listed
    /// with what they would have done ([`Self::is_skipped`]).
    pub fn items(&self) -> &[SetItem] {
        &self.items
    }

    /// What each replica that took part offered at `path`.
    pub fn offers(&self, path: &RelPath) -> Option<&'p PathOffers> {
        let index = self.position(path)?;
        Some(&self.paths[index])
    }

    /// The replicas that took part (their indices in the set).
    pub fn took_part(&self) -> Vec<usize> {
        self.paths.first().map_or_else(Vec::new, |at| {
            at.offers.iter().map(|offer| offer.replica).collect()
        })
    }

    /// The choice made at `path` itself.
    pub fn choice(&self, path: &RelPath) -> Option<SetChoice> {
        self.choices.get(path).copied()
    }

    /// The ancestor that decides `path`: the highest one that is not a
    /// directory on every replica.
    pub fn follows(&self, path: &RelPath) -> Option<RelPath> {
        let mut decider = None;
        let mut at = path.parent();
        while let Some(ancestor) = at {
            if self.position(&ancestor).is_some_and(|i| self.covers(i)) {
                decider = Some(ancestor.clone());
            }
            at = ancestor.parent();
        }
        decider
    }

    /// Is `path` left alone by a skip (its own, or its decider's)?
    pub fn is_skipped(&self, path: &RelPath) -> bool {
        let skip = |at: &RelPath| self.choice(at) == Some(SetChoice::Skip);
        skip(path) || self.follows(path).is_some_and(|above| skip(&above))
    }

    /// Make `choice` at `path` (None: back to what was reconciled).
    pub fn choose(
        &mut self,
        path: &RelPath,
        choice: Option<SetChoice>,
    ) -> Result<(), SetEditRefused> {
        if let Some(above) = self.follows(path) {
            return Err(SetEditRefused::FollowsDirectory(above));
        }
        if self.item(path).is_none() {
            return Err(SetEditRefused::NotInPlan);
        }
        if let Some(SetChoice::Take(replica)) = choice {
            if !self.took_part().contains(&replica) {
                return Err(SetEditRefused::NotReached);
            }
        }
        match choice {
            Some(choice) => self.choices.insert(path.clone(), choice),
            None => self.choices.remove(path),
        };
        self.items = self.with_choices();
        Ok(())
    }

    /// Skip `path`, or take the skip back.
    pub fn toggle_skip(&mut self, path: &RelPath) -> Result<(), SetEditRefused> {
        let skipped = self.choice(path) == Some(SetChoice::Skip);
        self.choose(path, (!skipped).then_some(SetChoice::Skip))
    }

    /// Leave every path alone (the person quit): nothing is changed or
    /// recorded; what reconciliation found a conflict is reported as one.
    pub fn leave_all_alone(&mut self) {
        self.choices.clear();
        self.items = self.found.clone();
        self.quit = true;
    }

    /// Did the person quit (`leave_all_alone`)? Then nothing may be
    /// changed, not even by `--merge`'s program.
    pub fn quit(&self) -> bool {
        self.quit
    }

    /// The plan to carry out, and the paths skipped (left alone, nothing
    /// recorded: neither changed nor agreed).
    pub fn into_items(self) -> (Vec<SetItem>, Vec<RelPath>) {
        let mut kept = Vec::with_capacity(self.items.len());
        let mut skipped = Vec::new();
        for item in &self.items {
            let conflict = matches!(item.outcome, Outcome::Conflict { .. });
            if (self.quit && !conflict) || (!self.quit && self.is_skipped(&item.path)) {
                skipped.push(item.path.clone());
            } else {
                kept.push(item.clone());
            }
        }
        (kept, skipped)
    }

    fn position(&self, path: &RelPath) -> Option<usize> {
        self.paths.binary_search_by(|at| at.path.cmp(path)).ok()
    }

    fn item(&self, path: &RelPath) -> Option<&SetItem> {
        let index = self
            .items
            .binary_search_by(|item| item.path.cmp(path))
            .ok()?;
        Some(&self.items[index])
    }

    /// Does a choice at `paths[index]` decide its subtree (it is not a
    /// directory on every replica)?
    fn covers(&self, index: usize) -> bool {
        !self.paths[index].offers.iter().all(|offer| offer.is_dir())
    }

    /// The range of `paths` a choice at `paths[index]` decides.
    fn decided_range(&self, index: usize) -> std::ops::Range<usize> {
        match self.covers(index) {
            true => index..subtree_end(self.paths, index),
            false => index..index + 1,
        }
    }

    /// The reconciled plan with every `Take` made. Choices never overlap:
    /// one beneath a path that decides its subtree is refused.
    fn with_choices(&self) -> Vec<SetItem> {
        let mut items = self.found.clone();
        for (path, choice) in &self.choices {
            let SetChoice::Take(replica) = *choice else {
                continue;
            };
            let index = self.position(path).expect("a choice is made at a path");
            let range = self.decided_range(index);
            let chosen = self.taken(range.clone(), replica);
            let first = &self.paths[range.start].path;
            let end = self.paths.get(range.end).map(|at| &at.path);
            let from = items.partition_point(|item| item.path < *first);
            let to = match end {
                Some(end) => items.partition_point(|item| item.path < *end),
                None => items.len(),
            };
            items.splice(from..to, chosen);
        }
        items
    }

    /// `paths[range]` planned as `--force replica` plans them, each path
    /// it changes marked as the person's choice.
    fn taken(&self, range: std::ops::Range<usize>, replica: usize) -> Vec<SetItem> {
        let options = SetOptions {
            force: Some(replica),
            ..self.options
        };
        // These paths were reconciled before, and `choose` checked that
        // the replica took part.
        let mut items = reconcile_set(&self.paths[range], &options)
            .expect("a slice of reconciled paths, forced to a replica that took part");
        for item in &mut items {
            if item.decided_by.is_some() {
                item.decided_by = Some(SetPolicy::Chosen(replica));
            }
        }
        items
    }
}

#[cfg(test)]
#[path = "replica_set_edit_tests.rs"]
mod tests;
