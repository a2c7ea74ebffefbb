//! Requests (one per call of the replica seam) and their replies.
//!
//! A request goes in the OPEN frame of a new stream: its operation number,
//! then its fields. Requests that carry bulk data (file contents, a delta, a
//! signature, state) send it as the stream's body. A reply is the stream's
//! body from the server, or an ERROR frame.

use crate::codec::*;
use crate::wire::{Dec, Enc, ProtoError};
use accord_fsys::{PropsMask, XattrFilter};
use accord_model::{Entry, Expect, Found, Kind, Props, RelPath, Time};

// How requests are coded on the wire (`Request::encode`, `Request::decode`).
mod request_codec;

/// Most `--exclude` patterns sent with a listing request or a sync's rules.
pub const MAX_PATTERNS: u64 = accord_fsys::MAX_PATTERNS;
/// Longest `--exclude` pattern.
pub const MAX_PATTERN: usize = accord_fsys::MAX_PATTERN;
/// Longest state name (memos, the guard's memory, archives).
pub const MAX_STATE_NAME: usize = 255;
/// Longest identity of a sync root (a host name and a path).
pub const MAX_SYNC_IDENTITY: usize = 16 << 10;
/// Most roots in a sync of a set (as `accord_plan::MAX_REPLICAS`).
pub const MAX_SET_ROOTS: usize = 32;
/// Longest name of a set: a short prefix, then each root's identity after
/// its length.
pub const MAX_SET_IDENTITY: usize = 64 + MAX_SET_ROOTS * (MAX_SYNC_IDENTITY + 8);

/// How a replica is listed (the scanner's options that cross the wire).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListOptions {
    pub excludes: Vec<String>,
    pub read_ignore_files: bool,
    pub source: bool,
    pub xattrs: XattrFilter,
}

