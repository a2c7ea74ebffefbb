//! Extended attributes, read from the winning copy and written after a copy-up.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::index::is_private_xattr;
use super::pool_control::CONTROL_INO;
use super::{Errno, Op, R};
use crate::sys;

impl Op<'_> {
    pub(super) fn do_getxattr(&self, ino: u64, name: &OsStr) -> R<Vec<u8>> {
        if ino == CONTROL_INO {
            return self.control_getxattr(name);
        }
        if is_private_xattr(name) {
            return Err(libc::ENODATA);
        }
        self.resolved(|| {
            let loc = self.locate(ino)?;
            sys::lgetxattr(&self.abs(loc.entry.winner(), loc.winner_rel()), name).e()
        })
    }

    pub(super) fn do_listxattr(&self, ino: u64) -> R<Vec<u8>> {
        if ino == CONTROL_INO {
            return Ok(self.control_listxattr());
        }
        self.resolved(|| {
            let loc = self.locate(ino)?;
            let list = sys::llistxattr(&self.abs(loc.entry.winner(), loc.winner_rel())).e()?;
            // (A list of NUL-terminated names.)
            let shown = list.split_inclusive(|&c| c == 0).filter(|n| {
                !is_private_xattr(OsStr::from_bytes(n.strip_suffix(&[0]).unwrap_or(n)))
            });
            Ok(shown.flatten().copied().collect())
        })
    }

    // Changes copy up first (which takes the namespace lock by itself), then resolve the
    // path and change the file under the lock, so a rename cannot aim them at another file.

    pub(super) fn do_setxattr(&self, ino: u64, name: &OsStr, value: &[u8], flags: i32) -> R<()> {
        if ino == CONTROL_INO {
            return self.control_setxattr(name, value);
        }
        if is_private_xattr(name) {
            return Err(libc::EPERM);
        }
        if let Some(p) = self.pool() {
            let _ns = self.ns();
            let set = |b, rel: &Path| sys::lsetxattr(&self.abs(b, rel), name, value, flags).e();
            return self.pool_act(ino, p.action(crate::pool::ActionFn::Setxattr), set);
        }
        self.writable_branch(ino)?;
        let _ns = self.ns();
        let b = self.writable_branch_for(ino)?;
        let rel = self.path(ino)?;
        sys::lsetxattr(&self.abs(b, &rel), name, value, flags).e()
    }

    pub(super) fn do_removexattr(&self, ino: u64, name: &OsStr) -> R<()> {
        if ino == CONTROL_INO {
            return Err(libc::EPERM);
        }
        if is_private_xattr(name) {
            return Err(libc::EPERM);
        }
        // Fail early without copying up when there is nothing to remove.
        self.do_getxattr(ino, name)?;
        if let Some(p) = self.pool() {
            let _ns = self.ns();
            let remove = |b, rel: &Path| sys::lremovexattr(&self.abs(b, rel), name).e();
            return self.pool_act(ino, p.action(crate::pool::ActionFn::Removexattr), remove);
        }
        self.writable_branch(ino)?;
        let _ns = self.ns();
        let b = self.writable_branch_for(ino)?;
        let rel = self.path(ino)?;
        sys::lremovexattr(&self.abs(b, &rel), name).e()
    }
}
