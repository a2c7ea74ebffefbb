//! The archive as a caller sees it: what is put comes back, in `RelPath`
//! order; a dropped batch changes nothing; newer, damaged and foreign files
//! are refused with their own errors and never a panic; the lock keeps a
//! second run out and dies with its holder.

use accord_archive::{pair_files, Archive, ArchiveError, Cursor, FORMAT_VERSION};
use accord_model::{Entry, Kind, Observed, Props, RelPath, Time};
use proptest::prelude::*;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};

const THIS: &[u8] = b"host-a\0/home/a\0fs-1";
const OTHER: &[u8] = b"host-b\0/srv/b\0fs-2";

fn path(bytes: &[u8]) -> RelPath {
    RelPath::new(bytes).unwrap()
}

/// An ordinary entry of `kind` at `at`, with the fields each kind needs.
fn observed(at: &[u8], kind: Kind) -> Observed {
    Observed {
        entry: Entry {
            path: path(at),
            kind,
            size: if kind == Kind::File { 12 } else { 0 },
            props: Props {
                mode: 0o644,
                uid: 1000,
                gid: 100,
                mtime: Time {
                    sec: 1_700_000_000,
                    nsec: 5,
                },
                xattrs: None,
            },
            dev: 64769,
            ino: 1234,
            nlink: 1,
            rdev: 0,
            blocks: 8,
            link_target: (kind == Kind::Symlink).then(|| b"../target".to_vec()),
            hash: (kind == Kind::File).then_some([7u8; 32]),
        },
        ctime: Time {
            sec: 1_700_000_001,
            nsec: 6,
        },
    }
}

fn open(dir: &Path) -> Archive {
    Archive::open(dir, THIS, OTHER).unwrap()
}

fn put_all(archive: &mut Archive, entries: &[Observed]) {
    let mut batch = archive.batch().unwrap();
    for entry in entries {
        batch.put(entry).unwrap();
    }
    batch.commit().unwrap();
}

fn read_all(archive: &Archive) -> Vec<Observed> {
    archive.entries().collect::<Result<_, _>>().unwrap()
}

fn paths(entries: &[Observed]) -> Vec<RelPath> {
    entries.iter().map(|e| e.entry.path.clone()).collect()
}

#[test]
fn every_kind_and_extreme_value_comes_back_as_put() {
    let dir = tempfile::tempdir().unwrap();
    let mut archive = open(dir.path());
    let mut extreme = observed(b"big", Kind::File);
    extreme.entry.size = u64::MAX;
    extreme.entry.ino = u64::MAX;
    extreme.entry.dev = 1 << 63;
    extreme.entry.nlink = 3;
    extreme.entry.blocks = u64::MAX - 1;
    extreme.entry.props.uid = u32::MAX;
    extreme.entry.props.gid = u32::MAX;
    extreme.entry.props.mode = 0o7777;
    extreme.entry.props.mtime = Time {
        sec: i64::MIN,
        nsec: 999_999_999,
    };
    extreme.ctime = Time { sec: -1, nsec: 0 };
    extreme.entry.props.xattrs = Some(vec![
        (b"system.posix_acl_access".to_vec(), vec![2, 0, 0, 0]),
        (b"user.big".to_vec(), vec![0xab; 65536]),
        (b"user.empty".to_vec(), vec![]),
    ]);
    let mut no_xattrs = observed(b"dir/none", Kind::File);
    no_xattrs.entry.props.xattrs = Some(vec![]);
    let mut device = observed(b"dev", Kind::BlockDev);
    device.entry.rdev = 0x0803;
    let mut all = vec![
        observed(b"", Kind::Dir),
        extreme,
        observed(b"dir", Kind::Dir),
        no_xattrs,
        observed(b"link", Kind::Symlink),
        observed(b"fifo", Kind::Fifo),
        observed(b"sock", Kind::Socket),
        observed(b"tty", Kind::CharDev),
        device,
    ];
    put_all(&mut archive, &all);
    all.sort_by(|x, y| x.entry.path.cmp(&y.entry.path));
    assert_eq!(read_all(&archive), all);
    for entry in &all {
        assert_eq!(
            archive.get(&entry.entry.path).unwrap().as_ref(),
            Some(entry)
        );
    }
    assert_eq!(archive.get(&path(b"missing")).unwrap(), None);
    assert_eq!(archive.len().unwrap(), all.len() as u64);
    // And after the archive is closed and opened again.
    drop(archive);
    assert_eq!(read_all(&open(dir.path())), all);
}

