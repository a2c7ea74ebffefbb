//! `RemoteReplica`: the replica seam carried over a connection to an
//! `accord server`, which runs a `LocalReplica` on its host. Nothing above
//! the seam knows the difference.

use crate::ahead::Ahead;
use crate::budget::{Budget, Held};
use crate::errors::from_wire;
use crate::mux::{ChunkCursor, Conn, Role};
use crate::sync_client::{call_failure, RemoteSide, SideCaps};
use accord_delta::{DeltaStats, LiteralCoding};
use accord_fsys::{IgnoreRules, Listing, PropsMask, Scan, ScanOptions};
use accord_model::{Entry, Expect, Fingerprint, Found, Kind, PathFailure, Props, RelPath, Time};
use accord_proto::codec::{get_failures, get_listing};
use accord_proto::hello::{
    FEATURES, FEATURE_NO_OWNERS, FEATURE_RENAME, FEATURE_WATCH, FEATURE_ZSTD, VERSION,
};
use accord_proto::hello::{
    FEATURE_CASE_PROBE, FEATURE_FINE_SIGNATURE, FEATURE_OPEN_AFTER_LOCK, FEATURE_ORDERED_RULES,
    FEATURE_PACKED_DELTA, FEATURE_SIBLING_COPY, FEATURE_SYNC_FOLLOW, FEATURE_SYNC_IGNORE,
    FEATURE_SYNC_SET, FEATURE_VOUCHING_STAT,
};
use accord_proto::limits;
use accord_proto::msg::{decode_case_probe, decode_found, decode_vouched};
use accord_proto::msg::{ListOptions, StatOf, MAX_WAIT_CHANGE_MS};
use accord_proto::{
    Basis, Dec, Hello, HelloError, Refusal, Request, RootMode, WatchNews, Welcome, WireError,
};
use accord_replica::{
    Action, Deleted, DeltaWire, Error, Incoming, Pending, PendingTemp, Replica, ReplicaDir,
    SiblingFile,
};
use accord_replica::{SideFailure, SideOptions, SideSession, SyncRules};
use std::io::{self, Read, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// How long a finished session waits for the server to close its side.
const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// What a server may make this client hold at once: replies kept whole
/// while they arrive (one delta for the largest file a delta is made for,
/// listings, a sync's scan) and replies arrived and not yet read. Each
/// reply is also bounded by its kind (`reply_limit`).
const CLIENT_MEMORY: u64 = limits::MAX_DELTA + (512 << 20);

/// Why a connection could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The server refused (with its reason).
    #[error("the server refused: {message}")]
    Refused { why: Refusal, message: String },
    /// Something else than `accord server` answered (what it said).
    #[error("{}", not_accord(.0))]
    NotAccord(Vec<u8>),
    #[error("{0}")]
    Io(#[source] io::Error),
    /// The server's answer to the hello does not decode.
    #[error("a handshake that does not decode: {0}")]
    Handshake(#[source] accord_proto::ProtoError),
    /// The server turned on features the client did not ask for.
    #[error("the server turned on features not asked for ({0:#x})")]
    UnaskedFeatures(u64),
}

/// What a peer that is not `accord server` said, for a message.
fn not_accord(said: &[u8]) -> String {
    if said.is_empty() {
        "the remote side closed the connection before answering".to_string()
    } else {
        format!(
            "the remote side did not answer as accord server; it said: {}",
            accord_model::escape_for_display(said.trim_ascii())
        )
    }
}

/// A replica on the far side of a connection.
pub struct RemoteReplica {
    conn: Arc<Conn>,
    describe: String,
    identity: (u64, u64),
    /// Something to keep alive as long as the connection (the ssh child).
    _guard: Mutex<Option<Box<dyn Send>>>,
    /// Listings asked for before the walk needs them (see `ahead.rs`).
    ahead: Arc<Ahead>,
    /// A root opened for writing is locked as the session starts (the
    /// engine always asks): the reply waits here for `try_lock`.
    lock_asked: Mutex<Option<PendingReply>>,
    /// The server carries out renames (`ReplicaDir::rename_from`): it
    /// agreed to the feature.
    renames: bool,
    /// The server watches its root for `wait_change`: it agreed to the
    /// feature.
    watches: bool,
    /// The server applies a sync's ignore rules to its side: it agreed to
    /// the feature.
    sync_ignore: bool,
    /// The server follows a sync's `--follow` links on its side: it agreed
    /// to the feature.
    sync_follow: bool,
    /// The server keeps a side of a sync of more than two roots: it agreed
    /// to the feature.
    sync_set: bool,
    /// The server keeps the owners it is sent (it runs as root).
    keeps_owners: bool,
    /// The server signs a delta's gaps for a second round: it agreed to
    /// the feature.
    fine_signatures: bool,
    /// The server answers a stat whose ctime vouches (`VouchingStat`).
    vouching_stats: bool,
    /// The server probes its root's case in one call (`ProbeCase`), and
    /// the root is open for writing (the probe may make a temp file).
    probes_case: bool,
    /// The server carries out a sync's rules in order: they need not be
    /// waited for one by one.
    orders_rules: bool,
    /// The server opens a sync's archive only for a session that holds the
    /// root's lock (`FEATURE_OPEN_AFTER_LOCK`).
    opens_after_lock: bool,
    /// A sync's side asked for ahead of its turn (`prefetch_sync_side`):
    /// the other root's identity, the side (its opening, rules and scan
    /// sent).
    opening_ahead: Mutex<Option<(Vec<u8>, Box<RemoteSide>)>>,
    /// The root's case probe, asked for with a sync's side ahead.
    probe_ahead: Mutex<Option<PendingReply>>,
    /// The server copies a file from another root of its host
    /// (`CopySibling`), and the root is open for writing.
    sibling_copies: bool,
    /// What a delta crossing this connection may hold: format 2 when the
    /// server agreed to the feature, compressed at the level of `-z`.
    delta_wire: DeltaWire,
}

type PendingReply = Pending<Result<Vec<u8>, CallError>>;

/// What a call can come back with.
pub(crate) enum CallError {
    /// The request failed on the server.
    Failed(WireError),
    /// The connection is gone.
    Lost(io::Error),
}

impl CallError {
    fn into_error(self, action: Action) -> Error {
        match self {
            CallError::Failed(w) => from_wire(w),
            CallError::Lost(e) => Error::Io { action, source: e },
        }
    }

    fn into_io(self) -> io::Error {
        match self {
            CallError::Failed(w) => match from_wire(w) {
                Error::Io { source, .. } => source,
                e => io::Error::other(e.to_string()),
            },
            CallError::Lost(e) => e,
        }
    }
}

impl RemoteReplica {
    /// Shake hands over `reader`/`writer` and ask for `root`; `compress`:
    /// ask for zstd compression of the connection, ours at this level
    /// (used when the server agrees).
    pub fn connect(
        mut reader: Box<dyn Read + Send>,
        mut writer: Box<dyn Write + Send>,
        root: &[u8],
        mode: RootMode,
        compress: Option<i32>,
    ) -> Result<RemoteReplica, ConnectError> {
        let zstd = if compress.is_some() { FEATURE_ZSTD } else { 0 };
        let asked = zstd
            | FEATURE_RENAME
            | FEATURE_WATCH
            | FEATURE_SYNC_IGNORE
            | FEATURE_SYNC_FOLLOW
            | FEATURE_SYNC_SET
            | FEATURE_NO_OWNERS
            | FEATURE_PACKED_DELTA
            | FEATURE_FINE_SIGNATURE
            | FEATURE_VOUCHING_STAT
            | FEATURE_CASE_PROBE
            | FEATURE_ORDERED_RULES
            | FEATURE_SIBLING_COPY
            | FEATURE_OPEN_AFTER_LOCK;
        Hello {
            version: VERSION,
            features: asked & FEATURES,
            mode,
            root: root.to_vec(),
        }
        .write(&mut *writer)
        .map_err(ConnectError::Io)?;
        let welcome = Welcome::read(&mut *reader).map_err(|e| match e {
            HelloError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                ConnectError::NotAccord(Vec::new())
            }
            HelloError::Io(e) => ConnectError::Io(e),
            HelloError::NotAccord(b) => ConnectError::NotAccord(b),
            HelloError::Proto(p) => ConnectError::Handshake(p),
        })?;
        let (identity, describe, features) = match welcome {
            Welcome::Accepted {
                identity,
                describe,
                features,
                ..
            } => (identity, describe, features),
            Welcome::Refused { why, message, .. } => {
                return Err(ConnectError::Refused { why, message })
            }
        };
        if features & !asked != 0 {
            return Err(ConnectError::UnaskedFeatures(features));
        }
        let compress = compress.filter(|_| features & FEATURE_ZSTD != 0);
        let budget = Budget::alone(CLIENT_MEMORY);
        let conn = Conn::start(Role::Client, reader, writer, compress, budget)
            .map_err(ConnectError::Io)?;
        let c = conn.clone();
        let ahead = Ahead::start(Box::new(move |dir: &RelPath, opts: &ListOptions| {
            let req = Request::ListDir {
                dir: dir.clone(),
                opts: opts.clone(),
            };
            start_on(&c, &req, None)
        }))
        .map_err(ConnectError::Io)?;
        let replica = RemoteReplica {
            conn,
            describe,
            identity,
            _guard: Mutex::new(None),
            ahead,
            lock_asked: Mutex::new(None),
            renames: features & FEATURE_RENAME != 0,
            watches: features & FEATURE_WATCH != 0,
            sync_ignore: features & FEATURE_SYNC_IGNORE != 0,
            sync_follow: features & FEATURE_SYNC_FOLLOW != 0,
            sync_set: features & FEATURE_SYNC_SET != 0,
            keeps_owners: features & FEATURE_NO_OWNERS == 0,
            fine_signatures: features & FEATURE_FINE_SIGNATURE != 0,
            vouching_stats: features & FEATURE_VOUCHING_STAT != 0,
            // The probe may make a temp file: a root open for reading only
            // (a dry run's) is probed through the seam's calls.
            probes_case: features & FEATURE_CASE_PROBE != 0 && mode.writes(),
            orders_rules: features & FEATURE_ORDERED_RULES != 0,
            opens_after_lock: features & FEATURE_OPEN_AFTER_LOCK != 0,
            opening_ahead: Mutex::new(None),
            probe_ahead: Mutex::new(None),
            sibling_copies: features & FEATURE_SIBLING_COPY != 0 && mode.writes(),
            delta_wire: DeltaWire {
                reads_packed: features & FEATURE_PACKED_DELTA != 0,
                level: compress,
            },
        };
        if mode.writes() {
            *replica.lock_asked.lock().unwrap() = Some(replica.call_later(&Request::Lock, None));
        }
        Ok(replica)
    }

    /// Keep `guard` alive as long as this replica (the transport's process).
    pub fn keep(&self, guard: Box<dyn Send>) {
        *self._guard.lock().unwrap() = Some(guard);
    }

    /// Name this replica by `describe` in messages.
    pub fn with_name(mut self, describe: String) -> RemoteReplica {
        self.describe = describe;
        self
    }

    /// Whether the server keeps the owners it is sent: one that does not
    /// run as root gives no file away (as rsync's receiver), and sets a
    /// group only where its user belongs to it.
    pub fn keeps_owners(&self) -> bool {
        self.keeps_owners
    }

    /// `--bwlimit`: at most `rate` bytes a second sent, and as many
    /// received, on the connection (0: no limit).
    pub fn limit_rate(&self, rate: u64) {
        self.conn.limit_rate(rate);
    }

    /// Bytes sent and received on the wire so far.
    pub fn wire_bytes(&self) -> (u64, u64) {
        (
            self.conn.bytes_sent.load(Ordering::Relaxed),
            self.conn.bytes_received.load(Ordering::Relaxed),
        )
    }

    /// Wait until the server says its root changed, at most `timeout`
    /// (cut to the protocol's bound; a caller that wants longer asks
    /// again). The first call starts the server's watch and should not
    /// wait: what changes after it is news for the next one. Meant for a
    /// connection of its own: the wait holds one of the session's readers.
    /// `Err`: the connection failed, or its answer did not decode.
    pub fn wait_change(&self, timeout: std::time::Duration) -> Result<WatchNews, String> {
        if !self.watches {
            return Ok(WatchNews::Unwatchable(
                "the accord there is an older release that does not watch its root".into(),
            ));
        }
        let timeout_ms = timeout.as_millis().min(u128::from(MAX_WAIT_CHANGE_MS)) as u32;
        let reply = self
            .call(&Request::WaitChange { timeout_ms }, None)
            .map_err(|e| e.into_io().to_string())?;
        WatchNews::decode(&reply)
            .map_err(|e| format!("an answer to a wait that does not decode: {e}"))
    }

    /// Tell the server's watch (on this connection) what a sync leaves
    /// out, so changes there are no news. An older server, which cannot
    /// take them, reports every change: nothing is sent.
    pub fn watch_rules(&self, rules: &accord_replica::SyncRules) -> Result<(), String> {
        if !self.sync_ignore || !self.watches {
            return Ok(());
        }
        let req = Request::SyncRules {
            excludes: rules.excludes.clone(),
            ignore_files: rules.ignore_files,
        };
        self.call(&req, None)
            .map(|_| ())
            .map_err(|e| e.into_io().to_string())
    }

    /// Why the connection is over, if it is.
    pub fn closed(&self) -> Option<String> {
        self.conn.closed()
    }

    /// Send a request; its reply as a stream.
    fn start(&self, req: &Request, body: Option<&mut dyn Read>) -> Result<ReplyReader, CallError> {
        start_on(&self.conn, req, body)
    }

    /// Send a request and wait for its whole reply.
    fn call(&self, req: &Request, body: Option<&mut dyn Read>) -> Result<Vec<u8>, CallError> {
        self.start(req, body)?.whole()
    }

    /// Send a request now; its whole reply when waited for.
    fn call_later(
        &self,
        req: &Request,
        body: Option<&mut dyn Read>,
    ) -> Pending<Result<Vec<u8>, CallError>> {
        match self.start(req, body) {
            Ok(r) => Pending::later(move || r.whole()),
            Err(e) => Pending::ready(Err(e)),
        }
    }

    /// `call_later` of a call whose reply is empty.
    fn unit_later(&self, req: &Request, action: Action) -> Pending<Result<(), Error>> {
        let p = self.call_later(req, None);
        Pending::later(move || p.wait().map(|_| ()).map_err(|e| e.into_error(action)))
    }

    /// `call_later` of a call that makes a temp. The temp is named at
    /// once by the request's stream number, which the server knows it by:
    /// its commit can be sent before the reply (the server carries writes
    /// out in order, and refuses the commit if the temp was not made).
    fn temp_later(
        &self,
        req: &Request,
        body: Option<&mut dyn Read>,
        action: Action,
    ) -> PendingTemp {
        let r = match self.start(req, body) {
            Ok(r) => r,
            Err(e) => return PendingTemp::ready(Err(e.into_error(action))),
        };
        let handle = temp_handle(r.stream());
        let made = handle.clone();
        PendingTemp::named(
            handle,
            Pending::later(move || {
                let b = r.whole().map_err(|e| e.into_error(action))?;
                if !b.is_empty() {
                    return Err(Error::io(action)(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a reply where none was due",
                    )));
                }
                Ok(made)
            }),
        )
    }

    fn list_options(rules: &IgnoreRules, opts: &ScanOptions) -> ListOptions {
        ListOptions {
            excludes: rules.patterns().to_vec(),
            read_ignore_files: opts.read_ignore_files,
            source: opts.source,
            xattrs: opts.xattrs,
        }
    }

    fn decode_listing(
        &self,
        dir: &RelPath,
        b: &[u8],
        rules: &IgnoreRules,
        (lopts, asked_ahead): (&ListOptions, bool),
    ) -> Result<(Option<Listing>, Scan), accord_proto::ProtoError> {
        let source = lopts.source;
        let mut d = Dec::new(b);
        let listing = if d.bool("listing present")? {
            Some(get_listing(&mut d, dir)?)
        } else {
            None
        };
        let errors = get_failures(&mut d)?;
        let incomplete = d.bool("incomplete")?;
        if d.bool("ignore file present")? {
            let contents = d.bytes(1 << 20, "ignore file")?;
            rules.add_dir_file(dir, contents);
            if !asked_ahead {
                // The prefetcher saw the listings it asked for itself.
                self.ahead.add_ignore_file(dir, source, lopts, contents);
            }
        }
        d.end("the listing")?;
        if source {
            // A source lists nothing its own scan excluded: a name that
            // this side's rules exclude (`--exclude`, or an `.accordignore`
            // the reply carries) is slipped in, not asked for.
            let mut listed = listing
                .iter()
                .flat_map(|l| l.entries.iter().skip(1).chain(&l.subdirs));
            if let Some(x) = listed.find(|x| rules.is_excluded(&x.path, x.kind == Kind::Dir)) {
                return Err(accord_proto::ProtoError::Invalid(format!(
                    "a listing of {} holds {}, which the rules of this run exclude",
                    dir.display(),
                    x.path.display()
                )));
            }
        }
        let mut scan = Scan {
            errors,
            incomplete,
            ..Scan::default()
        };
        if let Some(l) = &listing {
            scan.stale_temps = l.stale_temps.clone();
            scan.inplace_markers = l.markers.clone();
        }
        Ok((listing, scan))
    }
}

