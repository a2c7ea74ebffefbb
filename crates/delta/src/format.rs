//! The delta format, its encoder and its validating decoder.
//!
//! ```text
//! "ACDL" version:u8 layout:u8 old_len new_len blake3(result):[32] scratch_len count
//! count × command
//! literals:   coding:u8, then the literal bytes (version 2 only)
//! ```
//! Numbers are LEB128 varints. Sequential layout: `0 src len` (COPY) and
//! `1 len` (ADD; its bytes follow in version 1), target offsets implicit.
//! In-place layout: `0 src dst len` (COPY), `1 dst len` (ADD), `2 dst len` (KEEP: already in place),
//! `3 src len slot` (STASH old bytes into scratch), `4 slot dst len` (UNSTASH),
//! executed in the order given.
//!
//! Version 1 has each ADD's bytes right after its command and no literal
//! section: it is what is written when the literals are raw, and what every
//! accord reads. Version 2 keeps the ADD bytes after the commands: coding
//! `1` (sequential layout only), per segment of the target holding
//! literals, zstd frames against the matched bytes ([`crate::packed`]);
//! written only for a reader known to take it (a peer that agreed to it at
//! the handshake). Coding `0`, the raw bytes in command order, is read but
//! not written.
//!
//! A delta is decoded and checked whole before anything is written: every
//! command in bounds, targets covering the output exactly once, for the
//! in-place layout no command reading bytes an earlier command overwrote,
//! and every compressed frame whole and declaring the length its commands
//! need.

use crate::packed::{self, LiteralCoding, PackedSegment};
use crate::wire::{put_varint, Reader};
use crate::DeltaError;
use std::collections::BTreeMap;
use std::io::Write;

const MAGIC: &[u8; 4] = b"ACDL";
/// Literals after the commands, compressed (or raw).
const VERSION: u8 = 2;
/// Literals inline after each ADD: written when they are raw.
const VERSION_INLINE: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Commands in target order; applied by streaming into a new file.
    Sequential,
    /// Commands ordered so the old file can be rebuilt in its own storage.
    InPlace,
}

/// One command. `Add::data` is where its bytes are when decoded (an offset
/// into the delta's bytes, or into its decoded segment when the literals
/// are compressed), and an offset into the new file when encoding (where it
/// equals `dst`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    Copy { src: u64, dst: u64, len: u64 },
    Add { dst: u64, len: u64, data: usize },
    Keep { dst: u64, len: u64 },
    Stash { src: u64, len: u64, slot: u64 },
    Unstash { slot: u64, dst: u64, len: u64 },
}

impl Command {
    /// The target range this command fills, if any.
    pub fn target(&self) -> Option<(u64, u64)> {
        match *self {
            Command::Copy { dst, len, .. }
            | Command::Add { dst, len, .. }
            | Command::Keep { dst, len }
            | Command::Unstash { dst, len, .. } => Some((dst, len)),
            Command::Stash { .. } => None,
        }
    }
}

/// A decoded, validated delta borrowing its literal bytes from the buffer.
#[derive(Debug)]
pub struct Delta<'a> {
    pub layout: Layout,
    pub old_len: u64,
    pub new_len: u64,
    pub result_hash: [u8; 32],
    pub scratch_len: u64,
    pub commands: Vec<Command>,
    buf: &'a [u8],
    /// The segments whose literals are zstd frames, in target order.
    packed: Vec<PackedSegment>,
}

/// What the encoder needs besides the commands.
pub struct Header {
    pub layout: Layout,
    pub old_len: u64,
    pub new_len: u64,
    pub result_hash: [u8; 32],
    pub scratch_len: u64,
}

/// Writes a delta with raw literals; ADD bytes are taken from `new` at the
/// command's target offset.
pub fn encode(
    h: &Header,
    commands: &[Command],
    new: &[u8],
    out: &mut impl Write,
) -> std::io::Result<u64> {
    encode_with(h, commands, new, LiteralCoding::Raw, out)
}

