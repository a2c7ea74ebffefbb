//! `accord server`: one session over a byte stream (ssh's stdin and
//! stdout, or a daemon's encrypted connection). It answers the handshake,
//! opens the root asked for as a `LocalReplica` (confined to a restriction
//! or module when it has one) and carries out the client's calls: reads on
//! a few threads, writes in the order they were sent. Small whole files
//! are the exception that keeps many-file pushes fast: each is read into
//! memory with its request and written into its temp file by one of a few
//! writer threads; any other write first waits until those are done, so it
//! still sees every write sent before it. A flush waits for the writes
//! before it, then runs on a writer thread beside the small files after it.

use crate::budget::{Budget, Held, Pool};
use crate::errors::{denied, io_error, over_budget, protocol, to_wire};
use crate::mux::{ChunkCursor, Conn, Opened, Role};
use crate::owners::OwnerLimits;
use crate::sync_server::SyncServer;
use crate::tally::Tally;
use crate::watch_server::RootWatch;
use accord_fsys::{IgnoreRules, ScanOptions, IGNORE_FILE};
use accord_model::{Kind, RelPath};
use accord_proto::codec::{put_failures, put_listing};
use accord_proto::hello::{
    FEATURES, FEATURE_NO_OWNERS, FEATURE_SIBLING_COPY, FEATURE_ZSTD, VERSION,
};
use accord_proto::msg::{encode_found, ListOptions, StatOf};
use accord_proto::{Basis, Enc, Hello, Refusal, Request, RootMode, Welcome, WireError};
use accord_replica::{Action, Error, Incoming, LocalOptions, LocalReplica, Replica, ReplicaDir};
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

mod queue;
mod requests;
mod sibling;

use queue::{Finish, InFlight, WorkQueue};

/// Threads that serve reads (listings, file contents, signatures, deltas).
const READERS: usize = 4;
/// Threads that write small whole files into their temps.
const WRITERS: usize = 4;
/// Largest body of a whole-file receive handed to the writer threads
/// (held in memory until written); bigger ones, and bodies still on their
/// way, are streamed into their temp by the session's own thread.
const POOLED_BODY: u64 = 256 << 10;
/// Small files read ahead and not yet written, at most.
const POOLED_QUEUE: usize = 32;
/// Largest `.accordignore` file sent along with a listing.
const MAX_IGNORE_FILE: u64 = 1 << 20;

/// What a server lets its clients reach.
#[derive(Clone, Debug, Default)]
pub struct ServerConfig {
    /// Roots are resolved inside this directory and may not leave it (an
    /// authorized_keys `command=` line, or a daemon module).
    pub restrict: Option<PathBuf>,
    /// Refuse every write.
    pub read_only: bool,
    /// Where replicas keep their state (memos, guard memory).
    pub state_dir: Option<PathBuf>,
    /// Where two-way syncs keep this host's archives.
    pub archive_dir: Option<PathBuf>,
    pub local: LocalOptions,
    /// What the Welcome calls the root (a daemon's module, never its path
    /// on this host); `None`: the root's path, as over ssh.
    pub shown_as: Option<String>,
    pub memory: Memory,
    /// What the session did, counted for the daemon's log.
    pub tally: Arc<Tally>,
}

/// The memory one session's client may make it hold (bodies and
/// requests not answered yet; see `budget`).
#[derive(Clone, Debug)]
pub struct Memory {
    /// Most bytes one session may hold.
    pub session: u64,
    /// The part of it that is the session's own.
    pub reserve: u64,
    /// Shared by the sessions of a daemon.
    pub pool: Option<Arc<Pool>>,
}

/// A session over ssh is the user's own: it may hold what its largest
/// requests can need (a delta for the largest file a delta is made for,
/// a sync's records), and no more.
const SSH_SESSION_MEMORY: u64 = 2 * accord_proto::limits::MAX_DELTA;

impl Default for Memory {
    fn default() -> Memory {
        Memory {
            session: SSH_SESSION_MEMORY,
            reserve: SSH_SESSION_MEMORY,
            pool: None,
        }
    }
}