#[test]
fn the_stream_is_in_relpath_order_on_awkward_names() {
    let dir = tempfile::tempdir().unwrap();
    let mut archive = open(dir.path());
    let names: [&[u8]; 12] = [
        b"a\xff", b"a.b", b"a-b", b"a/b", b"a", b"a/b/c", b"a\x01", b"b", b"a/b-c", b"a/b/c/d",
        b"", b"a/\xff",
    ];
    let kinds = |name: &[u8]| {
        if [&b""[..], b"a", b"a/b", b"a/b/c"].contains(&name) {
            Kind::Dir
        } else {
            Kind::File
        }
    };
    let entries: Vec<Observed> = names
        .iter()
        .map(|&name| observed(name, kinds(name)))
        .collect();
    put_all(&mut archive, &entries);
    let mut expected: Vec<RelPath> = names.iter().map(|n| path(n)).collect();
    expected.sort();
    assert_eq!(paths(&read_all(&archive)), expected);
    // Spelled out, so the test does not only agree with itself.
    let spelled: [&[u8]; 12] = [
        b"", b"a", b"a/b", b"a/b/c", b"a/b/c/d", b"a/b-c", b"a/\xff", b"a\x01", b"a-b", b"a.b",
        b"a\xff", b"b",
    ];
    assert_eq!(expected, spelled.map(path));
}

#[test]
fn a_subtree_is_exactly_the_entries_beneath_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let mut archive = open(dir.path());
    let names: [&[u8]; 10] = [
        b"", b"a", b"a/b", b"a/b/c", b"a-b", b"a.b", b"a\x01", b"ab", b"a/\xff", b"b",
    ];
    let entries: Vec<Observed> = names.iter().map(|n| observed(n, Kind::Dir)).collect();
    put_all(&mut archive, &entries);
    let under = |dir: &[u8]| -> Vec<RelPath> {
        archive
            .subtree(&path(dir))
            .map(|e| e.unwrap().entry.path)
            .collect()
    };
    assert_eq!(under(b"a"), [path(b"a/b"), path(b"a/b/c"), path(b"a/\xff")]);
    assert_eq!(under(b"a/b"), [path(b"a/b/c")]);
    assert_eq!(under(b"a/b/c"), Vec::<RelPath>::new());
    assert_eq!(under(b"zzz"), Vec::<RelPath>::new());
    let children = |dir: &[u8]| -> Vec<RelPath> {
        let entries = archive.children(&path(dir)).unwrap();
        entries.into_iter().map(|e| e.entry.path).collect()
    };
    assert_eq!(children(b"a"), [path(b"a/b"), path(b"a/\xff")]);
    let top: [&[u8]; 6] = [b"a", b"a\x01", b"a-b", b"a.b", b"ab", b"b"];
    assert_eq!(children(b""), top.map(path));
    let mut everything_but_root: Vec<RelPath> = names[1..].iter().map(|n| path(n)).collect();
    everything_but_root.sort();
    assert_eq!(under(b""), everything_but_root);
    // Removing a subtree keeps the directory and its neighbours.
    let mut batch = archive.batch().unwrap();
    batch.remove_subtree(&path(b"a")).unwrap();
    batch.remove(&path(b"b")).unwrap();
    batch.commit().unwrap();
    let left: [&[u8]; 6] = [b"", b"a", b"a\x01", b"a-b", b"a.b", b"ab"];
    assert_eq!(paths(&read_all(&archive)), left.map(path));
}

