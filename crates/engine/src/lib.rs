//! The orchestrator: `mirror()` runs scan → plan → transfer → commit over two
//! replicas. It never parses arguments or prints; it returns a [`Report`].
//!
//! Execution follows the plan's phases (see `accord_plan`); inside a phase
//! every item is an independent task run on the rayon pool: per file (grouped
//! by directory so each group opens its two directory handles once),
//! hard links after the files, directory properties deepest first (after their
//! subtree). File contents are committed in batches: every file of a batch is
//! written to its temp file, the batch is made durable (one `syncfs` instead of
//! one `fsync` per file), then each temp is re-checked and renamed over its
//! target.

mod replica;
mod transfer;
mod transfer_delta;

pub use accord_fsys::{Reflink, XattrFilter};
pub use accord_plan::{Kinds, MaxDelete, MirrorOptions, MirrorPlan, Refusal};
pub use replica::{LocalReplica, Replica};

use accord_fsys::{is_no_space, DigestMemo, Dir, IgnoreRules, PropsMask, Root, ScanOptions};
use accord_model::{Entry, Kind, PathFailure, RelPath};
use accord_plan::Item;
use rayon::prelude::*;
use std::collections::{BTreeMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// `--delta auto|always|never`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeltaMode {
    Auto,
    Always,
    Never,
}

/// Everything a mirror run is told.
#[derive(Clone, Debug)]
pub struct MirrorConfig {
    pub plan: MirrorOptions,
    pub xattrs: XattrFilter,
    /// `--exclude` patterns and `--exclude-from` lines (gitignore syntax).
    pub excludes: Vec<String>,
    /// Read `.accordignore` files in the source.
    pub ignore_files: bool,
    pub reflink: Reflink,
    pub delta: DeltaMode,
    pub inplace: bool,
    pub fsync: bool,
    pub dry_run: bool,
    /// Worker threads (0: twice the cores, at least 4).
    pub jobs: usize,
    /// Where the deletion guard remembers the source root (None: nowhere).
    pub state_dir: Option<PathBuf>,
}

impl Default for MirrorConfig {
    fn default() -> Self {
        MirrorConfig {
            plan: MirrorOptions::default(),
            xattrs: XattrFilter {
                xattrs: true,
                acls: true,
            },
            excludes: Vec::new(),
            ignore_files: true,
            reflink: Reflink::Auto,
            delta: DeltaMode::Auto,
            inplace: false,
            fsync: true,
            dry_run: false,
            jobs: 0,
            state_dir: None,
        }
    }
}

