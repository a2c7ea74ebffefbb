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

use std::ffi::OsStr;

use super::{lock, Errno, Op, Stat, R, ROOT};
use crate::merge::Kind;
use crate::{sys, whiteout};

/// What `Op::plain_dir` found out, and what it depends on.
#[derive(Clone, Copy, Debug)]
pub(super) struct PlainDir {
    branch: u32,
    generation: u64,
    parent: u64,
    parent_serial: u64,
    dir_mark: u64,
}

/// Plain directories remembered at most; beyond, the table starts again.
const MAX_PLAIN: usize = 20_000;

impl Op<'_> {
    /// The upper branch when directory `dir` is plain (see the module's note) and the union
    /// keeps no view of it; None when its names are to be found through its view.
    pub(super) fn plain_dir(&self, dir: u64) -> Option<u32> {
        if dir == ROOT || self.shared.pool.is_some() || self.views_r().contains_key(&dir) {
            return None;
        }
        let mark = self.dirs_mark();
        let known = lock(&self.plain).get(&dir).copied();
        if let Some(p) = known {
            let parent_same =
                || (self.current_view(p.parent)).is_some_and(|v| v.serial == p.parent_serial);
            if p.generation == self.table.generation && p.dir_mark == mark && parent_same() {
                return Some(p.branch);
            }
        }
        let found = self.find_plain(dir, mark)?;
        if mark.is_multiple_of(2) {
            let mut plain = lock(&self.plain);
            if plain.len() >= MAX_PLAIN {
                plain.clear();
            }
            plain.insert(dir, found);
        }
        Some(found.branch)
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
        })
    }

    /// The attributes of `name` in plain directory `dir` of branch `b`.
    pub(super) fn stat_plain(&self, dir: u64, name: &OsStr, b: u32) -> R<Stat> {
        if whiteout::is_reserved(name) {
            return Err(libc::ENOENT);
        }
        sys::fstatat(self.fd(b), &self.child_path(dir, name)?).e()
    }

    /// The attributes of inode `ino`: through its directory's branch when that directory is
    /// plain, else where its directory's view says it lives.
    pub(super) fn stat_ino(&self, ino: u64) -> R<Stat> {
        if ino == ROOT {
            return self.locate(ino).and_then(|loc| self.stat_loc(ino, &loc));
        }
        let (parent, name, rel) = self.named(ino)?;
        match self.plain_dir(parent) {
            Some(b) if !whiteout::is_reserved(&name) => sys::fstatat(self.fd(b), &rel).e(),
            _ => {
                let loc = self.locate_named(parent, &name, rel)?;
                self.stat_loc(ino, &loc)
            }
        }
    }

    /// Under the namespace lock: unlink `name` of plain directory `dir` of branch `b`.
    pub(super) fn unlink_plain(&self, dir: u64, name: &OsStr, b: u32) -> R<()> {
        if whiteout::is_reserved(name) {
            return Err(libc::ENOENT);
        }
        // A directory fails with EISDIR, as `unlink` through a view answers.
        sys::unlinkat(self.fd(b), &self.child_path(dir, name)?, false).e()?;
        self.view_remove(dir, name);
        self.nodes().detach(dir, name);
        Ok(())
    }
}