impl Drop for RemoteReplica {
    fn drop(&mut self) {
        // The server ends its session when its input ends; the transport's
        // process (dropped after this) is then waited for.
        self.ahead.stop();
        self.conn.shutdown_write();
        // The server releases the root's lock (and a sync's archive) before
        // it closes its side: waiting for that lets the next run, which may
        // start at once, find them free. (Over ssh, waiting for the ssh
        // process does as much; a daemon's connection needs this.)
        self.conn.wait_closed(CLOSE_WAIT);
    }
}

/// Send a request on `conn`; its reply as a stream.
/// A remote temp as the engine holds it: the stream number of the
/// request that made it.
fn temp_handle(stream: u32) -> Vec<u8> {
    stream.to_be_bytes().to_vec()
}

fn temp_stream(handle: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(handle.try_into().ok()?))
}

/// The engine gives back only handles this replica made.
fn bad_temp_handle(action: Action) -> Error {
    Error::io(action)(io::Error::new(
        io::ErrorKind::InvalidInput,
        "not a temp of this connection",
    ))
}

pub(crate) fn start_on(
    conn: &Arc<Conn>,
    req: &Request,
    body: Option<&mut dyn Read>,
) -> Result<ReplyReader, CallError> {
    debug_assert_eq!(req.has_body(), body.is_some());
    let stream = conn.request(&req.encode(), body).map_err(CallError::Lost)?;
    trace(|| format!("sent {stream} {}", req.name()));
    Ok(ReplyReader {
        conn: conn.clone(),
        stream,
        limit: reply_limit(req),
        cursor: ChunkCursor::default(),
        done: false,
        failed: None,
    })
}

