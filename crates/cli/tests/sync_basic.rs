//! `accord sync` end to end on real trees: propagation both ways,
//! conflicts left alone, agreements, deletions, the removed-directory
//! rule, no-op re-syncs, touches, lost archives, the deletion guard, and
//! the policies.

mod mirror_common;
mod remote_common;
mod sync_common;
use std::process::Command;
use sync_common::*;

/// Two trees with nothing in common become their union.
#[test]
fn first_sync_merges_two_different_trees() {
    let pair = Pair::new();
    pair.write('a', "only_a.txt", "from a");
    pair.write('a', "dir_a/deep/f", "deep a");
    pair.write('b', "only_b.txt", "from b");
    pair.write('b', "dir_b/g", "b's g");
    std::os::unix::fs::symlink("only_a.txt", pair.path('a', "link")).unwrap();
    pair.chmod('a', "only_a.txt", 0o640);
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["propagated"], 8, "{report}");
    pair.assert_equal();
    assert_eq!(pair.read('b', "dir_a/deep/f").as_deref(), Some("deep a"));
    assert_eq!(pair.read('a', "dir_b/g").as_deref(), Some("b's g"));
    assert_eq!(pair.mode('b', "only_a.txt"), 0o640);
    assert_eq!(
        std::fs::read_link(pair.path('b', "link")).unwrap(),
        std::path::PathBuf::from("only_a.txt")
    );
}

fn synced_pair() -> Pair {
    let pair = Pair::new();
    pair.write('a', "f", "original f");
    pair.write('a', "g", "original g");
    pair.write('a', "dir/x", "original x");
    pair.write('a', "dir/sub/y", "original y");
    pair.sync_json(&[], 0);
    pair.assert_equal();
    pair
}

#[test]
fn edits_on_one_side_propagate_both_ways() {
    let pair = synced_pair();
    pair.write('a', "f", "edited on a");
    pair.write('b', "dir/x", "edited on b");
    pair.write('b', "dir/new", "new on b");
    pair.chmod('a', "g", 0o600);
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["propagated"], 4, "{report}");
    assert_eq!(pair.read('b', "f").as_deref(), Some("edited on a"));
    assert_eq!(pair.read('a', "dir/x").as_deref(), Some("edited on b"));
    assert_eq!(pair.read('a', "dir/new").as_deref(), Some("new on b"));
    assert_eq!(pair.mode('b', "g"), 0o600);
    pair.assert_equal();
}

#[test]
fn edits_on_both_sides_conflict_and_are_left_alone() {
    let pair = synced_pair();
    pair.write('a', "f", "a's version");
    pair.write('b', "f", "b's version");
    pair.write('a', "g", "g edited on a only");
    let report = pair.sync_json(&[], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    assert_eq!(report["conflicts"][0]["reason"], "both_changed");
    assert_eq!(pair.read('a', "f").as_deref(), Some("a's version"));
    assert_eq!(pair.read('b', "f").as_deref(), Some("b's version"));
    // The rest of the run went on.
    assert_eq!(pair.read('b', "g").as_deref(), Some("g edited on a only"));
    // A conflict stays one until it is resolved.
    let again = pair.sync_json(&[], 1);
    assert_eq!(conflict_paths(&again), ["f"]);
    assert_eq!(again["propagated"], 0);
}

#[test]
fn identical_edits_agree_silently() {
    let pair = synced_pair();
    pair.write('a', "f", "the same new text");
    pair.write('b', "f", "the same new text");
    pair.write('a', "both_new", "same");
    pair.write('b', "both_new", "same");
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["propagated"], 0, "{report}");
    assert_eq!(conflict_paths(&report).len(), 0);
    pair.assert_equal();
}

#[test]
fn deletions_propagate() {
    let pair = synced_pair();
    std::fs::remove_file(pair.path('a', "f")).unwrap();
    std::fs::remove_dir_all(pair.path('b', "dir")).unwrap();
    let report = pair.sync_json(&["--max-delete", "100%"], 0);
    assert!(!pair.exists('b', "f"));
    assert!(!pair.exists('a', "dir"));
    assert_eq!(report["propagated"], 5, "{report}");
    pair.assert_equal();
}

