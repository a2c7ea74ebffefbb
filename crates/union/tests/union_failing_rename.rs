//! A rename the union must refuse fails at once, and nothing is made in the writable branch
//! for it (no copy-up, no temporary file).

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Instant;

use common::*;

/// (mtime, ctime) of a directory to the nanosecond: any entry made or removed in it moves them.
fn dir_stamp(p: &Path) -> (i64, i64, i64, i64) {
    let m = fs::metadata(p).unwrap();
    (m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec())
}

/// A rename of a big lower file that cannot succeed (its target shows from a read-only branch
/// above the writable one) fails at once: before the fix the file's 1 GiB was copied up to a
/// temporary file in the writable branch first, then thrown away.
#[test]
fn failing_rename_of_a_big_lower_file_copies_nothing() {
    if !fuse_ok("failing_rename_of_a_big_lower_file_copies_nothing") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    for d in ["hi", "up", "lo"] {
        fs::create_dir_all(b.join(d)).unwrap();
    }
    fs::write(b.join("hi/t"), "above").unwrap();
    let big = fs::File::create(b.join("lo/big")).unwrap();
    big.set_len(1 << 30).unwrap();
    drop(big);
    let m = UnionMount::new(
        &b.join("mnt"),
        &[
            format!("{}=ro", b.join("hi").display()),
            format!("{}=rw", b.join("up").display()),
            format!("{}=ro", b.join("lo").display()),
        ],
    );
    let before = dir_stamp(&b.join("up"));
    let start = Instant::now();
    let res = fs::rename(m.mnt.join("big"), m.mnt.join("t"));
    let took = start.elapsed();
    eprintln!("failing rename took {took:?}");
    assert_eq!(res.unwrap_err().raw_os_error(), Some(libc::EROFS));
    assert_eq!(
        dir_stamp(&b.join("up")),
        before,
        "nothing was made in the writable branch (no copy-up, no temporary file)"
    );
    assert!(took.as_millis() < 500, "the rename took {took:?}");
    assert_eq!(fs::metadata(m.mnt.join("big")).unwrap().len(), 1 << 30);
}
