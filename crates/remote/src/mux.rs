//! One connection, many streams: a reader thread sorts incoming frames into
//! per-stream queues, writers queue whole frames under one lock, a sender
//! thread writes the queue out, and credit frames keep every queue bounded.
//!
//! Sending. Frames are appended to one outgoing queue, and the sender
//! thread writes everything queued with one write and one flush: while it
//! writes, the frames of many calls gather behind it. An idle connection
//! sends a frame at once; a busy one sends large writes (one transport
//! packet carries many small files' frames, a compressed stream is flushed
//! once per write, not once per frame).
//!
//! Flow control. A reply stream (server to client) may carry
//! `STREAM_WINDOW` bytes before the client grants more; the client grants
//! as it consumes. Request bodies (client to server) share one window of
//! `BODY_WINDOW` bytes for the whole connection, granted back as the server
//! consumes them. The server reads bodies in the order the requests came,
//! so a client sends a body whole before it starts the next one (the
//! body lock): the body the server waits on is then always the earliest one
//! sent, and the shared window cannot fill with bodies it cannot reach yet.

use accord_proto::frame::{
    credit_payload, encode_chunk, encode_frame, parse_credit, parse_zeros, read_frame, FrameKind,
    BODY_WINDOW, CHUNK, STREAM_WINDOW,
};
use accord_proto::Frame;
use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::budget::{Budget, Held, OverBudget};
use crate::compress::{ZstdReader, ZstdWriter};
use accord_fsys::{Throttle, PACED_CHUNK};

/// Which end of the connection this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Client,
    Server,
}

/// A piece of a stream as it arrived: bytes, or a run of zeros kept as
/// its length (a ZEROS frame of 13 bytes on the wire stands for up to
/// 1 MiB: it is never made into a buffer here).
pub enum Chunk {
    Bytes(Vec<u8>),
    Zeros(usize),
}

impl Chunk {
    pub fn len(&self) -> usize {
        match self {
            Chunk::Bytes(b) => b.len(),
            Chunk::Zeros(n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The chunk a stream's reader is taking bytes from.
pub struct ChunkCursor {
    chunk: Chunk,
    pos: usize,
}

impl Default for ChunkCursor {
    fn default() -> ChunkCursor {
        ChunkCursor {
            chunk: Chunk::Zeros(0),
            pos: 0,
        }
    }
}

impl ChunkCursor {
    /// Nothing left of the current chunk.
    pub fn is_spent(&self) -> bool {
        self.pos == self.chunk.len()
    }

    pub fn set(&mut self, chunk: Chunk) {
        self.chunk = chunk;
        self.pos = 0;
    }

    /// Bytes left of the current chunk.
    pub fn left(&self) -> usize {
        self.chunk.len() - self.pos
    }

    /// Copy what fits of the rest of the chunk into `buf`.
    pub fn read(&mut self, buf: &mut [u8]) -> usize {
        let n = buf.len().min(self.chunk.len() - self.pos);
        match &self.chunk {
            Chunk::Bytes(b) => buf[..n].copy_from_slice(&b[self.pos..self.pos + n]),
            Chunk::Zeros(_) => buf[..n].fill(0),
        }
        self.pos += n;
        n
    }

    /// Append the rest of the chunk to `held`, charged to its budget.
    pub fn take_into(&mut self, held: &mut Held, what: &'static str) -> Result<(), OverBudget> {
        let rest = self.chunk.len() - self.pos;
        match &self.chunk {
            Chunk::Bytes(b) => held.extend(&b[self.pos..], what)?,
            Chunk::Zeros(_) => held.zeros(rest, what)?,
        }
        self.pos += rest;
        Ok(())
    }
}

/// What arrived on one stream and is not consumed yet.
#[derive(Default)]
struct Inbound {
    chunks: VecDeque<Chunk>,
    /// Bytes queued (bounded by the window the sender was granted).
    queued: u64,
    /// The sender finished the stream (END or ERROR).
    done: bool,
    /// An ERROR frame's payload.
    error: Option<Vec<u8>>,
    /// Consumed bytes not yet granted back.
    to_grant: u64,
}

/// A request the server read (header decoded by the caller).
pub struct Opened {
    pub stream: u32,
    pub header: Vec<u8>,
    pub has_body: bool,
}

#[derive(Default)]
struct State {
    inbound: HashMap<u32, Inbound>,
    /// Credit left to send on each of our outgoing reply streams (server),
    /// or for request bodies as a whole (client, key 0).
    credit: HashMap<u32, u64>,
    /// Requests read and not yet taken (server).
    opened: VecDeque<Opened>,
    /// Highest stream number opened so far (server: new ones must be
    /// higher, so a late frame never lands on a reused number).
    last_opened: u32,
    /// Body bytes queued on the server for all streams.
    body_queued: u64,
    /// Body bytes consumed on the server and not yet granted back.
    body_to_grant: u64,
    /// Why the connection is over.
    closed: Option<String>,
    /// (Server) The client ended its side cleanly: it sends nothing more,
    /// and still reads the answers to what it sent (a client that is done
    /// closes its side right behind its last requests).
    peer_done: bool,
    /// Reply bodies (server) waiting for credit: the rest of each, sent by
    /// the reader as credit comes, so no server thread waits on a client
    /// that reads its replies in another order than it asked.
    outbox: HashMap<u32, VecDeque<u8>>,
    outbox_bytes: u64,
    /// Threads waiting on `changed` (a change nobody waits for wakes no
    /// one: a notification is a system call).
    waiters: u32,
    /// Header bytes charged for each request read and not yet answered
    /// (server): a client cannot pile up requests beyond its budget.
    headers: HashMap<u32, u64>,
    /// Frames were taken since the waiters were last woken: the reader
    /// thread wakes them once, before it reads the transport again.
    wake_due: bool,
}

/// Frames queued for the sender thread.
#[derive(Default)]
struct Outgoing {
    buf: Vec<u8>,
    /// Our sending side is to end once the queue is written.
    shut: bool,
    /// The sender thread is gone (shut down, or the transport failed):
    /// nothing more is written.
    done: bool,
    /// Threads waiting on `out_changed`.
    waiters: u32,
}

/// Queued bytes above which a caller waits before it queues more (the
/// reader thread never waits: it only queues replies that credit allows).
const MAX_QUEUED: usize = 4 << 20;

/// Bytes the reader thread takes from the transport at a time.
const READ_BUFFER: usize = 64 << 10;

/// Replies sent with `reply_soon` wake the sender thread once this many
/// bytes are queued; fewer wait until the replying thread would sleep.
const SOON_BATCH: usize = 32 << 10;

/// How long the client's sender thread, woken for a request held back,
/// waits for more to join it (see `send_loop`): a thread that waits for a
/// reply sends what is held at once, so only requests their thread does
/// not wait for (a push's small files, one after another) wait this long,
/// and only while fewer than `SOON_BATCH` bytes are queued.
const HOLD: std::time::Duration = std::time::Duration::from_millis(1);

/// One end of a connection.
pub struct Conn {
    role: Role,
    out: Mutex<Outgoing>,
    out_changed: Condvar,
    /// Bytes were queued by `reply_soon`, or as a client's request,
    /// without waking the sender for them: a thread of ours that would
    /// sleep first calls `flush` (a client's sender writes them after
    /// `HOLD` anyway).
    held_back: AtomicBool,
    /// `HOLD`, in microseconds (a test makes it longer than it runs).
    hold_us: AtomicU64,
    body_lock: Mutex<()>,
    state: Mutex<State>,
    changed: Condvar,
    next_stream: AtomicU64,
    /// What this connection's peer may make it hold: bytes queued on
    /// streams, request headers not answered, bodies and replies kept
    /// whole.
    pub budget: Arc<Budget>,
    /// Bytes written to and read from the transport (after compression).
    pub bytes_sent: Arc<AtomicU64>,
    pub bytes_received: Arc<AtomicU64>,
    /// `--bwlimit`: the rate of the bytes written to the transport and of
    /// those read from it, each on its own (reading slower holds the
    /// peer's writes back through the transport's own flow control).
    paced: [Arc<Throttle>; 2],
}

/// The transport as the reader thread reads it: the threads waiting for
/// the frames taken so far are woken before each read, which may block.
/// A batch of small replies so wakes a waiting thread once, rather than
/// once a reply (which then ran before the reader thread took the next).
struct WakeBeforeRead<'a> {
    inner: Box<dyn Read + Send>,
    conn: &'a Conn,
}

impl Read for WakeBeforeRead<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.conn.wake_for_frames();
        self.inner.read(buf)
    }
}

/// A transport end whose bytes are paced by a throttle: with a rate set,
/// no call moves more than `PACED_CHUNK`, so a burst stays bounded.
struct Paced<T> {
    inner: T,
    throttle: Arc<Throttle>,
}

impl<T> Paced<T> {
    fn most(&self, len: usize) -> usize {
        match self.throttle.rate() {
            0 => len,
            _ => len.min(PACED_CHUNK),
        }
    }
}

impl<R: Read> Read for Paced<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let most = self.most(buf.len());
        let n = self.inner.read(&mut buf[..most])?;
        self.throttle.pace(n);
        Ok(n)
    }
}

