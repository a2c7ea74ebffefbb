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

/// A hidden temporary name for building a copy-up before renaming it into place.
pub fn temp_name(pid: u32, counter: u64) -> OsString {
    OsString::from(format!(".wh..accord-tmp.{pid}.{counter}"))
}

/// The process that made temporary name `name` (see `temp_name`), or None for other names.
pub fn temp_owner(name: &OsStr) -> Option<u32> {
    let rest = name.as_bytes().strip_prefix(b".wh..accord-tmp.")?;
    let pid = std::str::from_utf8(rest).ok()?.split('.').next()?;
    pid.parse().ok()
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
        assert!(is_reserved(&temp_name(1, 2)));
    }

    #[test]
    fn temp_names_tell_their_process() {
        assert_eq!(temp_owner(&temp_name(4321, 7)), Some(4321));
        assert_eq!(temp_owner(OsStr::new(".wh..accord-tmp.x.1")), None);
        assert_eq!(temp_owner(OsStr::new(".wh.foo")), None);
        assert_eq!(temp_owner(OsStr::new(".wh..accord-tmp.")), None);
    }
}
