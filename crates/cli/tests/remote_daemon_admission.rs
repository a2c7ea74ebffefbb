//! The TCP daemon under attack (issue 27): who gets a connection thread.
//! Peers without a key, however slow or many, cannot keep a client with
//! one out: the handshake and first request have one deadline (10 s from
//! arrival) however the bytes trickle; connections in their handshake have
//! their own pool, whose oldest are cut short for newcomers (first of the
//! address that holds the most; one address holds at most its share); and
//! "busy" is said only to a known key, after the handshake.

mod daemon_common;
mod mirror_common;

use accord_remote::{connect_daemon, dial_daemon, parse_remote, DaemonOptions, Halves, RootMode};
use daemon_common::connect_from;
use mirror_common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// The daemon's deadline for the handshake and first request.
const DEADLINE: Duration = Duration::from_secs(10);
/// How late past it a closed connection may be seen on a loaded machine.
const MARGIN: Duration = Duration::from_secs(5);

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `accord keygen -f PATH`.
fn keygen(path: &Path) {
    let out = Command::new(bin())
        .args(["keygen", "-f", s(path), "-C", "test"])
        .output()
        .unwrap();
    assert_exit(&out, 0);
}

fn pub_of(key: &Path) -> PathBuf {
    PathBuf::from(format!("{}.pub", key.display()))
}

/// Keys, a module and a config directory for one test.
struct World {
    tmp: tempfile::TempDir,
    client_key: PathBuf,
    server_key: PathBuf,
    rw: PathBuf,
}