impl<W: Write> Write for Paced<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let most = self.most(buf.len());
        let n = self.inner.write(&buf[..most])?;
        self.throttle.pace(n);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A transport end that counts the bytes through it.
struct Counted<T> {
    inner: T,
    bytes: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The memory a queued chunk takes (a run of zeros takes none).
fn held_len(chunk: &Chunk) -> u64 {
    match chunk {
        Chunk::Bytes(b) => b.len() as u64,
        Chunk::Zeros(_) => 0,
    }
}

/// Why a connection ended when the other side ended it cleanly.
pub const PEER_CLOSED: &str = "the other side closed the connection";

/// Body bytes a server consumes before it grants them back.
const BODY_GRANT: u64 = 1 << 20;

/// Most reply bytes a server holds for credit before its threads wait.
const MAX_OUTBOX: u64 = 64 << 20;

/// Most requests a server keeps read but not yet answered.
const MAX_OPEN_STREAMS: usize = 1 << 16;

impl Conn {
    /// Start the connection over `reader`/`writer` (the handshake is done)
    /// and its reader thread; `compress`: both directions are zstd streams
    /// (negotiated in the handshake), ours at this level.
    pub fn start(
        role: Role,
        reader: Box<dyn Read + Send>,
        writer: Box<dyn Write + Send>,
        compress: Option<i32>,
        budget: Arc<Budget>,
    ) -> io::Result<Arc<Conn>> {
        let bytes_sent = Arc::new(AtomicU64::new(0));
        let bytes_received = Arc::new(AtomicU64::new(0));
        let reader: Box<dyn Read + Send> = Box::new(Counted {
            inner: reader,
            bytes: bytes_received.clone(),
        });
        let writer: Box<dyn Write + Send> = Box::new(Counted {
            inner: writer,
            bytes: bytes_sent.clone(),
        });
        let paced = [Arc::new(Throttle::new(0)), Arc::new(Throttle::new(0))];
        let reader: Box<dyn Read + Send> = Box::new(Paced {
            inner: reader,
            throttle: paced[0].clone(),
        });
        let writer: Box<dyn Write + Send> = Box::new(Paced {
            inner: writer,
            throttle: paced[1].clone(),
        });
        let (reader, writer): (Box<dyn Read + Send>, Box<dyn Write + Send>) = match compress {
            Some(level) => (
                Box::new(ZstdReader::new(reader)?),
                Box::new(ZstdWriter::new(writer, level)?),
            ),
            None => (reader, writer),
        };
        let mut st = State::default();
        if role == Role::Client {
            st.credit.insert(0, BODY_WINDOW as u64);
        }
        let conn = Arc::new(Conn {
            role,
            out: Mutex::new(Outgoing::default()),
            out_changed: Condvar::new(),
            held_back: AtomicBool::new(false),
            hold_us: AtomicU64::new(HOLD.as_micros() as u64),
            body_lock: Mutex::new(()),
            state: Mutex::new(st),
            changed: Condvar::new(),
            next_stream: AtomicU64::new(1),
            budget,
            bytes_sent,
            bytes_received,
            paced,
        });
        let c = conn.clone();
        std::thread::Builder::new()
            .name("accord-conn".into())
            .spawn(move || c.read_loop(reader))?;
        let c = conn.clone();
        std::thread::Builder::new()
            .name("accord-send".into())
            .spawn(move || c.send_loop(writer))?;
        Ok(conn)
    }