/// One call of the replica seam. `dir` is a directory of the replica and
/// `name` a single component in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    Lock,
    ListDir {
        dir: RelPath,
        opts: ListOptions,
    },
    Fingerprint {
        path: RelPath,
    },
    OpenDir {
        dir: RelPath,
    },
    SyncAll,
    ReadState {
        name: String,
    },
    /// Body: the state's bytes.
    WriteState {
        name: String,
        durable: bool,
    },
    Stat {
        dir: RelPath,
        name: Vec<u8>,
    },
    /// Reply: what `Stat` gives, with a ctime that vouches for it from
    /// this stat on (`ReplicaDir::start_vouching_stat`), or absent where
    /// the server's file system cannot promise one. Sent only to a server
    /// that agreed to `FEATURE_VOUCHING_STAT`.
    VouchingStat {
        dir: RelPath,
        of: StatOf,
    },
    OpenRead {
        dir: RelPath,
        name: Vec<u8>,
        expect: Expect,
    },
    /// `in_place`: for a delta applied in place (full-length strong sums);
    /// else for one applied to a temp file and checked whole.
    Signature {
        dir: RelPath,
        name: Vec<u8>,
        expect: Expect,
        in_place: bool,
    },
    /// Body: the receiver's signature. Reply: literal and matched byte
    /// counts, then the delta. `pack_level`: the delta's reader takes
    /// delta format 2, and its literals are to be compressed at this zstd
    /// level (sent only to a server that agreed to `FEATURE_PACKED_DELTA`;
    /// `None`: format 1, as every server writes it).
    MakeDelta {
        dir: RelPath,
        name: Vec<u8>,
        expect: Expect,
        in_place: bool,
        pack_level: Option<i32>,
    },
    /// Body: a gap request (`accord_delta::fine::GapRequest`): the old
    /// file's ranges that a first round's literal runs replace. Reply:
    /// their fine signature. Sent only to a server that agreed to
    /// `FEATURE_FINE_SIGNATURE`.
    FineSignature {
        dir: RelPath,
        name: Vec<u8>,
        expect: Expect,
    },
    /// Body: the whole contents, or a delta against the basis.
    Receive {
        dir: RelPath,
        name: Vec<u8>,
        basis: Basis,
        props: Props,
        mask: PropsMask,
    },
    /// Body: an in-place delta.
    PatchInPlace {
        dir: RelPath,
        name: Vec<u8>,
        expect: Expect,
        props: Props,
        mask: PropsMask,
    },
    MakeNode {
        dir: RelPath,
        name: Vec<u8>,
        entry: Entry,
        mask: PropsMask,
    },
    LinkTemp {
        dir: RelPath,
        name: Vec<u8>,
        leader: RelPath,
    },
    /// Copy `path` of the root at `root` (a path of the server's host whose
    /// directory must have `identity`) into a temp for `name`: the file
    /// must still be what `expect` says and its bytes must have `hash`.
    /// Sent only to a server that agreed to `FEATURE_SIBLING_COPY`.
    CopySibling {
        dir: RelPath,
        name: Vec<u8>,
        root: Vec<u8>,
        identity: (u64, u64),
        path: RelPath,
        expect: Expect,
        hash: accord_model::Fingerprint,
        props: Props,
        mask: PropsMask,
    },
    /// Rename the temp made by request `made_by` (a receive, make-node
    /// or link-temp of this session, in `dir`) over `name`.
    Commit {
        dir: RelPath,
        made_by: u32,
        name: Vec<u8>,
        expect: Expect,
    },
    Discard {
        dir: RelPath,
        made_by: u32,
    },
    SetProps {
        dir: RelPath,
        name: Vec<u8>,
        expect: Expect,
        kind: Kind,
        props: Props,
        mask: PropsMask,
    },
    SetOwnProps {
        dir: RelPath,
        expect: Expect,
        props: Props,
        mask: PropsMask,
    },
    Mkdir {
        dir: RelPath,
        name: Vec<u8>,
    },
    Delete {
        dir: RelPath,
        name: Vec<u8>,
        expect: Expect,
    },
    RemoveStaleTemp {
        dir: RelPath,
        name: Vec<u8>,
    },
    /// Reply: `0`, no partial file for the name; or `1` and the signature of
    /// its partial file (what arrived in an interrupted transfer).
    PartialSignature {
        dir: RelPath,
        name: Vec<u8>,
    },
    /// Two-way sync: the bytes that name this root in archives.
    SyncIdentity,
    /// Open (and lock) this root's archive of its pair with `other`.
    SyncOpen {
        other: Vec<u8>,
    },
    /// Empty the open archive.
    SyncForget,
    /// Walk the root against its archive; `flags`: the detection options
    /// (`accord_remote::sync_wire`).
    SyncScan {
        flags: u8,
    },
    /// This side's state at the paths of the body.
    SyncLookup {
        flags: u8,
    },
    /// Record the body's entries in the archive, in one transaction.
    SyncRecord,
    /// Rename the entry at `from` (with its subtree) to `name` in `dir`,
    /// if `from` is still what `expect` says and nothing is at `name`.
    RenameFrom {
        dir: RelPath,
        name: Vec<u8>,
        from: RelPath,
        expect: Expect,
    },
    /// Answer when something changed in the root since the last answer
    /// (or since the first such request, which starts watching), or after
    /// `timeout_ms` at most (0: at once). Sent only to a server that
    /// agreed to `FEATURE_WATCH`, on a connection of its own.
    WaitChange {
        timeout_ms: u32,
    },
    /// Two-way sync: what this side's scans and lookups leave out from now
    /// on (`--exclude` patterns, and whether `.accordignore` files are
    /// read). Sent only to a server that agreed to `FEATURE_SYNC_IGNORE`.
    SyncRules {
        excludes: Vec<String>,
        ignore_files: bool,
    },
    /// Two-way sync: the `--follow` patterns of this side's scans, lookups
    /// and writes from now on (the symlinks they name are treated as what
    /// they point to). Sent only to a server that agreed to
    /// `FEATURE_SYNC_FOLLOW`.
    SyncFollow {
        patterns: Vec<String>,
    },
    /// A sync of more than two roots: open (and lock) this root's archive
    /// of the set named `set` (every root's identity), replacing the one
    /// open. Sent only to a server that agreed to `FEATURE_SYNC_SET`; so
    /// are the five that follow, on the set's archive.
    SyncOpenSet {
        set: Vec<u8>,
    },
    /// Count this run in the set's archive; reply: its number.
    SyncCountRun,
    /// Reply: every version vector the set's archive holds, by path.
    SyncVersions,
    /// Reply: the digest of every version vector held.
    SyncVersionsDigest,
    /// Reply: the version vector at each path of the body, in order.
    SyncVersionsAt,
    /// Record the body's entries and version vectors, in one transaction.
    SyncRecordVersions,
    /// Reply: whether the root is case-insensitive, probed by the server
    /// (`encode_case_probe`). A write: the probe of a root with no name to
    /// look up makes a temp file and removes it. Sent only to a server that
    /// agreed to `FEATURE_CASE_PROBE`.
    ProbeCase,
}

