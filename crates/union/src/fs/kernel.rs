//! The `fuser::Filesystem` glue: every request refreshes the branch table, calls the matching
//! `do_*` method and turns its `Result` into a reply. No logic lives here.

use std::ffi::OsStr;
use std::path::Path;
use std::time::SystemTime;

use fuser::consts::{
    FUSE_ATOMIC_O_TRUNC, FUSE_AUTO_INVAL_DATA, FUSE_BIG_WRITES, FUSE_DO_READDIRPLUS,
    FUSE_PASSTHROUGH,
};
use fuser::{
    Filesystem, KernelConfig, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow,
};

use super::entry::SetAttr;

/// FUSE ABI 7.33 flag (fuser has no constant for it).
const FUSE_HANDLE_KILLPRIV_V2: u64 = 1 << 28;
/// Write flag sent with FUSE_HANDLE_KILLPRIV_V2: this write must drop set-ID bits.
const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;
use super::{Union, TTL};

fn xattr_reply(r: Result<Vec<u8>, i32>, size: u32, reply: ReplyXattr) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(libc::ERANGE),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(e),
    }
}

fn negative() -> fuser::FileAttr {
    fuser::FileAttr {
        ino: 0,
        size: 0,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: fuser::FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}

impl Filesystem for Union {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        // O_TRUNC arrives with open (one request instead of open + setattr); cached pages are
        // dropped when a file changes in a branch behind our back.
        let _ =
            config.add_capabilities(FUSE_ATOMIC_O_TRUNC | FUSE_AUTO_INVAL_DATA | FUSE_BIG_WRITES);
        // We clear set-user/group-ID bits on write ourselves (the daemon writes with
        // CAP_FSETID, so the branch file system would not): in exchange the kernel stops asking
        // for security.capability before every single write, a round trip each.
        let _ = config.add_capabilities(FUSE_HANDLE_KILLPRIV_V2);
        // Listings carry attributes, which saves one lookup round trip per entry for anything
        // that stats what it lists (ls -l, find, make, tar). Always on: the kernel's adaptive
        // mode fell back to plain readdir plus lookups for `find`, 50x the requests.
        let _ = config.add_capabilities(FUSE_DO_READDIRPLUS);
        // Read-only opens of files on read-only branches are served by the kernel from the
        // branch file itself (see `settle_open`). Stack depth 1: branches must be on a plain
        // file system (a branch on overlayfs falls back to reads through the daemon), and the
        // union itself may still be a layer of an overlayfs.
        self.passthrough = config.add_capabilities(FUSE_PASSTHROUGH).is_ok()
            && config.set_max_stack_depth(1).is_ok();
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        Ok(())
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        self.refresh();
        match self.do_lookup(parent, name) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            // Node id 0 is a negative entry the kernel may cache for TTL: compilers and shells
            // probe many names that do not exist.
            Err(libc::ENOENT) => {
                self.shared
                    .nodes
                    .lock()
                    .unwrap()
                    .note_negative(parent, name);
                reply.entry(&TTL, &negative(), 0)
            }
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, fh: Option<u64>, reply: ReplyAttr) {
        self.refresh();
        match self.do_getattr(ino, fh) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        self.refresh();
        let a = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            fh,
        };
        match self.do_setattr(ino, a) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        self.refresh();
        match self.do_readlink(ino) {
            Ok(t) => reply.data(std::os::unix::ffi::OsStrExt::as_bytes(t.as_os_str())),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        self.refresh();
        match self.do_mknod(parent, name, mode & !umask, rdev, req.uid(), req.gid()) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        self.refresh();
        match self.do_mkdir(parent, name, mode & !umask, req.uid(), req.gid()) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        self.refresh();
        match self.do_unlink(parent, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        self.refresh();
        match self.do_rmdir(parent, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        self.refresh();
        match self.do_symlink(parent, link_name, target, req.uid(), req.gid()) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        self.refresh();
        match self.do_rename(parent, name, newparent, newname, flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        self.refresh();
        match self.do_link(ino, newparent, newname) {
            Ok(a) => reply.entry(&TTL, &a, 0),
            Err(e) => reply.error(e),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        self.refresh();
        let fh = match self.do_open(ino, flags) {
            Ok(fh) => fh,
            Err(e) => return reply.error(e),
        };
        match self.settle_open(fh, |f| reply.open_backing(f)) {
            Ok(true) => match self.backing_of(ino) {
                Some(id) => reply.opened_passthrough(fh, 0, id),
                None => reply.error(libc::EIO),
            },
            // Keep cached pages across opens; FUSE_AUTO_INVAL_DATA drops them when a refreshed
            // attribute shows the file changed (also behind our back, within TTL), and a branch
            // change drops them explicitly.
            Ok(false) => reply.opened(fh, fuser::consts::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        match self.do_read(fh, offset, size) {
            Ok(n) => reply.data(&self.read_buf[..n]),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        data: &[u8],
        write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        self.refresh();
        let kill = write_flags & FUSE_WRITE_KILL_SUIDGID != 0;
        match self.do_write(fh, offset, data, kill) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, _ino: u64, _fh: u64, _lo: u64, reply: ReplyEmpty) {
        // Nothing to do on close (writes reach the branch file at once, fsync is separate).
        // ENOSYS makes the kernel stop sending FLUSH altogether: one round trip less for every
        // close (a create + close is LOOKUP, CREATE, FLUSH, RELEASE and the directory's GETATTR).
        reply.error(libc::ENOSYS);
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.do_release(fh);
        reply.ok();
    }

    fn fsync(&mut self, _req: &Request<'_>, _ino: u64, fh: u64, datasync: bool, reply: ReplyEmpty) {
        match self.do_fsync(fh, datasync) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        self.refresh();
        match self.do_opendir(ino) {
            Ok(fh) => reply.opened(fh, 0),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let Some(list) = self.dirs.get(&fh) else {
            return reply.error(libc::EBADF);
        };
        for (i, (ino, kind, name)) in list.iter().enumerate().skip(offset.max(0) as usize) {
            if reply.add(*ino, (i + 1) as i64, *kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectoryPlus,
    ) {
        self.refresh();
        let Some(list) = self.dirs.get(&fh) else {
            return reply.error(libc::EBADF);
        };
        let todo: Vec<(usize, u64, std::ffi::OsString)> = list
            .iter()
            .enumerate()
            .skip(offset.max(0) as usize)
            .map(|(i, (child, _, name))| (i, *child, name.clone()))
            .collect();
        for (i, child, name) in todo {
            let attr = if name == "." || name == ".." {
                self.do_getattr(child, None)
            } else {
                self.do_lookup(ino, &name)
            };
            // A name that vanished since opendir is left out of this listing.
            let Ok(attr) = attr else { continue };
            if reply.add(attr.ino, (i + 1) as i64, &name, &TTL, &attr, 0) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        reply: ReplyEmpty,
    ) {
        self.dirs.remove(&fh);
        reply.ok();
    }

    fn fsyncdir(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, ds: bool, reply: ReplyEmpty) {
        self.refresh();
        match self.do_fsyncdir(ino, ds) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        self.refresh();
        match self.do_statfs() {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        self.refresh();
        match self.do_setxattr(ino, name, value, flags) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        self.refresh();
        let r = self.do_getxattr(ino, name);
        xattr_reply(r, size, reply);
    }

    fn listxattr(&mut self, _req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        self.refresh();
        let r = self.do_listxattr(ino);
        xattr_reply(r, size, reply);
    }

    fn removexattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        self.refresh();
        match self.do_removexattr(ino, name) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn access(&mut self, _req: &Request<'_>, _ino: u64, _mask: i32, reply: ReplyEmpty) {
        // Permission checks are the kernel's (mounted with default_permissions).
        reply.ok();
    }

    fn create(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.refresh();
        match self.do_create(parent, name, mode & !umask, flags, req.uid(), req.gid()) {
            Ok((a, fh)) => reply.created(&TTL, &a, 0, fh, 0),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        self.refresh();
        match self.do_fallocate(fh, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}
