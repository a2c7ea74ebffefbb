//! One pass of the rolling checksum over the new data, looking up each window
//! in a table built from the signature.
//!
//! Identical blocks share one table entry with a sorted list of positions, so
//! a basis made of a million copies of one block costs one probe per window,
//! not a walk down a million-long chain. After a match the scan jumps a whole
//! block; large inputs are cut into segments scanned in parallel and stitched
//! back so that the result equals what one sequential scan would find.

use crate::rolling::{self, Roller};
use crate::signature::Signature;
use crate::DeltaError;
use rayon::prelude::*;

/// A run of the new file found in the old one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copy {
    pub src: u64,
    pub dst: u64,
    pub len: u64,
}

/// Blocks that share a weak sum and a strong sum.
struct Group {
    weak: u32,
    /// A member, to read the group's strong sum from the signature.
    first: u32,
    start: u32,
    len: u32,
}

/// Most blocks a signature may have (the table and filter index with 32 bits).
const MAX_BLOCKS: usize = 1 << 29;
/// After this many windows whose weak sum matched a value but whose strong sum
/// did not, the scan stops believing that weak value: honest signatures almost
/// never collide even once, so only a crafted signature (or a freak input)
/// gets here, and it then costs bounded work instead of a strong sum per byte.
const FALSE_ALARM_LIMIT: u32 = 64;
/// Below this size one thread scans the whole input.
const PARALLEL_MIN: usize = 4 << 20;

pub struct Index<'s> {
    sig: &'s Signature,
    groups: Vec<Group>,
    positions: Vec<u32>,
    table: Vec<u32>,
    shift: u32,
    /// One bit per hashed weak sum, 16 bits per group: a cache-friendly first
    /// test for the rolling loop before the table is probed.
    filter: Vec<u64>,
    filter_shift: u32,
    /// The short last block, if the old file does not end on a block boundary.
    tail: Option<u32>,
}

