//! How requests are coded on the wire: the operation number (the first
//! byte), then the request's fields. `encode` and `decode` only dispatch on
//! the kind; each kind's fields are written by a `put_` function and read
//! by a `get_` function kept next to it, so a reader can check the coding
//! one request at a time.

use super::MAX_SET_IDENTITY;
use super::{Basis, ListOptions, Request, StatOf};
use super::{MAX_PATTERN, MAX_PATTERNS, MAX_STATE_NAME, MAX_SYNC_IDENTITY, MAX_WAIT_CHANGE_MS};
use crate::codec::{
    get_entry, get_expect, get_filter, get_kind, get_mask, get_name, get_path, get_props,
    put_entry, put_expect, put_filter, put_kind_of, put_mask, put_path, put_props,
};
use crate::hello::MAX_ROOT;
use crate::wire::{Dec, Enc, ProtoError};
use accord_fsys::PropsMask;
use accord_model::{Entry, Expect, Kind, Props, RelPath};

/// The operation numbers, one for each kind of request.
mod op {
    pub const LOCK: u8 = 1;
    pub const LIST_DIR: u8 = 2;
    pub const FINGERPRINT: u8 = 3;
    pub const OPEN_DIR: u8 = 4;
    pub const SYNC_ALL: u8 = 5;
    pub const READ_STATE: u8 = 6;
    pub const WRITE_STATE: u8 = 7;
    pub const STAT: u8 = 8;
    pub const OPEN_READ: u8 = 9;
    pub const SIGNATURE: u8 = 10;
    pub const MAKE_DELTA: u8 = 11;
    pub const RECEIVE: u8 = 12;
    pub const PATCH_IN_PLACE: u8 = 13;
    pub const MAKE_NODE: u8 = 14;
    pub const LINK_TEMP: u8 = 15;
    pub const COMMIT: u8 = 16;
    pub const DISCARD: u8 = 17;
    pub const SET_PROPS: u8 = 18;
    pub const SET_OWN_PROPS: u8 = 19;
    pub const MKDIR: u8 = 20;
    pub const DELETE: u8 = 21;
    pub const REMOVE_STALE_TEMP: u8 = 22;
    pub const PARTIAL_SIGNATURE: u8 = 23;
    pub const SYNC_IDENTITY: u8 = 24;
    pub const SYNC_OPEN: u8 = 25;
    pub const SYNC_FORGET: u8 = 26;
    pub const SYNC_SCAN: u8 = 27;
    pub const SYNC_LOOKUP: u8 = 28;
    pub const SYNC_RECORD: u8 = 29;
    pub const RENAME_FROM: u8 = 30;
    pub const WAIT_CHANGE: u8 = 31;
    pub const SYNC_RULES: u8 = 32;
    pub const SYNC_FOLLOW: u8 = 33;
    pub const SYNC_OPEN_SET: u8 = 34;
    pub const SYNC_COUNT_RUN: u8 = 35;
    pub const SYNC_VERSIONS: u8 = 36;
    pub const SYNC_VERSIONS_DIGEST: u8 = 37;
    pub const SYNC_VERSIONS_AT: u8 = 38;
    pub const SYNC_RECORD_VERSIONS: u8 = 39;
    pub const FINE_SIGNATURE: u8 = 40;
    pub const VOUCHING_STAT: u8 = 41;
    pub const PROBE_CASE: u8 = 42;
    pub const COPY_SIBLING: u8 = 43;
}

