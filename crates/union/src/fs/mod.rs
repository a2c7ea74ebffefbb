//! The union's state behind the FUSE operations: the inode table, the per-directory merged
//! views (the cache that keeps many branches cheap), open handles, and copy-up.
//!
//! Requests are served by several threads at once (see `State` for the locks); the branch
//! table and the inode names are also shared with the control thread, which swaps tables and
//! asks the kernel to forget cached names.

mod copyup;
mod dir;
mod entry;
mod file;
mod index;
mod kernel;
mod names;
mod plain;
mod pool;
mod pool_control;
mod pool_move;
mod redirect;
mod xattr;

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{FileAttr, FileType};
use hashbrown::{Equivalent, HashMap, HashSet};

use crate::branch::Table;
use crate::merge::{Kind, MergedEntry, Merger, Names};
use crate::sys::{self, Stat};

pub const ROOT: u64 = fuser::INodeNo::ROOT.0;

/// How long the kernel may trust a name or an attribute, and how long a merged directory view
/// is reused before the branches are read again. It bounds how stale a change made directly in
/// a branch can look (Unionfs had no bound at all).
pub const TTL: Duration = Duration::from_secs(1);

pub(crate) type R<T> = Result<T, i32>;

pub(crate) trait Errno<T> {
    fn e(self) -> R<T>;
}

impl<T> Errno<T> for io::Result<T> {
    fn e(self) -> R<T> {
        self.map_err(|e| sys::errno(&e))
    }
}

/// Union inode numbers and the names behind them. A node lives while the kernel holds a
/// reference to it (its lookup count, raised by every reply that hands the inode out and
/// lowered by FORGET) or while another node names it as parent; then it is dropped, so memory
/// follows what the kernel caches, not every name ever seen. Numbers are never reused; a path
/// looked up again after the kernel forgot it gets a new number (as in most FUSE file systems).
#[derive(Debug)]
pub struct Nodes {
    nodes: HashMap<u64, Node>,
    next: u64,
    by_name: HashMap<(u64, Name), u64>,
    /// The node of each branch file with several names (device, inode; see `index.rs`).
    by_file: HashMap<(u64, u64), u64>,
    /// Recent negative lookups the kernel may be caching, so a branch change can make it
    /// forget those too (bounded; older ones expire by TTL anyway).
    negatives: std::collections::VecDeque<(u64, Name)>,
}

/// A name in the node table: inline when short, as most names are, so a node costs no
/// allocation for its name (it is kept twice, as the node's name and in its table key). It
/// hashes as the `OsStr` it holds (see `NameRef`).
#[derive(Debug, PartialEq, Eq)]
struct Name(smallvec::SmallVec<[u8; 24]>);

// (SmallVec's own clone goes byte by byte through its generic `extend`.)
impl Clone for Name {
    fn clone(&self) -> Name {
        Name(smallvec::SmallVec::from_slice(&self.0))
    }
}

impl Name {
    fn new(name: &OsStr) -> Name {
        Name(smallvec::SmallVec::from_slice(name.as_bytes()))
    }

    fn as_os_str(&self) -> &OsStr {
        OsStr::from_bytes(&self.0)
    }
}

impl std::hash::Hash for Name {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_os_str().hash(state)
    }
}

const MAX_NEGATIVES: usize = 65536;

/// A key of `Nodes::by_name` with the name borrowed, so a lookup allocates nothing: it hashes
/// as the owned key `(parent, name)` does (fields in order, as a tuple).
#[derive(Hash)]
struct NameRef<'a>(u64, &'a OsStr);

impl Equivalent<(u64, Name)> for NameRef<'_> {
    fn equivalent(&self, key: &(u64, Name)) -> bool {
        self.0 == key.0 && self.1.as_bytes() == &key.1 .0[..]
    }
}

#[derive(Debug)]
struct Node {
    parent: u64,
    name: Name,
    /// False once the name was unlinked or replaced: the inode lives on only through open
    /// handles.
    attached: bool,
    /// Other names of the same file made by link(2) through the union: the kernel must see
    /// one inode, or it would cache attributes and pages per name and show stale data.
    aliases: Vec<(u64, Name)>,
    /// References the kernel holds (replies that handed this inode out, less FORGETs).
    lookups: u64,
    /// The branch file's (device, inode) when it has several names (its key in `by_file`).
    file: Option<(u64, u64)>,
    /// Names (attached primary names and aliases) that have this node as parent.
    children: u64,
}

impl Default for Nodes {
    fn default() -> Self {
        Self::new()
    }
}

