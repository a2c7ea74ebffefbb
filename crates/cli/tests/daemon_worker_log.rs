//! The log of the long-running commands: `accord server --listen` and
//! `accord worker` write to `--log-file` (everything the process says,
//! the daemon's line per connection too), `-v` adds the debug lines,
//! `RUST_LOG` chooses instead of `-v`; an ssh session's server refuses
//! the log flags (its messages go to its client).

mod mirror_common;

use mirror_common::{assert_exit, bin};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A daemon on a free port of 127.0.0.1, serving module `m`, its log in
/// `dir/log`; killed when dropped.
struct Daemon {
    child: Child,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keys(dir: &Path) {
    let keygen = |file: &str| {
        Command::new(bin())
            .args(["keygen", "-C", file, "-f"])
            .arg(dir.join(file))
            .stderr(Stdio::null())
            .output()
            .unwrap()
    };
    assert!(keygen("key").status.success());
    let client = keygen("client");
    assert!(client.status.success());
    std::fs::write(dir.join("authorized_keys"), client.stdout).unwrap();
    std::fs::create_dir(dir.join("m")).unwrap();
}

fn start(dir: &Path, flags: &[&str], rust_log: Option<&str>) -> Daemon {
    let mut cmd = Command::new(bin());
    cmd.args(["server", "--listen", "127.0.0.1:0", "--key"])
        .arg(dir.join("key"))
        .arg("--auth-keys")
        .arg(dir.join("authorized_keys"))
        .arg("--module")
        .arg(format!("m={}", dir.join("m").display()))
        .arg("--log-file")
        .arg(dir.join("log"))
        .args(flags)
        .env("ACCORD_STATE_DIR", dir.join("state"))
        .env_remove("RUST_LOG")
        .stderr(Stdio::null());
    if let Some(spec) = rust_log {
        cmd.env("RUST_LOG", spec);
    }
    Daemon {
        child: cmd.spawn().unwrap(),
    }
}

/// The log once a line of it contains `needle` (the daemon writes it;
/// read again as it grows, for at most 10 s).
fn log_with(dir: &Path, needle: &str) -> String {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
        if log.contains(needle) {
            return log;
        }
        assert!(Instant::now() < give_up, "no {needle:?} in the log:\n{log}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `127.0.0.1:PORT` from the daemon's "listening on" line.
fn address(log: &str) -> String {
    let line = log.lines().find(|l| l.contains("listening on ")).unwrap();
    let rest = line.split("listening on ").nth(1).unwrap();
    rest.split(';').next().unwrap().to_string()
}

#[test]
fn daemon_logs_to_its_file_with_a_line_per_connection_and_debug_with_v() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    keys(dir);
    let _daemon = start(dir, &["-v"], None);
    let log = log_with(dir, "listening on");
    assert!(
        log.contains("DEBUG accord server: module m: ") && log.contains("(read-write)"),
        "{log}"
    );
    assert!(
        log.contains("1 authorized keys; at most 64 sessions"),
        "{log}"
    );

    let src = dir.join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"contents").unwrap();
    let url = format!("accord://{}/m/copy", address(&log));
    let out = Command::new(bin())
        .args(["mirror", "-q", "--key"])
        .arg(dir.join("client"))
        .arg("--server-key")
        .arg(dir.join("key.pub"))
        .arg(&src)
        .arg(&url)
        .env("ACCORD_STATE_DIR", dir.join("client-state"))
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert_eq!(std::fs::read(dir.join("m/copy/f")).unwrap(), b"contents");
    let log = log_with(dir, "closed after");
    assert!(log.contains("module m, path \"copy\""), "{log}");
}

/// Without -v, a connection is one INFO line as it ends: who, which
/// module and path, what it asked, how it went, what it did.
#[test]
fn daemon_writes_one_info_line_per_connection() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    keys(dir);
    let _daemon = start(dir, &[], None);
    let log = log_with(dir, "listening on");
    let src = dir.join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), b"contents").unwrap();
    let url = format!("accord://{}/m/copy", address(&log));
    let out = Command::new(bin())
        .args(["mirror", "-q", "--key"])
        .arg(dir.join("client"))
        .arg("--server-key")
        .arg(dir.join("key.pub"))
        .arg(&src)
        .arg(&url)
        .env("ACCORD_STATE_DIR", dir.join("client-state"))
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let log = log_with(dir, "closed after");
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| !l.contains("listening on"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    let line = lines[0];
    assert!(line.contains(" INFO accord server: 127.0.0.1:"), "{line}");
    assert!(
        line.contains(
            ": key \"client\", module m, path \"copy\", to write, done; 1 file written; "
        ),
        "{line}"
    );
    assert!(
        line.contains(" bytes in, ") && line.ends_with(" bytes out"),
        "{line}"
    );
}

#[test]
fn rust_log_chooses_the_daemons_levels() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    keys(dir);
    let _daemon = start(dir, &[], Some("debug"));
    let log = log_with(dir, "listening on");
    assert!(log.contains("DEBUG accord server: module m"), "{log}");

    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    keys(dir);
    let _daemon = start(dir, &["-vv"], Some("warn"));
    let log = log_with(dir, "listening on");
    assert!(!log.contains("DEBUG"), "RUST_LOG=warn, yet:\n{log}");
}

#[test]
fn worker_logs_why_it_cannot_reach_its_redis_to_its_file() {
    let t = tempfile::tempdir().unwrap();
    let log = t.path().join("worker.log");
    // Port 1 of this host: nothing listens there.
    let out = Command::new(bin())
        .args(["worker", "--run", "r", "--log-file"])
        .arg(&log)
        .env("ACCORD_CLUSTER", "redis://:secret@127.0.0.1:1/0")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_exit(&out, 69);
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("ERROR accord worker: redis://***@127.0.0.1:1/0: "),
        "{text}"
    );
    assert!(!text.contains("secret"), "{text}");
}

#[test]
fn an_ssh_sessions_server_refuses_the_log_flags() {
    for flag in ["-v", "--log-file=/dev/null"] {
        let out = Command::new(bin())
            .args(["server", flag])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_exit(&out, 64);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("are for the daemon (--listen or --config)"),
            "{err}"
        );
    }
}
