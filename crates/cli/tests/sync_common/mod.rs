//! Helpers for the `accord sync` tests: two roots and a state directory in
//! a temp dir, running the binary, writing and reading files, and a
//! snapshot of a tree (kind, contents, permission bits) to compare sides.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> PathBuf {
    std::env::var_os("ACCORD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_accord")))
}

/// Two roots `a` and `b` (created, empty) and a private state directory.
pub struct Pair {
    _tmp: tempfile::TempDir,
    pub a: PathBuf,
    pub b: PathBuf,
    pub state: PathBuf,
    /// B is given to accord as a remote root.
    pub remote_b: Option<RemoteB>,
}

/// How a test reaches B as a remote root (over ssh, or from a daemon
/// whose module holds `base`).
#[derive(Clone, Debug)]
pub struct RemoteB {
    /// Where the pair's directories are made.
    pub base: PathBuf,
    /// Put before B's path: `127.0.0.1:` for ssh, or
    /// `accord://127.0.0.1:PORT/MODULE/` for a module rooted at `base`.
    pub prefix: String,
    /// B's path is given relative to `base` (a daemon's module).
    pub relative: bool,
    /// Options that reach it (`--rsh`, `--key`, ...).
    pub args: Vec<String>,
    /// Environment for the client (e.g. `XDG_CONFIG_HOME`).
    pub env: Vec<(String, PathBuf)>,
}

impl RemoteB {
    /// B as `127.0.0.1:PATH` through `rsh`, this build's accord on the far
    /// side; pairs are made in `base`.
    pub fn over_ssh(base: &Path, rsh: &str) -> RemoteB {
        RemoteB {
            base: base.to_path_buf(),
            prefix: "127.0.0.1:".into(),
            relative: false,
            args: vec![
                "--rsh".into(),
                rsh.into(),
                "--remote-accord".into(),
                bin().display().to_string(),
            ],
            env: Vec::new(),
        }
    }

    pub fn address(&self, b: &Path) -> String {
        if self.relative {
            let rel = b.strip_prefix(&self.base).expect("B lies in the module");
            format!("{}{}", self.prefix, rel.display())
        } else {
            format!("{}{}", self.prefix, b.display())
        }
    }
}

impl Pair {
    pub fn new() -> Pair {
        Pair::make(tempfile::tempdir().unwrap(), None)
    }

    /// A pair whose B accord reaches as a remote root.
    pub fn with_remote_b(remote: &RemoteB) -> Pair {
        let tmp = tempfile::tempdir_in(&remote.base).unwrap();
        Pair::make(tmp, Some(remote.clone()))
    }

    fn make(tmp: tempfile::TempDir, remote_b: Option<RemoteB>) -> Pair {
        let a = tmp.path().join("a");
        let b = tmp.path().join("b");
        std::fs::create_dir(&a).unwrap();
        std::fs::create_dir(&b).unwrap();
        let state = tmp.path().join("state");
        Pair {
            _tmp: tmp,
            a,
            b,
            state,
            remote_b,
        }
    }

    pub fn root(&self, side: char) -> &Path {
        match side {
            'a' => &self.a,
            'b' => &self.b,
            _ => panic!("side {side}"),
        }
    }

    pub fn path(&self, side: char, rel: &str) -> PathBuf {
        self.root(side).join(rel)
    }

    /// Run `accord sync --batch A B ARGS`.
    pub fn sync(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run accord")
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(bin());
        command.arg("sync").arg("--batch").arg(&self.a);
        match &self.remote_b {
            None => command.arg(&self.b),
            Some(remote) => command
                .arg(remote.address(&self.b))
                .args(&remote.args)
                .envs(remote.env.iter().map(|(k, v)| (k, v))),
        };
        command.args(args).env("ACCORD_STATE_DIR", &self.state);
        command
    }

    /// Run with `--json`, check the exit status, return the object.
    pub fn sync_json(&self, args: &[&str], code: i32) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        json_report(&self.sync(&all), code)
    }

    pub fn write(&self, side: char, rel: &str, contents: &str) {
        let path = self.path(side, rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }

    pub fn read(&self, side: char, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.path(side, rel)).ok()
    }

    pub fn exists(&self, side: char, rel: &str) -> bool {
        std::fs::symlink_metadata(self.path(side, rel)).is_ok()
    }

    pub fn mode(&self, side: char, rel: &str) -> u32 {
        std::fs::symlink_metadata(self.path(side, rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    pub fn chmod(&self, side: char, rel: &str, mode: u32) {
        std::fs::set_permissions(self.path(side, rel), std::fs::Permissions::from_mode(mode))
            .unwrap();
    }

    pub fn assert_equal(&self) {
        assert_eq!(snapshot(&self.a), snapshot(&self.b), "the replicas differ");
    }
}

/// Assert a run's exit status, showing its output when it differs.
/// The JSON report a `--json` run printed, once its exit status is checked
/// to be `code`.
pub fn json_report(out: &Output, code: i32) -> serde_json::Value {
    assert_exit(out, code);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

pub fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One entry as a sync keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    File { contents: Vec<u8>, mode: u32 },
    Dir { mode: u32 },
    Symlink(PathBuf),
    Other,
}

/// Every entry under `root` but our own hidden files, by relative path.
pub fn snapshot(root: &Path) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Node>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with(".accord-") {
            continue;
        }
        let path = entry.path();
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .to_string();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let mode = meta.permissions().mode() & 0o7777;
        let node = if meta.file_type().is_symlink() {
            Node::Symlink(std::fs::read_link(&path).unwrap())
        } else if meta.is_dir() {
            walk(root, &path, out);
            Node::Dir { mode }
        } else if meta.is_file() {
            Node::File {
                contents: std::fs::read(&path).unwrap(),
                mode,
            }
        } else {
            Node::Other
        };
        out.insert(rel, node);
    }
}

