//! Roots a run must not touch are refused before anything changes: one
//! root inside the other (also when a bind mount hides it), a destination
//! another run holds, and remote roots that cannot be reached.

mod mirror_common;
use mirror_common::*;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write(p: &Path, data: &[u8]) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

#[test]
fn bind_mount_of_a_source_directory_as_destination_is_refused() {
    if !need_root("a bind mount") {
        return;
    }
    let (_t, src, dst, state) = roots();
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/onlyhere"), b"the only copy").unwrap();
    std::fs::write(src.join("top"), b"top").unwrap();
    std::fs::create_dir_all(&dst).unwrap();
    let Some(_m) = mount(&["--bind", s(&src.join("sub"))], &dst) else {
        skip_or_fail("mount --bind failed here");
        return;
    };
    let o = mirror(&state, &[s(&src), s(&dst)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("inside the source"), "{err}");
    assert!(err.contains("bind mount"), "{err}");
    assert_eq!(
        std::fs::read(src.join("sub/onlyhere")).unwrap(),
        b"the only copy"
    );
    // The other way round: the source is a directory inside the destination.
    let (_t2, src2, dst2, state2) = roots();
    std::fs::create_dir_all(dst2.join("inner")).unwrap();
    std::fs::write(dst2.join("inner/keep"), b"keep").unwrap();
    std::fs::create_dir_all(&src2).unwrap();
    let Some(_m2) = mount(&["--bind", s(&dst2.join("inner"))], &src2) else {
        skip_or_fail("mount --bind failed here: the source inside the destination is not tested");
        return;
    };
    let o = mirror(&state2, &[s(&src2), s(&dst2), "--force"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("inside the destination"), "{err}");
    assert_eq!(std::fs::read(dst2.join("inner/keep")).unwrap(), b"keep");
}

/// One root inside the other is refused before anything changes.
#[test]
fn nested_roots_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let (backup, state) = (t.path().join("backup"), t.path().join("state"));
    write(&backup.join("photos/p1.jpg"), b"jpeg");
    write(&backup.join("other"), b"x");
    let photos = backup.join("photos");
    for (s, d) in [(&photos, &backup), (&backup, &photos)] {
        let out = mirror(
            &state,
            &["--force", s.to_str().unwrap(), d.to_str().unwrap()],
        );
        assert_exit(&out, 3);
        assert!(String::from_utf8_lossy(&out.stderr).contains("inside"));
    }
    assert_eq!(fs::read(backup.join("photos/p1.jpg")).unwrap(), b"jpeg");
    assert!(!backup.join("photos/photos").exists());
}

/// Two runs into one destination: the second refuses while the first holds
/// the destination's lock (here taken by flock(1) the same way).
#[test]
fn a_second_run_into_a_locked_destination_is_refused() {
    if !need("flock", "util-linux") {
        return;
    }
    let (_tmp, src, dst, state) = roots();
    write(&src.join("f"), b"new");
    write(&dst.join("f"), b"old");
    set_mtime(&dst.join("f"), 1_000_000_000, 0);
    let mut holder = hold_lock(&dst);
    let out = mirror(&state, &[src.to_str().unwrap(), dst.to_str().unwrap()]);
    holder.kill().unwrap();
    let _ = holder.wait();
    assert_exit(&out, 3);
    assert!(String::from_utf8_lossy(&out.stderr).contains("another accord run"));
    assert_eq!(fs::read(dst.join("f")).unwrap(), b"old");
    let out = mirror(&state, &[src.to_str().unwrap(), dst.to_str().unwrap()]);
    assert_exit(&out, 0);
    assert_eq!(fs::read(dst.join("f")).unwrap(), b"new");
}

/// `accord mirror ARGS` run in `cwd`.
fn mirror_in(cwd: &Path, state: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .arg("mirror")
        .args(args)
        .current_dir(cwd)
        .env("ACCORD_STATE_DIR", state)
        .output()
        .expect("run accord")
}

/// Names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// `accord mirror src host:path` and `… accord://host/x` once exited 0
/// after creating local directories named `host:path` and `accord:/host/x`.
/// Remote roots exist now: one that cannot be reached (here: an ssh that
/// fails at once) is one line and exit 69, and nothing local is created.
#[test]
fn unreachable_remote_roots_are_refused_before_anything_is_created() {
    let (t, src, _dst, state) = roots();
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"x").unwrap();
    let before = names(t.path());
    for remote in [
        "host:path",
        "user@host:backup/x",
        "host:",
        "[::1]:dir",
        "accord://host.invalid/x",
        "accord://host.invalid:7000/x",
        "ssh://user@host/x",
    ] {
        for roots in [["src", remote], [remote, "src"]] {
            let args = ["--rsh", "false", roots[0], roots[1]];
            let o = mirror_in(t.path(), &state, &args);
            assert_exit(&o, 69);
            let err = stderr(&o);
            assert!(
                err.starts_with("accord mirror: ") && err.lines().count() == 1,
                "{args:?}: {err}"
            );
            assert_eq!(names(t.path()), before, "{args:?} created something");
        }
    }
    // A colon after a slash, or at the very start, is a local name.
    let abs = t.path().join("abs:colon");
    for local in ["./host:path", "sub/host:path", ":colon", s(&abs)] {
        let o = mirror_in(t.path(), &state, &["-q", "src", local]);
        assert_exit(&o, 0);
        assert_eq!(std::fs::read(t.path().join(local).join("f")).unwrap(), b"x");
    }
}

/// The destination bind-mounted inside the source is found only when the
/// walk reaches it. An initial copy into an empty destination is made as
/// it is walked, so by then files may be copied: they are whole, their
/// directories get their properties, and the run stops with the nesting.
/// (One thread: the walk reaches `a`, a part's worth of files, first.)
#[test]
fn nested_roots_found_after_part_of_an_initial_copy_was_made() {
    if !need_root("a bind mount") {
        return;
    }
    let (_t, src, dst, state) = roots();
    for f in 0..2500 {
        write(&src.join(format!("a/f{f}")), format!("{f}").as_bytes());
    }
    chmod(&src.join("a"), 0o750);
    fs::create_dir_all(src.join("zz/mnt")).unwrap();
    fs::create_dir_all(&dst).unwrap();
    let Some(_m) = mount(&["--bind", s(&dst)], &src.join("zz/mnt")) else {
        skip_or_fail("mount --bind failed here");
        return;
    };
    let o = mirror_walk(&state, &["--jobs", "1", s(&src), s(&dst)]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("inside the source"), "{err}");
    let copied: Vec<_> = fs::read_dir(dst.join("a")).unwrap().flatten().collect();
    assert!(copied.len() >= 2048, "{} files copied before", copied.len());
    for e in &copied {
        let name = e.file_name().into_string().unwrap();
        assert!(!name.starts_with(".accord-tmp-"), "{name} left");
        let n = &name[1..];
        assert_eq!(fs::read(e.path()).unwrap(), n.as_bytes(), "{name}");
    }
    use std::os::unix::fs::PermissionsExt;
    let mode = fs::metadata(dst.join("a")).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o750, "the directory's mode was set");
}