    /// `--bwlimit`: at most `rate` bytes a second each way on the
    /// transport from now on (0: no limit).
    pub fn limit_rate(&self, rate: u64) {
        for t in &self.paced {
            t.set_rate(rate);
        }
    }

    fn out_lock(&self) -> MutexGuard<'_, Outgoing> {
        self.out.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The outgoing queue, once it has room (or the sender is gone).
    fn out_with_room(&self) -> MutexGuard<'_, Outgoing> {
        let mut out = self.out_lock();
        while out.buf.len() >= MAX_QUEUED && !out.done {
            out = self.wait_out(out);
        }
        out
    }

    /// The sender thread: writes what is queued, one write and one flush
    /// at a time, until our side is shut (or the connection failed)
    /// and the queue is empty, or the transport fails. The writer is
    /// dropped when it ends, which ends the stream for the other side.
    fn send_loop(&self, mut writer: Box<dyn Write + Send>) {
        let mut spare = Vec::new();
        loop {
            let mut out = self.out_lock();
            // The other side's end of stream does not end ours: a server
            // finishes its session (and releases the root) before it closes.
            while out.buf.is_empty() && !out.shut && !self.failed() {
                out = self.wait_out(out);
            }
            if out.buf.is_empty() {
                let _ = writer.flush();
                out.done = true;
                self.notify_out(out);
                return;
            }
            if self.role == Role::Client
                && self.held_back.load(Ordering::Relaxed)
                && out.buf.len() < SOON_BATCH
                && !out.shut
            {
                // A request held back: more may join it in one write.
                out = self.hold_for_more(out);
            }
            std::mem::swap(&mut out.buf, &mut spare);
            self.held_back.store(false, Ordering::Relaxed);
            // Callers waiting for room.
            self.notify_out(out);
            if let Err(e) = writer.write_all(&spare).and_then(|()| writer.flush()) {
                self.close(&format!("connection failed: {e}"));
                let mut out = self.out_lock();
                out.done = true;
                out.buf = Vec::new();
                self.notify_out(out);
                return;
            }
            spare.clear();
        }
    }