/// Live counters for a progress display (read from another thread).
#[derive(Debug, Default)]
pub struct Progress {
    pub planned: AtomicBool,
    pub files_total: AtomicU64,
    pub bytes_total: AtomicU64,
    pub files_done: AtomicU64,
    pub bytes_done: AtomicU64,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Report {
    /// The plan (always set once planning succeeded).
    pub plan: Option<MirrorPlan>,
    /// The deletion guard stopped the run before any change.
    pub refusal: Option<Refusal>,
    /// The run stopped (disk full, root unusable, ...).
    pub fatal: Option<String>,
    pub errors: Vec<PathFailure>,
    /// Things a person should know that are not failures (recoveries).
    pub notices: Vec<String>,
    /// Changes made, in order: (change, path), for `--itemize`.
    pub changes: Vec<(&'static str, RelPath)>,
    pub files_total: u64,
    pub bytes_total: u64,
    pub files_transferred: u64,
    pub files_deleted: u64,
    pub bytes_written: u64,
    pub literal_bytes: u64,
    pub matched_bytes: u64,
    /// Deletions were suspended because a source directory could not be read.
    pub deletions_suspended: bool,
    pub elapsed_s: f64,
    /// Seconds spent scanning both sides, planning, and carrying out the plan.
    pub scan_s: f64,
    pub plan_s: f64,
    pub execute_s: f64,
}

impl Report {
    pub fn ok(&self) -> bool {
        self.fatal.is_none() && self.refusal.is_none() && self.errors.is_empty()
    }
}

#[derive(Default)]
struct Counters {
    transferred: AtomicU64,
    deleted: AtomicU64,
    written: AtomicU64,
    literal: AtomicU64,
    matched: AtomicU64,
}

pub(crate) struct Exec<'a> {
    src: &'a Root,
    dst: &'a Root,
    cfg: &'a MirrorConfig,
    progress: &'a Progress,
    errors: Mutex<Vec<PathFailure>>,
    fatal: Mutex<Option<String>>,
    stop: AtomicBool,
    changes: Mutex<Vec<(&'static str, RelPath)>>,
    counters: Counters,
}

impl Exec<'_> {
    fn fail(&self, path: &RelPath, e: &io::Error) {
        if is_no_space(e) {
            self.fatal_error(format!(
                "disk full writing {}: {e}; the old file was left in place",
                path.display()
            ));
        } else {
            self.errors.lock().unwrap().push(PathFailure {
                path: path.clone(),
                message: e.to_string(),
            });
        }
    }

    fn fail_msg(&self, path: &RelPath, msg: impl Into<String>) {
        self.errors.lock().unwrap().push(PathFailure {
            path: path.clone(),
            message: msg.into(),
        });
    }

    fn fatal_error(&self, msg: String) {
        let mut f = self.fatal.lock().unwrap();
        if f.is_none() {
            *f = Some(msg);
        }
        self.stop.store(true, Ordering::SeqCst);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn changed(&self, it: &Item) {
        if let Some(c) = it.change() {
            self.changes.lock().unwrap().push((c, it.path.clone()));
        }
    }

    fn mask(&self) -> PropsMask {
        let o = &self.cfg.plan;
        PropsMask {
            perms: o.perms,
            owner: o.owner,
            times: o.times,
            xattrs: if o.xattrs {
                Some(self.cfg.xattrs)
            } else {
                None
            },
        }
    }
}

/// Drop `v` on a thread of its own (a failed spawn drops it right here).
fn free_in_background<T: Send + 'static>(v: T) {
    let _ = std::thread::Builder::new()
        .name("accord-free".into())
        .spawn(move || drop(v));
}

fn parent_of(p: &RelPath) -> RelPath {
    p.parent().unwrap_or_default()
}

/// A memo of a replica root (`xattr` or `listing`; see `accord_fsys::DigestMemo`).
fn memo_file(dir: &Path, kind: &str, root: &Path) -> PathBuf {
    let key = blake3::hash(root.as_os_str().as_encoded_bytes()).to_hex();
    dir.join(format!("{kind}-memo-{}", &key.as_str()[..24]))
}

fn state_file(dir: &Path, dst: &Path) -> PathBuf {
    let key = blake3::hash(dst.as_os_str().as_encoded_bytes()).to_hex();
    dir.join(format!("mirror-{}", &key.as_str()[..24]))
}

/// Make `dst` a copy of `src`.
pub fn mirror(src_path: &Path, dst_path: &Path, cfg: &MirrorConfig, progress: &Progress) -> Report {
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
    let pool = match rayon::ThreadPoolBuilder::new()
        .num_threads(jobs)
        .thread_name(|i| format!("accord-{i}"))
        .build()
    {
        Ok(p) => p,
        Err(e) => {
            return Report {
                fatal: Some(format!("cannot start worker threads: {e}")),
                ..Report::default()
            }
        }
    };
    let mut r = pool.install(|| mirror_inner(src_path, dst_path, cfg, progress));
    r.elapsed_s = start.elapsed().as_secs_f64();
    r
}

fn mirror_inner(
    src_path: &Path,
    dst_path: &Path,
    cfg: &MirrorConfig,
    progress: &Progress,
) -> Report {
    let mut report = Report::default();
    let t_scan = Instant::now();
    let src = match LocalReplica::open(src_path) {
        Ok(s) => s,
        Err(e) => {
            report.fatal = Some(format!(
                "cannot open source {}: {e}; nothing was changed",
                src_path.display()
            ));
            return report;
        }
    };
    let dst = if cfg.dry_run {
        match LocalReplica::open(dst_path) {
            Ok(d) => Some(d),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                report.fatal = Some(format!(
                    "cannot open destination {}: {e}",
                    dst_path.display()
                ));
                return report;
            }
        }
    } else {
        match LocalReplica::create(dst_path) {
            Ok(d) => Some(d),
            Err(e) => {
                report.fatal = Some(format!(
                    "cannot open or create destination {}: {e}",
                    dst_path.display()
                ));
                return report;
            }
        }
    };
    if let Some(d) = &dst {
        if d.identity() == src.identity() {
            report.fatal = Some("source and destination are the same directory".into());
            return report;
        }
    }
    // Two runs into one destination would delete each other's temp files
    // and move aside files the other is updating in place.
    if let Some(d) = &dst {
        if !cfg.dry_run {
            match d.root().try_lock() {
                Ok(true) => {}
                Ok(false) => {
                    report.fatal = Some(format!(
                        "another accord run is writing into {}; try again when it is done",
                        dst_path.display()
                    ));
                    return report;
                }
                Err(e) => {
                    report.fatal = Some(format!("cannot lock {}: {e}", dst_path.display()));
                    return report;
                }
            }
        }
    }
    // One root inside the other: a mirror would delete the source, or copy
    // itself into itself one level deeper on every run.
    if let Some(why) = accord_fsys::nesting(src_path, dst_path) {
        report.fatal = Some(why);
        return report;
    }

