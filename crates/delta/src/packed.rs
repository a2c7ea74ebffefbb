//! Literal data compressed against what both sides hold.
//!
//! The sender of a delta has the new file; the receiver has the old one.
//! Besides the literals, the only bytes both hold are the matched ones: the
//! target bytes that COPY commands rebuild from the old file. So the
//! literals are zstd frames whose dictionary (a zstd "reference prefix") is
//! exactly those bytes.
//!
//! To keep both sides' memory bounded whatever the file's size, the target
//! is cut into segments of [`SEGMENT`] bytes. A segment's literals (the ADD
//! bytes of the ADDs that start in it, in target order; no ADD may cross a
//! segment's end) are one frame, and its dictionary is the segment's other
//! bytes (what COPYs put there), in target order. A frame that would not be
//! smaller than its literals is stored raw instead.
//!
//! Decoding a segment needs the prefix (at most one segment) and the
//! literals (the frame's declared content size, which must equal the sum of
//! the segment's ADD lengths, checked at parse): at most twice [`SEGMENT`]
//! bytes, never more than the commands declared.

use crate::wire::{put_varint, Reader};
use crate::{Command, DeltaError};
use rayon::prelude::*;
use std::io::{self, Write};
use zstd::zstd_safe::{self, CCtx, CParameter, DCtx, DParameter};

/// log2 of [`SEGMENT`]: also the largest zstd window a frame may use.
pub const SEGMENT_LOG: u32 = 24;
/// Target bytes per segment (16 MiB).
pub const SEGMENT: u64 = 1 << SEGMENT_LOG;

/// How a delta's literal bytes are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LiteralCoding {
    /// As they are (the in-place layout is always stored so).
    #[default]
    Raw,
    /// zstd at this level, with the matched bytes as dictionary.
    Zstd { level: i32 },
}

/// Most memory a zstd context of ours takes at `level`, with room to
/// spare (measured with a whole segment: 2 MiB at level 6, 10 MiB at 9,
/// 40 MiB at 12, 64 MiB at 15, 81 MiB at 19).
fn cctx_memory(level: i32) -> u64 {
    match level {
        ..=6 => 4 << 20,
        7..=9 => 16 << 20,
        10..=12 => 48 << 20,
        _ => 96 << 20,
    }
}

/// A bound on the memory [`crate::make_delta_with`] takes besides the
/// delta itself when it compresses the literals of a file of `new_len`
/// bytes at `level`: per segment compressed at once, its bytes split in
/// two, the frame and a zstd context.
pub fn pack_memory(new_len: u64, level: i32) -> u64 {
    let segments = new_len.div_ceil(SEGMENT).max(1);
    let at_once = segments.min(rayon::current_num_threads().max(1) as u64);
    at_once * (2 * new_len.min(SEGMENT) + cctx_memory(level))
}

/// Segment kinds on the wire.
const RAW: u8 = 0;
const ZSTD: u8 = 1;

/// A segment whose literals are a zstd frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PackedSegment {
    /// Target offset of the segment's first byte.
    pub start: u64,
    /// Sum of the segment's ADD lengths: the frame's content size.
    pub lit_len: u64,
    /// The frame, as an offset and length in the delta's bytes.
    pub frame: (usize, usize),
}

/// The ADDs of one segment: its index and the commands' positions.
struct Group {
    index: u64,
    adds: Vec<usize>,
    lit_len: u64,
}

/// Groups the ADD commands (target order) by segment; refuses an ADD that
/// crosses a segment's end.
fn groups(commands: &[Command]) -> Result<Vec<Group>, String> {
    let mut out: Vec<Group> = Vec::new();
    for (i, c) in commands.iter().enumerate() {
        let Command::Add { dst, len, .. } = *c else {
            continue;
        };
        let index = dst >> SEGMENT_LOG;
        if len > 0 && (dst + len - 1) >> SEGMENT_LOG != index {
            return Err(format!(
                "command {i}: literal run {dst}+{len} crosses a segment end"
            ));
        }
        match out.last_mut() {
            Some(g) if g.index == index => {
                g.adds.push(i);
                g.lit_len += len;
            }
            Some(g) if g.index > index => {
                return Err(format!("command {i}: literal runs out of target order"));
            }
            _ => out.push(Group {
                index,
                adds: vec![i],
                lit_len: len,
            }),
        }
    }
    Ok(out)
}

