//! What cannot be taken from the source is reported, and nothing is lost
//! for it: an `.accordignore` that cannot be read suspends deletions, and a
//! source name reserved for accord's own files is not copied.

mod mirror_common;
use mirror_common::*;
use std::fs;
use std::path::Path;

fn write(p: &Path, data: &[u8]) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

/// An `.accordignore` that cannot be read (here: a symlink, refused by
/// O_NOFOLLOW) must suspend deletions, not drop its rules and delete the
/// excluded entries of DST.
#[test]
fn unreadable_ignore_file_suspends_deletions() {
    let (_tmp, src, dst, state) = roots();
    for i in 0..20 {
        write(&src.join(format!("proj/f{i}")), b"x");
    }
    write(&src.join("proj/.accordignore"), b"cache/\n");
    write(&dst.join("proj/cache/keep.bin"), b"precious");
    let out = mirror(&state, &[src.to_str().unwrap(), dst.to_str().unwrap()]);
    assert_exit(&out, 0);
    fs::remove_file(src.join("proj/.accordignore")).unwrap();
    write(&src.parent().unwrap().join("common/ignore"), b"cache/\n");
    std::os::unix::fs::symlink("../../common/ignore", src.join("proj/.accordignore")).unwrap();
    let out = mirror(&state, &[src.to_str().unwrap(), dst.to_str().unwrap()]);
    assert_exit(&out, 2);
    assert_eq!(
        fs::read(dst.join("proj/cache/keep.bin")).unwrap(),
        b"precious"
    );
}

/// A source file whose name is reserved for accord's own temp or recovery
/// files is not copied, and the run says so instead of reporting success.
#[test]
fn reserved_source_names_are_reported_not_silently_skipped() {
    let (_tmp, src, dst, state) = roots();
    write(&src.join("ok"), b"fine");
    write(&src.join(".accord-recovery-notes"), b"user data");
    let out = mirror(&state, &[src.to_str().unwrap(), dst.to_str().unwrap()]);
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("reserved"));
    assert_eq!(fs::read(dst.join("ok")).unwrap(), b"fine");
}
