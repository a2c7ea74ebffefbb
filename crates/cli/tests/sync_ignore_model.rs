//! Ignore rules under random operations: both replicas changed at random,
//! synced under rules that change from run to run (none, `*.x`, `/q`, or
//! both: patterns whose meaning does not depend on a path's kind, so the
//! test can tell what they exclude by name alone), given as `--exclude`
//! or, at random, in an `.accordignore` at A's top only (kept from B by
//! `--exclude /.accordignore`, so B's walk never knows them: A's lookups
//! must keep B's side of them out). After each run:
//! - every excluded path (a component ending in `.x`, or a top `q`) is on
//!   each side exactly as it was before the run (`--no-renames`: a renamed
//!   directory would carry its excluded entries along, by design);
//! - outside excluded paths, conflicts and failed paths (with their
//!   subtrees), the replicas are equal;
//! - every conflict is a real one: the two sides differ at its path (a
//!   rule removed never makes equal paths a conflict);
//! - a second run at once with the same rules propagates nothing.
//!
//! Cases: `ACCORD_SYNC_IGNORE_CASES` (default 24; 8 with B from a daemon),
//! seeds from `ACCORD_SYNC_IGNORE_SEED` (default 0); a failure prints its
//! seed and history.

mod mirror_common;
mod remote_common;
mod sync_common;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use sync_common::*;

const ROUNDS: usize = 8;
const NAMES: [&str; 4] = ["p", "q", "r.x", "anchor"];
const BELOW: [&str; 3] = ["s", "t.x", "u"];
const CONTENTS: [&str; 3] = ["v0", "v1", "a longer one"];
const RULE_SETS: [&[&str]; 4] = [&[], &["*.x"], &["/q"], &["*.x", "/q"]];

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn random_path(rng: &mut Rng) -> String {
    let mut path = NAMES[rng.below(NAMES.len() - 1)].to_string();
    for _ in 0..rng.below(3) {
        path = format!("{path}/{}", BELOW[rng.below(BELOW.len())]);
    }
    path
}

fn remove_any(path: &Path) {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path).unwrap(),
        Ok(_) => std::fs::remove_file(path).unwrap(),
        Err(_) => {}
    }
}

/// One random operation on `root`, made applicable: a file in the way
/// of a parent directory is removed first.
fn random_op(rng: &mut Rng, root: &Path) -> String {
    let rel = random_path(rng);
    let mut parent = root.to_path_buf();
    let components: Vec<&str> = rel.split('/').collect();
    for component in &components[..components.len() - 1] {
        parent = parent.join(component);
        if !parent.is_dir() {
            remove_any(&parent);
            std::fs::create_dir(&parent).unwrap();
        }
    }
    let path = root.join(&rel);
    match rng.below(3) {
        0 => {
            remove_any(&path);
            format!("rm {rel}")
        }
        1 => {
            if !path.is_dir() {
                remove_any(&path);
                std::fs::create_dir(&path).unwrap();
            }
            format!("mkdir {rel}")
        }
        _ => {
            if path.is_dir() {
                remove_any(&path);
            }
            let contents = CONTENTS[rng.below(CONTENTS.len())];
            std::fs::write(&path, contents).unwrap();
            format!("write {rel} {contents:?}")
        }
    }
}

fn excluded(path: &str, rules: &[&str]) -> bool {
    if path == ".accordignore" {
        return true;
    }
    let by_name = rules.contains(&"*.x") && path.split('/').any(|c| c.ends_with(".x"));
    let top_q = rules.contains(&"/q") && path.split('/').next() == Some("q");
    by_name || top_q
}

fn beneath_any(path: &str, tops: &BTreeSet<String>) -> bool {
    tops.iter()
        .any(|top| path == top || path.starts_with(&format!("{top}/")))
}

struct Run {
    propagated: u64,
    conflicts: BTreeSet<String>,
    errors: BTreeSet<String>,
}

/// A run under `rules`, given as patterns or (`in_a_file`) in A's
/// `.accordignore`.
fn run(pair: &Pair, rules: &[&str], in_a_file: bool) -> Run {
    let mut args = vec!["--json", "--no-renames", "--max-delete", "100%"];
    args.extend(["--exclude", "/.accordignore"]);
    let ignore_file = pair.path('a', ".accordignore");
    if in_a_file {
        std::fs::write(&ignore_file, rules.join("\n")).unwrap();
    } else {
        remove_any(&ignore_file);
        args.extend(rules.iter().flat_map(|rule| ["--exclude", rule]));
    }
    let out = pair.sync(&args);
    assert!(
        matches!(out.status.code(), Some(0..=2)),
        "{:?}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let paths = |key: &str| -> BTreeSet<String> {
        report[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["path"].as_str().unwrap().to_string())
            .collect()
    };
    Run {
        propagated: report["propagated"].as_u64().unwrap(),
        conflicts: paths("conflicts"),
        errors: paths("errors"),
    }
}