impl Request {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::new();
        e.u8(self.op());
        self.put_fields(&mut e);
        e.finish()
    }

    /// The operation number: the request's first byte.
    fn op(&self) -> u8 {
        match self {
            Request::Lock => op::LOCK,
            Request::ListDir { .. } => op::LIST_DIR,
            Request::Fingerprint { .. } => op::FINGERPRINT,
            Request::OpenDir { .. } => op::OPEN_DIR,
            Request::SyncAll => op::SYNC_ALL,
            Request::ReadState { .. } => op::READ_STATE,
            Request::WriteState { .. } => op::WRITE_STATE,
            Request::Stat { .. } => op::STAT,
            Request::VouchingStat { .. } => op::VOUCHING_STAT,
            Request::ProbeCase => op::PROBE_CASE,
            Request::OpenRead { .. } => op::OPEN_READ,
            Request::Signature { .. } => op::SIGNATURE,
            Request::MakeDelta { .. } => op::MAKE_DELTA,
            Request::Receive { .. } => op::RECEIVE,
            Request::PatchInPlace { .. } => op::PATCH_IN_PLACE,
            Request::MakeNode { .. } => op::MAKE_NODE,
            Request::LinkTemp { .. } => op::LINK_TEMP,
            Request::CopySibling { .. } => op::COPY_SIBLING,
            Request::Commit { .. } => op::COMMIT,
            Request::Discard { .. } => op::DISCARD,
            Request::SetProps { .. } => op::SET_PROPS,
            Request::SetOwnProps { .. } => op::SET_OWN_PROPS,
            Request::Mkdir { .. } => op::MKDIR,
            Request::Delete { .. } => op::DELETE,
            Request::RemoveStaleTemp { .. } => op::REMOVE_STALE_TEMP,
            Request::PartialSignature { .. } => op::PARTIAL_SIGNATURE,
            Request::FineSignature { .. } => op::FINE_SIGNATURE,
            Request::SyncIdentity => op::SYNC_IDENTITY,
            Request::SyncOpen { .. } => op::SYNC_OPEN,
            Request::SyncForget => op::SYNC_FORGET,
            Request::SyncScan { .. } => op::SYNC_SCAN,
            Request::SyncLookup { .. } => op::SYNC_LOOKUP,
            Request::SyncRecord => op::SYNC_RECORD,
            Request::RenameFrom { .. } => op::RENAME_FROM,
            Request::WaitChange { .. } => op::WAIT_CHANGE,
            Request::SyncRules { .. } => op::SYNC_RULES,
            Request::SyncFollow { .. } => op::SYNC_FOLLOW,
            Request::SyncOpenSet { .. } => op::SYNC_OPEN_SET,
            Request::SyncCountRun => op::SYNC_COUNT_RUN,
            Request::SyncVersions => op::SYNC_VERSIONS,
            Request::SyncVersionsDigest => op::SYNC_VERSIONS_DIGEST,
            Request::SyncVersionsAt => op::SYNC_VERSIONS_AT,
            Request::SyncRecordVersions => op::SYNC_RECORD_VERSIONS,
        }
    }

    /// What follows the operation number.
    fn put_fields(&self, e: &mut Enc) {
        match self {
            Request::Lock
            | Request::SyncAll
            | Request::SyncIdentity
            | Request::SyncForget
            | Request::SyncRecord
            | Request::SyncCountRun
            | Request::SyncVersions
            | Request::SyncVersionsDigest
            | Request::SyncVersionsAt
            | Request::SyncRecordVersions
            | Request::ProbeCase => {}
            Request::ListDir { dir, opts } => put_list_dir(e, dir, opts),
            Request::Fingerprint { path } => put_fingerprint(e, path),
            Request::OpenDir { dir } => put_open_dir(e, dir),
            Request::ReadState { name } => put_read_state(e, name),
            Request::WriteState { name, durable } => put_write_state(e, name, *durable),
            Request::Stat { dir, name } => put_stat(e, dir, name),
            Request::VouchingStat { dir, of } => put_vouching_stat(e, dir, of),
            Request::OpenRead { dir, name, expect } => put_open_read(e, dir, name, expect),
            Request::Signature {
                dir,
                name,
                expect,
                in_place,
            } => put_signature(e, dir, name, expect, *in_place),
            Request::MakeDelta {
                dir,
                name,
                expect,
                in_place,
                pack_level,
            } => put_make_delta(e, dir, name, expect, (*in_place, *pack_level)),
            Request::Receive {
                dir,
                name,
                basis,
                props,
                mask,
            } => put_receive(e, dir, name, basis, props, *mask),
            Request::PatchInPlace {
                dir,
                name,
                expect,
                props,
                mask,
            } => put_patch_in_place(e, dir, name, expect, props, *mask),
            Request::MakeNode {
                dir,
                name,
                entry,
                mask,
            } => put_make_node(e, dir, name, entry, *mask),
            Request::LinkTemp { dir, name, leader } => put_link_temp(e, dir, name, leader),
            Request::CopySibling { .. } => put_copy_sibling(e, self),
            Request::Commit {
                dir,
                made_by,
                name,
                expect,
            } => put_commit(e, dir, *made_by, name, expect),
            Request::Discard { dir, made_by } => put_discard(e, dir, *made_by),
            Request::SetProps {
                dir,
                name,
                expect,
                kind,
                props,
                mask,
            } => put_set_props(e, dir, name, expect, *kind, props, *mask),
            Request::SetOwnProps {
                dir,
                expect,
                props,
                mask,
            } => put_set_own_props(e, dir, expect, props, *mask),
            Request::Mkdir { dir, name } => put_mkdir(e, dir, name),
            Request::Delete { dir, name, expect } => put_delete(e, dir, name, expect),
            Request::RemoveStaleTemp { dir, name } => put_remove_stale_temp(e, dir, name),
            Request::PartialSignature { dir, name } => put_partial_signature(e, dir, name),
            Request::FineSignature { dir, name, expect } => put_open_read(e, dir, name, expect),
            Request::SyncOpen { other } => put_sync_open(e, other),
            Request::SyncScan { flags } => put_sync_scan(e, *flags),
            Request::SyncLookup { flags } => put_sync_lookup(e, *flags),
            Request::RenameFrom {
                dir,
                name,
                from,
                expect,
            } => put_rename_from(e, dir, name, from, expect),
            Request::WaitChange { timeout_ms } => put_wait_change(e, *timeout_ms),
            Request::SyncRules {
                excludes,
                ignore_files,
            } => put_sync_rules(e, excludes, *ignore_files),
            Request::SyncFollow { patterns } => put_sync_follow(e, patterns),
            Request::SyncOpenSet { set } => put_sync_open_set(e, set),
        }
    }

    /// Decode and validate a request: every path a `RelPath`, every name a
    /// single component, every count bounded.
    pub fn decode(b: &[u8]) -> Result<Request, ProtoError> {
        let mut d = Dec::new(b);
        let d = &mut d;
        let r = match d.u8("operation")? {
            op::LOCK => Request::Lock,
            op::LIST_DIR => get_list_dir(d)?,
            op::FINGERPRINT => get_fingerprint(d)?,
            op::OPEN_DIR => get_open_dir(d)?,
            op::SYNC_ALL => Request::SyncAll,
            op::READ_STATE => get_read_state(d)?,
            op::WRITE_STATE => get_write_state(d)?,
            op::STAT => get_stat(d)?,
            op::OPEN_READ => get_open_read(d)?,
            op::SIGNATURE => get_signature(d)?,
            op::MAKE_DELTA => get_make_delta(d)?,
            op::RECEIVE => get_receive(d)?,
            op::PATCH_IN_PLACE => get_patch_in_place(d)?,
            op::MAKE_NODE => get_make_node(d)?,
            op::LINK_TEMP => get_link_temp(d)?,
            op::COMMIT => get_commit(d)?,
            op::DISCARD => get_discard(d)?,
            op::SET_PROPS => get_set_props(d)?,
            op::SET_OWN_PROPS => get_set_own_props(d)?,
            op::MKDIR => get_mkdir(d)?,
            op::DELETE => get_delete(d)?,
            op::REMOVE_STALE_TEMP => get_remove_stale_temp(d)?,
            op::PARTIAL_SIGNATURE => get_partial_signature(d)?,
            op::SYNC_IDENTITY => Request::SyncIdentity,
            op::SYNC_OPEN => get_sync_open(d)?,
            op::SYNC_FORGET => Request::SyncForget,
            op::SYNC_SCAN => get_sync_scan(d)?,
            op::SYNC_LOOKUP => get_sync_lookup(d)?,
            op::SYNC_RECORD => Request::SyncRecord,
            op::RENAME_FROM => get_rename_from(d)?,
            op::WAIT_CHANGE => get_wait_change(d)?,
            op::SYNC_RULES => get_sync_rules(d)?,
            op::SYNC_FOLLOW => get_sync_follow(d)?,
            op::SYNC_OPEN_SET => get_sync_open_set(d)?,
            op::SYNC_COUNT_RUN => Request::SyncCountRun,
            op::SYNC_VERSIONS => Request::SyncVersions,
            op::SYNC_VERSIONS_DIGEST => Request::SyncVersionsDigest,
            op::SYNC_VERSIONS_AT => Request::SyncVersionsAt,
            op::SYNC_RECORD_VERSIONS => Request::SyncRecordVersions,
            op::FINE_SIGNATURE => get_fine_signature(d)?,
            op::VOUCHING_STAT => get_vouching_stat(d)?,
            op::PROBE_CASE => Request::ProbeCase,
            op::COPY_SIBLING => get_copy_sibling(d)?,
            n => return Err(ProtoError::Invalid(format!("unknown operation {n}"))),
        };
        d.end("the request")?;
        Ok(r)
    }
}