    /// Wait at most `HOLD` for more requests, or for a thread to send
    /// what is held (`flush`, or `SOON_BATCH` bytes queued).
    fn hold_for_more<'a>(&self, mut out: MutexGuard<'a, Outgoing>) -> MutexGuard<'a, Outgoing> {
        out.waiters += 1;
        let (mut out, _) = self
            .out_changed
            .wait_timeout(
                out,
                std::time::Duration::from_micros(self.hold_us.load(Ordering::Relaxed)),
            )
            .unwrap_or_else(|e| e.into_inner());
        out.waiters -= 1;
        out
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Why the connection is over, if it is.
    pub fn closed(&self) -> Option<String> {
        self.lock().closed.clone()
    }

    /// The connection is over for another reason than the other side's
    /// end of stream (a failure, a protocol violation, a local close).
    fn failed(&self) -> bool {
        self.lock()
            .closed
            .as_deref()
            .is_some_and(|why| why != PEER_CLOSED)
    }

    /// Close our sending side once what is queued is written (the peer
    /// sees the end of the stream and finishes; its reader then ends ours).
    /// Returns when the sender thread is done.
    pub fn shutdown_write(&self) {
        let mut out = self.out_lock();
        out.shut = true;
        if out.waiters > 0 {
            self.out_changed.notify_all();
        }
        while !out.done {
            out = self.wait_out(out);
        }
    }

    /// Wait until the connection is over (the other side closed it, or
    /// it failed), at most `limit`; true if it is.
    pub fn wait_closed(&self, limit: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + limit;
        let mut st = self.lock();
        while st.closed.is_none() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            st.waiters += 1;
            let (guard, _) = self
                .changed
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner());
            st = guard;
            st.waiters -= 1;
        }
        true
    }

    /// End the connection: every waiter wakes with `why`.
    pub fn close(&self, why: &str) {
        let mut st = self.lock();
        if st.closed.is_none() {
            st.closed = Some(why.to_string());
        }
        self.notify_changed(st);
        // The sender checks `closed` under the queue's lock.
        self.notify_out(self.out_lock());
    }

    /// Wait for a change of the state (counted, so that a change nobody
    /// waits for costs no system call).
    /// Every caller waits in a loop that checks its condition again: a
    /// return without waiting (to send replies held back first) is one
    /// more wake-up to it.
    fn wait_changed<'a>(&'a self, mut st: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
        if self.held_back.load(Ordering::Relaxed) {
            drop(st);
            self.flush();
            return self.lock();
        }
        st.waiters += 1;
        let mut st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
        st.waiters -= 1;
        st
    }

    /// Release the state after a change, waking whoever waits for one.
    fn notify_changed(&self, st: MutexGuard<'_, State>) {
        let wake = st.waiters > 0;
        drop(st);
        if wake {
            self.changed.notify_all();
        }
    }

    fn wait_out<'a>(&self, mut out: MutexGuard<'a, Outgoing>) -> MutexGuard<'a, Outgoing> {
        if self.held_back.swap(false, Ordering::Relaxed) && !out.buf.is_empty() {
            // The sender may be asleep on bytes held back.
            self.out_changed.notify_all();
        }
        out.waiters += 1;
        let mut out = self
            .out_changed
            .wait(out)
            .unwrap_or_else(|e| e.into_inner());
        out.waiters -= 1;
        out
    }

    fn notify_out(&self, out: MutexGuard<'_, Outgoing>) {
        let wake = out.waiters > 0;
        drop(out);
        if wake {
            self.out_changed.notify_all();
        }
    }

    fn read_loop(self: Arc<Self>, reader: Box<dyn Read + Send>) {
        // The frame reader asks for a header, then a payload: buffered, a
        // busy connection costs one read call per many frames, and wakes
        // the threads waiting for them once for all of them.
        let mut reader = io::BufReader::with_capacity(
            READ_BUFFER,
            WakeBeforeRead {
                inner: reader,
                conn: &self,
            },
        );
        let why = loop {
            match read_frame(&mut reader) {
                Ok(Some(f)) => {
                    if let Err(e) = self.take_frame(f) {
                        break format!("protocol violation by the other side: {e}");
                    }
                }
                Ok(None) if self.role == Role::Server => {
                    let mut st = self.lock();
                    st.peer_done = true;
                    self.notify_changed(st);
                    return;
                }
                Ok(None) => break PEER_CLOSED.to_string(),
                Err(e) => break format!("connection failed: {e}"),
            }
        };
        self.close(&why);
    }

    fn take_frame(&self, mut f: Frame) -> Result<(), String> {
        let mut zeros = None;
        if f.kind == FrameKind::Zeros {
            // Bounded by MAX_PAYLOAD here, and by the stream's window
            // below, like any data; kept as its length.
            zeros = Some(parse_zeros(&f.payload).map_err(|e| e.to_string())?);
            f.kind = FrameKind::Data;
        }
        let stream = f.stream;
        let credit = f.kind == FrameKind::Credit;
        self.take_frame_locked(f, zeros)?;
        if credit && self.role == Role::Server {
            self.flush_outbox(stream);
        }
        Ok(())
    }

    /// Send what credit allows of `stream`'s waiting reply. The queue's
    /// lock is held from taking the bytes to queueing them, so two flushes
    /// of one stream never reorder its data. Called by the reader thread,
    /// which must not wait for room: the bytes are bounded by credit.
    fn flush_outbox(&self, stream: u32) {
        let mut w = self.out_lock();
        let (chunk, last) = {
            let mut st = self.lock();
            let credit = st.credit.get(&stream).copied().unwrap_or(0);
            let Some(q) = st.outbox.get_mut(&stream) else {
                return;
            };
            let n = (q.len() as u64).min(credit) as usize;
            if n == 0 {
                return;
            }
            let chunk: Vec<u8> = q.drain(..n).collect();
            let last = q.is_empty();
            if last {
                st.outbox.remove(&stream);
                st.credit.remove(&stream);
            } else if let Some(c) = st.credit.get_mut(&stream) {
                *c -= n as u64;
            }
            st.outbox_bytes -= n as u64;
            // Repliers waiting for the outbox to shrink.
            self.notify_changed(st);
            (chunk, last)
        };
        let mut buf = Vec::with_capacity(chunk.len() + 64);
        let mut rest = &chunk[..];
        while !rest.is_empty() {
            let (c, more) = rest.split_at(rest.len().min(CHUNK));
            encode_chunk(&mut buf, stream, c, last && more.is_empty());
            rest = more;
        }
        // A failure closes the connection, which every waiter sees.
        let _ = self.write_locked(&mut w, &buf);
    }

    /// `zeros`: the frame was a run of that many zeros (its kind is DATA).
    fn take_frame_locked(&self, f: Frame, zeros: Option<usize>) -> Result<(), String> {
        let mut st = self.lock();
        if st.closed.is_some() {
            return Ok(());
        }
        match (self.role, f.kind) {
            (_, FrameKind::Credit) => {
                let n = parse_credit(&f.payload).map_err(|e| e.to_string())? as u64;
                // Credit for a stream already answered is late, not wrong.
                if let Some(c) = st.credit.get_mut(&f.stream) {
                    *c = c.saturating_add(n);
                }
            }
            (Role::Server, FrameKind::Open | FrameKind::OpenFin) => {
                if f.stream <= st.last_opened {
                    return Err(format!("stream {} opened twice or out of order", f.stream));
                }
                if st.opened.len() + st.inbound.len() >= MAX_OPEN_STREAMS {
                    return Err("too many requests in flight".into());
                }
                st.last_opened = f.stream;
                let charged = f.payload.len() as u64;
                self.budget
                    .charge(charged, "the requests not answered yet")
                    .map_err(|e| e.to_string())?;
                st.headers.insert(f.stream, charged);
                let has_body = f.kind == FrameKind::Open;
                if has_body {
                    st.inbound.insert(f.stream, Inbound::default());
                }
                st.credit.insert(f.stream, STREAM_WINDOW as u64);
                st.opened.push_back(Opened {
                    stream: f.stream,
                    header: f.payload,
                    has_body,
                });
            }
            (_, FrameKind::Data | FrameKind::End | FrameKind::Error) => {
                // A client ends a body with an error when it could not
                // read all of it: the request then fails.
                let server = self.role == Role::Server;
                let chunk = match zeros {
                    Some(n) => Chunk::Zeros(n),
                    None => Chunk::Bytes(f.payload),
                };
                let len = chunk.len() as u64;
                if server && f.kind != FrameKind::Error {
                    st.body_queued += len;
                    if st.body_queued > BODY_WINDOW as u64 {
                        return Err("request bodies beyond the granted window".into());
                    }
                }
                let Some(ib) = st.inbound.get_mut(&f.stream) else {
                    // A reply to a request given up on (client) is dropped;
                    // a body for no request is a violation.
                    return if server {
                        Err(format!("data for stream {} that expects none", f.stream))
                    } else {
                        Ok(())
                    };
                };
                if ib.done {
                    return Err(format!("data after the end of stream {}", f.stream));
                }
                if !server && ib.queued + len > STREAM_WINDOW as u64 {
                    return Err(format!("stream {} beyond its window", f.stream));
                }
                match chunk {
                    Chunk::Bytes(payload) if f.kind == FrameKind::Error => {
                        ib.error = Some(payload);
                        ib.done = true;
                    }
                    chunk => {
                        ib.done = f.kind == FrameKind::End;
                        if !chunk.is_empty() {
                            self.charge_queued(&chunk)?;
                            ib.queued += len;
                            ib.chunks.push_back(chunk);
                        }
                    }
                }
            }
            (_, FrameKind::Zeros) => unreachable!("zeros frames are expanded first"),
            (Role::Client, k) => return Err(format!("frame kind {k:?} from a server")),
        }
        st.wake_due = true;
        Ok(())
    }

    /// Wake the threads waiting for the frames taken since the last time
    /// (the reader thread, before it reads the transport again).
    fn wake_for_frames(&self) {
        let mut st = self.lock();
        if std::mem::take(&mut st.wake_due) {
            self.notify_changed(st);
        }
    }

    /// Charge a chunk queued on a reply stream (client; released when
    /// taken). A server's queued bodies are bounded by the one window
    /// they share, and are not charged: a client within its window is
    /// never cut off because other sessions hold the pool.
    fn charge_queued(&self, chunk: &Chunk) -> Result<(), String> {
        if self.role == Role::Server {
            return Ok(());
        }
        self.budget
            .charge(held_len(chunk), "the replies waiting to be read")
            .map_err(|e| e.to_string())
    }

    fn release_queued(&self, chunk: &Chunk) {
        if self.role == Role::Client {
            self.budget.release(held_len(chunk));
        }
    }

    fn send_frame(&self, stream: u32, kind: FrameKind, payload: &[u8]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(9 + payload.len());
        encode_frame(&mut buf, stream, kind, payload);
        self.send_encoded(&buf)
    }

    /// Send one chunk of a body (see `encode_chunk`).
    fn send_chunk(&self, stream: u32, chunk: &[u8], last: bool) -> io::Result<()> {
        let mut buf = Vec::with_capacity(9 + chunk.len());
        encode_chunk(&mut buf, stream, chunk, last);
        self.send_encoded(&buf)
    }

    /// Queue frames encoded whole.
    fn send_encoded(&self, buf: &[u8]) -> io::Result<()> {
        let mut w = self.out_with_room();
        self.write_locked(&mut w, buf)
    }

    /// Queue frames encoded whole, waking the sender only once
    /// `SOON_BATCH` bytes wait (see `reply_soon`).
    fn send_encoded_soon(&self, buf: &[u8]) -> io::Result<()> {
        let mut w = self.out_with_room();
        if w.done {
            return self.write_locked(&mut w, buf);
        }
        w.buf.extend_from_slice(buf);
        if w.buf.len() >= SOON_BATCH {
            self.held_back.store(false, Ordering::Relaxed);
            if w.waiters > 0 {
                self.out_changed.notify_all();
            }
        } else {
            self.held_back.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Send what `reply_soon` held back. Every thread of ours that sends
    /// replies so calls this before it sleeps.
    pub fn flush(&self) {
        if self.held_back.swap(false, Ordering::Relaxed) {
            let out = self.out_lock();
            if !out.buf.is_empty() && out.waiters > 0 {
                self.out_changed.notify_all();
            }
        }
    }

    /// Queue `buf` for the sender thread, under the queue's lock. A
    /// transport that failed (the connection is then closed) is a lost
    /// connection to the caller; a failure after this returns is seen by
    /// every waiter as the connection's end.
    fn write_locked(&self, out: &mut Outgoing, buf: &[u8]) -> io::Result<()> {
        if out.done {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!("connection lost: {}", self.closed().unwrap_or_default()),
            ));
        }
        let was_empty = out.buf.is_empty();
        out.buf.extend_from_slice(buf);
        let held = self.held_back.swap(false, Ordering::Relaxed);
        if (was_empty || held) && out.waiters > 0 {
            self.out_changed.notify_all();
        }
        Ok(())
    }

    fn lost(&self) -> io::Error {
        let why = self.closed().unwrap_or_else(|| "connection closed".into());
        io::Error::new(io::ErrorKind::ConnectionAborted, why)
    }

    /// Wait for `n` bytes of credit on `key` (at least one byte; up to
    /// `n`) and take it.
    fn take_credit(&self, key: u32, n: usize) -> io::Result<usize> {
        let mut st = self.lock();
        loop {
            if st.closed.is_some() {
                drop(st);
                return Err(self.lost());
            }
            let c = st.credit.get(&key).copied().unwrap_or(0);
            if c > 0 || n == 0 {
                let take = (n as u64).min(c) as usize;
                *st.credit.get_mut(&key).unwrap() -= take as u64;
                return Ok(take);
            }
            if st.peer_done {
                // A client that ended its side grants no more.
                drop(st);
                return Err(self.lost());
            }
            st = self.wait_changed(st);
        }
    }

    /// Wait for exactly `n` bytes of credit on `key` and take them.
    fn take_credit_exact(&self, key: u32, mut n: usize) -> io::Result<()> {
        while n > 0 {
            n -= self.take_credit(key, n)?;
        }
        Ok(())
    }

    /// Send `data` on `stream` as DATA frames (END when `last`), within
    /// the credit of `credit_key`.
    fn send_stream(&self, stream: u32, credit_key: u32, data: &[u8], last: bool) -> io::Result<()> {
        let mut rest = data;
        loop {
            let want = rest.len().min(CHUNK);
            let n = self.take_credit(credit_key, want)?;
            let (chunk, more) = rest.split_at(n);
            rest = more;
            let end = last && rest.is_empty();
            if !chunk.is_empty() || end {
                self.send_chunk(stream, chunk, end)?;
            }
            if rest.is_empty() {
                return Ok(());
            }
        }
    }

    /// The bytes of `stream`'s body when all of it has arrived (it ended
    /// cleanly, nothing taken yet); `None` while more may come.
    pub fn arrived_whole(&self, stream: u32) -> Option<u64> {
        let st = self.lock();
        let ib = st.inbound.get(&stream)?;
        (ib.done && ib.error.is_none()).then_some(ib.queued)
    }

    /// Next chunk of `stream`; `Ok(None)` at its end; `Err(Ok(payload))`
    /// when the sender ended it with an error frame, `Err(Err(io))` when
    /// the connection is gone.
    pub fn recv(&self, stream: u32) -> Result<Option<Chunk>, Result<Vec<u8>, io::Error>> {
        let mut st = self.lock();
        loop {
            let Some(ib) = st.inbound.get_mut(&stream) else {
                return Err(Err(io::Error::other("read past the end of a stream")));
            };
            if let Some(chunk) = ib.chunks.pop_front() {
                let len = chunk.len() as u64;
                self.release_queued(&chunk);
                ib.queued -= len;
                let grant = if self.role == Role::Server {
                    // Body credit is the connection's: many small bodies
                    // add up to a grant as one big one does.
                    st.body_queued -= len;
                    st.body_to_grant += len;
                    (st.body_to_grant >= BODY_GRANT).then(|| std::mem::take(&mut st.body_to_grant))
                } else {
                    ib.to_grant += len;
                    (ib.to_grant >= STREAM_WINDOW as u64 / 2)
                        .then(|| std::mem::take(&mut ib.to_grant))
                };
                drop(st);
                if let Some(g) = grant {
                    // Servers grant body credit on stream 0, for the
                    // connection; clients per reply stream.
                    let key = if self.role == Role::Server { 0 } else { stream };
                    let _ = self.send_frame(key, FrameKind::Credit, &credit_payload(g as u32));
                }
                return Ok(Some(chunk));
            }
            if ib.done {
                let err = ib.error.take();
                st.inbound.remove(&stream);
                if self.role == Role::Server && st.body_to_grant > 0 {
                    // A body is over: give back what it used, so a client
                    // waiting for credit never waits on a server that has
                    // nothing left to read.
                    let g = std::mem::take(&mut st.body_to_grant);
                    drop(st);
                    let _ = self.send_frame(0, FrameKind::Credit, &credit_payload(g as u32));
                    return match err {
                        Some(e) => Err(Ok(e)),
                        None => Ok(None),
                    };
                }
                return match err {
                    Some(e) => Err(Ok(e)),
                    None => Ok(None),
                };
            }
            // A client that ended its side sends no more of this body.
            if st.closed.is_some() || st.peer_done {
                drop(st);
                return Err(Err(self.lost()));
            }
            st = self.wait_changed(st);
        }
    }
}

