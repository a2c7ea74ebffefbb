//! The only crate that touches the file system.
//!
//! Everything is relative to a [`Root`], an open directory handle. A
//! [`RelPath`] is resolved with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`
//! (or, on kernels without it, one `O_NOFOLLOW` component at a time), and every
//! operation on a name inside a [`Dir`] is an `*at` call that does not follow a
//! symlink in the last component. A symlink planted anywhere in a replica can
//! therefore never redirect a read or a write outside it.
//!
//! Writes of file contents go to a temp file with a hidden random name created
//! with `O_CREAT | O_EXCL | O_NOFOLLOW` in the target directory, which is then
//! renamed over the target ([`Dir::rename`]).

mod change_time;
mod copy;
mod flush;
mod follow;
mod mapped;
mod memo;
mod names;
mod rules;
mod scan;
mod throttle;
mod walk;
pub mod watch;
mod watch_rules;
mod words;
mod xattr;

pub use change_time::ctime_moves_after_stat;
pub use copy::{copy_data, copy_data_paced, hash_file, write_sparse, CopyStats, Reflink};
pub use follow::{
    flush_file, list_dir_following, open_dir_following, same_dir, FollowListing, FollowRules,
    Followed,
};
pub use mapped::Mapped;
pub use memo::DigestMemo;
pub use names::NameList;
pub use rules::{IgnoreRules, IGNORE_FILE, MAX_PATTERN, MAX_PATTERNS};
pub use scan::{
    dir_entry, list_dir, list_dir_pair, list_opened_dir, read_ignore_file, scan, scan_pair,
    Listing, SameFs, Scan, ScanOptions,
};
pub use throttle::{Throttle, PACED_CHUNK};
pub use walk::{walk_pair, DirVisit, Slice};
pub use words::{io_words, IoWords};
pub use xattr::XattrFilter;

use accord_model::{validate_name, Kind, Props, RelPath, Time, Xattr};
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Prefix of the temp files this crate creates; a scan never reports them and
/// a mirror removes stale ones.
pub const TEMP_PREFIX: &[u8] = b".accord-tmp-";
/// Prefix of recovery files (a file that failed mid in-place update).
pub const RECOVERY_PREFIX: &[u8] = b".accord-recovery-";

/// Prefix of the marker written before a file is changed in place; it holds
/// the file's name. A marker found later means a run died mid-update: the
/// file is moved to a recovery name before anything else.
pub const INPLACE_PREFIX: &[u8] = b".accord-inplace-";

pub use accord_model::PARTIAL_PREFIX;

/// True for names this crate reserves for itself.
pub fn is_reserved_name(name: &[u8]) -> bool {
    name.starts_with(TEMP_PREFIX)
        || name.starts_with(RECOVERY_PREFIX)
        || name.starts_with(INPLACE_PREFIX)
        || name.starts_with(PARTIAL_PREFIX)
}

/// A hidden recovery name for `name` (bounded length).
pub fn recovery_name(name: &[u8]) -> Vec<u8> {
    let mut rec = RECOVERY_PREFIX.to_vec();
    rec.extend_from_slice(&name[..name.len().min(200)]);
    rec.push(b'.');
    rec.extend_from_slice(unique_suffix().as_bytes());
    rec
}

