//! A differential test against Debian's `unison` (Unison 2.52, run with
//! `-batch -auto -times=false`): for each scenario, both tools sync the
//! same base tree, see the same changes, sync again, and must end with
//! the same replicas and the same conflict set. Skipped loudly when
//! `unison` is not installed (fails in strict mode: `ACCORD_TEST_STRICT`).
//!
//! The same matrix runs with accord's B a remote root, over a real sshd
//! and from an `accord server` daemon, both started for the run; unison
//! keeps syncing two local directories, and the replicas must end alike.
//!
//! Deliberate differences (not in this matrix; see `accord_plan`'s
//! reconcile docs): Accord does not call deletions beneath a directory
//! deleted on the other side a conflict, and it merges new contents on one
//! side with new permissions on the other, where Unison reports conflicts.
//! Renames and moves end with the same replicas as Unison's (the pairing
//! only replaces a deletion and a copy with a rename that gives the same
//! result), but deliberately better: the other side's entry is renamed,
//! keeping its inode, instead of copied (`sync_renames.rs` checks that).
//! Hard-link groups likewise (the scenarios named "hard link"): the same
//! contents at the same names as Unison's, but the names of a group on one
//! side are one inode on the other too, made by links rather than copies,
//! where Unison makes each name a separate file (`sync/propagate/links.rs` checks
//! that).
//!
//! Ignore rules: the scenarios of `ignore_scenarios` run `--exclude`
//! against Unison's `-ignore` where both mean the same (`Name *.o` is
//! `*.o`, `Path dir/sub` is `/dir/sub`), added for the first sync, the
//! second, or both. Deliberately different (not in this matrix;
//! `sync/ignore.rs and the replica crate's side/rules.rs` checks it): a directory deleted on one side that
//! holds excluded entries on the other is not deleted there, since that
//! would delete what is excluded (the path fails, as rsync's `--delete`
//! does); Unison deletes it with them.
//!
//! Follow rules: the scenarios of `follow_scenarios` run `--follow`
//! against Unison's `-follow` (`Path link` is `/link`, `Name link` is
//! `link`): a followed link to a file or a directory, an update written
//! through it, and follow turned on between the syncs. Deliberately
//! different (not in this matrix; the replica crate's side/follow.rs checks it): follow
//! turned off after a sync that followed a link is no change by itself
//! (Accord's archive records that the path was seen through the link);
//! Unison takes the link for a new update and replaces the other side's
//! copy with the link.
//!
//! Case: the scenarios of `case_scenarios` run both syncs with accord's
//! `--ignorecase true` and Unison's `-ignorecase true` on these
//! case-sensitive roots (`Readme` on one side and `README` on the other
//! are one path; a change reaches the other side's own name; a change of
//! case only is not propagated; names on one side that differ only by
//! case are skipped, each tool naming one of them: compared folded).
//! Deliberately different (not in this matrix; `sync/case/mod.rs` checks it):
//! accord reports such a clash as a failed path (exit 2), Unison as a
//! skipped one; and accord folds Unicode case, Unison 2.52 ASCII and
//! Latin-1 only.

mod mirror_common;
mod remote_common;
mod sync_common;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;
use sync_common::*;

fn have_unison() -> bool {
    let found = Command::new("unison")
        .arg("-version")
        .output()
        .is_ok_and(|out| out.status.success());
    if !found {
        mirror_common::skip_or_fail(
            "unison is not installed (apt-get install unison); the differential test did not run",
        );
    }
    found
}

fn write(root: &Path, rel: &str, contents: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, contents).unwrap();
}

fn base_tree(root: &Path) {
    write(root, "f", "base f");
    write(root, "g", "base g");
    write(root, "dir/x", "base x");
    write(root, "dir/sub/y", "base y");
    write(root, "keep/k", "keep this so no replica is ever emptied");
    symlink("f", root.join("link")).unwrap();
}

