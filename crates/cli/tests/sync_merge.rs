//! `accord sync --merge CMD` (issue 12): a conflict between two regular
//! files is given to an external program, run on the client's host; its
//! result becomes the file on both sides, written with the crash invariant
//! and recorded, so the next run is a no-op. A failing program, one that
//! writes no NEW, one killed at the time limit, a side written while the
//! program runs, leave both sides as they were. Conflicts of other kinds
//! are never given to the program.
//!
//! The scenarios that touch the remote side run with both roots local,
//! with B over ssh and with B from an `accord server` daemon.

mod mirror_common;
mod remote_common;
#[macro_use]
mod sync_common;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use sync_common::*;

type MakePair<'a> = &'a dyn Fn() -> Pair;

const CONCAT: &str = "cat CURRENT1 CURRENT2 > NEW";

/// A synced pair holding `f` (and `dir/x`).
fn synced(make: MakePair) -> Pair {
    let pair = make();
    pair.write('a', "f", "base\n");
    pair.write('a', "dir/x", "x\n");
    pair.sync_json(&[], 0);
    pair.assert_equal();
    pair
}

/// `f` edited differently on both sides.
fn conflict_on_f(pair: &Pair) {
    pair.write('a', "f", "from A\n");
    pair.write('b', "f", "from B\n");
}

/// The file's bytes and inode on both sides, to show nothing changed.
fn state_of(pair: &Pair, rel: &str) -> [(Vec<u8>, u64); 2] {
    ['a', 'b'].map(|side| {
        let path = pair.path(side, rel);
        let bytes = std::fs::read(&path).unwrap();
        (bytes, std::fs::metadata(&path).unwrap().ino())
    })
}

/// The conflicts of a report, as (path, not_merged) pairs.
fn conflicts(report: &serde_json::Value) -> Vec<(String, Option<String>)> {
    report["conflicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let why = c["not_merged"].as_str().map(str::to_owned);
            (c["path"].as_str().unwrap().to_owned(), why)
        })
        .collect()
}

fn assert_no_op(pair: &Pair) {
    let again = pair.sync_json(&[], 0);
    assert_eq!(again["propagated"], 0, "{again}");
    assert!(conflicts(&again).is_empty(), "{again}");
}

/// No temp file or partial left in a root's directory.
fn assert_no_temps(pair: &Pair, rel_dir: &str) {
    for side in ['a', 'b'] {
        for entry in std::fs::read_dir(pair.path(side, rel_dir)).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            assert!(!name.starts_with(".accord"), "{side}: {name} left behind");
        }
    }
}

// ---- a merge that succeeds -------------------------------------------------

fn concatenation_on_both_sides(make: MakePair) {
    let pair = synced(make);
    conflict_on_f(&pair);
    let report = pair.sync_json(&["--merge", CONCAT], 0);
    assert_eq!(report["propagated"], 1, "{report}");
    assert_eq!(report["merged"], 1, "{report}");
    assert_eq!(report["changes"][0]["path"], "f", "{report}");
    assert_eq!(report["changes"][0]["action"], "merged", "{report}");
    assert!(conflicts(&report).is_empty(), "{report}");
    for side in ['a', 'b'] {
        assert_eq!(pair.read(side, "f").as_deref(), Some("from A\nfrom B\n"));
    }
    pair.assert_equal();
    assert_no_temps(&pair, "");
    assert_no_op(&pair);
    // And with --merge again: nothing to merge.
    let again = pair.sync_json(&["--merge", CONCAT], 0);
    assert_eq!(again["propagated"], 0, "{again}");
}

local_and_remote!(concatenation_on_both_sides:
    a_merge_ends_with_the_concatenation_local,
    a_merge_ends_with_the_concatenation_ssh,
    a_merge_ends_with_the_concatenation_daemon);