/// Writes a delta with its literals stored as `coding` says. Raw literals
/// (and every in-place delta) are written in version 1, which every accord
/// reads; compressed ones in version 2, for a reader known to take it.
/// Compressed literals need ADDs that do not cross a segment end
/// (`make_delta` splits them).
pub fn encode_with(
    h: &Header,
    commands: &[Command],
    new: &[u8],
    coding: LiteralCoding,
    out: &mut impl Write,
) -> std::io::Result<u64> {
    let seq = h.layout == Layout::Sequential;
    let packed_level = match coding {
        LiteralCoding::Zstd { level } if seq => Some(level),
        _ => None,
    };
    let mut head = Vec::with_capacity(64);
    head.extend_from_slice(MAGIC);
    head.push(match packed_level {
        Some(_) => VERSION,
        None => VERSION_INLINE,
    });
    head.push(match h.layout {
        Layout::Sequential => 0,
        Layout::InPlace => 1,
    });
    put_varint(&mut head, h.old_len);
    put_varint(&mut head, h.new_len);
    head.extend_from_slice(&h.result_hash);
    put_varint(&mut head, h.scratch_len);
    put_varint(&mut head, commands.len() as u64);
    out.write_all(&head)?;
    let mut written = head.len() as u64;
    let inline = packed_level.is_none();
    let mut buf = Vec::with_capacity(64 << 10);
    for c in commands {
        match *c {
            Command::Copy { src, dst, len } => {
                buf.push(0);
                put_varint(&mut buf, src);
                if !seq {
                    put_varint(&mut buf, dst);
                }
                put_varint(&mut buf, len);
            }
            Command::Add { dst, len, .. } => {
                buf.push(1);
                if !seq {
                    put_varint(&mut buf, dst);
                }
                put_varint(&mut buf, len);
                if inline {
                    // Version 1: the bytes right after their command.
                    out.write_all(&buf)?;
                    written += buf.len() as u64;
                    buf.clear();
                    out.write_all(&new[dst as usize..(dst + len) as usize])?;
                    written += len;
                }
            }
            Command::Keep { dst, len } => {
                buf.push(2);
                put_varint(&mut buf, dst);
                put_varint(&mut buf, len);
            }
            Command::Stash { src, len, slot } => {
                buf.push(3);
                put_varint(&mut buf, src);
                put_varint(&mut buf, len);
                put_varint(&mut buf, slot);
            }
            Command::Unstash { slot, dst, len } => {
                buf.push(4);
                put_varint(&mut buf, slot);
                put_varint(&mut buf, dst);
                put_varint(&mut buf, len);
            }
        }
        if buf.len() >= 60 << 10 {
            out.write_all(&buf)?;
            written += buf.len() as u64;
            buf.clear();
        }
    }
    out.write_all(&buf)?;
    written += buf.len() as u64;
    if let Some(level) = packed_level {
        out.write_all(&[LITERALS_PACKED])?;
        written += 1 + packed::write_segments(commands, new, level, out)?;
    }
    Ok(written)
}

/// Whether encoded delta bytes claim format 2, which only a reader that
/// agreed to it may be given (a relay checks what it passes on).
pub fn is_format_2(bytes: &[u8]) -> bool {
    bytes.len() > MAGIC.len() && bytes.starts_with(MAGIC) && bytes[MAGIC.len()] == VERSION
}

/// Literal section codings.
const LITERALS_RAW: u8 = 0;
const LITERALS_PACKED: u8 = 1;

