//! Directory redirects: how a merged directory keeps its lower parts after a rename.
//!
//! Renaming a directory that has parts in lower branches moves only its copy in the writable
//! branch, and records on that copy, in the extended attribute `trusted.accord.redirect`,
//! where its lower parts are: a path relative to the branches' roots, as the union of the
//! branches *below* the one holding the attribute shows it (overlayfs's absolute
//! `trusted.overlay.redirect`). A directory with a redirect merges, below its own branch,
//! whatever that path shows there instead of what its own path shows; the path is resolved
//! component by component, so redirects met on the way in lower branches (a branch frozen by
//! a snapshot holds them too), whiteouts and opaque directories apply there as well.
//!
//! The attribute is the union's own: never shown through the union, never settable through it,
//! and never copied up with a directory. What is read back is checked before use (`decode`): a
//! relative path of plain components (no `.`, `..`, empty or reserved `.wh.` names, no NUL),
//! at most `MAX_LEN` bytes, so a redirect can only ever name something inside the branches.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::whiteout;

/// The extended attribute holding a directory's redirect.
pub const XATTR: &str = "trusted.accord.redirect";

/// The longest redirect accepted (PATH_MAX less room for the branch's own path).
pub const MAX_LEN: usize = 3072;

/// The attribute's value for lower path `path` (see `decode`), or None for a path that
/// `decode` would refuse.
pub fn encode(path: &Path) -> Option<Vec<u8>> {
    let v = path.as_os_str().as_bytes().to_vec();
    decode(&v).map(|_| v)
}

/// The lower path an attribute value names, or None when it is not a safe relative path of
/// the branches (refused values make the directory merge as if it had no redirect).
pub fn decode(value: &[u8]) -> Option<PathBuf> {
    if value.is_empty() || value.len() > MAX_LEN || value.contains(&0) {
        return None;
    }
    let path = Path::new(OsStr::from_bytes(value));
    // `components` hides "a//b" and a trailing "/": compare the raw parts instead.
    for part in value.split(|&b| b == b'/') {
        let name = OsStr::from_bytes(part);
        if part.is_empty() || part == b"." || part == b".." || whiteout::is_reserved(name) {
            return None;
        }
    }
    path.components()
        .all(|c| matches!(c, Component::Normal(_)))
        .then(|| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_relative_paths_round_trip() {
        for p in ["d", "a/b/c", "with space/x", ".hidden/y"] {
            let v = encode(Path::new(p)).unwrap();
            assert_eq!(decode(&v).unwrap(), PathBuf::from(p));
        }
    }

    #[test]
    fn anything_that_could_leave_the_branches_is_refused() {
        for bad in [
            &b""[..],
            b"/etc",
            b"..",
            b"a/../../etc",
            b"a/./b",
            b".",
            b"a//b",
            b"a/",
            b"a\0b",
            b".wh.d",
            b"a/.wh..wh.accord-index",
        ] {
            assert_eq!(decode(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(decode(&vec![b'a'; MAX_LEN + 1]), None);
        assert!(decode(&vec![b'a'; MAX_LEN]).is_some());
        assert_eq!(encode(Path::new("../x")), None);
    }
}
