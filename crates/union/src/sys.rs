//! Thin, safe wrappers over the *at() system calls the union needs.
//!
//! Every path here is relative to a branch's directory handle and never absolute; the last
//! component is never followed when it is a symlink (the union presents symlinks, it does not
//! chase them inside branches).

use std::ffi::{CString, OsStr, OsString};
use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use crate::merge::Kind;

pub type Stat = libc::stat;

/// A path the kernel takes (shorter than PATH_MAX): `rel` under `dir` as it is, or, for a
/// longer one, its last part under a handle on the directories before it. A union path can be
/// deeper than any caller's: a caller's path is relative to its working directory, the
/// branch's from its root.
struct At {
    dir: RawFd,
    path: CPath,
    _held: Option<OwnedFd>,
}

/// Paths shorter than this are made C strings on the stack.
const SHORT_PATH: usize = 256;

/// A path as a C string: on the stack when it is short, as almost every branch path is, so a
/// system call through the union allocates nothing for its path. (The short form is large on
/// purpose: a `CPath` lives on the stack for one call.)
#[allow(clippy::large_enum_variant)]
enum CPath {
    Short([u8; SHORT_PATH]),
    Long(CString),
}

impl CPath {
    fn new(bytes: &[u8]) -> io::Result<CPath> {
        if bytes.len() < SHORT_PATH {
            return CPath::short(bytes);
        }
        if bytes.contains(&0) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        Ok(CPath::Long(
            CString::new(bytes).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?,
        ))
    }

    /// `new` of a path shorter than `SHORT_PATH`. Always inlined, so that the buffer is
    /// filled where the caller keeps it instead of being moved there (every system call on a
    /// path makes one).
    #[inline(always)]
    fn short(bytes: &[u8]) -> io::Result<CPath> {
        if bytes.contains(&0) {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let mut buf = [0u8; SHORT_PATH];
        buf[..bytes.len()].copy_from_slice(bytes);
        Ok(CPath::Short(buf))
    }

    fn as_ptr(&self) -> *const libc::c_char {
        match self {
            CPath::Short(buf) => buf.as_ptr().cast(),
            CPath::Long(c) => c.as_ptr(),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            CPath::Short(buf) => &buf[..buf.iter().position(|&b| b == 0).unwrap_or(0)],
            CPath::Long(c) => c.as_bytes(),
        }
    }
}

/// `rel` under `dir` as an `At` whose path is shorter than `limit` bytes.
fn at_within(dir: RawFd, rel: &Path, limit: usize) -> io::Result<At> {
    let mut rest = rel.as_os_str().as_bytes();
    let mut held: Option<OwnedFd> = None;
    let mut cur = dir;
    while rest.len() >= limit {
        // The longest leading part that ends at a separator and fits (a single name longer
        // than that cannot exist).
        let cut = (rest[..limit].iter().rposition(|&b| b == b'/'))
            .filter(|&i| i > 0)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENAMETOOLONG))?;
        let lead =
            CString::new(&rest[..cut]).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: valid C string; the descriptor is owned below.
        let fd = cvt(unsafe { libc::openat(cur, lead.as_ptr(), flags) })?;
        // SAFETY: a fresh descriptor of ours.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        cur = fd.as_raw_fd();
        held = Some(fd);
        let next = rest[cut..].iter().position(|&b| b != b'/');
        rest = &rest[cut + next.unwrap_or(rest.len() - cut)..];
    }
    Ok(At {
        dir: cur,
        path: CPath::new(rest)?,
        _held: held,
    })
}

/// `at_within` the kernel's limit; a short path (almost all are) is made inline (see
/// `CPath::short`).
#[inline(always)]
fn at(dir: RawFd, rel: &Path) -> io::Result<At> {
    let bytes = rel.as_os_str().as_bytes();
    if bytes.len() < SHORT_PATH {
        return Ok(At {
            dir,
            path: CPath::short(bytes)?,
            _held: None,
        });
    }
    at_within(dir, rel, libc::PATH_MAX as usize)
}

