//! A pool's policies change while it is mounted, through mergerfs's control file
//! (`/.mergerfs` and its `user.mergerfs.*` attributes) and through `accord union policy`; and
//! the mode `nc` is refused where it means nothing (an overlay).

mod common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
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

/// Functions' own policies and the branch list, read and set through the control file as
/// mergerfs's scripts do it.
#[test]
fn functions_and_branches_through_the_control_file() {
    let test = "functions_and_branches_through_the_control_file";
    if !fuse_ok(test) {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dirs: Vec<_> = ["a", "b", "c"].iter().map(|n| t.path().join(n)).collect();
    for d in &dirs {
        fs::create_dir_all(d).unwrap();
    }
    let (a, b, c) = (&dirs[0], &dirs[1], &dirs[2]);
    // A copy on each branch: epff changes the first only, epall both.
    for d in [a, b] {
        fs::write(d.join("f"), "x").unwrap();
    }
    let mnt = t.path().join("mnt");
    let branches = [a.display().to_string(), b.display().to_string()];
    let _u = UnionMount::with_options(
        &mnt,
        &branches,
        &["-o", "category.create=ff,func.chmod=epff,minfreespace=1K"],
    );
    let ctl = mnt.join(".mergerfs");
    assert_eq!(attr(&mnt, "func.chmod"), "epff");
    assert_eq!(attr(&mnt, "func.unlink"), "epall");
    assert_eq!(attr(&mnt, "category.action"), "epall,epff");
    assert_eq!(attr(&mnt, "func.getattr"), "ff");
    let mode = |d: &Path| fs::metadata(d.join("f")).unwrap().permissions().mode() & 0o777;
    fs::set_permissions(mnt.join("f"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!((mode(a), mode(b)), (0o600, 0o644), "func.chmod=epff");
    setxattr(&ctl, "user.mergerfs.func.chmod", b"epall").unwrap();
    fs::set_permissions(mnt.join("f"), fs::Permissions::from_mode(0o640)).unwrap();
    assert_eq!((mode(a), mode(b)), (0o640, 0o640), "func.chmod=epall");
    assert_eq!(attr(&mnt, "category.action"), "epall");
    let refused = setxattr(&ctl, "user.mergerfs.func.getattr", b"newest");
    assert_eq!(refused.unwrap_err().raw_os_error(), Some(libc::EINVAL));
    // The branch list, with a branch's own minfreespace.
    let listed = format!("{}=RW:{}=RW", a.display(), b.display());
    assert_eq!(attr(&mnt, "branches"), listed);
    let more = format!("+>{}=NC,1G", c.display());
    setxattr(&ctl, "user.mergerfs.branches", more.as_bytes()).unwrap();
    assert_eq!(
        attr(&mnt, "branches"),
        format!("{listed}:{}=NC,1G", c.display())
    );
    let fewer = format!("-{}", c.display());
    setxattr(&ctl, "user.mergerfs.branches", fewer.as_bytes()).unwrap();
    assert_eq!(attr(&mnt, "branches"), listed);
    // The first branch needs more than any disk has: ff skips it.
    let full = format!("{}=RW,1000T:{}=RW", a.display(), b.display());
    setxattr(&ctl, "user.mergerfs.branches", full.as_bytes()).unwrap();
    assert_eq!(attr(&mnt, "branches"), full);
    fs::write(mnt.join("new"), "n").unwrap();
    assert!(
        !a.join("new").exists() && b.join("new").exists(),
        "a is below its own minfreespace"
    );
    let bad = setxattr(&ctl, "user.mergerfs.branches", b"-<x");
    assert_eq!(bad.unwrap_err().raw_os_error(), Some(libc::EINVAL));
}
