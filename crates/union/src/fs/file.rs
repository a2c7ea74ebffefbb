//! Open files: open, create, read, write, fsync, release.
//!
//! A handle owns the descriptor of the branch file it was opened on, so it keeps working when
//! its branch is removed from the union. A write through a handle whose branch has meanwhile
//! become read-only (a snapshot) first copies the file up and moves the handle to the copy, so
//! a snapshot stays frozen even under open writers.

use std::ffi::OsStr;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use fuser::FileAttr;

use super::{Backing, Errno, Handle, Op, R};
use crate::merge::Kind;
use crate::sys;

/// Flags the branch file is opened with: creation is done by us, not by the kernel's flags.
pub(super) fn branch_flags(flags: i32) -> i32 {
    flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY)
}

/// Write `data` at `offset` through handle `h`.
fn write_to(h: &Handle, offset: i64, data: &[u8]) -> R<usize> {
    if h.flags & libc::O_APPEND != 0 {
        // The branch file is O_APPEND too: the kernel appends whatever offset we pass.
        h.file.write_at(data, 0).e()
    } else {
        h.file.write_at(data, offset as u64).e()
    }
}

/// The process behind a request, as the kernel's set-ID rules need it: its pid (to read its
/// capabilities and groups), uid and file-system gid.
#[derive(Clone, Copy, Debug)]
pub(super) struct Caller {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

/// Drop the set-ID bits of an open file that the kernel drops when `caller`, a process without
/// CAP_FSETID, writes or truncates it (`setattr_should_drop_suidgid`): set-user-ID always;
/// set-group-ID with group execute, and without it (Linux 6.2 on) unless the caller is in the
/// file's group. Returns whether a bit was dropped.
pub(super) fn drop_set_id(fd: std::os::fd::RawFd, caller: Caller) -> R<bool> {
    let st = sys::fstat(fd).e()?;
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Ok(false);
    }
    let drop = set_id_to_drop(st.st_mode, || in_group(caller, st.st_gid));
    if drop == 0 {
        return Ok(false);
    }
    // SAFETY: valid descriptor.
    if unsafe { libc::fchmod(fd, st.st_mode & 0o7777 & !drop) } != 0 {
        return Err(sys::errno(&std::io::Error::last_os_error()));
    }
    Ok(true)
}

/// Whether an open file has a set-ID bit (so the caller's privileges are worth reading).
fn has_set_id(fd: std::os::fd::RawFd) -> R<bool> {
    Ok(sys::fstat(fd).e()?.st_mode & (libc::S_ISUID | libc::S_ISGID) != 0)
}

/// The set-ID bits of `mode` a write by a process without CAP_FSETID drops; `in_group` says
/// whether the writer is in the file's group (asked only for set-group-ID without group
/// execute, the one case that depends on it).
fn set_id_to_drop(mode: u32, in_group: impl FnOnce() -> bool) -> u32 {
    let mut drop = mode & libc::S_ISUID;
    let sgid = mode & libc::S_ISGID != 0;
    if sgid && (mode & libc::S_IXGRP != 0 || !in_group()) {
        drop |= libc::S_ISGID;
    }
    drop
}

/// Whether `caller` is in group `gid`: its file-system gid or one of its supplementary groups
/// (read from /proc; a process that is gone is judged by its gid alone).
fn in_group(caller: Caller, gid: u32) -> bool {
    if caller.gid == gid {
        return true;
    }
    let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", caller.pid)) else {
        return false;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .is_some_and(|groups| groups.split_whitespace().any(|g| g.parse() == Ok(gid)))
}

/// Whether `caller` holds CAP_FSETID, which lets it keep set-ID bits when it writes or
/// truncates (the kernel's rule). Read from /proc; a process that is gone is judged by its
/// user.
pub(super) fn has_fsetid(caller: Caller) -> bool {
    const CAP_FSETID: u32 = 4;
    let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", caller.pid)) else {
        return caller.uid == 0;
    };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .map_or(caller.uid == 0, |caps| caps & (1 << CAP_FSETID) != 0)
}

pub(super) fn wants_write(flags: i32) -> bool {
    flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0
}

