//! Encoding of the model's types (paths, entries, properties, what a step
//! expects) and of the scanner's listings. Every decoder validates: a path
//! is a `RelPath` (no `..`, no absolute path, no empty or NUL component,
//! bounded length), every count and length is bounded.

use crate::wire::{Dec, Enc, ProtoError};
use accord_fsys::{Listing, PropsMask, XattrFilter};
use accord_model::{
    validate_name, Entry, Expect, Found, Kind, PathFailure, Props, RelPath, Time, MAX_NAME_LEN,
    MAX_PATH_LEN,
};

/// Most extended attributes on one entry.
pub const MAX_XATTRS: u64 = 4096;
/// Longest extended attribute value (Linux allows 64 KiB).
pub const MAX_XATTR_VALUE: usize = 64 << 10;
/// Longest symlink target.
pub const MAX_LINK_TARGET: usize = 4096;
/// Most entries in one listing reply (a bigger directory still lists: the
/// limit only bounds what a hostile peer can claim).
pub const MAX_ENTRIES: u64 = 1 << 28;
/// Longest message text.
pub const MAX_TEXT: usize = 16 << 10;

pub fn put_path(e: &mut Enc, p: &RelPath) {
    e.bytes(p.as_bytes());
}

pub fn get_path(d: &mut Dec, what: &'static str) -> Result<RelPath, ProtoError> {
    let b = d.bytes(MAX_PATH_LEN, what)?;
    RelPath::new(b).map_err(|e| ProtoError::Invalid(format!("{what}: {e}")))
}

/// One file name: a single component.
pub fn get_name(d: &mut Dec, what: &'static str) -> Result<Vec<u8>, ProtoError> {
    let b = d.bytes(MAX_NAME_LEN, what)?;
    validate_name(b).map_err(|e| ProtoError::Invalid(format!("{what}: {e}")))?;
    Ok(b.to_vec())
}

fn put_kind(e: &mut Enc, k: Kind) {
    e.u8(match k {
        Kind::File => 0,
        Kind::Dir => 1,
        Kind::Symlink => 2,
        Kind::Fifo => 3,
        Kind::Socket => 4,
        Kind::CharDev => 5,
        Kind::BlockDev => 6,
    });
}

pub fn get_kind(d: &mut Dec) -> Result<Kind, ProtoError> {
    Ok(match d.u8("kind")? {
        0 => Kind::File,
        1 => Kind::Dir,
        2 => Kind::Symlink,
        3 => Kind::Fifo,
        4 => Kind::Socket,
        5 => Kind::CharDev,
        6 => Kind::BlockDev,
        k => return Err(ProtoError::Invalid(format!("unknown kind {k}"))),
    })
}

pub fn put_kind_of(e: &mut Enc, k: Kind) {
    put_kind(e, k)
}

pub fn put_time(e: &mut Enc, t: Time) {
    e.svarint(t.sec).varint(t.nsec as u64);
}

pub fn get_time(d: &mut Dec) -> Result<Time, ProtoError> {
    let sec = d.svarint("seconds")?;
    let nsec = d.bounded(999_999_999, "nanoseconds")? as u32;
    Ok(Time { sec, nsec })
}

pub fn put_props(e: &mut Enc, p: &Props) {
    e.varint(p.mode as u64)
        .varint(p.uid as u64)
        .varint(p.gid as u64);
    put_time(e, p.mtime);
    match &p.xattrs {
        None => {
            e.u8(0);
        }
        Some(list) => {
            e.u8(1).varint(list.len() as u64);
            for (n, v) in list {
                e.bytes(n).bytes(v);
            }
        }
    }
}

pub fn get_props(d: &mut Dec) -> Result<Props, ProtoError> {
    let mode = d.bounded(0o7777, "mode")? as u32;
    let uid = d.u32("uid")?;
    let gid = d.u32("gid")?;
    let mtime = get_time(d)?;
    let xattrs = if d.bool("xattrs present")? {
        let n = d.count(MAX_XATTRS, 2, "xattr count")?;
        let mut list = Vec::with_capacity(n);
        for _ in 0..n {
            let name = d.bytes(MAX_NAME_LEN, "xattr name")?;
            if name.is_empty() || name.contains(&0) {
                return Err(ProtoError::Invalid("an empty or NUL xattr name".into()));
            }
            let value = d.bytes(MAX_XATTR_VALUE, "xattr value")?;
            list.push((name.to_vec(), value.to_vec()));
        }
        Some(list)
    } else {
        None
    };
    Ok(Props {
        mode,
        uid,
        gid,
        mtime,
        xattrs,
    })
}

