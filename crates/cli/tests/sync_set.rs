//! `accord sync A B C …`: a sync of more than two local roots in one run
//! (issue 29), end to end on real trees: a first sync, a change reaching
//! every other replica, the same change agreeing, a conflict listed once
//! with every version, a replica away for several runs catching up without
//! a conflict (and without bringing a deletion back), policies, a dry run,
//! what is refused, `--merge` (two versions, more folded, a failing
//! program, a root away), and the crash invariant: runs killed at random
//! moments leave every file old or new on every replica, and the next run
//! converges without a conflict (`ACCORD_SYNC_SET_KILL_TRIALS`, default 50),
//! with `--keep-both` and `--merge` too.

mod sync_common;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};
use sync_common::{assert_exit, bin, conflict_paths, json_report, set_mtime, snapshot};

/// Roots `a`, `b`, `c` … (created, empty) and a private state directory.
struct Set {
    _tmp: tempfile::TempDir,
    roots: Vec<PathBuf>,
    state: PathBuf,
}

impl Set {
    fn new(count: usize) -> Set {
        let tmp = tempfile::tempdir().unwrap();
        let roots: Vec<PathBuf> = (0..count)
            .map(|i| tmp.path().join(char::from(b'a' + i as u8).to_string()))
            .collect();
        for root in &roots {
            std::fs::create_dir(root).unwrap();
        }
        let state = tmp.path().join("state");
        Set {
            _tmp: tmp,
            roots,
            state,
        }
    }

    fn root(&self, letter: char) -> &Path {
        &self.roots[usize::from(letter as u8 - b'a')]
    }

    fn path(&self, letter: char, rel: &str) -> PathBuf {
        self.root(letter).join(rel)
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(bin());
        command
            .arg("sync")
            .args(&self.roots)
            .args(["--max-delete", "100%"])
            .args(args)
            .env("ACCORD_STATE_DIR", &self.state);
        command
    }

    fn sync(&self, args: &[&str]) -> Output {
        self.command(args).output().unwrap()
    }

    /// A run with `--json`, which must exit with `code`.
    fn sync_json(&self, args: &[&str], code: i32) -> serde_json::Value {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        json_report(&self.sync(&all), code)
    }

    fn write(&self, letter: char, rel: &str, contents: &str) {
        let path = self.path(letter, rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }

    fn read(&self, letter: char, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.path(letter, rel)).ok()
    }

    fn letters(&self) -> Vec<char> {
        (0..self.roots.len())
            .map(|i| char::from(b'a' + i as u8))
            .collect()
    }

    fn assert_all_equal(&self) {
        let first = snapshot(&self.roots[0]);
        for root in &self.roots[1..] {
            assert_eq!(snapshot(root), first, "{} differs", root.display());
        }
    }

    /// Take `letter`'s root away (a disk not mounted) until `back`.
    fn away(&self, letter: char) -> PathBuf {
        let away = self.root(letter).with_extension("away");
        std::fs::rename(self.root(letter), &away).unwrap();
        away
    }

    fn back(&self, letter: char, away: &Path) {
        std::fs::rename(away, self.root(letter)).unwrap();
    }
}

fn changes(report: &serde_json::Value) -> usize {
    report["changes"].as_array().unwrap().len()
}

#[test]
fn a_first_sync_makes_every_replica_hold_every_file() {
    let set = Set::new(3);
    set.write('a', "docs/a.txt", "from a");
    set.write('b', "b.txt", "from b");
    set.write('c', "deep/er/c.txt", "from c");
    set.write('c', "same.txt", "equal everywhere");
    set.write('a', "same.txt", "equal everywhere");
    std::os::unix::fs::symlink("docs/a.txt", set.path('b', "link")).unwrap();
    let report = set.sync_json(&[], 0);
    assert!(report["conflicts"].as_array().unwrap().is_empty());
    set.assert_all_equal();
    assert_eq!(set.read('b', "deep/er/c.txt").as_deref(), Some("from c"));
    // The next run has nothing to do.
    let again = set.sync_json(&[], 0);
    assert_eq!(changes(&again), 0, "{again}");
}

/// More files in one directory than a receiver takes per chunk of its
/// plan (4,096): made whole on every receiver, and deleted whole (its
/// contents before it).
#[test]
fn a_directory_larger_than_a_chunk_is_made_and_deleted_whole() {
    let set = Set::new(3);
    for i in 0..5000 {
        set.write('a', &format!("big/f{i:05}"), "x");
    }
    set.write('a', "small/f", "y");
    let report = set.sync_json(&[], 0);
    // 5,000 files, two directories and one more file, on each of two
    // receivers.
    assert_eq!(changes(&report), 2 * 5003);
    set.assert_all_equal();
    std::fs::remove_dir_all(set.path('b', "big")).unwrap();
    let report = set.sync_json(&[], 0);
    assert!(report["errors"].as_array().unwrap().is_empty(), "{report}");
    assert_eq!(changes(&report), 2 * 5001);
    for letter in ['a', 'c'] {
        assert!(
            !set.path(letter, "big").exists(),
            "big is still on {letter}"
        );
    }
    set.assert_all_equal();
}

#[test]
fn a_change_on_one_replica_reaches_all_and_the_same_change_agrees() {
    let set = Set::new(4);
    set.write('a', "f", "v1");
    set.write('a', "g", "v1");
    set.sync_json(&[], 0);
    set.write('c', "f", "v2 from c");
    set.write('a', "g", "v2 everywhere");
    set.write('d', "g", "v2 everywhere");
    let report = set.sync_json(&[], 0);
    assert!(conflict_paths(&report).is_empty(), "{report}");
    set.assert_all_equal();
    assert_eq!(set.read('b', "f").as_deref(), Some("v2 from c"));
    assert_eq!(set.read('c', "g").as_deref(), Some("v2 everywhere"));
    // g went to B and C only: A and D made that change themselves.
    let g_receivers: Vec<&str> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["path"] == "g")
        .map(|c| c["on"].as_str().unwrap())
        .collect();
    assert_eq!(g_receivers, ["B", "C"], "{report}");
}