#[test]
fn children_skip_what_has_no_entry_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let mut archive = open(dir.path());
    // `o` and `o/x` were never recorded: their descendants are no children.
    let names: [&[u8]; 4] = [b"n", b"o/x/y", b"o/x/z", b"p"];
    let entries: Vec<Observed> = names.iter().map(|n| observed(n, Kind::Dir)).collect();
    put_all(&mut archive, &entries);
    let children = |dir: &[u8]| -> Vec<RelPath> {
        let entries = archive.children(&path(dir)).unwrap();
        entries.into_iter().map(|e| e.entry.path).collect()
    };
    assert_eq!(children(b""), [path(b"n"), path(b"p")]);
    assert_eq!(children(b"o"), Vec::<RelPath>::new());
    assert_eq!(children(b"o/x"), [path(b"o/x/y"), path(b"o/x/z")]);
}

#[test]
fn streams_longer_than_a_page_are_whole_and_ordered_and_a_cursor_survives_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut archive = open(dir.path());
    let entries: Vec<Observed> = (0..2500u32)
        .map(|i| observed(format!("d{}/f{i}", i % 7).as_bytes(), Kind::File))
        .chain((0..7).map(|d| observed(format!("d{d}").as_bytes(), Kind::Dir)))
        .collect();
    put_all(&mut archive, &entries);
    let mut expected = paths(&entries);
    expected.sort();
    assert_eq!(paths(&read_all(&archive)), expected);
    // A cursor held across a write goes on after the last key it read.
    let mut cursor = Cursor::all();
    let mut seen = Vec::new();
    for _ in 0..1500 {
        seen.push(cursor.next(&archive).unwrap().unwrap().entry.path);
    }
    let mut batch = archive.batch().unwrap();
    batch.remove(&expected[10]).unwrap();
    batch.put(&observed(b"zzz", Kind::Dir)).unwrap();
    batch.commit().unwrap();
    while let Some(entry) = cursor.next(&archive).unwrap() {
        seen.push(entry.entry.path);
    }
    expected.push(path(b"zzz"));
    assert_eq!(seen, expected);
}

#[test]
fn an_archive_says_whether_this_open_made_it() {
    let dir = tempfile::tempdir().unwrap();
    assert!(open(dir.path()).was_created());
    assert!(!open(dir.path()).was_created());
    // Deleted by hand: made anew, and it says so.
    std::fs::remove_file(pair_files(dir.path(), THIS, OTHER).archive).unwrap();
    assert!(open(dir.path()).was_created());
}

#[test]
fn a_batch_dropped_without_commit_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut archive = open(dir.path());
    let before = vec![observed(b"", Kind::Dir), observed(b"kept", Kind::File)];
    put_all(&mut archive, &before);
    {
        let mut batch = archive.batch().unwrap();
        batch.put(&observed(b"new", Kind::File)).unwrap();
        batch.remove(&path(b"kept")).unwrap();
        batch.remove_subtree(&RelPath::root()).unwrap();
        // Dropped here: the run died between propagating and recording.
    }
    assert_eq!(read_all(&archive), before);
    drop(archive);
    assert_eq!(read_all(&open(dir.path())), before);
}

#[test]
fn an_entry_out_of_bounds_is_not_stored_and_the_batch_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let mut archive = open(dir.path());
    let mut no_fingerprint = observed(b"f", Kind::File);
    no_fingerprint.entry.hash = None;
    let mut bad_mode = observed(b"g", Kind::File);
    bad_mode.entry.props.mode = 0o100644;
    let mut no_target = observed(b"l", Kind::Symlink);
    no_target.entry.link_target = None;
    let mut unsorted = observed(b"x", Kind::Dir);
    unsorted.entry.props.xattrs = Some(vec![
        (b"user.b".to_vec(), vec![]),
        (b"user.a".to_vec(), vec![]),
    ]);
    let mut bad_time = observed(b"t", Kind::Dir);
    bad_time.ctime.nsec = 1_000_000_000;
    // Only a symlink, or a file or directory seen through a followed one,
    // has a link target.
    let mut fifo_target = observed(b"p", Kind::Fifo);
    fifo_target.entry.link_target = Some(b"../elsewhere".to_vec());
    let mut batch = archive.batch().unwrap();
    for bad in [
        no_fingerprint,
        bad_mode,
        no_target,
        unsorted,
        bad_time,
        fifo_target,
    ] {
        let error = batch.put(&bad).unwrap_err();
        assert!(matches!(error, ArchiveError::Unstorable { .. }), "{error}");
    }
    batch.put(&observed(b"ok", Kind::Dir)).unwrap();
    batch.commit().unwrap();
    assert_eq!(paths(&read_all(&archive)), [path(b"ok")]);
}

