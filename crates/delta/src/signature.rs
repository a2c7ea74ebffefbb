//! Block signatures: what the receiver knows about its old file.
//!
//! Each block gets a weak rolling checksum and a truncated BLAKE3 keyed with a
//! random per-signature key, so nobody can plant blocks that collide with it.

use crate::rolling;
use crate::wire::{put_varint, Reader};
use crate::DeltaError;
use rayon::prelude::*;

const MAGIC: &[u8; 4] = b"ACSG";
const VERSION: u8 = 1;
/// Smallest block the size rule picks (rsync's floor).
pub const MIN_BLOCK_LEN: u32 = 700;
/// Largest block the size rule picks (rsync 3.x's ceiling).
pub const MAX_BLOCK_LEN: u32 = 128 * 1024;
/// Bounds a user-chosen block length may take.
pub const BLOCK_LEN_LIMITS: (u32, u32) = (16, 1 << 24);
/// Strong sums are never shorter or longer than this (the shortest only
/// for verified signatures).
pub const STRONG_LEN_LIMITS: (u8, u8) = (2, 32);
/// Shortest strong sum of a signature whose deltas are applied in place
/// (where nothing checks the result before it replaces the old file).
pub const MIN_UNVERIFIED_STRONG_LEN: u8 = 8;
/// Verified signatures: the target bound on the probability that a file
/// needs its transfer redone because of a false match.
const REDO_BITS: u32 = 24;
/// What the 32-bit rolling sum contributes: a strong sum is compared only
/// where the weak sums agree.
const WEAK_BITS: u32 = 32;
/// Target bound on the probability that any block is falsely matched.
const FALSE_MATCH_BITS: u32 = 60;
/// Headroom for a new file up to 2^8 times the old one (the scan visits every
/// position of the new file, so its length enters the bound).
const GROWTH_BITS: u32 = 8;

#[derive(Clone, Debug, Default)]
pub struct SignatureOptions {
    /// Block length; `None` picks the square-root rule.
    pub block_len: Option<u32>,
    /// Strong-sum length in bytes; `None` derives it from the file and block counts.
    pub strong_len: Option<u8>,
    /// Key for the strong sums; `None` draws a random one (tests fix it).
    pub key: Option<[u8; 32]>,
    /// The delta's result will be checked whole (its BLAKE3 against the new
    /// file's, in a temp file, before it replaces anything) and the
    /// transfer redone on a mismatch: a false match then costs a second
    /// transfer, never a wrong file, so the defaults are rsync's trade
    /// (blocks of √len, strong sums just long enough to make a redo rare)
    /// instead of sums that must never be wrong.
    pub verified: bool,
}

/// Square-root rule. Signature bytes plus delta bytes are smallest for blocks
/// of about √(len · c / e) bytes, where c is the signature's cost per block and
/// e the cost of an edit per byte of block; rsync and librsync take √len. Our
/// blocks cost 4 + 8..16 bytes of signature, about half of librsync's 36, so
/// we take ¾·√len (near the optimum's 1/√2, rounded to a multiple of 64):
/// smaller deltas for a signature still smaller than theirs.
pub fn default_block_len(file_len: u64) -> u32 {
    let root = ((file_len as f64).sqrt() * 0.75) as u64;
    let rounded = root & !63;
    rounded.clamp(MIN_BLOCK_LEN as u64, MAX_BLOCK_LEN as u64) as u32
}

/// Block length of a verified signature: √len (rounded to a multiple of
/// 64). Its blocks cost 4 + 2..8 bytes, and the optimum of √(len·c/e)
/// moves up with the cheaper signature.
pub fn verified_block_len(file_len: u64) -> u32 {
    let rounded = ((file_len as f64).sqrt() as u64) & !63;
    rounded.clamp(MIN_BLOCK_LEN as u64, MAX_BLOCK_LEN as u64) as u32
}

/// Strong-sum length of a verified signature: a false match in a file
/// (positions scanned times blocks compared, past the 32-bit weak sum) less
/// likely than 2^-24. The random key keeps anyone from planting one.
pub fn verified_strong_len(file_len: u64, block_len: u32) -> u8 {
    let blocks = file_len.div_ceil(block_len as u64).max(1);
    let bits = (REDO_BITS + log2_ceil(file_len.max(block_len as u64)) + log2_ceil(blocks))
        .saturating_sub(WEAK_BITS);
    (bits.div_ceil(8) as u8).clamp(STRONG_LEN_LIMITS.0, STRONG_LEN_LIMITS.1)
}