#[test]
fn a_directory_deleted_against_a_child_edit_is_a_conflict() {
    let pair = synced_pair();
    std::fs::remove_dir_all(pair.path('a', "dir")).unwrap();
    pair.write('b', "dir/sub/y", "edited under the deleted directory");
    let report = pair.sync_json(&["--max-delete", "100%"], 1);
    assert_eq!(conflict_paths(&report), ["dir"]);
    assert_eq!(
        report["conflicts"][0]["reason"],
        "changed_beneath_removed_directory"
    );
    assert!(!pair.exists('a', "dir"));
    assert_eq!(
        pair.read('b', "dir/sub/y").as_deref(),
        Some("edited under the deleted directory")
    );
    assert_eq!(pair.read('b', "dir/x").as_deref(), Some("original x"));
}

#[test]
fn a_second_sync_is_a_no_op() {
    let pair = synced_pair();
    pair.write('a', "f", "edited");
    pair.sync_json(&[], 0);
    let before = (snapshot(&pair.a), snapshot(&pair.b));
    for _ in 0..2 {
        let report = pair.sync_json(&[], 0);
        assert_eq!(report["propagated"], 0, "{report}");
        assert_eq!(conflict_paths(&report).len(), 0);
    }
    assert_eq!(before, (snapshot(&pair.a), snapshot(&pair.b)));
}

/// The Unison paper's rule: a touch is no update, so a touch on one side
/// and an edit on the other propagate the edit without a conflict.
#[test]
fn a_touched_but_unchanged_file_is_not_an_update() {
    let pair = synced_pair();
    set_mtime(&pair.path('a', "f"), 1_000_000_000);
    // Rewritten with the same bytes: another inode, same contents.
    pair.write('a', "g", "original g");
    pair.write('b', "f", "edited on b");
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["propagated"], 1, "{report}");
    assert_eq!(pair.read('a', "f").as_deref(), Some("edited on b"));
    pair.assert_equal();
    let again = pair.sync_json(&[], 0);
    assert_eq!(again["propagated"], 0, "{again}");
}

/// The Unison paper's conservative rule: without an archive, both
/// replicas are taken to have been empty. A deletion then comes back and
/// an edit is a conflict; nothing is lost.
#[test]
fn a_lost_archive_gives_conflicts_not_losses() {
    let pair = synced_pair();
    std::fs::remove_file(pair.path('a', "g")).unwrap();
    pair.write('b', "f", "edited on b");
    std::fs::remove_dir_all(&pair.state).unwrap();
    let report = pair.sync_json(&[], 1);
    assert_eq!(report["archives_lost"], true);
    assert_eq!(conflict_paths(&report), ["f"]);
    assert_eq!(pair.read('a', "g").as_deref(), Some("original g"));
    assert_eq!(pair.read('a', "f").as_deref(), Some("original f"));
    assert_eq!(pair.read('b', "f").as_deref(), Some("edited on b"));
}

/// One side's archive lost (or damaged) is both lost.
#[test]
fn one_lost_or_damaged_archive_is_both_lost() {
    let pair = synced_pair();
    std::fs::remove_file(pair.path('a', "g")).unwrap();
    let archives: Vec<_> = std::fs::read_dir(&pair.state)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sqlite"))
        .collect();
    assert_eq!(archives.len(), 2, "{archives:?}");
    std::fs::write(
        &archives[0],
        b"this is not a database, not even close to one",
    )
    .unwrap();
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["archives_lost"], true);
    assert_eq!(pair.read('a', "g").as_deref(), Some("original g"));
    pair.assert_equal();
    // The next run has its agreement back: a deletion propagates again.
    std::fs::remove_file(pair.path('a', "g")).unwrap();
    pair.sync_json(&[], 0);
    assert!(!pair.exists('b', "g"));
}

#[test]
fn the_deletion_guard_refuses_an_emptied_root() {
    let pair = synced_pair();
    for entry in std::fs::read_dir(&pair.a).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            std::fs::remove_dir_all(path).unwrap();
        } else {
            std::fs::remove_file(path).unwrap();
        }
    }
    let before = snapshot(&pair.b);
    let report = pair.sync_json(&["--max-delete", "100%"], 3);
    assert!(
        report["refused"].as_str().unwrap().contains("empty"),
        "{report}"
    );
    assert_eq!(snapshot(&pair.b), before);
}

