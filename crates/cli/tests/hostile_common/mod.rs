//! Shared pieces of the hostile-peer suite: a real `serve` session over a
//! socket pair with our raw frames on the other end (a hostile client), and
//! a fake server speaking raw frames to a real `RemoteReplica` (a hostile
//! server). The hostile side is a test double of the *other* peer; the side
//! under test is always the product's own code.

#![allow(dead_code)]

use accord_engine::{LocalReplica, MirrorConfig, Progress, Replica, Report};
use accord_model::{Entry, Expect, Found, Kind, Props, RelPath, Time};
use accord_proto::codec::{put_entry, put_expect, put_mask, put_props};
use accord_proto::frame::{read_frame, write_frame, FrameKind};
use accord_proto::hello::VERSION;
use accord_proto::{Enc, Frame, Hello, Request, RootMode, Welcome, WireError};
use accord_remote::{serve, RemoteReplica, ServerConfig};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How long any wait of the suite may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------
// A sandbox: a root inside a temp directory, with an OUTSIDE directory
// beside it, so a write that escapes the root is seen.
// ---------------------------------------------------------------------

pub struct Sandbox {
    pub tmp: tempfile::TempDir,
    pub root: PathBuf,
    pub outside: PathBuf,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"outside contents\n").unwrap();
        Sandbox { tmp, root, outside }
    }

    /// Every path under the sandbox but outside the root (relative to the
    /// sandbox), sorted: the test compares it before and after.
    pub fn around_root(&self) -> Vec<(PathBuf, Vec<u8>)> {
        let mut out = Vec::new();
        walk(self.tmp.path(), self.tmp.path(), &self.root, &mut out);
        out.sort();
        out
    }
}

fn walk(base: &Path, dir: &Path, skip: &Path, out: &mut Vec<(PathBuf, Vec<u8>)>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p == skip {
            continue;
        }
        let md = std::fs::symlink_metadata(&p).unwrap();
        let contents = if md.is_file() {
            std::fs::read(&p).unwrap()
        } else if md.file_type().is_symlink() {
            let mut t = b"-> ".to_vec();
            t.extend_from_slice(
                std::fs::read_link(&p)
                    .unwrap()
                    .as_os_str()
                    .as_encoded_bytes(),
            );
            t
        } else {
            Vec::new()
        };
        out.push((p.strip_prefix(base).unwrap().to_path_buf(), contents));
        if md.is_dir() {
            walk(base, &p, skip, out);
        }
    }
}

/// Names in a directory of the root, sorted (temp names included).
pub fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Names reserved for our temps in a directory.
pub fn temps_in(dir: &Path) -> Vec<String> {
    names(dir)
        .into_iter()
        .filter(|n| accord_fsys::is_reserved_name(n.as_bytes()))
        .collect()
}

// ---------------------------------------------------------------------
// A real server, a hostile client.
// ---------------------------------------------------------------------

/// A `serve` session running in a thread.
pub struct ServerHandle {
    done: mpsc::Receiver<std::thread::Result<Result<(), String>>>,
    thread: Option<JoinHandle<()>>,
}

impl ServerHandle {
    /// What `serve` returned; fails the test if it panicked or hangs.
    pub fn finish(mut self) -> Result<(), String> {
        let r = self
            .done
            .recv_timeout(WAIT)
            .expect("the server session did not end");
        self.thread.take().unwrap().join().unwrap();
        match r {
            Ok(r) => r,
            Err(_) => panic!("the server panicked"),
        }
    }
}

/// Start `serve` on one end of a socket pair; the other end is returned.
pub fn spawn_server(cfg: ServerConfig) -> (UnixStream, ServerHandle) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let r = theirs.try_clone().unwrap();
    let (tx, rx) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let res = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            serve(Box::new(r), Box::new(theirs), &cfg)
        }));
        let _ = tx.send(res);
    });
    (
        ours,
        ServerHandle {
            done: rx,
            thread: Some(thread),
        },
    )
}

/// Our side of a session with a real server, speaking raw frames.
pub struct RawClient {
    pub sock: UnixStream,
    next: u32,
    /// Frames of streams not waited for yet.
    queued: HashMap<u32, Vec<Frame>>,
}

