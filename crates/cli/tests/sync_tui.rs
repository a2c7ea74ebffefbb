//! The interactive `accord sync` driven like a person would, through tmux
//! (issue 12, acceptance 8): the real binary in a 120x40 pane, keys sent
//! with `send-keys`, the screen read with `capture-pane -p`. Skips loudly
//! without tmux (fails in strict mode: `ACCORD_TEST_STRICT`).

mod mirror_common;
mod sync_common;
mod tui_common;
use std::path::PathBuf;
use sync_common::*;
use tui_common::*;

impl Tmux {
    /// `accord sync A B` (interactive: no --batch) in a new 120x40 pane;
    /// its exit status goes to `status_file`, then the pane stays.
    fn start_sync(pair: &Pair, status_file: &std::path::Path) -> Tmux {
        Tmux::start_sync_with(pair, status_file, "")
    }

    /// `start_sync` with options (`extra`, as the shell reads them).
    fn start_sync_with(pair: &Pair, status_file: &std::path::Path, extra: &str) -> Tmux {
        Tmux::start_sync_in(pair, status_file, "", extra)
    }

    /// `start_sync_with` with variables for the run (`env`: `NAME=value `).
    fn start_sync_in(pair: &Pair, status_file: &std::path::Path, env: &str, extra: &str) -> Tmux {
        let shell = format!(
            "{env}ACCORD_STATE_DIR={} {} sync {extra} {} {}; echo $? > {}; sleep 600",
            quoted(&pair.state),
            quoted(&bin()),
            quoted(&pair.a),
            quoted(&pair.b),
            quoted(status_file),
        );
        Tmux::start(&shell)
    }
}

/// A synced pair, then a conflict (`both.txt`), a change on A (`one.txt`)
/// and a change on B (`skip.txt`).
fn pair_with_changes() -> Pair {
    let pair = Pair::new();
    pair.write('a', "both.txt", "base\n");
    pair.write('a', "one.txt", "one base\n");
    pair.write('a', "skip.txt", "skip base\n");
    pair.sync_json(&[], 0);
    pair.write('a', "both.txt", "from a\n");
    pair.write('b', "both.txt", "from b\n");
    pair.write('a', "one.txt", "one new\n");
    pair.write('b', "skip.txt", "skip new\n");
    pair
}

fn status_file(pair: &Pair) -> PathBuf {
    pair.state.with_file_name("status")
}

/// Wait for the list with its three rows, as reconciled.
fn wait_for_plan(tmux: &Tmux) {
    let screen = tmux.wait_for("the plan", |screen| screen.contains("skip.txt"));
    let both = row(&screen, "both.txt").expect("the conflict is listed");
    assert!(
        both.contains("A <-?-> B") && both.contains("conflict"),
        "{screen}"
    );
    let one = row(&screen, "one.txt").expect("the change on A is listed");
    assert!(one.contains("A ----> B"), "{screen}");
    let skip = row(&screen, "skip.txt").expect("the change on B is listed");
    assert!(skip.contains("A <---- B"), "{screen}");
    assert!(screen.contains("g go"), "the help line: {screen}");
}

#[test]
fn tui_flip_a_conflict_skip_one_confirm() {
    if !have_tmux() {
        return;
    }
    let pair = pair_with_changes();
    let status = status_file(&pair);
    let tmux = Tmux::start_sync(&pair, &status);
    wait_for_plan(&tmux);

    // The diff of the conflict, then back to the list.
    tmux.type_text("d");
    tmux.wait_for("the diff", |s| {
        s.contains("-from a") && s.contains("+from b")
    });
    tmux.type_text("q");
    tmux.wait_for("the list again", |s| !s.contains("+from b"));

    // The conflict (first row) resolved toward B.
    tmux.type_text("<");
    tmux.wait_for_row("both.txt", "A <---- B");
    // The change on B skipped this run.
    tmux.keys(&["Down", "Down"]);
    tmux.type_text("s");
    tmux.wait_for_row("skip.txt", "skipped");
    tmux.type_text("g");

    // A path was skipped: not all agreed.
    assert_eq!(wait_for_status(&status), 1, "{}", tmux.screen());
    assert_eq!(pair.read('a', "both.txt").as_deref(), Some("from b\n"));
    assert_eq!(pair.read('b', "both.txt").as_deref(), Some("from b\n"));
    assert_eq!(pair.read('b', "one.txt").as_deref(), Some("one new\n"));
    assert_eq!(pair.read('a', "skip.txt").as_deref(), Some("skip base\n"));
    assert_eq!(pair.read('b', "skip.txt").as_deref(), Some("skip new\n"));

    // Nothing was recorded for the skipped path: the next run carries it.
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["propagated"], 1, "{report}");
    pair.assert_equal();
    assert_eq!(pair.read('a', "skip.txt").as_deref(), Some("skip new\n"));
}

