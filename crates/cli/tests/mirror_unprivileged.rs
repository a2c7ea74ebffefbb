//! Regression tests for defects of `accord mirror` found by using it as a
//! new user and as an adversary: a non-root mirror locking itself out of
//! directories whose modes it copied, remote-looking roots created as local
//! directories, an unbounded `--jobs`, names that are not UTF-8 shown alike,
//! and contradictory flags accepted silently.

mod mirror_common;
use mirror_common::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// The temp dir of `roots()`, handed to user 65534 (nobody), with `src`
/// created; `None` (after saying why) when that cannot be done here.
fn nobody_roots() -> Option<(tempfile::TempDir, PathBuf, PathBuf, PathBuf)> {
    if !is_root() {
        eprintln!("SKIPPED: needs root to run the mirror as user 65534");
        return None;
    }
    if !have("setpriv") {
        eprintln!("SKIPPED: setpriv (util-linux) is not installed");
        return None;
    }
    let (t, src, dst, state) = roots();
    std::fs::create_dir(&src).unwrap();
    Some((t, src, dst, state))
}

/// Give the whole tree under `dir` to user 65534.
fn give_to_nobody(dir: &Path) {
    sh(&format!("chown -R 65534:65534 '{}'", dir.display()));
}

/// `accord mirror -i ARGS` as user 65534, with no supplementary groups.
fn mirror_as_nobody(state: &Path, args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin())
        .arg("mirror")
        .arg("-i")
        .args(args)
        .env("ACCORD_STATE_DIR", state)
        .output()
        .expect("run accord through setpriv")
}

fn assert_same_trees(src: &Path, dst: &Path) {
    let d = differences(&snapshot(src), &snapshot(dst));
    assert!(d.is_empty(), "{d:#?}");
}

/// Defect 1: as an unprivileged user, a source directory of mode 000 was
/// copied with its mode, and every later run stopped with "cannot read
/// destination" (exit 3), even after the source was fixed.
#[test]
fn nonroot_mirror_does_not_lock_itself_out_of_a_copied_mode_000() {
    let Some((t, src, dst, state)) = nobody_roots() else {
        return;
    };
    std::fs::create_dir(src.join("locked")).unwrap();
    std::fs::create_dir(src.join("ro")).unwrap();
    std::fs::write(src.join("ro/f"), b"one").unwrap();
    give_to_nobody(t.path());
    chmod(&src.join("ro"), 0o555);
    chmod(&src.join("locked"), 0o000);
    let args = [s(&src), s(&dst)];

    // The source's own 000 directory cannot be read (exit 2, deletions
    // suspended), but it is copied, with its mode.
    let o = mirror_as_nobody(&state, &args);
    assert_exit(&o, 2);
    assert_eq!(mode(&dst.join("locked")), 0o000);
    assert_eq!(mode(&dst.join("ro")), 0o555);

    // A later run still compares the destination (exit 2 for the source
    // alone, not 3) and updates a file inside the 0555 directory.
    std::fs::write(src.join("ro/f"), b"changed").unwrap();
    let o = mirror_as_nobody(&state, &args);
    assert_exit(&o, 2);
    assert!(
        !stderr(&o).contains("cannot read destination"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(dst.join("ro/f")).unwrap(), b"changed");
    assert_eq!(mode(&dst.join("locked")), 0o000, "its mode is set again");
    assert_eq!(mode(&dst.join("ro")), 0o555);

    // Once the source is fixed, the destination follows it exactly.
    chmod(&src.join("locked"), 0o755);
    let o = mirror_as_nobody(&state, &args);
    assert_exit(&o, 0);
    assert_eq!(mode(&dst.join("locked")), 0o755);
    assert_same_trees(&src, &dst);
}

/// Defect 1, the write side: a file changed inside a directory of mode 0555
/// or 0500 is updated (the directory is made writable for the commit and
/// given its mode and time back after), and a run with nothing to do
/// changes nothing.
#[test]
fn nonroot_mirror_updates_files_in_read_only_directories() {
    let Some((t, src, dst, state)) = nobody_roots() else {
        return;
    };
    for d in ["r555", "r500", "r500/inner"] {
        std::fs::create_dir(src.join(d)).unwrap();
    }
    for f in ["r555/f", "r500/f", "r500/inner/g", "r500/gone"] {
        std::fs::write(src.join(f), b"one").unwrap();
    }
    give_to_nobody(t.path());
    for (d, m) in [("r555", 0o555), ("r500/inner", 0o500), ("r500", 0o500)] {
        chmod(&src.join(d), m);
    }
    let args = [s(&src), s(&dst)];
    assert_exit(&mirror_as_nobody(&state, &args), 0);
    assert_same_trees(&src, &dst);

    // Contents changed, a file deleted, a file added (as root: the
    // source's directories are read-only).
    for f in ["r555/f", "r500/f", "r500/inner/g"] {
        std::fs::write(src.join(f), b"changed contents").unwrap();
    }
    std::fs::remove_file(src.join("r500/gone")).unwrap();
    std::fs::write(src.join("r555/new"), b"new").unwrap();
    give_to_nobody(&src);
    let o = mirror_as_nobody(&state, &args);
    assert_exit(&o, 0);
    assert_same_trees(&src, &dst);
    assert_eq!(mode(&dst.join("r555")), 0o555);
    assert_eq!(mode(&dst.join("r500/inner")), 0o500);

    // Nothing left to do: nothing is changed (no chmod back and forth).
    let o = mirror_as_nobody(&state, &args);
    assert_exit(&o, 0);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "", "{}", stderr(&o));
}

