//! Extended attributes (and so POSIX ACLs, which live in
//! `system.posix_acl_access` / `system.posix_acl_default`).

use accord_model::Xattr;
use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

const ACL_ACCESS: &[u8] = b"system.posix_acl_access";
const ACL_DEFAULT: &[u8] = b"system.posix_acl_default";

/// Which attributes a scan reads and a mirror replaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XattrFilter {
    /// Plain extended attributes (user.*, trusted.*, security.*).
    pub xattrs: bool,
    /// POSIX ACLs.
    pub acls: bool,
    /// Of the plain attributes, only the user.* namespace: a two-way sync
    /// keeps people's attributes in agreement, not each host's own
    /// (security.* holds SELinux labels and file capabilities, trusted.*
    /// the administrator's), which it must neither copy nor remove.
    pub user_only: bool,
}

impl XattrFilter {
    /// No attribute at all.
    pub const NONE: XattrFilter = XattrFilter {
        xattrs: false,
        acls: false,
        user_only: false,
    };

    pub fn any(&self) -> bool {
        self.xattrs || self.acls
    }
    pub fn keeps(&self, name: &[u8]) -> bool {
        if name == ACL_ACCESS || name == ACL_DEFAULT {
            self.acls
        } else {
            // Like rsync -X: user.*, trusted.*, security.*; system.* names
            // other than the ACLs are kernel-managed.
            self.xattrs
                && !name.starts_with(b"system.")
                && (!self.user_only || name.starts_with(b"user."))
        }
    }
}

enum Target<'a> {
    Fd(RawFd),
    Path(&'a CString),
    /// Directory handle + name, through listxattrat/getxattrat (Linux 6.13).
    At(RawFd, &'a CString),
}

#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]
const SYS_GETXATTRAT: libc::c_long = 464;
#[cfg(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
))]
const SYS_LISTXATTRAT: libc::c_long = 465;
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
)))]
const SYS_GETXATTRAT: libc::c_long = -1;
#[cfg(not(any(
    target_arch = "x86_64",
    target_arch = "aarch64",
    target_arch = "riscv64"
)))]
const SYS_LISTXATTRAT: libc::c_long = -1;

#[repr(C)]
struct XattrArgs {
    value: u64,
    size: u32,
    flags: u32,
}

static XATTRAT_MISSING: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(SYS_LISTXATTRAT < 0);

/// True when the kernel has the `*xattrat` calls (checked on first use).
pub(crate) fn have_xattrat() -> bool {
    !XATTRAT_MISSING.load(std::sync::atomic::Ordering::Relaxed)
}

fn note_enosys(r: isize) -> isize {
    // EPERM too: seccomp filters in containers answer unknown calls so.
    // Falling back to the /proc path is always correct, only slower.
    if r < 0
        && matches!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::ENOSYS) | Some(libc::EPERM)
        )
    {
        XATTRAT_MISSING.store(true, std::sync::atomic::Ordering::Relaxed);
        unsafe { *libc::__errno_location() = libc::ENOSYS };
    }
    r
}

fn list_names(t: &Target) -> io::Result<Vec<Vec<u8>>> {
    let mut buf = vec![0u8; 256];
    loop {
        let r = unsafe {
            match t {
                Target::Fd(fd) => {
                    libc::flistxattr(*fd, buf.as_mut_ptr() as *mut libc::c_char, buf.len())
                }
                Target::Path(p) => {
                    libc::llistxattr(p.as_ptr(), buf.as_mut_ptr() as *mut libc::c_char, buf.len())
                }
                Target::At(dfd, name) => note_enosys(libc::syscall(
                    SYS_LISTXATTRAT,
                    *dfd,
                    name.as_ptr(),
                    libc::AT_SYMLINK_NOFOLLOW as libc::c_uint,
                    buf.as_mut_ptr(),
                    buf.len(),
                ) as isize),
            }
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::ERANGE) => {
                    if buf.len() > 1 << 20 {
                        return Err(e);
                    }
                    let n = buf.len() * 4;
                    buf.resize(n, 0);
                    continue;
                }
                Some(libc::ENOTSUP) => return Ok(Vec::new()),
                _ => return Err(e),
            }
        }
        buf.truncate(r as usize);
        return Ok(buf
            .split(|b| *b == 0)
            .filter(|n| !n.is_empty())
            .map(|n| n.to_vec())
            .collect());
    }
}

