//! The steps of a mirror run, each a function that returns a value or stops
//! the run with a typed reason: open the roots, check them, scan, settle
//! what the scans found (half-finished in-place updates, exclusions,
//! checksums), find the facts the plan depends on, plan, carry it out.

use crate::error::{Error, Failure, Fatal};
use crate::exec::{run_plan, Exec};
use crate::local::LocalReplica;
use crate::replica::Replica;
use crate::{MirrorConfig, Progress, Report};
use accord_fsys::{DigestMemo, Dir, IgnoreRules, Scan, ScanOptions};
use accord_model::{Entry, Kind, RelPath};
use accord_plan::{Facts, MirrorPlan, Refusal};
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Names of the replicas' state files.
const XATTR_MEMO: &str = "xattr-memo";
const LISTING_MEMO: &str = "listing-memo";
/// The deletion guard's memory of the source root, kept by the destination.
const GUARD_STATE: &str = "mirror";

/// Why a run stopped before it was done.
enum Stop {
    Fatal(Fatal),
    Refused(Refusal),
}

impl From<Fatal> for Stop {
    fn from(f: Fatal) -> Stop {
        Stop::Fatal(f)
    }
}

/// Make the local directory `dst_path` a copy of `src_path`.
pub fn mirror(src_path: &Path, dst_path: &Path, cfg: &MirrorConfig, progress: &Progress) -> Report {
    in_pool(cfg, |report| {
        let (src, dst) = open_roots(src_path, dst_path, cfg)?;
        let _lock = match &dst {
            Some(d) if !cfg.dry_run => Some(lock(d, dst_path)?),
            _ => None,
        };
        if let Some(d) = &dst {
            check_distinct(&src, d, src_path, dst_path)?;
        }
        run(
            &src,
            dst.as_ref().map(|d| d as &dyn Replica),
            cfg,
            progress,
            report,
        )
    })
}

/// Make the replica `dst` a copy of `src`, whatever kind of replicas they
/// are (the caller has opened and checked them).
pub fn mirror_replicas(
    src: &dyn Replica,
    dst: &dyn Replica,
    cfg: &MirrorConfig,
    progress: &Progress,
) -> Report {
    in_pool(cfg, |report| {
        if src.identity() == dst.identity() {
            return Err(Fatal::SameDirectory.into());
        }
        if !cfg.dry_run {
            match dst.try_lock() {
                Ok(true) => {}
                Ok(false) => return Err(Fatal::Busy(dst.describe().into()).into()),
                Err(source) => {
                    let path = dst.describe().into();
                    return Err(Fatal::Lock { path, source }.into());
                }
            }
        }
        run(src, Some(dst), cfg, progress, report)
    })
}

/// Run `steps` on a pool of `cfg.jobs` threads and time it.
fn in_pool(
    cfg: &MirrorConfig,
    steps: impl FnOnce(&mut Report) -> Result<(), Stop> + Send,
) -> Report {
    let start = Instant::now();
    // File system calls block on I/O: more threads than cores keep the
    // disks and the cores busy.
    let jobs = if cfg.jobs == 0 {
        std::thread::available_parallelism()
            .map(|n| n.get() * 2)
            .unwrap_or(4)
            .max(4)
    } else {
        cfg.jobs
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .thread_name(|i| format!("accord-{i}"))
        .build();
    let mut report = Report::default();
    match pool {
        Ok(pool) => {
            let stopped = pool.install(|| steps(&mut report));
            match stopped {
                Ok(()) => {}
                Err(Stop::Fatal(f)) => report.fatal = Some(f),
                Err(Stop::Refused(r)) => report.refusal = Some(r),
            }
        }
        Err(e) => report.fatal = Some(Fatal::ThreadPool(e.to_string())),
    }
    report.elapsed_s = start.elapsed().as_secs_f64();
    report
}

/// The source, and the destination (created if missing; `None` in a dry run
/// when it does not exist yet).
fn open_roots(
    src_path: &Path,
    dst_path: &Path,
    cfg: &MirrorConfig,
) -> Result<(LocalReplica, Option<LocalReplica>), Fatal> {
    let state = || cfg.state_dir.clone();
    let src = LocalReplica::open(src_path)
        .map_err(|source| Fatal::OpenSource {
            path: src_path.to_path_buf(),
            source,
        })?
        .with_state_dir(state());
    let opened = if cfg.dry_run {
        match LocalReplica::open(dst_path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            r => r.map(Some),
        }
    } else {
        LocalReplica::create(dst_path).map(Some)
    };
    let dst = opened.map_err(|source| Fatal::OpenDestination {
        path: dst_path.to_path_buf(),
        source,
    })?;
    let opts = crate::LocalOptions {
        fsync: cfg.fsync,
        ..Default::default()
    };
    Ok((
        src,
        dst.map(|d| d.with_state_dir(state()).with_options(opts)),
    ))
}

/// Two runs into one destination would delete each other's temp files and
/// move aside files the other is updating in place.
fn lock<'a>(dst: &'a LocalReplica, dst_path: &Path) -> Result<&'a LocalReplica, Fatal> {
    match dst.try_lock() {
        Ok(true) => Ok(dst),
        Ok(false) => Err(Fatal::Busy(dst_path.to_path_buf())),
        Err(source) => Err(Fatal::Lock {
            path: dst_path.to_path_buf(),
            source,
        }),
    }
}