#[test]
fn the_deletion_guard_refuses_more_than_max_delete() {
    let pair = synced_pair();
    std::fs::remove_dir_all(pair.path('a', "dir")).unwrap();
    std::fs::remove_file(pair.path('a', "f")).unwrap();
    let before = snapshot(&pair.b);
    let report = pair.sync_json(&[], 3);
    assert!(
        report["refused"].as_str().unwrap().contains("--max-delete"),
        "{report}"
    );
    assert_eq!(snapshot(&pair.b), before);
    pair.sync_json(&["--max-delete", "10"], 0);
    assert!(!pair.exists('b', "dir"));
}

#[test]
fn a_missing_root_is_fatal() {
    let pair = synced_pair();
    std::fs::remove_dir_all(&pair.b).unwrap();
    let out = pair.sync(&[]);
    assert_exit(&out, 3);
    assert!(!pair.exists('b', ""));
    assert_eq!(pair.read('a', "f").as_deref(), Some("original f"));
}

#[test]
fn prefer_and_force_decide_for_the_user() {
    let pair = synced_pair();
    pair.write('a', "f", "a wins");
    pair.write('b', "f", "b loses");
    let report = pair.sync_json(&["--prefer", "a"], 0);
    assert_eq!(conflict_paths(&report).len(), 0);
    assert_eq!(pair.read('b', "f").as_deref(), Some("a wins"));

    pair.write('a', "g", "older");
    set_mtime(&pair.path('a', "g"), 1_000_000_000);
    pair.write('b', "g", "newer");
    pair.sync_json(&["--prefer", "newer"], 0);
    assert_eq!(pair.read('a', "g").as_deref(), Some("newer"));

    // --force B: A becomes B, even where only A changed.
    pair.write('a', "dir/x", "changed on a");
    pair.write('a', "extra", "only on a");
    pair.sync_json(&["--force", "b", "--max-delete", "100%"], 0);
    assert_eq!(pair.read('a', "dir/x").as_deref(), Some("original x"));
    assert!(!pair.exists('a', "extra"));
    pair.assert_equal();
}

#[test]
fn kinds_change_and_permissions_are_synced_without_setuid() {
    let pair = synced_pair();
    // A file becomes a directory on one side, a directory a file on the other.
    std::fs::remove_file(pair.path('a', "f")).unwrap();
    pair.write('a', "f/inside", "now a directory");
    std::fs::remove_dir_all(pair.path('b', "dir")).unwrap();
    pair.write('b', "dir", "now a file");
    pair.chmod('a', "g", 0o4755);
    pair.sync_json(&["--max-delete", "100%"], 0);
    assert_eq!(
        pair.read('b', "f/inside").as_deref(),
        Some("now a directory")
    );
    assert_eq!(pair.read('a', "dir").as_deref(), Some("now a file"));
    assert_eq!(pair.mode('b', "g"), 0o755);
    assert_eq!(pair.mode('a', "g"), 0o4755);
    let again = pair.sync_json(&[], 0);
    assert_eq!(again["propagated"], 0, "{again}");
}

#[test]
fn times_keeps_mtimes_in_agreement() {
    let pair = Pair::new();
    pair.write('a', "f", "dated");
    set_mtime(&pair.path('a', "f"), 1_234_567_890);
    pair.sync_json(&["--times"], 0);
    let mtime = |side| {
        std::fs::metadata(pair.path(side, "f"))
            .unwrap()
            .modified()
            .unwrap()
    };
    assert_eq!(mtime('a'), mtime('b'));
    set_mtime(&pair.path('b', "f"), 1_300_000_000);
    let report = pair.sync_json(&["--times"], 0);
    assert_eq!(report["propagated"], 1, "{report}");
    assert_eq!(mtime('a'), mtime('b'));
}

#[test]
fn checksum_finds_a_change_that_metadata_hides() {
    let pair = synced_pair();
    let path = pair.path('a', "f");
    let before = std::fs::metadata(&path).unwrap();
    std::fs::write(&path, "ORIGINAL F").unwrap();
    let secs = before
        .modified()
        .unwrap()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    set_mtime(&path, secs);
    pair.sync_json(&["--checksum"], 0);
    assert_eq!(pair.read('b', "f").as_deref(), Some("ORIGINAL F"));
}