    // Scan both sides at once.
    let src_rules = match IgnoreRules::new(&cfg.excludes) {
        Ok(r) => r,
        Err(e) => {
            report.fatal = Some(format!("bad exclude pattern: {e}"));
            return report;
        }
    };
    let dst_rules = IgnoreRules::new(&cfg.excludes).expect("same patterns parsed above");
    let memo_files = cfg.state_dir.as_ref().map(|dir| {
        (
            memo_file(dir, "xattr", &accord_fsys::canonical(src_path)),
            memo_file(dir, "xattr", &accord_fsys::canonical(dst_path)),
        )
    });
    let (s_memo, d_memo) = match &memo_files {
        Some((s, d)) if cfg.xattrs.any() => (DigestMemo::load(s), DigestMemo::load(d)),
        _ => Default::default(),
    };
    // Only where directory ctimes are kept by the local kernel itself (not
    // a network or FUSE file system, whose attributes may lag).
    let listing_file = match (&cfg.state_dir, &dst) {
        (Some(dir), Some(d)) if d.root().is_local_disk_fs() => {
            Some(memo_file(dir, "listing", &accord_fsys::canonical(dst_path)))
        }
        _ => None,
    };
    let listing_memo = listing_file
        .as_deref()
        .map(DigestMemo::load)
        .unwrap_or_default();
    let src_opts = ScanOptions {
        xattrs: cfg.xattrs,
        xattr_memo: Some(&s_memo),
        listing_memo: None,
        read_ignore_files: cfg.ignore_files,
        source: true,
    };
    let dst_opts = ScanOptions {
        xattrs: cfg.xattrs,
        xattr_memo: Some(&d_memo),
        listing_memo: listing_file.as_ref().map(|_| &listing_memo),
        read_ignore_files: false,
        source: false,
    };
    // Both sides at once, directory by directory.
    let (mut s_scan, d_scan) = match &dst {
        Some(d) => {
            let (s, d) = src.scan_pair(d, (&src_rules, &src_opts), (&dst_rules, &dst_opts));
            (s, Some(d))
        }
        None => (src.scan(&src_rules, &src_opts), None),
    };
    let mut d_scan = d_scan.unwrap_or_default();
    report.errors.append(&mut s_scan.errors);
    // A source file an earlier in-place run left half-written (its marker is
    // beside it) holds neither version: never copy it as user data, and keep
    // the destination's copy (deletions are suspended).
    if !s_scan.inplace_markers.is_empty() {
        let damaged = inplace_targets(src.root(), &s_scan.inplace_markers);
        for p in &damaged {
            report.errors.push(PathFailure {
                path: p.clone(),
                message:
                    "the source holds a half-finished in-place update (an earlier run stopped); \
                          not copied"
                        .into(),
            });
        }
        s_scan.entries.retain(|e| !damaged.contains(&e.path));
        s_scan.incomplete = true;
    }
    if s_scan.entries.is_empty() {
        report.fatal = Some(format!("cannot read source {}", src_path.display()));
        return report;
    }
    if dst.is_some() && (d_scan.entries.is_empty() || d_scan.incomplete) {
        // An unreadable destination directory could hide entries; we could
        // still copy, but we would not know what to delete or replace.
        let msg = d_scan
            .errors
            .first()
            .map(|e| format!("{}: {}", e.path.display(), e.message))
            .unwrap_or_default();
        report.fatal = Some(format!(
            "cannot read destination {}: {msg}",
            dst_path.display()
        ));
        return report;
    }
    report.errors.append(&mut d_scan.errors);
    // In-place updates that a previous run did not finish: the file holds
    // neither version; move it aside (and let this run copy it again).
    if !d_scan.inplace_markers.is_empty() && !cfg.dry_run {
        if let Some(d) = &dst {
            recover_inplace(d.root(), &d_scan.inplace_markers, &mut report.notices);
            d_scan = d.scan(&dst_rules, &dst_opts);
            report.errors.append(&mut d_scan.errors);
        }
    }
    // The source's .accordignore files also decide what is excluded in the
    // destination (excluded entries there are never deleted).
    if src_rules.has_rules() {
        let mut excluded_dirs: HashSet<RelPath> = HashSet::new();
        d_scan.entries.retain(|e| {
            let p = parent_of(&e.path);
            let out = !e.path.is_root()
                && (excluded_dirs.contains(&p)
                    || src_rules.is_excluded(&e.path, e.kind == Kind::Dir));
            if out && e.kind == Kind::Dir {
                excluded_dirs.insert(e.path.clone());
            }
            !out
        });
    }

