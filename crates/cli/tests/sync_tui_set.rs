//! The interactive `accord sync A B C …` driven like a person would,
//! through tmux (`tui_common`): the plan with a column per root, a root's
//! version chosen for a conflict with its letter, a path skipped, quit.
//! Skips loudly without tmux (fails in strict mode: `ACCORD_TEST_STRICT`).

mod mirror_common;
mod sync_common;
mod tui_common;
use std::path::{Path, PathBuf};
use sync_common::{bin, json_report, snapshot};
use tui_common::*;

/// Roots A, B, C … (`a`, `b`, `c` here) and a private state directory.
struct Set {
    _tmp: tempfile::TempDir,
    roots: Vec<PathBuf>,
    state: PathBuf,
    status: PathBuf,
}

impl Set {
    /// The roots' names on disk are not in the order written (`r1 r2 r0`
    /// for three), so that the set's own order (by path) is another: the
    /// columns and letters must follow the order written.
    fn new(count: usize) -> Set {
        let tmp = tempfile::tempdir().unwrap();
        let roots: Vec<PathBuf> = (0..count)
            .map(|i| tmp.path().join(format!("r{}", (i + 1) % count)))
            .collect();
        for root in &roots {
            std::fs::create_dir(root).unwrap();
        }
        Set {
            state: tmp.path().join("state"),
            status: tmp.path().join("status"),
            roots,
            _tmp: tmp,
        }
    }

    fn root(&self, letter: char) -> &Path {
        &self.roots[usize::from(letter as u8 - b'a')]
    }

    fn write(&self, letter: char, rel: &str, contents: &str) {
        let path = self.root(letter).join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, contents).unwrap();
    }

    fn read(&self, letter: char, rel: &str) -> Option<String> {
        std::fs::read_to_string(self.root(letter).join(rel)).ok()
    }

    /// A batch run (no terminal) with `--json`, which must exit with `code`.
    fn sync_json(&self, code: i32) -> serde_json::Value {
        let out = std::process::Command::new(bin())
            .arg("sync")
            .args(&self.roots)
            .arg("--json")
            .env("ACCORD_STATE_DIR", &self.state)
            .output()
            .unwrap();
        json_report(&out, code)
    }

    /// `accord sync a b c …` (interactive: no --batch) in a tmux pane; its
    /// exit status goes to `self.status`.
    fn start(&self) -> Tmux {
        self.start_with("")
    }

    /// `start` with options (`extra`, as the shell reads them).
    fn start_with(&self, extra: &str) -> Tmux {
        let roots: Vec<String> = self.roots.iter().map(|r| quoted(r)).collect();
        Tmux::start(&format!(
            "ACCORD_STATE_DIR={} {} sync {extra} {}; echo $? > {}; sleep 600",
            quoted(&self.state),
            quoted(&bin()),
            roots.join(" "),
            quoted(&self.status),
        ))
    }
}

fn changes(report: &serde_json::Value) -> usize {
    report["changes"].as_array().unwrap().len()
}

fn conflicts(report: &serde_json::Value) -> usize {
    report["conflicts"].as_array().unwrap().len()
}

/// Synced roots, then a conflict between B and C (`f.txt`) and a change
/// on A (`one.txt`).
fn set_with_a_conflict(count: usize) -> Set {
    let set = Set::new(count);
    set.write('a', "f.txt", "base\n");
    set.write('a', "one.txt", "one base\n");
    set.sync_json(0);
    set.write('b', "f.txt", "from b\n");
    set.write('c', "f.txt", "from c\n");
    set.write('a', "one.txt", "one new\n");
    set
}

/// The cells of a row: the words between the cursor's mark and the path.
fn words(row: &str) -> Vec<&str> {
    row.split_whitespace().collect()
}

