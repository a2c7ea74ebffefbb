//! Memos that let a scan of an unchanged tree skip work, trusting the
//! ctime: every change of an entry's extended attributes or ACLs, and every
//! name added to, removed from or renamed in a directory, moves the ctime of
//! that entry or directory, and nobody can set a ctime back.
//!
//! - The xattr memo remembers the entries seen with no extended attributes,
//!   by a digest of (path, inode, ctime, filter): while it matches, the
//!   entry's list need not be read again. Directories are remembered one by
//!   one; the regular files of a directory together, by one digest of all
//!   their digests (`group_key`), so the memo holds about one digest per
//!   directory, not one per file, and a run's memory does not grow with
//!   the number of files.
//! - The listing memo remembers destination directories by a digest of
//!   (path, inode, ctime, digest of all names listed): while it matches
//!   the names the source has there, the destination directory holds
//!   exactly those names and need not be listed again.
//!
//! To be safe against a change within the same timestamp tick as our read
//! (timestamps are coarse), something is only remembered when its ctime is
//! well before the scan began (the rule git uses for its index).
//!
//! A memo is only an accelerator: a missing, unreadable or damaged memo
//! file is an empty memo, and everything is read as usual.

use crate::xattr::XattrFilter;
use accord_model::{RelPath, Time};
use std::io::{self, Read};
use std::path::Path;

const MAGIC: &[u8; 4] = b"ACXM";
/// 2: digests by `memo_key`'s multiply-fold hash (1 was BLAKE3).
/// 3: the files of a directory by one `group_key`.
const VERSION: u32 = 3;
const HEADER: usize = 16;
/// Seconds an entry's ctime must lie before the scan began to be remembered.
const SETTLE_S: i64 = 2;
/// Largest memo read (2^27 entries); a larger file is ignored, not cut.
const MAX_FILE: u64 = HEADER as u64 + 8 * (1 << 27);

/// A set of 64-bit digests, sorted, with a bucket index.
#[derive(Clone, Debug, Default)]
pub struct DigestMemo {
    keys: Vec<u64>,
    /// The digests are uniform: bucket `i` of the top `bits` bits starts at
    /// `starts[i]`, so a lookup touches one or two cache lines instead of a
    /// binary search's twenty.
    starts: Vec<u32>,
    bits: u32,
}

impl DigestMemo {
    /// Read a memo file; anything missing or malformed gives an empty memo.
    pub fn load(path: &Path) -> DigestMemo {
        let mut buf = Vec::new();
        let read =
            std::fs::File::open(path).and_then(|f| f.take(MAX_FILE + 1).read_to_end(&mut buf));
        match read {
            Ok(_) => DigestMemo::decode(&buf).unwrap_or_default(),
            Err(_) => DigestMemo::default(),
        }
    }

    /// Parse the file format; `None` if it is not a well-formed memo.
    pub fn decode(buf: &[u8]) -> Option<DigestMemo> {
        if buf.len() < HEADER || buf.len() as u64 > MAX_FILE || &buf[..4] != MAGIC {
            return None;
        }
        if u32::from_le_bytes(buf[4..8].try_into().ok()?) != VERSION {
            return None;
        }
        let count = u64::from_le_bytes(buf[8..16].try_into().ok()?);
        let body = &buf[HEADER..];
        if count.checked_mul(8)? != body.len() as u64 {
            return None;
        }
        let keys: Vec<u64> = body
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        if !keys.windows(2).all(|w| w[0] < w[1]) {
            return None;
        }
        Some(DigestMemo::indexed(keys))
    }

    /// A memo of these digests.
    pub fn from_keys(mut keys: Vec<u64>) -> DigestMemo {
        keys.sort_unstable();
        keys.dedup();
        DigestMemo::indexed(keys)
    }

    /// Build the bucket index of sorted, distinct keys.
    fn indexed(keys: Vec<u64>) -> DigestMemo {
        let bits = (usize::BITS - keys.len().leading_zeros()).clamp(1, 28);
        let mut starts = vec![0u32; (1usize << bits) + 1];
        for &k in &keys {
            starts[(k >> (64 - bits)) as usize + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        DigestMemo { keys, starts, bits }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + 8 * self.keys.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.keys.len() as u64).to_le_bytes());
        for k in &self.keys {
            out.extend_from_slice(&k.to_le_bytes());
        }
        out
    }

