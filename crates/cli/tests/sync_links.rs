//! `accord sync` keeps hard-link groups groups (issue 12, "beyond
//! Unison"): a group made on one side is one file with the same names on
//! the other, an edit through one name crosses once and the other names
//! follow as links, names join and leave a group one by one, and a name in
//! conflict stays out of it. `--no-hard-links` copies every name as its own
//! file, as Unison does. The main scenarios run again with B over ssh and
//! from the daemon, where the bytes on the wire show what a group saves.

mod mirror_common;
mod remote_common;
mod sync_common;
use std::os::unix::fs::MetadataExt;
use sync_common::*;

/// `(inode, link count)` of a name.
fn inode(pair: &Pair, side: char, rel: &str) -> (u64, u64) {
    let meta = std::fs::symlink_metadata(pair.path(side, rel))
        .unwrap_or_else(|e| panic!("{side}:{rel}: {e}"));
    (meta.ino(), meta.nlink())
}

/// Do these names of `side` share one inode that has exactly `nlink` names?
fn assert_group(pair: &Pair, side: char, names: &[&str], nlink: u64) {
    let first = inode(pair, side, names[0]);
    for name in names {
        assert_eq!(
            inode(pair, side, name),
            (first.0, nlink),
            "{side}:{name} is not one of {names:?} with {nlink} links"
        );
    }
}

fn link(pair: &Pair, side: char, existing: &str, new: &str) {
    let target = pair.path(side, new);
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::hard_link(pair.path(side, existing), target).unwrap();
}

/// Write through an existing name (same inode: every name sees it).
fn write_in_place(pair: &Pair, side: char, rel: &str, contents: &[u8]) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(pair.path(side, rel))
        .unwrap();
    file.write_all(contents).unwrap();
}

fn pair_of(remote: Option<&RemoteB>) -> Pair {
    match remote {
        Some(remote) => Pair::with_remote_b(remote),
        None => Pair::new(),
    }
}

/// The report's changes as `(path, linked_to)`.
fn links_of(report: &serde_json::Value) -> Vec<(String, Option<String>)> {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let text = |key: &str| c[key].as_str().map(str::to_string);
            (text("path").unwrap(), text("linked_to"))
        })
        .collect()
}

const GROUP: [&str; 3] = ["d1/x", "d2/deeper/y", "z"];

/// A pair whose A holds a group of three names in three directories, and
/// `lone` beside it; synced. Returns the first run's report.
fn synced_group(pair: &Pair) -> serde_json::Value {
    pair.write('a', GROUP[0], "the group's contents");
    link(pair, 'a', GROUP[0], GROUP[1]);
    link(pair, 'a', GROUP[0], GROUP[2]);
    pair.write('a', "lone", "not in any group");
    let report = pair.sync_json(&[], 0);
    pair.assert_equal();
    report
}

fn a_new_group_arrives_as_a_group(remote: Option<&RemoteB>) {
    let pair = pair_of(remote);
    let report = synced_group(&pair);
    assert_eq!(report["linked"], 2, "{report}");
    assert_eq!(
        links_of(&report),
        [
            ("d1".into(), None),
            ("d1/x".into(), None),
            ("d2".into(), None),
            ("d2/deeper".into(), None),
            ("d2/deeper/y".into(), Some("d1/x".into())),
            ("lone".into(), None),
            ("z".into(), Some("d1/x".into())),
        ]
    );
    assert_group(&pair, 'b', &GROUP, 3);
    assert_eq!(inode(&pair, 'b', "lone").1, 1);
    let again = pair.sync_json(&[], 0);
    assert_eq!(again["propagated"], 0, "{again}");
}

#[test]
fn a_group_made_on_a_is_one_group_on_b() {
    a_new_group_arrives_as_a_group(None);
}

fn an_edit_through_one_name_crosses_once(remote: Option<&RemoteB>) {
    let pair = pair_of(remote);
    synced_group(&pair);
    let (old_a, _) = inode(&pair, 'a', "z");
    write_in_place(&pair, 'b', GROUP[1], b"edited on B through y");
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["propagated"], 3, "{report}");
    assert_eq!(report["linked"], 2, "{report}");
    for name in GROUP {
        assert_eq!(
            pair.read('a', name).as_deref(),
            Some("edited on B through y")
        );
    }
    assert_group(&pair, 'a', &GROUP, 3);
    assert_ne!(inode(&pair, 'a', "z").0, old_a, "A's names were replaced");
    assert_group(&pair, 'b', &GROUP, 3);
    pair.assert_equal();
    let again = pair.sync_json(&[], 0);
    assert_eq!(again["propagated"], 0, "{again}");
}

#[test]
fn an_edit_through_one_name_on_b_updates_as_group_on_a() {
    an_edit_through_one_name_crosses_once(None);
}