impl Nodes {
    pub fn new() -> Nodes {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                parent: ROOT,
                name: Name::new(OsStr::new("")),
                attached: true,
                aliases: Vec::new(),
                lookups: 1,
                file: None,
                children: 0,
            },
        );
        Nodes {
            nodes,
            next: ROOT + 1,
            by_name: HashMap::new(),
            by_file: HashMap::new(),
            negatives: Default::default(),
        }
    }

    pub fn note_negative(&mut self, parent: u64, name: &OsStr) {
        if self.negatives.len() >= MAX_NEGATIVES {
            self.negatives.pop_front();
        }
        self.negatives.push_back((parent, Name::new(name)));
    }

    fn child_count(&mut self, parent: u64, delta: i64) {
        if let Some(p) = self.nodes.get_mut(&parent) {
            p.children = p.children.saturating_add_signed(delta);
        }
    }

    /// The node of `name` in `parent`, made if there is none: one probe of the name table,
    /// which finds the name or the slot it takes (the hash of the borrowed key is the owned
    /// key's, see `NameRef`).
    pub fn get_or_create(&mut self, parent: u64, name: &OsStr) -> u64 {
        self.get_or_create_held(parent, name, 0)
    }

    /// `get_or_create`, counting `refs` more kernel references to the node (a new node is
    /// made with them).
    fn get_or_create_held(&mut self, parent: u64, name: &OsStr, refs: u64) -> u64 {
        use hashbrown::hash_map::RawEntryMut;
        use std::hash::BuildHasher;
        let key = NameRef(parent, name);
        let hash = self.by_name.hasher().hash_one(&key);
        let slot = match (self.by_name.raw_entry_mut()).from_hash(hash, |k| key.equivalent(k)) {
            RawEntryMut::Occupied(o) => {
                let ino = *o.get();
                self.add_refs(ino, refs);
                return ino;
            }
            RawEntryMut::Vacant(v) => v,
        };
        let ino = self.next;
        let name = Name::new(name);
        slot.insert_hashed_nocheck(hash, (parent, name.clone()), ino);
        self.next += 1;
        self.nodes.insert(
            ino,
            Node {
                parent,
                name,
                attached: true,
                aliases: Vec::new(),
                lookups: refs,
                file: None,
                children: 0,
            },
        );
        self.child_count(parent, 1);
        ino
    }

    /// `get_or_create` for a reply that hands the inode to the kernel: counts the reference
    /// in the same step, so a concurrent FORGET cannot drop the node in between.
    pub fn get_ref(&mut self, parent: u64, name: &OsStr) -> u64 {
        self.get_or_create_held(parent, name, 1)
    }

    /// `get_ref` for a name whose branch file has several names (`file`: its device and
    /// inode, see `index.rs`): the name joins, as an alias, the node of another name of that
    /// file that is still alive, so the kernel sees one inode.
    pub fn get_ref_file(&mut self, parent: u64, name: &OsStr, file: Option<(u64, u64)>) -> u64 {
        let Some(file) = file else {
            return self.get_ref(parent, name);
        };
        let known = self.lookup(parent, name);
        let shared = self
            .by_file
            .get(&file)
            .copied()
            .filter(|&i| self.nodes.get(&i).is_some_and(|n| n.attached));
        let ino = match (known, shared) {
            (Some(ino), _) => ino,
            (None, Some(ino)) => {
                self.add_alias(ino, parent, name);
                ino
            }
            (None, None) => self.get_or_create(parent, name),
        };
        self.set_file(ino, file);
        self.add_ref(ino);
        ino
    }

    /// Record that node `ino` is branch file `file` (a file with several names).
    pub fn set_file(&mut self, ino: u64, file: (u64, u64)) {
        let Some(n) = self.nodes.get_mut(&ino) else {
            return;
        };
        if let Some(old) = n.file.replace(file) {
            if self.by_file.get(&old) == Some(&ino) {
                self.by_file.remove(&old);
            }
        }
        self.by_file.entry(file).or_insert(ino);
    }

    /// Make `(parent, name)`, an alias of `ino`, its primary name (the path its operations
    /// use), so a change through that name acts on that name's file.
    pub fn make_primary(&mut self, ino: u64, parent: u64, name: &OsStr) {
        let Some(n) = self.nodes.get_mut(&ino) else {
            return;
        };
        if let Some(a) = (n.aliases.iter_mut()).find(|a| NameRef(parent, name).equivalent(a)) {
            let old = (
                std::mem::replace(&mut n.parent, parent),
                std::mem::replace(&mut n.name, Name::new(name)),
            );
            *a = old;
        }
    }

    /// The other names of `ino` (hard links) the kernel knows.
    pub fn aliases(&self, ino: u64) -> Vec<(u64, OsString)> {
        let Some(n) = self.nodes.get(&ino) else {
            return Vec::new();
        };
        let name = |(p, nm): &(u64, Name)| (*p, nm.as_os_str().to_os_string());
        n.aliases.iter().map(name).collect()
    }

    /// Count one more kernel reference to `ino` (a reply handed it out).
    pub fn add_ref(&mut self, ino: u64) {
        self.add_refs(ino, 1);
    }

    fn add_refs(&mut self, ino: u64, refs: u64) {
        if refs == 0 {
            return;
        }
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.lookups += refs;
        }
    }

    /// The kernel dropped `n` references to `ino` (FORGET, or a reply that was not sent).
    /// Returns the inodes this released (the node and possibly ancestors that were only kept
    /// for it), so their cached state can go too.
    #[cfg(test)]
    pub fn forget(&mut self, ino: u64, n: u64) -> Vec<u64> {
        let mut gone = Gone::new();
        self.release(ino, n, &mut gone);
        gone.to_vec()
    }

    /// `forget`, adding the inodes released to `gone`.
    fn release(&mut self, ino: u64, n: u64, gone: &mut Gone) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.lookups = node.lookups.saturating_sub(n);
        }
        let mut cur = ino;
        while cur != ROOT {
            let Some(node) = self.nodes.get(&cur) else {
                break;
            };
            if node.lookups > 0 || node.children > 0 {
                break;
            }
            let node = self.nodes.remove(&cur).unwrap();
            gone.push(cur);
            if let Some(f) = node.file {
                if self.by_file.get(&f) == Some(&cur) {
                    self.by_file.remove(&f);
                }
            }
            for (p, nm) in node.aliases {
                let key = (p, nm);
                if self.by_name.get(&key) == Some(&cur) {
                    self.by_name.remove(&key);
                }
                self.child_count(key.0, -1);
            }
            if !node.attached {
                break;
            }
            let key = (node.parent, node.name);
            if self.by_name.get(&key) == Some(&cur) {
                self.by_name.remove(&key);
            }
            self.child_count(key.0, -1);
            cur = key.0;
        }
    }

    pub fn entry(&self, ino: u64) -> Option<(u64, OsString)> {
        let n = self.nodes.get(&ino)?;
        n.attached
            .then(|| (n.parent, n.name.as_os_str().to_os_string()))
    }

    /// The node's path relative to every branch root (`.` for the root).
    #[cfg(test)]
    pub fn path(&self, ino: u64) -> Option<PathBuf> {
        self.rel_with(ino, None).map(|r| r.to_path_buf())
    }

    /// The path of `name` in directory `parent` relative to every branch root.
    #[cfg(test)]
    pub fn child_path(&self, parent: u64, name: &OsStr) -> Option<PathBuf> {
        self.rel_with(parent, Some(name)).map(|r| r.to_path_buf())
    }

    /// The path of `ino` (`.` for the root), or of its child `name`, relative to every branch
    /// root: every request through the mount makes one.
    fn rel_with(&self, ino: u64, child: Option<&OsStr>) -> Option<Rel> {
        let mut parts: smallvec::SmallVec<[&OsStr; 16]> = smallvec::SmallVec::new();
        if let Some(c) = child {
            parts.push(c);
        }
        let mut cur = ino;
        while cur != ROOT {
            let n = self.nodes.get(&cur)?;
            if !n.attached {
                return None;
            }
            parts.push(n.name.as_os_str());
            cur = n.parent;
        }
        if parts.is_empty() {
            return Some(Rel(smallvec::smallvec![b'.']));
        }
        let mut p = Rel(smallvec::SmallVec::new());
        for part in parts.iter().rev() {
            if !p.0.is_empty() {
                p.0.push(b'/');
            }
            p.0.extend_from_slice(part.as_bytes());
        }
        Some(p)
    }

    pub fn lookup(&self, parent: u64, name: &OsStr) -> Option<u64> {
        self.by_name.get(&NameRef(parent, name)).copied()
    }

    /// Record `(parent, name)` as another name of `ino` (a hard link made through the union).
    pub fn add_alias(&mut self, ino: u64, parent: u64, name: &OsStr) {
        if !self.nodes.contains_key(&ino) {
            return;
        }
        let key = (parent, Name::new(name));
        self.detach(parent, name);
        self.by_name.insert(key.clone(), ino);
        self.child_count(parent, 1);
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.aliases.push(key);
        }
    }

    /// Give the name of `ino` a new inode number; `ino` lives on detached (through its open
    /// handles). None for the root, a detached node, or one with hard-link aliases.
    pub fn renumber(&mut self, ino: u64) -> Option<u64> {
        let n = self.nodes.get(&ino)?;
        if ino == ROOT || !n.attached || !n.aliases.is_empty() {
            return None;
        }
        let (p, name) = (n.parent, n.name.clone());
        self.detach(p, name.as_os_str());
        Some(self.get_or_create(p, name.as_os_str()))
    }

    /// Give every alias of `ino` its own inode again: a copy-up breaks hard links (as in
    /// overlayfs without index), so the names no longer share data.
    pub fn split_aliases(&mut self, ino: u64) {
        let Some(n) = self.nodes.get_mut(&ino) else {
            return;
        };
        let aliases = std::mem::take(&mut n.aliases);
        for (p, nm) in aliases {
            self.by_name.remove(&NameRef(p, nm.as_os_str()));
            self.child_count(p, -1);
            self.get_or_create(p, nm.as_os_str());
        }
    }

    pub fn detach(&mut self, parent: u64, name: &OsStr) {
        let key = NameRef(parent, name);
        let Some(ino) = self.by_name.remove(&key) else {
            return;
        };
        self.child_count(parent, -1);
        let Some(n) = self.nodes.get_mut(&ino) else {
            return;
        };
        if (n.parent, n.name.as_os_str()) == (parent, name) {
            // The primary name went: another name of the file takes over, if any.
            match n.aliases.pop() {
                Some((p, nm)) => {
                    n.parent = p;
                    n.name = nm;
                }
                None => n.attached = false,
            }
        } else {
            n.aliases.retain(|a| !key.equivalent(a));
        }
        // Nothing may be left that the kernel does not hold.
        self.release(ino, 0, &mut Gone::new());
    }

    pub fn rename(&mut self, parent: u64, name: &OsStr, newparent: u64, newname: &OsStr) {
        self.detach(newparent, newname);
        let old = (parent, Name::new(name));
        let new = (newparent, Name::new(newname));
        if let Some(ino) = self.by_name.remove(&old) {
            self.child_count(parent, -1);
            self.child_count(newparent, 1);
            if let Some(n) = self.nodes.get_mut(&ino) {
                if (n.parent, &n.name) == (old.0, &old.1) {
                    n.parent = newparent;
                    n.name = new.1.clone();
                } else if let Some(a) = n.aliases.iter_mut().find(|a| **a == old) {
                    *a = new.clone();
                }
            }
            self.by_name.insert(new, ino);
        }
    }

    /// The nodes named below directory `ino`, at any depth (not `ino` itself).
    pub fn below(&self, ino: u64) -> Vec<u64> {
        let mut children: HashMap<u64, Vec<u64>> = HashMap::new();
        for (&(parent, _), &child) in &self.by_name {
            children.entry(parent).or_default().push(child);
        }
        // A file with hard links may be named in several directories: listed once.
        let mut seen: HashSet<u64> = HashSet::from_iter([ino]);
        let mut next = vec![ino];
        while let Some(dir) = next.pop() {
            for &child in children.get(&dir).into_iter().flatten() {
                if seen.insert(child) {
                    next.push(child);
                }
            }
        }
        seen.remove(&ino);
        seen.into_iter().collect()
    }

    /// Every inode number alive (the root included).
    pub fn inos(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    /// Whether the kernel may still hold `ino` (its node is alive, named or not).
    pub fn alive(&self, ino: u64) -> bool {
        self.nodes.contains_key(&ino)
    }

    /// How many inodes are alive (the root included).
    pub fn count(&self) -> usize {
        self.nodes.len()
    }

    /// Every (parent, name) the kernel may have cached, positive or negative.
    pub fn names(&self) -> Vec<(u64, OsString)> {
        let keys = self.by_name.keys().chain(&self.negatives);
        keys.map(|(p, nm)| (*p, nm.as_os_str().to_os_string()))
            .collect()
    }
}

