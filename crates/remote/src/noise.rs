//! The daemon's transport: a Noise XX handshake with static X25519 keys
//! on both sides, then every byte of the session encrypted and
//! authenticated (ChaChaPoly, BLAKE2s). Each Noise message travels with a
//! two-byte big-endian length in front (a Noise message is at most 65535
//! bytes); the session is exposed as a `Read` half and a `Write` half so
//! the connection's reader thread and its writers never share a lock.
//!
//! Each direction has its own cipher state and message counter: snow's
//! `StatelessTransportState` takes the nonce explicitly, so the reader and
//! the writer each count their own messages and share the keys read-only.

use crate::keys::{KeyPair, PublicKey};
use snow::{HandshakeState, StatelessTransportState};
use std::io::{self, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The Noise protocol name: pattern, DH, cipher, hash.
const PARAMS: &str = "Noise_XX_25519_ChaChaPoly_BLAKE2s";
/// Mixed into the handshake: a peer that speaks another transport version
/// fails the handshake instead of misreading what follows.
const PROLOGUE: &[u8] = b"accord daemon transport 1";
/// Largest Noise message.
const MAX_MESSAGE: usize = 65535;
/// The authentication tag of every encrypted payload.
const TAG: usize = 16;
/// Most plaintext bytes in one transport message.
const MAX_PLAIN: usize = MAX_MESSAGE - TAG;
/// XX's first message: the initiator's ephemeral key and an empty payload.
const FIRST_MESSAGE: usize = 32;
/// Largest refusal a server puts in its handshake answer.
pub const MAX_REFUSAL: usize = 1024;
/// Largest answer to the first message a client reads: the responder's
/// ephemeral key, its static key encrypted (key and tag), and a payload
/// (a refusal at most) with its tag. Anything longer is not an accord
/// daemon, and is refused before it is read.
const MAX_SECOND_MESSAGE: usize = 32 + (32 + TAG) + (MAX_REFUSAL + TAG);
/// Largest last message a server reads: the initiator's static key
/// encrypted (key and tag) and a payload with its tag. Our client's payload
/// is empty; room is left for one as large as a refusal. A longer claim is
/// refused at once rather than read, so that no peer can keep a
/// connection in the handshake while it sends 64 KiB.
const MAX_LAST_MESSAGE: usize = (32 + TAG) + (MAX_REFUSAL + TAG);

pub fn params() -> snow::params::NoiseParams {
    PARAMS.parse().expect("a valid Noise protocol name")
}

fn builder(key: &KeyPair) -> snow::Builder<'_> {
    snow::Builder::new(params())
        .local_private_key(key.private())
        .and_then(|b| b.prologue(PROLOGUE))
        .expect("a 32-byte X25519 key and a prologue")
}

/// How a handshake failed.
#[derive(Debug, thiserror::Error)]
pub enum HandshakeError {
    /// The peer's first bytes are not a Noise handshake (the bytes).
    #[error(
        "not an encrypted accord connection (it began with {})",
        accord_model::escape_for_display(.0)
    )]
    Plaintext(Vec<u8>),
    /// The server answered with a refusal (busy, …).
    #[error("{0}")]
    Refused(String),
    /// The peer's key is not accepted (why, for the user).
    #[error("{0}")]
    Untrusted(String),
    #[error("{}", io_during_handshake(.0))]
    Io(#[from] io::Error),
    /// The peer's messages do not decrypt or verify.
    #[error("the handshake failed: {0}")]
    Noise(#[source] snow::Error),
    /// The server's answer to the first message does not decrypt: most
    /// likely something else than an accord daemon listens there.
    #[error("the handshake failed: {0} (is this an accord daemon?)")]
    NotDaemon(#[source] snow::Error),
    /// The handshake ended without the peer's static key (or one of
    /// another size than an X25519 key).
    #[error("the handshake failed: the peer sent no usable static key")]
    NoStaticKey,
    /// A handshake message claims more bytes than the handshake can need.
    #[error(
        "the handshake failed: a handshake message of {claimed} bytes (at most {max} expected)"
    )]
    Oversized { claimed: usize, max: usize },
}

/// An I/O error during the handshake, as the user needs to hear it.
fn io_during_handshake(e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        "the connection was closed during the handshake".to_string()
    } else if is_timeout(e) && e.get_ref().is_none() {
        // A timeout of the system's; ours (a deadline) says what it was.
        "no answer in time during the handshake".to_string()
    } else {
        e.to_string()
    }
}

