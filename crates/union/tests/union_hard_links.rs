//! Hard links in a read-only branch: the names of one lower file show as one inode with its
//! link count, and stay one file through copy-ups, renames, unlinks, remounts and snapshots,
//! as kernel overlayfs with `index=on` shows them.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::*;

/// The names of the extended attributes of `p`, NUL-separated, as llistxattr(2) gives them.
fn xattr_names(p: &Path) -> String {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    let mut buf = vec![0u8; 65536];
    // SAFETY: valid string and buffer.
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "llistxattr {}", p.display());
    String::from_utf8_lossy(&buf[..n as usize]).into_owned()
}

/// (st_ino, st_nlink, contents) of each name, through the union.
fn links_seen(mnt: &Path, names: &[&str]) -> Vec<(u64, u64, String)> {
    names
        .iter()
        .map(|n| {
            let p = mnt.join(n);
            let m = fs::metadata(&p).unwrap();
            (m.ino(), m.nlink(), fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// Every name shows one inode with `nlink` links and `text`.
fn assert_one_file(seen: &[(u64, u64, String)], nlink: u64, text: &str, when: &str) {
    let first = &seen[0];
    for s in seen {
        assert_eq!(s.0, first.0, "{when}: one st_ino for every name: {seen:?}");
        assert_eq!((s.1, s.2.as_str()), (nlink, text), "{when}: {seen:?}");
    }
}

/// Names that share one file in a read-only branch show as one inode with the file's link
/// count, and a copy-up of one keeps the others linked to the copy (overlayfs's index=on):
/// after a write through one name, across a remount, an unlink, a rename, a new link through
/// the union and a write through another name. The read-only branch is unchanged. Before the
/// fix each name had its own st_ino, and the others kept the old data after a copy-up.
#[test]
fn lower_hard_links_are_one_inode_and_follow_a_copy_up() {
    if !fuse_ok("lower_hard_links_are_one_inode_and_follow_a_copy_up") {
        return;
    }
    use std::io::Write;
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    fs::create_dir_all(b.join("up")).unwrap();
    fs::create_dir_all(b.join("lo/d")).unwrap();
    fs::create_dir_all(b.join("lo/e")).unwrap();
    fs::write(b.join("lo/d/a"), "one\n").unwrap();
    fs::hard_link(b.join("lo/d/a"), b.join("lo/d/b")).unwrap();
    fs::hard_link(b.join("lo/d/a"), b.join("lo/e/c")).unwrap();
    let branches = [
        format!("{}=rw", b.join("up").display()),
        format!("{}=ro", b.join("lo").display()),
    ];
    let mnt = b.join("mnt");
    let m = UnionMount::new(&mnt, &branches);
    assert_one_file(
        &links_seen(&mnt, &["d/a", "d/b", "e/c"]),
        3,
        "one\n",
        "untouched",
    );

    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(mnt.join("d/a"))
        .unwrap();
    f.write_all(b"two\n").unwrap();
    drop(f);
    assert_one_file(
        &links_seen(&mnt, &["d/a", "d/b", "e/c"]),
        3,
        "one\ntwo\n",
        "after a write through d/a",
    );
    assert!(
        !fs::read_dir(&mnt).unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("index")),
        "the index does not show"
    );
    let names = xattr_names(&mnt.join("d/a"));
    assert!(
        !names.contains("trusted.accord"),
        "the index's xattr does not show: {names:?}"
    );
    assert!(
        xattr_names(&b.join("up/d/a")).contains("trusted.accord"),
        "(it is there in the branch)"
    );

    drop(m);
    let m = UnionMount::new(&mnt, &branches);
    // In a new order: e/c first, which the kernel never saw since the remount.
    assert_one_file(
        &links_seen(&mnt, &["e/c", "d/b", "d/a"]),
        3,
        "one\ntwo\n",
        "after a remount",
    );

    fs::remove_file(mnt.join("e/c")).unwrap();
    assert_one_file(
        &links_seen(&mnt, &["d/a", "d/b"]),
        2,
        "one\ntwo\n",
        "after unlink",
    );
    fs::rename(mnt.join("d/b"), mnt.join("e/b2")).unwrap();
    fs::hard_link(mnt.join("d/a"), mnt.join("d/n")).unwrap();
    fs::OpenOptions::new()
        .append(true)
        .open(mnt.join("e/b2"))
        .unwrap()
        .write_all(b"three\n")
        .unwrap();
    assert_one_file(
        &links_seen(&mnt, &["d/a", "e/b2", "d/n"]),
        3,
        "one\ntwo\nthree\n",
        "after rename, link and a write through the renamed name",
    );
    drop(m);

    let lower = fs::metadata(b.join("lo/d/a")).unwrap();
    assert_eq!(lower.nlink(), 3, "the read-only branch keeps its links");
    for n in ["d/a", "d/b", "e/c"] {
        assert_eq!(fs::read_to_string(b.join("lo").join(n)).unwrap(), "one\n");
    }
}

/// A rename of one lower hard link, the first change to the file, copies up the name that
/// moves (not another name of the inode the kernel holds), and the names stay one file, also
/// once the other name is removed.
#[test]
fn renaming_a_lower_hard_link_keeps_it_linked() {
    if !fuse_ok("renaming_a_lower_hard_link_keeps_it_linked") {
        return;
    }
    use std::io::Write;
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    fs::create_dir_all(b.join("up")).unwrap();
    fs::create_dir_all(b.join("lo")).unwrap();
    fs::write(b.join("lo/x"), "one\n").unwrap();
    fs::hard_link(b.join("lo/x"), b.join("lo/y")).unwrap();
    let m = UnionMount::new(
        &b.join("mnt"),
        &[
            format!("{}=rw", b.join("up").display()),
            format!("{}=ro", b.join("lo").display()),
        ],
    );
    // Both looked up first: the kernel holds one inode for the two names.
    assert_one_file(&links_seen(&m.mnt, &["x", "y"]), 2, "one\n", "untouched");
    fs::rename(m.mnt.join("y"), m.mnt.join("z")).unwrap();
    assert!(!m.mnt.join("y").exists());
    assert_one_file(&links_seen(&m.mnt, &["x", "z"]), 2, "one\n", "after rename");
    fs::OpenOptions::new()
        .append(true)
        .open(m.mnt.join("x"))
        .unwrap()
        .write_all(b"two\n")
        .unwrap();
    assert_one_file(
        &links_seen(&m.mnt, &["x", "z"]),
        2,
        "one\ntwo\n",
        "after a write",
    );
    // z stays the copy when the name the inode was known by goes (the kernel still holds z).
    fs::remove_file(m.mnt.join("x")).unwrap();
    assert_one_file(
        &links_seen(&m.mnt, &["z"]),
        1,
        "one\ntwo\n",
        "after unlink of x",
    );
    assert_eq!(fs::read_to_string(b.join("lo/y")).unwrap(), "one\n");
    assert_eq!(fs::metadata(b.join("lo/x")).unwrap().nlink(), 2);
}

/// The name an inode was copied up through is removed while the kernel still holds the
/// inode through another lower name: that name shows the copy (it was linked to it at the
/// copy-up), not the lower file.
#[test]
fn a_lower_hard_link_outlives_the_name_that_was_copied_up() {
    if !fuse_ok("a_lower_hard_link_outlives_the_name_that_was_copied_up") {
        return;
    }
    use std::io::Write;
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    fs::create_dir_all(b.join("up")).unwrap();
    fs::create_dir_all(b.join("lo")).unwrap();
    fs::write(b.join("lo/x"), "one\n").unwrap();
    fs::hard_link(b.join("lo/x"), b.join("lo/y")).unwrap();
    let m = UnionMount::new(
        &b.join("mnt"),
        &[
            format!("{}=rw", b.join("up").display()),
            format!("{}=ro", b.join("lo").display()),
        ],
    );
    assert_one_file(&links_seen(&m.mnt, &["x", "y"]), 2, "one\n", "untouched");
    let mut held = fs::OpenOptions::new()
        .append(true)
        .open(m.mnt.join("x"))
        .unwrap();
    held.write_all(b"two\n").unwrap();
    fs::remove_file(m.mnt.join("x")).unwrap();
    held.write_all(b"three\n").unwrap();
    drop(held);
    assert_one_file(
        &links_seen(&m.mnt, &["y"]),
        1,
        "one\ntwo\nthree\n",
        "after unlink",
    );
    assert_eq!(fs::read_to_string(b.join("lo/y")).unwrap(), "one\n");
}

/// What a mount shows of `names`: for each, None if absent, else (the first of `names` with the
/// same st_ino, st_nlink, contents), so two mounts compare by which names share an inode.
fn link_groups(mnt: &Path, names: &[&str]) -> Vec<Option<(String, u64, String)>> {
    let seen: Vec<Option<(u64, u64, String)>> = names
        .iter()
        .map(|n| {
            let m = fs::metadata(mnt.join(n)).ok()?;
            Some((m.ino(), m.nlink(), fs::read_to_string(mnt.join(n)).ok()?))
        })
        .collect();
    seen.iter()
        .map(|s| {
            let (ino, nlink, text) = s.clone()?;
            let first = seen
                .iter()
                .position(|o| o.as_ref().is_some_and(|o| o.0 == ino));
            Some((names[first.unwrap()].to_string(), nlink, text))
        })
        .collect()
}

/// Lower hard links agree with kernel overlayfs with `index=on` after every step: removes of
/// lower names before and after a copy-up, writes, renames (one over a lower hard link), links
/// through the mount and a remount of both; the read-only branch is unchanged. Before the fix the union showed one
/// inode per name and kept the removed names in st_nlink.
#[test]
fn lower_hard_links_agree_with_overlayfs_index_on() {
    if !fuse_ok("lower_hard_links_agree_with_overlayfs_index_on") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    let pristine = b.join("pristine");
    fs::create_dir_all(pristine.join("d")).unwrap();
    fs::create_dir_all(pristine.join("e")).unwrap();
    fs::write(pristine.join("d/a"), "one\n").unwrap();
    for n in ["d/b", "e/c", "e/q"] {
        fs::hard_link(pristine.join("d/a"), pristine.join(n)).unwrap();
    }
    fs::write(pristine.join("d/single"), "alone\n").unwrap();
    fs::create_dir_all(pristine.join("g")).unwrap();
    fs::write(pristine.join("g/x"), "ex\n").unwrap();
    fs::hard_link(pristine.join("g/x"), pristine.join("g/y")).unwrap();
    sh(&format!(
        "cp -a {p} {b}/ovl-lower && cp -a {p} {b}/acc-lower",
        p = pristine.display(),
        b = b.display()
    ));
    let lower_before = describe(&b.join("acc-lower"), true);
    let mount_ovl = || {
        OverlayMount::new(
            &b.join("ovl-lower"),
            &b.join("ovl-upper"),
            &b.join("ovl-work"),
            &b.join("ovl"),
        )
    };
    let mount_acc = || {
        fs::create_dir_all(b.join("acc-upper")).unwrap();
        UnionMount::new(
            &b.join("acc"),
            &[
                format!("{}=rw", b.join("acc-upper").display()),
                format!("{}=ro", b.join("acc-lower").display()),
            ],
        )
    };
    let mut ovl = match mount_ovl() {
        Ok(m) => m,
        Err(e) => {
            skip_or_fail(
                "lower_hard_links_agree_with_overlayfs_index_on",
                &format!("cannot mount overlayfs here: {e}"),
            );
            return;
        }
    };
    let mut acc = mount_acc();
    let names = [
        "d/a", "d/b", "e/c", "e/q", "e/b2", "d/n", "d/single", "d/s2", "g/x", "g/y",
    ];
    let append = |p: &Path, s: &str| {
        use std::io::Write;
        fs::OpenOptions::new()
            .append(true)
            .open(p)?
            .write_all(s.as_bytes())
    };
    type Step<'a> = (&'a str, Box<dyn Fn(&Path) -> std::io::Result<()> + 'a>);
    let steps: Vec<Step> = vec![
        ("untouched", Box::new(|_| Ok(()))),
        (
            "rm e/q before any copy-up",
            Box::new(|r| fs::remove_file(r.join("e/q"))),
        ),
        (
            "append to d/a",
            Box::new(move |r| append(&r.join("d/a"), "two\n")),
        ),
        (
            "rm e/c after the copy-up",
            Box::new(|r| fs::remove_file(r.join("e/c"))),
        ),
        (
            "mv d/b e/b2",
            Box::new(|r| fs::rename(r.join("d/b"), r.join("e/b2"))),
        ),
        (
            "ln d/a d/n",
            Box::new(|r| fs::hard_link(r.join("d/a"), r.join("d/n"))),
        ),
        (
            "ln d/single d/s2",
            Box::new(|r| fs::hard_link(r.join("d/single"), r.join("d/s2"))),
        ),
        (
            "append to e/b2",
            Box::new(move |r| append(&r.join("e/b2"), "three\n")),
        ),
        (
            "mv d/s2 g/y (over a lower hard link)",
            Box::new(|r| fs::rename(r.join("d/s2"), r.join("g/y"))),
        ),
        ("remount", Box::new(|_| Ok(()))),
        ("rm d/a", Box::new(|r| fs::remove_file(r.join("d/a")))),
    ];
    let mut wrong = Vec::new();
    for (what, step) in &steps {
        if *what == "remount" {
            drop(ovl);
            drop(acc);
            ovl = mount_ovl().unwrap();
            acc = mount_acc();
        }
        let (o, a) = (outcome(step(&ovl.mnt)), outcome(step(&acc.mnt)));
        if o != a {
            wrong.push(format!("{what}: overlayfs {o}, accord {a}"));
        }
        let (o, a) = (link_groups(&ovl.mnt, &names), link_groups(&acc.mnt, &names));
        if o != a {
            wrong.push(format!(
                "after {what}:\n  overlayfs {o:?}\n  accord    {a:?}"
            ));
        }
    }
    drop(acc);
    drop(ovl);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(
        describe(&b.join("acc-lower"), true),
        lower_before,
        "lower changed"
    );
}

fn outcome(r: std::io::Result<()>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => format!("errno {}", e.raw_os_error().unwrap_or(-1)),
    }
}

/// Lower hard links copied up before a snapshot stay one file after it: a write through one
/// name copies the frozen copy up again, the other name follows, and st_nlink counts the
/// names, not the frozen copy's index link (it counted one more before that was fixed).
#[test]
fn lower_hard_links_stay_one_file_across_a_snapshot() {
    if !fuse_ok("lower_hard_links_stay_one_file_across_a_snapshot") {
        return;
    }
    use std::io::Write;
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    fs::create_dir_all(b.join("up")).unwrap();
    fs::create_dir_all(b.join("lo")).unwrap();
    fs::write(b.join("lo/x"), "one\n").unwrap();
    fs::hard_link(b.join("lo/x"), b.join("lo/y")).unwrap();
    let m = UnionMount::new(
        &b.join("mnt"),
        &[
            format!("{}=rw", b.join("up").display()),
            format!("{}=ro", b.join("lo").display()),
        ],
    );
    let append = |name: &str, text: &str| {
        fs::OpenOptions::new()
            .append(true)
            .open(m.mnt.join(name))
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap()
    };
    assert_one_file(&links_seen(&m.mnt, &["x", "y"]), 2, "one\n", "untouched");
    append("x", "two\n");
    m.ctl(&["snapshot", b.join("snap").to_str().unwrap()]);
    append("y", "three\n");
    // Past the attribute timeout, so the kernel asks for st_nlink again.
    std::thread::sleep(std::time::Duration::from_millis(1200));
    assert_one_file(
        &links_seen(&m.mnt, &["x", "y"]),
        2,
        "one\ntwo\nthree\n",
        "after a snapshot and a write",
    );
    assert_eq!(fs::read_to_string(b.join("up/x")).unwrap(), "one\ntwo\n");
}
