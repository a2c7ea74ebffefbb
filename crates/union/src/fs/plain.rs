//! Plain directories: those the union shows as exactly one directory of the upper branch, with
//! no copy below it and no redirect (what an overlay's new directories are). Such a directory
//! shows its branch's names, less the reserved ones, and nothing else, so while the union keeps
//! no view of it (`DirView`) a name in it is looked up, stat'ed and removed with one system
//! call on the branch, as overlayfs does, instead of the whole directory being read first: a
//! cold `stat` of each of 10,000 files no longer lists 10,000 names before the first answer.
//!
//! What makes a directory plain is found out from its parent's view (which branches hold it)
//! and one look for a redirect, then kept while nothing can have changed it: the branch
//! table, the directories' places (`State::dir_seq`: only a rename or removal of a directory
//! can give this one a redirect or another parent) and the parent's view (its serial moves
//! when a re-read finds the directory elsewhere, e.g. a copy made below behind the union's
//! back, which is seen within `TTL`, as with views). A pool has no plain directories: its
//! creates may place a name on any branch.
//!
//! While it is kept, the directory is also held open (O_PATH, for a bounded number of them),
//! so each of those calls resolves one name from the directory itself, as a passthrough file
//! system does, instead of the whole path from the branch's root. What is kept is found again
//! at least every `TTL`, so a directory replaced in the branch behind the union's back is
//! followed within that bound, as with everything else the union caches.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use hashbrown::HashMap;

use super::{coarse_now, lock, Errno, Op, Stat, R, ROOT, TTL};
use crate::merge::Kind;
use crate::{sys, whiteout};

/// What `Op::plain_dir` found out, and what it depends on.
#[derive(Clone, Debug)]
struct PlainDir {
    branch: u32,
    generation: u64,
    parent: u64,
    parent_serial: u64,
    dir_mark: u64,
    /// When it was found (`coarse_now`): kept for `TTL` at most.
    found: Duration,
    /// The directory in its branch, when held open.
    fd: Option<Arc<OwnedFd>>,
}

/// Plain directories remembered at most; beyond, the table starts again.
const MAX_PLAIN: usize = 20_000;

/// Plain directories held open at most: the descriptors count against the daemon's limit of
/// open files, which its open handles need (the rest are reached by path).
const MAX_PLAIN_FDS: usize = 128;

/// The plain directories found, by inode, and how many of them are held open.
#[derive(Default)]
pub(super) struct PlainDirs {
    dirs: HashMap<u64, PlainDir>,
    open: usize,
}

impl PlainDirs {
    pub(super) fn remove(&mut self, dir: u64) {
        if let Some(p) = self.dirs.remove(&dir) {
            self.open -= p.fd.is_some() as usize;
        }
    }

    pub(super) fn clear(&mut self) {
        self.dirs.clear();
        self.open = 0;
    }

    fn insert(&mut self, dir: u64, p: PlainDir) {
        if self.dirs.len() >= MAX_PLAIN {
            self.clear();
        }
        self.remove(dir);
        self.open += p.fd.is_some() as usize;
        self.dirs.insert(dir, p);
    }

    /// Whether `dir` may be held open (a record it replaces lets its descriptor go).
    fn has_room_for(&self, dir: u64) -> bool {
        self.open < MAX_PLAIN_FDS || self.dirs.get(&dir).is_some_and(|p| p.fd.is_some())
    }
}

/// Where the names of a plain directory are: its branch, and the directory itself when it is
/// held open.
pub(super) struct Plain {
    pub branch: u32,
    fd: Option<Arc<OwnedFd>>,
}

impl Plain {
    /// The directory's descriptor, when it is held open.
    fn held(&self) -> Option<RawFd> {
        self.fd.as_ref().map(|fd| fd.as_raw_fd())
    }
}