/// The longest a `WaitChange` may be asked to wait: a client that wants
/// longer asks again, so a server never holds a thread for long on a
/// client that has gone.
pub const MAX_WAIT_CHANGE_MS: u32 = 60_000;

/// The answer to `WaitChange`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchNews {
    /// Nothing changed within the time asked.
    Quiet,
    /// Something in the root changed: sync the pair.
    Changed,
    /// Events were lost (the kernel's queue overflowed): sync in full.
    Rescan(String),
    /// The root itself was moved or removed; the server watches it again
    /// at the next request.
    Lost,
    /// The server's kernel limit on inotify watches was reached: the
    /// client must poll instead.
    Limit,
    /// The root cannot be watched there, and why: poll instead.
    Unwatchable(String),
}

/// Longest reason carried by a `WatchNews`.
pub const MAX_WATCH_REASON: usize = 1024;

impl WatchNews {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        match self {
            WatchNews::Quiet => e.u8(0),
            WatchNews::Changed => e.u8(1),
            WatchNews::Rescan(why) => e.u8(2).str(clip(why)),
            WatchNews::Lost => e.u8(3),
            WatchNews::Limit => e.u8(4),
            WatchNews::Unwatchable(why) => e.u8(5).str(clip(why)),
        };
        e.finish()
    }

    pub fn decode(buf: &[u8]) -> Result<WatchNews, ProtoError> {
        let mut d = Dec::new(buf);
        let news = match d.u8("watch news")? {
            0 => WatchNews::Quiet,
            1 => WatchNews::Changed,
            2 => WatchNews::Rescan(d.text(MAX_WATCH_REASON, "reason")?),
            3 => WatchNews::Lost,
            4 => WatchNews::Limit,
            5 => WatchNews::Unwatchable(d.text(MAX_WATCH_REASON, "reason")?),
            n => return Err(ProtoError::Invalid(format!("unknown watch news {n}"))),
        };
        d.end("the watch news")?;
        Ok(news)
    }
}

/// `why` cut to `MAX_WATCH_REASON` bytes at a character boundary.
fn clip(why: &str) -> &str {
    let mut end = why.len().min(MAX_WATCH_REASON);
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    &why[..end]
}

/// What a received file is built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// Nothing: the body is the whole file.
    Nothing,
    /// The file at the name, which must still be what the `Expect` says.
    Entry(Expect),
    /// The name's partial file.
    Partial,
}

impl Request {
    /// True for requests whose bulk data follows as a body.
    pub fn has_body(&self) -> bool {
        matches!(
            self,
            Request::WriteState { .. }
                | Request::SyncLookup { .. }
                | Request::SyncRecord
                | Request::SyncVersionsAt
                | Request::SyncRecordVersions
                | Request::MakeDelta { .. }
                | Request::FineSignature { .. }
                | Request::Receive { .. }
                | Request::PatchInPlace { .. }
        )
    }

