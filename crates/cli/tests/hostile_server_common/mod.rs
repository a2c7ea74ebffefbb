//! A hostile server driven by the test, reached by the real `accord`
//! binary: the client's `--rsh` is a script that runs this test binary as
//! a relay (`relay_main`), which joins its stdin and stdout to a Unix
//! socket the test listens on. The test's thread then speaks the protocol
//! with accord-proto's own encoders: it reads the Hello, sends a Welcome,
//! and answers (or floods, or stalls on) the client's requests.
//!
//! The client is a process of its own, so what it costs is measured as the
//! kernel sees it: its high-water mark of resident memory (VmHWM in
//! `/proc/PID/status`), read every few milliseconds until it ends. Not
//! `wait4`'s `ru_maxrss`: a process started from this one (by vfork and
//! exec) inherits the test process's own high-water mark there, tens of
//! MiB that are not the client's. What a sample can miss is what the
//! client grows in its last few milliseconds.

#![allow(dead_code)]

use crate::hostile_common::{Answer, Asked};
use accord_proto::frame::{
    encode_frame, parse_credit, read_frame, FrameKind, CHUNK, MAX_PAYLOAD, STREAM_WINDOW,
};
use accord_proto::hello::{FEATURE_ZSTD, VERSION};
use accord_proto::limits;
use accord_proto::{Hello, Request, Welcome, WireError};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The most a client may hold resident at its peak in any case of this
/// suite: a small pull costs a few tens of MiB, and a reply kept whole at
/// most its kind's limit (a listing: 256 MiB, `accord_proto::limits`); a
/// client that kept what a hostile server sends went to 2 GiB.
pub const RSS_BUDGET_KIB: u64 = (limits::MAX_LISTING >> 10) + (64 << 10);

/// A client past this resident size is killed, so that a case that fails
/// cannot take the machine's memory (its peak then reads as at least
/// this much). `ACCORD_TEST_RSS_CEILING_MIB` raises it, to see how far a
/// client without bounds goes.
fn rss_ceiling_kib() -> u64 {
    std::env::var("ACCORD_TEST_RSS_CEILING_MIB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(1 << 20, |mib| mib << 10)
}

/// How long a step of a case may take on a loaded machine before the case
/// fails: a process to start, a request to come, a run to end.
pub const LONG: Duration = Duration::from_secs(60);

/// The variable that turns this test binary into the relay.
const RELAY_SOCKET: &str = "HOSTILE_SERVER_RELAY_SOCKET";

// ---------------------------------------------------------------------
// The relay (the client's "ssh").
// ---------------------------------------------------------------------

/// When this test binary runs as the client's `--rsh` (the variable set
/// by the script), join stdin and descriptor 3 (the script's stdout; our
/// stdout is libtest's) to the test's socket, then exit. Otherwise return.
pub fn relay_if_asked() {
    let Some(path) = std::env::var_os(RELAY_SOCKET) else {
        return;
    };
    use std::os::fd::FromRawFd;
    let sock = UnixStream::connect(path).expect("relay: connect to the test");
    let mut up = sock.try_clone().unwrap();
    std::thread::spawn(move || {
        pump(&mut std::io::stdin().lock(), &mut up);
        // The client hung up: the fake sees the end of its input.
        let _ = up.shutdown(std::net::Shutdown::Write);
    });
    // SAFETY: the script opened descriptor 3 for us; nothing else here
    // uses it.
    let mut out = unsafe { std::fs::File::from_raw_fd(3) };
    let mut down = sock;
    pump(&mut down, &mut out);
    // The fake closed (or the client went): the client sees the end of
    // its input as soon as we are gone.
    std::process::exit(0);
}

/// Copy `r` to `w` until either ends. Not `std::io::copy`: it splices
/// socket to pipe here, and a client reading a spliced Welcome in parts
/// was seen to wait for bytes already in the pipe.
fn pump(r: &mut dyn Read, w: &mut dyn Write) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if w.write_all(&buf[..n]).is_err() {
            return;
        }
    }
}

