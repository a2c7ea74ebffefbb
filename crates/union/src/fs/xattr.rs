//! Extended attributes, read from the winning copy and written after a copy-up.

use std::ffi::OsStr;

use super::{Errno, Op, R};
use crate::sys;

impl Op<'_> {
    pub(super) fn do_getxattr(&self, ino: u64, name: &OsStr) -> R<Vec<u8>> {
        self.resolved(|| {
            let loc = self.locate(ino)?;
            sys::lgetxattr(&self.abs(loc.entry.winner(), &loc.rel), name).e()
        })
    }

    pub(super) fn do_listxattr(&self, ino: u64) -> R<Vec<u8>> {
        self.resolved(|| {
            let loc = self.locate(ino)?;
            sys::llistxattr(&self.abs(loc.entry.winner(), &loc.rel)).e()
        })
    }

    // Changes copy up first (which takes the namespace lock by itself), then resolve the
    // path and change the file under the lock, so a rename cannot aim them at another file.

    pub(super) fn do_setxattr(&self, ino: u64, name: &OsStr, value: &[u8], flags: i32) -> R<()> {
        self.writable_branch(ino)?;
        let _ns = self.ns();
        let b = self.writable_branch_for(ino)?;
        let rel = self.path(ino)?;
        sys::lsetxattr(&self.abs(b, &rel), name, value, flags).e()
    }

    pub(super) fn do_removexattr(&self, ino: u64, name: &OsStr) -> R<()> {
        // Fail early without copying up when there is nothing to remove.
        self.do_getxattr(ino, name)?;
        self.writable_branch(ino)?;
        let _ns = self.ns();
        let b = self.writable_branch_for(ino)?;
        let rel = self.path(ino)?;
        sys::lremovexattr(&self.abs(b, &rel), name).e()
    }
}
