//! `accord sync A B C` with remote roots (issue 29): A local, B over ssh
//! and C from the daemon, in one run. Every replica ends with every file; a
//! change made on the local replica crosses the wire once to each remote
//! host (and is not fetched back from one to be sent to the other); a
//! change made on a remote replica reaches the two others; a remote root
//! that cannot be reached is left out and catches up later, named as it
//! was when last reached; one never reached stops the run before anything
//! changes; a dry run changes nothing on any host; `--merge` reads the
//! remote versions and writes its result on every host.

mod mirror_common;
mod remote_common;
mod sync_common;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use sync_common::{
    assert_exit, bin, conflict_paths, json_report, noise, snapshot, Daemon, RemoteB,
};

/// A local root `a`, a root `b` reached over ssh and a root `c` from the
/// daemon, with a private state directory on this side.
struct Trio {
    _tmp: tempfile::TempDir,
    _c_dir: tempfile::TempDir,
    a: PathBuf,
    b: PathBuf,
    c: PathBuf,
    state: PathBuf,
    ssh: RemoteB,
    daemon: RemoteB,
}

impl Trio {
    fn new(sshd: &remote_common::Sshd, daemon: &Daemon) -> Trio {
        let tmp = tempfile::tempdir().unwrap();
        let ssh = RemoteB::over_ssh(tmp.path(), &sshd.rsh());
        let daemon = daemon.remote_b();
        let c_dir = tempfile::tempdir_in(&daemon.base).unwrap();
        // A's path sorts after B's: the set's order puts B first, so a
        // version both hold is taken from A only if a local holder is
        // preferred.
        let (a, b, c) = (
            tmp.path().join("z-local"),
            tmp.path().join("b"),
            c_dir.path().join("c"),
        );
        for root in [&a, &b, &c] {
            std::fs::create_dir(root).unwrap();
        }
        let state = tmp.path().join("state");
        Trio {
            _tmp: tmp,
            _c_dir: c_dir,
            a,
            b,
            c,
            state,
            ssh,
            daemon,
        }
    }

    fn root(&self, letter: char) -> &Path {
        match letter {
            'a' => &self.a,
            'b' => &self.b,
            'c' => &self.c,
            _ => panic!("root {letter}"),
        }
    }

    fn path(&self, letter: char, rel: &str) -> PathBuf {
        self.root(letter).join(rel)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(bin());
        command
            .arg("sync")
            .arg(&self.a)
            .arg(self.ssh.address(&self.b))
            .arg(self.daemon.address(&self.c))
            .args(&self.ssh.args)
            .args(&self.daemon.args)
            .envs(self.daemon.env.iter().map(|(k, v)| (k, v)))
            .args(["--max-delete", "100%"])
            .args(args)
            .env("ACCORD_STATE_DIR", &self.state);
        command
    }

    fn sync(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    fn sync_json(&self, args: &[&str], code: i32) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        json_report(&self.sync(&all), code)
    }

    fn write(&self, letter: char, rel: &str, contents: &[u8]) {
        let path = self.path(letter, rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }

    fn read(&self, letter: char, rel: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path(letter, rel)).ok()
    }

    fn assert_all_equal(&self) {
        let a = snapshot(&self.a);
        assert_eq!(snapshot(&self.b), a, "B differs from A");
        assert_eq!(snapshot(&self.c), a, "C differs from A");
    }
}

/// Bytes sent to and received from the root lettered `letter`.
fn wire(report: &serde_json::Value, letter: &str) -> (u64, u64) {
    let roots = report["roots"].as_array().unwrap();
    let root = roots
        .iter()
        .find(|r| r["letter"] == letter)
        .unwrap_or_else(|| panic!("no root {letter}: {report}"));
    (
        root["bytes_sent"].as_u64().unwrap(),
        root["bytes_received"].as_u64().unwrap(),
    )
}

