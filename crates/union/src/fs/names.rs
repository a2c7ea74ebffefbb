//! Namespace changes: unlink, rename, link, symlink, mknod.
//!
//! Only the upper branch's namespace is ever changed; a name that also lives below gets a
//! whiteout, written *before* the upper copy goes, so no instant shows the lower copy.

use std::ffi::OsStr;
use std::path::Path;

use fuser::FileAttr;

use super::{Errno, Op, R, ROOT};
use crate::merge::{Kind, MergedEntry};
use crate::sys;

/// The two names of a rename that passed `Op::rename_checks`, and the upper branch.
struct RenameChecked {
    src: MergedEntry,
    dst: Option<MergedEntry>,
    u: u32,
}

impl Op<'_> {
    pub(super) fn rel_of(&self, parent: u64, name: &OsStr) -> R<super::Rel> {
        self.child_path(parent, name)
    }

    /// The path of `name` of `parent` in branch `b` (another one than the union path in a
    /// lower branch under a redirect).
    pub(super) fn branch_rel(&self, parent: u64, name: &OsStr, b: u32) -> R<super::Rel> {
        let view = self.ensure_view(parent)?;
        self.child_rel_in(&view, parent, name, b)
    }

    pub(super) fn do_unlink(&self, parent: u64, name: &OsStr) -> R<()> {
        if let Some(p) = self.pool() {
            return self.pool_unlink(parent, name, &p);
        }
        let _ns = self.ns();
        self.ns_changing();
        if let Some(p) = self.plain_dir(parent) {
            return self.unlink_plain(parent, name, &p);
        }
        // A lower name of a file with other names goes from the upper copy, made now if need
        // be, so the count of the other names drops (`index.rs`).
        let e = self.copy_up_linked(parent, name)?.ok_or(libc::ENOENT)?;
        if e.kind == Kind::Dir {
            return Err(libc::EISDIR);
        }
        let u = self.upper()?;
        if e.winner() < u {
            return Err(libc::EROFS);
        }
        if e.positions.iter().any(|&p| p != u) {
            self.write_whiteout(parent, name)?;
        }
        if e.winner() == u {
            let rel = self.rel_of(parent, name)?;
            sys::unlinkat(self.fd(u), &rel, false).e()?;
        }
        self.view_remove(parent, name);
        self.nodes().detach(parent, name);
        Ok(())
    }

    /// rename(2) over the union. Files move across branches (copy-up, rename in the upper
    /// branch, whiteout the old name). A directory with lower parts is copied up and moves
    /// with a redirect to them (`redirect.rs`), as on overlayfs with `redirect_dir=on`; with
    /// `redirect_dir=off` it fails with EXDEV instead, so `mv` copies and deletes.
    pub(super) fn do_rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> R<()> {
        if flags & libc::RENAME_EXCHANGE != 0 || flags & libc::RENAME_WHITEOUT != 0 {
            return Err(libc::EINVAL);
        }
        if crate::whiteout::is_reserved(newname) {
            return Err(libc::EINVAL);
        }
        if let Some(p) = self.pool() {
            return self.pool_rename(parent, name, newparent, newname, flags, &p);
        }
        // A rename that cannot succeed fails before a big lower file's data is copied up
        // (minutes for a big file); the checks are made again under the lock.
        self.resolved(|| self.rename_checks(parent, name, newparent, newname, flags))?;
        // A big lower file that moves is copied up first; its data before the lock is taken.
        // (The node table's guard must be gone before `precopy` looks the file up.)
        let known = self.nodes().lookup(parent, name);
        let mut pre = known.and_then(|ino| self.precopy(ino));
        let _ns = self.ns();
        // Lower names of copied-up hard links move as names of the copy, and a replaced lower
        // name of a file with other names goes from its copy (`index.rs`, as in `do_unlink`).
        self.link_up(parent, name)?;
        self.copy_up_linked(newparent, newname)?;
        let RenameChecked { src, dst, u } =
            self.rename_checks(parent, name, newparent, newname, flags)?;
        let src_ino = self.nodes().get_or_create(parent, name);
        // The copy-up below copies the node's primary name: this one, which moves.
        self.nodes().make_primary(src_ino, parent, name);
        if parent == newparent && name == newname {
            return Ok(());
        }
        if dst.is_some() && self.nodes().lookup(newparent, newname) == Some(src_ino) {
            // Two names of one file: rename(2) does nothing.
            return Ok(());
        }
        let is_dir = src.kind == Kind::Dir;
        if is_dir {
            // (A file is copied up first: the copy is not a change of names until its end.)
            self.dirs_moving();
        }
        // A replaced directory must be empty in the merged view; its upper copy may hold
        // whiteouts, which rename(2) would count as contents.
        if let (Some(d), true) = (&dst, is_dir) {
            let dino = self.nodes().get_or_create(newparent, newname);
            if !self.ensure_view(dino)?.entries.is_empty() {
                return Err(libc::ENOTEMPTY);
            }
            if d.positions.contains(&u) {
                let drel = self.rel_of(newparent, newname)?;
                let list = sys::list_dir(self.fd(u), &drel).e()?;
                if list.iter().any(|(n, _)| !crate::whiteout::is_reserved(n)) {
                    return Err(libc::ENOTEMPTY);
                }
                for (n, k) in list {
                    sys::unlinkat(self.fd(u), &drel.join(&n), k == Kind::Dir).e()?;
                }
            }
        }
        if is_dir {
            self.redirect_before_move(src_ino, u)?;
        } else {
            self.copy_up_with(src_ino, pre.take(), None)?;
            self.ns_changing();
        }
        self.ensure_dir_upper(newparent)?;
        if let Some(d) = &dst {
            if d.positions.iter().any(|&p| p != u) {
                self.write_whiteout(newparent, newname)?;
            }
        }
        if src.positions.iter().any(|&p| p != u) {
            self.write_whiteout(parent, name)?;
        }
        let from = self.rel_of(parent, name)?;
        let to = self.rel_of(newparent, newname)?;
        sys::renameat(self.fd(u), &from, &to, flags).e()?;
        self.view_move(parent, name, newparent, newname, src.kind, u);
        self.nodes().rename(parent, name, newparent, newname);
        if is_dir {
            // Its children resolve through the new path; rebuild its view from there.
            self.forget_view(src_ino);
        }
        Ok(())
    }

    /// Before directory `ino` moves: when it has parts below upper branch `u`, make its upper
    /// copy and record there where those parts are, so they move with it. First of the steps
    /// (redirect, whiteout of the old name, rename), so a crash after any of them leaves the
    /// directory showing the same children at one name: a redirect naming the directory's own
    /// lower path changes nothing, nor does a whiteout while the upper copy holds the name.
    fn redirect_before_move(&self, ino: u64, u: u32) -> R<()> {
        if self.ensure_view(ino)?.layers.iter().all(|&b| b == u) {
            return Ok(());
        }
        // Where the branches below show it now (a copy-up never carries a redirect, so this
        // is the same before and after it).
        let target = self.lower_path(ino, u)?;
        self.ensure_dir_upper(ino)?;
        self.set_redirect(u, &self.path(ino)?, &target)
    }

    /// What makes a rename fail before anything is changed or copied: the source missing, a
    /// name on a read-only branch above the upper one, a replaced name of the other kind, a
    /// directory with lower parts when redirects are off (EXDEV), no upper branch reachable from the root. The
    /// emptiness of a replaced directory is checked by the caller, under the lock.
    fn rename_checks(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> R<RenameChecked> {
        let src = self.child(parent, name)?.ok_or(libc::ENOENT)?;
        let dst = self.child(newparent, newname)?;
        if flags & libc::RENAME_NOREPLACE != 0 && dst.is_some() {
            return Err(libc::EEXIST);
        }
        let u = self.upper()?;
        if src.winner() < u {
            return Err(libc::EROFS);
        }
        let is_dir = src.kind == Kind::Dir;
        if let Some(d) = &dst {
            if d.winner() < u {
                return Err(libc::EROFS);
            }
            match (is_dir, d.kind == Kind::Dir) {
                (true, false) => return Err(libc::ENOTDIR),
                (false, true) => return Err(libc::EISDIR),
                _ => {}
            }
        }
        let same = parent == newparent && name == newname;
        if is_dir && src.positions[..] != [u] && !same && !self.shared.redirect_dir {
            return Err(libc::EXDEV);
        }
        // Copying up the directories on the way needs the upper branch's root to show
        // (`ensure_dir_upper`): an opaque root above it hides it.
        if !self.ensure_view(ROOT)?.layers.contains(&u) {
            return Err(libc::EROFS);
        }
        Ok(RenameChecked { src, dst, u })
    }

    pub(super) fn do_link(&self, ino: u64, newparent: u64, newname: &OsStr) -> R<FileAttr> {
        if crate::whiteout::is_reserved(newname) {
            return Err(libc::EINVAL);
        }
        if let Some(p) = self.pool() {
            return self.pool_link(ino, newparent, newname, &p);
        }
        let pre = self.precopy(ino);
        let _ns = self.ns();
        let loc = self.locate(ino)?;
        if loc.entry.kind == Kind::Dir {
            return Err(libc::EPERM);
        }
        self.copy_up_with(ino, pre, None)?;
        self.ns_changing();
        let (u, rel) = self.prepare_create(newparent, newname, crate::pool::CreateFn::Create)?;
        let from = self.path(ino)?;
        sys::linkat(self.fd(u), &from, &rel).e()?;
        self.view_insert(newparent, newname, loc.entry.kind, u);
        // Both names are one inode for the kernel, so its caches stay coherent.
        let st = sys::fstatat(self.fd(u), &rel);
        let mut nodes = self.nodes();
        nodes.add_alias(ino, newparent, newname);
        let st = st.e()?;
        nodes.add_ref(ino);
        // (`attr` looks the node up.)
        drop(nodes);
        Ok(self.attr(ino, &st))
    }

    pub(super) fn do_symlink(
        &self,
        parent: u64,
        name: &OsStr,
        target: &Path,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        let _ns = self.ns();
        self.ns_changing();
        let (u, rel) = self.prepare_create(parent, name, crate::pool::CreateFn::Symlink)?;
        sys::symlinkat(target.as_os_str(), self.fd(u), &rel).e()?;
        if let Err(e) = self.own(u, &rel, uid, gid) {
            let _ = sys::unlinkat(self.fd(u), &rel, false);
            return Err(e);
        }
        self.view_insert(parent, name, Kind::Symlink, u);
        let st = sys::fstatat(self.fd(u), &rel).e()?;
        // Found and counted under one lock, so a racing FORGET cannot drop it in between.
        let ino = self.nodes().get_ref(parent, name);
        Ok(self.attr(ino, &st))
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn do_mknod(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        rdev: u32,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        let _ns = self.ns();
        self.ns_changing();
        let (u, rel) = self.prepare_create(parent, name, crate::pool::CreateFn::Mknod)?;
        sys::mknodat(self.fd(u), &rel, mode, rdev as u64).e()?;
        if let Err(e) = self.own(u, &rel, uid, gid) {
            let _ = sys::unlinkat(self.fd(u), &rel, false);
            return Err(e);
        }
        let st = sys::fstatat(self.fd(u), &rel).e()?;
        self.view_insert(parent, name, sys::kind_of_mode(st.st_mode), u);
        let ino = self.nodes().get_ref(parent, name);
        Ok(self.attr(ino, &st))
    }
}