/// The client's side of the calls.
impl Conn {
    /// Open a request stream; `body` (if any) is sent whole, under the body
    /// lock, right after the header.
    pub fn request(&self, header: &[u8], body: Option<&mut dyn Read>) -> io::Result<u32> {
        let Some(body) = body else {
            return self.open_stream(FrameKind::OpenFin, header);
        };
        let _body = self.body_lock.lock().unwrap_or_else(|e| e.into_inner());
        // A body that fits one chunk (most files) goes out in one write
        // with its request: fewer, larger packets on the wire.
        // Read without zeroing a buffer first: most bodies are small.
        let mut buf = Vec::with_capacity(CHUNK);
        (&mut *body).take(CHUNK as u64).read_to_end(&mut buf)?;
        let first = buf.len();
        if first < CHUNK {
            self.take_credit_exact(0, first)?;
            return self.open_stream_with(FrameKind::Open, header, |stream, out| {
                encode_chunk(out, stream, &buf[..first], true)
            });
        }
        let stream = self.open_stream(FrameKind::Open, header)?;
        self.send_stream(stream, 0, &buf[..first], false)?;
        loop {
            let n = match body.read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    // The server must not take a partial body as whole:
                    // end the stream with an error it reports back.
                    let _ = self.send_frame(stream, FrameKind::Error, e.to_string().as_bytes());
                    return Err(e);
                }
            };
            if n == 0 {
                self.send_stream(stream, 0, &[], true)?;
                return Ok(stream);
            }
            self.send_stream(stream, 0, &buf[..n], false)?;
        }
    }

    /// Number a new stream and queue its OPEN frame, under the queue's
    /// lock: the server takes stream numbers only in increasing order.
    fn open_stream(&self, kind: FrameKind, header: &[u8]) -> io::Result<u32> {
        self.open_stream_with(kind, header, |_, _| {})
    }

    /// `open_stream`, with more frames of the new stream (encoded by
    /// `then`) in the same write.
    fn open_stream_with(
        &self,
        kind: FrameKind,
        header: &[u8],
        then: impl FnOnce(u32, &mut Vec<u8>),
    ) -> io::Result<u32> {
        let mut buf = Vec::with_capacity(9 + header.len());
        let mut w = self.out_with_room();
        let stream = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let stream = u32::try_from(stream)
            .map_err(|_| io::Error::other("too many requests on one connection"))?;
        self.lock().inbound.insert(stream, Inbound::default());
        encode_frame(&mut buf, stream, kind, header);
        then(stream, &mut buf);
        self.write_request_locked(&mut w, &buf).map(|()| stream)
    }

    /// Queue a request under the queue's lock. The sender is woken for
    /// the first bytes queued and then waits a moment for more (see
    /// `HOLD`), or once `SOON_BATCH` bytes wait: a push of many small
    /// files costs one write to the transport, and one packet of ssh's,
    /// for many of them rather than for each.
    fn write_request_locked(&self, out: &mut Outgoing, buf: &[u8]) -> io::Result<()> {
        if out.done {
            return self.write_locked(out, buf);
        }
        let was_empty = out.buf.is_empty();
        out.buf.extend_from_slice(buf);
        let full = out.buf.len() >= SOON_BATCH;
        self.held_back.store(!full, Ordering::Relaxed);
        if (was_empty || full) && out.waiters > 0 {
            self.out_changed.notify_all();
        }
        Ok(())
    }

    /// Stop listening to a stream whose reply is not wanted any more.
    pub fn forget(&self, stream: u32) {
        if let Some(ib) = self.lock().inbound.remove(&stream) {
            ib.chunks.iter().for_each(|c| self.release_queued(c));
        }
    }
}

