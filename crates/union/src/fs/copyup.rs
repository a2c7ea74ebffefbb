//! Copy-up: bringing a name from a lower branch into the upper (highest writable) branch
//! before it is changed, so read-only branches are never touched.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::{Errno, Op, State, R, ROOT};
use crate::merge::Kind;
use crate::sys;
use crate::whiteout;

/// `rel`, or `.` for the branch root (`""`).
fn dot(rel: &Path) -> &Path {
    if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    }
}

/// fsync directory `rel` of a branch (`""` is its root).
pub(super) fn sync_dir(branch: i32, rel: &Path) -> std::io::Result<()> {
    sys::openat(branch, dot(rel), libc::O_RDONLY | libc::O_DIRECTORY, 0)?.sync_all()
}

/// Flags to open an upper copy with for an open that asked for `flags` (creation is ours).
fn branch_open_flags(flags: i32) -> i32 {
    flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOCTTY)
}

/// Files at least this long are copied before the namespace lock is taken (`Op::precopy`);
/// smaller ones copy in less time than the extra opens and checks cost.
const PRECOPY_MIN: i64 = 1 << 20;

/// A lower file's data, copied up to a temporary file without the namespace lock. Unless it
/// was renamed into place, the temporary file is removed when this is dropped.
pub(super) struct Precopy<'a> {
    src: u32,
    upper: u32,
    rel: PathBuf,
    stamp: sys::Stamp,
    /// The upper directory holding the temporary file `name`: the file's own directory if it
    /// was in the upper branch already, else the branch root (`at_root`).
    dir: File,
    name: OsString,
    at_root: bool,
    file: Option<File>,
    placed: bool,
    _busy: Busy<'a>,
}

impl Drop for Precopy<'_> {
    fn drop(&mut self) {
        if !self.placed {
            let _ = sys::unlinkat(self.dir.as_raw_fd(), Path::new(&self.name), false);
        }
    }
}

/// A file being pre-copied (see `State::copying`); released when dropped.
pub(super) struct Busy<'a> {
    state: &'a State,
    ino: u64,
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        super::lock(&self.state.copying).remove(&self.ino);
        self.state.copied.notify_all();
    }
}