#[test]
fn different_changes_are_one_conflict_with_every_version() {
    let set = Set::new(3);
    set.write('a', "f", "base");
    set.sync_json(&[], 0);
    set.write('a', "f", "from a");
    std::fs::remove_file(set.path('c', "f")).unwrap();
    let report = set.sync_json(&[], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    let versions = report["conflicts"][0]["versions"].as_array().unwrap();
    let holders: Vec<String> = versions.iter().map(|v| v["roots"].to_string()).collect();
    assert_eq!(holders, ["[\"A\"]", "[\"B\"]", "[\"C\"]"], "{report}");
    assert_eq!(versions[1]["latest"], false, "B holds the older version");
    assert_eq!(versions[2]["kind"], serde_json::Value::Null, "C deleted it");
    // Left alone everywhere.
    assert_eq!(set.read('a', "f").as_deref(), Some("from a"));
    assert_eq!(set.read('b', "f").as_deref(), Some("base"));
    assert_eq!(set.read('c', "f"), None);
    // --prefer names a root by its letter.
    let resolved = set.sync_json(&["--prefer", "A"], 0);
    assert!(conflict_paths(&resolved).is_empty());
    set.assert_all_equal();
    assert_eq!(set.read('c', "f").as_deref(), Some("from a"));
}

#[test]
fn a_replica_away_for_several_runs_catches_up_without_a_conflict() {
    let set = Set::new(3);
    set.write('a', "edited", "v1");
    set.write('a', "deleted", "v1");
    set.write('a', "dir/inside", "v1");
    set.write('a', "kept", "v1");
    set.sync_json(&[], 0);
    let away = set.away('c');
    set.write('a', "edited", "v2 from a");
    let first = set.sync_json(&[], 4);
    assert_eq!(first["unreached"], serde_json::json!(["C"]));
    set.write('b', "edited", "v3 from b");
    std::fs::remove_file(set.path('b', "deleted")).unwrap();
    std::fs::remove_dir_all(set.path('a', "dir")).unwrap();
    set.write('b', "new", "made while c was away");
    set.sync_json(&[], 4);
    set.back('c', &away);
    let report = set.sync_json(&[], 0);
    assert!(conflict_paths(&report).is_empty(), "{report}");
    set.assert_all_equal();
    assert_eq!(set.read('c', "edited").as_deref(), Some("v3 from b"));
    assert_eq!(
        set.read('c', "deleted"),
        None,
        "a deletion never comes back"
    );
    assert!(!set.path('c', "dir").exists());
    assert_eq!(set.read('c', "kept").as_deref(), Some("v1"));
}

#[test]
fn a_change_made_while_away_wins_over_no_change_and_meets_a_change_as_a_conflict() {
    let set = Set::new(3);
    set.write('a', "quiet", "v1");
    set.write('a', "busy", "v1");
    set.sync_json(&[], 0);
    let away = set.away('c');
    set.write('a', "busy", "changed by a meanwhile");
    set.sync_json(&[], 4);
    std::fs::write(away.join("quiet"), "changed on c while it was away").unwrap();
    std::fs::write(away.join("busy"), "changed on c too").unwrap();
    set.back('c', &away);
    let report = set.sync_json(&[], 1);
    assert_eq!(conflict_paths(&report), ["busy"]);
    assert_eq!(
        set.read('a', "quiet").as_deref(),
        Some("changed on c while it was away")
    );
}

#[test]
fn force_makes_every_replica_equal_to_one() {
    let set = Set::new(3);
    set.write('a', "f", "base");
    set.write('a', "g", "base");
    set.sync_json(&[], 0);
    set.write('a', "f", "a's");
    set.write('b', "f", "b's");
    set.write('c', "g", "c's newer g");
    let report = set.sync_json(&["--force", "B"], 0);
    assert!(conflict_paths(&report).is_empty(), "{report}");
    set.assert_all_equal();
    assert_eq!(set.read('a', "f").as_deref(), Some("b's"));
    assert_eq!(set.read('c', "g").as_deref(), Some("base"));
    // What --force decided stays decided: the next run has nothing to do.
    assert_eq!(changes(&set.sync_json(&[], 0)), 0);
}

#[test]
fn a_dry_run_changes_nothing() {
    let set = Set::new(3);
    set.write('a', "f", "v1");
    set.sync_json(&[], 0);
    set.write('b', "f", "v2");
    set.write('c', "new", "new");
    let before: Vec<_> = set.roots.iter().map(|r| snapshot(r)).collect();
    let out = set.sync(&["-n"]);
    assert_exit(&out, 0);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("dry run, nothing was changed"), "{stderr}");
    let after: Vec<_> = set.roots.iter().map(|r| snapshot(r)).collect();
    assert_eq!(before, after);
    // The real run then does what the dry run listed.
    let report = set.sync_json(&[], 0);
    assert_eq!(changes(&report), 4, "{report}");
    set.assert_all_equal();
}

#[test]
fn backup_keeps_what_each_replica_had_before_it_was_overwritten_or_deleted() {
    let set = Set::new(3);
    set.write('a', "notes/todo", "agreed");
    set.write('a', "old", "to be deleted");
    set.sync_json(&[], 0);
    set.write('b', "notes/todo", "edited on b");
    std::fs::remove_file(set.path('c', "old")).unwrap();
    set.sync_json(&["--backup"], 0);
    set.assert_all_equal();
    for letter in ['a', 'c'] {
        let backup = set.read(letter, ".accord-backup/notes/todo.~1~");
        assert_eq!(backup.as_deref(), Some("agreed"), "{letter}");
    }
    for letter in ['a', 'b'] {
        let backup = set.read(letter, ".accord-backup/old.~1~");
        assert_eq!(backup.as_deref(), Some("to be deleted"), "{letter}");
    }
    // Where nothing was overwritten, nothing is backed up; and the backup
    // directories are never synced between replicas.
    assert_eq!(set.read('b', ".accord-backup/notes/todo.~1~"), None);
    assert_eq!(set.read('c', ".accord-backup/old.~1~"), None);
    let steady = set.sync_json(&["--backup"], 0);
    assert_eq!(changes(&steady), 0, "{steady}");
}

#[test]
fn what_a_set_cannot_do_yet_is_refused_before_anything_changes() {
    let set = Set::new(3);
    set.write('a', "f", "v1");
    for args in [vec!["--merge", "true"], vec!["--prefer", "E"]] {
        // (`--merge true` names no NEW: refused as with two roots.)
        let out = set.sync(&args);
        assert_exit(&out, 64);
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("accord sync:"),
            "{args:?}"
        );
    }
    let mut remote = set.command(&[]);
    remote.arg("accord://somehost:99999/module/dir");
    let out = remote.output().unwrap();
    assert_exit(&out, 64);
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a port number"));
    assert_eq!(set.read('b', "f"), None);
}