impl Memory {
    fn budget(&self) -> Arc<Budget> {
        Budget::new(self.session, self.reserve, self.pool.clone())
    }
}

/// Serve one session; returns when the client is done or the connection
/// fails (with why, for the log).
pub fn serve(
    mut reader: Box<dyn Read + Send>,
    mut writer: Box<dyn Write + Send>,
    cfg: &ServerConfig,
) -> Result<(), String> {
    let hello = Hello::read(&mut *reader).map_err(|e| format!("handshake: {e:?}"))?;
    let refuse = |w: &mut dyn Write, why: Refusal, message: String| {
        let _ = Welcome::Refused {
            version: VERSION,
            why,
            message: message.clone(),
        }
        .write(w);
        Err(message)
    };
    if hello.version != VERSION {
        let m = format!(
            "the remote accord speaks protocol version {VERSION}, this one {}; install the same release on both hosts",
            hello.version
        );
        return refuse(&mut *writer, Refusal::Version, m);
    }
    let writable = hello.mode.writes();
    if writable && cfg.read_only {
        return refuse(
            &mut *writer,
            Refusal::Denied,
            "this root is read-only".into(),
        );
    }
    let opened = match open_root(&hello.root, cfg.restrict.as_deref(), hello.mode) {
        Ok(r) => r,
        Err(m) => return refuse(&mut *writer, Refusal::Denied, m),
    };
    let replica = match opened {
        Ok(r) => r
            .with_state_dir(cfg.state_dir.clone())
            .with_options(cfg.local),
        Err(e) => {
            let why = if e.kind() == io::ErrorKind::NotFound {
                Refusal::NotFound
            } else {
                Refusal::Failed
            };
            return refuse(&mut *writer, why, not_opened(&hello.root, hello.mode, &e));
        }
    };
    let owners = OwnerLimits::of_this_process();
    let mut features = hello.features & FEATURES;
    if owners.keeps_owners() {
        features &= !FEATURE_NO_OWNERS;
    }
    if cfg.restrict.is_some() {
        // A restricted session may not open paths outside its tree.
        features &= !FEATURE_SIBLING_COPY;
    }
    Welcome::Accepted {
        version: VERSION,
        features,
        identity: replica.identity(),
        describe: cfg.shown_as.clone().unwrap_or_else(|| replica.describe()),
    }
    .write(&mut *writer)
    .map_err(|e| format!("handshake: {e}"))?;
    let compress = (features & FEATURE_ZSTD != 0).then_some(crate::compress::DEFAULT_LEVEL);
    let conn = Conn::start(Role::Server, reader, writer, compress, cfg.memory.budget())
        .map_err(|e| format!("start the connection: {e}"))?;
    let session = Session {
        replica: &replica,
        conn: &conn,
        writable,
        temps: Mutex::new(HashMap::new()),
        failed_flush: Mutex::new(None),
        locked: std::sync::atomic::AtomicBool::new(false),
        rules: Mutex::new(None),
        sync: SyncServer::new(
            &replica,
            cfg.archive_dir.clone(),
            hello.mode == RootMode::Inspect,
        ),
        watch: RootWatch::new(replica.root().path(), cfg.archive_dir.as_deref()),
        owners,
        tally: &cfg.tally,
        sibling_copies: features & FEATURE_SIBLING_COPY != 0,
        siblings: Mutex::new(HashMap::new()),
    };
    session.run();
    session.discard_temps();
    // The root's lock and a sync's archive are released before our side
    // closes: the client waits for the close, and its next run may start
    // at once.
    drop(session);
    drop(replica);
    // The last replies may still be queued: write them out before the
    // session (and, over ssh, the process) ends.
    conn.shutdown_write();
    match conn.closed() {
        Some(why) if why != crate::mux::PEER_CLOSED => Err(why),
        _ => Ok(()),
    }
}