/// How a request ended, as the raw client saw it.
#[derive(Debug)]
pub enum Outcome {
    Reply(Vec<u8>),
    Failed(WireError),
    /// The server ended the connection (or stopped answering).
    Closed(String),
}

impl Outcome {
    pub fn is_refusal(&self) -> bool {
        !matches!(self, Outcome::Reply(_))
    }

    pub fn reply(self) -> Vec<u8> {
        match self {
            Outcome::Reply(b) => b,
            other => panic!("expected a reply, got {other:?}"),
        }
    }
}

impl RawClient {
    /// Connect to a fresh server session on `root`.
    pub fn start(root: &Path, mode: RootMode) -> (RawClient, ServerHandle) {
        Self::start_with(root, mode, ServerConfig::default())
    }

    pub fn start_with(root: &Path, mode: RootMode, cfg: ServerConfig) -> (RawClient, ServerHandle) {
        let (sock, handle) = spawn_server(cfg);
        sock.set_read_timeout(Some(WAIT)).unwrap();
        let mut w = sock.try_clone().unwrap();
        Hello {
            version: VERSION,
            features: 0,
            mode,
            root: root.as_os_str().as_encoded_bytes().to_vec(),
        }
        .write(&mut w)
        .unwrap();
        let mut r = sock.try_clone().unwrap();
        match Welcome::read(&mut r).unwrap() {
            Welcome::Accepted { .. } => {}
            other => panic!("refused: {other:?}"),
        }
        (
            RawClient {
                sock,
                next: 1,
                queued: HashMap::new(),
            },
            handle,
        )
    }

    pub fn frame(&mut self, stream: u32, kind: FrameKind, payload: &[u8]) {
        // The server may have hung up already: that is for the test to see.
        let _ = write_frame(&mut self.sock, stream, kind, payload);
    }

    /// Raw bytes on the connection (a crafted header).
    pub fn raw(&mut self, bytes: &[u8]) {
        let _ = self.sock.write_all(bytes);
    }

    /// Send a request without a body; its stream number.
    pub fn send(&mut self, header: &[u8]) -> u32 {
        let s = self.next;
        self.next += 1;
        self.frame(s, FrameKind::OpenFin, header);
        s
    }

    /// Open a request whose body the test sends itself (DATA and END
    /// frames on the stream returned).
    pub fn open_body(&mut self, header: &[u8]) -> u32 {
        let s = self.next;
        self.next += 1;
        self.frame(s, FrameKind::Open, header);
        s
    }

    /// Send a request with `body`, whole.
    pub fn send_body(&mut self, header: &[u8], body: &[u8]) -> u32 {
        let s = self.next;
        self.next += 1;
        self.frame(s, FrameKind::Open, header);
        let mut chunks = body.chunks(64 << 10).peekable();
        if chunks.peek().is_none() {
            self.frame(s, FrameKind::End, &[]);
        }
        while let Some(c) = chunks.next() {
            let kind = if chunks.peek().is_some() {
                FrameKind::Data
            } else {
                FrameKind::End
            };
            self.frame(s, kind, c);
        }
        s
    }

    /// Wait for the outcome of `stream`.
    pub fn outcome(&mut self, stream: u32) -> Outcome {
        let mut body = Vec::new();
        loop {
            let f = match self.queued.get_mut(&stream).filter(|q| !q.is_empty()) {
                Some(q) => q.remove(0),
                None => match read_frame(&mut self.sock) {
                    Ok(Some(f)) => f,
                    Ok(None) => return Outcome::Closed("end of stream".into()),
                    Err(e) => return Outcome::Closed(e.to_string()),
                },
            };
            if f.stream != stream || f.kind == FrameKind::Credit {
                if f.kind != FrameKind::Credit {
                    self.queued.entry(f.stream).or_default().push(f);
                }
                continue;
            }
            match f.kind {
                FrameKind::Data => body.extend_from_slice(&f.payload),
                FrameKind::Zeros => {
                    let n = u32::from_le_bytes(f.payload[..4].try_into().unwrap());
                    body.resize(body.len() + n as usize, 0);
                }
                FrameKind::End => {
                    body.extend_from_slice(&f.payload);
                    return Outcome::Reply(body);
                }
                FrameKind::Error => return Outcome::Failed(WireError::decode(&f.payload).unwrap()),
                k => panic!("unexpected {k:?} from the server"),
            }
        }
    }

