//! The files of one chunk of a sync's propagation, received into temps
//! beside their targets, pipelined: the sources are opened a window ahead
//! (a remote source's contents start to flow at once), each receive is
//! started before any is waited for (a remote receiver answers them in
//! one round trip), and each file's bytes are fingerprinted as they pass,
//! which checks with no second read that the source still held what update
//! detection saw.
//!
//! A file the other side holds an old version of travels as an rsync
//! delta when one side is remote and the file is big enough to be worth a
//! signature (the mirror's rule, `DELTA_AUTO_MIN_SIZE`): the receiver's
//! signature, a delta made where the new version is (so from a remote
//! source only the delta crosses), rebuilt into a temp beside the old
//! version. A delta carries the BLAKE3 of its result, the same fingerprint
//! update detection takes, so what is checked for a whole file is checked
//! for a delta too, before it is sent; the receiver checks the rebuilt
//! file against it, and a false match of the signature's short sums is
//! sent again whole.

use crate::sync::propagate::{index, split};
use crate::sync::SyncError;
use accord_delta::Delta;
use accord_fsys::PropsMask;
use accord_model::{Expect, Fingerprint, Kind, Props, RelPath};
use accord_plan::{Side, SyncItem, DELTA_AUTO_MIN_SIZE};
use accord_replica::Action;
use accord_replica::{Fingerprinting, SiblingFile, SiblingRoot};
use accord_replica::{Incoming, PendingTemp, Replica, ReplicaDir};
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read};

/// Local sources opened ahead of the receive that reads them (each holds
/// a file descriptor).
const OPEN_AHEAD: usize = 32;

/// Bytes of remote sources asked for ahead of the receive that reads them
/// (at least one file): their contents travel while earlier files are
/// written, so a chunk of small files costs a round trip, not one per
/// `OPEN_AHEAD` files. The mirror asks as far ahead.
const REMOTE_AHEAD_BYTES: u64 = 16 << 20;

/// One file to carry from one side to the other.
pub(crate) struct FileCopy<'i> {
    pub item: &'i SyncItem,
    pub from: Side,
    pub to: Side,
    /// The properties its temp takes.
    pub props: Props,
    pub mask: PropsMask,
}

/// A copy and what came of it: the temp's name, or why not.
pub(crate) type Received<'i> = (FileCopy<'i>, Result<Vec<u8>, SyncError>);

/// The directories a chunk reads from or writes to on one side, each
/// opened once.
struct Dirs<'r> {
    open: HashMap<RelPath, io::Result<Box<dyn ReplicaDir + 'r>>>,
    /// What a directory that cannot be opened fails.
    action: Action,
}

