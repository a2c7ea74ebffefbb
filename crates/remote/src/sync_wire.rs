//! The bodies of the two-way sync's requests and replies (`docs/protocol.md`,
//! "Two-way sync"): what a side's update detection found, the paths a
//! lookup asks for, the archive's records, and a side's failures.
//!
//! Every decoder bounds every count by what the message holds, checks
//! every path, and ends with the message: a reply is the other host's word.

use accord_model::{Observed, PathFailure, RelPath};
use accord_plan::{DetectOptions, SideCounts, SyncedProps};
use accord_proto::codec::{get_entry, get_failures, get_path, get_time, put_entry, put_time};
use accord_proto::codec::{put_failures, put_path};
use accord_proto::{Dec, Enc, ProtoError};
use accord_replica::{ArchiveRecord, SideCause, SideChange, SideFailure, SideOptions, SideScan};

/// Most changes, paths or records in one message (each takes bytes too,
/// which bound them further).
pub const MAX_ITEMS: u64 = 1 << 32;
/// Longest failure message kept.
const MAX_MESSAGE: usize = 64 << 10;

const CHECKSUM: u8 = 1;
const PERMS: u8 = 2;
const OWNER: u8 = 4;
const XATTRS: u8 = 8;
const TIMES: u8 = 16;
const USE_ARCHIVE: u8 = 32;
/// POSIX ACLs (an older server refuses the flag: it does not know it).
const ACLS: u8 = 64;
/// `SyncLookup` only: the reply lists the paths this side's ignore rules
/// exclude (sent only to a server that agreed to `FEATURE_SYNC_IGNORE`).
pub const TELLS_EXCLUDED: u8 = 128;

/// `SyncScan` only: asked ahead of its turn, with the archive's opening
/// (sent only to a server that agreed to `FEATURE_OPEN_AFTER_LOCK`): not
/// carried out where that opening made the archive.
pub const AHEAD: u8 = 128;

/// A side's options as the flags of `SyncScan` and `SyncLookup`.
pub fn flags_of(opts: &SideOptions) -> u8 {
    let d = &opts.detect;
    let bit = |on: bool, b: u8| if on { b } else { 0 };
    bit(d.checksum, CHECKSUM)
        | bit(d.props.perms, PERMS)
        | bit(d.props.owner, OWNER)
        | bit(d.props.xattrs, XATTRS)
        | bit(d.props.times, TIMES)
        | bit(d.props.acls, ACLS)
        | bit(opts.use_archive, USE_ARCHIVE)
}

pub fn options_of(flags: u8) -> Result<SideOptions, ProtoError> {
    if flags & !(CHECKSUM | PERMS | OWNER | XATTRS | TIMES | USE_ARCHIVE | ACLS) != 0 {
        return Err(ProtoError::Invalid(format!(
            "unknown sync flags {flags:#x}"
        )));
    }
    let on = |b: u8| flags & b != 0;
    Ok(SideOptions {
        detect: DetectOptions {
            checksum: on(CHECKSUM),
            props: SyncedProps {
                perms: on(PERMS),
                owner: on(OWNER),
                xattrs: on(XATTRS),
                acls: on(ACLS),
                times: on(TIMES),
            },
        },
        use_archive: on(USE_ARCHIVE),
    })
}

/// A lookup's options, and whether its reply may list excluded paths.
pub fn lookup_options_of(flags: u8) -> Result<(SideOptions, bool), ProtoError> {
    Ok((
        options_of(flags & !TELLS_EXCLUDED)?,
        flags & TELLS_EXCLUDED != 0,
    ))
}

/// A lookup's reply: the scan, then (`tells_excluded`) the paths asked for
/// that the rules exclude. A client that cannot take that list (an older
/// one) gets them as failures, which it leaves out of the run with their
/// subtrees just the same.
pub fn put_lookup(e: &mut Enc, scan: &SideScan, tells_excluded: bool) {
    if tells_excluded {
        put_side_scan(e, scan);
        put_paths(e, &scan.excluded);
        return;
    }
    let mut failures = scan.failures.clone();
    failures.extend(scan.excluded.iter().map(|path| PathFailure {
        path: path.clone(),
        message: "excluded by this side's ignore rules".into(),
    }));
    failures.sort_by(|x, y| x.path.cmp(&y.path));
    let scan = SideScan {
        changes: scan.changes.clone(),
        counts: scan.counts,
        failures,
        excluded: Vec::new(),
    };
    put_side_scan(e, &scan);
}

/// Decode a lookup's reply written with `tells_excluded`.
pub fn get_lookup(d: &mut Dec) -> Result<SideScan, ProtoError> {
    let mut scan = get_side_scan(d)?;
    scan.excluded = get_paths(d)?;
    Ok(scan)
}