/// Strong-sum length of one gap of a second round ([`crate::fine`]):
/// every gap's blocks are compared at most at the `scanned` positions of
/// the whole new file, so a false match anywhere in the file stays less
/// likely than 2^-24, as in the first round.
pub fn fine_strong_len(scanned: u64, gap_len: u64, block_len: u32) -> u8 {
    let blocks = gap_len.div_ceil(block_len as u64).max(1);
    let bits = (REDO_BITS + log2_ceil(scanned.max(block_len as u64)) + log2_ceil(blocks))
        .saturating_sub(WEAK_BITS);
    (bits.div_ceil(8) as u8).clamp(STRONG_LEN_LIMITS.0, STRONG_LEN_LIMITS.1)
}

fn log2_ceil(v: u64) -> u32 {
    64 - v.max(1).saturating_sub(1).leading_zeros()
}

/// Strong-sum length so that P(false match) < 2^-60 without trusting the weak
/// sum: positions scanned (≤ old length × 2^8) times blocks compared, each
/// matching a b-bit sum with probability 2^-b.
pub fn default_strong_len(file_len: u64, block_len: u32) -> u8 {
    let blocks = file_len.div_ceil(block_len as u64).max(1);
    let bits = FALSE_MATCH_BITS
        + log2_ceil(file_len.max(block_len as u64))
        + GROWTH_BITS
        + log2_ceil(blocks);
    (bits.div_ceil(8) as u8).clamp(MIN_UNVERIFIED_STRONG_LEN, STRONG_LEN_LIMITS.1)
}

/// The signature of one old file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    pub file_len: u64,
    pub block_len: u32,
    pub strong_len: u8,
    pub key: [u8; 32],
    pub weak: Vec<u32>,
    /// `strong_len` bytes per block, blocks in order.
    pub strong: Vec<u8>,
}

impl Signature {
    pub fn generate(old: &[u8], opts: &SignatureOptions) -> Result<Signature, DeltaError> {
        let file_len = old.len() as u64;
        let block_len = match opts.block_len {
            Some(b) => check_block_len(b)?,
            None if opts.verified => verified_block_len(file_len),
            None => default_block_len(file_len),
        };
        let strong_len = match opts.strong_len {
            Some(s) if (STRONG_LEN_LIMITS.0..=STRONG_LEN_LIMITS.1).contains(&s) => s,
            Some(s) => {
                return Err(DeltaError::Usage(format!(
                    "strong sum length {s} is outside {}..={}",
                    STRONG_LEN_LIMITS.0, STRONG_LEN_LIMITS.1
                )))
            }
            None if opts.verified => verified_strong_len(file_len, block_len),
            None => default_strong_len(file_len, block_len),
        };
        let key = match opts.key {
            Some(k) => k,
            None => random_key()?,
        };
        let sums: Vec<(u32, [u8; 32])> = old
            .par_chunks(block_len as usize)
            .with_min_len(16)
            .map(|b| (rolling::weak(b), *blake3::keyed_hash(&key, b).as_bytes()))
            .collect();
        let weak = sums.iter().map(|s| s.0).collect();
        let mut strong = Vec::with_capacity(sums.len() * strong_len as usize);
        for s in &sums {
            strong.extend_from_slice(&s.1[..strong_len as usize]);
        }
        Ok(Signature {
            file_len,
            block_len,
            strong_len,
            key,
            weak,
            strong,
        })
    }

    pub fn block_count(&self) -> usize {
        self.weak.len()
    }

    pub fn strong_of(&self, block: usize) -> &[u8] {
        let s = self.strong_len as usize;
        &self.strong[block * s..(block + 1) * s]
    }

    /// Length of block `i` (the last one may be short).
    pub fn len_of(&self, block: usize) -> u64 {
        let start = block as u64 * self.block_len as u64;
        (self.file_len - start).min(self.block_len as u64)
    }