    pub fn call(&mut self, header: &[u8]) -> Outcome {
        let s = self.send(header);
        self.outcome(s)
    }

    pub fn call_body(&mut self, header: &[u8], body: &[u8]) -> Outcome {
        let s = self.send_body(header, body);
        self.outcome(s)
    }

    /// Hang up (the server's session then ends).
    pub fn hang_up(self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
    }
}

/// Raw request headers, built field by field so that they can hold what
/// `Request::encode` (which takes validated `RelPath`s) never would.
pub mod raw {
    use super::*;

    fn head(op: u8, dir: &[u8]) -> Enc {
        let mut e = Enc::new();
        e.u8(op).bytes(dir);
        e
    }

    pub fn list(dir: &[u8]) -> Vec<u8> {
        let mut e = head(2, dir);
        e.varint(0).bool(false).bool(false).u8(0);
        e.finish()
    }

    pub fn stat(dir: &[u8], name: &[u8]) -> Vec<u8> {
        let mut e = head(8, dir);
        e.bytes(name);
        e.finish()
    }

    pub fn open_read(dir: &[u8], name: &[u8], expect: &Expect) -> Vec<u8> {
        let mut e = head(9, dir);
        e.bytes(name);
        put_expect(&mut e, expect);
        e.finish()
    }

    pub fn make_delta(dir: &[u8], name: &[u8], expect: &Expect) -> Vec<u8> {
        let mut e = head(11, dir);
        e.bytes(name);
        put_expect(&mut e, expect);
        e.bool(false);
        e.finish()
    }

    pub fn receive(dir: &[u8], name: &[u8], basis: Option<&Expect>) -> Vec<u8> {
        let mut e = head(12, dir);
        e.bytes(name);
        match basis {
            None => {
                e.u8(0);
            }
            Some(b) => {
                e.u8(1);
                put_expect(&mut e, b);
            }
        }
        put_props(&mut e, &file_props());
        put_mask(&mut e, no_props());
        e.finish()
    }

    pub fn patch_in_place(dir: &[u8], name: &[u8], expect: &Expect) -> Vec<u8> {
        let mut e = head(13, dir);
        e.bytes(name);
        put_expect(&mut e, expect);
        put_props(&mut e, &file_props());
        put_mask(&mut e, no_props());
        e.finish()
    }

    /// A symlink `name -> target` made as a temp (the server names it).
    pub fn make_symlink(dir: &[u8], name: &[u8], target: &[u8]) -> Vec<u8> {
        let mut e = head(14, dir);
        e.bytes(name);
        let entry = Entry {
            path: RelPath::new(name).unwrap_or_default(),
            link_target: Some(target.to_vec()),
            size: target.len() as u64,
            ..entry(Kind::Symlink)
        };
        put_entry(&mut e, &entry);
        put_mask(&mut e, no_props());
        e.finish()
    }

    pub fn link(dir: &[u8], name: &[u8], leader: &[u8]) -> Vec<u8> {
        let mut e = head(15, dir);
        e.bytes(name).bytes(leader);
        e.finish()
    }

    pub fn rename(dir: &[u8], name: &[u8], from: &[u8], expect: &Expect) -> Vec<u8> {
        let mut e = head(30, dir);
        e.bytes(name).bytes(from);
        put_expect(&mut e, expect);
        e.finish()
    }

    /// Commit the temp made by the request on stream `made_by`.
    pub fn commit(dir: &[u8], made_by: u32, name: &[u8], expect: &Expect) -> Vec<u8> {
        let mut e = head(16, dir);
        e.varint(u64::from(made_by)).bytes(name);
        put_expect(&mut e, expect);
        e.finish()
    }

    pub fn discard(dir: &[u8], made_by: u32) -> Vec<u8> {
        let mut e = head(17, dir);
        e.varint(u64::from(made_by));
        e.finish()
    }

    pub fn mkdir(dir: &[u8], name: &[u8]) -> Vec<u8> {
        let mut e = head(20, dir);
        e.bytes(name);
        e.finish()
    }