/// `f` of `rel` under `dir` as `at` makes it (the directory and a C string), with a short
/// path's C string made in this frame: the hottest calls (fstatat, openat, unlinkat) then
/// copy the path once, where an `At` returned by value is moved (and copied) on its way.
#[inline(always)]
fn with_at<T>(
    dir: RawFd,
    rel: &Path,
    f: impl FnOnce(RawFd, *const libc::c_char) -> T,
) -> io::Result<T> {
    let bytes = rel.as_os_str().as_bytes();
    if bytes.len() >= SHORT_PATH {
        let c = at_within(dir, rel, libc::PATH_MAX as usize)?;
        return Ok(f(c.dir, c.path.as_ptr()));
    }
    if bytes.contains(&0) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut buf = [0u8; SHORT_PATH];
    buf[..bytes.len()].copy_from_slice(bytes);
    Ok(f(dir, buf.as_ptr().cast()))
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub fn errno(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

pub fn fstatat(dir: RawFd, rel: &Path) -> io::Result<Stat> {
    let mut st = MaybeUninit::<Stat>::uninit();
    // SAFETY: valid C string and out pointer.
    cvt(with_at(dir, rel, |dir, path| unsafe {
        libc::fstatat(dir, path, st.as_mut_ptr(), libc::AT_SYMLINK_NOFOLLOW)
    })?)?;
    // SAFETY: fstatat succeeded and filled the struct.
    Ok(unsafe { st.assume_init() })
}

/// The id of the mount `rel` of `dir` is on (`""`: `dir` itself), from statx.
pub fn mount_id(dir: RawFd, rel: &Path) -> io::Result<u64> {
    let c = at(dir, rel)?;
    let mut stx = MaybeUninit::<libc::statx>::uninit();
    let flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH;
    // SAFETY: valid C string and out pointer.
    cvt(unsafe {
        libc::statx(
            c.dir,
            c.path.as_ptr(),
            flags,
            libc::STATX_MNT_ID,
            stx.as_mut_ptr(),
        )
    })?;
    // SAFETY: statx succeeded and filled the struct.
    let stx = unsafe { stx.assume_init() };
    if stx.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    Ok(stx.stx_mnt_id)
}

pub fn fstat(fd: RawFd) -> io::Result<Stat> {
    let mut st = MaybeUninit::<Stat>::uninit();
    // SAFETY: out pointer is valid.
    cvt(unsafe { libc::fstat(fd, st.as_mut_ptr()) })?;
    // SAFETY: fstat succeeded.
    Ok(unsafe { st.assume_init() })
}

pub fn openat(dir: RawFd, rel: &Path, flags: i32, mode: u32) -> io::Result<File> {
    let flags = flags | libc::O_CLOEXEC | libc::O_NOFOLLOW;
    // SAFETY: valid C string; the returned fd is owned by the File.
    let fd = cvt(with_at(dir, rel, |dir, path| unsafe {
        libc::openat(dir, path, flags, mode as libc::c_uint)
    })?)?;
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Open for reading without touching atime when allowed, so reading through the union never
/// changes a read-only branch (O_NOATIME needs ownership or CAP_FOWNER; fall back quietly).
pub fn open_noatime(dir: RawFd, rel: &Path, flags: i32) -> io::Result<File> {
    match openat(dir, rel, flags | libc::O_NOATIME, 0) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => openat(dir, rel, flags, 0),
        r => r,
    }
}

pub fn mkdirat(dir: RawFd, rel: &Path, mode: u32) -> io::Result<()> {
    let c = at(dir, rel)?;
    // SAFETY: valid C string.
    cvt(unsafe { libc::mkdirat(c.dir, c.path.as_ptr(), mode as libc::mode_t) }).map(drop)
}

pub fn mknodat(dir: RawFd, rel: &Path, mode: u32, rdev: u64) -> io::Result<()> {
    let c = at(dir, rel)?;
    // SAFETY: valid C string.
    cvt(unsafe {
        libc::mknodat(
            c.dir,
            c.path.as_ptr(),
            mode as libc::mode_t,
            rdev as libc::dev_t,
        )
    })
    .map(drop)
}

pub fn symlinkat(target: &OsStr, dir: RawFd, rel: &Path) -> io::Result<()> {
    let t =
        CString::new(target.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let c = at(dir, rel)?;
    // SAFETY: valid C strings.
    cvt(unsafe { libc::symlinkat(t.as_ptr(), c.dir, c.path.as_ptr()) }).map(drop)
}

pub fn readlinkat(dir: RawFd, rel: &Path) -> io::Result<OsString> {
    let c = at(dir, rel)?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: buffer is valid for its length.
    let n = unsafe { libc::readlinkat(c.dir, c.path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    buf.truncate(n as usize);
    Ok(OsString::from_vec(buf))
}

pub fn linkat(dir: RawFd, from: &Path, to: &Path) -> io::Result<()> {
    let a = at(dir, from)?;
    let b = at(dir, to)?;
    // SAFETY: valid C strings.
    cvt(unsafe { libc::linkat(a.dir, a.path.as_ptr(), b.dir, b.path.as_ptr(), 0) }).map(drop)
}

pub fn unlinkat(dir: RawFd, rel: &Path, is_dir: bool) -> io::Result<()> {
    let flags = if is_dir { libc::AT_REMOVEDIR } else { 0 };
    // SAFETY: valid C string.
    cvt(with_at(dir, rel, |dir, path| unsafe {
        libc::unlinkat(dir, path, flags)
    })?)
    .map(drop)
}

pub fn renameat(dir: RawFd, from: &Path, to: &Path, flags: u32) -> io::Result<()> {
    let a = at(dir, from)?;
    let b = at(dir, to)?;
    // SAFETY: valid C strings.
    cvt(unsafe { libc::renameat2(a.dir, a.path.as_ptr(), b.dir, b.path.as_ptr(), flags) }).map(drop)
}

pub fn lchown(dir: RawFd, rel: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let c = at(dir, rel)?;
    // SAFETY: valid C string.
    cvt(unsafe { libc::fchownat(c.dir, c.path.as_ptr(), uid, gid, libc::AT_SYMLINK_NOFOLLOW) })
        .map(drop)
}

pub fn chmodat(dir: RawFd, rel: &Path, mode: u32) -> io::Result<()> {
    let c = at(dir, rel)?;
    // SAFETY: valid C string. (Linux cannot chmod a symlink; callers never ask.)
    cvt(unsafe { libc::fchmodat(c.dir, c.path.as_ptr(), mode as libc::mode_t, 0) }).map(drop)
}

/// `None` leaves a time unchanged; `Some(None)` sets it to now.
pub type TimeSpec = Option<Option<(i64, i64)>>;

fn timespec(t: TimeSpec) -> libc::timespec {
    match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(None) => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_NOW,
        },
        Some(Some((s, ns))) => libc::timespec {
            tv_sec: s,
            tv_nsec: ns,
        },
    }
}

pub fn utimensat(dir: RawFd, rel: &Path, atime: TimeSpec, mtime: TimeSpec) -> io::Result<()> {
    let c = at(dir, rel)?;
    let ts = [timespec(atime), timespec(mtime)];
    // SAFETY: valid C string and two timespecs.
    cvt(unsafe {
        libc::utimensat(
            c.dir,
            c.path.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
    .map(drop)
}

pub fn stat_times(st: &Stat) -> (TimeSpec, TimeSpec) {
    (
        Some(Some((st.st_atime, st.st_atime_nsec))),
        Some(Some((st.st_mtime, st.st_mtime_nsec))),
    )
}

pub fn fstatvfs(fd: RawFd) -> io::Result<libc::statvfs> {
    let mut s = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: out pointer valid.
    cvt(unsafe { libc::fstatvfs(fd, s.as_mut_ptr()) })?;
    // SAFETY: fstatvfs succeeded.
    Ok(unsafe { s.assume_init() })
}

pub fn kind_of_mode(mode: u32) -> Kind {
    match mode & libc::S_IFMT {
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        libc::S_IFIFO => Kind::Fifo,
        libc::S_IFCHR => Kind::Char,
        libc::S_IFBLK => Kind::Block,
        libc::S_IFSOCK => Kind::Socket,
        _ => Kind::File,
    }
}

/// What identifies one state of a directory: inode, mtime and ctime. Any change of its
/// entries moves mtime; ctime guards against a touch that sets mtime back.
pub type Stamp = (u64, i64, i64, i64, i64);

pub fn stamp(st: &Stat) -> Stamp {
    (
        st.st_ino,
        st.st_mtime,
        st.st_mtime_nsec,
        st.st_ctime,
        st.st_ctime_nsec,
    )
}

/// List a directory of a branch: (name, kind) without `.` and `..`.
pub fn list_dir(dir: RawFd, rel: &Path) -> io::Result<Vec<(OsString, Kind)>> {
    list_dir_stamped(dir, rel).map(|(v, _)| v)
}

/// A directory's entries, its stamp from before they were read, and the value of the extended
/// attribute asked for (None when it has none, or one longer than asked for).
pub type Listing = (Vec<(OsString, Kind)>, Stamp, Option<Vec<u8>>);

/// List a directory and return the stamp it had before it was read.
pub fn list_dir_stamped(dir: RawFd, rel: &Path) -> io::Result<(Vec<(OsString, Kind)>, Stamp)> {
    list_dir_with(dir, rel, None).map(|(v, st, _)| (v, st))
}

/// `list_dir_stamped`, also reading extended attribute `xattr` (at most `max` bytes) from the
/// open directory, which costs less than a lookup of its path again.
pub fn list_dir_with(
    dir: RawFd,
    rel: &Path,
    xattr: Option<(&OsStr, usize)>,
) -> io::Result<Listing> {
    let f = open_noatime(dir, rel, libc::O_RDONLY | libc::O_DIRECTORY)?;
    let st = stamp(&fstat(f.as_raw_fd())?);
    let value = xattr.and_then(|(name, max)| fgetxattr_max(f.as_raw_fd(), name, max));
    let fd: OwnedFd = f.into();
    let raw = fd.as_raw_fd();
    // SAFETY: fdopendir takes ownership of the descriptor on success; we release ours first.
    let dirp = unsafe { libc::fdopendir(raw) };
    if dirp.is_null() {
        return Err(io::Error::last_os_error());
    }
    std::mem::forget(fd);
    let mut out = Vec::new();
    loop {
        // SAFETY: dirp is a valid DIR*; readdir64 returns NULL at the end.
        let ent = unsafe { libc::readdir64(dirp) };
        if ent.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated inside the entry.
        let (name, dtype) = unsafe {
            let e = &*ent;
            (
                std::ffi::CStr::from_ptr(e.d_name.as_ptr())
                    .to_bytes()
                    .to_vec(),
                e.d_type,
            )
        };
        if name == b"." || name == b".." {
            continue;
        }
        let kind = match dtype {
            libc::DT_DIR => Kind::Dir,
            libc::DT_REG => Kind::File,
            libc::DT_LNK => Kind::Symlink,
            libc::DT_FIFO => Kind::Fifo,
            libc::DT_CHR => Kind::Char,
            libc::DT_BLK => Kind::Block,
            libc::DT_SOCK => Kind::Socket,
            _ => {
                // SAFETY: dirp valid; dirfd gives its descriptor.
                let dfd = unsafe { libc::dirfd(dirp) };
                match fstatat(dfd, Path::new(OsStr::from_bytes(&name))) {
                    Ok(st) => kind_of_mode(st.st_mode),
                    Err(_) => continue,
                }
            }
        };
        out.push((OsString::from_vec(name), kind));
    }
    // SAFETY: dirp valid, closed once.
    unsafe { libc::closedir(dirp) };
    Ok((out, st, value))
}

/// Extended attribute `name` of open file `fd` if it has one of at most `max` bytes.
pub fn fgetxattr_max(fd: RawFd, name: &OsStr, max: usize) -> Option<Vec<u8>> {
    let n = CString::new(name.as_bytes()).ok()?;
    let mut buf = vec![0u8; max];
    // SAFETY: valid descriptor, string and buffer of the stated length.
    let len = unsafe { libc::fgetxattr(fd, n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    buf.truncate(usize::try_from(len).ok()?);
    Some(buf)
}

/// Copy all bytes from `src` to `dst` (in-kernel where the file systems allow it).
pub fn copy_data(src: &File, dst: &File) -> io::Result<()> {
    loop {
        // SAFETY: both descriptors are valid; null offsets use and advance the file positions.
        let n = unsafe {
            libc::copy_file_range(
                src.as_raw_fd(),
                std::ptr::null_mut(),
                dst.as_raw_fd(),
                std::ptr::null_mut(),
                1 << 30,
                0,
            )
        };
        if n == 0 {
            return Ok(());
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EXDEV)
                | Some(libc::EINVAL)
                | Some(libc::ENOSYS)
                | Some(libc::EOPNOTSUPP) => {
                    let mut s = src;
                    let mut d = dst;
                    io::copy(&mut s, &mut d).map(drop)
                }
                _ => Err(e),
            };
        }
    }
}

// Extended attributes go by absolute path (the l* calls never follow a final symlink); a
// branch's path is fixed when it is added.

struct Abs {
    path: CPath,
    _held: Option<OwnedFd>,
}

/// Absolute path `p` as the kernel takes it: as it is, or, when PATH_MAX or longer, through
/// `/proc/self/fd` of a handle on its leading directories (see `At`).
fn abs(p: &Path) -> io::Result<Abs> {
    const PROC_FD: usize = 32; // "/proc/self/fd/" and a descriptor number
    let a = at_within(libc::AT_FDCWD, p, libc::PATH_MAX as usize - PROC_FD)?;
    if a._held.is_none() {
        return Ok(Abs {
            path: a.path,
            _held: None,
        });
    }
    let mut path = format!("/proc/self/fd/{}/", a.dir).into_bytes();
    path.extend_from_slice(a.path.as_bytes());
    Ok(Abs {
        path: CPath::new(&path)?,
        _held: a._held,
    })
}

pub fn llistxattr(p: &Path) -> io::Result<Vec<u8>> {
    let c = abs(p)?;
    loop {
        // SAFETY: size query with a null buffer.
        let n = unsafe { libc::llistxattr(c.path.as_ptr(), std::ptr::null_mut(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; n as usize];
        if n == 0 {
            return Ok(buf);
        }
        // SAFETY: buffer valid for its length.
        let m = unsafe { libc::llistxattr(c.path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if m < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) {
                continue;
            }
            return Err(e);
        }
        buf.truncate(m as usize);
        return Ok(buf);
    }
}

pub fn lgetxattr(p: &Path, name: &OsStr) -> io::Result<Vec<u8>> {
    let c = abs(p)?;
    let n =
        CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    loop {
        // SAFETY: size query.
        let len = unsafe { libc::lgetxattr(c.path.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) };
        if len < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut buf = vec![0u8; len as usize];
        if len == 0 {
            return Ok(buf);
        }
        // SAFETY: buffer valid for its length.
        let m = unsafe {
            libc::lgetxattr(
                c.path.as_ptr(),
                n.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if m < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) {
                continue;
            }
            return Err(e);
        }
        buf.truncate(m as usize);
        return Ok(buf);
    }
}

pub fn lsetxattr(p: &Path, name: &OsStr, value: &[u8], flags: i32) -> io::Result<()> {
    let c = abs(p)?;
    let n =
        CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: valid strings and buffer.
    cvt(unsafe {
        libc::lsetxattr(
            c.path.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    })
    .map(drop)
}

pub fn lremovexattr(p: &Path, name: &OsStr) -> io::Result<()> {
    let c = abs(p)?;
    let n =
        CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: valid strings.
    cvt(unsafe { libc::lremovexattr(c.path.as_ptr(), n.as_ptr()) }).map(drop)
}

/// Copy every extended attribute from `src` to `dst`. Attributes the target file system or our
/// privileges refuse are skipped: the copy-up must not fail on them.
pub fn copy_xattrs(src: &Path, dst: &Path) -> io::Result<()> {
    let list = match llistxattr(src) {
        Ok(l) => l,
        Err(e) if e.raw_os_error() == Some(libc::ENOTSUP) => return Ok(()),
        Err(e) => return Err(e),
    };
    for name in list.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let name = OsStr::from_bytes(name);
        if let Ok(v) = lgetxattr(src, name) {
            match lsetxattr(dst, name, &v, 0) {
                Ok(()) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::ENOTSUP) | Some(libc::EPERM) | Some(libc::EINVAL)
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}
