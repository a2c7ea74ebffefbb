//! Issue 11, section 3, item 5: strong-sum length beyond the digest, block
//! length 0, huge block or entry counts, huge frame lengths: the session
//! ends with an error (or the one request fails), no large allocation, no
//! panic.
//!
//! This test binary counts allocations: its global allocator remembers the
//! largest single request since the last reset, and a panic hook counts
//! panics in any thread (the server's, the connection readers', the
//! engine's). The tests run one at a time, so what is counted is theirs.

mod hostile_common;

use accord_engine::Replica;
use accord_model::{Expect, Kind};
use accord_proto::frame::FrameKind;
use accord_proto::{Enc, Request, RootMode};
use accord_remote::ServerConfig;
use hostile_common::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::Duration;

struct Counting;

static LARGEST: AtomicUsize = AtomicUsize::new(0);
static PANICS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LARGEST.fetch_max(l.size(), Ordering::Relaxed);
        System.alloc_zeroed(l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LARGEST.fetch_max(new, Ordering::Relaxed);
        System.realloc(p, l, new)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The largest allocation a hostile exchange may cause: a frame is at most
/// 1 MiB, and the bodies sent here are small, whatever they claim.
const LIMIT: usize = 16 << 20;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Hold the test lock, count panics, and start counting allocations.
fn begin() -> MutexGuard<'static, ()> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::Relaxed);
            default(info);
        }));
    });
    let g = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    LARGEST.store(0, Ordering::Relaxed);
    g
}

/// Fail if anything panicked since `begin` or an allocation was large.
fn end(what: &str, panics_before: usize) {
    let largest = LARGEST.load(Ordering::Relaxed);
    assert!(
        largest <= LIMIT,
        "{what}: an allocation of {largest} bytes (limit {LIMIT})"
    );
    assert_eq!(
        PANICS.load(Ordering::Relaxed),
        panics_before,
        "{what}: something panicked"
    );
}

/// A frame header: payload length, stream, kind.
fn header(len: u32, stream: u32, kind: u8) -> Vec<u8> {
    let mut h = len.to_le_bytes().to_vec();
    h.extend_from_slice(&stream.to_le_bytes());
    h.push(kind);
    h
}

// ---------------------------------------------------------------------
// A hostile client.
// ---------------------------------------------------------------------

/// Send `bytes` on a fresh session (after the handshake): the session must
/// end with an error.
fn session_ends(what: &str, mode: RootMode, bytes: &[u8]) {
    let _g = begin();
    let p = PANICS.load(Ordering::Relaxed);
    let sb = Sandbox::new();
    let (mut c, server) = RawClient::start(&sb.root, mode);
    c.raw(bytes);
    let why = server.ended_with_error();
    assert!(!why.is_empty(), "{what}");
    c.hang_up();
    end(what, p);
}

#[test]
fn huge_or_malformed_frames_from_a_client_end_the_session() {
    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("a frame of 4 GiB", header(u32::MAX, 1, 2)),
        ("a frame of 1 MiB + 1", header((1 << 20) + 1, 1, 2)),
        ("an unknown kind", header(0, 1, 99)),
        ("a kind of 0", header(0, 1, 0)),
        ("a credit frame of 5 bytes", {
            let mut b = header(5, 0, 5);
            b.extend_from_slice(&[1; 5]);
            b
        }),
        ("a zeros frame of no bytes", header(0, 1, 7)),
    ];
    for n in [0u32, (1 << 20) + 1, u32::MAX] {
        let mut b = raw_open(1, &raw::receive(b"", b"f", None));
        b.extend_from_slice(&header(4, 1, 7));
        b.extend_from_slice(&n.to_le_bytes());
        cases.push(("a zeros frame out of bounds", b));
    }
    // An OPEN whose header claims more than it holds.
    let mut b = header(8, 1, 2);
    b.extend_from_slice(&[20, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]);
    cases.push(("a request that claims 2^48 bytes of path", b));
    // Streams out of order, and reused.
    let mut b = raw_open(5, &raw::stat(b"", b"x"));
    b.extend_from_slice(&raw_open(3, &raw::stat(b"", b"x")));
    cases.push(("a stream number going down", b));
    let mut b = raw_open(5, &raw::stat(b"", b"x"));
    b.extend_from_slice(&raw_open(5, &raw::stat(b"", b"x")));
    cases.push(("a stream number reused", b));
    for (what, bytes) in cases {
        session_ends(what, RootMode::Write, &bytes);
    }
}

