//! What a run shows: `-n` names the transfer method of each update, and
//! names that are not UTF-8 are shown distinctly (escaped) in `-i`, on
//! stderr and in `--json`.

mod mirror_common;
use mirror_common::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Output;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn dry_run_shows_the_transfer_method() {
    let (_t, src, dst, state) = roots();
    std::fs::create_dir_all(&src).unwrap();
    let mut rng = Rng(3);
    let big = rng.bytes(200_000);
    std::fs::write(src.join("big"), &big).unwrap();
    std::fs::write(src.join("small"), b"small").unwrap();
    assert_exit(&mirror(&state, &[s(&src), s(&dst)]), 0);
    let mut changed = big.clone();
    changed[5] ^= 1;
    changed.extend_from_slice(b"more");
    std::fs::write(src.join("big"), &changed).unwrap();
    std::fs::write(src.join("small"), b"smaller!").unwrap();
    let o = mirror(&state, &[s(&src), s(&dst), "-n"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("updated   big (delta)"), "{out}");
    assert!(out.contains("updated   small\n"), "{out}");
    let o = mirror(&state, &[s(&src), s(&dst), "-n", "--inplace"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("updated   big (inplace)"), "{out}");
}

/// Names that are not UTF-8 were once shown with U+FFFD, so `a\xff`
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

/// A destination to mirror into: an extra file, an extra directory
/// holding a file and a subdirectory with a file (five entries to
/// delete), a file the source has alike (not written again), and one it
/// has in another version.
fn destination(dst: &Path) {
    std::fs::create_dir_all(dst.join("old/sub")).unwrap();
    for (p, data) in [
        ("extra", &b"x"[..]),
        ("old/f", b"f"),
        ("old/sub/g", b"g"),
        ("same", b"same"),
        ("changed", b"before"),
    ] {
        std::fs::write(dst.join(p), data).unwrap();
    }
    set_mtime(&dst.join("same"), 1_600_000_000, 0);
}

/// The lines a run showed on its terminal that say `accord mirror: …`,
/// but its summary line (its duration differs from run to run).
fn said(stderr: &[u8]) -> Vec<String> {
    let s = String::from_utf8_lossy(stderr);
    let mut lines: Vec<String> = s
        .lines()
        .filter_map(|l| l.rfind("accord mirror: ").map(|at| l[at..].to_string()))
        .filter(|l| !l.contains(" deleted, in "))
        .collect();
    lines.sort();
    lines
}

/// On a terminal a run ends with one summary line whose figures mean the
/// same whichever executor made the run: the source's regular files, the
/// files written, the destination entries deleted (an extra directory's
/// contents each), the bytes written. A path that fails is shown as
/// `accord mirror: PATH: ERROR` by both, and nothing names the tasks a
/// task run is cut into.
#[test]
fn both_executors_end_with_the_same_summary_line() {
    let (t, src, _, state) = roots();
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    let mut rng = Rng(5);
    for (p, n) in [("a/one", 1000), ("a/b/two", 200_000), ("three", 10)] {
        std::fs::write(src.join(p), rng.bytes(n)).unwrap();
    }
    std::fs::write(src.join("same"), b"same").unwrap();
    set_mtime(&src.join("same"), 1_600_000_000, 0);
    std::fs::write(src.join("changed"), b"after").unwrap();
    // A name reserved for accord's temp files: reported, not copied.
    std::fs::write(src.join(".accord-tmp-q"), b"q").unwrap();
    let mut shown = Vec::new();
    for executor in ["walk", "tasks"] {
        let dst = t.path().join(format!("dst-{executor}"));
        destination(&dst);
        let args = [
            "--executor",
            executor,
            "--max-delete",
            "100%",
            "--stats",
            s(&src),
            s(&dst),
        ];
        let o = mirror_on_terminal(&state, &args);
        assert_exit(&o, 2);
        let figures = summary_figures(&o.stderr);
        // a/one, a/b/two, three, changed; `same` is not written again.
        assert_eq!(figures[1], 4, "{executor}: {}", stderr(&o));
        assert_eq!(figures[2], 5, "{executor}: {}", stderr(&o));
        let written = stat(&o.stdout, "Bytes written");
        assert_eq!(written, 1000 + 200_000 + 10 + 5, "{executor}");
        let lines = said(&o.stderr);
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("accord mirror: .accord-tmp-q: ")),
            "{executor}: {lines:?}"
        );
        for word in ["task", "leased", "set aside", "attempts"] {
            assert!(
                lines.iter().all(|l| !l.contains(word)),
                "{executor}: {lines:?}"
            );
        }
        shown.push((figures, written, lines));
    }
    assert_eq!(shown[0], shown[1], "walk, then tasks");
}
