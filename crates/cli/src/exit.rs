//! Exit statuses shared by every subcommand.

/// Everything asked was done.
pub const OK: i32 = 0;
/// Conflicts were left alone (sync; the same number as FAILURE).
pub const CONFLICTS: i32 = 1;
/// A single-file command failed (bad input, checksum mismatch, I/O error).
pub const FAILURE: i32 = 1;
/// Some paths failed; the rest was done (mirror, sync).
pub const PARTIAL: i32 = 2;
/// The run stopped: nothing more could be done safely (disk full, root not writable).
pub const FATAL: i32 = 3;
/// The command line could not be understood (BSD sysexits EX_USAGE).
pub const USAGE: i32 = 64;
/// The command exists in the design but is not built yet (EX_UNAVAILABLE).
pub const UNAVAILABLE: i32 = 69;
