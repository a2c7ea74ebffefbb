//! The `fuser::Filesystem` glue: every request takes the current branch table (`State::op`),
//! calls the matching `do_*` method and turns its `Result` into a reply. No logic lives here.
//!
//! Threads: the threads that read requests from the kernel (see `crate::serve`) answer the
//! quick ones themselves, without a hand-off to another thread. Requests whose cost grows with file size (copy-up, truncate(2), fsync,
//! fallocate, reads and writes of 128 KiB or more) are handed to worker threads, so they never
//! hold up the others; the state is built for any number of concurrent requests.

use std::cell::RefCell;
use std::ffi::OsStr;
use std::path::Path;
use std::time::SystemTime;

use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileHandle, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};

use super::entry::SetAttr;
use super::file::{wants_write, Caller};
use super::{State, Union, TTL};

/// Reads and writes of at least this size go to a worker thread.
const BIG_IO: usize = 128 << 10;

fn err(e: i32) -> Errno {
    Errno::from_i32(e)
}

fn xattr_reply(r: Result<Vec<u8>, i32>, size: u32, reply: ReplyXattr) {
    match r {
        Ok(v) if size == 0 => reply.size(v.len() as u32),
        Ok(v) if v.len() > size as usize => reply.error(Errno::ERANGE),
        Ok(v) => reply.data(&v),
        Err(e) => reply.error(err(e)),
    }
}

