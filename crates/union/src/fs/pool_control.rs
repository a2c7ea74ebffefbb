//! A pool's control file, as mergerfs has it: `/.mergerfs` at the root of the mount, never
//! listed, whose extended attributes `user.mergerfs.KEY` read and set the pool's options while
//! it is mounted (`getfattr -n user.mergerfs.category.create /pool/.mergerfs`,
//! `setfattr -n user.mergerfs.category.create -v mfs /pool/.mergerfs`), so scripts written for
//! mergerfs keep working. It belongs to the user who mounted, mode 0644: the kernel lets only
//! that user (and root) set attributes.

use std::ffi::OsStr;
use std::time::UNIX_EPOCH;

use fuser::{FileAttr, FileType};

use super::{Op, R, ROOT};

/// The control file's inode number (the node table counts up from 2 and never gets here).
pub(crate) const CONTROL_INO: u64 = u64::MAX - 1;

const NAME: &str = ".mergerfs";
const PREFIX: &str = "user.mergerfs.";

/// The keys that can be set, and the read-only ones.
const SETTABLE: [&str; 6] = [
    "category.create",
    "func.create",
    "category.action",
    "category.search",
    "minfreespace",
    "moveonenospc",
];
const READ_ONLY: [&str; 3] = ["branches", "pid", "version"];

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
        let option = |k: &str| {
            let found = p.to_options().into_iter().find(|o| o.starts_with(k));
            found.map(|o| o[k.len() + 1..].to_string())
        };
        let value = match key {
            "func.create" => option("category.create"),
            "category.search" => Some("ff".to_string()),
            "pid" => Some(std::process::id().to_string()),
            "version" => Some(env!("CARGO_PKG_VERSION").to_string()),
            "branches" => Some(self.branch_list()),
            k => option(k),
        };
        value.map(String::into_bytes).ok_or(libc::ENODATA)
    }

    /// `DIR=MODE:DIR=MODE…`, mergerfs's spelling of the branch list.
    fn branch_list(&self) -> String {
        let each = self.table.branches.iter();
        let list: Vec<String> = each
            .map(|b| format!("{}={}", b.path.display(), b.mode.to_string().to_uppercase()))
            .collect();
        list.join(":")
    }

    pub(super) fn control_listxattr(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for key in SETTABLE.iter().chain(&READ_ONLY) {
            out.extend_from_slice(format!("{PREFIX}{key}\0").as_bytes());
        }
        out
    }

    /// Set one option; EINVAL for a value the option does not take, EPERM for a key that
    /// cannot be set here (the branches change with `accord union add`/`remove`/`mode`).
    pub(super) fn control_setxattr(&self, name: &OsStr, value: &[u8]) -> R<()> {
        let key = control_key(name)?;
        if !SETTABLE.contains(&key) {
            return Err(libc::EPERM);
        }
        let value = std::str::from_utf8(value).map_err(|_| libc::EINVAL)?;
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
}

/// The option an attribute name of the control file names (ENODATA for any other name).
fn control_key(name: &OsStr) -> R<&str> {
    let key = (name.to_str())
        .and_then(|n| n.strip_prefix(PREFIX))
        .ok_or(libc::ENODATA)?;
    match SETTABLE.contains(&key) || READ_ONLY.contains(&key) {
        true => Ok(key),
        false => Err(libc::ENODATA),
    }
}