/// Why the root asked for could not be opened, for the client to show.
fn not_opened(root: &[u8], mode: RootMode, e: &io::Error) -> String {
    let shown = accord_model::escape_for_display(root);
    if mode == RootMode::WriteExisting && e.kind() == io::ErrorKind::NotFound {
        // As for a local root: a missing one is never taken as emptied.
        return format!(
            "{shown} does not exist: a sync's roots must both exist (for a first sync, \
             create it with mkdir)"
        );
    }
    format!("{shown}: {}", io_words(e))
}

/// An I/O error's words without the "(os error N)" that repeats them.
fn io_words(e: &io::Error) -> String {
    let text = e.to_string();
    match e.raw_os_error() {
        Some(code) => text
            .strip_suffix(&format!(" (os error {code})"))
            .unwrap_or(&text)
            .to_string(),
        None => text,
    }
}

/// Open the root asked for. Unrestricted, it is a path of this host (as
/// the user's own shell would take it); restricted, it is taken inside the
/// restriction (an absolute path as relative to it), and no `..` and no
/// symlink may lead out of it. `Err`: why it is refused.
fn open_root(
    asked: &[u8],
    restrict: Option<&Path>,
    mode: RootMode,
) -> Result<io::Result<LocalReplica>, String> {
    use std::os::unix::ffi::OsStrExt;
    let create = mode == RootMode::Write;
    let Some(base) = restrict else {
        let p = Path::new(std::ffi::OsStr::from_bytes(asked));
        let p = if asked.is_empty() { Path::new(".") } else { p };
        return Ok(if create {
            LocalReplica::create(p)
        } else {
            LocalReplica::open(p)
        });
    };
    let mut rel = Vec::new();
    for c in Path::new(std::ffi::OsStr::from_bytes(asked)).components() {
        match c {
            Component::Normal(n) => {
                if !rel.is_empty() {
                    rel.push(b'/');
                }
                rel.extend_from_slice(n.as_bytes());
            }
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(format!(
                    "{} leaves the tree this key is restricted to",
                    accord_model::escape_for_display(asked)
                ))
            }
        }
    }
    let rel = RelPath::new(&rel)
        .map_err(|e| format!("{}: {e}", accord_model::escape_for_display(asked)))?;
    Ok(accord_fsys::Root::open_beneath(base, &rel, create)
        .map(|root| LocalReplica::from_root(root).with_follow_fence(base)))
}

struct Session<'a> {
    replica: &'a LocalReplica,
    conn: &'a Arc<Conn>,
    writable: bool,
    /// Temps made and not yet committed or discarded, by the stream of
    /// the request that made them (the client names a temp by that
    /// number, so it can send the commit before the temp exists): a
    /// commit or discard of anything else is refused.
    temps: Mutex<HashMap<u32, (RelPath, Vec<u8>)>>,
    /// The stream of the last flush that failed: a temp made before it
    /// may not be durable, and is never committed.
    failed_flush: Mutex<Option<u32>>,
    /// This session took the root's lock: only then does it open a sync's
    /// archive (`FEATURE_OPEN_AFTER_LOCK`).
    locked: std::sync::atomic::AtomicBool,
    /// The rules of this session's listings (built from the first listing
    /// request's patterns; `.accordignore` files add to them).
    rules: Mutex<Option<(Vec<String>, Arc<IgnoreRules>)>>,
    /// This root's side of a two-way sync.
    sync: SyncServer<'a>,
    /// The root watched for a sync's `--watch` (started by the first
    /// `WaitChange`).
    watch: RootWatch,
    /// The owner changes this process may make.
    owners: OwnerLimits,
    tally: &'a Tally,
    /// The client may ask for copies from other roots of this host
    /// (`CopySibling`): agreed to, and the session is not restricted.
    sibling_copies: bool,
    /// The roots copied from, each opened once.
    siblings: Mutex<sibling::Siblings>,
}

type Reply = Result<Vec<u8>, WireError>;

/// A whole-file body read ahead into memory, and how it ended (an error
/// of the client's, replayed to the receive after the bytes).
struct HeldBody {
    data: io::Cursor<Vec<u8>>,
    end: Option<(io::ErrorKind, String)>,
}