impl Op<'_> {
    /// Make directory `ino` exist in the upper branch (creating its missing ancestors first),
    /// with the mode, owner, times and xattrs of the copy the union shows. Returns the upper
    /// branch index. Only with the namespace lock held.
    pub(super) fn ensure_dir_upper(&self, ino: u64) -> R<u32> {
        if self.pool().is_some() {
            // A pool copies nothing up; its creates choose a branch (`pool.rs`).
            return Err(libc::EROFS);
        }
        let u = self.upper()?;
        self.ensure_dir_in(ino, u, None)?;
        Ok(u)
    }

    /// Make directory `ino` exist in writable branch `u` (its missing ancestors first), with
    /// the metadata of its copy in branch `from` (a pool clones a path from one branch, as
    /// mergerfs does), or else of the copy the union shows. Only with the namespace lock held.
    pub(super) fn ensure_dir_in(&self, ino: u64, u: u32, from: Option<u32>) -> R<()> {
        let view = self.ensure_view(ino)?;
        if view.layers.contains(&u) {
            return Ok(());
        }
        let layers = view.layers.clone();
        if ino == ROOT {
            // The root of the upper branch is hidden by an opaque root above it.
            return Err(libc::EROFS);
        }
        let src = from.filter(|b| layers.contains(b)).unwrap_or(layers[0]);
        let (parent, name) = self.nodes().entry(ino).ok_or(libc::ENOENT)?;
        self.ensure_dir_in(parent, u, from)?;
        let rel = self.path(ino)?;
        // (Elsewhere in a lower branch when the directory is under a redirect.)
        let src_rel = view.path_in(src, &rel);
        let st = sys::fstatat(self.fd(src), &src_rel).e()?;
        let ufd = self.fd(u);
        // Build under a temporary name and rename, so a half-made directory (wrong owner or
        // mode) is never visible.
        let parent_rel = rel.parent().unwrap_or(Path::new("")).to_path_buf();
        let tmp = self.temp_rel(&parent_rel);
        let build = || -> std::io::Result<()> {
            sys::mkdirat(ufd, &tmp, 0o700)?;
            sys::lchown(ufd, &tmp, st.st_uid, st.st_gid)?;
            sys::chmodat(ufd, &tmp, st.st_mode & 0o7777)?;
            sys::copy_xattrs(&self.abs(src, &src_rel), &self.abs(u, &tmp))?;
            super::redirect::drop_copied(&self.abs(u, &tmp))?;
            let (a, m) = sys::stat_times(&st);
            sys::utimensat(ufd, &tmp, a, m)?;
            self.ns_changing();
            sys::renameat(ufd, &tmp, &rel, libc::RENAME_NOREPLACE)?;
            sync_dir(ufd, &parent_rel)
        };
        if let Err(e) = build() {
            let _ = sys::unlinkat(ufd, &tmp, true);
            if e.raw_os_error() != Some(libc::EEXIST) {
                return Err(sys::errno(&e));
            }
            // Someone created it meanwhile (directly in the branch): use theirs.
        }
        self.view_add_position(parent, &name, u);
        self.edit_view(ino, |v| {
            if let Err(i) = v.layers.binary_search(&u) {
                v.layers.insert(i, u);
            }
        });
        Ok(())
    }

    /// For an open with O_TRUNC (`flags`) of regular file `ino` on a read-only branch: copy
    /// it up without its data (which the open would throw away) and open the copy with
    /// `flags` before it takes the file's name, so a failed open leaves the union unchanged.
    /// None if no copy-up was needed. Only with the namespace lock held.
    pub(super) fn copy_up_truncated(&self, ino: u64, flags: i32) -> R<Option<(u32, File)>> {
        let loc = self.locate(ino)?;
        if loc.entry.kind != Kind::File || self.table.get(loc.entry.winner()).writable() {
            return Ok(None);
        }
        Ok(match self.copy_up_with(ino, None, Some(flags))? {
            (u, Some(f)) => Some((u, f)),
            (_, None) => None,
        })
    }

    /// Copy non-directory `ino` up into the upper branch unless it already lives there.
    /// Atomic: the copy is complete (data, owner, mode, xattrs, times, fsynced) under a hidden
    /// temporary name before it is renamed over its final name. Only with the namespace lock
    /// held. Uses the data `pre` copied without the lock if it is still the file's; with
    /// `truncated_open`, a regular file is copied without its data and opened with those
    /// flags (see `copy_up_truncated`).
    pub(super) fn copy_up_with(
        &self,
        ino: u64,
        pre: Option<Precopy<'_>>,
        truncated_open: Option<i32>,
    ) -> R<(u32, Option<File>)> {
        if self.pool().is_some() {
            // A pool changes files where they are; one on a read-only branch stays as it is.
            return Err(libc::EROFS);
        }
        let loc = self.locate(ino)?;
        let (parent, name) = self.nodes().entry(ino).ok_or(libc::ENOENT)?;
        let u = self.ensure_dir_upper(parent)?;
        let src = loc.entry.winner();
        if src == u {
            return Ok((u, None));
        }
        if src < u {
            // A read-only branch above every writable one: a copy below it would stay hidden.
            return Err(libc::EROFS);
        }
        if loc.entry.kind == Kind::Dir {
            return Ok((self.ensure_dir_upper(ino)?, None));
        }
        let ufd = self.fd(u);
        // Another name of the same lower file was copied up already: link to that copy.
        if self.link_up(parent, &name)? {
            self.rekey(ino, u, &loc.rel);
            self.link_up_aliases(ino)?;
            let opened = truncated_open
                .map(|flags| sys::openat(ufd, &loc.rel, branch_open_flags(flags), 0))
                .transpose()
                .e()?;
            return Ok((u, opened));
        }
        let sfd = self.fd(src);
        let rel = loc.rel.clone();
        // The source's own path (another one in a redirected directory).
        let src_rel = loc.at(src);
        let st = sys::fstatat(sfd, &src_rel).e()?;
        let parent_rel = rel.parent().unwrap_or(Path::new("")).to_path_buf();
        // The data copied before the lock was taken counts only if it is still this file's
        // (same branch and path, the source unchanged since: inode, mtime, ctime) and its
        // temporary file can be renamed into place (still in this directory, or at the root
        // of the same mount). A stale one is dropped here, which removes its file.
        let mut pre = pre.filter(|p| {
            p.src == src
                && p.upper == u
                && p.rel == rel
                && p.stamp == sys::stamp(&st)
                && self.placeable(p, &parent_rel)
        });
        let tmp = match &pre {
            Some(p) if p.at_root => PathBuf::from(&p.name),
            Some(p) => parent_rel.join(&p.name),
            None => self.temp_rel(&parent_rel),
        };
        let copied = pre.as_mut().and_then(|p| p.file.take());
        let src_abs = self.abs(src, &src_rel);
        let tmp_abs = self.abs(u, &tmp);
        let build = || -> std::io::Result<Option<File>> {
            let mut opened = None;
            match st.st_mode & libc::S_IFMT {
                libc::S_IFREG => {
                    let d = match copied {
                        Some(d) => d,
                        None => {
                            let d = sys::openat(
                                ufd,
                                &tmp,
                                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                                0o600,
                            )?;
                            if truncated_open.is_none() {
                                let s = sys::open_noatime(sfd, &src_rel, libc::O_RDONLY)?;
                                sys::copy_data(&s, &d)?;
                            }
                            d
                        }
                    };
                    // SAFETY: d is a valid descriptor. Owner before mode: chown clears set-id.
                    unsafe {
                        if libc::fchown(d.as_raw_fd(), st.st_uid, st.st_gid) != 0
                            || libc::fchmod(d.as_raw_fd(), st.st_mode & 0o7777) != 0
                        {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    sys::copy_xattrs(&src_abs, &tmp_abs)?;
                    let (a, m) = sys::stat_times(&st);
                    sys::utimensat(ufd, &tmp, a, m)?;
                    d.sync_all()?;
                    if let Some(flags) = truncated_open {
                        opened = Some(sys::openat(ufd, &tmp, branch_open_flags(flags), 0)?);
                    }
                }
                libc::S_IFLNK => {
                    let target = sys::readlinkat(sfd, &src_rel)?;
                    sys::symlinkat(&target, ufd, &tmp)?;
                    sys::lchown(ufd, &tmp, st.st_uid, st.st_gid)?;
                    sys::copy_xattrs(&src_abs, &tmp_abs)?;
                    let (a, m) = sys::stat_times(&st);
                    sys::utimensat(ufd, &tmp, a, m)?;
                }
                _ => {
                    sys::mknodat(ufd, &tmp, st.st_mode, st.st_rdev)?;
                    sys::lchown(ufd, &tmp, st.st_uid, st.st_gid)?;
                    sys::chmodat(ufd, &tmp, st.st_mode & 0o7777)?;
                    sys::copy_xattrs(&src_abs, &tmp_abs)?;
                    let (a, m) = sys::stat_times(&st);
                    sys::utimensat(ufd, &tmp, a, m)?;
                }
            }
            // Only now does the name change (to the copy): lookups and opens that resolved it
            // meanwhile try again.
            self.ns_changing();
            sys::renameat(ufd, &tmp, &rel, 0)?;
            Ok(opened)
        };
        let opened = match build() {
            Ok(f) => f,
            Err(e) => {
                let _ = sys::unlinkat(ufd, &tmp, false);
                return Err(sys::errno(&e));
            }
        };
        // The lower file's other names follow this copy (`index.rs`); indexed only once it has
        // its name, so a failed copy-up never leaves an entry behind.
        if self.index_copy(u, &rel, &st) {
            self.rekey(ino, u, &rel);
            self.link_up_aliases(ino)?;
        } else {
            // The names no longer share data: one inode each (overlayfs without index).
            self.nodes().split_aliases(ino);
        }
        // The copy has the name now, whatever follows: the view says so.
        if let Some(p) = &mut pre {
            p.placed = true;
        }
        self.view_add_position(parent, &name, u);
        // The new name is durable too, not only the data behind it.
        sync_dir(ufd, &parent_rel).e()?;
        Ok((u, opened))
    }

    /// Whether changing `ino` needs a copy-up first (its winning copy is on a read-only
    /// branch). Errors say no: the request then fails quickly by itself.
    pub(super) fn needs_copy_up(&self, ino: u64) -> bool {
        self.locate(ino)
            .is_ok_and(|l| !self.table.get(l.entry.winner()).writable())
    }

    /// `writable_branch_for`, taking the namespace lock only when a copy-up is needed (for
    /// requests that do not hold it already).
    pub(super) fn writable_branch(&self, ino: u64) -> R<u32> {
        let loc = self.locate(ino)?;
        let w = loc.entry.winner();
        if self.table.get(w).writable() {
            return Ok(w);
        }
        if self.pool().is_some() {
            return Err(libc::EROFS);
        }
        // A big file's data is copied before the namespace lock is taken, so the union's
        // other changes (creates, unlinks, renames, attribute changes) do not wait for it.
        let pre = self.precopy(ino);
        let _ns = self.ns();
        self.writable_branch_with(ino, pre)
    }

    /// Copy up for a data or metadata change: only names on read-only branches move; a file on
    /// a lower writable branch is changed where it is (Unionfs's rule). Only with the namespace
    /// lock held.
    pub(super) fn writable_branch_for(&self, ino: u64) -> R<u32> {
        self.writable_branch_with(ino, None)
    }

    fn writable_branch_with(&self, ino: u64, pre: Option<Precopy<'_>>) -> R<u32> {
        let loc = self.locate(ino)?;
        let w = loc.entry.winner();
        if self.table.get(w).writable() {
            // (Copied up by another request meanwhile: `pre` is dropped.)
            return Ok(w);
        }
        if self.pool().is_some() {
            return Err(libc::EROFS);
        }
        if loc.entry.kind == Kind::Dir {
            return self.ensure_dir_upper(ino);
        }
        Ok(self.copy_up_with(ino, pre, None)?.0)
    }

    /// Without the namespace lock: copy the data of regular file `ino` (if on a read-only
    /// branch and at least `PRECOPY_MIN` long) to a hidden temporary file in the upper branch
    /// and make it durable. `copy_up_with` then only finishes it under the lock (owner, mode,
    /// xattrs, times, rename into place), or drops it if the file changed meanwhile. One
    /// request at a time pre-copies a file; the others wait for it and then find the file
    /// copied up. Any failure here just means the copy is made under the lock as before.
    pub(super) fn precopy(&self, ino: u64) -> Option<Precopy<'_>> {
        if self.pool().is_some() {
            return None;
        }
        let u = self.upper().ok()?;
        // A stat first: most copy-ups are of small files, which need nothing opened here.
        let (src, rel, src_rel, st) = self
            .resolved(|| {
                let loc = self.locate(ino)?;
                let src = loc.entry.winner();
                let src_rel = loc.at(src);
                let st = sys::fstatat(self.fd(src), &src_rel).e()?;
                Ok((src, loc.rel, src_rel, st))
            })
            .ok()?;
        let big = st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_size >= PRECOPY_MIN;
        if !big || src <= u {
            return None;
        }
        // Opened through the path again: it must still be the file just stat'ed.
        let file = sys::open_noatime(self.fd(src), &src_rel, libc::O_RDONLY).ok()?;
        if sys::fstat(file.as_raw_fd()).ok().map(|s| sys::stamp(&s)) != Some(sys::stamp(&st)) {
            return None;
        }
        let busy = self.busy(ino)?;
        // Next to the file if its directory is in the upper branch already (checked again
        // under the lock), else at the branch root.
        let parent_rel = rel.parent().unwrap_or(Path::new("")).to_path_buf();
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
        let (dir, at_root) = match sys::openat(self.fd(u), dot(&parent_rel), flags, 0) {
            Ok(d) => (d, parent_rel.as_os_str().is_empty()),
            Err(_) => (
                sys::openat(self.fd(u), Path::new("."), flags, 0).ok()?,
                true,
            ),
        };
        let name = self.temp_rel(Path::new("")).into_os_string();
        let create = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        let d = sys::openat(dir.as_raw_fd(), Path::new(&name), create, 0o600).ok()?;
        let mut pre = Precopy {
            src,
            upper: u,
            rel,
            stamp: sys::stamp(&st),
            dir,
            name,
            at_root,
            file: None,
            placed: false,
            _busy: busy,
        };
        // On failure `pre` is dropped, which removes the temporary file. A source changed
        // while it was copied (behind the union's back) is not used.
        sys::copy_data(&file, &d).and_then(|_| d.sync_data()).ok()?;
        let after = sys::fstat(file.as_raw_fd()).ok()?;
        if sys::stamp(&after) != pre.stamp {
            return None;
        }
        pre.file = Some(d);
        Some(pre)
    }

    /// Wait while another request pre-copies `ino`, then claim it; None if another did (the
    /// file is then copied up, or the caller copies it under the lock).
    fn busy(&self, ino: u64) -> Option<Busy<'_>> {
        let mut copying = super::lock(&self.copying);
        let mut waited = false;
        while copying.contains(&ino) {
            copying = self.copied.wait(copying).unwrap_or_else(|e| e.into_inner());
            waited = true;
        }
        if waited {
            return None;
        }
        copying.insert(ino);
        Some(Busy { state: self, ino })
    }

    /// Under the lock: `p`'s temporary file can be renamed to a name in upper directory
    /// `parent_rel` (it is that directory, or the root on the same mount).
    fn placeable(&self, p: &Precopy<'_>, parent_rel: &Path) -> bool {
        let (Ok(here), Ok(there)) = (
            sys::fstat(p.dir.as_raw_fd()),
            sys::fstatat(self.fd(p.upper), dot(parent_rel)),
        ) else {
            return false;
        };
        // One mount, not only one file system: a bind mount inside the branch would refuse
        // the rename (EXDEV).
        let same_mount = match (
            sys::mount_id(p.dir.as_raw_fd(), Path::new("")),
            sys::mount_id(self.fd(p.upper), dot(parent_rel)),
        ) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        };
        same_mount && here.st_dev == there.st_dev && (p.at_root || here.st_ino == there.st_ino)
    }

    /// Checks and preparation before creating `name` in directory `parent`: the name must be
    /// free and not reserved; the directory is copied up (in a pool: the branch is the one the
    /// create policy of `f` chooses). Returns (upper, rel path of the new name).
    pub(super) fn prepare_create(
        &self,
        parent: u64,
        name: &OsStr,
        f: crate::pool::CreateFn,
    ) -> R<(u32, super::Rel)> {
        if whiteout::is_reserved(name) {
            return Err(libc::EINVAL);
        }
        let view = self.ensure_view(parent)?;
        if view.entries.contains_key(name) || self.is_control(parent, name) {
            return Err(libc::EEXIST);
        }
        let u = match self.pool() {
            Some(p) => self.pool_create_branch(parent, &p, f)?,
            // (The view says when the directory is there already: the common case.)
            None if self.table.upper().is_some_and(|u| view.layers.contains(&u)) => self.upper()?,
            None => self.ensure_dir_upper(parent)?,
        };
        Ok((u, self.child_path(parent, name)?))
    }

    /// Whether the upper branch holds a whiteout for `name` in `parent` (the name was deleted
    /// while a lower branch still has it).
    pub(super) fn has_whiteout(&self, u: u32, parent: u64, name: &OsStr) -> R<bool> {
        let wh = self.path(parent)?.join(whiteout::whiteout_for(name));
        Ok(sys::fstatat(self.fd(u), &wh).is_ok())
    }

    /// Hide `name` of `parent` in every branch below the upper one. The whiteout is left in
    /// place when the name is created again (it hides only lower branches), so a later delete
    /// cannot resurrect the old lower copy.
    pub(super) fn write_whiteout(&self, parent: u64, name: &OsStr) -> R<()> {
        let u = self.ensure_dir_upper(parent)?;
        let wh = self.path(parent)?.join(whiteout::whiteout_for(name));
        match sys::openat(self.fd(u), &wh, libc::O_WRONLY | libc::O_CREAT, 0o600) {
            Ok(_) => Ok(()),
            Err(e) => Err(sys::errno(&e)),
        }
    }

    /// New objects belong to the caller (the daemon runs as root); in a set-group-ID
    /// directory the group comes from the directory, as the kernel would do it.
    pub(super) fn own(&self, u: u32, rel: &Path, uid: u32, gid: u32) -> R<()> {
        // The common case (root creating as root) needs no chown: the kernel already applied
        // the set-group-ID rule of the directory.
        if (uid, gid) == daemon_ids() {
            return Ok(());
        }
        let parent_rel = dot(rel.parent().unwrap_or(Path::new("")));
        let gid = match sys::fstatat(self.fd(u), parent_rel) {
            Ok(st) if st.st_mode & libc::S_ISGID != 0 => st.st_gid,
            _ => gid,
        };
        sys::lchown(self.fd(u), rel, uid, gid).e()
    }
}

/// The daemon's effective user and group, read once: they never change while it serves, and
/// asking the kernel on every create cost two system calls per request.
fn daemon_ids() -> (u32, u32) {
    static IDS: std::sync::OnceLock<(u32, u32)> = std::sync::OnceLock::new();
    // SAFETY: geteuid and getegid have no preconditions.
    *IDS.get_or_init(|| unsafe { (libc::geteuid(), libc::getegid()) })
}
