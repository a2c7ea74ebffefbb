//! A replica seen under the plan's spellings (`sync/case/scan.rs`): when
//! case is ignored, a path's plan spelling may differ from the one a side
//! holds (`Readme` planned, `README` on a case-sensitive side). Propagation
//! then goes through this decorator, which turns every plan path into the
//! side's own spelling before the call, so that what is written lands on
//! the name the side already has ("use the target name", the paper says)
//! and never beside it. Only the paths spelled otherwise are in its map
//! (directories included), and a path beneath one takes its spelling.

use accord_delta::DeltaStats;
use accord_fsys::{IgnoreRules, Listing, PropsMask, Scan, ScanOptions};
use accord_model::{Entry, Expect, Fingerprint, Found, Kind, Props, RelPath, Time};
use accord_replica::Error;
use accord_replica::{Deleted, DeltaWire, Incoming, Pending, PendingTemp, Replica, ReplicaDir};
use std::collections::HashMap;
use std::io;
use std::sync::Arc;

/// Plan paths of one side that it spells otherwise, with its spelling.
#[derive(Debug, Default)]
pub(crate) struct Spellings(HashMap<RelPath, RelPath>);

impl Spellings {
    pub fn insert(&mut self, plan: RelPath, here: RelPath) {
        if plan != here {
            self.0.insert(plan, here);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// This side's spelling of the plan path `path`: its own, or that of
    /// its nearest ancestor it spells otherwise with the rest unchanged.
    pub fn here(&self, path: &RelPath) -> RelPath {
        if self.0.is_empty() {
            return path.clone();
        }
        let mut at = Some(path.clone());
        while let Some(prefix) = at {
            if prefix.is_root() {
                break;
            }
            if let Some(spelled) = self.0.get(&prefix) {
                let rest = path.components().skip(prefix.depth());
                let mut out = spelled.clone();
                for name in rest {
                    out = match out.join(name) {
                        Ok(joined) => joined,
                        // Longer than a path may be: the plan's own
                        // spelling (a call on it fails, nothing else).
                        Err(_) => return path.clone(),
                    };
                }
                return out;
            }
            at = prefix.parent();
        }
        path.clone()
    }
}

/// `inner` under the plan's spellings.
pub(crate) struct Spelled<'r> {
    inner: &'r dyn Replica,
    spellings: Arc<Spellings>,
}

impl<'r> Spelled<'r> {
    pub fn new(inner: &'r dyn Replica, spellings: Arc<Spellings>) -> Self {
        Spelled { inner, spellings }
    }
}

impl Replica for Spelled<'_> {
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn identity(&self) -> (u64, u64) {
        self.inner.identity()
    }
    fn try_lock(&self) -> io::Result<bool> {
        self.inner.try_lock()
    }
    fn list_dir(
        &self,
        dir: &RelPath,
        rules: &IgnoreRules,
        opts: &ScanOptions,
    ) -> (Option<Listing>, Scan) {
        self.inner.list_dir(&self.spellings.here(dir), rules, opts)
    }
    fn fingerprint(&self, path: &RelPath) -> Result<Fingerprint, Error> {
        self.inner.fingerprint(&self.spellings.here(path))
    }
    fn open_dir(&self, path: &RelPath) -> io::Result<Box<dyn ReplicaDir + '_>> {
        let inner = self.inner.open_dir(&self.spellings.here(path))?;
        Ok(Box::new(SpelledDir {
            inner,
            plan: path.clone(),
            spellings: &self.spellings,
        }))
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
    fn start_sync_all(&self) -> Pending<io::Result<()>> {
        self.inner.start_sync_all()
    }
    fn read_state(&self, name: &str) -> Option<Vec<u8>> {
        self.inner.read_state(name)
    }
    fn write_state(&self, name: &str, data: &[u8], durable: bool) -> io::Result<()> {
        self.inner.write_state(name, data, durable)
    }
    fn sync_identity(&self) -> io::Result<Vec<u8>> {
        self.inner.sync_identity()
    }
    // `local()` stays None: a local fast path would take plan paths to
    // the root as they are.
    fn can_rename(&self) -> bool {
        self.inner.can_rename()
    }
}

/// One directory of a [`Spelled`] replica: names are turned into the
/// side's spelling of `plan/name`.
struct SpelledDir<'a> {
    inner: Box<dyn ReplicaDir + 'a>,
    plan: RelPath,
    spellings: &'a Spellings,
}

impl SpelledDir<'_> {
    /// The side's spelling of the child `name` (its last component).
    fn name(&self, name: &[u8]) -> Vec<u8> {
        if self.spellings.is_empty() {
            return name.to_vec();
        }
        match self.plan.join(name) {
            Ok(path) => self.spellings.here(&path).file_name().to_vec(),
            Err(_) => name.to_vec(),
        }
    }

    fn path(&self, path: &RelPath) -> RelPath {
        self.spellings.here(path)
    }
}