fn get_value(t: &Target, name: &CString) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    loop {
        let r = unsafe {
            match t {
                Target::Fd(fd) => libc::fgetxattr(
                    *fd,
                    name.as_ptr(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                ),
                Target::Path(p) => libc::lgetxattr(
                    p.as_ptr(),
                    name.as_ptr(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                ),
                Target::At(dfd, path) => {
                    let mut args = XattrArgs {
                        value: buf.as_mut_ptr() as u64,
                        size: buf.len() as u32,
                        flags: 0,
                    };
                    note_enosys(libc::syscall(
                        SYS_GETXATTRAT,
                        *dfd,
                        path.as_ptr(),
                        libc::AT_SYMLINK_NOFOLLOW as libc::c_uint,
                        name.as_ptr(),
                        &mut args as *mut XattrArgs,
                        std::mem::size_of::<XattrArgs>(),
                    ) as isize)
                }
            }
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::ERANGE) && buf.len() <= 1 << 20 {
                let n = buf.len() * 4;
                buf.resize(n, 0);
                continue;
            }
            return Err(e);
        }
        buf.truncate(r as usize);
        return Ok(buf);
    }
}

fn list(t: &Target, filter: XattrFilter) -> io::Result<Vec<Xattr>> {
    if !filter.any() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for name in list_names(t)? {
        if !filter.keeps(&name) {
            continue;
        }
        let c =
            CString::new(name.clone()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        match get_value(t, &c) {
            Ok(v) => out.push((name, v)),
            Err(e) if e.raw_os_error() == Some(libc::ENODATA) => {}
            Err(e) => return Err(e),
        }
    }
    out.sort();
    Ok(out)
}

pub(crate) fn list_fd(fd: RawFd, filter: XattrFilter) -> io::Result<Vec<Xattr>> {
    list(&Target::Fd(fd), filter)
}

pub(crate) fn list_path(p: &CString, filter: XattrFilter) -> io::Result<Vec<Xattr>> {
    list(&Target::Path(p), filter)
}

/// List through `listxattrat`; `Err(ENOSYS)` when the kernel lacks it.
pub(crate) fn list_at(dfd: RawFd, name: &CString, filter: XattrFilter) -> io::Result<Vec<Xattr>> {
    list(&Target::At(dfd, name), filter)
}

fn replace(t: &Target, want: &[Xattr], filter: XattrFilter, is_symlink: bool) -> io::Result<()> {
    if !filter.any() {
        return Ok(());
    }
    let have = list(t, filter)?;
    for (name, _) in &have {
        if !want.iter().any(|(n, _)| n == name) {
            let c = CString::new(name.clone())
                .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            let r = unsafe {
                match t {
                    Target::Fd(fd) => libc::fremovexattr(*fd, c.as_ptr()),
                    Target::Path(p) | Target::At(_, p) => {
                        libc::lremovexattr(p.as_ptr(), c.as_ptr())
                    }
                }
            };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::ENODATA) {
                    return Err(e);
                }
            }
        }
    }
    for (name, value) in want {
        if !filter.keeps(name) {
            continue;
        }
        if have.iter().any(|(n, v)| n == name && v == value) {
            continue;
        }
        if is_symlink && name.starts_with(b"user.") {
            // Linux refuses user.* on symlinks; nothing to copy.
            continue;
        }
        let c =
            CString::new(name.clone()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let r = unsafe {
            match t {
                Target::Fd(fd) => libc::fsetxattr(
                    *fd,
                    c.as_ptr(),
                    value.as_ptr() as *const libc::c_void,
                    value.len(),
                    0,
                ),
                Target::Path(p) | Target::At(_, p) => libc::lsetxattr(
                    p.as_ptr(),
                    c.as_ptr(),
                    value.as_ptr() as *const libc::c_void,
                    value.len(),
                    0,
                ),
            }
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

pub(crate) fn replace_fd(fd: RawFd, want: &[Xattr], filter: XattrFilter) -> io::Result<()> {
    replace(&Target::Fd(fd), want, filter, false)
}

pub(crate) fn replace_path(
    p: &CString,
    want: &[Xattr],
    filter: XattrFilter,
    is_symlink: bool,
) -> io::Result<()> {
    replace(&Target::Path(p), want, filter, is_symlink)
}