/// Writes the literal section of a sequential delta whose ADDs do not
/// cross segment ends (`make_delta` splits them); returns the bytes written.
/// Segments are compressed in parallel, as many at a time as there are
/// threads (so memory stays a few segments' worth).
pub(crate) fn write_segments(
    commands: &[Command],
    new: &[u8],
    level: i32,
    out: &mut impl Write,
) -> io::Result<u64> {
    let groups = groups(commands).map_err(io::Error::other)?;
    let mut written = 0;
    for batch in groups.chunks(rayon::current_num_threads().max(1)) {
        let encoded: Vec<io::Result<Vec<u8>>> = batch
            .par_iter()
            .map(|g| encode_segment(commands, new, g, level))
            .collect();
        for seg in encoded {
            let seg = seg?;
            out.write_all(&seg)?;
            written += seg.len() as u64;
        }
    }
    Ok(written)
}

/// One segment of the literal section: its kind, then the frame (with its
/// length) or the raw literals.
fn encode_segment(commands: &[Command], new: &[u8], g: &Group, level: i32) -> io::Result<Vec<u8>> {
    let start = g.index << SEGMENT_LOG;
    let end = (start + SEGMENT).min(new.len() as u64);
    let ranges: Vec<(u64, u64)> = g
        .adds
        .iter()
        .map(|&i| commands[i].target().expect("an ADD has a target"))
        .collect();
    let (lits, prefix) = split_segment(new, start, end, &ranges);
    let mut seg = Vec::with_capacity(16);
    match pack(&prefix, &lits, level)? {
        Some(frame) => {
            seg.push(ZSTD);
            put_varint(&mut seg, frame.len() as u64);
            seg.extend_from_slice(&frame);
        }
        None => {
            seg.push(RAW);
            seg.extend_from_slice(&lits);
        }
    }
    Ok(seg)
}

/// A segment's literal bytes and its other bytes (the dictionary).
fn split_segment(new: &[u8], start: u64, end: u64, adds: &[(u64, u64)]) -> (Vec<u8>, Vec<u8>) {
    let mut lits = Vec::new();
    let mut prefix = Vec::new();
    let mut at = start;
    for &(dst, len) in adds {
        prefix.extend_from_slice(&new[at as usize..dst as usize]);
        lits.extend_from_slice(&new[dst as usize..(dst + len) as usize]);
        at = dst + len;
    }
    prefix.extend_from_slice(&new[at as usize..end as usize]);
    (lits, prefix)
}

/// `lits` as one zstd frame with `prefix` as its dictionary, or `None` when
/// that is not smaller than `lits` (or zstd cannot make it).
fn pack(prefix: &[u8], lits: &[u8], level: i32) -> io::Result<Option<Vec<u8>>> {
    let zerr = |code: usize| io::Error::other(zstd_safe::get_error_name(code));
    let span = (prefix.len() + lits.len()).max(2) as u64;
    let window = (64 - (span - 1).leading_zeros()).clamp(10, SEGMENT_LOG);
    let mut cctx = CCtx::create();
    for p in [
        CParameter::CompressionLevel(level),
        CParameter::WindowLog(window),
        CParameter::ContentSizeFlag(true),
        CParameter::ChecksumFlag(false),
        CParameter::DictIdFlag(false),
    ] {
        cctx.set_parameter(p).map_err(zerr)?;
    }
    cctx.set_pledged_src_size(Some(lits.len() as u64))
        .map_err(zerr)?;
    cctx.ref_prefix(prefix).map_err(zerr)?;
    // Room for no more than the literals: a frame that does not fit is
    // not worth sending.
    let mut frame = Vec::with_capacity(lits.len());
    match cctx.compress2(&mut frame, lits) {
        Ok(n) if n < lits.len() => Ok(Some(frame)),
        _ => Ok(None),
    }
}