#[test]
fn the_text_output_says_merged_and_path_names_the_file() {
    let pair = synced(&Pair::new);
    pair.write('a', "dir/x", "one\n");
    pair.write('b', "dir/x", "two\n");
    let out = pair.sync(&["--merge", "printf '%s\\n' PATH > NEW"]);
    assert_exit(&out, 0);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("merged         dir/x"), "{stdout}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 merged"), "{stderr}");
    for side in ['a', 'b'] {
        assert_eq!(pair.read(side, "dir/x").as_deref(), Some("dir/x\n"));
    }
}

#[test]
fn the_copies_are_read_only_and_named_after_the_file() {
    let pair = synced(&Pair::new);
    conflict_on_f(&pair);
    // The program fails unless its copies are what they should be: mode
    // 0400 (root could write them anyway), named after the file, and NEW
    // not made yet.
    let program = "test \"$(stat -c %a CURRENT1 CURRENT2)\" = \"$(printf '400\\n400')\" \
                   && test ! -e NEW \
                   && case CURRENT1 in */A-f) ;; *) exit 9;; esac \
                   && basename NEW > NEW";
    let report = pair.sync_json(&["--merge", program], 0);
    assert_eq!(report["merged"], 1, "{report}");
    assert_eq!(pair.read('a', "f").as_deref(), Some("NEW-f\n"));
    pair.assert_equal();
}

#[test]
fn with_times_both_sides_take_the_merge_mtime() {
    let pair = synced(&Pair::new);
    conflict_on_f(&pair);
    set_mtime(&pair.path('a', "f"), 1_000_000_000);
    set_mtime(&pair.path('b', "f"), 1_100_000_000);
    let program = "cat CURRENT2 CURRENT1 > NEW && touch -d @1200000000 NEW";
    let report = pair.sync_json(&["--times", "--merge", program], 0);
    assert_eq!(report["merged"], 1, "{report}");
    for side in ['a', 'b'] {
        let meta = std::fs::metadata(pair.path(side, "f")).unwrap();
        assert_eq!(meta.mtime(), 1_200_000_000, "{side}");
        assert_eq!(pair.read(side, "f").as_deref(), Some("from B\nfrom A\n"));
    }
    let again = pair.sync_json(&["--times"], 0);
    assert_eq!(again["propagated"], 0, "{again}");
}

fn backups_keep_both_old_versions(make: MakePair) {
    let pair = synced(make);
    conflict_on_f(&pair);
    let report = pair.sync_json(&["--backup", "--merge", CONCAT], 0);
    assert_eq!(report["merged"], 1, "{report}");
    assert_eq!(
        pair.read('a', ".accord-backup/f.~1~").as_deref(),
        Some("from A\n")
    );
    assert_eq!(
        pair.read('b', ".accord-backup/f.~1~").as_deref(),
        Some("from B\n")
    );
    pair.assert_equal();
    assert_no_op(&pair);
}

local_and_remote!(backups_keep_both_old_versions:
    with_backup_both_old_versions_are_kept_local,
    with_backup_both_old_versions_are_kept_ssh,
    with_backup_both_old_versions_are_kept_daemon);

#[test]
fn a_profile_names_the_merge_program() {
    let pair = synced(&Pair::new);
    conflict_on_f(&pair);
    let config = tempfile::tempdir().unwrap();
    std::fs::create_dir(config.path().join("accord")).unwrap();
    let text = format!(
        "roots = [{:?}, {:?}]\nbatch = true\njson = true\nmerge = {:?}\n",
        pair.root('a').display().to_string(),
        pair.root('b').display().to_string(),
        CONCAT
    );
    std::fs::write(config.path().join("accord/pair.toml"), text).unwrap();
    let out = std::process::Command::new(bin())
        .args(["sync", "pair"])
        .env("XDG_CONFIG_HOME", config.path())
        .env("ACCORD_STATE_DIR", &pair.state)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["merged"], 1, "{report}");
    assert_eq!(pair.read('b', "f").as_deref(), Some("from A\nfrom B\n"));
}

// ---- a merge that fails: nothing changes -----------------------------------