/// Run unison on the pair; returns the paths it skipped as conflicts.
/// `follow`: the rules are `-follow` preferences, not `-ignore` ones;
/// `ignorecase`: with `-ignorecase true`.
fn unison(pair: &Pair, rules: &[&str], (follow, ignorecase): (bool, bool)) -> BTreeSet<String> {
    fs::create_dir_all(pair.state.join("unison")).unwrap();
    let option = if follow { "-follow" } else { "-ignore" };
    let out = Command::new("unison")
        .args(["-batch", "-auto", "-times=false", "-confirmbigdel=false"])
        .args(rules.iter().flat_map(|rule| [option, rule]))
        .args(if ignorecase {
            &["-ignorecase", "true"][..]
        } else {
            &[]
        })
        .arg(&pair.a)
        .arg(&pair.b)
        .env("UNISON", pair.state.join("unison"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0) | Some(1)),
        "unison failed: {text}"
    );
    let skipped = text
        .lines()
        .filter_map(|line| line.trim_start().strip_prefix("skipped: "))
        .map(|rest| rest.split(" (").next().unwrap().to_string());
    fold_if(ignorecase, skipped)
}

/// Paths as compared: folded when case is ignored (each tool names one
/// of the names of a clash, or of a path spelled two ways).
fn fold_if(ignorecase: bool, paths: impl Iterator<Item = String>) -> BTreeSet<String> {
    paths
        .map(|p| if ignorecase { p.to_lowercase() } else { p })
        .collect()
}

