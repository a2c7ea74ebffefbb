//! A pool's policies change while it is mounted, through mergerfs's control file
//! (`/.mergerfs` and its `user.mergerfs.*` attributes) and through `accord union policy`; and
//! the mode `nc` is refused where it means nothing (an overlay).

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::Path;

use common::{accord_cmd, fuse_ok, setxattr, user_xattrs, UnionMount};

fn attr(mnt: &Path, key: &str) -> String {
    let all = user_xattrs(&mnt.join(".mergerfs"));
    let name = format!("user.mergerfs.{key}");
    let found = all.into_iter().find(|(n, _)| *n == name);
    String::from_utf8(found.expect("the control file has the attribute").1).unwrap()
}

#[test]
fn policies_change_while_mounted() {
    if !fuse_ok("policies_change_while_mounted") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    fs::create_dir_all(&a).unwrap();
    fs::create_dir_all(&b).unwrap();
    let mnt = t.path().join("mnt");
    let branches = [a.display().to_string(), b.display().to_string()];
    let u = UnionMount::with_options(
        &mnt,
        &branches,
        &["-o", "category.create=ff,minfreespace=1K"],
    );
    assert_eq!(attr(&mnt, "category.create"), "ff");
    assert!(
        !fs::read_dir(&mnt)
            .unwrap()
            .any(|e| e.unwrap().file_name() == ".mergerfs"),
        "the control file is never listed"
    );
    fs::write(mnt.join("one"), "1").unwrap();
    assert!(a.join("one").exists(), "ff: the first branch");
    // Both branches are on one file system: equal free space, and mfs takes the last.
    setxattr(
        &mnt.join(".mergerfs"),
        "user.mergerfs.category.create",
        b"mfs",
    )
    .unwrap();
    assert_eq!(attr(&mnt, "category.create"), "mfs");
    fs::write(mnt.join("two"), "2").unwrap();
    assert!(b.join("two").exists(), "mfs: the last of equals");
    let err = setxattr(
        &mnt.join(".mergerfs"),
        "user.mergerfs.category.create",
        b"best",
    );
    assert_eq!(err.unwrap_err().raw_os_error(), Some(libc::EINVAL));
    let shown = u.ctl(&["policy", "category.create=ff"]);
    assert!(shown.contains("category.create=ff\n"), "{shown}");
    fs::write(mnt.join("three"), "3").unwrap();
    assert!(a.join("three").exists(), "ff again");
    let bad = accord_cmd(&[
        OsStr::new("union"),
        OsStr::new("policy"),
        mnt.as_os_str(),
        OsStr::new("category.create=best"),
    ]);
    assert!(
        !bad.0 && bad.2.contains("category.create=best"),
        "{}",
        bad.2
    );
    assert_eq!(
        attr(&mnt, "category.create"),
        "ff",
        "a refused change changes nothing"
    );
}

#[test]
fn nc_needs_a_pool() {
    if !fuse_ok("nc_needs_a_pool") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    fs::create_dir_all(&a).unwrap();
    fs::create_dir_all(&b).unwrap();
    let mnt = t.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let nc = format!("{}=nc", b.display());
    let (ok, _, err) = accord_cmd(&[
        OsStr::new("union"),
        OsStr::new("mount"),
        mnt.as_os_str(),
        a.as_os_str(),
        OsStr::new(&nc),
    ]);
    assert!(
        !ok && err.contains("nc") && err.contains("category.create"),
        "{err}"
    );
    let u = UnionMount::new(&mnt, &[a.display().to_string(), b.display().to_string()]);
    let (ok, _, err) = accord_cmd(&[
        OsStr::new("union"),
        OsStr::new("mode"),
        mnt.as_os_str(),
        b.as_os_str(),
        OsStr::new("nc"),
    ]);
    assert!(!ok && err.contains("only a pool"), "{err}");
    let (ok, _, err) = accord_cmd(&[OsStr::new("union"), OsStr::new("policy"), mnt.as_os_str()]);
    assert!(!ok && err.contains("not a pool"), "{err}");
    drop(u);
}