    /// True for requests that change the replica (refused by a read-only
    /// server, and carried out in the order they were sent).
    pub fn writes(&self) -> bool {
        !matches!(
            self,
            Request::ListDir { .. }
                | Request::Fingerprint { .. }
                | Request::OpenDir { .. }
                | Request::ReadState { .. }
                | Request::Stat { .. }
                | Request::VouchingStat { .. }
                | Request::OpenRead { .. }
                | Request::Signature { .. }
                | Request::PartialSignature { .. }
                | Request::FineSignature { .. }
                | Request::MakeDelta { .. }
                | Request::SyncIdentity
                | Request::SyncLookup { .. }
                | Request::WaitChange { .. }
                | Request::SyncRules { .. }
                | Request::SyncFollow { .. }
                | Request::SyncVersions
                | Request::SyncVersionsDigest
                | Request::SyncVersionsAt
        )
    }

    /// A name for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Lock => "lock",
            Request::ListDir { .. } => "list",
            Request::Fingerprint { .. } => "fingerprint",
            Request::OpenDir { .. } => "open directory",
            Request::SyncAll => "sync",
            Request::ReadState { .. } => "read state",
            Request::WriteState { .. } => "write state",
            Request::Stat { .. } => "stat",
            Request::VouchingStat { .. } => "vouching stat",
            Request::OpenRead { .. } => "read",
            Request::Signature { .. } => "signature",
            Request::MakeDelta { .. } => "delta",
            Request::FineSignature { .. } => "fine signature",
            Request::Receive { .. } => "receive",
            Request::PatchInPlace { .. } => "patch in place",
            Request::MakeNode { .. } => "make node",
            Request::LinkTemp { .. } => "link",
            Request::CopySibling { .. } => "copy from another root",
            Request::Commit { .. } => "commit",
            Request::Discard { .. } => "discard",
            Request::SetProps { .. } => "set properties",
            Request::SetOwnProps { .. } => "set directory properties",
            Request::Mkdir { .. } => "mkdir",
            Request::Delete { .. } => "delete",
            Request::RemoveStaleTemp { .. } => "remove temp",
            Request::PartialSignature { .. } => "partial signature",
            Request::SyncIdentity => "sync identity",
            Request::SyncOpen { .. } => "open archive",
            Request::SyncForget => "forget archive",
            Request::SyncScan { .. } => "detect updates",
            Request::SyncLookup { .. } => "look up",
            Request::SyncRecord => "record in archive",
            Request::SyncRules { .. } => "set ignore rules",
            Request::SyncFollow { .. } => "set follow rules",
            Request::SyncOpenSet { .. } => "open the set's archive",
            Request::SyncCountRun => "count the run",
            Request::SyncVersions => "read version vectors",
            Request::SyncVersionsDigest => "read the version vectors' digest",
            Request::SyncVersionsAt => "look up version vectors",
            Request::SyncRecordVersions => "record in the set's archive",
            Request::ProbeCase => "case probe",
            Request::RenameFrom { .. } => "rename",
            Request::WaitChange { .. } => "wait for a change",
        }
    }
}

/// The reply of `Stat`.
pub fn encode_found(f: Option<&Found>) -> Vec<u8> {
    let mut e = Enc::new();
    match f {
        None => e.u8(0),
        Some(f) => {
            e.u8(1);
            put_found(&mut e, f);
            &mut e
        }
    };
    e.finish()
}

/// What a `VouchingStat` reads: an entry by its name, or a temp this
/// session made, by the stream of the request that made it (the name a
/// client knows it by).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatOf {
    Name(Vec<u8>),
    Temp(u32),
}

/// Longest reason a case probe's failure may give.
pub const MAX_PROBE_FAILURE: usize = 4096;