// Each kind's fields, in the order of the operation numbers: `put_` writes
// them after the operation number, `get_` reads them back in the same
// order (and validates them).

// The directory and name of most requests: a `RelPath`, then a single
// component.

fn put_dir_name(e: &mut Enc, dir: &RelPath, name: &[u8]) {
    put_path(e, dir);
    e.bytes(name);
}

fn get_dir(d: &mut Dec) -> Result<RelPath, ProtoError> {
    get_path(d, "directory")
}

fn get_dir_name(d: &mut Dec) -> Result<(RelPath, Vec<u8>), ProtoError> {
    Ok((get_dir(d)?, get_name(d, "name")?))
}

// ListDir

fn put_list_dir(e: &mut Enc, dir: &RelPath, opts: &ListOptions) {
    put_path(e, dir);
    put_patterns(e, &opts.excludes);
    e.bool(opts.read_ignore_files).bool(opts.source);
    put_filter(e, opts.xattrs);
}

fn get_list_dir(d: &mut Dec) -> Result<Request, ProtoError> {
    let dir = get_dir(d)?;
    let opts = ListOptions {
        excludes: get_patterns(d)?,
        read_ignore_files: d.bool("read ignore files")?,
        source: d.bool("source")?,
        xattrs: get_filter(d)?,
    };
    Ok(Request::ListDir { dir, opts })
}

