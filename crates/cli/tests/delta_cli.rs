//! End-to-end tests of `accord delta` on real files, with rdiff and rsync as
//! reference tools where they are installed (where they are not, the tests
//! that need them skip loudly, or fail in strict mode: `ACCORD_TEST_STRICT`).

mod mirror_common;

use accord_delta::format::{encode, Command, Header};
use accord_delta::Layout;
use std::path::{Path, PathBuf};
use std::process::{Command as Proc, Output};

fn accord() -> Proc {
    Proc::new(env!("CARGO_BIN_EXE_accord"))
}

fn run(args: &[&Path]) -> Output {
    let out = accord().args(args).output().expect("run accord");
    out
}

fn ok(args: &[&str], paths: &[&Path]) -> String {
    let out = accord()
        .args(args)
        .args(paths)
        .output()
        .expect("run accord");
    assert!(
        out.status.success(),
        "accord {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn pseudo_random(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2654435761) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x >> 8) as u8
        })
        .collect()
}

fn edited(old: &[u8]) -> Vec<u8> {
    let mut new = old.to_vec();
    for i in 0..20 {
        let at = (i * 7919 * 131) % (new.len() - 100);
        new[at..at + 50].copy_from_slice(&pseudo_random(50, i as u32 + 99));
    }
    new.splice(1000..1000, pseudo_random(333, 5));
    new.drain(new.len() / 2..new.len() / 2 + 777);
    new
}

struct Files {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        Files { _dir: dir, root }
    }
    fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }
    fn write(&self, name: &str, data: &[u8]) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, data).unwrap();
        p
    }
}

fn have(tool: &str) -> bool {
    let found = Proc::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        mirror_common::skip_or_fail(&format!(
            "{tool} is not installed; run ./scripts/test to install the reference tools"
        ));
    }
    found
}