/// A reply that is either a side's value or a side's failure.
pub fn put_outcome<T>(
    e: &mut Enc,
    outcome: &Result<T, SideFailure>,
    put: impl FnOnce(&mut Enc, &T),
) {
    match outcome {
        Ok(value) => {
            e.u8(0);
            put(e, value);
        }
        Err(SideFailure::Locked { holder }) => {
            e.u8(1);
            match holder {
                Some(pid) => e.u8(1).varint(*pid as u64),
                None => e.u8(0),
            };
        }
        Err(SideFailure::Damaged(cause)) => {
            e.u8(2).str(cut(&cause.to_string()));
        }
        Err(SideFailure::Unreadable(cause)) => {
            e.u8(3).str(cut(&cause.to_string()));
        }
        Err(SideFailure::Failed(cause)) => {
            e.u8(4).str(cut(&cause.to_string()));
        }
    }
}

fn cut(m: &str) -> &str {
    let mut end = m.len().min(MAX_MESSAGE);
    while !m.is_char_boundary(end) {
        end -= 1;
    }
    &m[..end]
}

/// Decode a reply written by [`put_outcome`]; the whole message must be
/// used.
pub fn get_outcome<T>(
    b: &[u8],
    get: impl FnOnce(&mut Dec) -> Result<T, ProtoError>,
) -> Result<Result<T, SideFailure>, ProtoError> {
    let mut d = Dec::new(b);
    let message = |d: &mut Dec| d.text(MAX_MESSAGE, "failure message");
    let outcome = match d.u8("outcome")? {
        0 => Ok(get(&mut d)?),
        1 => {
            let holder = match d.u8("holder present")? {
                0 => None,
                1 => Some(d.u32("holder")?),
                x => return Err(ProtoError::Invalid(format!("bad holder tag {x}"))),
            };
            Err(SideFailure::Locked { holder })
        }
        2 => Err(SideFailure::Damaged(SideCause::Said(message(&mut d)?))),
        3 => Err(SideFailure::Unreadable(SideCause::Said(message(&mut d)?))),
        4 => Err(SideFailure::Failed(SideCause::Said(message(&mut d)?))),
        x => return Err(ProtoError::Invalid(format!("unknown outcome {x}"))),
    };
    d.end("the sync reply")?;
    Ok(outcome)
}

fn put_observed(e: &mut Enc, o: Option<&Observed>) {
    match o {
        None => {
            e.u8(0);
        }
        Some(o) => {
            e.u8(1);
            put_entry(e, &o.entry);
            put_time(e, o.ctime);
        }
    }
}

fn get_observed(d: &mut Dec) -> Result<Option<Observed>, ProtoError> {
    match d.u8("entry present")? {
        0 => Ok(None),
        1 => {
            let entry = get_entry(d)?;
            let ctime = get_time(d)?;
            Ok(Some(Observed { entry, ctime }))
        }
        x => Err(ProtoError::Invalid(format!("bad entry tag {x}"))),
    }
}

pub fn put_side_scan(e: &mut Enc, scan: &SideScan) {
    e.varint(scan.counts.archived as u64)
        .varint(scan.counts.scanned as u64)
        .varint(scan.changes.len() as u64);
    for change in &scan.changes {
        put_path(e, &change.path);
        put_observed(e, change.archived.as_deref());
        put_observed(e, change.current.as_deref());
        put_time(e, change.record_ctime);
    }
    put_failures(e, &scan.failures);
}

pub fn get_side_scan(d: &mut Dec) -> Result<SideScan, ProtoError> {
    let archived = d.bounded(MAX_ITEMS, "archived count")? as usize;
    let scanned = d.bounded(MAX_ITEMS, "scanned count")? as usize;
    // A change takes at least its path's length, two tags and a time.
    let n = d.count(MAX_ITEMS, 5, "change count")?;
    let mut changes = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        changes.push(SideChange {
            path: get_path(d, "changed path")?,
            archived: get_observed(d)?.map(Box::new),
            current: get_observed(d)?.map(Box::new),
            record_ctime: get_time(d)?,
        });
    }
    let failures: Vec<PathFailure> = get_failures(d)?;
    Ok(SideScan {
        changes,
        counts: SideCounts { archived, scanned },
        failures,
        excluded: Vec::new(),
    })
}

/// The body of a lookup: the paths asked for.
pub fn encode_paths(paths: &[RelPath]) -> Vec<u8> {
    let mut e = Enc::new();
    put_paths(&mut e, paths);
    e.finish()
}

pub fn put_paths(e: &mut Enc, paths: &[RelPath]) {
    e.varint(paths.len() as u64);
    for path in paths {
        put_path(e, path);
    }
}

pub fn decode_paths(b: &[u8]) -> Result<Vec<RelPath>, ProtoError> {
    let mut d = Dec::new(b);
    let paths = get_paths(&mut d)?;
    d.end("the paths")?;
    Ok(paths)
}