pub fn put_entry(e: &mut Enc, x: &Entry) {
    put_path(e, &x.path);
    put_kind(e, x.kind);
    e.varint(x.size);
    put_props(e, &x.props);
    e.varint(x.dev)
        .varint(x.ino)
        .varint(x.nlink)
        .varint(x.rdev)
        .varint(x.blocks);
    match &x.link_target {
        None => e.u8(0),
        Some(t) => e.u8(1).bytes(t),
    };
    match &x.hash {
        None => e.u8(0),
        Some(h) => e.u8(1).raw(h),
    };
}

pub fn get_entry(d: &mut Dec) -> Result<Entry, ProtoError> {
    let path = get_path(d, "entry path")?;
    let kind = get_kind(d)?;
    let size = d.varint("size")?;
    let props = get_props(d)?;
    let (dev, ino) = (d.varint("device")?, d.varint("inode")?);
    let (nlink, rdev, blocks) = (d.varint("links")?, d.varint("rdev")?, d.varint("blocks")?);
    let link_target = if d.bool("link target present")? {
        let t = d.bytes(MAX_LINK_TARGET, "link target")?;
        if t.is_empty() || t.contains(&0) {
            return Err(ProtoError::Invalid("an empty or NUL symlink target".into()));
        }
        Some(t.to_vec())
    } else {
        None
    };
    // A file or directory seen through a followed link (`sync --follow`)
    // carries the link's target too; nothing else does.
    let may_have_target = matches!(kind, Kind::Symlink | Kind::File | Kind::Dir);
    if (kind == Kind::Symlink && link_target.is_none())
        || (!may_have_target && link_target.is_some())
    {
        return Err(ProtoError::Invalid(
            "a link target on a node, or none on a symlink".into(),
        ));
    }
    let hash = if d.bool("hash present")? {
        Some(d.raw(32, "hash")?.try_into().expect("32 bytes"))
    } else {
        None
    };
    Ok(Entry {
        path,
        kind,
        size,
        props,
        dev,
        ino,
        nlink,
        rdev,
        blocks,
        link_target,
        hash,
    })
}

pub fn put_found(e: &mut Enc, f: &Found) {
    put_kind(e, f.kind);
    e.varint(f.dev).varint(f.ino).varint(f.size);
    put_time(e, f.mtime);
}

pub fn get_found(d: &mut Dec) -> Result<Found, ProtoError> {
    Ok(Found {
        kind: get_kind(d)?,
        dev: d.varint("device")?,
        ino: d.varint("inode")?,
        size: d.varint("size")?,
        mtime: get_time(d)?,
    })
}

pub fn put_expect(e: &mut Enc, x: &Expect) {
    match x {
        Expect::Absent => {
            e.u8(0);
        }
        Expect::Entry(f) => {
            e.u8(1);
            put_found(e, f);
        }
        Expect::Made(k) => {
            e.u8(2);
            put_kind(e, *k);
        }
    }
}

pub fn get_expect(d: &mut Dec) -> Result<Expect, ProtoError> {
    Ok(match d.u8("expectation")? {
        0 => Expect::Absent,
        1 => Expect::Entry(get_found(d)?),
        2 => Expect::Made(get_kind(d)?),
        t => return Err(ProtoError::Invalid(format!("unknown expectation {t}"))),
    })
}

pub fn put_filter(e: &mut Enc, f: XattrFilter) {
    e.u8(f.xattrs as u8 | (f.acls as u8) << 1 | (f.user_only as u8) << 2);
}

pub fn get_filter(d: &mut Dec) -> Result<XattrFilter, ProtoError> {
    let b = d.u8("xattr filter")?;
    if b > 7 {
        return Err(ProtoError::Invalid(format!("xattr filter {b}")));
    }
    Ok(XattrFilter {
        xattrs: b & 1 != 0,
        acls: b & 2 != 0,
        user_only: b & 4 != 0,
    })
}

pub fn put_mask(e: &mut Enc, m: PropsMask) {
    e.bool(m.perms).bool(m.owner).bool(m.times);
    match m.xattrs {
        None => {
            e.u8(0);
        }
        Some(f) => {
            e.u8(1);
            put_filter(e, f);
        }
    }
}

pub fn get_mask(d: &mut Dec) -> Result<PropsMask, ProtoError> {
    Ok(PropsMask {
        perms: d.bool("perms")?,
        owner: d.bool("owner")?,
        times: d.bool("times")?,
        xattrs: if d.bool("xattrs")? {
            Some(get_filter(d)?)
        } else {
            None
        },
    })
}