    // Contents by fingerprint.
    if cfg.plan.checksum {
        if let Some(d) = &dst {
            checksum_pairs(&src, d, &mut s_scan.entries, &mut d_scan.entries);
        }
    }

    // The deletion guard's memory of the source root.
    let state = cfg
        .state_dir
        .as_ref()
        .map(|dir| state_file(dir, &accord_fsys::canonical(dst_path)));
    let ident = src.identity();
    let mut opts = cfg.plan.clone();
    opts.source_incomplete = s_scan.incomplete;
    report.deletions_suspended = s_scan.incomplete && opts.delete;
    if let Some(sf) = &state {
        if let Ok(b) = accord_fsys::read_state_file(sf) {
            let s = String::from_utf8_lossy(&b);
            let mut it = s.split_whitespace().map(|x| x.parse::<u64>().ok());
            if let (Some(Some(dev)), Some(Some(ino))) = (it.next(), it.next()) {
                opts.source_root_changed = (dev, ino) != ident;
            }
        }
    }

    report.scan_s = t_scan.elapsed().as_secs_f64();
    let t_plan = Instant::now();
    // The memos are saved while the plan is made (both only read the scans).
    let save_memos = || {
        if let (Some((sf, df)), false, true) = (&memo_files, cfg.dry_run, cfg.xattrs.any()) {
            // Only an accelerator: a memo that cannot be saved costs speed next time.
            let _ = DigestMemo::from_keys(s_scan.xattr_free.clone()).save(sf);
            let _ = DigestMemo::from_keys(d_scan.xattr_free.clone()).save(df);
        }
        if let (Some(lf), false) = (&listing_file, cfg.dry_run) {
            let _ = DigestMemo::from_keys(d_scan.listings.clone()).save(lf);
        }
    };
    let (planned, ()) = rayon::join(
        || accord_plan::mirror_plan(&s_scan.entries, &d_scan.entries, &d_scan.stale_temps, &opts),
        save_memos,
    );
    let plan = match planned {
        Ok(p) => p,
        Err(refusal) => {
            report.refusal = Some(refusal);
            return report;
        }
    };
    // Freeing two scans of a large tree takes a while (10-30 ms for 400,000
    // entries): a thread of its own does it while the plan is carried out.
    free_in_background((s_scan, d_scan));
    report.plan_s = t_plan.elapsed().as_secs_f64();
    report.files_total = plan.summary.files_total as u64;
    report.bytes_total = plan.summary.bytes_total;
    progress
        .files_total
        .store(plan.summary.files_to_write as u64, Ordering::Relaxed);
    progress
        .bytes_total
        .store(plan.summary.bytes_to_write, Ordering::Relaxed);
    progress.planned.store(true, Ordering::Relaxed);

