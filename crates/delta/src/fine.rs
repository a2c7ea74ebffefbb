//! A second, finer round over what the first left unmatched.
//!
//! A literal run of a sequential delta replaces the old bytes between the
//! matches on either side of it: its *gap*. Where a file changed in many
//! small places (a rebuilt program: every few dozen bytes an address
//! moved) whole blocks of √len bytes seldom match, and the literal runs
//! are most of the file; yet each run is mostly the bytes of its gap. The
//! sender names the gaps ([`GapRequest`]); the receiver signs only their
//! bytes, in blocks a few dozen times smaller ([`FineSignature`]); the
//! sender scans each run against its own gap's blocks only ([`refine`]).
//! The result is an ordinary delta (format 1 or 2): only the two messages
//! are new, and each is checked whole before anything is allocated for it.

use crate::format::{self, Command, Delta, Layout};
use crate::matcher::{self, Index};
use crate::packed::LiteralCoding;
use crate::signature::{self, Signature, SignatureOptions, BLOCK_LEN_LIMITS, STRONG_LEN_LIMITS};
use crate::wire::{put_varint, Reader};
use crate::{DeltaError, DeltaStats};
use rayon::prelude::*;
use std::io::Write;

const REQUEST_MAGIC: &[u8; 4] = b"ACGQ";
const SIGNATURE_MAGIC: &[u8; 4] = b"ACFS";
const VERSION: u8 = 1;
/// Fewest literal bytes that are worth a second round: below, its round
/// trip and its signatures cost more than its matches can save.
pub const MIN_LITERAL: u64 = 64 << 10;
/// Smallest and largest block of a second round.
pub const FINE_BLOCK_LIMITS: (u32, u32) = (64, 1024);

/// Block length of the second round for an old file of `old_len` bytes:
/// about a 24th of the first round's (on a rebuilt 10 MB program, 128-byte
/// blocks over the gaps of 3200-byte ones halve the literal bytes for
/// signatures of a tenth of what they save).
pub fn fine_block_len(old_len: u64) -> u32 {
    let first = signature::verified_block_len(old_len);
    ((first / 24) & !63).clamp(FINE_BLOCK_LIMITS.0, FINE_BLOCK_LIMITS.1)
}

/// A range of the old file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    pub start: u64,
    pub len: u64,
}

/// The sender's question: the gaps to sign, ascending and apart, at one
/// block length.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GapRequest {
    pub old_len: u64,
    /// The new file's length: the positions a gap's blocks may be
    /// compared at, which set the length of their strong sums.
    pub new_len: u64,
    pub block_len: u32,
    pub gaps: Vec<Gap>,
}

/// A literal run of the new file (`start..end`) and the gap it replaces.
#[derive(Clone, Copy, Debug)]
struct Run {
    start: u64,
    end: u64,
    gap: Gap,
}

/// The literal runs of a sequential delta whose gaps can be signed at
/// `block_len`: each at least one block, after the gap before it.
fn runs_with_gaps(delta: &Delta, block_len: u32) -> Vec<Run> {
    let mut runs = Vec::new();
    // End of the last match in the old file, and of the last gap taken.
    let (mut old_at, mut taken) = (0u64, 0u64);
    let mut pending: Option<(u64, u64)> = None;
    let mut close = |pending: &mut Option<(u64, u64)>, from: u64, to: u64, taken: &mut u64| {
        if let Some((start, end)) = pending.take() {
            let from = from.max(*taken);
            if to >= from.saturating_add(block_len as u64) {
                runs.push(Run {
                    start,
                    end,
                    gap: Gap {
                        start: from,
                        len: to - from,
                    },
                });
                *taken = to;
            }
        }
    };
    for c in &delta.commands {
        match *c {
            Command::Copy { src, len, .. } => {
                close(&mut pending, old_at, src, &mut taken);
                old_at = src + len;
            }
            Command::Add { dst, len, .. } => {
                pending = Some(match pending {
                    Some((start, _)) => (start, dst + len),
                    None => (dst, dst + len),
                });
            }
            _ => return Vec::new(),
        }
    }
    close(&mut pending, old_at, delta.old_len, &mut taken);
    runs
}