/// The most a reply to `req` may hold (`accord_proto::limits`): a server
/// that sends more is not one to trust with the rest of the run.
fn reply_limit(req: &Request) -> (u64, &'static str) {
    match req {
        Request::ListDir { .. } => (limits::MAX_LISTING, "a listing"),
        Request::Signature { .. }
        | Request::PartialSignature { .. }
        | Request::FineSignature { .. } => (limits::MAX_SIGNATURE, "a signature"),
        Request::MakeDelta { expect, .. } => {
            let size = match expect {
                Expect::Entry(f) => f.size.min(limits::MAX_DELTA_FILE),
                _ => 0,
            };
            (limits::max_delta(size), "a delta")
        }
        Request::ReadState { .. } => (limits::MAX_STATE + 1, "a state file"),
        Request::SyncScan { .. } | Request::SyncLookup { .. } => {
            (limits::MAX_SYNC, "a sync's scan")
        }
        // A file's contents are streamed, never kept whole here.
        Request::OpenRead { .. } => (u64::MAX, "a file"),
        _ => (limits::MAX_SMALL_REPLY, "a reply"),
    }
}

/// With `ACCORD_TRACE_WIRE` set, each request sent and each reply waited
/// for is printed on stderr with the time since the first: the waits that
/// follow each other are the run's round trips.
fn trace(line: impl FnOnce() -> String) {
    use std::sync::OnceLock;
    static START: OnceLock<Option<std::time::Instant>> = OnceLock::new();
    let start = START
        .get_or_init(|| std::env::var_os("ACCORD_TRACE_WIRE").map(|_| std::time::Instant::now()));
    if let Some(t0) = start {
        eprintln!(
            "wire {:>9.3} ms {}",
            t0.elapsed().as_secs_f64() * 1e3,
            line()
        );
    }
}

