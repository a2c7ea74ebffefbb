//! Frames: the unit on the wire. Every request is a stream with its own
//! number; its frames and those of other streams interleave, so many
//! requests are in flight at once and a large transfer never holds up a
//! small reply.
//!
//! A frame is a header of 9 bytes (payload length as u32 little-endian,
//! stream number as u32 little-endian, kind) and the payload.

use crate::wire::ProtoError;
use std::io::{self, Read, Write};

/// Largest payload of one frame. A message that does not fit goes as a
/// stream of frames (a body).
pub const MAX_PAYLOAD: usize = 1 << 20;
/// Size of the chunks bulk data is cut into: small enough that a reply
/// waiting behind them waits for at most this much.
pub const CHUNK: usize = 64 << 10;
/// Bytes a sender may have in flight on one reply stream before the
/// receiver grants more credit.
pub const STREAM_WINDOW: u32 = 2 << 20;
/// Bytes of request bodies a client may have in flight on one connection
/// before the server grants more credit (stream 0).
pub const BODY_WINDOW: u32 = 16 << 20;
const HEADER: usize = 9;

/// What a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    /// Client: a new request; a body follows in DATA frames ending with END.
    Open = 1,
    /// Client: a new request complete in this frame.
    OpenFin = 2,
    /// A chunk of a body.
    Data = 3,
    /// The last chunk of a body (possibly empty).
    End = 4,
    /// More credit (u32 little-endian bytes) for a stream, or for request
    /// bodies as a whole on stream 0.
    Credit = 5,
    /// The request failed: an encoded error, and the stream is over.
    Error = 6,
    /// A chunk of a body that is all zeros: its length (u32 little-endian,
    /// at most `MAX_PAYLOAD`), so holes and zero runs cost no bandwidth.
    Zeros = 7,
}

impl FrameKind {
    fn from_u8(b: u8) -> Option<FrameKind> {
        Some(match b {
            1 => FrameKind::Open,
            2 => FrameKind::OpenFin,
            3 => FrameKind::Data,
            4 => FrameKind::End,
            5 => FrameKind::Credit,
            6 => FrameKind::Error,
            7 => FrameKind::Zeros,
            _ => return None,
        })
    }
}

/// One frame as read.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub stream: u32,
    pub kind: FrameKind,
    pub payload: Vec<u8>,
}

/// Why reading a frame failed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error(transparent)]
    Proto(ProtoError),
}

/// Decode a frame header: (payload length, stream, kind).
pub fn parse_header(h: &[u8; HEADER]) -> Result<(usize, u32, FrameKind), ProtoError> {
    let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
    let stream = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
    let kind = FrameKind::from_u8(h[8])
        .ok_or_else(|| ProtoError::Invalid(format!("unknown frame kind {}", h[8])))?;
    if len > MAX_PAYLOAD {
        return Err(ProtoError::TooLarge {
            what: "frame payload",
            len: len as u64,
            max: MAX_PAYLOAD as u64,
        });
    }
    if matches!(kind, FrameKind::Credit | FrameKind::Zeros) && len != 4 {
        return Err(ProtoError::Invalid(format!(
            "{kind:?} frame of {len} bytes"
        )));
    }
    Ok((len, stream, kind))
}

/// Read one frame; `Ok(None)` at a clean end of stream between frames.
pub fn read_frame(r: &mut dyn Read) -> Result<Option<Frame>, FrameError> {
    let mut h = [0u8; HEADER];
    let mut got = 0;
    while got < HEADER {
        match r.read(&mut h[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let (len, stream, kind) = parse_header(&h).map_err(FrameError::Proto)?;
    // The length is bounded above; the payload is read whole before use.
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok(Some(Frame {
        stream,
        kind,
        payload,
    }))
}

/// Encode one frame into `out` (the caller writes it whole, so frames of
/// several writers never mix).
pub fn encode_frame(out: &mut Vec<u8>, stream: u32, kind: FrameKind, payload: &[u8]) {
    assert!(
        payload.len() <= MAX_PAYLOAD,
        "frame payload above the limit"
    );
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&stream.to_le_bytes());
    out.push(kind as u8);
    out.extend_from_slice(payload);
}

/// Write one frame.
pub fn write_frame(
    w: &mut dyn Write,
    stream: u32,
    kind: FrameKind,
    payload: &[u8],
) -> io::Result<()> {
    let mut buf = Vec::with_capacity(HEADER + payload.len());
    encode_frame(&mut buf, stream, kind, payload);
    w.write_all(&buf)
}

/// The length a zeros frame stands for (1 to `MAX_PAYLOAD`).
pub fn parse_zeros(payload: &[u8]) -> Result<usize, ProtoError> {
    let n = parse_credit(payload)? as usize;
    if n == 0 || n > MAX_PAYLOAD {
        return Err(ProtoError::Invalid(format!("a zeros frame of {n} bytes")));
    }
    Ok(n)
}

/// Encode one chunk of a body: a zeros frame when it is all zeros (and
/// large enough to be worth it), else a data frame; END after it when
/// `last`.
pub fn encode_chunk(out: &mut Vec<u8>, stream: u32, chunk: &[u8], last: bool) {
    if chunk.len() >= 512 && chunk.iter().all(|b| *b == 0) {
        encode_frame(
            out,
            stream,
            FrameKind::Zeros,
            &(chunk.len() as u32).to_le_bytes(),
        );
        if last {
            encode_frame(out, stream, FrameKind::End, &[]);
        }
        return;
    }
    let kind = if last {
        FrameKind::End
    } else {
        FrameKind::Data
    };
    encode_frame(out, stream, kind, chunk);
}

/// The payload of a credit frame.
pub fn credit_payload(n: u32) -> [u8; 4] {
    n.to_le_bytes()
}

/// The increment a credit frame carries.
pub fn parse_credit(payload: &[u8]) -> Result<u32, ProtoError> {
    let b: [u8; 4] = payload
        .try_into()
        .map_err(|_| ProtoError::Invalid("credit frame of the wrong size".into()))?;
    Ok(u32::from_le_bytes(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let mut buf = Vec::new();
        encode_frame(&mut buf, 7, FrameKind::Data, b"abc");
        encode_frame(&mut buf, 9, FrameKind::End, b"");
        let mut r = &buf[..];
        let a = read_frame(&mut r).unwrap().unwrap();
        assert_eq!(
            (a.stream, a.kind, &a.payload[..]),
            (7, FrameKind::Data, &b"abc"[..])
        );
        let b = read_frame(&mut r).unwrap().unwrap();
        assert_eq!((b.stream, b.kind, b.payload.len()), (9, FrameKind::End, 0));
        assert!(read_frame(&mut r).unwrap().is_none());
    }

    #[test]
    fn a_huge_length_is_refused_before_any_allocation() {
        let mut h = [0u8; 9];
        h[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        h[8] = FrameKind::Data as u8;
        let mut r = &h[..];
        assert!(matches!(
            read_frame(&mut r),
            Err(FrameError::Proto(ProtoError::TooLarge { .. }))
        ));
    }

    #[test]
    fn an_unknown_kind_is_refused() {
        let h = [0u8, 0, 0, 0, 1, 0, 0, 0, 99];
        let mut r = &h[..];
        assert!(read_frame(&mut r).is_err());
    }
}