#[test]
fn each_side_of_a_pair_has_its_own_stable_file() {
    let dir = Path::new("/state");
    let a = pair_files(dir, THIS, OTHER);
    assert_eq!(a, pair_files(dir, THIS, OTHER));
    assert_ne!(a.archive, pair_files(dir, OTHER, THIS).archive);
    // Lengths are hashed too: moving a byte between identities is another pair.
    assert_ne!(
        pair_files(dir, b"ab", b"c").archive,
        pair_files(dir, b"a", b"bc").archive
    );
    assert!(a.archive.starts_with(dir));
    assert_ne!(a.archive, a.lock);
}

#[test]
fn the_recorded_pair_must_match() {
    let dir = tempfile::tempdir().unwrap();
    drop(open(dir.path()));
    // Someone copies this pair's archive in place of another pair's.
    let ours = pair_files(dir.path(), THIS, OTHER).archive;
    let theirs = pair_files(dir.path(), b"x", b"y").archive;
    std::fs::copy(&ours, &theirs).unwrap();
    let error = Archive::open(dir.path(), b"x", b"y").unwrap_err();
    assert!(error.is_damaged(), "{error}");
}

#[test]
fn a_newer_format_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let mut archive = open(dir.path());
    put_all(&mut archive, &[observed(b"", Kind::Dir)]);
    drop(archive);
    let file = pair_files(dir.path(), THIS, OTHER).archive;
    {
        let raw = rusqlite::Connection::open(&file).unwrap();
        raw.execute_batch(&format!("PRAGMA user_version = {}", FORMAT_VERSION + 1))
            .unwrap();
    }
    let before = std::fs::read(&file).unwrap();
    let error = Archive::open(dir.path(), THIS, OTHER).unwrap_err();
    match &error {
        ArchiveError::NewerFormat {
            found, supported, ..
        } => {
            assert_eq!((*found, *supported), (FORMAT_VERSION + 1, FORMAT_VERSION));
        }
        other => panic!("expected NewerFormat, got {other}"),
    }
    assert!(error.to_string().contains("newer"), "{error}");
    assert_eq!(std::fs::read(&file).unwrap(), before);
}

/// Deterministic bytes for damage.
fn noise(len: usize, mut seed: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect()
}

fn archive_file(dir: &Path) -> std::path::PathBuf {
    pair_files(dir, THIS, OTHER).archive
}

#[test]
fn random_bytes_are_a_damaged_archive() {
    for (seed, len) in [(1, 0x1_0000), (2, 100), (3, 4096 * 3)] {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = noise(len, seed);
        if seed == 3 {
            // A valid magic string over garbage.
            bytes[..16].copy_from_slice(b"SQLite format 3\0");
        }
        std::fs::write(archive_file(dir.path()), &bytes).unwrap();
        let error = Archive::open(dir.path(), THIS, OTHER).unwrap_err();
        assert!(error.is_damaged(), "seed {seed}: {error}");
        // Refused, not repaired behind the caller's back.
        assert_eq!(std::fs::read(archive_file(dir.path())).unwrap(), bytes);
    }
}

#[test]
fn a_truncated_archive_is_damaged_and_recreate_starts_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let mut archive = open(dir.path());
    let entries: Vec<Observed> = (0..3000u32)
        .map(|i| {
            observed(
                format!("file-with-a-longish-name-{i}").as_bytes(),
                Kind::File,
            )
        })
        .collect();
    put_all(&mut archive, &entries);
    drop(archive);
    let file = archive_file(dir.path());
    let len = std::fs::metadata(&file).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&file)
        .unwrap()
        .set_len(len * 2 / 5)
        .unwrap();
    let error = match Archive::open(dir.path(), THIS, OTHER) {
        Err(error) => error,
        Ok(archive) => {
            let check = archive.check_integrity().unwrap_err();
            assert!(check.is_damaged(), "{check}");
            archive
                .entries()
                .find_map(Result::err)
                .expect("a read error")
        }
    };
    assert!(error.is_damaged(), "{error}");
    let fresh = Archive::recreate(dir.path(), THIS, OTHER).unwrap();
    assert!(fresh.is_empty().unwrap());
    assert!(fresh.was_created());
    fresh.check_integrity().unwrap();
    assert!(pair_files(dir.path(), THIS, OTHER).set_aside.exists());
}

