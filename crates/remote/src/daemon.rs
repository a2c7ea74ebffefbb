//! `accord server --listen`: the TCP daemon. It serves named modules (a
//! directory each, maybe read-only) to clients whose keys it knows, every
//! connection encrypted (see `noise`). One thread per connection; a
//! connection is confined to the module it names, and whatever a client
//! does (garbage, a half handshake, silence, a dropped connection) ends
//! that connection only.
//!
//! A connection has 10 seconds from its arrival to be through the
//! handshake and to have sent its request, however it trickles its bytes.
//! Until its key is known it holds a pending place (see `admission`),
//! which a newer connection may take from it; only a known key gets a
//! session's place, or is told that the server is busy.

use crate::admission::{self, Admission, HandshakeSlot, Limits, NotAdmitted};
use crate::budget::Pool;
use crate::keys::{AuthorizedKeys, KeyPair, PublicKey};
use crate::noise::{self, Deadline, DeadlineStream, HandshakeError, NoiseWriter};
use crate::server::{serve, Memory, ServerConfig};
use crate::tally::Tally;
use accord_proto::hello::VERSION;
use accord_proto::{Hello, HelloError, Refusal, RootMode, Welcome};
use accord_replica::LocalOptions;
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::{debug, error, info, warn};

/// Longest a client may take, from its connection's arrival, over the
/// handshake and its first request, all reads together: a real client
/// needs milliseconds, and a peer that trickles bytes holds a thread
/// no longer than this.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One directory a daemon serves.
#[derive(Clone, Debug)]
pub struct Module {
    pub path: PathBuf,
    pub read_only: bool,
}

/// Everything a daemon needs, from the command line or a config file.
pub struct DaemonConfig {
    /// `host:port` to listen on.
    pub listen: String,
    pub modules: BTreeMap<String, Module>,
    pub key: KeyPair,
    pub authorized: AuthorizedKeys,
    /// Authenticated sessions at once.
    pub max_connections: usize,
    /// Authenticated sessions at once from one address, if limited.
    pub max_per_address: Option<usize>,
    /// Connections still in their handshake (no key proved yet).
    pub max_handshakes: usize,
    /// Connections still in their handshake from one address.
    pub max_handshakes_per_address: usize,
    /// A connection with no traffic either way for this long is closed.
    pub idle_timeout: Duration,
    pub state_dir: Option<PathBuf>,
    /// Where two-way syncs keep this host's archives.
    pub archive_dir: Option<PathBuf>,
    pub local: LocalOptions,
    /// Most bytes all sessions together may hold for their clients
    /// beyond each one's own reserve (`--max-memory`).
    pub max_memory: u64,
}

/// The default of `--max-memory` (MiB).
pub const DEFAULT_MAX_MEMORY_MIB: u64 = 256;
/// What each session holds of its own, whatever the others hold: the
/// requests and bodies of an ordinary client (small files, listings).
const SESSION_RESERVE: u64 = 4 << 20;