fn cstr(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn check_name(name: &[u8]) -> io::Result<CString> {
    validate_name(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    cstr(name)
}

/// Call `f` with `name` (checked like `check_name`) as a C string built on
/// the stack: the scan stats every entry, and a heap string each time shows.
fn with_name<R>(name: &[u8], f: impl FnOnce(&std::ffi::CStr) -> io::Result<R>) -> io::Result<R> {
    validate_name(name).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut buf = [0u8; 256];
    if name.len() >= buf.len() {
        return f(&cstr(name)?);
    }
    buf[..name.len()].copy_from_slice(name);
    let c = std::ffi::CStr::from_bytes_until_nul(&buf)
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    if c.to_bytes().len() != name.len() {
        // An interior NUL.
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    f(c)
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn cvt_retry(mut f: impl FnMut() -> libc::c_int) -> io::Result<libc::c_int> {
    loop {
        let r = f();
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        return Ok(r);
    }
}

/// True for errors that mean "the disk is full" (fatal for a run).
/// Why a mirror from `src` to `dst` would be unsafe because one is inside
/// the other (after resolving symlinks), or `None`.
pub fn nesting(src: &std::path::Path, dst: &std::path::Path) -> Option<String> {
    let (Some(s), Some(d)) = (canonical_to_be(src), canonical_to_be(dst)) else {
        return None;
    };
    if s != d && s.starts_with(&d) {
        return Some(format!(
            "the source {} is inside the destination {}",
            s.display(),
            d.display()
        ));
    }
    if s != d && d.starts_with(&s) {
        return Some(format!(
            "the destination {} is inside the source {}",
            d.display(),
            s.display()
        ));
    }
    None
}

/// The canonical path `p` has or will have once created: its deepest
/// existing ancestor canonicalized, with the missing names after it (so a
/// destination can be checked before it is made).
fn canonical_to_be(p: &std::path::Path) -> Option<std::path::PathBuf> {
    let mut missing = Vec::new();
    let mut at = p;
    loop {
        if let Ok(c) = std::fs::canonicalize(at) {
            return Some(missing.iter().rev().fold(c, |c, name| c.join(name)));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_os_string());
                at = if parent.as_os_str().is_empty() {
                    std::path::Path::new(".")
                } else {
                    parent
                };
            }
            _ => return None,
        }
    }
}

pub fn is_no_space(e: &io::Error) -> bool {
    // The kinds too: errors rewrapped with a message keep their kind only.
    matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || matches!(
            e.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
        )
}

/// Random hex suffix for hidden names.
pub fn random_suffix() -> String {
    let mut buf = [0u8; 8];
    let mut got = 0;
    while got < buf.len() {
        let r = unsafe {
            libc::getrandom(
                buf[got..].as_mut_ptr() as *mut libc::c_void,
                buf.len() - got,
                0,
            )
        };
        if r <= 0 {
            // Fall back to something unique enough; O_EXCL catches collisions.
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0) as u64;
            let x = t ^ ((std::process::id() as u64) << 32) ^ (&buf as *const _ as u64);
            buf = x.to_le_bytes();
            break;
        }
        got += r as usize;
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

/// A suffix unique in this process and unpredictable across processes: a
/// random per-process prefix and a counter (O_EXCL catches the rest).
fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static PREFIX: OnceLock<String> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let p = PREFIX.get_or_init(random_suffix);
    format!("{p}{:x}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// `lstat`-style information about one entry.
#[derive(Clone, Debug)]
pub struct Stat {
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub size: u64,
    pub mtime: Time,
    /// Inode change time (moves on every metadata change, xattrs included).
    pub ctime: Time,
    pub dev: u64,
    pub ino: u64,
    pub nlink: u64,
    pub rdev: u64,
    pub blocks: u64,
}

/// True for a directory owned by the effective user (not root, whom modes do
/// not stop) whose mode lacks one of the owner bits in `need`.
fn owned_and_lacking(st: &Stat, need: u32) -> bool {
    st.kind == Kind::Dir && st.mode & need != need && {
        let euid = unsafe { libc::geteuid() };
        euid != 0 && st.uid == euid
    }
}

fn kind_of(mode: u32) -> Option<Kind> {
    Some(match mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File,
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        libc::S_IFIFO => Kind::Fifo,
        libc::S_IFSOCK => Kind::Socket,
        libc::S_IFCHR => Kind::CharDev,
        libc::S_IFBLK => Kind::BlockDev,
        _ => return None,
    })
}

impl Stat {
    /// The fields a re-check compares (see `accord_model::Expect`).
    pub fn found(&self) -> accord_model::Found {
        accord_model::Found {
            kind: self.kind,
            dev: self.dev,
            ino: self.ino,
            size: self.size,
            mtime: self.mtime,
        }
    }

    fn from_raw(st: &libc::stat) -> io::Result<Stat> {
        let kind = kind_of(st.st_mode)
            .ok_or_else(|| io::Error::new(io::ErrorKind::Unsupported, "unknown file type"))?;
        Ok(Stat {
            kind,
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            size: st.st_size as u64,
            mtime: Time {
                sec: st.st_mtime,
                nsec: st.st_mtime_nsec as u32,
            },
            ctime: Time {
                sec: st.st_ctime,
                nsec: st.st_ctime_nsec as u32,
            },
            dev: st.st_dev,
            ino: st.st_ino,
            nlink: st.st_nlink,
            rdev: st.st_rdev,
            blocks: st.st_blocks as u64,
        })
    }
}

/// Every entry of a directory (but `.` and `..`) from the descriptor's
/// position on: (name, d_type).
fn read_dir_entries(fd: BorrowedFd<'_>) -> io::Result<Vec<(Vec<u8>, u8)>> {
    let names = read_dir_entries_ino(fd)?;
    Ok(names.iter().map(|(n, t, _)| (n.to_vec(), t)).collect())
}

/// Like `read_dir_entries`, with each entry's inode number.
fn read_dir_entries_ino(fd: BorrowedFd<'_>) -> io::Result<NameList> {
    thread_local! {
        // One buffer per thread: a scan lists every directory, and a fresh
        // zeroed 64 KiB each time costs more than the listing.
        static BUF: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(vec![0u8; 64 * 1024]);
    }
    BUF.with(|b| {
        let mut buf = b.borrow_mut();
        let mut out = NameList::new();
        loop {
            let n = unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    fd.as_raw_fd(),
                    buf.as_mut_ptr(),
                    buf.len(),
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                out.shrink_to_fit();
                return Ok(out);
            }
            parse_dirents(&buf[..(n as usize).min(buf.len())], &mut out)?;
        }
    })
}

/// Append the entries of one getdents64 answer (but `.` and `..`).
fn parse_dirents(buf: &[u8], out: &mut NameList) -> io::Result<()> {
    // Records of short names take 24 or 32 bytes: room for about as many
    // as the answer holds, instead of growing the list several times.
    out.reserve(buf.len() / 32, buf.len() / 2);
    let mut off = 0usize;
    while off + 19 <= buf.len() {
        // struct linux_dirent64 { u64 d_ino; i64 d_off; u16 d_reclen; u8 d_type; char d_name[]; }
        let reclen = u16::from_ne_bytes([buf[off + 16], buf[off + 17]]) as usize;
        if reclen < 20 || off + reclen > buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "malformed directory entry from the kernel",
            ));
        }
        let ino = u64::from_ne_bytes(buf[off..off + 8].try_into().unwrap());
        let dtype = buf[off + 18];
        let name_area = &buf[off + 19..off + reclen];
        let len = name_area
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(name_area.len());
        let name = &name_area[..len];
        if name != b"." && name != b".." {
            out.push(name, dtype, ino)?;
        }
        off += reclen;
    }
    Ok(())
}

