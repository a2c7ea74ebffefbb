//! Dry run as a decorator of the destination: reads go to the real replica
//! (if there is one yet), every change succeeds without being made, so the
//! engine runs exactly as it would and its report says what it would do.
//! No contents are read for it ([`ReplicaDir::takes_contents`]).

use accord_fsys::{IgnoreRules, Listing, PropsMask, Scan, ScanOptions};
use accord_model::{Entry, Expect, Fingerprint, Found, Kind, Props, RelPath};
use accord_replica::Error;
use accord_replica::{Deleted, Incoming, Pending, PendingTemp, Replica, ReplicaDir};
use std::io;

/// A destination that changes nothing: `inner` is the replica as it is
/// (`None` when it does not exist yet).
pub struct DryRun<'a> {
    inner: Option<&'a dyn Replica>,
    name: String,
}

impl<'a> DryRun<'a> {
    pub fn new(inner: Option<&'a dyn Replica>, name: String) -> DryRun<'a> {
        DryRun { inner, name }
    }
}

/// A name for what a dry run pretends to make.
const PRETEND: &[u8] = b".accord-tmp-dry-run";

impl Replica for DryRun<'_> {
    fn describe(&self) -> String {
        self.name.clone()
    }

    fn identity(&self) -> (u64, u64) {
        self.inner.map_or((0, 0), |r| r.identity())
    }

    /// Nothing is written, so nothing is locked.
    fn try_lock(&self) -> io::Result<bool> {
        Ok(true)
    }

    fn list_dir(
        &self,
        dir: &RelPath,
        rules: &IgnoreRules,
        opts: &ScanOptions,
    ) -> (Option<Listing>, Scan) {
        match self.inner {
            Some(r) => r.list_dir(dir, rules, opts),
            // An empty destination, as the run would create it.
            None if dir.is_root() => (Some(empty_root()), Scan::default()),
            None => (None, Scan::default()),
        }
    }

    fn fingerprint(&self, path: &RelPath) -> Result<Fingerprint, Error> {
        match self.inner {
            Some(r) => r.fingerprint(path),
            None => Err(Error::Changed(crate::End::Written)),
        }
    }

    fn open_dir(&self, path: &RelPath) -> io::Result<Box<dyn ReplicaDir + '_>> {
        // A directory the run would make does not exist: pretend it does.
        let inner = self.inner.and_then(|r| r.open_dir(path).ok());
        Ok(Box::new(DryRunDir { inner }))
    }

    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }

    fn read_state(&self, name: &str) -> Option<Vec<u8>> {
        self.inner.and_then(|r| r.read_state(name))
    }

    fn write_state(&self, _name: &str, _data: &[u8], _durable: bool) -> io::Result<()> {
        Ok(())
    }
}

fn empty_root() -> Listing {
    let me = Entry {
        path: RelPath::root(),
        kind: Kind::Dir,
        size: 0,
        props: Props::default(),
        dev: 0,
        ino: 0,
        nlink: 2,
        rdev: 0,
        blocks: 0,
        link_target: None,
        hash: None,
    };
    Listing {
        entries: vec![me],
        ..Listing::default()
    }
}

struct DryRunDir<'a> {
    inner: Option<Box<dyn ReplicaDir + 'a>>,
}

impl ReplicaDir for DryRunDir<'_> {
    // The real replica's reads (`stat`, `signature`, `partial_signature`)
    // are waited for here and handed out ready: every call of a dry run
    // is done when it returns, whatever replica is behind it (the mirror
    // reads `Pending::is_ready`, so forwarding the inner pending result
    // would change when a dry run over a wire decides things).
    fn start_stat(&self, name: &[u8]) -> Pending<io::Result<Option<Found>>> {
        Pending::ready(match &self.inner {
            Some(d) => d.stat(name),
            None => Ok(None),
        })
    }

    fn open_read(
        &self,
        name: &[u8],
        expect: &Expect,
    ) -> Result<Box<dyn io::Read + Send + '_>, Error> {
        match &self.inner {
            Some(d) => d.open_read(name, expect),
            None => Err(Error::Changed(crate::End::Written)),
        }
    }

    fn start_signature(
        &self,
        name: &[u8],
        expect: &Expect,
        in_place: bool,
    ) -> Pending<Result<Vec<u8>, Error>> {
        Pending::ready(match &self.inner {
            Some(d) => d.signature(name, expect, in_place),
            None => Err(Error::Changed(crate::End::Written)),
        })
    }

    fn start_partial_signature(&self, name: &[u8]) -> Pending<Result<Option<Vec<u8>>, Error>> {
        Pending::ready(match &self.inner {
            Some(d) => d.partial_signature(name),
            None => Ok(None),
        })
    }

    fn takes_contents(&self) -> bool {
        false
    }

    fn start_receive(&self, _: &[u8], _: Incoming<'_>, _: &Props, _: PropsMask) -> PendingTemp {
        PendingTemp::ready(Ok(PRETEND.to_vec()))
    }

    fn patch_in_place(
        &self,
        _: &[u8],
        _: &Expect,
        _: &[u8],
        _: &Props,
        _: PropsMask,
    ) -> Result<(), Error> {
        Ok(())
    }

    fn start_make_node(&self, _: &[u8], _: &Entry, _: PropsMask) -> PendingTemp {
        PendingTemp::ready(Ok(PRETEND.to_vec()))
    }

    fn start_link_temp(&self, _: &[u8], _: &RelPath) -> PendingTemp {
        PendingTemp::ready(Ok(PRETEND.to_vec()))
    }

    fn start_commit(&self, _: &[u8], _: &[u8], _: &Expect) -> Pending<Result<(), Error>> {
        Pending::ready(Ok(()))
    }

    fn discard(&self, _: &[u8]) {}

    fn start_set_props(
        &self,
        _: &[u8],
        _: &Expect,
        _: Kind,
        _: &Props,
        _: PropsMask,
    ) -> Pending<Result<(), Error>> {
        Pending::ready(Ok(()))
    }

    fn start_set_own_props(
        &self,
        _: &Expect,
        _: &Props,
        _: PropsMask,
    ) -> Pending<Result<(), Error>> {
        Pending::ready(Ok(()))
    }

    fn start_mkdir(&self, _: &[u8]) -> Pending<Result<(), Error>> {
        Pending::ready(Ok(()))
    }

    fn start_delete(&self, name: &[u8], _: &Expect) -> Pending<Result<Deleted, Error>> {
        // A directory whose entries would all be deleted first counts as
        // deleted too; one holding excluded entries would stay, which only
        // the real run can tell.
        Pending::ready(Ok(match self.stat(name) {
            Ok(Some(_)) => Deleted::Done,
            _ => Deleted::Gone,
        }))
    }

    fn start_rename_from(&self, _: &[u8], _: &RelPath, _: &Expect) -> Pending<Result<(), Error>> {
        Pending::ready(Ok(()))
    }

    fn remove_stale_temp(&self, _: &[u8]) {}
}
