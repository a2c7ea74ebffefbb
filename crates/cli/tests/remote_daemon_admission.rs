//! The TCP daemon under attack (issue 27): who gets a connection thread.
//! Peers without a key, however slow or many, cannot keep a client with
//! one out: the handshake and first request have one deadline (10 s from
//! arrival) however the bytes trickle; connections in their handshake have
//! their own pool, whose oldest are cut short for newcomers (one address
//! holds at most its share); and
//! "busy" is said only to a known key, after the handshake.

mod daemon_common;
mod mirror_common;

use accord_remote::{connect_daemon, dial_daemon, parse_remote, Halves, RootMode};
use daemon_common::*;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The daemon's deadline for the handshake and first request.
const DEADLINE: Duration = Duration::from_secs(10);
/// How late past it a closed connection may be seen on a loaded machine.
const MARGIN: Duration = Duration::from_secs(5);

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
    w.push_small_tree(&d, "through");
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
        w.push_small_tree(&d, "flooded");
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
    let out = w.push_small_tree_as(&w.client_key, &d, "busy");
    assert_refused(&out, "the server is busy (1 sessions at once");
    let stranger = w.path("stranger/key");
    keygen(&stranger);
    let out = w.push_small_tree_as(&stranger, &d, "busy");
    assert_refused(&out, "does not know your key");
    assert!(!stderr(&out).contains("server is busy"), "{}", stderr(&out));
    d.wait_lines("refused: the server is busy", 1, MARGIN);
    // The place comes back once the held session has ended.
    d.end_session(held, "held");
    w.push_small_tree(&d, "busy");
}

/// `--max-per-address 1`: a second session from the same address is
/// refused with its own reason, while the server has room.
#[test]
fn sessions_per_address_are_limited_when_asked() {
    let w = World::new();
    let d = w.start(&["--max-per-address", "1"]);
    let spec = parse_remote(&d.url("rw/held")).unwrap().unwrap();
    let held = connect_daemon(&spec, &w.options(), RootMode::Write).unwrap();
    let out = w.push_small_tree_as(&w.client_key, &d, "second");
    assert_refused(&out, "sessions from your address already");
    d.end_session(held, "held");
    w.push_small_tree(&d, "second");
}
