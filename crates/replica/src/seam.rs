//! The `Replica` seam: every call a job makes on a replica. A job holds two
//! `&dyn Replica` and nothing above this trait knows what is behind one:
//! `LocalReplica` (a directory on this host, over `fsys`), a remote replica
//! (`accord_remote`'s client, whose server runs a `LocalReplica`), and the
//! in-memory replica of the engine's tests.
//!
//! Work on a replica happens a directory at a time: [`Replica::open_dir`]
//! gives a [`ReplicaDir`] whose calls take one validated file name, so a
//! local replica resolves the directory once for all its files, and a remote
//! one can batch them. Every call that replaces, changes or deletes takes the
//! [`Expect`] the plan was made on and re-checks it first (safety rule 3).

use crate::error::{Action, End, Error};
use crate::pending::{Deleted, Incoming, Pending, PendingTemp};
use crate::sibling::SiblingFile;
use crate::side::{SideCause, SideFailure, SideSession};
use accord_delta::fine::{refine, FineSignature, GapRequest};
use accord_delta::{
    make_delta_with, Delta, DeltaOptions, DeltaStats, InPlaceOptions, LiteralCoding, Signature,
};
use accord_fsys::{IgnoreRules, Listing, PropsMask, Scan, ScanOptions};
use accord_model::{Entry, Expect, Fingerprint, Found, Kind, Props, RelPath, Time};
use std::io::{self, Read};
use std::path::Path;

/// What a delta made for a destination may hold: the format its reader
/// takes and the compression of the link it crosses. Its literals are
/// compressed against the matched bytes (delta format 2) only when both
/// allow it; otherwise it is format 1, which every accord reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeltaWire {
    /// The reader takes delta format 2 (a remote one agreed to it at the
    /// handshake).
    pub reads_packed: bool,
    /// The zstd level of the link the delta crosses (`-z`); `None`: the
    /// link does not compress, nor then do the literals.
    pub level: Option<i32>,
}

impl DeltaWire {
    /// What a local destination takes, the link being none.
    pub const LOCAL: DeltaWire = DeltaWire {
        reads_packed: true,
        level: None,
    };

    /// How the literals are stored.
    pub fn coding(self) -> LiteralCoding {
        match self.level {
            Some(level) if self.reads_packed => LiteralCoding::Zstd { level },
            _ => LiteralCoding::Raw,
        }
    }
}