fn changes_on(report: &serde_json::Value, on: &str) -> Vec<(String, String)> {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["on"] == on)
        .map(|c| {
            (
                c["path"].as_str().unwrap().to_string(),
                c["from"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn start() -> Option<(remote_common::Sshd, Daemon)> {
    let sshd = remote_common::Sshd::start()?;
    Some((sshd, Daemon::start()))
}

#[test]
fn a_local_an_ssh_and_a_daemon_root_agree_in_one_run() {
    let Some((sshd, daemon)) = start() else {
        return;
    };
    let trio = Trio::new(&sshd, &daemon);
    trio.write('a', "docs/a.txt", b"from a");
    trio.write('b', "b.txt", b"from b");
    trio.write('c', "deep/er/c.txt", b"from c");
    let first = trio.sync_json(&[], 0);
    trio.assert_all_equal();
    assert!(first["roots"][0]["bytes_sent"].is_null(), "{first}");

    // A change made on the local replica: sent once to each remote host,
    // and nothing the size of it comes back from either.
    const SIZE: u64 = 1 << 20;
    trio.write('a', "docs/big", &noise(SIZE as usize, 1));
    let second = trio.sync_json(&[], 0);
    trio.assert_all_equal();
    for letter in ["B", "C"] {
        let (sent, received) = wire(&second, letter);
        eprintln!("{SIZE}-byte file made on A: {letter} sent {sent} B, received {received} B");
        assert!(
            (SIZE..SIZE + (64 << 10)).contains(&sent),
            "{letter}: {sent} bytes sent for a {SIZE}-byte file: {second}"
        );
        assert!(received < 64 << 10, "{letter}: {received} received");
        assert_eq!(
            changes_on(&second, letter),
            [("docs/big".into(), "A".into())]
        );
    }

    // The same new file on A and B: C takes it from A, on this host, not
    // from B through this host.
    let same = noise(SIZE as usize, 2);
    trio.write('a', "same", &same);
    trio.write('b', "same", &same);
    let shared = trio.sync_json(&[], 0);
    trio.assert_all_equal();
    assert_eq!(changes_on(&shared, "C"), [("same".into(), "A".into())]);
    let (_, from_b) = wire(&shared, "B");
    eprintln!(
        "the same file made on A and B: C sent {} B, B received {from_b} B",
        wire(&shared, "C").0
    );
    assert!(from_b < 64 << 10, "B sent {from_b} bytes: {shared}");

    // A change made on a remote replica reaches the two others.
    trio.write('b', "docs/a.txt", b"edited on b");
    let third = trio.sync_json(&[], 0);
    assert_eq!(trio.read('a', "docs/a.txt").unwrap(), b"edited on b");
    assert_eq!(trio.read('c', "docs/a.txt").unwrap(), b"edited on b");
    assert_eq!(changes_on(&third, "C"), [("docs/a.txt".into(), "B".into())]);

    // A deletion on C reaches A and B; no change: nothing to do.
    std::fs::remove_file(trio.path('c', "b.txt")).unwrap();
    trio.sync_json(&[], 0);
    trio.assert_all_equal();
    assert!(!trio.path('a', "b.txt").exists());
    let steady = trio.sync_json(&[], 0);
    assert!(steady["changes"].as_array().unwrap().is_empty(), "{steady}");
}

#[test]
fn a_conflict_between_two_remote_replicas_is_listed_once() {
    let Some((sshd, daemon)) = start() else {
        return;
    };
    let trio = Trio::new(&sshd, &daemon);
    trio.write('a', "notes", b"agreed");
    trio.sync_json(&[], 0);
    trio.write('b', "notes", b"b's edit");
    trio.write('c', "notes", b"c's longer edit");
    let report = trio.sync_json(&[], 1);
    assert_eq!(conflict_paths(&report), ["notes"]);
    let versions = report["conflicts"][0]["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 3, "{report}");
    assert_eq!(trio.read('a', "notes").unwrap(), b"agreed");
    // --force picks C's on every replica.
    trio.sync_json(&["--force", "C"], 0);
    trio.assert_all_equal();
    assert_eq!(trio.read('b', "notes").unwrap(), b"c's longer edit");
}

/// --keep-both with the versions on the two remote roots: the losing
/// version made there by a hard link, the other received from it.
#[test]
fn keep_both_keeps_a_remote_replicas_version_on_every_root() {
    let Some((sshd, daemon)) = start() else {
        return;
    };
    let trio = Trio::new(&sshd, &daemon);
    trio.write('a', "notes", b"agreed");
    trio.sync_json(&[], 0);
    trio.write('b', "notes", b"b's edit");
    trio.write('c', "notes", b"c's newer edit");
    sync_common::set_mtime(&trio.path('b', "notes"), 1_000_000_000);
    sync_common::set_mtime(&trio.path('c', "notes"), 1_100_000_000);
    let report = trio.sync_json(&["--keep-both"], 0);
    assert!(conflict_paths(&report).is_empty(), "{report}");
    let kept = report["kept"][0]["kept_as"].as_str().unwrap().to_string();
    assert!(
        kept.starts_with("notes.conflict-") && kept.ends_with("-20010909-014640"),
        "{report}"
    );
    trio.assert_all_equal();
    for letter in ['a', 'b', 'c'] {
        assert_eq!(trio.read(letter, "notes").unwrap(), b"c's newer edit");
        assert_eq!(trio.read(letter, &kept).unwrap(), b"b's edit");
    }
    let again = trio.sync_json(&[], 0);
    assert!(again["changes"].as_array().unwrap().is_empty(), "{again}");
}

/// --merge with a version on each root: the remote ones fetched for the
/// program (run here), the result written on every host.
#[test]
fn merge_folds_the_local_and_the_remote_versions_and_writes_the_result_everywhere() {
    let Some((sshd, daemon)) = start() else {
        return;
    };
    let trio = Trio::new(&sshd, &daemon);
    trio.write('a', "notes", b"agreed\n");
    trio.sync_json(&[], 0);
    trio.write('c', "notes", b"c's edit\n");
    trio.write('b', "notes", b"b's edit\n");
    trio.write('a', "notes", b"a's edit\n");
    let report = trio.sync_json(&["--merge", "cat CURRENT1 CURRENT2 > NEW"], 0);
    assert_eq!(report["merged"], 1, "{report}");
    assert!(conflict_paths(&report).is_empty(), "{report}");
    trio.assert_all_equal();
    for letter in ['a', 'b', 'c'] {
        assert_eq!(
            trio.read(letter, "notes").unwrap(),
            b"a's edit\nb's edit\nc's edit\n"
        );
    }
    let again = trio.sync_json(&[], 0);
    assert!(again["changes"].as_array().unwrap().is_empty(), "{again}");
}

#[test]
fn an_unreachable_remote_root_is_left_out_and_catches_up() {
    let Some((sshd, daemon)) = start() else {
        return;
    };
    let trio = Trio::new(&sshd, &daemon);
    trio.write('a', "kept", b"one");
    trio.write('a', "gone", b"to be deleted");
    trio.sync_json(&[], 0);
    // B's root is away (a disk not mounted on its host).
    let away = trio.b.with_extension("away");
    std::fs::rename(&trio.b, &away).unwrap();
    trio.write('a', "kept", b"two");
    std::fs::remove_file(trio.path('c', "gone")).unwrap();
    let report = trio.sync_json(&[], 4);
    assert_eq!(report["unreached"], serde_json::json!(["B"]), "{report}");
    assert_eq!(trio.read('c', "kept").unwrap(), b"two");
    assert!(!trio.path('a', "gone").exists());
    // Back: it takes both changes, without a conflict or a deletion
    // brought back.
    std::fs::rename(&away, &trio.b).unwrap();
    let back = trio.sync_json(&[], 0);
    assert!(back["conflicts"].as_array().unwrap().is_empty(), "{back}");
    trio.assert_all_equal();
    assert_eq!(trio.read('b', "kept").unwrap(), b"two");
    assert!(!trio.path('b', "gone").exists());
}

#[test]
fn a_remote_root_never_reached_stops_the_run_before_any_change() {
    let Some((sshd, daemon)) = start() else {
        return;
    };
    let trio = Trio::new(&sshd, &daemon);
    trio.write('a', "file", b"from a");
    std::fs::remove_dir(&trio.b).unwrap();
    let out = trio.sync(&[]);
    assert_exit(&out, 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("has never been reached from this host"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    assert!(!trio.path('c', "file").exists());
}

#[test]
fn a_dry_run_with_remote_roots_changes_nothing() {
    let Some((sshd, daemon)) = start() else {
        return;
    };
    let trio = Trio::new(&sshd, &daemon);
    trio.write('a', "x", b"from a");
    trio.sync_json(&[], 0);
    trio.write('b', "y", b"from b");
    let dry = trio.sync_json(&["--dry-run"], 0);
    assert_eq!(changes_on(&dry, "A"), [("y".into(), "B".into())], "{dry}");
    assert_eq!(changes_on(&dry, "C"), [("y".into(), "B".into())], "{dry}");
    assert!(!trio.path('a', "y").exists() && !trio.path('c', "y").exists());
    // The real run then does what the dry run listed, from the same
    // archives (the dry run counted nothing in them).
    let real = trio.sync_json(&[], 0);
    assert_eq!(real["changes"], dry["changes"]);
    trio.assert_all_equal();
}

/// A local root A, and B and C on one host over ssh: a version B holds
/// reaches C copied on that host (C's connection carries none of its
/// bytes, B's carries them once, to A); a file rewritten on B after the
/// scan, its size and mtime kept, is not copied there (its bytes are not
/// the version settled), and the next run carries the new one.
#[test]
fn two_roots_on_one_host_copy_between_themselves_there() {
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let ssh = RemoteB::over_ssh(tmp.path(), &sshd.rsh());
    let root = |name: &str| {
        let path = tmp.path().join(name);
        std::fs::create_dir_all(&path).unwrap();
        path
    };
    let (a, b, c) = (root("a"), root("b"), root("c"));
    let state = tmp.path().join("state");
    let command = || {
        let mut command = Command::new(bin());
        command
            .arg("sync")
            .arg(&a)
            .arg(ssh.address(&b))
            .arg(ssh.address(&c))
            .args(&ssh.args)
            .args(["--json", "--max-delete", "100%"])
            .env("ACCORD_STATE_DIR", &state);
        command
    };
    let all_equal = || {
        assert_eq!(snapshot(&b), snapshot(&a), "B differs from A");
        assert_eq!(snapshot(&c), snapshot(&a), "C differs from A");
    };
    std::fs::write(a.join("first"), b"first").unwrap();
    json_report(&command().output().unwrap(), 0);
    all_equal();

    const SIZE: u64 = 1 << 20;
    std::fs::write(b.join("big"), noise(SIZE as usize, 3)).unwrap();
    let report = json_report(&command().output().unwrap(), 0);
    all_equal();
    assert_eq!(changes_on(&report, "C"), [("big".into(), "B".into())]);
    let (to_c, from_c) = wire(&report, "C");
    let (_, from_b) = wire(&report, "B");
    eprintln!(
        "a {SIZE}-byte file made on B: C sent {to_c} B, received {from_c} B; B sent {from_b} B"
    );
    assert!(to_c < 64 << 10 && from_c < 64 << 10, "{report}");
    assert!((SIZE..SIZE + (64 << 10)).contains(&from_b), "{report}");

    // Rewritten between the scan and the copy, with its size and mtime
    // kept: neither A nor C takes bytes that are not the version scanned.
    let changed = b.join("changed");
    std::fs::write(&changed, noise(SIZE as usize, 4)).unwrap();
    let mtime = std::fs::metadata(&changed).unwrap().modified().unwrap();
    let pause = tmp.path().join("pause");
    let mut run = command()
        .env("ACCORD_TEST_SYNC_PAUSE", &pause)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while !pause.exists() {
        assert!(
            run.try_wait().unwrap().is_none(),
            "the run ended without pausing (a build without test-hooks?)"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(&changed)
        .unwrap();
    std::io::Write::write_all(&mut file, &noise(SIZE as usize, 5)).unwrap();
    file.set_modified(mtime).unwrap();
    drop(file);
    std::fs::remove_file(&pause).unwrap();
    let out = run.wait_with_output().unwrap();
    let report = json_report(&out, 2);
    for on in [&a, &c] {
        assert!(!on.join("changed").exists(), "{report}");
    }
    json_report(&command().output().unwrap(), 0);
    all_equal();
    assert_eq!(
        std::fs::read(c.join("changed")).unwrap(),
        noise(SIZE as usize, 5)
    );
}
