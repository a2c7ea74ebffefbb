//! Regression tests for defects of `accord mirror` found by using it as a
//! new user and as an adversary: a non-root mirror locking itself out of
//! directories whose modes it copied, remote-looking roots created as local
//! directories, an unbounded `--jobs`, names that are not UTF-8 shown alike,
//! and contradictory flags accepted silently.

mod mirror_common;
use mirror_common::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
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
#[test]
fn remote_roots_are_refused_before_anything_is_created() {
    let (t, src, _dst, state) = roots();
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"x").unwrap();
    let before = names(t.path());
    for remote in [
        "host:path",
        "user@host:backup/x",
        "host:",
        "[::1]:dir",
        "accord://host/x",
        "accord://host:7000/x",
        "ssh://user@host/x",
    ] {
        for args in [["src", remote], [remote, "src"]] {
            let o = mirror_in(t.path(), &state, &args);
            assert_exit(&o, 69);
            assert_eq!(
                stderr(&o),
                format!(
                    "accord mirror: remote roots are not built yet: {remote} \
                     (for a local path with a colon, write ./{remote})\n"
                ),
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