/// A union path made for one request (relative to every branch root): inline when short, as
/// almost every path is, so making one costs no allocation.
#[derive(Clone, Debug)]
pub(crate) struct Rel(smallvec::SmallVec<[u8; 128]>);

impl std::ops::Deref for Rel {
    type Target = Path;
    fn deref(&self) -> &Path {
        Path::new(OsStr::from_bytes(&self.0))
    }
}

impl Rel {
    fn of(path: &Path) -> Rel {
        Rel(smallvec::SmallVec::from_slice(path.as_os_str().as_bytes()))
    }
}

impl AsRef<Path> for Rel {
    fn as_ref(&self) -> &Path {
        self
    }
}

/// A named inode's parent and path (see `Op::named`).
pub(crate) struct Named {
    pub parent: u64,
    pub rel: Rel,
    /// The length of the name, the path's last component.
    name_len: usize,
}

impl Named {
    pub fn name(&self) -> &OsStr {
        OsStr::from_bytes(&self.rel.0[self.rel.0.len() - self.name_len..])
    }
}

/// State shared with the control thread.
pub struct Shared {
    pub table: Mutex<Arc<Table>>,
    pub nodes: Mutex<Nodes>,
    /// Tells the kernel about changes it cannot see in our replies (set once the session is
    /// made, which needs the file system first).
    pub notifier: std::sync::OnceLock<fuser::Notifier>,
    /// Where the union is mounted (canonical).
    pub mountpoint: PathBuf,
    /// Rename directories with lower parts in place with a redirect (`redirect.rs`); when
    /// false, such renames fail with EXDEV.
    pub redirect_dir: bool,
    /// Listings carry attributes (READDIRPLUS); when false the kernel asks for names only.
    pub readdirplus: bool,
    /// A pool's policies (`crate::pool`, `pool.rs`); None for an overlay. Changeable while
    /// mounted, so read once per request.
    pub pool: Option<Mutex<crate::pool::Policies>>,
    /// Done at the first open (see `crate::raise_readahead`).
    pub readahead_raised: std::sync::Once,
}

/// See `Op::view_inputs`.
enum ViewInputs {
    Cached(Arc<DirView>),
    Read(ViewRead),
}

/// A directory to read for its view: where, and the change counters from before.
struct ViewRead {
    parent: Option<u64>,
    before: u64,
    before_parent: Option<u64>,
    /// Branches that may hold the directory, with its path in each (see `DirView::redirected`).
    candidates: Vec<(u32, PathBuf)>,
    parent_serial: u64,
    rel: PathBuf,
}

/// One directory's merge over the branches, cached for `TTL`. Immutable once shared: a change
/// replaces the map's `Arc` (copy on write), so readers never hold a lock while they use it.
#[derive(Debug, Clone)]
pub(crate) struct DirView {
    /// Branches that hold this directory, highest first (stops at an opaque one).
    layers: Vec<u32>,
    entries: Names,
    /// When the view was read or last found unchanged (`coarse_now`).
    built: Duration,
    generation: u64,
    /// Changes only when the merge result changes, so subdirectory views built from this one
    /// survive a re-read that found nothing new.
    serial: u64,
    parent_serial: u64,
    /// The state of this directory in every branch examined (None: absent), so an expired
    /// view can be revalidated with one stat per branch instead of being read again. Empty
    /// when a stamp was too fresh to trust (see `racy`).
    stamps: Vec<(u32, Option<sys::Stamp>)>,
    /// The layers that hold this directory at another path than its union path, with that
    /// path: those below a redirect (`redirect.rs`). Lower paths never move, while the others
    /// follow renames through the union, so only these are kept.
    redirected: Vec<(u32, PathBuf)>,
    /// The parent directory whose view `parent_serial` is of (the root's own number for the
    /// root).
    parent: u64,
    /// The mark of `State::dir_seq` when this view was last found current under `parent`:
    /// while no directory was renamed or removed since, the directory still has that parent
    /// (see `Op::current_view`).
    dir_mark: DirMark,
}

/// `DirView::dir_mark`: refreshed through a shared view, as the check that renews it only
/// reads the view.
#[derive(Debug, Default)]
struct DirMark(AtomicU64);