impl Op<'_> {
    /// The upper branch when directory `dir` is plain (see the module's note) and the union
    /// keeps no view of it; None when its names are to be found through its view.
    pub(super) fn plain_dir(&self, dir: u64) -> Option<Plain> {
        if dir == ROOT || self.shared.pool.is_some() || self.views_r().contains_key(&dir) {
            return None;
        }
        let mark = self.dirs_mark();
        if let Some(p) = self.known_plain(dir, mark) {
            return Some(p);
        }
        let mut found = self.find_plain(dir, mark)?;
        if mark.is_multiple_of(2) {
            if lock(&self.plain).has_room_for(dir) {
                found.fd = self.open_plain(dir, found.branch, mark).map(Arc::new);
            }
            lock(&self.plain).insert(dir, found.clone());
        }
        Some(Plain {
            branch: found.branch,
            fd: found.fd,
        })
    }

    /// What is kept of plain directory `dir`, while it still holds (`mark`: `dirs_mark`).
    fn known_plain(&self, dir: u64, mark: u64) -> Option<Plain> {
        let p = lock(&self.plain).dirs.get(&dir).cloned()?;
        let current = p.generation == self.table.generation
            && p.dir_mark == mark
            && coarse_now().saturating_sub(p.found) < TTL
            && self.with_current_view(p.parent, |v| v.serial) == Some(p.parent_serial);
        current.then_some(Plain {
            branch: p.branch,
            fd: p.fd,
        })
    }

    /// Directory `dir` of branch `b` opened, if it is still the one found plain under `mark`.
    fn open_plain(&self, dir: u64, b: u32, mark: u64) -> Option<OwnedFd> {
        let rel = self.path(dir).ok()?;
        let flags = libc::O_PATH | libc::O_DIRECTORY;
        let file = sys::openat(self.fd(b), &rel, flags, 0).ok()?;
        // (A directory that moved meanwhile may be another one.)
        self.dirs_stable(mark).then(|| file.into())
    }

    /// Whether `dir` is plain, from its parent's view and its redirect; `mark`: taken before.
    fn find_plain(&self, dir: u64, mark: u64) -> Option<PlainDir> {
        let u = self.upper().ok()?;
        let (parent, name) = self.nodes().entry(dir)?;
        let pv = self.ensure_view(parent).ok()?;
        let e = pv.entries.get(&name)?;
        if e.kind != Kind::Dir || e.positions[..] != [u] {
            return None;
        }
        let rel = self.path(dir).ok()?;
        if self.redirect_attr(u).is_some() && self.redirect_of(u, &rel).is_some() {
            return None;
        }
        // (A directory that moved meanwhile may have been another one when it was read.)
        if !self.dirs_stable(mark) {
            return None;
        }
        Some(PlainDir {
            branch: u,
            generation: self.table.generation,
            parent,
            parent_serial: pv.serial,
            dir_mark: mark,
            found: coarse_now(),
            fd: None,
        })
    }

    /// The attributes of `name` in plain directory `dir`.
    pub(super) fn stat_plain(&self, dir: u64, name: &OsStr, p: &Plain) -> R<Stat> {
        if whiteout::is_reserved(name) {
            return Err(libc::ENOENT);
        }
        match p.held() {
            Some(fd) => sys::fstatat(fd, Path::new(name)).e(),
            None => sys::fstatat(self.fd(p.branch), &self.child_path(dir, name)?).e(),
        }
    }

    /// The attributes of inode `ino`: through its directory's branch when that directory is
    /// plain, else where its directory's view says it lives. (A plain directory held open
    /// answers for itself.)
    pub(super) fn stat_ino(&self, ino: u64) -> R<Stat> {
        if ino == ROOT {
            return self.locate(ino).and_then(|loc| self.stat_loc(ino, &loc));
        }
        if let Some(fd) = (self.known_plain(ino, self.dirs_mark())).and_then(|p| p.fd) {
            return sys::fstat(fd.as_raw_fd()).e();
        }
        let n = self.named(ino)?;
        match self.plain_dir(n.parent) {
            Some(p) if !whiteout::is_reserved(n.name()) => match p.held() {
                Some(fd) => sys::fstatat(fd, Path::new(n.name())).e(),
                None => sys::fstatat(self.fd(p.branch), &n.rel).e(),
            },
            _ => {
                let loc = self.locate_named(n.parent, n.name(), n.rel.to_path_buf())?;
                self.stat_loc(ino, &loc)
            }
        }
    }

    /// Under the namespace lock: unlink `name` of plain directory `dir`.
    pub(super) fn unlink_plain(&self, dir: u64, name: &OsStr, p: &Plain) -> R<()> {
        if whiteout::is_reserved(name) {
            return Err(libc::ENOENT);
        }
        // A directory fails with EISDIR, as `unlink` through a view answers.
        match p.held() {
            Some(fd) => sys::unlinkat(fd, Path::new(name), false),
            None => sys::unlinkat(self.fd(p.branch), &self.child_path(dir, name)?, false),
        }
        .e()?;
        self.view_remove(dir, name);
        self.nodes().detach(dir, name);
        Ok(())
    }
}