impl World {
    fn new() -> World {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path();
        let (client_key, server_key) = (p.join("client/key"), p.join("server/key"));
        keygen(&client_key);
        keygen(&server_key);
        std::fs::copy(pub_of(&client_key), p.join("server/authorized_keys")).unwrap();
        let rw = p.join("modules/rw");
        std::fs::create_dir_all(&rw).unwrap();
        World {
            tmp,
            client_key,
            server_key,
            rw,
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn start(&self, extra: &[&str]) -> Daemon {
        let mut cmd = Command::new(bin());
        cmd.args(["server", "--listen", "127.0.0.1:0"])
            .args(["--module", &format!("rw={}", s(&self.rw))])
            .args(["--auth-keys", s(&self.path("server/authorized_keys"))])
            .args(["--key", s(&self.server_key)])
            .args(extra)
            .env("ACCORD_STATE_DIR", self.path("server-state"));
        Daemon::start(cmd)
    }

    /// `accord mirror SRC accord://…/rw/NAME` with `key`; a small tree.
    fn mirror_as(&self, key: &Path, d: &Daemon, name: &str) -> Output {
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
    fn mirror_ok(&self, d: &Daemon, name: &str) {
        let out = self.mirror_as(&self.client_key, d, name);
        assert_exit(&out, 0);
        let (want, got) = (snapshot(&self.path("src")), snapshot(&self.rw.join(name)));
        assert!(differences(&want, &got).is_empty());
    }

    fn options(&self) -> DaemonOptions {
        DaemonOptions {
            key: self.client_key.clone(),
            server_key: Some(pub_of(&self.server_key)),
            ..Default::default()
        }
    }
}

/// The daemon's log, and a signal for each line added.
type Log = Arc<(Mutex<Vec<String>>, Condvar)>;

/// A running daemon; its log lines are collected.
struct Daemon {
    child: Child,
    port: u16,
    log: Log,
}

impl Daemon {
    fn start(mut cmd: Command) -> Daemon {
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

    fn url(&self, path: &str) -> String {
        format!("accord://127.0.0.1:{}/{path}", self.port)
    }

    fn lines(&self) -> Vec<String> {
        self.log.0.lock().unwrap().clone()
    }

    fn count(&self, needle: &str) -> usize {
        let lines = self.log.0.lock().unwrap();
        lines.iter().filter(|l| l.contains(needle)).count()
    }

    /// Wait until `n` lines contain `needle` (panics after `timeout`).
    fn wait_lines(&self, needle: &str, n: usize, timeout: Duration) {
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
    fn peer_of(&self, root: &str) -> String {
        let needle = format!(": module rw, path \"{root}\"");
        self.wait_lines(&needle, 1, MARGIN);
        let lines = self.lines();
        let line = lines.iter().find(|l| l.contains(&needle)).unwrap();
        let peer = line.trim_start_matches("accord server: ");
        peer.split(": module").next().unwrap().to_string()
    }

    /// Drop `held`, a session on `root`, and wait until the daemon has
    /// ended it (its place is free again).
    fn end_session(&self, held: accord_remote::RemoteReplica, root: &str) {
        let peer = self.peer_of(root);
        drop(held);
        self.wait_lines(&format!("{peer}: closed after"), 1, MARGIN);
    }

    /// The daemon's connection threads, as now.
    fn connection_threads(&self) -> usize {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.child.id())).unwrap();
        let names = tasks.filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok());
        names.filter(|n| n.starts_with("accord-session")).count()
    }

    /// Wait until the daemon has taken in `n` connections (a thread
    /// each); nothing to wait on but its threads, so look every 20 ms.
    fn wait_threads(&self, n: usize, timeout: Duration) {
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

    fn assert_alive(&mut self) {
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

/// Whether the daemon has closed `c` (without waiting).
fn is_closed(c: &mut TcpStream) -> bool {
    c.set_nonblocking(true).unwrap();
    let closed = match c.read(&mut [0u8; 64]) {
        Ok(0) => true,
        Ok(_) => panic!("the daemon sent something to a peer without a key"),
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    };
    c.set_nonblocking(false).unwrap();
    closed
}

/// A peer without a key that sends the start of a handshake (a first
/// message's right length, then its bytes) one byte a second: how long
/// after connecting the daemon closed it, or `None` if it had not after
/// `give_up`. Its first message alone would take it 34 s.
fn trickle(port: u16, give_up: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let first = [&[0u8, 32][..], &[7u8; 32]].concat();
    for b in first.iter().cycle() {
        if started.elapsed() > give_up || c.write_all(&[*b]).is_err() {
            break;
        }
        // The second until the next byte, or the daemon's close.
        match c.read(&mut [0u8; 64]) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => panic!("the daemon answered half a first message"),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return Some(started.elapsed()),
        }
    }
    (started.elapsed() <= give_up).then(|| started.elapsed())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Assert a refusal: nonzero exit and `needle` in what it said.
fn assert_refused(out: &Output, needle: &str) {
    assert_ne!(out.status.code(), Some(0), "{}", stderr(out));
    assert!(
        stderr(out).contains(needle),
        "expected {needle:?} in: {}",
        stderr(out)
    );
}

/// The defect: with four sessions at most, eight peers without a key
/// trickling a byte a second used to hold every place (the limit was on
/// each read, not on the handshake), and a client with a key was told
/// "busy". Now they hold no session's place, the client's mirror goes
/// through while they trickle, and each is closed at the deadline, long
/// before its first handshake message could be complete.
#[test]
fn trickling_peers_without_a_key_cannot_lock_out_a_client() {
    let w = World::new();
    let mut d = w.start(&["--max-connections", "4"]);
    let (tx, rx) = mpsc::channel();
    for _ in 0..8 {
        let (tx, port) = (tx.clone(), d.port);
        std::thread::spawn(move || tx.send(trickle(port, Duration::from_secs(40))));
    }
    // All eight are taken in (a thread each) before the client comes.
    d.wait_threads(8, Duration::from_secs(10));
    w.mirror_ok(&d, "through");
    for _ in 0..8 {
        let closed = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        let after = closed.expect("a trickling peer was never closed");
        assert!(
            after >= DEADLINE - Duration::from_secs(1) && after < DEADLINE + MARGIN,
            "a trickling peer was closed after {after:?}"
        );
    }
    d.wait_lines("within 10 s of connecting", 8, MARGIN);
    d.assert_alive();
}

/// 150 silent connections from ten addresses, each opened again as soon
/// as the daemon closes it, keep a pool of 128 pending handshakes full;
/// a client with a key still gets through (the oldest handshake is cut
/// for it), and none of its connections is cut.
#[test]
fn a_flood_of_silent_connections_does_not_lock_out_a_client() {
    let w = World::new();
    let mut d = w.start(&["--max-handshakes", "128"]);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for a in 2..12 {
            let (port, stop) = (d.port, &stop);
            scope.spawn(move || {
                let from = Ipv4Addr::new(127, 0, 0, a);
                let mut conns: Vec<_> = (0..15).map(|_| connect_from(from, port)).collect();
                while !stop.load(Ordering::Relaxed) {
                    for c in conns.iter_mut().filter_map(|c| is_closed(c).then_some(c)) {
                        *c = connect_from(from, port);
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
            });
        }
        // The pool is full: 150 - 128 have been cut short.
        d.wait_lines("handshake cut short", 22, Duration::from_secs(10));
        w.mirror_ok(&d, "flooded");
        stop.store(true, Ordering::Relaxed);
    });
    let lines = d.lines();
    let cut = |l: &&String| l.contains("cut short") && l.contains("127.0.0.1:");
    assert!(!lines.iter().any(|l| cut(&l)), "{lines:#?}");
    assert!(d.count("it the oldest") >= 22);
    d.assert_alive();
}

/// Twenty pending handshakes from one address (16 is its limit): its four
/// oldest are closed, the others stay; another address's are not touched.
#[test]
fn one_address_holds_only_its_share_of_pending_handshakes() {
    let w = World::new();
    let d = w.start(&["--max-handshakes-per-address", "16"]);
    let other = Ipv4Addr::new(127, 0, 0, 2);
    let mut others: Vec<_> = (0..5).map(|_| connect_from(other, d.port)).collect();
    d.wait_threads(5, Duration::from_secs(10));
    let one = Ipv4Addr::new(127, 0, 0, 3);
    let mut mine: Vec<_> = (0..20).map(|_| connect_from(one, d.port)).collect();
    d.wait_lines("from its address", 4, Duration::from_secs(5));
    for (i, c) in mine.iter_mut().enumerate() {
        // The four cut are closed already (their close was logged).
        assert_eq!(is_closed(c), i < 4, "connection {i} of 20");
    }
    for c in others.iter_mut() {
        assert!(!is_closed(c), "another address's handshake was closed");
    }
    // The log names the four oldest, by their ports.
    for c in &mine[..4] {
        let port = c.local_addr().unwrap().port();
        assert_eq!(
            d.count(&format!("127.0.0.3:{port}: closed: handshake cut short")),
            1
        );
    }
    assert_eq!(d.count("cut short"), 4, "{:#?}", d.lines());
}

fn dial(w: &World, d: &Daemon) -> Halves {
    let spec = parse_remote(&d.url("rw")).unwrap().unwrap();
    dial_daemon(&spec, &w.options()).unwrap()
}

/// A client with a key that completes the handshake and then sends no
/// request is closed at the deadline, not after the idle timeout (300 s).
#[test]
fn a_keyed_client_that_sends_no_request_is_closed_at_the_deadline() {
    let w = World::new();
    let d = w.start(&[]);
    let started = Instant::now();
    let (mut reader, _writer) = dial(&w, &d);
    let n = reader.read(&mut [0u8; 64]).unwrap_or(0);
    assert_eq!(n, 0, "the daemon sent something before a request");
    let waited = started.elapsed();
    assert!(
        waited >= DEADLINE - Duration::from_secs(1) && waited < DEADLINE + MARGIN,
        "closed after {waited:?}"
    );
    d.wait_lines("no request: not through the handshake", 1, MARGIN);
}

/// With one session at most and one held, a second client with a known
/// key is told the server is busy (through the encrypted channel); a key
/// the server does not know learns only that. Once the session ends, the
/// place is free again.
#[test]
fn busy_is_said_after_authentication_to_a_known_key_only() {
    let w = World::new();
    let d = w.start(&["--max-connections", "1"]);
    let spec = parse_remote(&d.url("rw/held")).unwrap().unwrap();
    let held = connect_daemon(&spec, &w.options(), RootMode::Write).unwrap();
    let out = w.mirror_as(&w.client_key, &d, "busy");
    assert_refused(&out, "the server is busy (1 sessions at once");
    let stranger = w.path("stranger/key");
    keygen(&stranger);
    let out = w.mirror_as(&stranger, &d, "busy");
    assert_refused(&out, "does not know your key");
    assert!(!stderr(&out).contains("server is busy"), "{}", stderr(&out));
    d.wait_lines("refused: the server is busy", 1, MARGIN);
    // The place comes back once the held session has ended.
    d.end_session(held, "held");
    w.mirror_ok(&d, "busy");
}

/// `--max-per-address 1`: a second session from the same address is
/// refused with its own reason, while the server has room.
#[test]
fn sessions_per_address_are_limited_when_asked() {
    let w = World::new();
    let d = w.start(&["--max-per-address", "1"]);
    let spec = parse_remote(&d.url("rw/held")).unwrap().unwrap();
    let held = connect_daemon(&spec, &w.options(), RootMode::Write).unwrap();
    let out = w.mirror_as(&w.client_key, &d, "second");
    assert_refused(&out, "sessions from your address already");
    d.end_session(held, "held");
    w.mirror_ok(&d, "second");
}
