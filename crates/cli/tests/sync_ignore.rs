//! Ignore rules of `accord sync` (issue 12): `--exclude`, `--exclude-from`,
//! the profile key `exclude` and `.accordignore` files leave paths out of
//! the sync on both sides: never scanned, copied or deleted; a rule added
//! deletes nothing, a rule removed raises no false conflict, a rule of one
//! side's `.accordignore` holds on both sides, and the deletion guard
//! counts nothing excluded.
//!
//! Every scenario runs with both roots local, with B over ssh (a real sshd)
//! and with B from an `accord server` daemon: with B remote, the rules
//! travel to its server, which applies them to its own walk and lookups.

mod mirror_common;
mod remote_common;
#[macro_use]
mod sync_common;
use sync_common::*;

type MakePair<'a> = &'a dyn Fn() -> Pair;

fn changed_paths(report: &serde_json::Value) -> Vec<String> {
    let mut paths: Vec<String> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect();
    paths.sort();
    paths
}

fn error_paths(report: &serde_json::Value) -> Vec<String> {
    report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect()
}

/// A pair synced once without rules: `keep`, `a.log`, `build/` and
/// `cache/` on both sides.
fn synced_pair(make_pair: MakePair) -> Pair {
    let pair = make_pair();
    pair.write('a', "keep", "kept");
    pair.write('a', "a.log", "log line");
    pair.write('a', "build/x.o", "object");
    pair.write('a', "build/sub/y.o", "object y");
    pair.write('a', "cache/one", "1");
    pair.write('a', "cache/two", "2");
    pair.write('a', "cache/three", "3");
    pair.sync_json(&[], 0);
    pair.assert_equal();
    pair
}

fn excluded_files_on_both_sides_are_left_alone(make_pair: MakePair) {
    let pair = make_pair();
    pair.write('a', "keep", "kept");
    pair.write('a', "x.o", "object of a");
    pair.write('b', "x.o", "object of b");
    pair.write('b', "sub/y.o", "only on b");
    pair.write('a', "tmp/scratch", "a's scratch");
    pair.write('b', "tmp/other", "b's scratch");
    let report = pair.sync_json(&["--exclude", "*.o", "--exclude", "/tmp/"], 0);
    assert_eq!(changed_paths(&report), ["keep", "sub"], "{report}");
    assert!(conflict_paths(&report).is_empty(), "{report}");
    assert_eq!(pair.read('a', "x.o").as_deref(), Some("object of a"));
    assert_eq!(pair.read('b', "x.o").as_deref(), Some("object of b"));
    assert!(!pair.exists('a', "sub/y.o"));
    assert!(!pair.exists('a', "tmp/other") && !pair.exists('b', "tmp/scratch"));
    // A second run finds nothing to do.
    let again = pair.sync_json(&["--exclude", "*.o", "--exclude", "/tmp/"], 0);
    assert_eq!(again["propagated"], 0, "{again}");
}

local_and_remote!(excluded_files_on_both_sides_are_left_alone:
    excluded_files_are_left_alone_local,
    excluded_files_are_left_alone_ssh,
    excluded_files_are_left_alone_daemon);

fn a_new_rule_deletes_nothing(make_pair: MakePair) {
    let pair = synced_pair(make_pair);
    // Gone on one side each while the rules stand: what a run without
    // them would delete on the other.
    std::fs::remove_dir_all(pair.path('a', "build")).unwrap();
    std::fs::remove_file(pair.path('b', "a.log")).unwrap();
    let rules = ["--exclude", "build/", "--exclude", "*.log"];
    let report = pair.sync_json(&rules, 0);
    assert_eq!(report["propagated"], 0, "{report}");
    assert_eq!(pair.read('b', "build/x.o").as_deref(), Some("object"));
    assert_eq!(pair.read('b', "build/sub/y.o").as_deref(), Some("object y"));
    assert_eq!(pair.read('a', "a.log").as_deref(), Some("log line"));
    // Run after run.
    let again = pair.sync_json(&rules, 0);
    assert_eq!(again["propagated"], 0, "{again}");
    assert!(pair.exists('b', "build/x.o") && pair.exists('a', "a.log"));
}

local_and_remote!(a_new_rule_deletes_nothing:
    a_new_rule_deletes_nothing_local,
    a_new_rule_deletes_nothing_ssh,
    a_new_rule_deletes_nothing_daemon);

fn a_removed_rule_brings_no_false_conflict(make_pair: MakePair) {
    let pair = synced_pair(make_pair);
    let rules = ["--exclude", "cache/", "--exclude", "*.log"];
    // While excluded: the same new contents on both sides, the same new
    // file on both sides, one side's change alone, and untouched files.
    pair.write('a', "cache/one", "one, edited alike");
    pair.write('b', "cache/one", "one, edited alike");
    pair.write('a', "cache/new", "made on both");
    pair.write('b', "cache/new", "made on both");
    pair.write('b', "a.log", "log line, and more from b");
    let report = pair.sync_json(&rules, 0);
    assert_eq!(report["propagated"], 0, "{report}");
    assert_eq!(pair.read('a', "a.log").as_deref(), Some("log line"));
    // The rule goes: equal paths agree silently, the one-sided change is
    // carried, nothing is a conflict.
    let report = pair.sync_json(&[], 0);
    assert!(conflict_paths(&report).is_empty(), "{report}");
    assert_eq!(changed_paths(&report), ["a.log"], "{report}");
    pair.assert_equal();
    assert_eq!(
        pair.read('a', "a.log").as_deref(),
        Some("log line, and more from b")
    );
    let again = pair.sync_json(&[], 0);
    assert_eq!(again["propagated"], 0, "{again}");
}

