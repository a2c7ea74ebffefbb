//! Name lookup and attributes: lookup, getattr, setattr, readlink, statfs.

use std::ffi::{OsStr, OsString};
use std::os::fd::AsRawFd;
use std::time::UNIX_EPOCH;

use fuser::{FileAttr, TimeOrNow};

use super::{Errno, Op, R};
use crate::sys::{self, TimeSpec};

pub(super) struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub fh: Option<u64>,
    /// The calling process (pid, uid): a truncation by one without CAP_FSETID drops set-ID
    /// bits.
    pub caller: (u32, u32),
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
    pub(super) fn do_lookup(&self, parent: u64, name: &OsStr) -> R<FileAttr> {
        let e = self.child(parent, name)?.ok_or(libc::ENOENT)?;
        let rel = self.path(parent)?.join(name);
        let st = match sys::fstatat(self.fd(e.winner()), &rel) {
            Ok(st) => st,
            Err(err) => {
                self.forget_view(parent);
                return Err(sys::errno(&err));
            }
        };
        // The reply hands the inode to the kernel: count the reference.
        let ino = self.nodes().get_ref(parent, name);
        Ok(self.attr(ino, &st))
    }

    pub(super) fn do_getattr(&self, ino: u64, fh: Option<u64>) -> R<FileAttr> {
        // An open handle answers even for a name that was unlinked meanwhile.
        if let Some(h) = fh.and_then(|fh| self.handle(fh).ok()) {
            let st = sys::fstat(h.file.as_raw_fd()).e()?;
            return Ok(self.attr(ino, &st));
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
        let loc = self.locate(ino)?;
        let st = self.stat_loc(ino, &loc)?;
        Ok(self.attr(ino, &st))
    }

    pub(super) fn do_setattr(&self, ino: u64, a: SetAttr) -> R<FileAttr> {
        let b = self.writable_branch(ino)?;
        let fd = self.fd(b);
        let rel = self.path(ino)?;
        if a.uid.is_some() || a.gid.is_some() {
            let u = a.uid.unwrap_or(u32::MAX);
            let g = a.gid.unwrap_or(u32::MAX);
            sys::lchown(fd, &rel, u, g).e()?;
        }
        if let Some(m) = a.mode {
            sys::chmodat(fd, &rel, m & 0o7777).e()?;
        }
        if let Some(size) = a.size {
            // Prefer the caller's handle (it may be the only way to reach an unlinked file),
            // unless the handle still points at a branch we just copied away from.
            let via_handle =
                a.fh.and_then(|fh| self.handle(fh).ok())
                    .filter(|h| self.table.by_id(h.branch_id).map(|x| x.writable()) == Some(true));
            let kill = a.mode.is_none() && !super::file::has_fsetid(a.caller);
            match via_handle {
                Some(h) => {
                    h.file.set_len(size).e()?;
                    if kill {
                        super::file::drop_set_id(h.file.as_raw_fd())?;
                    }
                }
                None => {
                    let f = sys::openat(fd, &rel, libc::O_WRONLY, 0).e()?;
                    f.set_len(size).e()?;
                    if kill {
                        super::file::drop_set_id(f.as_raw_fd())?;
                    }
                }
            }
        }
        if a.atime.is_some() || a.mtime.is_some() {
            sys::utimensat(fd, &rel, spec(a.atime), spec(a.mtime)).e()?;
        }
        let st = sys::fstatat(fd, &rel).e()?;
        Ok(self.attr(ino, &st))
    }

    pub(super) fn do_readlink(&self, ino: u64) -> R<OsString> {
        let loc = self.locate(ino)?;
        sys::readlinkat(self.fd(loc.entry.winner()), &loc.rel).e()
    }

    /// Space is what the upper branch offers (where writes go); without one, the top branch.
    pub(super) fn do_statfs(&self) -> R<libc::statvfs> {
        let b = self.table.upper().unwrap_or(0);
        sys::fstatvfs(self.fd(b)).e()
    }
}