#[test]
fn tui_quit_changes_nothing() {
    if !have_tmux() {
        return;
    }
    let pair = pair_with_changes();
    let status = status_file(&pair);
    let tmux = Tmux::start_sync(&pair, &status);
    wait_for_plan(&tmux);
    // A choice made, then thrown away with the rest.
    tmux.type_text("<");
    tmux.wait_for_row("both.txt", "A <---- B");
    tmux.type_text("q");

    assert_eq!(wait_for_status(&status), 1, "{}", tmux.screen());
    assert_eq!(pair.read('a', "both.txt").as_deref(), Some("from a\n"));
    assert_eq!(pair.read('b', "both.txt").as_deref(), Some("from b\n"));
    assert_eq!(pair.read('b', "one.txt").as_deref(), Some("one base\n"));
    assert_eq!(pair.read('a', "skip.txt").as_deref(), Some("skip base\n"));
    // Still a conflict and two changes for the next run.
    let report = pair.sync_json(&[], 1);
    assert_eq!(report["propagated"], 2, "{report}");
}

#[test]
fn tui_shows_a_conflict_kept_both_and_keeps_it() {
    if !have_tmux() {
        return;
    }
    let pair = pair_with_changes();
    // B's edit of the conflict is the newer: A's version is kept aside.
    set_mtime(&pair.path('a', "both.txt"), 1_000_000_000);
    set_mtime(&pair.path('b', "both.txt"), 1_100_000_000);
    let status = status_file(&pair);
    let tmux = Tmux::start_sync_with(&pair, &status, "--keep-both");
    let screen = tmux.wait_for_row("both.txt", "KEEP BOTH (A kept aside)");
    let both = row(&screen, "both.txt").unwrap();
    assert!(both.contains("A <---- B"), "{screen}");
    tmux.type_text("g");
    assert_eq!(wait_for_status(&status), 0, "{}", tmux.screen());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let kept = format!("both.txt.conflict-{}-20010909-014640", host.trim());
    for side in ['a', 'b'] {
        assert_eq!(pair.read(side, "both.txt").as_deref(), Some("from b\n"));
        assert_eq!(pair.read(side, &kept).as_deref(), Some("from a\n"));
    }
    pair.assert_equal();
}

/// A synced pair, then `f.txt` renamed to `g.txt` on A.
fn pair_with_a_rename() -> Pair {
    let pair = Pair::new();
    pair.write('a', "f.txt", "renamed on a\n");
    pair.write('a', "h.txt", "left alone\n");
    pair.sync_json(&[], 0);
    std::fs::rename(pair.path('a', "f.txt"), pair.path('a', "g.txt")).unwrap();
    pair
}

#[test]
fn tui_shows_a_rename_and_skips_it_whole() {
    if !have_tmux() {
        return;
    }
    let pair = pair_with_a_rename();
    let status = status_file(&pair);
    let tmux = Tmux::start_sync(&pair, &status);
    tmux.wait_for_row("f.txt -> g.txt", "RENAME on B");
    // The diff says what B moves there.
    tmux.type_text("d");
    tmux.wait_for("the rename's source", |s| {
        s.contains("B: absent") && s.contains("from f.txt: file")
    });
    tmux.type_text("q");
    tmux.wait_for("the list again", |s| !s.contains("from f.txt: file"));
    tmux.type_text("s");
    tmux.wait_for_row("g.txt", "skipped");
    tmux.type_text("g");
    assert_eq!(wait_for_status(&status), 1, "{}", tmux.screen());
    // Neither the new name was made nor the old one deleted.
    assert!(pair.exists('b', "f.txt") && !pair.exists('b', "g.txt"));
    let report = pair.sync_json(&[], 0);
    assert_eq!(report["renamed"], 1, "{report}");
    pair.assert_equal();
}