/// Run `program` over the conflict on `f`: exit 1, both sides as before,
/// the conflict reported with `why` in its reason.
fn fails_and_changes_nothing(pair: &Pair, args: &[&str], why: &[&str]) {
    let before = state_of(pair, "f");
    let report = pair.sync_json(args, 1);
    assert_eq!(report["propagated"], 0, "{report}");
    let found = conflicts(&report);
    assert_eq!(found.len(), 1, "{report}");
    assert_eq!(found[0].0, "f");
    let said = found[0].1.clone().unwrap_or_default();
    for word in why {
        assert!(said.contains(word), "{word:?} not in {said:?}");
    }
    assert_eq!(state_of(pair, "f"), before, "a side changed");
    assert_no_temps(pair, "");
}

fn failing_programs_change_nothing(make: MakePair) {
    let pair = synced(make);
    conflict_on_f(&pair);
    let exit_1 = "echo 'merge: cannot merge these' >&2; echo second line >&2; exit 1; true NEW";
    fails_and_changes_nothing(
        &pair,
        &["--merge", exit_1],
        &[
            "exited with status 1",
            "merge: cannot merge these",
            "second line",
        ],
    );
    fails_and_changes_nothing(
        &pair,
        &["--merge", "echo done; true NEW"],
        &["wrote no NEW", "done"],
    );
    // Written, then a failure: the partial NEW is not taken.
    fails_and_changes_nothing(
        &pair,
        &["--merge", "cat CURRENT1 > NEW; exit 2"],
        &["exited with status 2"],
    );
    // The conflict is still there for a plain run.
    let plain = pair.sync_json(&[], 1);
    assert_eq!(conflicts(&plain).len(), 1, "{plain}");
}

local_and_remote!(failing_programs_change_nothing:
    a_failing_merge_changes_nothing_local,
    a_failing_merge_changes_nothing_ssh,
    a_failing_merge_changes_nothing_daemon);