#[test]
fn another_programs_database_is_damaged() {
    let dir = tempfile::tempdir().unwrap();
    {
        let raw = rusqlite::Connection::open(archive_file(dir.path())).unwrap();
        raw.execute_batch("CREATE TABLE notes (x TEXT)").unwrap();
    }
    let error = Archive::open(dir.path(), THIS, OTHER).unwrap_err();
    assert!(error.is_damaged(), "{error}");
}

/// Each edit of a stored row makes a value no archive of ours holds. The
/// row is `observed(b"a", Kind::File)`'s: its entry blob is the kind (1),
/// the flags (2: a fingerprint), size 12 (byte 3), mode 0o644 (bytes 4-5),
/// uid 1000 (6-7), gid 100 (8), the mtime's seconds (9-13) and
/// nanoseconds (14), ..., and the 32 bytes of the fingerprint last.
const HOSTILE_EDITS: &[&str] = &[
    "UPDATE entries SET entry = CAST(X'63' || substr(entry, 2) AS BLOB)",
    "UPDATE entries SET entry = CAST(X'0142' || substr(entry, 3) AS BLOB)",
    "UPDATE entries SET entry = 'file'",
    "UPDATE entries SET entry = X''",
    "UPDATE entries SET entry = NULL",
    "UPDATE entries SET key = X'612F62'",
    "UPDATE entries SET key = X'2E2E'",
    "UPDATE entries SET key = X'610000'",
    "UPDATE entries SET key = 'text'",
    // The fingerprint cut short, then missing.
    "UPDATE entries SET entry = substr(entry, 1, length(entry) - 1)",
    "UPDATE entries SET entry = CAST(X'0100' || substr(entry, 3, length(entry) - 34) AS BLOB)",
    "UPDATE entries SET entry = CAST(entry || X'00' AS BLOB)",
    // A mode with a file type's bits, a uid of 2^32, a size of 71 bits,
    // an mtime of 10^9 nanoseconds.
    "UPDATE entries SET entry = CAST(substr(entry, 1, 3) || X'A48302' || substr(entry, 6) AS BLOB)",
    "UPDATE entries SET entry = CAST(substr(entry, 1, 5) || X'8080808010' || substr(entry, 8) AS BLOB)",
    "UPDATE entries SET entry = CAST(substr(entry, 1, 2) || X'FFFFFFFFFFFFFFFFFFFF7F' || substr(entry, 4) AS BLOB)",
    "UPDATE entries SET entry = CAST(substr(entry, 1, 13) || X'8094EBDC03' || substr(entry, 15) AS BLOB)",
    // A file may carry a followed link's target, never one with a NUL, nor
    // one longer than a path.
    "UPDATE entries SET entry = CAST(X'0103' || substr(entry, 3) || X'022F00' AS BLOB)",
    "UPDATE entries SET entry = CAST(X'0103' || substr(entry, 3) || X'FFFF7F' AS BLOB)",
    "UPDATE entries SET entry = CAST(X'0106' || substr(entry, 3) || X'04FFFFFFFF' AS BLOB)",
    "UPDATE entries SET entry = CAST(X'0106' || substr(entry, 3) || X'0601000000FFFF' AS BLOB)",
    "UPDATE entries SET entry = CAST(X'0106' || substr(entry, 3) || X'0B0100000001006100000100' AS BLOB)",
    "UPDATE entries SET entry = CAST(X'0106' || substr(entry, 3) || X'0500000000FF' AS BLOB)",
    "CREATE VIEW v AS SELECT 1",
    "CREATE INDEX i ON entries (entry)",
    "UPDATE meta SET value = X'00' WHERE name = 'this_root'",
    "PRAGMA application_id = 7",
    "PRAGMA user_version = 0",
    // Format 1's number with format 2's tables.
    "PRAGMA user_version = 1",
];