/// A directory of the case's own (beside, not in, the sandbox): the
/// socket, the rsh script, the client's state.
pub struct Work {
    pub dir: tempfile::TempDir,
    pub listener: UnixListener,
    pub rsh: PathBuf,
}

impl Work {
    pub fn new() -> Work {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("fake.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        let exe = std::env::current_exe().unwrap();
        let rsh = dir.path().join("relay");
        let body = format!(
            "#!/bin/sh\nexec 3>&1 1>&2\n{RELAY_SOCKET}='{}' exec '{}' --exact relay_main --nocapture --test-threads=1 -q\n",
            sock.display(),
            exe.display()
        );
        std::fs::write(&rsh, body).unwrap();
        std::fs::set_permissions(&rsh, std::fs::Permissions::from_mode(0o755)).unwrap();
        Work { dir, listener, rsh }
    }

    /// Run `accord mirror ARGS` through the relay.
    pub fn mirror(&self, args: &[&OsStr]) -> Client {
        let mut c = Command::new(crate::mirror_common::bin());
        c.arg("mirror")
            .args(args)
            .arg("--rsh")
            .arg(&self.rsh)
            .env("ACCORD_STATE_DIR", self.dir.path().join("state"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Client::spawn(c)
    }

    /// The relay's connection, once the client has started it; then the
    /// handshake: the client's Hello, and our Welcome granting `features`
    /// (compressed from then on when they hold `FEATURE_ZSTD`, ours with a
    /// window of 2^`window_log`).
    pub fn accept(&self, features: u64, window_log: Option<u32>) -> Session {
        let mut pfd = libc::pollfd {
            fd: self.listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd we own.
        let n = unsafe { libc::poll(&mut pfd, 1, LONG.as_millis() as i32) };
        assert_eq!(n, 1, "the client's relay did not connect");
        let (sock, _) = self.listener.accept().unwrap();
        Session::start(sock, features, window_log)
    }
}

// ---------------------------------------------------------------------
// The client: the process, its memory, its end.
// ---------------------------------------------------------------------

/// How a client run ended.
#[derive(Debug)]
pub struct Finished {
    /// The exit code, or `None` when a signal ended it.
    pub code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Peak resident size (KiB): the last VmHWM read before it ended.
    pub peak_rss_kib: u64,
    /// Killed for passing the ceiling (`rss_ceiling_kib`), or for not
    /// ending in time.
    pub killed: Option<String>,
}

impl Finished {
    /// Print how the run ended and the figure the report quotes.
    pub fn show(&self, what: &str) {
        eprintln!(
            "{what}: status {:?}, signal {:?}, stderr: {}",
            self.code,
            self.signal,
            self.stderr.trim()
        );
        eprintln!(
            "{what}: peak RSS {} MiB ({} KiB; budget {} MiB){}",
            self.peak_rss_kib >> 10,
            self.peak_rss_kib,
            RSS_BUDGET_KIB >> 10,
            self.killed
                .as_deref()
                .map(|k| format!("; {k}"))
                .unwrap_or_default()
        );
    }

    /// Fail unless the peak is within the budget.
    pub fn assert_within_budget(&self, what: &str) {
        assert!(
            self.peak_rss_kib < RSS_BUDGET_KIB && self.killed.is_none(),
            "{what}: the client's peak RSS was {} MiB (budget {} MiB){}\nstderr: {}",
            self.peak_rss_kib >> 10,
            RSS_BUDGET_KIB >> 10,
            self.killed
                .as_deref()
                .map(|k| format!(", {k}"))
                .unwrap_or_default(),
            self.stderr
        );
    }

    /// The run failed, and said so on stderr.
    pub fn assert_failed_clearly(&self, what: &str) {
        assert!(
            self.code.is_some_and(|c| c != 0),
            "{what}: the client did not fail with a status ({:?}, {:?})\nstdout: {}\nstderr: {}",
            self.code,
            self.killed,
            self.stdout,
            self.stderr
        );
        assert!(
            !self.stderr.trim().is_empty(),
            "{what}: the client failed without a message"
        );
    }
}

/// A running `accord` client.
pub struct Client {
    pid: libc::pid_t,
    out: Option<JoinHandle<Vec<u8>>>,
    err: Option<JoinHandle<Vec<u8>>>,
    /// Set (under the lock) once the process has ended and can no longer
    /// be signalled by number (before it is reaped, so a number reused by
    /// another process is never signalled).
    ended: Arc<Mutex<bool>>,
    /// The wait status, once it ended.
    waited: mpsc::Receiver<i32>,
    killed: Arc<Mutex<Option<String>>>,
    /// The highest VmHWM read so far (KiB).
    peak: Arc<std::sync::atomic::AtomicU64>,
}

impl Client {
    fn spawn(mut c: Command) -> Client {
        let mut child = c.spawn().expect("run accord");
        let pid = child.id() as libc::pid_t;
        let mut o = child.stdout.take().unwrap();
        let mut e = child.stderr.take().unwrap();
        // The process is waited for below, by number: `child` is not.
        drop(child);
        let out = std::thread::spawn(move || read_all(&mut o));
        let err = std::thread::spawn(move || read_all(&mut e));
        let ended = Arc::new(Mutex::new(false));
        let (tx, waited) = mpsc::channel();
        let flag = ended.clone();
        std::thread::spawn(move || {
            let _ = tx.send(reap(pid, &flag));
        });
        let client = Client {
            pid,
            out: Some(out),
            err: Some(err),
            ended,
            waited,
            killed: Arc::new(Mutex::new(None)),
            peak: Arc::default(),
        };
        client.watch_memory();
        client
    }

    /// Read the client's high-water mark until it ends (a sampler, not a
    /// wait: nothing waits on its timing), and kill it past the ceiling.
    fn watch_memory(&self) {
        let (pid, ended, killed) = (self.pid, self.ended.clone(), self.killed.clone());
        let peak = self.peak.clone();
        let ceiling = rss_ceiling_kib();
        std::thread::spawn(move || loop {
            if *ended.lock().unwrap() {
                return;
            }
            // None once it is a zombie: its memory is gone, its mark too.
            let Some(hwm) = status_kib(pid, "VmHWM:") else {
                return;
            };
            peak.fetch_max(hwm, std::sync::atomic::Ordering::Relaxed);
            if hwm > ceiling {
                let why = format!(
                    "killed at {} MiB resident (ceiling {} MiB)",
                    hwm >> 10,
                    ceiling >> 10
                );
                signal(pid, &ended, &killed, why);
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        });
    }

    /// The client's resident size now (KiB).
    pub fn rss_kib(&self) -> u64 {
        status_kib(self.pid, "VmRSS:").unwrap_or(0)
    }

    /// Has the client ended?
    pub fn ended(&self) -> bool {
        *self.ended.lock().unwrap()
    }

    /// Wait for the client's end (at most `LONG`, then it is killed);
    /// how it ended is printed as `what`.
    pub fn finish(mut self, what: &str) -> Finished {
        let status = match self.waited.recv_timeout(LONG) {
            Ok(w) => w,
            Err(_) => {
                let why = format!("killed after {LONG:?} without ending");
                signal(self.pid, &self.ended, &self.killed, why);
                self.waited.recv().unwrap()
            }
        };
        let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
        let signal = libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status));
        let fin = Finished {
            code,
            signal,
            stdout: joined(self.out.take()),
            stderr: joined(self.err.take()),
            peak_rss_kib: self.peak.load(std::sync::atomic::Ordering::Relaxed),
            killed: self.killed.lock().unwrap().take(),
        };
        fin.show(what);
        fin
    }
}

impl Drop for Client {
    /// A case that failed before its end leaves no client behind.
    fn drop(&mut self) {
        let why = "the case ended first".to_string();
        signal(self.pid, &self.ended, &self.killed, why);
    }
}

fn joined(h: Option<JoinHandle<Vec<u8>>>) -> String {
    String::from_utf8_lossy(&h.unwrap().join().unwrap()).into_owned()
}

fn read_all(r: &mut dyn Read) -> Vec<u8> {
    let mut v = Vec::new();
    let _ = r.read_to_end(&mut v);
    v
}

/// Wait for `pid` to end: mark it ended while it is still a zombie (its
/// number still its own), then reap it. Its wait status.
fn reap(pid: libc::pid_t, ended: &Mutex<bool>) -> i32 {
    // SAFETY: plain system calls on our own child, into values we own.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        while libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOWAIT,
        ) != 0
        {
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EINTR)
            );
        }
        *ended.lock().unwrap() = true;
        let mut status = 0;
        assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
        status
    }
}