/// The server's side.
impl Conn {
    /// The next request, in the order they were sent; `None` once the
    /// connection is over.
    pub fn next_request(&self) -> Option<Opened> {
        let mut st = self.lock();
        loop {
            if let Some(o) = st.opened.pop_front() {
                return Some(o);
            }
            if st.closed.is_some() || st.peer_done {
                return None;
            }
            st = self.wait_changed(st);
        }
    }

    /// Send a reply body (END after it): what the stream's credit allows
    /// now, the rest when more credit comes (the caller does not wait,
    /// unless the replies waiting so are many).
    pub fn reply(&self, stream: u32, data: &[u8]) -> io::Result<()> {
        self.reply_as(stream, data, false)
    }

    /// `reply`, for a short call that the replying thread follows with
    /// more: the sender is woken once replies add up to `SOON_BATCH` or
    /// the thread calls `flush` (it must, before it sleeps or starts a
    /// call that may take long). A push of many small files so costs
    /// one write to the transport, and two context switches, for many
    /// replies rather than for each.
    pub fn reply_soon(&self, stream: u32, data: &[u8]) -> io::Result<()> {
        self.reply_as(stream, data, true)
    }

    fn reply_as(&self, stream: u32, data: &[u8], soon: bool) -> io::Result<()> {
        self.answered(stream);
        let mut st = self.lock();
        // A client that ended its side grants no more credit: nothing
        // waits for room it would make.
        while st.outbox_bytes > MAX_OUTBOX && st.closed.is_none() && !st.peer_done {
            st = self.wait_changed(st);
        }
        if st.closed.is_some() {
            drop(st);
            return Err(self.lost());
        }
        let credit = st.credit.get(&stream).copied().unwrap_or(0) as usize;
        if data.len() <= credit {
            st.credit.remove(&stream);
            drop(st);
            return self.send_stream_now(stream, data, soon);
        }
        st.outbox.insert(stream, data.iter().copied().collect());
        st.outbox_bytes += data.len() as u64;
        drop(st);
        self.flush_outbox(stream);
        Ok(())
    }

