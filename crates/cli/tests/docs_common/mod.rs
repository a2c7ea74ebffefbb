//! Runs the examples of the docs (README.md and docs/*.md) so that none
//! can go stale: the convention for writing them is in `parse.rs`, the
//! trees they work on in `fixtures.rs`, where they run in `sandbox.rs`.
#![allow(dead_code)]

pub mod fixtures;
pub mod links;
pub mod parse;
pub mod paths;
pub mod sandbox;

use parse::{Example, Kind, Ready};
use sandbox::{Machine, Sandbox};
use std::path::PathBuf;

/// The repository's top directory.
pub fn top() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md and every page of docs/, as paths from the top.
pub fn pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_string()];
    let mut docs: Vec<String> = std::fs::read_dir(top().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

pub fn examples_of(page: &str) -> Vec<Example> {
    parse::examples(&top().join(page), page).unwrap_or_else(|e| panic!("{e}"))
}

/// Run every example of `page`; fail with each failed block's place, text
/// and output.
pub fn run_page(page: &str) {
    let examples = examples_of(page);
    assert!(!examples.is_empty(), "{page} has no examples to run");
    let mut machine = Machine::new();
    let mut failures = Vec::new();
    for group in sequences(&examples) {
        if let Err(e) = run_sequence(&mut machine, group) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} example(s) of {page} failed:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The examples cut into sequences: one that starts a sandbox and the
/// `then` examples after it.
fn sequences(examples: &[Example]) -> Vec<&[Example]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=examples.len() {
        if i == examples.len() || !examples[i].then {
            out.push(&examples[start..i]);
            start = i;
        }
    }
    out
}

/// Run one sequence in a sandbox of its own; Err says which example
/// failed and how. A sequence whose needs this machine lacks is skipped
/// (or fails, in strict mode).
fn run_sequence(machine: &mut Machine, group: &[Example]) -> Result<(), String> {
    let first = &group[0];
    let mut fixtures = Vec::new();
    for name in &first.fixtures {
        let f = fixtures::fixture(name)
            .ok_or_else(|| format!("{}: no fixture named `{name}`", first.place()))?;
        fixtures.push((name.as_str(), f));
    }
    let mut needs: Vec<&str> = group
        .iter()
        .flat_map(|e| e.needs.iter().map(String::as_str))
        .chain(fixtures.iter().flat_map(|(_, f)| f.needs.iter().copied()))
        .collect();
    needs.sort();
    needs.dedup();
    if !machine_has(machine, &needs, first) {
        return Ok(());
    }
    let mut sandbox = Sandbox::new(machine);
    for (name, f) in &fixtures {
        let log = format!("fixture-{name}");
        sandbox
            .run(f.script, &log)
            .map_err(|e| format!("{}: fixture `{name}`: {e}", first.place()))?;
        if let Some((command, port)) = f.service {
            sandbox
                .start(command, &log, &Ready::Port(port))
                .map_err(|e| format!("{}: fixture `{name}`: {e}", first.place()))?;
        }
    }
    for ex in group {
        run_example(&mut sandbox, ex)
            .map_err(|e| format!("{}: this example\n{}{e}", ex.place(), indent(&ex.text)))?;
    }
    Ok(())
}

fn run_example(sandbox: &mut Sandbox, ex: &Example) -> Result<(), String> {
    let log = format!("line-{}", ex.line);
    match (&ex.kind, &ex.ready) {
        (Kind::File(path), _) => sandbox.write_file(path, &ex.text),
        (Kind::Run, Ready::Returns) => sandbox.run(&ex.text, &log),
        (Kind::Run, ready) => sandbox.start(&ex.text, &log, ready),
    }
}

/// Has this machine what `needs` names? Starts the sshd for `ssh`.
fn machine_has(machine: &mut Machine, needs: &[&str], first: &Example) -> bool {
    use crate::mirror_common::{have, is_root, skip_or_fail};
    for need in needs {
        let missing = match *need {
            "root" if !is_root() => Some("root (run the tests as root, as CI does)"),
            "fuse" if !std::path::Path::new("/dev/fuse").exists() => Some("/dev/fuse"),
            "redis" if !have("redis-server") => {
                Some("redis-server (apt-get install redis-server; scripts/test installs it)")
            }
            "ssh" if !machine.start_sshd() => return false,
            _ => None,
        };
        if let Some(what) = missing {
            skip_or_fail(&format!("the example at {} needs {what}", first.place()));
            return false;
        }
    }
    true
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("    {l}\n")).collect()
}