impl Clone for DirMark {
    fn clone(&self) -> Self {
        DirMark(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

/// No mark `dirs_mark` returns when directories are not moving (those are even).
const NO_MARK: u64 = 1;

impl DirView {
    /// This directory's path in branch `b`, `rel` being its union path.
    fn path_in(&self, b: u32, rel: &Path) -> PathBuf {
        self.redirected_in(b).unwrap_or(rel).to_path_buf()
    }

    /// This directory's path in branch `b` when that is not its union path (under a redirect).
    fn redirected_in(&self, b: u32) -> Option<&Path> {
        (self.redirected.iter()).find_map(|(l, p)| (*l == b).then_some(p.as_path()))
    }

    /// Where entry `name` of this directory lives in the branches that hold the directory
    /// elsewhere than at its union path.
    fn child_paths(&self, name: &OsStr) -> Vec<(u32, PathBuf)> {
        self.redirected
            .iter()
            .map(|(b, p)| (*b, p.join(name)))
            .collect()
    }
}

/// Where a union name lives now.
#[derive(Debug, Clone)]
pub(crate) struct Loc {
    pub rel: PathBuf,
    pub entry: MergedEntry,
    /// The branches that hold the name elsewhere than at `rel` (in a redirected directory).
    pub moved: Vec<(u32, PathBuf)>,
}

impl Loc {
    /// The name's path in branch `b`.
    pub fn at(&self, b: u32) -> PathBuf {
        self.path_at(b).to_path_buf()
    }

    /// `at`, borrowed.
    fn path_at(&self, b: u32) -> &Path {
        match self.moved.iter().find(|(l, _)| *l == b) {
            Some((_, p)) => p,
            None => &self.rel,
        }
    }

    /// The path in the winning branch.
    pub fn winner_rel(&self) -> &Path {
        self.path_at(self.entry.winner())
    }
}

struct Handle {
    file: File,
    ino: u64,
    branch_id: u64,
    flags: i32,
    /// Opened with FUSE passthrough: the kernel reads the branch file itself.
    passthrough: AtomicBool,
}

/// How the kernel does I/O on one inode's open files. The kernel binds an inode to a single
/// backing file while any passthrough open of it lives, and refuses to mix passthrough and
/// cached opens of one inode; this mirrors that state so every open is answered in a way the
/// kernel accepts.
#[derive(Default)]
struct InodeIo {
    /// Open handles served through the daemon (page cache).
    cached: usize,
    backing: Option<Backing>,
}

struct Backing {
    id: Arc<fuser::BackingId>,
    /// (st_dev, st_ino) of the branch file behind `id`.
    file: (u64, u64),
    opens: usize,
}

/// One entry of a directory listing snapshot: (inode, type, name).
type DirItem = (u64, FileType, OsString);

/// Shards of the per-directory change counters (see `State::epochs`).
const EPOCH_SHARDS: usize = 64;

/// The union's state. Requests run concurrently on several threads (`Op` is one request's
/// view of it); every part has its own short-lived lock, and no lock is held across branch I/O
/// except `ns`, which orders the changes of the union's namespace (see there).
pub struct State {
    shared: Arc<Shared>,
    views: RwLock<HashMap<u64, Arc<DirView>>>,
    /// The table generation the cached views belong to (they are dropped on a change).
    views_generation: AtomicU64,
    /// Per-directory change counters (sharded by inode): a change through the union bumps its
    /// directory's counter after the branch I/O, and a view built from branch listings is
    /// cached only if its directory's counter did not move while the branches were read, so a
    /// listing that raced with a change never hides the change.
    epochs: Vec<AtomicU64>,
    handles: RwLock<HashMap<u64, Arc<Handle>>>,
    /// Per-inode I/O mode of the open handles (inodes with open files only).
    io: Mutex<HashMap<u64, InodeIo>>,
    /// Passthrough was negotiated at init and registering backing files works (needs
    /// CAP_SYS_ADMIN).
    passthrough: AtomicBool,
    /// Inodes whose name was given a new inode because the name's file changed while the old
    /// inode was bound to a passthrough backing file; they live on through their open handles.
    renoded: Mutex<HashSet<u64>>,
    dirs: Mutex<HashMap<u64, Arc<Vec<DirItem>>>>,
    /// Nodes a plain listing (READDIR, with `readdirplus=off`) made to show a name's inode
    /// number, by directory handle: the kernel takes no reference to them, so they go when the
    /// handle is released unless a lookup took one meanwhile.
    listed: Mutex<HashMap<u64, Vec<u64>>>,
    /// The attributes of directories removed through the union, with no links, while the
    /// kernel holds their inodes (an fstat of one still open; see `keep_removed_dir`).
    removed_dirs: Mutex<HashMap<u64, FileAttr>>,
    next_fh: AtomicU64,
    next_serial: AtomicU64,
    tmp_counter: AtomicU64,
    /// Drawn at start and written into temporary names with the pid (see `sweep_temps`).
    run: u64,
    /// Held by every request that changes the union's namespace or copies up (create, mkdir,
    /// unlink, rename, link, copy-up, whiteouts). The kernel already orders such changes per
    /// directory; this also orders them against copy-ups (which the kernel does not lock), so
    /// an unlink can never interleave with a copy-up of the same name. Lookups, attributes,
    /// listings, reads and writes of files already on a writable branch never take it.
    ns: Mutex<()>,
    /// Odd while a holder of `ns` changes the namespace (from `ns_changing` until the lock is
    /// released), so it moves by two with every change. Lookups, attributes and opens resolve
    /// a path without the lock and check this afterwards: if it moved, a rename may have made
    /// the path name another file, and they try again. (A copy-up holds the lock while it
    /// copies data, but marks the change only for its final rename.)
    ns_seq: AtomicU64,
    /// Like `ns_seq`, but moved only by changes that can make a directory's path name another
    /// directory or none (renaming or removing a directory). A merged view or a listing's
    /// attributes read through a directory's path are kept only if it did not move meanwhile.
    /// (Creates and unlinks of files, the common changes, leave it alone, so they do not make
    /// concurrent listings read again.)
    dir_seq: AtomicU64,
    /// Regular files whose data a request is copying up before taking `ns` (see
    /// `Op::precopy`); `copied` wakes the requests waiting for one to finish.
    copying: Mutex<HashSet<u64>>,
    copied: std::sync::Condvar,
    /// Directories found plain (see `plain.rs`), by inode.
    plain: Mutex<plain::PlainDirs>,
}

thread_local! {
    /// This thread holds the namespace lock: no path can change until it lets go.
    static HOLDS_NS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread holds the namespace lock.
fn holds_ns() -> bool {
    HOLDS_NS.with(|h| h.get())
}

/// The namespace lock, held (see `State::ns`).
pub(crate) struct NsGuard<'a> {
    _lock: MutexGuard<'a, ()>,
    seq: &'a AtomicU64,
    dir_seq: &'a AtomicU64,
}

impl Drop for NsGuard<'_> {
    fn drop(&mut self) {
        // Before the lock is released (fields drop after this).
        for seq in [self.seq, self.dir_seq] {
            if !seq.load(Ordering::SeqCst).is_multiple_of(2) {
                seq.fetch_add(1, Ordering::SeqCst);
            }
        }
        HOLDS_NS.with(|h| h.set(false));
    }
}

/// One request's view of the union: the branch table it runs against (a live change applies
/// from the next request on; one request never sees two tables).
pub(crate) struct Op<'a> {
    u: &'a State,
    table: Arc<Table>,
}

impl std::ops::Deref for Op<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        self.u
    }
}

/// The file system fuser serves: the state, shared with the workers that take slow requests
/// off the thread that reads from the kernel (see `kernel.rs`).
pub struct Union {
    state: Arc<State>,
    workers: Mutex<Option<std::sync::mpsc::Sender<Job>>>,
}

type Job = Box<dyn FnOnce(&State) + Send>;

impl std::ops::Deref for Union {
    type Target = State;
    fn deref(&self) -> &State {
        &self.state
    }
}

impl Union {
    pub fn new(shared: Arc<Shared>, workers: usize) -> Union {
        let state = Arc::new(State::new(shared));
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut spawned = 0;
        for i in 0..workers {
            let (rx, state) = (rx.clone(), state.clone());
            let t = std::thread::Builder::new()
                .name(format!("union-worker-{i}"))
                .spawn(move || loop {
                    let job = lock(&rx).recv();
                    match job {
                        Ok(job) => job(&state),
                        Err(_) => return,
                    }
                });
            spawned += t.is_ok() as usize;
        }
        Union {
            state,
            workers: Mutex::new((spawned > 0).then_some(tx)),
        }
    }

    /// Run `job` on a worker thread (in the calling thread when there are none), so a slow
    /// request (a copy-up, fsync, a large read or write) does not hold up the others.
    pub(crate) fn offload(&self, job: impl FnOnce(&State) + Send + 'static) {
        let tx = lock(&self.workers).clone();
        let job: Job = Box::new(job);
        match tx {
            Some(tx) => {
                if let Err(e) = tx.send(job) {
                    (e.0)(&self.state)
                }
            }
            None => job(&self.state),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    fn new(shared: Arc<Shared>) -> State {
        let generation = lock(&shared.table).generation;
        State {
            shared,
            views: RwLock::new(HashMap::new()),
            views_generation: AtomicU64::new(generation),
            epochs: (0..EPOCH_SHARDS).map(|_| AtomicU64::new(0)).collect(),
            handles: RwLock::new(HashMap::new()),
            io: Mutex::new(HashMap::new()),
            passthrough: AtomicBool::new(false),
            renoded: Default::default(),
            dirs: Mutex::new(HashMap::new()),
            listed: Mutex::new(HashMap::new()),
            removed_dirs: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            next_serial: AtomicU64::new(1),
            tmp_counter: AtomicU64::new(0),
            run: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            ns: Mutex::new(()),
            ns_seq: AtomicU64::new(0),
            dir_seq: AtomicU64::new(0),
            copying: Mutex::new(HashSet::new()),
            copied: std::sync::Condvar::new(),
            plain: Mutex::default(),
        }
    }

    /// Start a request on the current branch table.
    pub(crate) fn op(&self) -> Op<'_> {
        let table = lock(&self.shared.table).clone();
        if self.views_generation.load(Ordering::Acquire) != table.generation {
            let mut v = self.views_w();
            if self
                .views_generation
                .swap(table.generation, Ordering::AcqRel)
                != table.generation
            {
                v.clear();
                // (Their descriptors would keep an old branch's file system busy.)
                lock(&self.plain).clear();
            }
        }
        Op { u: self, table }
    }

    fn views_r(&self) -> RwLockReadGuard<'_, HashMap<u64, Arc<DirView>>> {
        self.views.read().unwrap_or_else(|e| e.into_inner())
    }