impl<'a> Delta<'a> {
    /// Decodes and validates a whole delta.
    pub fn parse(buf: &'a [u8]) -> Result<Delta<'a>, DeltaError> {
        let mut r = Reader::new(buf);
        if r.bytes(4, "delta magic")? != MAGIC {
            return Err(DeltaError::Corrupt(
                "not an Accord delta (bad magic)".into(),
            ));
        }
        let version = r.u8("delta version")?;
        if version != VERSION && version != VERSION_INLINE {
            return Err(DeltaError::Corrupt(format!(
                "delta format version {version} is not supported (this accord reads {VERSION_INLINE} and {VERSION}); \
                 make the delta again with this accord"
            )));
        }
        let inline = version == VERSION_INLINE;
        let layout = match r.u8("delta layout")? {
            0 => Layout::Sequential,
            1 => Layout::InPlace,
            x => return Err(DeltaError::Corrupt(format!("unknown delta layout {x}"))),
        };
        let old_len = r.varint("old length")?;
        let new_len = r.varint("new length")?;
        let result_hash: [u8; 32] = r.bytes(32, "result checksum")?.try_into().unwrap();
        let scratch_len = r.varint("scratch length")?;
        let count = r.varint("command count")?;
        // Every command takes at least two bytes: bound the count before allocating.
        if count > (r.remaining() / 2) as u64 {
            return Err(DeltaError::Truncated("delta commands"));
        }
        let mut commands = Vec::with_capacity(count as usize);
        let mut next_dst = 0u64;
        for _ in 0..count {
            let c = read_command(&mut r, layout, inline, &mut next_dst)?;
            commands.push(c);
        }
        let packed = if inline {
            Vec::new()
        } else {
            read_literals(&mut r, layout, &mut commands)?
        };
        r.expect_end("delta's literal data")?;
        let d = Delta {
            layout,
            old_len,
            new_len,
            result_hash,
            scratch_len,
            commands,
            buf,
            packed,
        };
        d.validate()?;
        Ok(d)
    }

    /// The literal bytes of an ADD command whose bytes are stored raw
    /// (see [`Delta::packed_segment`]).
    pub fn add_bytes(&self, data: usize, len: u64) -> &'a [u8] {
        &self.buf[data..data + len as usize]
    }

    /// Whether some literals are compressed (then [`crate::patch_to`]
    /// decodes them; in-place deltas never have them).
    pub fn has_packed_literals(&self) -> bool {
        !self.packed.is_empty()
    }

    /// The packed segment holding the target byte `dst`, if its literals
    /// are compressed.
    pub(crate) fn packed_segment(&self, dst: u64) -> Option<&PackedSegment> {
        let start = dst >> packed::SEGMENT_LOG << packed::SEGMENT_LOG;
        let i = self.packed.partition_point(|p| p.start < start);
        self.packed.get(i).filter(|p| p.start == start)
    }