/// `follow`: the rules are `--follow` patterns, not `--exclude` ones;
/// `ignorecase`: with `--ignorecase true`.
fn accord(pair: &Pair, rules: &[&str], (follow, ignorecase): (bool, bool)) -> BTreeSet<String> {
    let mut args = vec!["--json", "--max-delete", "100%"];
    let option = if follow { "--follow" } else { "--exclude" };
    args.extend(rules.iter().flat_map(|rule| [option, rule]));
    if ignorecase {
        args.extend(["--ignorecase", "true"]);
    }
    let out = pair.sync(&args);
    // A clash of names is a failed path for accord, a skipped one for
    // Unison: both are compared as the paths left alone.
    let clash_ok = ignorecase && out.status.code() == Some(2);
    assert!(
        matches!(out.status.code(), Some(0) | Some(1)) || clash_ok,
        "{:?}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut left_alone = conflict_paths(&report);
    for error in report["errors"].as_array().unwrap() {
        assert!(
            ignorecase
                && error["error"]
                    .as_str()
                    .unwrap()
                    .contains("differ only by case"),
            "{error}"
        );
        left_alone.push(error["path"].as_str().unwrap().to_string());
    }
    fold_if(ignorecase, left_alone.into_iter())
}

type Change = fn(&Path, &Path);

/// Scenarios: what happens to A and B between the first sync and the
/// second.
fn scenarios() -> Vec<(&'static str, Change)> {
    vec![
        ("create on a", |a, _| write(a, "new", "new on a")),
        ("create on b in a new directory", |_, b| {
            write(b, "nd/deep/n", "new on b")
        }),
        ("edit on a", |a, _| write(a, "f", "edited on a")),
        ("edit on b", |_, b| write(b, "dir/x", "edited on b")),
        ("edits on both sides", |a, b| {
            write(a, "f", "a's edit");
            write(b, "f", "b's edit, longer");
        }),
        ("identical edits", |a, b| {
            write(a, "g", "the same");
            write(b, "g", "the same");
        }),
        ("identical creations", |a, b| {
            write(a, "twin", "twin");
            write(b, "twin", "twin");
        }),
        ("different creations", |a, b| {
            write(a, "clash", "from a");
            write(b, "clash", "from b");
        }),
        ("delete on a", |a, _| fs::remove_file(a.join("g")).unwrap()),
        ("delete a directory on b", |_, b| {
            fs::remove_dir_all(b.join("dir")).unwrap()
        }),
        ("delete on a, edit on b", |a, b| {
            fs::remove_file(a.join("f")).unwrap();
            write(b, "f", "edited on b");
        }),
        ("directory deleted on a, child edited on b", |a, b| {
            fs::remove_dir_all(a.join("dir")).unwrap();
            write(b, "dir/sub/y", "edited on b");
        }),
        ("touch on a", |a, _| set_mtime(&a.join("f"), 1_000_000_000)),
        ("delete on a, touch on b", |a, b| {
            fs::remove_file(a.join("g")).unwrap();
            set_mtime(&b.join("g"), 1_000_000_000);
        }),
        ("chmod on a", |a, _| {
            fs::set_permissions(a.join("f"), fs::Permissions::from_mode(0o600)).unwrap()
        }),
        ("chmod of a directory on b", |_, b| {
            fs::set_permissions(b.join("dir"), fs::Permissions::from_mode(0o700)).unwrap()
        }),
        ("new symlink on a", |a, _| {
            symlink("dir/x", a.join("to_x")).unwrap()
        }),
        ("symlink retargeted on b", |_, b| {
            fs::remove_file(b.join("link")).unwrap();
            symlink("g", b.join("link")).unwrap();
        }),
        ("file becomes a directory on a", |a, _| {
            fs::remove_file(a.join("g")).unwrap();
            write(a, "g/now", "a directory");
        }),
        ("directory becomes a file on b", |_, b| {
            fs::remove_dir_all(b.join("dir")).unwrap();
            write(b, "dir", "a file");
        }),
        ("unicode names", |a, b| {
            write(a, "café/naïve ☃", "snow");
            write(b, "日本語", "nihongo");
        }),
        ("edit on a, same edit plus a new file on b", |a, b| {
            write(a, "f", "same");
            write(b, "f", "same");
            write(b, "extra", "extra");
        }),
        ("empty file created on a", |a, _| write(a, "empty", "")),
        ("empty directory created on b", |_, b| {
            fs::create_dir(b.join("hollow")).unwrap()
        }),
        ("subdirectory deleted on a", |a, _| {
            fs::remove_dir_all(a.join("dir/sub")).unwrap()
        }),
        ("hard link made on a", |a, _| {
            fs::hard_link(a.join("f"), a.join("f-link")).unwrap()
        }),
        ("hard-link group created on b", |_, b| {
            write(b, "grp/one", "one inode, three names");
            fs::hard_link(b.join("grp/one"), b.join("grp/two")).unwrap();
            fs::hard_link(b.join("grp/one"), b.join("three")).unwrap();
        }),
        ("hard link made and edited through on a", |a, _| {
            fs::hard_link(a.join("g"), a.join("dir/g-link")).unwrap();
            fs::write(a.join("dir/g-link"), "edited through the new name").unwrap();
        }),
        ("file renamed on a", |a, _| {
            fs::rename(a.join("f"), a.join("f-renamed")).unwrap()
        }),
        ("directory renamed on b", |_, b| {
            fs::rename(b.join("dir"), b.join("dir-renamed")).unwrap()
        }),
        ("file moved into a new directory on a", |a, _| {
            fs::create_dir(a.join("moved")).unwrap();
            fs::rename(a.join("g"), a.join("moved/g")).unwrap();
        }),
        ("the same file deleted on both sides", |a, b| {
            fs::remove_file(a.join("f")).unwrap();
            fs::remove_file(b.join("f")).unwrap();
        }),
        ("the same directory deleted on both sides", |a, b| {
            fs::remove_dir_all(a.join("dir")).unwrap();
            fs::remove_dir_all(b.join("dir")).unwrap();
        }),
        ("the same chmod on both sides", |a, b| {
            for root in [a, b] {
                fs::set_permissions(root.join("g"), fs::Permissions::from_mode(0o640)).unwrap();
            }
        }),
        ("different chmods on both sides", |a, b| {
            fs::set_permissions(a.join("g"), fs::Permissions::from_mode(0o600)).unwrap();
            fs::set_permissions(b.join("g"), fs::Permissions::from_mode(0o755)).unwrap();
        }),
        ("executable bit set on a", |a, _| {
            fs::set_permissions(a.join("dir/x"), fs::Permissions::from_mode(0o755)).unwrap()
        }),
        ("symlink becomes a file on a", |a, _| {
            fs::remove_file(a.join("link")).unwrap();
            write(a, "link", "a file now");
        }),
        ("file becomes a symlink on b", |_, b| {
            fs::remove_file(b.join("g")).unwrap();
            symlink("f", b.join("g")).unwrap();
        }),
        ("symlink deleted on a", |a, _| {
            fs::remove_file(a.join("link")).unwrap()
        }),
        ("symlink retargeted differently on both sides", |a, b| {
            fs::remove_file(a.join("link")).unwrap();
            symlink("g", a.join("link")).unwrap();
            fs::remove_file(b.join("link")).unwrap();
            symlink("dir", b.join("link")).unwrap();
        }),
        ("many new files on b", |_, b| {
            for i in 0..60 {
                write(b, &format!("many/d{}/n{i}", i % 6), &format!("file {i}"));
            }
        }),
        ("a large file created on a", |a, _| {
            write(a, "large", &"0123456789abcdef".repeat(200_000))
        }),
        ("edit deep in a directory on b", |_, b| {
            write(b, "dir/sub/y", "edited deep on b")
        }),
        (
            "a new directory on both sides with different files",
            |a, b| {
                write(a, "shared/from-a", "a");
                write(b, "shared/from-b", "b");
            },
        ),
        (
            "a new directory on both sides with the same file",
            |a, b| {
                write(a, "same-dir/s", "equal");
                write(b, "same-dir/s", "equal");
            },
        ),
        ("touch on both sides", |a, b| {
            set_mtime(&a.join("f"), 1_000_000_000);
            set_mtime(&b.join("f"), 1_100_000_000);
        }),
        ("edit on a, then the original restored", |a, _| {
            write(a, "g", "briefly different");
            write(a, "g", "base g");
        }),
        ("names differing only by case", |a, b| {
            write(a, "Readme", "upper first");
            write(b, "README", "all upper");
        }),
        ("names with spaces, quotes and a dot first", |a, b| {
            write(a, "it's a \"name\" here", "quoted");
            write(b, ".hidden", "dotfile");
        }),
    ]
}

/// The rules of a scenario's two syncs, as each tool is given them.
#[derive(Clone, Copy, Default)]
struct Rules {
    /// `--exclude` patterns and the same as Unison's `-ignore` rules.
    accord: &'static [&'static str],
    unison: &'static [&'static str],
    in_first_sync: bool,
    in_second_sync: bool,
    /// The rules are follow rules (`--follow`, `-follow`).
    follow: bool,
    /// Both syncs ignore case (`--ignorecase true`, `-ignorecase true`).
    ignorecase: bool,
}