impl<'s> Index<'s> {
    pub fn new(sig: &'s Signature) -> Result<Index<'s>, DeltaError> {
        let count = sig.block_count();
        // Bounded so the table (2 slots per block) and filter indices fit 32 bits.
        if count > MAX_BLOCKS {
            return Err(DeltaError::Usage(format!(
                "{count} blocks are too many; use a larger block length"
            )));
        }
        let bl = sig.block_len as u64;
        let tail = (!sig.file_len.is_multiple_of(bl)).then(|| count as u32 - 1);
        let full = if tail.is_some() { count - 1 } else { count };
        let mut order: Vec<u32> = (0..full as u32).collect();
        order.sort_unstable_by(|&a, &b| {
            (sig.weak[a as usize], sig.strong_of(a as usize), a).cmp(&(
                sig.weak[b as usize],
                sig.strong_of(b as usize),
                b,
            ))
        });
        let mut groups: Vec<Group> = Vec::new();
        for (i, &b) in order.iter().enumerate() {
            let same = groups.last().is_some_and(|g| {
                g.weak == sig.weak[b as usize]
                    && sig.strong_of(g.first as usize) == sig.strong_of(b as usize)
            });
            if same {
                groups.last_mut().unwrap().len += 1;
            } else {
                groups.push(Group {
                    weak: sig.weak[b as usize],
                    first: b,
                    start: i as u32,
                    len: 1,
                });
            }
        }
        let slots = (groups.len() * 2).next_power_of_two().max(16);
        let shift = 32 - slots.trailing_zeros();
        let mut table = vec![0u32; slots];
        for (gi, g) in groups.iter().enumerate() {
            if gi > 0 && groups[gi - 1].weak == g.weak {
                continue; // probes land on the first group of a weak value
            }
            let mut slot = slot_of(g.weak, shift);
            while table[slot] != 0 {
                slot = (slot + 1) & (slots - 1);
            }
            table[slot] = gi as u32 + 1;
        }
        let filter_bits = (groups.len() * 16).next_power_of_two().clamp(4096, 1 << 31);
        let filter_shift = 32 - filter_bits.trailing_zeros();
        let mut filter = vec![0u64; filter_bits / 64];
        for g in &groups {
            let bit = (g.weak.wrapping_mul(0x85EB_CA6B) >> filter_shift) as usize;
            filter[bit >> 6] |= 1 << (bit & 63);
        }
        Ok(Index {
            sig,
            groups,
            positions: order,
            table,
            shift,
            filter,
            filter_shift,
            tail,
        })
    }

    #[inline(always)]
    fn lookup(&self, weak: u32) -> Option<usize> {
        let mask = self.table.len() - 1;
        let mut slot = slot_of(weak, self.shift);
        loop {
            let s = self.table[slot];
            if s == 0 {
                return None;
            }
            let g = (s - 1) as usize;
            if self.groups[g].weak == weak {
                return Some(g);
            }
            slot = (slot + 1) & mask;
        }
    }

    /// The block whose strong sum is `strong`, if any, among the groups
    /// with the window's weak sum.
    fn strong_match(
        &self,
        first_group: usize,
        weak: u32,
        strong: &[u8],
        dst: u64,
        prev_src_end: u64,
    ) -> Option<u32> {
        // Groups of one weak sum are sorted by strong sum: binary search, so a
        // signature stuffed with blocks of one weak sum costs a log, not a walk.
        let run = &self.groups[first_group..];
        let run = &run[..run.partition_point(|g| g.weak == weak)];
        let i = run
            .binary_search_by(|g| self.sig.strong_of(g.first as usize).cmp(strong))
            .ok()?;
        Some(self.choose(&run[i], dst, prev_src_end))
    }

    /// After a match, the next window usually continues into the next block:
    /// check that block directly, without the table. A short strong sum is
    /// compared with the weak sum too (`weak`): its length was chosen
    /// counting on the weak sum's 32 bits (`signature::verified_strong_len`),
    /// and at two bytes alone it let one run's end in 65,536 pass as a
    /// match. The block already in place wins if it has the same contents.
    fn continues(&self, next: u64, (weak, strong): (Option<u32>, &[u8]), dst: u64) -> Option<u32> {
        let full = self.full_blocks() as u64;
        let same = |b: u64| {
            weak.is_none_or(|w| self.sig.weak[b as usize] == w)
                && self.sig.strong_of(b as usize) == strong
        };
        if next >= full || !same(next) {
            return None;
        }
        let bl = self.sig.block_len as u64;
        let here = dst / bl;
        if dst.is_multiple_of(bl) && here < full && here != next && same(here) {
            return Some(here as u32);
        }
        Some(next as u32)
    }

    fn full_blocks(&self) -> usize {
        self.sig.block_count() - self.tail.is_some() as usize
    }

    /// Among identical blocks prefer the one already in place (free for an
    /// in-place update), then the one after the previous match (keeps copies
    /// long), then the nearest one.
    fn choose(&self, g: &Group, dst: u64, prev_src_end: u64) -> u32 {
        let ps = &self.positions[g.start as usize..(g.start + g.len) as usize];
        if ps.len() == 1 {
            return ps[0];
        }
        let bl = self.sig.block_len as u64;
        for want in [dst, prev_src_end] {
            if want.is_multiple_of(bl) && want / bl < u32::MAX as u64 {
                let b = (want / bl) as u32;
                if ps.binary_search(&b).is_ok() {
                    return b;
                }
            }
        }
        let target = dst / bl;
        let i = ps.partition_point(|&p| (p as u64) < target);
        match (ps.get(i), i.checked_sub(1).map(|j| ps[j])) {
            (Some(&hi), Some(lo)) if target - lo as u64 <= hi as u64 - target => lo,
            (Some(&hi), _) => hi,
            (None, Some(lo)) => lo,
            (None, None) => unreachable!("groups are never empty"),
        }
    }

    /// Scans windows starting in `[from, until)` and appends the matches.
    /// Returns where a following scan must resume: `until`, or further if the
    /// last match ran past it.
    fn scan(&self, data: &[u8], from: usize, until: usize, out: &mut Vec<Copy>) -> usize {
        let bl = self.sig.block_len as usize;
        let n = data.len();
        let mut pos = from;
        let mut prev_src_end = u64::MAX;
        if !self.groups.is_empty() && pos < until && pos + bl <= n {
            let roller = Roller::new(bl);
            let slen = self.sig.strong_len as usize;
            // The last window this scan may look at: it must fit and start before `until`.
            let last = (until - 1).min(n - bl);
            let mut guard = RepeatGuard::default();
            // The strong sum of the window at `pos`, when already computed.
            let mut strong: Option<[u8; 32]> = None;
            let mut alarms: std::collections::HashMap<usize, u32> = Default::default();
            let mut h = rolling::weak(&data[pos..pos + bl]);
            loop {
                if let Some(g) = self.lookup(h) {
                    let believed = alarms.get(&g).is_none_or(|&n| n < FALSE_ALARM_LIMIT);
                    if believed && !guard.repeats_failure(data, pos, bl) {
                        let s = strong
                            .take()
                            .unwrap_or_else(|| self.sig.strong_sum(&data[pos..pos + bl]));
                        if let Some(b) =
                            self.strong_match(g, h, &s[..slen], pos as u64, prev_src_end)
                        {
                            out.push(Copy {
                                src: b as u64 * bl as u64,
                                dst: pos as u64,
                                len: bl as u64,
                            });
                            prev_src_end = (b as u64 + 1) * bl as u64;
                            pos += bl;
                            strong = self.follow_run(data, &mut pos, last, &mut prev_src_end, out);
                            if pos > last {
                                break;
                            }
                            h = rolling::weak(&data[pos..pos + bl]);
                            continue;
                        }
                        guard.failed(pos);
                        *alarms.entry(g).or_insert(0) += 1;
                    }
                }
                strong = None;
                if pos >= last {
                    pos += 1;
                    break;
                }
                (pos, h) = self.roll_to_candidate(data, pos, h, last, &roller);
            }
        }
        if until == n {
            if let Some(t) = self.tail {
                let tail_len = self.sig.len_of(t as usize) as usize;
                if n >= tail_len && n - tail_len >= pos {
                    let window = &data[n - tail_len..];
                    if rolling::weak(window) == self.sig.weak[t as usize]
                        && self.sig.strong_sum(window)[..self.sig.strong_len as usize]
                            == *self.sig.strong_of(t as usize)
                    {
                        let src = t as u64 * self.sig.block_len as u64;
                        out.push(Copy {
                            src,
                            dst: (n - tail_len) as u64,
                            len: tail_len as u64,
                        });
                        return n;
                    }
                }
            }
        }
        pos.max(until)
    }

    /// After a match, follows the run of matches block by block. Returns the
    /// strong sum of the window where the run stopped, if it was computed.
    fn follow_run(
        &self,
        data: &[u8],
        pos: &mut usize,
        last: usize,
        prev_src_end: &mut u64,
        out: &mut Vec<Copy>,
    ) -> Option<[u8; 32]> {
        let bl = self.sig.block_len as usize;
        let slen = self.sig.strong_len as usize;
        while *pos <= last {
            let window = &data[*pos..*pos + bl];
            let s = self.sig.strong_sum(window);
            // Eight bytes alone keep a false match rarer than 2^-24 for
            // any file: at most one check per block of the new file.
            let weak = (slen < 8).then(|| rolling::weak(window));
            let sums = (weak, &s[..slen]);
            let Some(b) = self.continues(*prev_src_end / bl as u64, sums, *pos as u64) else {
                return Some(s);
            };
            out.push(Copy {
                src: b as u64 * bl as u64,
                dst: *pos as u64,
                len: bl as u64,
            });
            *prev_src_end = (b as u64 + 1) * bl as u64;
            *pos += bl;
        }
        None
    }

    /// Rolls the window forward until the filter says its weak sum may be in
    /// the table, or until `last`. The hot loop: no bounds checks, no table.
    #[inline]
    fn roll_to_candidate(
        &self,
        data: &[u8],
        pos: usize,
        mut h: u32,
        last: usize,
        roller: &Roller,
    ) -> (usize, u32) {
        let bl = self.sig.block_len as usize;
        let outgoing = &data[pos..last];
        let incoming = &data[pos + bl..last + bl];
        for (i, (&o, &inb)) in outgoing.iter().zip(incoming).enumerate() {
            h = roller.roll(h, o, inb);
            if self.maybe(h) {
                return (pos + i + 1, h);
            }
        }
        (last, h)
    }

    #[inline(always)]
    fn maybe(&self, weak: u32) -> bool {
        let bit = (weak.wrapping_mul(0x85EB_CA6B) >> self.filter_shift) as usize;
        self.filter[bit >> 6] >> (bit & 63) & 1 == 1
    }

    /// All matches of `data`, ordered by target offset, adjacent ones merged.
    pub fn find_matches(&self, data: &[u8]) -> Vec<Copy> {
        let n = data.len();
        let bl = self.sig.block_len as usize;
        let segments = if n >= PARALLEL_MIN && n / 2 > 4 * bl {
            let want = rayon::current_num_threads().max(1) * 16;
            want.min(n / (4 * bl)).max(1)
        } else {
            1
        };
        let bounds: Vec<usize> = (0..=segments)
            .map(|i| (n as u128 * i as u128 / segments as u128) as usize)
            .collect();
        let parts: Vec<(Vec<Copy>, usize)> = (0..segments)
            .into_par_iter()
            .map(|i| {
                let mut v = Vec::new();
                let r = self.scan(data, bounds[i], bounds[i + 1], &mut v);
                (v, r)
            })
            .collect();
        let mut all = Vec::new();
        let mut resume = 0usize;
        for (i, (copies, seg_resume)) in parts.into_iter().enumerate() {
            let (from, until) = (bounds[i], bounds[i + 1]);
            if resume == from {
                all.extend_from_slice(&copies);
                resume = seg_resume;
                continue;
            }
            // The previous segment's last match ran into this one: scan on from
            // there until we reach a match this segment found on its own.
            let mut idx = 0;
            loop {
                while idx < copies.len() && copies[idx].dst < resume as u64 {
                    idx += 1;
                }
                if idx == copies.len() {
                    if resume < until {
                        resume = self.scan(data, resume, until, &mut all);
                    }
                    break;
                }
                let target = copies[idx].dst as usize;
                if resume == target {
                    all.extend_from_slice(&copies[idx..]);
                    resume = seg_resume;
                    break;
                }
                resume = self.scan(data, resume, target, &mut all);
            }
        }
        coalesce(all)
    }
}

#[inline(always)]
fn slot_of(weak: u32, shift: u32) -> usize {
    (weak.wrapping_mul(0x9E37_79B1) >> shift) as usize
}

/// Merges copies that continue each other in both files.
pub fn coalesce(copies: Vec<Copy>) -> Vec<Copy> {
    let mut out: Vec<Copy> = Vec::with_capacity(copies.len());
    for c in copies {
        if let Some(last) = out.last_mut() {
            if last.dst + last.len == c.dst && last.src + last.len == c.src {
                last.len += c.len;
                continue;
            }
        }
        out.push(c);
    }
    out
}

/// Remembers the last window whose candidate failed its strong check, and a
/// run of equal bytes already verified, so that a long run of one byte value
/// (a window equal to the one before) is not strong-summed at every offset.
#[derive(Default)]
struct RepeatGuard {
    last_fail: Option<usize>,
    const_start: usize,
    const_end: usize,
}

impl RepeatGuard {
    fn failed(&mut self, pos: usize) {
        self.last_fail = Some(pos);
    }

