//! Following and writing directory redirects (the format is in `crate::redirect`).

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use super::{Errno, Op, R, ROOT};
use crate::redirect::{self, XATTR};
use crate::{sys, whiteout};

/// Redirects followed within one another before giving up (a loop can only come from
/// branches edited by hand; each step goes one branch down, so the branch count bounds it too).
const MAX_DEPTH: usize = 64;

impl Op<'_> {
    /// The redirect of directory `path` in branch `b`, if it has a valid one and a branch
    /// below it exists for it to apply to.
    pub(super) fn redirect_of(&self, b: u32, path: &Path) -> Option<PathBuf> {
        self.redirect_attr(b)?;
        let value = sys::lgetxattr(&self.abs(b, path), OsStr::new(XATTR)).ok()?;
        redirect::decode(&value)
    }

    /// The attribute to read (and its longest valid value) with a listing of a directory of
    /// branch `b`: none on the lowest branch, which has nothing below to redirect to.
    pub(super) fn redirect_attr(&self, b: u32) -> Option<(&'static OsStr, usize)> {
        (b as usize + 1 < self.table.branches.len()).then(|| (OsStr::new(XATTR), redirect::MAX_LEN))
    }

    /// Where lower path `target` shows in the branches below `above`: each branch that holds
    /// it as a directory, highest first, with its path there.
    pub(super) fn lower_paths(&self, target: &Path, above: u32) -> Vec<(u32, PathBuf)> {
        self.lower_paths_depth(target, above, 0)
    }

    fn lower_paths_depth(&self, target: &Path, above: u32, depth: usize) -> Vec<(u32, PathBuf)> {
        if depth > MAX_DEPTH {
            return Vec::new();
        }
        let mut cur: Vec<(u32, PathBuf)> = (above + 1..self.table.branches.len() as u32)
            .map(|b| (b, PathBuf::new()))
            .collect();
        for c in target.components() {
            let Component::Normal(name) = c else {
                return Vec::new();
            };
            cur = self.step(cur, name, depth);
            if cur.is_empty() {
                break;
            }
        }
        cur
    }

    /// One component of `lower_paths`: from the branches holding a directory (with its path
    /// in each), the ones holding its child directory `name`, as a merge would find them (a
    /// whiteout, a non-directory or an opaque directory hides lower branches; a redirect
    /// replaces them).
    fn step(&self, dirs: Vec<(u32, PathBuf)>, name: &OsStr, depth: usize) -> Vec<(u32, PathBuf)> {
        let mut next = Vec::new();
        let mut queue: VecDeque<_> = dirs.into();
        while let Some((b, dir)) = queue.pop_front() {
            let path = dir.join(name);
            match sys::fstatat(self.fd(b), &path) {
                Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFDIR => {
                    next.push((b, path.clone()));
                    let opaque = dir.join(name).join(OsStr::from_bytes(whiteout::OPAQUE));
                    if sys::fstatat(self.fd(b), &opaque).is_ok() {
                        break;
                    }
                    if let Some(target) = self.redirect_of(b, &path) {
                        next.extend(self.lower_paths_depth(&target, b, depth + 1));
                        break;
                    }
                }
                Ok(_) => break,
                Err(_) => {}
            }
            if sys::fstatat(self.fd(b), &dir.join(whiteout::whiteout_for(name))).is_ok() {
                break;
            }
        }
        next
    }

    /// The path that shows directory `ino`'s lower parts in the branches below upper branch
    /// `u`: its own redirect, else its parent's lower path and its name (the union path when
    /// no ancestor was redirected).
    pub(super) fn lower_path(&self, ino: u64, u: u32) -> R<PathBuf> {
        let mut names = Vec::new();
        let mut cur = ino;
        let mut base = PathBuf::new();
        while cur != ROOT {
            let rel = self.path(cur)?;
            if let Some(target) = self.redirect_of(u, &rel) {
                base = target;
                break;
            }
            let (parent, name) = self.nodes().entry(cur).ok_or(libc::ENOENT)?;
            names.push(name);
            cur = parent;
        }
        for name in names.iter().rev() {
            base.push(name);
        }
        Ok(base)
    }

    /// Record on directory `rel` of upper branch `u` that its lower parts are at `target`.
    /// Durable before the rename that needs it: a crash leaves either no redirect or one
    /// naming what the directory already shows.
    pub(super) fn set_redirect(&self, u: u32, rel: &Path, target: &Path) -> R<()> {
        let value = redirect::encode(target).ok_or(libc::ENAMETOOLONG)?;
        if sys::lgetxattr(&self.abs(u, rel), OsStr::new(XATTR)).ok() == Some(value.clone()) {
            return Ok(());
        }
        match sys::lsetxattr(&self.abs(u, rel), OsStr::new(XATTR), &value, 0).e() {
            // A trusted.* attribute needs CAP_SYS_ADMIN and a file system that keeps it:
            // without them the rename cannot be made in place, and `mv` copies instead.
            Err(libc::EPERM | libc::ENOTSUP) => return Err(libc::EXDEV),
            r => r?,
        }
        super::copyup::sync_dir(self.fd(u), rel).e()
    }
}

/// Drop a redirect copied along with a directory's attributes: it belongs to the branch it
/// was written in (below another branch it would skip that branch's own copy).
pub(super) fn drop_copied(abs: &Path) -> std::io::Result<()> {
    match sys::lremovexattr(abs, OsStr::new(XATTR)) {
        Err(e) if e.raw_os_error() != Some(libc::ENODATA) => Err(e),
        _ => Ok(()),
    }
}