/// An OPEN_FIN frame for `header` on `stream`.
fn raw_open(stream: u32, header_bytes: &[u8]) -> Vec<u8> {
    let mut b = header(header_bytes.len() as u32, stream, 2);
    b.extend_from_slice(header_bytes);
    b
}

#[test]
fn huge_counts_in_requests_end_the_session() {
    let big = |e: &mut Enc| {
        e.varint(1 << 40);
    };
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    // A listing with 2^40 patterns.
    let mut e = Enc::new();
    e.u8(2).bytes(b"");
    big(&mut e);
    cases.push(("2^40 exclude patterns", e.finish()));
    // A pattern of 2^40 bytes.
    let mut e = Enc::new();
    e.u8(2).bytes(b"").varint(1);
    big(&mut e);
    cases.push(("a pattern of 2^40 bytes", e.finish()));
    // A make-node entry with 2^40 extended attributes.
    let mut e = Enc::new();
    e.u8(14).bytes(b"").bytes(b"n");
    e.bytes(b"n").u8(2).varint(1); // path, kind symlink, size
    e.varint(0o644).varint(0).varint(0).svarint(0).varint(0); // mode, uid, gid, mtime
    e.u8(1);
    big(&mut e);
    cases.push(("2^40 extended attributes", e.finish()));
    // A state name of 2^62 bytes.
    let mut e = Enc::new();
    e.u8(6).varint(1 << 62);
    cases.push(("a state name of 2^62 bytes", e.finish()));
    // A varint of 11 bytes.
    let mut e = Enc::new();
    e.u8(8).raw(&[0xff; 11]);
    cases.push(("a varint that never ends", e.finish()));
    for (what, h) in cases {
        let mut b = header(h.len() as u32, 1, 2);
        b.extend_from_slice(&h);
        session_ends(what, RootMode::Write, &b);
    }
}

#[test]
fn request_bodies_beyond_the_window_end_the_session() {
    let _g = begin();
    let p = PANICS.load(Ordering::Relaxed);
    let sb = Sandbox::new();
    let (mut c, server) = RawClient::start(&sb.root, RootMode::Write);
    // The first body never ends: the server waits on it, and the second
    // body's bytes pile up against the connection's window.
    c.frame(1, FrameKind::Open, &raw::receive(b"", b"first", None));
    c.frame(1, FrameKind::Data, b"a start");
    c.frame(2, FrameKind::Open, &raw::receive(b"", b"second", None));
    let chunk = vec![7u8; 1 << 20];
    let sock = c.sock.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let mut s = sock;
        for _ in 0..20 {
            if accord_proto::frame::write_frame(&mut s, 2, FrameKind::Data, &chunk).is_err() {
                break;
            }
        }
    });
    let why = server.ended_with_error();
    assert!(why.contains("window"), "{why}");
    c.hang_up();
    sender.join().unwrap();
    end("bodies beyond the window", p);
}

#[test]
fn a_handshake_of_4_gib_is_refused_before_it_is_read() {
    let _g = begin();
    let p = PANICS.load(Ordering::Relaxed);
    let (mut sock, server) = spawn_server(ServerConfig::default());
    sock.write_all(accord_proto::hello::MAGIC).unwrap();
    sock.write_all(&u32::MAX.to_le_bytes()).unwrap();
    let why = server.ended_with_error();
    assert!(why.contains("handshake"), "{why}");
    end("a handshake of 4 GiB", p);
}

// ---------------------------------------------------------------------
// Hostile signatures and deltas, sent to a real server.
// ---------------------------------------------------------------------

/// A signature header with these fields, and `body` bytes of blocks.
fn signature(file_len: u64, block_len: u64, strong_len: u8, body: usize) -> Vec<u8> {
    let mut e = Enc::new();
    e.raw(b"ACSG")
        .u8(1)
        .varint(file_len)
        .varint(block_len)
        .u8(strong_len);
    e.raw(&[0x5a; 32]).raw(&vec![0x11; body]);
    e.finish()
}

