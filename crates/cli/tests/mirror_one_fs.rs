//! `-x` (`--one-file-system`) against rsync's: a tmpfs mounted inside
//! the source is copied as an empty directory with `-x` and left out with
//! `-xx`; a tmpfs mounted inside the destination is never descended into
//! to delete. Each case runs rsync and accord on copies of the same trees
//! and compares the results in every attribute.

mod mirror_common;
mod remote_common;

use mirror_common::*;
use std::path::Path;
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn rsync(args: &[&str]) {
    let st = Command::new("rsync")
        .args(args)
        .status()
        .expect("run rsync");
    assert!(st.success(), "rsync {args:?} failed");
}

/// Give every entry under `roots` one old modification time: rsync leaves
/// a directory's time alone when it is within the second of the source's,
/// and entries made for the two destinations apart differ in theirs.
fn age(roots: &[&Path]) {
    for r in roots {
        sh(&format!(
            "find '{}' -depth -exec touch -h -d @1500000000 {{}} +",
            s(r)
        ));
    }
}

fn assert_same(want: &Path, got: &Path, what: &str) {
    let d = differences(&snapshot(want), &snapshot(got));
    assert!(
        d.is_empty(),
        "{what}: rsync and accord differ:\n{}",
        d.join("\n")
    );
}

/// Can this test mount tmpfs? (root and rsync; else skipped or failed as
/// `skip_or_fail` says).
fn can_run() -> bool {
    need_root("mounting a tmpfs") && need("rsync", "rsync")
}

fn tmpfs(at: &Path, mode: &str) -> Mounted {
    std::fs::create_dir_all(at).unwrap();
    let opts = format!("size=4m,mode={mode}");
    mount(&["-t", "tmpfs", "-o", &opts, "accord-test"], at).expect("mount -t tmpfs")
}

/// A source with a file, a directory and a tmpfs at `mnt` holding a file
/// and a directory.
fn source_with_mount(src: &Path) -> Mounted {
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("a"), b"a\n").unwrap();
    std::fs::write(src.join("d/b"), b"b\n").unwrap();
    let m = tmpfs(&src.join("mnt"), "0750");
    std::fs::write(src.join("mnt/m"), b"on the mount\n").unwrap();
    std::fs::create_dir(src.join("mnt/sub")).unwrap();
    std::fs::write(src.join("mnt/sub/s"), b"deeper\n").unwrap();
    m
}

/// A destination holding entries where the source's mount point is.
fn destination_with_extras(dst: &Path) {
    std::fs::create_dir_all(dst.join("mnt/x")).unwrap();
    std::fs::write(dst.join("mnt/extra"), b"extra\n").unwrap();
}

#[test]
fn x_copies_a_source_mount_point_empty_and_deletes_nothing_inside() {
    if !can_run() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let (src, want, got) = (p.join("src"), p.join("rsync"), p.join("accord"));
    let _m = source_with_mount(&src);
    destination_with_extras(&want);
    destination_with_extras(&got);
    age(&[&src, &want, &got]);
    rsync(&[
        "-aHAX",
        "-x",
        "--delete",
        &format!("{}/", s(&src)),
        s(&want),
    ]);
    let o = mirror_walk(&p.join("state"), &["-x", s(&src), s(&got)]);
    assert_exit(&o, 0);
    assert!(
        !got.join("mnt/m").exists(),
        "the mount's contents were copied"
    );
    assert!(
        got.join("mnt/extra").exists(),
        "deleted inside a mount point"
    );
    assert_same(&want, &got, "-x");
    // Run again: nothing to do, nothing lost.
    let o = mirror_walk(&p.join("state"), &["-x", s(&src), s(&got), "--json"]);
    assert_exit(&o, 0);
    assert_eq!(json_field(&o.stdout, "files_transferred"), 0);
    assert_same(&want, &got, "-x, second run");
}

#[test]
fn xx_leaves_a_source_mount_point_out() {
    if !can_run() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let (src, want, got) = (p.join("src"), p.join("rsync"), p.join("accord"));
    let _m = source_with_mount(&src);
    destination_with_extras(&want);
    destination_with_extras(&got);
    age(&[&src, &want, &got]);
    rsync(&[
        "-aHAX",
        "-xx",
        "--delete",
        &format!("{}/", s(&src)),
        s(&want),
    ]);
    // rsync deletes DST's mnt (the source's is left out): that is most of
    // this small destination, so the deletion guard asks for --force.
    let o = mirror_walk(&p.join("state"), &["-xx", "--force", s(&src), s(&got)]);
    assert_exit(&o, 0);
    assert!(!got.join("mnt").exists());
    assert_same(&want, &got, "-xx");
}

