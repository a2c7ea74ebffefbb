//! An in-memory replica: the engine's twin of a file system, for tests of
//! the layer above the `Replica` seam. It records every call the engine
//! makes, and a hook can change the tree at any call (a user editing files
//! while the run goes on).

#![allow(dead_code)]

use accord_engine::{Deleted, End, Error, Incoming, Pending, PendingTemp, Replica, ReplicaDir};
use accord_fsys::{IgnoreRules, Listing, PropsMask, Scan, ScanOptions};
use accord_model::{Entry, Expect, Fingerprint, Found, Kind, Props, RelPath, Time};
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read};
use std::sync::Mutex;

const TEMP_PREFIX: &[u8] = b".accord-tmp-";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    pub kind: Kind,
    pub props: Props,
    pub data: Vec<u8>,
    pub link_target: Option<Vec<u8>>,
    pub rdev: u64,
}

#[derive(Default)]
pub struct Tree {
    pub names: BTreeMap<RelPath, u64>,
    pub inodes: HashMap<u64, Inode>,
    next_ino: u64,
    clock: i64,
    temps: u64,
}

/// A hook called with the name of each mutating call and its path, before
/// the call looks at the tree.
pub type Hook = Box<dyn FnMut(&str, &RelPath, &mut Tree) + Send>;

pub struct MemReplica {
    dev: u64,
    pub tree: Mutex<Tree>,
    pub calls: Mutex<Vec<String>>,
    pub hook: Mutex<Option<Hook>>,
    state: Mutex<HashMap<String, Vec<u8>>>,
    /// Faults and the ordered mode (see `Faults`).
    pub faults: Mutex<Faults>,
}

/// Behaviours of a replica across a wire, and failures, for the engine's
/// tests of them.
#[derive(Default)]
pub struct Faults {
    /// Name temps at once by a handle, as a replica that carries out calls
    /// in order does (`PendingTemp::named`): a commit of a handle whose
    /// temp was never made, or was made before a flush that failed, is
    /// refused.
    pub ordered: bool,
    /// The next flush fails with this errno.
    pub flush: Option<i32>,
    /// The next receive of this path fails with this errno.
    pub receive: Option<(RelPath, i32)>,
    handles: HashMap<Vec<u8>, Option<(Vec<u8>, u64)>>,
    next_handle: u64,
    failed_flush: Option<u64>,
}

impl Faults {
    fn name(&mut self, made: &Result<Vec<u8>, Error>) -> Vec<u8> {
        self.next_handle += 1;
        let n = self.next_handle;
        let handle = format!("handle-{n}").into_bytes();
        let temp = made.as_ref().ok().map(|t| (t.clone(), n));
        self.handles.insert(handle.clone(), temp);
        handle
    }

    /// The temp of `handle`, taken (`None`: never made, or refused).
    fn take(&mut self, handle: &[u8]) -> Result<Vec<u8>, (Option<Vec<u8>>, Error)> {
        let refused = |what: &str| {
            Error::io(accord_engine::Action::Replace)(io::Error::new(
                io::ErrorKind::InvalidInput,
                what.to_string(),
            ))
        };
        match self.handles.remove(handle) {
            Some(Some((temp, n))) if self.failed_flush.is_some_and(|f| n <= f) => Err((
                Some(temp),
                refused("not committed: the flush after its temp failed"),
            )),
            Some(Some((temp, _))) => Ok(temp),
            _ => Err((None, refused("a temp that was not made"))),
        }
    }
}

pub fn p(s: &str) -> RelPath {
    RelPath::new(s.as_bytes()).unwrap()
}

fn new_props(mode: u32, mtime: i64) -> Props {
    Props {
        mode,
        uid: 0,
        gid: 0,
        mtime: Time {
            sec: mtime,
            nsec: 0,
        },
        xattrs: Some(Vec::new()),
    }
}