#[test]
fn hostile_values_are_reported_as_damage_never_returned() {
    for edit in HOSTILE_EDITS {
        let dir = tempfile::tempdir().unwrap();
        let mut archive = open(dir.path());
        put_all(&mut archive, &[observed(b"a", Kind::File)]);
        drop(archive);
        {
            let raw = rusqlite::Connection::open(archive_file(dir.path())).unwrap();
            // An edit that breaks the NOT NULL rule SQLite enforces itself
            // cannot reach a reader.
            if let Err(error) = raw.execute_batch(edit) {
                assert!(edit.ends_with("= NULL"), "{edit}: {error}");
                continue;
            }
        }
        let error = match Archive::open(dir.path(), THIS, OTHER) {
            Err(error) => error,
            Ok(archive) => {
                let all: Result<Vec<_>, _> = archive.entries().collect();
                all.expect_err(edit)
            }
        };
        assert!(error.is_damaged(), "{edit}: {error}");
    }
}

/// Format 1's table, as it made it (a column per field).
const CREATE_ENTRIES_1: &str = "CREATE TABLE entries (\
key BLOB PRIMARY KEY NOT NULL, kind INTEGER NOT NULL, size INTEGER NOT NULL, \
mode INTEGER NOT NULL, uid INTEGER NOT NULL, gid INTEGER NOT NULL, \
mtime_s INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, \
ctime_s INTEGER NOT NULL, ctime_ns INTEGER NOT NULL, \
dev INTEGER NOT NULL, ino INTEGER NOT NULL, nlink INTEGER NOT NULL, \
rdev INTEGER NOT NULL, blocks INTEGER NOT NULL, \
link_target BLOB, fingerprint BLOB, xattrs BLOB) WITHOUT ROWID";

/// Write an archive as format 1 did, holding `entries`.
fn write_format_1(dir: &Path, entries: &[Observed]) {
    let raw = rusqlite::Connection::open(archive_file(dir)).unwrap();
    raw.execute_batch(&format!(
        "{CREATE_ENTRIES_1}; CREATE TABLE meta (name TEXT PRIMARY KEY NOT NULL, value BLOB NOT NULL) WITHOUT ROWID; \
         PRAGMA application_id = {}; PRAGMA user_version = 1",
        0x4143_6172
    ))
    .unwrap();
    let meta = "INSERT INTO meta (name, value) VALUES (?1, ?2)";
    raw.execute(meta, rusqlite::params!["this_root", THIS])
        .unwrap();
    raw.execute(meta, rusqlite::params!["other_root", OTHER])
        .unwrap();
    for o in entries {
        let e = &o.entry;
        let key: Vec<u8> = (e.path.as_bytes().iter())
            .map(|&b| if b == b'/' { 0 } else { b })
            .collect();
        let xattrs = e.props.xattrs.as_ref().map(|list| {
            let mut out = (list.len() as u32).to_le_bytes().to_vec();
            for (name, value) in list {
                out.extend_from_slice(&(name.len() as u16).to_le_bytes());
                out.extend_from_slice(name);
                out.extend_from_slice(&(value.len() as u32).to_le_bytes());
                out.extend_from_slice(value);
            }
            out
        });
        let kind = [Kind::File, Kind::Dir, Kind::Symlink, Kind::Fifo]
            .iter()
            .position(|k| *k == e.kind)
            .unwrap() as i64
            + 1;
        raw.execute(
            "INSERT INTO entries VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
            rusqlite::params![
                key, kind, e.size as i64, e.props.mode, e.props.uid, e.props.gid,
                e.props.mtime.sec, e.props.mtime.nsec, o.ctime.sec, o.ctime.nsec,
                e.dev as i64, e.ino as i64, e.nlink as i64, e.rdev as i64, e.blocks as i64,
                e.link_target.as_deref(), e.hash.as_ref().map(|h| &h[..]), xattrs,
            ],
        )
        .unwrap();
    }
}

