//! Lower hard links, as overlayfs does them with `index=on`: names that share one file show as
//! one union inode, and copying one of them up keeps the others linked to the copy.
//!
//! One inode: a lookup that finds a regular file with more than one link joins the node of any
//! other name of the same branch file (same device and inode) that the kernel still holds, as
//! an alias (see `Nodes::get_ref_file`), so the kernel sees one st_ino and one set of cached
//! attributes and pages.
//!
//! Copy-up: the copy of such a file is also linked into the index, a hidden directory at the
//! root of the upper branch (`whiteout::INDEX_DIR`), under the lower file's device and inode.
//! The file's other names are linked to that entry instead of being copied: those the kernel
//! holds at once, the others when they are next looked up, changed or removed. All names keep
//! showing the same data, across remounts. The copy carries `LINKS_XATTR`, the number of lower
//! names not linked up yet, so st_nlink is the copy's own count, less the index's link, plus
//! those (the xattr is hidden from the union's own xattr calls). A lower name of such a file
//! removed before any copy-up is copied up first (as overlayfs does), so the count stays right.
//!
//! Limits:
//! - The index is keyed by device and inode number: a lower file system that comes back under
//!   another device number starts a new index (names copied up before go their own ways), and
//!   an inode number the lower file system reuses for another file with several names (only
//!   if the read-only branch is changed behind the union's back) is taken for the old file.
//! - Only the current upper branch's index is used: after a snapshot, a name not linked up
//!   before it shows the lower data again until it is changed.
//! - Removing one lower name of a big file with several names copies its data up, under the
//!   namespace lock (no pre-copy as for opens and renames).

use std::ffi::OsStr;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use fuser::FileAttr;

use super::{attr_of, Errno, Op, R};
use crate::merge::{Kind, MergedEntry};
use crate::sys::{self, Stat};
use crate::whiteout::INDEX_DIR;

/// On a copy in the upper branch that is in the index: how many names of its lower file have
/// not been linked to it yet (decimal).
const LINKS_XATTR: &str = "trusted.accord.lower-links";

/// Extended attributes of ours, which the union neither shows nor lets callers change.
pub(super) fn is_private_xattr(name: &OsStr) -> bool {
    name.as_bytes().starts_with(b"trusted.accord.")
}

/// A regular file with more than one name: the (device, inode) that ties its names together.
pub(super) fn link_key(st: &Stat) -> Option<(u64, u64)> {
    (st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_nlink > 1)
        .then_some((st.st_dev, st.st_ino))
}

/// The link count of `st` (nlink_t is u32 on some targets).
#[allow(clippy::useless_conversion)]
fn links(st: &Stat) -> u64 {
    u64::from(st.st_nlink)
}

/// The index entry of lower file `key`, relative to the upper branch.
fn index_rel(key: (u64, u64)) -> PathBuf {
    Path::new(INDEX_DIR).join(format!("{:x}-{:x}", key.0, key.1))
}

fn read_links(abs: &Path) -> Option<u64> {
    parse_links(&sys::lgetxattr(abs, OsStr::new(LINKS_XATTR)).ok()?)
}

fn parse_links(v: &[u8]) -> Option<u64> {
    std::str::from_utf8(v).ok()?.parse().ok()
}

fn write_links(abs: &Path, n: u64) -> std::io::Result<()> {
    sys::lsetxattr(abs, OsStr::new(LINKS_XATTR), n.to_string().as_bytes(), 0)
}