local_and_remote!(a_removed_rule_brings_no_false_conflict:
    a_removed_rule_brings_no_false_conflict_local,
    a_removed_rule_brings_no_false_conflict_ssh,
    a_removed_rule_brings_no_false_conflict_daemon);

/// `side`'s `.accordignore` holds rules the other side does not have yet
/// (they reach it in this very run, as any file): the paths they match
/// stay untouched on both sides.
fn one_sides_ignore_file_holds_on_both(make_pair: MakePair, side: char) {
    let other = if side == 'a' { 'b' } else { 'a' };
    let pair = make_pair();
    pair.write('a', "d/f", "agreed");
    pair.sync_json(&[], 0);
    pair.write(side, "d/.accordignore", "f\n*.tmp\njunk/\n");
    pair.write('a', "d/f", "edited on a");
    pair.write('b', "d/f", "edited on b");
    pair.write(other, "d/g.tmp", "temp of the other side");
    pair.write(other, "d/junk/j", "junk of the other side");
    pair.write(other, "d/junk-file", "a file, not a directory");
    let report = pair.sync_json(&[], 0);
    assert!(conflict_paths(&report).is_empty(), "{report}");
    assert_eq!(
        changed_paths(&report),
        ["d/.accordignore", "d/junk-file"],
        "{report}"
    );
    assert_eq!(pair.read('a', "d/f").as_deref(), Some("edited on a"));
    assert_eq!(pair.read('b', "d/f").as_deref(), Some("edited on b"));
    assert!(!pair.exists(side, "d/g.tmp"));
    assert!(!pair.exists(side, "d/junk"));
    // Both sides hold the rules now: the next run has nothing to do.
    let again = pair.sync_json(&[], 0);
    assert_eq!(again["propagated"], 0, "{again}");
    // `--no-ignore-files`: the files are synced like any other again, and
    // the paths changed on both sides are the conflict they are.
    let report = pair.sync_json(&["--no-ignore-files"], 1);
    assert_eq!(conflict_paths(&report), ["d/f"], "{report}");
}

fn a_rule_of_bs_ignore_file_holds_on_both(make_pair: MakePair) {
    one_sides_ignore_file_holds_on_both(make_pair, 'b');
}

fn a_rule_of_as_ignore_file_holds_on_both(make_pair: MakePair) {
    one_sides_ignore_file_holds_on_both(make_pair, 'a');
}

local_and_remote!(a_rule_of_bs_ignore_file_holds_on_both:
    b_ignore_file_holds_on_both_local,
    b_ignore_file_holds_on_both_ssh,
    b_ignore_file_holds_on_both_daemon);

local_and_remote!(a_rule_of_as_ignore_file_holds_on_both:
    a_ignore_file_holds_on_both_local,
    a_ignore_file_holds_on_both_ssh,
    a_ignore_file_holds_on_both_daemon);

/// An `.accordignore` a global rule keeps on one side only: its rules hold
/// on both sides, run after run.
fn an_unsynced_ignore_file_holds_on_both(make_pair: MakePair) {
    let pair = make_pair();
    pair.write('b', ".accordignore", "private/\n");
    pair.write('a', "private/a-secret", "a's");
    pair.write('b', "private/b-secret", "b's");
    pair.write('a', "public", "shared");
    let rules = ["--exclude", "/.accordignore"];
    for _ in 0..2 {
        let report = pair.sync_json(&rules, 0);
        assert!(conflict_paths(&report).is_empty(), "{report}");
    }
    assert!(!pair.exists('a', ".accordignore"));
    assert!(!pair.exists('b', "private/a-secret"));
    assert!(!pair.exists('a', "private/b-secret"));
    assert_eq!(pair.read('b', "public").as_deref(), Some("shared"));
}

local_and_remote!(an_unsynced_ignore_file_holds_on_both:
    an_unsynced_ignore_file_holds_on_both_local,
    an_unsynced_ignore_file_holds_on_both_ssh,
    an_unsynced_ignore_file_holds_on_both_daemon);

fn an_excluded_directory_with_changes_beneath_is_untouched(make_pair: MakePair) {
    let pair = synced_pair(make_pair);
    pair.write('a', "cache/one", "edited on a");
    std::fs::remove_file(pair.path('a', "cache/two")).unwrap();
    pair.write('b', "cache/three", "edited on b");
    pair.write('b', "cache/deep/new", "new on b");
    pair.write('a', "keep", "kept, edited");
    let report = pair.sync_json(&["--exclude", "/cache"], 0);
    assert_eq!(changed_paths(&report), ["keep"], "{report}");
    assert_eq!(pair.read('b', "cache/one").as_deref(), Some("1"));
    assert_eq!(pair.read('b', "cache/two").as_deref(), Some("2"));
    assert_eq!(pair.read('a', "cache/three").as_deref(), Some("3"));
    assert!(!pair.exists('a', "cache/deep"));
    assert_eq!(pair.read('b', "keep").as_deref(), Some("kept, edited"));
}

