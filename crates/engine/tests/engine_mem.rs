//! The engine driven through the `Replica` seam alone: between two in-memory
//! replicas, and between an in-memory and a local one. Every call the engine
//! makes on a replica is recorded, so the tests also check what it did not do.

mod mem_replica;

use accord_engine::{
    mirror_replicas, End, Error, LocalReplica, MirrorConfig, MirrorOptions, Progress, Refusal,
    Replica, Report, TransferOptions,
};
use accord_model::RelPath;
use mem_replica::{p, MemReplica};

fn cfg() -> MirrorConfig {
    MirrorConfig {
        jobs: 2,
        ..MirrorConfig::default()
    }
}

fn run(src: &dyn Replica, dst: &dyn Replica, cfg: &MirrorConfig) -> Report {
    mirror_replicas(src, Some(dst), &dst.describe(), cfg, &Progress::default())
}

/// Calls that change a replica.
fn mutations(calls: &[String]) -> Vec<String> {
    const READS: [&str; 3] = ["read ", "signature ", "list "];
    calls
        .iter()
        .filter(|c| !READS.iter().any(|r| c.starts_with(r)) && *c != "sync_all")
        .cloned()
        .collect()
}

fn every_kind(r: &MemReplica) {
    r.dir("d", 0o750)
        .dir("d/e", 0o700)
        .dir("empty", 0o755)
        .file("a", 0o644, b"alpha")
        .file("d/b", 0o600, b"bravo")
        .file("d/e/c", 0o640, b"charlie")
        .symlink("d/link", "../a")
        .fifo("d/pipe")
        .file("h1", 0o644, b"shared")
        .hard_link("d/e/h2", "h1")
        .hard_link("h3", "h1");
}

#[test]
fn every_entry_kind_between_two_memory_replicas() {
    let src = MemReplica::new(1);
    every_kind(&src);
    let dst = MemReplica::new(2);
    dst.file("extra", 0o644, b"x")
        .dir("gone", 0o755)
        .file("gone/f", 0o644, b"y")
        .file("a", 0o644, b"old alpha")
        .dir("d", 0o700)
        .file("d/link", 0o644, b"a file where a link goes");
    let r = run(
        &src,
        &dst,
        &MirrorConfig {
            plan: MirrorOptions {
                force: true,
                ..MirrorOptions::default()
            },
            ..cfg()
        },
    );
    assert!(r.ok(), "{:?} {:?}", r.fatal, r.errors);
    assert_eq!(dst.snapshot(), src.snapshot());
    assert_eq!(
        r.files_transferred, 4,
        "a, d/b, d/e/c, h1, and nothing else"
    );
    assert_eq!(r.links_created, 2);
    assert_eq!(r.others_created, 2, "the symlink and the fifo");
    assert_eq!(r.files_deleted, 3, "extra, gone/f, gone");

    // A second run lists each directory once and does nothing else.
    dst.calls.lock().unwrap().clear();
    let r = run(&src, &dst, &cfg());
    assert!(r.ok(), "{:?} {:?}", r.fatal, r.errors);
    let mut calls = dst.calls();
    calls.sort();
    assert_eq!(calls, ["list .", "list d", "list d/e", "list empty"]);
    assert!(r.changes.is_empty(), "{:?}", r.changes);
}

#[test]
fn deletion_guard_stops_before_any_call() {
    let src = MemReplica::new(1);
    src.file("keep", 0o644, b"k").file("new", 0o644, b"n");
    let dst = MemReplica::new(2);
    dst.file("keep", 0o644, b"k");
    for i in 0..10 {
        dst.file(&format!("x{i}"), 0o644, b"x");
    }
    let before = dst.snapshot();
    let r = run(&src, &dst, &cfg());
    assert!(
        matches!(
            r.refusal,
            Some(Refusal::TooManyDeletes {
                would_delete: 10,
                ..
            })
        ),
        "{:?}",
        r.refusal
    );
    assert_eq!(dst.snapshot(), before);
    assert_eq!(mutations(&dst.calls()), Vec::<String>::new());

    // An empty source never deletes everything without --force.
    let empty = MemReplica::new(3);
    let r = run(&empty, &dst, &cfg());
    assert!(
        matches!(r.refusal, Some(Refusal::SourceEmpty { .. })),
        "{:?}",
        r.refusal
    );
    assert_eq!(dst.snapshot(), before);
}