fn noise_err(e: snow::Error) -> HandshakeError {
    HandshakeError::Noise(e)
}

pub fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Send one length-prefixed message.
fn send(w: &mut dyn Write, message: &[u8]) -> io::Result<()> {
    debug_assert!(message.len() <= MAX_MESSAGE);
    let mut buf = Vec::with_capacity(2 + message.len());
    buf.extend_from_slice(&(message.len() as u16).to_be_bytes());
    buf.extend_from_slice(message);
    w.write_all(&buf)?;
    w.flush()
}

/// Receive one length-prefixed handshake message of at most `max` bytes;
/// a longer one is refused before any of it is read.
fn receive(r: &mut dyn Read, max: usize) -> Result<Vec<u8>, HandshakeError> {
    let mut len = [0u8; 2];
    r.read_exact(&mut len)?;
    let claimed = u16::from_be_bytes(len) as usize;
    if claimed > max {
        return Err(HandshakeError::Oversized { claimed, max });
    }
    let mut message = vec![0u8; claimed];
    r.read_exact(&mut message)?;
    Ok(message)
}

/// A finished handshake.
pub struct Session {
    /// Shared read-only by the two halves (each counts its own nonces).
    transport: Arc<StatelessTransportState>,
    /// The peer's static key, proved by the handshake.
    pub peer: PublicKey,
}

fn finish(hs: HandshakeState) -> Result<Session, HandshakeError> {
    let peer = remote_static(&hs)?;
    let transport = Arc::new(hs.into_stateless_transport_mode().map_err(noise_err)?);
    Ok(Session { transport, peer })
}

fn remote_static(hs: &HandshakeState) -> Result<PublicKey, HandshakeError> {
    let rs = hs.get_remote_static().ok_or(HandshakeError::NoStaticKey)?;
    let key: [u8; 32] = rs.try_into().map_err(|_| HandshakeError::NoStaticKey)?;
    Ok(PublicKey(key))
}

/// The client's side. `check` sees the server's static key before the
/// client sends its own (a server that is not the one pinned never learns
/// who was connecting) and says whether to go on.
pub fn client<S: Read + Write>(
    stream: &mut S,
    key: &KeyPair,
    check: impl FnOnce(&PublicKey) -> Result<(), String>,
) -> Result<Session, HandshakeError> {
    let mut hs = builder(key).build_initiator().map_err(noise_err)?;
    let mut buf = vec![0u8; MAX_MESSAGE];
    let n = hs.write_message(&[], &mut buf).map_err(noise_err)?;
    send(stream, &buf[..n])?;
    let answer = receive(stream, MAX_SECOND_MESSAGE)?;
    let mut payload = vec![0u8; MAX_MESSAGE];
    let n = hs
        .read_message(&answer, &mut payload)
        .map_err(HandshakeError::NotDaemon)?;
    check(&remote_static(&hs)?).map_err(HandshakeError::Untrusted)?;
    if n > 0 {
        // Authenticated by the server's key, checked just above.
        let said = String::from_utf8_lossy(&payload[..n.min(MAX_REFUSAL)]);
        return Err(HandshakeError::Refused(said.into_owned()));
    }
    let n = hs.write_message(&[], &mut buf).map_err(noise_err)?;
    send(stream, &buf[..n])?;
    finish(hs)
}

/// The server's side. A non-empty `refusal` is sent in the answer to the
/// client's first message, and the handshake ends there (`Refused`).
pub fn server<S: Read + Write>(
    stream: &mut S,
    key: &KeyPair,
    refusal: &str,
) -> Result<Session, HandshakeError> {
    let mut hs = builder(key).build_responder().map_err(noise_err)?;
    let first = receive_first(stream)?;
    let mut payload = vec![0u8; MAX_MESSAGE];
    hs.read_message(&first, &mut payload).map_err(noise_err)?;
    let mut buf = vec![0u8; MAX_MESSAGE];
    let refusal = &refusal.as_bytes()[..refusal.len().min(MAX_REFUSAL)];
    let n = hs.write_message(refusal, &mut buf).map_err(noise_err)?;
    send(stream, &buf[..n])?;
    if !refusal.is_empty() {
        return Err(HandshakeError::Refused(
            String::from_utf8_lossy(refusal).into_owned(),
        ));
    }
    let last = receive(stream, MAX_LAST_MESSAGE)?;
    hs.read_message(&last, &mut payload).map_err(noise_err)?;
    finish(hs)
}

