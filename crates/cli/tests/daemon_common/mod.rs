//! A daemon for a test: keys made by `accord keygen`, a read-write and a
//! read-only module, the daemon started on a loopback port with its log
//! collected, and the client's commands pointed at it.

#![allow(dead_code)] // each test binary uses a part

use crate::mirror_common::*;
use accord_proto::frame::{encode_frame, read_frame, FrameKind};
use accord_proto::{Hello, Request, RootMode, Welcome, WireError};
use accord_remote::{dial_daemon, parse_remote, DaemonOptions, Halves};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `accord keygen -f PATH`.
pub fn keygen(path: &Path) {
    let out = Command::new(bin())
        .args(["keygen", "-f", s(path), "-C", "test"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
}

pub fn pub_of(key: &Path) -> PathBuf {
    PathBuf::from(format!("{}.pub", key.display()))
}

/// The user id (and group id) of `nobody`.
pub const NOBODY: u32 = 65534;

/// Keys, modules and a config directory for one test.
pub struct World {
    pub tmp: tempfile::TempDir,
    pub client_key: PathBuf,
    pub server_key: PathBuf,
    pub rw: PathBuf,
    pub ro: PathBuf,
}

impl World {
    pub fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path();
        let (client_key, server_key) = (p.join("client/key"), p.join("server/key"));
        keygen(&client_key);
        keygen(&server_key);
        std::fs::copy(pub_of(&client_key), p.join("server/authorized_keys")).unwrap();
        let (rw, ro) = (p.join("modules/rw"), p.join("modules/ro"));
        std::fs::create_dir_all(&rw).unwrap();
        std::fs::create_dir_all(&ro).unwrap();
        World {
            tmp,
            client_key,
            server_key,
            rw,
            ro,
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    pub fn start(&self, extra: &[&str]) -> Daemon {
        Daemon::start(self.daemon_command(Command::new(bin()), extra))
    }

    /// The daemon as a user that is not root, as the package's service
    /// runs it: when the test runs as root, as `nobody` (its own group,
    /// and `users`, group 100, besides), the world handed to that user.
    pub fn start_unprivileged(&self, extra: &[&str]) -> Daemon {
        if !is_root() {
            return self.start(extra);
        }
        let chown = Command::new("chown")
            .args(["-R", &format!("{NOBODY}:{NOBODY}"), s(self.tmp.path())])
            .status()
            .unwrap();
        assert!(chown.success());
        let mut setpriv = Command::new("setpriv");
        setpriv
            .arg(format!("--reuid={NOBODY}"))
            .arg(format!("--regid={NOBODY}"))
            .arg("--groups=100")
            .arg("--")
            .arg(bin());
        Daemon::start(self.daemon_command(setpriv, extra))
    }

    fn daemon_command(&self, mut cmd: Command, extra: &[&str]) -> Command {
        cmd.args(["server", "--listen", "127.0.0.1:0"])
            .args(["--module", &format!("rw={}", s(&self.rw))])
            .args(["--module", &format!("ro={}:ro", s(&self.ro))])
            .args(["--auth-keys", s(&self.path("server/authorized_keys"))])
            .args(["--key", s(&self.server_key)])
            // Debug lines too: a session's module line, as it starts.
            .arg("-v")
            .args(extra)
            .env("ACCORD_STATE_DIR", self.path("server-state"));
        cmd
    }

    /// `accord mirror SRC accord://…/rw/NAME` with `key`, SRC a small tree.
    pub fn push_small_tree_as(&self, key: &Path, d: &Daemon, name: &str) -> Output {
        let src = self.path("src");
        if !src.exists() {
            std::fs::create_dir_all(src.join("sub")).unwrap();
            std::fs::write(src.join("hello.txt"), b"hello\n").unwrap();
            std::fs::write(src.join("sub/data.bin"), Rng(5).bytes(100_000)).unwrap();
        }
        Command::new(bin())
            .arg("mirror")
            .args(["--key", s(key)])
            .args(["--server-key", s(&pub_of(&self.server_key))])
            .args([s(&src), &d.url(&format!("rw/{name}"))])
            .env("ACCORD_STATE_DIR", self.path("client-state"))
            .env("XDG_CONFIG_HOME", self.path("client-config"))
            .output()
            .unwrap()
    }

    /// A mirror by the authorized client; it must succeed and copy.
    pub fn push_small_tree(&self, d: &Daemon, name: &str) {
        let out = self.push_small_tree_as(&self.client_key, d, name);
        assert_exit(&out, 0);
        let (want, got) = (snapshot(&self.path("src")), snapshot(&self.rw.join(name)));
        assert!(differences(&want, &got).is_empty());
    }

    pub fn options(&self) -> DaemonOptions {
        DaemonOptions {
            key: self.client_key.clone(),
            server_key: Some(pub_of(&self.server_key)),
            ..Default::default()
        }
    }

    /// `accord mirror ARGS` as the authorized client, the server's key
    /// given with --server-key, and a config directory of its own.
    pub fn mirror(&self, args: &[&str]) -> Output {
        self.mirror_as(&self.client_key, Some(&pub_of(&self.server_key)), args)
    }

    pub fn mirror_as(&self, key: &Path, server_key: Option<&Path>, args: &[&str]) -> Output {
        let mut cmd = Command::new(bin());
        cmd.arg("mirror").args(["--key", s(key)]);
        if let Some(k) = server_key {
            cmd.args(["--server-key", s(k)]);
        }
        cmd.args(args)
            .env("ACCORD_STATE_DIR", self.path("client-state"))
            .env("XDG_CONFIG_HOME", self.path("client-config"))
            .output()
            .unwrap()
    }
}

/// The daemon's log, and a signal for each line added.
pub type Log = Arc<(Mutex<Vec<String>>, Condvar)>;

/// A running daemon; its log lines are collected.
pub struct Daemon {
    pub child: Child,
    pub port: u16,
    pub log: Log,
}

impl Daemon {
    pub fn start(mut cmd: Command) -> Daemon {
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log: Log = Arc::default();
        let (tx, rx) = mpsc::channel();
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on 127.0.0.1:").nth(1) {
                    let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
                    let _ = tx.send(port.parse::<u16>().unwrap());
                }
                kept.0.lock().unwrap().push(line);
                kept.1.notify_all();
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("the daemon did not start: {:?}", log.0.lock().unwrap()));
        Daemon { child, port, log }
    }

    pub fn url(&self, path: &str) -> String {
        format!("accord://127.0.0.1:{}/{path}", self.port)
    }

    pub fn lines(&self) -> Vec<String> {
        self.log.0.lock().unwrap().clone()
    }

    pub fn log_has(&self, needle: &str) -> bool {
        self.count(needle) > 0
    }

    pub fn count(&self, needle: &str) -> usize {
        let lines = self.log.0.lock().unwrap();
        lines.iter().filter(|l| l.contains(needle)).count()
    }

    /// Wait until `n` lines contain `needle` (panics after `timeout`).
    pub fn wait_lines(&self, needle: &str, n: usize, timeout: Duration) {
        let give_up = Instant::now() + timeout;
        let mut lines = self.log.0.lock().unwrap();
        while lines.iter().filter(|l| l.contains(needle)).count() < n {
            let left = give_up.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no {n} lines with {needle:?} in {lines:#?}"
            );
            lines = self.log.1.wait_timeout(lines, left).unwrap().0;
        }
    }

    /// The peer (address:port) of the session that opened `root` in
    /// module rw, once it has.
    pub fn peer_of(&self, root: &str) -> String {
        let needle = format!(": module rw, path \"{root}\"");
        self.wait_lines(&needle, 1, Duration::from_secs(5));
        let lines = self.lines();
        let line = lines.iter().find(|l| l.contains(&needle)).unwrap();
        let peer = line.split("accord server: ").nth(1).unwrap();
        peer.split(": module").next().unwrap().to_string()
    }

    /// Drop `held`, a session on `root`, and wait until the daemon has
    /// ended it (its place is free again).
    pub fn end_session(&self, held: accord_remote::RemoteReplica, root: &str) {
        let peer = self.peer_of(root);
        drop(held);
        self.wait_lines(&format!("{peer}: closed after"), 1, Duration::from_secs(5));
    }

    /// The daemon's connection threads, as now.
    pub fn connection_threads(&self) -> usize {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.child.id())).unwrap();
        let names = tasks.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok());
        names.filter(|n| n.starts_with("accord-session")).count()
    }

    /// Wait until the daemon has taken in `n` connections (a thread
    /// each); nothing to wait on but its threads, so look every 20 ms.
    pub fn wait_threads(&self, n: usize, timeout: Duration) {
        let give_up = Instant::now() + timeout;
        while self.connection_threads() < n {
            assert!(
                Instant::now() < give_up,
                "{} connection threads, not {n}: {:#?}",
                self.connection_threads(),
                self.lines()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn assert_alive(&mut self) {
        assert!(
            self.child.try_wait().unwrap().is_none(),
            "the daemon died: {:#?}",
            self.lines()
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A small tree with files, a subdirectory, a symlink and a hard link.
pub fn small_tree(root: &Path, seed: u64) {
    let mut rng = Rng(seed | 1);
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    std::fs::write(root.join("hello.txt"), format!("hello {seed}\n")).unwrap();
    std::fs::write(root.join("sub/data.bin"), rng.bytes(200_000)).unwrap();
    std::fs::write(root.join("sub/deeper/empty"), b"").unwrap();
    std::os::unix::fs::symlink("../hello.txt", root.join("sub/link")).unwrap();
    std::fs::hard_link(root.join("hello.txt"), root.join("sub/hard")).unwrap();
}

pub fn assert_same_tree(want: &Path, got: &Path) {
    let d = differences(&snapshot(want), &snapshot(got));
    assert!(
        d.is_empty(),
        "{} and {} differ:\n{}",
        want.display(),
        got.display(),
        d.join("\n")
    );
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Assert a refusal: nonzero exit and `needle` in what it said.
pub fn assert_refused(out: &Output, needle: &str) {
    assert_ne!(out.status.code(), Some(0), "{}", stderr(out));
    assert!(
        stderr(out).contains(needle),
        "expected {needle:?} in: {}",
        stderr(out)
    );
}

pub fn dial(w: &World, d: &Daemon) -> Result<Halves, String> {
    let spec = parse_remote(&d.url("rw")).unwrap().unwrap();
    let opts = DaemonOptions {
        key: w.client_key.clone(),
        server_key: Some(pub_of(&w.server_key)),
        ..Default::default()
    };
    dial_daemon(&spec, &opts)
}

/// The daemon's peak memory (VmHWM), in KiB.
pub fn peak_kib(d: &Daemon) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", d.child.id())).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// What the test client saw on its reply streams.
pub enum Seen {
    Credit(u32),
    Error(u32, String),
    /// A reply ended well.
    Done(u32),
    Closed,
}

/// A session that asked for `root` in `mode`, and the Welcome's name
/// for the root.
pub fn open_session(
    w: &World,
    d: &Daemon,
    root: &str,
    mode: RootMode,
) -> (Box<dyn Read + Send>, Box<dyn Write + Send>, String) {
    try_open_session(w, d, root, mode).unwrap()
}

/// `open_session`, or why the daemon did not let the client in.
#[allow(clippy::type_complexity)]
pub fn try_open_session(
    w: &World,
    d: &Daemon,
    root: &str,
    mode: RootMode,
) -> Result<(Box<dyn Read + Send>, Box<dyn Write + Send>, String), String> {
    let (mut reader, mut writer) = dial(w, d)?;
    Hello {
        version: accord_proto::hello::VERSION,
        features: 0,
        mode,
        root: root.as_bytes().to_vec(),
    }
    .write(&mut writer)
    .map_err(|e| e.to_string())?;
    writer.flush().map_err(|e| e.to_string())?;
    match Welcome::read(&mut reader).map_err(|e| format!("{e:?}"))? {
        Welcome::Accepted { describe, .. } => Ok((reader, writer, describe)),
        Welcome::Refused { message, .. } => Err(format!("refused: {message}")),
    }
}

/// Frames from the daemon, sorted into what the sender needs.
pub fn watch_replies(mut reader: Box<dyn Read + Send>, tx: mpsc::Sender<Seen>) {
    std::thread::spawn(move || loop {
        let seen = match read_frame(&mut reader) {
            Ok(Some(f)) if f.kind == FrameKind::Credit => {
                Seen::Credit(u32::from_le_bytes(f.payload[..4].try_into().unwrap()))
            }
            Ok(Some(f)) if f.kind == FrameKind::Error => {
                let e = WireError::decode(&f.payload).unwrap();
                Seen::Error(f.stream, e.message)
            }
            Ok(Some(f)) if f.kind == FrameKind::End => Seen::Done(f.stream),
            Ok(Some(_)) => continue,
            _ => Seen::Closed,
        };
        let last = matches!(seen, Seen::Closed);
        if tx.send(seen).is_err() || last {
            return;
        }
    });
}

/// Send `request` on stream 1 with a body of `runs` ZEROS frames of
/// 1 MiB, within the body credit the daemon grants; the error it answers
/// with (`None`: it took the whole body); `Err`: the client was not let in.
pub fn zeros_body(
    w: &World,
    d: &Daemon,
    (root, mode): (&str, RootMode),
    request: Request,
    runs: u32,
) -> Result<Option<String>, String> {
    let (reader, mut writer, _) = try_open_session(w, d, root, mode)?;
    let (tx, rx) = mpsc::channel();
    watch_replies(reader, tx);
    let mut buf = Vec::new();
    encode_frame(&mut buf, 1, FrameKind::Open, &request.encode());
    writer.write_all(&buf).unwrap();
    let mut credit = u64::from(accord_proto::frame::BODY_WINDOW);
    let mut answer = None;
    for _ in 0..runs {
        while credit < 1 << 20 && answer.is_none() {
            match rx.recv_timeout(Duration::from_secs(60)).unwrap() {
                Seen::Credit(n) => credit += u64::from(n),
                Seen::Error(1, m) => answer = Some(m),
                Seen::Done(1) => return Ok(None),
                Seen::Error(..) | Seen::Done(_) => {}
                Seen::Closed => return Err("the daemon closed the session".into()),
            }
        }
        if answer.is_some() {
            break;
        }
        buf.clear();
        encode_frame(&mut buf, 1, FrameKind::Zeros, &(1u32 << 20).to_le_bytes());
        writer.write_all(&buf).unwrap();
        writer.flush().unwrap();
        credit -= 1 << 20;
    }
    buf.clear();
    encode_frame(&mut buf, 1, FrameKind::End, &[]);
    let _ = writer.write_all(&buf);
    let _ = writer.flush();
    while answer.is_none() {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Seen::Error(1, m)) => answer = Some(m),
            Ok(Seen::Closed | Seen::Done(1)) | Err(_) => break,
            Ok(_) => {}
        }
    }
    Ok(answer)
}

/// A TCP connection to `port` on 127.0.0.1 from the loopback address
/// `from` (Linux routes all of 127/8 on lo): the daemon sees another peer.
pub fn connect_from(from: Ipv4Addr, port: u16) -> TcpStream {
    fn sockaddr(ip: Ipv4Addr, port: u16) -> libc::sockaddr_in {
        // SAFETY: sockaddr_in is plain data; all zeros is a valid value.
        let mut a: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        a.sin_family = libc::AF_INET as libc::sa_family_t;
        a.sin_port = port.to_be();
        a.sin_addr.s_addr = u32::from(ip).to_be();
        a
    }
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a new socket, owned by the TcpStream made from it; the
    // addresses passed are valid sockaddr_in of the length given.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = TcpStream::from_raw_fd(fd);
        let local = sockaddr(from, 0);
        let r = libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len);
        assert_eq!(r, 0, "bind {from}: {}", std::io::Error::last_os_error());
        let remote = sockaddr(Ipv4Addr::LOCALHOST, port);
        let r = libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len);
        assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
        stream
    }
}