#[test]
fn two_runs_on_the_same_roots_do_not_overlap() {
    let pair = synced_pair();
    let pause = pair.state.join("pause");
    let mut first = pair
        .command(&[])
        .env("ACCORD_TEST_SYNC_PAUSE", &pause)
        .spawn()
        .unwrap();
    while !pause.exists() {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let second = pair.sync(&[]);
    assert_exit(&second, 3);
    std::fs::remove_file(&pause).unwrap();
    assert!(first.wait().unwrap().success());
}

/// New contents on one side, new permissions on the other: both survive.
#[test]
fn contents_and_permissions_changed_on_different_sides_both_survive() {
    let pair = synced_pair();
    pair.write('a', "f", "new contents from a");
    pair.chmod('b', "f", 0o600);
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["propagated"], 1, "{report}");
    assert_eq!(pair.read('b', "f").as_deref(), Some("new contents from a"));
    assert_eq!(pair.mode('a', "f"), 0o600);
    assert_eq!(pair.mode('b', "f"), 0o600);
    pair.assert_equal();
    let again = pair.sync_json(&[], 0);
    assert_eq!(again["propagated"], 0, "{again}");
}

#[test]
fn symlinks_are_synced_as_links() {
    let pair = synced_pair();
    std::os::unix::fs::symlink("g", pair.path('a', "to_g")).unwrap();
    std::os::unix::fs::symlink("/nowhere/at/all", pair.path('b', "dangling")).unwrap();
    pair.sync_json(&[], 0);
    pair.assert_equal();
    std::fs::remove_file(pair.path('b', "to_g")).unwrap();
    std::os::unix::fs::symlink("f", pair.path('b', "to_g")).unwrap();
    pair.sync_json(&[], 0);
    assert_eq!(
        std::fs::read_link(pair.path('a', "to_g")).unwrap(),
        std::path::PathBuf::from("f")
    );
    pair.assert_equal();
}

#[test]
fn a_read_only_directory_is_filled_before_it_is_made_read_only() {
    let pair = synced_pair();
    pair.write('a', "ro/inside", "in a read-only directory");
    pair.chmod('a', "ro", 0o555);
    pair.sync_json(&[], 0);
    assert_eq!(
        pair.read('b', "ro/inside").as_deref(),
        Some("in a read-only directory")
    );
    assert_eq!(pair.mode('b', "ro"), 0o555);
    pair.chmod('a', "ro", 0o755);
    pair.chmod('b', "ro", 0o755);
}

#[test]
fn nested_roots_are_refused() {
    let pair = synced_pair();
    let out = std::process::Command::new(bin())
        .arg("sync")
        .arg("--batch")
        .arg(&pair.a)
        .arg(pair.path('a', "dir"))
        .env("ACCORD_STATE_DIR", &pair.state)
        .output()
        .unwrap();
    assert_exit(&out, 3);
    assert!(String::from_utf8_lossy(&out.stderr).contains("one inside the other"));
}

/// `sync A B` and `sync B A` share one agreement.
#[test]
fn the_roots_may_be_named_in_either_order() {
    let pair = synced_pair();
    std::fs::remove_file(pair.path('a', "g")).unwrap();
    pair.write('b', "f", "edited on b");
    let out = std::process::Command::new(bin())
        .args(["sync", "--batch", "--json"])
        .arg(&pair.b)
        .arg(&pair.a)
        .env("ACCORD_STATE_DIR", &pair.state)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["archives_lost"], false, "{report}");
    assert!(!pair.exists('b', "g"));
    assert_eq!(pair.read('a', "f").as_deref(), Some("edited on b"));
}

#[test]
fn an_unreachable_remote_root_stops_the_run_and_says_why() {
    let pair = Pair::new();
    pair.write('a', "f", "kept");
    let out = std::process::Command::new(bin())
        .args(["sync", "--batch", "--rsh", "false"])
        .arg(&pair.a)
        .arg("somehost:some/path")
        .env("ACCORD_STATE_DIR", &pair.state)
        .output()
        .unwrap();
    assert_exit(&out, 3);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    assert_eq!(pair.read('a', "f").as_deref(), Some("kept"));
}