impl Tree {
    fn add(&mut self, path: RelPath, inode: Inode) -> u64 {
        self.next_ino += 1;
        let ino = self.next_ino;
        self.inodes.insert(ino, inode);
        self.names.insert(path, ino);
        ino
    }

    fn tick(&mut self) -> Time {
        self.clock += 1;
        Time {
            sec: 1_000_000 + self.clock,
            nsec: 0,
        }
    }

    /// A directory's entries changed: its mtime moves, as on a disk.
    fn touch_parent(&mut self, path: &RelPath) {
        let now = self.tick();
        if let Some(ino) = path.parent().and_then(|d| self.names.get(&d).copied()) {
            self.inodes.get_mut(&ino).unwrap().props.mtime = now;
        }
    }

    pub fn found(&self, dev: u64, path: &RelPath) -> Option<Found> {
        let ino = *self.names.get(path)?;
        let n = &self.inodes[&ino];
        Some(Found {
            kind: n.kind,
            dev,
            ino,
            size: size_of(n),
            mtime: n.props.mtime,
        })
    }

    fn nlink(&self, ino: u64) -> u64 {
        self.names.values().filter(|i| **i == ino).count() as u64
    }

    /// Change a file's contents as a user would (new mtime).
    pub fn edit(&mut self, path: &RelPath, data: &[u8]) {
        let now = self.tick();
        let ino = self.names[path];
        let n = self.inodes.get_mut(&ino).unwrap();
        n.data = data.to_vec();
        n.props.mtime = now;
    }

    fn new_temp(&mut self, dir: &RelPath) -> RelPath {
        self.temps += 1;
        let mut name = TEMP_PREFIX.to_vec();
        name.extend_from_slice(format!("{}", self.temps).as_bytes());
        dir.join(&name).unwrap()
    }
}

fn size_of(n: &Inode) -> u64 {
    match n.kind {
        Kind::File => n.data.len() as u64,
        Kind::Symlink => n.link_target.as_ref().map_or(0, |t| t.len() as u64),
        _ => 0,
    }
}

fn apply(props: &mut Props, want: &Props, mask: PropsMask, kind: Kind) {
    if mask.perms && kind != Kind::Symlink {
        props.mode = want.mode;
    }
    if mask.owner {
        props.uid = want.uid;
        props.gid = want.gid;
    }
    if mask.times {
        props.mtime = want.mtime;
    }
    if mask.xattrs.is_some() && want.xattrs.is_some() {
        props.xattrs = want.xattrs.clone();
    }
}

impl MemReplica {
    /// An empty replica (its root directory only) on device `dev`.
    pub fn new(dev: u64) -> MemReplica {
        let mut tree = Tree::default();
        tree.add(
            RelPath::root(),
            Inode {
                kind: Kind::Dir,
                props: new_props(0o755, 1),
                data: Vec::new(),
                link_target: None,
                rdev: 0,
            },
        );
        MemReplica {
            dev,
            tree: Mutex::new(tree),
            calls: Mutex::new(Vec::new()),
            hook: Mutex::new(None),
            state: Mutex::new(HashMap::new()),
            faults: Mutex::new(Faults::default()),
        }
    }

    fn add(&self, path: &str, kind: Kind, mode: u32, data: &[u8], target: Option<&[u8]>) {
        let mut t = self.tree.lock().unwrap();
        t.add(
            p(path),
            Inode {
                kind,
                props: new_props(mode, 100),
                data: data.to_vec(),
                link_target: target.map(<[u8]>::to_vec),
                rdev: 0,
            },
        );
    }

    pub fn dir(&self, path: &str, mode: u32) -> &Self {
        self.add(path, Kind::Dir, mode, b"", None);
        self
    }

    pub fn file(&self, path: &str, mode: u32, data: &[u8]) -> &Self {
        self.add(path, Kind::File, mode, data, None);
        self
    }

    pub fn symlink(&self, path: &str, target: &str) -> &Self {
        self.add(path, Kind::Symlink, 0o777, b"", Some(target.as_bytes()));
        self
    }