/// A replica as the engine sees it.
pub trait Replica: Send + Sync {
    /// A name for messages.
    fn describe(&self) -> String;
    /// Identity of the root (device, inode), for the deletion guard and
    /// nesting checks.
    fn identity(&self) -> (u64, u64);
    /// Take the replica's write lock for as long as this value lives;
    /// `Ok(false)` when another run holds it.
    fn try_lock(&self) -> io::Result<bool>;
    /// List one directory: its own entry first, then its children that are
    /// not directories, in name order; its subdirectories in name order;
    /// stale temps and in-place markers. `None` when it does not exist (or
    /// cannot be read: the returned scan then says so, with what else was
    /// found: errors, memo digests).
    fn list_dir(
        &self,
        dir: &RelPath,
        rules: &IgnoreRules,
        opts: &ScanOptions,
    ) -> (Option<Listing>, Scan);
    /// A hint: `list_dir(dir, rules, opts)` will be asked for soon. A
    /// replica across a wire asks for it now (its reply then travels while
    /// the engine does something else, such as waiting for the lock).
    fn prefetch_dir(&self, _dir: &RelPath, _rules: &IgnoreRules, _opts: &ScanOptions) {}
    /// Scan the subtree at `dir` in path order, handing its entries to
    /// `sink` in batches of at most `batch` (memory holds one batch and the
    /// listings of one path from `dir` down, not the subtree). Returns what
    /// else was found.
    fn scan_batches(
        &self,
        dir: &RelPath,
        rules: &IgnoreRules,
        opts: &ScanOptions,
        batch: usize,
        sink: &mut dyn FnMut(Vec<Entry>),
    ) -> Scan {
        let mut found = Scan::default();
        let mut pending = Vec::new();
        scan_in_order(
            self,
            dir,
            (rules, opts),
            batch.max(1),
            &mut pending,
            sink,
            &mut found,
        );
        if !pending.is_empty() {
            sink(pending);
        }
        found
    }
    /// BLAKE3 of a regular file's contents.
    fn fingerprint(&self, path: &RelPath) -> Result<Fingerprint, Error>;
    /// A directory of the replica, to work on its entries.
    fn open_dir(&self, path: &RelPath) -> io::Result<Box<dyn ReplicaDir + '_>>;
    /// Make everything written so far durable.
    fn sync_all(&self) -> io::Result<()>;
    /// `sync_all`, started now and waited for later (a replica across a
    /// wire carries it out after every call sent before it).
    fn start_sync_all(&self) -> Pending<io::Result<()>> {
        Pending::ready(self.sync_all())
    }
    /// The replica's own state (memos): `None` when
    /// it has none under that name. `durable`: the write survives a crash
    /// whole (else a crash may leave it torn, which readers must detect).
    fn read_state(&self, name: &str) -> Option<Vec<u8>>;
    /// `read_state`, started now and waited for later (several states of
    /// a replica across a wire are then read in one round trip).
    fn start_read_state(&self, name: &str) -> Pending<Option<Vec<u8>>> {
        Pending::ready(self.read_state(name))
    }
    fn write_state(&self, name: &str, data: &[u8], durable: bool) -> io::Result<()>;
    /// The bytes that name this root in sync archives: its host and its
    /// path there (see `side::local_identity`).
    fn sync_identity(&self) -> io::Result<Vec<u8>> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "this replica cannot take part in a sync",
        ))
    }

    /// A hint: `open_sync_side(other, ..)` will be asked for soon, once this
    /// replica's lock is taken, then the side's `set_rules(rules)` and its
    /// `scan(opts)`, and the root's case probe. A replica across a wire
    /// whose server opens an archive only under the lock asks for them all
    /// now, behind the lock.
    fn prefetch_sync_side(
        &self,
        _other: &[u8],
        _rules: &crate::SyncRules,
        _opts: &crate::SideOptions,
    ) {
    }

    /// This replica's side of a sync with the root named `other`: its
    /// archive opened and locked on its own host (`archive_dir` is where
    /// this host keeps archives; a remote replica's host uses its own).
    fn open_sync_side(
        &self,
        _other: &[u8],
        _archive_dir: &Path,
    ) -> Result<Box<dyn SideSession + '_>, SideFailure> {
        Err(SideFailure::Failed(SideCause::Unsupported))
    }

    /// This replica's side of a sync of more than two replicas, the set
    /// named `set` (every root's identity): its archive of the set, with
    /// version vectors, opened and locked on its own host.
    fn open_set_side(
        &self,
        _set: &[u8],
        _archive_dir: &Path,
    ) -> Result<Box<dyn SideSession + '_>, SideFailure> {
        Err(SideFailure::Failed(SideCause::Unsupported))
    }

    /// The root directory on this host's file system, for a replica
    /// that is one (a local root, or a view of one such as `--follow`'s):
    /// the jobs then copy between two of them with their local fast paths
    /// (`copy_file_range`, reflinks, the paired scan, local deltas).
    /// `None` for a replica across a wire or one that keeps no contents.
    fn local_root(&self) -> Option<&accord_fsys::Root> {
        None
    }

    /// Does `ReplicaDir::rename_from` work here? (A sync plans renames
    /// only between two replicas that can.)
    fn can_rename(&self) -> bool {
        false
    }

    /// Whether the root is case-insensitive, asked of the replica's own
    /// host in one call (`case_probe::probe` there). `None`: not offered;
    /// the caller probes through the seam's calls (`case_probe::probe`).
    fn start_case_probe(&self) -> Option<Pending<Result<bool, String>>> {
        None
    }

    /// Does `ReplicaDir::start_copy_from_sibling` work here? (A sync of
    /// several roots then gives this replica a version another root on its
    /// host holds from that root.)
    fn copies_from_siblings(&self) -> bool {
        false
    }
}