#[test]
fn a_target_changed_after_planning_is_left_alone() {
    let src = MemReplica::new(1);
    src.file("a", 0o644, b"new a!").file("b", 0o644, b"new b!");
    let dst = MemReplica::new(2);
    dst.file("a", 0o644, b"old a")
        .file("b", 0o644, b"old b")
        .file("extra", 0o644, b"e");
    // A user saves `a` just before the engine commits it, and `extra` just
    // before the engine deletes it.
    *dst.hook.lock().unwrap() = Some(Box::new(|what, path, tree| {
        if (what == "commit" && *path == p("a")) || (what == "delete" && *path == p("extra")) {
            tree.edit(path, b"the user's version");
        }
    }));
    let r = run(
        &src,
        &dst,
        &MirrorConfig {
            plan: MirrorOptions {
                force: true,
                ..MirrorOptions::default()
            },
            ..cfg()
        },
    );
    let failed: Vec<(&RelPath, bool)> = r
        .errors
        .iter()
        .map(|f| (&f.path, matches!(f.error, Error::Changed(End::Written))))
        .collect();
    assert_eq!(
        failed,
        vec![(&p("a"), true), (&p("extra"), true)],
        "{:?}",
        r.errors
    );
    let snap = dst.snapshot();
    assert!(snap["a"].contains("the user's version"), "{snap:?}");
    assert!(snap["extra"].contains("the user's version"), "{snap:?}");
    assert!(snap["b"].contains("new b"), "{snap:?}");
    // No temp file is left behind.
    assert!(dst
        .tree
        .lock()
        .unwrap()
        .names
        .keys()
        .all(|k| !k.file_name().starts_with(b".accord-tmp-")));
}

#[test]
fn a_source_changed_while_read_is_not_committed() {
    let src = MemReplica::new(1);
    src.file("a", 0o644, b"version 1");
    let dst = MemReplica::new(2);
    *src.hook.lock().unwrap() = Some(Box::new(|what, path, tree| {
        if what == "read" && *path == p("a") {
            tree.edit(path, b"version 2, longer");
        }
    }));
    let r = run(&src, &dst, &cfg());
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert!(matches!(r.errors[0].error, Error::Changed(End::Read)));
    assert!(!dst.snapshot().contains_key("a"));
}