/// Wait for the plan, as reconciled: the conflict and the change on A,
/// a column per root.
fn wait_for_plan(tmux: &Tmux) -> String {
    let screen = tmux.wait_for("the plan", |s| row(s, "one.txt").is_some());
    let header = screen
        .lines()
        .find(|line| line.contains("action"))
        .expect("a line naming the columns");
    assert!(
        words(header).starts_with(&["A", "B", "C"]),
        "the columns: {screen}"
    );
    let conflict = row(&screen, "f.txt").expect("the conflict is listed");
    assert!(conflict.contains("conflict: changed apart"), "{screen}");
    // B and C changed it; A holds the older version: blank.
    assert!(
        words(conflict).starts_with(&[">", "changed", "changed"]),
        "{screen}"
    );
    let change = row(&screen, "one.txt").expect("the change on A is listed");
    assert!(
        words(change).starts_with(&["changed", "<-", "<-"]),
        "{screen}"
    );
    assert!(screen.contains("g go"), "the help line: {screen}");
    screen
}

#[test]
fn tui_set_chooses_c_for_a_conflict_between_b_and_c() {
    if !have_tmux() {
        return;
    }
    let set = set_with_a_conflict(3);
    let tmux = set.start();
    wait_for_plan(&tmux);
    // Every root's version, and the diff of the latest two.
    tmux.type_text("d");
    tmux.wait_for("the versions", |s| {
        s.contains("C: file") && s.contains("-from b") && s.contains("+from c")
    });
    tmux.type_text("q");
    tmux.wait_for("the list again", |s| !s.contains("+from c"));
    // The conflict (first row) settled with C's version.
    tmux.type_text("C");
    let screen = tmux.wait_for_row("f.txt", "C's version wins");
    let chosen = row(&screen, "f.txt").unwrap();
    assert!(
        words(chosen).starts_with(&[">*", "<-", "<-", "changed"]),
        "{screen}"
    );
    tmux.type_text("g");

    assert_eq!(wait_for_status(&set.status), 0, "{}", tmux.screen());
    for root in ['a', 'b', 'c'] {
        assert_eq!(set.read(root, "f.txt").as_deref(), Some("from c\n"));
        assert_eq!(set.read(root, "one.txt").as_deref(), Some("one new\n"));
    }
    // Recorded as settled: the next run has nothing to do.
    let next = set.sync_json(0);
    assert_eq!((changes(&next), conflicts(&next)), (0, 0), "{next}");
}

#[test]
fn tui_set_choice_lets_a_root_away_catch_up_without_a_conflict() {
    if !have_tmux() {
        return;
    }
    let set = set_with_a_conflict(4);
    // D is away for the interactive run.
    let away = set.root('d').with_extension("away");
    std::fs::rename(set.root('d'), &away).unwrap();
    let tmux = set.start();
    let screen = wait_for_plan(&tmux);
    let conflict = row(&screen, "f.txt").unwrap();
    assert!(words(conflict)[3] == "away", "{screen}");
    tmux.type_text("C");
    tmux.wait_for_row("f.txt", "C's version wins");
    tmux.type_text("g");
    // A root left out: status 4.
    assert_eq!(wait_for_status(&set.status), 4, "{}", tmux.screen());
    assert_eq!(set.read('b', "f.txt").as_deref(), Some("from c\n"));

    // D back: it takes C's version, with no conflict; then all agree.
    std::fs::rename(&away, set.root('d')).unwrap();
    let next = set.sync_json(0);
    assert_eq!(conflicts(&next), 0, "{next}");
    assert_eq!(set.read('d', "f.txt").as_deref(), Some("from c\n"));
    assert_eq!(set.read('d', "one.txt").as_deref(), Some("one new\n"));
    let first = snapshot(set.root('a'));
    for root in ['b', 'c', 'd'] {
        assert_eq!(snapshot(set.root(root)), first, "{root} differs");
    }
}