local_and_remote!(an_excluded_directory_with_changes_beneath_is_untouched:
    an_excluded_directory_is_untouched_local,
    an_excluded_directory_is_untouched_ssh,
    an_excluded_directory_is_untouched_daemon);

fn the_deletion_guard_counts_nothing_excluded(make_pair: MakePair) {
    let pair = synced_pair(make_pair);
    // Every excluded path gone from A: no deletion to count at all.
    std::fs::remove_dir_all(pair.path('a', "build")).unwrap();
    std::fs::remove_dir_all(pair.path('a', "cache")).unwrap();
    let with_limit = |limit: &'static str| {
        vec![
            "--exclude",
            "build/",
            "--exclude",
            "cache/",
            "--max-delete",
            limit,
        ]
    };
    let report = pair.sync_json(&with_limit("0"), 0);
    assert_eq!(report["propagated"], 0, "{report}");
    // One real deletion, of B's 2 entries not excluded (its 8 excluded
    // ones are not counted, or 40% of 10 would let it through).
    std::fs::remove_file(pair.path('a', "a.log")).unwrap();
    let out = pair.sync(&with_limit("40%"));
    assert_exit(&out, 3);
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 of replica B's 2 entries"));
    assert!(pair.exists('b', "a.log"));
    let report = pair.sync_json(&with_limit("50%"), 0);
    assert_eq!(changed_paths(&report), ["a.log"], "{report}");
    assert!(!pair.exists('b', "a.log"));
    assert!(pair.exists('b', "build/x.o") && pair.exists('b', "cache/one"));
}

local_and_remote!(the_deletion_guard_counts_nothing_excluded:
    the_deletion_guard_counts_nothing_excluded_local,
    the_deletion_guard_counts_nothing_excluded_ssh,
    the_deletion_guard_counts_nothing_excluded_daemon);

/// A directory deleted on one side that holds excluded entries on the
/// other is not deleted there (that would delete what is excluded): the
/// path fails, and the excluded entries stay.
fn a_directory_holding_excluded_entries_is_not_deleted(make_pair: MakePair) {
    let pair = make_pair();
    pair.write('a', "d/f", "synced");
    pair.write('a', "keep", "kept");
    pair.sync_json(&[], 0);
    pair.write('b', "d/x.o", "excluded on b");
    std::fs::remove_dir_all(pair.path('a', "d")).unwrap();
    let report = pair.sync_json(&["--exclude", "*.o", "--max-delete", "100%"], 2);
    assert_eq!(error_paths(&report), ["d"], "{report}");
    assert_eq!(pair.read('b', "d/x.o").as_deref(), Some("excluded on b"));
    assert!(!pair.exists('b', "d/f"));
}

local_and_remote!(a_directory_holding_excluded_entries_is_not_deleted:
    a_directory_holding_excluded_entries_is_kept_local,
    a_directory_holding_excluded_entries_is_kept_ssh,
    a_directory_holding_excluded_entries_is_kept_daemon);

#[test]
fn exclude_from_and_a_profile_give_rules() {
    let pair = Pair::new();
    pair.write('a', "x.o", "object");
    pair.write('a', "y.log", "log");
    pair.write('a', "z.tmp", "temp");
    pair.write('a', "keep", "kept");
    let list = pair.state.with_extension("excludes");
    std::fs::write(&list, "# build output\n*.o\n\n").unwrap();
    let config = tempfile::tempdir().unwrap();
    std::fs::create_dir(config.path().join("accord")).unwrap();
    let profile = format!(
        "roots = [{:?}, {:?}]\nexclude = [\"*.log\"]\nexclude-from = {:?}\nbatch = true\njson = true\n",
        pair.a.display().to_string(),
        pair.b.display().to_string(),
        list.display().to_string()
    );
    std::fs::write(config.path().join("accord/home.toml"), profile).unwrap();
    let out = std::process::Command::new(bin())
        .args(["sync", "home", "--exclude", "*.tmp"])
        .env("XDG_CONFIG_HOME", config.path())
        .env("ACCORD_STATE_DIR", &pair.state)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(changed_paths(&report), ["keep"], "{report}");
    for excluded in ["x.o", "y.log", "z.tmp"] {
        assert!(!pair.exists('b', excluded), "{excluded}");
    }
}

#[test]
fn a_bad_pattern_is_a_usage_error() {
    let pair = Pair::new();
    pair.write('a', "f", "x");
    let out = pair.sync(&["--exclude", "a{b,c"]);
    assert_exit(&out, 64);
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad exclude pattern"));
    assert!(!pair.exists('b', "f"));
    let out = pair.sync(&["--exclude-from", "/nonexistent/list"]);
    assert_exit(&out, 64);
}