    /// Replace the memo file (temp + rename, no fsync: after a crash a torn
    /// or empty memo fails `decode` and only costs speed).
    pub fn save(&self, path: &Path) -> io::Result<()> {
        crate::replace_host_file(path, &self.encode(), false)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    pub fn contains(&self, key: u64) -> bool {
        if self.keys.is_empty() {
            return false;
        }
        let b = (key >> (64 - self.bits)) as usize;
        let (lo, hi) = (self.starts[b] as usize, self.starts[b + 1] as usize);
        self.keys[lo..hi].contains(&key)
    }
}

/// The digest an entry without extended attributes is remembered by.
pub fn memo_key(path: &RelPath, ino: u64, ctime: Time, filter: XattrFilter) -> u64 {
    let flags = (filter.xattrs as u64) | (filter.acls as u64) << 1;
    entry_digest(path, ino, ctime, flags)
}

/// The digest the regular files of one directory are remembered by when
/// none has extended attributes: an order-independent digest of their
/// `memo_key`s (`None` when there are none).
pub fn group_key(keys: impl Iterator<Item = u64>) -> Option<u64> {
    let (mut sum, mut n) = (0u64, 0u64);
    for k in keys {
        sum = sum.wrapping_add(finish(k ^ GROUP));
        n += 1;
    }
    (n > 0).then(|| finish(fold(sum ^ n, K2)))
}

/// The digest a directory listing is remembered by: the directory's path,
/// inode and ctime, and `names_digest` of the names it held.
pub fn listing_key(path: &RelPath, ino: u64, ctime: Time, names: u64) -> u64 {
    entry_digest(path, ino, ctime, names ^ LISTING)
}

/// An order-independent digest of a directory's names (a listing comes in
/// the directory's own order): the wrapping sum of the names' digests, and
/// their count.
pub fn names_digest<'a>(names: impl Iterator<Item = &'a [u8]>) -> u64 {
    let (mut sum, mut n) = (0u64, 0u64);
    for name in names {
        sum = sum.wrapping_add(finish(bytes_digest(SEED, name)));
        n += 1;
    }
    finish(fold(sum ^ n, K1))
}

/// Not a cryptographic hash (inode and ctime are not the writer's to
/// choose): it must tell apart the entries of a tree, where with 10^6
/// lookups into a memo of 10^6 digests a false match is about 5 * 10^-8
/// likely per run, and it is computed for every entry of both trees, so it
/// must be cheap (BLAKE3 was 3% of a no-change run).
fn entry_digest(path: &RelPath, ino: u64, ctime: Time, extra: u64) -> u64 {
    let mut h = fold(SEED ^ ino, K1);
    h = fold(h ^ ctime.sec as u64, K2);
    h = fold(h ^ ctime.nsec as u64, K3);
    h = fold(h ^ extra, K1);
    finish(bytes_digest(h, path.as_bytes()))
}

/// Fold `bytes` (and their length) into the state `h`.
fn bytes_digest(mut h: u64, bytes: &[u8]) -> u64 {
    h = fold(h ^ bytes.len() as u64, K1);
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        h = fold(h ^ u64::from_le_bytes(w.try_into().unwrap()), K2);
    }
    let mut tail = [0u8; 8];
    tail[..words.remainder().len()].copy_from_slice(words.remainder());
    fold(h ^ u64::from_le_bytes(tail), K3)
}

/// Separates listing keys from xattr keys (they live in different files,
/// but a digest should never mean two things).
const LISTING: u64 = 0x6c69_7374_696e_6773;
/// Separates group keys from the keys of single entries.
const GROUP: u64 = 0x6772_6f75_7020_6b65;
const SEED: u64 = 0x243f_6a88_85a3_08d3;
const K1: u64 = 0x9e37_79b9_7f4a_7c15;
const K2: u64 = 0xbf58_476d_1ce4_e5b9;
const K3: u64 = 0x94d0_49bb_1331_11eb;

/// One step of the digest: the 128-bit product of the state and an odd
/// constant, folded to 64 bits (every input bit reaches every output bit).
fn fold(h: u64, k: u64) -> u64 {
    let p = (h as u128) * (k as u128);
    (p as u64) ^ ((p >> 64) as u64)
}

/// A bijective final mix, so the top bits that index the buckets are as
/// uniform as the rest.
fn finish(mut h: u64) -> u64 {
    h ^= h >> 30;
    h = h.wrapping_mul(K2);
    h ^= h >> 27;
    h = h.wrapping_mul(K3);
    h ^ (h >> 31)
}

