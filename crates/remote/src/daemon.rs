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
use accord_proto::hello::VERSION;
use accord_proto::{Hello, HelloError, Refusal, Welcome};
use accord_replica::LocalOptions;
use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

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
pub fn run_daemon(cfg: DaemonConfig) -> Result<(), String> {
    release_large_buffers();
    let listener = TcpListener::bind(&cfg.listen)
        .map_err(|e| format!("cannot listen on {}: {e}", cfg.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    log(&format!(
        "listening on {addr}; modules: {}; {} authorized keys; server key {}",
        cfg.modules.keys().cloned().collect::<Vec<_>>().join(", "),
        cfg.authorized.len(),
        cfg.key.public.to_line()
    ));
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
                log(&format!("accept: {e}"));
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    Ok(())
}

/// A body held whole is charged to the pool while it is held; once it is
/// dropped its memory must go back to the system, or the pool would bound
/// nothing. glibc raises its mmap threshold as large blocks are freed (up
/// to 32 MiB), after which such buffers come from arenas that keep their
/// pages: fix the threshold at 1 MiB, so that every large buffer is mapped
/// on its own, unmapped when dropped, and grown by remapping (not copied).
fn release_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; called before any
    // session thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}

fn log(line: &str) {
    eprintln!("accord server: {line}");
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
            Err(why) => return log(&format!("{peer}: closed at once: {why}")),
        };
        let daemon = self.clone();
        let name = format!("accord-session {peer}");
        let spawned = std::thread::Builder::new()
            .name(name)
            .spawn(move || daemon.connection(stream, &peer, slot, accepted));
        if let Err(e) = spawned {
            // The closure, and the slot in it, were dropped.
            log(&format!("cannot start a thread for a connection: {e}"));
        }
    }

    /// One connection, on its own thread.
    fn connection(&self, stream: TcpStream, peer: &str, slot: HandshakeSlot, accepted: Instant) {
        let run = std::panic::AssertUnwindSafe(|| self.session(stream, peer, slot, accepted));
        if std::panic::catch_unwind(run).is_err() {
            log(&format!("{peer}: the session ended with an internal error"));
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
        let outcome = self.authorized_session(&stream, session, peer, slot, accepted);
        log(&format!(
            "{peer}: closed after {:.1} s: {outcome}",
            accepted.elapsed().as_secs_f64()
        ));
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
            return log(&format!("{peer}: closed: {why}"));
        }
        if let HandshakeError::Plaintext(began) = &mut e {
            began.extend(noise::what_came(stream));
        }
        match &e {
            // Gone, silent or too slow: nothing was refused.
            HandshakeError::Io(_) => log(&format!("{peer}: closed: {e}")),
            _ => log(&format!("{peer}: refused: {e}")),
        }
        if let HandshakeError::Plaintext(began) = &e {
            tell_plaintext_client(stream, began);
        }
        close_gently(stream);
    }

    /// The encrypted part: check the client's key, find its module, serve.
    /// What happened, for the log.
    /// The encrypted part: check the client's key, take a session's
    /// place, find its module, serve. What happened, for the log.
    fn authorized_session(
        &self,
        stream: &TcpStream,
        session: noise::Session,
        peer: &str,
        slot: HandshakeSlot,
        accepted: Instant,
    ) -> String {
        let client = session.peer;
        let tick =
            (self.cfg.idle_timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(5));
        let idle = Some(self.cfg.idle_timeout);
        let (mut reader, mut writer, activity) = match noise::split(stream, session, idle) {
            Ok(halves) => halves,
            Err(e) => return format!("cannot set up the connection: {e}"),
        };
        let Some(name) = self.cfg.authorized.get(&client) else {
            let m = format!(
                "this server does not know your key ({}); its administrator can add that line to the server's authorized keys",
                client.to_line()
            );
            refuse(&mut writer, Refusal::Denied, &m);
            drop(writer);
            close_gently(stream);
            return format!("refused: unknown client key {}", client.to_line());
        };
        log(&format!(
            "{peer}: authenticated as {name:?} ({})",
            short(&client)
        ));
        let _session_slot = match self.admission.authenticate(&slot) {
            Ok(s) => s,
            Err(NotAdmitted::Cut(why)) => return why,
            Err(NotAdmitted::Busy(m)) => {
                // Said through the encrypted channel, to a known key only.
                refuse(&mut writer, Refusal::Failed, &m);
                drop(writer);
                close_gently(stream);
                return format!("refused: {m}");
            }
        };
        drop(slot);
        let _ = stream.set_write_timeout(Some(self.cfg.idle_timeout));
        let request = self.read_request(stream, &mut reader, self.deadline(accepted, tick));
        let outcome = match request {
            Err(e) => format!("no request: {e}"),
            Ok(hello) => self.serve_module(hello, reader, writer, peer),
        };
        format!(
            "{outcome} ({} bytes in, {} out)",
            activity.bytes_in.load(Ordering::Relaxed),
            activity.bytes_out.load(Ordering::Relaxed)
        )
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
    ) -> String {
        let (hello, module) = match self.resolve(hello) {
            Ok(found) => found,
            Err(m) => {
                refuse(&mut writer, Refusal::Denied, &m);
                return format!("refused: {m}");
            }
        };
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
        };
        if let Some((name, _)) = &module {
            log(&format!(
                "{peer}: module {name}, path {:?}, {:?}",
                accord_model::escape_for_display(&hello.root),
                hello.mode
            ));
        }
        // `serve` reads the handshake itself: hand it the one it will act
        // on (the path inside the module) ahead of the stream.
        let mut first = Vec::new();
        if let Err(e) = hello.write(&mut first) {
            return format!("cannot pass the request on: {e}");
        }
        let reader = io::Cursor::new(first).chain(reader);
        match serve(Box::new(reader), Box::new(writer), &cfg) {
            Ok(()) => "done".into(),
            Err(why) => why,
        }
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
