//! A real `sshd` for the remote-root tests: started on a free loopback
//! port with a host key and client keys made for the run, its own
//! configuration and authorized_keys file, and stopped when the guard goes.
//! Nothing of the machine's own ssh set-up is read or changed.
#![allow(dead_code)]

use crate::mirror_common::bin;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const SSHD: &str = "/usr/sbin/sshd";

/// Options every client run uses: the run's host key is new each time, so
/// it is neither checked nor remembered; no prompt may ever wait for a
/// person.
const SSH_OPTS: &str =
    "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR";

/// A running sshd, killed (and its files removed) on drop.
pub struct Sshd {
    child: Child,
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// The client key in authorized_keys without restrictions.
    pub key: PathBuf,
}

/// Are sshd, ssh and ssh-keygen here? If not, `skip_or_fail` says so: the
/// caller skips its test, or in strict mode it fails (CI installs them, see
/// scripts/test).
pub fn ssh_tools_missing() -> bool {
    let missing: Vec<&str> = [
        (SSHD, Path::new(SSHD).exists()),
        ("ssh", crate::mirror_common::have("ssh")),
        ("ssh-keygen", crate::mirror_common::have("ssh-keygen")),
    ]
    .into_iter()
    .filter(|(_, ok)| !ok)
    .map(|(name, _)| name)
    .collect();
    if missing.is_empty() {
        return false;
    }
    crate::mirror_common::skip_or_fail(&format!(
        "{} not installed; the remote-root tests need a real sshd \
         (apt-get install openssh-server openssh-client)",
        missing.join(", ")
    ));
    true
}

/// A port nothing listens on right now (the kernel's choice of a free one).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
    l.local_addr().unwrap().port()
}

fn keygen(path: &Path) {
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "accord-test", "-f"])
        .arg(path)
        .stdin(Stdio::null())
        .status()
        .expect("run ssh-keygen");
    assert!(st.success(), "ssh-keygen failed for {}", path.display());
}

impl Sshd {
    /// Start one, or `None` (after `skip_or_fail`) when the tools are
    /// missing.
    pub fn start() -> Option<Sshd> {
        if ssh_tools_missing() {
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(&d.join("host_key"));
        keygen(&d.join("client_key"));
        std::fs::write(d.join("authorized_keys"), b"").unwrap();
        let key = d.join("client_key");
        // sshd refuses a missing privilege separation directory; Debian's
        // package makes it at boot, a fresh container may not have it.
        let _ = std::fs::create_dir_all("/run/sshd");
        // Another process may take the port between our probe and sshd's
        // bind: try a few.
        for _ in 0..5 {
            let port = free_port();
            let config = d.join("sshd_config");
            // The server's state (memos) goes to the run's directory, not
            // the home directory of whoever runs the suite.
            std::fs::write(
                &config,
                format!(
                    "ListenAddress 127.0.0.1\nPort {port}\nHostKey {hk}\n\
                     AuthorizedKeysFile {ak}\nPidFile {pid}\nStrictModes no\nUsePAM no\n\
                     PermitRootLogin yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n\
                     LogLevel ERROR\nMaxStartups 50\nMaxSessions 50\n\
                     SetEnv XDG_STATE_HOME={state} ACCORD_STATE_DIR={state} ACCORD_TEST_SSHD={tag}\n",
                    hk = d.join("host_key").display(),
                    ak = d.join("authorized_keys").display(),
                    pid = d.join("sshd.pid").display(),
                    state = d.join("remote-state").display(),
                    tag = d.display(),
                ),
            )
            .unwrap();
            let log = std::fs::File::create(d.join("sshd.log")).unwrap();
            let mut child = Command::new(SSHD)
                .arg("-D")
                .arg("-e")
                .arg("-f")
                .arg(&config)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start sshd");
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                // Ours, not another test's server that took the port
                // between the probe and sshd's bind (sshd then exits): sshd
                // writes its pid file once it listens.
                let pid_file = std::fs::read_to_string(d.join("sshd.pid")).unwrap_or_default();
                let ours = pid_file.trim() == child.id().to_string();
                if ours && TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    let sshd = Sshd {
                        child,
                        dir,
                        port,
                        key,
                    };
                    sshd.authorize(&sshd.key, None);
                    return Some(sshd);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
            eprintln!(
                "sshd did not start on port {port}: {}",
                std::fs::read_to_string(d.join("sshd.log")).unwrap_or_default()
            );
        }
        panic!("sshd could not be started (see the lines above)");
    }

    /// A new client key pair, not authorized yet.
    pub fn new_key(&self, name: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        keygen(&p);
        p
    }

    /// Add `key` to authorized_keys, with `options` (e.g. a `command=`)
    /// in front when given.
    pub fn authorize(&self, key: &Path, options: Option<&str>) {
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        let line = match options {
            Some(o) => format!("{o} {}", public.trim()),
            None => public.trim().to_string(),
        };
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.dir.path().join("authorized_keys"))
            .unwrap();
        writeln!(f, "{line}").unwrap();
    }

    /// The `--rsh` command for `key`: the run's port, no host key checks.
    pub fn rsh_with(&self, key: &Path) -> String {
        format!("ssh -p {} -i {} {SSH_OPTS}", self.port, key.display())
    }

    pub fn rsh(&self) -> String {
        self.rsh_with(&self.key)
    }

    /// `--rsh` without the port (for `ssh://host:port/path` roots, which
    /// give it themselves).
    pub fn rsh_without_port(&self) -> String {
        format!("ssh -i {} {SSH_OPTS}", self.key.display())
    }

    /// `host:path` for a path of this machine.
    pub fn root(&self, p: &Path) -> String {
        format!("127.0.0.1:{}", p.display())
    }

    /// Processes started by this sshd's sessions (found by the environment
    /// variable its configuration sets), e.g. an `accord server` still
    /// finishing after its client went away.
    pub fn session_pids(&self) -> Vec<u32> {
        let tag = format!("ACCORD_TEST_SSHD={}", self.dir.path().display());
        let mut out = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(env) = std::fs::read(e.path().join("environ")) else {
                continue;
            };
            if env.split(|b| *b == 0).any(|v| v == tag.as_bytes()) {
                out.push(pid);
            }
        }
        out
    }

    /// Wait until no session of this sshd runs any more (true) or `limit`
    /// passed (false).
    pub fn wait_sessions_gone(&self, limit: Duration) -> bool {
        let start = Instant::now();
        while start.elapsed() < limit {
            if self.session_pids().is_empty() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `accord mirror ARGS --rsh RSH --remote-accord ACCORD_BIN` with a private
/// state directory.
pub fn remote_mirror(state: &Path, rsh: &str, args: &[&str]) -> Output {
    Command::new(bin())
        .arg("mirror")
        .args(args)
        .arg("--rsh")
        .arg(rsh)
        .arg("--remote-accord")
        .arg(bin())
        .env("ACCORD_STATE_DIR", state)
        .stdin(Stdio::null())
        .output()
        .expect("run accord")
}

/// stderr of a run, and that it is exactly one non-empty line.
pub fn one_line_stderr(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line on stderr, got:\n{text}");
    lines[0].to_string()
}

/// A file in `dir` that is a test's own `--rsh` wrapper around ssh: it
/// writes ssh's process id to `pid_file` before becoming ssh, so the test
/// can kill exactly that process.
pub fn pid_recording_ssh(dir: &Path, pid_file: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("ssh-recording-pid");
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\necho $$ > '{}'\nexec ssh \"$@\"\n",
            pid_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}