#[test]
fn without_x_the_mount_is_copied() {
    if !can_run() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let (src, got) = (p.join("src"), p.join("accord"));
    let _m = source_with_mount(&src);
    let o = mirror_walk(&p.join("state"), &[s(&src), s(&got)]);
    assert_exit(&o, 0);
    assert_eq!(std::fs::read(got.join("mnt/sub/s")).unwrap(), b"deeper\n");
}

/// DST with `keep` (a mount the source also has as a directory) and
/// `gone` (a mount the source does not have), each holding entries the
/// source does not.
fn destination_with_mounts(dst: &Path) -> [Mounted; 2] {
    std::fs::create_dir_all(dst).unwrap();
    let keep = tmpfs(&dst.join("keep"), "0755");
    std::fs::write(dst.join("keep/old"), b"old\n").unwrap();
    std::fs::create_dir(dst.join("keep/olddir")).unwrap();
    let gone = tmpfs(&dst.join("gone"), "0755");
    std::fs::write(dst.join("gone/g"), b"g\n").unwrap();
    [keep, gone]
}

#[test]
fn x_never_deletes_across_a_destination_mount_point() {
    if !can_run() {
        return;
    }
    for x in ["-x", "-xx"] {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        let (src, want, got) = (p.join("src"), p.join("rsync"), p.join("accord"));
        std::fs::create_dir_all(src.join("keep")).unwrap();
        std::fs::create_dir_all(src.join("other")).unwrap();
        std::fs::write(src.join("keep/new"), b"new\n").unwrap();
        std::fs::write(src.join("other/o"), b"o\n").unwrap();
        let _w = destination_with_mounts(&want);
        let _g = destination_with_mounts(&got);
        age(&[&src, &want, &got]);
        rsync(&["-aHAX", x, "--delete", &format!("{}/", s(&src)), s(&want)]);
        let o = mirror_walk(&p.join("state"), &[x, s(&src), s(&got)]);
        assert_exit(&o, 0);
        assert_eq!(std::fs::read(got.join("keep/new")).unwrap(), b"new\n");
        assert!(got.join("keep/old").exists() && got.join("gone/g").exists());
        assert_same(&want, &got, x);
    }
}

#[test]
fn x_over_ssh_matches_a_local_run() {
    if !can_run() {
        return;
    }
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    for x in ["-x", "-xx"] {
        let t = tempfile::tempdir().unwrap();
        let p = t.path();
        let (src, want, pulled, pushed) = (
            p.join("src"),
            p.join("rsync"),
            p.join("pulled"),
            p.join("pushed"),
        );
        let _m = source_with_mount(&src);
        age(&[&src]);
        rsync(&["-aHAX", x, "--delete", &format!("{}/", s(&src)), s(&want)]);
        let rsh = sshd.rsh();
        let far_src = sshd.root(&src);
        let o = remote_common::remote_mirror(&p.join("st1"), &rsh, &[x, &far_src, s(&pulled)]);
        assert_exit(&o, 0);
        assert_same(&want, &pulled, &format!("{x}, remote source"));
        let far_dst = sshd.root(&pushed);
        let o = remote_common::remote_mirror(&p.join("st2"), &rsh, &[x, s(&src), &far_dst]);
        assert_exit(&o, 0);
        assert_same(&want, &pushed, &format!("{x}, remote destination"));
    }
}

#[test]
fn x_over_ssh_never_deletes_across_a_destination_mount_point() {
    if !can_run() {
        return;
    }
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let (src, want, got) = (p.join("src"), p.join("rsync"), p.join("accord"));
    std::fs::create_dir_all(src.join("keep")).unwrap();
    std::fs::write(src.join("keep/new"), b"new\n").unwrap();
    let _w = destination_with_mounts(&want);
    let _g = destination_with_mounts(&got);
    age(&[&src, &want, &got]);
    rsync(&[
        "-aHAX",
        "-x",
        "--delete",
        &format!("{}/", s(&src)),
        s(&want),
    ]);
    let far = sshd.root(&got);
    let o = remote_common::remote_mirror(&p.join("st"), &sshd.rsh(), &["-x", s(&src), &far]);
    assert_exit(&o, 0);
    assert!(got.join("keep/old").exists() && got.join("gone/g").exists());
    assert_same(&want, &got, "-x, remote destination");
}

#[test]
fn task_runs_refuse_x() {
    let (_t, src, dst, state) = roots();
    std::fs::create_dir_all(&src).unwrap();
    let o = mirror_walk(&state, &["-x", "--executor", "tasks", s(&src), s(&dst)]);
    assert_exit(&o, 64);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--one-file-system"), "{err}");
    assert!(!dst.exists());
}