impl HeldBody {
    fn empty() -> HeldBody {
        HeldBody {
            data: io::Cursor::new(Vec::new()),
            end: None,
        }
    }
}

impl Read for HeldBody {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.data.read(buf)?;
        match &self.end {
            Some((kind, message)) if n == 0 && !buf.is_empty() => {
                Err(io::Error::new(*kind, message.clone()))
            }
            _ => Ok(n),
        }
    }
}

/// A sync's rules: carried out in the order sent, as writes are
/// (`FEATURE_ORDERED_RULES`): each reads and replaces the session's rules,
/// and the scan sent after them must see them.
fn is_sync_rule(req: &Request) -> bool {
    matches!(req, Request::SyncRules { .. } | Request::SyncFollow { .. })
}

/// A vouching stat of a temp this session made: carried out in the order
/// sent, as a write is. Among the reads it could run before the receive
/// that makes the temp was done, or after the commit sent next renamed
/// it; either way the file's ctime went unrecorded and the next run read
/// the file again (one run in six of a 24-file sync over ssh).
fn is_temp_stat(req: &Request) -> bool {
    matches!(
        req,
        Request::VouchingStat {
            of: StatOf::Temp(_),
            ..
        }
    )
}

type WriteJob = (u32, Request, HeldBody);

impl Session<'_> {
    fn run(&self) {
        let reads = WorkQueue::<(u32, Request)>::new(usize::MAX);
        let writes = WorkQueue::<WriteJob>::new(POOLED_QUEUE);
        let in_flight = InFlight::default();
        // Replies held back for more to join them go out before a thread
        // of the session sleeps (see `Conn::reply_soon`).
        let flush = &|| self.conn.flush();
        std::thread::scope(|s| {
            for _ in 0..READERS {
                s.spawn(|| {
                    while let Some((stream, req)) = reads.pop(flush) {
                        self.answer(stream, &req, None, None);
                    }
                });
            }
            for _ in 0..WRITERS {
                s.spawn(|| {
                    while let Some((stream, req, mut body)) = writes.pop(flush) {
                        let _done = Finish(&in_flight);
                        self.answer(stream, &req, None, Some(&mut body));
                    }
                });
            }
            while let Some(o) = self.conn.next_request() {
                let Some(req) = self.decode(&o) else {
                    break;
                };
                let pooled = if self.pooled(&req, o.stream) {
                    Some(self.hold_body(o.stream))
                } else if self.writable && matches!(req, Request::SyncAll) {
                    // A flush covers every write sent before it, then runs
                    // beside the small files sent after it (new temps it
                    // need not cover); other writes wait for it as for them.
                    in_flight.wait_idle(flush);
                    Some(HeldBody::empty())
                } else {
                    None
                };
                if let Some(body) = pooled {
                    in_flight.add();
                    writes.push((o.stream, req, body), flush);
                } else if req.writes() || req.has_body() || is_sync_rule(&req) || is_temp_stat(&req)
                {
                    in_flight.wait_idle(flush);
                    self.answer(o.stream, &req, Some(&o), None);
                } else {
                    reads.push((o.stream, req), flush);
                }
            }
            reads.close();
            writes.close();
        });
    }

    /// A request's header, decoded; `None` (the connection closed) when it
    /// does not decode, or does not say it has the body it has.
    fn decode(&self, o: &Opened) -> Option<Request> {
        match Request::decode(&o.header) {
            Ok(r) if r.has_body() == o.has_body => Some(r),
            Ok(_) => {
                self.conn.close("a request with a body it should not have");
                None
            }
            Err(e) => {
                self.conn
                    .close(&format!("a request that does not decode: {e}"));
                None
            }
        }
    }

    /// Whether a request goes to the writer threads: a small whole file
    /// whose body is here.
    fn pooled(&self, req: &Request, stream: u32) -> bool {
        self.writable && is_whole_receive(req) && self.small_and_here(stream)
    }

    /// Whether a whole-file body is small and all of it has arrived (as a
    /// small file's does, in the write that carries its request): then it
    /// goes to a writer thread. Others are streamed by the session's own
    /// thread as they arrive.
    fn small_and_here(&self, stream: u32) -> bool {
        self.conn
            .arrived_whole(stream)
            .is_some_and(|n| n <= POOLED_BODY)
    }

    /// Take a body that has arrived whole into memory.
    fn hold_body(&self, stream: u32) -> HeldBody {
        let mut data = Vec::new();
        // On an error (the connection lost meanwhile), `data` holds what
        // was read before it, and the receive sees the error after it.
        // One byte over the size, so that the body's end is read too (it
        // was checked to be no bigger): that forgets the stream and gives
        // back the last of its credit.
        let end = match self
            .body(stream)
            .take(POOLED_BODY + 1)
            .read_to_end(&mut data)
        {
            Ok(_) => None,
            Err(e) => Some((e.kind(), e.to_string())),
        };
        HeldBody {
            data: io::Cursor::new(data),
            end,
        }
    }

    /// Carry out one request and send its reply (`body`: a whole-file
    /// receive's body, when it is not to be read from the wire).
    fn answer(
        &self,
        stream: u32,
        req: &Request,
        opened: Option<&Opened>,
        body: Option<&mut dyn Read>,
    ) {
        let soon = replies_soon(req);
        if !soon {
            // This call may take long: what was held back goes first.
            self.conn.flush();
        }
        let reply = if req.writes() && !self.writable && !self.dry_run_sync(req) {
            Err(denied(format!(
                "{} refused: this root is not open for writing",
                req.name()
            )))
        } else {
            self.call(stream, req, body)
        };
        if opened.is_some_and(|o| o.has_body) {
            // Whatever the call did not read of its body.
            self.conn.drain_body(stream);
        }
        let _ = match reply {
            Ok(bytes) if soon => self.conn.reply_soon(stream, &bytes),
            Ok(bytes) => self.conn.reply(stream, &bytes),
            Err(e) => self.conn.reply_error(stream, &e.encode()),
        };
    }

    /// A dry run's sync takes the root's lock and opens, empties and walks
    /// its archive (a set's also counts the run there): a scratch copy in a
    /// session that inspects the root.
    fn dry_run_sync(&self, req: &Request) -> bool {
        self.sync.dry_run()
            && matches!(
                req,
                Request::Lock
                    | Request::SyncOpen { .. }
                    | Request::SyncForget
                    | Request::SyncScan { .. }
                    | Request::SyncOpenSet { .. }
                    | Request::SyncCountRun
            )
    }

    /// Temps of a session that ended before committing them.
    fn discard_temps(&self) {
        for (_, (dir, temp)) in self.temps.lock().unwrap().drain() {
            if let Ok(d) = self.replica.open_dir(&dir) {
                d.discard(&temp);
            }
        }
    }

    fn dir(&self, dir: &RelPath, action: Action) -> Result<Box<dyn ReplicaDir + '_>, WireError> {
        self.replica.open_dir(dir).map_err(|e| io_error(action, &e))
    }

    fn body(&self, stream: u32) -> BodyReader<'_> {
        BodyReader {
            conn: self.conn,
            stream,
            cursor: ChunkCursor::default(),
        }
    }

    /// A request body held whole: at most `max` bytes (the bound of its
    /// kind, in `accord_proto::limits`), charged to the session's budget
    /// as it arrives. A body over either is refused without being read
    /// further (the rest is drained as it comes, and granted back).
    fn body_bytes(
        &self,
        stream: u32,
        action: Action,
        (max, what): (u64, &'static str),
    ) -> Result<Held, WireError> {
        let mut held = Held::new(&self.conn.budget);
        let mut body = self.body(stream);
        while body.next_chunk().map_err(|e| io_error(action, &e))? {
            if (held.len() + body.cursor.left()) as u64 > max {
                return Err(protocol(format!(
                    "{what} above its limit of {} MiB",
                    max >> 20
                )));
            }
            body.cursor
                .take_into(&mut held, what)
                .map_err(|e| over_budget(action, e))?;
        }
        Ok(held)
    }

    /// Charge `n` bytes the request is about to need (given back when the
    /// returned charge is dropped).
    fn reserve(&self, n: u64, what: &'static str, action: Action) -> Result<Held, WireError> {
        let mut room = Held::new(&self.conn.budget);
        room.charge_only(n, what)
            .map_err(|e| over_budget(action, e))?;
        Ok(room)
    }

    /// Remember the temp made by request `stream`; the reply is empty
    /// (the client names the temp by `stream`).
    fn issue_temp(&self, stream: u32, dir: &RelPath, temp: Vec<u8>) -> Vec<u8> {
        self.temps
            .lock()
            .unwrap()
            .insert(stream, (dir.clone(), temp));
        Vec::new()
    }

    /// The name of a temp this session made in `dir` (left in its temps).
    fn temp_name(&self, dir: &RelPath, made_by: u32) -> Result<Vec<u8>, WireError> {
        match self.temps.lock().unwrap().get(&made_by) {
            Some((d, temp)) if d == dir => Ok(temp.clone()),
            _ => Err(denied(
                "a temp this session did not make (or its receive failed)",
            )),
        }
    }

    fn take_temp(&self, dir: &RelPath, made_by: u32) -> Result<Vec<u8>, WireError> {
        // Only the session's own thread takes temps out (commits and
        // discards are writes, carried out in order).
        let name = self.temp_name(dir, made_by)?;
        self.temps.lock().unwrap().remove(&made_by);
        Ok(name)
    }

    /// Refuse to commit a temp made before a flush that failed.
    fn check_flushed(&self, made_by: u32) -> Result<(), WireError> {
        match *self.failed_flush.lock().unwrap() {
            Some(f) if made_by < f => Err(io_error(
                Action::Flush,
                &io::Error::other("not committed: the flush after its temp was written failed"),
            )),
            _ => Ok(()),
        }
    }

    /// Carry out one request within this process's owner limits, and
    /// count it when it succeeds.
    fn call(&self, stream: u32, req: &Request, body: Option<&mut dyn Read>) -> Reply {
        let (limited, left_out) = self.owners.limit(req);
        if left_out {
            self.tally.owners_not_kept.store(true, Ordering::Relaxed);
        }
        let reply = self.dispatch(stream, &limited, body);
        if reply.is_ok() {
            self.tally.count(&limited);
        }
        reply
    }

    /// Carry out one request: each kind is handed to its own function
    /// (in `requests.rs`), with the fields it needs.
    fn dispatch(&self, stream: u32, req: &Request, body: Option<&mut dyn Read>) -> Reply {
        match req {
            Request::Lock => self.lock(),
            Request::ListDir { dir, opts } => self.list(dir, opts),
            Request::Fingerprint { path } => self.fingerprint(path),
            Request::OpenDir { dir } => self.open_dir(dir),
            Request::SyncAll => self.sync_all(stream),
            Request::ReadState { name } => self.read_state(name),
            Request::WriteState { name, durable } => self.write_state(stream, name, *durable),
            Request::Stat { dir, name } => self.stat(dir, name),
            Request::VouchingStat { dir, of } => self.vouching_stat(dir, of),
            Request::ProbeCase => Ok(accord_proto::msg::encode_case_probe(
                &accord_replica::case_probe::probe(self.replica),
            )),
            Request::OpenRead { dir, name, expect } => self.open_read(stream, dir, name, expect),
            Request::PartialSignature { dir, name } => self.partial_signature(dir, name),
            Request::Signature {
                dir,
                name,
                expect,
                in_place,
            } => self.signature(dir, name, expect, *in_place),
            Request::MakeDelta {
                dir,
                name,
                expect,
                in_place,
                pack_level,
            } => self.make_delta(stream, (dir, name, expect), *in_place, *pack_level),
            Request::FineSignature { dir, name, expect } => {
                self.fine_signature(stream, dir, name, expect)
            }
            Request::Receive {
                dir,
                name,
                basis,
                props,
                mask,
            } => self.receive(stream, dir, name, basis, props, *mask, body),
            Request::PatchInPlace {
                dir,
                name,
                expect,
                props,
                mask,
            } => self.patch_in_place(stream, dir, name, expect, props, *mask),
            Request::MakeNode {
                dir,
                name,
                entry,
                mask,
            } => self.make_node(stream, dir, name, entry, *mask),
            Request::RenameFrom {
                dir,
                name,
                from,
                expect,
            } => self.rename_from(dir, name, from, expect),
            Request::WaitChange { timeout_ms } => self.wait_change(*timeout_ms),
            Request::LinkTemp { dir, name, leader } => self.link_temp(stream, dir, name, leader),
            Request::CopySibling { .. } => self.copy_sibling(stream, req),
            Request::Commit {
                dir,
                made_by,
                name,
                expect,
            } => self.commit(dir, *made_by, name, expect),
            Request::Discard { dir, made_by } => self.discard(dir, *made_by),
            Request::SetProps {
                dir,
                name,
                expect,
                kind,
                props,
                mask,
            } => self.set_props(dir, name, expect, *kind, props, *mask),
            Request::SetOwnProps {
                dir,
                expect,
                props,
                mask,
            } => self.set_own_props(dir, expect, props, *mask),
            Request::Mkdir { dir, name } => self.mkdir(dir, name),
            Request::Delete { dir, name, expect } => self.delete(dir, name, expect),
            Request::SyncIdentity
            | Request::SyncOpen { .. }
            | Request::SyncForget
            | Request::SyncScan { .. }
            | Request::SyncLookup { .. }
            | Request::SyncRecord
            | Request::SyncFollow { .. }
            | Request::SyncRules { .. }
            | Request::SyncOpenSet { .. }
            | Request::SyncCountRun
            | Request::SyncVersions
            | Request::SyncVersionsDigest
            | Request::SyncVersionsAt
            | Request::SyncRecordVersions => self.sync_request(stream, req),
            Request::RemoveStaleTemp { dir, name } => self.remove_stale_temp(dir, name),
        }
    }
}

