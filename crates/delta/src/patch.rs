//! Applying a validated delta: streaming into a new output, or rebuilding the
//! old file in its own storage.

use crate::format::{Command, Delta, Layout};
use crate::packed;
use crate::DeltaError;
use std::io::{self, Write};

/// Storage that can be rebuilt in place: a file handle, or memory in tests.
pub trait InPlaceTarget {
    fn size(&mut self) -> io::Result<u64>;
    fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    fn write_all_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()>;
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    fn sync(&mut self) -> io::Result<()>;
}

impl InPlaceTarget for std::fs::File {
    fn size(&mut self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, offset)
    }
    fn write_all_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, offset)
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        std::fs::File::set_len(self, len)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.sync_all()
    }
}

impl InPlaceTarget for Vec<u8> {
    fn size(&mut self) -> io::Result<u64> {
        Ok(<[u8]>::len(self) as u64)
    }
    fn read_exact_at(&mut self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let o = offset as usize;
        let src = self
            .get(o..o + buf.len())
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write_all_at(&mut self, buf: &[u8], offset: u64) -> io::Result<()> {
        let o = offset as usize;
        if o + buf.len() > <[u8]>::len(self) {
            self.resize(o + buf.len(), 0);
        }
        self[o..o + buf.len()].copy_from_slice(buf);
        Ok(())
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.resize(len as usize, 0);
        Ok(())
    }
    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A failed patch, and whether the target had already been changed (then the
/// caller must move it out of the way: it holds neither version).
#[derive(Debug)]
pub struct PatchError {
    pub error: DeltaError,
    pub target_modified: bool,
}

impl std::fmt::Display for PatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for PatchError {}

#[derive(Clone, Debug)]
pub struct PatchOptions {
    /// Most scratch memory the receiver grants a delta.
    pub max_scratch: u64,
    /// fsync the target before verifying it.
    pub sync: bool,
}

impl Default for PatchOptions {
    fn default() -> Self {
        PatchOptions {
            max_scratch: 64 << 20,
            sync: true,
        }
    }
}

const CHUNK: usize = 1 << 20;

/// Where the bytes of one target range come from, for streaming output.
enum Source {
    Old(u64),
    Literal(usize),
}

/// Writes the new file to `out`, reading the old one from `old`. Works for
/// both layouts; checks the result's BLAKE3 at the end (the caller discards
/// the output on error). Compressed literals are decoded one segment at a
/// time, just before that segment is written.
pub fn patch_to(old: &[u8], delta: &Delta<'_>, out: &mut impl Write) -> Result<(), DeltaError> {
    if old.len() as u64 != delta.old_len {
        return Err(DeltaError::WrongBasis {
            expected: delta.old_len,
            actual: old.len() as u64,
        });
    }
    let mut pieces = resolve_sources(delta);
    if delta.layout == Layout::InPlace {
        pieces.sort_unstable_by_key(|p| p.0);
    }
    let mut hasher = blake3::Hasher::new();
    // The decoded literals of the packed segment being written.
    let mut unpacked: Option<(u64, Vec<u8>)> = None;
    for &(dst, len, ref src) in &pieces {
        let bytes = match *src {
            Source::Old(off) => &old[off as usize..(off + len) as usize],
            Source::Literal(data) => match delta.packed_segment(dst) {
                None => delta.add_bytes(data, len),
                Some(seg) => {
                    if unpacked.as_ref().map(|u| u.0) != Some(seg.start) {
                        let prefix = matched_bytes(old, &pieces, seg.start);
                        let lits = packed::unpack(delta.frame(seg), &prefix, seg.lit_len)?;
                        unpacked = Some((seg.start, lits));
                    }
                    let lits = &unpacked.as_ref().expect("just decoded").1;
                    &lits[data..data + len as usize]
                }
            },
        };
        hasher.update(bytes);
        out.write_all(bytes)?;
    }
    out.flush()?;
    check_hash(delta, hasher.finalize())
}

/// The dictionary of the packed segment starting at `start`: the bytes the
/// old file gives that segment, in target order (`pieces` are in target
/// order; a piece may straddle the segment's ends).
fn matched_bytes(old: &[u8], pieces: &[(u64, u64, Source)], start: u64) -> Vec<u8> {
    let end = start + packed::SEGMENT;
    let first = pieces.partition_point(|p| p.0 + p.1 <= start);
    let mut prefix = Vec::new();
    for &(dst, len, ref src) in pieces[first..].iter().take_while(|p| p.0 < end) {
        if let Source::Old(off) = *src {
            let a = dst.max(start);
            let b = (dst + len).min(end);
            let from = off + (a - dst);
            prefix.extend_from_slice(&old[from as usize..(from + b - a) as usize]);
        }
    }
    prefix
}

/// Each target range with the place its bytes come from, in command order.
fn resolve_sources(delta: &Delta<'_>) -> Vec<(u64, u64, Source)> {
    // UNSTASH is read from the old file where its stash took the bytes.
    let mut live = crate::format::LiveStashes::default();
    let mut out = Vec::with_capacity(delta.commands.len());
    for c in &delta.commands {
        match *c {
            Command::Copy { src, dst, len } => out.push((dst, len, Source::Old(src))),
            Command::Keep { dst, len } => out.push((dst, len, Source::Old(dst))),
            Command::Add { dst, len, data } => out.push((dst, len, Source::Literal(data))),
            Command::Stash { src, len, slot } => live.stash(slot, len, src),
            Command::Unstash { slot, dst, len } => {
                let src = live
                    .source_of(slot, len)
                    .expect("validation checked every unstash");
                out.push((dst, len, Source::Old(src)));
            }
        }
    }
    out
}

fn check_hash(delta: &Delta<'_>, got: blake3::Hash) -> Result<(), DeltaError> {
    if got.as_bytes() != &delta.result_hash {
        return Err(DeltaError::ChecksumMismatch);
    }
    Ok(())
}

/// Rebuilds the old file in its own storage. Before the first write: the
/// delta is already validated, the target's length and the scratch budget are
/// checked. After writing: the result's BLAKE3 is checked.
pub fn patch_in_place<T: InPlaceTarget>(
    target: &mut T,
    delta: &Delta<'_>,
    opts: &PatchOptions,
) -> Result<(), PatchError> {
    let untouched = |error| PatchError {
        error,
        target_modified: false,
    };
    if delta.layout != Layout::InPlace {
        return Err(untouched(DeltaError::Usage(
            "this delta has the sequential layout; in-place patching needs a delta made with --in-place".into(),
        )));
    }
    let len = target.size().map_err(|e| untouched(e.into()))?;
    if len != delta.old_len {
        return Err(untouched(DeltaError::WrongBasis {
            expected: delta.old_len,
            actual: len,
        }));
    }
    if delta.scratch_len > opts.max_scratch {
        return Err(untouched(DeltaError::Usage(format!(
            "the delta needs {} bytes of scratch memory, more than the {} allowed",
            delta.scratch_len, opts.max_scratch
        ))));
    }
    let mut scratch = vec![0u8; delta.scratch_len as usize];
    let touched = |error| PatchError {
        error,
        target_modified: true,
    };
    apply_in_place(target, delta, &mut scratch).map_err(touched)?;
    if opts.sync {
        target.sync().map_err(|e| touched(e.into()))?;
    }
    verify_target(target, delta).map_err(touched)
}

fn apply_in_place<T: InPlaceTarget>(
    t: &mut T,
    delta: &Delta<'_>,
    scratch: &mut [u8],
) -> Result<(), DeltaError> {
    if delta.new_len > delta.old_len {
        t.set_len(delta.new_len)?;
    }
    let mut buf = vec![0u8; CHUNK];
    for c in &delta.commands {
        match *c {
            Command::Copy { src, dst, len } => move_within(t, src, dst, len, &mut buf)?,
            Command::Add { dst, len, data } => t.write_all_at(delta.add_bytes(data, len), dst)?,
            Command::Keep { .. } => {}
            Command::Stash { src, len, slot } => {
                t.read_exact_at(&mut scratch[slot as usize..(slot + len) as usize], src)?
            }
            Command::Unstash { slot, dst, len } => {
                t.write_all_at(&scratch[slot as usize..(slot + len) as usize], dst)?
            }
        }
    }
    if delta.new_len < delta.old_len {
        t.set_len(delta.new_len)?;
    }
    Ok(())
}

/// memmove within the target: front to back when moving left, back to front
/// when moving right, so overlapping ranges never read what they wrote.
fn move_within<T: InPlaceTarget>(
    t: &mut T,
    src: u64,
    dst: u64,
    len: u64,
    buf: &mut [u8],
) -> io::Result<()> {
    let chunk = buf.len() as u64;
    let mut done = 0;
    while done < len {
        let n = chunk.min(len - done);
        let off = if dst > src { len - done - n } else { done };
        let b = &mut buf[..n as usize];
        t.read_exact_at(b, src + off)?;
        t.write_all_at(b, dst + off)?;
        done += n;
    }
    Ok(())
}

fn verify_target<T: InPlaceTarget>(t: &mut T, delta: &Delta<'_>) -> Result<(), DeltaError> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; 4 * CHUNK];
    let mut at = 0;
    while at < delta.new_len {
        let n = (buf.len() as u64).min(delta.new_len - at) as usize;
        t.read_exact_at(&mut buf[..n], at)?;
        hasher.update(&buf[..n]);
        at += n as u64;
    }
    check_hash(delta, hasher.finalize())
}