fn negative() -> fuser::FileAttr {
    fuser::FileAttr {
        ino: INodeNo(0),
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

const G0: Generation = Generation(0);

/// The process behind `req` (see `Caller`).
fn caller(req: &Request) -> Caller {
    Caller {
        pid: req.pid(),
        uid: req.uid(),
        gid: req.gid(),
    }
}

fn empty(r: Result<(), i32>, reply: ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(err(e)),
    }
}

fn entry(r: Result<fuser::FileAttr, i32>, reply: ReplyEntry) {
    match r {
        Ok(a) => reply.entry(&TTL, &a, G0),
        Err(e) => reply.error(err(e)),
    }
}

thread_local! {
    /// Each serving thread's read buffer, reused across requests.
    static READ_BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl fuser::Filesystem for Union {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // O_TRUNC arrives with open (one request instead of open + setattr); cached pages are
        // dropped when a file changes in a branch behind our back.
        let _ = config.add_capabilities(
            InitFlags::FUSE_ATOMIC_O_TRUNC
                | InitFlags::FUSE_AUTO_INVAL_DATA
                | InitFlags::FUSE_BIG_WRITES,
        );
        // Lookups and listings in one directory may run at the same time (we serve requests
        // on several threads; the kernel otherwise serializes them per directory).
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // We clear set-user/group-ID bits on write ourselves (the daemon writes with
        // CAP_FSETID, so the branch file system would not): in exchange the kernel stops asking
        // for security.capability before every single write, a round trip each.
        let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        // Listings carry attributes, which saves one lookup round trip per entry for anything
        // that stats what it lists (ls -l, find, make, tar). Not the kernel's adaptive mode: it
        // fell back to plain readdir plus lookups for `find`, 50x the requests. Off when asked
        // (`readdirplus=off`): names only, for listings nothing stats.
        if self.shared.readdirplus {
            let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
        }
        // Read-only opens of files on read-only branches are served by the kernel from the
        // branch file itself (see `settle_open`). Stack depth 1: branches must be on a plain
        // file system (a branch on overlayfs falls back to reads through the daemon), and the
        // union itself may still be a layer of an overlayfs.
        let pt = config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok()
            && config.set_max_stack_depth(1).is_ok();
        self.passthrough
            .store(pt, std::sync::atomic::Ordering::Relaxed);
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.op().do_lookup(parent.0, name) {
            Ok(Some(a)) => reply.entry(&TTL, &a, G0),
            // Node id 0 is a negative entry the kernel may cache for TTL: compilers and shells
            // probe many names that do not exist. (A name not found while a rename ran comes
            // back as an error instead, which the kernel does not cache.)
            Ok(None) => {
                self.nodes().note_negative(parent.0, name);
                reply.entry(&TTL, &negative(), G0)
            }
            Err(e) => reply.error(err(e)),
        }
    }

    // (BATCH_FORGET arrives here once per inode: fuser's default.)
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.forget_inodes(&[(ino.0, nlookup)]);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.op().do_getattr(ino.0, fh.map(|f| f.0)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(err(e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let a = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            fh: fh.map(|f| f.0),
            caller: caller(req),
        };
        let ino = ino.0;
        let run = move |s: &State| match s.op().do_setattr(ino, a) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(err(e)),
        };
        // Truncation and copy-up take time in proportion to the file.
        if size.is_some() || self.op().needs_copy_up(ino) {
            self.offload(run)
        } else {
            run(&self.state)
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.op().do_readlink(ino.0) {
            Ok(t) => reply.data(std::os::unix::ffi::OsStrExt::as_bytes(t.as_os_str())),
            Err(e) => reply.error(err(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = self
            .op()
            .do_mknod(parent.0, name, mode & !umask, rdev, req.uid(), req.gid());
        entry(r, reply)
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self
            .op()
            .do_mkdir(parent.0, name, mode & !umask, req.uid(), req.gid());
        entry(r, reply)
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(self.op().do_unlink(parent.0, name), reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(self.op().do_rmdir(parent.0, name), reply)
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let r = self
            .op()
            .do_symlink(parent.0, link_name, target, req.uid(), req.gid());
        entry(r, reply)
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let op = self.op();
        // A file on a read-only branch is copied up first: off this thread.
        let copy = op.child(parent.0, name).ok().flatten().is_some_and(|e| {
            e.kind != crate::merge::Kind::Dir && !op.table.get(e.winner()).writable()
        });
        drop(op);
        let (parent, newparent, flags) = (parent.0, newparent.0, flags.bits());
        let (name, newname) = (name.to_os_string(), newname.to_os_string());
        let run = move |s: &State| {
            empty(
                s.op().do_rename(parent, &name, newparent, &newname, flags),
                reply,
            )
        };
        if copy {
            self.offload(run)
        } else {
            run(&self.state)
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let (ino, newparent, newname) = (ino.0, newparent.0, newname.to_os_string());
        let run = move |s: &State| entry(s.op().do_link(ino, newparent, &newname), reply);
        if self.op().needs_copy_up(ino) {
            self.offload(run)
        } else {
            run(&self.state)
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let shared = &self.shared;
        shared
            .readahead_raised
            .call_once(|| crate::raise_readahead(&shared.mountpoint));
        let (ino, flags, caller) = (ino.0, flags.0, caller(req));
        let run = move |s: &State| {
            let op = s.op();
            let fh = match op.do_open(ino, flags, caller) {
                Ok(fh) => fh,
                Err(e) => return reply.error(err(e)),
            };
            match op.settle_open(fh, |f| reply.open_backing(f)) {
                Ok(Some(id)) => reply.opened_passthrough(FileHandle(fh), FopenFlags::empty(), &id),
                // Keep cached pages across opens; FUSE_AUTO_INVAL_DATA drops them when a
                // refreshed attribute shows the file changed (also behind our back, within
                // TTL), and a branch change drops them explicitly.
                Ok(None) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE),
                Err(e) => reply.error(err(e)),
            }
        };
        // An open for writing may copy the file up first.
        if wants_write(flags) && self.op().needs_copy_up(ino) {
            self.offload(run)
        } else {
            run(&self.state)
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let fh = fh.0;
        let run = move |s: &State| {
            READ_BUF.with_borrow_mut(|buf| match s.op().do_read(fh, offset as i64, buf, size) {
                Ok(n) => reply.data(&buf[..n]),
                Err(e) => reply.error(err(e)),
            })
        };
        if size as usize >= BIG_IO {
            self.offload(run)
        } else {
            run(&self.state)
        }
    }

    fn write(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let kill = write_flags
            .contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID)
            .then(|| caller(req));
        if data.len() < BIG_IO {
            match self.op().do_write(fh.0, offset as i64, data, kill) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(err(e)),
            }
            return;
        }
        let (fh, data) = (fh.0, data.to_vec());
        self.offload(
            move |s| match s.op().do_write(fh, offset as i64, &data, kill) {
                Ok(n) => reply.written(n),
                Err(e) => reply.error(err(e)),
            },
        )
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lo: LockOwner,
        reply: ReplyEmpty,
    ) {
        // Nothing to do on close (writes reach the branch file at once, fsync is separate).
        // ENOSYS makes the kernel stop sending FLUSH altogether: one round trip less for every
        // close (a create + close is LOOKUP, CREATE, FLUSH, RELEASE and the directory's GETATTR).
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.op().do_release(fh.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, ds: bool, reply: ReplyEmpty) {
        let fh = fh.0;
        self.offload(move |s| empty(s.op().do_fsync(fh, ds), reply))
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.op().do_opendir(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(err(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let Some(list) = self.op().snapshot(ino.0, fh.0, offset) else {
            return reply.error(Errno::EBADF);
        };
        let mut made = Vec::new();
        for (i, (child, kind, name)) in list.iter().enumerate().skip(offset as usize) {
            // A name's inode number is only shown: the kernel takes no reference, so a node
            // made for it goes when the listing's handle does (unless looked up meanwhile).
            let child = match *child {
                0 => {
                    let mut nodes = self.nodes();
                    let known = nodes.lookup(ino.0, name);
                    known.unwrap_or_else(|| {
                        let new = nodes.get_or_create(ino.0, name);
                        made.push(new);
                        new
                    })
                }
                c => c,
            };
            if reply.add(INodeNo(child), (i + 1) as u64, *kind, name) {
                break;
            }
        }
        if !made.is_empty() {
            super::lock(&self.listed)
                .entry(fh.0)
                .or_default()
                .extend(made);
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let op = self.op();
        let Some(list) = op.snapshot(ino.0, fh.0, offset) else {
            return reply.error(Errno::EBADF);
        };
        // Without the directory no name can be looked up: an error, not an empty chunk (which
        // the kernel would take for the end of the listing).
        let mut listed = match op.listed(ino.0) {
            Ok(l) => l,
            Err(e) => return reply.error(err(e)),
        };
        for (i, (child, _, name)) in list.iter().enumerate().skip(offset as usize) {
            // The kernel takes a reference to every entry but `.` and `..` (lookup_listed
            // counts it).
            let dots = name == "." || name == "..";
            let attr = if dots {
                op.do_getattr(*child, None)
            } else {
                op.lookup_listed(&mut listed, name)
            };
            // A name that vanished since opendir is left out of this listing.
            let Ok(attr) = attr else { continue };
            if reply.add(attr.ino, (i + 1) as u64, name, &TTL, &attr, G0) {
                // Full: this entry is not sent, so the kernel will not hold it.
                if !dots {
                    self.forget_inodes(&[(attr.ino.0, 1)]);
                }
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        super::lock(&self.dirs).remove(&fh.0);
        if let Some(made) = super::lock(&self.listed).remove(&fh.0) {
            let unheld: Vec<(u64, u64)> = made.into_iter().map(|ino| (ino, 0)).collect();
            self.forget_inodes(&unheld);
        }
        reply.ok();
    }

    fn fsyncdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, ds: bool, reply: ReplyEmpty) {
        let ino = ino.0;
        self.offload(move |s| empty(s.op().do_fsyncdir(ino, ds), reply))
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match self.op().do_statfs() {
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
            Err(e) => reply.error(err(e)),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let (ino, name, value) = (ino.0, name.to_os_string(), value.to_vec());
        let run = move |s: &State| empty(s.op().do_setxattr(ino, &name, &value, flags), reply);
        if self.op().needs_copy_up(ino) {
            self.offload(run)
        } else {
            run(&self.state)
        }
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        xattr_reply(self.op().do_getxattr(ino.0, name), size, reply);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        xattr_reply(self.op().do_listxattr(ino.0), size, reply);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let (ino, name) = (ino.0, name.to_os_string());
        let run = move |s: &State| empty(s.op().do_removexattr(ino, &name), reply);
        if self.op().needs_copy_up(ino) {
            self.offload(run)
        } else {
            run(&self.state)
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Permission checks are the kernel's (mounted with default_permissions).
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self
            .op()
            .do_create(parent.0, name, mode & !umask, flags, req.uid(), req.gid());
        match r {
            Ok((a, fh)) => reply.created(&TTL, &a, G0, FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(err(e)),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let (fh, caller) = (fh.0, caller(req));
        self.offload(move |s| {
            let r = s
                .op()
                .do_fallocate(fh, offset as i64, length as i64, mode, caller);
            empty(r, reply)
        })
    }
}