/// One directory of a replica; every name is a single validated component.
/// Temp names returned by one call are only given back to the same
/// directory.
///
/// Each call that a replica across a wire can send without waiting comes
/// in one form to implement, `start_*`, which returns its pending result
/// (a replica across a wire sends the request and returns at once; a
/// local one does the work and returns it ready), and a blocking form of
/// the same name without `start_`, provided here as `start_*(..).wait()`.
/// The blocking forms are not overridden: one definition per call means a
/// decorator cannot do something in one form and forget it in the other,
/// and every implementation writes each call once. They stay methods of
/// this trait (not of an extension trait) so that `&dyn ReplicaDir` and
/// generic `D: ReplicaDir + ?Sized` callers use them without an import.
pub trait ReplicaDir: Send + Sync {
    /// What is at `name` now (`None`: nothing).
    fn start_stat(&self, name: &[u8]) -> Pending<io::Result<Option<Found>>>;
    /// `start_stat`, waited for. Not overridden: implement `start_stat`.
    fn stat(&self, name: &[u8]) -> io::Result<Option<Found>> {
        self.start_stat(name).wait()
    }
    /// What is at `name` now, with a ctime that vouches for it from this
    /// call on: one that this host's file system moves at the entry's next
    /// change, however soon it comes (`accord_fsys::ctime_moves_after_stat`).
    /// `Ok(None)` where that cannot be promised, or nothing is there. The
    /// default promises nothing: a replica across a link leaves the ctimes
    /// of what it wrote to its next scan.
    fn start_vouching_stat(&self, _name: &[u8]) -> Pending<io::Result<Option<(Found, Time)>>> {
        Pending::ready(Ok(None))
    }
    /// `start_vouching_stat` of a temp this replica made (`temp` as its
    /// maker returned it). The default takes it for a name in this
    /// directory, as a local replica's temp is.
    fn start_vouching_stat_of_temp(
        &self,
        temp: &[u8],
    ) -> Pending<io::Result<Option<(Found, Time)>>> {
        self.start_vouching_stat(temp)
    }
    /// Read a regular file that must still be what `expect` says.
    fn open_read(
        &self,
        name: &[u8],
        expect: &Expect,
    ) -> Result<Box<dyn io::Read + Send + '_>, Error>;
    /// The encoded signature (see `accord_delta::Signature`) of the regular
    /// file at `name`, which must still be what `expect` says. `in_place`:
    /// for a delta applied in place (strong sums that are never wrong);
    /// else for one applied to a temp file and checked whole before it is
    /// committed (rsync's shorter sums; a mismatch is redone whole).
    fn start_signature(
        &self,
        name: &[u8],
        expect: &Expect,
        in_place: bool,
    ) -> Pending<Result<Vec<u8>, Error>>;
    /// `start_signature`, waited for. Not overridden: implement
    /// `start_signature`.
    fn signature(&self, name: &[u8], expect: &Expect, in_place: bool) -> Result<Vec<u8>, Error> {
        self.start_signature(name, expect, in_place).wait()
    }
    /// The encoded signature of `name`'s partial file, the basis of a
    /// resumed transfer (`None`: there is none). A whole-file receive cut
    /// off by its source (a lost connection) keeps what arrived there.
    fn start_partial_signature(&self, name: &[u8]) -> Pending<Result<Option<Vec<u8>>, Error>>;
    /// `start_partial_signature`, waited for. Not overridden: implement
    /// `start_partial_signature`.
    fn partial_signature(&self, name: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.start_partial_signature(name).wait()
    }
    /// A delta from the receiver's encoded `signature` to the regular file
    /// at `name`, which must still be what `expect` says, made where that
    /// file is (so from a remote source only the delta crosses the wire);
    /// `in_place`: a delta for `patch_in_place`; `wire`: what the
    /// receiver's [`ReplicaDir::delta_wire`] said (a remote source adds its
    /// own link's compression).
    fn make_delta(
        &self,
        name: &[u8],
        expect: &Expect,
        signature: &[u8],
        in_place: bool,
        wire: DeltaWire,
    ) -> Result<(Vec<u8>, DeltaStats), Error> {
        delta_from_stream(self, name, expect, signature, in_place, wire)
    }
    /// The encoded fine signature (`accord_delta::fine::FineSignature`)
    /// of the gaps that `request`, an encoded `GapRequest`, names in the
    /// regular file at `name`, which must still be what `expect` says: the
    /// receiver's side of a delta's second round. `None`: this directory
    /// does not sign gaps (a server that did not agree to it), and the
    /// first round's delta is sent as it is.
    fn fine_signature(
        &self,
        _name: &[u8],
        _expect: &Expect,
        _request: &[u8],
    ) -> Result<Option<Vec<u8>>, Error> {
        Ok(None)
    }
    /// Whether [`ReplicaDir::refine_delta`] runs where the file is: true
    /// for a directory on this host (the default reads the file whole,
    /// which from a remote source would cost more than the second round
    /// saves).
    fn refines_deltas(&self) -> bool {
        false
    }
    /// The sender's side of a delta's second round: `first`, the delta
    /// this directory made for `name`, with each literal run scanned
    /// against the blocks of `fine`, the receiver's answer to `request`.
    fn refine_delta(
        &self,
        name: &[u8],
        expect: &Expect,
        (first, request, fine): (&[u8], &GapRequest, &[u8]),
        wire: DeltaWire,
    ) -> Result<(Vec<u8>, DeltaStats), Error> {
        let new = read_planned(self, name, expect)?;
        let bad = |source| Error::Delta {
            action: Action::ReadSource,
            source,
        };
        let first = Delta::parse(first).map_err(bad)?;
        let fine = FineSignature::decode(fine, request).map_err(|source| Error::Delta {
            action: Action::OpenDestination,
            source,
        })?;
        let mut delta = Vec::new();
        let stats = refine(&first, &fine, &new, wire.coding(), &mut delta).map_err(bad)?;
        Ok((delta, stats))
    }
    /// What a delta sent to this directory may hold. The default, for a
    /// reader of unknown age: format 1.
    fn delta_wire(&self) -> DeltaWire {
        DeltaWire::default()
    }
    /// Write new contents for `name` into a hidden temp file beside it, with
    /// `props` applied; the temp's name. `incoming` is read before this
    /// returns (only the reply may still be on its way).
    fn start_receive(
        &self,
        name: &[u8],
        incoming: Incoming<'_>,
        props: &Props,
        mask: PropsMask,
    ) -> PendingTemp;
    /// `start_receive`, waited for. Not overridden: implement
    /// `start_receive`.
    fn receive(
        &self,
        name: &[u8],
        incoming: Incoming<'_>,
        props: &Props,
        mask: PropsMask,
    ) -> Result<Vec<u8>, Error> {
        self.start_receive(name, incoming, props, mask).wait()
    }
    /// Rebuild the file at `name` in its own storage from an encoded
    /// in-place delta, using at most `max_scratch` bytes of memory; on a
    /// failure after writing began the file is moved to a recovery name.
    fn patch_in_place(
        &self,
        name: &[u8],
        expect: &Expect,
        delta: &[u8],
        props: &Props,
        mask: PropsMask,
    ) -> Result<(), Error>;
    /// Make a symlink, fifo, socket, device node or empty directory like
    /// `entry` under a temp name, with its properties; the temp's name. (A
    /// directory made so and committed shows at its name only with its
    /// properties: a run killed between would otherwise leave it there with
    /// `mkdir`'s 0700.)
    fn start_make_node(&self, name: &[u8], entry: &Entry, mask: PropsMask) -> PendingTemp;
    /// `start_make_node`, waited for. Not overridden: implement
    /// `start_make_node`.
    fn make_node(&self, name: &[u8], entry: &Entry, mask: PropsMask) -> Result<Vec<u8>, Error> {
        self.start_make_node(name, entry, mask).wait()
    }
    /// Hard-link the regular file at `leader` (a path of the same replica)
    /// under a temp name for `name`.
    fn start_link_temp(&self, name: &[u8], leader: &RelPath) -> PendingTemp;
    /// `start_link_temp`, waited for. Not overridden: implement
    /// `start_link_temp`.
    fn link_temp(&self, name: &[u8], leader: &RelPath) -> Result<Vec<u8>, Error> {
        self.start_link_temp(name, leader).wait()
    }
    /// Copy a file of another root on this replica's own host into a temp
    /// for `name`, on that host: the file must still be what `from.expect`
    /// says and its bytes must have `from.hash`, else the temp is removed
    /// and the call fails. `None`: not offered (the caller carries the
    /// bytes itself, as it does after a failure here).
    fn start_copy_from_sibling(
        &self,
        _name: &[u8],
        _from: SiblingFile<'_>,
        _props: &Props,
        _mask: PropsMask,
    ) -> Option<PendingTemp> {
        None
    }
    /// Rename `temp` over `name` if `name` is still what `expect` says.
    fn start_commit(&self, temp: &[u8], name: &[u8], expect: &Expect)
        -> Pending<Result<(), Error>>;
    /// `start_commit`, waited for. Not overridden: implement
    /// `start_commit`.
    fn commit(&self, temp: &[u8], name: &[u8], expect: &Expect) -> Result<(), Error> {
        self.start_commit(temp, name, expect).wait()
    }
    /// Remove a temp that will not be committed.
    fn discard(&self, temp: &[u8]);
    /// Set the properties of `name` (not a directory's own: see
    /// `start_set_own_props`), if it is still what `expect` says.
    fn start_set_props(
        &self,
        name: &[u8],
        expect: &Expect,
        kind: Kind,
        props: &Props,
        mask: PropsMask,
    ) -> Pending<Result<(), Error>>;
    /// `start_set_props`, waited for. Not overridden: implement
    /// `start_set_props`.
    fn set_props(
        &self,
        name: &[u8],
        expect: &Expect,
        kind: Kind,
        props: &Props,
        mask: PropsMask,
    ) -> Result<(), Error> {
        self.start_set_props(name, expect, kind, props, mask).wait()
    }
    /// Set this directory's own properties, if it is still what `expect` says.
    fn start_set_own_props(
        &self,
        expect: &Expect,
        props: &Props,
        mask: PropsMask,
    ) -> Pending<Result<(), Error>>;
    /// `start_set_own_props`, waited for. Not overridden: implement
    /// `start_set_own_props`.
    fn set_own_props(&self, expect: &Expect, props: &Props, mask: PropsMask) -> Result<(), Error> {
        self.start_set_own_props(expect, props, mask).wait()
    }
    /// Make a subdirectory (mode 0700 until its properties are set); an
    /// existing directory is fine.
    fn start_mkdir(&self, name: &[u8]) -> Pending<Result<(), Error>>;
    /// `start_mkdir`, waited for. Not overridden: implement `start_mkdir`.
    fn mkdir(&self, name: &[u8]) -> Result<(), Error> {
        self.start_mkdir(name).wait()
    }
    /// Delete `name` (an empty directory or anything else) if it is still
    /// what `expect` says.
    fn start_delete(&self, name: &[u8], expect: &Expect) -> Pending<Result<Deleted, Error>>;
    /// `start_delete`, waited for. Not overridden: implement
    /// `start_delete`.
    fn delete(&self, name: &[u8], expect: &Expect) -> Result<Deleted, Error> {
        self.start_delete(name, expect).wait()
    }
    /// Remove a stale temp file of an interrupted run (never anything else).
    fn remove_stale_temp(&self, name: &[u8]);
    /// Rename the entry at `from` (a path of the same replica, a directory
    /// with its subtree) to `name` in this directory, if `from` is still
    /// what `expect` says and nothing is at `name` (a sync's rename). No
    /// symlink is followed on the way to either. The default: a replica
    /// that cannot, which the engine reports for that path.
    fn start_rename_from(
        &self,
        _name: &[u8],
        _from: &RelPath,
        _expect: &Expect,
    ) -> Pending<Result<(), Error>> {
        Pending::ready(Err(Error::io(Action::Rename)(io::Error::new(
            io::ErrorKind::Unsupported,
            "this replica cannot rename",
        ))))
    }
    /// `start_rename_from`, waited for. Not overridden: implement
    /// `start_rename_from`.
    fn rename_from(&self, name: &[u8], from: &RelPath, expect: &Expect) -> Result<(), Error> {
        self.start_rename_from(name, from, expect).wait()
    }