/// `fstat` on an open descriptor.
pub fn fstat(fd: BorrowedFd<'_>) -> io::Result<Stat> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    cvt(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Stat::from_raw(&st)
}

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

static OPENAT2_MISSING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Open `rel` beneath `dirfd` without following any symlink.
fn open_beneath(dirfd: RawFd, rel: &[u8], flags: libc::c_int) -> io::Result<OwnedFd> {
    use std::sync::atomic::Ordering;
    let c = cstr(rel)?;
    if !OPENAT2_MISSING.load(Ordering::Relaxed) {
        let how = OpenHow {
            flags: (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW) as u64,
            mode: 0,
            resolve: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        loop {
            let r = unsafe {
                libc::syscall(
                    libc::SYS_openat2,
                    dirfd,
                    c.as_ptr(),
                    &how as *const OpenHow,
                    std::mem::size_of::<OpenHow>(),
                )
            };
            if r >= 0 {
                return Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) });
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
                Some(libc::ENOSYS) | Some(libc::EPERM) => {
                    // EPERM: seccomp filters in some containers.
                    OPENAT2_MISSING.store(true, Ordering::Relaxed);
                    break;
                }
                _ => return Err(e),
            }
        }
    }
    // Component by component, never following a symlink.
    let comps: Vec<&[u8]> = rel.split(|b| *b == b'/').collect();
    let mut cur: Option<OwnedFd> = None;
    for (i, comp) in comps.iter().enumerate() {
        let last = i + 1 == comps.len();
        let cc = check_name(comp)?;
        let fl = if last {
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC
        } else {
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC
        };
        let base = cur.as_ref().map(|f| f.as_raw_fd()).unwrap_or(dirfd);
        let fd = cvt_retry(|| unsafe { libc::openat(base, cc.as_ptr(), fl) })?;
        cur = Some(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    cur.ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
}

/// A replica root: an open directory handle and the host path it came from.
#[derive(Debug)]
pub struct Root {
    dir: Dir,
    path: PathBuf,
    stat: Stat,
    /// This process holds the root's lock ([`Root::try_lock`]): it is the
    /// run writing into it, so the directories it opens may be repaired
    /// (see [`Dir::repairs`]).
    locked: std::sync::atomic::AtomicBool,
    /// Flushes asked for at once are served together.
    flushes: flush::FlushGroup,
}

impl Root {
    /// Open an existing directory as a root (the host path itself may contain
    /// symlinks: that is the user's choice).
    pub fn open(path: &Path) -> io::Result<Root> {
        let c = cstr(path.as_os_str().as_bytes())?;
        let fd = cvt_retry(|| unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        let dir = Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            at_start: true,
            repair: false,
        };
        let stat = fstat(dir.fd.as_fd())?;
        Ok(Root {
            dir,
            path: path.to_path_buf(),
            stat,
            locked: Default::default(),
            flushes: Default::default(),
        })
    }

    /// Open `path`, creating it (and missing parents) first if needed.
    pub fn create(path: &Path) -> io::Result<Root> {
        if std::fs::symlink_metadata(path).is_err() {
            std::fs::create_dir_all(path)?;
        }
        Root::open(path)
    }

    /// Open the directory `rel` under `base` as a root, never through a
    /// symlink below `base` (a root confined to a tree: a restricted key,
    /// a daemon module), creating missing directories when `create`.
    pub fn open_beneath(base: &Path, rel: &RelPath, create: bool) -> io::Result<Root> {
        let top = Root::open(base)?;
        let mut dir = top.dir;
        for name in rel.components() {
            dir = match dir.open_subdir(name) {
                Err(e) if create && e.raw_os_error() == Some(libc::ENOENT) => {
                    match dir.mkdir(name, 0o755) {
                        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
                        _ => dir.open_subdir(name)?,
                    }
                }
                r => r?,
            };
        }
        let stat = fstat(dir.fd.as_fd())?;
        let mut path = base.to_path_buf();
        for name in rel.components() {
            path.push(std::ffi::OsStr::from_bytes(name));
        }
        Ok(Root {
            dir,
            path,
            stat,
            locked: Default::default(),
            flushes: Default::default(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes an exclusive advisory lock on the root directory for as long as
    /// this handle lives, so two runs never write into one root at once.
    /// `Ok(false)` when another process holds it. Once locked, the
    /// directories opened through this root may be repaired (see
    /// [`Dir::repairs`]); a root that is not (a dry run, a source) is never
    /// changed that way.
    pub fn try_lock(&self) -> io::Result<bool> {
        if unsafe { libc::flock(self.dir.raw(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            self.locked
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            Ok(false)
        } else {
            Err(e)
        }
    }

    /// The root directory itself.
    pub fn dir(&self) -> &Dir {
        &self.dir
    }

    /// Identity of the root: (device, inode).
    pub fn identity(&self) -> (u64, u64) {
        (self.stat.dev, self.stat.ino)
    }

    /// Open the directory `rel` (never through a symlink).
    pub fn open_dir(&self, rel: &RelPath) -> io::Result<Dir> {
        let repair = self.locked.load(std::sync::atomic::Ordering::Relaxed);
        if rel.is_root() {
            let mut d = self.dir.try_clone()?;
            d.repair = repair;
            return Ok(d);
        }
        let fd = open_beneath(
            self.dir.fd.as_raw_fd(),
            rel.as_bytes(),
            libc::O_RDONLY | libc::O_DIRECTORY,
        )?;
        Ok(Dir {
            fd,
            at_start: true,
            repair,
        })
    }

    /// Open a regular file `rel` for reading (never through a symlink).
    pub fn open_file(&self, rel: &RelPath) -> io::Result<File> {
        let fd = open_beneath(
            self.dir.fd.as_raw_fd(),
            rel.as_bytes(),
            libc::O_RDONLY | libc::O_NOCTTY,
        )?;
        Ok(File::from(fd))
    }

    /// True when the root is on a disk file system the local kernel keeps
    /// (ext2/3/4, XFS, Btrfs, F2FS, tmpfs): there a directory's ctime moves
    /// with every change of its names the moment it happens, which the
    /// listing memo relies on. Network and FUSE file systems are not.
    pub fn is_local_disk_fs(&self) -> bool {
        const LOCAL: [i64; 5] = [
            0xEF53,      // ext2, ext3, ext4
            0x5846_5342, // XFS
            0x9123_683E, // Btrfs
            0xF2F5_2010, // F2FS
            0x0102_1994, // tmpfs
        ];
        let mut sf: libc::statfs = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::fstatfs(self.dir.fd.as_raw_fd(), &mut sf) };
        r == 0 && LOCAL.contains(&(sf.f_type as i64))
    }

    /// Flush the whole file system holding this root (`syncfs`): what this
    /// thread wrote before the call is durable when it returns `Ok`. Calls
    /// made while a flush runs share the next one (see `flush`).
    pub fn syncfs(&self) -> io::Result<()> {
        let fd = self.dir.fd.as_raw_fd();
        let one = || cvt_retry(|| unsafe { libc::syncfs(fd) }).map(|_| ());
        self.flushes.flush(one)
    }
}

/// An open directory; all operations take a single validated name.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    /// Nothing has read through this descriptor yet, so a listing needs no
    /// rewind (a scan lists every directory once, right after opening it).
    at_start: bool,
    /// See [`Dir::repairs`].
    repair: bool,
}

impl AsFd for Dir {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Which properties to apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PropsMask {
    pub perms: bool,
    pub owner: bool,
    pub times: bool,
    /// Replace the extended attributes (filtered by the filter that scanned them).
    pub xattrs: Option<XattrFilter>,
}

impl Dir {
    pub fn try_clone(&self) -> io::Result<Dir> {
        // A duplicate shares the original's position.
        Ok(Dir {
            fd: self.fd.try_clone()?,
            at_start: false,
            repair: self.repair,
        })
    }

    /// True when this directory was opened through a root this process
    /// holds the lock of (the destination of a run that writes). There a
    /// directory we own but whose mode shuts us out (a copied 000, 0500 or
    /// 0555, when not root) is given back u+rwx when it is in the way:
    /// listed or entered by a scan ([`Dir::open_subdir_to_scan`],
    /// [`Dir::stat_self_to_scan`]) or written into (every call here that
    /// adds or removes a name). Its mode is then what the chmod left, so a
    /// mirror, which sets the properties of every directory whose names or
    /// mode it changed after its contents, sets the source's mode again.
    pub fn repairs(&self) -> bool {
        self.repair
    }

    /// Give this directory u+rwx when it is ours and its mode lacks any of
    /// `need` (owner bits); true if it was changed.
    fn grant_owner(&self, need: u32) -> io::Result<bool> {
        let st = self.stat_self()?;
        if !owned_and_lacking(&st, need) {
            return Ok(false);
        }
        cvt(unsafe { libc::fchmod(self.raw(), (st.mode | 0o700) as libc::mode_t) })?;
        Ok(true)
    }

    /// Run `op`, which adds or removes a name here; on a repairing handle, a
    /// refusal (EACCES) in a directory of ours without u+wx makes it
    /// writable and runs `op` once more.
    fn writing<R>(&self, mut op: impl FnMut() -> io::Result<R>) -> io::Result<R> {
        match op() {
            Err(e)
                if self.repair
                    && e.raw_os_error() == Some(libc::EACCES)
                    && self.grant_owner(0o300).unwrap_or(false) =>
            {
                op()
            }
            r => r,
        }
    }

    /// [`Dir::stat_self`] for a scan: on a repairing handle, a directory of
    /// ours that we may not list or search (no u+r or u+x) is first given
    /// u+rwx, so its entries can be read; the stat is taken after.
    pub fn stat_self_to_scan(&self) -> io::Result<Stat> {
        let st = self.stat_self()?;
        if self.repair && owned_and_lacking(&st, 0o500) && self.grant_owner(0o500)? {
            return self.stat_self();
        }
        Ok(st)
    }

    /// [`Dir::open_subdir`] for a scan: on a repairing handle, a
    /// subdirectory of ours that cannot be opened (EACCES: no u+r) is given
    /// u+rwx first (`fchmodat` by name from this handle, never through a
    /// symlink) and opened again.
    pub fn open_subdir_to_scan(&self, name: &[u8]) -> io::Result<Dir> {
        match self.open_subdir(name) {
            Err(e) if self.repair && e.raw_os_error() == Some(libc::EACCES) => {
                let st = self.stat(name)?;
                if st.kind != Kind::Dir || !owned_and_lacking(&st, 0o400) {
                    return Err(e);
                }
                let c = check_name(name)?;
                cvt(unsafe {
                    libc::fchmodat(
                        self.raw(),
                        c.as_ptr(),
                        (st.mode | 0o700) as libc::mode_t,
                        libc::AT_SYMLINK_NOFOLLOW,
                    )
                })?;
                self.open_subdir(name)
            }
            r => r,
        }
    }

    pub fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// `lstat` of a name in this directory.
    pub fn stat(&self, name: &[u8]) -> io::Result<Stat> {
        with_name(name, |c| {
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            cvt(unsafe {
                libc::fstatat(self.raw(), c.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW)
            })?;
            Stat::from_raw(&st)
        })
    }

    /// Stat of this directory.
    pub fn stat_self(&self) -> io::Result<Stat> {
        fstat(self.fd.as_fd())
    }

    /// Open a regular file for reading (not through a symlink).
    /// Open an existing regular file for reading. O_NONBLOCK so that a fifo
    /// swapped in for the file cannot block the run; anything but a regular
    /// file is refused (on a regular file O_NONBLOCK changes nothing).
    pub fn open_read(&self, name: &[u8]) -> io::Result<File> {
        self.open_read_stat(name).map(|(f, _)| f)
    }

    /// `open_read`, with the stat of the file opened (the one it checks
    /// the kind with: a caller that checks more needs no second one).
    pub fn open_read_stat(&self, name: &[u8]) -> io::Result<(File, Stat)> {
        let c = check_name(name)?;
        let fd = cvt_retry(|| unsafe {
            libc::openat(
                self.raw(),
                c.as_ptr(),
                libc::O_RDONLY
                    | libc::O_NOFOLLOW
                    | libc::O_CLOEXEC
                    | libc::O_NOCTTY
                    | libc::O_NONBLOCK,
            )
        })?;
        let f = unsafe { File::from_raw_fd(fd) };
        let st = fstat(f.as_fd())?;
        if st.kind != Kind::File {
            return Err(io::Error::other("not a regular file"));
        }
        Ok((f, st))
    }

    /// Open an existing regular file for reading and writing (in-place updates).
    pub fn open_rw(&self, name: &[u8]) -> io::Result<File> {
        let c = check_name(name)?;
        let fd = cvt_retry(|| unsafe {
            libc::openat(
                self.raw(),
                c.as_ptr(),
                libc::O_RDWR | libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NOCTTY,
            )
        })?;
        let f = unsafe { File::from_raw_fd(fd) };
        let st = fstat(f.as_fd())?;
        if st.kind != Kind::File {
            return Err(io::Error::other("not a regular file"));
        }
        Ok(f)
    }

    /// Open a subdirectory (not through a symlink).
    pub fn open_subdir(&self, name: &[u8]) -> io::Result<Dir> {
        let c = check_name(name)?;
        let fd = cvt_retry(|| unsafe {
            libc::openat(
                self.raw(),
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            )
        })?;
        Ok(Dir {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            at_start: true,
            repair: self.repair,
        })
    }

    /// A fresh temp name for a file beside `hint` (nothing is made): what
    /// `create_temp` would pick, for a temp whose name must be agreed on
    /// before it is made (`create_temp_named`).
    pub fn new_temp_name(hint: &[u8]) -> Vec<u8> {
        Self::temp_name(hint)
    }

    fn temp_name(hint: &[u8]) -> Vec<u8> {
        let mut n = TEMP_PREFIX.to_vec();
        // Keep a recognisable piece of the target name, bounded.
        let h: Vec<u8> = hint
            .iter()
            .copied()
            .filter(|b| *b != b'/')
            .take(100)
            .collect();
        n.extend_from_slice(&h);
        n.push(b'.');
        n.extend_from_slice(unique_suffix().as_bytes());
        n
    }

    /// Create a new, empty temp file (mode 0600) with a hidden random name.
    pub fn create_temp(&self, hint: &[u8]) -> io::Result<(Vec<u8>, File)> {
        self.writing(|| self.create_temp_once(hint))
    }

    /// Create the empty temp file `name` (mode 0600; a name with the temp
    /// prefix, else an error), or `None` when something is there already.
    pub fn create_temp_named(&self, name: &[u8]) -> io::Result<Option<File>> {
        if !name.starts_with(TEMP_PREFIX) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a temp file's name",
            ));
        }
        let c = check_name(name)?;
        match self.writing(|| self.create_exclusive(&c)) {
            Ok(file) => Ok(Some(file)),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn create_temp_once(&self, hint: &[u8]) -> io::Result<(Vec<u8>, File)> {
        let mut made = None;
        let name = self.make_temp(hint, |c| {
            made = Some(self.create_exclusive(c)?);
            Ok(())
        })?;
        Ok((name, made.expect("made when named")))
    }

    /// Create the empty file `c` (mode 0600), failing if anything is there.
    fn create_exclusive(&self, c: &CStr) -> io::Result<File> {
        let fd = cvt_retry(|| unsafe {
            libc::openat(
                self.raw(),
                c.as_ptr(),
                libc::O_RDWR
                    | libc::O_CREAT
                    | libc::O_EXCL
                    | libc::O_NOFOLLOW
                    | libc::O_CLOEXEC
                    | libc::O_NOCTTY,
                0o600 as libc::c_uint,
            )
        })?;
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Make something under a fresh temp name beside `hint` with `make`,
    /// trying another name while the one picked exists; the name.
    fn make_temp(
        &self,
        hint: &[u8],
        mut make: impl FnMut(&CStr) -> io::Result<()>,
    ) -> io::Result<Vec<u8>> {
        loop {
            let name = Self::temp_name(hint);
            let c = cstr(&name)?;
            match make(&c) {
                Ok(()) => return Ok(name),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Write the in-place marker for `target` (durable when `sync`).
    pub fn create_inplace_marker(&self, target: &[u8], sync: bool) -> io::Result<Vec<u8>> {
        use std::io::Write;
        let mut name = INPLACE_PREFIX.to_vec();
        name.extend_from_slice(unique_suffix().as_bytes());
        let c = cstr(&name)?;
        let fd = self.writing(|| {
            cvt_retry(|| unsafe {
                libc::openat(
                    self.raw(),
                    c.as_ptr(),
                    libc::O_WRONLY
                        | libc::O_CREAT
                        | libc::O_EXCL
                        | libc::O_NOFOLLOW
                        | libc::O_CLOEXEC,
                    0o600 as libc::c_uint,
                )
            })
        })?;
        let mut f = unsafe { File::from_raw_fd(fd) };
        let r = f.write_all(target).and_then(|_| {
            if sync {
                fsync(&f)?;
                self.sync()
            } else {
                Ok(())
            }
        });
        if let Err(e) = r {
            let _ = self.unlink(&name);
            return Err(e);
        }
        Ok(name)
    }

    /// Read a small regular file (markers), never through a symlink.
    pub fn read_small(&self, name: &[u8]) -> io::Result<Vec<u8>> {
        use std::io::Read;
        let mut buf = Vec::new();
        self.open_read(name)?.take(4096).read_to_end(&mut buf)?;
        Ok(buf)
    }

    /// Create a symlink with a temp name.
    pub fn symlink_temp(&self, target: &[u8], hint: &[u8]) -> io::Result<Vec<u8>> {
        let t = cstr(target)?;
        self.make_temp(hint, |c| {
            self.writing(|| cvt(unsafe { libc::symlinkat(t.as_ptr(), self.raw(), c.as_ptr()) }))
                .map(|_| ())
        })
    }

    /// Create a fifo, socket or device node with a temp name.
    pub fn mknod_temp(&self, kind: Kind, rdev: u64, hint: &[u8]) -> io::Result<Vec<u8>> {
        let fmt = match kind {
            Kind::Fifo => libc::S_IFIFO,
            Kind::Socket => libc::S_IFSOCK,
            Kind::CharDev => libc::S_IFCHR,
            Kind::BlockDev => libc::S_IFBLK,
            _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
        };
        self.make_temp(hint, |c| {
            self.writing(|| {
                cvt(unsafe { libc::mknodat(self.raw(), c.as_ptr(), fmt | 0o600, rdev) })
            })
            .map(|_| ())
        })
    }

    /// Create an empty directory (mode 0700) with a temp name: given its
    /// properties there and renamed into place, a new directory never
    /// shows at its name with other permissions than its own.
    pub fn mkdir_temp(&self, hint: &[u8]) -> io::Result<Vec<u8>> {
        self.make_temp(hint, |c| {
            self.writing(|| cvt(unsafe { libc::mkdirat(self.raw(), c.as_ptr(), 0o700) }))
                .map(|_| ())
        })
    }

    /// Remove our temp `name`: a file, or an empty directory (a directory
    /// temp is renamed into place before anything goes in).
    pub fn remove_temp(&self, name: &[u8]) -> io::Result<()> {
        match self.unlink(name) {
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => self.rmdir(name),
            r => r,
        }
    }

    /// Hard-link `from_dir/from_name` under a temp name in this directory.
    pub fn link_temp(&self, from_dir: &Dir, from_name: &[u8], hint: &[u8]) -> io::Result<Vec<u8>> {
        let f = check_name(from_name)?;
        loop {
            let name = Self::temp_name(hint);
            let c = cstr(&name)?;
            match self.writing(|| {
                cvt(unsafe { libc::linkat(from_dir.raw(), f.as_ptr(), self.raw(), c.as_ptr(), 0) })
            }) {
                Ok(_) => return Ok(name),
                Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Create a directory.
    pub fn mkdir(&self, name: &[u8], mode: u32) -> io::Result<()> {
        let c = check_name(name)?;
        self.writing(|| cvt(unsafe { libc::mkdirat(self.raw(), c.as_ptr(), mode as libc::mode_t) }))
            .map(|_| ())
    }

    /// Atomically rename `from` over `to` within this directory.
    pub fn rename(&self, from: &[u8], to: &[u8]) -> io::Result<()> {
        let f = cstr(from)?;
        let t = check_name(to)?;
        self.writing(|| {
            cvt(unsafe { libc::renameat(self.raw(), f.as_ptr(), self.raw(), t.as_ptr()) })
        })
        .map(|_| ())
    }

    /// Rename `from` to `to` only if `to` does not exist.
    pub fn rename_noreplace(&self, from: &[u8], to: &[u8]) -> io::Result<()> {
        let f = check_name(from)?;
        let t = check_name(to)?;
        self.writing(|| {
            cvt(unsafe {
                libc::renameat2(
                    self.raw(),
                    f.as_ptr(),
                    self.raw(),
                    t.as_ptr(),
                    libc::RENAME_NOREPLACE,
                )
            })
        })
        .map(|_| ())
    }

    /// Move `from` (a single name here, never followed if it is a symlink)
    /// to `to` in the directory `into`, only if `to` does not exist there:
    /// a rename across directories that never replaces anything.
    pub fn rename_into_noreplace(&self, from: &[u8], into: &Dir, to: &[u8]) -> io::Result<()> {
        let f = check_name(from)?;
        let t = check_name(to)?;
        into.writing(|| {
            cvt(unsafe {
                libc::renameat2(
                    self.raw(),
                    f.as_ptr(),
                    into.raw(),
                    t.as_ptr(),
                    libc::RENAME_NOREPLACE,
                )
            })
        })
        .map(|_| ())
    }

    /// Remove a non-directory.
    pub fn unlink(&self, name: &[u8]) -> io::Result<()> {
        let c = cstr(name)?;
        self.writing(|| cvt(unsafe { libc::unlinkat(self.raw(), c.as_ptr(), 0) }))
            .map(|_| ())
    }

    /// Remove an empty directory.
    pub fn rmdir(&self, name: &[u8]) -> io::Result<()> {
        let c = check_name(name)?;
        self.writing(|| cvt(unsafe { libc::unlinkat(self.raw(), c.as_ptr(), libc::AT_REMOVEDIR) }))
            .map(|_| ())
    }

    /// Remove a directory and everything under it (never following symlinks).
    pub fn remove_tree(&self, name: &[u8]) -> io::Result<()> {
        let sub = self.open_subdir(name)?;
        for (child, _) in sub.list()? {
            let st = sub.stat(&child)?;
            if st.kind == Kind::Dir {
                sub.remove_tree(&child)?;
            } else {
                sub.unlink(&child)?;
            }
        }
        self.rmdir(name)
    }

    /// Read a symlink's target.
    pub fn read_link(&self, name: &[u8]) -> io::Result<Vec<u8>> {
        let c = check_name(name)?;
        let mut buf = vec![0u8; 256];
        loop {
            let r = unsafe {
                libc::readlinkat(
                    self.raw(),
                    c.as_ptr(),
                    buf.as_mut_ptr() as *mut libc::c_char,
                    buf.len(),
                )
            };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            let r = r as usize;
            if r < buf.len() {
                buf.truncate(r);
                return Ok(buf);
            }
            if buf.len() >= 1 << 16 {
                return Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG));
            }
            buf.resize(buf.len() * 2, 0);
        }
    }

    /// Names in this directory (without `.` and `..`) with their `d_type`,
    /// read with `getdents64` straight from the handle.
    pub fn list(&self) -> io::Result<Vec<(Vec<u8>, u8)>> {
        // getdents64 reads from the descriptor's position: use a fresh
        // descriptor of the same directory so shared handles stay at 0.
        let fd = cvt_retry(|| unsafe {
            libc::openat(
                self.raw(),
                c".".as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        read_dir_entries(unsafe { OwnedFd::from_raw_fd(fd) }.as_fd())
    }

    /// Like [`Dir::list`], reading through this handle itself (one open
    /// fewer): the exclusive borrow guarantees nobody else moves its position.
    /// Entries come with their inode numbers: (name, d_type, d_ino).
    pub fn list_mut(&mut self) -> io::Result<NameList> {
        if !self.at_start && unsafe { libc::lseek(self.raw(), 0, libc::SEEK_SET) } < 0 {
            return Err(io::Error::last_os_error());
        }
        self.at_start = false;
        read_dir_entries_ino(self.fd.as_fd())
    }

    /// fsync this directory.
    pub fn sync(&self) -> io::Result<()> {
        cvt_retry(|| unsafe { libc::fsync(self.raw()) }).map(|_| ())
    }

    /// Path of `name` through /proc, for the few calls that have no `*at` form
    /// (`l*xattr`). The directory is pinned by its descriptor and the last
    /// component is not followed by the `l*` calls.
    fn proc_path(&self, name: &[u8]) -> io::Result<CString> {
        let mut p = format!("/proc/self/fd/{}/", self.raw()).into_bytes();
        p.extend_from_slice(name);
        cstr(&p)
    }

    /// Extended attributes of a name (not following symlinks).
    pub fn xattrs_at(&self, name: &[u8], filter: XattrFilter) -> io::Result<Vec<Xattr>> {
        if xattr::have_xattrat() {
            let c = check_name(name)?;
            match xattr::list_at(self.raw(), &c, filter) {
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
                r => return r,
            }
        }
        let p = self.proc_path(name)?;
        xattr::list_path(&p, filter)
    }

    /// Apply properties to a non-regular, non-directory entry by name
    /// (symlinks, fifos, sockets, devices), not following symlinks.
    pub fn set_props_at(
        &self,
        name: &[u8],
        kind: Kind,
        props: &Props,
        mask: PropsMask,
    ) -> io::Result<()> {
        let c = cstr(name)?;
        if mask.owner {
            cvt(unsafe {
                libc::fchownat(
                    self.raw(),
                    c.as_ptr(),
                    props.uid,
                    props.gid,
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            })?;
        }
        if let (Some(filter), Some(want)) = (mask.xattrs, props.xattrs.as_ref()) {
            let p = self.proc_path(name)?;
            xattr::replace_path(&p, want, filter, kind == Kind::Symlink)?;
        }
        if mask.perms && kind != Kind::Symlink {
            cvt(unsafe {
                libc::fchmodat(
                    self.raw(),
                    c.as_ptr(),
                    props.mode,
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            })?;
        }
        if mask.times {
            let ts = times(props.mtime);
            cvt(unsafe {
                libc::utimensat(
                    self.raw(),
                    c.as_ptr(),
                    ts.as_ptr(),
                    libc::AT_SYMLINK_NOFOLLOW,
                )
            })?;
        }
        Ok(())
    }
}

fn times(mtime: Time) -> [libc::timespec; 2] {
    [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: mtime.sec,
            tv_nsec: mtime.nsec as i64,
        },
    ]
}

/// Apply properties through an open descriptor (regular files, directories):
/// owner, then xattrs/ACLs (chown may clear some), then mode (chown clears
/// setuid bits), then mtime.
pub fn set_props_fd(fd: BorrowedFd<'_>, props: &Props, mask: PropsMask) -> io::Result<()> {
    let raw = fd.as_raw_fd();
    // An owner already right is left alone, as rsync does: most files are
    // written by their own owner, and a chown costs a journalled inode
    // update (a stat does not).
    let owned = || fstat(fd).is_ok_and(|st| (st.uid, st.gid) == (props.uid, props.gid));
    if mask.owner && !owned() {
        cvt(unsafe { libc::fchown(raw, props.uid, props.gid) })?;
    }
    if let (Some(filter), Some(want)) = (mask.xattrs, props.xattrs.as_ref()) {
        xattr::replace_fd(raw, want, filter)?;
    }
    if mask.perms {
        cvt(unsafe { libc::fchmod(raw, props.mode) })?;
    }
    if mask.times {
        let ts = times(props.mtime);
        cvt(unsafe { libc::futimens(raw, ts.as_ptr()) })?;
    }
    Ok(())
}

/// Map every allocation of 1 MiB or more on its own, so that dropping it
/// gives its memory back to the system. glibc raises its mmap threshold as
/// large blocks are freed (up to 32 MiB); after that such buffers come from
/// arenas, whose freed pages stay resident while other threads allocate
/// elsewhere. Growing a mapped buffer remaps it rather than copying. Call
/// before the process starts any thread.
pub fn map_large_buffers_apart() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

/// Let malloc keep at most one arena per processor (glibc's default is
/// eight per processor). An arena keeps the pages its threads freed, so
/// with a thread per arena a run's resident memory followed its number
/// of threads more than what it held: a mirror of `/usr` (four walk
/// threads, four copy threads) took 31 MB for its initial copy against
/// 26 MB with two arenas, and 15.5 MB with nothing to do against 14.5 MB,
/// in the same time (a run with nothing to do, 7 alternating rounds:
/// 0.985x). Only as many threads run at once as there are processors, so
/// few wait for an arena.
pub fn one_arena_per_core() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if let Ok(n) = std::thread::available_parallelism() {
        let n = libc::c_int::try_from(n.get()).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets an allocator parameter.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, n);
        }
    }
}

/// fsync a file, retrying only on EINTR (a failed fsync is final).
pub fn fsync(f: &File) -> io::Result<()> {
    cvt_retry(|| unsafe { libc::fsync(f.as_raw_fd()) }).map(|_| ())
}

/// Truncate / extend a file.
pub fn set_len(f: &File, len: u64) -> io::Result<()> {
    f.set_len(len)
}

/// The canonical form of a host path (the path itself if it cannot be
/// resolved, e.g. it does not exist yet).
pub fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Read a small host file (tool state such as the deletion guard's memory).
pub fn read_state_file(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    File::open(path)?.take(1 << 16).read_to_end(&mut buf)?;
    Ok(buf)
}

/// Replace a small host file atomically (temp + fsync + rename).
pub fn write_state_file(path: &Path, data: &[u8]) -> io::Result<()> {
    replace_host_file(path, data, true)
}

/// Replace a host file by temp + rename; `sync`: fsync the temp first (a
/// file that may come back empty after a crash can skip it).
pub fn replace_host_file(path: &Path, data: &[u8], sync: bool) -> io::Result<()> {
    use std::io::Write;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension(format!("tmp-{}", random_suffix()));
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)?;
    let r = f
        .write_all(data)
        .and_then(|_| if sync { f.sync_all() } else { Ok(()) });
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    std::fs::rename(&tmp, path)
}