/// An archive of format 1 opens as the current format with every entry as
/// it was; one with a row format 1 could not have written is damage, and
/// is left as it was found.
#[test]
fn a_format_1_archive_is_migrated_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = observed(b"d/big", Kind::File);
    (big.entry.size, big.entry.ino, big.entry.dev) = (u64::MAX, u64::MAX, 1 << 63);
    big.entry.props.mtime.sec = -5;
    big.entry.props.xattrs = Some(vec![(b"user.a".to_vec(), vec![0, 1, 2])]);
    let entries = vec![
        observed(b"", Kind::Dir),
        observed(b"d", Kind::Dir),
        big,
        observed(b"d/link", Kind::Symlink),
        observed(b"e", Kind::Fifo),
    ];
    write_format_1(dir.path(), &entries);
    let mut archive = open(dir.path());
    assert!(!archive.was_created());
    assert_eq!(read_all(&archive), entries);
    put_all(&mut archive, &[observed(b"f", Kind::File)]);
    drop(archive);
    let raw = rusqlite::Connection::open(archive_file(dir.path())).unwrap();
    let version: i64 = raw
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, FORMAT_VERSION);
    let free: i64 = (raw.query_row("PRAGMA freelist_count", [], |r| r.get(0))).unwrap();
    assert_eq!(free, 0, "format 1's pages are given back");
    drop(raw);
    assert_eq!(read_all(&open(dir.path())).len(), entries.len() + 1);

    let dir = tempfile::tempdir().unwrap();
    write_format_1(dir.path(), &entries);
    let raw = rusqlite::Connection::open(archive_file(dir.path())).unwrap();
    raw.execute_batch("UPDATE entries SET mode = 33188 WHERE key = X'64'")
        .unwrap();
    drop(raw);
    let error = Archive::open(dir.path(), THIS, OTHER).unwrap_err();
    assert!(error.is_damaged(), "{error}");
    let raw = rusqlite::Connection::open(archive_file(dir.path())).unwrap();
    let version: i64 = raw
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let rows: i64 = (raw.query_row("SELECT count(*) FROM entries WHERE mode >= 0", [], |r| {
        r.get(0)
    }))
    .unwrap();
    assert_eq!((version, rows), (1, entries.len() as i64));
}

#[test]
fn a_second_open_of_the_pair_is_refused_while_the_first_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path());
    let error = Archive::open(dir.path(), THIS, OTHER).unwrap_err();
    match &error {
        ArchiveError::Locked { holder, .. } => assert_eq!(*holder, Some(std::process::id())),
        other => panic!("expected Locked, got {other}"),
    }
    let message = error.to_string();
    assert!(
        message.contains("another sync of this pair is running")
            && message.contains(&format!("pid {}", std::process::id())),
        "{message}"
    );
    // The other side of the pair is another file with another lock.
    drop(Archive::open(dir.path(), OTHER, THIS).unwrap());
    drop(first);
    drop(open(dir.path()));
}

/// Set in the child processes of the tests below: the state directory.
const CHILD_STATE_DIR: &str = "ACCORD_ARCHIVE_TEST_CHILD_STATE_DIR";
/// Set with it: `hold` (take the lock and wait) or `mid-batch` (also write
/// a batch and wait before committing it).
const CHILD_ROLE: &str = "ACCORD_ARCHIVE_TEST_CHILD_ROLE";
const CHILD_READY: &str = "ARCHIVE-CHILD-READY";

/// Not a test of its own: the child process of the tests below (it returns
/// at once when not started as one). Does its role, says so, and waits to
/// be killed.
#[test]
fn archive_child_process() {
    let (Some(dir), Ok(role)) = (std::env::var_os(CHILD_STATE_DIR), std::env::var(CHILD_ROLE))
    else {
        return;
    };
    let mut archive = open(Path::new(&dir));
    let mut batch = archive.batch().unwrap();
    if role == "mid-batch" {
        for i in 0..2000u32 {
            batch
                .put(&observed(format!("uncommitted-{i}").as_bytes(), Kind::File))
                .unwrap();
        }
        batch.remove(&path(b"kept")).unwrap();
    }
    println!("{CHILD_READY}");
    std::io::stdout().flush().unwrap();
    std::thread::sleep(std::time::Duration::from_secs(600));
    drop(batch);
}

