//! Requests (one per call of the replica seam) and their replies.
//!
//! A request goes in the OPEN frame of a new stream: its operation number,
//! then its fields. Requests that carry bulk data (file contents, a delta, a
//! signature, state) send it as the stream's body. A reply is the stream's
//! body from the server, or an ERROR frame.

use crate::codec::*;
use crate::wire::{Dec, Enc, ProtoError};
use accord_fsys::{PropsMask, XattrFilter};
use accord_model::{Entry, Expect, Found, Kind, Props, RelPath};

/// Most `--exclude` patterns sent with a listing request or a sync's rules.
pub const MAX_PATTERNS: u64 = accord_fsys::MAX_PATTERNS;
/// Longest `--exclude` pattern.
pub const MAX_PATTERN: usize = accord_fsys::MAX_PATTERN;
/// Longest state name (memos, the guard's memory, archives).
pub const MAX_STATE_NAME: usize = 255;
/// Longest identity of a sync root (a host name and a path).
pub const MAX_SYNC_IDENTITY: usize = 16 << 10;

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
    /// counts, then the delta.
    MakeDelta {
        dir: RelPath,
        name: Vec<u8>,
        expect: Expect,
        in_place: bool,
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
                | Request::MakeDelta { .. }
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
                | Request::OpenRead { .. }
                | Request::Signature { .. }
                | Request::PartialSignature { .. }
                | Request::MakeDelta { .. }
                | Request::SyncIdentity
                | Request::SyncLookup { .. }
                | Request::WaitChange { .. }
                | Request::SyncRules { .. }
                | Request::SyncFollow { .. }
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
            Request::OpenRead { .. } => "read",
            Request::Signature { .. } => "signature",
            Request::MakeDelta { .. } => "delta",
            Request::Receive { .. } => "receive",
            Request::PatchInPlace { .. } => "patch in place",
            Request::MakeNode { .. } => "make node",
            Request::LinkTemp { .. } => "link",
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
            Request::RenameFrom { .. } => "rename",
            Request::WaitChange { .. } => "wait for a change",
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        let dn = |e: &mut Enc, dir: &RelPath, name: &[u8]| {
            put_path(e, dir);
            e.bytes(name);
        };
        match self {
            Request::Lock => {
                e.u8(1);
            }
            Request::ListDir { dir, opts } => {
                e.u8(2);
                put_path(&mut e, dir);
                put_patterns(&mut e, &opts.excludes);
                e.bool(opts.read_ignore_files).bool(opts.source);
                put_filter(&mut e, opts.xattrs);
            }
            Request::Fingerprint { path } => {
                e.u8(3);
                put_path(&mut e, path);
            }
            Request::OpenDir { dir } => {
                e.u8(4);
                put_path(&mut e, dir);
            }
            Request::SyncAll => {
                e.u8(5);
            }
            Request::ReadState { name } => {
                e.u8(6).str(name);
            }
            Request::WriteState { name, durable } => {
                e.u8(7).str(name).bool(*durable);
            }
            Request::Stat { dir, name } => {
                e.u8(8);
                dn(&mut e, dir, name);
            }
            Request::OpenRead { dir, name, expect } => {
                e.u8(9);
                dn(&mut e, dir, name);
                put_expect(&mut e, expect);
            }
            Request::Signature {
                dir,
                name,
                expect,
                in_place,
            } => {
                e.u8(10);
                dn(&mut e, dir, name);
                put_expect(&mut e, expect);
                e.bool(*in_place);
            }
            Request::MakeDelta {
                dir,
                name,
                expect,
                in_place,
            } => {
                e.u8(11);
                dn(&mut e, dir, name);
                put_expect(&mut e, expect);
                e.bool(*in_place);
            }
            Request::Receive {
                dir,
                name,
                basis,
                props,
                mask,
            } => {
                e.u8(12);
                dn(&mut e, dir, name);
                match basis {
                    Basis::Nothing => e.u8(0),
                    Basis::Entry(b) => {
                        e.u8(1);
                        put_expect(&mut e, b);
                        &mut e
                    }
                    Basis::Partial => e.u8(2),
                };
                put_props(&mut e, props);
                put_mask(&mut e, *mask);
            }
            Request::PatchInPlace {
                dir,
                name,
                expect,
                props,
                mask,
            } => {
                e.u8(13);
                dn(&mut e, dir, name);
                put_expect(&mut e, expect);
                put_props(&mut e, props);
                put_mask(&mut e, *mask);
            }
            Request::MakeNode {
                dir,
                name,
                entry,
                mask,
            } => {
                e.u8(14);
                dn(&mut e, dir, name);
                put_entry(&mut e, entry);
                put_mask(&mut e, *mask);
            }
            Request::LinkTemp { dir, name, leader } => {
                e.u8(15);
                dn(&mut e, dir, name);
                put_path(&mut e, leader);
            }
            Request::Commit {
                dir,
                made_by,
                name,
                expect,
            } => {
                e.u8(16);
                put_path(&mut e, dir);
                e.varint(u64::from(*made_by)).bytes(name);
                put_expect(&mut e, expect);
            }
            Request::Discard { dir, made_by } => {
                e.u8(17);
                put_path(&mut e, dir);
                e.varint(u64::from(*made_by));
            }
            Request::SetProps {
                dir,
                name,
                expect,
                kind,
                props,
                mask,
            } => {
                e.u8(18);
                dn(&mut e, dir, name);
                put_expect(&mut e, expect);
                put_kind_of(&mut e, *kind);
                put_props(&mut e, props);
                put_mask(&mut e, *mask);
            }
            Request::SetOwnProps {
                dir,
                expect,
                props,
                mask,
            } => {
                e.u8(19);
                put_path(&mut e, dir);
                put_expect(&mut e, expect);
                put_props(&mut e, props);
                put_mask(&mut e, *mask);
            }
            Request::Mkdir { dir, name } => {
                e.u8(20);
                dn(&mut e, dir, name);
            }
            Request::Delete { dir, name, expect } => {
                e.u8(21);
                dn(&mut e, dir, name);
                put_expect(&mut e, expect);
            }
            Request::RemoveStaleTemp { dir, name } => {
                e.u8(22);
                dn(&mut e, dir, name);
            }
            Request::PartialSignature { dir, name } => {
                e.u8(23);
                dn(&mut e, dir, name);
            }
            Request::SyncIdentity => {
                e.u8(24);
            }
            Request::SyncOpen { other } => {
                e.u8(25).bytes(other);
            }
            Request::SyncForget => {
                e.u8(26);
            }
            Request::SyncScan { flags } => {
                e.u8(27).u8(*flags);
            }
            Request::SyncLookup { flags } => {
                e.u8(28).u8(*flags);
            }
            Request::SyncRecord => {
                e.u8(29);
            }
            Request::RenameFrom {
                dir,
                name,
                from,
                expect,
            } => {
                e.u8(30);
                dn(&mut e, dir, name);
                put_path(&mut e, from);
                put_expect(&mut e, expect);
            }
            Request::WaitChange { timeout_ms } => {
                e.u8(31).varint(u64::from(*timeout_ms));
            }
            Request::SyncRules {
                excludes,
                ignore_files,
            } => {
                e.u8(32);
                put_patterns(&mut e, excludes);
                e.bool(*ignore_files);
            }
            Request::SyncFollow { patterns } => {
                e.u8(33);
                put_patterns(&mut e, patterns);
            }
        }
        e.finish()
    }

    /// Decode and validate a request: every path a `RelPath`, every name a
    /// single component, every count bounded.
    pub fn decode(b: &[u8]) -> Result<Request, ProtoError> {
        let mut d = Dec::new(b);
        let op = d.u8("operation")?;
        let dir = |d: &mut Dec| get_path(d, "directory");
        let name = |d: &mut Dec| get_name(d, "name");
        let r = match op {
            1 => Request::Lock,
            2 => {
                let dir = dir(&mut d)?;
                let opts = ListOptions {
                    excludes: get_patterns(&mut d)?,
                    read_ignore_files: d.bool("read ignore files")?,
                    source: d.bool("source")?,
                    xattrs: get_filter(&mut d)?,
                };
                Request::ListDir { dir, opts }
            }
            3 => Request::Fingerprint {
                path: get_path(&mut d, "path")?,
            },
            4 => Request::OpenDir { dir: dir(&mut d)? },
            5 => Request::SyncAll,
            6 => Request::ReadState {
                name: state_name(&mut d)?,
            },
            7 => Request::WriteState {
                name: state_name(&mut d)?,
                durable: d.bool("durable")?,
            },
            8 => Request::Stat {
                dir: dir(&mut d)?,
                name: name(&mut d)?,
            },
            9 => Request::OpenRead {
                dir: dir(&mut d)?,
                name: name(&mut d)?,
                expect: get_expect(&mut d)?,
            },
            10 => Request::Signature {
                dir: dir(&mut d)?,
                name: name(&mut d)?,
                expect: get_expect(&mut d)?,
                in_place: d.bool("in place")?,
            },
            11 => Request::MakeDelta {
                dir: dir(&mut d)?,
                name: name(&mut d)?,
                expect: get_expect(&mut d)?,
                in_place: d.bool("in place")?,
            },
            12 => Request::Receive {
                dir: dir(&mut d)?,
                name: name(&mut d)?,
                basis: match d.u8("basis")? {
                    0 => Basis::Nothing,
                    1 => Basis::Entry(get_expect(&mut d)?),
                    2 => Basis::Partial,
                    b => return Err(ProtoError::Invalid(format!("unknown basis {b}"))),
                },
                props: get_props(&mut d)?,
                mask: get_mask(&mut d)?,
            },
            13 => Request::PatchInPlace {
                dir: dir(&mut d)?,
                name: name(&mut d)?,
                expect: get_expect(&mut d)?,
                props: get_props(&mut d)?,
                mask: get_mask(&mut d)?,
            },
            14 => Request::MakeNode {
                dir: dir(&mut d)?,
                name: name(&mut d)?,
                entry: get_entry(&mut d)?,
                mask: get_mask(&mut d)?,
            },
            15 => Request::LinkTemp {
                dir: dir(&mut d)?,
                name: name(&mut d)?,
                leader: get_path(&mut d, "leader")?,
            },
            16 => Request::Commit {
                dir: dir(&mut d)?,
                made_by: d.u32("made by")?,
                name: name(&mut d)?,
                expect: get_expect(&mut d)?,
            },
            17 => Request::Discard {
                dir: dir(&mut d)?,
                made_by: d.u32("made by")?,
            },
            18 => Request::SetProps {
                dir: dir(&mut d)?,
                name: name(&mut d)?,
                expect: get_expect(&mut d)?,
                kind: get_kind(&mut d)?,
                props: get_props(&mut d)?,
                mask: get_mask(&mut d)?,
            },
            19 => Request::SetOwnProps {
                dir: dir(&mut d)?,
                expect: get_expect(&mut d)?,
                props: get_props(&mut d)?,
                mask: get_mask(&mut d)?,
            },
            20 => Request::Mkdir {
                dir: dir(&mut d)?,
                name: name(&mut d)?,
            },
            21 => Request::Delete {
                dir: dir(&mut d)?,
                name: name(&mut d)?,
                expect: get_expect(&mut d)?,
            },
            22 => Request::RemoveStaleTemp {
                dir: dir(&mut d)?,
                name: name(&mut d)?,
            },
            23 => Request::PartialSignature {
                dir: dir(&mut d)?,
                name: name(&mut d)?,
            },
            24 => Request::SyncIdentity,
            25 => Request::SyncOpen {
                other: d.bytes(MAX_SYNC_IDENTITY, "identity")?.to_vec(),
            },
            26 => Request::SyncForget,
            27 => Request::SyncScan {
                flags: d.u8("flags")?,
            },
            28 => Request::SyncLookup {
                flags: d.u8("flags")?,
            },
            29 => Request::SyncRecord,
            30 => Request::RenameFrom {
                dir: dir(&mut d)?,
                name: name(&mut d)?,
                from: match get_path(&mut d, "rename source")? {
                    from if from.is_root() => {
                        return Err(ProtoError::Invalid("a rename of the root".into()))
                    }
                    from => from,
                },
                expect: get_expect(&mut d)?,
            },
            31 => Request::WaitChange {
                timeout_ms: match d.u32("timeout")? {
                    t if t > MAX_WAIT_CHANGE_MS => {
                        return Err(ProtoError::Invalid(format!(
                            "a wait of {t} ms (at most {MAX_WAIT_CHANGE_MS})"
                        )))
                    }
                    t => t,
                },
            },
            32 => Request::SyncRules {
                excludes: get_patterns(&mut d)?,
                ignore_files: d.bool("read ignore files")?,
            },
            33 => Request::SyncFollow {
                patterns: get_patterns(&mut d)?,
            },
            op => return Err(ProtoError::Invalid(format!("unknown operation {op}"))),
        };
        d.end("the request")?;
        Ok(r)
    }
}

fn put_patterns(e: &mut Enc, patterns: &[String]) {
    e.varint(patterns.len() as u64);
    for p in patterns {
        e.str(p);
    }
}

/// `--exclude` patterns: a bounded count (each takes a byte at least), each
/// bounded in length.
fn get_patterns(d: &mut Dec) -> Result<Vec<String>, ProtoError> {
    let n = d.count(MAX_PATTERNS, 1, "pattern count")?;
    (0..n).map(|_| d.string(MAX_PATTERN, "pattern")).collect()
}

fn state_name(d: &mut Dec) -> Result<String, ProtoError> {
    let s = d.string(MAX_STATE_NAME, "state name")?;
    let ok = !s.is_empty()
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && !s.starts_with('.');
    if !ok {
        return Err(ProtoError::Invalid(format!(
            "state name {s:?} is not allowed"
        )));
    }
    Ok(s)
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
