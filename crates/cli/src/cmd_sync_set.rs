//! `accord sync A B C …`: a sync of more than two roots in one run
//! (`accord_engine::sync_set`). The roots are named A, B, C … in the order
//! written, in what is printed and in `--prefer`/`--force` (which also take
//! a root as written).
//!
//! Each root may be local, over ssh or from the daemon: the client talks
//! to each. A remote root that cannot be reached is left out of the run
//! like a local one that cannot be opened, named by the identity it gave
//! when last reached (`root_identities.rs`). `--watch` repeats the run
//! whenever a root changes, as for two (`sync_watch`); a root that cannot
//! be reached is polled, and caught up when it can be.
//!
//! `--keep-both` settles a conflict as the engine's `set/keep.rs` says:
//! the winner's version keeps the name, each other latest version is kept
//! beside it on every root (`kept on B  f.conflict-…` where a root that
//! held it made the copy, `A -> C  f.conflict-…` where one received it;
//! `--json`: the action `keep`, and `kept_both` and `kept` as a run of two
//! roots counts them).
//!
//! Renames and moves reach each other root as renames (`renamed on B
//! f -> g`; `--json`: the action `rename` with `renamed_from`, and
//! `renamed`), a new hard-link group as links (`A -> B  h => g`; `--json`:
//! `linked_to`, and `linked`), as for two roots (the engine's
//! `set/renames.rs`; `--no-renames`, `--no-hard-links`).
//!
//! `--merge CMD` gives a conflict whose latest versions are all regular
//! files to the program, as the engine's `set/merge.rs` says (more than two
//! versions are folded, in the order of their first holders as written);
//! the result is written to every root reached (`merged on A  f` where the
//! merge was written over a version, `merged A -> C  f` where a root
//! received it; `--json`: the action `merged`, and `merged` counts the
//! paths), and a conflict it did not merge says why (`not_merged`).
//!
//! On a terminal, without `--batch` (nor `--watch` or `--json`), the plan
//! is shown before anything is changed, a column per root
//! (`sync_tui_set.rs`): a person chooses a root's version for a path (as
//! `--force` does there) or skips it, then goes or quits.

use crate::cmd_sync::{config, remote_spec, usage, SyncArgs};
use crate::exit;
use crate::sync_tui_set::SetInteractive;
use crate::sync_watch::Cycle;
use accord_engine::set_plan::SetPlanEdit;
use accord_engine::{
    EditSetPlan, LocalReplica, Receive, Replica, SetChange, SetConflict, SetConflictReport,
    SetMergeNow, SetPolicies, SetPreference, SetReport, SetRoot, Unreached,
};
use accord_model::{Entry, Kind};
use accord_remote::{RemoteReplica, RemoteSpec, RootMode};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A root was left out: it could not be reached; the others were synced.
pub const UNREACHED: i32 = 4;

/// Run a sync of the roots `args` names (more than two).
pub fn run(args: &SyncArgs) -> i32 {
    let roots = args.roots();
    let specs = match specs_of(&roots) {
        Ok(specs) => specs,
        Err(why) => return usage(&why),
    };
    if let Some(why) = nested(&roots, &specs) {
        eprintln!("accord sync: {why}");
        return exit::FATAL;
    }
    let policies = match policies(args, &roots) {
        Ok(policies) => policies,
        Err(why) => return usage(&why),
    };
    let cfg = match config(args) {
        Ok(cfg) => cfg,
        Err(code) => return code,
    };
    let asked = crate::sync_tui::Asked {
        batch: args.batch || args.watch || args.json,
        auto: args.auto,
        merge: args.merge.is_some(),
    };
    let remote: Vec<bool> = specs.iter().map(Option::is_some).collect();
    let ui = crate::sync_tui_set::SetInteractive::for_run(asked, &roots, &remote);
    let mut cycle = || run_once(args, (&roots, &specs), &cfg, (policies, ui.as_ref()));
    if args.watch {
        let opts = crate::cmd_sync::watch_options(args, &roots, &specs, &cfg);
        return crate::sync_watch::watch(&opts, &mut cycle);
    }
    cycle().code
}