impl<'r> Dirs<'r> {
    fn new(replica: &'r dyn Replica, parents: Vec<RelPath>, action: Action) -> Dirs<'r> {
        let mut open = HashMap::new();
        for parent in parents {
            if let std::collections::hash_map::Entry::Vacant(slot) = open.entry(parent) {
                let dir = replica.open_dir(slot.key());
                slot.insert(dir);
            }
        }
        Dirs { open, action }
    }

    /// Is the directory across a wire (no local handle behind it)? One
    /// that could not be opened is taken for local: its files fail at once.
    fn is_remote(&self, parent: &RelPath) -> bool {
        self.open[parent]
            .as_ref()
            .is_ok_and(|dir| dir.local().is_none())
    }

    fn get(&self, parent: &RelPath) -> Result<&dyn ReplicaDir, crate::Error> {
        match &self.open[parent] {
            Ok(dir) => Ok(dir.as_ref()),
            Err(e) => Err(crate::Error::Io {
                action: self.action,
                source: io::Error::new(e.kind(), e.to_string()),
            }),
        }
    }
}

/// Both sides' directories that `side_of` each copy names.
fn dirs_of<'r>(
    replicas: [&'r dyn Replica; 2],
    copies: &[FileCopy],
    side_of: fn(&FileCopy) -> Side,
    action: Action,
) -> [Dirs<'r>; 2] {
    [0, 1].map(|side| {
        let parents = copies
            .iter()
            .filter(|c| index(side_of(c)) == side)
            .map(|c| split(&c.item.path).0)
            .collect();
        Dirs::new(replicas[side], parents, action)
    })
}

/// Receive every copy into a temp beside its target; the results come in
/// the copies' order. A temp whose bytes are not what detection saw is
/// discarded (`ContentsChanged`: the file was written while it was read).
///
/// With `sibling` (the source's root on the receiver's own host), each
/// file is first copied there, from that root; what is not (the receiver
/// does not offer it, or the copy failed) is carried as any other.
pub(crate) fn receive_all<'i>(
    replicas: [&dyn Replica; 2],
    copies: Vec<FileCopy<'i>>,
    sibling: Option<&SiblingRoot>,
    arrived: &dyn Fn(&FileCopy),
) -> Vec<Received<'i>> {
    let sources = dirs_of(replicas, &copies, |c| c.from, Action::OpenSource);
    let targets = dirs_of(replicas, &copies, |c| c.to, Action::OpenDestination);
    let remote = replicas.iter().any(|r| r.local_root().is_none());
    let mut received: Vec<(usize, Received<'i>)> = Vec::new();
    let copies: Vec<(usize, FileCopy<'i>)> = copies.into_iter().enumerate().collect();
    let copies = match sibling {
        Some(root) => copy_on_host(root, copies, &targets, arrived, &mut received),
        None => copies,
    };
    let (deltas, wholes): (Vec<_>, Vec<_>) = copies
        .into_iter()
        .partition(|(_, copy)| remote && worth_a_delta(copy));
    let (order, wholes): (Vec<usize>, Vec<FileCopy>) = wholes.into_iter().unzip();
    let started = start_receives(&wholes, &sources, &targets);
    received.extend(order.into_iter().zip(wholes.into_iter().zip(started)).map(
        |(at, (copy, started))| {
            let landed = landed(&copy, started, &targets);
            if landed.is_ok() {
                arrived(&copy);
            }
            (at, (copy, landed))
        },
    ));
    for (at, copy) in deltas {
        let landed = by_delta(&copy, &sources, &targets);
        if landed.is_ok() {
            arrived(&copy);
        }
        received.push((at, (copy, landed)));
    }
    received.sort_by_key(|(at, _)| *at);
    received.into_iter().map(|(_, r)| r).collect()
}

/// Copy each file on the receiver's host from the source's root there,
/// every copy started before any is waited for; the copies not made
/// there are given back.
fn copy_on_host<'i>(
    root: &SiblingRoot,
    copies: Vec<(usize, FileCopy<'i>)>,
    targets: &[Dirs; 2],
    arrived: &dyn Fn(&FileCopy),
    received: &mut Vec<(usize, Received<'i>)>,
) -> Vec<(usize, FileCopy<'i>)> {
    let started: Vec<_> = copies
        .into_iter()
        .map(|(at, copy)| {
            let pending = start_on_host(root, &copy, targets);
            (at, copy, pending)
        })
        .collect();
    let mut rest = Vec::new();
    for (at, copy, pending) in started {
        match pending.map(PendingTemp::wait) {
            Some(Ok(temp)) => {
                arrived(&copy);
                received.push((at, (copy, Ok(temp))));
            }
            // Not offered, or it failed (the file changed, the root there
            // is not the one scanned): carried from the source instead,
            // which reports what is wrong if something still is.
            _ => rest.push((at, copy)),
        }
    }
    rest
}

fn start_on_host(root: &SiblingRoot, copy: &FileCopy, targets: &[Dirs; 2]) -> Option<PendingTemp> {
    let (parent, name) = split(&copy.item.path);
    let source = copy.item.entry(copy.from)?;
    let hash = source.hash.as_ref()?;
    let dir = targets[index(copy.to)].get(&parent).ok()?;
    let expect = Expect::entry(source);
    let from = SiblingFile {
        root,
        path: &copy.item.path,
        expect: &expect,
        hash,
    };
    dir.start_copy_from_sibling(name, from, &copy.props, copy.mask)
}

/// Does the target hold an old version big enough for a delta to pay?
fn worth_a_delta(copy: &FileCopy) -> bool {
    let new = copy.item.entry(copy.from).expect("a copy has a source");
    let old = copy.item.entry(copy.to);
    new.size >= DELTA_AUTO_MIN_SIZE && old.is_some_and(|o| o.kind == Kind::File && o.size > 0)
}

/// Carry one file as a delta against the target's old version; sent whole
/// when the delta's result fails its check with neither side changed (a
/// false match), or a remote side has not the memory for it.
fn by_delta(
    copy: &FileCopy,
    sources: &[Dirs; 2],
    targets: &[Dirs; 2],
) -> Result<Vec<u8>, SyncError> {
    match delta_temp(copy, sources, targets) {
        Err(SyncError::Replica(e)) if e.is_false_match() || e.is_over_memory() => {
            let (parent, name) = split(&copy.item.path);
            let source = copy.item.entry(copy.from).expect("a copy has a source");
            let reader = sources[index(copy.from)]
                .get(&parent)
                .and_then(|dir| dir.open_read(name, &Expect::entry(source)));
            landed(copy, start_one(copy, reader, targets), targets)
        }
        other => other,
    }
}

/// The signature of the target's old version, a delta from it made where
/// the source is, checked against detection's fingerprint, rebuilt into a
/// temp beside the target.
fn delta_temp(
    copy: &FileCopy,
    sources: &[Dirs; 2],
    targets: &[Dirs; 2],
) -> Result<Vec<u8>, SyncError> {
    let (parent, name) = split(&copy.item.path);
    let source = copy.item.entry(copy.from).expect("a copy has a source");
    let old = copy.item.entry(copy.to).expect("a delta has a basis");
    let (sdir, tdir) = (
        sources[index(copy.from)].get(&parent)?,
        targets[index(copy.to)].get(&parent)?,
    );
    let basis = Expect::entry(old);
    let signature = tdir.signature(name, &basis, false)?;
    let wire = tdir.delta_wire();
    let (delta, _stats) = sdir.make_delta(name, &Expect::entry(source), &signature, false, wire)?;
    let promised = Delta::parse(&delta)
        .map_err(|source| crate::Error::Delta {
            action: Action::ReadSource,
            source,
        })?
        .result_hash;
    if source.hash != Some(promised) {
        // The source was written after detection, behind its metadata.
        return Err(SyncError::ContentsChanged);
    }
    let incoming = accord_replica::Incoming::Delta {
        basis,
        delta: &delta,
    };
    Ok(tdir.receive(name, incoming, &copy.props, copy.mask)?)
}

/// A receive on its way, with the fingerprint of the bytes it was given.
type Started = Result<(PendingTemp, Fingerprint), SyncError>;

/// Start every receive, the sources opened a window ahead. Those read
/// across a wire are asked for first and started last: their contents
/// travel while the files read here are sent, so a chunk that carries files
/// both ways waits for one round trip, not one per direction.
fn start_receives(copies: &[FileCopy], sources: &[Dirs; 2], targets: &[Dirs; 2]) -> Vec<Started> {
    let open = |copy: &FileCopy| {
        let (parent, name) = split(&copy.item.path);
        let source = copy.item.entry(copy.from).expect("a copy has a source");
        let dir = sources[index(copy.from)].get(&parent)?;
        dir.open_read(name, &Expect::entry(source))
    };
    let (remote, local): (Vec<usize>, Vec<usize>) = (0..copies.len()).partition(|&at| {
        let (parent, _) = split(&copies[at].item.path);
        sources[index(copies[at].from)].is_remote(&parent)
    });
    let mut pulls = Lookahead::new(remote, true);
    let mut pushes = Lookahead::new(local, false);
    pulls.fill(copies, open);
    let mut started: Vec<Option<Started>> = copies.iter().map(|_| None).collect();
    for lookahead in [&mut pushes, &mut pulls] {
        while let Some((at, reader)) = lookahead.next(copies, open) {
            started[at] = Some(start_one(&copies[at], reader, targets));
        }
    }
    started
        .into_iter()
        .map(|one| one.expect("every copy started"))
        .collect()
}

/// A source opened ahead of its turn, or why it could not be.
type Opened<'s> = Result<Box<dyn Read + Send + 's>, crate::Error>;

/// Sources opened ahead of their turn, in the order they are read: local
/// ones by count (each holds a file descriptor), remote ones by bytes.
struct Lookahead<'s> {
    order: Vec<usize>,
    /// The next of `order` to open.
    next: usize,
    opened: VecDeque<(usize, Opened<'s>)>,
    remote: bool,
    bytes: u64,
}

impl<'s> Lookahead<'s> {
    fn new(order: Vec<usize>, remote: bool) -> Lookahead<'s> {
        Lookahead {
            order,
            next: 0,
            opened: VecDeque::new(),
            remote,
            bytes: 0,
        }
    }

    /// Open the sources ahead as far as the window goes.
    fn fill(&mut self, copies: &[FileCopy], open: impl Fn(&FileCopy) -> Opened<'s>) {
        while let Some(&at) = self.order.get(self.next) {
            let room = match self.remote {
                true => {
                    self.opened.is_empty() || self.bytes + size(&copies[at]) <= REMOTE_AHEAD_BYTES
                }
                false => self.opened.len() < OPEN_AHEAD,
            };
            if !room {
                return;
            }
            self.bytes += size(&copies[at]);
            self.opened.push_back((at, open(&copies[at])));
            self.next += 1;
        }
    }

    /// The next copy to read and its source, the window moved on.
    fn next(
        &mut self,
        copies: &[FileCopy],
        open: impl Fn(&FileCopy) -> Opened<'s> + Copy,
    ) -> Option<(usize, Opened<'s>)> {
        self.fill(copies, open);
        let (at, reader) = self.opened.pop_front()?;
        self.bytes -= size(&copies[at]);
        self.fill(copies, open);
        Some((at, reader))
    }
}

fn size(copy: &FileCopy) -> u64 {
    copy.item.entry(copy.from).map_or(0, |e| e.size)
}

fn start_one(
    copy: &FileCopy,
    reader: Result<Box<dyn Read + Send + '_>, crate::Error>,
    targets: &[Dirs; 2],
) -> Started {
    let mut reader = reader?;
    let (parent, name) = split(&copy.item.path);
    let dir = targets[index(copy.to)].get(&parent)?;
    let mut passing = Fingerprinting::new(&mut *reader);
    // The body is read whole before this returns (a remote receiver's is
    // sent), so the fingerprint is final.
    let pending = dir.start_receive(name, Incoming::Whole(&mut passing), &copy.props, copy.mask);
    Ok((pending, passing.finish()))
}

/// Wait for one receive and check what it was given.
fn landed(copy: &FileCopy, started: Started, targets: &[Dirs; 2]) -> Result<Vec<u8>, SyncError> {
    let (pending, fingerprint) = started?;
    let temp = pending.wait()?;
    let source = copy.item.entry(copy.from).expect("a copy has a source");
    if source.hash.is_some_and(|hash| hash == fingerprint) {
        return Ok(temp);
    }
    let (parent, _) = split(&copy.item.path);
    if let Ok(dir) = targets[index(copy.to)].get(&parent) {
        dir.discard(&temp);
    }
    Err(SyncError::ContentsChanged)
}
