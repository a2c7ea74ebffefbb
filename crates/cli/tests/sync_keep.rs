//! `accord sync --keep-both` and `--backup` / `--max-backups` (issue 12):
//! a conflict between two changed files keeps both versions on both sides
//! (`NAME.conflict-HOST-DATE`), and every version a sync overwrites or
//! deletes is kept in `.accord-backup/` on its side, which is never synced.
//! The key scenarios run again with B over ssh and from the daemon.

mod mirror_common;
mod remote_common;
mod sync_common;
use std::os::unix::fs::MetadataExt;
use sync_common::*;

/// The mtimes given to the two versions of a conflict: B's is the newer.
const A_TIME: i64 = 1_000_000_000; // 2001-09-09 01:46:40 UTC
const B_TIME: i64 = 1_100_000_000; // 2004-11-09 11:33:20 UTC

fn host() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    name.trim().to_string()
}

/// The name the losing version of `name` is kept under, its mtime `secs`.
fn conflict_name(name: &str, secs: i64) -> String {
    let date = match secs {
        A_TIME => "20010909-014640",
        B_TIME => "20041109-113320",
        _ => panic!("no date for {secs}"),
    };
    format!("{name}.conflict-{}-{date}", host())
}

fn ino(pair: &Pair, side: char, rel: &str) -> u64 {
    std::fs::symlink_metadata(pair.path(side, rel))
        .unwrap_or_else(|e| panic!("{side}:{rel}: {e}"))
        .ino()
}

fn pair_of(remote: Option<&RemoteB>) -> Pair {
    match remote {
        Some(remote) => Pair::with_remote_b(remote),
        None => Pair::new(),
    }
}

/// A synced pair holding `f` and `dir/x`.
fn synced(remote: Option<&RemoteB>) -> Pair {
    let pair = pair_of(remote);
    pair.write('a', "f", "the first f");
    pair.write('a', "dir/x", "the first x");
    pair.sync_json(&[], 0);
    pair.assert_equal();
    pair
}

/// `f` edited on both sides, B's edit the newer.
fn edit_both(pair: &Pair, rel: &str) {
    pair.write('a', rel, "edited on A");
    pair.write('b', rel, "edited on B, later");
    set_mtime(&pair.path('a', rel), A_TIME);
    set_mtime(&pair.path('b', rel), B_TIME);
}

/// The names in a root's directory `rel` (our hidden ones included).
fn names(pair: &Pair, side: char, rel: &str) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(pair.path(side, rel))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn assert_no_op(pair: &Pair, args: &[&str]) {
    let again = pair.sync_json(args, 0);
    assert_eq!(again["propagated"], 0, "{again}");
    assert_eq!(again["conflicts"].as_array().unwrap().len(), 0, "{again}");
}

/// `sync_with_change` with options: a run with `--json` and `args`
/// paused after its plan while `meanwhile` changes a file.
fn paused_sync(
    pair: &Pair,
    args: &[&str],
    code: i32,
    meanwhile: impl FnOnce(),
) -> serde_json::Value {
    sync_with_change_args(pair, args, code, meanwhile)
}

// ---- --keep-both ----------------------------------------------------------

fn a_conflict_keeps_both_versions(remote: Option<&RemoteB>) {
    let pair = synced(remote);
    edit_both(&pair, "f");
    let loser_inode = ino(&pair, 'a', "f");
    let report = pair.sync_json(&["--keep-both"], 0);
    let kept = conflict_name("f", A_TIME);
    assert_eq!(report["kept_both"], 1, "{report}");
    let change = &report["changes"][0];
    assert_eq!(change["path"], "f", "{report}");
    assert_eq!(change["kept_as"], kept.as_str(), "{report}");
    assert_eq!(change["action"], "kept both, B -> A", "{report}");
    for side in ['a', 'b'] {
        assert_eq!(pair.read(side, "f").as_deref(), Some("edited on B, later"));
        assert_eq!(pair.read(side, &kept).as_deref(), Some("edited on A"));
    }
    assert_eq!(
        ino(&pair, 'a', &kept),
        loser_inode,
        "A's version was linked under the conflict name, not copied"
    );
    pair.assert_equal();
    assert_no_op(&pair, &["--keep-both"]);
    assert_no_op(&pair, &[]);
}

#[test]
fn keep_both_keeps_the_loser_beside_the_newer_version() {
    a_conflict_keeps_both_versions(None);
}

