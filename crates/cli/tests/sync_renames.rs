//! `accord sync` propagates renames and moves as renames (issue 12,
//! "beyond Unison"): the other side's own entry is moved, so its inode is
//! kept and no contents cross; what a rename must never do is lose a
//! change, so renames against edits, against other renames and against
//! new entries at the target fall back to copies, deletions and conflicts.
//! The key scenarios run again with B over ssh and from the daemon.

mod mirror_common;
mod remote_common;
mod sync_common;
use std::os::unix::fs::MetadataExt;
use sync_common::*;

fn ino(pair: &Pair, side: char, rel: &str) -> u64 {
    std::fs::symlink_metadata(pair.path(side, rel))
        .unwrap_or_else(|e| panic!("{side}:{rel}: {e}"))
        .ino()
}

fn mv(pair: &Pair, side: char, from: &str, to: &str) {
    let target = pair.path(side, to);
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::rename(pair.path(side, from), target).unwrap();
}

/// The report's changes as `(action, path, from)`.
fn changes(report: &serde_json::Value) -> Vec<(String, String, Option<String>)> {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let text = |key: &str| c[key].as_str().map(str::to_string);
            (text("action").unwrap(), text("path").unwrap(), text("from"))
        })
        .collect()
}

fn pair_of(remote: Option<&RemoteB>) -> Pair {
    match remote {
        Some(remote) => Pair::with_remote_b(remote),
        None => Pair::new(),
    }
}

/// A synced pair holding `f`, `dir/x` and an empty directory `other`.
fn synced(remote: Option<&RemoteB>) -> Pair {
    let pair = pair_of(remote);
    pair.write('a', "f", "the contents of f");
    pair.write('a', "dir/x", "the contents of x");
    std::fs::create_dir(pair.path('a', "other")).unwrap();
    pair.sync_json(&[], 0);
    pair.assert_equal();
    pair
}

/// A tree of `files` files of 4 KiB in three levels, under `top` on A.
fn write_tree(pair: &Pair, top: &str, files: usize) {
    for i in 0..files {
        let rel = format!("{top}/d{}/e{}/file{i}", i % 3, i % 7);
        let contents = format!("{i:04}").repeat(1024);
        pair.write('a', &rel, &contents);
    }
}

fn a_file_rename_keeps_the_other_sides_file(remote: Option<&RemoteB>) {
    let pair = synced(remote);
    let before = ino(&pair, 'b', "f");
    mv(&pair, 'a', "f", "g");
    let report = pair.sync_json(&[], 0);
    assert_eq!(
        changes(&report),
        [("renamed on B".into(), "g".into(), Some("f".into()))]
    );
    assert_eq!(
        (report["propagated"].clone(), report["renamed"].clone()),
        (1.into(), 1.into())
    );
    assert!(!pair.exists('b', "f"));
    assert_eq!(
        ino(&pair, 'b', "g"),
        before,
        "B's file was renamed, not copied"
    );
    pair.assert_equal();
    let again = pair.sync_json(&[], 0);
    assert_eq!(again["propagated"], 0, "{again}");
}

#[test]
fn a_file_rename_is_propagated_as_a_rename() {
    a_file_rename_keeps_the_other_sides_file(None);
}

#[test]
fn moves_across_directories_new_or_not_are_renames() {
    let pair = synced(None);
    let (x, f) = (ino(&pair, 'a', "dir/x"), ino(&pair, 'a', "f"));
    // From B to A this time: into an existing directory and a new one.
    mv(&pair, 'b', "dir/x", "other/x");
    mv(&pair, 'b', "f", "new/deeper/f");
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["renamed"], 2, "{report}");
    assert_eq!(ino(&pair, 'a', "other/x"), x);
    assert_eq!(ino(&pair, 'a', "new/deeper/f"), f);
    assert!(!pair.exists('a', "f") && !pair.exists('a', "dir/x"));
    pair.assert_equal();
}

fn a_directory_rename_moves_the_tree_whole(remote: Option<&RemoteB>) {
    let pair = synced(remote);
    write_tree(&pair, "tree", 120);
    pair.sync_json(&[], 0);
    let deep = "d1/e3/file10";
    let before = ino(&pair, 'b', &format!("tree/{deep}"));
    mv(&pair, 'a', "tree", "other/moved");
    let report = pair.sync_json(&[], 0);
    assert_eq!(
        changes(&report),
        [(
            "renamed on B".into(),
            "other/moved".into(),
            Some("tree".into())
        )]
    );
    assert_eq!(ino(&pair, 'b', &format!("other/moved/{deep}")), before);
    if remote.is_some() {
        // 480 KiB of contents did not cross.
        let sent = report["bytes_sent"].as_u64().unwrap();
        let received = report["bytes_received"].as_u64().unwrap();
        eprintln!("a 120-file tree of 480 KiB renamed: {sent} bytes sent, {received} received");
        assert!(sent < 64 << 10, "{sent} bytes sent: {report}");
    }
    pair.assert_equal();
    assert_eq!(pair.sync_json(&[], 0)["propagated"], 0);
}

#[test]
fn a_directory_rename_moves_a_big_subtree_without_copying() {
    a_directory_rename_moves_the_tree_whole(None);
}