    pub fn fingerprint(path: &[u8]) -> Vec<u8> {
        head(3, path).finish()
    }

    /// A signature for a delta applied to a temp file (not in place).
    pub fn signature(dir: &[u8], name: &[u8], expect: &Expect) -> Vec<u8> {
        let mut e = head(10, dir);
        e.bytes(name);
        put_expect(&mut e, expect);
        e.bool(false);
        e.finish()
    }

    /// Set `mode` (and the times) on `name`, taken to be of `kind`.
    pub fn set_props(dir: &[u8], name: &[u8], expect: &Expect, kind: Kind, mode: u32) -> Vec<u8> {
        let mut e = head(18, dir);
        e.bytes(name);
        put_expect(&mut e, expect);
        accord_proto::codec::put_kind_of(&mut e, kind);
        put_props(
            &mut e,
            &Props {
                mode,
                ..file_props()
            },
        );
        put_mask(&mut e, all_props());
        e.finish()
    }

    pub fn set_own_props(dir: &[u8], expect: &Expect, mode: u32) -> Vec<u8> {
        let mut e = head(19, dir);
        put_expect(&mut e, expect);
        put_props(
            &mut e,
            &Props {
                mode,
                ..file_props()
            },
        );
        put_mask(&mut e, all_props());
        e.finish()
    }

    pub fn remove_stale_temp(dir: &[u8], name: &[u8]) -> Vec<u8> {
        let mut e = head(22, dir);
        e.bytes(name);
        e.finish()
    }

    pub fn delete(dir: &[u8], name: &[u8], expect: &Expect) -> Vec<u8> {
        let mut e = head(21, dir);
        e.bytes(name);
        put_expect(&mut e, expect);
        e.finish()
    }
}

pub fn file_props() -> Props {
    Props {
        mode: 0o644,
        uid: 0,
        gid: 0,
        mtime: Time { sec: 0, nsec: 0 },
        xattrs: None,
    }
}

/// Permissions, owner and times (no extended attributes).
pub fn all_props() -> accord_fsys::PropsMask {
    accord_fsys::PropsMask {
        perms: true,
        owner: true,
        times: true,
        xattrs: None,
    }
}

pub fn no_props() -> accord_fsys::PropsMask {
    accord_fsys::PropsMask {
        perms: false,
        owner: false,
        times: false,
        xattrs: None,
    }
}

/// An entry of `kind` at the root with nothing else set.
pub fn entry(kind: Kind) -> Entry {
    Entry {
        path: RelPath::root(),
        kind,
        size: 0,
        props: Props {
            mode: if kind == Kind::Dir { 0o755 } else { 0o644 },
            ..file_props()
        },
        dev: 1,
        ino: 1,
        nlink: 1,
        rdev: 0,
        blocks: 0,
        link_target: None,
        hash: None,
    }
}

/// What a file in the root is now, as an `Expect` (to get past rule 3).
pub fn expect_of(path: &Path) -> Expect {
    use std::os::unix::fs::MetadataExt;
    let md = std::fs::symlink_metadata(path).unwrap();
    let kind = if md.is_dir() {
        Kind::Dir
    } else if md.file_type().is_symlink() {
        Kind::Symlink
    } else {
        Kind::File
    };
    Expect::Entry(Found {
        kind,
        dev: md.dev(),
        ino: md.ino(),
        size: md.size(),
        mtime: Time {
            sec: md.mtime(),
            nsec: md.mtime_nsec() as u32,
        },
    })
}

// ---------------------------------------------------------------------
// A hostile server, a real client.
// ---------------------------------------------------------------------

/// One request as the fake server read it.
pub struct Asked {
    pub stream: u32,
    pub request: Request,
    pub body: Vec<u8>,
}

/// What the fake server sends back for one request.
pub enum Answer {
    Reply(Vec<u8>),
    Error(WireError),
    /// These bytes, as they are (crafted frames).
    Raw(Vec<u8>),
    /// Nothing for now.
    Nothing,
}