    /// Send a whole reply that fits the stream's credit.
    fn send_stream_now(&self, stream: u32, data: &[u8], soon: bool) -> io::Result<()> {
        let mut rest = data;
        loop {
            let (c, more) = rest.split_at(rest.len().min(CHUNK));
            let mut buf = Vec::with_capacity(9 + c.len());
            encode_chunk(&mut buf, stream, c, more.is_empty());
            if soon {
                self.send_encoded_soon(&buf)?;
            } else {
                self.send_encoded(&buf)?;
            }
            if more.is_empty() {
                return Ok(());
            }
            rest = more;
        }
    }

    /// Send part of a reply body.
    pub fn reply_part(&self, stream: u32, data: &[u8]) -> io::Result<()> {
        self.send_stream(stream, stream, data, false)
    }

    /// End a reply with an error.
    pub fn reply_error(&self, stream: u32, payload: &[u8]) -> io::Result<()> {
        self.answered(stream);
        self.lock().credit.remove(&stream);
        self.send_frame(stream, FrameKind::Error, payload)
    }

    /// A request is answered: its header is no longer held for it.
    fn answered(&self, stream: u32) {
        if let Some(n) = self.lock().headers.remove(&stream) {
            self.budget.release(n);
        }
    }

    /// Drop what is left of a request body (after the request failed
    /// before reading it all).
    pub fn drain_body(&self, stream: u32) {
        while let Ok(Some(_)) = self.recv(stream) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    /// The sending half of a socket, ended when dropped (as a pipe's is
    /// closed: the reading half keeps the socket open).
    struct Sending(UnixStream);

    impl Write for Sending {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            self.0.flush()
        }
    }