#[test]
fn tui_set_skip_leaves_the_path_for_the_next_run() {
    if !have_tmux() {
        return;
    }
    let set = set_with_a_conflict(3);
    let tmux = set.start();
    wait_for_plan(&tmux);
    tmux.type_text("B");
    tmux.wait_for_row("f.txt", "B's version wins");
    tmux.keys(&["Down"]);
    tmux.type_text("s");
    let screen = tmux.wait_for_row("one.txt", "skipped");
    // A skipped path receives nothing.
    assert!(!row(&screen, "one.txt").unwrap().contains("<-"), "{screen}");
    tmux.type_text("g");

    // A path was skipped: not all agreed.
    assert_eq!(wait_for_status(&set.status), 1, "{}", tmux.screen());
    for root in ['a', 'b', 'c'] {
        assert_eq!(set.read(root, "f.txt").as_deref(), Some("from b\n"));
    }
    assert_eq!(set.read('b', "one.txt").as_deref(), Some("one base\n"));
    // Nothing was recorded for it: the next run carries it, and only it.
    let next = set.sync_json(0);
    assert_eq!((changes(&next), conflicts(&next)), (2, 0), "{next}");
    assert_eq!(set.read('c', "one.txt").as_deref(), Some("one new\n"));
}

#[test]
fn tui_set_quit_changes_nothing() {
    if !have_tmux() {
        return;
    }
    let set = set_with_a_conflict(3);
    let tmux = set.start();
    wait_for_plan(&tmux);
    // A choice made, then thrown away with the rest.
    tmux.type_text("C");
    tmux.wait_for_row("f.txt", "C's version wins");
    tmux.type_text("q");

    assert_eq!(wait_for_status(&set.status), 1, "{}", tmux.screen());
    assert_eq!(set.read('a', "f.txt").as_deref(), Some("base\n"));
    assert_eq!(set.read('b', "f.txt").as_deref(), Some("from b\n"));
    assert_eq!(set.read('c', "f.txt").as_deref(), Some("from c\n"));
    assert_eq!(set.read('b', "one.txt").as_deref(), Some("one base\n"));
    // Still the conflict and the change for the next run.
    let next = set.sync_json(1);
    assert_eq!((changes(&next), conflicts(&next)), (2, 1), "{next}");
}

/// Quitting with `--merge` given runs no program: the conflict is left
/// as it was on every root.
#[test]
fn tui_set_quit_runs_no_merge_program() {
    if !have_tmux() {
        return;
    }
    let set = set_with_a_conflict(3);
    let tmux = set.start_with("--merge 'cat CURRENT1 CURRENT2 > NEW'");
    wait_for_plan(&tmux);
    tmux.type_text("q");

    assert_eq!(wait_for_status(&set.status), 1, "{}", tmux.screen());
    for (letter, held) in [('a', "base\n"), ('b', "from b\n"), ('c', "from c\n")] {
        assert_eq!(set.read(letter, "f.txt").as_deref(), Some(held), "{letter}");
    }
    assert_eq!(set.read('b', "one.txt").as_deref(), Some("one base\n"));
}

#[test]
fn tui_set_auto_lists_only_the_conflicts() {
    if !have_tmux() {
        return;
    }
    let set = set_with_a_conflict(3);
    let tmux = set.start_with("--auto");
    let screen = tmux.wait_for_row("f.txt", "conflict: changed apart");
    assert!(row(&screen, "one.txt").is_none(), "{screen}");
    tmux.type_text("C");
    tmux.wait_for_row("f.txt", "C's version wins");
    tmux.type_text("g");
    // The change not shown is carried out as planned.
    assert_eq!(wait_for_status(&set.status), 0, "{}", tmux.screen());
    for root in ['a', 'b', 'c'] {
        assert_eq!(set.read(root, "f.txt").as_deref(), Some("from c\n"));
        assert_eq!(set.read(root, "one.txt").as_deref(), Some("one new\n"));
    }
}