/// Hostile signatures, each with why.
fn bad_signatures() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        // Two blocks of 4 + 64 bytes: consistent but for the sum length.
        ("strong sums of 64 bytes", signature(1024, 512, 64, 2 * 68)),
        (
            "strong sums of 255 bytes",
            signature(1024, 512, 255, 2 * 259),
        ),
        ("strong sums of 0 bytes", signature(1024, 512, 0, 2 * 4)),
        ("a block length of 0", signature(1024, 0, 16, 0)),
        (
            "a block length of 2^32 - 1",
            signature(1024, u32::MAX as u64, 16, 20),
        ),
        ("a block length of 2^40", signature(1024, 1 << 40, 16, 20)),
        ("2^60 blocks claimed", signature(1 << 60, 16, 16, 20 * 4)),
        ("a file of 2^64 - 1 bytes", signature(u64::MAX, 16, 16, 20)),
    ]
}

/// A delta header with these fields, `count` commands claimed and `tail`.
fn delta_bytes(
    layout: u8,
    old_len: u64,
    new_len: u64,
    scratch: u64,
    count: u64,
    tail: &[u8],
) -> Vec<u8> {
    let mut e = Enc::new();
    e.raw(b"ACDL")
        .u8(1)
        .u8(layout)
        .varint(old_len)
        .varint(new_len);
    e.raw(&[0; 32]).varint(scratch).varint(count).raw(tail);
    e.finish()
}

/// Hostile deltas against a basis of `old_len` bytes.
fn bad_deltas(old_len: u64) -> Vec<(&'static str, Vec<u8>)> {
    vec![
        (
            "2^40 commands claimed",
            delta_bytes(0, old_len, 10, 0, 1 << 40, &[0; 16]),
        ),
        (
            "a result of 2^62 bytes",
            delta_bytes(0, old_len, 1 << 62, 0, 0, &[]),
        ),
        (
            "a result of 2^62 bytes and one command",
            delta_bytes(
                0,
                old_len,
                1 << 62,
                0,
                1,
                &[0, 0, 0xff, 0xff, 0xff, 0xff, 0x3f],
            ),
        ),
        (
            "2^62 bytes of scratch",
            delta_bytes(1, old_len, old_len, 1 << 62, 0, &[]),
        ),
        (
            "scratch of 2^64 - 1",
            delta_bytes(1, old_len, 0, u64::MAX, 0, &[]),
        ),
    ]
}

#[test]
fn hostile_signatures_sent_to_a_server_fail_without_a_large_allocation() {
    let sb = Sandbox::new();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(sb.root.join("f"), &data).unwrap();
    let f = expect_of(&sb.root.join("f"));
    for (what, sig) in bad_signatures() {
        let _g = begin();
        let p = PANICS.load(Ordering::Relaxed);
        let (mut c, server) = RawClient::start(&sb.root, RootMode::Read);
        let out = c.call_body(&raw::make_delta(b"", b"f", &f), &sig);
        assert!(out.is_refusal(), "{what}: {out:?}");
        // The session goes on (the request failed alone) or ends: either
        // way a stat still answers or the session is over.
        match c.call(&raw::stat(b"", b"f")) {
            Outcome::Reply(_) | Outcome::Closed(_) => {}
            other => panic!("{what}: after it, {other:?}"),
        }
        c.hang_up();
        let _ = server.finish();
        end(what, p);
    }
}

#[test]
fn hostile_deltas_sent_to_a_server_fail_without_a_large_allocation() {
    let sb = Sandbox::new();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(sb.root.join("f"), &data).unwrap();
    let f = expect_of(&sb.root.join("f"));
    for (what, d) in bad_deltas(data.len() as u64) {
        let _g = begin();
        let p = PANICS.load(Ordering::Relaxed);
        let (mut c, server) = RawClient::start(&sb.root, RootMode::Write);
        let out = c.call_body(&raw::receive(b"", b"f", Some(&f)), &d);
        assert!(out.is_refusal(), "receive, {what}: {out:?}");
        assert_eq!(names(&sb.root), ["f"], "{what}: a temp was left");
        assert_eq!(std::fs::read(sb.root.join("f")).unwrap(), data, "{what}");
        // The file may be moved to a recovery name here: see
        // `an_in_place_delta_refused_before_writing_leaves_the_file`.
        let out = c.call_body(&raw::patch_in_place(b"", b"f", &f), &d);
        assert!(out.is_refusal(), "patch in place, {what}: {out:?}");
        c.hang_up();
        let _ = server.finish();
        end(what, p);
        restore(&sb.root, &data);
    }
}