impl GapRequest {
    /// What to ask about a first-round delta, if a second round is worth
    /// its round trip (a sequential delta with enough literal bytes).
    pub fn for_delta(delta: &Delta) -> Option<GapRequest> {
        if delta.layout != Layout::Sequential {
            return None;
        }
        let literal: u64 = delta
            .commands
            .iter()
            .map(|c| match c {
                Command::Add { len, .. } => *len,
                _ => 0,
            })
            .sum();
        if literal < MIN_LITERAL {
            return None;
        }
        let block_len = fine_block_len(delta.old_len);
        let gaps: Vec<Gap> = runs_with_gaps(delta, block_len)
            .iter()
            .map(|r| r.gap)
            .collect();
        (!gaps.is_empty()).then_some(GapRequest {
            old_len: delta.old_len,
            new_len: delta.new_len,
            block_len,
            gaps,
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.gaps.len() * 6);
        out.extend_from_slice(REQUEST_MAGIC);
        out.push(VERSION);
        put_varint(&mut out, self.old_len);
        put_varint(&mut out, self.new_len);
        put_varint(&mut out, self.block_len as u64);
        put_varint(&mut out, self.gaps.len() as u64);
        let mut at = 0;
        for g in &self.gaps {
            put_varint(&mut out, g.start - at);
            put_varint(&mut out, g.len);
            at = g.start + g.len;
        }
        out
    }

    /// Parses and checks a request: gaps ascending, apart, non-empty and
    /// inside the old file; the count bounded by the bytes present.
    pub fn decode(buf: &[u8]) -> Result<GapRequest, DeltaError> {
        let mut r = Reader::new(buf);
        magic_and_version(&mut r, REQUEST_MAGIC, "gap request")?;
        let old_len = r.varint("old file length")?;
        let new_len = r.varint("new file length")?;
        let block_len = block_len_of(r.varint("block length")?)?;
        let count = r.varint("gap count")?;
        // Each gap takes at least two bytes.
        if count > (r.remaining() / 2) as u64 {
            return Err(DeltaError::Truncated("gaps"));
        }
        let mut gaps = Vec::with_capacity(count as usize);
        let mut at = 0u64;
        for _ in 0..count {
            let start = at
                .checked_add(r.varint("gap offset")?)
                .ok_or_else(|| corrupt("a gap past the end of the old file"))?;
            let len = r.varint("gap length")?;
            let end = start
                .checked_add(len)
                .filter(|&e| e <= old_len && len > 0)
                .ok_or_else(|| {
                    corrupt(if len == 0 {
                        "an empty gap"
                    } else {
                        "a gap past the end of the old file"
                    })
                })?;
            gaps.push(Gap { start, len });
            at = end;
        }
        no_more(&r, "gap request")?;
        Ok(GapRequest {
            old_len,
            new_len,
            block_len,
            gaps,
        })
    }
}

/// The receiver's answer: its old file's blocks in each gap asked for,
/// one key for all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FineSignature {
    /// One per gap of the request, in its order (`file_len` the gap's).
    pub gaps: Vec<(Gap, Signature)>,
}