    fn views_w(&self) -> RwLockWriteGuard<'_, HashMap<u64, Arc<DirView>>> {
        self.views.write().unwrap_or_else(|e| e.into_inner())
    }

    fn handles_r(&self) -> RwLockReadGuard<'_, HashMap<u64, Arc<Handle>>> {
        self.handles.read().unwrap_or_else(|e| e.into_inner())
    }

    fn handles_w(&self) -> RwLockWriteGuard<'_, HashMap<u64, Arc<Handle>>> {
        self.handles.write().unwrap_or_else(|e| e.into_inner())
    }

    fn handle(&self, fh: u64) -> R<Arc<Handle>> {
        self.handles_r().get(&fh).cloned().ok_or(libc::EBADF)
    }

    fn io(&self) -> MutexGuard<'_, HashMap<u64, InodeIo>> {
        lock(&self.io)
    }

    fn renoded(&self) -> MutexGuard<'_, HashSet<u64>> {
        lock(&self.renoded)
    }

    /// Take the namespace lock (see `State::ns`).
    fn ns(&self) -> NsGuard<'_> {
        let lock = lock(&self.ns);
        HOLDS_NS.with(|h| h.set(true));
        NsGuard {
            _lock: lock,
            seq: &self.ns_seq,
            dir_seq: &self.dir_seq,
        }
    }

    /// With the namespace lock held: a directory is about to be renamed or removed, so the
    /// paths below it may name other directories (see `dir_seq`). Also a namespace change.
    fn dirs_moving(&self) {
        self.ns_changing();
        if self.dir_seq.load(Ordering::SeqCst).is_multiple_of(2) {
            self.dir_seq.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A mark to check with `dirs_stable` after reading through a directory's path.
    fn dirs_mark(&self) -> u64 {
        self.dir_seq.load(Ordering::SeqCst)
    }

    /// No directory was renamed or removed, nor was one under way, since `mark` was taken;
    /// always true for the holder of the namespace lock (nobody else can move one).
    fn dirs_stable(&self, mark: u64) -> bool {
        HOLDS_NS.with(|h| h.get()) || unmoved(&self.dir_seq, mark)
    }

    /// With the namespace lock held: names are about to change (see `ns_seq`).
    fn ns_changing(&self) {
        if self.ns_seq.load(Ordering::SeqCst).is_multiple_of(2) {
            self.ns_seq.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A mark to check with `ns_stable` after resolving and using a path without the lock.
    fn ns_mark(&self) -> u64 {
        self.ns_seq.load(Ordering::SeqCst)
    }

    /// Run `f`, which resolves a path and reads through it, until no namespace change ran
    /// meanwhile (the third time under the namespace lock): a rename in between could have
    /// made the path name another file. Not for changes, which cannot be undone: those
    /// resolve and change under the lock.
    fn resolved<T>(&self, f: impl Fn() -> R<T>) -> R<T> {
        for _ in 0..2 {
            let mark = self.ns_mark();
            let r = f();
            if self.ns_stable(mark) {
                return r;
            }
        }
        let _ns = self.ns();
        f()
    }

    /// No namespace change ran, or was under way, since `mark` was taken.
    fn ns_stable(&self, mark: u64) -> bool {
        unmoved(&self.ns_seq, mark)
    }

    fn nodes(&self) -> MutexGuard<'_, Nodes> {
        lock(&self.shared.nodes)
    }

    fn path(&self, ino: u64) -> R<Rel> {
        self.nodes().rel_with(ino, None).ok_or(libc::ENOENT)
    }

    /// The union path of `name` in directory `parent`.
    fn child_path(&self, parent: u64, name: &OsStr) -> R<Rel> {
        self.nodes()
            .rel_with(parent, Some(name))
            .ok_or(libc::ENOENT)
    }

    fn epoch(&self, dir: u64) -> &AtomicU64 {
        &self.epochs[(dir as usize) % EPOCH_SHARDS]
    }

    fn fresh_serial(&self) -> u64 {
        self.next_serial.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed) + 1
    }

    fn cached_view(&self, ino: u64) -> Option<Arc<DirView>> {
        self.views_r().get(&ino).cloned()
    }

    /// Change the cached view of directory `dir` (if any) after a change made through the
    /// union, and mark the directory changed so a concurrent re-read is not cached over it.
    fn edit_view(&self, dir: u64, f: impl FnOnce(&mut DirView)) {
        let mut views = self.views_w();
        if let Some(v) = views.get_mut(&dir) {
            f(Arc::make_mut(v));
        }
        self.epoch(dir).fetch_add(1, Ordering::AcqRel);
    }

    /// Drop a cached view (after an error that suggests the branches changed underneath, or
    /// after a change that is easier re-read than patched).
    fn forget_view(&self, ino: u64) {
        lock(&self.plain).remove(ino);
        self.views_w().remove(&ino);
        self.epoch(ino).fetch_add(1, Ordering::AcqRel);
    }

    /// After creating `name` in the upper branch: record it in the cached view.
    fn view_insert(&self, parent: u64, name: &OsStr, kind: Kind, upper: u32) {
        self.edit_view(parent, |v| {
            v.entries.insert(
                name.to_os_string(),
                MergedEntry {
                    kind,
                    positions: smallvec::smallvec![upper],
                },
            );
        });
    }

    /// After renaming `name` of `parent` to upper `newname` of `newparent`. Within one
    /// directory in one step, so a listing made meanwhile shows the entry once, at one name.
    fn view_move(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        kind: Kind,
        upper: u32,
    ) {
        if parent != newparent {
            self.view_remove(parent, name);
            self.view_insert(newparent, newname, kind, upper);
            return;
        }
        self.edit_view(parent, |v| {
            v.entries.remove(name);
            v.entries.insert(
                newname.to_os_string(),
                MergedEntry {
                    kind,
                    positions: smallvec::smallvec![upper],
                },
            );
        });
    }

    fn view_remove(&self, parent: u64, name: &OsStr) {
        self.edit_view(parent, |v| {
            v.entries.remove(name);
        });
    }

    /// Record that `name` in `parent` now also exists in branch `b` (after a copy-up).
    fn view_add_position(&self, parent: u64, name: &OsStr, b: u32) {
        self.edit_view(parent, |v| {
            if let Some(e) = v.entries.get_mut(name) {
                if let Err(i) = e.positions.binary_search(&b) {
                    e.positions.insert(i, b);
                }
            }
        });
    }

    /// The attributes of `ino` changed in a way no reply tells the kernel (a write that
    /// cleared set-ID bits): make it drop its cached ones. Attributes only (offset -1): the
    /// pages may be locked by the very request we are serving.
    fn attrs_changed(&self, ino: u64) {
        if let Some(n) = self.shared.notifier.get() {
            let _ = n.inval_inode(fuser::INodeNo(ino), -1, 0);
        }
    }

    /// The kernel dropped references: (inode, count) pairs. Nodes no longer held go, and so
    /// do the cached views of directories among them.
    pub(crate) fn forget_inodes(&self, list: &[(u64, u64)]) {
        let mut gone = Gone::new();
        {
            let mut nodes = self.nodes();
            for &(ino, n) in list {
                nodes.release(ino, n, &mut gone);
            }
        }
        if gone.is_empty() {
            return;
        }
        {
            let mut renoded = self.renoded();
            for ino in &gone {
                renoded.remove(ino);
            }
        }
        {
            let mut removed = lock(&self.removed_dirs);
            for ino in &gone {
                removed.remove(ino);
            }
        }
        {
            let mut plain = lock(&self.plain);
            for ino in &gone {
                plain.remove(*ino);
            }
        }
        let mut views = self.views_w();
        for ino in gone {
            views.remove(&ino);
        }
    }
}

/// Inodes a FORGET released: one, most of the time (kept inline).
type Gone = smallvec::SmallVec<[u64; 4]>;

impl Op<'_> {
    fn upper(&self) -> R<u32> {
        self.table.upper().ok_or(libc::EROFS)
    }

    fn fd(&self, branch: u32) -> i32 {
        self.table.get(branch).fd()
    }

    fn abs(&self, branch: u32, rel: &Path) -> PathBuf {
        self.table.get(branch).path.join(rel)
    }

    /// The current merged view of directory `ino`, building it from the parent's view (which
    /// says exactly which branches hold this directory) when needed. Walking up is O(depth)
    /// hash lookups when everything is cached; a directory is only ever read on the branches
    /// that hold it, which is what keeps 1,000 branches cheap.
    fn ensure_view(&self, ino: u64) -> R<Arc<DirView>> {
        if let Some(v) = self.current_view(ino) {
            return Ok(v);
        }
        let mut attempt = 0;
        // Taken for the last attempt when directories kept moving (see below).
        let mut _ns = None;
        loop {
            // Read before any input of the view: a directory renamed or removed after this
            // point (which can make `rel` name another directory, or none) is seen below.
            let moves = self.dirs_mark();
            let inputs = self.view_inputs(ino);
            let built = match &inputs {
                Ok(ViewInputs::Cached(v)) => {
                    self.renew_mark(ino, v, moves);
                    return Ok(v.clone());
                }
                Ok(ViewInputs::Read(r)) => self.read_view(&r.candidates, &r.rel, r.parent_serial),
                Err(e) => Err(*e),
            };
            if !self.dirs_stable(moves) {
                // Neither the listing nor an error is surely this directory's. Read again;
                // the third time under the namespace lock, where paths cannot change.
                attempt += 1;
                if attempt >= 2 && _ns.is_none() {
                    _ns = Some(self.ns());
                }
                continue;
            }
            let Ok(ViewInputs::Read(r)) = inputs else {
                return Err(built.err().unwrap_or(libc::EIO));
            };
            let mut views = self.views_w();
            let raced = self.epoch(ino).load(Ordering::Acquire) != r.before
                || r.parent.map(|p| self.epoch(p).load(Ordering::Acquire)) != r.before_parent;
            if raced {
                // A change through the union landed while the inputs were read: the
                // listing may predate it. Read again (a few times, then answer this request
                // from the listing without caching it).
                drop(views);
                attempt += 1;
                if attempt < 3 {
                    continue;
                }
                return built.map(Arc::new);
            }
            let mut v = match built {
                Ok(v) => v,
                Err(e) => {
                    views.remove(&ino);
                    return Err(e);
                }
            };
            v.parent = r.parent.unwrap_or(ROOT);
            if !holds_ns() {
                // (A holder of the namespace lock may be moving directories itself.)
                v.dir_mark = DirMark(AtomicU64::new(moves));
            }
            if let Some(old) = views.get(&ino) {
                if old.layers == v.layers
                    && old.entries == v.entries
                    && old.redirected == v.redirected
                {
                    v.serial = old.serial;
                }
            }
            if views.len() >= MAX_VIEWS {
                // Keep memory bounded on huge trees: drop the expired views (they would be
                // revalidated or re-read on their next use anyway).
                let now = coarse_now();
                views.retain(|_, v| now.saturating_sub(v.built) < TTL);
            }
            let v = Arc::new(v);
            views.insert(ino, v.clone());
            return Ok(v);
        }
    }

    /// The cached view of directory `ino` when it is surely current, without the node table
    /// or a stat: what `view_inputs` finds on its quick path, for the hottest call of every
    /// request. The view and each view above it up to the root are fresh, of the current
    /// branch table, and were last found current under their parent since the last rename or
    /// removal of a directory (so their parents are still their parents), and each parent's
    /// view still has the serial its child was built from.
    fn current_view(&self, ino: u64) -> Option<Arc<DirView>> {
        self.with_current_view(ino, Arc::clone)
    }

    /// `f` of what `current_view` finds, read in place.
    fn with_current_view<T>(&self, ino: u64, f: impl FnOnce(&Arc<DirView>) -> T) -> Option<T> {
        let mark = self.dirs_mark();
        let now = coarse_now();
        let views = self.views_r();
        let view = views.get(&ino)?;
        let (mut cur, mut v) = (ino, view);
        loop {
            let current = v.generation == self.table.generation
                && v.dir_mark.0.load(Ordering::Acquire) == mark
                && now.saturating_sub(v.built) < TTL;
            if !current {
                return None;
            }
            if cur == ROOT {
                return Some(f(view));
            }
            let parent = views.get(&v.parent)?;
            if parent.serial != v.parent_serial {
                return None;
            }
            (cur, v) = (v.parent, parent);
        }
    }

    /// `view_inputs` found view `v` of directory `ino` current while directories stood still
    /// since `moves`: mark it so for `current_view` (if its parent is still the one it was
    /// built under).
    fn renew_mark(&self, ino: u64, v: &DirView, moves: u64) {
        if holds_ns() || v.dir_mark.0.load(Ordering::Relaxed) == moves {
            return;
        }
        let parent = match ino {
            ROOT => Some(ROOT),
            _ => self.nodes().entry(ino).map(|(p, _)| p),
        };
        if parent == Some(v.parent) && self.dirs_stable(moves) {
            v.dir_mark.0.store(moves, Ordering::Release);
        }
    }

    /// What `ensure_view` needs: a view still fresh (or renewed), or what to read.
    fn view_inputs(&self, ino: u64) -> R<ViewInputs> {
        let generation = self.table.generation;
        // The change counters are read before any input of the view (the parent's positions
        // for this directory, the listings): a change through the union that lands after this
        // point, in this directory or in its parent, is seen by `ensure_view` and the view is
        // not cached from inputs that predate it.
        let parent = if ino == ROOT {
            None
        } else {
            Some(self.nodes().entry(ino).ok_or(libc::ENOENT)?)
        };
        let before = self.epoch(ino).load(Ordering::Acquire);
        let before_parent = parent
            .as_ref()
            .map(|(p, _)| self.epoch(*p).load(Ordering::Acquire));
        let old = self.cached_view(ino);
        let now = coarse_now();
        let fresh = |v: &DirView, ps: u64| {
            v.generation == generation && v.parent_serial == ps && now.saturating_sub(v.built) < TTL
        };
        let (candidates, parent_serial, rel) = match &parent {
            None => {
                if let Some(v) = old.as_ref().filter(|v| fresh(v, v.parent_serial)) {
                    return Ok(ViewInputs::Cached(v.clone()));
                }
                let rel = PathBuf::from(".");
                if let Some(v) = self.revalidate(ino, 0, &rel, old.as_ref()) {
                    return Ok(ViewInputs::Cached(v));
                }
                let all = (0..self.table.branches.len() as u32)
                    .map(|b| (b, rel.clone()))
                    .collect();
                (all, 0, rel)
            }
            Some((parent, name)) => {
                let pv = self.ensure_view(*parent)?;
                let e = pv.entries.get(name).ok_or(libc::ENOENT)?;
                if e.kind != Kind::Dir {
                    return Err(libc::ENOTDIR);
                }
                let ps = pv.serial;
                if let Some(v) = old.as_ref().filter(|v| fresh(v, ps)) {
                    return Ok(ViewInputs::Cached(v.clone()));
                }
                let rel = self.path(ino)?.to_path_buf();
                if let Some(v) = self.revalidate(ino, ps, &rel, old.as_ref()) {
                    return Ok(ViewInputs::Cached(v));
                }
                let parent_rel = rel.parent().unwrap_or(Path::new(""));
                let candidates = e
                    .positions
                    .iter()
                    .map(|&b| (b, pv.path_in(b, parent_rel).join(name)))
                    .collect();
                (candidates, ps, rel)
            }
        };
        Ok(ViewInputs::Read(ViewRead {
            parent: parent.map(|(p, _)| p),
            before,
            before_parent,
            candidates,
            parent_serial,
            rel,
        }))
    }

    /// Read directory `rel` in the candidate branches (each at its path there) and merge it
    /// (no locks held). A copy with a redirect replaces the candidates below it with what the
    /// redirect names (`redirect.rs`).
    fn read_view(
        &self,
        candidates: &[(u32, PathBuf)],
        rel: &Path,
        parent_serial: u64,
    ) -> R<DirView> {
        let mut m = Merger::new();
        let mut stamps = Vec::with_capacity(candidates.len());
        let mut redirected = Vec::new();
        let mut followed = false;
        let mut queue: std::collections::VecDeque<_> = candidates.iter().cloned().collect();
        let mut i = 0;
        while let Some((b, path)) = queue.pop_front() {
            let first = i == 0;
            i += 1;
            match sys::list_dir_with(self.fd(b), &path, self.redirect_attr(b)) {
                Ok((list, st, redirect)) => {
                    if self.table.get(b).writable() {
                        self.sweep_temps(b, &path, &list);
                    }
                    stamps.push((b, Some(st)));
                    if path != rel {
                        redirected.push((b, path.clone()));
                    }
                    if !m.add(b, list) {
                        break;
                    }
                    if let Some(target) = redirect.as_deref().and_then(crate::redirect::decode) {
                        queue = self.lower_paths(&target, b).into();
                        // What the redirect led to was found by lookups no stamp covers: read
                        // the directory again once the view expires.
                        followed = true;
                    }
                }
                Err(e) => match sys::errno(&e) {
                    // Gone from this branch since the parent was read: skip it.
                    libc::ENOENT => {
                        stamps.push((b, None));
                        continue;
                    }
                    // A non-directory below a directory hides everything under it.
                    libc::ENOTDIR if !first => {
                        let st = sys::fstatat(self.fd(b), &path).ok().map(|s| sys::stamp(&s));
                        stamps.push((b, st));
                        break;
                    }
                    err => return Err(err),
                },
            }
        }
        if followed || stamps.iter().any(|(_, st)| st.is_some_and(racy)) {
            stamps.clear();
        }
        let (entries, layers) = m.finish();
        if layers.is_empty() {
            return Err(libc::ENOENT);
        }
        Ok(DirView {
            layers,
            entries,
            built: coarse_now(),
            generation: self.table.generation,
            serial: self.fresh_serial(),
            parent_serial,
            stamps,
            redirected,
            parent: ROOT,
            dir_mark: DirMark(AtomicU64::new(NO_MARK)),
        })
    }

    /// Remove the copy-up temporaries in directory `rel` of writable branch `b` that a daemon
    /// no longer running left behind (a crash in the middle of a copy-up): hidden, but they can
    /// be as big as the file they copied. Those of running processes are theirs to finish (a
    /// daemon in another PID namespace looks gone, though: branches are not to be shared
    /// between unions mounted from different namespaces).
    fn sweep_temps(&self, b: u32, rel: &Path, list: &[(OsString, Kind)]) {
        let me = std::process::id();
        for (name, kind) in list {
            let Some((pid, run)) = crate::whiteout::temp_owner(name) else {
                continue;
            };
            let gone = match pid == me {
                // An earlier daemon that had our pid.
                true => run != self.run,
                false => i32::try_from(pid).is_ok_and(process_gone),
            };
            if gone {
                let _ = sys::unlinkat(self.fd(b), &rel.join(name), *kind == Kind::Dir);
            }
        }
    }

    /// An expired view whose directory is unchanged in every branch it examined (same inode,
    /// mtime and ctime) is still right: renew it without reading the directories again.
    fn revalidate(
        &self,
        ino: u64,
        parent_serial: u64,
        rel: &Path,
        old: Option<&Arc<DirView>>,
    ) -> Option<Arc<DirView>> {
        let v = old?;
        if v.generation != self.table.generation
            || v.parent_serial != parent_serial
            || v.stamps.is_empty()
        {
            return None;
        }
        for (b, st) in &v.stamps {
            let now = sys::fstatat(self.fd(*b), &v.path_in(*b, rel))
                .ok()
                .map(|s| sys::stamp(&s));
            if now != *st {
                return None;
            }
        }
        let mut views = self.views_w();
        let cur = views.get_mut(&ino)?;
        if !Arc::ptr_eq(cur, v) {
            // Changed meanwhile: build it again.
            return None;
        }
        Arc::make_mut(cur).built = coarse_now();
        Some(cur.clone())
    }

    fn locate(&self, ino: u64) -> R<Loc> {
        if ino == ROOT {
            let v = self.ensure_view(ROOT)?;
            return Ok(Loc {
                rel: PathBuf::from("."),
                entry: MergedEntry {
                    kind: Kind::Dir,
                    positions: v.layers.iter().copied().collect(),
                },
                moved: Vec::new(),
            });
        }
        let n = self.named(ino)?;
        self.locate_named(n.parent, n.name(), n.rel.to_path_buf())
    }

    /// The parent, name and path of (attached, non-root) inode `ino`, under one lock.
    fn named(&self, ino: u64) -> R<Named> {
        let nodes = self.nodes();
        let n = nodes.nodes.get(&ino).filter(|n| n.attached && ino != ROOT);
        let (parent, name_len) = n.map(|n| (n.parent, n.name.0.len())).ok_or(libc::ENOENT)?;
        let rel = nodes.rel_with(ino, None).ok_or(libc::ENOENT)?;
        Ok(Named {
            parent,
            rel,
            name_len,
        })
    }

    /// `locate` of name `name` of directory `parent`, at union path `rel`.
    fn locate_named(&self, parent: u64, name: &OsStr, rel: PathBuf) -> R<Loc> {
        let view = self.ensure_view(parent)?;
        let entry = view.entries.get(name).cloned().ok_or(libc::ENOENT)?;
        Ok(Loc {
            rel,
            entry,
            moved: view.child_paths(name),
        })
    }

    /// The path of `name` of directory `parent` in branch `b` (`view`: the directory's view;
    /// another path than the union path in a lower branch under a redirect).
    fn child_rel_in(&self, view: &DirView, parent: u64, name: &OsStr, b: u32) -> R<Rel> {
        match view.redirected_in(b) {
            Some(p) => Ok(Rel::of(&p.join(name))),
            None => self.child_path(parent, name),
        }
    }

    /// The entry for `name` in directory `parent`, if visible.
    fn child(&self, parent: u64, name: &OsStr) -> R<Option<MergedEntry>> {
        Ok(self.ensure_view(parent)?.entries.get(name).cloned())
    }

    fn stat_loc(&self, ino: u64, loc: &Loc) -> R<Stat> {
        match sys::fstatat(self.fd(loc.entry.winner()), loc.winner_rel()) {
            Ok(st) => Ok(st),
            Err(e) => {
                // The branch changed behind our back: re-read the parent next time.
                let parent = self.nodes().entry(ino).map(|(p, _)| p);
                if let Some(p) = parent {
                    self.forget_view(p);
                }
                Err(sys::errno(&e))
            }
        }
    }

    fn temp_rel(&self, parent_rel: &Path) -> PathBuf {
        let n = self.tmp_counter.fetch_add(1, Ordering::Relaxed) + 1;
        parent_rel.join(crate::whiteout::temp_name(std::process::id(), self.run, n))
    }
}

