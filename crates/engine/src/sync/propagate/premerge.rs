//! The interactive mode's 'm': the merge program run on one conflict while
//! the plan is still being edited, so the person sees its outcome before
//! confirming. Nothing is changed on either side then: the result is kept
//! (a sealed local file, see `merge.rs`) and, once the plan is confirmed,
//! written to both sides as any merge is, with the same re-checks, so a
//! side written since the program read it is never overwritten.

use super::merge::{mergeable, run_merge, Merged, NotMerged};
use crate::sync::SyncConfig;
use accord_model::RelPath;
use accord_plan::{Side, SyncItem};
use accord_replica::Action as Step;
use accord_replica::{Replica, ReplicaDir};
use std::collections::HashMap;
use std::sync::Mutex;

/// What the interactive mode may ask of the engine while it edits a plan.
pub trait MergeNow {
    /// Run the merge program on the conflict `item` now; `Ok`: the size
    /// of its result, which the run writes to both sides if the plan is
    /// confirmed with `item` still a conflict; `Err`: why not (the
    /// program's status and first lines of output, ...).
    fn merge_now(&self, item: &SyncItem) -> Result<u64, String>;
    /// Drop the result kept for `path` (the conflict stays one).
    fn forget(&self, path: &RelPath);
}

/// The results made while the plan was edited, by path.
pub(crate) struct Premerger<'r> {
    replicas: [&'r dyn Replica; 2],
    cfg: &'r SyncConfig,
    results: Mutex<HashMap<RelPath, Merged>>,
}

impl<'r> Premerger<'r> {
    pub(crate) fn new(replicas: [&'r dyn Replica; 2], cfg: &'r SyncConfig) -> Premerger<'r> {
        Premerger {
            replicas,
            cfg,
            results: Mutex::new(HashMap::new()),
        }
    }

    /// Keep `merged` as the result for `path` (a set's merge, made before
    /// the pair that writes it runs: `set/merge.rs`).
    pub(crate) fn keep(&self, path: RelPath, merged: Merged) {
        self.lock().insert(path, merged);
    }

    /// The result made for `path`, if any (taken: used once).
    pub(crate) fn take(&self, path: &RelPath) -> Option<Merged> {
        self.lock().remove(path)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RelPath, Merged>> {
        self.results.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn dirs(&self, parent: &RelPath) -> Result<[Box<dyn ReplicaDir + 'r>; 2], NotMerged> {
        let open = |side: Side| {
            let replica = self.replicas[super::index(side)];
            replica
                .open_dir(parent)
                .map_err(crate::Error::io(Step::OpenSource))
        };
        Ok([open(Side::A)?, open(Side::B)?])
    }

    fn merge(&self, item: &SyncItem) -> Result<Merged, NotMerged> {
        let Some(program) = &self.cfg.merge else {
            return Err(NotMerged::Ineligible(Some(
                "no merge program: run with --merge CMD",
            )));
        };
        let versions = mergeable(item, self.cfg)?;
        let (parent, _) = super::split(&item.path);
        let dirs = self.dirs(&parent)?;
        run_merge(item, versions, &dirs, program)
    }
}

impl MergeNow for Premerger<'_> {
    fn merge_now(&self, item: &SyncItem) -> Result<u64, String> {
        self.forget(&item.path);
        match self.merge(item) {
            Ok(merged) => {
                let size = merged.size();
                self.lock().insert(item.path.clone(), merged);
                Ok(size)
            }
            Err(NotMerged::Ineligible(Some(why))) => Err(why.to_owned()),
            Err(NotMerged::Ineligible(None)) => {
                Err("only a conflict between two regular files can be merged".into())
            }
            Err(NotMerged::Program(failure)) => Err(failure.to_string()),
            Err(NotMerged::Sync(error)) => Err(error.to_string()),
        }
    }

    fn forget(&self, path: &RelPath) {
        self.lock().remove(path);
    }
}