impl FineSignature {
    /// Signs the gaps of `req` in `old` (which must be the file it names).
    pub fn generate(old: &[u8], req: &GapRequest) -> Result<FineSignature, DeltaError> {
        if old.len() as u64 != req.old_len {
            return Err(DeltaError::WrongBasis {
                expected: req.old_len,
                actual: old.len() as u64,
            });
        }
        let key = signature::random_key()?;
        let gaps = req
            .gaps
            .par_iter()
            .map(|g| {
                let bytes = &old[g.start as usize..(g.start + g.len) as usize];
                let opts = SignatureOptions {
                    block_len: Some(req.block_len),
                    strong_len: Some(signature::fine_strong_len(
                        req.new_len,
                        g.len,
                        req.block_len,
                    )),
                    key: Some(key),
                    // The result is checked whole and redone on a mismatch.
                    verified: true,
                };
                Signature::generate(bytes, &opts).map(|s| (*g, s))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(FineSignature { gaps })
    }

    pub fn encode(&self) -> Vec<u8> {
        let blocks: usize = self.gaps.iter().map(|(_, s)| s.block_count()).sum();
        let mut out = Vec::with_capacity(48 + self.gaps.len() * 8 + blocks * 8);
        out.extend_from_slice(SIGNATURE_MAGIC);
        out.push(VERSION);
        let key = self.gaps.first().map(|(_, s)| s.key).unwrap_or_default();
        out.extend_from_slice(&key);
        put_varint(&mut out, self.gaps.len() as u64);
        for (_, s) in &self.gaps {
            out.push(s.strong_len);
            let n = s.strong_len as usize;
            for (i, w) in s.weak.iter().enumerate() {
                out.extend_from_slice(&w.to_le_bytes());
                out.extend_from_slice(&s.strong[i * n..(i + 1) * n]);
            }
        }
        out
    }

    /// Parses a reply to `req`: one entry per gap asked for, each the
    /// exact length its gap and strong-sum length imply (checked before
    /// anything is allocated for it).
    pub fn decode(buf: &[u8], req: &GapRequest) -> Result<FineSignature, DeltaError> {
        let mut r = Reader::new(buf);
        magic_and_version(&mut r, SIGNATURE_MAGIC, "fine signature")?;
        let key: [u8; 32] = r.bytes(32, "signature key")?.try_into().unwrap();
        let count = r.varint("gap count")?;
        if count != req.gaps.len() as u64 {
            return Err(corrupt(format!(
                "{count} gaps signed, {} asked for",
                req.gaps.len()
            )));
        }
        let mut gaps = Vec::with_capacity(req.gaps.len());
        for g in &req.gaps {
            let strong_len = r.u8("strong sum length")?;
            if !(STRONG_LEN_LIMITS.0..=STRONG_LEN_LIMITS.1).contains(&strong_len) {
                return Err(corrupt(format!(
                    "strong sum length {strong_len} out of range"
                )));
            }
            let blocks = g.len.div_ceil(req.block_len as u64);
            let body = blocks.saturating_mul(4 + strong_len as u64);
            if body > r.remaining() as u64 {
                return Err(DeltaError::Truncated("fine signature blocks"));
            }
            let mut weak = Vec::with_capacity(blocks as usize);
            let mut strong = Vec::with_capacity(blocks as usize * strong_len as usize);
            for _ in 0..blocks {
                weak.push(r.u32_le("weak sum")?);
                strong.extend_from_slice(r.bytes(strong_len as usize, "strong sum")?);
            }
            let sig = Signature {
                file_len: g.len,
                block_len: req.block_len,
                strong_len,
                key,
                weak,
                strong,
            };
            gaps.push((*g, sig));
        }
        no_more(&r, "fine signature")?;
        Ok(FineSignature { gaps })
    }
}

/// The delta `first` (sequential, made against the old file the request
/// was answered from) with each literal run it shares with `fine` scanned
/// against its gap's blocks; its literals stored as `coding` says.
pub fn refine(
    first: &Delta,
    fine: &FineSignature,
    new: &[u8],
    coding: LiteralCoding,
    out: &mut impl Write,
) -> Result<DeltaStats, DeltaError> {
    if first.layout != Layout::Sequential {
        return Err(DeltaError::Usage(
            "only a sequential delta takes a second round".into(),
        ));
    }
    if new.len() as u64 != first.new_len {
        return Err(DeltaError::Usage(format!(
            "the new file is {} bytes long, the delta makes {}",
            new.len(),
            first.new_len
        )));
    }
    let block_len = fine
        .gaps
        .first()
        .map_or(FINE_BLOCK_LIMITS.0, |(_, s)| s.block_len);
    let runs = runs_with_gaps(first, block_len);
    if runs.len() != fine.gaps.len() || runs.iter().zip(&fine.gaps).any(|(r, (g, _))| r.gap != *g) {
        return Err(DeltaError::Usage(
            "the fine signature answers other gaps than this delta's".into(),
        ));
    }
    let found: Vec<Vec<matcher::Copy>> = runs
        .par_iter()
        .zip(&fine.gaps)
        .map(|(run, (gap, sig))| {
            let index = Index::new(sig)?;
            let bytes = &new[run.start as usize..run.end as usize];
            Ok(index
                .find_matches(bytes)
                .into_iter()
                .map(|c| matcher::Copy {
                    src: c.src + gap.start,
                    dst: c.dst + run.start,
                    len: c.len,
                })
                .collect())
        })
        .collect::<Result<_, DeltaError>>()?;
    let mut copies: Vec<matcher::Copy> = first
        .commands
        .iter()
        .filter_map(|c| match *c {
            Command::Copy { src, dst, len } => Some(matcher::Copy { src, dst, len }),
            _ => None,
        })
        .chain(found.into_iter().flatten())
        .collect();
    copies.sort_unstable_by_key(|c| c.dst);
    let copies = matcher::coalesce(copies);
    let header = format::Header {
        layout: Layout::Sequential,
        old_len: first.old_len,
        new_len: first.new_len,
        result_hash: first.result_hash,
        scratch_len: 0,
    };
    let commands = crate::sequential_commands(&copies, first.new_len, coding != LiteralCoding::Raw);
    let mut st = crate::encode_counted(&header, &commands, new, coding, out)?;
    st.block_len = block_len;
    Ok(st)
}

fn magic_and_version(
    r: &mut Reader<'_>,
    magic: &[u8; 4],
    what: &'static str,
) -> Result<(), DeltaError> {
    if r.bytes(4, "magic")? != magic {
        return Err(corrupt(format!("not an Accord {what} (bad magic)")));
    }
    let version = r.u8("version")?;
    if version != VERSION {
        return Err(corrupt(format!(
            "{what} format version {version} is not supported (expected {VERSION})"
        )));
    }
    Ok(())
}

fn block_len_of(v: u64) -> Result<u32, DeltaError> {
    u32::try_from(v)
        .ok()
        .filter(|b| (BLOCK_LEN_LIMITS.0..=BLOCK_LEN_LIMITS.1).contains(b))
        .ok_or_else(|| corrupt(format!("block length {v} out of range")))
}

fn no_more(r: &Reader<'_>, what: &str) -> Result<(), DeltaError> {
    match r.remaining() {
        0 => Ok(()),
        n => Err(corrupt(format!("{n} bytes after the end of the {what}"))),
    }
}

fn corrupt(why: impl Into<String>) -> DeltaError {
    DeltaError::Corrupt(why.into())
}
