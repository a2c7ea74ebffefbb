//! The bodies of the daemon transport's fuzz targets, shared word for word
//! by the cargo-fuzz targets (`crates/remote/fuzz`, which include this
//! file) and the property tests of the stable suite
//! (`tests/daemon_decoders.rs`). Each takes any bytes as they could come
//! from a hostile peer: the handshake, the encrypted stream after it, and
//! the root a client asks for. Decoding must end in a value or an error,
//! never a panic, and never yield bytes that were not sent.
#![allow(dead_code)]

use accord_remote::keys::KeyPair;
use accord_remote::noise::{self, Activity, NoiseReader, NoiseWriter, Session};
use accord_remote::split_module;
use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::path::{Component, Path};
use std::sync::{Arc, Mutex};

/// A peer that has already sent `input`; what we answer is kept.
struct Scripted<'a> {
    input: &'a [u8],
    output: Vec<u8>,
}

impl Read for Scripted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.input.read(buf)
    }
}

impl Write for Scripted<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A fixed key, so that a finding replays the same way (the handshake's
/// ephemeral keys are still random).
fn key(seed: u8) -> KeyPair {
    KeyPair::from_private([seed; 32])
}

/// Most a handshake side may send in answer: two Noise messages, each
/// with its two-byte length.
const MAX_HANDSHAKE_ANSWER: usize = 2 * (2 + 65535);

/// The daemon's side of the handshake against any bytes. Without the
/// keys of a real client nothing can complete it.
pub fn handshake_server(data: &[u8]) {
    let mut peer = Scripted {
        input: data,
        output: Vec::new(),
    };
    let result = noise::server(&mut peer, &key(1), "");
    assert!(result.is_err(), "a handshake completed from bytes alone");
    assert!(peer.output.len() <= MAX_HANDSHAKE_ANSWER);
}

/// The client's side against any bytes from a would-be server.
pub fn handshake_client(data: &[u8]) {
    let mut peer = Scripted {
        input: data,
        output: Vec::new(),
    };
    let result = noise::client(&mut peer, &key(2), |_| Ok(()));
    assert!(result.is_err(), "a handshake completed from bytes alone");
    assert!(peer.output.len() <= MAX_HANDSHAKE_ANSWER);
}

thread_local! {
    /// A real session (client half, server half), made once per thread
    /// over a socket pair: each reader or writer made from it starts at
    /// nonce 0, so every input replays the same way.
    static SESSION: RefCell<Option<(Session, Session)>> = const { RefCell::new(None) };
}

fn with_session<T>(f: impl FnOnce(&Session, &Session) -> T) -> T {
    SESSION.with(|cell| {
        let mut cell = cell.borrow_mut();
        let (client, server) = cell.get_or_insert_with(|| {
            let (mut a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
            let server = std::thread::spawn(move || noise::server(&mut b, &key(3), "").unwrap());
            let client = noise::client(&mut a, &key(4), |_| Ok(())).unwrap();
            (client, server.join().unwrap())
        });
        f(client, server)
    })
}

/// A writer whose output can be taken back after the writer is dropped.
#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Read everything the server's reader yields from `wire`: what it
/// decrypted, and whether it ended in an error.
fn read_back(server: &Session, wire: Vec<u8>) -> (Vec<u8>, bool) {
    let mut reader = NoiseReader::new(
        Box::new(io::Cursor::new(wire)),
        server,
        None,
        Activity::new(),
    );
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return (got, false),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(_) => return (got, true),
        }
    }
}

/// The encrypted stream after the handshake. The first byte chooses:
/// even, the rest is raw bytes off the wire (nothing may decrypt from
/// them); odd, the rest is a plaintext that a real client sends, in
/// messages of a size the first byte also picks, and then the wire is
/// edited (a bit flipped, cut short, a message replayed, two swapped, one
/// dropped). Whatever the edit, what the reader yields is a prefix of what
/// was sent, and any edit but a cut at a message boundary is an error.
pub fn transport(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    with_session(|client, server| {
        if pick & 1 == 0 {
            let (got, _) = read_back(server, rest.to_vec());
            assert!(got.is_empty(), "bytes decrypted from a forged stream");
            return;
        }
        let out = Shared::default();
        {
            let mut writer = NoiseWriter::new(Box::new(out.clone()), client, Activity::new());
            let step = 1 + (pick as usize >> 1) * 257;
            for piece in rest.chunks(step) {
                writer.write_all(piece).unwrap();
                writer.flush().unwrap();
            }
        }
        let wire = std::mem::take(&mut *out.0.lock().unwrap());
        let messages = split_messages(&wire);
        let edit = (pick >> 1) % 6;
        // A position that depends on the input, so the fuzzer steers it.
        let at = rest
            .iter()
            .fold(7usize, |h, &b| h.wrapping_mul(31).wrapping_add(b as usize));
        let (edited, must_fail) = match (edit, messages.len()) {
            (_, 0) | (0, _) => (wire.clone(), false),
            (1, _) => {
                let mut w = wire.clone();
                let bit = at % (w.len() * 8);
                w[bit / 8] ^= 1 << (bit % 8);
                (w, true)
            }
            (2, _) => {
                let cut = at % wire.len();
                let on_boundary = boundaries(&messages).contains(&cut);
                (wire[..cut].to_vec(), !on_boundary)
            }
            (3, _) => {
                let i = at % messages.len();
                let mut m = messages.clone();
                m.insert(i + 1, messages[i].clone());
                (m.concat(), true)
            }
            (4, n) if n >= 2 => {
                let i = at % (n - 1);
                let mut m = messages.clone();
                m.swap(i, i + 1);
                (m.concat(), true)
            }
            (_, n) => {
                let i = at % n;
                let mut m = messages.clone();
                m.remove(i);
                // Dropping the last message is a cut at a boundary.
                (m.concat(), i + 1 < n)
            }
        };
        let (got, failed) = read_back(server, edited);
        assert!(
            rest.starts_with(&got),
            "the reader yielded bytes that were not sent"
        );
        if must_fail {
            assert!(failed, "an edited stream was read without an error");
        }
        if edit == 0 || messages.is_empty() {
            assert!(!failed && got == rest, "an honest stream did not read back");
        }
    })
}

/// Our own framing of what the writer sent: each message with its length.
fn split_messages(mut wire: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while wire.len() >= 2 {
        let len = 2 + u16::from_be_bytes([wire[0], wire[1]]) as usize;
        out.push(wire[..len].to_vec());
        wire = &wire[len..];
    }
    out
}

/// Offsets where a message ends (and the next begins).
fn boundaries(messages: &[Vec<u8>]) -> Vec<usize> {
    let mut at = 0;
    let mut out = vec![0];
    for m in messages {
        at += m.len();
        out.push(at);
    }
    out
}

/// The root a client asks of a daemon, split into its module and the path
/// inside it: the path inside can never climb out or be absolute.
pub fn module_root(data: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    if let Ok((name, rest)) = split_module(data) {
        assert!(!name.is_empty() && !name.contains('/'));
        let inside = Path::new(std::ffi::OsStr::from_bytes(&rest));
        assert!(inside
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir)));
    }
}
