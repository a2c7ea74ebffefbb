//! Hostile bytes for the task model's decoders (tasks and run settings
//! come from a shared Redis): an error or a value, never a panic; round
//! trips of every task kind; and the checks that matter named one by one.
//! The fuzz targets in `crates/engine/fuzz` run the same bodies.

mod task_bodies;

use accord_engine::tasks::{Task, MAX_BATCH, TASK_VERSION};
use accord_engine::{MirrorConfig, RunSpec};
use accord_model::{Entry, Kind, Props, RelPath, Time};
use accord_plan::{Item, Method, Op};
use proptest::prelude::*;
use std::path::PathBuf;

fn path(p: &str) -> RelPath {
    RelPath::new(p.as_bytes()).unwrap()
}

fn entry(p: &str, kind: Kind) -> Entry {
    Entry {
        path: path(p),
        kind,
        size: 12,
        props: Props {
            mode: 0o644,
            uid: 1,
            gid: 2,
            mtime: Time { sec: 5, nsec: 6 },
            xattrs: Some(vec![(b"user.a".to_vec(), b"v".to_vec())]),
        },
        dev: 1,
        ino: 99,
        nlink: 1,
        rdev: 0,
        blocks: 8,
        link_target: (kind == Kind::Symlink).then(|| b"target".to_vec()),
        hash: None,
    }
}

fn item(p: &str, op: Op) -> Item {
    let kind = if matches!(op, Op::Create) {
        Kind::Symlink
    } else {
        Kind::File
    };
    Item {
        op,
        path: path(p),
        src: Some(Box::new(entry(p, kind))),
        dst: Some(Box::new(entry(p, kind))),
        props_differ: false,
    }
}

fn every_kind() -> Vec<Task> {
    let big = item("d/big", Op::Write(Method::Whole));
    vec![
        Task::ScanDir { dir: path("d") },
        Task::ScanDir {
            dir: RelPath::root(),
        },
        Task::Files {
            dir: path("d"),
            items: vec![
                item("d/a", Op::Write(Method::Delta)),
                item("d/b", Op::Create),
                item("d/c", Op::Meta),
            ],
        },
        Task::BigFile { item: big.clone() },
        Task::Range {
            item: big,
            temp: b".accord-tmp-big.x1".to_vec(),
            index: 2,
            count: 3,
        },
        Task::Hardlink {
            src: Box::new(entry("d/l", Kind::File)),
            dst: None,
        },
        Task::DirMeta { dir: path("d/e") },
        Task::DeleteExtras { dir: path("d/x") },
        Task::ScanDirs {
            dirs: vec![path("d/a"), path("d/b"), path("d/c")],
        },
        Task::ScanDirs {
            dirs: vec![path("top")],
        },
        Task::Verify {
            paths: vec![path("d/a"), path("d/b")],
            by: "host-1".into(),
            handed_back: true,
        },
    ]
}

#[test]
fn every_task_kind_round_trips() {
    for t in every_kind() {
        assert_eq!(Task::decode(&t.encode()).unwrap(), t, "{}", t.kind());
        task_bodies::task(&t.encode());
    }
}

#[test]
fn another_version_and_trailing_bytes_are_refused() {
    for t in every_kind() {
        let mut b = t.encode();
        b[0] = TASK_VERSION + 1;
        assert!(Task::decode(&b).is_err());
        let mut b = t.encode();
        b.push(0);
        assert!(Task::decode(&b).is_err());
        // Every cut short is an error.
        let b = t.encode();
        for n in 0..b.len() {
            assert!(Task::decode(&b[..n]).is_err(), "{} cut at {n}", t.kind());
        }
    }
}

/// Replace the first occurrence of `from` in the encoding by `to` (same
/// length, so every length prefix stays right).
fn patched(t: &Task, from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut b = t.encode();
    let at = b.windows(from.len()).position(|w| w == from).unwrap();
    b[at..at + from.len()].copy_from_slice(to);
    b
}

/// A `scan-dirs` task names siblings, none the root, each once and in
/// increasing order (each is counted once in its parent).
#[test]
fn scan_dirs_of_other_parents_twice_or_out_of_order_are_refused() {
    let ok = Task::ScanDirs {
        dirs: vec![path("p/aa"), path("p/ab")],
    };
    assert!(Task::decode(&ok.encode()).is_ok());
    for bad in [
        vec![path("p/aa"), path("q/ab")],
        vec![path("p/ab"), path("p/aa")],
        vec![path("p/aa"), path("p/aa")],
        vec![path("p"), path("p/aa")],
        vec![RelPath::root()],
        vec![],
    ] {
        let t = Task::ScanDirs { dirs: bad.clone() };
        assert!(Task::decode(&t.encode()).is_err(), "{bad:?}");
    }
    let many = Task::ScanDirs {
        dirs: (0..accord_engine::tasks::MAX_SCAN_DIRS + 1)
            .map(|i| path(&format!("p/d{i:03}")))
            .collect(),
    };
    assert!(Task::decode(&many.encode()).is_err());
}