/// The paths of a JSON report's conflicts.
pub fn conflict_paths(report: &serde_json::Value) -> Vec<String> {
    report["conflicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect()
}

/// Set a file's mtime (seconds since the epoch) without changing it.
pub fn set_mtime(path: &Path, secs: i64) {
    let status = Command::new("touch")
        .arg("-h")
        .arg("-d")
        .arg(format!("@{secs}"))
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// An `accord server` daemon on a loopback port, with keys made for the
/// run and one read-write module over a temp directory.
pub struct Daemon {
    dir: tempfile::TempDir,
    child: std::process::Child,
    port: u16,
}

impl Daemon {
    pub fn start() -> Daemon {
        use std::io::BufRead;
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for key in ["client/key", "server/key"] {
            let out = Command::new(bin())
                .args(["keygen", "-f"])
                .arg(d.join(key))
                .output()
                .unwrap();
            assert_exit(&out, 0);
        }
        std::fs::copy(d.join("client/key.pub"), d.join("server/authorized_keys")).unwrap();
        std::fs::create_dir(d.join("module")).unwrap();
        let mut child = Command::new(bin())
            .args(["server", "--listen", "127.0.0.1:0", "--module"])
            .arg(format!("m={}", d.join("module").display()))
            .arg("--auth-keys")
            .arg(d.join("server/authorized_keys"))
            .arg("--key")
            .arg(d.join("server/key"))
            .env("ACCORD_STATE_DIR", d.join("server-state"))
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut lines = stderr.lines();
        let port = lines
            .by_ref()
            .map_while(Result::ok)
            .find_map(|line| {
                let rest = line.split("listening on 127.0.0.1:").nth(1)?;
                let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
                port.parse::<u16>().ok()
            })
            .expect("the daemon says where it listens");
        // Keep reading its log, so that it never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Daemon { dir, child, port }
    }

    pub fn remote_b(&self) -> RemoteB {
        let d = self.dir.path();
        RemoteB {
            base: d.join("module"),
            prefix: format!("accord://127.0.0.1:{}/m/", self.port),
            relative: true,
            args: vec![
                "--key".into(),
                d.join("client/key").display().to_string(),
                "--server-key".into(),
                d.join("server/key.pub").display().to_string(),
            ],
            env: vec![("XDG_CONFIG_HOME".into(), d.join("client-config"))],
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run a sync; once it has made its plan, call `meanwhile`, then let it go
/// on. Returns its JSON report.
pub fn sync_with_change(pair: &Pair, code: i32, meanwhile: impl FnOnce()) -> serde_json::Value {
    sync_with_change_args(pair, &[], code, meanwhile)
}

/// `sync_with_change` of a run with `args` too.
pub fn sync_with_change_args(
    pair: &Pair,
    args: &[&str],
    code: i32,
    meanwhile: impl FnOnce(),
) -> serde_json::Value {
    let (child, pause) = start_paused(pair, args, "ACCORD_TEST_SYNC_PAUSE", "pause-for-test");
    meanwhile();
    std::fs::remove_file(&pause).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_exit(&out, code);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Start `accord sync --json ARGS` with the test hook `hook` (an
/// environment variable naming a file the run creates, then waits for it
/// to go) and wait until it is paused there. Returns the run and the file.
pub fn start_paused(
    pair: &Pair,
    args: &[&str],
    hook: &str,
    file: &str,
) -> (std::process::Child, PathBuf) {
    std::fs::create_dir_all(&pair.state).unwrap();
    let pause = pair.state.join(file);
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let child = pair
        .command(&all)
        .env(hook, &pause)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !pause.exists() {
        assert!(std::time::Instant::now() < deadline, "the run never paused");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    (child, pause)
}

/// Write `data` at `path` and put its mtime back, to the nanosecond: a
/// change only a fingerprint can see (the size must stay the same too).
pub fn rewrite_keeping_mtime(path: &Path, data: &[u8]) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(path).unwrap();
    std::fs::write(path, data).unwrap();
    let status = std::process::Command::new("touch")
        .arg("-d")
        .arg(format!("@{}.{:09}", meta.mtime(), meta.mtime_nsec()))
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(
        std::fs::metadata(path).unwrap().mtime_nsec(),
        meta.mtime_nsec()
    );
}

/// Each scenario, as a test with both roots local and as one with B over
/// ssh and one with B from the daemon.
#[allow(unused_macros)]
macro_rules! local_and_remote {
    ($scenario:ident: $local:ident, $ssh:ident, $daemon:ident) => {
        #[test]
        fn $local() {
            $scenario(&Pair::new);
        }

        #[test]
        fn $ssh() {
            let Some(sshd) = remote_common::Sshd::start() else {
                return;
            };
            let base = tempfile::tempdir().unwrap();
            let remote = RemoteB::over_ssh(base.path(), &sshd.rsh());
            $scenario(&|| Pair::with_remote_b(&remote));
        }

        #[test]
        fn $daemon() {
            let daemon = Daemon::start();
            let remote = daemon.remote_b();
            $scenario(&|| Pair::with_remote_b(&remote));
        }
    };
}

/// Deterministic bytes that do not compress (so that counts of bytes on
/// the wire measure them, not zstd).
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}
