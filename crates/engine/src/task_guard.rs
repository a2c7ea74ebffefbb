//! The deletion guard's checks of a whole task run, made by whoever starts
//! it before any task runs, as the walk makes them before any change: the
//! roots are two distinct directories, not one inside the other by path;
//! an empty source does not empty a destination that has entries; and a
//! source that is another root than the last run's into this destination
//! (its state kept in the starter's state directory) deletes nothing
//! unless forced. The last is known only as directories are planned: the
//! starter records it in the queue and `task_scan::guard_allows` pauses
//! the run before the first deletion.

use crate::local::LocalReplica;
use crate::replica::Replica;
use crate::run::{check_distinct, source_root_changed, GUARD_STATE};
use crate::task_run::{keys, open_task_roots};
use crate::task_spec::RunSpec;
use accord_fsys::{IgnoreRules, ScanOptions};
use accord_model::RelPath;
use accord_plan::Refusal;
use accord_queue::TaskQueue;
use std::path::PathBuf;

/// Why a task run is not started.
#[derive(Debug)]
pub enum NotStarted {
    /// The deletion guard refused it.
    Refused(Refusal),
    /// The roots cannot be used, or the queue cannot be reached.
    Fatal(String),
}

impl std::fmt::Display for NotStarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotStarted::Refused(r) => r.fmt(f),
            NotStarted::Fatal(m) => f.write_str(m),
        }
    }
}

/// Check the run's roots before it starts (see the module); records in
/// `queue` what the planning of directories must know.
pub fn check_before_run(
    queue: &dyn TaskQueue,
    spec: &RunSpec,
    state_dir: Option<PathBuf>,
) -> Result<(), NotStarted> {
    let fatal = |e: String| NotStarted::Fatal(e);
    let (src, dst) = open_task_roots(spec).map_err(|f| fatal(f.to_string()))?;
    let dst = dst.with_state_dir(state_dir);
    check_distinct(&src, &dst, &spec.src, &spec.dst).map_err(|f| fatal(f.to_string()))?;
    let o = &spec.plan;
    if !o.delete || o.force {
        return Ok(());
    }
    let rules = IgnoreRules::new(&spec.excludes).map_err(|e| fatal(format!("--exclude: {e}")))?;
    let src_entries = root_entries(&src, &rules, spec, true)?;
    let dst_entries = root_entries(&dst, &rules, spec, false)?;
    if src_entries == 0 && dst_entries > 0 {
        return Err(NotStarted::Refused(Refusal::SourceEmpty { dst_entries }));
    }
    if source_root_changed(&src, dst.read_state(GUARD_STATE)) {
        queue
            .put(keys::ROOT_CHANGED, b"1")
            .map_err(|e| fatal(e.to_string()))?;
    }
    Ok(())
}

/// Entries directly in a root, as the run's rules show them (the source's
/// `.accordignore` at its top included).
fn root_entries(
    r: &LocalReplica,
    rules: &IgnoreRules,
    spec: &RunSpec,
    source: bool,
) -> Result<usize, NotStarted> {
    let opts = ScanOptions {
        xattrs: accord_fsys::XattrFilter {
            xattrs: false,
            acls: false,
            user_only: false,
        },
        xattr_memo: None,
        listing_memo: None,
        read_ignore_files: source && spec.ignore_files,
        source,
    };
    match r.list_dir(&RelPath::root(), rules, &opts) {
        (Some(l), _) => Ok(l.entries.len().saturating_sub(1) + l.subdirs.len()),
        (None, scan) => Err(NotStarted::Fatal(format!(
            "{}: cannot be read{}",
            r.describe(),
            scan.errors
                .first()
                .map(|e| format!(": {}", e.message))
                .unwrap_or_default()
        ))),
    }
}

/// After a run that finished: remember its source root for the next run
/// into this destination (as the walk does).
pub fn remember_source(spec: &RunSpec, state_dir: Option<PathBuf>) {
    let Ok((src, dst)) = open_task_roots(spec) else {
        return;
    };
    let dst = dst.with_state_dir(state_dir);
    let (dev, ino) = src.identity();
    let mirrored_from = format!("{dev} {ino}\n").into_bytes();
    if dst.read_state(GUARD_STATE).as_deref() != Some(&mirrored_from[..]) {
        // Durable: the deletion guard's memory must not come back torn.
        let _ = dst.write_state(GUARD_STATE, &mirrored_from, true);
    }
}
