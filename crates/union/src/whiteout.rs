//! Whiteout naming, as Unionfs wrote it on disk.
//!
//! A whiteout is an ordinary empty file `.wh.NAME` in a writable branch: it hides `NAME` in every
//! lower branch (never in its own branch, so a file and its whiteout may coexist: the file is
//! visible and lower copies stay hidden after it is deleted again). A directory holding
//! `.wh.__dir_opaque` hides everything below it. Plain files rather than overlayfs's 0/0 char
//! devices keep whiteouts creatable by non-root users and copyable by any tool.
//!
//! Every name that starts with `.wh.` is reserved: it never shows in a listing and cannot be
//! created through the union. Copy-up temporaries use the same prefix so a crash leaves nothing
//! visible behind; they carry the daemon's pid, and one that outlived its daemon is removed when
//! its directory is next read.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

pub const PREFIX: &[u8] = b".wh.";
pub const OPAQUE: &[u8] = b".wh.__dir_opaque";

/// `.wh.NAME` for `NAME`.
pub fn whiteout_for(name: &OsStr) -> OsString {
    let mut v = PREFIX.to_vec();
    v.extend_from_slice(name.as_bytes());
    OsString::from_vec(v)
}

/// Names carrying the reserved prefix: hidden from listings, refused on creation.
pub fn is_reserved(name: &OsStr) -> bool {
    name.as_bytes().starts_with(PREFIX)
}

pub fn is_opaque_marker(name: &OsStr) -> bool {
    name.as_bytes() == OPAQUE
}

/// The name a whiteout hides, or None when `name` is not a whiteout (or is the opaque marker).
pub fn whiteout_target(name: &OsStr) -> Option<&OsStr> {
    let b = name.as_bytes();
    if b == OPAQUE || !b.starts_with(PREFIX) || b.len() == PREFIX.len() {
        return None;
    }
    Some(OsStr::from_bytes(&b[PREFIX.len()..]))
}

/// The index of copied-up hard links, at the root of the upper branch (see `fs/index.rs`):
/// reserved like the temporaries below, and never taken for one.
pub const INDEX_DIR: &str = ".wh..wh.accord-index";

/// Temporary names start so: a whiteout of a reserved name (`.wh.accord-tmp…`), which no file
/// can have through the union, so a temporary never hides anything and no whiteout of a real
/// name is ever taken for a temporary.
const TEMP_PREFIX: &[u8] = b".wh..wh.accord-tmp.";

/// A hidden temporary name for building a copy-up before renaming it into place: the daemon's
/// pid and a value drawn at its start (`run`, which tells a daemon from an earlier one with
/// the same pid), and a counter.
pub fn temp_name(pid: u32, run: u64, counter: u64) -> OsString {
    let mut v = TEMP_PREFIX.to_vec();
    v.extend_from_slice(format!("{pid}.{run:x}.{counter}").as_bytes());
    OsString::from_vec(v)
}

/// The (pid, run) of the daemon that made temporary name `name` (see `temp_name`), or None
/// for other names.
pub fn temp_owner(name: &OsStr) -> Option<(u32, u64)> {
    let rest = std::str::from_utf8(name.as_bytes().strip_prefix(TEMP_PREFIX)?).ok()?;
    let mut parts = rest.split('.');
    let pid = parts.next()?.parse().ok()?;
    let run = u64::from_str_radix(parts.next()?, 16).ok()?;
    parts.next()?.parse::<u64>().ok()?;
    parts.next().is_none().then_some((pid, run))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let w = whiteout_for(OsStr::new("foo"));
        assert_eq!(w, OsStr::new(".wh.foo"));
        assert_eq!(whiteout_target(&w), Some(OsStr::new("foo")));
        assert!(is_reserved(&w));
    }

    #[test]
    fn opaque_is_not_a_whiteout() {
        let o = OsStr::from_bytes(OPAQUE);
        assert!(is_opaque_marker(o));
        assert_eq!(whiteout_target(o), None);
        assert!(is_reserved(o));
    }

    #[test]
    fn plain_and_edge_names() {
        assert_eq!(whiteout_target(OsStr::new("foo")), None);
        assert_eq!(whiteout_target(OsStr::new(".wh.")), None);
        assert_eq!(whiteout_target(OsStr::new(".wh")), None);
        assert!(!is_reserved(OsStr::new(".whx")));
        assert!(is_reserved(&temp_name(1, 2, 3)));
    }

    #[test]
    fn temp_names_tell_their_daemon() {
        assert_eq!(
            temp_owner(&temp_name(4321, 0xbeef, 7)),
            Some((4321, 0xbeef))
        );
        assert_eq!(temp_owner(OsStr::new(".wh..wh.accord-tmp.x.1.2")), None);
        assert_eq!(temp_owner(OsStr::new(".wh..wh.accord-tmp.1.2")), None);
        assert_eq!(temp_owner(OsStr::new(".wh..wh.accord-tmp.1.2.3.4")), None);
        assert_eq!(temp_owner(OsStr::new(".wh.foo")), None);
    }

    #[test]
    fn temp_names_are_no_whiteouts_of_real_names() {
        // A user may name a file `.accord-tmp.1.2.3`: deleting it leaves this whiteout, which
        // must never be taken for a temporary (and swept, bringing the file back).
        let w = whiteout_for(OsStr::new(".accord-tmp.1.2.3"));
        assert_eq!(temp_owner(&w), None);
        // What a temporary would hide is itself a reserved name.
        let t = temp_name(1, 2, 3);
        assert!(is_reserved(whiteout_target(&t).unwrap()));
    }
}