/// True when a ctime is old enough, against the scan's start, to remember.
pub fn settled(ctime: Time, scan_start_s: i64) -> bool {
    ctime.sec < scan_start_s - SETTLE_S
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let m = DigestMemo::from_keys(vec![9, 3, 3, 7]);
        let enc = m.encode();
        let back = DigestMemo::decode(&enc).unwrap();
        assert!(back.contains(3) && back.contains(7) && back.contains(9));
        assert!(!back.contains(4));
        assert_eq!(back.len(), 3);
        assert!(!DigestMemo::default().contains(3));
        // Many uniform keys: every one is found through the buckets, others not.
        let keys: Vec<u64> = (0..5000u64)
            .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15))
            .collect();
        let big = DigestMemo::from_keys(keys.clone());
        assert!(keys.iter().all(|k| big.contains(*k)));
        assert!(!big.contains(1) && !big.contains(u64::MAX));
        // Truncated, wrong count, unsorted, wrong magic: all rejected.
        assert!(DigestMemo::decode(&enc[..enc.len() - 1]).is_none());
        let mut bad = enc.clone();
        bad[8] = 200;
        assert!(DigestMemo::decode(&bad).is_none());
        let mut unsorted = enc.clone();
        unsorted[HEADER..HEADER + 8].copy_from_slice(&100u64.to_le_bytes());
        assert!(DigestMemo::decode(&unsorted).is_none());
        let mut magic = enc;
        magic[0] = b'X';
        assert!(DigestMemo::decode(&magic).is_none());
    }

    #[test]
    fn key_depends_on_every_part() {
        let p = RelPath::new(b"a/b").unwrap();
        let t = Time { sec: 5, nsec: 6 };
        let f = XattrFilter {
            xattrs: true,
            acls: true,
            user_only: false,
        };
        let k = memo_key(&p, 1, t, f);
        assert_ne!(k, memo_key(&RelPath::new(b"a/c").unwrap(), 1, t, f));
        assert_ne!(k, memo_key(&p, 2, t, f));
        assert_ne!(k, memo_key(&p, 1, Time { sec: 5, nsec: 7 }, f));
        assert_ne!(
            k,
            memo_key(
                &p,
                1,
                t,
                XattrFilter {
                    xattrs: true,
                    acls: false,
                    user_only: false,
                }
            )
        );
    }

    #[test]
    fn keys_of_a_regular_tree_are_distinct_and_spread() {
        // Neighbouring inodes, equal ctimes and near-identical paths: the
        // shape of a generated tree. No two keys may meet, and the top bits
        // (the bucket index) must be evenly used.
        let f = XattrFilter {
            xattrs: true,
            acls: true,
            user_only: false,
        };
        let t = Time {
            sec: 1_700_000_000,
            nsec: 123_456_789,
        };
        let mut keys = Vec::new();
        for d in 0..200u64 {
            for i in 0..1000u64 {
                let p = RelPath::new(format!("dir{d:03}/file{i:05}.dat").as_bytes()).unwrap();
                keys.push(memo_key(&p, 1_000_000 + d * 1000 + i, t, f));
            }
        }
        let m = DigestMemo::from_keys(keys.clone());
        assert_eq!(m.len(), keys.len(), "distinct digests");
        let mut buckets = [0u32; 256];
        for k in &keys {
            buckets[(k >> 56) as usize] += 1;
        }
        let (lo, hi) = (buckets.iter().min().unwrap(), buckets.iter().max().unwrap());
        // 781 expected per bucket; a uniform spread stays well within this.
        assert!(*lo > 600 && *hi < 970, "buckets from {lo} to {hi}");
        assert!(keys.iter().all(|k| m.contains(*k)));
    }

    #[test]
    fn names_digest_ignores_order_and_sees_every_change() {
        let d = |names: &[&str]| names_digest(names.iter().map(|n| n.as_bytes()));
        let base = d(&["a", "b", "longer-name.txt"]);
        assert_eq!(base, d(&["longer-name.txt", "a", "b"]));
        assert_ne!(base, d(&["a", "b"]), "removed");
        assert_ne!(base, d(&["a", "b", "longer-name.txt", "c"]), "added");
        assert_ne!(base, d(&["a", "c", "longer-name.txt"]), "renamed");
        assert_ne!(d(&["a", "a"]), d(&[]), "equal names do not cancel out");
        let p = RelPath::new(b"dir").unwrap();
        let t = Time { sec: 5, nsec: 6 };
        assert_ne!(
            listing_key(&p, 1, t, base),
            listing_key(&p, 1, t, d(&["a"]))
        );
        assert_ne!(listing_key(&p, 1, t, base), listing_key(&p, 2, t, base));
    }
}