// Fingerprint

fn put_fingerprint(e: &mut Enc, path: &RelPath) {
    put_path(e, path);
}

fn get_fingerprint(d: &mut Dec) -> Result<Request, ProtoError> {
    let path = get_path(d, "path")?;
    Ok(Request::Fingerprint { path })
}

// OpenDir

fn put_open_dir(e: &mut Enc, dir: &RelPath) {
    put_path(e, dir);
}

fn get_open_dir(d: &mut Dec) -> Result<Request, ProtoError> {
    let dir = get_dir(d)?;
    Ok(Request::OpenDir { dir })
}

// ReadState

fn put_read_state(e: &mut Enc, name: &str) {
    e.str(name);
}

fn get_read_state(d: &mut Dec) -> Result<Request, ProtoError> {
    let name = state_name(d)?;
    Ok(Request::ReadState { name })
}

// WriteState

fn put_write_state(e: &mut Enc, name: &str, durable: bool) {
    e.str(name).bool(durable);
}

fn get_write_state(d: &mut Dec) -> Result<Request, ProtoError> {
    let name = state_name(d)?;
    let durable = d.bool("durable")?;
    Ok(Request::WriteState { name, durable })
}

// Stat

fn put_stat(e: &mut Enc, dir: &RelPath, name: &[u8]) {
    put_dir_name(e, dir, name);
}

fn get_stat(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    Ok(Request::Stat { dir, name })
}

// VouchingStat: the directory, then 0 and a name, or 1 and the stream
// that made a temp.

fn put_vouching_stat(e: &mut Enc, dir: &RelPath, of: &StatOf) {
    put_path(e, dir);
    match of {
        StatOf::Name(name) => e.u8(0).bytes(name),
        StatOf::Temp(made_by) => e.u8(1).varint(u64::from(*made_by)),
    };
}

fn get_vouching_stat(d: &mut Dec) -> Result<Request, ProtoError> {
    let dir = get_dir(d)?;
    let of = match d.u8("what is stat'ed")? {
        0 => StatOf::Name(get_name(d, "name")?),
        1 => StatOf::Temp(d.u32("made by")?),
        n => return Err(ProtoError::Invalid(format!("a stat of kind {n}"))),
    };
    Ok(Request::VouchingStat { dir, of })
}

// OpenRead

fn put_open_read(e: &mut Enc, dir: &RelPath, name: &[u8], expect: &Expect) {
    put_dir_name(e, dir, name);
    put_expect(e, expect);
}

fn get_open_read(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    let expect = get_expect(d)?;
    Ok(Request::OpenRead { dir, name, expect })
}