/// Monotonic time as of the kernel's last tick (a few milliseconds behind at most): what the
/// age of a view needs, which every request checks, read without the clock source.
fn coarse_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out pointer; this clock exists on every Linux since 2.6.32.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Sequence counter `seq` (odd while a change is under way) did not move since `mark`.
fn unmoved(seq: &AtomicU64, mark: u64) -> bool {
    // The reads made since `mark` complete before the counter is read again.
    std::sync::atomic::fence(Ordering::SeqCst);
    mark.is_multiple_of(2) && seq.load(Ordering::SeqCst) == mark
}

/// No process `pid` exists (in this PID namespace).
fn process_gone(pid: i32) -> bool {
    // SAFETY: kill with signal 0 only checks whether the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Past this many cached directories, expired ones are dropped.
const MAX_VIEWS: usize = 20_000;

/// A directory changed so recently that another change could land in the same timestamp
/// tick without moving mtime; such a stamp cannot prove the directory unchanged later.
fn racy(st: sys::Stamp) -> bool {
    let changed = time(st.3, st.4).max(time(st.1, st.2));
    match SystemTime::now().duration_since(changed) {
        Ok(age) => age < Duration::from_millis(100),
        Err(_) => true,
    }
}

fn time(sec: i64, nsec: i64) -> SystemTime {
    if sec >= 0 {
        UNIX_EPOCH + Duration::new(sec as u64, nsec as u32)
    } else {
        UNIX_EPOCH - Duration::from_secs((-sec) as u64) + Duration::from_nanos(nsec as u64)
    }
}

pub(crate) fn file_type(mode: u32) -> FileType {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => FileType::Directory,
        libc::S_IFLNK => FileType::Symlink,
        libc::S_IFIFO => FileType::NamedPipe,
        libc::S_IFCHR => FileType::CharDevice,
        libc::S_IFBLK => FileType::BlockDevice,
        libc::S_IFSOCK => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

pub(crate) fn kind_type(k: Kind) -> FileType {
    match k {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Char => FileType::CharDevice,
        Kind::Block => FileType::BlockDevice,
        Kind::Socket => FileType::Socket,
    }
}

pub(crate) fn attr_of(ino: u64, st: &Stat) -> FileAttr {
    FileAttr {
        ino: fuser::INodeNo(ino),
        size: st.st_size as u64,
        blocks: st.st_blocks as u64,
        atime: time(st.st_atime, st.st_atime_nsec),
        mtime: time(st.st_mtime, st.st_mtime_nsec),
        ctime: time(st.st_ctime, st.st_ctime_nsec),
        crtime: UNIX_EPOCH,
        kind: file_type(st.st_mode),
        perm: (st.st_mode & 0o7777) as u16,
        nlink: st.st_nlink as u32,
        uid: st.st_uid,
        gid: st.st_gid,
        rdev: st.st_rdev as u32,
        blksize: st.st_blksize as u32,
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_paths_follow_renames() {
        let mut n = Nodes::new();
        assert_eq!(n.path(ROOT).unwrap(), PathBuf::from("."));
        let a = n.get_ref(ROOT, OsStr::new("a"));
        let b = n.get_ref(a, OsStr::new("b"));
        assert_eq!(n.get_or_create(ROOT, OsStr::new("a")), a);
        assert_eq!(n.path(b).unwrap(), PathBuf::from("a/b"));
        assert_eq!(
            n.child_path(b, OsStr::new("x")).unwrap(),
            PathBuf::from("a/b/x")
        );
        assert_eq!(
            n.child_path(ROOT, OsStr::new("x")).unwrap(),
            PathBuf::from("x")
        );
        n.rename(ROOT, OsStr::new("a"), ROOT, OsStr::new("c"));
        assert_eq!(n.path(b).unwrap(), PathBuf::from("c/b"));
        assert!(!n.names().contains(&(ROOT, OsString::from("a"))));
        n.detach(ROOT, OsStr::new("c"));
        assert_eq!(n.path(b), None);
        let c2 = n.get_or_create(ROOT, OsStr::new("c"));
        assert_ne!(c2, a, "a re-created name gets a new inode");
        let c3 = n.renumber(c2).unwrap();
        assert_ne!(c3, c2);
        assert_eq!(n.lookup(ROOT, OsStr::new("c")), Some(c3));
        assert_eq!(n.path(c2), None);
        assert_eq!(n.renumber(c2), None, "a detached node keeps no name");
    }

    #[test]
    fn forgotten_nodes_go() {
        let mut n = Nodes::new();
        let d = n.get_ref(ROOT, OsStr::new("d"));
        let f = n.get_ref(d, OsStr::new("f"));
        n.add_ref(f);
        assert_eq!(n.count(), 3);
        // The directory is forgotten first, but its child still holds it.
        assert_eq!(n.forget(d, 1), Vec::<u64>::new());
        assert_eq!(n.path(f).unwrap(), PathBuf::from("d/f"));
        assert_eq!(n.forget(f, 1), Vec::<u64>::new(), "one reference left");
        assert_eq!(n.forget(f, 1), vec![f, d], "the child, then its parent");
        assert_eq!(n.count(), 1);
        assert_eq!(n.lookup(ROOT, OsStr::new("d")), None);
        let d2 = n.get_ref(ROOT, OsStr::new("d"));
        assert!(d2 > f, "numbers are not reused");
        // An unlinked file lives while the kernel holds it, then goes.
        let g = n.get_ref(d2, OsStr::new("g"));
        n.detach(d2, OsStr::new("g"));
        assert_eq!(n.count(), 3);
        assert_eq!(n.forget(g, 1), vec![g]);
        assert_eq!(n.forget(d2, 1), vec![d2]);
        // Hard-link aliases keep their parents and leave with the node.
        let e = n.get_ref(ROOT, OsStr::new("e"));
        let x = n.get_ref(e, OsStr::new("x"));
        n.add_alias(x, ROOT, OsStr::new("y"));
        n.forget(e, 1);
        assert_eq!(n.path(x).unwrap(), PathBuf::from("e/x"));
        assert_eq!(n.forget(x, 1), vec![x, e]);
        assert_eq!(n.lookup(ROOT, OsStr::new("y")), None);
        assert_eq!(n.count(), 1);
        assert!(n.names().is_empty());
    }

    #[test]
    fn names_of_one_branch_file_share_a_node() {
        let mut n = Nodes::new();
        let file = Some((1, 7));
        let a = n.get_ref_file(ROOT, OsStr::new("a"), file);
        let b = n.get_ref_file(ROOT, OsStr::new("b"), file);
        assert_eq!(a, b, "one inode for two names of one file");
        assert_ne!(n.get_ref_file(ROOT, OsStr::new("c"), Some((1, 8))), a);
        assert_ne!(n.get_ref_file(ROOT, OsStr::new("s"), None), a);
        n.make_primary(a, ROOT, OsStr::new("b"));
        assert_eq!(n.path(a).unwrap(), PathBuf::from("b"));
        assert_eq!(n.lookup(ROOT, OsStr::new("a")), Some(a));
        assert_eq!(n.aliases(a), vec![(ROOT, OsString::from("a"))]);
        // Once the kernel forgets it, the file's next name starts a new node.
        assert_eq!(n.forget(a, 2), vec![a]);
        assert_eq!(n.lookup(ROOT, OsStr::new("a")), None);
        assert_ne!(n.get_ref_file(ROOT, OsStr::new("a"), file), a);
    }

    #[test]
    fn hard_link_aliases() {
        let mut n = Nodes::new();
        let f = n.get_ref(ROOT, OsStr::new("f"));
        n.add_alias(f, ROOT, OsStr::new("g"));
        assert_eq!(n.lookup(ROOT, OsStr::new("g")), Some(f));
        n.rename(ROOT, OsStr::new("g"), ROOT, OsStr::new("h"));
        assert_eq!(n.lookup(ROOT, OsStr::new("h")), Some(f));
        n.detach(ROOT, OsStr::new("f"));
        assert_eq!(
            n.path(f).unwrap(),
            PathBuf::from("h"),
            "the alias takes over"
        );
        n.add_alias(f, ROOT, OsStr::new("i"));
        n.split_aliases(f);
        let i = n.lookup(ROOT, OsStr::new("i")).unwrap();
        assert_ne!(i, f);
        assert_eq!(n.path(i).unwrap(), PathBuf::from("i"));
    }
}