    pub fn fifo(&self, path: &str) -> &Self {
        self.add(path, Kind::Fifo, 0o644, b"", None);
        self
    }

    /// A second name for the inode at `existing`.
    pub fn hard_link(&self, path: &str, existing: &str) -> &Self {
        let mut t = self.tree.lock().unwrap();
        let ino = t.names[&p(existing)];
        t.names.insert(p(path), ino);
        self
    }

    /// What a person would compare: every visible path with its kind, mode,
    /// mtime, contents or target, and which paths share an inode.
    pub fn snapshot(&self) -> BTreeMap<String, String> {
        let t = self.tree.lock().unwrap();
        let mut first_name: HashMap<u64, String> = HashMap::new();
        let mut out = BTreeMap::new();
        for (path, ino) in &t.names {
            if path.is_root() {
                continue;
            }
            let n = &t.inodes[ino];
            let linked = match first_name.get(ino) {
                Some(first) if n.kind == Kind::File => format!(" = {first}"),
                _ => {
                    first_name.insert(*ino, path.display());
                    String::new()
                }
            };
            let what = match n.kind {
                Kind::File => format!("{:?}", String::from_utf8_lossy(&n.data)),
                Kind::Symlink => {
                    format!(
                        "-> {}",
                        String::from_utf8_lossy(n.link_target.as_ref().unwrap())
                    )
                }
                _ => String::new(),
            };
            let mtime = if n.kind == Kind::Dir {
                0
            } else {
                n.props.mtime.sec
            };
            out.insert(
                path.display(),
                format!(
                    "{} {:o} {mtime} {what}{linked}",
                    n.kind.name(),
                    n.props.mode
                ),
            );
        }
        out
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    /// Record a call and run the hook; then the tree, locked.
    fn call(&self, what: &str, path: &RelPath) -> std::sync::MutexGuard<'_, Tree> {
        self.calls
            .lock()
            .unwrap()
            .push(format!("{what} {}", path.display()));
        let mut t = self.tree.lock().unwrap();
        if let Some(h) = self.hook.lock().unwrap().as_mut() {
            h(what, path, &mut t);
        }
        t
    }

    fn entry(&self, t: &Tree, path: &RelPath, ino: u64, xattrs: bool) -> Entry {
        let n = &t.inodes[&ino];
        let mut props = n.props.clone();
        if !xattrs {
            props.xattrs = None;
        }
        Entry {
            path: path.clone(),
            kind: n.kind,
            size: size_of(n),
            props,
            dev: self.dev,
            ino,
            nlink: t.nlink(ino),
            rdev: n.rdev,
            blocks: size_of(n).div_ceil(512),
            link_target: n.link_target.clone(),
            hash: None,
        }
    }
}

impl Replica for MemReplica {
    fn describe(&self) -> String {
        format!("mem:{}", self.dev)
    }

    fn identity(&self) -> (u64, u64) {
        (self.dev, 1)
    }

    fn try_lock(&self) -> io::Result<bool> {
        Ok(true)
    }

    fn list_dir(
        &self,
        dir: &RelPath,
        rules: &IgnoreRules,
        opts: &ScanOptions,
    ) -> (Option<Listing>, Scan) {
        self.calls
            .lock()
            .unwrap()
            .push(format!("list {}", dir.display()));
        let t = self.tree.lock().unwrap();
        let none = (None, Scan::default());
        let Some(&me) = t.names.get(dir) else {
            return none;
        };
        if t.inodes[&me].kind != Kind::Dir {
            return none;
        }
        let mut l = Listing::default();
        l.entries.push(self.entry(&t, dir, me, opts.xattrs.any()));
        for (path, ino) in t.names.range(dir.clone()..) {
            if !path.starts_with(dir) {
                break;
            }
            if path.parent().as_ref() != Some(dir) {
                continue;
            }
            if path.file_name().starts_with(TEMP_PREFIX) {
                l.stale_temps.push(path.clone());
                continue;
            }
            let is_dir = t.inodes[ino].kind == Kind::Dir;
            if rules.is_excluded(path, is_dir) {
                continue;
            }
            let e = self.entry(&t, path, *ino, opts.xattrs.any());
            if is_dir {
                l.subdirs.push(e);
            } else {
                l.entries.push(e);
            }
        }
        (Some(l), Scan::default())
    }