#[test]
fn two_remote_roots_are_refused() {
    let pair = Pair::new();
    let out = std::process::Command::new(bin())
        .args(["sync", "--batch", "h1:x", "h2:y"])
        .env("ACCORD_STATE_DIR", &pair.state)
        .output()
        .unwrap();
    assert_exit(&out, 64);
    assert!(String::from_utf8_lossy(&out.stderr).contains("at most one root may be remote"));
}

/// `accord sync NAME`: roots and options from `~/.config/accord/NAME.toml`,
/// options given by hand winning.
#[test]
fn a_profile_names_the_roots_and_options() {
    let pair = synced_pair();
    let config = tempfile::tempdir().unwrap();
    std::fs::create_dir(config.path().join("accord")).unwrap();
    let profile = config.path().join("accord/pair.toml");
    let text = format!(
        "roots = [{:?}, {:?}]\nbatch = true\nprefer = \"A\"\njson = true\n",
        pair.root('a').display().to_string(),
        pair.root('b').display().to_string()
    );
    std::fs::write(&profile, text).unwrap();
    let run = |args: &[&str]| {
        Command::new(bin())
            .arg("sync")
            .args(args)
            .env("XDG_CONFIG_HOME", config.path())
            .env("ACCORD_STATE_DIR", pair.path('a', "../state"))
            .output()
            .unwrap()
    };
    pair.write('a', "f", "a's f");
    pair.write('b', "f", "b's f");
    let out = run(&["pair"]);
    assert_exit(&out, 0);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["propagated"], 1, "{report}");
    assert_eq!(pair.read('b', "f").as_deref(), Some("a's f"));

    pair.write('a', "g", "a's g");
    pair.write('b', "g", "b's g");
    assert_exit(&run(&["--prefer", "b", "pair"]), 0);
    assert_eq!(pair.read('a', "g").as_deref(), Some("b's g"));
    pair.assert_equal();

    std::fs::write(&profile, "roots = [\"/x\", \"/y\"]\nbogus = 1\n").unwrap();
    let out = run(&["pair"]);
    assert_exit(&out, 64);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("pair.toml") && err.contains("bogus is not an option"),
        "{err}"
    );
    let out = run(&["nosuch"]);
    assert_exit(&out, 64);
    assert!(String::from_utf8_lossy(&out.stderr).contains("nosuch.toml"));
}

/// The run after a first sync reads none of the files that run read or
/// wrote, where the roots' file system moves a ctime that was read at the
/// file's next change (multigrain timestamps: Linux 6.13 and later on ext4,
/// XFS, Btrfs and tmpfs): each is recorded with the ctime its stat read,
/// however young. Elsewhere such a ctime cannot vouch yet, and the next
/// run reads every file once more. Either way a change made behind the
/// records' back (same size, mtime put back) is still seen, on a file the
/// first run wrote and on one it read just after the test wrote it.
#[test]
fn the_run_after_a_first_sync_reads_no_file_it_wrote() {
    let pair = Pair::new();
    let files = 24;
    for i in 0..files {
        pair.write(
            'a',
            &format!("d{}/payload-{i}.txt", i % 3),
            &format!("file {i:02}"),
        );
    }
    pair.write('b', "d0/payload-b.txt", "made on b");
    pair.sync_json(&[], 0);
    pair.assert_equal();
    // What the first run wrote: A's files on B, B's file on A.
    let written = |(root, name): &(String, String)| {
        let b = pair.b.display().to_string();
        let a = pair.a.display().to_string();
        (root == &b && name != "payload-b.txt") || (root == &a && name == "payload-b.txt")
    };
    let opened = payloads_opened(&pair);
    if ctimes_vouch_at_once(&pair.a) {
        // Nor the files the test wrote just before the first run: their
        // ctimes vouched from the first run's stat.
        assert_eq!(
            opened,
            Vec::new(),
            "no file the first run read or wrote is read again"
        );
    } else {
        // The files the test wrote just now are younger than any ctime
        // that can vouch with coarse timestamps: read again, not counted.
        let opened: Vec<_> = opened.into_iter().filter(written).collect();
        eprintln!(
            "coarse ctimes here: {} written files read again",
            opened.len()
        );
        assert!(!opened.is_empty());
    }
    rewrite_keeping_mtime(&pair.path('b', "d1/payload-1.txt"), b"FILE 01");
    rewrite_keeping_mtime(&pair.path('a', "d0/payload-b.txt"), b"MADE ON B");
    rewrite_keeping_mtime(&pair.path('a', "d2/payload-2.txt"), b"FILE 02");
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["propagated"], 3, "{report}");
    assert_eq!(
        pair.read('b', "d2/payload-2.txt").as_deref(),
        Some("FILE 02")
    );
    assert_eq!(
        pair.read('a', "d1/payload-1.txt").as_deref(),
        Some("FILE 01")
    );
    assert_eq!(
        pair.read('b', "d0/payload-b.txt").as_deref(),
        Some("MADE ON B")
    );
}