#[test]
fn signature_delta_patch_round_trip_both_layouts() {
    let f = Files::new();
    let old_data = pseudo_random(3 << 20, 1);
    let new_data = edited(&old_data);
    let old = f.write("old", &old_data);
    let new = f.write("new", &new_data);
    let (sig, seq, ip, out) = (
        f.path("sig"),
        f.path("d.seq"),
        f.path("d.ip"),
        f.path("out"),
    );
    ok(&["delta", "signature"], &[&old, &sig]);
    let js = ok(&["delta", "delta", "--json"], &[&sig, &new, &seq]);
    let v: serde_json::Value = serde_json::from_str(&js).unwrap();
    for key in [
        "literal_bytes",
        "matched_bytes",
        "copy_commands",
        "add_commands",
        "cycles_broken",
        "converted_bytes",
        "stashed_bytes",
        "planner_peak_bytes",
        "block_len",
        "strong_len",
    ] {
        assert!(v.get(key).is_some(), "--json lacks {key}: {js}");
    }
    assert!(v["literal_bytes"].as_u64().unwrap() < 200_000, "{js}");
    ok(&["delta", "patch"], &[&old, &seq, &out]);
    assert_eq!(std::fs::read(&out).unwrap(), new_data);
    ok(&["delta", "delta", "--in-place"], &[&sig, &new, &ip]);
    ok(&["delta", "patch", "--in-place"], &[&old, &ip]);
    assert_eq!(std::fs::read(&old).unwrap(), new_data);
    // No temporary or recovery files are left behind.
    let names: Vec<String> = std::fs::read_dir(&f.root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
}

#[test]
fn same_result_as_rdiff_and_no_larger_delta() {
    if !have("rdiff") {
        return;
    }
    let f = Files::new();
    let old_data = pseudo_random(8 << 20, 2);
    let new_data = edited(&old_data);
    let old = f.write("old", &old_data);
    let new = f.write("new", &new_data);
    ok(&["delta", "signature"], &[&old, &f.path("sig")]);
    ok(
        &["delta", "delta"],
        &[&f.path("sig"), &new, &f.path("delta")],
    );
    for (args, files) in [
        (vec!["signature"], vec![old.clone(), f.path("rsig")]),
        (
            vec!["delta"],
            vec![f.path("rsig"), new.clone(), f.path("rdelta")],
        ),
        (
            vec!["patch"],
            vec![old.clone(), f.path("rdelta"), f.path("rout")],
        ),
    ] {
        let st = Proc::new("rdiff").args(args).args(files).status().unwrap();
        assert!(st.success());
    }
    ok(
        &["delta", "patch"],
        &[&old, &f.path("delta"), &f.path("out")],
    );
    assert_eq!(
        std::fs::read(f.path("out")).unwrap(),
        std::fs::read(f.path("rout")).unwrap()
    );
    let ours = std::fs::metadata(f.path("delta")).unwrap().len();
    let theirs = std::fs::metadata(f.path("rdelta")).unwrap().len();
    assert!(
        ours <= theirs,
        "our delta {ours} B is larger than rdiff's {theirs} B"
    );
}

#[test]
fn reversed_chunks_in_place_beat_rsync_inplace() {
    if !have("rsync") {
        return;
    }
    let f = Files::new();
    let old_data = pseudo_random(8 << 20, 3);
    let chunk = old_data.len() / 64;
    let new_data: Vec<u8> = old_data.chunks(chunk).rev().flatten().copied().collect();
    let old = f.write("old", &old_data);
    let new = f.write("new", &new_data);
    // Blocks that divide the chunks, as in the 64 MiB benchmark (where the
    // default block does): then even the sequential delta is all copies.
    ok(
        &["delta", "signature", "--block-size", "2048"],
        &[&old, &f.path("sig")],
    );
    let js = ok(
        &["delta", "delta", "--in-place", "--json"],
        &[&f.path("sig"), &new, &f.path("d")],
    );
    let v: serde_json::Value = serde_json::from_str(&js).unwrap();
    let ours = v["literal_bytes"].as_u64().unwrap();
    assert!(
        ours * 100 < new_data.len() as u64,
        "in-place literal {ours} is over 1%: {js}"
    );
    assert!(v["cycles_stashed"].as_u64().unwrap() > 0, "{js}");
    let target = f.write("target", &old_data);
    let out = Proc::new("rsync")
        .args(["--inplace", "--no-whole-file", "--ignore-times", "--stats"])
        .arg(&new)
        .arg(&target)
        .output()
        .unwrap();
    assert!(out.status.success());
    let stats = String::from_utf8_lossy(&out.stdout);
    let line = stats
        .lines()
        .find(|l| l.starts_with("Literal data"))
        .expect("rsync --stats prints literal data");
    let rsync: u64 = line
        .chars()
        .filter(|c| c.is_ascii_digit())
        .collect::<String>()
        .parse()
        .unwrap();
    assert!(
        rsync > new_data.len() as u64 / 4,
        "rsync --inplace sent only {rsync}: {line}"
    );
    ok(&["delta", "patch", "--in-place"], &[&old, &f.path("d")]);
    assert_eq!(std::fs::read(&old).unwrap(), new_data);
}

/// A hand-made in-place delta for a file of `old_len` bytes.
fn crafted(old_len: u64, new: &[u8], hash: [u8; 32], cmds: &[Command]) -> Vec<u8> {
    let h = Header {
        layout: Layout::InPlace,
        old_len,
        new_len: new.len() as u64,
        result_hash: hash,
        scratch_len: 0,
    };
    let mut out = Vec::new();
    encode(&h, cmds, new, &mut out).unwrap();
    out
}

fn recovery_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("accord-recovery"))
        .collect()
}

