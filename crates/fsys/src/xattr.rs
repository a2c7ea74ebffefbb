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
}

impl XattrFilter {
    pub fn any(&self) -> bool {
        self.xattrs || self.acls
    }
    pub fn keeps(&self, name: &[u8]) -> bool {
        if name == ACL_ACCESS || name == ACL_DEFAULT {
            self.acls
        } else {
            // Never copy SELinux labels or other LSM state across systems
            // implicitly? We copy them like rsync -X does, except these
            // kernel-managed names that cannot be set.
            self.xattrs && !name.starts_with(b"system.")
        }
    }
}

enum Target<'a> {
    Fd(RawFd),
    Path(&'a CString),
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
        let c = CString::new(name.clone()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
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

fn replace(t: &Target, want: &[Xattr], filter: XattrFilter, is_symlink: bool) -> io::Result<()> {
    if !filter.any() {
        return Ok(());
    }
    let have = list(t, filter)?;
    for (name, _) in &have {
        if !want.iter().any(|(n, _)| n == name) {
            let c = CString::new(name.clone()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
            let r = unsafe {
                match t {
                    Target::Fd(fd) => libc::fremovexattr(*fd, c.as_ptr()),
                    Target::Path(p) => libc::lremovexattr(p.as_ptr(), c.as_ptr()),
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
        let c = CString::new(name.clone()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        let r = unsafe {
            match t {
                Target::Fd(fd) => libc::fsetxattr(
                    *fd,
                    c.as_ptr(),
                    value.as_ptr() as *const libc::c_void,
                    value.len(),
                    0,
                ),
                Target::Path(p) => libc::lsetxattr(
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