impl Rules {
    fn of_sync(&self, second: bool) -> (&'static [&'static str], &'static [&'static str]) {
        let on = if second {
            self.in_second_sync
        } else {
            self.in_first_sync
        };
        if on {
            (self.accord, self.unison)
        } else {
            (&[], &[])
        }
    }
}

const OBJECTS: (&[&str], &[&str]) = (&["*.o"], &["Name *.o"]);
const SUBDIR: (&[&str], &[&str]) = (&["/dir/sub"], &["Path dir/sub"]);
const DIR_ANYWHERE: (&[&str], &[&str]) = (&["dir"], &["Name dir"]);
const FILE_G: (&[&str], &[&str]) = (&["/g"], &["Path g"]);

fn rules(
    both: (&'static [&'static str], &'static [&'static str]),
    first: bool,
    second: bool,
) -> Rules {
    Rules {
        accord: both.0,
        unison: both.1,
        in_first_sync: first,
        in_second_sync: second,
        follow: false,
        ignorecase: false,
    }
}

fn follow(
    both: (&'static [&'static str], &'static [&'static str]),
    first: bool,
    second: bool,
) -> Rules {
    Rules {
        follow: true,
        ..rules(both, first, second)
    }
}

const LINK_BY_PATH: (&[&str], &[&str]) = (&["/link"], &["Path link"]);
const LINK_BY_NAME: (&[&str], &[&str]) = (&["link"], &["Name link"]);
const DIR_LINK: (&[&str], &[&str]) = (&["/dlink"], &["Path dlink"]);