impl Op<'_> {
    /// Open `ino` for the process `caller`.
    pub(super) fn do_open(&self, ino: u64, flags: i32, caller: Caller) -> R<u64> {
        if ino == super::pool_control::CONTROL_INO {
            // Only its extended attributes mean something.
            return Err(libc::EACCES);
        }
        if self.renoded().contains(&ino) {
            // The name has a new inode now (see `settle_open`): a stale kernel dentry still
            // points here. ESTALE makes the kernel look the path up again and retry the open.
            return Err(libc::ESTALE);
        }
        // The path is resolved, then opened: a rename through the union in between would make
        // it name another file (and O_TRUNC truncate that one). Opens check that no change of
        // the namespace ran meanwhile and try again; a truncating open, and one that kept
        // losing that race, resolves and opens under the namespace lock instead.
        let open = |locked: bool| -> R<(u32, File)> {
            let b = match (wants_write(flags), locked) {
                (true, false) => self.writable_branch(ino)?,
                (true, true) => self.writable_branch_for(ino)?,
                (false, _) => self.locate(ino)?.entry.winner(),
            };
            // (Another path than the union's in a lower branch under a redirect.)
            let rel = self.locate(ino)?.at(b);
            let file = if wants_write(flags) {
                sys::openat(self.fd(b), &rel, branch_flags(flags), 0)
            } else {
                sys::open_noatime(self.fd(b), &rel, branch_flags(flags))
            }
            .e()?;
            Ok((b, file))
        };
        let mut opened = None;
        if flags & libc::O_TRUNC == 0 {
            for _ in 0..3 {
                let mark = self.ns_mark();
                let r = open(false);
                if self.ns_stable(mark) {
                    opened = Some(r?);
                    break;
                }
            }
        }
        let (b, file) = match opened {
            Some(x) => x,
            None => {
                let _ns = self.ns();
                // A truncating open of a lower file copies no data up (`copy_up_truncated`).
                let copied = if flags & libc::O_TRUNC != 0 && wants_write(flags) {
                    self.copy_up_truncated(ino, flags)?
                } else {
                    None
                };
                match copied {
                    Some(x) => x,
                    None => open(true)?,
                }
            }
        };
        if flags & libc::O_TRUNC != 0 && !has_fsetid(caller) {
            // Truncation drops set-ID bits like a write (we open as root, so the branch file
            // system would keep them). The open's reply carries no attributes.
            if drop_set_id(file.as_raw_fd(), caller)? {
                self.attrs_changed(ino);
            }
        }
        let fh = self.new_fh();
        let branch_id = self.table.get(b).id;
        self.handles_w().insert(
            fh,
            Arc::new(Handle {
                file,
                ino,
                branch_id,
                flags,
                passthrough: AtomicBool::new(false),
            }),
        );
        Ok(fh)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn do_create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
        uid: u32,
        gid: u32,
    ) -> R<(FileAttr, u64)> {
        let _ns = self.ns();
        self.ns_changing();
        let (u, rel) = self.prepare_create(parent, name, crate::pool::CreateFn::Create)?;
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
        // The reply's reference is counted at once, under the same lock that finds the
        // node: a FORGET racing this create cannot drop the node in between.
        let mut ino = self.nodes().get_ref(parent, name);
        let mut io = self.io();
        if io.get(&ino).is_some_and(|io| io.backing.is_some()) {
            // The name's old file vanished from its branch behind our back while passthrough
            // readers still hold its inode, which the kernel keeps bound to that file: the new
            // file gets an inode of its own.
            let renumbered = self.nodes().renumber(ino);
            match renumbered {
                Some(n) => {
                    self.renoded().insert(ino);
                    // No reply has named `n` yet, so no FORGET can race this count.
                    self.nodes().add_ref(n);
                    drop(io);
                    self.forget_inodes(&[(ino, 1)]);
                    io = self.io();
                    ino = n;
                }
                None => {
                    drop(io);
                    self.forget_inodes(&[(ino, 1)]);
                    let _ = sys::unlinkat(fd, &rel, false);
                    self.view_remove(parent, name);
                    return Err(libc::EBUSY);
                }
            }
        }
        let st = match sys::fstat(file.as_raw_fd()) {
            Ok(st) => st,
            Err(e) => {
                drop(io);
                self.forget_inodes(&[(ino, 1)]);
                return Err(sys::errno(&e));
            }
        };
        io.entry(ino).or_default().cached += 1;
        drop(io);
        let fh = self.new_fh();
        let branch_id = self.table.get(u).id;
        self.handles_w().insert(
            fh,
            Arc::new(Handle {
                file,
                ino,
                branch_id,
                flags,
                passthrough: AtomicBool::new(false),
            }),
        );
        Ok((self.attr(ino, &st), fh))
    }

    /// Read `size` bytes at `offset` into `buf` (a buffer of the serving thread, reused across
    /// requests: large reads are the hot path without FUSE passthrough). Returns the number of
    /// bytes read.
    pub(super) fn do_read(&self, fh: u64, offset: i64, buf: &mut Vec<u8>, size: u32) -> R<usize> {
        let h = self.handle(fh)?;
        if buf.len() < size as usize {
            buf.resize(size as usize, 0);
        }
        let buf = &mut buf[..size as usize];
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

    /// Write `data` at `offset`; `kill` (the kernel's FUSE_WRITE_KILL_SUIDGID: the caller lacks
    /// CAP_FSETID) names the writer whose set-ID rules apply.
    pub(super) fn do_write(
        &self,
        fh: u64,
        offset: i64,
        data: &[u8],
        kill: Option<Caller>,
    ) -> R<u32> {
        let h = self.follow_snapshot(fh)?;
        // The write's reply carries no attributes: the kernel would go on showing the bits.
        if let Some(caller) = kill {
            if drop_set_id(h.file.as_raw_fd(), caller)? {
                self.attrs_changed(h.ino);
            }
        }
        let n = match write_to(&h, offset, data) {
            Err(e) if e == libc::ENOSPC || e == libc::EDQUOT => {
                // A pool with `moveonenospc` moves the file to a branch with room, once.
                let p = self.pool().filter(|p| p.move_on_enospc.is_some());
                let moved = p.ok_or(e).and_then(|p| self.move_full_file(fh, &p));
                write_to(&*moved.map_err(|_| e)?, offset, data)?
            }
            r => r?,
        };
        Ok(n as u32)
    }

    /// Move a handle off a branch that was writable when it was opened but no longer is.
    /// Returns the handle to write through.
    fn follow_snapshot(&self, fh: u64) -> R<Arc<Handle>> {
        let h = self.handle(fh)?;
        let writable = match self.table.by_id(h.branch_id) {
            Some(b) => b.writable(),
            // Removed from the union: the file keeps its own branch.
            None => return Ok(h),
        };
        if writable {
            return Ok(h);
        }
        let _ns = self.ns();
        // Another writer may have moved it meanwhile.
        let h = self.handle(fh)?;
        if self.table.by_id(h.branch_id).is_none_or(|b| b.writable()) {
            return Ok(h);
        }
        let b = self.writable_branch_for(h.ino)?;
        let rel = self.locate(h.ino)?.at(b);
        let file = sys::openat(self.fd(b), &rel, branch_flags(h.flags) & !libc::O_TRUNC, 0).e()?;
        let moved = Arc::new(Handle {
            file,
            ino: h.ino,
            branch_id: self.table.get(b).id,
            flags: h.flags,
            passthrough: AtomicBool::new(h.passthrough.load(Ordering::Relaxed)),
        });
        self.handles_w().insert(fh, moved.clone());
        Ok(moved)
    }

    pub(super) fn do_fsync(&self, fh: u64, datasync: bool) -> R<()> {
        let h = self.handle(fh)?;
        if datasync {
            h.file.sync_data().e()
        } else {
            h.file.sync_all().e()
        }
    }

    /// fallocate(2) for `caller`.
    pub(super) fn do_fallocate(
        &self,
        fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        caller: Caller,
    ) -> R<()> {
        let h = self.follow_snapshot(fh)?;
        // A local file system drops set-ID bits on any fallocate by a caller without
        // CAP_FSETID, but the kernel neither flags that to FUSE nor sends the change (with
        // FUSE_HANDLE_KILLPRIV_V2 it leaves it to us): as for a write.
        if has_set_id(h.file.as_raw_fd())?
            && !has_fsetid(caller)
            && drop_set_id(h.file.as_raw_fd(), caller)?
        {
            self.attrs_changed(h.ino);
        }
        // SAFETY: valid descriptor.
        let r = unsafe { libc::fallocate(h.file.as_raw_fd(), mode, offset, length) };
        if r != 0 {
            return Err(sys::errno(&std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Decide how the kernel does I/O on the handle `do_open` just made: Ok(Some(backing id))
    /// for passthrough, Ok(None) for I/O through the daemon. `register` turns a descriptor into
    /// a backing id (an ioctl on /dev/fuse). The id is shared with the other passthrough opens
    /// of the inode and unregistered when the last of them (and of these answers) is gone.
    ///
    /// Only read-only opens of files on read-only branches pass through: such a file cannot
    /// change through the union, and writes stay in the daemon, where a write through a handle
    /// whose branch became read-only (a snapshot) moves to a copy first. The kernel binds an
    /// inode to one backing file while any passthrough open lives and refuses cached opens of
    /// it meanwhile; when an open needs another file (a copy-up happened, a branch changed) or
    /// the cached mode, the name gets a new inode and the open fails with ESTALE, which makes
    /// the kernel look the path up again and retry on the new inode. The old inode lives on
    /// for its readers, who keep reading the file they opened (as in overlayfs).
    pub(super) fn settle_open(
        &self,
        fh: u64,
        register: impl FnOnce(&std::fs::File) -> std::io::Result<fuser::BackingId>,
    ) -> R<Option<Arc<fuser::BackingId>>> {
        let h = self.handle(fh)?;
        let ino = h.ino;
        let mut key = None;
        if self.passthrough.load(Ordering::Relaxed)
            && !wants_write(h.flags)
            && self.table.by_id(h.branch_id).is_some_and(|b| !b.writable())
        {
            if let Ok(st) = sys::fstat(h.file.as_raw_fd()) {
                if st.st_mode & libc::S_IFMT == libc::S_IFREG {
                    key = Some((st.st_dev, st.st_ino));
                }
            }
        }
        let mut all = self.io();
        let io = all.entry(ino).or_default();
        if let Some(b) = io.backing.as_mut() {
            if key == Some(b.file) {
                b.opens += 1;
                h.passthrough.store(true, Ordering::Relaxed);
                return Ok(Some(b.id.clone()));
            }
            // Conflict: move the name to a new inode and have the kernel retry there.
            drop(all);
            self.handles_w().remove(&fh);
            let renumbered = self.nodes().renumber(ino);
            return match renumbered {
                Some(_) => {
                    self.renoded().insert(ino);
                    Err(libc::ESTALE)
                }
                None => Err(libc::EBUSY),
            };
        }
        if let Some(file) = key.filter(|_| io.cached == 0) {
            match register(&h.file) {
                Ok(id) => {
                    let id = Arc::new(id);
                    io.backing = Some(Backing {
                        id: id.clone(),
                        file,
                        opens: 1,
                    });
                    h.passthrough.store(true, Ordering::Relaxed);
                    return Ok(Some(id));
                }
                // Not privileged: no passthrough for this mount. Other errors (a branch on a
                // stacked file system, ELOOP) only concern this file.
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                    self.passthrough.store(false, Ordering::Relaxed)
                }
                Err(_) => {}
            }
        }
        io.cached += 1;
        Ok(None)
    }

    pub(super) fn do_release(&self, fh: u64) {
        let Some(h) = self.handles_w().remove(&fh) else {
            return;
        };
        let mut all = self.io();
        if let Some(io) = all.get_mut(&h.ino) {
            if h.passthrough.load(Ordering::Relaxed) {
                if let Some(b) = io.backing.as_mut() {
                    b.opens -= 1;
                    if b.opens == 0 {
                        // Dropping the id unregisters it from the kernel.
                        io.backing = None;
                    }
                }
            } else {
                io.cached = io.cached.saturating_sub(1);
            }
            if io.cached == 0 && io.backing.is_none() {
                all.remove(&h.ino);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_id_bits_dropped_as_the_kernel_does() {
        let (u, g, gx) = (libc::S_ISUID, libc::S_ISGID, libc::S_IXGRP);
        let member = || true;
        let outsider = || false;
        assert_eq!(set_id_to_drop(u | g | gx | 0o666, member), u | g);
        assert_eq!(
            set_id_to_drop(u | g | 0o666, member),
            u,
            "sgid kept for a member"
        );
        assert_eq!(set_id_to_drop(u | g | 0o666, outsider), u | g);
        assert_eq!(set_id_to_drop(g | 0o646, outsider), g);
        assert_eq!(set_id_to_drop(0o777, || panic!("asked without sgid")), 0);
    }
}