impl ReplicaDir for SpelledDir<'_> {
    fn open_read(
        &self,
        name: &[u8],
        expect: &Expect,
    ) -> Result<Box<dyn io::Read + Send + '_>, Error> {
        self.inner.open_read(&self.name(name), expect)
    }
    fn make_delta(
        &self,
        name: &[u8],
        expect: &Expect,
        signature: &[u8],
        in_place: bool,
        wire: DeltaWire,
    ) -> Result<(Vec<u8>, DeltaStats), Error> {
        self.inner
            .make_delta(&self.name(name), expect, signature, in_place, wire)
    }
    fn delta_wire(&self) -> DeltaWire {
        self.inner.delta_wire()
    }
    fn patch_in_place(
        &self,
        name: &[u8],
        expect: &Expect,
        delta: &[u8],
        props: &Props,
        mask: PropsMask,
    ) -> Result<(), Error> {
        self.inner
            .patch_in_place(&self.name(name), expect, delta, props, mask)
    }
    fn discard(&self, temp: &[u8]) {
        self.inner.discard(temp)
    }
    fn remove_stale_temp(&self, name: &[u8]) {
        self.inner.remove_stale_temp(name)
    }
    fn start_stat(&self, name: &[u8]) -> Pending<io::Result<Option<Found>>> {
        self.inner.start_stat(&self.name(name))
    }
    fn start_partial_signature(&self, name: &[u8]) -> Pending<Result<Option<Vec<u8>>, Error>> {
        self.inner.start_partial_signature(&self.name(name))
    }
    fn start_vouching_stat(&self, name: &[u8]) -> Pending<io::Result<Option<(Found, Time)>>> {
        self.inner.start_vouching_stat(&self.name(name))
    }
    fn start_vouching_stat_of_temp(
        &self,
        temp: &[u8],
    ) -> Pending<io::Result<Option<(Found, Time)>>> {
        self.inner.start_vouching_stat_of_temp(temp)
    }
    fn start_signature(
        &self,
        name: &[u8],
        expect: &Expect,
        in_place: bool,
    ) -> Pending<Result<Vec<u8>, Error>> {
        self.inner
            .start_signature(&self.name(name), expect, in_place)
    }
    fn start_receive(
        &self,
        name: &[u8],
        incoming: Incoming<'_>,
        props: &Props,
        mask: PropsMask,
    ) -> PendingTemp {
        self.inner
            .start_receive(&self.name(name), incoming, props, mask)
    }
    fn start_make_node(&self, name: &[u8], entry: &Entry, mask: PropsMask) -> PendingTemp {
        self.inner.start_make_node(&self.name(name), entry, mask)
    }
    fn start_link_temp(&self, name: &[u8], leader: &RelPath) -> PendingTemp {
        self.inner
            .start_link_temp(&self.name(name), &self.path(leader))
    }
    fn start_commit(
        &self,
        temp: &[u8],
        name: &[u8],
        expect: &Expect,
    ) -> Pending<Result<(), Error>> {
        self.inner.start_commit(temp, &self.name(name), expect)
    }
    fn start_set_props(
        &self,
        name: &[u8],
        expect: &Expect,
        kind: Kind,
        props: &Props,
        mask: PropsMask,
    ) -> Pending<Result<(), Error>> {
        self.inner
            .start_set_props(&self.name(name), expect, kind, props, mask)
    }
    fn start_set_own_props(
        &self,
        expect: &Expect,
        props: &Props,
        mask: PropsMask,
    ) -> Pending<Result<(), Error>> {
        self.inner.start_set_own_props(expect, props, mask)
    }
    fn start_mkdir(&self, name: &[u8]) -> Pending<Result<(), Error>> {
        self.inner.start_mkdir(&self.name(name))
    }
    fn start_delete(&self, name: &[u8], expect: &Expect) -> Pending<Result<Deleted, Error>> {
        self.inner.start_delete(&self.name(name), expect)
    }
    fn start_rename_from(
        &self,
        name: &[u8],
        from: &RelPath,
        expect: &Expect,
    ) -> Pending<Result<(), Error>> {
        self.inner
            .start_rename_from(&self.name(name), &self.path(from), expect)
    }
    fn takes_contents(&self) -> bool {
        self.inner.takes_contents()
    }
    fn local(&self) -> Option<&accord_fsys::Dir> {
        self.inner.local()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(p: &str) -> RelPath {
        RelPath::new(p.as_bytes()).unwrap()
    }

    #[test]
    fn a_path_takes_the_spelling_of_its_nearest_respelled_ancestor() {
        let mut spellings = Spellings::default();
        spellings.insert(path("Docs"), path("docs"));
        spellings.insert(path("Docs/ReadMe"), path("docs/README"));
        spellings.insert(path("same"), path("same"));
        assert_eq!(spellings.here(&path("Docs")), path("docs"));
        assert_eq!(spellings.here(&path("Docs/ReadMe")), path("docs/README"));
        assert_eq!(spellings.here(&path("Docs/x/y")), path("docs/x/y"));
        assert_eq!(spellings.here(&path("Other/x")), path("Other/x"));
        assert_eq!(spellings.here(&RelPath::root()), RelPath::root());
        assert_eq!(spellings.0.len(), 2);
    }
}
