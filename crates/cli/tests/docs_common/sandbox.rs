//! Where an example runs: a directory that stands for the machine's
//! paths (`paths.rs`), with HOME at `SANDBOX/root` (the examples are what
//! an administrator types: backing up /home is done as root), `accord` first on
//! PATH, and `ssh server` reaching the run's own sshd. What it started
//! (a daemon, a service of a fixture, a union mount) is stopped when it is
//! dropped.

use super::paths::into_sandbox;
use crate::mirror_common::bin;
use crate::remote_common::Sshd;
use std::io::Write;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest an example may run: a guard against a hang, not a wait.
const EXAMPLE_LIMIT: Duration = Duration::from_secs(300);
/// Longest a started command may take to be ready.
const READY_LIMIT: Duration = Duration::from_secs(60);
/// How often a condition is looked at while waiting for it.
const POLL: Duration = Duration::from_millis(20);

/// What every sandbox of one page shares: the tools directory put first on
/// PATH (`accord`, and an `ssh` that reads the sandbox's `~/.ssh/config`,
/// since ssh itself reads the passwd entry's home, not $HOME) and, once an
/// example needs it, an sshd on a loopback port.
pub struct Machine {
    tools: tempfile::TempDir,
    sshd: Option<(Sshd, PathBuf)>,
}

impl Machine {
    pub fn new() -> Machine {
        let tools = tempfile::tempdir().unwrap();
        let accord = std::fs::canonicalize(bin()).expect("the accord binary (ACCORD_BIN)");
        std::os::unix::fs::symlink(&accord, tools.path().join("accord")).unwrap();
        if let Some(ssh) = which("ssh") {
            let wrapper = format!("#!/bin/sh\nexec {ssh} -F \"$HOME/.ssh/config\" \"$@\"\n");
            write_executable(&tools.path().join("ssh"), &wrapper);
        }
        Machine { tools, sshd: None }
    }

    /// Start the sshd if it is not running; false when it cannot run here
    /// (after `skip_or_fail`).
    pub fn start_sshd(&mut self) -> bool {
        if self.sshd.is_some() {
            return true;
        }
        let Some(sshd) = Sshd::start() else {
            return false;
        };
        // The far side's `accord` is ours: the key's forced command puts
        // the tools first on the session's PATH, then runs what was asked.
        let key = sshd.new_key("docs_key");
        let command = format!(
            "command=\"exec env PATH={}:/usr/local/bin:/usr/bin:/bin sh -c \\\"$SSH_ORIGINAL_COMMAND\\\"\"",
            self.tools.path().display()
        );
        sshd.authorize(&key, Some(&command));
        self.sshd = Some((sshd, key));
        true
    }

    fn ssh_config(&self) -> String {
        let Some((sshd, key)) = &self.sshd else {
            return String::new();
        };
        format!(
            "Host server\n  HostName 127.0.0.1\n  Port {}\n  User {}\n  IdentityFile {}\n  \
             IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  \
             BatchMode yes\n  LogLevel ERROR\n",
            sshd.port,
            user(),
            key.display()
        )
    }
}

pub struct Sandbox {
    dir: tempfile::TempDir,
    path: String,
    background: Vec<Child>,
}