// Signature

fn put_signature(e: &mut Enc, dir: &RelPath, name: &[u8], expect: &Expect, in_place: bool) {
    put_dir_name(e, dir, name);
    put_expect(e, expect);
    e.bool(in_place);
}

fn get_signature(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    let expect = get_expect(d)?;
    let in_place = d.bool("in place")?;
    Ok(Request::Signature {
        dir,
        name,
        expect,
        in_place,
    })
}

// MakeDelta: the fields of `Signature`, then the level of compressed
// literals when there is one (a field an older server never sees: it is
// sent only to a server that agreed to `FEATURE_PACKED_DELTA`).

fn put_make_delta(
    e: &mut Enc,
    dir: &RelPath,
    name: &[u8],
    expect: &Expect,
    (in_place, pack_level): (bool, Option<i32>),
) {
    put_dir_name(e, dir, name);
    put_expect(e, expect);
    e.bool(in_place);
    if let Some(level) = pack_level {
        e.svarint(level.into());
    }
}

fn get_make_delta(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    let expect = get_expect(d)?;
    let in_place = d.bool("in place")?;
    let pack_level = match d.remaining() {
        0 => None,
        _ => Some(get_pack_level(d)?),
    };
    Ok(Request::MakeDelta {
        dir,
        name,
        expect,
        in_place,
        pack_level,
    })
}

fn get_pack_level(d: &mut Dec) -> Result<i32, ProtoError> {
    let level = d.svarint("level of compressed literals")?;
    let range = i64::from(crate::limits::MIN_PACK_LEVEL)..=i64::from(crate::limits::MAX_PACK_LEVEL);
    if !range.contains(&level) {
        return Err(ProtoError::Invalid(format!(
            "level of compressed literals {level} outside {}..={}",
            range.start(),
            range.end()
        )));
    }
    Ok(level as i32)
}

// Receive

fn put_receive(
    e: &mut Enc,
    dir: &RelPath,
    name: &[u8],
    basis: &Basis,
    props: &Props,
    mask: PropsMask,
) {
    put_dir_name(e, dir, name);
    put_basis(e, basis);
    put_props(e, props);
    put_mask(e, mask);
}

fn get_receive(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    let basis = get_basis(d)?;
    let props = get_props(d)?;
    let mask = get_mask(d)?;
    Ok(Request::Receive {
        dir,
        name,
        basis,
        props,
        mask,
    })
}

fn put_basis(e: &mut Enc, basis: &Basis) {
    match basis {
        Basis::Nothing => {
            e.u8(0);
        }
        Basis::Entry(b) => {
            e.u8(1);
            put_expect(e, b);
        }
        Basis::Partial => {
            e.u8(2);
        }
    }
}

fn get_basis(d: &mut Dec) -> Result<Basis, ProtoError> {
    match d.u8("basis")? {
        0 => Ok(Basis::Nothing),
        1 => Ok(Basis::Entry(get_expect(d)?)),
        2 => Ok(Basis::Partial),
        b => Err(ProtoError::Invalid(format!("unknown basis {b}"))),
    }
}

// PatchInPlace

fn put_patch_in_place(
    e: &mut Enc,
    dir: &RelPath,
    name: &[u8],
    expect: &Expect,
    props: &Props,
    mask: PropsMask,
) {
    put_dir_name(e, dir, name);
    put_expect(e, expect);
    put_props(e, props);
    put_mask(e, mask);
}

fn get_patch_in_place(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    let expect = get_expect(d)?;
    let props = get_props(d)?;
    let mask = get_mask(d)?;
    Ok(Request::PatchInPlace {
        dir,
        name,
        expect,
        props,
        mask,
    })
}

// MakeNode

fn put_make_node(e: &mut Enc, dir: &RelPath, name: &[u8], entry: &Entry, mask: PropsMask) {
    put_dir_name(e, dir, name);
    put_entry(e, entry);
    put_mask(e, mask);
}

fn get_make_node(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    let entry = get_entry(d)?;
    let mask = get_mask(d)?;
    Ok(Request::MakeNode {
        dir,
        name,
        entry,
        mask,
    })
}

// LinkTemp

fn put_link_temp(e: &mut Enc, dir: &RelPath, name: &[u8], leader: &RelPath) {
    put_dir_name(e, dir, name);
    put_path(e, leader);
}

