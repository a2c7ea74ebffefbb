//! `accord mirror SRC1 SRC2 … DST`: each source goes into DST/NAME, NAME
//! its last name, as rsync copies a source written without a trailing
//! slash. DST's other entries are left alone: deletions are made inside
//! each DST/NAME only. Every pair is checked before the first run starts;
//! the runs are made one after the other and the output ends with their
//! totals.

use crate::cmd_mirror::{
    checked_config, finish, print_lines, remote_root, run_pair, usage, MirrorArgs, Ran,
};
use accord_engine::Report;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// One source's run: its arguments (`src` and `dst` set) and the name it
/// goes under in DST.
struct Pair {
    args: MirrorArgs,
    name: String,
}

pub fn run(args: MirrorArgs, matches: &clap::ArgMatches) -> i32 {
    let pairs = match pairs(&args) {
        Ok(p) => p,
        Err(code) => return code,
    };
    for pair in &pairs {
        if let Err(code) = checked_config(&pair.args, matches) {
            return code;
        }
    }
    let mut totals = Totals::default();
    for pair in pairs {
        let prefix = format!("{}/", pair.name);
        match run_pair(&pair.args, matches, false) {
            Ran::Report(report, wire) => {
                print_lines(&pair.args, &report, &prefix);
                totals.add(&prefix, *report, wire);
            }
            Ran::Exited(code) => totals.worst = totals.worst.max(code),
        }
    }
    let code = finish(&args, &totals.report, totals.wire);
    code.max(totals.worst)
}

/// Each source with its DST/NAME; two sources of one name, or a source
/// without one, are a usage error.
fn pairs(args: &MirrorArgs) -> Result<Vec<Pair>, i32> {
    let mut seen: BTreeMap<String, &Path> = BTreeMap::new();
    let mut pairs = Vec::new();
    for src in &args.sources {
        let name = source_name(src)?;
        if let Some(first) = seen.insert(name.clone(), src) {
            return Err(usage(&format!(
                "{} and {} would both go to {}: give each source its own name, or run \
                 accord mirror once for each",
                first.display(),
                src.display(),
                under(&args.dst, &name).display()
            )));
        }
        let mut one = args.clone();
        one.src = src.to_path_buf();
        one.dst = under(&args.dst, &name);
        one.link_dest = args
            .link_dest
            .as_ref()
            .and_then(|d| link_dest_under(&args.dst, d, &name));
        one.backup.backup_dir = backup_dir_under(args, &name)?;
        pairs.push(Pair { args: one, name });
    }
    Ok(pairs)
}

/// The name a source goes under in DST: its last name (a local `.` by the
/// directory it is).
fn source_name(src: &Path) -> Result<String, i32> {
    let named = |text: &str| {
        let last = text.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        (!matches!(last, "" | "." | "..")).then(|| last.to_string())
    };
    let name = match remote_root(src).map_err(|e| usage(&e))? {
        Some(spec) => named(&spec.path),
        None => std::fs::canonicalize(src)
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .or_else(|| named(&src.to_string_lossy())),
    };
    name.ok_or_else(|| {
        usage(&format!(
            "{} has no name to go under the destination: with several sources, \
             name each by a path that ends in a name",
            src.display()
        ))
    })
}

/// DST/NAME, for a local or a remote DST as written (`host:` is the
/// login directory: `host:NAME`).
fn under(dst: &Path, name: &str) -> PathBuf {
    let text = dst.to_string_lossy();
    let remote = matches!(remote_root(dst), Ok(Some(_)));
    if text.ends_with('/') || (remote && text.ends_with(':')) {
        PathBuf::from(format!("{text}{name}"))
    } else if remote {
        PathBuf::from(format!("{text}/{name}"))
    } else {
        dst.join(name)
    }
}

/// `--link-dest DIR` for one source: DIR/NAME (DIR taken from DST, as
/// rsync does), absolute so that it is not taken from DST/NAME again;
/// None where that snapshot has no such directory (its files are copied).
fn link_dest_under(dst: &Path, dir: &Path, name: &str) -> Option<PathBuf> {
    let at = crate::cmd_mirror::link_dest_dir(dst, dir).join(name);
    let at = std::env::current_dir().ok()?.join(at);
    at.is_dir().then_some(at)
}

/// `--backup-dir DIR` for one source: DIR/NAME (DIR taken from DST, as
/// rsync does), absolute so that it is not taken from DST/NAME again. A
/// remote DST keeps its backups inside itself, where one source's run
/// cannot reach the others' DIR: refused.
fn backup_dir_under(args: &MirrorArgs, name: &str) -> Result<Option<PathBuf>, i32> {
    let Some(dir) = &args.backup.backup_dir else {
        return Ok(None);
    };
    if matches!(remote_root(&args.dst), Ok(Some(_))) {
        return Err(usage(
            "--backup-dir with several sources needs a local destination: run accord mirror \
             once for each source",
        ));
    }
    let at = crate::cmd_mirror::link_dest_dir(&args.dst, dir).join(name);
    let cwd = std::env::current_dir().map_err(|e| {
        usage(&format!(
            "cannot tell the current directory: {}",
            accord_fsys::io_words(&e)
        ))
    })?;
    Ok(Some(cwd.join(at)))
}

/// The runs' figures added up, their failures with their paths under
/// DST, and the worst exit status of those that printed their own.
#[derive(Default)]
struct Totals {
    report: Report,
    wire: Option<(u64, u64)>,
    worst: i32,
}

impl Totals {
    fn add(&mut self, prefix: &str, r: Report, wire: Option<(u64, u64)>) {
        let t = &mut self.report;
        t.files_total += r.files_total;
        t.bytes_total += r.bytes_total;
        t.files_transferred += r.files_transferred;
        t.others_created += r.others_created;
        t.links_created += r.links_created;
        t.dirs_created += r.dirs_created;
        t.metadata_updated += r.metadata_updated;
        t.files_deleted += r.files_deleted;
        t.bytes_written += r.bytes_written;
        t.literal_bytes += r.literal_bytes;
        t.matched_bytes += r.matched_bytes;
        t.deletions_suspended |= r.deletions_suspended;
        t.elapsed_s += r.elapsed_s;
        t.scan_s += r.scan_s;
        t.plan_s += r.plan_s;
        t.execute_s += r.execute_s;
        t.fatal = t.fatal.take().or(r.fatal);
        t.refusal = t.refusal.take().or(r.refusal);
        for mut failure in r.errors {
            let name = prefix.trim_end_matches('/').as_bytes();
            let under = match failure.path.is_root() {
                true => name.to_vec(),
                false => [prefix.as_bytes(), failure.path.as_bytes()].concat(),
            };
            if let Ok(path) = accord_model::RelPath::new(&under) {
                failure.path = path;
            }
            t.errors.push(failure);
        }
        if let Some(plan) = r.plan {
            add_plan_summary(t, &plan.summary);
        }
        if let Some((sent, received)) = wire {
            let (s, r) = self.wire.get_or_insert((0, 0));
            *s += sent;
            *r += received;
        }
    }
}

/// A dry run's summary: the plans' counts added up.
fn add_plan_summary(t: &mut Report, s: &accord_engine::PlanSummary) {
    let total = &mut t.plan.get_or_insert_with(Default::default).summary;
    total.entries_total += s.entries_total;
    total.files_total += s.files_total;
    total.bytes_total += s.bytes_total;
    total.files_to_write += s.files_to_write;
    total.bytes_to_write += s.bytes_to_write;
    total.deletes += s.deletes;
    total.extras_kept += s.extras_kept;
}