#[test]
fn a_program_past_its_time_limit_is_killed() {
    let pair = synced(&Pair::new);
    conflict_on_f(&pair);
    let start = std::time::Instant::now();
    fails_and_changes_nothing(
        &pair,
        &[
            "--merge-timeout",
            "1",
            "--merge",
            "sleep 60; cat CURRENT1 > NEW",
        ],
        &["killed after 1 s"],
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
}

#[test]
fn a_result_that_is_a_symlink_or_directory_is_refused() {
    let pair = synced(&Pair::new);
    conflict_on_f(&pair);
    fails_and_changes_nothing(&pair, &["--merge", "ln -s CURRENT1 NEW"], &["wrote no NEW"]);
    fails_and_changes_nothing(&pair, &["--merge", "mkdir NEW"], &["wrote no NEW"]);
}

#[test]
fn bad_commands_are_refused_before_anything() {
    let pair = synced(&Pair::new);
    conflict_on_f(&pair);
    let before = state_of(&pair, "f");
    for (program, says) in [
        (
            "diff3 -m CURRENT1 CURRENTARCH CURRENT2 > NEW",
            "CURRENTARCH",
        ),
        ("cat CURRENT1 CURRENT2 > OUT", "must name NEW"),
    ] {
        let out = pair.sync(&["--merge", program]);
        assert_exit(&out, 64);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{err}");
    }
    let out = pair.sync(&["--merge-timeout", "5"]);
    assert_exit(&out, 64);
    assert_eq!(state_of(&pair, "f"), before);
}

// ---- a side written while the program runs ---------------------------------

/// The program writes to `side`'s file in the root, then writes NEW: the
/// re-check finds it changed, nothing is overwritten, and the next run sees
/// the conflict with what was written.
fn a_side_written_meanwhile(make: MakePair, side: char) {
    let pair = synced(make);
    conflict_on_f(&pair);
    let target = pair.path(side, "f");
    let quoted = shell_quoted(&target);
    let program = format!("echo written meanwhile >> {quoted}; cat CURRENT1 CURRENT2 > NEW");
    let report = pair.sync_json(&["--merge", &program], 2);
    assert_eq!(report["propagated"], 0, "{report}");
    let errors = report["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{report}");
    assert_eq!(errors[0]["path"], "f", "{report}");
    let error = errors[0]["error"].as_str().unwrap();
    assert!(error.contains("changed during sync"), "{error}");
    assert_eq!(conflicts(&report).len(), 1, "{report}");
    let (written, other) = if side == 'a' {
        ("from A\nwritten meanwhile\n", ('b', "from B\n"))
    } else {
        ("from B\nwritten meanwhile\n", ('a', "from A\n"))
    };
    assert_eq!(pair.read(side, "f").as_deref(), Some(written));
    assert_eq!(pair.read(other.0, "f").as_deref(), Some(other.1));
    assert_no_temps(&pair, "");
    let next = pair.sync_json(&[], 1);
    assert_eq!(conflicts(&next).len(), 1, "{next}");
    assert_eq!(pair.read(side, "f").as_deref(), Some(written));
}

fn a_written_side_a(make: MakePair) {
    a_side_written_meanwhile(make, 'a');
}

fn a_written_side_b(make: MakePair) {
    a_side_written_meanwhile(make, 'b');
}

local_and_remote!(a_written_side_a:
    a_written_a_is_not_overwritten_local,
    a_written_a_is_not_overwritten_ssh,
    a_written_a_is_not_overwritten_daemon);

local_and_remote!(a_written_side_b:
    a_written_b_is_not_overwritten_local,
    a_written_b_is_not_overwritten_ssh,
    a_written_b_is_not_overwritten_daemon);

fn shell_quoted(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', "'\\''"))
}

// ---- what is never merged ---------------------------------------------------

/// A program that leaves a mark when it runs (and merges).
fn marking_program(mark: &Path) -> String {
    format!("touch {}; cat CURRENT1 CURRENT2 > NEW", shell_quoted(mark))
}

fn other_conflicts_are_not_merged(make: MakePair) {
    let pair = make();
    pair.write('a', "edit-del", "base\n");
    pair.write('a', "dir-file/inner", "base\n");
    pair.write('a', "links", "base\n");
    pair.sync_json(&[], 0);
    // Deleted on A, edited on B.
    std::fs::remove_file(pair.path('a', "edit-del")).unwrap();
    pair.write('b', "edit-del", "edited\n");
    // A directory on A, a file on B.
    std::fs::remove_dir_all(pair.path('b', "dir-file")).unwrap();
    pair.write('b', "dir-file", "now a file\n");
    pair.write('a', "dir-file/inner", "edited\n");
    // Two different symlinks.
    std::fs::remove_file(pair.path('a', "links")).unwrap();
    std::fs::remove_file(pair.path('b', "links")).unwrap();
    std::os::unix::fs::symlink("to-a", pair.path('a', "links")).unwrap();
    std::os::unix::fs::symlink("to-b", pair.path('b', "links")).unwrap();
    let before = [snapshot(&pair.a), snapshot(&pair.b)];
    let marks = tempfile::tempdir().unwrap();
    let mark = marks.path().join("ran");
    let report = pair.sync_json(&["--merge", &marking_program(&mark)], 1);
    assert!(!mark.exists(), "the program was run: {report}");
    let found = conflicts(&report);
    let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(paths, ["dir-file", "edit-del", "links"], "{report}");
    assert!(found.iter().all(|(_, why)| why.is_none()), "{report}");
    assert_eq!([snapshot(&pair.a), snapshot(&pair.b)], before);
}

local_and_remote!(other_conflicts_are_not_merged:
    other_conflicts_are_never_merged_local,
    other_conflicts_are_never_merged_ssh,
    other_conflicts_are_never_merged_daemon);

#[test]
fn files_whose_permissions_differ_are_not_merged() {
    let pair = synced(&Pair::new);
    conflict_on_f(&pair);
    pair.chmod('a', "f", 0o600);
    let marks = tempfile::tempdir().unwrap();
    let mark = marks.path().join("ran");
    fails_and_changes_nothing(
        &pair,
        &["--merge", &marking_program(&mark)],
        &["not merged", "permissions"],
    );
    assert!(!mark.exists());
    // Once they agree, it merges.
    pair.chmod('b', "f", 0o600);
    let report = pair.sync_json(&["--merge", CONCAT], 0);
    assert_eq!(report["merged"], 1, "{report}");
    assert_eq!(pair.mode('a', "f"), 0o600);
    assert_eq!(pair.mode('b', "f"), 0o600);
    pair.assert_equal();
}

#[test]
fn prefer_and_keep_both_decide_before_the_merge() {
    let pair = synced(&Pair::new);
    conflict_on_f(&pair);
    let marks = tempfile::tempdir().unwrap();
    let mark = marks.path().join("ran");
    let report = pair.sync_json(&["--prefer", "A", "--merge", &marking_program(&mark)], 0);
    assert!(!mark.exists(), "{report}");
    assert_eq!(pair.read('b', "f").as_deref(), Some("from A\n"));
}

#[test]
fn several_conflicts_are_merged_and_one_failure_keeps_its_own() {
    let pair = synced(&Pair::new);
    for name in ["one", "two", "bad"] {
        pair.write('a', name, "base\n");
    }
    pair.sync_json(&[], 0);
    for name in ["one", "two", "bad"] {
        pair.write('a', name, &format!("{name} on A\n"));
        pair.write('b', name, &format!("{name} on B\n"));
    }
    // The program refuses the file named bad.
    let program = "case PATH in bad) echo refused >&2; exit 5;; esac; cat CURRENT1 CURRENT2 > NEW";
    let report = pair.sync_json(&["--merge", program], 1);
    assert_eq!(report["merged"], 2, "{report}");
    let found = conflicts(&report);
    assert_eq!(found.len(), 1, "{report}");
    assert_eq!(found[0].0, "bad");
    assert!(found[0].1.as_deref().unwrap().contains("refused"));
    assert_eq!(
        pair.read('b', "one").as_deref(),
        Some("one on A\none on B\n")
    );
    assert_eq!(
        pair.read('a', "two").as_deref(),
        Some("two on A\ntwo on B\n")
    );
    assert_eq!(pair.read('a', "bad").as_deref(), Some("bad on A\n"));
    assert_eq!(pair.read('b', "bad").as_deref(), Some("bad on B\n"));
}

// ---- a run killed during a merge --------------------------------------------

fn process_gone(pid: i32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

/// accord killed (SIGKILL) while its program runs: the program dies with
/// it, neither side changed, and the next merge removes the copies the
/// killed run left in the temp directory, then merges.
#[test]
fn a_run_killed_during_a_merge_changes_nothing_and_its_program_dies() {
    let pair = synced(&Pair::new);
    conflict_on_f(&pair);
    let before = state_of(&pair, "f");
    let tmp = tempfile::tempdir().unwrap();
    let pid_file = tmp.path().join("program.pid");
    let program = format!("echo $$ > {}; exec sleep 60 # NEW", shell_quoted(&pid_file));
    let mut run = pair
        .command(&["--merge", &program])
        .env("TMPDIR", tmp.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let pid = loop {
        let text = std::fs::read_to_string(&pid_file).unwrap_or_default();
        if let Ok(pid) = text.trim().parse::<i32>() {
            break pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the program never ran"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    run.kill().unwrap();
    run.wait().unwrap();
    while !process_gone(pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "the merge program outlived accord"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(state_of(&pair, "f"), before);
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("accord-merge-"))
        .collect();
    assert_eq!(left.len(), 1, "the killed run's copies: {left:?}");

    let out = pair
        .command(&["--json", "--merge", CONCAT])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert_eq!(pair.read('b', "f").as_deref(), Some("from A\nfrom B\n"));
    let left = std::fs::read_dir(tmp.path())
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("accord-merge-")
        })
        .count();
    assert_eq!(left, 0, "stale merge directories were not removed");
    assert_no_op(&pair);
}