/// Paths in strictly increasing order, their count bounded by the bytes.
pub fn get_paths(d: &mut Dec) -> Result<Vec<RelPath>, ProtoError> {
    let n = d.count(MAX_ITEMS, 1, "path count")?;
    let mut paths = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        paths.push(get_path(d, "looked-up path")?);
    }
    if paths.windows(2).any(|w| w[0] >= w[1]) {
        return Err(ProtoError::Invalid("looked-up paths out of order".into()));
    }
    Ok(paths)
}

/// The body of `SyncRecord`.
pub fn encode_records(records: &[ArchiveRecord]) -> Vec<u8> {
    let mut e = Enc::new();
    e.varint(records.len() as u64);
    for record in records {
        match record {
            ArchiveRecord::Put(o) => {
                e.u8(0);
                put_observed(&mut e, Some(o));
            }
            ArchiveRecord::Remove(path) => {
                e.u8(1);
                put_path(&mut e, path);
            }
        }
    }
    e.finish()
}

pub fn decode_records(b: &[u8]) -> Result<Vec<ArchiveRecord>, ProtoError> {
    let mut d = Dec::new(b);
    let records = get_records(&mut d)?;
    d.end("the records")?;
    Ok(records)
}

/// Records as [`encode_records`] writes them, read from `d` (which may
/// hold more after them).
pub fn get_records(d: &mut Dec) -> Result<Vec<ArchiveRecord>, ProtoError> {
    let n = d.count(MAX_ITEMS, 2, "record count")?;
    let mut records = Vec::with_capacity(n.min(1 << 16));
    for _ in 0..n {
        let record = match d.u8("record")? {
            0 => match get_observed(d)? {
                Some(o) => ArchiveRecord::Put(o),
                None => return Err(ProtoError::Invalid("a record without its entry".into())),
            },
            1 => ArchiveRecord::Remove(get_path(d, "removed path")?),
            x => return Err(ProtoError::Invalid(format!("unknown record {x}"))),
        };
        records.push(record);
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_round_trip_and_unknown_bits_are_refused() {
        for flags in 0..128u8 {
            assert_eq!(flags_of(&options_of(flags).unwrap()), flags);
        }
        assert!(options_of(128).is_err());
    }

    #[test]
    fn outcomes_round_trip() {
        let failures = [
            SideFailure::Locked { holder: Some(7) },
            SideFailure::Locked { holder: None },
            SideFailure::Damaged(SideCause::Said("d".into())),
            SideFailure::Unreadable(SideCause::Said("u".into())),
            SideFailure::said("f"),
        ];
        for failure in failures {
            let shown = failure.to_string();
            let mut e = Enc::new();
            put_outcome::<()>(&mut e, &Err(failure), |_, _| {});
            let back = get_outcome(&e.finish(), |_| Ok(())).unwrap();
            assert_eq!(back.unwrap_err().to_string(), shown);
        }
    }

    #[test]
    fn lookups_out_of_order_are_refused() {
        let a = RelPath::new(b"a").unwrap();
        let b = RelPath::new(b"b").unwrap();
        let ok = encode_paths(&[a.clone(), b.clone()]);
        assert_eq!(decode_paths(&ok).unwrap(), vec![a.clone(), b.clone()]);
        assert!(decode_paths(&encode_paths(&[b, a])).is_err());
    }

    #[test]
    fn excluded_paths_reach_only_a_client_that_asked_for_them() {
        let path = |p: &str| RelPath::new(p.as_bytes()).unwrap();
        let scan = SideScan {
            excluded: vec![path("build"), path("x.o")],
            ..SideScan::default()
        };
        assert!(lookup_options_of(128 | 1).unwrap().1);
        assert!(options_of(128).is_err(), "a scan never takes the bit");
        let mut e = Enc::new();
        put_lookup(&mut e, &scan, true);
        let bytes = e.finish();
        let mut d = Dec::new(&bytes);
        let back = get_lookup(&mut d).unwrap();
        d.end("test").unwrap();
        assert_eq!(back.excluded, scan.excluded);
        assert!(back.failures.is_empty());
        // An older client reads failures: the paths are left out as well.
        let mut e = Enc::new();
        put_lookup(&mut e, &scan, false);
        let bytes = e.finish();
        let mut d = Dec::new(&bytes);
        let back = get_side_scan(&mut d).unwrap();
        d.end("test").unwrap();
        let failed: Vec<_> = back.failures.iter().map(|f| f.path.clone()).collect();
        assert_eq!(failed, scan.excluded);
        // Out of order: refused.
        let mut e = Enc::new();
        put_side_scan(&mut e, &SideScan::default());
        put_paths(&mut e, &[path("b"), path("a")]);
        let bytes = e.finish();
        assert!(get_lookup(&mut Dec::new(&bytes)).is_err());
    }
}