    fn fingerprint(&self, path: &RelPath) -> Result<Fingerprint, Error> {
        let t = self.tree.lock().unwrap();
        let ino = t.names.get(path).ok_or(Error::Changed(End::Read))?;
        Ok(*blake3::hash(&t.inodes[ino].data).as_bytes())
    }

    fn open_dir(&self, path: &RelPath) -> io::Result<Box<dyn ReplicaDir + '_>> {
        let t = self.tree.lock().unwrap();
        match t.names.get(path).map(|i| t.inodes[i].kind) {
            Some(Kind::Dir) => Ok(Box::new(MemDir {
                replica: self,
                path: path.clone(),
            })),
            Some(_) => Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
            None => Err(io::Error::from_raw_os_error(libc::ENOENT)),
        }
    }

    fn sync_all(&self) -> io::Result<()> {
        self.calls.lock().unwrap().push("sync_all".into());
        let mut f = self.faults.lock().unwrap();
        match f.flush.take() {
            Some(errno) => {
                f.failed_flush = Some(f.next_handle);
                Err(io::Error::from_raw_os_error(errno))
            }
            None => Ok(()),
        }
    }

    fn read_state(&self, name: &str) -> Option<Vec<u8>> {
        self.state.lock().unwrap().get(name).cloned()
    }

    fn write_state(&self, name: &str, data: &[u8], _durable: bool) -> io::Result<()> {
        self.state
            .lock()
            .unwrap()
            .insert(name.to_string(), data.to_vec());
        Ok(())
    }
}

struct MemDir<'a> {
    replica: &'a MemReplica,
    path: RelPath,
}

fn bad_name(e: accord_model::PathError) -> Error {
    Error::Io {
        action: accord_engine::Action::OpenDestination,
        source: io::Error::new(io::ErrorKind::InvalidInput, e),
    }
}

impl MemDir<'_> {
    fn at(&self, name: &[u8]) -> Result<RelPath, Error> {
        self.path.join(name).map_err(bad_name)
    }

    fn check(&self, t: &Tree, path: &RelPath, expect: &Expect, end: End) -> Result<(), Error> {
        if expect.still_holds(t.found(self.replica.dev, path).as_ref()) {
            Ok(())
        } else {
            Err(Error::Changed(end))
        }
    }

    fn discard_temp(&self, temp: &[u8]) {
        if let Ok(path) = self.at(temp) {
            self.replica.tree.lock().unwrap().names.remove(&path);
        }
    }

    /// A temp made (or not), as this replica hands it out.
    fn pending_temp(&self, made: Result<Vec<u8>, Error>) -> PendingTemp {
        let mut f = self.replica.faults.lock().unwrap();
        if !f.ordered {
            return PendingTemp::ready(made);
        }
        let handle = f.name(&made);
        PendingTemp::named(handle.clone(), Pending::ready(made.map(|_| handle)))
    }

    /// The temp name behind what the engine gave back.
    fn temp_of(&self, temp: &[u8]) -> Result<Vec<u8>, (Option<Vec<u8>>, Error)> {
        let mut f = self.replica.faults.lock().unwrap();
        if f.ordered {
            f.take(temp)
        } else {
            Ok(temp.to_vec())
        }
    }

    /// Put `inode` under a new temp name here.
    fn temp(&self, t: &mut Tree, inode: Inode) -> Vec<u8> {
        let temp = t.new_temp(&self.path);
        t.add(temp.clone(), inode);
        temp.file_name().to_vec()
    }
}