/// The client's first message, which has one possible length: anything
/// else is not our client (plaintext accord, HTTP, a port scanner), and
/// `Plaintext` carries the two bytes that said so.
fn receive_first<S: Read>(stream: &mut S) -> Result<Vec<u8>, HandshakeError> {
    let mut len = [0u8; 2];
    stream.read_exact(&mut len)?;
    if u16::from_be_bytes(len) as usize != FIRST_MESSAGE {
        return Err(HandshakeError::Plaintext(len.to_vec()));
    }
    let mut first = vec![0u8; FIRST_MESSAGE];
    stream.read_exact(&mut first)?;
    Ok(first)
}

/// What else a peer that was found not to speak Noise has already sent
/// (up to 62 bytes, without waiting for more), for the log.
pub fn what_came(stream: &TcpStream) -> Vec<u8> {
    let mut more = [0u8; 62];
    let mut seen = Vec::new();
    if stream.set_nonblocking(true).is_ok() {
        if let Ok(n) = (&mut &*stream).read(&mut more) {
            seen.extend_from_slice(&more[..n]);
        }
        let _ = stream.set_nonblocking(false);
    }
    seen
}

/// The time by which a connection must be through its handshake and first
/// request. A limit on each read would not do: a peer that sends a byte
/// just before each one ran out could stretch the handshake to hours.
/// Every read waits at most until the deadline.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    at: Instant,
    /// Its length from the start, for the message.
    limit: Duration,
    /// The longest one read may wait (a shorter rule that still holds).
    wait: Duration,
}

impl Deadline {
    /// `limit` after `start`; no single read waits longer than `wait`.
    pub fn new(start: Instant, limit: Duration, wait: Duration) -> Deadline {
        Deadline {
            at: start + limit,
            limit,
            wait: wait.max(Duration::from_millis(1)),
        }
    }

    /// The time left, or `TimedOut` once there is none.
    pub fn left(&self) -> io::Result<Duration> {
        let left = self.at.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "not through the handshake and first request within {} s of connecting",
                    self.limit.as_secs_f64()
                ),
            ));
        }
        Ok(left)
    }

    /// Make the next read on `socket` return by the deadline.
    fn arm_read(&self, socket: &TcpStream) -> io::Result<()> {
        socket.set_read_timeout(Some(self.left()?.min(self.wait)))
    }

    fn arm_write(&self, socket: &TcpStream) -> io::Result<()> {
        socket.set_write_timeout(Some(self.left()?.min(self.wait)))
    }
}

/// A socket whose every read and write ends by a deadline (for the
/// handshake): past it, each fails with `TimedOut`; a read or write that
/// waits `wait` without moving a byte fails with the system's timeout.
pub struct DeadlineStream<'a> {
    pub socket: &'a TcpStream,
    pub deadline: Deadline,
}

impl Read for DeadlineStream<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.deadline.arm_read(self.socket)?;
        match (&mut &*self.socket).read(buf) {
            Err(e) if is_timeout(&e) => Err(self.deadline.left().err().unwrap_or(e)),
            r => r,
        }
    }
}

