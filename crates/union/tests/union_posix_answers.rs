//! The answers a program gets through the union are the ones its branch would give: a name
//! longer than the branch can hold is ENAMETOOLONG from every call (not "no such file" from
//! those that look the name up first), and an open file whose last name was unlinked reports
//! no links, whether it was the upper branch's own or a lower file hidden by a whiteout.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::*;

/// The errno of each call on `name` in `dir` (0: it succeeded).
fn answers(dir: &Path, name: &str) -> Vec<i32> {
    let p = dir.join(name);
    let errno = |r: std::io::Result<()>| r.err().and_then(|e| e.raw_os_error()).unwrap_or(0);
    vec![
        errno(fs::write(&p, b"x")),
        errno(fs::symlink_metadata(&p).map(drop)),
        errno(fs::create_dir(&p)),
        errno(fs::remove_file(&p)),
        errno(fs::remove_dir(&p)),
        errno(std::os::unix::fs::symlink("target", &p)),
        errno(fs::set_permissions(
            &p,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )),
        errno(fs::hard_link(dir.join("here"), &p)),
        errno(fs::rename(dir.join("here"), &p)),
    ]
}

#[test]
fn a_name_too_long_is_too_long_from_every_call_and_unlinked_files_have_no_links() {
    if !fuse_ok("a_name_too_long_is_too_long_from_every_call_and_unlinked_files_have_no_links") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    for d in ["up", "lo", "plain"] {
        fs::create_dir_all(b.join(d)).unwrap();
    }
    fs::write(b.join("lo/low"), "lower\n").unwrap();
    fs::write(b.join("lo/here"), "here\n").unwrap();
    fs::write(b.join("plain/here"), "here\n").unwrap();
    let branches = [
        format!("{}=rw", b.join("up").display()),
        format!("{}=ro", b.join("lo").display()),
    ];
    let mnt = b.join("mnt");
    let _m = UnionMount::new(&mnt, &branches);

    let long = "n".repeat(256);
    let ours = answers(&mnt, &long);
    assert_eq!(ours, answers(&b.join("plain"), &long));
    assert!(ours.iter().all(|&e| e == libc::ENAMETOOLONG), "{ours:?}");

    // A file of the upper branch, and a lower one (unlinked through a whiteout).
    let new = mnt.join("new");
    fs::write(&new, "new\n").unwrap();
    let upper = fs::File::open(&new).unwrap();
    fs::remove_file(&new).unwrap();
    let meta = upper.metadata().unwrap();
    assert_eq!((meta.nlink(), meta.len()), (0, 4));
    let lower = fs::File::open(mnt.join("low")).unwrap();
    fs::remove_file(mnt.join("low")).unwrap();
    let meta = lower.metadata().unwrap();
    assert_eq!((meta.nlink(), meta.len()), (0, 6));
    assert_eq!(fs::read_to_string(b.join("lo/low")).unwrap(), "lower\n");
}
