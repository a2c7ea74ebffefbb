//! What a caller holding a `LocalReplica` itself (not the seam) does to
//! its files directly: a task run, whose workers share one temp file
//! between them, list two local roots as a pair, and read a directory's
//! own entry without listing it. The calls stay in the replica crate so
//! that the callers reach files through its types, never through the
//! root handle.

use super::LocalReplica;
use accord_fsys::{IgnoreRules, Listing, Scan, ScanOptions};
use accord_model::{Entry, RelPath};
use std::fs::File;
use std::io;

/// A listing of one side and what its scan found.
type Listed = (Option<Listing>, Scan);

/// The parent of `path` (the root's children are in the root).
fn parent(path: &RelPath) -> RelPath {
    path.parent().unwrap_or_default()
}

impl LocalReplica {
    /// `dir` listed here and in `other` as a pair (`fsys::list_dir_pair`):
    /// with `other`'s listing memo in its options, `other`'s side is not
    /// listed again when it held this side's names unchanged. Each side
    /// takes its own rules and options.
    pub fn list_dir_paired_with(
        &self,
        (rules, opts): (&IgnoreRules, &ScanOptions),
        other: &LocalReplica,
        (o_rules, o_opts): (&IgnoreRules, &ScanOptions),
        dir: &RelPath,
    ) -> (Listed, Listed) {
        accord_fsys::list_dir_pair(
            (self.root(), rules, opts),
            (other.root(), o_rules, o_opts),
            dir,
        )
    }

    /// `dir`'s own entry, read without listing the directory (a listing
    /// would stat every entry in it); `None` when it is not there or
    /// cannot be read.
    pub fn own_entry(
        &self,
        dir: &RelPath,
        rules: &IgnoreRules,
        opts: &ScanOptions,
    ) -> Option<Entry> {
        accord_fsys::dir_entry(self.root(), dir, rules, opts).0
    }

    /// The contents of `dir`'s `.accordignore`; `None` when it has none,
    /// or `dir` itself is gone (whoever lists it will say so).
    pub fn read_ignore_file(&self, dir: &RelPath) -> io::Result<Option<Vec<u8>>> {
        match self.root().open_dir(dir) {
            Ok(d) => accord_fsys::read_ignore_file(&d),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The temp `temp` beside `path`, opened to read and write, made empty
    /// (mode 0600) when it is not there: the file, and whether this call
    /// made it. `temp` must be a temp's name (`Dir::new_temp_name`).
    pub fn open_or_make_temp_beside(
        &self,
        path: &RelPath,
        temp: &[u8],
    ) -> io::Result<(File, bool)> {
        let dir = self.root().open_dir(&parent(path))?;
        match dir.create_temp_named(temp)? {
            Some(made) => Ok((made, true)),
            None => Ok((dir.open_rw(temp)?, false)),
        }
    }

    /// Remove the temp `temp` made beside `path` by `open_or_make_temp_beside`.
    pub fn remove_temp_beside(&self, path: &RelPath, temp: &[u8]) -> io::Result<()> {
        self.root().open_dir(&parent(path))?.unlink(temp)
    }

    /// The temp `temp` beside `path`, opened to read and write (by each
    /// writer of one of its parts); `None` when it is not there.
    pub fn open_temp_rw(&self, path: &RelPath, temp: &[u8]) -> io::Result<Option<File>> {
        let dir = self.root().open_dir(&parent(path))?;
        match dir.open_rw(temp) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The regular file at `entry`'s path opened to read, checked on the
    /// open file to be the one `entry` describes (its size and mtime):
    /// `None` when it changed since, so that no part of another version is
    /// copied.
    pub fn open_file_checked(&self, entry: &Entry) -> io::Result<Option<File>> {
        let dir = self.root().open_dir(&parent(&entry.path))?;
        let (f, st) = dir.open_read_stat(entry.path.file_name())?;
        let same = st.size == entry.size && st.mtime == entry.props.mtime;
        Ok(same.then_some(f))
    }

    /// Whether the root is on a disk file system of this kernel, where a
    /// directory's ctime moves with every change of its names (what a
    /// listing memo relies on; `fsys::Root::is_local_disk_fs`).
    pub fn is_local_disk(&self) -> bool {
        self.root().is_local_disk_fs()
    }
}