impl Write for DeadlineStream<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.deadline.arm_write(self.socket)?;
        match (&mut &*self.socket).write(buf) {
            Err(e) if is_timeout(&e) => Err(self.deadline.left().err().unwrap_or(e)),
            r => r,
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// When each side last moved a byte, for the idle timeout.
pub struct Activity {
    start: Instant,
    last_ms: AtomicU64,
    pub bytes_in: AtomicU64,
    pub bytes_out: AtomicU64,
}

impl Activity {
    pub fn new() -> Arc<Activity> {
        Arc::new(Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            bytes_in: AtomicU64::new(0),
            bytes_out: AtomicU64::new(0),
        })
    }

    fn touch(&self) {
        let now = self.start.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(now, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        let now = self.start.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// Split a session over a TCP connection into its reading and writing
/// halves. With `idle`, the reader gives up (a `TimedOut` error) once
/// nothing has moved either way for that long; the stream's read timeout
/// must then be set to a short tick, so the reader wakes up to look.
pub fn split(
    stream: &TcpStream,
    session: Session,
    idle: Option<Duration>,
) -> io::Result<(NoiseReader, NoiseWriter, Arc<Activity>)> {
    let activity = Activity::new();
    let reader = NoiseReader::new(
        Box::new(stream.try_clone()?),
        &session,
        idle,
        activity.clone(),
    );
    let mut writer = NoiseWriter::new(Box::new(stream.try_clone()?), &session, activity.clone());
    writer.socket = Some(stream.try_clone()?);
    Ok((reader, writer, activity))
}

/// The decrypting half.
pub struct NoiseReader {
    stream: BufReader<Box<dyn Read + Send>>,
    keys: Arc<StatelessTransportState>,
    nonce: u64,
    sealed: Vec<u8>,
    /// The current message's plaintext, `start..end` not yet read.
    plain: Vec<u8>,
    start: usize,
    end: usize,
    idle: Option<Duration>,
    /// A deadline and the socket under `stream`, whose read timeout is
    /// shortened before each read so that the read ends by it.
    deadline: Option<(Deadline, TcpStream)>,
    activity: Arc<Activity>,
}

impl NoiseReader {
    /// The reading half of `session` over `stream` (see `split`).
    pub fn new(
        stream: Box<dyn Read + Send>,
        session: &Session,
        idle: Option<Duration>,
        activity: Arc<Activity>,
    ) -> NoiseReader {
        NoiseReader {
            stream: BufReader::with_capacity(2 + MAX_MESSAGE, stream),
            keys: session.transport.clone(),
            nonce: 0,
            sealed: vec![0u8; MAX_MESSAGE],
            plain: vec![0u8; MAX_MESSAGE],
            start: 0,
            end: 0,
            idle,
            deadline: None,
            activity,
        }
    }

    /// Fail every read (`TimedOut`) once `deadline` has passed; `socket`
    /// is the one this reader reads. The stream's read timeout is then
    /// managed here: shortened to end by the deadline, and set back to
    /// the deadline's `wait` (the idle check's tick) by `clear_deadline`.
    pub fn set_deadline(&mut self, deadline: Deadline, socket: &TcpStream) -> io::Result<()> {
        self.deadline = Some((deadline, socket.try_clone()?));
        Ok(())
    }

    /// Reads from now on have no deadline (only the idle timeout).
    pub fn clear_deadline(&mut self) -> io::Result<()> {
        match self.deadline.take() {
            Some((d, socket)) => socket.set_read_timeout(Some(d.wait)),
            None => Ok(()),
        }
    }

    /// Fill `buf` whole; `Ok(false)` at a clean end before its first byte.
    /// A read timeout is only a tick: read on unless idle too long.
    fn fill(&mut self, buf_len: usize, at_boundary: bool) -> io::Result<bool> {
        let mut got = 0;
        while got < buf_len {
            if let Some((deadline, socket)) = &self.deadline {
                deadline.arm_read(socket)?;
            }
            match self.stream.read(&mut self.sealed[got..buf_len]) {
                Ok(0) if got == 0 && at_boundary => return Ok(false),
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => {
                    got += n;
                    self.activity.touch();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if is_timeout(&e) => self.check_idle(e)?,
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    fn check_idle(&self, e: io::Error) -> io::Result<()> {
        if let Some((deadline, _)) = &self.deadline {
            deadline.left()?;
        }
        match self.idle {
            Some(limit) if self.activity.idle_for() < limit => Ok(()),
            Some(limit) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("idle for {} s", limit.as_secs_f64()),
            )),
            None => Err(e),
        }
    }

    /// Read and decrypt the next message; `Ok(false)` at a clean end.
    fn next_message(&mut self) -> io::Result<bool> {
        if !self.fill(2, true)? {
            return Ok(false);
        }
        let len = u16::from_be_bytes([self.sealed[0], self.sealed[1]]) as usize;
        if len < TAG {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("an encrypted message of {len} bytes (less than its tag)"),
            ));
        }
        self.fill(len, false)?;
        let n = self
            .keys
            .read_message(self.nonce, &self.sealed[..len], &mut self.plain)
            .map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("a message that does not decrypt: {e}"),
                )
            })?;
        self.nonce += 1;
        self.activity
            .bytes_in
            .fetch_add(2 + len as u64, Ordering::Relaxed);
        self.start = 0;
        self.end = n;
        Ok(true)
    }
}

impl Read for NoiseReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // An empty message is legal: skip it.
        while self.start == self.end {
            if buf.is_empty() || !self.next_message()? {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.end - self.start);
        buf[..n].copy_from_slice(&self.plain[self.start..self.start + n]);
        self.start += n;
        Ok(n)
    }
}