/// The calls of `ReplicaDir` that have a `start_*` form, done now; the
/// trait's `start_*` methods hand out their results.
impl MemDir<'_> {
    fn do_stat(&self, name: &[u8]) -> io::Result<Option<Found>> {
        let path = self
            .path
            .join(name)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(self
            .replica
            .tree
            .lock()
            .unwrap()
            .found(self.replica.dev, &path))
    }

    fn do_signature(&self, name: &[u8], expect: &Expect, in_place: bool) -> Result<Vec<u8>, Error> {
        let path = self.at(name)?;
        let t = self.replica.call("signature", &path);
        self.check(&t, &path, expect, End::Written)?;
        let data = &t.inodes[&t.names[&path]].data;
        let opts = accord_delta::SignatureOptions {
            verified: !in_place,
            ..Default::default()
        };
        let sig =
            accord_delta::Signature::generate(data, &opts).map_err(|source| Error::Delta {
                action: accord_engine::Action::OpenDestination,
                source,
            })?;
        Ok(sig.encode())
    }

    fn do_partial_signature(&self, _name: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        Ok(None)
    }

    fn do_receive(
        &self,
        name: &[u8],
        incoming: Incoming<'_>,
        props: &Props,
        mask: PropsMask,
    ) -> Result<Vec<u8>, Error> {
        let path = self.at(name)?;
        let fault = {
            let mut f = self.replica.faults.lock().unwrap();
            match &f.receive {
                Some((at, errno)) if *at == path => {
                    let errno = *errno;
                    f.receive = None;
                    Some(errno)
                }
                _ => None,
            }
        };
        if let Some(errno) = fault {
            drop(self.replica.call("receive-failed", &path));
            return Err(Error::io(accord_engine::Action::WriteTemp)(
                io::Error::from_raw_os_error(errno),
            ));
        }
        let what = match incoming {
            Incoming::Whole(_) => "receive-whole",
            Incoming::Delta { .. } => "receive-delta",
            Incoming::Resume { .. } => "receive-resume",
        };
        let mut t = self.replica.call(what, &path);
        let data = match incoming {
            Incoming::Whole(r) => {
                let mut v = Vec::new();
                r.read_to_end(&mut v).map_err(|source| Error::Io {
                    action: accord_engine::Action::ReadSource,
                    source,
                })?;
                v
            }
            // This twin never keeps partial files (none to resume from).
            Incoming::Resume { .. } => return Err(Error::Changed(End::Written)),
            Incoming::Delta { basis, delta } => {
                self.check(&t, &path, &basis, End::Written)?;
                let old = &t.inodes[&t.names[&path]].data;
                let delta = accord_delta::Delta::parse(delta).map_err(|source| Error::Delta {
                    action: accord_engine::Action::WriteTemp,
                    source,
                })?;
                let mut out = Vec::new();
                accord_delta::patch_to(old, &delta, &mut out).map_err(|source| Error::Delta {
                    action: accord_engine::Action::WriteTemp,
                    source,
                })?;
                out
            }
        };
        let mut inode = Inode {
            kind: Kind::File,
            props: new_props(0o600, 0),
            data,
            link_target: None,
            rdev: 0,
        };
        inode.props.mtime = t.tick();
        apply(&mut inode.props, props, mask, Kind::File);
        Ok(self.temp(&mut t, inode))
    }

    fn do_make_node(&self, name: &[u8], entry: &Entry, mask: PropsMask) -> Result<Vec<u8>, Error> {
        let path = self.at(name)?;
        let mut t = self.replica.call("make-node", &path);
        let mut inode = Inode {
            kind: entry.kind,
            props: new_props(0o600, 0),
            data: Vec::new(),
            link_target: entry.link_target.clone(),
            rdev: entry.rdev,
        };
        if entry.kind == Kind::Symlink {
            // Symlinks have no mode of their own on Linux.
            inode.props.mode = 0o777;
        }
        inode.props.mtime = t.tick();
        apply(&mut inode.props, &entry.props, mask, entry.kind);
        Ok(self.temp(&mut t, inode))
    }

    fn do_link_temp(&self, name: &[u8], leader: &RelPath) -> Result<Vec<u8>, Error> {
        let path = self.at(name)?;
        let mut t = self.replica.call("link", &path);
        let ino = match t.names.get(leader) {
            Some(i) if t.inodes[i].kind == Kind::File => *i,
            _ => return Err(Error::LeaderNotFile(leader.clone())),
        };
        let temp = t.new_temp(&self.path);
        t.names.insert(temp.clone(), ino);
        Ok(temp.file_name().to_vec())
    }

    fn do_commit(&self, temp: &[u8], name: &[u8], expect: &Expect) -> Result<(), Error> {
        let temp = match self.temp_of(temp) {
            Ok(t) => t,
            Err((made, e)) => {
                if let Some(t) = made {
                    self.discard_temp(&t);
                }
                return Err(e);
            }
        };
        let path = self.at(name)?;
        let mut t = self.replica.call("commit", &path);
        self.check(&t, &path, expect, End::Written)?;
        let temp = self.at(&temp)?;
        let ino = t.names.remove(&temp).expect("a temp of this directory");
        if t.names.get(&path) == Some(&ino) {
            // rename(2) of a link over a name of the same inode does nothing.
            t.names.insert(temp, ino);
        } else {
            t.names.insert(path.clone(), ino);
        }
        t.touch_parent(&path);
        Ok(())
    }

    fn do_set_props(
        &self,
        name: &[u8],
        expect: &Expect,
        kind: Kind,
        props: &Props,
        mask: PropsMask,
    ) -> Result<(), Error> {
        let path = self.at(name)?;
        let mut t = self.replica.call("set-props", &path);
        self.check(&t, &path, expect, End::Written)?;
        let ino = t.names[&path];
        apply(
            &mut t.inodes.get_mut(&ino).unwrap().props,
            props,
            mask,
            kind,
        );
        Ok(())
    }

    fn do_set_own_props(
        &self,
        expect: &Expect,
        props: &Props,
        mask: PropsMask,
    ) -> Result<(), Error> {
        let mut t = self.replica.call("set-dir-props", &self.path);
        self.check(&t, &self.path, expect, End::Written)?;
        let ino = t.names[&self.path];
        apply(
            &mut t.inodes.get_mut(&ino).unwrap().props,
            props,
            mask,
            Kind::Dir,
        );
        Ok(())
    }

    fn do_mkdir(&self, name: &[u8]) -> Result<(), Error> {
        let path = self.at(name)?;
        let mut t = self.replica.call("mkdir", &path);
        if t.names.contains_key(&path) {
            return Ok(());
        }
        let now = t.tick();
        t.add(
            path.clone(),
            Inode {
                kind: Kind::Dir,
                props: new_props(0o700, now.sec),
                data: Vec::new(),
                link_target: None,
                rdev: 0,
            },
        );
        t.touch_parent(&path);
        Ok(())
    }

    fn do_delete(&self, name: &[u8], expect: &Expect) -> Result<Deleted, Error> {
        let path = self.at(name)?;
        let mut t = self.replica.call("delete", &path);
        let Some(found) = t.found(self.replica.dev, &path) else {
            return Ok(Deleted::Gone);
        };
        if !expect.still_holds(Some(&found)) {
            return Err(Error::Changed(End::Written));
        }
        if found.kind == Kind::Dir && t.names.keys().any(|k| k != &path && k.starts_with(&path)) {
            return Ok(Deleted::NotEmpty);
        }
        let ino = t.names.remove(&path).unwrap();
        if !t.names.values().any(|i| *i == ino) {
            t.inodes.remove(&ino);
        }
        t.touch_parent(&path);
        Ok(Deleted::Done)
    }
}