/// The same over ssh: what the first run wrote on the remote root is
/// recorded there with the ctime its host read right after the rename
/// (the client asks for that stat; only that host can promise it), and
/// the next run's scan on that host opens none of those files.
#[test]
fn the_run_after_a_first_sync_reads_no_file_it_wrote_on_a_remote_root() {
    if Command::new("strace").arg("-V").output().is_err() {
        mirror_common::skip_or_fail("strace is not installed (apt-get install strace)");
        return;
    }
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    let base = tempfile::tempdir().unwrap();
    let mut pair = Pair::with_remote_b(&RemoteB::over_ssh(base.path(), &sshd.rsh()));
    for i in 0..24 {
        pair.write('a', &format!("d{}/payload-{i}.txt", i % 3), "contents");
    }
    pair.sync_json(&[], 0);
    pair.assert_equal();
    // The second run's server, under strace: one log per thread.
    let logs = base.path().join("server-trace");
    std::fs::create_dir(&logs).unwrap();
    let strace = format!(
        "strace -ff -qq -y -e trace=open,openat,openat2 -o {}/t",
        logs.display()
    );
    wrap_remote_accord(&mut pair, &base.path().join("traced-accord"), &strace);
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["propagated"], 0, "{report}");
    assert!(sshd.wait_sessions_gone(std::time::Duration::from_secs(60)));
    let mut trace = String::new();
    for entry in std::fs::read_dir(&logs).unwrap() {
        trace += &std::fs::read_to_string(entry.unwrap().path()).unwrap();
    }
    let b = pair.b.canonicalize().unwrap().display().to_string();
    assert!(
        trace.contains(&format!("<{b}/d1>")),
        "the traced server scanned B:\n{trace}"
    );
    let opened: Vec<&str> = trace
        .lines()
        .filter(|line| line.contains("payload-") && !line.contains("O_DIRECTORY"))
        .collect();
    if ctimes_vouch_at_once(&pair.b) {
        assert_eq!(
            opened,
            Vec::<&str>::new(),
            "no file the first run wrote is read again"
        );
    } else {
        eprintln!("coarse ctimes here: {} files read again", opened.len());
        assert!(!opened.is_empty());
    }
}

/// The payload files a no-change sync of `pair` opens other than as
/// directories, as strace sees them: (the root it lies in, its name).
fn payloads_opened(pair: &Pair) -> Vec<(String, String)> {
    if Command::new("strace").arg("-V").output().is_err() {
        mirror_common::skip_or_fail("strace is not installed (apt-get install strace)");
        return Vec::new();
    }
    let log = pair.state.with_extension("trace");
    let inner = pair.command(&["--json"]);
    // -y: each descriptor with the path it names, so that an open
    // relative to a root's descriptor tells the root. -ff: one log per
    // thread (LOG.TID), so that no call is split into an "unfinished" and
    // a "resumed" line by another thread's call.
    let out = Command::new("strace")
        .args(["-ff", "-qq", "-y", "-e", "trace=open,openat,openat2", "-o"])
        .arg(&log)
        .arg(inner.get_program())
        .args(inner.get_args())
        .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .output()
        .unwrap();
    let report = json_report(&out, 0);
    assert_eq!(report["propagated"], 0, "{report}");
    let roots = [
        pair.a.canonicalize().unwrap(),
        pair.b.canonicalize().unwrap(),
    ];
    let prefix = format!("{}.", log.file_name().unwrap().to_string_lossy());
    let mut trace = String::new();
    for entry in std::fs::read_dir(log.parent().unwrap()).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            trace += &std::fs::read_to_string(entry.path()).unwrap();
        }
    }
    trace
        .lines()
        .filter(|line| line.contains("payload-") && !line.contains("O_DIRECTORY"))
        .map(|line| {
            let root = roots
                .iter()
                .find(|root| line.contains(&format!("<{}>", root.display())))
                .unwrap_or_else(|| panic!("an open not relative to a root: {line}"));
            let name = line.split('"').nth(1).unwrap_or_default();
            let root = if root == &roots[0] { &pair.a } else { &pair.b };
            let file = name.rsplit('/').next().unwrap_or_default();
            (root.display().to_string(), file.to_owned())
        })
        .collect()
}