/// The roots are not the same directory, nor one inside the other by path
/// (a mirror would delete the source, or copy itself into itself one level
/// deeper on every run). Nesting through bind mounts is found by the scans.
fn check_distinct(
    src: &LocalReplica,
    dst: &LocalReplica,
    src_path: &Path,
    dst_path: &Path,
) -> Result<(), Fatal> {
    if dst.identity() == src.identity() {
        return Err(Fatal::SameDirectory);
    }
    match accord_fsys::nesting(src_path, dst_path) {
        Some(why) => Err(Fatal::Nested(why)),
        None => Ok(()),
    }
}

/// The steps after the roots are open.
fn run(
    src: &dyn Replica,
    dst: Option<&dyn Replica>,
    cfg: &MirrorConfig,
    progress: &Progress,
    report: &mut Report,
) -> Result<(), Stop> {
    let t_scan = Instant::now();
    let rules = IgnoreRules::new(&cfg.excludes).map_err(Fatal::BadExclude)?;
    let dst_rules = IgnoreRules::new(&cfg.excludes).map_err(Fatal::BadExclude)?;
    let memos = Memos::load(src, dst, cfg);
    let (mut s_scan, mut d_scan) = scan_both(src, dst, cfg, (&rules, &dst_rules), &memos);
    check_scan_nesting(src, dst, &s_scan, &d_scan)?;
    let mut errors = take_scan_errors(&mut s_scan);
    errors.extend(drop_half_updated(src, &mut s_scan));
    check_readable(src, dst, &s_scan, &d_scan)?;
    errors.extend(take_scan_errors(&mut d_scan));
    if let (Some(d), false) = (dst, cfg.dry_run) {
        if !d_scan.inplace_markers.is_empty() {
            errors.extend(recover_half_updated(d, &d_scan.inplace_markers));
            // Scan again: the files moved aside are copied again.
            let opts = memos.dst_options(cfg);
            d_scan = d.scan(&dst_rules, &opts);
            errors.extend(take_scan_errors(&mut d_scan));
        }
    }
    report.errors.extend(errors);
    exclude_in_destination(&rules, &mut d_scan.entries);
    if cfg.plan.checksum {
        if let Some(d) = dst {
            checksum_pairs(src, d, &mut s_scan.entries, &mut d_scan.entries);
        }
    }
    let facts = Facts {
        source_incomplete: s_scan.incomplete,
        source_root_changed: dst.is_some_and(|d| source_root_changed(src, d)),
    };
    report.deletions_suspended = facts.source_incomplete && cfg.plan.delete;
    report.scan_s = t_scan.elapsed().as_secs_f64();

    let t_plan = Instant::now();
    let plan = plan_and_save_memos(src, dst, cfg, &facts, &s_scan, &d_scan)?;
    // Freeing two scans of a large tree takes a while (10-30 ms for 400,000
    // entries): a thread of its own does it while the plan is carried out.
    free_in_background((s_scan, d_scan));
    report.plan_s = t_plan.elapsed().as_secs_f64();
    report.files_total = plan.summary.files_total as u64;
    report.bytes_total = plan.summary.bytes_total;
    let p = progress;
    p.files_total
        .store(plan.summary.files_to_write as u64, Ordering::Relaxed);
    p.bytes_total
        .store(plan.summary.bytes_to_write, Ordering::Relaxed);
    p.planned.store(true, Ordering::Relaxed);

    match dst {
        Some(d) if !cfg.dry_run => execute(src, d, plan, cfg, progress, report),
        _ => report.plan = Some(plan),
    }
    Ok(())
}

