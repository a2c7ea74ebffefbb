//! A dry run's scratch archives: a private directory of copies of the
//! archives a dry run opens, so that what a run writes to an archive
//! before it propagates (an archive made for a first sync, one emptied
//! because the other side's was lost, the walk's records) touches no
//! archive of the user's. Each host copies its own: the client those of
//! its local roots, a server the one of the root it serves.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// A private directory of archive copies, removed when dropped.
pub struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// A new, empty scratch directory (0700) in the system's temp dir.
    pub fn new() -> io::Result<Scratch> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("accord-dry-run-{}-{stamp:x}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        Ok(Scratch { dir })
    }

    /// Copy the archive of root `this` for its pair with `other` (and its
    /// log) from `state_dir`, if there is one.
    pub fn copy_archive(&self, state_dir: &Path, this: &[u8], other: &[u8]) -> io::Result<()> {
        let from = accord_archive::pair_files(state_dir, this, other);
        let to = accord_archive::pair_files(&self.dir, this, other);
        for suffix in ["", "-wal"] {
            copy_if_there(
                &with_suffix(&from.archive, suffix),
                &with_suffix(&to.archive, suffix),
            )?;
        }
        Ok(())
    }

    /// Where the copies are: the archive directory of the dry run.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn with_suffix(file: &Path, suffix: &str) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn copy_if_there(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::copy(from, to) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        result => result.map(drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_an_archive_and_its_log_and_is_removed_when_dropped() {
        let state = tempfile::tempdir().unwrap();
        let files = accord_archive::pair_files(state.path(), b"this", b"other");
        std::fs::create_dir_all(files.archive.parent().unwrap()).unwrap();
        std::fs::write(&files.archive, b"archive").unwrap();
        std::fs::write(with_suffix(&files.archive, "-wal"), b"log").unwrap();
        let scratch = Scratch::new().unwrap();
        scratch
            .copy_archive(state.path(), b"this", b"other")
            .unwrap();
        // A pair with no archive yet: nothing to copy, no error.
        scratch.copy_archive(state.path(), b"this", b"new").unwrap();
        let copy = accord_archive::pair_files(scratch.dir(), b"this", b"other").archive;
        assert_eq!(std::fs::read(&copy).unwrap(), b"archive");
        assert_eq!(std::fs::read(with_suffix(&copy, "-wal")).unwrap(), b"log");
        let dir = scratch.dir().to_path_buf();
        drop(scratch);
        assert!(!dir.exists());
    }
}