/// The reply of one request, read as it arrives.
pub(crate) struct ReplyReader {
    conn: Arc<Conn>,
    stream: u32,
    /// The most this reply may be when kept whole, and what it is.
    limit: (u64, &'static str),
    cursor: ChunkCursor,
    done: bool,
    failed: Option<WireError>,
}

impl ReplyReader {
    /// The stream of the request this is the reply of.
    pub(crate) fn stream(&self) -> u32 {
        self.stream
    }

    /// The whole reply: at most its kind's limit, charged to the
    /// connection's budget while it arrives.
    pub(crate) fn whole(mut self) -> Result<Vec<u8>, CallError> {
        trace(|| format!("wait {}", self.stream));
        let (max, what) = self.limit;
        let mut out = Held::new(&self.conn.budget);
        loop {
            match self.next_chunk() {
                Ok(true) => {}
                Ok(false) => return Ok(out.into_vec()),
                Err(e) => {
                    return Err(match self.failed.take() {
                        Some(w) => CallError::Failed(w),
                        None => CallError::Lost(e),
                    })
                }
            }
            if (out.len() + self.cursor.left()) as u64 > max {
                let why = format!(
                    "the server sent {what} above its limit of {} MiB",
                    max >> 20
                );
                self.conn.close(&why);
                return Err(CallError::Lost(io::Error::new(
                    io::ErrorKind::InvalidData,
                    why,
                )));
            }
            if let Err(e) = self.cursor.take_into(&mut out, what) {
                return Err(CallError::Lost(io::Error::new(
                    io::ErrorKind::OutOfMemory,
                    e.to_string(),
                )));
            }
        }
    }