/// Kills the child when the test ends, however it ends.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start this test binary as a child in `role`, and wait until it is ready.
fn start_child(dir: &Path, role: &str) -> KillOnDrop {
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "archive_child_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_STATE_DIR, dir)
            .env(CHILD_ROLE, role)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let ready = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains(CHILD_READY));
    assert!(ready, "the child process never got ready");
    child
}

#[test]
fn a_killed_holder_releases_the_lock() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = start_child(dir.path(), "hold");
    match Archive::open(dir.path(), THIS, OTHER).unwrap_err() {
        ArchiveError::Locked { holder, .. } => assert_eq!(holder, Some(child.0.id())),
        other => panic!("expected Locked, got {other}"),
    }
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    drop(open(dir.path()));
}

#[test]
fn a_run_killed_in_the_middle_of_a_batch_leaves_the_archive_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let mut archive = open(dir.path());
    let before = vec![observed(b"", Kind::Dir), observed(b"kept", Kind::File)];
    put_all(&mut archive, &before);
    drop(archive);
    let mut child = start_child(dir.path(), "mid-batch");
    // SIGKILL: no destructor, no rollback; only SQLite's log decides.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let archive = open(dir.path());
    archive.check_integrity().unwrap();
    assert_eq!(read_all(&archive), before);
}

/// Names from an alphabet that meets every ordering trap: bytes just above
/// and below '/', the lowest and highest name bytes, prefixes of each other.
fn awkward_path() -> impl Strategy<Value = RelPath> {
    let name = prop::collection::vec(prop::sample::select(b"a-.0\x01\xff".to_vec()), 1..4);
    // "." and ".." can be drawn; they are not names.
    prop::collection::vec(name, 1..4)
        .prop_filter_map("not a path", |names| RelPath::new(&names.join(&b'/')).ok())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn stored_order_is_relpath_order(paths_in in prop::collection::vec(awkward_path(), 1..40)) {
        let dir = tempfile::tempdir().unwrap();
        let mut archive = open(dir.path());
        // Kinds do not matter to the order; directories for all keeps the
        // set consistent whichever paths are prefixes of others.
        let entries: Vec<Observed> =
            paths_in.iter().map(|p| observed(p.as_bytes(), Kind::Dir)).collect();
        put_all(&mut archive, &entries);
        let mut expected = paths_in.clone();
        expected.sort();
        expected.dedup();
        prop_assert_eq!(paths(&read_all(&archive)), expected.clone());
        // Every children query agrees with `parent`.
        for dir in expected.iter().chain([&RelPath::root()]) {
            let got: Vec<RelPath> = archive
                .children(dir)
                .unwrap()
                .into_iter()
                .map(|e| e.entry.path)
                .collect();
            let want: Vec<RelPath> = expected
                .iter()
                .filter(|p| p.parent().as_ref() == Some(dir))
                .cloned()
                .collect();
            prop_assert_eq!(got, want);
        }
        // Every subtree query agrees with `starts_with`.
        for dir in &expected {
            let got: Vec<RelPath> =
                archive.subtree(dir).map(|e| e.unwrap().entry.path).collect();
            let want: Vec<RelPath> = expected
                .iter()
                .filter(|p| p.starts_with(dir) && *p != dir)
                .cloned()
                .collect();
            prop_assert_eq!(got, want);
        }
    }
}

#[test]
fn what_a_followed_link_led_to_keeps_the_links_target() {
    let dir = tempfile::tempdir().unwrap();
    let mut archive = open(dir.path());
    let mut file = observed(b"l", Kind::File);
    file.entry.link_target = Some(b"../outside/f".to_vec());
    let mut dir_entry = observed(b"m", Kind::Dir);
    dir_entry.entry.link_target = Some(b"/elsewhere".to_vec());
    put_all(&mut archive, &[file.clone(), dir_entry.clone()]);
    drop(archive);
    let archive = open(dir.path());
    assert_eq!(archive.get(&path(b"l")).unwrap(), Some(file));
    assert_eq!(archive.get(&path(b"m")).unwrap(), Some(dir_entry));
}