/// Start a fake server that answers each request with `answer`, and a real
/// `RemoteReplica` connected to it. The fake's thread ends when the client
/// hangs up; it returns the requests it saw.
pub fn hostile_server(
    mode: RootMode,
    answer: impl FnMut(&Asked) -> Answer + Send + 'static,
) -> (RemoteReplica, JoinHandle<Vec<Request>>) {
    fake_server(mode, (0, None), answer)
}

/// [`hostile_server`] agreeing to `features` (those the client asks for
/// among them), the client asking for `-z` at `compress`: the fake then
/// speaks zstd both ways.
pub fn fake_server(
    mode: RootMode,
    (features, compress): (u64, Option<i32>),
    mut answer: impl FnMut(&Asked) -> Answer + Send + 'static,
) -> (RemoteReplica, JoinHandle<Vec<Request>>) {
    use accord_proto::hello::FEATURE_ZSTD;
    use accord_remote::compress::{ZstdReader, ZstdWriter};
    let (ours, theirs) = UnixStream::pair().unwrap();
    // A fake that is never hung up on still ends.
    ours.set_read_timeout(Some(WAIT)).unwrap();
    let thread = std::thread::spawn(move || {
        let mut r = ours.try_clone().unwrap();
        let mut w = ours;
        let hello = Hello::read(&mut r).unwrap();
        let features = features & hello.features;
        Welcome::Accepted {
            version: VERSION,
            features,
            identity: (99, 99),
            describe: "hostile".into(),
        }
        .write(&mut w)
        .unwrap();
        let (mut r, mut w): (Box<dyn std::io::Read + Send>, Box<dyn Write + Send>) =
            if features & FEATURE_ZSTD != 0 {
                (
                    Box::new(ZstdReader::new(Box::new(r)).unwrap()),
                    Box::new(ZstdWriter::new(Box::new(w), 3).unwrap()),
                )
            } else {
                (Box::new(r), Box::new(w))
            };
        let mut seen = Vec::new();
        let mut bodies: HashMap<u32, (Request, Vec<u8>)> = HashMap::new();
        while let Ok(Some(f)) = read_frame(&mut r) {
            let asked = match f.kind {
                FrameKind::OpenFin => Asked {
                    stream: f.stream,
                    request: Request::decode(&f.payload).unwrap(),
                    body: Vec::new(),
                },
                FrameKind::Open => {
                    let req = Request::decode(&f.payload).unwrap();
                    bodies.insert(f.stream, (req, Vec::new()));
                    continue;
                }
                FrameKind::Data | FrameKind::End | FrameKind::Zeros => {
                    let Some((_, body)) = bodies.get_mut(&f.stream) else {
                        continue;
                    };
                    if f.kind == FrameKind::Zeros {
                        let n = u32::from_le_bytes(f.payload[..4].try_into().unwrap());
                        body.resize(body.len() + n as usize, 0);
                    } else {
                        body.extend_from_slice(&f.payload);
                    }
                    if f.kind != FrameKind::End {
                        continue;
                    }
                    let (request, body) = bodies.remove(&f.stream).unwrap();
                    // Give the body's credit back, as a real server does.
                    let grant = (body.len() as u32).max(1);
                    let _ = write_frame(&mut w, 0, FrameKind::Credit, &grant.to_le_bytes());
                    let _ = w.flush();
                    Asked {
                        stream: f.stream,
                        request,
                        body,
                    }
                }
                _ => continue,
            };
            let out = answer(&asked);
            seen.push(asked.request);
            let bytes = match out {
                Answer::Reply(b) => {
                    let mut buf = Vec::new();
                    let mut chunks = b.chunks(64 << 10).peekable();
                    if chunks.peek().is_none() {
                        accord_proto::frame::encode_frame(
                            &mut buf,
                            asked.stream,
                            FrameKind::End,
                            &[],
                        );
                    }
                    while let Some(c) = chunks.next() {
                        let last = chunks.peek().is_none();
                        let kind = if last {
                            FrameKind::End
                        } else {
                            FrameKind::Data
                        };
                        accord_proto::frame::encode_frame(&mut buf, asked.stream, kind, c);
                    }
                    buf
                }
                Answer::Error(e) => {
                    let mut buf = Vec::new();
                    accord_proto::frame::encode_frame(
                        &mut buf,
                        asked.stream,
                        FrameKind::Error,
                        &e.encode(),
                    );
                    buf
                }
                Answer::Raw(b) => b,
                Answer::Nothing => Vec::new(),
            };
            if w.write_all(&bytes).and_then(|()| w.flush()).is_err() {
                break;
            }
        }
        seen
    });
    let r = theirs.try_clone().unwrap();
    let replica = RemoteReplica::connect(
        Box::new(r),
        Box::new(ShutOnDrop(theirs)),
        b"/x",
        mode,
        compress,
    )
    .expect("connect to the fake server");
    (replica, thread)
}

