//! The standard FUSE mount options of `accord union mount -o` (they reach the mount, an
//! unknown one is named, allow_other for a user other than root needs user_allow_other), the
//! errors of `umount` and `list` on a directory that is no union, where `add` puts a branch
//! by default, and `readdirplus=off`.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::*;

/// The fields of the mountinfo line of the mount at `mnt`: (mount options, type, source,
/// super options).
fn mountinfo(mnt: &Path) -> Option<(String, String, String, String)> {
    let text = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mnt = mnt.canonicalize().unwrap();
    text.lines().rev().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let f: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        (Path::new(f[4]) == mnt).then(|| {
            (
                f[5].to_string(),
                r[0].to_string(),
                r[1].to_string(),
                r[2].to_string(),
            )
        })
    })
}

fn accord_union(args: &[&str]) -> (i32, String) {
    let out = Command::new(accord())
        .arg("union")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn fuse_options_reach_the_mount() {
    if !fuse_ok("fuse_options_reach_the_mount") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path();
    fs::create_dir_all(b.join("up")).unwrap();
    fs::write(b.join("up/tool"), "#!/bin/sh\necho ran\n").unwrap();
    fs::set_permissions(b.join("up/tool"), fs::Permissions::from_mode(0o755)).unwrap();
    let m = UnionMount::with_options(
        &b.join("mnt"),
        &[format!("{}=rw", b.join("up").display())],
        &[
            "-o",
            "ro,noexec,nosuid",
            "-o",
            "nodev,noatime,fsname=pool,allow_other",
        ],
    );
    let (opts, fstype, source, sup) = mountinfo(&m.mnt).expect("mounted");
    for o in ["ro", "noexec", "nosuid", "nodev", "noatime"] {
        assert!(opts.split(',').any(|x| x == o), "{o} missing in {opts}");
    }
    assert_eq!((fstype.as_str(), source.as_str()), ("fuse.accord", "pool"));
    assert!(sup.contains("allow_other"), "{sup}");
    // ro: nothing can be written; noexec: nothing run.
    let err = fs::write(m.mnt.join("new"), "x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let err = Command::new(m.mnt.join("tool")).output().unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EACCES), "{err}");
    assert_eq!(
        fs::read_to_string(m.mnt.join("tool")).unwrap(),
        "#!/bin/sh\necho ran\n"
    );
}

#[test]
fn an_unknown_option_is_named_and_is_a_usage_error() {
    let t = tempfile::tempdir().unwrap();
    let mnt = t.path().join("mnt");
    fs::create_dir_all(&mnt).unwrap();
    let mnt = mnt.to_str().unwrap();
    let up = t.path().to_str().unwrap();
    let (code, err) = accord_union(&["mount", "-o", "nosuid,alow_other", mnt, up]);
    assert_eq!(code, 64, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("unknown mount option \"alow_other\"") && err.contains("allow_other"),
        "{err}"
    );
    let (code, err) = accord_union(&["mount", "-o", "subtype=mine", mnt, up]);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("subtype=mine"), "{err}");
}

#[test]
fn umount_and_list_of_a_directory_that_is_no_union_say_so_once() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().to_str().unwrap();
    let (code, err) = accord_union(&["umount", dir]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(err, format!("accord union: {dir} is not a mount point\n"));
    let (code, err) = accord_union(&["list", dir]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err,
        format!("accord union: {dir} is not an accord union mount\n")
    );
    let gone = t.path().join("gone");
    let (code, err) = accord_union(&["umount", gone.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert_eq!(
        err,
        format!(
            "accord union: {}: No such file or directory\n",
            gone.display()
        )
    );
}

#[test]
fn add_puts_a_read_only_branch_below_the_writable_one() {
    if !fuse_ok("add_puts_a_read_only_branch_below_the_writable_one") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path();
    for d in ["up", "lo", "extra"] {
        fs::create_dir_all(b.join(d)).unwrap();
    }
    fs::write(b.join("up/notes"), "mine\n").unwrap();
    fs::write(b.join("lo/base"), "lower\n").unwrap();
    fs::write(b.join("extra/notes"), "theirs\n").unwrap();
    fs::write(b.join("extra/base"), "extra's\n").unwrap();
    fs::write(b.join("extra/more"), "more\n").unwrap();
    let m = UnionMount::new(
        &b.join("mnt"),
        &[
            format!("{}=rw", b.join("up").display()),
            format!("{}=ro", b.join("lo").display()),
        ],
    );
    let extra = b.join("extra");
    m.ctl(&["add", extra.to_str().unwrap()]);
    let list = m.ctl(&["list"]);
    let modes: Vec<(&str, &str)> = list
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[1], f[2])
        })
        .collect();
    let canon = |d: &str| b.join(d).canonicalize().unwrap();
    assert_eq!(
        modes,
        [
            ("rw", canon("up").to_str().unwrap()),
            ("ro", canon("extra").to_str().unwrap()),
            ("ro", canon("lo").to_str().unwrap()),
        ],
        "{list}"
    );
    // The writable name stays writable and keeps its contents; the new branch shows ahead of
    // the older read-only one.
    assert_eq!(fs::read_to_string(m.mnt.join("notes")).unwrap(), "mine\n");
    fs::write(m.mnt.join("notes"), "mine, edited\n").unwrap();
    assert_eq!(
        fs::read_to_string(m.mnt.join("notes")).unwrap(),
        "mine, edited\n"
    );
    assert_eq!(fs::read_to_string(m.mnt.join("base")).unwrap(), "extra's\n");
    assert_eq!(fs::read_to_string(m.mnt.join("more")).unwrap(), "more\n");
    assert_eq!(fs::read_to_string(extra.join("notes")).unwrap(), "theirs\n");
    // A branch number that does not exist is named, with the ones that do.
    let other = b.join("other");
    fs::create_dir_all(&other).unwrap();
    let (code, err) = accord_union(&[
        "add",
        m.mnt.to_str().unwrap(),
        other.to_str().unwrap(),
        "--after",
        "7",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no branch 7") && err.contains("0 to 2"),
        "{err}"
    );
}

/// A shell script run in a private mount namespace where /dev/fuse may be opened by anyone
/// (as on most systems) and /etc/fuse.conf is `conf`, so the test does not depend on the
/// host's; the script runs the union as `nobody` through `$AS_NOBODY`.
fn in_namespace_as_nobody(dir: &Path, conf: &str, script: &str) -> (bool, String) {
    fs::write(dir.join("fuse.conf"), conf).unwrap();
    let setup = format!(
        "set -e; [ -e {d}/fuse ] || mknod -m 666 {d}/fuse c 10 229; mount --bind {d}/fuse /dev/fuse; \
         mount --bind {d}/fuse.conf /etc/fuse.conf; \
         AS_NOBODY='setpriv --reuid=65534 --regid=65534 --clear-groups'; {script}",
        d = dir.display()
    );
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &setup])
        .env("ACCORD", accord())
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

