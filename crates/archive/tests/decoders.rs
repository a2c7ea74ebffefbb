//! The archive reader's fuzz bodies as property tests: random bytes, and
//! real archives with bytes changed here and there.

mod bodies;

use accord_archive::{pair_files, Archive};
use accord_model::{Entry, Kind, Observed, Props, RelPath, Time};
use proptest::prelude::*;
use std::sync::OnceLock;

/// The bytes of a real archive holding entries of every kind.
fn real_archive() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let mut archive = Archive::open(dir.path(), b"fuzz-this", b"fuzz-other").unwrap();
        let mut batch = archive.batch().unwrap();
        for i in 0..300u32 {
            let kind = [Kind::File, Kind::Dir, Kind::Symlink][i as usize % 3];
            batch
                .put(&observed(&format!("d{}/n{i}", i % 5), kind))
                .unwrap();
        }
        batch.commit().unwrap();
        drop(archive);
        std::fs::read(pair_files(dir.path(), b"fuzz-this", b"fuzz-other").archive).unwrap()
    })
}

fn observed(path: &str, kind: Kind) -> Observed {
    Observed {
        entry: Entry {
            path: RelPath::new(path.as_bytes()).unwrap(),
            kind,
            size: 3,
            props: Props {
                mode: 0o640,
                uid: 1,
                gid: 2,
                mtime: Time { sec: 9, nsec: 9 },
                xattrs: Some(vec![(b"user.x".to_vec(), b"y".to_vec())]),
            },
            dev: 1,
            ino: 2,
            nlink: 1,
            rdev: 0,
            blocks: 1,
            link_target: (kind == Kind::Symlink).then(|| b"t".to_vec()),
            hash: (kind == Kind::File).then_some([3; 32]),
        },
        ctime: Time { sec: 9, nsec: 9 },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn random_bytes(data in prop::collection::vec(any::<u8>(), 0..4096), magic in any::<bool>()) {
        let mut data = data;
        if magic && data.len() >= 16 {
            data[..16].copy_from_slice(b"SQLite format 3\0");
        }
        bodies::archive_file(&data);
    }

    #[test]
    fn real_archives_with_bytes_changed(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..12),
        cut in prop::option::of(any::<prop::sample::Index>()),
    ) {
        let mut data = real_archive().to_vec();
        for (at, byte) in edits {
            let at = at.index(data.len());
            data[at] = byte;
        }
        if let Some(cut) = cut {
            data.truncate(cut.index(data.len()));
        }
        bodies::archive_file(&data);
    }
}