    /// False for a destination that keeps no contents (a dry run): the
    /// engine then sends it none, and reads none to send.
    fn takes_contents(&self) -> bool {
        true
    }
    /// The local directory handle behind this one, for the local fast paths.
    fn local(&self) -> Option<&accord_fsys::Dir> {
        None
    }
}

/// Largest file a delta is made for by reading it through
/// [`ReplicaDir::open_read`] (its new version is held in memory to be
/// matched).
pub const STREAM_DELTA_MAX: u64 = 1 << 30;

/// `make_delta` for any directory: read the file whole, check it is the
/// planned version, match it against the signature; the literals stored as
/// `wire` allows.
pub fn delta_from_stream<D: ReplicaDir + ?Sized>(
    dir: &D,
    name: &[u8],
    expect: &Expect,
    signature: &[u8],
    in_place: bool,
    wire: DeltaWire,
) -> Result<(Vec<u8>, DeltaStats), Error> {
    let sig = Signature::decode(signature).map_err(|source| Error::Delta {
        action: Action::OpenDestination,
        source,
    })?;
    let new = read_planned(dir, name, expect)?;
    let opts = DeltaOptions {
        in_place: in_place.then(InPlaceOptions::default),
    };
    let mut delta = Vec::new();
    let stats =
        make_delta_with(&sig, &new, &opts, wire.coding(), &mut delta).map_err(|source| {
            Error::Delta {
                action: Action::ReadSource,
                source,
            }
        })?;
    Ok((delta, stats))
}

