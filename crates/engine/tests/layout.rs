//! The engine's layout rules, checked on its source so that they cannot
//! rot quietly (Cargo enforces the crate boundaries; these are the module
//! boundaries inside the engine):
//!
//! - `mirror/` and `sync/` never import each other;
//! - nothing in the engine but `lib.rs` imports `tasks/` (the jobs do not
//!   know how a run is split into tasks);
//! - no file of `tasks/` calls `.root()` (task runs reach files through
//!   the replica crate's types: `LocalReplica`'s own methods, not its
//!   root handle);
//! - no file of the engine or of `accord-replica` is longer than 800 lines.
//!
//! A module is imported by naming its path: `crate::sync`, `super::super::
//! mirror`, or a `use crate::{sync, …}` group. The check reads every line
//! that names a path, not only `use` lines, so a path written inline
//! (`crate::sync::scan::scan_pair(…)`) counts too.

use std::fs;
use std::path::{Path, PathBuf};

const MAX_LINES: usize = 800;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under the engine's `dir`, with its path relative to
/// the engine's `src/`.
fn rust_files(dir: &Path) -> Vec<(String, String)> {
    rust_files_from(dir, &src())
}

/// Every `.rs` file under `dir`, with its path relative to `dir`'s crate.
fn rust_files_under(dir: &Path) -> Vec<(String, String)> {
    rust_files_from(dir, dir.parent().unwrap())
}

fn rust_files_from(dir: &Path, base: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(base).unwrap().display().to_string();
                out.push((rel, fs::read_to_string(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// The top-level engine module a path inside `crate::` names, for every
/// `crate::X` in `line` (comments are not code: skipped).
fn crate_modules(line: &str) -> Vec<String> {
    let code = line.split("//").next().unwrap_or("");
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            // `use crate::{sync::X, mirror}`: every first name in the group.
            let inner = group.split('}').next().unwrap_or("");
            for item in inner.split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                out.push(name);
            }
        } else {
            let name: String = after
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(name);
        }
        rest = after;
    }
    out
}

/// The engine module a file belongs to (`mirror`, `sync`, `tasks`, or the
/// file's own name at the top).
fn module_of(rel: &str) -> &str {
    rel.split('/').next().unwrap().trim_end_matches(".rs")
}

/// The import-rule breaches in the engine's source: `(file, line, why)`.
fn breaches(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, text) in files {
        let own = module_of(rel);
        for (n, line) in text.lines().enumerate() {
            let mut named = crate_modules(line);
            // `super::super::sync` from two levels down reaches a sibling
            // job as surely as `crate::sync` does.
            if line.contains("super::") {
                for job in ["mirror", "sync", "tasks"] {
                    if line.contains(&format!("super::{job}")) {
                        named.push(job.to_string());
                    }
                }
            }
            for module in named {
                let forbidden = match (own, module.as_str()) {
                    ("mirror", "sync") | ("sync", "mirror") => true,
                    (own, "tasks") => own != "tasks" && own != "lib",
                    _ => false,
                };
                if forbidden {
                    out.push(format!(
                        "{rel}:{}: `{own}` imports `{module}`: {}",
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn mirror_and_sync_never_import_each_other_and_nothing_imports_tasks() {
    let files = rust_files(&src());
    assert!(
        files.iter().any(|(rel, _)| rel.starts_with("mirror/"))
            && files.iter().any(|(rel, _)| rel.starts_with("sync/"))
            && files.iter().any(|(rel, _)| rel.starts_with("tasks/")),
        "the engine's job folders are not where this test looks: {:?}",
        files.iter().map(|(rel, _)| rel).collect::<Vec<_>>()
    );
    let found = breaches(&files);
    assert!(
        found.is_empty(),
        "layout rules broken (see ARCHITECTURE.md):\n{}",
        found.join("\n")
    );
}

/// The calls of `.root()` in `tasks/`: `(file, line, why)`. `RelPath::
/// root()` (the empty path) is a path, not a root handle: not counted.
fn root_calls(files: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, text) in files.iter().filter(|(rel, _)| module_of(rel) == "tasks") {
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains(".root()") {
                out.push(format!(
                    "{rel}:{}: a task file calls `.root()`: {}",
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    out
}

#[test]
fn no_task_file_reaches_a_root_handle() {
    let files = rust_files(&src());
    let found = root_calls(&files);
    assert!(
        found.is_empty(),
        "task runs reach files through the replica crate's types (see ARCHITECTURE.md):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checker_sees_a_root_handle_in_a_task_file() {
    let planted = [
        (
            "tasks/x.rs".to_string(),
            "let d = ctx.src.root().open_dir(dir)?;".to_string(),
        ),
        ("tasks/y.rs".to_string(), "        .root()".to_string()),
        (
            "tasks/ok.rs".to_string(),
            "let r = RelPath::root(); // not ctx.dst.root()".to_string(),
        ),
        (
            "mirror/ok.rs".to_string(),
            "let root = dst.root();".to_string(),
        ),
    ];
    let found = root_calls(&planted);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(found.iter().all(|b| !b.contains("ok.rs")));
}

#[test]
fn no_engine_or_replica_file_is_longer_than_the_limit() {
    let replica = Path::new(env!("CARGO_MANIFEST_DIR")).join("../replica/src");
    let mut files = rust_files(&src());
    files.extend(rust_files_under(&replica));
    let long: Vec<String> = files
        .into_iter()
        .filter(|(_, text)| text.lines().count() > MAX_LINES)
        .map(|(rel, text)| format!("{rel}: {} lines", text.lines().count()))
        .collect();
    assert!(
        long.is_empty(),
        "files over {MAX_LINES} lines (split them by what they hold):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_checker_sees_a_forbidden_import() {
    // The rules above pass only if the checker can fail: a mirror file
    // that imports the sync job, inline or grouped, is caught.
    let planted = [
        (
            "mirror/x.rs".to_string(),
            "use crate::sync::scan;".to_string(),
        ),
        (
            "sync/y.rs".to_string(),
            "let r = crate::mirror::run::mirror(a);".to_string(),
        ),
        (
            "mirror/z.rs".to_string(),
            "use crate::{tasks::keys, Report};".to_string(),
        ),
        (
            "sync/case/w.rs".to_string(),
            "use super::super::super::mirror::walk;".to_string(),
        ),
        (
            "mirror/ok.rs".to_string(),
            "use crate::Report; // not crate::sync".to_string(),
        ),
    ];
    let found = breaches(&planted);
    assert_eq!(found.len(), 4, "{found:#?}");
    assert!(found.iter().all(|b| !b.starts_with("mirror/ok.rs")));
}