/// A listing reply (present, the listing, no failures, complete, no ignore
/// file) holding `entries` (the directory's own first) and `subdirs`.
pub fn listing_reply(entries: &[Entry], subdirs: &[Entry]) -> Vec<u8> {
    let listing = accord_fsys::Listing {
        entries: entries.to_vec(),
        subdirs: subdirs.to_vec(),
        stale_temps: Vec::new(),
        markers: Vec::new(),
        ctimes: Vec::new(),
    };
    let mut e = Enc::new();
    e.u8(1);
    accord_proto::codec::put_listing(&mut e, &listing);
    e.varint(0).bool(false).u8(0);
    e.finish()
}

/// An entry at `path` (a file of `size` bytes unless `kind` says otherwise).
pub fn entry_at(path: &str, kind: Kind, size: u64) -> Entry {
    Entry {
        path: RelPath::new(path.as_bytes()).unwrap(),
        size,
        ino: ino_of(path.as_bytes()),
        ..entry(kind)
    }
}

/// The inode number the fakes give `path` (distinct per path).
pub fn ino_of(path: &[u8]) -> u64 {
    path.iter().fold(1469598103934665603u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(1099511628211)
    }) >> 8
}

pub fn symlink_at(path: &str, target: &[u8]) -> Entry {
    Entry {
        link_target: Some(target.to_vec()),
        size: target.len() as u64,
        ..entry_at(path, Kind::Symlink, 0)
    }
}

/// Run a mirror from `src` into a local destination at `dst`.
pub fn mirror_into_local(src: &dyn Replica, dst: &Path) -> Report {
    let local = LocalReplica::create(dst).unwrap();
    accord_engine::mirror_replicas(
        src,
        Some(&local),
        "destination",
        &test_config(),
        &Progress::default(),
    )
}

/// Run a mirror from a local source at `src` into `dst`.
pub fn mirror_from_local(src: &Path, dst: &dyn Replica) -> Report {
    let local = LocalReplica::open(src).unwrap();
    accord_engine::mirror_replicas(
        &local,
        Some(dst),
        "destination",
        &test_config(),
        &Progress::default(),
    )
}

pub fn test_config() -> MirrorConfig {
    MirrorConfig {
        fsync: false,
        jobs: 2,
        ..MirrorConfig::default()
    }
}

/// A real server on `root` and a real `RemoteReplica` talking to it.
pub fn real_pair(root: &Path, mode: RootMode, cfg: ServerConfig) -> (RemoteReplica, ServerHandle) {
    let (sock, handle) = spawn_server(cfg);
    let r = sock.try_clone().unwrap();
    let replica = RemoteReplica::connect(
        Box::new(r),
        Box::new(ShutOnDrop(sock)),
        root.as_os_str().as_encoded_bytes(),
        mode,
        None,
    )
    .expect("connect");
    (replica, handle)
}

/// Peak resident memory of this process so far (VmHWM, KiB).
pub fn peak_rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Start measuring the peak again from the current resident size.
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// A writer that shuts the socket's sending side when dropped, so the peer
/// sees the end of the stream even while a clone of the socket (our reader)
/// is still open.
pub struct ShutOnDrop(pub UnixStream);

impl Write for ShutOnDrop {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl Drop for ShutOnDrop {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Write);
    }
}

impl ServerHandle {
    /// The session must have ended with an error (not cleanly, not by a
    /// panic): why it ended.
    pub fn ended_with_error(self) -> String {
        match self.finish() {
            Err(why) => why,
            Ok(()) => panic!("the server session ended cleanly"),
        }
    }
}

// ---------------------------------------------------------------------
// A real client and a real server with a tap between them.
// ---------------------------------------------------------------------