/// Scenarios with follow rules, Unison's and ours meaning the same
/// (the base tree's `link` points to `f`).
fn follow_scenarios() -> Vec<(&'static str, Rules, Change)> {
    vec![
        (
            "a followed link: its target edited on a",
            follow(LINK_BY_PATH, true, true),
            |a, _| write(a, "f", "f edited on a, so is the link"),
        ),
        (
            "a followed link by name: a new file beside it on b",
            follow(LINK_BY_NAME, true, true),
            |_, b| write(b, "dir/new", "new on b"),
        ),
        (
            "a followed link to a directory, made on a",
            follow(DIR_LINK, true, true),
            |a, _| symlink("dir", a.join("dlink")).unwrap(),
        ),
        (
            "a followed link to a directory, made on a, a file beneath it on b",
            follow(DIR_LINK, true, true),
            |a, b| {
                symlink("dir", a.join("dlink")).unwrap();
                write(b, "dir/sub/z", "new on b");
            },
        ),
        (
            "a followed link: the file on b edited, written through a's link",
            follow(LINK_BY_PATH, true, true),
            |_, b| write(b, "link", "edited on b, longer"),
        ),
        (
            "follow turned on: both links lead to equal files",
            follow(LINK_BY_PATH, false, true),
            |_, _| {},
        ),
        (
            "follow turned on: the target edited on a",
            follow(LINK_BY_PATH, false, true),
            |a, _| write(a, "f", "f edited on a"),
        ),
    ]
}

const IGNORE_CASE: Rules = Rules {
    accord: &[],
    unison: &[],
    in_first_sync: false,
    in_second_sync: false,
    follow: false,
    ignorecase: true,
};

fn rename(root: &Path, from: &str, to: &str) {
    fs::rename(root.join(from), root.join(to)).unwrap();
}

/// Scenarios ignoring case, on these case-sensitive roots.
fn case_scenarios() -> Vec<(&'static str, Rules, Change)> {
    vec![
        (
            "case: created under names differing by case, equal",
            IGNORE_CASE,
            |a, b| {
                write(a, "Note", "the same note");
                write(b, "NOTE", "the same note");
            },
        ),
        (
            "case: created under names differing by case, different",
            IGNORE_CASE,
            |a, b| {
                write(a, "Note", "a's note");
                write(b, "NOTE", "b's note, longer");
            },
        ),
        ("case: a change of case only on b", IGNORE_CASE, |_, b| {
            rename(b, "f", "F")
        }),
        (
            "case: b changes the case, a edits: the edit reaches b's name",
            IGNORE_CASE,
            |a, b| {
                rename(b, "g", "G");
                write(a, "g", "edited on a");
            },
        ),
        (
            "case: b changes the case and edits, a leaves it",
            IGNORE_CASE,
            |_, b| {
                rename(b, "g", "G");
                write(b, "G", "edited on b");
            },
        ),
        (
            "case: b changes the case, a deletes it",
            IGNORE_CASE,
            |a, b| {
                rename(b, "g", "G");
                fs::remove_file(a.join("g")).unwrap();
            },
        ),
        (
            "case: a directory's case changed on b, a file created in it on a",
            IGNORE_CASE,
            |a, b| {
                rename(b, "dir/sub", "dir/SUB");
                write(a, "dir/sub/new", "new on a");
                write(a, "dir/sub/y", "edited on a");
            },
        ),
        (
            "case: names differing by case only on a, the rest synced",
            IGNORE_CASE,
            |a, b| {
                write(a, "Clash", "one");
                write(a, "clash", "two, longer");
                write(a, "dir/fine", "synced");
                write(b, "keep/other", "synced too");
            },
        ),
        (
            "case: a name created on a beside its twin that was synced",
            IGNORE_CASE,
            |a, _| write(a, "F", "a twin of f"),
        ),
    ]
}