#[test]
fn a_name_joins_and_leaves_a_group() {
    let pair = Pair::new();
    synced_group(&pair);
    link(&pair, 'a', "z", "new/w");
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["linked"], 1, "{report}");
    assert!(
        links_of(&report).contains(&("new/w".into(), Some("d1/x".into()))),
        "w links to the group's first agreed name: {report}"
    );
    assert_group(&pair, 'b', &["d1/x", "d2/deeper/y", "z", "new/w"], 4);
    pair.assert_equal();
    assert_eq!(pair.sync_json(&[], 0)["propagated"], 0);

    std::fs::remove_file(pair.path('b', GROUP[1])).unwrap();
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["propagated"], 1, "{report}");
    assert!(!pair.exists('a', GROUP[1]));
    assert_group(&pair, 'a', &["d1/x", "z", "new/w"], 3);
    pair.assert_equal();
    assert_eq!(pair.sync_json(&[], 0)["propagated"], 0);
}

#[test]
fn a_name_split_off_a_group_goes_as_a_file_of_its_own() {
    let pair = Pair::new();
    synced_group(&pair);
    // A replaces z by a separate file: B's z leaves the group too.
    std::fs::remove_file(pair.path('a', "z")).unwrap();
    pair.write('a', "z", "z on its own now");
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["linked"], 0, "{report}");
    assert_eq!(pair.read('b', "z").as_deref(), Some("z on its own now"));
    assert_eq!(inode(&pair, 'b', "z").1, 1);
    assert_group(&pair, 'b', &GROUP[..2], 2);
    pair.assert_equal();
}

#[test]
fn a_group_edited_against_a_name_changed_apart_keeps_the_conflict() {
    let pair = Pair::new();
    synced_group(&pair);
    // B breaks y off its group with contents of its own; A edits its
    // group through x.
    std::fs::remove_file(pair.path('b', GROUP[1])).unwrap();
    pair.write('b', GROUP[1], "y made apart on B");
    write_in_place(&pair, 'a', GROUP[0], b"edited on A through x");
    let report = pair.sync_json(&[], 1);
    assert_eq!(conflict_paths(&report), [GROUP[1]]);
    assert_eq!(
        links_of(&report),
        [("d1/x".into(), None), ("z".into(), Some("d1/x".into()))]
    );
    // Both sides keep their y; the other names follow A's edit as a group.
    assert_eq!(
        pair.read('b', GROUP[1]).as_deref(),
        Some("y made apart on B")
    );
    assert_eq!(
        pair.read('a', GROUP[1]).as_deref(),
        Some("edited on A through x")
    );
    assert_group(&pair, 'a', &GROUP, 3);
    assert_group(&pair, 'b', &["d1/x", "z"], 2);
    assert_eq!(
        pair.read('b', "z").as_deref(),
        Some("edited on A through x")
    );
    // Nothing else to do but the same conflict.
    let again = pair.sync_json(&[], 1);
    assert_eq!(
        (again["propagated"].clone(), conflict_paths(&again)),
        (0.into(), vec![GROUP[1].to_string()])
    );
}

#[test]
fn a_rename_of_one_name_is_still_a_rename() {
    let pair = Pair::new();
    synced_group(&pair);
    let (b_inode, _) = inode(&pair, 'b', "z");
    std::fs::rename(pair.path('a', "z"), pair.path('a', "d1/z2")).unwrap();
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["renamed"], 1, "{report}");
    assert_eq!(report["linked"], 0, "{report}");
    assert!(!pair.exists('b', "z"));
    assert_group(&pair, 'b', &["d1/x", "d2/deeper/y", "d1/z2"], 3);
    assert_eq!(inode(&pair, 'b', "d1/z2").0, b_inode);
    pair.assert_equal();
}

#[test]
fn no_hard_links_copies_every_name_apart() {
    let pair = Pair::new();
    pair.write('a', GROUP[0], "the group's contents");
    link(&pair, 'a', GROUP[0], GROUP[1]);
    link(&pair, 'a', GROUP[0], GROUP[2]);
    let report = pair.sync_json(&["--no-hard-links"], 0);
    assert_eq!(report["linked"], 0, "{report}");
    let inodes: std::collections::BTreeSet<u64> =
        GROUP.iter().map(|name| inode(&pair, 'b', name).0).collect();
    assert_eq!(inodes.len(), 3, "three separate files on B");
    pair.assert_equal();
}

#[test]
fn a_link_whose_leader_changed_during_the_sync_is_not_made() {
    let pair = Pair::new();
    synced_group(&pair);
    link(&pair, 'a', "z", "w");
    let report = sync_with_change(&pair, 2, || {
        // B's leader is written meanwhile: linking w to it would give w
        // contents A never had there.
        write_in_place(&pair, 'b', GROUP[0], b"written on B during the sync");
    });
    assert_eq!(report["errors"][0]["path"], "w", "{report}");
    assert!(
        report["errors"][0]["error"]
            .as_str()
            .unwrap()
            .contains("changed during sync"),
        "{report}"
    );
    assert!(!pair.exists('b', "w"));
    assert_eq!(
        pair.read('b', "z").as_deref(),
        Some("written on B during the sync")
    );
    assert_eq!(pair.read('a', "w").as_deref(), Some("the group's contents"));
}