    /// Make sure the cursor has bytes, taking the next chunk if need be;
    /// false at the reply's end.
    fn next_chunk(&mut self) -> io::Result<bool> {
        while self.cursor.is_spent() {
            if self.done {
                return Ok(false);
            }
            match self.conn.recv(self.stream) {
                Ok(Some(c)) => self.cursor.set(c),
                Ok(None) => {
                    self.done = true;
                    return Ok(false);
                }
                Err(Ok(payload)) => {
                    self.done = true;
                    let w = WireError::decode(&payload).unwrap_or_else(|e| {
                        crate::errors::protocol(format!("an error reply that does not decode: {e}"))
                    });
                    let msg = w.message.clone();
                    self.failed = Some(w);
                    return Err(io::Error::other(msg));
                }
                Err(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
            }
        }
        Ok(true)
    }
}

impl Read for ReplyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() || !self.next_chunk()? {
            return Ok(0);
        }
        Ok(self.cursor.read(buf))
    }
}

impl Drop for ReplyReader {
    fn drop(&mut self) {
        if !self.done {
            self.conn.forget(self.stream);
        }
    }
}

/// A reply stream that turns a failure reply into the engine's error.
/// A file's contents from the server, which must be as long as the file
/// was listed: a file that grew or shrank while it was read (or a server
/// that says one size and sends another) fails, and nothing of it is kept.
struct FileReader {
    inner: ReplyReader,
    /// The size the file was listed with.
    listed: Option<u64>,
    got: u64,
}

impl FileReader {
    fn check_size(&self, at_end: bool) -> io::Result<()> {
        match self.listed {
            Some(size) if self.got > size || (at_end && self.got != size) => {
                Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "the file's size changed while it was read: listed with {size} bytes, {} came{}",
                        self.got,
                        if at_end { "" } else { " so far" }
                    ),
                ))
            }
            _ => Ok(()),
        }
    }
}

impl Read for FileReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self
            .inner
            .read(buf)
            .map_err(|e| match self.inner.failed.take() {
                Some(w) => match from_wire(w) {
                    Error::Io { source, .. } => source,
                    other => io::Error::other(other.to_string()),
                },
                None => e,
            })?;
        self.got += n as u64;
        self.check_size(n == 0 && !buf.is_empty())?;
        Ok(n)
    }
}

fn lost_listing(dir: &RelPath, e: CallError) -> (Option<Listing>, Scan) {
    let message = e.into_io().to_string();
    let scan = Scan {
        errors: vec![PathFailure {
            path: dir.clone(),
            message,
        }],
        incomplete: true,
        ..Scan::default()
    };
    (None, scan)
}

impl Replica for RemoteReplica {
    fn describe(&self) -> String {
        self.describe.clone()
    }

    fn can_rename(&self) -> bool {
        self.renames
    }

    fn identity(&self) -> (u64, u64) {
        self.identity
    }

    fn start_case_probe(&self) -> Option<Pending<Result<bool, String>>> {
        if !self.probes_case {
            return None;
        }
        let ahead = self.probe_ahead.lock().unwrap().take();
        let p = ahead.unwrap_or_else(|| self.call_later(&Request::ProbeCase, None));
        Some(Pending::later(move || {
            let b = p.wait().map_err(call_failure)?;
            decode_case_probe(&b)
                .map_err(|e| format!("a case probe reply that does not decode: {e}"))?
        }))
    }

    fn copies_from_siblings(&self) -> bool {
        self.sibling_copies
    }

    fn try_lock(&self) -> io::Result<bool> {
        let asked = self.lock_asked.lock().unwrap().take();
        let p = asked.unwrap_or_else(|| self.call_later(&Request::Lock, None));
        let r = p.wait().map_err(CallError::into_io)?;
        Ok(r.first() == Some(&1))
    }

    fn list_dir(
        &self,
        dir: &RelPath,
        rules: &IgnoreRules,
        opts: &ScanOptions,
    ) -> (Option<Listing>, Scan) {
        let lopts = Self::list_options(rules, opts);
        if dir.is_root() {
            self.ahead.fence(opts.source, opts.same_fs);
        }
        let key = (dir.clone(), opts.source);
        let (reply, asked_ahead) = match self.ahead.claim(&key) {
            Some(slot) => (self.ahead.take(&slot), true),
            None => {
                let req = Request::ListDir {
                    dir: dir.clone(),
                    opts: lopts.clone(),
                };
                (self.call(&req, None), false)
            }
        };
        match reply {
            Ok(b) => {
                let (listing, scan) = self
                    .decode_listing(dir, &b, rules, (&lopts, asked_ahead))
                    .unwrap_or_else(|e| {
                        self.conn
                            .close(&format!("a listing that does not decode: {e}"));
                        let lost = io::Error::new(io::ErrorKind::ConnectionAborted, e.to_string());
                        lost_listing(dir, CallError::Lost(lost))
                    });
                // A listing asked for ahead had its subdirectories asked
                // for as it arrived.
                if let (Some(l), false, false) = (&listing, asked_ahead, opts.alone) {
                    let subdirs = self.ahead.below(opts.source, l);
                    self.ahead.ask_all(subdirs.into_iter(), opts.source, &lopts);
                }
                (listing, scan)
            }
            Err(e) => lost_listing(dir, e),
        }
    }

    fn prefetch_dir(&self, dir: &RelPath, rules: &IgnoreRules, opts: &ScanOptions) {
        if dir.is_root() {
            self.ahead.fence(opts.source, opts.same_fs);
        }
        self.ahead
            .ask(dir, opts.source, &Self::list_options(rules, opts));
    }