/// Put `f` back (under its name, alone) after a test moved it aside.
fn restore(root: &std::path::Path, data: &[u8]) {
    for n in names(root) {
        std::fs::remove_file(root.join(n)).unwrap();
    }
    std::fs::write(root.join("f"), data).unwrap();
}

/// Issue 11: an in-place delta that the receiver refuses before writing
/// anything (the sequential layout, a basis of another length, more scratch
/// than the receiver grants) must leave the file as it was, under its own
/// name. `LocalDir::patch_in_place` (crates/engine/src/local.rs) used to run
/// every failure of `accord_delta::patch_in_place` through
/// `guarded_in_place`, which moved the file to a recovery name even when
/// nothing had been written: a client (hostile, or honest with a larger
/// scratch than the server's) made the file vanish from its name. Those
/// refusals now come before the guard.
#[test]
fn an_in_place_delta_refused_before_writing_leaves_the_file() {
    let _g = begin();
    let sb = Sandbox::new();
    let mut moved = Vec::new();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let len = data.len() as u64;
    for (what, d, made) in [
        (
            "more scratch than granted",
            delta_bytes(1, len, 0, u64::MAX, 0, &[]),
            false,
        ),
        (
            "the sequential layout",
            delta_bytes(0, len, 0, 0, 0, &[]),
            false,
        ),
        (
            "a basis of another length",
            delta_bytes(1, 10, 0, 0, 0, &[]),
            true,
        ),
    ] {
        restore(&sb.root, &data);
        let f = if made {
            Expect::Made(Kind::File)
        } else {
            expect_of(&sb.root.join("f"))
        };
        let (mut c, server) = RawClient::start(&sb.root, RootMode::Write);
        let out = c.call_body(&raw::patch_in_place(b"", b"f", &f), &d);
        assert!(out.is_refusal(), "{what}: {out:?}");
        c.hang_up();
        server.finish().unwrap();
        if names(&sb.root) != ["f"] {
            moved.push(what);
        } else {
            assert_eq!(std::fs::read(sb.root.join("f")).unwrap(), data, "{what}");
        }
    }
    assert!(
        moved.is_empty(),
        "the file was moved aside after: {moved:?}"
    );
}

// ---------------------------------------------------------------------
// A hostile server.
// ---------------------------------------------------------------------

/// Run `f` in a thread; fail if it takes longer than the suite's wait.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(WAIT)
        .unwrap_or_else(|_| panic!("{what}: the client hung"))
}