/// One run of the set (each cycle of `--watch`): reach the roots, sync
/// those reached, print what was done.
fn run_once(
    args: &SyncArgs,
    (roots, specs): (&[PathBuf], &[Option<RemoteSpec>]),
    cfg: &accord_engine::SyncConfig,
    (policies, ui): (SetPolicies, Option<&SetInteractive>),
) -> Cycle {
    let names: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
    let opened = open_all(args, roots, specs, cfg);
    if let Some(why) = unnamed(&opened, &names) {
        eprintln!("accord sync: {why}");
        return Cycle {
            code: exit::FATAL,
            refused: false,
            fatal: true,
        };
    }
    let set_roots: Vec<SetRoot<'_>> = names
        .iter()
        .zip(&opened)
        .map(|(name, opened)| SetRoot {
            name: name.clone(),
            replica: match opened {
                Ok(root) => Ok(root.replica()),
                Err(unreached) => Err(Unreached {
                    identity: unreached.identity.clone(),
                    why: unreached.why.clone(),
                }),
            },
        })
        .collect();
    let edit_plan = ui.map(|ui| {
        move |edit: &mut SetPlanEdit<'_>, order: &[usize], merger: &dyn SetMergeNow| {
            ui.edit(edit, order, merger)
        }
    });
    let pause = crate::cmd_sync::test_pause_hook("ACCORD_TEST_SYNC_PAUSE");
    let paused =
        pause.map(|pause| move |_: &mut SetPlanEdit<'_>, _: &[usize], _: &dyn SetMergeNow| pause());
    let edit_plan = match (&edit_plan, &paused) {
        (Some(hook), _) => Some(hook as &EditSetPlan),
        (None, Some(hook)) => Some(hook as &EditSetPlan),
        (None, None) => None,
    };
    let report = accord_engine::sync_set_edited(&set_roots, cfg, policies, edit_plan);
    let letters = letters(roots);
    if args.json {
        let wire: Vec<Option<(u64, u64)>> = opened
            .iter()
            .map(|o| o.as_ref().ok().and_then(Opened::wire_bytes))
            .collect();
        print_json(&report, &letters, &names, &wire);
    } else {
        print_text(&report, &letters, &names, args.quiet);
    }
    Cycle {
        code: ui.map_or(exit_code(&report), |ui| ui.finish(exit_code(&report))),
        refused: report.refusal.is_some(),
        fatal: report.fatal.is_some(),
    }
}

/// Each root's remote address, if it is one.
fn specs_of(roots: &[PathBuf]) -> Result<Vec<Option<RemoteSpec>>, String> {
    roots.iter().map(|root| remote_spec(root)).collect()
}

/// A root of the run, reached.
enum Opened {
    Local(LocalReplica),
    Remote(RemoteReplica),
}

impl Opened {
    fn replica(&self) -> &dyn Replica {
        match self {
            Opened::Local(replica) => replica,
            Opened::Remote(replica) => replica,
        }
    }

    /// Bytes sent to and received from a remote root.
    fn wire_bytes(&self) -> Option<(u64, u64)> {
        match self {
            Opened::Local(_) => None,
            Opened::Remote(replica) => Some(replica.wire_bytes()),
        }
    }
}