    fn fingerprint(&self, path: &RelPath) -> Result<Fingerprint, Error> {
        let b = self
            .call(&Request::Fingerprint { path: path.clone() }, None)
            .map_err(|e| e.into_error(Action::Fingerprint))?;
        b.try_into().map_err(|_| Error::Io {
            action: Action::Fingerprint,
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                "a fingerprint of the wrong size",
            ),
        })
    }

    /// No round trip: a directory that cannot be opened makes each call
    /// on it fail.
    fn open_dir(&self, path: &RelPath) -> io::Result<Box<dyn ReplicaDir + '_>> {
        if let Some(why) = self.conn.closed() {
            return Err(io::Error::new(io::ErrorKind::ConnectionAborted, why));
        }
        Ok(Box::new(RemoteDir {
            replica: self,
            dir: path.clone(),
        }))
    }

    fn sync_identity(&self) -> io::Result<Vec<u8>> {
        let identity = self
            .call(&Request::SyncIdentity, None)
            .map_err(CallError::into_io)?;
        if identity.is_empty() || identity.len() > accord_proto::msg::MAX_SYNC_IDENTITY {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the server named its root with no bytes, or too many",
            ));
        }
        Ok(identity)
    }

    fn open_sync_side(
        &self,
        other: &[u8],
        _archive_dir: &std::path::Path,
    ) -> Result<Box<dyn SideSession + '_>, SideFailure> {
        let caps = SideCaps {
            ignore: self.sync_ignore,
            follow: self.sync_follow,
            ordered_rules: self.orders_rules,
        };
        let ahead = self.opening_ahead.lock().unwrap().take();
        match ahead {
            Some((asked, side)) if asked == other => Ok(side),
            // Asked for another pair: dropped, its replies left unread.
            _ => Ok(Box::new(RemoteSide::open(self.conn.clone(), other, caps)?)),
        }
    }

    fn prefetch_sync_side(&self, other: &[u8], rules: &SyncRules, opts: &SideOptions) {
        // Only behind the lock asked for at the connection's start, and
        // only where the server refuses to open without that lock.
        let locking = self.lock_asked.lock().unwrap().is_some();
        if !(locking && self.opens_after_lock && self.orders_rules) {
            return;
        }
        let caps = SideCaps {
            ignore: self.sync_ignore,
            follow: self.sync_follow,
            ordered_rules: self.orders_rules,
        };
        if self.probes_case {
            // A sync probes the root's case unless told how to match names.
            *self.probe_ahead.lock().unwrap() = Some(self.call_later(&Request::ProbeCase, None));
        }
        if let Some(side) = RemoteSide::sent_ahead(self.conn.clone(), other, rules, opts, caps) {
            *self.opening_ahead.lock().unwrap() = Some((other.to_vec(), Box::new(side)));
        }
    }

    fn open_set_side(
        &self,
        set: &[u8],
        _archive_dir: &std::path::Path,
    ) -> Result<Box<dyn SideSession + '_>, SideFailure> {
        if !self.sync_set {
            return Err(SideFailure::said(
                "its accord server is too old to sync more than two roots; upgrade accord there, \
                 or sync it with one other root in a run of two",
            ));
        }
        Ok(Box::new(RemoteSide::open_set(
            self.conn.clone(),
            set,
            SideCaps {
                ignore: self.sync_ignore,
                follow: self.sync_follow,
                ordered_rules: self.orders_rules,
            },
        )?))
    }

    fn sync_all(&self) -> io::Result<()> {
        self.call(&Request::SyncAll, None)
            .map(|_| ())
            .map_err(CallError::into_io)
    }

    fn start_sync_all(&self) -> Pending<io::Result<()>> {
        let p = self.call_later(&Request::SyncAll, None);
        Pending::later(move || p.wait().map(|_| ()).map_err(CallError::into_io))
    }

    fn read_state(&self, name: &str) -> Option<Vec<u8>> {
        self.start_read_state(name).wait()
    }

    fn start_read_state(&self, name: &str) -> Pending<Option<Vec<u8>>> {
        let p = self.call_later(&Request::ReadState { name: name.into() }, None);
        Pending::later(move || match p.wait().ok()?.split_first() {
            Some((1, rest)) => Some(rest.to_vec()),
            _ => None,
        })
    }

    /// A state that need not survive a crash (a memo) is sent and not
    /// waited for: if it is lost, the next run is slower, not wrong.
    fn write_state(&self, name: &str, data: &[u8], durable: bool) -> io::Result<()> {
        let req = Request::WriteState {
            name: name.into(),
            durable,
        };
        let p = self.call_later(&req, Some(&mut &data[..]));
        if durable {
            p.wait().map(|_| ()).map_err(CallError::into_io)
        } else {
            Ok(())
        }
    }
}

/// One directory of a remote replica.
struct RemoteDir<'a> {
    replica: &'a RemoteReplica,
    dir: RelPath,
}

impl RemoteDir<'_> {
    /// Asked of the server's host, which alone knows whether its file
    /// system moves a ctime a stat read (an older server: nothing
    /// promised, as the seam's default).
    fn vouching_stat(&self, of: StatOf) -> Pending<io::Result<Option<(Found, Time)>>> {
        if !self.replica.vouching_stats {
            return Pending::ready(Ok(None));
        }
        let req = Request::VouchingStat {
            dir: self.dir.clone(),
            of,
        };
        let p = self.replica.call_later(&req, None);
        Pending::later(move || {
            let b = p.wait().map_err(CallError::into_io)?;
            decode_vouched(&b)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
        })
    }
}

