//! Open files: open, create, read, write, fsync, release.
//!
//! A handle owns the descriptor of the branch file it was opened on, so it keeps working when
//! its branch is removed from the union. A write through a handle whose branch has meanwhile
//! become read-only (a snapshot) first copies the file up and moves the handle to the copy, so
//! a snapshot stays frozen even under open writers.

use std::ffi::OsStr;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use fuser::FileAttr;

use super::{Errno, Handle, Union, R};
use crate::merge::Kind;
use crate::sys;

/// Flags the branch file is opened with: creation is done by us, not by the kernel's flags.
fn branch_flags(flags: i32) -> i32 {
    flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY)
}

fn wants_write(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

impl Union {
    pub(super) fn do_open(&mut self, ino: u64, flags: i32) -> R<u64> {
        let b = if wants_write(flags) {
            self.writable_branch_for(ino)?
        } else {
            self.locate(ino)?.entry.winner()
        };
        let rel = self.path(ino)?;
        let file = if wants_write(flags) {
            sys::openat(self.fd(b), &rel, branch_flags(flags), 0)
        } else {
            sys::open_noatime(self.fd(b), &rel, branch_flags(flags))
        }
        .e()?;
        let fh = self.new_fh();
        let branch_id = self.table.get(b).id;
        self.handles.insert(
            fh,
            Handle {
                file,
                ino,
                branch_id,
                flags,
            },
        );
        Ok(fh)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn do_create(
        &mut self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
        uid: u32,
        gid: u32,
    ) -> R<(FileAttr, u64)> {
        let (u, rel) = self.prepare_create(parent, name)?;
        let fd = self.fd(u);
        let file = sys::openat(
            fd,
            &rel,
            branch_flags(flags) | libc::O_CREAT | libc::O_EXCL,
            mode & 0o7777,
        )
        .e()?;
        if let Err(e) = self.own(u, &rel, uid, gid) {
            let _ = sys::unlinkat(fd, &rel, false);
            return Err(e);
        }
        self.view_insert(parent, name, Kind::File, u);
        let ino = self.nodes().get_or_create(parent, name);
        let st = sys::fstat(file.as_raw_fd()).e()?;
        let fh = self.new_fh();
        let branch_id = self.table.get(u).id;
        self.handles.insert(
            fh,
            Handle {
                file,
                ino,
                branch_id,
                flags,
            },
        );
        Ok((self.attr(ino, &st), fh))
    }

    /// Read into a buffer reused across requests (large reads are the hot path without FUSE
    /// passthrough). Returns the number of bytes now at the start of `self.read_buf`.
    pub(super) fn do_read(&mut self, fh: u64, offset: i64, size: u32) -> R<usize> {
        let h = self.handles.get(&fh).ok_or(libc::EBADF)?;
        if self.read_buf.len() < size as usize {
            self.read_buf.resize(size as usize, 0);
        }
        let buf = &mut self.read_buf[..size as usize];
        let mut got = 0;
        while got < buf.len() {
            match h.file.read_at(&mut buf[got..], offset as u64 + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(sys::errno(&e)),
            }
        }
        Ok(got)
    }

    pub(super) fn do_write(&mut self, fh: u64, offset: i64, data: &[u8], kill: bool) -> R<u32> {
        self.follow_snapshot(fh)?;
        let h = self.handles.get(&fh).ok_or(libc::EBADF)?;
        if kill {
            let fd = h.file.as_raw_fd();
            let mode = sys::fstat(fd).e()?.st_mode;
            // Set-group-ID without group execute is mandatory locking, not a privilege.
            let mut drop = libc::S_ISUID;
            if mode & libc::S_IXGRP != 0 {
                drop |= libc::S_ISGID;
            }
            if mode & drop != 0 {
                // SAFETY: valid descriptor.
                if unsafe { libc::fchmod(fd, mode & 0o7777 & !drop) } != 0 {
                    return Err(sys::errno(&std::io::Error::last_os_error()));
                }
            }
        }
        let n = if h.flags & libc::O_APPEND != 0 {
            // The branch file is O_APPEND too: the kernel appends whatever offset we pass.
            h.file.write_at(data, 0)
        } else {
            h.file.write_at(data, offset as u64)
        }
        .e()?;
        Ok(n as u32)
    }

    /// Move a handle off a branch that was writable when it was opened but no longer is.
    fn follow_snapshot(&mut self, fh: u64) -> R<()> {
        let h = self.handles.get(&fh).ok_or(libc::EBADF)?;
        let writable = match self.table.by_id(h.branch_id) {
            Some(b) => b.writable(),
            // Removed from the union: the file keeps its own branch.
            None => return Ok(()),
        };
        if writable {
            return Ok(());
        }
        let (ino, flags) = (h.ino, h.flags);
        let b = self.writable_branch_for(ino)?;
        let rel = self.path(ino)?;
        let file = sys::openat(self.fd(b), &rel, branch_flags(flags) & !libc::O_TRUNC, 0).e()?;
        let id = self.table.get(b).id;
        let h = self.handles.get_mut(&fh).ok_or(libc::EBADF)?;
        h.file = file;
        h.branch_id = id;
        Ok(())
    }

    pub(super) fn do_fsync(&mut self, fh: u64, datasync: bool) -> R<()> {
        let h = self.handles.get(&fh).ok_or(libc::EBADF)?;
        if datasync {
            h.file.sync_data().e()
        } else {
            h.file.sync_all().e()
        }
    }

    pub(super) fn do_fallocate(&mut self, fh: u64, offset: i64, length: i64, mode: i32) -> R<()> {
        self.follow_snapshot(fh)?;
        let h = self.handles.get(&fh).ok_or(libc::EBADF)?;
        // SAFETY: valid descriptor.
        let r = unsafe { libc::fallocate(h.file.as_raw_fd(), mode, offset, length) };
        if r != 0 {
            return Err(sys::errno(&std::io::Error::last_os_error()));
        }
        Ok(())
    }

    pub(super) fn do_release(&mut self, fh: u64) {
        self.handles.remove(&fh);
    }
}