/// The regular file at `name`, read whole: the version `expect` plans
/// (at most [`STREAM_DELTA_MAX`] bytes).
fn read_planned<D: ReplicaDir + ?Sized>(
    dir: &D,
    name: &[u8],
    expect: &Expect,
) -> Result<Vec<u8>, Error> {
    let size = match expect {
        Expect::Entry(f) if f.kind == Kind::File => f.size,
        _ => return Err(Error::Changed(End::Read)),
    };
    if size > STREAM_DELTA_MAX {
        return Err(Error::io(Action::ReadSource)(io::Error::other(
            "too large for a delta made from a stream",
        )));
    }
    let mut new = Vec::with_capacity(size as usize);
    dir.open_read(name, expect)?
        .take(size + 1)
        .read_to_end(&mut new)
        .map_err(Error::io(Action::ReadSource))?;
    // What was read is the planned version, whole (an in-place patch
    // cannot be taken back once it began).
    if new.len() as u64 != size {
        return Err(Error::Changed(End::Read));
    }
    recheck(dir, name, expect, End::Read)?;
    Ok(new)
}

/// Check `expect` against what `dir` has at `name` now.
pub fn recheck<D: ReplicaDir + ?Sized>(
    dir: &D,
    name: &[u8],
    expect: &Expect,
    end: End,
) -> Result<(), Error> {
    let action = match end {
        End::Read => Action::ReadSource,
        End::Written => Action::OpenDestination,
    };
    let now = dir.stat(name).map_err(Error::io(action))?;
    if expect.still_holds(now.as_ref()) {
        Ok(())
    } else {
        Err(Error::Changed(end))
    }
}

