//! `--bwlimit RATE`: rsync's units (a plain number is KiB a second), and a
//! run that moves N bytes at RATE takes at least about N / RATE: with two
//! local roots (the file data written) and over ssh (the bytes on the
//! connection). Only lower bounds on time are checked: a loaded machine
//! makes a run slower, never faster.

mod mirror_common;
mod remote_common;

use mirror_common::*;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

const MIB: usize = 1 << 20;

/// A source of `mib` MiB of random (incompressible) data in two files.
fn source(src: &Path, mib: usize) {
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let mut rng = Rng(11);
    std::fs::write(src.join("a"), rng.bytes(mib * MIB / 2)).unwrap();
    std::fs::write(src.join("sub/b"), rng.bytes(mib * MIB / 2)).unwrap();
}

/// The least time `bytes` can take at `rate` bytes a second: the limiter
/// lets a tenth of a second's worth run ahead, and a little is spared for
/// the clock.
fn least(bytes: usize, rate: usize) -> Duration {
    Duration::from_secs_f64(bytes as f64 / rate as f64 - 0.3)
}

fn timed(f: impl FnOnce() -> Output) -> (Output, Duration) {
    let start = Instant::now();
    let o = f();
    (o, start.elapsed())
}

#[test]
fn local_copy_keeps_to_the_rate() {
    let (_t, src, dst, state) = roots();
    source(&src, 4);
    // A clone writes no data: this measures the bytes written.
    let args = ["--bwlimit", "1M", "--reflink", "never", s(&src), s(&dst)];
    let (o, took) = timed(|| mirror_walk(&state, &args));
    assert_exit(&o, 0);
    assert!(differences(&snapshot(&src), &snapshot(&dst)).is_empty());
    assert!(
        took >= least(4 * MIB, MIB),
        "4 MiB at 1 MiB/s took {took:?}"
    );
}

#[test]
fn a_plain_number_is_kib_a_second() {
    let (_t, src, dst, state) = roots();
    source(&src, 2);
    let args = ["--bwlimit", "1024", "--reflink", "never", s(&src), s(&dst)];
    let (o, took) = timed(|| mirror_walk(&state, &args));
    assert_exit(&o, 0);
    assert!(
        took >= least(2 * MIB, MIB),
        "2 MiB at 1024 KiB/s took {took:?}"
    );
    // KB is a thousand bytes: 2 MiB at 2000 KB/s is just over a second.
    let (_t2, src2, dst2, state2) = roots();
    source(&src2, 2);
    let args = [
        "--bwlimit",
        "2000KB",
        "--reflink",
        "never",
        s(&src2),
        s(&dst2),
    ];
    let (o, took) = timed(|| mirror_walk(&state2, &args));
    assert_exit(&o, 0);
    assert!(took >= least(2 * MIB, 2_000_000), "took {took:?}");
}

#[test]
fn zero_is_no_limit_and_bad_rates_are_usage_errors() {
    let (_t, src, dst, state) = roots();
    source(&src, 1);
    let o = mirror_walk(&state, &["--bwlimit", "0", s(&src), s(&dst)]);
    assert_exit(&o, 0);
    assert!(differences(&snapshot(&src), &snapshot(&dst)).is_empty());
    for bad in ["1X", "fast", "100b", "5Q"] {
        let o = mirror_walk(&state, &["--bwlimit", bad, s(&src), s(&dst)]);
        assert_exit(&o, 64);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("--bwlimit"), "{bad}: {err}");
    }
    let o = mirror_walk(
        &state,
        &["--bwlimit", "1M", "--executor", "tasks", s(&src), s(&dst)],
    );
    assert_exit(&o, 64);
}

#[test]
fn push_and_pull_over_ssh_keep_to_the_rate() {
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let (src, pushed, pulled) = (p.join("src"), p.join("pushed"), p.join("pulled"));
    source(&src, 4);
    let rsh = sshd.rsh();
    let far = sshd.root(&pushed);
    let push = ["--bwlimit", "1M", s(&src), far.as_str()];
    let (o, took) = timed(|| remote_common::remote_mirror(&p.join("st1"), &rsh, &push));
    assert_exit(&o, 0);
    assert!(differences(&snapshot(&src), &snapshot(&pushed)).is_empty());
    assert!(
        took >= least(4 * MIB, MIB),
        "push of 4 MiB at 1 MiB/s took {took:?}"
    );
    let far = sshd.root(&src);
    let pull = ["--bwlimit", "1M", far.as_str(), s(&pulled)];
    let (o, took) = timed(|| remote_common::remote_mirror(&p.join("st2"), &rsh, &pull));
    assert_exit(&o, 0);
    assert!(differences(&snapshot(&src), &snapshot(&pulled)).is_empty());
    assert!(
        took >= least(4 * MIB, MIB),
        "pull of 4 MiB at 1 MiB/s took {took:?}"
    );
}