fn get_link_temp(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    let leader = get_path(d, "leader")?;
    Ok(Request::LinkTemp { dir, name, leader })
}

// CopySibling: the directory and name, the root's path and identity, the
// file's path in it, what it must be, then the temp's properties.

fn put_copy_sibling(e: &mut Enc, req: &Request) {
    let Request::CopySibling {
        dir,
        name,
        root,
        identity,
        path,
        expect,
        hash,
        props,
        mask,
    } = req
    else {
        unreachable!("only a CopySibling");
    };
    put_dir_name(e, dir, name);
    e.bytes(root).varint(identity.0).varint(identity.1);
    put_path(e, path);
    put_expect(e, expect);
    e.raw(hash);
    put_props(e, props);
    put_mask(e, *mask);
}

fn get_copy_sibling(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    let root = d.bytes(MAX_ROOT, "root")?.to_vec();
    if root.first() != Some(&b'/') || root.contains(&0) {
        return Err(ProtoError::Invalid(
            "the root to copy from is not an absolute path".into(),
        ));
    }
    let identity = (d.varint("device")?, d.varint("inode")?);
    let path = get_path(d, "path")?;
    let expect = get_expect(d)?;
    let hash = d.raw(32, "fingerprint")?.try_into().expect("32 bytes");
    let props = get_props(d)?;
    let mask = get_mask(d)?;
    Ok(Request::CopySibling {
        dir,
        name,
        root,
        identity,
        path,
        expect,
        hash,
        props,
        mask,
    })
}

// Commit: `made_by` comes between the directory and the name.

fn put_commit(e: &mut Enc, dir: &RelPath, made_by: u32, name: &[u8], expect: &Expect) {
    put_path(e, dir);
    e.varint(u64::from(made_by)).bytes(name);
    put_expect(e, expect);
}

fn get_commit(d: &mut Dec) -> Result<Request, ProtoError> {
    let dir = get_dir(d)?;
    let made_by = d.u32("made by")?;
    let name = get_name(d, "name")?;
    let expect = get_expect(d)?;
    Ok(Request::Commit {
        dir,
        made_by,
        name,
        expect,
    })
}

// Discard

fn put_discard(e: &mut Enc, dir: &RelPath, made_by: u32) {
    put_path(e, dir);
    e.varint(u64::from(made_by));
}

fn get_discard(d: &mut Dec) -> Result<Request, ProtoError> {
    let dir = get_dir(d)?;
    let made_by = d.u32("made by")?;
    Ok(Request::Discard { dir, made_by })
}

// SetProps

fn put_set_props(
    e: &mut Enc,
    dir: &RelPath,
    name: &[u8],
    expect: &Expect,
    kind: Kind,
    props: &Props,
    mask: PropsMask,
) {
    put_dir_name(e, dir, name);
    put_expect(e, expect);
    put_kind_of(e, kind);
    put_props(e, props);
    put_mask(e, mask);
}

fn get_set_props(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    let expect = get_expect(d)?;
    let kind = get_kind(d)?;
    let props = get_props(d)?;
    let mask = get_mask(d)?;
    Ok(Request::SetProps {
        dir,
        name,
        expect,
        kind,
        props,
        mask,
    })
}

// SetOwnProps: a directory's own properties, so no name.

fn put_set_own_props(e: &mut Enc, dir: &RelPath, expect: &Expect, props: &Props, mask: PropsMask) {
    put_path(e, dir);
    put_expect(e, expect);
    put_props(e, props);
    put_mask(e, mask);
}

fn get_set_own_props(d: &mut Dec) -> Result<Request, ProtoError> {
    let dir = get_dir(d)?;
    let expect = get_expect(d)?;
    let props = get_props(d)?;
    let mask = get_mask(d)?;
    Ok(Request::SetOwnProps {
        dir,
        expect,
        props,
        mask,
    })
}

// Mkdir

fn put_mkdir(e: &mut Enc, dir: &RelPath, name: &[u8]) {
    put_dir_name(e, dir, name);
}

fn get_mkdir(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    Ok(Request::Mkdir { dir, name })
}

// Delete

fn put_delete(e: &mut Enc, dir: &RelPath, name: &[u8], expect: &Expect) {
    put_dir_name(e, dir, name);
    put_expect(e, expect);
}