/// The encrypting half: bytes are gathered into messages of up to
/// `MAX_PLAIN` and sent when one is full or on `flush`.
pub struct NoiseWriter {
    stream: Box<dyn Write + Send>,
    /// The socket under `stream`, shut down for writing when this half
    /// is dropped.
    socket: Option<TcpStream>,
    keys: Arc<StatelessTransportState>,
    nonce: u64,
    pending: Vec<u8>,
    sealed: Vec<u8>,
    activity: Arc<Activity>,
}

impl NoiseWriter {
    /// The writing half of `session` over `stream` (see `split`).
    pub fn new(
        stream: Box<dyn Write + Send>,
        session: &Session,
        activity: Arc<Activity>,
    ) -> NoiseWriter {
        NoiseWriter {
            stream,
            socket: None,
            keys: session.transport.clone(),
            nonce: 0,
            pending: Vec::with_capacity(MAX_PLAIN),
            sealed: vec![0u8; 2 + MAX_MESSAGE],
            activity,
        }
    }

    fn seal_and_send(&mut self) -> io::Result<()> {
        let n = self
            .keys
            .write_message(self.nonce, &self.pending, &mut self.sealed[2..])
            .map_err(|e| io::Error::other(format!("cannot encrypt: {e}")))?;
        self.nonce += 1;
        self.sealed[..2].copy_from_slice(&(n as u16).to_be_bytes());
        self.stream.write_all(&self.sealed[..2 + n])?;
        self.pending.clear();
        self.activity.touch();
        self.activity
            .bytes_out
            .fetch_add(2 + n as u64, Ordering::Relaxed);
        Ok(())
    }
}

impl Write for NoiseWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(MAX_PLAIN - self.pending.len());
        self.pending.extend_from_slice(&buf[..n]);
        if self.pending.len() == MAX_PLAIN {
            self.seal_and_send()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.pending.is_empty() {
            self.seal_and_send()?;
        }
        self.stream.flush()
    }
}

impl Drop for NoiseWriter {
    fn drop(&mut self) {
        // The reader holds a clone of the socket, so dropping ours would
        // not end the stream: say so to the peer explicitly.
        let _ = self.flush();
        if let Some(socket) = &self.socket {
            let _ = socket.shutdown(Shutdown::Write);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, _) = l.accept().unwrap();
        (c, s)
    }

    #[test]
    fn both_sides_learn_each_others_key_and_talk() {
        let (mut c, mut s) = pair();
        let (ck, sk) = (KeyPair::generate().unwrap(), KeyPair::generate().unwrap());
        let (cpub, spub) = (ck.public, sk.public);
        let server = std::thread::spawn(move || {
            let session = server(&mut s, &sk, "").unwrap();
            assert_eq!(session.peer, cpub);
            let (mut r, mut w, _) = split(&s, session, None).unwrap();
            let mut got = Vec::new();
            r.read_to_end(&mut got).unwrap();
            w.write_all(&got).unwrap();
        });
        let session = client(&mut c, &ck, |k| {
            assert_eq!(*k, spub);
            Ok(())
        })
        .unwrap();
        let (mut r, mut w, _) = split(&c, session, None).unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        w.write_all(&data).unwrap();
        drop(w);
        let mut back = Vec::new();
        r.read_to_end(&mut back).unwrap();
        assert_eq!(back, data);
        server.join().unwrap();
    }

    /// A last message that claims more than XX needs is refused on its
    /// length alone: the server does not wait for its 64 KiB.
    #[test]
    fn a_last_message_too_long_is_refused_before_it_is_read() {
        let (mut c, mut s) = pair();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let sk = KeyPair::generate().unwrap();
        let answer = std::thread::spawn(move || server(&mut s, &sk, "").err());
        let ck = KeyPair::generate().unwrap();
        let mut hs = builder(&ck).build_initiator().unwrap();
        let mut buf = vec![0u8; MAX_MESSAGE];
        let n = hs.write_message(&[], &mut buf).unwrap();
        send(&mut c, &buf[..n]).unwrap();
        receive(&mut c, MAX_SECOND_MESSAGE).unwrap();
        c.write_all(&[0xff, 0xff]).unwrap();
        match answer.join().unwrap() {
            Some(HandshakeError::Oversized { claimed: 65535, .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_plaintext_client_is_recognised() {
        let (mut c, mut s) = pair();
        c.write_all(b"\0ACCORD\0hello").unwrap();
        let sk = KeyPair::generate().unwrap();
        match server(&mut s, &sk, "") {
            Err(HandshakeError::Plaintext(b)) => assert!(b.starts_with(b"\0A")),
            other => panic!("{:?}", other.err()),
        }
    }
}