impl Sandbox {
    pub fn new(machine: &Machine) -> Sandbox {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["root/.ssh", "tmp", "logs"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        std::fs::write(dir.path().join("root/.ssh/config"), machine.ssh_config()).unwrap();
        Sandbox {
            path: format!(
                "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                machine.tools.path().display()
            ),
            dir,
            background: Vec::new(),
        }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// `text` as it runs here (paths moved into the sandbox).
    pub fn local(&self, text: &str) -> String {
        into_sandbox(text, self.dir.path())
    }

    /// Write `text` to `path` (`~/…` or a path of the docs).
    pub fn write_file(&self, path: &str, text: &str) -> Result<(), String> {
        let target = match path.strip_prefix("~/") {
            Some(rest) => self.home().join(rest),
            None => PathBuf::from(self.local(path)),
        };
        std::fs::create_dir_all(target.parent().unwrap()).map_err(|e| e.to_string())?;
        std::fs::write(&target, self.local(text)).map_err(|e| format!("{path}: {e}"))
    }

    fn command(&self, script: &str, log: &str) -> Command {
        let mut cmd = Command::new("bash");
        cmd.arg("-e")
            .arg("-o")
            .arg("pipefail")
            .arg("-c")
            .arg(self.local(script))
            .current_dir(self.home())
            .env_clear()
            .env("PATH", &self.path)
            .env("HOME", self.home())
            .env("USER", user())
            .env("LOGNAME", user())
            .env("LANG", "C.UTF-8")
            .env("TMPDIR", self.dir.path().join("tmp"))
            .stdin(Stdio::null())
            .stdout(self.log_file(&format!("{log}.out")))
            .stderr(self.log_file(&format!("{log}.err")))
            .process_group(0);
        cmd
    }

    fn log_file(&self, name: &str) -> std::fs::File {
        std::fs::File::create(self.dir.path().join("logs").join(name)).unwrap()
    }

    fn output(&self, log: &str) -> String {
        let read = |ext: &str| {
            std::fs::read_to_string(self.dir.path().join("logs").join(format!("{log}.{ext}")))
                .unwrap_or_default()
        };
        format!(
            "--- stdout ---\n{}--- stderr ---\n{}",
            read("out"),
            read("err")
        )
    }

    /// Run `script` to its end; Err with its status and output if it fails.
    pub fn run(&self, script: &str, log: &str) -> Result<(), String> {
        let mut child = self
            .command(script, log)
            .spawn()
            .map_err(|e| e.to_string())?;
        let start = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                if st.success() {
                    return Ok(());
                }
                return Err(format!("it failed ({st})\n{}", self.output(log)));
            }
            if start.elapsed() > EXAMPLE_LIMIT {
                stop(&mut child);
                return Err(format!(
                    "it did not end in {EXAMPLE_LIMIT:?}\n{}",
                    self.output(log)
                ));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Start `script`, which keeps running, and wait until `ready` says it
    /// is (or it ended, which is a failure).
    pub fn start(
        &mut self,
        script: &str,
        log: &str,
        ready: &super::parse::Ready,
    ) -> Result<(), String> {
        use super::parse::Ready;
        if let Ready::Port(port) = ready {
            if port_open(*port) {
                return Err(format!(
                    "port {port} is in use by something else on this machine"
                ));
            }
        }
        let mut child = self
            .command(script, log)
            .spawn()
            .map_err(|e| e.to_string())?;
        let start = Instant::now();
        loop {
            let is_ready = match ready {
                Ready::Port(port) => port_open(*port),
                Ready::Mount(p) => is_mount_point(&self.local(p)),
                Ready::File(p) => Path::new(&self.local(p)).exists(),
                Ready::Returns => true,
            };
            if is_ready {
                self.background.push(child);
                return Ok(());
            }
            if let Some(st) = child.try_wait().unwrap() {
                return Err(format!(
                    "it ended ({st}) before it was ready\n{}",
                    self.output(log)
                ));
            }
            if start.elapsed() > READY_LIMIT {
                stop(&mut child);
                return Err(format!(
                    "it was not ready in {READY_LIMIT:?}\n{}",
                    self.output(log)
                ));
            }
            std::thread::sleep(POLL);
        }
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for child in &mut self.background {
            stop(child);
        }
        for mount in mounts_under(self.dir.path()) {
            let _ = Command::new("umount").arg("-l").arg(&mount).status();
        }
    }
}

/// SIGTERM to the process group, then SIGKILL if it has not ended.
fn stop(child: &mut Child) {
    let group = -(child.id() as i32);
    unsafe { libc::kill(group, libc::SIGTERM) };
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if child.try_wait().unwrap().is_some() {
            return;
        }
        std::thread::sleep(POLL);
    }
    unsafe { libc::kill(group, libc::SIGKILL) };
    let _ = child.wait();
}

fn port_open(port: u16) -> bool {
    TcpStream::connect(("127.0.0.1", port)).is_ok()
}

fn mount_points() -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| p.replace("\\040", " "))
        .collect()
}

fn is_mount_point(path: &str) -> bool {
    mount_points().iter().any(|p| p == path)
}

/// Mount points at or under `dir`, deepest first.
fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = dir.to_str().unwrap();
    let mut found: Vec<String> = mount_points()
        .into_iter()
        .filter(|p| p.starts_with(dir))
        .collect();
    found.sort_by_key(|p| std::cmp::Reverse(p.len()));
    found
}

fn which(tool: &str) -> Option<String> {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .ok()?;
    let path = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && path.starts_with('/')).then_some(path)
}

fn user() -> String {
    let out = Command::new("id").arg("-un").output().expect("run id");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(text.as_bytes()).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