/// The short writes of a push, one after another by the hundred: their
/// replies wait for the next ones to go out together (`Conn::reply_soon`).
/// None waits for the client, or for long.
fn replies_soon(req: &Request) -> bool {
    matches!(
        req,
        Request::Receive {
            basis: Basis::Nothing,
            ..
        } | Request::Commit { .. }
            | Request::Discard { .. }
            | Request::Mkdir { .. }
            | Request::MakeNode { .. }
            | Request::LinkTemp { .. }
            | Request::SetProps { .. }
            | Request::SetOwnProps { .. }
            | Request::OpenDir { .. }
    )
}

/// A receive of a whole file (no basis): its body is the file.
fn is_whole_receive(req: &Request) -> bool {
    matches!(
        req,
        Request::Receive {
            basis: Basis::Nothing,
            ..
        }
    )
}

/// A request body as a stream.
struct BodyReader<'a> {
    conn: &'a Conn,
    stream: u32,
    cursor: ChunkCursor,
}

impl BodyReader<'_> {
    /// Make sure the cursor has bytes, taking the next chunk if need be;
    /// false at the body's end.
    fn next_chunk(&mut self) -> io::Result<bool> {
        while self.cursor.is_spent() {
            match self.conn.recv(self.stream) {
                Ok(Some(c)) => self.cursor.set(c),
                Ok(None) => return Ok(false),
                Err(Ok(why)) => {
                    return Err(io::Error::other(format!(
                        "the client could not send all of it: {}",
                        String::from_utf8_lossy(&why)
                    )))
                }
                Err(Err(e)) => return Err(e),
            }
        }
        Ok(true)
    }
}

impl Read for BodyReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() || !self.next_chunk()? {
            return Ok(0);
        }
        Ok(self.cursor.read(buf))
    }
}