/// A 1 MiB file with four names on A, synced to the remote B with and
/// without groups: the bytes sent, as `(linked, separate)`.
fn bytes_for_a_group_of_four(remote: &RemoteB) -> (u64, u64) {
    let names = ["one", "d/two", "d/e/three", "four"];
    let mut sent = Vec::new();
    for args in [&[][..], &["--no-hard-links"][..]] {
        let pair = Pair::with_remote_b(remote);
        let path = pair.path('a', names[0]);
        std::fs::write(&path, noise(1 << 20, 7)).unwrap();
        for name in &names[1..] {
            link(&pair, 'a', names[0], name);
        }
        let report = pair.sync_json(args, 0);
        pair.assert_equal();
        let nlink = if args.is_empty() { 4 } else { 1 };
        for name in names {
            assert_eq!(inode(&pair, 'b', name).1, nlink, "{report}");
        }
        sent.push(report["bytes_sent"].as_u64().unwrap());
    }
    (sent[0], sent[1])
}

fn over_a_remote_b(remote: &RemoteB) {
    a_new_group_arrives_as_a_group(Some(remote));
    an_edit_through_one_name_crosses_once(Some(remote));
    let (linked, separate) = bytes_for_a_group_of_four(remote);
    eprintln!(
        "a 1 MiB file with 4 names to {}: {linked} bytes sent as a group, \
         {separate} with --no-hard-links",
        remote.prefix
    );
    assert!(linked < (1 << 20) + (64 << 10), "{linked}");
    assert!(separate > 4 << 20, "{separate}");
}

#[test]
fn with_b_over_ssh_groups_stay_groups() {
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    let base = tempfile::tempdir().unwrap();
    over_a_remote_b(&RemoteB::over_ssh(base.path(), &sshd.rsh()));
}

#[test]
fn with_b_from_the_daemon_groups_stay_groups() {
    let daemon = Daemon::start();
    over_a_remote_b(&daemon.remote_b());
}

#[test]
fn no_name_is_linked_to_a_leader_whose_copy_failed() {
    let pair = Pair::new();
    pair.write('a', "keep", "so that B is never empty");
    pair.sync_json(&[], 0);
    pair.write('a', GROUP[0], "the group's contents");
    link(&pair, 'a', GROUP[0], GROUP[1]);
    link(&pair, 'a', GROUP[0], GROUP[2]);
    let report = sync_with_change(&pair, 2, || {
        // B makes the leader's name meanwhile: its copy must not replace
        // it, and nothing may be linked to B's file.
        pair.write('b', GROUP[0], "made on B during the sync");
    });
    let failed: Vec<&str> = report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    // B's new `d1` (made with x) is left alone too: the run was to make it,
    // and found it made by someone else.
    assert_eq!(failed, ["d1", GROUP[0], GROUP[1], GROUP[2]], "{report}");
    assert_eq!(
        pair.read('b', GROUP[0]).as_deref(),
        Some("made on B during the sync")
    );
    assert!(!pair.exists('b', GROUP[1]) && !pair.exists('b', GROUP[2]));
    // The next run sees two different creations of x (a conflict) and
    // links the other two names on B to each other.
    let next = pair.sync_json(&[], 1);
    assert_eq!(conflict_paths(&next), [GROUP[0]]);
    assert_eq!(next["linked"], 1, "{next}");
    assert_group(&pair, 'b', &GROUP[1..], 2);
    assert_eq!(pair.read('b', "z").as_deref(), Some("the group's contents"));
}

#[test]
fn a_run_killed_between_a_leader_and_its_links_keeps_the_group_next_time() {
    let pair = Pair::new();
    synced_group(&pair);
    let edited = "edited through x, then the run is killed before its links";
    write_in_place(&pair, 'a', GROUP[0], edited.as_bytes());
    let (mut child, _pause) = start_paused(
        &pair,
        &[],
        "ACCORD_TEST_SYNC_PAUSE_LINKS",
        "pause-before-links",
    );
    child.kill().unwrap();
    child.wait().unwrap();
    // The leader is in place on B, the other names still hold the old
    // contents (each name original or final).
    assert_eq!(pair.read('b', GROUP[0]).as_deref(), Some(edited));
    for name in &GROUP[1..] {
        assert_eq!(
            pair.read('b', name).as_deref(),
            Some("the group's contents")
        );
    }
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["linked"], 2, "{report}");
    assert_group(&pair, 'b', &GROUP, 3);
    pair.assert_equal();
    assert_eq!(pair.sync_json(&[], 0)["propagated"], 0);
}
