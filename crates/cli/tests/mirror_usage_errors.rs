//! Arguments that make no sense are usage errors (exit 64) before anything
//! is made: an unbounded `--jobs`, contradictory flags.

mod mirror_common;
use mirror_common::*;
use std::path::Path;
use std::process::{Command, Output};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `-j 100000` on two files once ran for over 90 s with 440 MB.
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

/// Contradictory flags were once accepted silently (`--delete` even
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
