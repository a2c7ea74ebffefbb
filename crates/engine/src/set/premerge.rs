//! The interactive mode's `m` for a set: the merge program run on one
//! conflict while the plan is still being edited, so the person sees its
//! outcome before confirming. Nothing is changed on any replica then: the
//! result is kept (a sealed local file) and, once the plan is confirmed
//! with the path still a conflict, written as `--merge` writes any merge
//! (`merge.rs`), with the same re-checks. In an edited plan only the
//! conflicts merged so are merged, as with two roots.

use crate::set::keep::offers_at;
use crate::set::merge::{candidates, fold_versions, sources};
use crate::set::scan::{Member, Scanned};
use crate::sync::propagate::{Merged, NotMerged};
use crate::sync::SyncConfig;
use accord_model::RelPath;
use accord_plan::SetItem;
use accord_replica::Replica;
use std::collections::HashMap;
use std::sync::Mutex;

/// What the interactive mode of a set may ask of the engine while it edits
/// the plan.
pub trait SetMergeNow {
    /// Run the merge program on the conflict `item` now; `Ok`: the size
    /// of its result, which the run writes if the plan is confirmed with
    /// `item` still a conflict; `Err`: why not.
    fn merge_now(&self, item: &SetItem) -> Result<u64, String>;
    /// Drop the result kept for `path` (the conflict stays one).
    fn forget(&self, path: &RelPath);
}

/// The results made while the plan was edited, by path.
pub(crate) struct SetPremerger<'a, 'r> {
    pub replicas: &'a [&'r dyn Replica],
    pub members: &'a [Member<'r>],
    pub scanned: &'a Scanned,
    /// By set index: the root's place as written.
    pub place_of: &'a [usize],
    pub cfg: &'a SyncConfig,
    pub results: Mutex<HashMap<RelPath, Merged>>,
}

impl SetPremerger<'_, '_> {
    /// The results kept, once the plan is confirmed.
    pub(crate) fn into_results(self) -> HashMap<RelPath, Merged> {
        self.results.into_inner().unwrap_or_else(|e| e.into_inner())
    }

    fn merge(&self, item: &SetItem) -> Result<Merged, String> {
        if self.cfg.merge.is_none() {
            return Err("no merge program: run with --merge CMD".into());
        }
        let mut not_merged = Vec::new();
        let found = candidates(
            std::slice::from_ref(item),
            self.members,
            self.scanned,
            self.place_of,
            self.cfg,
            &mut not_merged,
        );
        let Some(candidate) = found.first() else {
            return Err(not_merged.pop().map_or_else(
                || "only a conflict between regular files can be merged".into(),
                |(_, why)| why,
            ));
        };
        let sources = sources(self.replicas, candidate);
        let offers = offers_at(self.scanned, &item.path).expect("a conflict was scanned");
        let version = |slot: usize| {
            let index = self.members[slot].index;
            let offer = offers.offers.iter().find(|o| o.replica == index);
            offer
                .and_then(|o| o.now.as_ref())
                .expect("a holder holds its version")
        };
        let context = (self.replicas, self.cfg);
        fold_versions(context, candidate, &sources, version).map_err(|not| match not {
            NotMerged::Ineligible(why) => format!(
                "not merged: {}",
                why.unwrap_or("the versions are not all regular files")
            ),
            NotMerged::Program(failure) => failure.to_string(),
            NotMerged::Sync(error) => format!("not merged: {error}"),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RelPath, Merged>> {
        self.results.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl SetMergeNow for SetPremerger<'_, '_> {
    fn merge_now(&self, item: &SetItem) -> Result<u64, String> {
        self.forget(&item.path);
        let merged = self.merge(item)?;
        let size = merged.size();
        self.lock().insert(item.path.clone(), merged);
        Ok(size)
    }

    fn forget(&self, path: &RelPath) {
        self.lock().remove(path);
    }
}