    impl Drop for Sending {
        fn drop(&mut self) {
            let _ = self.0.shutdown(std::net::Shutdown::Write);
        }
    }

    fn conn(role: Role, end: UnixStream) -> Arc<Conn> {
        let reader = Box::new(end.try_clone().unwrap());
        let budget = crate::budget::Budget::alone(64 << 20);
        Conn::start(role, reader, Box::new(Sending(end)), None, budget).unwrap()
    }

    /// A client that is done ends its side right behind its last requests
    /// (a sync's last records) and still reads their answers: the server
    /// carries out what it was sent, answers, and only then sees no more.
    #[test]
    fn a_client_that_ended_its_side_still_gets_its_answers() {
        let (c, s) = UnixStream::pair().unwrap();
        let (client, server) = (conn(Role::Client, c), conn(Role::Server, s));
        let mut body: &[u8] = b"the last records";
        let asked = client.request(b"record", Some(&mut body)).unwrap();
        client.shutdown_write();
        let o = server
            .next_request()
            .expect("the request sent before the end");
        assert_eq!(o.header, b"record");
        let mut got = Vec::new();
        while let Ok(Some(Chunk::Bytes(b))) = server.recv(o.stream) {
            got.extend(b);
        }
        assert_eq!(got, b"the last records");
        assert!(server.next_request().is_none(), "nothing after the end");
        server.reply(o.stream, b"recorded").unwrap();
        server.shutdown_write();
        let mut answer = Vec::new();
        while let Ok(Some(Chunk::Bytes(b))) = client.recv(asked) {
            answer.extend(b);
        }
        assert_eq!(answer, b"recorded");
        assert!(client.wait_closed(std::time::Duration::from_secs(10)));
    }

    /// The sending half of a socket that counts the batches written to
    /// it (the sender thread flushes once a batch).
    struct CountedBatches(Sending, Arc<AtomicU64>);

    impl Write for CountedBatches {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            self.1.fetch_add(1, Ordering::Relaxed);
            self.0.flush()
        }
    }

    /// A push's small files are requests their thread does not wait for,
    /// one after another: they go out many to a write (and to one packet
    /// of ssh's), not one each.
    #[test]
    fn requests_sent_one_after_another_go_out_together() {
        let (c, s) = UnixStream::pair().unwrap();
        let batches = Arc::new(AtomicU64::new(0));
        let writer = CountedBatches(Sending(c.try_clone().unwrap()), batches.clone());
        let budget = crate::budget::Budget::alone(64 << 20);
        let client =
            Conn::start(Role::Client, Box::new(c), Box::new(writer), None, budget).unwrap();
        // Longer than the test: what is held goes out by the batch only,
        // however the threads are scheduled.
        client.hold_us.store(3_600_000_000, Ordering::Relaxed);
        let server = conn(Role::Server, s);
        let reading = std::thread::spawn(move || {
            let mut bodies = 0;
            while let Some(o) = server.next_request() {
                while let Ok(Some(_)) = server.recv(o.stream) {}
                bodies += 1;
            }
            bodies
        });
        let file = [7u8; 1000];
        for i in 0..200u32 {
            let mut body: &[u8] = &file;
            client
                .request(format!("file {i}").as_bytes(), Some(&mut body))
                .unwrap();
            // As a push reads its next file: the sender has time to
            // write each request alone.
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        client.shutdown_write();
        assert_eq!(reading.join().unwrap(), 200);
        // About 32 of them to a `SOON_BATCH`, and the rest at the end.
        let written = batches.load(Ordering::Relaxed);
        assert!(written <= 10, "200 requests took {written} writes");
    }

    /// A reply sent soon waits for more to join it, but not past the
    /// moment its thread waits for the client: the client, which waits
    /// for it before it asks again, gets it (a lost flush hangs here).
    #[test]
    fn replies_sent_soon_go_out_before_the_server_waits_for_the_next_request() {
        let (c, s) = UnixStream::pair().unwrap();
        let (client, server) = (conn(Role::Client, c), conn(Role::Server, s));
        let answering = std::thread::spawn(move || {
            let mut answered = 0;
            while let Some(o) = server.next_request() {
                server.reply_soon(o.stream, &o.header).unwrap();
                answered += 1;
            }
            server.shutdown_write();
            answered
        });
        // A lost reply fails the test rather than hanging it.
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let watched = client.clone();
        std::thread::spawn(move || {
            if finished
                .recv_timeout(std::time::Duration::from_secs(60))
                .is_err()
            {
                watched.close("no answer within a minute");
            }
        });
        for round in 0..50u32 {
            // One request, then a few at once: each waits for its answer.
            let asked: Vec<(u32, Vec<u8>)> = (0..=round % 4)
                .map(|i| {
                    let header = format!("round {round} request {i}").into_bytes();
                    (client.request(&header, None).unwrap(), header)
                })
                .collect();
            for (stream, header) in asked {
                let mut answer = Vec::new();
                while let Ok(Some(Chunk::Bytes(b))) = client.recv(stream) {
                    answer.extend(b);
                }
                assert_eq!(answer, header);
            }
        }
        let _ = done.send(());
        client.shutdown_write();
        assert_eq!(
            answering.join().unwrap(),
            (0..50).map(|r| r % 4 + 1).sum::<u32>()
        );
    }
}