/// A real server on `root`, a real `RemoteReplica`, and between them a
/// relay that shows each frame from the client to `tap` before passing it
/// on: the test acts on the server's tree at an exact moment of the
/// exchange (a directory swapped as the first bytes of a file arrive).
pub fn tapped_pair(
    root: &Path,
    mode: RootMode,
    cfg: ServerConfig,
    mut tap: impl FnMut(&Frame) + Send + 'static,
) -> (RemoteReplica, ServerHandle) {
    use std::io::Read;
    let (to_server, handle) = spawn_server(cfg);
    let (client_end, relay_end) = UnixStream::pair().unwrap();
    let mut s_r = to_server.try_clone().unwrap();
    let mut c_w = relay_end.try_clone().unwrap();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut s_r, &mut c_w);
        let _ = c_w.shutdown(std::net::Shutdown::Write);
    });
    let mut c_r = relay_end;
    let mut s_w = to_server;
    std::thread::spawn(move || {
        // The handshake (magic, length, message), then frame by frame.
        let mut head = [0u8; 12];
        if c_r.read_exact(&mut head).is_ok() {
            let len = u32::from_le_bytes(head[8..12].try_into().unwrap()) as usize;
            let mut body = vec![0u8; len.min(1 << 16)];
            if c_r.read_exact(&mut body).is_ok()
                && s_w.write_all(&head).is_ok()
                && s_w.write_all(&body).is_ok()
            {
                while let Ok(Some(f)) = read_frame(&mut c_r) {
                    tap(&f);
                    if write_frame(&mut s_w, f.stream, f.kind, &f.payload).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = s_w.shutdown(std::net::Shutdown::Write);
    });
    let r = client_end.try_clone().unwrap();
    let replica = RemoteReplica::connect(
        Box::new(r),
        Box::new(ShutOnDrop(client_end)),
        root.as_os_str().as_encoded_bytes(),
        mode,
        None,
    )
    .expect("connect");
    (replica, handle)
}

/// The request a frame opens, if it opens one.
pub fn opened_request(f: &Frame) -> Option<Request> {
    match f.kind {
        FrameKind::Open | FrameKind::OpenFin => Request::decode(&f.payload).ok(),
        _ => None,
    }
}

// ---------------------------------------------------------------------
// Seeing whether a file outside the root was opened or changed.
// ---------------------------------------------------------------------

/// An inotify watch on one file: every open, read, write or attribute
/// change of it after `new` is seen.
pub struct OpenWatch {
    fd: i32,
    path: PathBuf,
}

impl OpenWatch {
    pub fn new(path: &Path) -> OpenWatch {
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: plain system calls on a descriptor we own.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(
            fd >= 0,
            "inotify_init1: {}",
            std::io::Error::last_os_error()
        );
        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        let mask = libc::IN_OPEN | libc::IN_ACCESS | libc::IN_MODIFY | libc::IN_ATTRIB;
        let wd = unsafe { libc::inotify_add_watch(fd, c.as_ptr(), mask) };
        assert!(
            wd >= 0,
            "inotify_add_watch: {}",
            std::io::Error::last_os_error()
        );
        OpenWatch {
            fd,
            path: path.to_path_buf(),
        }
    }

    /// The masks of the events seen so far.
    pub fn events(&self) -> Vec<u32> {
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: reading into a buffer we own.
            let n = unsafe { libc::read(self.fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return out;
            }
            let mut at = 0usize;
            while at + 16 <= n as usize {
                let mask = u32::from_ne_bytes(buf[at + 4..at + 8].try_into().unwrap());
                let len = u32::from_ne_bytes(buf[at + 12..at + 16].try_into().unwrap());
                out.push(mask);
                at += 16 + len as usize;
            }
        }
    }

    /// Fail unless nothing opened, read, wrote or changed the file.
    pub fn assert_untouched(&self) {
        let ev = self.events();
        assert!(
            ev.is_empty(),
            "{} was opened or changed (inotify masks {ev:x?})",
            self.path.display()
        );
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        // SAFETY: our own descriptor.
        unsafe { libc::close(self.fd) };
    }
}

// ---------------------------------------------------------------------
// Listings a decoder would never let a `RelPath` hold.
// ---------------------------------------------------------------------

/// `x` encoded with `path` as its raw path bytes.
pub fn raw_entry(path: &[u8], x: &Entry) -> Vec<u8> {
    let mut e = Enc::new();
    put_entry(
        &mut e,
        &Entry {
            path: RelPath::root(),
            ..x.clone()
        },
    );
    let b = e.finish();
    // The root's path is one byte (length 0).
    let mut out = Enc::new();
    out.bytes(path).raw(&b[1..]);
    out.finish()
}

/// A listing reply built byte by byte: `entries` (the directory's own
/// first) and `subdirs`, each with its raw path.
pub fn raw_listing_reply(entries: &[(&[u8], Entry)], subdirs: &[(&[u8], Entry)]) -> Vec<u8> {
    let mut e = Enc::new();
    e.u8(1);
    for list in [entries, subdirs] {
        e.varint(list.len() as u64);
        for (p, x) in list {
            e.raw(&raw_entry(p, x));
        }
    }
    // No stale temps, no markers; no failures, complete, no ignore file.
    e.varint(0).varint(0);
    e.varint(0).bool(false).u8(0);
    e.finish()
}

/// A listing reply with an `.accordignore` file's contents.
pub fn listing_reply_with_ignore(entries: &[Entry], subdirs: &[Entry], ignore: &[u8]) -> Vec<u8> {
    let mut b = listing_reply(entries, subdirs);
    b.pop();
    let mut e = Enc::new();
    e.u8(1).bytes(ignore);
    b.extend_from_slice(&e.finish());
    b
}

/// A fake source: listings by directory, contents by path; everything else
/// a source is asked is answered as an empty replica would.
pub fn fake_source(
    listings: HashMap<Vec<u8>, Vec<u8>>,
    files: HashMap<Vec<u8>, Vec<u8>>,
) -> impl FnMut(&Asked) -> Answer + Send + 'static {
    move |a: &Asked| match &a.request {
        Request::ListDir { dir, .. } => match listings.get(dir.as_bytes()) {
            Some(b) => Answer::Reply(b.clone()),
            None => Answer::Reply(vec![0, 0, 0, 0]),
        },
        Request::OpenRead { dir, name, .. } | Request::MakeDelta { dir, name, .. } => {
            let mut p = dir.as_bytes().to_vec();
            if !p.is_empty() {
                p.push(b'/');
            }
            p.extend_from_slice(name);
            match files.get(&p) {
                Some(b) if matches!(a.request, Request::OpenRead { .. }) => {
                    Answer::Reply(b.clone())
                }
                _ => Answer::Error(refusal("no such file")),
            }
        }
        Request::Stat { dir, name } => {
            let mut p = dir.as_bytes().to_vec();
            if !p.is_empty() {
                p.push(b'/');
            }
            p.extend_from_slice(name);
            let found = files.get(&p).map(|b| Found {
                kind: Kind::File,
                dev: 1,
                ino: ino_of(&p),
                size: b.len() as u64,
                mtime: Time { sec: 0, nsec: 0 },
            });
            Answer::Reply(accord_proto::msg::encode_found(found.as_ref()))
        }
        Request::ReadState { .. } => Answer::Reply(vec![0]),
        Request::Lock => Answer::Reply(vec![1]),
        _ => Answer::Reply(Vec::new()),
    }
}

/// An error reply of the fake's.
pub fn refusal(message: &str) -> WireError {
    WireError {
        code: accord_proto::msg::CODE_DENIED,
        action: 0,
        side: 0,
        errno: 0,
        message: message.into(),
        path: None,
    }
}

/// The root directory's own entry.
pub fn root_entry() -> Entry {
    entry(Kind::Dir)
}

/// A file entry at `path` with `contents`' size.
pub fn file_at(path: &str, contents: &[u8]) -> Entry {
    entry_at(path, Kind::File, contents.len() as u64)
}

/// Every file under `dir` (relative paths, sorted), temps included.
pub fn tree(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    fn go(base: &Path, d: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
            if std::fs::symlink_metadata(&p).unwrap().is_dir() {
                go(base, &p, out);
            }
        }
    }
    go(dir, dir, &mut out);
    out.sort();
    out
}