/// Whether this kernel and the file system holding `dir` give multigrain
/// ctimes (see the test above), told by `uname -r` and `findmnt`.
fn ctimes_vouch_at_once(dir: &std::path::Path) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut numbers = release.split(|c: char| !c.is_ascii_digit());
    let major: u32 = numbers.next().unwrap().parse().unwrap();
    let minor: u32 = numbers.next().unwrap().parse().unwrap();
    let out = Command::new("findmnt")
        .args(["-n", "-o", "FSTYPE", "-T"])
        .arg(dir)
        .output()
        .expect("findmnt (util-linux)");
    let fs_type = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    (major, minor) >= (6, 13) && ["ext4", "xfs", "btrfs", "tmpfs"].contains(&fs_type.as_str())
}

/// A directory replaced by a symlink on one side: the other side's copy,
/// unchanged since the last run, goes with everything in it, and the link
/// takes its place (its contents were once left behind, the directory "not
/// empty", when the walk took a name beneath the link for one it could not
/// read).
#[test]
fn a_directory_replaced_by_a_symlink_is_replaced_on_the_other_side() {
    let pair = synced_pair();
    pair.sync_json(&[], 0);
    std::fs::remove_dir_all(pair.path('a', "dir")).unwrap();
    std::os::unix::fs::symlink("f", pair.path('a', "dir")).unwrap();
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["errors"], serde_json::json!([]), "{report}");
    pair.assert_equal();
    assert_eq!(
        std::fs::read_link(pair.path('b', "dir")).unwrap(),
        std::path::PathBuf::from("f")
    );
}

/// A run whose remote root is held by another run stops before anything
/// is written there: the opening of that root's archive travels right
/// behind its lock, and the server refuses it without the lock, so no
/// archive is made on that host (an empty one, found by a later run while
/// this host's archive holds the pair's records, would read as an
/// agreement on nothing). Once free, the pair syncs.
#[test]
fn a_busy_remote_root_gets_no_archive_from_the_refused_run() {
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    let base = tempfile::tempdir().unwrap();
    let mut pair = Pair::with_remote_b(&RemoteB::over_ssh(base.path(), &sshd.rsh()));
    // The server keeps its archives where the test can see them.
    let server_state = base.path().join("server-state");
    let env = format!("env ACCORD_STATE_DIR={}", server_state.display());
    wrap_remote_accord(&mut pair, &base.path().join("accord-server"), &env);
    pair.write('a', "f", "from a");
    let mut holder = mirror_common::hold_lock(&pair.b);
    let out = pair.sync(&[]);
    holder.kill().unwrap();
    let _ = holder.wait();
    assert_exit(&out, 3);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another accord run"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(sshd.wait_sessions_gone(std::time::Duration::from_secs(60)));
    let archives = |dir: &std::path::Path| -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("archive-") && name.ends_with(".sqlite"))
            .collect()
    };
    assert_eq!(archives(&server_state), Vec::<String>::new());
    assert!(!pair.exists('b', "f"));
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["propagated"], 1, "{report}");
    pair.assert_equal();
    assert_eq!(archives(&server_state).len(), 1);
}

/// Run B's accord as `PREFIX accord ARGS` (a command that then runs it),
/// through a script written at `script`.
fn wrap_remote_accord(pair: &mut Pair, script: &std::path::Path, prefix: &str) {
    let text = format!("#!/bin/sh\nexec {prefix} {} \"$@\"\n", bin().display());
    std::fs::write(script, text).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let args = &mut pair.remote_b.as_mut().unwrap().args;
    let at = args.iter().position(|a| a == "--remote-accord").unwrap();
    args[at + 1] = script.display().to_string();
}