#[test]
fn fewer_than_two_reachable_roots_change_nothing() {
    let set = Set::new(3);
    set.write('a', "f", "v1");
    let b = set.away('b');
    let c = set.away('c');
    let out = set.sync(&[]);
    assert_exit(&out, 3);
    // Each root left out is named with why, then what the run did.
    let stderr = String::from_utf8_lossy(&out.stderr);
    for letter in ['b', 'c'] {
        let line = format!("{} could not be reached (", set.root(letter).display());
        assert!(stderr.contains(&line), "{stderr}");
    }
    assert!(stderr.contains("No such file or directory"), "{stderr}");
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    set.back('b', &b);
    set.back('c', &c);
    assert_eq!(set.read('b', "f"), None);
}

// ---- --keep-both ----

/// The mtimes given to the versions of a conflict: C's the newest.
const TIMES: [(char, i64, &str); 3] = [
    ('a', 1_000_000_000, "20010909-014640"),
    ('b', 1_100_000_000, "20041109-113320"),
    ('c', 1_200_000_000, "20080110-212000"),
];

fn host() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    name.trim().to_string()
}

/// The name `letter`'s version of `rel` is kept under (its mtime from
/// `TIMES`).
fn kept_name(rel: &str, letter: char) -> String {
    let date = TIMES.iter().find(|t| t.0 == letter).unwrap().2;
    format!("{rel}.conflict-{}-{date}", host())
}

/// A synced set of three holding `f`, then `f` edited on each root in
/// `edits` (to `edited on X`, with its mtime from `TIMES`).
fn edited_apart(edits: &[char]) -> Set {
    let set = Set::new(3);
    set.write('a', "f", "base");
    set.write('a', "other", "untouched");
    set.sync_json(&[], 0);
    for &letter in edits {
        set.write(letter, "f", &format!("edited on {letter}"));
        let time = TIMES.iter().find(|t| t.0 == letter).unwrap().1;
        set_mtime(&set.path(letter, "f"), time);
    }
    set
}

/// The names in `letter`'s root that start with `f.conflict-`.
fn kept_copies(set: &Set, letter: char) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(set.root(letter))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("f.conflict-"))
        .collect();
    names.sort();
    names
}

#[test]
fn keep_both_keeps_every_losing_version_on_every_root() {
    let set = edited_apart(&['a', 'b', 'c']);
    let ino_on_a = std::fs::metadata(set.path('a', "f")).unwrap().ino();
    let report = set.sync_json(&["--keep-both"], 0);
    assert!(conflict_paths(&report).is_empty(), "{report}");
    assert_eq!(report["kept_both"], 1, "{report}");
    let (kept_a, kept_b) = (kept_name("f", 'a'), kept_name("f", 'b'));
    for letter in set.letters() {
        assert_eq!(set.read(letter, "f").as_deref(), Some("edited on c"));
        assert_eq!(kept_copies(&set, letter), [kept_a.clone(), kept_b.clone()]);
        assert_eq!(set.read(letter, &kept_a).as_deref(), Some("edited on a"));
        assert_eq!(set.read(letter, &kept_b).as_deref(), Some("edited on b"));
    }
    set.assert_all_equal();
    // A's version was kept by a hard link, not copied.
    let kept_ino = std::fs::metadata(set.path('a', &kept_a)).unwrap().ino();
    assert_eq!(kept_ino, ino_on_a);
    let kept_lines: Vec<String> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["action"] == "keep")
        .map(|c| format!("{} {}", c["on"], c["path"]))
        .collect();
    assert_eq!(
        kept_lines,
        [format!("\"A\" \"{kept_a}\""), format!("\"B\" \"{kept_b}\"")],
        "{report}"
    );
    // Recorded as settled everywhere: the next run changes nothing.
    let again = set.sync_json(&["--keep-both"], 0);
    assert_eq!(changes(&again), 0, "{again}");
    assert!(conflict_paths(&again).is_empty(), "{again}");
    let plain = set.sync_json(&[], 0);
    assert_eq!(changes(&plain), 0, "{plain}");
}

