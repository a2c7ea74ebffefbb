//! A pool's control file, as mergerfs has it: `/.mergerfs` at the root of the mount, never
//! listed, whose extended attributes `user.mergerfs.KEY` read and set the pool's options while
//! it is mounted (`getfattr -n user.mergerfs.category.create /pool/.mergerfs`,
//! `setfattr -n user.mergerfs.category.create -v mfs /pool/.mergerfs`: the categories, each
//! function's policy as `func.NAME`, `minfreespace`, `moveonenospc`, and the branch list), so
//! scripts written for mergerfs keep working. It belongs to the user who mounted, mode 0644: the kernel lets only
//! that user (and root) set attributes.

use std::ffi::OsStr;
use std::time::UNIX_EPOCH;

use fuser::{FileAttr, FileType};

use super::{Op, R, ROOT};

/// The control file's inode number (the node table counts up from 2 and never gets here).
pub(crate) const CONTROL_INO: u64 = u64::MAX - 1;

const NAME: &str = ".mergerfs";
const PREFIX: &str = "user.mergerfs.";

/// The keys besides the policies' (`crate::pool::Policies::get`): the branch list, which can
/// be set, and the read-only ones.
const BRANCHES: &str = "branches";
const READ_ONLY: [&str; 2] = ["pid", "version"];

/// Every key, in the order the listing gives them.
fn keys() -> Vec<String> {
    let categories = ["category.create", "category.action", "category.search"];
    let mut out: Vec<String> = categories.iter().map(|k| k.to_string()).collect();
    out.extend(crate::pool::func_keys());
    for k in ["minfreespace", "moveonenospc", BRANCHES]
        .iter()
        .chain(&READ_ONLY)
    {
        out.push(k.to_string());
    }
    out
}

impl Op<'_> {
    /// `name` in directory `parent` is a pool's control file.
    pub(super) fn is_control(&self, parent: u64, name: &OsStr) -> bool {
        parent == ROOT && name == NAME && self.shared.pool.is_some()
    }

    pub(super) fn control_attr(&self) -> FileAttr {
        // SAFETY: geteuid and getegid have no preconditions.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        FileAttr {
            ino: fuser::INodeNo(CONTROL_INO),
            size: 0,
            blocks: 0,
            atime: UNIX_EPOCH,
            mtime: UNIX_EPOCH,
            ctime: UNIX_EPOCH,
            crtime: UNIX_EPOCH,
            kind: FileType::RegularFile,
            perm: 0o644,
            nlink: 1,
            uid,
            gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        }
    }

    pub(super) fn control_getxattr(&self, name: &OsStr) -> R<Vec<u8>> {
        let key = control_key(name)?;
        let p = self.pool().ok_or(libc::ENODATA)?;
        let value = match key {
            "pid" => Some(std::process::id().to_string()),
            "version" => Some(env!("CARGO_PKG_VERSION").to_string()),
            BRANCHES => Some(self.branch_list()),
            k => p.get(k),
        };
        value.map(String::into_bytes).ok_or(libc::ENODATA)
    }

    /// `DIR=MODE[,SIZE]:…`, mergerfs's spelling of the branch list (the current one: this
    /// request's table may predate a change made by the request before).
    fn branch_list(&self) -> String {
        let table = super::lock(&self.shared.table).clone();
        let list: Vec<String> = table.branches.iter().map(|b| b.mergerfs_spec()).collect();
        list.join(":")
    }

    pub(super) fn control_listxattr(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for key in keys() {
            out.extend_from_slice(format!("{PREFIX}{key}\0").as_bytes());
        }
        out
    }

    /// Set one option, or change the branch list; EINVAL for a value the option does not
    /// take (as mergerfs answers, also for a key that is only read).
    pub(super) fn control_setxattr(&self, name: &OsStr, value: &[u8]) -> R<()> {
        let key = control_key(name)?;
        if READ_ONLY.contains(&key) {
            return Err(libc::EINVAL);
        }
        let value = std::str::from_utf8(value).map_err(|_| libc::EINVAL)?;
        if key == BRANCHES {
            return self.control_set_branches(value.trim_end_matches('\0'));
        }
        let pool = self.shared.pool.as_ref().ok_or(libc::ENODATA)?;
        let mut p = super::lock(pool);
        let mut changed = *p;
        match changed.set(key, value.trim_end_matches('\0')) {
            Ok(true) => {
                *p = changed;
                Ok(())
            }
            _ => Err(libc::EINVAL),
        }
    }

    /// `user.mergerfs.branches` set (see `control::change_branches`); the kernel is told to
    /// forget what it cached from the old list by another thread, as this one must answer
    /// first.
    fn control_set_branches(&self, value: &str) -> R<()> {
        crate::control::change_branches(&self.shared, value).map_err(|_| libc::EINVAL)?;
        let shared = self.shared.clone();
        std::thread::spawn(move || crate::forget_cached(&shared));
        Ok(())
    }
}

/// The option an attribute name of the control file names (ENODATA for any other name).
fn control_key(name: &OsStr) -> R<&str> {
    let key = (name.to_str())
        .and_then(|n| n.strip_prefix(PREFIX))
        .ok_or(libc::ENODATA)?;
    match keys().iter().any(|k| k == key) {
        true => Ok(key),
        false => Err(libc::ENODATA),
    }
}