    /// Whether the window at `pos` has the same bytes as the failed one at `pos - 1`.
    fn repeats_failure(&mut self, data: &[u8], pos: usize, bl: usize) -> bool {
        if pos == 0 || self.last_fail != Some(pos - 1) {
            return false;
        }
        // Windows at pos-1 and pos are equal iff data[pos-1 .. pos+bl] is one byte value.
        let (a, b) = (pos - 1, pos + bl);
        let known = self.const_start <= a && b <= self.const_end;
        let extends = self.const_start <= a && self.const_end + 1 == b && data[b - 1] == data[a];
        let fresh = || data[a..b].iter().all(|&x| x == data[a]);
        if known || extends {
            self.const_end = self.const_end.max(b);
        } else if fresh() {
            (self.const_start, self.const_end) = (a, b);
        } else {
            return false;
        }
        self.last_fail = Some(pos);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::SignatureOptions;

    /// A signature whose every block has the weak sum of a run of 0x80 bytes
    /// but a different strong sum: every window of a 0x80 run hits the table
    /// and fails, the case the repeat guard keeps linear.
    #[test]
    fn forced_weak_collisions_on_constant_runs_find_nothing_and_stay_correct() {
        let bl = 64usize;
        let old: Vec<u8> = (0..bl as u32 * 50).map(|i| (i * 31 % 251) as u8).collect();
        let mut sig = Signature::generate(
            &old,
            &SignatureOptions {
                block_len: Some(bl as u32),
                ..Default::default()
            },
        )
        .unwrap();
        let w = rolling::weak(&vec![0x80u8; bl]);
        sig.weak.iter_mut().for_each(|x| *x = w);
        let index = Index::new(&sig).unwrap();
        let mut new = vec![0x80u8; 100_000];
        new.extend_from_slice(&old[..bl * 3]);
        let mut guard_hits = RepeatGuard::default();
        guard_hits.failed(9);
        assert!(guard_hits.repeats_failure(&new, 10, bl));
        let copies = index.find_matches(&new);
        // The real blocks at the end still match (their weak sums were replaced,
        // so only windows of 0x80 reach the strong check; none matches).
        assert!(copies.is_empty(), "{copies:?}");
    }

    /// Regression (review of the delta engine): a crafted signature whose
    /// blocks share the weak sum of a period-2 window made every window of
    /// "abab…" compute a strong sum and walk every block. The false-alarm
    /// limit and the binary search over strong sums keep it linear.
    #[test]
    fn crafted_weak_collisions_cost_bounded_work() {
        for (bl, blocks, new_len) in [(64usize, 4000usize, 256 << 10), (1 << 16, 1, 1 << 20)] {
            let old: Vec<u8> = (0..(bl * blocks) as u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
                .collect();
            let opts = SignatureOptions {
                block_len: Some(bl as u32),
                ..Default::default()
            };
            let mut sig = Signature::generate(&old, &opts).unwrap();
            let abab: Vec<u8> = (0..new_len)
                .map(|i| if i % 2 == 0 { b'a' } else { b'b' })
                .collect();
            let w = rolling::weak(&abab[..bl]);
            sig.weak.iter_mut().for_each(|x| *x = w);
            let index = Index::new(&sig).unwrap();
            assert!(index.find_matches(&abab).is_empty());
        }
    }

    #[test]
    fn parallel_segments_find_the_same_bytes_as_one_scan() {
        let bl = 1024usize;
        let old: Vec<u8> = (0..(6u32 << 20))
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let mut new = old.clone();
        for k in 0..40 {
            let at = k * 150_001 % (new.len() - 100);
            new.splice(at..at, [k as u8; 37]);
        }
        let sig = Signature::generate(
            &old,
            &SignatureOptions {
                block_len: Some(bl as u32),
                ..Default::default()
            },
        )
        .unwrap();
        let index = Index::new(&sig).unwrap();
        let parallel = index.find_matches(&new);
        let mut one = Vec::new();
        index.scan(&new, 0, new.len(), &mut one);
        let covered = |v: &[Copy]| v.iter().map(|c| c.len).sum::<u64>();
        assert_eq!(covered(&parallel), covered(&coalesce(one)));
        for c in &parallel {
            assert_eq!(
                &new[c.dst as usize..(c.dst + c.len) as usize],
                &old[c.src as usize..(c.src + c.len) as usize]
            );
        }
    }
}