fn get_delete(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    let expect = get_expect(d)?;
    Ok(Request::Delete { dir, name, expect })
}

// RemoveStaleTemp

fn put_remove_stale_temp(e: &mut Enc, dir: &RelPath, name: &[u8]) {
    put_dir_name(e, dir, name);
}

fn get_remove_stale_temp(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    Ok(Request::RemoveStaleTemp { dir, name })
}

// FineSignature: the fields of `OpenRead` (its body the gap request).

fn get_fine_signature(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    let expect = get_expect(d)?;
    Ok(Request::FineSignature { dir, name, expect })
}

// PartialSignature

fn put_partial_signature(e: &mut Enc, dir: &RelPath, name: &[u8]) {
    put_dir_name(e, dir, name);
}

fn get_partial_signature(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    Ok(Request::PartialSignature { dir, name })
}

// SyncOpen

fn put_sync_open(e: &mut Enc, other: &[u8]) {
    e.bytes(other);
}

fn get_sync_open(d: &mut Dec) -> Result<Request, ProtoError> {
    let other = d.bytes(MAX_SYNC_IDENTITY, "identity")?.to_vec();
    Ok(Request::SyncOpen { other })
}

// SyncScan

fn put_sync_scan(e: &mut Enc, flags: u8) {
    e.u8(flags);
}

fn get_sync_scan(d: &mut Dec) -> Result<Request, ProtoError> {
    let flags = d.u8("flags")?;
    Ok(Request::SyncScan { flags })
}

// SyncLookup

fn put_sync_lookup(e: &mut Enc, flags: u8) {
    e.u8(flags);
}

fn get_sync_lookup(d: &mut Dec) -> Result<Request, ProtoError> {
    let flags = d.u8("flags")?;
    Ok(Request::SyncLookup { flags })
}

// RenameFrom

fn put_rename_from(e: &mut Enc, dir: &RelPath, name: &[u8], from: &RelPath, expect: &Expect) {
    put_dir_name(e, dir, name);
    put_path(e, from);
    put_expect(e, expect);
}

fn get_rename_from(d: &mut Dec) -> Result<Request, ProtoError> {
    let (dir, name) = get_dir_name(d)?;
    let from = get_path(d, "rename source")?;
    if from.is_root() {
        return Err(ProtoError::Invalid("a rename of the root".into()));
    }
    let expect = get_expect(d)?;
    Ok(Request::RenameFrom {
        dir,
        name,
        from,
        expect,
    })
}

// WaitChange

fn put_wait_change(e: &mut Enc, timeout_ms: u32) {
    e.varint(u64::from(timeout_ms));
}

fn get_wait_change(d: &mut Dec) -> Result<Request, ProtoError> {
    let timeout_ms = d.u32("timeout")?;
    if timeout_ms > MAX_WAIT_CHANGE_MS {
        return Err(ProtoError::Invalid(format!(
            "a wait of {timeout_ms} ms (at most {MAX_WAIT_CHANGE_MS})"
        )));
    }
    Ok(Request::WaitChange { timeout_ms })
}

// SyncRules

fn put_sync_rules(e: &mut Enc, excludes: &[String], ignore_files: bool) {
    put_patterns(e, excludes);
    e.bool(ignore_files);
}

fn get_sync_rules(d: &mut Dec) -> Result<Request, ProtoError> {
    let excludes = get_patterns(d)?;
    let ignore_files = d.bool("read ignore files")?;
    Ok(Request::SyncRules {
        excludes,
        ignore_files,
    })
}

// SyncFollow

fn put_sync_follow(e: &mut Enc, patterns: &[String]) {
    put_patterns(e, patterns);
}

fn get_sync_follow(d: &mut Dec) -> Result<Request, ProtoError> {
    let patterns = get_patterns(d)?;
    Ok(Request::SyncFollow { patterns })
}

// SyncOpenSet

fn put_sync_open_set(e: &mut Enc, set: &[u8]) {
    e.bytes(set);
}

fn get_sync_open_set(d: &mut Dec) -> Result<Request, ProtoError> {
    let set = d.bytes(MAX_SET_IDENTITY, "set identity")?.to_vec();
    if set.is_empty() {
        return Err(ProtoError::Invalid("a set named with no bytes".into()));
    }
    Ok(Request::SyncOpenSet { set })
}

// The fields that several requests share.

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