fn put_paths(e: &mut Enc, ps: &[RelPath]) {
    e.varint(ps.len() as u64);
    for p in ps {
        put_path(e, p);
    }
}

fn get_paths(d: &mut Dec, what: &'static str) -> Result<Vec<RelPath>, ProtoError> {
    let n = d.count(MAX_ENTRIES, 1, what)?;
    (0..n).map(|_| get_path(d, what)).collect()
}

fn put_entries(e: &mut Enc, es: &[Entry]) {
    e.varint(es.len() as u64);
    for x in es {
        put_entry(e, x);
    }
}

fn get_entries(d: &mut Dec) -> Result<Vec<Entry>, ProtoError> {
    // An entry takes at least 16 bytes: a root path (1), kind, size (1
    // each), props (6), five numbers (5), the link and hash flags (2). A
    // larger guess refuses honest listings of small entries.
    let n = d.count(MAX_ENTRIES, 16, "entry count")?;
    (0..n).map(|_| get_entry(d)).collect()
}

/// A listing of directory `dir`: every entry must be `dir` itself (first)
/// or a child of it, in name order; the decoder checks this so a peer
/// cannot slip in a path that was not asked for.
pub fn put_listing(e: &mut Enc, l: &Listing) {
    put_entries(e, &l.entries);
    put_entries(e, &l.subdirs);
    put_paths(e, &l.stale_temps);
    put_paths(e, &l.markers);
}

pub fn get_listing(d: &mut Dec, dir: &RelPath) -> Result<Listing, ProtoError> {
    let l = Listing {
        entries: get_entries(d)?,
        subdirs: get_entries(d)?,
        stale_temps: get_paths(d, "stale temp")?,
        markers: get_paths(d, "marker")?,
        // Not on the wire: a sync detects a remote side's updates there.
        ctimes: Vec::new(),
    };
    check_listing(&l, dir)?;
    Ok(l)
}

fn is_child(p: &RelPath, dir: &RelPath) -> bool {
    p.parent().as_ref() == Some(dir)
}

fn check_listing(l: &Listing, dir: &RelPath) -> Result<(), ProtoError> {
    let bad = |what: &str, p: &RelPath| {
        Err(ProtoError::Invalid(format!(
            "a listing of {} holds {what} {} that was not asked for",
            dir.display(),
            p.display()
        )))
    };
    let mut entries = l.entries.iter();
    match entries.next() {
        Some(me) if me.path == *dir && me.kind == Kind::Dir => {}
        Some(me) => return bad("the entry", &me.path),
        None => {
            return Err(ProtoError::Invalid(
                "a listing without its directory".into(),
            ))
        }
    }
    let mut last: Option<&RelPath> = None;
    for x in entries {
        if !is_child(&x.path, dir) || x.kind == Kind::Dir || last.is_some_and(|p| *p >= x.path) {
            return bad("the entry", &x.path);
        }
        last = Some(&x.path);
    }
    let mut last: Option<&RelPath> = None;
    for x in &l.subdirs {
        if !is_child(&x.path, dir) || x.kind != Kind::Dir || last.is_some_and(|p| *p >= x.path) {
            return bad("the subdirectory", &x.path);
        }
        last = Some(&x.path);
    }
    // A name is a file or a directory, never both: both lists are in
    // order, so one pass over them finds a name in each.
    let mut subdirs = l.subdirs.iter().peekable();
    for x in l.entries.iter().skip(1) {
        while subdirs.next_if(|d| d.path < x.path).is_some() {}
        if let Some(d) = subdirs.peek().filter(|d| d.path == x.path) {
            return bad("the name", &d.path);
        }
    }
    for p in l.stale_temps.iter().chain(&l.markers) {
        if !is_child(p, dir) || !accord_fsys::is_reserved_name(p.file_name()) {
            return bad("the temp name", p);
        }
    }
    Ok(())
}

pub fn put_failures(e: &mut Enc, fs: &[PathFailure]) {
    e.varint(fs.len() as u64);
    for f in fs {
        put_path(e, &f.path);
        e.str(&f.message);
    }
}

pub fn get_failures(d: &mut Dec) -> Result<Vec<PathFailure>, ProtoError> {
    let n = d.count(MAX_ENTRIES, 2, "failure count")?;
    (0..n)
        .map(|_| {
            Ok(PathFailure {
                path: get_path(d, "failed path")?,
                message: d.text(MAX_TEXT, "failure message")?,
            })
        })
        .collect()
}