/// Depth first, names in order: with `RelPath`'s component order this is
/// path order.
fn scan_in_order<R: Replica + ?Sized>(
    replica: &R,
    dir: &RelPath,
    (rules, opts): (&IgnoreRules, &ScanOptions),
    batch: usize,
    pending: &mut Vec<Entry>,
    sink: &mut dyn FnMut(Vec<Entry>),
    found: &mut Scan,
) {
    let (listing, more) = replica.list_dir(dir, rules, opts);
    found.absorb(more);
    let Some(listing) = listing else { return };
    let mut entries = listing.entries.into_iter();
    if let Some(me) = entries.next() {
        emit(me, batch, pending, sink);
    }
    let mut files = entries.peekable();
    for sub in listing.subdirs {
        while let Some(f) = files.next_if(|f| f.path < sub.path) {
            emit(f, batch, pending, sink);
        }
        scan_in_order(
            replica,
            &sub.path,
            (rules, opts),
            batch,
            pending,
            sink,
            found,
        );
    }
    for f in files {
        emit(f, batch, pending, sink);
    }
}

fn emit(e: Entry, batch: usize, pending: &mut Vec<Entry>, sink: &mut dyn FnMut(Vec<Entry>)) {
    pending.push(e);
    if pending.len() >= batch {
        sink(std::mem::take(pending));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_compressed_only_for_a_reader_that_takes_them_over_z() {
        let raw = LiteralCoding::Raw;
        assert_eq!(
            DeltaWire::default().coding(),
            raw,
            "a reader of unknown age"
        );
        assert_eq!(DeltaWire::LOCAL.coding(), raw, "no link, no -z");
        let old_reader = DeltaWire {
            reads_packed: false,
            level: Some(6),
        };
        assert_eq!(old_reader.coding(), raw, "-z to an older reader");
        let new_reader = DeltaWire {
            reads_packed: true,
            level: Some(6),
        };
        assert_eq!(new_reader.coding(), LiteralCoding::Zstd { level: 6 });
    }
}