    /// A packed segment's frame.
    pub(crate) fn frame(&self, seg: &PackedSegment) -> &'a [u8] {
        &self.buf[seg.frame.0..seg.frame.0 + seg.frame.1]
    }

    fn validate(&self) -> Result<(), DeltaError> {
        for (i, c) in self.commands.iter().enumerate() {
            self.check_bounds(i, c)?;
        }
        self.check_coverage()?;
        if self.layout == Layout::InPlace {
            self.check_order()?;
        }
        Ok(())
    }

    fn check_bounds(&self, i: usize, c: &Command) -> Result<(), DeltaError> {
        let bad = |what: String| Err(DeltaError::Corrupt(format!("command {i}: {what}")));
        let end = |a: u64, l: u64| a.checked_add(l);
        let in_old = |a: u64, l: u64| end(a, l).is_some_and(|e| e <= self.old_len);
        let in_new = |a: u64, l: u64| end(a, l).is_some_and(|e| e <= self.new_len);
        let in_scratch = |a: u64, l: u64| end(a, l).is_some_and(|e| e <= self.scratch_len);
        if let Some((dst, len)) = c.target() {
            if len == 0 {
                return bad("empty command".into());
            }
            if !in_new(dst, len) {
                return bad(format!(
                    "target {dst}+{len} is beyond the new length {}",
                    self.new_len
                ));
            }
        }
        match *c {
            Command::Copy { src, len, .. } if !in_old(src, len) => bad(format!(
                "copy source {src}+{len} is beyond the old length {}",
                self.old_len
            )),
            Command::Keep { dst, len } if !in_old(dst, len) => bad(format!(
                "kept range {dst}+{len} is beyond the old length {}",
                self.old_len
            )),
            Command::Stash { src, len, slot }
                if len == 0 || !in_old(src, len) || !in_scratch(slot, len) =>
            {
                bad(format!(
                    "stash {src}+{len} into slot {slot} is out of bounds"
                ))
            }
            Command::Unstash { slot, len, .. } if !in_scratch(slot, len) => bad(format!(
                "unstash {slot}+{len} is beyond the scratch length {}",
                self.scratch_len
            )),
            _ => Ok(()),
        }
    }

    /// Target ranges must tile `[0, new_len)`: no gap, no overlap.
    fn check_coverage(&self) -> Result<(), DeltaError> {
        let mut ranges: Vec<(u64, u64)> = self.commands.iter().filter_map(|c| c.target()).collect();
        ranges.sort_unstable();
        let mut at = 0u64;
        for (dst, len) in ranges {
            if dst < at {
                return Err(DeltaError::Corrupt(format!(
                    "target ranges overlap at offset {dst}"
                )));
            }
            if dst > at {
                return Err(DeltaError::Corrupt(format!(
                    "target bytes {at}..{dst} are not produced by any command"
                )));
            }
            at = dst + len;
        }
        if at != self.new_len {
            return Err(DeltaError::Corrupt(format!(
                "commands produce {at} bytes, the header says {}",
                self.new_len
            )));
        }
        Ok(())
    }

    /// In-place safety: no command reads old bytes already overwritten, and
    /// every unstash reads scratch filled by one live stash.
    fn check_order(&self) -> Result<(), DeltaError> {
        let mut written = IntervalSet::default();
        let mut live = LiveStashes::default();
        for (i, c) in self.commands.iter().enumerate() {
            let clobbered = |what: &str| {
                DeltaError::Corrupt(format!(
                    "command {i}: {what} reads bytes an earlier command overwrote"
                ))
            };
            match *c {
                Command::Copy { src, dst, len } => {
                    if written.intersects(src, src + len) {
                        return Err(clobbered("copy"));
                    }
                    written.insert(dst, dst + len);
                }
                Command::Stash { src, len, slot } => {
                    if written.intersects(src, src + len) {
                        return Err(clobbered("stash"));
                    }
                    live.stash(slot, len, src);
                }
                Command::Unstash { slot, dst, len } => {
                    if live.source_of(slot, len).is_none() {
                        return Err(DeltaError::Corrupt(format!(
                            "command {i}: unstash reads scratch no stash filled"
                        )));
                    }
                    written.insert(dst, dst + len);
                }
                Command::Add { dst, len, .. } => written.insert(dst, dst + len),
                Command::Keep { .. } => {}
            }
        }
        Ok(())
    }
}

/// The literal section of a version-2 delta: raw bytes in command order,
/// or packed segments (sequential layout only).
fn read_literals(
    r: &mut Reader<'_>,
    layout: Layout,
    commands: &mut [Command],
) -> Result<Vec<PackedSegment>, DeltaError> {
    match r.u8("literal coding")? {
        LITERALS_RAW => {
            for c in commands.iter_mut() {
                if let Command::Add { len, data, .. } = c {
                    if *len > r.remaining() as u64 {
                        return Err(DeltaError::Truncated("add data"));
                    }
                    *data = r.position();
                    r.bytes(*len as usize, "add data")?;
                }
            }
            Ok(Vec::new())
        }
        LITERALS_PACKED if layout == Layout::Sequential => packed::read_segments(r, commands),
        LITERALS_PACKED => Err(DeltaError::Corrupt(
            "compressed literals in an in-place delta".into(),
        )),
        x => Err(DeltaError::Corrupt(format!("unknown literal coding {x}"))),
    }
}

