//! Bodies of the archive's fuzz targets (`crates/archive/fuzz`), also run
//! on stable as property tests (`tests/decoders.rs`).

use accord_archive::{pair_files, Archive, ArchiveError};
use accord_model::RelPath;

const THIS: &[u8] = b"fuzz-this";
const OTHER: &[u8] = b"fuzz-other";

/// `data` as this pair's archive file: opening it and reading every entry
/// never panics and never loops; what is read back is in `RelPath` order
/// with valid paths; whatever goes wrong is one of the archive's errors,
/// and the file is never rewritten unless it opened as an archive.
pub fn archive_file(data: &[u8]) {
    let dir = tempfile::tempdir().unwrap();
    let file = pair_files(dir.path(), THIS, OTHER).archive;
    std::fs::write(&file, data).unwrap();
    let archive = match Archive::open(dir.path(), THIS, OTHER) {
        Ok(archive) => archive,
        Err(error) => {
            assert_known(&error);
            if !data.is_empty() {
                assert_eq!(std::fs::read(&file).unwrap(), data, "{error}");
            }
            return;
        }
    };
    let mut last: Option<RelPath> = None;
    for entry in archive.entries() {
        match entry {
            Ok(observed) => {
                let path = observed.entry.path;
                assert_eq!(RelPath::new(path.as_bytes()).as_ref(), Ok(&path));
                assert!(
                    last.as_ref().is_none_or(|last| *last < path),
                    "out of order"
                );
                last = Some(path);
            }
            Err(error) => {
                assert_known(&error);
                break;
            }
        }
    }
    if let Err(error) = archive.check_integrity() {
        assert_known(&error);
    }
}

fn assert_known(error: &ArchiveError) {
    assert!(
        matches!(
            error,
            ArchiveError::Damaged { .. }
                | ArchiveError::NewerFormat { .. }
                | ArchiveError::Storage { .. }
        ),
        "{error}"
    );
}