/// `ProbeCase`'s reply: 0 and whether the root is case-insensitive, or 1
/// and why the server could not tell.
pub fn encode_case_probe(probed: &Result<bool, String>) -> Vec<u8> {
    let mut e = Enc::new();
    match probed {
        Ok(insensitive) => e.u8(0).bool(*insensitive),
        Err(why) => {
            let cut = why.len().min(MAX_PROBE_FAILURE);
            let cut = (0..=cut)
                .rev()
                .find(|&i| why.is_char_boundary(i))
                .unwrap_or(0);
            e.u8(1).str(&why[..cut])
        }
    };
    e.finish()
}

pub fn decode_case_probe(b: &[u8]) -> Result<Result<bool, String>, ProtoError> {
    let mut d = Dec::new(b);
    let probed = match d.u8("the probe's outcome")? {
        0 => Ok(d.bool("case-insensitive")?),
        1 => Err(d.string(MAX_PROBE_FAILURE, "why the probe failed")?),
        n => return Err(ProtoError::Invalid(format!("a probe outcome {n}"))),
    };
    d.end("the case probe reply")?;
    Ok(probed)
}

/// `VouchingStat`'s reply: a stat with the ctime that vouches for it, or
/// absent (nothing there, or nothing promised).
pub fn encode_vouched(v: Option<&(Found, Time)>) -> Vec<u8> {
    let mut e = Enc::new();
    match v {
        None => e.u8(0),
        Some((f, ctime)) => {
            e.u8(1);
            put_found(&mut e, f);
            put_time(&mut e, *ctime);
            &mut e
        }
    };
    e.finish()
}

pub fn decode_vouched(b: &[u8]) -> Result<Option<(Found, Time)>, ProtoError> {
    let mut d = Dec::new(b);
    let v = if d.bool("present")? {
        Some((get_found(&mut d)?, get_time(&mut d)?))
    } else {
        None
    };
    d.end("the vouching stat reply")?;
    Ok(v)
}

pub fn decode_found(b: &[u8]) -> Result<Option<Found>, ProtoError> {
    let mut d = Dec::new(b);
    let f = if d.bool("present")? {
        Some(get_found(&mut d)?)
    } else {
        None
    };
    d.end("the stat reply")?;
    Ok(f)
}

/// Why a request failed, as it crosses the wire. `code`, `action` and
/// `side` are the numbers of the engine's error kinds (the remote crate
/// maps them); `errno` is the OS error number or 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireError {
    pub code: u8,
    pub action: u8,
    pub side: u8,
    pub errno: i32,
    pub message: String,
    /// A path or name the error names (a recovery file, a link's leader).
    pub path: Option<Vec<u8>>,
}

/// Error codes that are the protocol's own (the engine's start at 1).
pub const CODE_PROTOCOL: u8 = 100;
pub const CODE_DENIED: u8 = 101;

impl WireError {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.u8(self.code).u8(self.action).u8(self.side);
        e.svarint(self.errno as i64).str(&self.message);
        match &self.path {
            None => e.u8(0),
            Some(p) => e.u8(1).bytes(p),
        };
        e.finish()
    }

    pub fn decode(b: &[u8]) -> Result<WireError, ProtoError> {
        let mut d = Dec::new(b);
        let code = d.u8("error code")?;
        let action = d.u8("action")?;
        let side = d.u8("side")?;
        let errno = d.svarint("errno")?;
        let errno =
            i32::try_from(errno).map_err(|_| ProtoError::Invalid("errno out of range".into()))?;
        let message = d.text(MAX_TEXT, "error message")?;
        let path = if d.bool("path present")? {
            Some(d.bytes(accord_model::MAX_PATH_LEN, "error path")?.to_vec())
        } else {
            None
        };
        d.end("the error")?;
        Ok(WireError {
            code,
            action,
            side,
            errno,
            message,
            path,
        })
    }
}