/// Defect 1, a destination directory that can be opened but not searched
/// (0600: its entries cannot be stat'ed) or not opened at all (0000).
#[test]
fn nonroot_mirror_reads_destination_directories_it_cannot_search() {
    let Some((t, src, dst, state)) = nobody_roots() else {
        return;
    };
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    std::fs::write(src.join("a/b/f"), b"one").unwrap();
    give_to_nobody(t.path());
    let args = [s(&src), s(&dst)];
    assert_exit(&mirror_as_nobody(&state, &args), 0);
    for m in [0o600, 0o000, 0o100, 0o400] {
        chmod(&dst.join("a/b"), m);
        chmod(&dst.join("a"), m);
        std::fs::write(src.join("a/b/f"), format!("mode {m:o}")).unwrap();
        let o = mirror_as_nobody(&state, &args);
        assert_exit(&o, 0);
        assert_same_trees(&src, &dst);
    }
}

/// Defect 1: a dry run changes nothing, not even a mode: a destination
/// directory it cannot read stays unread (and is reported).
#[test]
fn nonroot_dry_run_leaves_an_unreadable_destination_directory_alone() {
    let Some((t, src, dst, state)) = nobody_roots() else {
        return;
    };
    std::fs::create_dir(src.join("d")).unwrap();
    give_to_nobody(t.path());
    let args = [s(&src), s(&dst)];
    assert_exit(&mirror_as_nobody(&state, &args), 0);
    chmod(&dst.join("d"), 0o000);
    let o = mirror_as_nobody(&state, &["-n", s(&src), s(&dst)]);
    assert_exit(&o, 3);
    assert_eq!(mode(&dst.join("d")), 0o000);
    assert_exit(&mirror_as_nobody(&state, &args), 0);
    assert_eq!(mode(&dst.join("d")), 0o755);
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

/// Defect 2: `accord mirror src host:path` and `… accord://host/x` exited 0
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

/// Defect 3: `-j 100000` on two files ran for over 90 s with 440 MB.
#[test]
fn jobs_are_bounded() {
    let (_t, src, dst, state) = roots();
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    std::fs::write(src.join("b"), b"b").unwrap();
    for j in ["100000", "1025", "18446744073709551616", "-1"] {
        let start = std::time::Instant::now();
        let o = mirror(&state, &[&format!("--jobs={j}"), s(&src), s(&dst)]);
        assert_exit(&o, 64);
        assert!(stderr(&o).contains("--jobs"), "{}", stderr(&o));
        assert!(start.elapsed().as_secs() < 10);
        assert!(!dst.exists(), "a refused run created DST");
    }
    for j in ["1024", "1", "0"] {
        assert_exit(&mirror(&state, &["-q", "-j", j, s(&src), s(&dst)]), 0);
    }
    // The default is unchanged: 0, twice the cores (at least 4).
    let help = Command::new(bin())
        .args(["mirror", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let line = help.lines().find(|l| l.contains("--jobs")).unwrap();
    assert!(line.contains("twice the cores, at least 4"), "{line}");
    assert!(line.contains("At most 1024"), "{line}");
    assert!(line.contains("[default: 0]"), "{line}");
}

/// Defect 4: names that are not UTF-8 were shown with U+FFFD, so `a\xff`
/// and `a\xfe` looked the same in `-i`, on stderr and in `--json`.
#[test]
fn names_that_are_not_utf8_display_distinctly() {
    let (_t, src, dst, state) = roots();
    std::fs::create_dir(&src).unwrap();
    let path = |name: &[u8]| src.join(OsStr::from_bytes(name));
    std::fs::write(path(b"a\xff"), b"1").unwrap();
    std::fs::write(path(b"a\xfe"), b"2").unwrap();
    std::fs::write(path(b"b\\xff"), b"3").unwrap();
    // Names reserved for accord's temp files are reported per path (not
    // copied): their names reach stderr and the JSON errors.
    std::fs::write(path(b".accord-tmp-\xff"), b"4").unwrap();
    std::fs::write(path(b".accord-tmp-\xfe"), b"5").unwrap();
    let o = mirror(&state, &["-i", s(&src), s(&dst)]);
    assert_exit(&o, 2);
    let out = String::from_utf8(o.stdout.clone()).unwrap();
    let mut lines: Vec<&str> = out.lines().filter(|l| l.starts_with("created")).collect();
    lines.sort();
    assert_eq!(
        lines,
        ["created   a\\xfe", "created   a\\xff", "created   b\\\\xff"],
        "{out}"
    );
    let err = stderr(&o);
    assert!(!err.contains('\u{fffd}'), "{err}");
    assert!(err.contains(".accord-tmp-\\xff:"), "{err}");
    assert!(err.contains(".accord-tmp-\\xfe:"), "{err}");

    let o = mirror(&state, &["--json", s(&src), s(&dst)]);
    assert_exit(&o, 2);
    let paths: Vec<String> = json_field(&o.stdout, "errors")
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(paths, [".accord-tmp-\\xfe", ".accord-tmp-\\xff"]);
}

/// Defect 5: contradictory flags were accepted silently (`--delete` even
/// overrode `--keep-extra`).
#[test]
fn contradictory_flags_are_usage_errors() {
    let (_t, src, dst, state) = roots();
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"x").unwrap();
    for (flags, both) in [
        (
            &["--keep-extra", "--delete"][..],
            ["--keep-extra", "--delete"],
        ),
        (
            &["--delete", "--keep-extra"][..],
            ["--keep-extra", "--delete"],
        ),
        (
            &["--inplace", "--delta", "never"][..],
            ["--inplace", "--delta never"],
        ),
        (
            &["--delta=never", "--inplace"][..],
            ["--inplace", "--delta never"],
        ),
        (&["--owner", "--no-owner"][..], ["--owner", "--no-owner"]),
    ] {
        let mut args = flags.to_vec();
        args.extend([s(&src), s(&dst)]);
        let o = mirror(&state, &args);
        assert_exit(&o, 64);
        for flag in both {
            assert!(stderr(&o).contains(flag), "{flags:?}: {}", stderr(&o));
        }
        assert!(!dst.exists(), "{flags:?} created DST");
    }
    // --inplace alone (a delta by default) and with --delta always works.
    assert_exit(&mirror(&state, &["-q", s(&src), s(&dst)]), 0);
    for flags in [&["--inplace"][..], &["--inplace", "--delta", "always"]] {
        std::fs::write(src.join("f"), format!("{flags:?} changed it")).unwrap();
        let mut args = flags.to_vec();
        args.extend([s(&src), s(&dst)]);
        assert_exit(&mirror(&state, &args), 0);
        assert_eq!(
            std::fs::read(dst.join("f")).unwrap(),
            std::fs::read(src.join("f")).unwrap()
        );
    }
}