/// Open every root: the local ones here, the remote ones each on a thread
/// of its own (each connection waits on its host, not on the others).
fn open_all(
    args: &SyncArgs,
    roots: &[PathBuf],
    specs: &[Option<RemoteSpec>],
    cfg: &accord_engine::SyncConfig,
) -> Vec<Result<Opened, Unreached>> {
    std::thread::scope(|s| {
        let threads: Vec<_> = roots
            .iter()
            .zip(specs)
            .map(|(root, spec)| {
                s.spawn(move || match spec {
                    Some(spec) => open_remote(args, root, spec, cfg),
                    None => open_local(root),
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().expect("opening a root does not panic"))
            .collect()
    })
}

/// Open a local root; one that cannot be opened is not reached this run
/// (a disk not mounted), named by its path as written, made absolute.
fn open_local(root: &Path) -> Result<Opened, Unreached> {
    LocalReplica::open(root)
        .map(Opened::Local)
        .map_err(|error| {
            let absolute = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
            Unreached {
                identity: accord_engine::local_identity(&absolute),
                why: format!("cannot open it: {}", accord_fsys::io_words(&error)),
            }
        })
}

/// Reach a remote root (its host opens the root for writing, or a dry
/// run's for inspection), and keep the identity it gives; one that cannot
/// be reached is named by the identity it gave last (none: never reached
/// from here, see `unnamed`).
fn open_remote(
    args: &SyncArgs,
    root: &Path,
    spec: &RemoteSpec,
    cfg: &accord_engine::SyncConfig,
) -> Result<Opened, Unreached> {
    let written = root.display().to_string();
    let mode = match cfg.dry_run {
        true => RootMode::Inspect,
        false => RootMode::WriteExisting,
    };
    match args.remote.connect(spec, mode) {
        Ok(remote) => {
            if let Ok(identity) = Replica::sync_identity(&remote) {
                // Not kept: the next run that cannot reach it says so.
                let _ = crate::root_identities::remember(&cfg.state_dir, &written, &identity);
            }
            Ok(Opened::Remote(remote))
        }
        Err(why) => Err(Unreached {
            identity: crate::root_identities::recall(&cfg.state_dir, &written).unwrap_or_default(),
            why,
        }),
    }
}

/// A root that cannot be reached and was never reached from this host
/// cannot be named, nor can the set: why, if one is so.
fn unnamed(opened: &[Result<Opened, Unreached>], names: &[String]) -> Option<String> {
    opened
        .iter()
        .zip(names)
        .find_map(|(opened, name)| match opened {
            Err(unreached) if unreached.identity.is_empty() => Some(format!(
                "cannot reach {name} ({}), and it has never been reached from this host, so the \
             set of roots cannot be named without it; nothing was changed. Run again when it \
             can be reached",
                unreached.why
            )),
            _ => None,
        })
}

/// One local root inside another would copy itself into itself.
fn nested(roots: &[PathBuf], specs: &[Option<RemoteSpec>]) -> Option<String> {
    let canonical: Vec<PathBuf> = roots
        .iter()
        .zip(specs)
        .filter(|(_, spec)| spec.is_none())
        .map(|(r, _)| accord_fsys::canonical(r))
        .collect();
    for inner in &canonical {
        for outer in &canonical {
            if inner != outer && inner.starts_with(outer) {
                return Some(format!(
                    "{} and {} lie one inside the other; nothing was changed",
                    inner.display(),
                    outer.display()
                ));
            }
        }
    }
    None
}

/// The letter of each root, in the order written: A, B, C …
fn letters(roots: &[PathBuf]) -> Vec<String> {
    (0..roots.len())
        .map(|place| char::from(b'A' + place as u8).to_string())
        .collect()
}

/// The root a `--prefer`/`--force` value names: a letter, or a root as
/// written.
fn root_named(roots: &[PathBuf], value: &str) -> Option<usize> {
    let letter = value.to_ascii_uppercase();
    letters(roots)
        .iter()
        .position(|l| *l == letter)
        .or_else(|| roots.iter().position(|root| root == Path::new(value)))
}

fn policies(args: &SyncArgs, roots: &[PathBuf]) -> Result<SetPolicies, String> {
    let mut policies = SetPolicies::default();
    if let Some(force) = &args.force {
        policies.force = Some(root_named(roots, force).ok_or_else(|| {
            format!("--force {force:?}: name a root by its letter (A, B, C …) or as written")
        })?);
    }
    if let Some(prefer) = &args.prefer {
        policies.prefer = Some(match prefer.as_str() {
            "newer" => SetPreference::Newer,
            "older" => SetPreference::Older,
            value => SetPreference::Replica(root_named(roots, value).ok_or_else(|| {
                format!(
                    "--prefer {prefer:?}: newer, older, or a root by its letter (A, B, C …) \
                     or as written"
                )
            })?),
        });
    }
    Ok(policies)
}

fn exit_code(report: &SetReport) -> i32 {
    if report.fatal.is_some() || report.refusal.is_some() {
        exit::FATAL
    } else if !report.errors.is_empty() {
        exit::PARTIAL
    } else if !report.unreached.is_empty() {
        UNREACHED
    } else if !report.conflicts.is_empty() {
        exit::CONFLICTS
    } else {
        exit::OK
    }
}

/// The letter of the root written as `name`.
fn letter_of<'l>(letters: &'l [String], names: &[String], name: &str) -> &'l str {
    names
        .iter()
        .position(|n| n == name)
        .map_or("?", |place| letters[place].as_str())
}

/// The letter of the root in `place` (among the roots as given).
fn letter_at(letters: &[String], place: u8) -> &str {
    letters.get(usize::from(place)).map_or("?", String::as_str)
}

/// Was `change` the writing of a merge (`--merge`)?
fn is_merge(report: &SetReport, change: &SetChange) -> bool {
    report.merged.binary_search(&change.path).is_ok()
}

fn change_text(change: &SetChange, merged: bool, letters: &[String]) -> String {
    let on = letter_at(letters, change.on);
    let from = letter_at(letters, change.from);
    if change.kept {
        return format!("kept on {on}");
    }
    if change.renamed_from().is_some() {
        return format!("renamed on {on}");
    }
    if merged {
        return match on == from {
            true => format!("merged on {on}"),
            false => format!("merged {from} -> {on}"),
        };
    }
    match change.receive {
        Receive::Whole => format!("{from} -> {on}"),
        Receive::Props => format!("props {from} -> {on}"),
        Receive::Delete => format!("deleted on {on}"),
    }
}

/// One version of a conflict, for a person: its kind, size and mtime.
fn version_text(entry: Option<&Entry>) -> String {
    match entry {
        None => "absent".into(),
        Some(entry) => {
            let when = accord_engine::utc_stamp(entry.props.mtime);
            match entry.kind {
                Kind::File => format!(
                    "file, {}, modified {when}",
                    crate::summary::bytes(entry.size)
                ),
                kind => format!("{}, modified {when}", kind.name()),
            }
        }
    }
}

fn conflict_text(conflict: &SetConflictReport, letters: &[String], names: &[String]) -> String {
    let versions: Vec<String> = conflict
        .versions
        .iter()
        .map(|(entry, holders, latest)| {
            let holders: Vec<&str> = holders
                .iter()
                .map(|h| letter_of(letters, names, h))
                .collect();
            let older = if *latest { "" } else { " (older)" };
            format!(
                "{}: {}{older}",
                holders.join(", "),
                version_text(entry.as_ref())
            )
        })
        .collect();
    let why = match conflict.reason {
        SetConflict::ChangedApart => "changed apart",
        SetConflict::ChangedBeneathRemovedDirectory => "directory removed, changed beneath",
    };
    let merge = conflict
        .not_merged
        .as_ref()
        .map_or(String::new(), |why| format!("; {why}"));
    format!(
        "{} ({why}; {}{merge})",
        conflict.path.display(),
        versions.join("; ")
    )
}

fn print_text(report: &SetReport, letters: &[String], names: &[String], quiet: bool) {
    if let Some(fatal) = &report.fatal {
        // Why each root was not reached, so that the line below says
        // something a person can act on.
        for (root, why) in &report.unreached {
            eprintln!("accord sync: {root} could not be reached ({why})");
        }
        eprintln!("accord sync: {fatal}");
        return;
    }
    for (root, why) in &report.unreached {
        eprintln!(
            "accord sync: {root} could not be reached ({why}); it was left out, and catches \
             up at its next run"
        );
    }
    if let Some(refusal) = &report.refusal {
        eprintln!("accord sync: refused: {refusal}");
        return;
    }
    if !quiet {
        for change in &report.changes {
            println!(
                "{:<14} {}",
                change_text(change, is_merge(report, change), letters),
                change_path(change)
            );
        }
    }
    for conflict in &report.conflicts {
        println!("conflict       {}", conflict_text(conflict, letters, names));
    }
    for failure in &report.errors {
        let on = letter_of(letters, names, &failure.replica);
        eprintln!(
            "accord sync: {} on {on}: {}",
            failure.failure.path.display(),
            failure.failure.error
        );
    }
    if !quiet {
        eprintln!("{}", summary(report));
    }
}

/// A change's path; a rename's as `old -> new`, a hard link's as
/// `new => the name it was linked to`, as for two roots.
fn change_path(change: &SetChange) -> String {
    match (change.renamed_from(), change.linked_to()) {
        (Some(from), _) => format!("{} -> {}", from.display(), change.path.display()),
        (None, Some(leader)) => format!("{} => {}", change.path.display(), leader.display()),
        (None, None) => change.path.display(),
    }
}

fn linked(report: &SetReport) -> usize {
    let links = report.changes.iter().filter(|c| c.linked_to().is_some());
    links.count()
}

fn renamed(report: &SetReport) -> usize {
    let renames = report.changes.iter().filter(|c| c.renamed_from().is_some());
    renames.count()
}

/// Paths settled by keeping their other versions aside.
fn kept_both(report: &SetReport) -> usize {
    let mut paths: Vec<_> = report.kept.iter().map(|(path, _)| path).collect();
    paths.dedup();
    paths.len()
}

fn summary(report: &SetReport) -> String {
    let deleted = report
        .changes
        .iter()
        .filter(|c| c.receive == Receive::Delete)
        .count();
    let kept = kept_both(report);
    crate::summary::sync_line(&crate::summary::SyncFigures {
        dry_run: report.dry_run,
        changes: report.changes.len() as u64,
        written: (report.files_written, report.bytes_written),
        kinds: &[
            (renamed(report) as u64, "renamed"),
            (linked(report) as u64, "linked"),
            (deleted as u64, "deleted"),
            (kept as u64, "kept both"),
            (report.merged.len() as u64, "merged"),
        ],
        agreed: report.agreed,
        conflicts: report.conflicts.len() as u64,
        errors: report.errors.len() as u64,
        unreached: Some(report.unreached.len() as u64),
        elapsed_s: report.elapsed_s,
    })
}

#[derive(Serialize)]
struct JsonSet {
    dry_run: bool,
    roots: Vec<JsonRoot>,
    changes: Vec<JsonChange>,
    /// Of the changes, renames (a moved directory counts once).
    renamed: usize,
    /// Of the changes, copies made as hard links to another name of their
    /// group (no contents sent).
    linked: usize,
    /// --keep-both: paths settled by keeping their other versions aside.
    kept_both: usize,
    kept: Vec<JsonKept>,
    /// --merge: paths whose versions the merge program merged.
    merged: usize,
    conflicts: Vec<JsonConflict>,
    errors: Vec<JsonError>,
    agreed: u64,
    files_written: u64,
    bytes_written: u64,
    unreached: Vec<String>,
    refused: Option<String>,
    fatal: Option<String>,
    elapsed_s: f64,
}

#[derive(Serialize)]
struct JsonRoot {
    letter: String,
    root: String,
    /// A remote root's bytes on the wire, sent and received.
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_sent: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bytes_received: Option<u64>,
}

#[derive(Serialize)]
struct JsonChange {
    path: String,
    on: String,
    from: String,
    action: &'static str,
    /// A rename's old path.
    #[serde(skip_serializing_if = "Option::is_none")]
    renamed_from: Option<String>,
    /// A copy made as a hard link: the name it was linked to.
    #[serde(skip_serializing_if = "Option::is_none")]
    linked_to: Option<String>,
}

/// A losing version kept (on every root reached) beside its path.
#[derive(Serialize)]
struct JsonKept {
    path: String,
    kept_as: String,
}

#[derive(Serialize)]
struct JsonConflict {
    path: String,
    reason: &'static str,
    versions: Vec<JsonVersion>,
    /// --merge: why the program did not merge it.
    #[serde(skip_serializing_if = "Option::is_none")]
    not_merged: Option<String>,
}

#[derive(Serialize)]
struct JsonVersion {
    roots: Vec<String>,
    kind: Option<&'static str>,
    size: Option<u64>,
    mtime: Option<i64>,
    latest: bool,
}

#[derive(Serialize)]
struct JsonError {
    path: String,
    on: String,
    error: String,
}

fn print_json(
    report: &SetReport,
    letters: &[String],
    names: &[String],
    wire: &[Option<(u64, u64)>],
) {
    let letter = |name: &str| letter_of(letters, names, name).to_string();
    let json = JsonSet {
        dry_run: report.dry_run,
        roots: letters
            .iter()
            .zip(names)
            .zip(wire)
            .map(|((l, n), wire)| JsonRoot {
                letter: l.clone(),
                root: n.clone(),
                bytes_sent: wire.map(|w| w.0),
                bytes_received: wire.map(|w| w.1),
            })
            .collect(),
        changes: report
            .changes
            .iter()
            .map(|c| JsonChange {
                path: c.path.display(),
                on: letter_at(letters, c.on).to_string(),
                from: letter_at(letters, c.from).to_string(),
                action: match c.receive {
                    _ if c.kept => "keep",
                    _ if c.renamed_from().is_some() => "rename",
                    _ if is_merge(report, c) => "merged",
                    Receive::Whole => "copy",
                    Receive::Props => "props",
                    Receive::Delete => "delete",
                },
                renamed_from: c.renamed_from().map(|p| p.display()),
                linked_to: c.linked_to().map(|p| p.display()),
            })
            .collect(),
        renamed: renamed(report),
        linked: linked(report),
        kept_both: kept_both(report),
        merged: report.merged.len(),
        kept: report
            .kept
            .iter()
            .map(|(path, kept_as)| JsonKept {
                path: path.display(),
                kept_as: kept_as.display(),
            })
            .collect(),
        conflicts: report
            .conflicts
            .iter()
            .map(|c| JsonConflict {
                path: c.path.display(),
                reason: match c.reason {
                    SetConflict::ChangedApart => "changed_apart",
                    SetConflict::ChangedBeneathRemovedDirectory => {
                        "changed_beneath_removed_directory"
                    }
                },
                versions: c
                    .versions
                    .iter()
                    .map(|(entry, holders, latest)| JsonVersion {
                        roots: holders.iter().map(|h| letter(h)).collect(),
                        kind: entry.as_ref().map(|e| e.kind.name()),
                        size: entry.as_ref().map(|e| e.size),
                        mtime: entry.as_ref().map(|e| e.props.mtime.sec),
                        latest: *latest,
                    })
                    .collect(),
                not_merged: c.not_merged.clone(),
            })
            .collect(),
        errors: report
            .errors
            .iter()
            .map(|f| JsonError {
                path: f.failure.path.display(),
                on: letter(&f.replica),
                error: f.failure.error.to_string(),
            })
            .collect(),
        agreed: report.agreed,
        files_written: report.files_written,
        bytes_written: report.bytes_written,
        unreached: report
            .unreached
            .iter()
            .map(|(root, _)| letter(root))
            .collect(),
        refused: report.refusal.clone(),
        fatal: report.fatal.as_ref().map(|f| f.to_string()),
        elapsed_s: report.elapsed_s,
    };
    println!(
        "{}",
        serde_json::to_string(&json).expect("a report always serializes")
    );
}