#[test]
fn a_welcome_of_4_gib_is_refused_before_it_is_read() {
    let _g = begin();
    let p = PANICS.load(Ordering::Relaxed);
    let (ours, theirs) = UnixStream::pair().unwrap();
    let fake = std::thread::spawn(move || {
        let mut r = ours.try_clone().unwrap();
        let _ = accord_proto::Hello::read(&mut r);
        let mut w = ours;
        let _ = w.write_all(accord_proto::hello::MAGIC);
        let _ = w.write_all(&u32::MAX.to_le_bytes());
        // Hold the connection open a moment: the client must not wait for
        // 4 GiB.
        std::thread::sleep(Duration::from_millis(500));
    });
    let r = theirs.try_clone().unwrap();
    let res = within("a welcome of 4 GiB", move || {
        accord_remote::RemoteReplica::connect(
            Box::new(r),
            Box::new(theirs),
            b"/x",
            RootMode::Read,
            None,
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
    });
    assert!(res.is_err());
    fake.join().unwrap();
    end("a welcome of 4 GiB", p);
}

/// A fake server that answers `Lock` with `bytes`, raw; the client must
/// close the connection, with a reason containing `why`.
fn client_closes(what: &str, bytes: Vec<u8>, why: &str) {
    let _g = begin();
    let p = PANICS.load(Ordering::Relaxed);
    let (replica, fake) = hostile_server(RootMode::Write, move |a| match a.request {
        // Raw frames name the stream themselves: put the lock's in.
        Request::Lock => Answer::Raw(patch_streams(bytes.clone(), a.stream)),
        _ => Answer::Nothing,
    });
    let replica = within(what, move || {
        for _ in 0..500 {
            if replica.closed().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        replica
    });
    let closed = replica.closed();
    assert!(
        closed.as_deref().is_some_and(|c| c.contains(why)),
        "{what}: the client did not close the connection for {why:?} ({closed:?})"
    );
    // The lock's reply was garbage or cut off: it may not say "held" (a
    // reply complete before the violation may still say "not held").
    let locked = within(what, move || {
        let r = matches!(replica.try_lock(), Ok(true));
        drop(replica);
        r
    });
    assert!(!locked, "{what}: the lock was taken as held");
    let _ = fake.join();
    end(what, p);
}

/// Frames built for stream `u32::MAX` are put on `stream`.
fn patch_streams(mut b: Vec<u8>, stream: u32) -> Vec<u8> {
    let mut at = 0;
    while at + 9 <= b.len() {
        let len = u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize;
        if b[at + 4..at + 8] == u32::MAX.to_le_bytes() {
            b[at + 4..at + 8].copy_from_slice(&stream.to_le_bytes());
        }
        if len > 1 << 20 {
            break;
        }
        at += 9 + len;
    }
    b
}

#[test]
fn huge_or_malformed_frames_from_a_server_end_the_session() {
    let s = u32::MAX;
    let mut beyond = Vec::new();
    for _ in 0..40 {
        accord_proto::frame::encode_frame(&mut beyond, s, FrameKind::Data, &[1; 64 << 10]);
    }
    let mut zeros = Vec::new();
    for _ in 0..3 {
        accord_proto::frame::encode_frame(
            &mut zeros,
            s,
            FrameKind::Zeros,
            &(1u32 << 20).to_le_bytes(),
        );
    }
    let mut late = Vec::new();
    // END, then more data on the same stream (the reply is not read yet).
    accord_proto::frame::encode_frame(&mut late, s, FrameKind::End, b"");
    accord_proto::frame::encode_frame(&mut late, s, FrameKind::Data, b"late");
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "a frame of 4 GiB",
            header(u32::MAX, s, 3),
            "above the limit",
        ),
        (
            "a frame of 1 MiB + 1",
            header((1 << 20) + 1, s, 3),
            "above the limit",
        ),
        ("an unknown kind", header(0, s, 42), "unknown frame kind"),
        ("an OPEN from a server", header(0, s, 1), "from a server"),
        ("a reply beyond its window", beyond, "window"),
        ("zeros beyond the window", zeros, "window"),
        ("data after the end", late, "after the end"),
    ];
    for (what, bytes, why) in cases {
        client_closes(what, bytes, why);
    }
}

/// A listing reply that claims far more than it holds.
#[test]
fn huge_counts_in_a_listing_end_the_session() {
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut e = Enc::new();
    e.u8(1).varint(1 << 40);
    cases.push(("2^40 entries", e.finish()));
    let mut e = Enc::new();
    e.u8(1).varint(1).varint(1 << 62);
    cases.push(("a path of 2^62 bytes", e.finish()));
    let mut e = Enc::new();
    e.u8(1)
        .varint(0)
        .varint(0)
        .varint(0)
        .varint(0)
        .varint(1 << 40);
    cases.push(("2^40 failures", e.finish()));
    let mut e = Enc::new();
    e.u8(0).varint(0).bool(false).u8(1).varint(1 << 40);
    cases.push(("an ignore file of 2^40 bytes", e.finish()));
    // The root's own entry, with 2^40 extended attributes.
    let mut entry = Enc::new();
    entry.varint(0).u8(1).varint(0); // root path, directory, size
    entry.varint(0o755).varint(0).varint(0).svarint(0).varint(0); // props
    entry.u8(1).varint(1 << 40);
    let mut e = Enc::new();
    e.u8(1).varint(1).raw(&entry.finish());
    cases.push(("2^40 extended attributes", e.finish()));
    for (what, reply) in cases {
        let _g = begin();
        let p = PANICS.load(Ordering::Relaxed);
        let sb = Sandbox::new();
        let mut listings = HashMap::new();
        listings.insert(Vec::new(), reply);
        let (src, fake) = hostile_server(RootMode::Read, fake_source(listings, HashMap::new()));
        let dst = sb.root.join("dst");
        let report = within(what, move || {
            let r = mirror_into_local(&src, &dst);
            let closed = src.closed();
            (r.fatal.is_some() || !r.errors.is_empty(), closed)
        });
        assert!(report.0, "{what}: the run reported nothing");
        assert!(
            report.1.is_some_and(|c| c.contains("listing")),
            "{what}: the session was not ended over the listing"
        );
        let _ = fake.join();
        end(what, p);
    }
}