#[test]
fn keep_both_without_the_option_is_still_a_conflict() {
    let pair = synced(None);
    edit_both(&pair, "f");
    let report = pair.sync_json(&[], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    assert_eq!(names(&pair, 'a', ""), ["dir", "f"]);
}

#[test]
fn keep_both_counts_past_a_name_that_is_taken() {
    let pair = synced(None);
    let taken = conflict_name("f", A_TIME);
    pair.write('a', &taken, "an older conflict copy");
    pair.sync_json(&[], 0);
    edit_both(&pair, "f");
    let report = pair.sync_json(&["--keep-both"], 0);
    let second = format!("{taken}-2");
    assert_eq!(report["changes"][0]["kept_as"], second.as_str(), "{report}");
    for side in ['a', 'b'] {
        assert_eq!(
            pair.read(side, &taken).as_deref(),
            Some("an older conflict copy")
        );
        assert_eq!(pair.read(side, &second).as_deref(), Some("edited on A"));
        assert_eq!(pair.read(side, "f").as_deref(), Some("edited on B, later"));
    }
    pair.assert_equal();
    assert_no_op(&pair, &["--keep-both"]);
}

fn prefer_picks_the_winner_to_keep_both(remote: Option<&RemoteB>) {
    let pair = synced(remote);
    edit_both(&pair, "dir/x");
    let loser_inode = ino(&pair, 'b', "dir/x");
    let report = pair.sync_json(&["--keep-both", "--prefer", "A"], 0);
    // A wins though B is newer: B's version is kept, named by B's mtime.
    let kept = format!("dir/{}", conflict_name("x", B_TIME));
    assert_eq!(report["changes"][0]["kept_as"], kept.as_str(), "{report}");
    for side in ['a', 'b'] {
        assert_eq!(pair.read(side, "dir/x").as_deref(), Some("edited on A"));
        assert_eq!(
            pair.read(side, &kept).as_deref(),
            Some("edited on B, later")
        );
    }
    // B's version was linked there on B, not copied.
    assert_eq!(ino(&pair, 'b', &kept), loser_inode);
    pair.assert_equal();
    assert_no_op(&pair, &["--keep-both"]);
}

#[test]
fn keep_both_with_prefer_takes_the_preferred_side() {
    prefer_picks_the_winner_to_keep_both(None);
}

#[test]
fn keep_both_leaves_a_deletion_against_an_edit_as_a_conflict() {
    let pair = synced(None);
    std::fs::remove_file(pair.path('a', "f")).unwrap();
    pair.write('b', "f", "edited on B");
    let report = pair.sync_json(&["--keep-both"], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    assert_eq!(report["kept_both"], 0);
    assert!(!pair.exists('a', "f"));
    assert_eq!(pair.read('b', "f").as_deref(), Some("edited on B"));
}

#[test]
fn keep_both_finishes_what_an_interrupted_run_began() {
    let pair = synced(None);
    edit_both(&pair, "f");
    // The first step of a run killed at once: A's version linked under
    // the conflict name on A. The next run must use it, not make a -2.
    let kept = conflict_name("f", A_TIME);
    std::fs::hard_link(pair.path('a', "f"), pair.path('a', &kept)).unwrap();
    let report = pair.sync_json(&["--keep-both"], 0);
    assert_eq!(report["changes"][0]["kept_as"], kept.as_str(), "{report}");
    assert_eq!(names(&pair, 'a', ""), ["dir", "f", kept.as_str()]);
    assert_eq!(pair.read('b', &kept).as_deref(), Some("edited on A"));
    assert_eq!(pair.read('a', "f").as_deref(), Some("edited on B, later"));
    pair.assert_equal();
    assert_no_op(&pair, &["--keep-both"]);
}

#[test]
fn keep_both_leaves_a_file_changed_during_the_sync_alone() {
    let pair = synced(None);
    edit_both(&pair, "f");
    let report = paused_sync(&pair, &["--keep-both"], 2, || {
        pair.write('a', "f", "written on A during the sync");
    });
    assert_eq!(report["errors"][0]["path"], "f", "{report}");
    assert_eq!(
        pair.read('a', "f").as_deref(),
        Some("written on A during the sync")
    );
    assert_eq!(pair.read('b', "f").as_deref(), Some("edited on B, later"));
    // No copy named for a version that is not the one kept.
    assert_eq!(names(&pair, 'a', ""), ["dir", "f"]);
    assert_eq!(names(&pair, 'b', ""), ["dir", "f"]);
}

#[test]
fn keep_both_resolves_a_file_against_a_symlink() {
    let pair = synced(None);
    pair.write('a', "f", "a file on A");
    std::fs::remove_file(pair.path('b', "f")).unwrap();
    std::os::unix::fs::symlink("target-on-b", pair.path('b', "f")).unwrap();
    set_mtime(&pair.path('a', "f"), B_TIME);
    set_mtime(&pair.path('b', "f"), A_TIME);
    let report = pair.sync_json(&["--keep-both"], 0);
    let kept = conflict_name("f", A_TIME);
    assert_eq!(report["changes"][0]["kept_as"], kept.as_str(), "{report}");
    for side in ['a', 'b'] {
        assert_eq!(pair.read(side, "f").as_deref(), Some("a file on A"));
        let link = std::fs::read_link(pair.path(side, &kept)).unwrap();
        assert_eq!(link.to_str(), Some("target-on-b"));
    }
    pair.assert_equal();
    assert_no_op(&pair, &["--keep-both"]);
}

// ---- --backup ---------------------------------------------------------------

fn backups_keep_overwritten_and_deleted_versions(remote: Option<&RemoteB>) {
    let pair = synced(remote);
    let (f_inode, x_inode) = (ino(&pair, 'b', "f"), ino(&pair, 'b', "dir/x"));
    pair.write('a', "f", "the second f");
    std::fs::remove_file(pair.path('a', "dir/x")).unwrap();
    pair.sync_json(&["--backup"], 0);
    assert_eq!(pair.read('b', "f").as_deref(), Some("the second f"));
    assert!(!pair.exists('b', "dir/x"));
    assert_eq!(
        pair.read('b', ".accord-backup/f.~1~").as_deref(),
        Some("the first f")
    );
    assert_eq!(
        pair.read('b', ".accord-backup/dir/x.~1~").as_deref(),
        Some("the first x")
    );
    // Links, not copies.
    assert_eq!(ino(&pair, 'b', ".accord-backup/f.~1~"), f_inode);
    assert_eq!(ino(&pair, 'b', ".accord-backup/dir/x.~1~"), x_inode);
    // Nothing was overwritten on A, and the backups stay on B.
    assert!(!pair.exists('a', ".accord-backup"));
    pair.assert_equal();
    assert_no_op(&pair, &["--backup"]);
    assert_no_op(&pair, &[]);
}

#[test]
fn backup_keeps_what_a_sync_overwrites_or_deletes() {
    backups_keep_overwritten_and_deleted_versions(None);
}

#[test]
fn backups_rotate_past_max_backups() {
    let pair = synced(None);
    for round in 2..=5 {
        pair.write('b', "f", &format!("f, version {round}"));
        pair.sync_json(&["--backup", "--max-backups", "2"], 0);
    }
    // The old versions on A were 1 to 4, kept as ~1~ to ~4~: two remain.
    assert_eq!(names(&pair, 'a', ".accord-backup"), ["f.~3~", "f.~4~"]);
    assert_eq!(
        pair.read('a', ".accord-backup/f.~4~").as_deref(),
        Some("f, version 4")
    );
    assert_eq!(
        pair.read('a', ".accord-backup/f.~3~").as_deref(),
        Some("f, version 3")
    );
    assert_eq!(pair.read('a', "f").as_deref(), Some("f, version 5"));
    // The default keeps 2 as well; a wider limit keeps more from then on.
    pair.write('b', "f", "f, version 6");
    pair.sync_json(&["--backup", "--max-backups", "3"], 0);
    assert_eq!(
        names(&pair, 'a', ".accord-backup"),
        ["f.~3~", "f.~4~", "f.~5~"]
    );
}

#[test]
fn backup_finishes_what_an_interrupted_run_began() {
    let pair = synced(None);
    pair.write('a', "f", "the second f");
    // A run stopped between B's backup and its overwrite: the backup is a
    // link to B's f. The next run must not keep that version twice.
    std::fs::create_dir(pair.path('b', ".accord-backup")).unwrap();
    std::fs::hard_link(pair.path('b', "f"), pair.path('b', ".accord-backup/f.~1~")).unwrap();
    pair.sync_json(&["--backup"], 0);
    assert_eq!(names(&pair, 'b', ".accord-backup"), ["f.~1~"]);
    assert_eq!(
        pair.read('b', ".accord-backup/f.~1~").as_deref(),
        Some("the first f")
    );
    assert_eq!(pair.read('b', "f").as_deref(), Some("the second f"));
    // A different old version is a new backup.
    pair.write('a', "f", "the third f");
    pair.sync_json(&["--backup"], 0);
    assert_eq!(names(&pair, 'b', ".accord-backup"), ["f.~1~", "f.~2~"]);
}

#[test]
fn backup_of_a_file_already_gone_is_no_error() {
    let pair = synced(None);
    std::fs::remove_file(pair.path('a', "f")).unwrap();
    // B's f goes too while the run waits to delete it.
    let report = paused_sync(&pair, &["--backup"], 0, || {
        std::fs::remove_file(pair.path('b', "f")).unwrap();
    });
    assert_eq!(report["errors"].as_array().unwrap().len(), 0, "{report}");
    assert!(!pair.exists('b', ".accord-backup"));
    pair.assert_equal();
}

#[test]
fn the_backup_directory_is_never_synced() {
    let pair = synced(None);
    pair.write('a', ".accord-backup/mine.~1~", "a backup of A's");
    pair.write('b', ".accord-backup/f.~7~", "a backup of B's");
    assert_no_op(&pair, &[]);
    assert_no_op(&pair, &["--backup"]);
    assert!(!pair.exists('b', ".accord-backup/mine.~1~"));
    assert!(!pair.exists('a', ".accord-backup/f.~7~"));
    // Deeper down it is a name like any other.
    pair.write('a', "dir/.accord-backup", "an ordinary file");
    pair.sync_json(&[], 0);
    assert_eq!(
        pair.read('b', "dir/.accord-backup").as_deref(),
        Some("an ordinary file")
    );
}

#[test]
fn backup_of_a_target_changed_during_the_sync_is_not_kept() {
    let pair = synced(None);
    pair.write('a', "f", "the second f");
    let report = paused_sync(&pair, &["--backup"], 2, || {
        pair.write('b', "f", "written on B during the sync, longer");
    });
    assert_eq!(report["errors"][0]["path"], "f", "{report}");
    assert_eq!(
        pair.read('b', "f").as_deref(),
        Some("written on B during the sync, longer")
    );
    // No backup of a version the sync did not overwrite.
    assert!(!pair.exists('b', ".accord-backup/f.~1~"));
}

#[test]
fn keep_both_and_backup_in_a_profile() {
    let pair = synced(None);
    let config = tempfile::tempdir().unwrap();
    std::fs::create_dir(config.path().join("accord")).unwrap();
    let profile = format!(
        "roots = [{:?}, {:?}]\nkeep-both = true\nbackup = true\nmax-backups = 1\n",
        pair.a.display().to_string(),
        pair.b.display().to_string()
    );
    std::fs::write(config.path().join("accord/kb.toml"), profile).unwrap();
    let run = || {
        let out = std::process::Command::new(bin())
            .args(["sync", "--batch", "--json", "kb"])
            .env("XDG_CONFIG_HOME", config.path())
            .env("ACCORD_STATE_DIR", &pair.state)
            .output()
            .unwrap();
        assert_exit(&out, 0);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    edit_both(&pair, "f");
    pair.write('b', "dir/x", "x, second");
    let report = run();
    assert_eq!(report["kept_both"], 1, "{report}");
    pair.write('b', "dir/x", "x, third");
    run();
    // max-backups = 1: only the newest of A's two overwritten x.
    assert_eq!(names(&pair, 'a', ".accord-backup/dir"), ["x.~2~"]);
    assert_eq!(
        pair.read('a', ".accord-backup/dir/x.~2~").as_deref(),
        Some("x, second")
    );
    pair.assert_equal();
}

// ---- remote roots -----------------------------------------------------------

#[test]
fn with_b_over_ssh_keep_both_and_backup_work() {
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    let base = tempfile::tempdir().unwrap();
    let remote = RemoteB::over_ssh(base.path(), &sshd.rsh());
    a_conflict_keeps_both_versions(Some(&remote));
    prefer_picks_the_winner_to_keep_both(Some(&remote));
    backups_keep_overwritten_and_deleted_versions(Some(&remote));
}

#[test]
fn with_b_from_the_daemon_keep_both_and_backup_work() {
    let daemon = Daemon::start();
    let remote = daemon.remote_b();
    a_conflict_keeps_both_versions(Some(&remote));
    prefer_picks_the_winner_to_keep_both(Some(&remote));
    backups_keep_overwritten_and_deleted_versions(Some(&remote));
}