/// Kill `pid` unless it has ended, saying why.
fn signal(pid: libc::pid_t, ended: &Mutex<bool>, killed: &Mutex<Option<String>>, why: String) {
    let ended = ended.lock().unwrap();
    if !*ended {
        *killed.lock().unwrap() = Some(why);
        // SAFETY: our own child, not yet reaped (the lock is held).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// A memory figure of a process (KiB), from /proc: `field` is "VmRSS:"
/// (now) or "VmHWM:" (its peak so far).
pub fn status_kib(pid: libc::pid_t, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

// ---------------------------------------------------------------------
// The fake server's session.
// ---------------------------------------------------------------------

/// Why the fake stopped sending on a stream.
#[derive(Debug, PartialEq, Eq)]
pub enum Stop {
    /// The client's side of the connection ended (or a write failed).
    Closed,
    /// The client gave no credit for `LONG`: it stopped reading.
    NoCredit,
}

/// What the fake's reader thread keeps for its writers.
#[derive(Default)]
struct Shared {
    /// Bytes the client lets us send now, per reply stream.
    credit: HashMap<u32, u64>,
    /// The client's input ended.
    closed: bool,
}

/// One session of the fake server with a client.
pub struct Session {
    pub hello: Hello,
    requests: mpsc::Receiver<Asked>,
    tx: Tx,
}

/// The fake's sending side, for any thread: frames, credit, hanging up.
#[derive(Clone)]
pub struct Tx {
    sock: Arc<UnixStream>,
    state: Arc<(Mutex<Shared>, Condvar)>,
    out: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl std::ops::Deref for Session {
    type Target = Tx;
    fn deref(&self) -> &Tx {
        &self.tx
    }
}

impl Session {
    fn start(sock: UnixStream, features: u64, window_log: Option<u32>) -> Session {
        let mut r = sock.try_clone().unwrap();
        let hello = Hello::read(&mut r).expect("the client's hello");
        let mut w = sock.try_clone().unwrap();
        Welcome::Accepted {
            version: VERSION,
            features,
            identity: (99, 99),
            describe: "hostile".into(),
        }
        .write(&mut w)
        .unwrap();
        let (reader, out): (Box<dyn Read + Send>, Box<dyn Write + Send>) =
            if features & FEATURE_ZSTD != 0 {
                let mut enc = zstd::stream::write::Encoder::new(w, 3).unwrap();
                if let Some(log) = window_log {
                    enc.window_log(log).unwrap();
                }
                (
                    Box::new(zstd::stream::read::Decoder::new(r).unwrap()),
                    Box::new(enc),
                )
            } else {
                (Box::new(r), Box::new(w))
            };
        let state = Arc::new((Mutex::new(Shared::default()), Condvar::new()));
        let out = Arc::new(Mutex::new(out));
        let (tx, requests) = mpsc::channel();
        let sock = Arc::new(sock);
        let (st, o, s) = (state.clone(), out.clone(), sock.clone());
        std::thread::spawn(move || read_loop(&s, reader, tx, &st, &o));
        Session {
            hello,
            requests,
            tx: Tx { sock, state, out },
        }
    }

    /// A sending side for another thread.
    pub fn tx(&self) -> Tx {
        self.tx.clone()
    }

    /// The client's next request; `None` once it hung up.
    pub fn next_request(&self) -> Option<Asked> {
        match self.requests.recv_timeout(LONG) {
            Ok(a) => Some(a),
            Err(mpsc::RecvTimeoutError::Disconnected) => None,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("no request from the client in {LONG:?}")
            }
        }
    }

    /// Answer every request with `answer` until the client hangs up; the
    /// requests seen. `Nothing` leaves a request to the case (which may
    /// answer it from another thread with a `tx`); a reply above one
    /// window is sent from a thread of its own, so a client that stops
    /// reading it does not hold up the others.
    pub fn serve(&self, mut answer: impl FnMut(&Asked) -> Answer) -> Vec<Request> {
        let mut seen = Vec::new();
        while let Some(a) = self.next_request() {
            match answer(&a) {
                Answer::Reply(b) if b.len() > STREAM_WINDOW as usize => {
                    let tx = self.tx();
                    std::thread::spawn(move || tx.reply(a.stream, &b));
                }
                Answer::Reply(b) => {
                    let _ = self.reply(a.stream, &b);
                }
                Answer::Error(e) => {
                    let _ = self.frame(a.stream, FrameKind::Error, &e.encode());
                }
                Answer::Raw(b) => {
                    let _ = self.raw(&b);
                }
                Answer::Nothing => {}
            }
            seen.push(a.request);
        }
        seen
    }
}

impl Tx {
    /// One frame, whatever the credit.
    pub fn frame(&self, stream: u32, kind: FrameKind, payload: &[u8]) -> Result<(), Stop> {
        let mut buf = Vec::with_capacity(9 + payload.len());
        encode_frame(&mut buf, stream, kind, payload);
        self.raw(&buf)
    }

    /// Bytes as they are (flushed: through zstd too).
    pub fn raw(&self, bytes: &[u8]) -> Result<(), Stop> {
        let mut w = self.out.lock().unwrap();
        w.write_all(bytes)
            .and_then(|()| w.flush())
            .map_err(|_| Stop::Closed)
    }

    /// Wait for credit on `stream` and take up to `want` bytes of it.
    pub fn take_credit(&self, stream: u32, want: u64) -> Result<u64, Stop> {
        let (lock, cv) = &*self.state;
        let deadline = Instant::now() + LONG;
        let mut st = lock.lock().unwrap();
        loop {
            if st.closed {
                return Err(Stop::Closed);
            }
            let c = st.credit.get(&stream).copied().unwrap_or(0);
            if c > 0 {
                let n = c.min(want);
                *st.credit.get_mut(&stream).unwrap() -= n;
                return Ok(n);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Stop::NoCredit);
            }
            st = cv.wait_timeout(st, left).unwrap().0;
        }
    }

    /// A whole reply, within the client's credit (END after it).
    pub fn reply(&self, stream: u32, body: &[u8]) -> Result<(), Stop> {
        let mut rest = body;
        loop {
            let n = if rest.is_empty() {
                0
            } else {
                self.take_credit(stream, rest.len().min(CHUNK) as u64)? as usize
            };
            let (c, more) = rest.split_at(n);
            let kind = if more.is_empty() {
                FrameKind::End
            } else {
                FrameKind::Data
            };
            self.frame(stream, kind, c)?;
            if more.is_empty() {
                return Ok(());
            }
            rest = more;
        }
    }

    /// Part of a reply (no END), within the client's credit.
    pub fn reply_part(&self, stream: u32, body: &[u8]) -> Result<(), Stop> {
        let mut rest = body;
        while !rest.is_empty() {
            let n = self.take_credit(stream, rest.len().min(CHUNK) as u64)? as usize;
            let (c, more) = rest.split_at(n);
            self.frame(stream, FrameKind::Data, c)?;
            rest = more;
        }
        Ok(())
    }

    /// Send `stream` a reply that never ends: frames made by `frame` (for
    /// the stream and of the size it is told, which credit allows), until `cap` bytes of
    /// body went out or the client stops the fake. The bytes sent and why
    /// it stopped (`None`: the cap).
    pub fn flood(
        &self,
        stream: u32,
        cap: u64,
        mut frame: impl FnMut(u32, usize, &mut Vec<u8>),
    ) -> (u64, Option<Stop>) {
        let mut sent = 0u64;
        let mut buf = Vec::new();
        while sent < cap {
            let n = match self.take_credit(stream, MAX_PAYLOAD as u64) {
                Ok(n) => n,
                Err(stop) => return (sent, Some(stop)),
            };
            buf.clear();
            frame(stream, n as usize, &mut buf);
            if let Err(stop) = self.raw(&buf) {
                return (sent, Some(stop));
            }
            sent += n;
        }
        (sent, None)
    }

    /// End the connection from our side (the relay then ends, and the
    /// client sees the end of its input).
    pub fn close(&self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
    }

    /// Has the client hung up (its input to us ended)?
    pub fn client_gone(&self) -> bool {
        self.state.0.lock().unwrap().closed
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.tx.close();
    }
}

/// The fake's reader: requests (with their bodies, whose credit it gives
/// back as a server does) to the case, credit to the writers.
fn read_loop(
    sock: &UnixStream,
    mut r: Box<dyn Read + Send>,
    tx: mpsc::Sender<Asked>,
    state: &(Mutex<Shared>, Condvar),
    out: &Mutex<Box<dyn Write + Send>>,
) {
    let mut bodies: HashMap<u32, (Request, Vec<u8>)> = HashMap::new();
    while let Ok(Some(f)) = read_frame(&mut *r) {
        let open = |st: &mut Shared| st.credit.insert(f.stream, STREAM_WINDOW as u64);
        match f.kind {
            FrameKind::Credit => {
                let n = parse_credit(&f.payload).unwrap() as u64;
                let mut st = state.0.lock().unwrap();
                *st.credit.entry(f.stream).or_default() += n;
                state.1.notify_all();
                continue;
            }
            FrameKind::OpenFin => {
                open(&mut lock(state));
                let request = Request::decode(&f.payload).expect("a request that decodes");
                let _ = tx.send(Asked {
                    stream: f.stream,
                    request,
                    body: Vec::new(),
                });
            }
            FrameKind::Open => {
                open(&mut lock(state));
                let request = Request::decode(&f.payload).expect("a request that decodes");
                bodies.insert(f.stream, (request, Vec::new()));
            }
            FrameKind::Data | FrameKind::End => {
                let Some((_, body)) = bodies.get_mut(&f.stream) else {
                    continue;
                };
                body.extend_from_slice(&f.payload);
                if f.kind == FrameKind::End {
                    let (request, body) = bodies.remove(&f.stream).unwrap();
                    let grant = (body.len() as u32).max(1);
                    let mut buf = Vec::new();
                    encode_frame(&mut buf, 0, FrameKind::Credit, &grant.to_le_bytes());
                    let mut w = out.lock().unwrap();
                    let _ = w.write_all(&buf).and_then(|()| w.flush());
                    drop(w);
                    let _ = tx.send(Asked {
                        stream: f.stream,
                        request,
                        body,
                    });
                }
            }
            _ => {}
        }
    }
    lock(state).closed = true;
    state.1.notify_all();
    // As a real server does when its input ends: the client waits for
    // this before it exits.
    let _ = sock.shutdown(std::net::Shutdown::Both);
}

fn lock(state: &(Mutex<Shared>, Condvar)) -> MutexGuard<'_, Shared> {
    state.0.lock().unwrap()
}

/// An error reply of the fake's.
pub fn failure(message: &str) -> WireError {
    crate::hostile_common::refusal(message)
}

/// Snapshot of the sandbox around DST, and DST itself, for a case's end.
pub fn paths_under(dir: &Path) -> Vec<String> {
    if !dir.exists() {
        return Vec::new();
    }
    crate::hostile_common::tree(dir)
}
