//! Name lookup and attributes: lookup, getattr, setattr, readlink, statfs.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use fuser::{FileAttr, TimeOrNow};

use super::{DirView, Errno, Op, R};
use crate::sys::{self, TimeSpec};

/// One directory being listed with attributes (see `Op::listed`).
pub(super) struct Listed {
    dir: u64,
    view: Arc<DirView>,
    rel: PathBuf,
    /// `dirs_mark` from before `rel` was resolved: what was read through `rel` counts only
    /// while no directory moved since.
    moves: u64,
    /// The directory in the branches used so far.
    fds: HashMap<u32, Slot>,
}

enum Slot {
    /// One name looked up here, by path.
    Once,
    /// A descriptor (O_PATH) for the next names.
    Open(File),
    /// The directory is gone from the branch.
    Missing,
}

#[derive(Clone, Copy)]
pub(super) struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub fh: Option<u64>,
    /// The calling process: a truncation by one without CAP_FSETID drops set-ID bits.
    pub caller: super::file::Caller,
}

fn spec(t: Option<TimeOrNow>) -> TimeSpec {
    t.map(|t| match t {
        TimeOrNow::Now => None,
        TimeOrNow::SpecificTime(st) => Some(match st.duration_since(UNIX_EPOCH) {
            Ok(d) => (d.as_secs() as i64, d.subsec_nanos() as i64),
            Err(e) => {
                let d = e.duration();
                let (s, n) = (d.as_secs() as i64, d.subsec_nanos() as i64);
                if n == 0 {
                    (-s, 0)
                } else {
                    (-s - 1, 1_000_000_000 - n)
                }
            }
        }),
    })
}