    if cfg.dry_run || dst.is_none() {
        report.plan = Some(plan);
        return report;
    }
    let dst = dst.unwrap();
    let exec = Exec {
        src: src.root(),
        dst: dst.root(),
        cfg,
        progress,
        errors: Mutex::new(Vec::new()),
        fatal: Mutex::new(None),
        stop: AtomicBool::new(false),
        changes: Mutex::new(Vec::new()),
        counters: Counters::default(),
    };
    let t_exec = Instant::now();
    run_plan(&exec, &plan);
    let wrote = !plan.is_empty();
    if cfg.fsync && wrote && !exec.stopped() {
        if let Err(e) = dst.sync_all() {
            exec.fatal_error(format!("syncing the destination failed: {e}"));
        }
    }
    report.execute_s = t_exec.elapsed().as_secs_f64();
    report.errors.extend(exec.errors.into_inner().unwrap());
    report.fatal = exec.fatal.into_inner().unwrap();
    report.changes = exec.changes.into_inner().unwrap();
    // The phases run in parallel, so changes are recorded in no fixed
    // order: list them by path (a stable sort keeps a path's own changes,
    // say deleted then created, in the order they were made).
    report.changes.sort_by(|a, b| a.1.cmp(&b.1));
    let c = &exec.counters;
    report.files_transferred = c.transferred.load(Ordering::Relaxed);
    report.files_deleted = c.deleted.load(Ordering::Relaxed);
    report.bytes_written = c.written.load(Ordering::Relaxed);
    report.literal_bytes = c.literal.load(Ordering::Relaxed);
    report.matched_bytes = c.matched.load(Ordering::Relaxed);
    report.plan = Some(plan);
    if report.fatal.is_none() {
        if let Some(sf) = &state {
            let _ =
                accord_fsys::write_state_file(sf, format!("{} {}\n", ident.0, ident.1).as_bytes());
        }
    }
    report
}

/// What an in-place marker says: its directory (open), the directory's path
/// and the file name it holds (`None` when that is not a valid name); `None`
/// as a whole when the marker cannot be read.
fn read_marker(root: &Root, m: &RelPath) -> Option<(Dir, RelPath, Option<Vec<u8>>)> {
    let parent = parent_of(m);
    let dir = root.open_dir(&parent).ok()?;
    let target = dir.read_small(m.file_name()).ok()?;
    let valid = accord_model::validate_name(&target).is_ok();
    Some((dir, parent, valid.then_some(target)))
}

/// The files that in-place markers name (markers hold the file's name).
fn inplace_targets(root: &Root, markers: &[RelPath]) -> Vec<RelPath> {
    markers
        .iter()
        .filter_map(|m| match read_marker(root, m)? {
            (_, parent, Some(target)) => parent.join(&target).ok(),
            _ => None,
        })
        .collect()
}

fn recover_inplace(dst: &Root, markers: &[RelPath], notices: &mut Vec<String>) {
    for m in markers {
        let Some((dir, parent, target)) = read_marker(dst, m) else {
            continue;
        };
        let Some(target) = target else {
            let _ = dir.unlink(m.file_name());
            continue;
        };
        let shown = parent
            .join(&target)
            .map(|p| p.display())
            .unwrap_or_default();
        match dir.stat(&target) {
            Ok(st) if st.kind == Kind::File => {
                let rec = accord_fsys::recovery_name(&target);
                match dir.rename_noreplace(&target, &rec) {
                    Ok(()) => {
                        notices.push(format!(
                            "{shown} was being updated in place when an earlier run stopped; \
                             it was moved to {} and is copied again",
                            accord_model::escape_for_display(&rec)
                        ));
                        let _ = dir.unlink(m.file_name());
                    }
                    Err(e) => notices.push(format!("{shown}: could not move aside: {e}")),
                }
            }
            _ => {
                let _ = dir.unlink(m.file_name());
            }
        }
    }
}