/// The memos both replicas keep (see `accord_fsys::DigestMemo`).
#[derive(Default)]
struct Memos {
    src_xattr: DigestMemo,
    dst_xattr: DigestMemo,
    /// Only where directory ctimes are kept by the local kernel itself (not
    /// a network or FUSE file system, whose attributes may lag).
    listing: Option<DigestMemo>,
}

fn load_memo(r: &dyn Replica, name: &str) -> DigestMemo {
    r.read_state(name)
        .and_then(|b| DigestMemo::decode(&b))
        .unwrap_or_default()
}

impl Memos {
    fn load(src: &dyn Replica, dst: Option<&dyn Replica>, cfg: &MirrorConfig) -> Memos {
        let xattrs = cfg.xattrs.any();
        let listing_kept = dst
            .and_then(|d| d.local())
            .is_some_and(|l| l.root().is_local_disk_fs());
        Memos {
            src_xattr: if xattrs {
                load_memo(src, XATTR_MEMO)
            } else {
                DigestMemo::default()
            },
            dst_xattr: match dst {
                Some(d) if xattrs => load_memo(d, XATTR_MEMO),
                _ => DigestMemo::default(),
            },
            listing: match dst {
                Some(d) if listing_kept => Some(load_memo(d, LISTING_MEMO)),
                _ => None,
            },
        }
    }

    fn src_options(&self, cfg: &MirrorConfig) -> ScanOptions<'_> {
        ScanOptions {
            xattrs: cfg.xattrs,
            xattr_memo: Some(&self.src_xattr),
            listing_memo: None,
            read_ignore_files: cfg.ignore_files,
            source: true,
        }
    }

    fn dst_options(&self, cfg: &MirrorConfig) -> ScanOptions<'_> {
        ScanOptions {
            xattrs: cfg.xattrs,
            xattr_memo: Some(&self.dst_xattr),
            listing_memo: self.listing.as_ref(),
            read_ignore_files: false,
            source: false,
        }
    }

    /// Save what the scans found for the next run. Only an accelerator: a
    /// memo that cannot be saved costs speed next time.
    fn save(src: &dyn Replica, dst: &dyn Replica, cfg: &MirrorConfig, s: &Scan, d: &Scan) {
        if cfg.xattrs.any() {
            let _ = src.write_state(
                XATTR_MEMO,
                &DigestMemo::from_keys(s.xattr_free.clone()).encode(),
                false,
            );
            let _ = dst.write_state(
                XATTR_MEMO,
                &DigestMemo::from_keys(d.xattr_free.clone()).encode(),
                false,
            );
        }
        let listing_kept = dst.local().is_some_and(|l| l.root().is_local_disk_fs());
        if listing_kept {
            let _ = dst.write_state(
                LISTING_MEMO,
                &DigestMemo::from_keys(d.listings.clone()).encode(),
                false,
            );
        }
    }
}

/// Scan both sides at once: two local replicas directory by directory
/// together (`scan_pair`), others each on its own.
fn scan_both(
    src: &dyn Replica,
    dst: Option<&dyn Replica>,
    cfg: &MirrorConfig,
    (s_rules, d_rules): (&IgnoreRules, &IgnoreRules),
    memos: &Memos,
) -> (Scan, Scan) {
    let (s_opts, d_opts) = (memos.src_options(cfg), memos.dst_options(cfg));
    match dst {
        None => (src.scan(s_rules, &s_opts), Scan::default()),
        Some(d) => match (src.local(), d.local()) {
            (Some(s), Some(d)) => s.scan_pair(d, (s_rules, &s_opts), (d_rules, &d_opts)),
            _ => rayon::join(|| src.scan(s_rules, &s_opts), || d.scan(d_rules, &d_opts)),
        },
    }
}

/// One root reached from inside the other, as through a bind mount of a
/// source directory onto the destination: a mirror would delete the source
/// through the destination.
fn check_scan_nesting(
    src: &dyn Replica,
    dst: Option<&dyn Replica>,
    s_scan: &Scan,
    d_scan: &Scan,
) -> Result<(), Fatal> {
    let Some(dst) = dst else { return Ok(()) };
    let inside = |scan: &Scan, ident: (u64, u64)| {
        scan.entries
            .iter()
            .find(|e| e.kind == Kind::Dir && !e.path.is_root() && (e.dev, e.ino) == ident)
            .map(|e| e.path.display())
    };
    if let Some(p) = inside(s_scan, dst.identity()) {
        return Err(Fatal::Nested(format!(
            "the destination {} is the directory {p} inside the source {} \
             (a bind mount or another name for it)",
            dst.describe(),
            src.describe()
        )));
    }
    if let Some(p) = inside(d_scan, src.identity()) {
        return Err(Fatal::Nested(format!(
            "the source {} is the directory {p} inside the destination {} \
             (a bind mount or another name for it)",
            src.describe(),
            dst.describe()
        )));
    }
    Ok(())
}