fn a_rename_against_an_edit_loses_nothing(remote: Option<&RemoteB>) {
    let pair = synced(remote);
    mv(&pair, 'a', "f", "g");
    pair.write('b', "f", "edited on B while A renamed it");
    let report = pair.sync_json(&[], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    assert_eq!(report["renamed"], 0);
    assert_eq!(
        pair.read('b', "f").as_deref(),
        Some("edited on B while A renamed it")
    );
    assert_eq!(pair.read('b', "g").as_deref(), Some("the contents of f"));
    assert_eq!(pair.read('a', "g").as_deref(), Some("the contents of f"));
}

#[test]
fn a_rename_on_one_side_and_an_edit_on_the_other_keep_the_edit() {
    a_rename_against_an_edit_loses_nothing(None);
}

#[test]
fn a_file_moved_out_of_a_directory_then_deleted_is_renamed_first() {
    let pair = synced(None);
    let before = ino(&pair, 'b', "dir/x");
    // The directory B deletes is emptied by the rename, which comes first.
    mv(&pair, 'a', "dir/x", "x");
    std::fs::remove_dir(pair.path('a', "dir")).unwrap();
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["renamed"], 1, "{report}");
    assert_eq!(ino(&pair, 'b', "x"), before);
    assert!(!pair.exists('b', "dir"));
    pair.assert_equal();
}

#[test]
fn a_tree_moved_into_new_directories_is_one_rename() {
    let pair = synced(None);
    write_tree(&pair, "tree", 20);
    pair.sync_json(&[], 0);
    let before = ino(&pair, 'b', "tree");
    mv(&pair, 'a', "tree", "new/deeper/tree");
    let report = pair.sync_json(&[], 0);
    let renamed = (
        "renamed on B".into(),
        "new/deeper/tree".into(),
        Some("tree".into()),
    );
    assert!(changes(&report).contains(&renamed), "{report}");
    assert_eq!(report["renamed"], 1);
    assert_eq!(ino(&pair, 'b', "new/deeper/tree"), before);
    pair.assert_equal();
}

#[test]
fn renames_to_different_names_on_both_sides_keep_both() {
    let pair = synced(None);
    mv(&pair, 'a', "f", "on_a");
    mv(&pair, 'b', "f", "on_b");
    pair.sync_json(&[], 0);
    for side in ['a', 'b'] {
        for name in ["on_a", "on_b"] {
            assert_eq!(pair.read(side, name).as_deref(), Some("the contents of f"));
        }
        assert!(!pair.exists(side, "f"));
    }
    pair.assert_equal();
}

#[test]
fn a_rename_onto_a_name_the_other_side_created_is_a_conflict() {
    let pair = synced(None);
    mv(&pair, 'a', "f", "g");
    pair.write('b', "g", "made on B");
    let report = pair.sync_json(&[], 1);
    assert_eq!(conflict_paths(&report), ["g"]);
    assert_eq!(report["renamed"], 0);
    assert_eq!(pair.read('a', "g").as_deref(), Some("the contents of f"));
    assert_eq!(pair.read('b', "g").as_deref(), Some("made on B"));
}

#[test]
fn a_renamed_tree_does_not_trip_the_deletion_guard() {
    let pair = synced(None);
    write_tree(&pair, "tree", 30);
    pair.sync_json(&[], 0);
    mv(&pair, 'a', "tree", "renamed");
    // Counted as deletions, the tree's entries are most of B's: refused.
    let refused = pair.sync_json(&["--no-renames"], 3);
    assert!(refused["refused"]
        .as_str()
        .unwrap()
        .contains("--max-delete"));
    assert!(pair.exists('b', "tree") && !pair.exists('b', "renamed"));
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["renamed"], 1, "{report}");
    pair.assert_equal();
}

#[test]
fn a_rename_whose_source_changed_during_the_sync_is_left_alone() {
    let pair = synced(None);
    mv(&pair, 'a', "f", "g");
    let report = sync_with_change(&pair, 2, || {
        pair.write('b', "f", "written on B during the sync");
    });
    assert_eq!(report["errors"][0]["path"], "g", "{report}");
    assert_eq!(
        pair.read('b', "f").as_deref(),
        Some("written on B during the sync")
    );
    assert!(!pair.exists('b', "g"));
    // The next run sees B's edit against A's deletion: a conflict, and A's
    // file at its new name reaches B.
    let next = pair.sync_json(&[], 1);
    assert_eq!(conflict_paths(&next), ["f"]);
    assert_eq!(pair.read('b', "g").as_deref(), Some("the contents of f"));
}

#[test]
fn a_rename_whose_target_appeared_during_the_sync_replaces_nothing() {
    let pair = synced(None);
    mv(&pair, 'a', "f", "g");
    let report = sync_with_change(&pair, 2, || {
        pair.write('b', "g", "made on B during the sync");
    });
    assert_eq!(report["errors"][0]["path"], "g", "{report}");
    assert!(report["errors"][0]["error"]
        .as_str()
        .unwrap()
        .contains("changed during sync"));
    assert_eq!(
        pair.read('b', "g").as_deref(),
        Some("made on B during the sync")
    );
    assert_eq!(pair.read('b', "f").as_deref(), Some("the contents of f"));
}

#[test]
fn with_b_over_ssh_renames_are_renames() {
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    let base = tempfile::tempdir().unwrap();
    let remote = RemoteB::over_ssh(base.path(), &sshd.rsh());
    a_file_rename_keeps_the_other_sides_file(Some(&remote));
    a_directory_rename_moves_the_tree_whole(Some(&remote));
    a_rename_against_an_edit_loses_nothing(Some(&remote));
}

#[test]
fn with_b_from_the_daemon_renames_are_renames() {
    let daemon = Daemon::start();
    let remote = daemon.remote_b();
    a_file_rename_keeps_the_other_sides_file(Some(&remote));
    a_directory_rename_moves_the_tree_whole(Some(&remote));
    a_rename_against_an_edit_loses_nothing(Some(&remote));
}