type Tree = BTreeMap<String, Node>;

fn check_round(
    rules: &[&str],
    before: [&Tree; 2],
    after: [&Tree; 2],
    done: &Run,
) -> Result<(), String> {
    for side in 0..2 {
        let paths: BTreeSet<&String> = before[side].keys().chain(after[side].keys()).collect();
        for path in paths.into_iter().filter(|p| excluded(p, rules)) {
            if before[side].get(path) != after[side].get(path) {
                return Err(format!("excluded {path} changed on side {side}"));
            }
        }
    }
    let left: BTreeSet<String> = done.conflicts.union(&done.errors).cloned().collect();
    let paths: BTreeSet<&String> = after[0].keys().chain(after[1].keys()).collect();
    for path in paths {
        if excluded(path, rules) || beneath_any(path, &left) {
            continue;
        }
        if after[0].get(path) != after[1].get(path) {
            return Err(format!("{path} differs outside conflicts and failures"));
        }
    }
    for path in &done.conflicts {
        if after[0].get(path) == after[1].get(path) {
            return Err(format!("a false conflict at {path}: both sides are equal"));
        }
    }
    Ok(())
}

fn run_case(seed: u64, make_pair: &dyn Fn() -> Pair) {
    let mut rng = Rng(seed);
    let pair = make_pair();
    pair.write('a', "anchor", "never touched");
    let mut history = Vec::new();
    for round in 0..ROUNDS {
        for side in ['a', 'b'] {
            for _ in 0..rng.below(4) {
                let op = random_op(&mut rng, pair.root(side));
                history.push(format!("{side}: {op}"));
            }
        }
        let rules = RULE_SETS[rng.below(RULE_SETS.len())];
        let in_a_file = rng.below(2) == 0;
        let how = if in_a_file {
            "in A's .accordignore"
        } else {
            "--exclude"
        };
        history.push(format!("round {round}: sync, {rules:?} {how}"));
        // The rules' file is written before the snapshot: not the run's doing.
        let ignore_file = pair.path('a', ".accordignore");
        if in_a_file {
            std::fs::write(&ignore_file, rules.join("\n")).unwrap();
        } else {
            remove_any(&ignore_file);
        }
        let before = [snapshot(&pair.a), snapshot(&pair.b)];
        let done = run(&pair, rules, in_a_file);
        let after = [snapshot(&pair.a), snapshot(&pair.b)];
        let mut result = check_round(
            rules,
            [&before[0], &before[1]],
            [&after[0], &after[1]],
            &done,
        );
        if result.is_ok() {
            let again = run(&pair, rules, in_a_file);
            if again.propagated != 0 || again.conflicts != done.conflicts {
                result = Err(format!(
                    "a second run propagated {} (conflicts {:?}, then {:?})",
                    again.propagated, done.conflicts, again.conflicts
                ));
            }
        }
        if let Err(problem) = result {
            panic!(
                "seed {seed}: {problem}\nhistory:\n{}\nA: {:?}\nB: {:?}",
                history.join("\n"),
                after[0].keys().collect::<Vec<_>>(),
                after[1].keys().collect::<Vec<_>>()
            );
        }
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn run_cases(default_cases: u64, make_pair: &dyn Fn() -> Pair) {
    let first = env_number("ACCORD_SYNC_IGNORE_SEED", 0);
    let cases = env_number("ACCORD_SYNC_IGNORE_CASES", default_cases);
    for seed in first..first + cases {
        run_case(seed, make_pair);
    }
    eprintln!("{cases} random cases of {ROUNDS} syncs under changing rules: all held");
}

#[test]
fn random_operations_under_changing_rules_keep_excluded_paths_and_converge() {
    run_cases(24, &Pair::new);
}

#[test]
fn with_b_from_the_daemon_random_operations_under_changing_rules() {
    let daemon = Daemon::start();
    let remote = daemon.remote_b();
    run_cases(8, &|| Pair::with_remote_b(&remote));
}