#[test]
fn corrupt_deltas_leave_the_target_untouched_or_in_a_recovery_file() {
    let f = Files::new();
    let old_data = pseudo_random(1 << 20, 4);
    let new_data = edited(&old_data);
    let target = f.write("target", &old_data);
    ok(&["delta", "signature"], &[&target, &f.path("sig")]);
    ok(
        &["delta", "delta", "--in-place"],
        &[&f.path("sig"), &f.write("new", &new_data), &f.path("good")],
    );
    let good = std::fs::read(f.path("good")).unwrap();
    let n = new_data.len() as u64;
    let real_hash = *blake3::hash(&new_data).as_bytes();
    let rejected_before_writing: Vec<(&str, Vec<u8>, &str)> = vec![
        ("truncated", good[..good.len() - 10].to_vec(), "truncated"),
        (
            "bad offset",
            crafted(
                1 << 20,
                &new_data,
                real_hash,
                &[Command::Copy {
                    src: (1 << 20) - 10,
                    dst: 0,
                    len: n,
                }],
            ),
            "beyond the old length",
        ),
        (
            "overlapping targets",
            crafted(
                1 << 20,
                &new_data,
                real_hash,
                &[
                    Command::Add {
                        dst: 0,
                        len: n,
                        data: 0,
                    },
                    Command::Copy {
                        src: 0,
                        dst: 10,
                        len: 10,
                    },
                ],
            ),
            "overlap",
        ),
        (
            "gap",
            crafted(
                1 << 20,
                &new_data,
                real_hash,
                &[Command::Add {
                    dst: 0,
                    len: n - 1,
                    data: 0,
                }],
            ),
            "commands produce",
        ),
        ("garbage", b"ACDL\x01\x01\xff\xff\xff".to_vec(), "input"),
    ];
    for (what, bytes, message) in rejected_before_writing {
        let d = f.write("bad", &bytes);
        let out = run(&[
            Path::new("delta"),
            Path::new("patch"),
            Path::new("--in-place"),
            &target,
            &d,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: accepted");
        assert!(err.contains(message), "{what}: unclear error {err:?}");
        assert!(err.contains("not changed"), "{what}: {err:?}");
        assert_eq!(
            std::fs::read(&target).unwrap(),
            old_data,
            "{what}: target changed"
        );
        assert!(recovery_files(&f.root).is_empty(), "{what}");
    }
    // Valid commands, wrong checksum: the damage is only seen after writing,
    // so the file must move to a recovery file, never stay under its name.
    let mut wrong = real_hash;
    wrong[0] ^= 1;
    let bad = f.write(
        "bad",
        &crafted(
            1 << 20,
            &new_data,
            wrong,
            &[Command::Add {
                dst: 0,
                len: n,
                data: 0,
            }],
        ),
    );
    let out = run(&[
        Path::new("delta"),
        Path::new("patch"),
        Path::new("--in-place"),
        &target,
        &bad,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("checksum") && err.contains("recovery"),
        "{err}"
    );
    assert!(!target.exists(), "a damaged file stayed under its own name");
    let rec = recovery_files(&f.root);
    assert_eq!(rec.len(), 1, "{rec:?}");
    assert_eq!(
        std::fs::read(f.root.join(&rec[0])).unwrap(),
        new_data,
        "recovery file holds what was written"
    );
}

#[test]
fn corrupt_inputs_give_clear_errors_and_no_output() {
    let f = Files::new();
    let old = f.write("old", &pseudo_random(100_000, 6));
    let sig = f.write("sig", b"ACSG\x01\xff");
    let out = accord()
        .args(["delta", "delta"])
        .args([&sig, &old, &f.path("d")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("truncated"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!f.path("d").exists());
    let out = accord()
        .args(["delta", "patch"])
        .args([&old, &old, &f.path("out")])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an Accord delta"));
    assert!(!f.path("out").exists());
    let usage = accord()
        .args(["delta", "patch", "--in-place"])
        .arg(&old)
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(64));
}

#[test]
fn commands_without_their_arguments_are_usage_errors() {
    // `worker` is built: without its cluster and run it is a usage error.
    let out = accord().arg("worker").output().unwrap();
    assert_eq!(out.status.code(), Some(64), "worker");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cluster"));
    let out = accord().arg("sync").output().unwrap();
    assert_eq!(out.status.code(), Some(64));
}

/// `sh -c script` in `dir` with `$ACCORD` set; panics with its stderr when it fails.
fn sh_in(dir: &Path, script: &str) {
    let out = Proc::new("sh")
        .args(["-ec", script])
        .current_dir(dir)
        .env("ACCORD", env!("CARGO_BIN_EXE_accord"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn dash_and_pipes_as_rdiff_takes_them() {
    if !have("rdiff") {
        return;
    }
    let f = Files::new();
    let old_data = pseudo_random(2 << 20, 7);
    let new_data = edited(&old_data);
    f.write("old", &old_data);
    f.write("new", &new_data);
    // The same pipelines through rdiff and through accord: `-` for standard input and output,
    // and /dev/stdin (a pipe) where a file name is wanted.
    for tool in ["rdiff", "\"$ACCORD\" delta"] {
        let pre = if tool == "rdiff" { "r" } else { "a" };
        sh_in(
            &f.root,
            &format!(
                "cat old | {tool} signature - - > {pre}.sig1; \
                 cat old | {tool} signature /dev/stdin {pre}.sig2; \
                 cat new | {tool} delta {pre}.sig1 - - > {pre}.delta; \
                 cat {pre}.delta | {tool} patch old - - > {pre}.out1; \
                 {tool} delta {pre}.sig2 new - | {tool} patch old - {pre}.out2"
            ),
        );
        let read = |n: &str| std::fs::read(f.path(&format!("{pre}.{n}"))).unwrap();
        // (Ours draw a random key per signature: equal in length, not in bytes.)
        assert_eq!(read("sig1").len(), read("sig2").len(), "{tool}");
        for out in ["out1", "out2"] {
            assert!(read(out) == new_data, "{tool}: {out} differs from new");
        }
    }
    // The basis of a patch from a pipe (rdiff wants it seekable; we read it into memory), and
    // /dev/stdout as an output (rdiff refuses an existing output without --force).
    sh_in(
        &f.root,
        "cat old | \"$ACCORD\" delta patch /dev/stdin a.delta a.out3; \
         cat old | \"$ACCORD\" delta patch - a.delta a.out4; \
         \"$ACCORD\" delta patch old a.delta /dev/stdout | cat > a.out5",
    );
    for out in ["a.out3", "a.out4", "a.out5"] {
        assert!(std::fs::read(f.path(out)).unwrap() == new_data, "{out}");
    }
    assert!(!f.path("-").exists(), "a file named - was made");
}

#[test]
fn dash_where_a_stream_cannot_work_is_a_usage_error() {
    let f = Files::new();
    let old = f.write("old", &pseudo_random(10_000, 8));
    let d = Path::new("-");
    for (args, files, says) in [
        (
            vec!["delta", "delta"],
            vec![d, d, &old],
            "both be standard input",
        ),
        (
            vec!["delta", "patch"],
            vec![d, d, &old],
            "both be standard input",
        ),
        (
            vec!["delta", "patch", "--in-place"],
            vec![d, &old],
            "regular file",
        ),
        (
            vec!["delta", "delta", "--json"],
            vec![&old, &old, d],
            "--json",
        ),
    ] {
        let out = accord().args(&args).args(&files).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    let out = accord()
        .args(["delta", "signature"])
        .args([&f.path("missing"), &f.path("sig")])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.trim_end(),
        format!(
            "accord delta: cannot open {}: No such file or directory",
            f.path("missing").display()
        )
    );
}

/// `accord delta delta` writes raw literals in format 1 unless asked to
/// compress them (`--compress-level N`: format 2, smaller, patched alike).
#[test]
fn compress_level_writes_format_2_and_the_default_format_1() {
    let f = Files::new();
    let text: Vec<u8> = (0..300_000u32)
        .flat_map(|i| format!("line {} of a text file\n", i % 977).into_bytes())
        .collect();
    let old = f.write("old", &text);
    let mut new_bytes = text.clone();
    for i in 0..40 {
        let at = i * 100_003 % (new_bytes.len() - 4000);
        let words = format!("an edit {i} that no block of the old file holds ").repeat(60);
        new_bytes.splice(at..at, words.into_bytes());
    }
    let new = f.write("new", &new_bytes);
    let (sig, raw, packed) = (f.path("sig"), f.path("raw"), f.path("packed"));
    ok(&["delta", "signature"], &[&old, &sig]);
    ok(&["delta", "delta"], &[&sig, &new, &raw]);
    ok(
        &["delta", "delta", "--compress-level", "9"],
        &[&sig, &new, &packed],
    );
    let (raw_bytes, packed_bytes) = (
        std::fs::read(&raw).unwrap(),
        std::fs::read(&packed).unwrap(),
    );
    assert_eq!(raw_bytes[4], 1, "the default: format 1");
    assert_eq!(packed_bytes[4], 2, "--compress-level: format 2");
    assert!(
        packed_bytes.len() * 4 < raw_bytes.len(),
        "{} against {}",
        packed_bytes.len(),
        raw_bytes.len()
    );
    for (delta, out) in [(&raw, "out-raw"), (&packed, "out-packed")] {
        let out = f.path(out);
        ok(&["delta", "patch"], &[&old, delta, &out]);
        assert_eq!(std::fs::read(&out).unwrap(), new_bytes);
    }
}