fn big(seed: u8, len: usize) -> Vec<u8> {
    let mut x = seed as u32 | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

#[test]
fn the_plan_chooses_delta_or_in_place_and_the_engine_follows() {
    let old = big(7, 300_000);
    let mut new = old.clone();
    new[1000..1100].copy_from_slice(&[0u8; 100]);
    new.extend_from_slice(b"appended");
    for inplace in [false, true] {
        let src = MemReplica::new(1);
        src.file("big", 0o644, &new)
            .file("small", 0o644, b"tiny new");
        let dst = MemReplica::new(2);
        dst.file("big", 0o644, &old).file("small", 0o644, b"tiny");
        let cfg = MirrorConfig {
            plan: MirrorOptions {
                transfer: TransferOptions {
                    inplace,
                    ..TransferOptions::default()
                },
                ..MirrorOptions::default()
            },
            ..cfg()
        };
        let r = run(&src, &dst, &cfg);
        assert!(r.ok(), "{:?}", r.errors);
        assert_eq!(dst.snapshot(), src.snapshot());
        let calls = dst.calls();
        let want = if inplace {
            "patch-in-place big"
        } else {
            "receive-delta big"
        };
        assert!(calls.contains(&"signature big".to_string()), "{calls:?}");
        assert!(calls.contains(&want.to_string()), "{calls:?}");
        // In place applies to every file with an old version; a delta only
        // to files big enough to be worth one.
        let small = if inplace {
            "patch-in-place small"
        } else {
            "receive-whole small"
        };
        assert!(calls.contains(&small.to_string()), "{calls:?}");
        assert!(
            r.literal_bytes < 10_000,
            "{} literal bytes",
            r.literal_bytes
        );
    }
}

#[test]
fn dry_run_plans_and_changes_nothing() {
    let src = MemReplica::new(1);
    every_kind(&src);
    let dst = MemReplica::new(2);
    dst.file("extra", 0o644, b"x").file("a", 0o644, b"old");
    let before = dst.snapshot();
    let cfg = MirrorConfig {
        dry_run: true,
        plan: MirrorOptions {
            force: true,
            ..MirrorOptions::default()
        },
        ..cfg()
    };
    let r = run(&src, &dst, &cfg);
    let plan = r.plan.as_ref().unwrap();
    assert!(!plan.is_empty());
    assert_eq!(dst.snapshot(), before);
    assert_eq!(mutations(&dst.calls()), Vec::<String>::new());
    // It reads no contents, on either side.
    let src_calls = src.calls();
    assert!(
        !src_calls.iter().any(|c| c.starts_with("read ")),
        "{src_calls:?}"
    );
    // Its report says what the run would do.
    assert!(r.ok(), "{:?}", r.errors);
    assert_eq!(r.files_transferred as usize, plan.summary.files_to_write);
    assert_eq!(r.files_deleted, 1);
    let updated_a = r
        .changes
        .iter()
        .any(|(c, p)| c.name() == "updated" && p.display() == "a");
    assert!(updated_a, "{:?}", r.changes);
}

fn local_tree(root: &std::path::Path) {
    std::fs::create_dir_all(root.join("d/e")).unwrap();
    std::fs::write(root.join("a"), b"alpha").unwrap();
    std::fs::write(root.join("d/b"), b"bravo").unwrap();
    std::fs::write(root.join("d/e/c"), b"charlie").unwrap();
    std::os::unix::fs::symlink("../a", root.join("d/link")).unwrap();
    std::fs::write(root.join("h1"), b"shared").unwrap();
    std::fs::hard_link(root.join("h1"), root.join("d/e/h2")).unwrap();
}

fn local_cfg() -> MirrorConfig {
    let mut c = cfg();
    // Owner kept only where the test may chown.
    c.plan.owner = unsafe { libc::geteuid() } == 0;
    c
}

#[test]
fn memory_replica_into_a_local_directory_and_back() {
    let t = tempfile::tempdir().unwrap();
    let mem = MemReplica::new(1);
    every_kind(&mem);
    let dst = LocalReplica::create(&t.path().join("dst")).unwrap();
    let r = run(&mem, &dst, &local_cfg());
    assert!(r.ok(), "{:?} {:?}", r.fatal, r.errors);
    let root = t.path().join("dst");
    assert_eq!(std::fs::read(root.join("d/e/c")).unwrap(), b"charlie");
    assert_eq!(
        std::fs::read_link(root.join("d/link")).unwrap().to_str(),
        Some("../a")
    );
    use std::os::unix::fs::MetadataExt;
    let (m1, m2) = (
        std::fs::metadata(root.join("h1")).unwrap(),
        std::fs::metadata(root.join("d/e/h2")).unwrap(),
    );
    assert_eq!(m1.ino(), m2.ino(), "the hard-link group stays a group");
    assert_eq!(m1.mode() & 0o7777, 0o644);
    assert_eq!(
        std::fs::metadata(root.join("d")).unwrap().mode() & 0o7777,
        0o750
    );

    // And from the local directory into a fresh memory replica.
    let back = MemReplica::new(3);
    let r = run(&dst, &back, &local_cfg());
    assert!(r.ok(), "{:?} {:?}", r.fatal, r.errors);
    let (a, b) = (mem.snapshot(), back.snapshot());
    // Same paths, kinds, modes and contents (ownership and fifos aside).
    for (k, v) in &a {
        if k == "d/pipe" {
            continue;
        }
        assert_eq!(b.get(k), Some(v), "{k}");
    }
}

#[test]
fn local_directory_into_memory_uses_the_generic_path() {
    let t = tempfile::tempdir().unwrap();
    local_tree(&t.path().join("src"));
    let src = LocalReplica::open(&t.path().join("src")).unwrap();
    let dst = MemReplica::new(9);
    dst.file("a", 0o644, b"old");
    let r = run(&src, &dst, &local_cfg());
    assert!(r.ok(), "{:?} {:?}", r.fatal, r.errors);
    let snap = dst.snapshot();
    assert!(snap["a"].contains("alpha"), "{snap:?}");
    assert!(
        snap["d/e/h2"].ends_with("= d/e/h2") || snap["h1"].contains("= d/e/h2"),
        "{snap:?}"
    );
    assert!(dst.calls().contains(&"receive-whole a".to_string()));
}

#[test]
fn no_hard_link_is_made_to_a_first_file_that_was_not_updated() {
    let src = MemReplica::new(1);
    src.file("a", 0o644, b"new shared contents")
        .hard_link("b", "a");
    let dst = MemReplica::new(2);
    dst.file("a", 0o644, b"old a").file("b", 0o644, b"old b");
    // The user saves `a` just before the engine commits its new version.
    *dst.hook.lock().unwrap() = Some(Box::new(|what, path, tree| {
        if what == "commit" && *path == p("a") {
            tree.edit(path, b"the user's a");
        }
    }));
    let r = run(&src, &dst, &cfg());
    let errors: Vec<String> = r.errors.iter().map(|f| f.to_string()).collect();
    assert_eq!(errors.len(), 2, "{errors:?}");
    assert!(
        errors[0].starts_with("a: the destination changed"),
        "{errors:?}"
    );
    assert!(errors[1].starts_with("b: not linked"), "{errors:?}");
    let snap = dst.snapshot();
    assert!(snap["a"].contains("the user's a"), "{snap:?}");
    assert!(
        snap["b"].contains("old b"),
        "b keeps its own old contents: {snap:?}"
    );
}

#[test]
fn a_subtree_is_scanned_in_path_order_in_bounded_batches() {
    use accord_fsys::{IgnoreRules, ScanOptions, XattrFilter};
    let t = tempfile::tempdir().unwrap();
    local_tree(&t.path().join("src"));
    std::fs::write(t.path().join("src/d/z"), b"z").unwrap();
    let local = LocalReplica::open(&t.path().join("src")).unwrap();
    let mem = MemReplica::new(1);
    every_kind(&mem);
    let rules = IgnoreRules::new(&[]).unwrap();
    let opts = ScanOptions::plain(XattrFilter::NONE, true);
    for replica in [&local as &dyn Replica, &mem] {
        let whole: Vec<RelPath> = {
            let mut v = Vec::new();
            replica.scan_batches(&RelPath::root(), &rules, &opts, 1000, &mut |b| {
                v.extend(b.into_iter().map(|e| e.path))
            });
            v
        };
        let mut sorted = whole.clone();
        sorted.sort();
        assert_eq!(whole, sorted, "path order");
        assert!(whole.len() > 8, "{whole:?}");
        for batch in [1, 2, 3] {
            let mut sizes = Vec::new();
            let mut paths = Vec::new();
            replica.scan_batches(&RelPath::root(), &rules, &opts, batch, &mut |b| {
                sizes.push(b.len());
                paths.extend(b.into_iter().map(|e| e.path));
            });
            assert_eq!(paths, whole);
            assert!(sizes.iter().all(|n| *n <= batch && *n > 0), "{sizes:?}");
        }
        // A subtree alone.
        let mut sub = Vec::new();
        replica.scan_batches(&p("d"), &rules, &opts, 4, &mut |b| {
            sub.extend(b.into_iter().map(|e| e.path))
        });
        let want: Vec<RelPath> = whole
            .iter()
            .filter(|x| x.starts_with(&p("d")))
            .cloned()
            .collect();
        assert_eq!(sub, want);
    }
}

/// Issue 10, defect 7: a delta that does not check out while the source
/// changed meanwhile is that change ("the source changed"), not "wrong basis
/// file or damaged delta". Issue 11: with no side changed (a false match of
/// short strong sums looks the same), the file is sent again whole and ends
/// right.
#[test]
fn a_failed_delta_blames_the_side_that_changed() {
    let old = big(5, 300_000);
    let mut new = old.clone();
    new[200..300].copy_from_slice(&[1u8; 100]);
    new.extend_from_slice(b"a new tail");
    for source_moves in [true, false] {
        let src = std::sync::Arc::new(MemReplica::new(1));
        src.file("big", 0o644, &new);
        let dst = MemReplica::new(2);
        dst.file("big", 0o644, &old);
        let src2 = src.clone();
        // Just before the delta is applied: the basis is damaged without a
        // trace in its size or mtime, and (in the first round) the source is
        // saved again.
        *dst.hook.lock().unwrap() = Some(Box::new(move |what, path, tree| {
            if what == "receive-delta" {
                let ino = tree.names[path];
                tree.inodes.get_mut(&ino).unwrap().data[250_000] ^= 0xff;
                if source_moves {
                    src2.tree.lock().unwrap().edit(path, b"saved again");
                }
            }
        }));
        let r = run(&*src, &dst, &cfg());
        if !source_moves {
            assert!(r.errors.is_empty(), "{:?}", r.errors);
            let calls = dst.calls();
            let delta = calls.iter().position(|c| c.starts_with("receive-delta"));
            let whole = calls.iter().position(|c| c.starts_with("receive-whole"));
            assert!(delta.is_some() && whole > delta, "{calls:?}");
            let t = dst.tree.lock().unwrap();
            assert!(t.inodes[&t.names[&p("big")]].data == new, "contents");
            continue;
        }
        assert_eq!(r.errors.len(), 1, "{:?} {:?}", r.errors, dst.calls());
        let msg = r.errors[0].error.to_string();
        if source_moves {
            assert!(
                matches!(r.errors[0].error, Error::Changed(End::Read)),
                "{msg}"
            );
            assert!(!msg.contains("wrong basis"), "{msg}");
        } else {
            assert!(matches!(r.errors[0].error, Error::Delta { .. }), "{msg}");
        }
    }
}

// ---------------------------------------------------------------------
// A destination that names its temps at once (as a replica across a wire
// does): commits travel with their receives, before any reply.
// ---------------------------------------------------------------------

fn ordered_pair() -> (MemReplica, MemReplica) {
    let src = MemReplica::new(1);
    every_kind(&src);
    src.file("d/e/f", 0o644, b"foxtrot");
    let dst = MemReplica::new(2);
    dst.file("a", 0o644, b"old alpha")
        .dir("d", 0o750)
        .file("d/b", 0o600, b"old bravo");
    dst.faults.lock().unwrap().ordered = true;
    (src, dst)
}

fn temps_left(r: &MemReplica) -> Vec<String> {
    r.snapshot()
        .into_keys()
        .filter(|k| k.rsplit('/').next().unwrap().starts_with(".accord-tmp-"))
        .collect()
}

#[test]
fn commits_sent_with_their_receives_give_the_same_tree() {
    let (src, dst) = ordered_pair();
    let r = run(&src, &dst, &cfg());
    assert!(r.ok(), "{:?} {:?}", r.fatal, r.errors);
    assert_eq!(dst.snapshot(), src.snapshot());
    assert_eq!(r.files_transferred, 5);
    assert!(temps_left(&dst).is_empty());
    // The batch's flush comes after its temps and before their commits.
    let calls = dst.calls();
    let flush = calls.iter().position(|c| c == "sync_all").unwrap();
    let first_commit = calls.iter().position(|c| c.starts_with("commit")).unwrap();
    let last_receive = calls
        .iter()
        .rposition(|c| c.starts_with("receive"))
        .unwrap();
    assert!(last_receive < flush && flush < first_commit, "{calls:?}");
    let r = run(&src, &dst, &cfg());
    assert!(r.ok() && r.changes.is_empty(), "{:?}", r.changes);
}

#[test]
fn a_failed_receive_fails_its_file_alone_when_commits_go_early() {
    let (src, dst) = ordered_pair();
    dst.faults.lock().unwrap().receive = Some((p("d/b"), libc::EIO));
    let r = run(&src, &dst, &cfg());
    assert!(r.fatal.is_none(), "{:?}", r.fatal);
    let failed: Vec<_> = r.errors.iter().map(|f| f.path.display()).collect();
    assert_eq!(failed, ["d/b"], "{:?}", r.errors);
    assert!(
        r.errors[0].error.to_string().contains("Input/output"),
        "the receive's error, not the refused commit's: {}",
        r.errors[0].error
    );
    let mut want = src.snapshot();
    let got = dst.snapshot();
    want.insert("d/b".into(), got["d/b"].clone());
    assert!(got["d/b"].contains("old bravo"));
    assert_eq!(got, want);
    assert!(temps_left(&dst).is_empty());
}

#[test]
fn a_failed_flush_lets_no_commit_through() {
    let (src, dst) = ordered_pair();
    dst.faults.lock().unwrap().flush = Some(libc::EIO);
    let r = run(&src, &dst, &cfg());
    assert!(!r.errors.is_empty());
    let snap = dst.snapshot();
    assert!(snap["a"].contains("old alpha"), "{snap:?}");
    assert!(snap["d/b"].contains("old bravo"), "{snap:?}");
    assert!(!snap.contains_key("d/e/f"), "{snap:?}");
    assert!(temps_left(&dst).is_empty(), "{snap:?}");
    // The next run completes it.
    let r = run(&src, &dst, &cfg());
    assert!(r.ok(), "{:?} {:?}", r.fatal, r.errors);
    assert_eq!(dst.snapshot(), src.snapshot());
}

#[test]
fn a_full_disk_at_a_receive_is_tried_again_after_the_early_commits() {
    // No hard links: the directories' properties are then sent with the
    // files' commits, and must be sent again after the retried file.
    let src = MemReplica::new(1);
    src.dir("d", 0o750)
        .dir("d/e", 0o700)
        .file("a", 0o644, b"alpha")
        .file("d/b", 0o600, b"bravo")
        .file("d/e/f", 0o644, b"foxtrot")
        .symlink("d/link", "../a");
    let dst = MemReplica::new(2);
    dst.faults.lock().unwrap().ordered = true;
    dst.faults.lock().unwrap().receive = Some((p("d/e/f"), libc::ENOSPC));
    let r = run(&src, &dst, &cfg());
    assert!(r.ok(), "{:?} {:?}", r.fatal, r.errors);
    assert_eq!(dst.snapshot(), src.snapshot());
    assert!(temps_left(&dst).is_empty());
    // The directories' properties were sent with the commits, and again
    // after the retried file.
    let calls = dst.calls();
    let retried = calls.iter().rposition(|c| c == "commit d/e/f").unwrap();
    for part in [&calls[..retried], &calls[retried..]] {
        assert!(part.iter().any(|c| c == "set-dir-props d/e"), "{calls:#?}");
    }
}
