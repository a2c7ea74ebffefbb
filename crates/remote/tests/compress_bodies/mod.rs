//! Bodies of the compressed stream's fuzz target (`fuzz_targets/zstd_frames.rs`)
//! and of its property tests (`tests/compress_decoders.rs`).

use accord_proto::frame::read_frame;
use accord_remote::compress::{ZstdReader, ZstdWriter, DEFAULT_LEVEL};
use std::io::{self, Cursor, Write};
use std::sync::{Arc, Mutex};

/// Most frames a body reads: the input is at most a few MiB.
const MAX_FRAMES: usize = 4096;

/// Hostile bytes as a compressed connection's input, through the frame
/// reader as `Conn` reads them: every outcome is frames, a clean end or an
/// error; never a panic, never a frame above the frame limit.
pub fn frames(data: &[u8]) {
    let Ok(mut r) = ZstdReader::new(Box::new(Cursor::new(data.to_vec()))) else {
        return;
    };
    for _ in 0..MAX_FRAMES {
        match read_frame(&mut r) {
            Ok(Some(f)) => assert!(f.payload.len() <= accord_proto::frame::MAX_PAYLOAD),
            Ok(None) | Err(_) => return,
        }
    }
}

/// A transport end that keeps what was written.
#[derive(Clone, Default)]
struct Kept(Arc<Mutex<Vec<u8>>>);

impl Write for Kept {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The compressed stream of frames whose payloads are `seed` cut in
/// pieces, and the payloads.
fn stream_of(seed: &[u8]) -> (Vec<u8>, Vec<Vec<u8>>) {
    let kept = Kept::default();
    let mut w = ZstdWriter::new(Box::new(kept.clone()), DEFAULT_LEVEL).unwrap();
    let mut sent = Vec::new();
    for (i, chunk) in seed.chunks(97).enumerate() {
        let mut buf = Vec::new();
        let kind = accord_proto::frame::FrameKind::Data;
        accord_proto::frame::encode_frame(&mut buf, i as u32 + 1, kind, chunk);
        w.write_all(&buf).unwrap();
        w.flush().unwrap();
        sent.push(chunk.to_vec());
    }
    let wire = kept.0.lock().unwrap().clone();
    (wire, sent)
}

/// A real compressed stream with one byte changed at `at` to `to`:
/// decoding ends with frames within the limits, a clean end or an error,
/// never a panic.
pub fn edited(seed: &[u8], at: usize, to: u8) {
    let (mut wire, _) = stream_of(seed);
    if !wire.is_empty() {
        let i = at % wire.len();
        wire[i] = to;
    }
    let mut r = ZstdReader::new(Box::new(Cursor::new(wire))).unwrap();
    for _ in 0..MAX_FRAMES {
        match read_frame(&mut r) {
            Ok(Some(f)) => assert!(f.payload.len() <= accord_proto::frame::MAX_PAYLOAD),
            Ok(None) | Err(_) => return,
        }
    }
}

/// Unedited, the frames come back as sent.
pub fn round_trip(seed: &[u8]) {
    let (wire, sent) = stream_of(seed);
    let mut r = ZstdReader::new(Box::new(Cursor::new(wire))).unwrap();
    for want in sent {
        let f = read_frame(&mut r).unwrap().expect("a frame");
        assert_eq!(f.payload, want);
    }
    assert!(read_frame(&mut r).unwrap().is_none());
}