fn checksum_pairs(src: &LocalReplica, dst: &LocalReplica, s: &mut [Entry], d: &mut [Entry]) {
    let dsizes: std::collections::HashMap<&RelPath, (Kind, u64)> =
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

fn run_plan(x: &Exec, plan: &MirrorPlan) {
    // 1. Stale temps of an interrupted run.
    for it in &plan.cleanup {
        if let Ok(dir) = x.dst.open_dir(&parent_of(&it.path)) {
            let _ = dir.unlink(it.path.file_name());
        }
    }
    // 2. Deletions, deepest first: one depth level at a time (a directory
    // goes after everything under it), the directories of a level in
    // parallel, each opened once.
    type Groups<'a> = BTreeMap<RelPath, Vec<&'a Item>>;
    let mut levels: BTreeMap<std::cmp::Reverse<usize>, Groups> = BTreeMap::new();
    for it in &plan.deletes {
        levels
            .entry(std::cmp::Reverse(it.path.depth()))
            .or_default()
            .entry(parent_of(&it.path))
            .or_default()
            .push(it);
    }
    for (_, groups) in levels {
        if x.stopped() {
            return;
        }
        groups.into_par_iter().for_each(|(parent, items)| {
            let dir = match x.dst.open_dir(&parent) {
                Ok(d) => d,
                Err(e) => {
                    if e.raw_os_error() != Some(libc::ENOENT) {
                        for it in items {
                            x.fail(&it.path, &e);
                        }
                    }
                    return;
                }
            };
            for it in items {
                if x.stopped() {
                    return;
                }
                delete_one(x, &dir, it);
            }
        });
    }
    // 3. New directories, parents first: one depth level at a time, the
    // directories of a level in parallel.
    let mut levels: BTreeMap<usize, Vec<&Item>> = BTreeMap::new();
    for it in &plan.mkdirs {
        levels.entry(it.path.depth()).or_default().push(it);
    }
    for (_, items) in levels {
        if x.stopped() {
            return;
        }
        items.par_iter().for_each(|it| make_dir(x, it));
    }
    // 4. Files, symlinks, specials; 5. hard links.
    transfer::run_files(x, &plan.files);
    if !x.stopped() {
        transfer::run_links(x, &plan.links);
    }
    // 6. Directory properties, deepest first, one depth level at a time.
    if x.stopped() {
        return;
    }
    let mut levels: BTreeMap<std::cmp::Reverse<usize>, Vec<&Item>> = BTreeMap::new();
    for it in &plan.dir_meta {
        levels
            .entry(std::cmp::Reverse(it.path.depth()))
            .or_default()
            .push(it);
    }
    for (_, items) in levels {
        items.par_iter().for_each(|it| {
            let Some(s) = &it.src else { return };
            let r = x.dst.open_dir(&it.path).and_then(|d| {
                if x.cfg.fsync {
                    // The entries renamed into it are made durable by the
                    // final syncfs; nothing to do per directory.
                }
                accord_fsys::set_props_fd(std::os::fd::AsFd::as_fd(&d), &s.props, x.mask())
            });
            match r {
                Ok(()) => x.changed(it),
                Err(e) => x.fail(&it.path, &e),
            }
        });
    }
}

fn make_dir(x: &Exec, it: &Item) {
    let r = x.dst.open_dir(&parent_of(&it.path)).and_then(|d| {
        match d.mkdir(it.path.file_name(), 0o700) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => match d.stat(it.path.file_name()) {
                Ok(st) if st.kind == Kind::Dir => Ok(()),
                _ => Err(e),
            },
            r => r,
        }
    });
    match r {
        Ok(()) => x.changed(it),
        Err(e) => x.fail(&it.path, &e),
    }
}

fn delete_one(x: &Exec, dir: &Dir, it: &Item) {
    let Some(d) = &it.dst else { return };
    let name = it.path.file_name();
    let is_extra = it.src.is_none();
    let st = match dir.stat(name) {
        Ok(st) => st,
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return,
        Err(e) => return x.fail(&it.path, &e),
    };
    // Re-check against the scan (safety rule 3): a file saved or replaced in
    // DST since then is not the one the plan meant to delete. Directories
    // compare by inode only: deleting their children changes their mtime.
    let same = st.kind == d.kind
        && st.ino == d.ino
        && (st.kind == Kind::Dir || (st.size == d.size && st.mtime == d.props.mtime));
    if !same {
        return x.fail_msg(&it.path, "changed since it was scanned; left alone");
    }
    let r = if st.kind == Kind::Dir {
        dir.rmdir(name)
    } else {
        dir.unlink(name)
    };
    match r {
        Ok(()) => {
            x.counters.deleted.fetch_add(1, Ordering::Relaxed);
            x.changed(it);
        }
        Err(e)
            if is_extra
                && matches!(e.raw_os_error(), Some(libc::ENOTEMPTY) | Some(libc::EEXIST)) =>
        {
            // It holds excluded entries: they and it stay.
        }
        Err(e) => x.fail(&it.path, &e),
    }
}
