//! What a Unison user types works on `accord sync`: Unison's single-dash
//! options where they mean what ours mean, a clear refusal naming what to
//! use where they do not; `-n/--dry-run` that changes nothing, not even
//! the archives; `--path` (Unison's `-path`) that syncs only some
//! subtrees; and a missing root refused alike whether local or remote.

mod mirror_common;
mod remote_common;
#[macro_use]
mod sync_common;
use std::collections::BTreeMap;
use std::path::Path;
use sync_common::*;

type MakePair<'a> = &'a dyn Fn() -> Pair;

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every file under `dir` with its contents (the state directory).
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        out.insert(name, std::fs::read(entry.path()).unwrap_or_default());
    }
    out
}

#[test]
fn unison_options_mean_what_they_mean_to_unison() {
    let pair = Pair::new();
    pair.write('a', "docs/guide.txt", "guide\n");
    pair.write('a', "src/main.c", "main\n");
    pair.write('a', "build/x.o", "object\n");
    pair.write('a', "top.txt", "top\n");
    // -batch is ours already (the helper passes --batch); Unison's words:
    let out = pair
        .command(&[
            "-batch", "-auto", "-ignore", "Name *.o", "-path", "docs", "-path", "build", "-times",
        ])
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert_eq!(pair.read('b', "docs/guide.txt").as_deref(), Some("guide\n"));
    assert!(!pair.exists('b', "build/x.o"), "-ignore 'Name *.o'");
    assert!(pair.exists('b', "build"), "-path build");
    assert!(!pair.exists('b', "src"), "outside every -path");
    assert!(!pair.exists('b', "top.txt"), "outside every -path");

    // -prefer names a root as written, as Unison's does.
    pair.sync_json(&[], 0);
    pair.write('a', "top.txt", "from a\n");
    pair.write('b', "top.txt", "from b\n");
    let b = pair.b.display().to_string();
    let out = pair.command(&["-prefer", &b]).output().unwrap();
    assert_exit(&out, 0);
    assert_eq!(pair.read('a', "top.txt").as_deref(), Some("from b\n"));
}

#[test]
fn unison_options_that_are_not_ours_say_what_to_use() {
    let pair = Pair::new();
    for (words, says) in [
        (&["-silent"][..], "-q prints only conflicts and errors"),
        (&["-ui", "text"], "--batch asks nothing"),
        (&["-repeat", "60"], "--watch"),
        (&["-ignore", "Regex .*\\.o"], "gitignore"),
        (&["-frobnicate"], "accord sync --help"),
        (&["-checksum"], "(--checksum)"),
    ] {
        let out = pair.command(words).output().unwrap();
        assert_exit(&out, 64);
        let e = stderr(&out);
        assert!(e.contains(says), "{words:?}: {e}");
        assert!(!e.contains("unexpected argument"), "{words:?}: {e}");
    }
    assert!(snapshot(&pair.b).is_empty(), "nothing ran");
}

#[test]
fn a_dry_run_changes_nothing_not_even_the_archives() {
    let pair = Pair::new();
    pair.write('a', "new/deep/file.txt", "new\n");
    pair.write('b', "other.txt", "other\n");
    let tmp = tempfile::tempdir().unwrap();
    let dry = |args: &[&str], code| {
        let mut all = vec!["--json", "-n"];
        all.extend_from_slice(args);
        let out = pair
            .command(&all)
            .env("TMPDIR", tmp.path())
            .output()
            .unwrap();
        assert_exit(&out, code);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    // A first sync: no archive yet, and none is made.
    let report = dry(&[], 0);
    assert_eq!(report["dry_run"], true, "{report}");
    let changes: Vec<&str> = report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap())
        .collect();
    assert!(changes.contains(&"new/deep/file.txt"), "{report}");
    assert!(changes.contains(&"other.txt"), "{report}");
    assert!(!pair.exists('b', "new"), "nothing copied");
    assert!(!pair.exists('a', "other.txt"), "nothing copied");
    assert!(
        files(&pair.state).is_empty(),
        "{:?}",
        files(&pair.state).keys()
    );
    assert!(files(tmp.path()).is_empty(), "the scratch copies are gone");

    // After a real sync, a change: the archives stay byte for byte.
    pair.sync_json(&[], 0);
    pair.write('a', "new/deep/file.txt", "changed\n");
    std::fs::remove_file(pair.path('b', "other.txt")).unwrap();
    let archives = files(&pair.state);
    assert!(!archives.is_empty());
    let report = dry(&[], 0);
    assert_eq!(report["propagated"], 2, "{report}");
    assert_eq!(files(&pair.state), archives, "the archives were written");
    assert_eq!(
        pair.read('b', "new/deep/file.txt").as_deref(),
        Some("new\n")
    );
    assert!(pair.exists('a', "other.txt"));
    // No lock left: the real run goes, and carries both changes.
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["propagated"], 2, "{report}");
    assert!(!pair.exists('a', "other.txt"));
    pair.assert_equal();
}