impl ReplicaDir for RemoteDir<'_> {
    fn open_read(&self, name: &[u8], expect: &Expect) -> Result<Box<dyn Read + Send + '_>, Error> {
        let req = Request::OpenRead {
            dir: self.dir.clone(),
            name: name.to_vec(),
            expect: *expect,
        };
        let inner = self
            .replica
            .start(&req, None)
            .map_err(|e| e.into_error(Action::OpenSource))?;
        let listed = match expect {
            Expect::Entry(f) if f.kind == Kind::File => Some(f.size),
            _ => None,
        };
        Ok(Box::new(FileReader {
            inner,
            listed,
            got: 0,
        }))
    }

    fn make_delta(
        &self,
        name: &[u8],
        expect: &Expect,
        signature: &[u8],
        in_place: bool,
        wire: DeltaWire,
    ) -> Result<(Vec<u8>, DeltaStats), Error> {
        // The server writes format 2 only when asked, and is asked only when
        // it agreed and the delta's reader (beyond this client) takes it;
        // the literals are compressed at the level of the links crossed.
        let own = self.replica.delta_wire;
        let crossing = DeltaWire {
            reads_packed: own.reads_packed && wire.reads_packed,
            level: wire.level.or(own.level),
        };
        let pack_level = match crossing.coding() {
            LiteralCoding::Zstd { level } if !in_place => Some(level),
            _ => None,
        };
        let req = Request::MakeDelta {
            dir: self.dir.clone(),
            name: name.to_vec(),
            expect: *expect,
            in_place,
            pack_level,
        };
        let b = match self.replica.call(&req, Some(&mut &signature[..])) {
            Ok(b) => b,
            Err(e) => match e.into_error(Action::ReadSource) {
                // The server has not the memory to make it now: make it
                // here, from the file read as a stream (more bytes on the
                // wire, the same delta).
                Error::Io { source, .. } if source.kind() == io::ErrorKind::OutOfMemory => {
                    return accord_replica::delta_from_stream(
                        self, name, expect, signature, in_place, wire,
                    )
                }
                e => return Err(e),
            },
        };
        let bad = |e: accord_proto::ProtoError| Error::Io {
            action: Action::ReadSource,
            source: io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
        };
        let mut d = Dec::new(&b);
        let literal_bytes = d.varint("literal bytes").map_err(bad)?;
        let matched_bytes = d.varint("matched bytes").map_err(bad)?;
        let delta = d.rest();
        if pack_level.is_none() && accord_delta::format::is_format_2(delta) {
            // Its reader may be an older accord: never pass it on.
            return Err(bad(accord_proto::ProtoError::Invalid(
                "a delta with compressed literals, which were not asked for".into(),
            )));
        }
        let stats = DeltaStats {
            literal_bytes,
            matched_bytes,
            ..DeltaStats::default()
        };
        Ok((delta.to_vec(), stats))
    }

    fn delta_wire(&self) -> DeltaWire {
        self.replica.delta_wire
    }

    fn fine_signature(
        &self,
        name: &[u8],
        expect: &Expect,
        request: &[u8],
    ) -> Result<Option<Vec<u8>>, Error> {
        if !self.replica.fine_signatures {
            return Ok(None);
        }
        let req = Request::FineSignature {
            dir: self.dir.clone(),
            name: name.to_vec(),
            expect: *expect,
        };
        self.replica
            .call(&req, Some(&mut &request[..]))
            .map(Some)
            .map_err(|e| e.into_error(Action::OpenDestination))
    }

    fn start_receive(
        &self,
        name: &[u8],
        incoming: Incoming<'_>,
        props: &Props,
        mask: PropsMask,
    ) -> PendingTemp {
        let (basis, mut body): (Basis, Box<dyn Read + '_>) = match incoming {
            Incoming::Whole(r) => (Basis::Nothing, Box::new(r)),
            Incoming::Delta { basis, delta } => (Basis::Entry(basis), Box::new(delta)),
            Incoming::Resume { delta } => (Basis::Partial, Box::new(delta)),
        };
        let req = Request::Receive {
            dir: self.dir.clone(),
            name: name.to_vec(),
            basis,
            props: props.clone(),
            mask,
        };
        self.replica
            .temp_later(&req, Some(&mut body), Action::WriteTemp)
    }

    fn start_stat(&self, name: &[u8]) -> Pending<io::Result<Option<Found>>> {
        let req = Request::Stat {
            dir: self.dir.clone(),
            name: name.to_vec(),
        };
        let p = self.replica.call_later(&req, None);
        Pending::later(move || {
            let b = p.wait().map_err(CallError::into_io)?;
            decode_found(&b).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
        })
    }

    fn start_vouching_stat(&self, name: &[u8]) -> Pending<io::Result<Option<(Found, Time)>>> {
        self.vouching_stat(StatOf::Name(name.to_vec()))
    }

    fn start_vouching_stat_of_temp(
        &self,
        temp: &[u8],
    ) -> Pending<io::Result<Option<(Found, Time)>>> {
        match temp_stream(temp) {
            Some(made_by) => self.vouching_stat(StatOf::Temp(made_by)),
            None => Pending::ready(Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a temp of this connection",
            ))),
        }
    }

    fn start_partial_signature(&self, name: &[u8]) -> Pending<Result<Option<Vec<u8>>, Error>> {
        let req = Request::PartialSignature {
            dir: self.dir.clone(),
            name: name.to_vec(),
        };
        let p = self.replica.call_later(&req, None);
        Pending::later(move || {
            let b = p
                .wait()
                .map_err(|e| e.into_error(Action::OpenDestination))?;
            match b.split_first() {
                Some((0, [])) => Ok(None),
                Some((1, sig)) if !sig.is_empty() => Ok(Some(sig.to_vec())),
                _ => Err(Error::io(Action::OpenDestination)(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a partial file's signature that does not decode",
                ))),
            }
        })
    }

    fn start_signature(
        &self,
        name: &[u8],
        expect: &Expect,
        in_place: bool,
    ) -> Pending<Result<Vec<u8>, Error>> {
        let req = Request::Signature {
            dir: self.dir.clone(),
            name: name.to_vec(),
            expect: *expect,
            in_place,
        };
        let p = self.replica.call_later(&req, None);
        Pending::later(move || p.wait().map_err(|e| e.into_error(Action::OpenDestination)))
    }

    fn patch_in_place(
        &self,
        name: &[u8],
        expect: &Expect,
        delta: &[u8],
        props: &Props,
        mask: PropsMask,
    ) -> Result<(), Error> {
        let req = Request::PatchInPlace {
            dir: self.dir.clone(),
            name: name.to_vec(),
            expect: *expect,
            props: props.clone(),
            mask,
        };
        self.replica
            .call(&req, Some(&mut &delta[..]))
            .map(|_| ())
            .map_err(|e| e.into_error(Action::UpdateInPlace))
    }

    fn start_make_node(&self, name: &[u8], entry: &Entry, mask: PropsMask) -> PendingTemp {
        let req = Request::MakeNode {
            dir: self.dir.clone(),
            name: name.to_vec(),
            entry: entry.clone(),
            mask,
        };
        self.replica.temp_later(&req, None, Action::MakeNode)
    }

    fn start_link_temp(&self, name: &[u8], leader: &RelPath) -> PendingTemp {
        let req = Request::LinkTemp {
            dir: self.dir.clone(),
            name: name.to_vec(),
            leader: leader.clone(),
        };
        self.replica.temp_later(&req, None, Action::MakeLink)
    }

    fn start_copy_from_sibling(
        &self,
        name: &[u8],
        from: SiblingFile<'_>,
        props: &Props,
        mask: PropsMask,
    ) -> Option<PendingTemp> {
        if !self.replica.sibling_copies {
            return None;
        }
        let req = Request::CopySibling {
            dir: self.dir.clone(),
            name: name.to_vec(),
            root: from.root.path.clone(),
            identity: from.root.identity,
            path: from.path.clone(),
            expect: *from.expect,
            hash: *from.hash,
            props: props.clone(),
            mask,
        };
        Some(self.replica.temp_later(&req, None, Action::WriteTemp))
    }

    fn start_rename_from(
        &self,
        name: &[u8],
        from: &RelPath,
        expect: &Expect,
    ) -> Pending<Result<(), Error>> {
        let req = Request::RenameFrom {
            dir: self.dir.clone(),
            name: name.to_vec(),
            from: from.clone(),
            expect: *expect,
        };
        self.replica.unit_later(&req, Action::Rename)
    }

    fn start_commit(
        &self,
        temp: &[u8],
        name: &[u8],
        expect: &Expect,
    ) -> Pending<Result<(), Error>> {
        let Some(made_by) = temp_stream(temp) else {
            return Pending::ready(Err(bad_temp_handle(Action::Replace)));
        };
        let req = Request::Commit {
            dir: self.dir.clone(),
            made_by,
            name: name.to_vec(),
            expect: *expect,
        };
        self.replica.unit_later(&req, Action::Replace)
    }

    fn discard(&self, temp: &[u8]) {
        // Nothing to wait for: a discard that fails leaves a stale temp the
        // next run removes.
        let Some(made_by) = temp_stream(temp) else {
            return;
        };
        let req = Request::Discard {
            dir: self.dir.clone(),
            made_by,
        };
        drop(self.replica.call_later(&req, None));
    }

    fn start_set_props(
        &self,
        name: &[u8],
        expect: &Expect,
        kind: Kind,
        props: &Props,
        mask: PropsMask,
    ) -> Pending<Result<(), Error>> {
        let req = Request::SetProps {
            dir: self.dir.clone(),
            name: name.to_vec(),
            expect: *expect,
            kind,
            props: props.clone(),
            mask,
        };
        self.replica.unit_later(&req, Action::SetProps)
    }

    fn start_set_own_props(
        &self,
        expect: &Expect,
        props: &Props,
        mask: PropsMask,
    ) -> Pending<Result<(), Error>> {
        let req = Request::SetOwnProps {
            dir: self.dir.clone(),
            expect: *expect,
            props: props.clone(),
            mask,
        };
        self.replica.unit_later(&req, Action::SetProps)
    }

    fn start_mkdir(&self, name: &[u8]) -> Pending<Result<(), Error>> {
        let req = Request::Mkdir {
            dir: self.dir.clone(),
            name: name.to_vec(),
        };
        self.replica.unit_later(&req, Action::MakeDir)
    }

    fn start_delete(&self, name: &[u8], expect: &Expect) -> Pending<Result<Deleted, Error>> {
        let req = Request::Delete {
            dir: self.dir.clone(),
            name: name.to_vec(),
            expect: *expect,
        };
        let p = self.replica.call_later(&req, None);
        Pending::later(move || {
            let b = p.wait().map_err(|e| e.into_error(Action::Delete))?;
            match b.as_slice() {
                [0] => Ok(Deleted::Done),
                [1] => Ok(Deleted::Gone),
                [2] => Ok(Deleted::NotEmpty),
                _ => Err(Error::Io {
                    action: Action::Delete,
                    source: io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a deletion reply that does not decode",
                    ),
                }),
            }
        })
    }

    fn remove_stale_temp(&self, name: &[u8]) {
        let req = Request::RemoveStaleTemp {
            dir: self.dir.clone(),
            name: name.to_vec(),
        };
        drop(self.replica.call_later(&req, None));
    }
}
