//! The delta engine: rsync-style signatures and deltas, and true in-place
//! reconstruction. Bytes in, bytes out: this crate never opens a path.
//!
//! * [`Signature::generate`] sums the blocks of the old file;
//! * [`make_delta`] scans the new file against a signature and writes COPY/ADD
//!   commands, in target order or ordered for in-place patching ([`inplace`]);
//!   [`make_delta_with`] also compresses the literals against the matched
//!   bytes ([`packed`]);
//! * [`Delta::parse`] decodes and validates a delta whole;
//! * [`patch_to`] streams the new file out, [`patch_in_place`] rebuilds the old
//!   file in its own storage. Both check the result's BLAKE3.

pub mod fine;
pub mod format;
pub mod inplace;
pub mod matcher;
pub mod packed;
pub mod patch;
pub mod rolling;
pub mod signature;
mod wire;

pub use format::{Command, Delta, Layout};
pub use inplace::{CyclePolicy, InPlaceOptions, PlanStats};
pub use packed::LiteralCoding;
pub use patch::{patch_in_place, patch_to, InPlaceTarget, PatchError, PatchOptions};
pub use signature::{Signature, SignatureOptions};

use std::io::Write;

#[derive(Debug)]
pub enum DeltaError {
    /// The input ended while reading the named part.
    Truncated(&'static str),
    /// The input is malformed.
    Corrupt(String),
    /// A request that cannot be honoured (bad option, sequential delta given for in-place...).
    Usage(String),
    /// The file to patch is not the one the delta was made against.
    WrongBasis {
        expected: u64,
        actual: u64,
    },
    /// The rebuilt file does not have the checksum the delta promises.
    ChecksumMismatch,
    Io(std::io::Error),
}

impl std::fmt::Display for DeltaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeltaError::Truncated(what) => write!(f, "truncated input: it ends inside the {what}"),
            DeltaError::Corrupt(why) => write!(f, "corrupt input: {why}"),
            DeltaError::Usage(why) => write!(f, "{why}"),
            DeltaError::WrongBasis { expected, actual } => write!(
                f,
                "the file to patch is {actual} bytes long but the delta was made against a {expected}-byte file"
            ),
            DeltaError::ChecksumMismatch => {
                write!(f, "the result does not match the checksum in the delta (wrong basis file or damaged delta)")
            }
            DeltaError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for DeltaError {}

impl From<std::io::Error> for DeltaError {
    fn from(e: std::io::Error) -> Self {
        DeltaError::Io(e)
    }
}

#[derive(Clone, Debug, Default)]
pub struct DeltaOptions {
    /// `Some` makes an in-place delta with these planner options.
    pub in_place: Option<InPlaceOptions>,
}

/// What a delta costs and how it was planned.
#[derive(Clone, Debug, Default)]
pub struct DeltaStats {
    pub new_len: u64,
    pub literal_bytes: u64,
    pub matched_bytes: u64,
    pub copy_commands: u64,
    pub add_commands: u64,
    pub delta_bytes: u64,
    pub block_len: u32,
    pub strong_len: u8,
    /// Zero for sequential deltas.
    pub plan: PlanStats,
}

/// Scans `new` against `sig` and writes the delta to `out`, its literals raw
/// (format version 1, which every accord reads).
pub fn make_delta(
    sig: &Signature,
    new: &[u8],
    opts: &DeltaOptions,
    out: &mut impl Write,
) -> Result<DeltaStats, DeltaError> {
    make_delta_with(sig, new, opts, LiteralCoding::Raw, out)
}

/// [`make_delta`] with the literals stored as `coding` says: compressed
/// (format version 2) for a delta that crosses a compressed link to a
/// reader that takes it. An in-place delta keeps them raw: its receiver
/// overwrites the matched bytes a dictionary would be made of.
pub fn make_delta_with(
    sig: &Signature,
    new: &[u8],
    opts: &DeltaOptions,
    coding: LiteralCoding,
    out: &mut impl Write,
) -> Result<DeltaStats, DeltaError> {
    if opts.in_place.is_some() && sig.strong_len < signature::MIN_UNVERIFIED_STRONG_LEN {
        // An in-place patch overwrites the old file before its result can
        // be checked: its matches must not rely on a check afterwards.
        return Err(DeltaError::Usage(format!(
            "an in-place delta needs strong sums of at least {} bytes, this signature has {}",
            signature::MIN_UNVERIFIED_STRONG_LEN,
            sig.strong_len
        )));
    }
    let index = matcher::Index::new(sig)?;
    let (copies, result_hash) = rayon::join(|| index.find_matches(new), || hash_parallel(new));
    let new_len = new.len() as u64;
    let (layout, commands, plan, scratch_len) = match &opts.in_place {
        None => (
            Layout::Sequential,
            sequential_commands(&copies, new_len, coding != LiteralCoding::Raw),
            PlanStats::default(),
            0,
        ),
        Some(ip) => {
            let (cmds, st) = inplace::plan(&copies, new_len, sig.block_len as u64, ip);
            let scratch = st.scratch_len;
            (Layout::InPlace, cmds, st, scratch)
        }
    };
    let header = format::Header {
        layout,
        old_len: sig.file_len,
        new_len,
        result_hash,
        scratch_len,
    };
    let mut st = encode_counted(&header, &commands, new, coding, out)?;
    st.block_len = sig.block_len;
    st.strong_len = sig.strong_len;
    st.plan = plan;
    Ok(st)
}

/// Encodes `commands` and counts what they hold.
pub(crate) fn encode_counted(
    header: &format::Header,
    commands: &[Command],
    new: &[u8],
    coding: LiteralCoding,
    out: &mut impl Write,
) -> Result<DeltaStats, DeltaError> {
    let delta_bytes = format::encode_with(header, commands, new, coding, out)?;
    let mut st = DeltaStats {
        new_len: header.new_len,
        delta_bytes,
        ..Default::default()
    };
    for c in commands {
        match c {
            Command::Copy { .. } => st.copy_commands += 1,
            Command::Add { len, .. } => {
                st.add_commands += 1;
                st.literal_bytes += len;
            }
            _ => {}
        }
    }
    st.matched_bytes = header.new_len - st.literal_bytes;
    Ok(st)
}

/// COPYs in target order with ADDs for the gaps; with `packed`, no ADD
/// crossing the end of a segment of compressed literals
/// ([`packed::SEGMENT`]).
pub(crate) fn sequential_commands(
    copies: &[matcher::Copy],
    new_len: u64,
    packed: bool,
) -> Vec<Command> {
    let mut cmds = Vec::with_capacity(copies.len() * 2 + 1);
    let mut at = 0;
    let cut = if packed { packed::SEGMENT } else { u64::MAX };
    for c in copies {
        push_adds(&mut cmds, at, c.dst, cut);
        cmds.push(Command::Copy {
            src: c.src,
            dst: c.dst,
            len: c.len,
        });
        at = c.dst + c.len;
    }
    push_adds(&mut cmds, at, new_len, cut);
    cmds
}

/// ADDs for the target bytes `from..to`, cut at multiples of `cut`.
fn push_adds(cmds: &mut Vec<Command>, mut from: u64, to: u64, cut: u64) {
    while from < to {
        let seg_end = (from / cut).saturating_add(1).saturating_mul(cut);
        let end = to.min(seg_end);
        cmds.push(Command::Add {
            dst: from,
            len: end - from,
            data: from as usize,
        });
        from = end;
    }
}

fn hash_parallel(data: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    if data.len() >= 1 << 20 {
        h.update_rayon(data);
    } else {
        h.update(data);
    }
    *h.finalize().as_bytes()
}
