//! What this host last heard a remote root call itself, for a sync of more
//! than two roots. The set is named by every root's identity (its host and
//! its path there), and a root's archive of the set is found by that name:
//! a remote root that cannot be reached this run still has to be named as
//! it was, or the others would start over as a new set. Each time a remote
//! root is reached, its identity is kept here, under the root as written.

use std::io::Write;
use std::path::{Path, PathBuf};

/// Longest identity kept (as the protocol's bound on one).
const MAX_IDENTITY: usize = accord_proto::msg::MAX_SYNC_IDENTITY;

/// The file that keeps the identity of the root written `root`.
fn file_of(state_dir: &Path, root: &str) -> PathBuf {
    let digest = blake3::derive_key("accord remote root identity, version 1", root.as_bytes());
    let stem: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    state_dir
        .join("roots")
        .join(format!("root-{stem}.identity"))
}

/// The identity last heard from `root`, if any (a file damaged or of
/// another size than an identity can be is none).
pub fn recall(state_dir: &Path, root: &str) -> Option<Vec<u8>> {
    let bytes = std::fs::read(file_of(state_dir, root)).ok()?;
    (!bytes.is_empty() && bytes.len() <= MAX_IDENTITY).then_some(bytes)
}

/// Keep `identity` as `root`'s, replacing what was kept: written whole to
/// a temp file, then renamed over the old one.
pub fn remember(state_dir: &Path, root: &str, identity: &[u8]) -> std::io::Result<()> {
    if recall(state_dir, root).as_deref() == Some(identity) {
        return Ok(());
    }
    let file = file_of(state_dir, root);
    let dir = file.parent().expect("a file in a directory");
    std::fs::create_dir_all(dir)?;
    let mut temp = tempfile_in(dir)?;
    temp.1.write_all(identity)?;
    temp.1.sync_all()?;
    std::fs::rename(&temp.0, &file)
}

/// A new file in `dir` with a name of this process.
fn tempfile_in(dir: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    let path = dir.join(format!(".identity-{}.tmp", std::process::id()));
    let file = std::fs::File::create(&path)?;
    Ok((path, file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_identity_is_recalled_by_the_root_as_written() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(recall(dir.path(), "host:data"), None);
        remember(dir.path(), "host:data", b"host\0/data").unwrap();
        remember(dir.path(), "other:data", b"other\0/data").unwrap();
        assert_eq!(recall(dir.path(), "host:data").unwrap(), b"host\0/data");
        remember(dir.path(), "host:data", b"host\0/moved").unwrap();
        assert_eq!(recall(dir.path(), "host:data").unwrap(), b"host\0/moved");
        assert_eq!(recall(dir.path(), "other:data").unwrap(), b"other\0/data");
    }

    #[test]
    fn a_kept_file_too_long_to_be_an_identity_is_none() {
        let dir = tempfile::tempdir().unwrap();
        remember(dir.path(), "host:data", b"x").unwrap();
        let file = file_of(dir.path(), "host:data");
        std::fs::write(&file, vec![b'x'; MAX_IDENTITY + 1]).unwrap();
        assert_eq!(recall(dir.path(), "host:data"), None);
        std::fs::write(&file, b"").unwrap();
        assert_eq!(recall(dir.path(), "host:data"), None);
    }
}
