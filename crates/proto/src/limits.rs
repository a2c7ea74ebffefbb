//! The most a peer may make the other end hold in memory for one request
//! or reply kept whole, by kind (docs/protocol.md, "Limits"). Both ends
//! check them: a server refuses a larger request body, a client a larger
//! reply, and either end charges what it holds to its memory budget.
//! Bulk data (a file's contents) never counts here: it is streamed.

/// A block signature (the body of `MakeDelta`, the reply of `Signature`
/// and `PartialSignature`): one entry of at most 36 bytes per block, and
/// a file of 1 TiB has about a million blocks.
pub const MAX_SIGNATURE: u64 = 64 << 20;

/// Largest file a delta is made or applied for over the wire (the
/// engine sends a larger file whole): its new version is held in memory.
pub const MAX_DELTA_FILE: u64 = 1 << 30;

/// A delta (the body of a `Receive` with a basis and of `PatchInPlace`,
/// the reply of `MakeDelta`) for a file of `size` bytes: its literal data
/// is at most the file, and it has at most two instructions (of at most
/// 32 bytes) per block of the signature's, whose blocks are at least
/// 700 bytes long on the wire.
pub fn max_delta(size: u64) -> u64 {
    size.saturating_add(size / 8).saturating_add(1 << 20)
}

/// The zstd levels a delta's literals may be compressed at (those of
/// `-z`): the cost of the highest is bounded by the segment size of the
/// compressed literals.
pub const MIN_PACK_LEVEL: i32 = -7;
/// See [`MIN_PACK_LEVEL`].
pub const MAX_PACK_LEVEL: i32 = 19;

/// Any delta: one for the largest file a delta is made for.
pub const MAX_DELTA: u64 = MAX_DELTA_FILE + MAX_DELTA_FILE / 8 + (1 << 20);

/// A listing of one directory (about three million entries).
pub const MAX_LISTING: u64 = 256 << 20;

/// A state file (`WriteState`'s body, `ReadState`'s reply).
pub const MAX_STATE: u64 = 256 << 20;

/// A two-way sync's scan, lookup or record (they grow with the tree).
pub const MAX_SYNC: u64 = 1 << 30;

/// Any other reply (an entry found, a lock, a fingerprint, an empty
/// answer): an entry's extended attributes and ACLs are its largest part.
pub const MAX_SMALL_REPLY: u64 = 16 << 20;