/// With a remote root too: its host refuses every change in a dry run's
/// session and walks a scratch copy of its archive.
fn a_dry_run_shows_the_plan_and_changes_nothing(make: MakePair) {
    let pair = make();
    pair.write('a', "first.txt", "first\n");
    pair.write('a', "stays.txt", "stays\n");
    let report = pair.sync_json(&["-n"], 0);
    assert_eq!(report["propagated"], 2, "{report}");
    assert!(!pair.exists('b', "first.txt"), "a first dry run copied");
    pair.sync_json(&[], 0);
    pair.write('a', "new.txt", "new\n");
    std::fs::remove_file(pair.path('b', "first.txt")).unwrap();
    let before = (snapshot(&pair.a), snapshot(&pair.b));
    let report = pair.sync_json(&["-n"], 0);
    assert_eq!(report["dry_run"], true, "{report}");
    assert_eq!(report["propagated"], 2, "{report}");
    assert_eq!(
        (snapshot(&pair.a), snapshot(&pair.b)),
        before,
        "a dry run changed a replica"
    );
    // The archives still hold the last agreement: the real run carries both.
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["propagated"], 2, "{report}");
    assert!(!pair.exists('a', "first.txt"));
    pair.assert_equal();
}

local_and_remote!(a_dry_run_shows_the_plan_and_changes_nothing:
    a_dry_run_of_local_roots_changes_nothing,
    a_dry_run_over_ssh_changes_nothing,
    a_dry_run_on_a_daemon_changes_nothing);

fn a_missing_root_is_refused_and_not_made(make: MakePair) {
    let pair = make();
    pair.write('a', "file.txt", "data\n");
    std::fs::remove_dir(&pair.b).unwrap();
    let out = pair.sync(&[]);
    assert_exit(&out, 3);
    let e = stderr(&out);
    assert!(e.contains("does not exist"), "{e}");
    assert!(e.contains("create it with mkdir"), "{e}");
    assert!(!e.contains("os error"), "{e}");
    assert!(!e.contains("source"), "a sync has no source: {e}");
    assert!(!pair.b.exists(), "the missing root was made");
}

local_and_remote!(a_missing_root_is_refused_and_not_made:
    a_missing_local_root_is_refused,
    a_missing_root_over_ssh_is_refused,
    a_missing_root_on_a_daemon_is_refused);

fn path_syncs_only_those_subtrees(make: MakePair) {
    let pair = make();
    pair.write('a', "projects/one/a.txt", "one\n");
    pair.write('a', "projects/two/b.txt", "two\n");
    pair.write('b', "music/song.txt", "la\n");
    pair.write('b', "projects/three.txt", "three\n");
    let report = pair.sync_json(&["--path", "projects/one", "--path=music/"], 0);
    assert_eq!(
        pair.read('b', "projects/one/a.txt").as_deref(),
        Some("one\n")
    );
    assert_eq!(pair.read('a', "music/song.txt").as_deref(), Some("la\n"));
    assert!(!pair.exists('b', "projects/two"), "{report}");
    assert!(!pair.exists('a', "projects/three.txt"), "{report}");
    // Deleting outside the paths is not seen by a run limited to them...
    std::fs::remove_file(pair.path('a', "projects/one/a.txt")).unwrap();
    std::fs::remove_dir_all(pair.path('a', "projects/two")).unwrap();
    pair.sync_json(&["--path", "projects/one"], 0);
    assert!(!pair.exists('b', "projects/one/a.txt"));
    // ...and a run of the whole tree then carries the rest.
    let report = pair.sync_json(&[], 0);
    assert!(pair.exists('a', "projects/three.txt"), "{report}");
}

local_and_remote!(path_syncs_only_those_subtrees:
    path_syncs_only_those_subtrees_local,
    path_syncs_only_those_subtrees_over_ssh,
    path_syncs_only_those_subtrees_on_a_daemon);

#[test]
fn a_profile_holds_paths() {
    let pair = Pair::new();
    pair.write('a', "keep/x.txt", "x\n");
    pair.write('a', "skip/y.txt", "y\n");
    let config = tempfile::tempdir().unwrap();
    std::fs::create_dir(config.path().join("accord")).unwrap();
    std::fs::write(
        config.path().join("accord/part.toml"),
        format!(
            "roots = [{:?}, {:?}]\npath = [\"keep\"]\nbatch = true\n",
            pair.a, pair.b
        ),
    )
    .unwrap();
    let out = std::process::Command::new(bin())
        .args(["sync", "part"])
        .env("XDG_CONFIG_HOME", config.path())
        .env("ACCORD_STATE_DIR", &pair.state)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert!(pair.exists('b', "keep/x.txt"));
    assert!(!pair.exists('b', "skip"));
}

#[test]
fn the_summary_is_in_human_units() {
    let pair = Pair::new();
    pair.write('a', "big.bin", &"x".repeat(3 << 20));
    pair.write('a', "small.txt", "s\n");
    let out = pair.sync(&[]);
    assert_exit(&out, 0);
    let e = stderr(&out);
    assert!(
        e.contains("2 changes made: 2 files written (3.0 MiB); 1 agreed"),
        "{e}"
    );
    // A deletion is counted in the words of a mirror's summary.
    std::fs::remove_file(pair.path('a', "small.txt")).unwrap();
    let out = pair.sync(&[]);
    assert_exit(&out, 0);
    let e = stderr(&out);
    assert!(e.contains("1 change made: 1 deleted; "), "{e}");
    assert!(e.contains("0 conflicts, 0 errors, in "), "{e}");
}