impl Op<'_> {
    /// The attributes the union shows for `st`, the file of inode `ino`: st_nlink counts the
    /// names of an indexed copy as the union shows them (not the index's own link).
    pub(super) fn attr(&self, ino: u64, st: &Stat) -> FileAttr {
        let mut a = attr_of(ino, st);
        if let Some(n) = link_key(st).and_then(|_| self.pending_links(ino, st)) {
            a.nlink = (links(st) - 1 + n).min(u32::MAX as u64) as u32;
        }
        a
    }

    /// How many names the file open as `h` has left once its union name went (`st`: its
    /// attributes): a file of the upper branch, or of a pool, has the branch's count (an
    /// indexed copy less its index link, plus the lower names still to link to it); a lower
    /// file hidden by a whiteout has those of its copy in the index, if another of its names
    /// still shows it, else none (its own names in the read-only branch no longer show).
    pub(super) fn names_left(&self, h: &super::Handle, st: &Stat) -> u32 {
        let upper = self.table.upper().map(|u| self.table.get(u).id);
        let n = if self.pool().is_some() || upper == Some(h.branch_id) {
            let pending = sys::fgetxattr_max(h.file.as_raw_fd(), OsStr::new(LINKS_XATTR), 32);
            match pending.and_then(|v| parse_links(&v)) {
                Some(p) if links(st) > 0 => links(st) - 1 + p,
                _ => links(st),
            }
        } else {
            self.indexed_names(st).unwrap_or(0)
        };
        n.min(u32::MAX as u64) as u32
    }

    /// The names of lower file `st` that show its copy in the index (see `names_left`).
    fn indexed_names(&self, st: &Stat) -> Option<u64> {
        let u = self.upper().ok()?;
        let rel = self.index_entry(u, st)?;
        let copy = sys::fstatat(self.fd(u), &rel).ok()?;
        Some(links(&copy) - 1 + read_links(&self.abs(u, &rel)).unwrap_or(0))
    }

    /// `LINKS_XATTR` of the file `st`, if it is the file `ino`'s name shows. (Also on a
    /// read-only branch: a copy frozen by a snapshot keeps its count.)
    fn pending_links(&self, ino: u64, st: &Stat) -> Option<u64> {
        let loc = self.locate(ino).ok()?;
        let b = loc.entry.winner();
        let rel = loc.at(b);
        let here = sys::fstatat(self.fd(b), &rel).ok()?;
        if (here.st_dev, here.st_ino) != (st.st_dev, st.st_ino) {
            return None;
        }
        read_links(&self.abs(b, &rel))
    }

    /// The index entry of lower file `st` in upper branch `u`, if there is one.
    fn index_entry(&self, u: u32, st: &Stat) -> Option<PathBuf> {
        let rel = index_rel(link_key(st)?);
        let entry = sys::fstatat(self.fd(u), &rel).ok()?;
        (entry.st_mode & libc::S_IFMT == libc::S_IFREG).then_some(rel)
    }

    /// After upper file `rel` became the copy of lower file `st`: link it into the index with
    /// the count of the lower names still to link, so they follow the copy. Returns whether it
    /// is indexed; a failure only leaves a copy the other names do not follow (as without an
    /// index).
    pub(super) fn index_copy(&self, u: u32, rel: &Path, st: &Stat) -> bool {
        let Some(key) = link_key(st) else {
            return false;
        };
        let ufd = self.fd(u);
        let abs = self.abs(u, rel);
        let indexed = || -> std::io::Result<()> {
            match sys::mkdirat(ufd, Path::new(INDEX_DIR), 0o700) {
                Err(e) if e.raw_os_error() != Some(libc::EEXIST) => return Err(e),
                _ => {}
            }
            // The other names: the source's own count, which for a copy frozen by a snapshot
            // (it carries our xattr, copied up with it) leaves out its index link.
            let names = match read_links(&abs) {
                Some(pending) => links(st) - 1 + pending,
                None => links(st),
            };
            write_links(&abs, names - 1)?;
            sys::linkat(ufd, rel, &index_rel(key))?;
            super::copyup::sync_dir(ufd, Path::new(INDEX_DIR))
        };
        let ok = indexed().is_ok();
        if !ok {
            let _ = sys::lremovexattr(&abs, OsStr::new(LINKS_XATTR));
        }
        ok
    }

    /// Under the namespace lock: if `name` of `parent` shows a lower file that has an index
    /// entry (another of its names was copied up), link the name to that entry in the upper
    /// branch instead of copying it. Returns whether it did.
    pub(super) fn link_up(&self, parent: u64, name: &OsStr) -> R<bool> {
        let u = self.upper()?;
        let Some(e) = self.child(parent, name)? else {
            return Ok(false);
        };
        let w = e.winner();
        if w <= u || e.kind != Kind::File {
            return Ok(false);
        }
        let rel = self.rel_of(parent, name)?;
        let st = sys::fstatat(self.fd(w), &self.branch_rel(parent, name, w)?).e()?;
        let Some(entry) = self.index_entry(u, &st) else {
            return Ok(false);
        };
        self.ensure_dir_upper(parent)?;
        self.ns_changing();
        sys::linkat(self.fd(u), &entry, &rel).e()?;
        self.view_add_position(parent, name, u);
        let abs = self.abs(u, &entry);
        if let Some(n) = read_links(&abs) {
            let _ = write_links(&abs, n.saturating_sub(1));
        }
        let parent_rel = rel.parent().unwrap_or(Path::new(""));
        super::copyup::sync_dir(self.fd(u), parent_rel).e()?;
        Ok(true)
    }

    /// After node `ino`'s name became upper file `rel` of branch `u` (a copy-up or link-up):
    /// the node is that file now, which the names linked up later find (`Nodes::set_file`).
    pub(super) fn rekey(&self, ino: u64, u: u32, rel: &Path) {
        let st = sys::fstatat(self.fd(u), rel).ok();
        if let Some(key) = st.as_ref().and_then(link_key) {
            self.nodes().set_file(ino, key);
        }
    }

    /// Under the namespace lock: copy up (or link up) `name` of `parent` if it shows a lower
    /// file with other names, as overlayfs does before such a name is removed: the index
    /// then counts the names left. Returns the name's entry as it is then.
    pub(super) fn copy_up_linked(&self, parent: u64, name: &OsStr) -> R<Option<MergedEntry>> {
        let u = self.upper()?;
        let Some(e) = self.child(parent, name)? else {
            return Ok(None);
        };
        if e.kind != Kind::File || e.winner() <= u {
            return Ok(Some(e));
        }
        let st = sys::fstatat(
            self.fd(e.winner()),
            &self.branch_rel(parent, name, e.winner())?,
        )
        .e()?;
        if link_key(&st).is_none() {
            return Ok(Some(e));
        }
        let ino = {
            let mut nodes = self.nodes();
            let ino = nodes.get_or_create(parent, name);
            nodes.make_primary(ino, parent, name);
            ino
        };
        self.copy_up_with(ino, None, None)?;
        self.child(parent, name)
    }

    /// After node `ino` was copied up and indexed: link up its other names the kernel knows
    /// (lower names of the same file), so that whichever of them becomes the node's path
    /// later (when this one is unlinked) names the copy, not the lower file.
    pub(super) fn link_up_aliases(&self, ino: u64) -> R<()> {
        let aliases = self.nodes().aliases(ino);
        for (parent, name) in aliases {
            self.link_up(parent, &name)?;
        }
        Ok(())
    }

    /// For a lookup that found `name` of `parent` in branch `b` with `st`: a lower file with
    /// an index entry is linked up first (see `link_up`), and the upper file's stat returned.
    pub(super) fn follow_index(&self, parent: u64, name: &OsStr, b: u32, st: Stat) -> R<Stat> {
        let Ok(u) = self.upper() else {
            return Ok(st);
        };
        if b <= u || self.index_entry(u, &st).is_none() {
            return Ok(st);
        }
        let _ns = (!super::holds_ns()).then(|| self.ns());
        self.link_up(parent, name)?;
        let e = self.child(parent, name)?.ok_or(libc::ENOENT)?;
        sys::fstatat(
            self.fd(e.winner()),
            &self.branch_rel(parent, name, e.winner())?,
        )
        .e()
    }
}