    /// The strong sum of `data` as this signature computes it.
    pub fn strong_sum(&self, data: &[u8]) -> [u8; 32] {
        *blake3::keyed_hash(&self.key, data).as_bytes()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.weak.len() * (4 + self.strong_len as usize));
        out.extend_from_slice(MAGIC);
        out.push(VERSION);
        put_varint(&mut out, self.file_len);
        put_varint(&mut out, self.block_len as u64);
        out.push(self.strong_len);
        out.extend_from_slice(&self.key);
        let s = self.strong_len as usize;
        for (i, w) in self.weak.iter().enumerate() {
            out.extend_from_slice(&w.to_le_bytes());
            out.extend_from_slice(&self.strong[i * s..(i + 1) * s]);
        }
        out
    }

    /// Parses and checks a signature; the block count follows from the header,
    /// so the body length is known exactly before anything is allocated.
    pub fn decode(buf: &[u8]) -> Result<Signature, DeltaError> {
        let mut r = Reader::new(buf);
        if r.bytes(4, "signature magic")? != MAGIC {
            return Err(DeltaError::Corrupt(
                "not an Accord signature (bad magic)".into(),
            ));
        }
        let version = r.u8("signature version")?;
        if version != VERSION {
            return Err(DeltaError::Corrupt(format!(
                "signature format version {version} is not supported (expected {VERSION})"
            )));
        }
        let file_len = r.varint("file length")?;
        let block_len = r.varint("block length")?;
        let block_len = u32::try_from(block_len)
            .map_err(|_| DeltaError::Corrupt(format!("block length {block_len} out of range")))
            .and_then(|b| check_block_len(b).map_err(|e| DeltaError::Corrupt(e.to_string())))?;
        let strong_len = r.u8("strong sum length")?;
        if !(STRONG_LEN_LIMITS.0..=STRONG_LEN_LIMITS.1).contains(&strong_len) {
            return Err(DeltaError::Corrupt(format!(
                "strong sum length {strong_len} out of range"
            )));
        }
        let key: [u8; 32] = r.bytes(32, "signature key")?.try_into().unwrap();
        let blocks = file_len.div_ceil(block_len as u64);
        let per_block = 4 + strong_len as u64;
        let body = blocks
            .checked_mul(per_block)
            .filter(|&b| b == r.remaining() as u64)
            .ok_or_else(|| {
                if blocks.saturating_mul(per_block) > r.remaining() as u64 {
                    DeltaError::Truncated("signature blocks")
                } else {
                    DeltaError::Corrupt(format!(
                        "signature body is {} bytes, expected {} for {blocks} blocks",
                        r.remaining(),
                        blocks * per_block
                    ))
                }
            })?;
        let blocks = blocks as usize;
        let mut weak = Vec::with_capacity(blocks);
        let mut strong = Vec::with_capacity(body as usize - blocks * 4);
        for _ in 0..blocks {
            weak.push(r.u32_le("weak sum")?);
            strong.extend_from_slice(r.bytes(strong_len as usize, "strong sum")?);
        }
        r.expect_end("signature")?;
        Ok(Signature {
            file_len,
            block_len,
            strong_len,
            key,
            weak,
            strong,
        })
    }
}

fn check_block_len(b: u32) -> Result<u32, DeltaError> {
    if (BLOCK_LEN_LIMITS.0..=BLOCK_LEN_LIMITS.1).contains(&b) {
        Ok(b)
    } else {
        Err(DeltaError::Usage(format!(
            "block length {b} is outside {}..={}",
            BLOCK_LEN_LIMITS.0, BLOCK_LEN_LIMITS.1
        )))
    }
}

pub(crate) fn random_key() -> Result<[u8; 32], DeltaError> {
    let mut key = [0u8; 32];
    getrandom::getrandom(&mut key)
        .map_err(|e| DeltaError::Usage(format!("no random source for the signature key: {e}")))?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_len_follows_square_root_within_bounds() {
        assert_eq!(default_block_len(0), MIN_BLOCK_LEN);
        assert_eq!(default_block_len(1 << 20), 768);
        assert_eq!(default_block_len(128 << 20), 8640);
        assert_eq!(default_block_len(1 << 40), MAX_BLOCK_LEN);
    }

    #[test]
    fn strong_len_grows_with_size() {
        let small = default_strong_len(1000, 700);
        let big = default_strong_len(1 << 30, 32768);
        assert!(small >= 8 && small < big && big <= 16, "{small} {big}");
    }

    #[test]
    fn encode_decode_round_trip_and_reject_damage() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 253) as u8).collect();
        let sig = Signature::generate(
            &data,
            &SignatureOptions {
                block_len: Some(1000),
                ..Default::default()
            },
        )
        .unwrap();
        let enc = sig.encode();
        assert_eq!(Signature::decode(&enc).unwrap(), sig);
        for cut in [0, 3, 5, 40, enc.len() - 1] {
            assert!(Signature::decode(&enc[..cut]).is_err(), "cut {cut}");
        }
        let mut longer = enc.clone();
        longer.push(0);
        assert!(Signature::decode(&longer).is_err());
        // A header claiming an enormous file must fail before allocating.
        let mut huge = Vec::new();
        huge.extend_from_slice(MAGIC);
        huge.push(VERSION);
        put_varint(&mut huge, u64::MAX / 2);
        put_varint(&mut huge, 16);
        huge.push(8);
        huge.extend_from_slice(&[0; 32]);
        assert!(matches!(
            Signature::decode(&huge),
            Err(DeltaError::Truncated(_))
        ));
    }
}