/// `m` runs the merge program on the selected conflict now: the row says
/// MERGED, and `g` writes the result to every root (B's version first,
/// then C's, by the order written).
#[test]
fn tui_set_m_merges_the_selected_conflict() {
    if !have_tmux() {
        return;
    }
    let set = set_with_a_conflict(3);
    let tmux = set.start_with("--merge 'cat CURRENT1 CURRENT2 > NEW'");
    wait_for_plan(&tmux);
    tmux.type_text("m");
    tmux.wait_for_row("f.txt", "MERGED (14 B)");
    tmux.type_text("g");
    assert_eq!(wait_for_status(&set.status), 0, "{}", tmux.screen());
    for letter in ['a', 'b', 'c'] {
        let merged = set.read(letter, "f.txt");
        assert_eq!(merged.as_deref(), Some("from b\nfrom c\n"), "{letter}");
        assert_eq!(set.read(letter, "one.txt").as_deref(), Some("one new\n"));
    }
    assert_eq!(changes(&set.sync_json(0)), 0);
}

/// `m` again drops the merge; a conflict not merged with `m` is left, as
/// with two roots (the program runs only where the person asked); `m`
/// on a path that is no conflict, or without a program, says so.
#[test]
fn tui_set_m_twice_drops_the_merge_and_the_conflict_stays() {
    if !have_tmux() {
        return;
    }
    let set = set_with_a_conflict(3);
    let tmux = set.start_with("--merge 'cat CURRENT1 CURRENT2 > NEW'");
    wait_for_plan(&tmux);
    tmux.type_text("m");
    tmux.wait_for_row("f.txt", "MERGED");
    tmux.type_text("m");
    tmux.wait_for_row("f.txt", "conflict: changed apart");
    tmux.wait_for("why", |s| s.contains("merge dropped; still a conflict"));
    tmux.keys(&["Down"]);
    tmux.type_text("m");
    tmux.wait_for("why", |s| s.contains("one.txt: not a conflict"));
    tmux.type_text("g");
    assert_eq!(wait_for_status(&set.status), 1, "{}", tmux.screen());
    for (letter, held) in [('a', "base\n"), ('b', "from b\n"), ('c', "from c\n")] {
        assert_eq!(set.read(letter, "f.txt").as_deref(), Some(held), "{letter}");
    }
    assert_eq!(set.read('c', "one.txt").as_deref(), Some("one new\n"));

    let plain = set.start();
    plain.wait_for_row("f.txt", "conflict: changed apart");
    plain.type_text("m");
    plain.wait_for("why", |s| {
        s.contains("no merge program: start with --merge CMD")
    });
    plain.type_text("q");
}

/// A new directory is one row with what it carries folded into it; Enter
/// opens it a level at a time and folds it again.
#[test]
fn tui_set_folds_a_new_directory_into_its_row() {
    if !have_tmux() {
        return;
    }
    let set = set_with_a_conflict(3);
    set.write('a', "new/deeper/deepest/file.txt", "new\n");
    set.write('a', "new/top.txt", "top\n");
    let tmux = set.start();
    let screen = tmux.wait_for_row("new", "new dir from A, 4 inside");
    assert!(!screen.contains("new/"), "{screen}");
    // f.txt, new, one.txt: the folded row is the second.
    tmux.keys(&["Down"]);
    tmux.wait_for("the folded row selected", |s| {
        s.lines()
            .any(|l| l.starts_with('>') && l.trim_end().ends_with(" new"))
    });
    tmux.keys(&["Enter"]);
    let opened = tmux.wait_for_row("new/deeper", "new dir from A, 2 inside");
    assert!(row(&opened, "new/top.txt").is_some(), "{opened}");
    tmux.keys(&["Enter"]);
    tmux.wait_for("folded again", |s| !s.contains("new/deeper"));
    tmux.keys(&["Up"]);
    tmux.type_text("C");
    tmux.wait_for_row("f.txt", "C's version wins");
    tmux.type_text("g");
    assert_eq!(wait_for_status(&set.status), 0, "{}", tmux.screen());
    for letter in ['b', 'c'] {
        let file = set.read(letter, "new/deeper/deepest/file.txt");
        assert_eq!(file.as_deref(), Some("new\n"), "{letter}");
    }
}
