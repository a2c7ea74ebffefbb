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