/// Reads the literal section of a sequential delta: sets each ADD's `data`
/// (an offset in the delta for raw segments, in its decoded segment for
/// packed ones) and returns the packed segments. Each frame is checked to
/// be exactly one frame declaring the segment's literal length.
pub(crate) fn read_segments(
    r: &mut Reader<'_>,
    commands: &mut [Command],
) -> Result<Vec<PackedSegment>, DeltaError> {
    let groups = groups(commands).map_err(DeltaError::Corrupt)?;
    let mut packed = Vec::new();
    for g in groups {
        let kind = r.u8("literal segment kind")?;
        let base = match kind {
            RAW => {
                let at = r.position();
                if g.lit_len > r.remaining() as u64 {
                    return Err(DeltaError::Truncated("literal data"));
                }
                r.bytes(g.lit_len as usize, "literal data")?;
                at
            }
            ZSTD => {
                let zlen = r.varint("compressed literal length")?;
                if zlen > r.remaining() as u64 {
                    return Err(DeltaError::Truncated("compressed literals"));
                }
                let at = r.position();
                let frame = r.bytes(zlen as usize, "compressed literals")?;
                check_frame(frame, g.lit_len)?;
                packed.push(PackedSegment {
                    start: g.index << SEGMENT_LOG,
                    lit_len: g.lit_len,
                    frame: (at, zlen as usize),
                });
                0
            }
            k => {
                return Err(DeltaError::Corrupt(format!(
                    "unknown literal segment kind {k}"
                )))
            }
        };
        let mut off = base;
        for &i in &g.adds {
            if let Command::Add { len, data, .. } = &mut commands[i] {
                *data = off;
                off += *len as usize;
            }
        }
    }
    Ok(packed)
}

/// A frame is whole, alone, and declares `lit_len` bytes of content.
fn check_frame(frame: &[u8], lit_len: u64) -> Result<(), DeltaError> {
    let bad = |why: String| Err(DeltaError::Corrupt(format!("compressed literals: {why}")));
    match zstd_safe::get_frame_content_size(frame) {
        Ok(Some(n)) if n == lit_len => {}
        Ok(Some(n)) => return bad(format!("the frame holds {n} bytes, the commands {lit_len}")),
        Ok(None) => return bad("the frame does not declare its size".into()),
        Err(_) => return bad("not a zstd frame".into()),
    }
    match zstd_safe::find_frame_compressed_size(frame) {
        Ok(n) if n == frame.len() => Ok(()),
        Ok(_) => bad("bytes after the frame".into()),
        Err(_) => Err(DeltaError::Truncated("compressed literals")),
    }
}

/// Decodes a packed segment's literals, `prefix` being the segment's
/// matched bytes in target order. Never writes more than the declared
/// length (the output buffer has exactly that room).
pub(crate) fn unpack(frame: &[u8], prefix: &[u8], lit_len: u64) -> Result<Vec<u8>, DeltaError> {
    let zerr = |code: usize| {
        DeltaError::Corrupt(format!(
            "compressed literals do not decode ({}): wrong basis file or damaged delta",
            zstd_safe::get_error_name(code)
        ))
    };
    let mut dctx = DCtx::create();
    dctx.set_parameter(DParameter::WindowLogMax(SEGMENT_LOG))
        .map_err(zerr)?;
    dctx.ref_prefix(prefix).map_err(zerr)?;
    let mut out = Vec::with_capacity(lit_len as usize);
    let n = dctx.decompress(&mut out, frame).map_err(zerr)?;
    if n as u64 != lit_len {
        return Err(DeltaError::Corrupt(format!(
            "compressed literals decode to {n} bytes, the commands need {lit_len}"
        )));
    }
    Ok(out)
}