fn take_scan_errors(scan: &mut Scan) -> Vec<Failure> {
    scan.errors
        .drain(..)
        .map(|e| Failure {
            path: e.path,
            error: Error::Scan(e.message),
        })
        .collect()
}

/// A source file an earlier in-place run left half-written (its marker is
/// beside it) holds neither version: never copy it as user data, and keep
/// the destination's copy (deletions are suspended).
fn drop_half_updated(src: &dyn Replica, scan: &mut Scan) -> Vec<Failure> {
    let Some(local) = src.local() else {
        return Vec::new();
    };
    if scan.inplace_markers.is_empty() {
        return Vec::new();
    }
    let damaged: HashSet<RelPath> = scan
        .inplace_markers
        .iter()
        .filter_map(|m| match read_marker(local.root(), m)? {
            (_, parent, Some(target)) => parent.join(&target).ok(),
            _ => None,
        })
        .collect();
    scan.entries.retain(|e| !damaged.contains(&e.path));
    scan.incomplete = true;
    let mut out: Vec<Failure> = damaged
        .into_iter()
        .map(|path| Failure {
            path,
            error: Error::HalfUpdated,
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// An unreadable destination directory could hide entries: we could still
/// copy, but we would not know what to delete or replace.
fn check_readable(
    src: &dyn Replica,
    dst: Option<&dyn Replica>,
    s_scan: &Scan,
    d_scan: &Scan,
) -> Result<(), Fatal> {
    if s_scan.entries.is_empty() {
        return Err(Fatal::SourceUnreadable(src.describe().into()));
    }
    if let Some(d) = dst {
        if d_scan.entries.is_empty() || d_scan.incomplete {
            let detail = d_scan
                .errors
                .first()
                .map(|e| format!("{}: {}", e.path.display(), e.message))
                .unwrap_or_default();
            return Err(Fatal::DestinationUnreadable {
                path: d.describe().into(),
                detail,
            });
        }
    }
    Ok(())
}

/// What an in-place marker says: its directory (open), the directory's path
/// and the file name it holds (`None` when that is not a valid name); `None`
/// as a whole when the marker cannot be read.
fn read_marker(root: &accord_fsys::Root, m: &RelPath) -> Option<(Dir, RelPath, Option<Vec<u8>>)> {
    let parent = m.parent().unwrap_or_default();
    let dir = root.open_dir(&parent).ok()?;
    let target = dir.read_small(m.file_name()).ok()?;
    let valid = accord_model::validate_name(&target).is_ok();
    Some((dir, parent, valid.then_some(target)))
}

/// In-place updates that a previous run did not finish: the file holds a mix
/// of both versions; move it aside (this run copies it again) and report it.
fn recover_half_updated(dst: &dyn Replica, markers: &[RelPath]) -> Vec<Failure> {
    let Some(local) = dst.local() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for m in markers {
        let Some((dir, parent, target)) = read_marker(local.root(), m) else {
            continue;
        };
        let Some(target) = target else {
            let _ = dir.unlink(m.file_name());
            continue;
        };
        let Ok(path) = parent.join(&target) else {
            continue;
        };
        if !dir.stat(&target).is_ok_and(|st| st.kind == Kind::File) {
            let _ = dir.unlink(m.file_name());
            continue;
        }
        let rec = accord_fsys::recovery_name(&target);
        let moved = dir.rename_noreplace(&target, &rec);
        if moved.is_ok() {
            let _ = dir.unlink(m.file_name());
        }
        out.push(Failure {
            path,
            error: Error::InterruptedInPlace {
                recovery: moved.map(|()| rec),
            },
        });
    }
    out
}

/// The source's .accordignore files also decide what is excluded in the
/// destination (excluded entries there are never deleted).
fn exclude_in_destination(rules: &IgnoreRules, entries: &mut Vec<Entry>) {
    if !rules.has_rules() {
        return;
    }
    let mut excluded_dirs: HashSet<RelPath> = HashSet::new();
    entries.retain(|e| {
        let parent = e.path.parent().unwrap_or_default();
        let out = !e.path.is_root()
            && (excluded_dirs.contains(&parent) || rules.is_excluded(&e.path, e.kind == Kind::Dir));
        if out && e.kind == Kind::Dir {
            excluded_dirs.insert(e.path.clone());
        }
        !out
    });
}

/// Fingerprints of the files whose sizes agree on both sides (`--checksum`).
fn checksum_pairs(src: &dyn Replica, dst: &dyn Replica, s: &mut [Entry], d: &mut [Entry]) {
    let dsizes: HashMap<&RelPath, (Kind, u64)> =
        d.iter().map(|e| (&e.path, (e.kind, e.size))).collect();
    let wanted: HashSet<RelPath> = s
        .iter()
        .filter(|e| e.kind == Kind::File && dsizes.get(&e.path) == Some(&(Kind::File, e.size)))
        .map(|e| e.path.clone())
        .collect();
    drop(dsizes);
    s.par_iter_mut()
        .filter(|e| wanted.contains(&e.path))
        .for_each(|e| e.hash = src.fingerprint(&e.path).ok());
    d.par_iter_mut()
        .filter(|e| wanted.contains(&e.path))
        .for_each(|e| e.hash = dst.fingerprint(&e.path).ok());
}

/// The deletion guard's memory: is the source root another one than the
/// last run's into this destination?
fn source_root_changed(src: &dyn Replica, dst: &dyn Replica) -> bool {
    let Some(bytes) = dst.read_state(GUARD_STATE) else {
        return false;
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut fields = text.split_whitespace().map(|x| x.parse::<u64>().ok());
    match (fields.next(), fields.next()) {
        (Some(Some(dev)), Some(Some(ino))) => (dev, ino) != src.identity(),
        _ => false,
    }
}

/// Plan, saving the memos meanwhile (both only read the scans).
fn plan_and_save_memos(
    src: &dyn Replica,
    dst: Option<&dyn Replica>,
    cfg: &MirrorConfig,
    facts: &Facts,
    s_scan: &Scan,
    d_scan: &Scan,
) -> Result<MirrorPlan, Stop> {
    let save = || {
        if let (Some(d), false) = (dst, cfg.dry_run) {
            Memos::save(src, d, cfg, s_scan, d_scan);
        }
    };
    let (planned, ()) = rayon::join(
        || {
            accord_plan::mirror_plan(
                &s_scan.entries,
                &d_scan.entries,
                &d_scan.stale_temps,
                &cfg.plan,
                facts,
            )
        },
        save,
    );
    planned.map_err(Stop::Refused)
}

/// Carry out the plan on `dst`, make it durable, and fill in the report.
fn execute(
    src: &dyn Replica,
    dst: &dyn Replica,
    plan: MirrorPlan,
    cfg: &MirrorConfig,
    progress: &Progress,
    report: &mut Report,
) {
    let exec = Exec::new(src, dst, cfg, progress);
    let t_exec = Instant::now();
    run_plan(&exec, &plan);
    if cfg.fsync && !plan.is_empty() && !exec.stopped() {
        if let Err(e) = dst.sync_all() {
            exec.fatal_error(Fatal::Sync(e));
        }
    }
    report.execute_s = t_exec.elapsed().as_secs_f64();
    report.errors.extend(exec.failures.into_inner().unwrap());
    report.fatal = exec.fatal.into_inner().unwrap();
    report.changes = exec.changes.into_inner().unwrap();
    // The phases run in parallel, so changes are recorded in no fixed
    // order: list them by path (a stable sort keeps a path's own changes,
    // say deleted then created, in the order they were made).
    report.changes.sort_by(|a, b| a.1.cmp(&b.1));
    report.errors.sort_by(|a, b| a.path.cmp(&b.path));
    let c = &exec.counters;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    report.files_transferred = get(&c.files);
    report.others_created = get(&c.others);
    report.links_created = get(&c.links);
    report.dirs_created = get(&c.dirs);
    report.metadata_updated = get(&c.metadata);
    report.files_deleted = get(&c.deleted);
    report.bytes_written = get(&c.written);
    report.literal_bytes = get(&c.literal);
    report.matched_bytes = get(&c.matched);
    report.plan = Some(plan);
    if report.fatal.is_none() {
        let (dev, ino) = src.identity();
        // Durable: the deletion guard's memory must not come back torn.
        let _ = dst.write_state(GUARD_STATE, format!("{dev} {ino}\n").as_bytes(), true);
    }
}

/// Drop `v` on a thread of its own (a failed spawn drops it right here).
fn free_in_background<T: Send + 'static>(v: T) {
    let _ = std::thread::Builder::new()
        .name("accord-free".into())
        .spawn(move || drop(v));
}