fn read_command(
    r: &mut Reader<'_>,
    layout: Layout,
    inline: bool,
    next_dst: &mut u64,
) -> Result<Command, DeltaError> {
    let seq = layout == Layout::Sequential;
    let tag = r.u8("command tag")?;
    let mut implicit_dst = |len: u64| -> Result<u64, DeltaError> {
        let d = *next_dst;
        *next_dst = d
            .checked_add(len)
            .ok_or_else(|| DeltaError::Corrupt("target offset overflows".into()))?;
        Ok(d)
    };
    Ok(match (tag, seq) {
        (0, true) => {
            let src = r.varint("copy source")?;
            let len = r.varint("copy length")?;
            Command::Copy {
                src,
                dst: implicit_dst(len)?,
                len,
            }
        }
        (0, false) => Command::Copy {
            src: r.varint("copy source")?,
            dst: r.varint("copy target")?,
            len: r.varint("copy length")?,
        },
        (1, _) => {
            let dst = if seq {
                None
            } else {
                Some(r.varint("add target")?)
            };
            let len = r.varint("add length")?;
            // Version 2: the bytes come after the commands (`data` set then).
            let mut data = 0;
            if inline {
                if len > r.remaining() as u64 {
                    return Err(DeltaError::Truncated("add data"));
                }
                data = r.position();
                r.bytes(len as usize, "add data")?;
            }
            let dst = match dst {
                Some(d) => d,
                None => implicit_dst(len)?,
            };
            Command::Add { dst, len, data }
        }
        (2, false) => Command::Keep {
            dst: r.varint("keep target")?,
            len: r.varint("keep length")?,
        },
        (3, false) => Command::Stash {
            src: r.varint("stash source")?,
            len: r.varint("stash length")?,
            slot: r.varint("stash slot")?,
        },
        (4, false) => Command::Unstash {
            slot: r.varint("unstash slot")?,
            dst: r.varint("unstash target")?,
            len: r.varint("unstash length")?,
        },
        (t, _) => {
            return Err(DeltaError::Corrupt(format!(
                "unknown command tag {t} in a {layout:?} delta"
            )))
        }
    })
}

/// The scratch slots filled by STASH commands and not yet overwritten:
/// slot → (length, offset in the old file). Kept disjoint: a new stash
/// drops the ones it overlaps.
#[derive(Default)]
pub struct LiveStashes {
    map: BTreeMap<u64, (u64, u64)>,
}

impl LiveStashes {
    pub fn stash(&mut self, slot: u64, len: u64, src: u64) {
        // Disjoint: walk down from the new one's end only while they overlap.
        let dead: Vec<u64> = self
            .map
            .range(..slot + len)
            .rev()
            .take_while(|(&s, &(l, _))| s + l > slot)
            .map(|(&s, _)| s)
            .collect();
        for s in dead {
            self.map.remove(&s);
        }
        self.map.insert(slot, (len, src));
    }

    /// Where in the old file the bytes of `slot..slot + len` came from, if
    /// one live stash holds them all.
    pub fn source_of(&self, slot: u64, len: u64) -> Option<u64> {
        let (&s, &(l, src)) = self.map.range(..=slot).next_back()?;
        (slot + len <= s + l).then_some(src + (slot - s))
    }
}

/// Disjoint half-open ranges, merged on insert.
#[derive(Default)]
pub struct IntervalSet {
    map: BTreeMap<u64, u64>, // start -> end
}

impl IntervalSet {
    pub fn intersects(&self, a: u64, b: u64) -> bool {
        a < b && self.map.range(..b).next_back().is_some_and(|(_, &e)| e > a)
    }

    pub fn insert(&mut self, mut a: u64, mut b: u64) {
        if a >= b {
            return;
        }
        let touching: Vec<(u64, u64)> = self
            .map
            .range(..=b)
            .rev()
            .take_while(|(_, &e)| e >= a)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in touching {
            self.map.remove(&s);
            a = a.min(s);
            b = b.max(e);
        }
        self.map.insert(a, b);
    }
}