impl Op<'_> {
    /// Look `name` up in directory `parent`: Ok(Some) hands the inode to the kernel (the
    /// reference is counted), Ok(None) says the name is absent, which the kernel may cache
    /// for `TTL`. A lookup that finds nothing while the namespace changed (a rename of an
    /// ancestor may have moved the path it resolved) looks again, the last time under the
    /// namespace lock, so a transient miss is never cached as an absence; so does one that
    /// found a file while a directory moved (the path may have named another file).
    pub(super) fn do_lookup(&self, parent: u64, name: &OsStr) -> R<Option<FileAttr>> {
        if self.is_control(parent, name) {
            return Ok(Some(self.control_attr()));
        }
        self.name_fits(name)?;
        let missing = |e: i32| e == libc::ENOENT || e == libc::ENOTDIR;
        for _ in 0..2 {
            let (mark, moves) = (self.ns_mark(), self.dirs_mark());
            match self.stat_child(parent, name) {
                Ok(st) if self.dirs_stable(moves) => {
                    return Ok(Some(self.counted(parent, name, &st)))
                }
                Ok(_) => {}
                Err(e) if missing(e) && !self.ns_stable(mark) => {}
                Err(libc::ENOENT) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        let _ns = self.ns();
        match self.stat_child(parent, name) {
            Ok(st) => Ok(Some(self.counted(parent, name, &st))),
            Err(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// ENAMETOOLONG for a name no branch can hold, as the branch itself answers (a lookup
    /// would otherwise say "no such file", and so would the stat, unlink or rename behind
    /// it). Names of at most 255 bytes fit every Linux file system: only longer ones cost
    /// a statfs of each branch.
    fn name_fits(&self, name: &OsStr) -> R<()> {
        const FITS_EVERYWHERE: usize = 255;
        if name.len() <= FITS_EVERYWHERE {
            return Ok(());
        }
        let longest = (self.table.branches.iter())
            .filter_map(|b| sys::fstatvfs(b.fd()).ok())
            .map(|s| s.f_namemax as usize)
            .max()
            .unwrap_or(FITS_EVERYWHERE);
        match name.len() > longest {
            true => Err(libc::ENAMETOOLONG),
            false => Ok(()),
        }
    }

    /// The attributes of `name` in `parent`, read through its path (no reference counted).
    fn stat_child(&self, parent: u64, name: &OsStr) -> R<sys::Stat> {
        if let Some(p) = self.plain_dir(parent) {
            return self.stat_plain(parent, name, &p);
        }
        let view = self.ensure_view(parent)?;
        let winner = view.entries.get(name).ok_or(libc::ENOENT)?.winner();
        let rel = self.child_rel_in(&view, parent, name, winner)?;
        let st = sys::fstatat(self.fd(winner), &rel).map_err(|err| {
            self.forget_view(parent);
            sys::errno(&err)
        })?;
        self.follow_index(parent, name, winner, st)
    }

    /// Start looking up the names of a listing chunk of directory `dir` (readdirplus): the
    /// directory's view, path and descriptors in the branches are found once per chunk
    /// instead of once per name, and each name is then one fstatat of one path component.
    pub(super) fn listed(&self, dir: u64) -> R<Listed> {
        let moves = self.dirs_mark();
        Ok(Listed {
            dir,
            view: self.ensure_view(dir)?,
            rel: self.path(dir)?.to_path_buf(),
            moves,
            fds: HashMap::new(),
        })
    }

    /// `do_lookup` of a name of `l`'s directory. If a directory was renamed or removed
    /// meanwhile, the directory's path may have named another one (or none) when it was read
    /// through: the listing's directory is then found again and the name looked up anew, the
    /// third time under the namespace lock, so a listing never shows another directory's file
    /// and never leaves out a name that was there all along.
    pub(super) fn lookup_listed(&self, l: &mut Listed, name: &OsStr) -> R<FileAttr> {
        for _ in 0..2 {
            let st = self.stat_listed(l, name);
            if self.dirs_stable(l.moves) {
                return Ok(self.counted(l.dir, name, &st?));
            }
            *l = self.listed(l.dir)?;
        }
        let _ns = self.ns();
        *l = self.listed(l.dir)?;
        let st = self.stat_listed(l, name)?;
        Ok(self.counted(l.dir, name, &st))
    }

    /// The reply hands the inode of `name` in `dir` to the kernel: count the reference.
    fn counted(&self, dir: u64, name: &OsStr, st: &sys::Stat) -> FileAttr {
        let file = super::index::link_key(st);
        let ino = self.nodes().get_ref_file(dir, name, file);
        self.attr(ino, st)
    }

    fn stat_listed(&self, l: &mut Listed, name: &OsStr) -> R<sys::Stat> {
        let b = l.view.entries.get(name).ok_or(libc::ENOENT)?.winner();
        // A branch's descriptor of the directory is opened at its second name: with many
        // branches each holding a few names, an open per name would cost more than it saves.
        let st = match l.fds.get_mut(&b) {
            None => {
                l.fds.insert(b, Slot::Once);
                sys::fstatat(self.fd(b), &l.view.path_in(b, &l.rel).join(name)).e()
            }
            Some(slot) => {
                if let Slot::Once = slot {
                    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
                    *slot = match sys::openat(self.fd(b), &l.view.path_in(b, &l.rel), flags, 0) {
                        Ok(f) => Slot::Open(f),
                        Err(_) => Slot::Missing,
                    };
                }
                match slot {
                    Slot::Open(f) => sys::fstatat(f.as_raw_fd(), Path::new(name)).e(),
                    _ => Err(libc::ENOENT),
                }
            }
        };
        match st {
            Ok(st) => self.follow_index(l.dir, name, b, st),
            Err(e) => {
                // The branch changed behind our back: re-read the directory next time.
                self.forget_view(l.dir);
                Err(e)
            }
        }
    }

    pub(super) fn do_getattr(&self, ino: u64, fh: Option<u64>) -> R<FileAttr> {
        if ino == super::pool_control::CONTROL_INO {
            return Ok(self.control_attr());
        }
        // An open handle answers even for a name that was unlinked meanwhile.
        if let Some(h) = fh.and_then(|fh| self.handle(fh).ok()) {
            let st = sys::fstat(h.file.as_raw_fd()).e()?;
            let mut a = self.attr(ino, &st);
            if self.nodes().entry(ino).is_none() {
                a.nlink = self.names_left(&h, &st);
            }
            return Ok(a);
        }
        if self.renoded().contains(&ino) {
            // The name moved to a new inode; this one lives on through its open files (fstat
            // does not send the handle).
            let h = self
                .handles_r()
                .values()
                .find(|h| h.ino == ino)
                .cloned()
                .ok_or(libc::ENOENT)?;
            let st = sys::fstat(h.file.as_raw_fd()).e()?;
            return Ok(self.attr(ino, &st));
        }
        match self.resolved(|| self.stat_ino(ino)) {
            Err(libc::ENOENT) => self.unlinked_but_open(ino),
            st => Ok(self.attr(ino, &st?)),
        }
    }

    /// A file whose name through the union is gone and that is still open (an fstat after
    /// unlink, which sends no handle): its attributes through an open handle, with the names
    /// it has left, as the branch counts them (`names_left`: none for a file whose only name
    /// went, also a lower one that a whiteout hides); a directory removed through the union
    /// has none either.
    fn unlinked_but_open(&self, ino: u64) -> R<FileAttr> {
        let open = self.handles_r().values().find(|h| h.ino == ino).cloned();
        let Some(h) = open else {
            return self.removed_dir(ino).ok_or(libc::ENOENT);
        };
        let st = sys::fstat(h.file.as_raw_fd()).e()?;
        let mut a = super::attr_of(ino, &st);
        a.nlink = self.names_left(&h, &st);
        Ok(a)
    }

    pub(super) fn do_setattr(&self, ino: u64, a: SetAttr) -> R<FileAttr> {
        if ino == super::pool_control::CONTROL_INO {
            return Err(libc::EPERM);
        }
        // (Read from /proc, so only for truncations, and before the lock.)
        let kill = a.size.is_some() && a.mode.is_none() && !super::file::has_fsetid(a.caller);
        if let Some(p) = self.pool() {
            return self.pool_setattr(ino, &a, kill, &p);
        }
        // Copy up first (that takes the namespace lock by itself), then resolve and change
        // the file under the lock, so a concurrent rename cannot aim the change at another
        // file.
        self.writable_branch(ino)?;
        let _ns = self.ns();
        let b = self.writable_branch_for(ino)?;
        let rel = self.path(ino)?;
        self.set_attrs(b, &rel, &a, kill)?;
        let st = sys::fstatat(self.fd(b), &rel).e()?;
        Ok(self.attr(ino, &st))
    }

    /// setattr in a pool: each change goes to the copies its own function's action policy
    /// names (`func.chown`, `func.chmod`, `func.truncate`, `func.utimens`, in that order, as
    /// mergerfs gets them as separate calls); the attributes are the shown copy's.
    fn pool_setattr(
        &self,
        ino: u64,
        a: &SetAttr,
        kill: bool,
        p: &crate::pool::Policies,
    ) -> R<FileAttr> {
        use crate::pool::ActionFn;
        let _ns = self.ns();
        let none = SetAttr {
            mode: None,
            uid: None,
            gid: None,
            size: None,
            atime: None,
            mtime: None,
            ..*a
        };
        let parts = [
            (
                ActionFn::Chown,
                SetAttr {
                    uid: a.uid,
                    gid: a.gid,
                    ..none
                },
            ),
            (
                ActionFn::Chmod,
                SetAttr {
                    mode: a.mode,
                    ..none
                },
            ),
            (
                ActionFn::Truncate,
                SetAttr {
                    size: a.size,
                    ..none
                },
            ),
            (
                ActionFn::Utimens,
                SetAttr {
                    atime: a.atime,
                    mtime: a.mtime,
                    ..none
                },
            ),
        ];
        for (f, part) in parts {
            let some = part.uid.is_some()
                || part.gid.is_some()
                || part.mode.is_some()
                || part.size.is_some()
                || part.atime.is_some()
                || part.mtime.is_some();
            if some {
                self.pool_act(ino, p.action(f), |b, rel| {
                    self.set_attrs(b, rel, &part, kill)
                })?;
            }
        }
        let loc = self.locate(ino)?;
        let st = sys::fstatat(self.fd(loc.entry.winner()), loc.winner_rel()).e()?;
        Ok(self.attr(ino, &st))
    }

    /// Apply `a` to `rel` of writable branch `b`.
    fn set_attrs(&self, b: u32, rel: &Path, a: &SetAttr, kill: bool) -> R<()> {
        let fd = self.fd(b);
        if a.uid.is_some() || a.gid.is_some() {
            let u = a.uid.unwrap_or(u32::MAX);
            let g = a.gid.unwrap_or(u32::MAX);
            sys::lchown(fd, rel, u, g).e()?;
        }
        if let Some(m) = a.mode {
            sys::chmodat(fd, rel, m & 0o7777).e()?;
        }
        if let Some(size) = a.size {
            // Prefer the caller's handle (it may be the only way to reach an unlinked file),
            // unless the handle still points at a branch we just copied away from.
            let via_handle =
                a.fh.and_then(|fh| self.handle(fh).ok())
                    .filter(|h| self.table.by_id(h.branch_id).map(|x| x.writable()) == Some(true));
            let opened;
            let file = match &via_handle {
                Some(h) => &h.file,
                None => {
                    opened = sys::openat(fd, rel, libc::O_WRONLY, 0).e()?;
                    &opened
                }
            };
            file.set_len(size).e()?;
            if kill {
                super::file::drop_set_id(file.as_raw_fd(), a.caller)?;
            }
        }
        if a.atime.is_some() || a.mtime.is_some() {
            sys::utimensat(fd, rel, spec(a.atime), spec(a.mtime)).e()?;
        }
        Ok(())
    }

    pub(super) fn do_readlink(&self, ino: u64) -> R<OsString> {
        self.resolved(|| {
            let loc = self.locate(ino)?;
            sys::readlinkat(self.fd(loc.entry.winner()), loc.winner_rel()).e()
        })
    }

    /// Space is what the upper branch offers (where writes go); without one, the top branch.
    /// A pool's is the sum of its branches'.
    pub(super) fn do_statfs(&self) -> R<libc::statvfs> {
        if self.pool().is_some() {
            return self.pool_statfs();
        }
        let b = self.table.upper().unwrap_or(0);
        sys::fstatvfs(self.fd(b)).e()
    }
}