/// Scenarios with ignore rules, Unison's and ours meaning the same.
fn ignore_scenarios() -> Vec<(&'static str, Rules, Change)> {
    vec![
        (
            "excluded by name: different files on both sides",
            rules(OBJECTS, true, true),
            |a, b| {
                write(a, "x.o", "a's object");
                write(b, "x.o", "b's object, longer");
                write(b, "dir/y.o", "only on b");
                write(a, "dir/plain", "not excluded");
            },
        ),
        (
            "excluded by path: edits on both sides beneath it",
            rules(SUBDIR, true, true),
            |a, b| {
                write(a, "dir/sub/y", "a's edit");
                write(b, "dir/sub/y", "b's edit");
                write(a, "dir/sub/new", "new on a");
                write(b, "dir/x", "edited on b, not excluded");
            },
        ),
        (
            "a rule added: the excluded file deleted on a",
            rules(FILE_G, false, true),
            |a, _| fs::remove_file(a.join("g")).unwrap(),
        ),
        (
            "a rule added: an excluded directory deleted on b, edited on a",
            rules(DIR_ANYWHERE, false, true),
            |a, b| {
                fs::remove_dir_all(b.join("dir")).unwrap();
                write(a, "dir/x", "edited on a");
            },
        ),
        (
            "a rule removed: what it kept out arrives, an equal copy agrees",
            rules(FILE_G, true, false),
            |_, b| write(b, "g", "base g"),
        ),
        (
            "a rule removed: a different copy is a conflict",
            rules(FILE_G, true, false),
            |_, b| write(b, "g", "b's own g"),
        ),
    ]
}

/// Both tools' archives forgotten between the syncs, after changes.
fn forget_archives(pair: &Pair) {
    for entry in fs::read_dir(&pair.state).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() == "unison" {
            for archive in fs::read_dir(&path).unwrap() {
                let archive = archive.unwrap().path();
                let name = archive.file_name().unwrap().to_string_lossy().to_string();
                if name.starts_with("ar") || name.starts_with("fp") {
                    fs::remove_file(archive).unwrap();
                }
            }
        } else if path.is_file() {
            fs::remove_file(path).unwrap();
        }
    }
}

