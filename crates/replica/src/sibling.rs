//! A file copied from another root on a replica's own host (a sync of
//! several roots with two of them on one remote host): the receiving host
//! reads it there, so its bytes do not cross the wire twice through the
//! host that runs the sync. What the copy reads is fingerprinted as it
//! passes and must be what update detection saw.

use accord_model::{Expect, Fingerprint, RelPath};
use std::io::{self, Read};

/// The root a file is copied from: its path on the receiver's host (as its
/// own host named it in its sync identity) and its identity there (device,
/// inode), which the receiver checks before it reads anything, so that a
/// path that names another directory on this host is never read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SiblingRoot {
    pub path: Vec<u8>,
    pub identity: (u64, u64),
}

/// One file of a sibling root: where it is, what it must still be
/// (`expect`), and the fingerprint its bytes must have.
#[derive(Clone, Copy, Debug)]
pub struct SiblingFile<'s> {
    pub root: &'s SiblingRoot,
    pub path: &'s RelPath,
    pub expect: &'s Expect,
    pub hash: &'s Fingerprint,
}

/// A root identity's host and path (`side::local_identity` makes them):
/// two roots whose hosts are equal are on one host. `None`: not an
/// identity of that form.
pub fn identity_host_and_path(identity: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = identity.strip_prefix(crate::side::IDENTITY_PREFIX)?;
    let end = rest.iter().position(|&b| b == 0)?;
    let (host, path) = (&rest[..end], &rest[end + 1..]);
    (!host.is_empty() && path.first() == Some(&b'/')).then_some((host, path))
}

/// A reader that fingerprints (BLAKE3, as `fsys::hash_file` does) what
/// passes through it.
pub struct Fingerprinting<'r> {
    inner: &'r mut dyn Read,
    hasher: blake3::Hasher,
}

impl<'r> Fingerprinting<'r> {
    pub fn new(inner: &'r mut dyn Read) -> Self {
        Fingerprinting {
            inner,
            hasher: blake3::Hasher::new(),
        }
    }

    pub fn finish(&self) -> Fingerprint {
        *self.hasher.finalize().as_bytes()
    }
}

impl Read for Fingerprinting<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_identity_splits_into_its_host_and_path() {
        let identity = crate::side::local_identity(std::path::Path::new("/"));
        let (host, path) = identity_host_and_path(&identity).expect("splits");
        assert!(!host.is_empty());
        assert_eq!(path, b"/");
    }

    #[test]
    fn other_bytes_are_no_identity() {
        for bytes in [
            &b""[..],
            b"accord root 1\0",
            b"accord root 1\0host",
            b"accord root 1\0\0/a",
            b"accord root 1\0host\0relative",
            b"accord root 2\0host\0/a",
        ] {
            assert_eq!(identity_host_and_path(bytes), None, "{bytes:?}");
        }
    }
}