#[test]
fn paths_that_leave_the_tree_are_refused() {
    let scan = Task::ScanDir { dir: path("ab/cd") };
    assert!(Task::decode(&patched(&scan, b"ab/cd", b"../cd")).is_err());
    assert!(Task::decode(&patched(&scan, b"ab/cd", b"/b/cd")).is_err());
    assert!(Task::decode(&patched(&scan, b"ab/cd", b"ab\0cd")).is_err());
    let files = Task::Files {
        dir: path("dd"),
        items: vec![item("dd/a", Op::Meta)],
    };
    // An item outside the task's directory.
    assert!(Task::decode(&patched(&files, b"dd/a", b"ee/a")).is_err());
}

#[test]
fn ranges_and_temps_are_checked() {
    let big = item("d/big", Op::Write(Method::Whole));
    let range = |temp: &[u8], index, count| Task::Range {
        item: big.clone(),
        temp: temp.to_vec(),
        index,
        count,
    };
    let ok = b".accord-tmp-big.x1";
    assert!(Task::decode(&range(ok, 3, 3).encode()).is_err());
    assert!(Task::decode(&range(ok, 0, 1).encode()).is_err());
    assert!(Task::decode(&range(b"user-file", 0, 2).encode()).is_err());
    assert!(Task::decode(&range(b".accord-tmp-a/b", 0, 2).encode()).is_err());
    let delta = Task::Range {
        item: item("d/big", Op::Write(Method::Delta)),
        temp: ok.to_vec(),
        index: 0,
        count: 2,
    };
    assert!(Task::decode(&delta.encode()).is_err());
}

/// Found by `task_decode`: a worker name with control characters was
/// escaped on decoding, so the task no longer named its worker and grew
/// past the name's bound when encoded again. Such a name is refused.
#[test]
fn a_worker_name_is_taken_as_it_is_or_refused() {
    let verify = |by: &str| Task::Verify {
        paths: vec![path("d/a")],
        by: by.into(),
        handed_back: false,
    };
    let good = verify("host-1 (x)");
    assert_eq!(Task::decode(&good.encode()).unwrap(), good);
    for bad in ["", "a\u{6}b", "new\nline", "\u{9b}c1", &"w".repeat(257)] {
        assert!(Task::decode(&verify(bad).encode()).is_err(), "{bad:?}");
    }
    task_bodies::task(&[
        1, 6, 1, 7, 1, 124, 183, 223, 183, 231, 180, 172, 1, 32, 0, 59, 59, 59, 59, 59, 59, 59, 59,
        59, 59, 59, 59, 59, 59, 59, 59, 45, 59, 59, 59, 59, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 6, 6, 6, 26, 6, 2, 6, 6, 6, 6, 6,
        0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 59, 59, 59, 59, 59, 13, 0, 0, 0, 59, 59, 59, 59, 59,
        59, 59, 1, 6, 0, 6, 0, 223, 183, 223, 183, 231, 180, 172, 1, 32, 0, 0, 0, 0, 0, 0,
    ]);
}

#[test]
fn a_huge_count_in_few_bytes_is_refused_without_allocating() {
    // version, files, dir "d", then a count of MAX_BATCH items and nothing.
    let mut b = vec![TASK_VERSION, 1, 1, b'd'];
    let mut n = MAX_BATCH as u64;
    while n >= 0x80 {
        b.push((n as u8) | 0x80);
        n >>= 7;
    }
    b.push(n as u8);
    assert!(Task::decode(&b).is_err());
    let empty = vec![TASK_VERSION, 1, 1, b'd', 0];
    assert!(Task::decode(&empty).is_err(), "a files task without files");
}

#[test]
fn settings_round_trip_and_are_checked() {
    let cfg = MirrorConfig {
        excludes: vec!["*.tmp".into(), "build/".into()],
        ..MirrorConfig::default()
    };
    let spec = RunSpec::new(PathBuf::from("/src"), PathBuf::from("/dst"), &cfg);
    let bytes = spec.encode();
    assert_eq!(RunSpec::decode(&bytes).unwrap().encode(), bytes);
    task_bodies::spec(&bytes);
    for n in 0..bytes.len() {
        assert!(RunSpec::decode(&bytes[..n]).is_err());
    }
    let relative = RunSpec::new(PathBuf::from("rel"), PathBuf::from("/dst"), &cfg);
    assert!(RunSpec::decode(&relative.encode()).is_err());
    let mut tiny = spec.clone();
    tiny.range_size = 1;
    assert!(RunSpec::decode(&tiny.encode()).is_err());
}

proptest! {
    #[test]
    fn any_bytes_decode_to_a_task_or_an_error(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        task_bodies::task(&data);
        task_bodies::spec(&data);
    }

    #[test]
    fn flipped_bytes_of_real_tasks_never_panic(i in 0usize..8, at in any::<usize>(), byte in any::<u8>()) {
        let t = &every_kind()[i];
        let mut b = t.encode();
        let at = at % b.len();
        b[at] = byte;
        task_bodies::task(&b);
    }
}