#[test]
fn allow_other_for_a_user_needs_user_allow_other() {
    if !fuse_ok("allow_other_for_a_user_needs_user_allow_other")
        || !need(
            "allow_other_for_a_user_needs_user_allow_other",
            "setpriv",
            "util-linux",
        )
    {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    for s in ["up", "mnt"] {
        fs::create_dir_all(d.join(s)).unwrap();
        std::os::unix::fs::chown(d.join(s), Some(65534), Some(65534)).unwrap();
    }
    let (mnt, up) = (d.join("mnt"), d.join("up"));
    let mount = format!(
        "$AS_NOBODY \"$ACCORD\" union mount -o allow_other {} {}",
        mnt.display(),
        up.display()
    );
    // Refused without user_allow_other, with words that say what to do.
    let (ok, said) = in_namespace_as_nobody(d, "", &mount);
    assert!(!ok, "{said}");
    assert_eq!(
        said.trim(),
        "accord union: allow_other was refused: for a user other than root it needs the line \
         user_allow_other in /etc/fuse.conf (root may always use it)"
    );
    // Mounted with it: other users may enter the union.
    let script = format!(
        "{mount}; grep ' {m} ' /proc/self/mountinfo; $AS_NOBODY \"$ACCORD\" union umount {m}",
        m = mnt.display()
    );
    let (ok, said) = in_namespace_as_nobody(d, "user_allow_other\n", &script);
    assert!(ok, "{said}");
    assert!(
        said.contains("fuse.accord") && said.contains("allow_other"),
        "{said}"
    );
}

/// `-o readdirplus=off`: the kernel asks for names only, so a listing takes no reference to
/// the names it shows, and the daemon keeps no node for them once the listing is closed;
/// while it is open, a name's inode number in the listing is the one stat gives.
#[test]
fn a_listing_of_names_only_keeps_no_node_behind() {
    if !fuse_ok("a_listing_of_names_only_keeps_no_node_behind") {
        return;
    }
    use std::os::unix::fs::{DirEntryExt, MetadataExt};
    let t = tempfile::tempdir().unwrap();
    let b = t.path();
    fs::create_dir_all(b.join("up")).unwrap();
    fs::create_dir_all(b.join("lo/d")).unwrap();
    for i in 0..1000 {
        fs::write(b.join(format!("lo/d/f{i}")), "l").unwrap();
    }
    let branches = [
        format!("{}=rw", b.join("up").display()),
        format!("{}=ro", b.join("lo").display()),
    ];
    let m = UnionMount::with_options(&b.join("mnt"), &branches, &["-o", "readdirplus=off"]);
    let d = m.mnt.join("d");
    let mut listing = fs::read_dir(&d).unwrap();
    for e in listing.by_ref().take(10) {
        let e = e.unwrap();
        let stat = fs::symlink_metadata(e.path()).unwrap();
        assert_eq!(e.ino(), stat.ino(), "{:?}", e.file_name());
    }
    assert_eq!(listing.count(), 990);
    // The kernel releases a closed listing after close(2) returns: wait for the count to
    // drop below the listing's 1000 names (the ten stat'ed stay while the kernel holds them).
    let settled = |until: &dyn Fn(usize) -> bool| -> usize {
        let start = std::time::Instant::now();
        loop {
            let n = daemon_inodes(&m);
            if until(n) {
                return n;
            }
            let waited = start.elapsed();
            assert!(
                waited.as_secs() < 10,
                "listings of names left {n} nodes behind"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    let held = settled(&|n| n < 100);
    for _ in 0..3 {
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1000);
    }
    settled(&|n| n == held);
    // With attributes (the default), the same listing hands the kernel every name.
    fs::create_dir_all(b.join("up-plus")).unwrap();
    let plus_branches = [
        format!("{}=rw", b.join("up-plus").display()),
        branches[1].clone(),
    ];
    let plus = UnionMount::new(&b.join("mnt-plus"), &plus_branches);
    let before = daemon_inodes(&plus);
    assert_eq!(fs::read_dir(plus.mnt.join("d")).unwrap().count(), 1000);
    assert!(
        daemon_inodes(&plus) >= before + 1000,
        "READDIRPLUS was not used"
    );
}