/// A push into a fake destination whose signature of the old file is
/// hostile: that file fails, nothing allocates much, nothing panics.
#[test]
fn hostile_signatures_from_a_server_fail_the_file() {
    for (what, sig) in bad_signatures() {
        let _g = begin();
        let p = PANICS.load(Ordering::Relaxed);
        let sb = Sandbox::new();
        let src = sb.root.join("src");
        std::fs::create_dir(&src).unwrap();
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 251) as u8).collect();
        std::fs::write(src.join("f"), &data).unwrap();
        let old = file_at("f", &data[..150_000]);
        let listing = listing_reply(&[root_entry(), old], &[]);
        let (dst, fake) = hostile_server(RootMode::Write, move |a| match &a.request {
            Request::Lock => Answer::Reply(vec![1]),
            Request::ListDir { .. } => Answer::Reply(listing.clone()),
            Request::ReadState { .. } => Answer::Reply(vec![0]),
            Request::Signature { .. } => Answer::Reply(sig.clone()),
            Request::Receive { .. } => Answer::Reply(b".accord-tmp-f.1".to_vec()),
            _ => Answer::Reply(Vec::new()),
        });
        let (report, dst) = within(what, move || (mirror_from_local(&src, &dst), dst));
        drop(dst);
        let seen = fake.join().unwrap();
        assert!(
            seen.iter().any(|r| matches!(r, Request::Signature { .. })),
            "{what}: the signature was never asked for"
        );
        assert!(report.fatal.is_none(), "{what}: {:?}", report.fatal);
        assert!(!report.errors.is_empty(), "{what}: the file did not fail");
        end(what, p);
    }
}

/// A pull from a fake source whose delta is hostile: the destination file
/// keeps its old contents, nothing allocates much, nothing panics.
#[test]
fn hostile_deltas_from_a_server_fail_the_file() {
    let old: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut cases = bad_deltas(old.len() as u64);
    cases.push((
        "a delta against another length",
        delta_bytes(0, 12345, 10, 0, 0, &[]),
    ));
    for (what, d) in cases {
        let _g = begin();
        let p = PANICS.load(Ordering::Relaxed);
        let sb = Sandbox::new();
        let dst = sb.root.join("dst");
        std::fs::create_dir(&dst).unwrap();
        std::fs::write(dst.join("f"), &old).unwrap();
        let new = file_at("f", &[1u8; 210_000]);
        let listing = listing_reply(&[root_entry(), new], &[]);
        let mut reply = Enc::new();
        reply.varint(u64::MAX).varint(u64::MAX).raw(&d);
        let reply = reply.finish();
        let (src, fake) = hostile_server(RootMode::Read, move |a| match &a.request {
            Request::ListDir { .. } => Answer::Reply(listing.clone()),
            Request::ReadState { .. } => Answer::Reply(vec![0]),
            Request::MakeDelta { .. } => Answer::Reply(reply.clone()),
            Request::OpenRead { .. } => Answer::Error(refusal("no")),
            _ => Answer::Reply(Vec::new()),
        });
        let dst2 = dst.clone();
        let (report, src) = within(what, move || (mirror_into_local(&src, &dst2), src));
        drop(src);
        let seen = fake.join().unwrap();
        assert!(
            seen.iter().any(|r| matches!(r, Request::MakeDelta { .. })),
            "{what}: no delta was asked for"
        );
        assert!(!report.errors.is_empty(), "{what}: the file did not fail");
        assert_eq!(std::fs::read(dst.join("f")).unwrap(), old, "{what}");
        end(what, p);
    }
}

#[test]
fn the_counting_allocator_sees_a_large_allocation() {
    let _g = begin();
    let v: Vec<u8> = Vec::with_capacity(LIMIT + 1);
    assert!(LARGEST.load(Ordering::Relaxed) > LIMIT);
    drop(v);
    LARGEST.store(0, Ordering::Relaxed);
}