impl ReplicaDir for MemDir<'_> {
    fn start_stat(&self, name: &[u8]) -> Pending<io::Result<Option<Found>>> {
        Pending::ready(self.do_stat(name))
    }

    fn open_read(&self, name: &[u8], expect: &Expect) -> Result<Box<dyn Read + Send + '_>, Error> {
        let path = self.at(name)?;
        let t = self.replica.call("read", &path);
        self.check(&t, &path, expect, End::Read)?;
        let data = t.inodes[&t.names[&path]].data.clone();
        Ok(Box::new(io::Cursor::new(data)))
    }

    fn start_signature(
        &self,
        name: &[u8],
        expect: &Expect,
        in_place: bool,
    ) -> Pending<Result<Vec<u8>, Error>> {
        Pending::ready(self.do_signature(name, expect, in_place))
    }

    fn start_partial_signature(&self, name: &[u8]) -> Pending<Result<Option<Vec<u8>>, Error>> {
        Pending::ready(self.do_partial_signature(name))
    }

    fn start_receive(
        &self,
        name: &[u8],
        incoming: Incoming<'_>,
        props: &Props,
        mask: PropsMask,
    ) -> PendingTemp {
        self.pending_temp(self.do_receive(name, incoming, props, mask))
    }

    fn patch_in_place(
        &self,
        name: &[u8],
        expect: &Expect,
        delta: &[u8],
        props: &Props,
        mask: PropsMask,
    ) -> Result<(), Error> {
        let path = self.at(name)?;
        let mut t = self.replica.call("patch-in-place", &path);
        self.check(&t, &path, expect, End::Written)?;
        let delta = accord_delta::Delta::parse(delta).map_err(|source| Error::Delta {
            action: accord_engine::Action::UpdateInPlace,
            source,
        })?;
        let ino = t.names[&path];
        let mut out = Vec::new();
        accord_delta::patch_to(&t.inodes[&ino].data, &delta, &mut out).map_err(|source| {
            Error::Delta {
                action: accord_engine::Action::UpdateInPlace,
                source,
            }
        })?;
        let n = t.inodes.get_mut(&ino).unwrap();
        n.data = out;
        apply(&mut n.props, props, mask, Kind::File);
        Ok(())
    }

    fn start_make_node(&self, name: &[u8], entry: &Entry, mask: PropsMask) -> PendingTemp {
        self.pending_temp(self.do_make_node(name, entry, mask))
    }

    fn start_link_temp(&self, name: &[u8], leader: &RelPath) -> PendingTemp {
        self.pending_temp(self.do_link_temp(name, leader))
    }

    fn start_commit(
        &self,
        temp: &[u8],
        name: &[u8],
        expect: &Expect,
    ) -> Pending<Result<(), Error>> {
        Pending::ready(self.do_commit(temp, name, expect))
    }

    fn discard(&self, temp: &[u8]) {
        match self.temp_of(temp) {
            Ok(t) | Err((Some(t), _)) => self.discard_temp(&t),
            Err((None, _)) => {}
        }
    }

    fn start_set_props(
        &self,
        name: &[u8],
        expect: &Expect,
        kind: Kind,
        props: &Props,
        mask: PropsMask,
    ) -> Pending<Result<(), Error>> {
        Pending::ready(self.do_set_props(name, expect, kind, props, mask))
    }

    fn start_set_own_props(
        &self,
        expect: &Expect,
        props: &Props,
        mask: PropsMask,
    ) -> Pending<Result<(), Error>> {
        Pending::ready(self.do_set_own_props(expect, props, mask))
    }

    fn start_mkdir(&self, name: &[u8]) -> Pending<Result<(), Error>> {
        Pending::ready(self.do_mkdir(name))
    }

    fn start_delete(&self, name: &[u8], expect: &Expect) -> Pending<Result<Deleted, Error>> {
        Pending::ready(self.do_delete(name, expect))
    }

    fn remove_stale_temp(&self, name: &[u8]) {
        if name.starts_with(TEMP_PREFIX) {
            self.discard(name);
        }
    }
}