#[test]
fn keep_both_prints_what_it_kept_where() {
    let set = edited_apart(&['a', 'c']);
    let out = set.sync(&["--keep-both"]);
    assert_exit(&out, 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let kept = kept_name("f", 'a');
    for line in [
        format!("{:<14} {kept}", "kept on A"),
        format!("{:<14} {kept}", "A -> B"),
        format!("{:<14} f", "C -> B"),
    ] {
        assert!(stdout.lines().any(|l| l == line), "{line:?} in {stdout}");
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 kept both"), "{stderr}");
}

#[test]
fn keep_both_keeps_one_copy_of_a_version_two_roots_hold() {
    let set = edited_apart(&['c']);
    for letter in ['a', 'b'] {
        set.write(letter, "f", "the same edit");
        set_mtime(&set.path(letter, "f"), TIMES[0].1);
    }
    let report = set.sync_json(&["--keep-both"], 0);
    assert!(conflict_paths(&report).is_empty(), "{report}");
    let kept = kept_name("f", 'a');
    for letter in set.letters() {
        assert_eq!(kept_copies(&set, letter), [kept.as_str()], "{report}");
        assert_eq!(set.read(letter, &kept).as_deref(), Some("the same edit"));
        assert_eq!(set.read(letter, "f").as_deref(), Some("edited on c"));
    }
    let again = set.sync_json(&[], 0);
    assert_eq!(changes(&again), 0, "{again}");
}

#[test]
fn keep_both_leaves_a_deletion_or_a_directory_among_the_latest_a_conflict() {
    let set = edited_apart(&['a', 'b']);
    std::fs::remove_file(set.path('c', "f")).unwrap();
    let report = set.sync_json(&["--keep-both"], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    assert_eq!(set.read('c', "f"), None);
    for letter in set.letters() {
        assert!(kept_copies(&set, letter).is_empty());
    }
    let set = edited_apart(&['a', 'b']);
    std::fs::remove_file(set.path('c', "f")).unwrap();
    set.write('c', "f/inside", "a directory now");
    let report = set.sync_json(&["--keep-both"], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    assert_eq!(set.read('a', "f").as_deref(), Some("edited on a"));
    assert_eq!(
        set.read('c', "f/inside").as_deref(),
        Some("a directory now")
    );
}

#[test]
fn force_wins_over_keep_both() {
    let set = edited_apart(&['a', 'b', 'c']);
    let report = set.sync_json(&["--keep-both", "--force", "B"], 0);
    assert!(conflict_paths(&report).is_empty(), "{report}");
    set.assert_all_equal();
    assert_eq!(set.read('a', "f").as_deref(), Some("edited on b"));
    assert!(kept_copies(&set, 'a').is_empty());
}

#[test]
fn a_kept_name_already_taken_gets_the_next_number() {
    let set = edited_apart(&['a', 'b', 'c']);
    let taken = kept_name("f", 'b');
    set.write('c', &taken, "someone else's file");
    // A dry run names it and changes nothing.
    let dry = set.sync_json(&["--keep-both", "-n"], 0);
    let mut kept: Vec<&str> = dry["kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["kept_as"].as_str().unwrap())
        .collect();
    kept.sort();
    let second = format!("{taken}-2");
    assert_eq!(
        kept,
        [kept_name("f", 'a').as_str(), second.as_str()],
        "{dry}"
    );
    assert_eq!(set.read('b', &second), None);
    set.sync_json(&["--keep-both"], 0);
    for letter in set.letters() {
        assert_eq!(set.read(letter, &second).as_deref(), Some("edited on b"));
        assert_eq!(
            set.read(letter, &taken).as_deref(),
            Some("someone else's file")
        );
    }
    set.assert_all_equal();
    assert_eq!(changes(&set.sync_json(&[], 0)), 0);
}

#[test]
fn a_root_away_during_keep_both_catches_up_without_a_conflict() {
    let set = edited_apart(&['a', 'b']);
    let away = set.away('c');
    let report = set.sync_json(&["--keep-both"], 4);
    assert!(conflict_paths(&report).is_empty(), "{report}");
    set.back('c', &away);
    let report = set.sync_json(&[], 0);
    assert!(conflict_paths(&report).is_empty(), "{report}");
    set.assert_all_equal();
    assert_eq!(set.read('c', "f").as_deref(), Some("edited on b"));
    assert_eq!(
        set.read('c', &kept_name("f", 'a')).as_deref(),
        Some("edited on a")
    );
}

// ---- Kill test ----

const FILES: usize = 300;

fn name(i: usize) -> String {
    format!("d{}/f{i:03}", i % 5)
}

fn original(i: usize) -> String {
    format!("original {i} ").repeat(300)
}

/// Who changes file `i` after the first agreement, and to what: A edits a
/// third, B another third, C deletes every seventh of the rest and makes
/// new files; nothing is changed on two replicas.
fn final_of(i: usize) -> Option<String> {
    match i % 3 {
        0 => Some(format!("from a {i} ").repeat(200 + i)),
        1 => Some(format!("from b {i} ").repeat(100 + i)),
        _ if i % 7 == 2 => None,
        _ => Some(original(i)),
    }
}

fn created_on_c(i: usize) -> String {
    format!("new/c{i:03}")
}

fn prepared_set() -> Set {
    let set = Set::new(3);
    for i in 0..FILES {
        set.write('a', &name(i), &original(i));
    }
    set.sync_json(&[], 0);
    for i in 0..FILES {
        match (i % 3, final_of(i)) {
            (0, Some(v)) => set.write('a', &name(i), &v),
            (1, Some(v)) => set.write('b', &name(i), &v),
            (_, None) => std::fs::remove_file(set.path('c', &name(i))).unwrap(),
            _ => {}
        }
        if i % 10 == 0 {
            set.write('c', &created_on_c(i), &format!("created {i}"));
        }
    }
    set
}

fn check_old_or_new(set: &Set, trial: usize) {
    for letter in set.letters() {
        for i in 0..FILES {
            let now = set.read(letter, &name(i));
            let allowed = [Some(original(i)), final_of(i)];
            assert!(
                allowed.contains(&now),
                "trial {trial}: {letter}/{} holds neither its old nor its new contents",
                name(i)
            );
        }
    }
}

fn check_converged(set: &Set, trial: usize) {
    for letter in set.letters() {
        for i in 0..FILES {
            assert_eq!(set.read(letter, &name(i)), final_of(i), "trial {trial}");
            if i % 10 == 0 {
                assert!(set.path(letter, &created_on_c(i)).exists(), "trial {trial}");
            }
        }
    }
    set.assert_all_equal();
}

fn next_random(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}

/// Run `child`, killing it `delay` after `started` unless it ends first;
/// whether it was killed mid-way.
fn kill_after(child: &mut std::process::Child, started: Instant, delay: Duration) -> bool {
    while started.elapsed() < delay {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let killed = child.try_wait().unwrap().is_none();
    if killed {
        child.kill().ok();
    }
    child.wait().unwrap();
    killed
}

#[test]
fn killed_runs_leave_every_file_old_or_new_everywhere_and_the_next_run_converges() {
    let trials = kill_trials();
    let killed_midway = run_kill_trials(
        KillTrials {
            trials,
            seed: 0x5e7,
            args: &[],
            prepare: prepared_set,
            old_or_new: check_old_or_new,
            converged: check_converged,
        },
        "false conflicts",
    );
    eprintln!("{killed_midway} of {trials} runs were killed before they finished");
    assert!(killed_midway * 2 >= trials, "too few runs were interrupted");
}

/// How many runs a kill test kills (`ACCORD_SYNC_SET_KILL_TRIALS`, 50).
fn kill_trials() -> usize {
    std::env::var("ACCORD_SYNC_SET_KILL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50)
}

/// A kill test: sets made by `prepare`, each synced with `args` and killed
/// at a random moment of an uninterrupted run's time, then checked
/// (`old_or_new`), synced again (no conflict), checked (`converged`) and
/// synced once more (no change).
struct KillTrials<'a> {
    trials: usize,
    seed: u64,
    args: &'a [&'a str],
    prepare: fn() -> Set,
    old_or_new: fn(&Set, usize),
    converged: fn(&Set, usize),
}

/// Run `kill`; how many runs were killed before they finished.
fn run_kill_trials(kill: KillTrials<'_>, conflicts_are: &str) -> usize {
    let timing = (kill.prepare)();
    let start = Instant::now();
    timing.sync_json(kill.args, 0);
    let mut full_run = start.elapsed();
    (kill.converged)(&timing, usize::MAX);
    eprintln!("an uninterrupted run took {full_run:?}");
    let mut random = kill.seed ^ u64::from(std::process::id());
    let mut killed_midway = 0;
    let mut with_json = vec!["--json"];
    with_json.extend_from_slice(kill.args);
    for trial in 0..kill.trials {
        let set = (kill.prepare)();
        let delay = full_run.mul_f64((next_random(&mut random) % 1000) as f64 / 1000.0);
        let started = Instant::now();
        let mut child = set
            .command(&with_json)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        if kill_after(&mut child, started, delay) {
            killed_midway += 1;
        } else {
            // The machine got faster: aim the next kills earlier.
            full_run = full_run.min(started.elapsed());
        }
        (kill.old_or_new)(&set, trial);
        let report = set.sync_json(kill.args, 0);
        assert!(
            conflict_paths(&report).is_empty(),
            "trial {trial}: {conflicts_are} after a kill at {delay:?}: {report}"
        );
        (kill.converged)(&set, trial);
        let again = set.sync_json(&[], 0);
        assert_eq!(changes(&again), 0, "trial {trial}: {again}");
    }
    killed_midway
}

// ---- Kill test with --keep-both ----

const KEPT_FILES: usize = 60;

fn kept_file(i: usize) -> String {
    format!("k/f{i:02}")
}

/// What root `letter` makes of kept file `i`.
fn edit_of(letter: char, i: usize) -> String {
    format!("edited on {letter}, file {i} ").repeat(500)
}

/// Every kept file edited differently on A, B and C (C's the newest).
fn prepared_keep_set() -> Set {
    let set = Set::new(3);
    for i in 0..KEPT_FILES {
        set.write('a', &kept_file(i), "base");
    }
    set.sync_json(&[], 0);
    for i in 0..KEPT_FILES {
        for (letter, time, _) in TIMES {
            set.write(letter, &kept_file(i), &edit_of(letter, i));
            set_mtime(&set.path(letter, &kept_file(i)), time);
        }
    }
    set
}

/// On every root each file holds its own edit or the winner's, and each
/// root's own edit is still there under the name or its kept name.
fn check_kept_old_or_new(set: &Set, trial: usize) {
    for letter in set.letters() {
        for i in 0..KEPT_FILES {
            let now = set.read(letter, &kept_file(i));
            let allowed = [Some(edit_of(letter, i)), Some(edit_of('c', i))];
            assert!(allowed.contains(&now), "trial {trial}: {letter}/f{i}");
            for loser in ['a', 'b'] {
                let kept = set.read(letter, &kept_name(&kept_file(i), loser));
                assert!(
                    kept.is_none() || kept == Some(edit_of(loser, i)),
                    "trial {trial}: {letter}'s copy of {loser}'s f{i}"
                );
            }
            if letter != 'c' {
                let own = Some(edit_of(letter, i));
                let kept = set.read(letter, &kept_name(&kept_file(i), letter));
                assert!(
                    now == own || kept == own,
                    "trial {trial}: {letter}'s f{i} lost"
                );
            }
        }
    }
}

/// The winner under every name, each loser kept once, on every root.
fn check_kept_converged(set: &Set, trial: usize) {
    for letter in set.letters() {
        let names = std::fs::read_dir(set.path(letter, "k")).unwrap().count();
        assert_eq!(
            names,
            3 * KEPT_FILES,
            "trial {trial}: a version kept twice on {letter}"
        );
        for i in 0..KEPT_FILES {
            let at = kept_file(i);
            assert_eq!(
                set.read(letter, &at),
                Some(edit_of('c', i)),
                "trial {trial}"
            );
            for loser in ['a', 'b'] {
                let kept = set.read(letter, &kept_name(&at, loser));
                assert_eq!(kept, Some(edit_of(loser, i)), "trial {trial}: {letter}");
            }
        }
    }
    set.assert_all_equal();
}

#[test]
fn killed_keep_both_runs_lose_no_version_and_the_next_run_keeps_each_once() {
    let trials = kill_trials() / 2;
    let killed_midway = run_kill_trials(
        KillTrials {
            trials,
            seed: 0x6b65,
            args: &["--keep-both"],
            prepare: prepared_keep_set,
            old_or_new: check_kept_old_or_new,
            converged: check_kept_converged,
        },
        "conflicts",
    );
    eprintln!("{killed_midway} of {trials} keep-both runs were killed before they finished");
    assert!(killed_midway * 2 >= trials, "too few runs were interrupted");
}

// ---- --merge ----

/// Concatenates its two versions, and logs the names of the files it was
/// given (in the log file `log`, outside every root).
fn logging_concat(log: &Path) -> String {
    format!(
        "basename CURRENT1 >> '{log}'; basename CURRENT2 >> '{log}'; cat CURRENT1 CURRENT2 > NEW",
        log = log.display()
    )
}

fn log_of(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines().map(str::to_owned).collect()
}

/// A synced set of `count` holding `f` and `other`, then `f` written on
/// each root of `edits` (to its contents there).
fn edited(count: usize, edits: &[(char, &str)]) -> Set {
    let set = Set::new(count);
    set.write('a', "f", "base\n");
    set.write('a', "other", "untouched\n");
    set.sync_json(&[], 0);
    for (letter, contents) in edits {
        set.write(*letter, "f", contents);
    }
    set
}

fn actions(report: &serde_json::Value) -> Vec<(String, String, String)> {
    let mut found: Vec<(String, String, String)> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let text = |key: &str| c[key].as_str().unwrap().to_string();
            (text("on"), text("from"), text("action"))
        })
        .collect();
    found.sort();
    found
}

#[test]
fn merge_gives_two_versions_to_the_program_in_the_order_written() {
    // A and C made the same edit, B another: two versions, A's first.
    let set = edited(
        3,
        &[('b', "from b\n"), ('a', "from a\n"), ('c', "from a\n")],
    );
    let log = set.state.with_file_name("log");
    let program = logging_concat(&log);
    let out = set.sync(&["--merge", &program]);
    assert_exit(&out, 0);
    let text = String::from_utf8_lossy(&out.stdout);
    for line in ["merged on A    f", "merged on B    f", "merged A -> C  f"] {
        assert!(text.contains(line), "{line:?} not in {text}");
    }
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 merged"));
    assert_eq!(log_of(&log), ["A-f", "B-f"]);
    for letter in set.letters() {
        assert_eq!(set.read(letter, "f").as_deref(), Some("from a\nfrom b\n"));
    }
    set.assert_all_equal();
    let again = set.sync_json(&["--merge", &program], 0);
    assert_eq!(changes(&again), 0, "{again}");
    assert_eq!(log_of(&log).len(), 2, "the program ran again");
}

#[test]
fn more_versions_are_folded_in_the_order_of_their_first_holders() {
    // D's edit is older in time but its root comes last; B holds the
    // base, older than every edit, and takes the result.
    let set = edited(
        4,
        &[('d', "from d\n"), ('c', "from c\n"), ('a', "from a\n")],
    );
    let log = set.state.with_file_name("log");
    let report = set.sync_json(&["--merge", &logging_concat(&log)], 0);
    assert_eq!(report["merged"], 1, "{report}");
    assert!(conflict_paths(&report).is_empty(), "{report}");
    assert_eq!(log_of(&log), ["A-f", "C-f", "AC-f", "D-f"]);
    let merged = "from a\nfrom c\nfrom d\n";
    for letter in set.letters() {
        assert_eq!(set.read(letter, "f").as_deref(), Some(merged), "{letter}");
    }
    let merged_actions = actions(&report);
    assert_eq!(merged_actions.len(), 4, "{report}");
    assert!(merged_actions
        .iter()
        .all(|(_, _, action)| action == "merged"));
    assert_eq!(changes(&set.sync_json(&[], 0)), 0);
}

/// Each root's `f`: contents and inode.
fn files_of(set: &Set) -> Vec<(Option<String>, u64)> {
    set.letters()
        .into_iter()
        .map(|l| {
            let ino = std::fs::metadata(set.path(l, "f")).map_or(0, |m| m.ino());
            (set.read(l, "f"), ino)
        })
        .collect()
}

#[test]
fn a_failing_step_leaves_the_conflict_and_every_version_as_it_was() {
    let set = edited(
        3,
        &[('a', "from a\n"), ('b', "from b\n"), ('c', "from c\n")],
    );
    let before = files_of(&set);
    // The first step succeeds, the second (the result so far with C's)
    // fails.
    let program = "case CURRENT1 in *AB-f) echo second step >&2; exit 3;; esac; \
                   cat CURRENT1 CURRENT2 > NEW";
    let report = set.sync_json(&["--merge", program], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    let why = report["conflicts"][0]["not_merged"].as_str().unwrap();
    assert!(
        why.contains("exited with status 3") && why.contains("second step"),
        "{report}"
    );
    assert_eq!(report["merged"], 0);
    assert_eq!(changes(&report), 0, "{report}");
    assert_eq!(files_of(&set), before);
    let text = set.sync(&["--merge", "exit 3 # NEW"]);
    assert_exit(&text, 1);
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("; merge program exited with status 3"),
        "{}",
        String::from_utf8_lossy(&text.stdout)
    );
    // The next run without a program sees the same conflict.
    let again = set.sync_json(&[], 1);
    assert_eq!(conflict_paths(&again), ["f"]);
    assert_eq!(
        again["conflicts"][0]["versions"].as_array().unwrap().len(),
        3
    );
    assert_eq!(files_of(&set), before);
}

#[test]
fn a_root_away_during_a_merge_takes_the_result_later_without_a_conflict() {
    let set = edited(3, &[('a', "from a\n"), ('b', "from b\n")]);
    let away = set.away('c');
    let report = set.sync_json(&["--merge", "cat CURRENT1 CURRENT2 > NEW"], 4);
    assert_eq!(report["merged"], 1, "{report}");
    set.back('c', &away);
    assert_eq!(set.read('c', "f").as_deref(), Some("base\n"));
    let report = set.sync_json(&[], 0);
    assert!(conflict_paths(&report).is_empty(), "{report}");
    set.assert_all_equal();
    assert_eq!(set.read('c', "f").as_deref(), Some("from a\nfrom b\n"));
    assert_eq!(changes(&set.sync_json(&[], 0)), 0);
}

#[test]
fn only_conflicts_between_files_alike_in_properties_are_given_to_the_program() {
    let mark = |set: &Set| set.state.with_file_name("ran");
    let program = |set: &Set| {
        format!(
            "touch '{}'; cat CURRENT1 CURRENT2 > NEW",
            mark(set).display()
        )
    };
    // A deletion among the latest versions.
    let set = edited(3, &[('a', "from a\n")]);
    std::fs::remove_file(set.path('b', "f")).unwrap();
    let report = set.sync_json(&["--merge", &program(&set)], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    assert!(report["conflicts"][0]["not_merged"].is_null(), "{report}");
    assert!(!mark(&set).exists(), "the program ran: {report}");
    // A directory.
    let set = edited(3, &[('a', "from a\n")]);
    std::fs::remove_file(set.path('b', "f")).unwrap();
    set.write('b', "f/inner", "x");
    let report = set.sync_json(&["--merge", &program(&set)], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    assert!(!mark(&set).exists(), "the program ran: {report}");
    // Permissions that differ: said so.
    let set = edited(3, &[('a', "from a\n"), ('b', "from b\n")]);
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o600);
    std::fs::set_permissions(set.path('b', "f"), mode).unwrap();
    let report = set.sync_json(&["--merge", &program(&set)], 1);
    let why = report["conflicts"][0]["not_merged"].as_str().unwrap();
    assert!(why.contains("permissions"), "{report}");
    assert!(!mark(&set).exists(), "the program ran: {report}");
    assert_eq!(set.read('a', "f").as_deref(), Some("from a\n"));
}

#[test]
fn a_dry_run_lists_the_conflict_and_runs_no_program() {
    let set = edited(3, &[('a', "from a\n"), ('b', "from b\n")]);
    let log = set.state.with_file_name("log");
    let report = set.sync_json(&["-n", "--merge", &logging_concat(&log)], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    assert!(log_of(&log).is_empty(), "the program ran");
    assert_eq!(set.read('c', "f").as_deref(), Some("base\n"));
}

#[test]
fn backup_keeps_every_version_the_merge_replaced() {
    let set = edited(
        3,
        &[('a', "from a\n"), ('b', "from b\n"), ('c', "from c\n")],
    );
    set.sync_json(&["--backup", "--merge", "cat CURRENT1 CURRENT2 > NEW"], 0);
    for letter in set.letters() {
        let backup = set.read(letter, ".accord-backup/f.~1~");
        assert_eq!(backup, Some(format!("from {letter}\n")), "{letter}");
    }
}

#[test]
fn keep_both_decides_before_the_merge() {
    let set = edited(3, &[('a', "from a\n"), ('b', "from b\n")]);
    let report = set.sync_json(
        &["--keep-both", "--merge", "cat CURRENT1 CURRENT2 > NEW"],
        0,
    );
    assert_eq!(report["merged"], 0, "{report}");
    assert_eq!(report["kept_both"], 1, "{report}");
}

// ---- Kill test with --merge ----

const MERGED_FILES: usize = 40;

/// Every merged file edited differently on A, B and C.
fn prepared_merge_set() -> Set {
    let set = Set::new(3);
    for i in 0..MERGED_FILES {
        set.write('a', &kept_file(i), "base");
    }
    set.sync_json(&[], 0);
    for i in 0..MERGED_FILES {
        for letter in ['a', 'b', 'c'] {
            set.write(letter, &kept_file(i), &edit_of(letter, i));
        }
    }
    set
}

fn merge_of(i: usize) -> String {
    ['a', 'b', 'c'].map(|letter| edit_of(letter, i)).concat()
}

fn check_merged_old_or_new(set: &Set, trial: usize) {
    for letter in set.letters() {
        for i in 0..MERGED_FILES {
            let now = set.read(letter, &kept_file(i));
            let allowed = [Some(edit_of(letter, i)), Some(merge_of(i))];
            assert!(allowed.contains(&now), "trial {trial}: {letter}/f{i}");
        }
    }
}

fn check_merged_converged(set: &Set, trial: usize) {
    for letter in set.letters() {
        for i in 0..MERGED_FILES {
            let now = set.read(letter, &kept_file(i));
            assert_eq!(now, Some(merge_of(i)), "trial {trial}: {letter}/f{i}");
        }
    }
    set.assert_all_equal();
}

#[test]
fn killed_merge_runs_leave_old_or_merged_files_and_the_next_run_merges_each_once() {
    let trials = kill_trials() / 2;
    let killed_midway = run_kill_trials(
        KillTrials {
            trials,
            seed: 0x6d72,
            args: &["--merge", "cat CURRENT1 CURRENT2 > NEW"],
            prepare: prepared_merge_set,
            old_or_new: check_merged_old_or_new,
            converged: check_merged_converged,
        },
        "conflicts",
    );
    eprintln!("{killed_midway} of {trials} merge runs were killed before they finished");
    assert!(killed_midway * 2 >= trials, "too few runs were interrupted");
}

// ---- Renames ----

fn ino(set: &Set, letter: char, rel: &str) -> u64 {
    std::fs::symlink_metadata(set.path(letter, rel))
        .unwrap_or_else(|e| panic!("{letter}:{rel}: {e}"))
        .ino()
}

fn mv(set: &Set, letter: char, from: &str, to: &str) {
    let target = set.path(letter, to);
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::rename(set.path(letter, from), target).unwrap();
}

/// The report's changes as `(action, on, path, renamed_from)`.
fn change_list(report: &serde_json::Value) -> Vec<(String, String, String, Option<String>)> {
    let text = |c: &serde_json::Value, key: &str| c[key].as_str().map(str::to_string);
    let changes = report["changes"].as_array().unwrap().iter();
    changes
        .map(|c| {
            let field = |key| text(c, key).unwrap();
            (
                field("action"),
                field("on"),
                field("path"),
                text(c, "renamed_from"),
            )
        })
        .collect()
}

fn rename(on: &str, path: &str, from: &str) -> (String, String, String, Option<String>) {
    ("rename".into(), on.into(), path.into(), Some(from.into()))
}

/// Three roots holding a file `f` of 64 KiB and a tree `tree`.
fn synced_with_tree() -> Set {
    let set = Set::new(3);
    set.write('a', "f", &"the contents of f ".repeat(4000));
    set.write('a', "tree/x", "the contents of x");
    set.write('a', "tree/sub/y", "the contents of y");
    set.sync_json(&[], 0);
    set
}

#[test]
fn a_renamed_file_and_a_moved_tree_reach_the_others_as_renames() {
    let set = synced_with_tree();
    let inodes = |rel: &str| ['b', 'c'].map(|letter| ino(&set, letter, rel));
    let (f_before, y_before) = (inodes("f"), [ino(&set, 'a', "tree/sub/y")]);
    mv(&set, 'a', "f", "g");
    mv(&set, 'b', "tree", "moved/tree");
    let report = set.sync_json(&[], 0);
    assert_eq!(
        change_list(&report),
        [
            rename("B", "g", "f"),
            rename("C", "g", "f"),
            ("copy".into(), "A".into(), "moved".into(), None),
            ("copy".into(), "C".into(), "moved".into(), None),
            rename("A", "moved/tree", "tree"),
            rename("C", "moved/tree", "tree"),
        ],
        "{report}"
    );
    assert_eq!(report["renamed"], 4);
    assert_eq!(report["files_written"], 0, "{report}");
    assert_eq!(
        inodes("g"),
        f_before,
        "the receivers' own files were renamed"
    );
    assert_eq!([ino(&set, 'a', "moved/tree/sub/y")], y_before);
    set.assert_all_equal();
    for letter in set.letters() {
        assert!(!set.path(letter, "f").exists() && !set.path(letter, "tree").exists());
    }
    let again = set.sync_json(&[], 0);
    assert_eq!(changes(&again), 0, "{again}");
}

#[test]
fn a_rename_prints_as_for_two_roots() {
    let set = synced_with_tree();
    mv(&set, 'a', "f", "g");
    let out = set.sync(&[]);
    assert_exit(&out, 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("renamed on B   f -> g"), "{stdout}");
    assert!(stdout.contains("renamed on C   f -> g"), "{stdout}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("2 renamed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_rename_made_while_a_root_was_away_reaches_it_as_a_rename() {
    let set = synced_with_tree();
    let c_before = ino(&set, 'c', "f");
    let away = set.away('c');
    mv(&set, 'a', "f", "g");
    mv(&set, 'a', "tree", "other");
    let first = set.sync_json(&[], 4);
    assert_eq!(first["renamed"], 2, "{first}");
    set.back('c', &away);
    let report = set.sync_json(&[], 0);
    assert_eq!(
        change_list(&report),
        [rename("C", "g", "f"), rename("C", "other", "tree")],
        "{report}"
    );
    assert_eq!(ino(&set, 'c', "g"), c_before);
    set.assert_all_equal();
    let again = set.sync_json(&[], 0);
    assert_eq!(changes(&again), 0, "{again}");
}

#[test]
fn a_rename_of_a_file_a_receiver_changed_is_a_conflict_and_a_copy() {
    let set = synced_with_tree();
    let c_before = ino(&set, 'c', "f");
    mv(&set, 'a', "f", "g");
    set.write('b', "f", "changed on b");
    let report = set.sync_json(&[], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    assert_eq!(
        change_list(&report),
        [
            ("copy".into(), "B".into(), "g".into(), None),
            ("copy".into(), "C".into(), "g".into(), None),
        ],
        "{report}"
    );
    assert_eq!(ino(&set, 'c', "f"), c_before, "C's f is left alone");
    assert_eq!(set.read('b', "f").as_deref(), Some("changed on b"));
    assert_eq!(set.read('c', "g"), set.read('a', "g"));
}

#[test]
fn no_renames_carries_a_rename_as_a_copy_and_a_deletion() {
    let set = synced_with_tree();
    mv(&set, 'a', "f", "g");
    let report = set.sync_json(&["--no-renames"], 0);
    assert_eq!(report["renamed"], 0, "{report}");
    assert_eq!(report["files_written"], 2, "{report}");
    set.assert_all_equal();
}

// ---- Kill test with renames ----

/// Where A renames file `i` of the kill test: every other one outside
/// `d4` (which B moves), some into another directory.
fn renamed_name(i: usize) -> Option<String> {
    (i.is_multiple_of(2) && i % 5 != 4).then(|| format!("d{}/r{i:03}", (i / 2) % 4))
}

/// The kill test's files, synced; then A renames every other file and B
/// moves the directory `d4`.
fn prepared_rename_set() -> Set {
    let set = Set::new(3);
    for i in 0..FILES {
        set.write('a', &name(i), &original(i));
    }
    set.sync_json(&[], 0);
    for i in 0..FILES {
        if let Some(to) = renamed_name(i) {
            mv(&set, 'a', &name(i), &to);
        }
    }
    mv(&set, 'b', "d4", "moved/d4");
    set
}

/// Where file `i` ends: its new name, under `moved/` if it is in `d4`.
fn final_name(i: usize) -> String {
    let at = renamed_name(i).unwrap_or_else(|| name(i));
    match at.starts_with("d4/") {
        true => format!("moved/{at}"),
        false => at,
    }
}

/// Every name file `i` may have on a root mid-way, its final one first.
fn names_of(i: usize) -> Vec<String> {
    let mut names = vec![final_name(i), name(i)];
    names.extend(renamed_name(i));
    names.extend([format!("moved/{}", name(i))]);
    names.dedup();
    names
}

fn check_renamed_old_or_new(set: &Set, trial: usize) {
    for letter in set.letters() {
        for i in 0..FILES {
            let held: Vec<String> = names_of(i)
                .iter()
                .filter_map(|at| set.read(letter, at))
                .collect();
            assert!(
                !held.is_empty() && held.iter().all(|c| *c == original(i)),
                "trial {trial}: {letter} lost file {i} (or changed it)"
            );
        }
    }
}

fn check_renamed_converged(set: &Set, trial: usize) {
    for letter in set.letters() {
        for i in 0..FILES {
            for at in names_of(i) {
                let expected = (at == final_name(i)).then(|| original(i));
                assert_eq!(set.read(letter, &at), expected, "trial {trial}: {at}");
            }
        }
    }
    set.assert_all_equal();
}

#[test]
fn killed_runs_with_renames_lose_no_file_and_the_next_run_converges() {
    let trials = kill_trials() / 2;
    let killed_midway = run_kill_trials(
        KillTrials {
            trials,
            seed: 0x7e4a,
            args: &[],
            prepare: prepared_rename_set,
            old_or_new: check_renamed_old_or_new,
            converged: check_renamed_converged,
        },
        "false conflicts",
    );
    eprintln!("{killed_midway} of {trials} runs with renames were killed before they finished");
    assert!(killed_midway * 2 >= trials, "too few runs were interrupted");
}

// ---- Hard links ----

#[test]
fn a_new_hard_link_group_reaches_the_others_as_links() {
    let set = synced_with_tree();
    set.write('a', "group/g", &"the group's contents ".repeat(2000));
    std::fs::hard_link(set.path('a', "group/g"), set.path('a', "group/h")).unwrap();
    std::fs::hard_link(set.path('a', "group/g"), set.path('a', "tree/g2")).unwrap();
    let report = set.sync_json(&[], 0);
    assert_eq!(
        report["files_written"], 2,
        "one copy per receiver: {report}"
    );
    assert_eq!(report["linked"], 4, "{report}");
    let links: Vec<(String, String, String)> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["linked_to"].is_string())
        .map(|c| {
            let text = |key: &str| c[key].as_str().unwrap().to_string();
            (text("on"), text("path"), text("linked_to"))
        })
        .collect();
    assert_eq!(links.len(), 4, "{report}");
    for letter in ['b', 'c'] {
        let inodes = ["group/g", "group/h", "tree/g2"].map(|rel| ino(&set, letter, rel));
        assert!(
            inodes.iter().all(|&i| i == inodes[0]),
            "{letter}: {inodes:?}"
        );
        let nlink = std::fs::metadata(set.path(letter, "group/g"))
            .unwrap()
            .nlink();
        assert_eq!(nlink, 3, "{letter}");
    }
    assert_ne!(ino(&set, 'b', "group/g"), ino(&set, 'c', "group/g"));
    set.assert_all_equal();
    set.sync_json(&[], 0);
    let again = set.sync_json(&[], 0);
    assert_eq!(changes(&again), 0, "{again}");
    let unlinked = set.sync_json(&["--no-hard-links"], 0);
    assert_eq!(changes(&unlinked), 0, "{unlinked}");
}

#[test]
fn no_hard_links_copies_each_name_of_a_group() {
    let set = synced_with_tree();
    set.write('a', "g", "the group's contents");
    std::fs::hard_link(set.path('a', "g"), set.path('a', "h")).unwrap();
    let report = set.sync_json(&["--no-hard-links"], 0);
    assert_eq!(report["linked"], 0, "{report}");
    assert_eq!(report["files_written"], 4, "{report}");
    assert_ne!(ino(&set, 'b', "g"), ino(&set, 'b', "h"));
}
