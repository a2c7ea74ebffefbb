//! Directories: listing (the merged view), mkdir, rmdir.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;

use fuser::{FileAttr, FileType};

use super::{kind_type, DirItem, Errno, Op, R, ROOT};
use crate::merge::Kind;
use crate::sys;
use crate::whiteout;

impl Op<'_> {
    /// Open a listing. Its snapshot of the merged view is taken by its first chunk (see
    /// `snapshot`), so a listing read in several chunks is consistent even while the
    /// directory changes; here only what makes the open fail is checked.
    pub(super) fn do_opendir(&self, ino: u64) -> R<u64> {
        self.ensure_view(ino)?;
        let fh = self.new_fh();
        super::lock(&self.dirs).insert(fh, Default::default());
        Ok(fh)
    }

    /// The snapshot a chunk of listing `fh` of directory `ino` is read from, taken anew for the
    /// first chunk (offset 0, also after a rewind). The kernel asks for it holding the
    /// directory's lock, which a rename in the directory needs too, so the snapshot cannot
    /// predate a rename that finished before the listing (taken at opendir, a name renamed in
    /// between would show at neither name). None for an unknown handle.
    pub(super) fn snapshot(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
    ) -> Option<std::sync::Arc<Vec<DirItem>>> {
        let mut dirs = super::lock(&self.dirs);
        let old = dirs.get(&fh)?.clone();
        // (A snapshot holds `.` and `..` at least: an empty one was never taken.)
        if offset != 0 && !old.is_empty() {
            return Some(old);
        }
        drop(dirs);
        let Ok(list) = self.listing(ino) else {
            return Some(old);
        };
        let list = std::sync::Arc::new(list);
        dirs = super::lock(&self.dirs);
        // (Unless the handle was released meanwhile.)
        dirs.get_mut(&fh).map(|slot| {
            *slot = list.clone();
            list
        })
    }

    /// The merged listing of directory `ino` with `.` and `..`.
    fn listing(&self, ino: u64) -> R<Vec<DirItem>> {
        let v = self.ensure_view(ino)?;
        let parent = if ino == ROOT {
            ROOT
        } else {
            self.nodes().entry(ino).map(|(p, _)| p).unwrap_or(ROOT)
        };
        // Entries carry no inode numbers yet: readdirplus looks every name up (which hands
        // the inode to the kernel and counts it), so no node is made for names never listed.
        let mut list: Vec<(u64, FileType, OsString)> = Vec::with_capacity(v.entries.len() + 2);
        list.push((ino, FileType::Directory, OsString::from(".")));
        list.push((parent, FileType::Directory, OsString::from("..")));
        for (name, e) in &v.entries {
            list.push((0, kind_type(e.kind), name.clone()));
        }
        Ok(list)
    }

    pub(super) fn do_mkdir(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        uid: u32,
        gid: u32,
    ) -> R<FileAttr> {
        let _ns = self.ns();
        self.ns_changing();
        let (u, rel) = self.prepare_create(parent, name, crate::pool::CreateFn::Mkdir)?;
        let had_whiteout = self.has_whiteout(u, parent, name)?;
        let fd = self.fd(u);
        sys::mkdirat(fd, &rel, mode & 0o7777).e()?;
        let finish = || -> R<()> {
            self.own(u, &rel, uid, gid)?;
            if had_whiteout {
                // Deleted and created again: nothing from below may show through.
                sys::openat(
                    fd,
                    &rel.join(OsStr::from_bytes(whiteout::OPAQUE)),
                    libc::O_WRONLY | libc::O_CREAT,
                    0o600,
                )
                .e()?;
            }
            Ok(())
        };
        if let Err(e) = finish() {
            let _ = sys::unlinkat(fd, &rel.join(OsStr::from_bytes(whiteout::OPAQUE)), false);
            let _ = sys::unlinkat(fd, &rel, true);
            return Err(e);
        }
        self.view_insert(parent, name, Kind::Dir, u);
        let st = sys::fstatat(fd, &rel).e()?;
        // Found and counted under one lock, so a racing FORGET cannot drop it in between.
        let ino = self.nodes().get_ref(parent, name);
        self.forget_view(ino);
        Ok(self.attr(ino, &st))
    }

    pub(super) fn do_rmdir(&self, parent: u64, name: &OsStr) -> R<()> {
        if let Some(p) = self.pool() {
            return self.pool_rmdir(parent, name, &p);
        }
        let _ns = self.ns();
        self.dirs_moving();
        let e = self.child(parent, name)?.ok_or(libc::ENOENT)?;
        if e.kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        let u = self.upper()?;
        if e.winner() < u {
            return Err(libc::EROFS);
        }
        let ino = self.nodes().get_or_create(parent, name);
        if !self.ensure_view(ino)?.entries.is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        let before = self.dir_attr(parent, name, e.winner(), ino);
        let rel = self.path(ino)?;
        let fd = self.fd(u);
        let in_upper = e.positions.contains(&u);
        if in_upper {
            // The upper copy may hold only whiteouts (the merge says it is empty): clear them.
            let list = sys::list_dir(fd, &rel).e()?;
            if list.iter().any(|(n, _)| !whiteout::is_reserved(n)) {
                return Err(libc::ENOTEMPTY);
            }
            for (n, k) in list {
                sys::unlinkat(fd, &rel.join(&n), k == Kind::Dir).e()?;
            }
        }
        if e.positions.iter().any(|&p| p != u) {
            self.write_whiteout(parent, name)?;
        }
        if in_upper {
            sys::unlinkat(fd, &rel, true).e()?;
        }
        self.view_remove(parent, name);
        self.nodes().detach(parent, name);
        self.forget_view(ino);
        self.keep_removed_dir(ino, before);
        Ok(())
    }

    /// The attributes of directory `name` of `parent` in branch `b`, before it is removed.
    pub(super) fn dir_attr(&self, parent: u64, name: &OsStr, b: u32, ino: u64) -> Option<FileAttr> {
        let rel = self.branch_rel(parent, name, b).ok()?;
        sys::fstatat(self.fd(b), &rel)
            .ok()
            .map(|st| super::attr_of(ino, &st))
    }

    /// Directory `ino` was removed through the union: until the kernel forgets it, an fstat
    /// of it still open answers its last attributes with no links, as the branch answers for a
    /// directory of its own (a lower one hidden by a whiteout keeps its links there).
    pub(super) fn keep_removed_dir(&self, ino: u64, before: Option<FileAttr>) {
        // Only while its node lives, checked under the node table's lock, which a FORGET
        // takes before it drops the entry.
        let nodes = self.nodes();
        let Some(mut a) = before.filter(|_| nodes.alive(ino)) else {
            return;
        };
        a.nlink = 0;
        super::lock(&self.removed_dirs).insert(ino, a);
    }

    /// See `keep_removed_dir`.
    pub(super) fn removed_dir(&self, ino: u64) -> Option<FileAttr> {
        super::lock(&self.removed_dirs).get(&ino).copied()
    }

    /// fsync of a directory reaches every writable branch that holds it (the only ones our
    /// operations changed).
    pub(super) fn do_fsyncdir(&self, ino: u64, datasync: bool) -> R<()> {
        // Opened through the directory's path (again if a rename ran meanwhile), then synced.
        let dirs = self.resolved(|| {
            let rel = self.path(ino)?;
            let view = self.ensure_view(ino)?;
            let flags = libc::O_RDONLY | libc::O_DIRECTORY;
            view.layers
                .iter()
                .filter(|&&b| self.table.get(b).writable())
                .map(|&b| sys::openat(self.fd(b), &view.path_in(b, &rel), flags, 0).e())
                .collect::<R<Vec<_>>>()
        })?;
        for d in dirs {
            if datasync {
                d.sync_data().e()?;
            } else {
                d.sync_all().e()?;
            }
        }
        Ok(())
    }
}