/// Bind, say where (one log line), and serve until the process ends.
/// After that line, each connection gets one line when it ends: info for
/// a session that did what it was asked (or a peer that left before its
/// handshake), warn for one refused or failed, with why.
/// Details (a key proved, the module opened) are debug lines.
pub fn run_daemon(cfg: DaemonConfig) -> Result<(), String> {
    // A body held whole is charged to the pool while it is held; once it
    // is dropped its memory must go back to the system, or the pool would
    // bound nothing.
    accord_fsys::map_large_buffers_apart();
    let listener = TcpListener::bind(&cfg.listen)
        .map_err(|e| format!("cannot listen on {}: {e}", cfg.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    // Written whatever RUST_LOG says (the cli's logging::START): the line
    // that says the daemon is ready, where, and with which key.
    info!(
        target: "accord_start",
        "accord server: listening on {addr}; modules: {}; {} authorized keys; server key {}",
        cfg.modules.keys().cloned().collect::<Vec<_>>().join(", "),
        cfg.authorized.len(),
        cfg.key.public.to_line()
    );
    let admission = Admission::new(Limits {
        handshakes: cfg.max_handshakes,
        handshakes_per_address: cfg.max_handshakes_per_address,
        sessions: cfg.max_connections,
        sessions_per_address: cfg.max_per_address,
    });
    let daemon = Arc::new(Daemon {
        pool: Pool::new(cfg.max_memory),
        cfg,
        admission,
    });
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => daemon.admit(stream),
            Err(e) => {
                // Out of descriptors, or a connection reset before it was
                // accepted: wait a little rather than spin.
                warn!("accord server: cannot accept a connection: {e}");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    Ok(())
}

struct Daemon {
    cfg: DaemonConfig,
    /// The places of pending handshakes and of sessions.
    admission: Arc<Admission>,
    /// The memory sessions share (see `budget`).
    pool: Arc<Pool>,
}

impl Daemon {
    /// Give a new connection a pending place and its thread.
    fn admit(self: &Arc<Self>, stream: TcpStream) {
        let accepted = Instant::now();
        let Ok(addr) = stream.peer_addr() else {
            // Already reset by the peer: nobody to serve.
            return;
        };
        let peer = addr.to_string();
        let slot = match self.admission.admit(admission::address_of(addr), &stream) {
            Ok(slot) => slot,
            Err(why) => return warn!("accord server: {peer}: closed at once: {why}"),
        };
        let daemon = self.clone();
        let name = format!("accord-session {peer}");
        let spawned = std::thread::Builder::new()
            .name(name)
            .spawn(move || daemon.connection(stream, &peer, slot, accepted));
        if let Err(e) = spawned {
            // The closure, and the slot in it, were dropped.
            error!("accord server: cannot start a thread for a connection: {e}");
        }
    }

    /// One connection, on its own thread.
    fn connection(&self, stream: TcpStream, peer: &str, slot: HandshakeSlot, accepted: Instant) {
        let run = std::panic::AssertUnwindSafe(|| self.session(stream, peer, slot, accepted));
        if std::panic::catch_unwind(run).is_err() {
            error!("accord server: {peer}: the session ended with an internal error");
        }
    }

    /// The deadline of a connection that arrived at `accepted`, each read
    /// waiting at most `wait`.
    fn deadline(&self, accepted: Instant, wait: Duration) -> Deadline {
        Deadline::new(accepted, HANDSHAKE_TIMEOUT, wait)
    }

    fn session(&self, stream: TcpStream, peer: &str, slot: HandshakeSlot, accepted: Instant) {
        let _ = stream.set_nodelay(true);
        // A peer silent for the idle timeout is closed even before the
        // deadline (when that timeout is the shorter).
        let mut io = DeadlineStream {
            socket: &stream,
            deadline: self.deadline(accepted, self.cfg.idle_timeout),
        };
        let session = match noise::server(&mut io, &self.cfg.key, "") {
            Ok(s) => s,
            Err(e) => return self.handshake_failed(&stream, peer, &slot, e),
        };
        let mut end = SessionEnd::default();
        self.authorized_session(&stream, session, peer, slot, accepted, &mut end);
        end.log(peer, accepted);
        let _ = stream.shutdown(Shutdown::Both);
    }

    fn handshake_failed(
        &self,
        stream: &TcpStream,
        peer: &str,
        slot: &HandshakeSlot,
        mut e: HandshakeError,
    ) {
        if let Some(why) = self.admission.cut_short(slot) {
            // What failed was our doing: say that instead.
            return warn!("accord server: {peer}: closed: {why}");
        }
        if let HandshakeError::Plaintext(began) = &mut e {
            began.extend(noise::what_came(stream));
        }
        match &e {
            // Gone, silent or too slow: nothing was refused.
            HandshakeError::Io(_) => info!("accord server: {peer}: closed: {e}"),
            _ => warn!("accord server: {peer}: refused: {e}"),
        }
        if let HandshakeError::Plaintext(began) = &e {
            tell_plaintext_client(stream, began);
        }
        close_gently(stream);
    }

    /// The encrypted part: check the client's key, take a session's
    /// place, find its module, serve. What happened goes into `end`.
    fn authorized_session(
        &self,
        stream: &TcpStream,
        session: noise::Session,
        peer: &str,
        slot: HandshakeSlot,
        accepted: Instant,
        end: &mut SessionEnd,
    ) {
        let client = session.peer;
        let tick =
            (self.cfg.idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
        let idle = Some(self.cfg.idle_timeout);
        let (mut reader, mut writer, activity) = match noise::split(stream, session, idle) {
            Ok(halves) => halves,
            Err(e) => return end.failed(format!("cannot set up the connection: {e}")),
        };
        let Some(name) = self.cfg.authorized.get(&client) else {
            let m = format!(
                "this server does not know your key ({}); its administrator can add that line to the server's authorized keys",
                client.to_line()
            );
            refuse(&mut writer, Refusal::Denied, &m);
            drop(writer);
            close_gently(stream);
            return end.refused(format!("unknown client key {}", client.to_line()));
        };
        debug!(
            "accord server: {peer}: authenticated as {name:?} ({})",
            short(&client)
        );
        end.key = Some(name.to_string());
        let session_slot = match self.admission.authenticate(&slot) {
            Ok(s) => s,
            Err(NotAdmitted::Cut(why)) => return end.failed(why),
            Err(NotAdmitted::Busy(m)) => {
                // Said through the encrypted channel, to a known key only.
                refuse(&mut writer, Refusal::Failed, &m);
                drop(writer);
                close_gently(stream);
                return end.refused(m);
            }
        };
        drop(slot);
        let _ = stream.set_write_timeout(Some(self.cfg.idle_timeout));
        let request = self.read_request(stream, &mut reader, self.deadline(accepted, tick));
        match request {
            Err(e) => end.failed(format!("no request: {e}")),
            Ok(hello) => self.serve_module(hello, reader, writer, peer, end),
        }
        end.bytes = Some((
            activity.bytes_in.load(Ordering::Relaxed),
            activity.bytes_out.load(Ordering::Relaxed),
        ));
        drop(session_slot);
    }

    /// The client's first request, by the deadline; after it, reads wait
    /// as long as the session is not idle.
    fn read_request(
        &self,
        stream: &TcpStream,
        reader: &mut noise::NoiseReader,
        deadline: Deadline,
    ) -> Result<Hello, String> {
        reader
            .set_deadline(deadline, stream)
            .map_err(|e| format!("cannot set up the connection: {e}"))?;
        let hello = Hello::read(&mut *reader).map_err(|e| hello_error(&e))?;
        reader
            .clear_deadline()
            .map_err(|e| format!("cannot set up the connection: {e}"))?;
        Ok(hello)
    }

    /// Resolve the root asked for in its module and run the session there.
    fn serve_module(
        &self,
        hello: Hello,
        reader: noise::NoiseReader,
        mut writer: NoiseWriter,
        peer: &str,
        end: &mut SessionEnd,
    ) {
        let (hello, module) = match self.resolve(hello) {
            Ok(found) => found,
            Err(m) => {
                refuse(&mut writer, Refusal::Denied, &m);
                return end.refused(m);
            }
        };
        let tally = Arc::new(Tally::default());
        let cfg = ServerConfig {
            restrict: module.as_ref().map(|(_, m)| m.path.clone()),
            read_only: module.as_ref().is_some_and(|(_, m)| m.read_only),
            state_dir: self.cfg.state_dir.clone(),
            archive_dir: self.cfg.archive_dir.clone(),
            local: self.cfg.local,
            // The module's name, not where it is on this host.
            shown_as: module.as_ref().map(|(name, _)| {
                let inside = String::from_utf8_lossy(&hello.root);
                format!("{name}/{inside}").trim_end_matches('/').to_string()
            }),
            memory: Memory {
                session: self.pool.limit() + SESSION_RESERVE,
                reserve: SESSION_RESERVE,
                pool: Some(self.pool.clone()),
            },
            tally: tally.clone(),
        };
        if let Some((name, _)) = &module {
            let asked = format!(
                "module {name}, path \"{}\", {}",
                accord_model::escape_for_display(&hello.root),
                mode_words(hello.mode)
            );
            debug!("accord server: {peer}: {asked}");
            end.asked = Some(asked);
        }
        // `serve` reads the handshake itself: hand it the one it will act
        // on (the path inside the module) ahead of the stream.
        let mut first = Vec::new();
        if let Err(e) = hello.write(&mut first) {
            return end.failed(format!("cannot pass the request on: {e}"));
        }
        let reader = io::Cursor::new(first).chain(reader);
        match serve(Box::new(reader), Box::new(writer), &cfg) {
            Ok(()) => end.done(),
            Err(why) => end.failed(why),
        }
        end.tally = Some(tally);
    }

    /// The module a request names (the first component of its root) and
    /// the request with the rest of the root. `None` for a request of
    /// another protocol version, which `serve` refuses with its own words.
    #[allow(clippy::type_complexity)]
    fn resolve(&self, mut hello: Hello) -> Result<(Hello, Option<(String, &Module)>), String> {
        if hello.version != VERSION {
            return Ok((hello, None));
        }
        let (name, rest) = split_module(&hello.root)?;
        let Some(module) = self.cfg.modules.get(&name) else {
            return Err(format!(
                "no module {name:?} on this server (it has: {})",
                self.module_names()
            ));
        };
        hello.root = rest;
        Ok((hello, Some((name, module))))
    }

    fn module_names(&self) -> String {
        self.cfg
            .modules
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// How a session ended, gathered as it runs for its one line in the log.
#[derive(Default)]
struct SessionEnd {
    /// The name of the client's key, once proved.
    key: Option<String>,
    /// The module, path and mode asked for.
    asked: Option<String>,
    /// What the session did.
    tally: Option<Arc<Tally>>,
    /// Bytes received and sent on the connection.
    bytes: Option<(u64, u64)>,
    outcome: Outcome,
}

#[derive(Default)]
enum Outcome {
    #[default]
    Done,
    Refused(String),
    Failed(String),
}

impl SessionEnd {
    fn done(&mut self) {
        self.outcome = Outcome::Done;
    }

    fn refused(&mut self, why: String) {
        self.outcome = Outcome::Refused(why);
    }

    fn failed(&mut self, why: String) {
        self.outcome = Outcome::Failed(why);
    }

    /// The session's line: who, what it asked for, how it ended, what it
    /// did; info when done, warn when refused or failed.
    fn log(&self, peer: &str, accepted: Instant) {
        let mut line = format!(
            "{peer}: closed after {:.1} s:",
            accepted.elapsed().as_secs_f64()
        );
        if let Some(key) = &self.key {
            line.push_str(&format!(" key {key:?},"));
        }
        if let Some(asked) = &self.asked {
            line.push_str(&format!(" {asked},"));
        }
        match &self.outcome {
            Outcome::Done => line.push_str(" done"),
            Outcome::Refused(why) => line.push_str(&format!(" refused: {why}")),
            Outcome::Failed(why) => line.push_str(&format!(" failed: {why}")),
        }
        if let Some(tally) = &self.tally {
            line.push_str(&format!("; {}", tally.words()));
        }
        if let Some((bytes_in, bytes_out)) = self.bytes {
            line.push_str(&format!("; {bytes_in} bytes in, {bytes_out} bytes out"));
        }
        match self.outcome {
            Outcome::Done => info!("accord server: {line}"),
            _ => warn!("accord server: {line}"),
        }
    }
}

/// What a client asked to do with its root, in words.
fn mode_words(mode: RootMode) -> &'static str {
    match mode {
        RootMode::Read => "to read",
        RootMode::Write => "to write",
        RootMode::Inspect => "to look at (a dry run)",
        RootMode::WriteExisting => "to sync",
    }
}

/// `/NAME/sub/path` → (`NAME`, `sub/path`). A `..` anywhere is refused
/// here, in the module's own words (the session would refuse it too).
pub fn split_module(root: &[u8]) -> Result<(String, Vec<u8>), String> {
    use std::os::unix::ffi::OsStrExt;
    let shown = accord_model::escape_for_display(root);
    let path = Path::new(std::ffi::OsStr::from_bytes(root));
    if path.components().any(|c| c == Component::ParentDir) {
        return Err(format!("{shown}: a path may not leave its module (`..`)"));
    }
    let mut parts = path.components().filter_map(|c| match c {
        Component::Normal(n) => Some(n.as_bytes()),
        _ => None,
    });
    let Some(name) = parts.next() else {
        return Err("name a module: accord://HOST[:PORT]/MODULE/PATH".into());
    };
    let name = String::from_utf8_lossy(name).into_owned();
    let rest = parts.collect::<Vec<_>>().join(&b'/');
    Ok((name, rest))
}

/// Why a request could not be read, for the log.
fn hello_error(e: &HelloError) -> String {
    match e {
        HelloError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            "the client closed the connection".into()
        }
        HelloError::Io(e) => e.to_string(),
        HelloError::NotAccord(began) => format!(
            "not an accord request (it began with {})",
            accord_model::escape_for_display(began)
        ),
        HelloError::Proto(e) => e.to_string(),
    }
}

/// Refuse the session in the protocol's own words (the client shows them).
fn refuse(writer: &mut NoiseWriter, why: Refusal, message: &str) {
    let _ = Welcome::Refused {
        version: VERSION,
        why,
        message: message.to_string(),
    }
    .write(writer);
}

/// Tell a client that spoke in the clear why nothing will happen: an
/// accord client that skipped the encryption gets a refusal it can show,
/// anything else a line of text. Nothing else is ever sent in the clear.
fn tell_plaintext_client(mut stream: &TcpStream, began: &[u8]) {
    let message = "this server takes only encrypted, key-authenticated connections: \
use accord://HOST[:PORT]/MODULE/PATH with a key made by `accord keygen`";
    if began.starts_with(&accord_proto::hello::MAGIC[..2]) {
        let _ = Welcome::Refused {
            version: VERSION,
            why: Refusal::Denied,
            message: message.into(),
        }
        .write(&mut stream);
    } else {
        let _ = writeln!(stream, "accord server: {message}");
    }
}

/// Close so that what was just sent arrives: closing a socket with unread
/// input resets the connection, which can destroy the last message in
/// flight. Stop sending, read what the peer still sends (a little, briefly),
/// then close.
fn close_gently(stream: &TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let mut sink = [0u8; 4096];
    let mut left = 64usize << 10;
    let mut reader = stream;
    while left > 0 {
        match reader.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// A key, short, for the log.
fn short(key: &PublicKey) -> String {
    let line = key.to_line();
    line.chars()
        .take(crate::keys::KEY_TYPE.len() + 13)
        .collect::<String>()
        + "…"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_module_is_the_first_component() {
        let (m, rest) = split_module(b"/photos/2024/june").unwrap();
        assert_eq!((m.as_str(), &rest[..]), ("photos", &b"2024/june"[..]));
        let (m, rest) = split_module(b"photos").unwrap();
        assert_eq!((m.as_str(), &rest[..]), ("photos", &b""[..]));
        assert!(split_module(b"/photos/../etc").is_err());
        assert!(split_module(b"/").is_err());
    }
}
