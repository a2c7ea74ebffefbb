//! Renames (and moves) propagated as renames: started in path order after
//! the new directories above their targets, settled with the items moved
//! along, recorded under their new paths.

use super::*;

impl<'a> Propagation<'a> {
    /// Start renaming on `on` what it holds at the item's source to the
    /// item's path (a directory with its subtree: the items `beneath`).
    /// The replica re-checks the source and the absence of the target.
    pub(super) fn start_rename(&mut self, item: &'a SyncItem, on: Side, beneath: &'a [SyncItem]) {
        let moved = item.moved.as_ref().expect("a rename has a source");
        let (parent, name) = split(&item.path);
        match self.dir(on, &parent, accord_replica::Action::Rename) {
            Ok(dir) => {
                let pending =
                    dir.start_rename_from(name, &moved.from, &Expect::entry(&moved.entry));
                self.renames.push((item, beneath, pending));
            }
            Err(error) => {
                self.unmoved.push((on, moved.from.clone()));
                self.fail(&item.path, error);
            }
        }
    }

    pub(super) fn settle_renames(&mut self) {
        for (item, beneath, pending) in std::mem::take(&mut self.renames) {
            let Action::Rename { on } = item.action else {
                unreachable!("only renames are started as renames")
            };
            let moved = item.moved.as_ref().expect("a rename has a source");
            match pending.wait() {
                Ok(()) => self.renamed(item, on, beneath),
                Err(error) => {
                    self.unmoved.push((on, moved.from.clone()));
                    self.fail(&item.path, error.into());
                }
            }
        }
    }

    /// Record a rename that succeeded: its source is gone from both
    /// archives, and every moved path is recorded where it is now.
    pub(super) fn renamed(&mut self, item: &SyncItem, on: Side, beneath: &[SyncItem]) {
        let from = item
            .moved
            .as_ref()
            .expect("a rename has a source")
            .from
            .clone();
        self.done.push(Done {
            path: from.clone(),
            action: Action::Nothing,
            records: [Record::Remove(from.clone()), Record::Remove(from.clone())],
            from: None,
        });
        // The renamed entry's own ctime moved with the rename; those
        // beneath it did not.
        let top = self.moved_done(item, on, UNKNOWN_CTIME, Some(from));
        self.done.push(top);
        for below in beneath {
            let source = &below.moved.as_ref().expect("moved with its directory").from;
            let ctime = self.scanned.ctimes_of(source)[index(on)];
            let done = self.moved_done(below, on, ctime, None);
            self.done.push(done);
        }
    }

    /// The records of a moved path: what `on` moved there, and the other
    /// side's entry as scanned.
    pub(super) fn moved_done(
        &self,
        item: &SyncItem,
        on: Side,
        ctime: accord_model::Time,
        from: Option<RelPath>,
    ) -> Done {
        let mut entry = item.moved.as_ref().expect("a moved path").entry.clone();
        entry.path = item.path.clone();
        let mut records = [
            Record::Remove(item.path.clone()),
            Record::Remove(item.path.clone()),
        ];
        records[index(on)] = Record::Put(Observed { entry, ctime });
        records[index(on.other())] = self.as_scanned(item, on.other());
        Done {
            path: item.path.clone(),
            action: item.action,
            records,
            from,
        }
    }
}