#[test]
fn tui_flips_a_rename_back() {
    if !have_tmux() {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let pair = pair_with_a_rename();
    let ino = std::fs::metadata(pair.path('a', "g.txt")).unwrap().ino();
    let status = status_file(&pair);
    let tmux = Tmux::start_sync(&pair, &status);
    tmux.wait_for_row("f.txt -> g.txt", "RENAME on B");
    tmux.type_text("f");
    // B's state wins: A renames its file back.
    tmux.wait_for_row("g.txt -> f.txt", "RENAME on A");
    tmux.type_text("g");
    assert_eq!(wait_for_status(&status), 0, "{}", tmux.screen());
    assert!(!pair.exists('a', "g.txt") && !pair.exists('b', "g.txt"));
    assert_eq!(
        std::fs::metadata(pair.path('a', "f.txt")).unwrap().ino(),
        ino
    );
    pair.assert_equal();
}

/// On a terminal a run shows its progress once the plan is made: the files
/// to copy and those that arrived (issue 12, "progress on a terminal as
/// the mirror shows it"). Caught while the run waits before its links.
#[test]
fn a_batch_run_on_a_terminal_shows_its_progress() {
    if !have_tmux() {
        return;
    }
    let pair = Pair::new();
    for n in 0..20 {
        pair.write('a', &format!("f{n}"), &"x".repeat(1000 + n));
    }
    std::fs::hard_link(pair.path('a', "f0"), pair.path('a', "g0")).unwrap();
    let status = status_file(&pair);
    let pause = pair.state.join("pause");
    let env = format!("ACCORD_TEST_SYNC_PAUSE_LINKS={} ", quoted(&pause));
    let tmux = Tmux::start_sync_in(&pair, &status, &env, "--batch");
    let screen = tmux.wait_for("the progress line", |screen| {
        pause.exists() && screen.contains("20/20 files")
    });
    assert!(
        screen.contains("20/20 files, 19.7 KiB/19.7 KiB"),
        "{screen}"
    );
    std::fs::remove_file(&pause).unwrap();
    assert_eq!(wait_for_status(&status), 0);
    // Cleared at the end; nothing of it is printed with --json or -q.
    pair.assert_equal();
}

/// A pair with two conflicts (`both.txt`, `left.txt`), a change on A
/// (`one.txt`) and one on B (`skip.txt`).
fn pair_with_two_conflicts() -> Pair {
    let pair = Pair::new();
    for (name, text) in [
        ("both.txt", "base\n"),
        ("left.txt", "left base\n"),
        ("one.txt", "one base\n"),
        ("skip.txt", "skip base\n"),
    ] {
        pair.write('a', name, text);
    }
    pair.sync_json(&[], 0);
    pair.write('a', "both.txt", "from a\n");
    pair.write('b', "both.txt", "from b\n");
    pair.write('a', "left.txt", "left from a\n");
    pair.write('b', "left.txt", "left from b\n");
    pair.write('a', "one.txt", "one new\n");
    pair.write('b', "skip.txt", "skip new\n");
    pair
}

/// The merge program of the 'm' tests: fails on left.txt.
const PICKY_MERGE: &str =
    "--merge 'case PATH in left.txt) echo cannot merge this >&2; exit 3;; esac; \
                           cat CURRENT1 CURRENT2 > NEW'";

/// `--merge`: 'm' runs the program on the selected conflict at once and
/// the list shows what came of it (merged and its size, or failed and
/// why); a change that is no conflict is refused; on g the merged one is
/// written on both sides, the failed one stays a conflict.
#[test]
fn tui_m_merges_the_selected_conflict() {
    if !have_tmux() {
        return;
    }
    let pair = pair_with_two_conflicts();
    let status = status_file(&pair);
    let tmux = Tmux::start_sync_with(&pair, &status, PICKY_MERGE);
    wait_for_plan(&tmux);
    assert!(tmux.screen().contains("m merge"), "the help line");

    // The first row, both.txt: merged now, nothing written yet.
    tmux.type_text("m");
    let screen = tmux.wait_for_row("both.txt", "MERGED (14 B)");
    assert!(
        row(&screen, "both.txt").unwrap().contains("A <-M-> B"),
        "{screen}"
    );
    assert!(screen.contains("1 merged"), "{screen}");
    assert_eq!(pair.read('a', "both.txt").as_deref(), Some("from a\n"));
    assert_eq!(pair.read('b', "both.txt").as_deref(), Some("from b\n"));
    // left.txt (second row): the program fails; the row and the status
    // line say so.
    tmux.keys(&["Down"]);
    tmux.type_text("m");
    let screen = tmux.wait_for_row("left.txt", "MERGE FAILED");
    assert!(
        screen.contains("left.txt: merge program exited with status 3: cannot merge this"),
        "{screen}"
    );
    // one.txt (third row) is a change, not a conflict.
    tmux.keys(&["Down"]);
    tmux.type_text("m");
    tmux.wait_for("the refusal", |s| {
        s.contains("one.txt: not a conflict; nothing to merge")
    });
    tmux.type_text("g");

    // left.txt stays a conflict: status 1.
    assert_eq!(wait_for_status(&status), 1, "{}", tmux.screen());
    let screen = tmux.screen();
    assert!(screen.contains("merged         both.txt"), "{screen}");
    for side in ['a', 'b'] {
        assert_eq!(
            pair.read(side, "both.txt").as_deref(),
            Some("from a\nfrom b\n")
        );
    }
    assert_eq!(pair.read('a', "left.txt").as_deref(), Some("left from a\n"));
    assert_eq!(pair.read('b', "left.txt").as_deref(), Some("left from b\n"));
    assert_eq!(pair.read('b', "one.txt").as_deref(), Some("one new\n"));
    // Only left.txt is left.
    let report = pair.sync_json(&[], 1);
    assert_eq!(report["propagated"], 0, "{report}");
    assert_eq!(report["conflicts"][0]["path"], "left.txt", "{report}");
}

/// 'm' again drops the merge (still a conflict); a side written after
/// 'm' and before g is not overwritten by the merge made before.
#[test]
fn tui_m_twice_drops_the_merge_and_a_later_write_is_kept() {
    if !have_tmux() {
        return;
    }
    let pair = pair_with_two_conflicts();
    let status = status_file(&pair);
    let tmux = Tmux::start_sync_with(&pair, &status, PICKY_MERGE);
    wait_for_plan(&tmux);
    tmux.type_text("m");
    tmux.wait_for_row("both.txt", "MERGED");
    tmux.type_text("m");
    let screen = tmux.wait_for_row("both.txt", "A <-?-> B");
    assert!(
        screen.contains("both.txt: merge dropped; still a conflict"),
        "{screen}"
    );
    tmux.type_text("m");
    tmux.wait_for_row("both.txt", "MERGED");
    // Written on B between the merge and g.
    pair.write('b', "both.txt", "written on b after m\n");
    tmux.type_text("g");
    assert_eq!(wait_for_status(&status), 2, "{}", tmux.screen());
    let screen = tmux.screen();
    assert!(screen.contains("changed during sync"), "{screen}");
    assert_eq!(pair.read('a', "both.txt").as_deref(), Some("from a\n"));
    assert_eq!(
        pair.read('b', "both.txt").as_deref(),
        Some("written on b after m\n")
    );
}

/// Without `--merge`, 'm' says how to get one and changes nothing.
#[test]
fn tui_m_without_a_merge_program_says_so() {
    if !have_tmux() {
        return;
    }
    let pair = pair_with_changes();
    let status = status_file(&pair);
    let tmux = Tmux::start_sync(&pair, &status);
    wait_for_plan(&tmux);
    tmux.type_text("m");
    tmux.wait_for("the message", |s| {
        s.contains("no merge program: start with --merge CMD")
    });
    let screen = tmux.screen();
    let both = row(&screen, "both.txt").unwrap();
    assert!(both.contains("A <-?-> B"), "{screen}");
    // The row is as it was: nothing failed, nothing was tried.
    assert!(both.contains("conflict: changed on both"), "{screen}");
    assert!(!screen.contains("MERGE FAILED"), "{screen}");
    tmux.type_text("q");
    assert_eq!(wait_for_status(&status), 1, "{}", tmux.screen());
    assert_eq!(pair.read('a', "both.txt").as_deref(), Some("from a\n"));
}

/// The row of the list for `path` as drawn: the cursor, the mark, the
/// arrow, what it does (in 26 columns) and the path.
fn drawn_row(selected: bool, arrow: &str, what: &str, path: &str) -> String {
    let cursor = if selected { '>' } else { ' ' };
    format!("{cursor}  {arrow}  {what:<26} {path}")
}

/// The scan's progress line is erased before the list takes the screen
/// and never drawn over it: with the run held just before the list (the
/// spinner drawing), every row reads exactly as drawn and no progress
/// line is left, in the list or after it.
#[test]
fn tui_progress_line_never_reaches_the_list() {
    if !have_tmux() {
        return;
    }
    let pair = pair_with_changes();
    let status = status_file(&pair);
    let hold = pair.state.with_file_name("hold");
    let env = format!("ACCORD_TEST_SYNC_PAUSE_PLAN={} ", quoted(&hold));
    let tmux = Tmux::start_sync_in(&pair, &status, &env, "");
    // Held with the plan made, the spinner still drawing.
    tmux.wait_for("the scan's progress line", |s| {
        hold.exists() && s.contains("scanning")
    });
    std::fs::remove_file(&hold).unwrap();
    let screen = tmux.wait_for("the plan", |s| s.contains("skip.txt"));
    let rows = [
        (true, "A <-?-> B", "conflict: changed on both", "both.txt"),
        (false, "A ----> B", "changed file", "one.txt"),
        (false, "A <---- B", "changed file", "skip.txt"),
    ];
    for (selected, arrow, what, path) in rows {
        assert_eq!(
            row(&screen, path).map(str::trim_end),
            Some(drawn_row(selected, arrow, what, path).as_str()),
            "{screen}"
        );
    }
    assert!(!screen.contains("scanning"), "{screen}");
    tmux.type_text("q");
    assert_eq!(wait_for_status(&status), 1, "{}", tmux.screen());
    let screen = tmux.screen();
    assert!(
        !screen.contains("scanning") && !screen.contains(" files,"),
        "a progress line was left: {screen}"
    );
    assert!(screen.contains("quit; nothing was changed"), "{screen}");
}

/// --auto (Unison's -auto): the changes that are not conflicts are made
/// without being shown; only the conflicts are listed.
#[test]
fn tui_auto_lists_only_the_conflicts() {
    if !have_tmux() {
        return;
    }
    let pair = pair_with_changes();
    let status = status_file(&pair);
    let tmux = Tmux::start_sync_with(&pair, &status, "-auto");
    let screen = tmux.wait_for_row("both.txt", "conflict: changed on both");
    assert!(row(&screen, "one.txt").is_none(), "{screen}");
    assert!(row(&screen, "skip.txt").is_none(), "{screen}");
    tmux.type_text("<");
    tmux.wait_for_row("both.txt", "A <---- B");
    tmux.type_text("g");
    assert_eq!(wait_for_status(&status), 0, "{}", tmux.screen());
    assert_eq!(pair.read('a', "both.txt").as_deref(), Some("from b\n"));
    assert_eq!(pair.read('b', "one.txt").as_deref(), Some("one new\n"));
    assert_eq!(pair.read('a', "skip.txt").as_deref(), Some("skip new\n"));
}

/// --auto with no conflict shows nothing and carries out the plan.
#[test]
fn tui_auto_without_conflicts_asks_nothing() {
    if !have_tmux() {
        return;
    }
    let pair = Pair::new();
    pair.write('a', "one.txt", "one\n");
    let status = status_file(&pair);
    let tmux = Tmux::start_sync_with(&pair, &status, "--auto");
    assert_eq!(wait_for_status(&status), 0, "{}", tmux.screen());
    assert_eq!(pair.read('b', "one.txt").as_deref(), Some("one\n"));
}

/// A new directory is one row, with what it carries; '?' lists the keys;
/// a path too long for the row is cut in the middle, its name kept.
#[test]
fn tui_folds_new_directories_shows_keys_and_cuts_long_paths_in_the_middle() {
    if !have_tmux() {
        return;
    }
    let pair = pair_with_changes();
    pair.write('a', "new/deeper/deepest/file.txt", "new\n");
    // Its directories on both sides (agreed), the file new on B.
    let dirs = format!("{}/{}", "d".repeat(60), "e".repeat(60));
    std::fs::create_dir_all(pair.path('a', &dirs)).unwrap();
    let long = format!("{dirs}/name-kept.txt");
    pair.write('b', &long, "long\n");
    let status = status_file(&pair);
    let tmux = Tmux::start_sync(&pair, &status);
    let screen = tmux.wait_for_row("new", "new dir, 3 inside");
    assert!(!screen.contains("new/deeper"), "{screen}");
    let cut = screen
        .lines()
        .find(|line| line.trim_end().ends_with("…/name-kept.txt"))
        .unwrap_or_else(|| panic!("the long path cut in the middle: {screen}"));
    assert!(cut.contains("new file") && cut.contains(" ddd"), "{screen}");
    assert!(cut.chars().count() <= 120, "{cut}");
    // Opened on demand, and folded again.
    let at = |s: &str, line: &dyn Fn(&str) -> bool| s.lines().position(line).unwrap();
    let down =
        at(&screen, &|l| l.trim_end().ends_with(" new")) - at(&screen, &|l| l.starts_with('>'));
    for _ in 0..down {
        tmux.keys(&["Down"]);
    }
    tmux.wait_for_row("new", "new dir");
    tmux.wait_for("the folded row selected", |s| {
        s.lines()
            .any(|l| l.starts_with('>') && l.trim_end().ends_with(" new"))
    });
    // One level at a time, as a tree opens.
    tmux.keys(&["Enter"]);
    tmux.wait_for_row("new/deeper", "new dir, 2 inside");
    tmux.keys(&["Enter"]);
    tmux.wait_for("the folded row", |s| !s.contains("new/deeper"));
    tmux.type_text("?");
    tmux.wait_for("the keys", |s| {
        s.contains("flip the direction") && s.contains("quit: change nothing")
    });
    tmux.type_text("q");
    tmux.wait_for("the list again", |s| !s.contains("flip the direction"));
    tmux.type_text("g");
    assert_eq!(wait_for_status(&status), 1, "{}", tmux.screen());
    assert_eq!(
        pair.read('b', "new/deeper/deepest/file.txt").as_deref(),
        Some("new\n")
    );
    assert_eq!(pair.read('a', &long).as_deref(), Some("long\n"));
}

/// The diff view shows sizes and modification times as a person reads
/// them, not seconds since 1970.
#[test]
fn tui_diff_shows_local_times() {
    if !have_tmux() {
        return;
    }
    let pair = pair_with_changes();
    set_mtime(&pair.path('a', "both.txt"), 1_795_847_978);
    let status = status_file(&pair);
    let tmux = Tmux::start_sync(&pair, &status);
    wait_for_plan(&tmux);
    tmux.type_text("d");
    let screen = tmux.wait_for("the diff", |s| s.contains("+from b"));
    assert!(!screen.contains("1795847978"), "{screen}");
    assert!(screen.contains("modified 2026-11-"), "{screen}");
    assert!(screen.contains("7 bytes"), "{screen}");
    tmux.type_text("q");
    tmux.type_text("q");
    assert_eq!(wait_for_status(&status), 1, "{}", tmux.screen());
}
