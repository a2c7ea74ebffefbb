//! mergerfs's `moveonenospc` in a pool: a write that finds its branch full moves the file to
//! another branch (the one the option's policy chooses, by default the one with the most free
//! space) and the write goes on there.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use super::{Errno, Handle, Op, R};
use crate::pool::{choose_create, Policies};
use crate::sys;

impl Op<'_> {
    /// Move the file behind open handle `fh` off its full branch: copied (data, mode, owner,
    /// times, xattrs) under a hidden name, renamed into place on the new branch, the old copy
    /// removed, and the handle reopened there. Returns the handle to write through; the
    /// caller answers ENOSPC on any error.
    pub(super) fn move_full_file(&self, fh: u64, p: &Policies) -> R<Arc<Handle>> {
        let policy = p.move_on_enospc.ok_or(libc::ENOSPC)?;
        let _ns = self.ns();
        let h = self.handle(fh)?;
        let from = (self.table.branches.iter())
            .position(|b| b.id == h.branch_id)
            .ok_or(libc::ENOSPC)? as u32;
        let (parent, _) = self.nodes().entry(h.ino).ok_or(libc::ENOSPC)?;
        let rel = self.path(h.ino)?;
        let others: Vec<_> = (0..self.table.branches.len() as u32)
            .filter(|&b| b != from)
            .map(|b| self.candidate(b, true, p.min_free))
            .collect();
        let to = choose_create(policy, &[others], &mut super::pool::draw)?;
        self.ensure_dir_in(parent, to, Some(from))?;
        self.ns_changing();
        self.copy_to_branch(from, to, &rel)?;
        // The old copy goes only once the new one holds the name.
        sys::unlinkat(self.fd(from), &rel, false).e()?;
        let flags = super::file::branch_flags(h.flags) & !libc::O_TRUNC;
        let file = sys::openat(self.fd(to), &rel, flags, 0).e()?;
        let moved = Arc::new(Handle {
            file,
            ino: h.ino,
            branch_id: self.table.get(to).id,
            flags: h.flags,
            passthrough: AtomicBool::new(false),
        });
        self.handles_w().insert(fh, moved.clone());
        self.forget_view(parent);
        Ok(moved)
    }

    /// Copy file `rel` of branch `from` to the same path in branch `to` (its directory
    /// exists there), atomically: built under a hidden name, then renamed.
    fn copy_to_branch(&self, from: u32, to: u32, rel: &Path) -> R<()> {
        let src = sys::open_noatime(self.fd(from), rel, libc::O_RDONLY).e()?;
        let st = sys::fstat(src.as_raw_fd()).e()?;
        let tmp = self.temp_rel(rel.parent().unwrap_or(Path::new("")));
        let (tfd, create) = (self.fd(to), libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL);
        let build = || -> std::io::Result<()> {
            let dst = sys::openat(tfd, &tmp, create, 0o600)?;
            sys::copy_data(&src, &dst)?;
            sys::lchown(tfd, &tmp, st.st_uid, st.st_gid)?;
            sys::chmodat(tfd, &tmp, st.st_mode & 0o7777)?;
            sys::copy_xattrs(&self.abs(from, rel), &self.abs(to, &tmp))?;
            let (a, m) = sys::stat_times(&st);
            sys::utimensat(tfd, &tmp, a, m)?;
            sys::renameat(tfd, &tmp, rel, 0)
        };
        build().map_err(|e| {
            let _ = sys::unlinkat(tfd, &tmp, false);
            sys::errno(&e)
        })
    }
}