fn run_scenario(
    name: &str,
    (change, rules): (Change, Rules),
    lose_archives: bool,
    remote: Option<&RemoteB>,
) -> Result<(), String> {
    let with_accord = match remote {
        Some(remote) => Pair::with_remote_b(remote),
        None => Pair::new(),
    };
    let with_unison = Pair::new();
    for pair in [&with_accord, &with_unison] {
        base_tree(&pair.a);
    }
    let (accord_rules, unison_rules) = rules.of_sync(false);
    accord(&with_accord, accord_rules, (rules.follow, rules.ignorecase));
    unison(&with_unison, unison_rules, (rules.follow, rules.ignorecase));
    for pair in [&with_accord, &with_unison] {
        change(&pair.a, &pair.b);
        if lose_archives {
            forget_archives(pair);
        }
    }
    let (accord_rules, unison_rules) = rules.of_sync(true);
    let accord_conflicts = accord(&with_accord, accord_rules, (rules.follow, rules.ignorecase));
    let unison_conflicts = unison(&with_unison, unison_rules, (rules.follow, rules.ignorecase));
    eprintln!("{name} (archives lost: {lose_archives}): conflicts {accord_conflicts:?}");
    let mut problems = Vec::new();
    if accord_conflicts != unison_conflicts {
        problems.push(format!(
            "conflicts: accord {accord_conflicts:?}, unison {unison_conflicts:?}"
        ));
    }
    for side in ['a', 'b'] {
        let (ours, theirs) = (
            snapshot(with_accord.root(side)),
            snapshot(with_unison.root(side)),
        );
        if ours != theirs {
            problems.push(format!(
                "replica {side}: accord {ours:?}\n unison {theirs:?}"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{name}: {}", problems.join("\n")))
    }
}

fn run_matrix(remote: Option<&RemoteB>) {
    let mut failures = Vec::new();
    let mut ran = 0;
    let plain = scenarios()
        .into_iter()
        .map(|(name, change)| (name, Rules::default(), change));
    let all = plain
        .chain(ignore_scenarios())
        .chain(follow_scenarios())
        .chain(case_scenarios());
    for (name, rules, change) in all {
        for lose_archives in [false, true] {
            ran += 1;
            if let Err(problem) = run_scenario(name, (change, rules), lose_archives, remote) {
                failures.push(format!("[archives lost: {lose_archives}] {problem}"));
            }
        }
    }
    eprintln!("{ran} scenarios against unison, {} differ", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn accord_sync_ends_where_unison_does() {
    if !have_unison() {
        return;
    }
    run_matrix(None);
}

#[test]
fn with_b_over_ssh_accord_sync_ends_where_unison_does() {
    if !have_unison() {
        return;
    }
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    let base = tempfile::tempdir().unwrap();
    let remote = RemoteB::over_ssh(base.path(), &sshd.rsh());
    run_matrix(Some(&remote));
}

#[test]
fn with_b_from_the_daemon_accord_sync_ends_where_unison_does() {
    if !have_unison() {
        return;
    }
    let daemon = Daemon::start();
    run_matrix(Some(&daemon.remote_b()));
}

// ---- --merge against Unison's `merge` preference ---------------------------
//
// Unison 2.52 runs its `merge` program in batch mode (`-batch -auto`), so
// the same conflicts go to the same program in both tools: `-merge "Name *
// -> CMD"` and `--merge CMD`, CURRENT1 being A's version in both. A merge
// that fails is a "failed" path to Unison and a conflict left to Accord:
// both leave the path as it was, so the sets compared are Unison's
// skipped and failed paths against Accord's conflicts. Deliberately
// different (not in this matrix; `sync/merge_program.rs` checks them): files
// whose permissions differ are not merged (Unison merges them and leaves
// each side its own permissions, so the replicas never agree), and an
// empty NEW is taken as the merge (Unison 2.52 then took B's version).

const CONCAT: &str = "cat CURRENT1 CURRENT2 > NEW";

/// Unison with `-merge` on every name; its skipped and failed paths.
fn unison_merging(pair: &Pair, command: &str) -> BTreeSet<String> {
    fs::create_dir_all(pair.state.join("unison")).unwrap();
    let out = Command::new("unison")
        .args(["-batch", "-auto", "-times=false", "-confirmbigdel=false"])
        .arg("-merge")
        .arg(format!("Name * -> {command}"))
        .arg(&pair.a)
        .arg(&pair.b)
        .env("UNISON", pair.state.join("unison"))
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        matches!(out.status.code(), Some(0..=2)),
        "unison failed: {text}"
    );
    text.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            line.strip_prefix("skipped: ")
                .or_else(|| line.strip_prefix("failed: "))
        })
        .map(|rest| rest.split(" (").next().unwrap().to_string())
        .collect()
}

fn accord_merging(pair: &Pair, command: &str) -> BTreeSet<String> {
    let out = pair.sync(&["--json", "--max-delete", "100%", "--merge", command]);
    assert!(
        matches!(out.status.code(), Some(0) | Some(1)),
        "{:?}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    conflict_paths(&report).into_iter().collect()
}

/// Scenarios for a merge program: the change, and the program.
fn merge_scenarios() -> Vec<(&'static str, &'static str, Change)> {
    vec![
        ("merge: f edited on both", CONCAT, |a, b| {
            write(a, "f", "a's f\n");
            write(b, "f", "b's f\n");
        }),
        ("merge: two files edited on both", CONCAT, |a, b| {
            write(a, "f", "a's f\n");
            write(b, "f", "b's f, longer\n");
            write(a, "dir/sub/y", "a's y\n");
            write(b, "dir/sub/y", "b's y\n");
        }),
        ("merge: created on both, different", CONCAT, |a, b| {
            write(a, "new", "a's new\n");
            write(b, "new", "b's new\n");
        }),
        ("merge: equal edits need no merge", CONCAT, |a, b| {
            write(a, "f", "the same edit\n");
            write(b, "f", "the same edit\n");
        }),
        ("merge: the program fails", "exit 1; : NEW", |a, b| {
            write(a, "f", "a's f\n");
            write(b, "f", "b's f\n");
        }),
        ("merge: the program writes no NEW", "true NEW", |a, b| {
            write(a, "f", "a's f\n");
            write(b, "f", "b's f\n");
        }),
        ("merge: deleted on a, edited on b", CONCAT, |a, b| {
            fs::remove_file(a.join("g")).unwrap();
            write(b, "g", "b's g\n");
        }),
        ("merge: symlinks changed on both", CONCAT, |a, b| {
            for (root, target) in [(a, "a-target"), (b, "b-target")] {
                fs::remove_file(root.join("link")).unwrap();
                symlink(target, root.join("link")).unwrap();
            }
        }),
        ("merge: a directory against a file", CONCAT, |a, b| {
            fs::remove_dir_all(b.join("dir/sub")).unwrap();
            write(b, "dir/sub", "now a file\n");
            write(a, "dir/sub/y", "a's y\n");
        }),
        (
            "merge: edited on both, same permissions changed",
            CONCAT,
            |a, b| {
                write(a, "f", "a's f\n");
                write(b, "f", "b's f\n");
                for root in [a, b] {
                    fs::set_permissions(root.join("f"), fs::Permissions::from_mode(0o600)).unwrap();
                }
            },
        ),
    ]
}

fn run_merge_scenario(
    name: &str,
    command: &str,
    change: Change,
    lose_archives: bool,
) -> Result<(), String> {
    let (with_accord, with_unison) = (Pair::new(), Pair::new());
    for pair in [&with_accord, &with_unison] {
        base_tree(&pair.a);
    }
    accord(&with_accord, &[], (false, false));
    unison(&with_unison, &[], (false, false));
    for pair in [&with_accord, &with_unison] {
        change(&pair.a, &pair.b);
        if lose_archives {
            forget_archives(pair);
        }
    }
    let ours = accord_merging(&with_accord, command);
    let theirs = unison_merging(&with_unison, command);
    eprintln!("{name} (archives lost: {lose_archives}): unresolved {ours:?}");
    let mut problems = Vec::new();
    if ours != theirs {
        problems.push(format!("unresolved: accord {ours:?}, unison {theirs:?}"));
    }
    for side in ['a', 'b'] {
        let (ours, theirs) = (
            snapshot(with_accord.root(side)),
            snapshot(with_unison.root(side)),
        );
        if ours != theirs {
            problems.push(format!(
                "replica {side}: accord {ours:?}\n unison {theirs:?}"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!("{name}: {}", problems.join("\n")))
    }
}

#[test]
fn accord_merge_ends_where_unison_merge_does() {
    if !have_unison() {
        return;
    }
    let mut failures = Vec::new();
    let mut ran = 0;
    for (name, command, change) in merge_scenarios() {
        for lose_archives in [false, true] {
            ran += 1;
            if let Err(problem) = run_merge_scenario(name, command, change, lose_archives) {
                failures.push(format!("[archives lost: {lose_archives}] {problem}"));
            }
        }
    }
    eprintln!(
        "{ran} merge scenarios against unison, {} differ",
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
