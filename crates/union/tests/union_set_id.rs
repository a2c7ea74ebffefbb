//! Set-user-ID and set-group-ID bits are cleared, on the branch and in what the union shows
//! at once, by every kind of write or truncation of a user without CAP_FSETID.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::*;

/// The mode as `stat -c %a` sees it: statx asks for the mode alone, so the kernel answers from
/// its cached attributes unless the daemon told it they changed.
fn cached_mode(p: &Path) -> String {
    let out = std::process::Command::new("stat")
        .args(["-c", "%a"])
        .arg(p)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A write or truncation by a user without CAP_FSETID clears set-user-ID (and set-group-ID
/// with group execute, or without it when the user is not in the file's group), on the branch
/// and in what the union shows at once, as on a local file system: through a write, an append
/// to a lower file (copied up first), an O_TRUNC open, truncate(2) and fallocate(2) (which the
/// kernel does not flag to FUSE: the bits stayed before it was fixed). Before the first fix the
/// branch file lost the bits but the union kept showing them (from the kernel's cached
/// attributes) for up to a second; before the second, set-group-ID without group execute was
/// kept for a writer outside the file's group.
#[test]
fn write_or_truncate_by_another_user_clears_set_id_at_once() {
    let test = "write_or_truncate_by_another_user_clears_set_id_at_once";
    if !fuse_ok(test)
        || !need(test, "setpriv", "util-linux")
        || !need(test, "fallocate", "util-linux")
    {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    fs::create_dir_all(b.join("up")).unwrap();
    fs::create_dir_all(b.join("lo")).unwrap();
    fs::write(b.join("lo/lower"), "lower\n").unwrap();
    sh(&format!("chmod 6777 {}", b.join("lo/lower").display()));
    let m = UnionMount::new(
        &b.join("mnt"),
        &[
            format!("{}=rw", b.join("up").display()),
            format!("{}=ro", b.join("lo").display()),
        ],
    );
    // The other user must be able to reach the files.
    sh(&format!("chmod 755 {}", b.display()));
    for name in ["write", "otrunc", "truncate", "fallocate"] {
        fs::write(m.mnt.join(name), "x").unwrap();
        sh(&format!("chmod 6777 {}", m.mnt.join(name).display()));
    }
    // Set-group-ID without group execute, written and truncated by a user outside the file's
    // group (root's): the kernel drops it too (since Linux 6.2; checked on ext4 here).
    for name in ["nogx_write", "nogx_trunc"] {
        fs::write(m.mnt.join(name), "x").unwrap();
        sh(&format!("chmod 6666 {}", m.mnt.join(name).display()));
    }
    for name in ["write", "otrunc", "truncate", "fallocate", "lower"] {
        assert_eq!(cached_mode(&m.mnt.join(name)), "6777", "{name} before");
    }
    let mnt = m.mnt.display();
    for cmd in [
        format!("dd if=/dev/zero of={mnt}/write bs=1 count=1 conv=notrunc status=none"),
        format!("echo more >> {mnt}/lower"),
        format!(": > {mnt}/otrunc"),
        format!("truncate -s 0 {mnt}/truncate"),
        format!("fallocate -l 8192 {mnt}/fallocate"),
        format!("echo more >> {mnt}/nogx_write"),
        format!("truncate -s 0 {mnt}/nogx_trunc"),
    ] {
        sh(&format!(
            "setpriv --reuid=65534 --regid=65534 --clear-groups sh -c '{cmd}'"
        ));
    }
    let mut wrong = Vec::new();
    for name in ["write", "otrunc", "truncate", "fallocate", "lower"] {
        let shown = cached_mode(&m.mnt.join(name));
        let branch = fs::metadata(b.join("up").join(name)).unwrap().mode() & 0o7777;
        if shown != "777" || branch != 0o777 {
            wrong.push(format!("{name}: union {shown}, branch {branch:o}"));
        }
    }
    for name in ["nogx_write", "nogx_trunc"] {
        let shown = cached_mode(&m.mnt.join(name));
        let branch = fs::metadata(b.join("up").join(name)).unwrap().mode() & 0o7777;
        if shown != "666" || branch != 0o666 {
            wrong.push(format!("{name}: union {shown}, branch {branch:o}"));
        }
    }
    assert!(wrong.is_empty(), "set-ID bits kept: {wrong:?}");
    let lower = fs::metadata(b.join("lo/lower")).unwrap();
    assert_eq!(
        lower.mode() & 0o7777,
        0o6777,
        "the read-only branch is untouched"
    );
}
