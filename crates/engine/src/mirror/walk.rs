//! The unit of work: a directory pair. Each directory of the two trees is
//! read (both sides together), settled (half-finished in-place updates,
//! exclusions, fingerprints under `--checksum`, nesting of the roots) and
//! planned with the mirror's rules, then dropped: the planner keeps only
//! what changes. Two local replicas are walked directory by directory
//! (`accord_fsys::walk_pair`, with the listing memo); other replicas
//! through `Replica::list_dir`, the same pairs in the same order.

use crate::mirror::error::{Failure, Fatal};
use crate::mirror::stream::Streamed;
use crate::MirrorConfig;
use accord_fsys::{DirVisit, IgnoreRules, Listing, Root, SameFs, Scan, ScanOptions};
use accord_model::{Entry, Kind, RelPath};
use accord_plan::{DirInput, DirPart, MirrorPlanner};
use accord_replica::Error;
use accord_replica::Replica;
use rayon::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// A local directory of more names than this (both sides together) is
/// visited in slices of this many (`accord_fsys::Slice`): a run holds a
/// slice's entries at a time, not a large directory's all (one of 17,869
/// names held 11 MB of entries and names in a run that changed nothing;
/// its names alone, packed, take about 0.6 MB a side).
pub(crate) const SLICE_NAMES: usize = 1024;

/// What the walk found besides the plan.
pub(crate) struct Found {
    pub planner: MirrorPlanner,
    pub failures: Vec<Failure>,
    /// One root reached from inside the other (a bind mount, say).
    pub nested: Option<Fatal>,
    /// A source file held a half-finished in-place update and was left out.
    pub half_updated: bool,
    pub src_root_read: bool,
    pub dst_root_read: bool,
}

pub(crate) struct Walk<'a> {
    src: &'a dyn Replica,
    dst: &'a dyn Replica,
    cfg: &'a MirrorConfig,
    /// The source's rules, `.accordignore` files included: they also decide
    /// what is excluded in the destination (never deleted there).
    rules: &'a IgnoreRules,
    planner: MirrorPlanner,
    failures: Mutex<Vec<Failure>>,
    nested: Mutex<Option<Fatal>>,
    half_updated: AtomicBool,
    /// Destination directories the source's rules exclude.
    excluded: Mutex<HashSet<RelPath>>,
    src_root_read: AtomicBool,
    dst_root_read: AtomicBool,
    /// `-x`: each side's file system (see `fence_mounts`).
    same_fs: Option<(SameFs, SameFs)>,
    /// Carries out an initial copy as it is planned (see `stream.rs`).
    stream: Option<&'a Streamed<'a>>,
}

impl<'a> Walk<'a> {
    pub fn new(
        src: &'a dyn Replica,
        dst: &'a dyn Replica,
        cfg: &'a MirrorConfig,
        rules: &'a IgnoreRules,
    ) -> Walk<'a> {
        Walk {
            src,
            dst,
            cfg,
            rules,
            planner: MirrorPlanner::new(&cfg.plan),
            failures: Mutex::new(Vec::new()),
            nested: Mutex::new(None),
            half_updated: AtomicBool::new(false),
            excluded: Mutex::new(HashSet::new()),
            src_root_read: AtomicBool::new(false),
            dst_root_read: AtomicBool::new(false),
            same_fs: cfg
                .same_fs(src.identity().0)
                .zip(cfg.same_fs(dst.identity().0)),
            stream: None,
        }
    }

    /// Carry out an initial copy through `stream` as it is planned.
    pub fn streaming(self, stream: Option<&'a Streamed<'a>>) -> Walk<'a> {
        Walk { stream, ..self }
    }

    pub fn finish(self) -> Found {
        Found {
            planner: self.planner,
            failures: self.failures.into_inner().unwrap(),
            nested: self.nested.into_inner().unwrap(),
            half_updated: self.half_updated.into_inner(),
            src_root_read: self.src_root_read.into_inner(),
            dst_root_read: self.dst_root_read.into_inner(),
        }
    }

    fn fail(&self, path: RelPath, error: Error) {
        self.failures.lock().unwrap().push(Failure { path, error });
    }

    /// Settle and plan one directory pair.
    pub fn visit(&self, v: DirVisit) {
        if v.path.is_root() {
            self.src_root_read.store(v.src.is_some(), Ordering::Relaxed);
            self.dst_root_read.store(v.dst.is_some(), Ordering::Relaxed);
            if let Some(s) = self.stream {
                s.root_visited(&v);
            }
        }
        if v.src.is_none() && self.inside_excluded(v.path) {
            return;
        }
        self.check_nesting(&v);
        let left_out = v
            .src
            .map(|l| self.half_updated_sources(l))
            .unwrap_or_default();
        let moved = v
            .dst
            .map(|l| self.recover_half_updated(l))
            .unwrap_or_default();
        let mut src = children(v.src);
        src.retain(|e| !left_out.contains(&e.path));
        let mut dst = children(v.dst);
        dst.retain(|e| {
            !moved.contains(&e.path) && !self.excluded_here(e) && !self.protected(e, &src)
        });
        self.fence_mounts(&v, &mut src, &mut dst);
        // `--checksum`: copies of this directory's entries with fingerprints.
        let hashed: (Vec<Entry>, Vec<Entry>);
        let (src, dst) = if self.cfg.plan.checksum {
            let (s_hashes, d_hashes) = self.fingerprints(&src, &dst);
            hashed = (with_hashes(&src, &s_hashes), with_hashes(&dst, &d_hashes));
            (hashed.0.iter().collect(), hashed.1.iter().collect())
        } else {
            (src, dst)
        };
        self.planner.plan_dir(&DirInput {
            path: v.path,
            src_me: v.src.map(|l| &l.entries[0]),
            dst_me: v.dst.map(|l| &l.entries[0]),
            src: &src,
            dst: &dst,
            stale_temps: v.dst.map_or(&[], |l| l.stale_temps.as_slice()),
            part: v
                .slice
                .map_or(DirPart::Whole, |s| DirPart::Slice { last: s.last }),
        });
        if let Some(s) = self.stream {
            s.planned(&self.planner);
        }
    }

    /// `-x`: a source directory on another file system is copied empty
    /// (its contents are neither read nor compared) or, with `-xx`, left
    /// out; in the destination, nothing across a mount point is deleted,
    /// as rsync does: a destination-only directory on another file system
    /// and the destination-only entries inside one are kept (and treated
    /// as excluded below).
    fn fence_mounts(&self, v: &DirVisit, src: &mut Vec<&Entry>, dst: &mut Vec<&Entry>) {
        let Some((s_fs, d_fs)) = self.same_fs else {
            return;
        };
        let own =
            |l: Option<&Listing>, fs: SameFs| l.is_some_and(|l| fs.is_mount_dir(&l.entries[0]));
        if own(v.src, s_fs) {
            src.clear();
        }
        if !s_fs.mount_dirs {
            src.retain(|e| !s_fs.is_mount_dir(e));
        }
        let d_mount = own(v.dst, d_fs);
        let in_src: HashMap<&RelPath, Kind> = src.iter().map(|e| (&e.path, e.kind)).collect();
        let mut excluded = self.excluded.lock().unwrap();
        dst.retain(|e| {
            let kept = match in_src.get(&e.path) {
                // A mount point is never replaced (rsync: "cannot delete
                // mount point"); writing over it fails and is reported.
                Some(kind) => *kind != Kind::Dir && d_fs.is_mount_dir(e),
                None => d_mount || d_fs.is_mount_dir(e) || own(v.src, s_fs),
            };
            if kept && e.kind == Kind::Dir {
                excluded.insert(e.path.clone());
            }
            !kept
        });
    }

    /// A destination-only directory under one the source's rules exclude
    /// (its parent's visit recorded that) is excluded too.
    fn inside_excluded(&self, path: &RelPath) -> bool {
        let mut excluded = self.excluded.lock().unwrap();
        let parent = path.parent().unwrap_or_default();
        if excluded.contains(path) || (!path.is_root() && excluded.contains(&parent)) {
            excluded.insert(path.clone());
            return true;
        }
        false
    }

    /// Does the source's rules exclude this destination entry?
    fn excluded_here(&self, e: &Entry) -> bool {
        if !self.rules.has_rules() || !self.rules.is_excluded(&e.path, e.kind == Kind::Dir) {
            return false;
        }
        if e.kind == Kind::Dir {
            self.excluded.lock().unwrap().insert(e.path.clone());
        }
        true
    }

    /// An earlier run's backup beside its file, which `-b` keeps (see
    /// `backup::protects`); a directory is kept with its subtree.
    fn protected(&self, e: &Entry, src: &[&Entry]) -> bool {
        let in_src = src.binary_search_by(|s| s.path.cmp(&e.path)).is_ok();
        if !crate::mirror::backup::protects(self.cfg, e, in_src) {
            return false;
        }
        if e.kind == Kind::Dir {
            self.excluded.lock().unwrap().insert(e.path.clone());
        }
        true
    }

    /// One root seen as a directory inside the other: a mirror would delete
    /// the source through the destination.
    fn check_nesting(&self, v: &DirVisit) {
        let dst = self.dst;
        let found = |l: Option<&Listing>, ident: (u64, u64)| {
            l.and_then(|l| l.subdirs.iter().find(|e| (e.dev, e.ino) == ident))
                .map(|e| e.path.display())
        };
        let why = if let Some(p) = found(v.src, dst.identity()) {
            format!(
                "the destination {} is the directory {p} inside the source {} \
                 (a bind mount or another name for it)",
                dst.describe(),
                self.src.describe()
            )
        } else if let Some(p) = found(v.dst, self.src.identity()) {
            format!(
                "the source {} is the directory {p} inside the destination {} \
                 (a bind mount or another name for it)",
                self.src.describe(),
                dst.describe()
            )
        } else {
            return;
        };
        // Nothing more is carried out as the walk goes (what was is
        // reported with the run's fatal error).
        if let Some(s) = self.stream {
            s.halt();
        }
        self.nested
            .lock()
            .unwrap()
            .get_or_insert(Fatal::Nested(why));
    }

    /// A source file an earlier in-place run left half-written (its marker
    /// is beside it) holds neither version: never copy it as user data, and
    /// keep the destination's copy (deletions are suspended).
    fn half_updated_sources(&self, l: &Listing) -> HashSet<RelPath> {
        let Some(root) = self.src.local_root() else {
            return HashSet::new();
        };
        let mut out = HashSet::new();
        for m in &l.markers {
            if let Some((_, parent, Some(target))) = read_marker(root, m) {
                if let Ok(path) = parent.join(&target) {
                    self.fail(path.clone(), Error::HalfUpdated);
                    out.insert(path);
                }
            }
        }
        if !out.is_empty() {
            self.half_updated.store(true, Ordering::Relaxed);
        }
        out
    }

    /// In-place updates that a previous run did not finish: the file holds a
    /// mix of both versions; move it aside (this run copies it again) and
    /// report it. Returns the paths moved.
    fn recover_half_updated(&self, l: &Listing) -> HashSet<RelPath> {
        let mut out = HashSet::new();
        let root = self.dst.local_root();
        // A dry run's destination is not local: nothing is moved.
        let Some(root) = root else {
            return out;
        };
        for m in &l.markers {
            let Some((dir, parent, target)) = read_marker(root, m) else {
                continue;
            };
            let target = match target {
                Some(t) if dir.stat(&t).is_ok_and(|st| st.kind == Kind::File) => t,
                _ => {
                    let _ = dir.unlink(m.file_name());
                    continue;
                }
            };
            let Ok(path) = parent.join(&target) else {
                continue;
            };
            let rec = accord_fsys::recovery_name(&target);
            let moved = dir.rename_noreplace(&target, &rec);
            if moved.is_ok() {
                let _ = dir.unlink(m.file_name());
                out.insert(path.clone());
            }
            let recovery = moved.map(|()| rec);
            self.fail(path, Error::InterruptedInPlace { recovery });
        }
        out
    }

    /// `--checksum`: fingerprints of the regular files whose sizes agree on
    /// both sides, by path.
    fn fingerprints(&self, src: &[&Entry], dst: &[&Entry]) -> (Hashes, Hashes) {
        let dst_replica = self.dst;
        let sizes: HashMap<&RelPath, u64> = dst
            .iter()
            .filter(|e| e.kind == Kind::File)
            .map(|e| (&e.path, e.size))
            .collect();
        let (mut s_out, mut d_out) = (Hashes::new(), Hashes::new());
        for e in src.iter().filter(|e| e.kind == Kind::File) {
            if sizes.get(&e.path) == Some(&e.size) {
                s_out.insert(e.path.clone(), self.src.fingerprint(&e.path).ok());
                d_out.insert(e.path.clone(), dst_replica.fingerprint(&e.path).ok());
            }
        }
        (s_out, d_out)
    }
}

type Hashes = HashMap<RelPath, Option<accord_model::Fingerprint>>;

/// Copies of `entries` with their fingerprints filled in.
fn with_hashes(entries: &[&Entry], hashes: &Hashes) -> Vec<Entry> {
    entries
        .iter()
        .map(|e| {
            let mut copy = (*e).clone();
            if let Some(h) = hashes.get(&e.path) {
                copy.hash = *h;
            }
            copy
        })
        .collect()
}

/// A directory's children, subdirectories included, sorted by path.
fn children(l: Option<&Listing>) -> Vec<&Entry> {
    let Some(l) = l else { return Vec::new() };
    let mut v: Vec<&Entry> = l.entries[1..].iter().chain(&l.subdirs).collect();
    v.sort_by(|a, b| a.path.cmp(&b.path));
    v
}

/// What an in-place marker says: its directory (open), the directory's path
/// and the file name it holds (`None` when that is not a valid name); `None`
/// as a whole when the marker cannot be read.
fn read_marker(root: &Root, m: &RelPath) -> Option<(accord_fsys::Dir, RelPath, Option<Vec<u8>>)> {
    let parent = m.parent().unwrap_or_default();
    let dir = root.open_dir(&parent).ok()?;
    let target = dir.read_small(m.file_name()).ok()?;
    let valid = accord_model::validate_name(&target).is_ok();
    Some((dir, parent, valid.then_some(target)))
}

/// Walk two replicas a directory pair at a time through `Replica::list_dir`
/// (both sides of a pair listed at once, subdirectory pairs in parallel),
/// each pair handed to `visit` before its subdirectories'. Returns what the
/// listings found besides their entries, per side.
pub(crate) fn walk_replicas(
    src: Side,
    dst: Side,
    visit: &(dyn Fn(DirVisit) + Sync),
) -> (Scan, Scan) {
    let found = Mutex::new((Scan::default(), Scan::default()));
    walk_pair_of(src, dst, (&RelPath::root(), true, true), visit, &found);
    found.into_inner().unwrap()
}

type Side<'r> = (&'r dyn Replica, &'r IgnoreRules, &'r ScanOptions<'r>);

fn walk_pair_of(
    src: Side,
    dst: Side,
    (path, in_s, in_d): (&RelPath, bool, bool),
    visit: &(dyn Fn(DirVisit) + Sync),
    found: &Mutex<(Scan, Scan)>,
) {
    let list = |(replica, rules, opts): Side, here: bool| match here {
        true => replica.list_dir(path, rules, opts),
        false => (None, Scan::default()),
    };
    let ((s, s_more), (d, d_more)) = rayon::join(|| list(src, in_s), || list(dst, in_d));
    {
        let mut f = found.lock().unwrap();
        f.0.absorb(s_more);
        f.1.absorb(d_more);
    }
    visit(DirVisit {
        path,
        src: s.as_ref(),
        dst: d.as_ref(),
        slice: None,
    });
    let names = |l: Option<Listing>| {
        l.map_or(Vec::new(), |l| {
            l.subdirs.into_iter().map(|e| e.path).collect::<Vec<_>>()
        })
    };
    // `-x` (see `Walk::fence_mounts`): nothing below a source mount point
    // is walked, nor destination-only directories across one.
    let across = |l: &Option<Listing>, opts: &ScanOptions| {
        let fs = opts.same_fs;
        l.as_ref()
            .is_some_and(|l| fs.is_some_and(|f| f.is_mount_dir(&l.entries[0])))
    };
    if across(&s, src.2) {
        return;
    }
    let d_mount = across(&d, dst.2);
    let mut s = s;
    if let (Some(l), Some(f)) = (&mut s, src.2.same_fs.filter(|f| !f.mount_dirs)) {
        l.subdirs.retain(|e| !f.is_mount_dir(e));
    }
    let d_fences: HashSet<RelPath> = match (&d, dst.2.same_fs) {
        (Some(l), Some(f)) => l
            .subdirs
            .iter()
            .filter(|e| d_mount || f.is_mount_dir(e))
            .map(|e| e.path.clone())
            .collect(),
        _ => HashSet::new(),
    };
    let (s_subs, d_subs) = (names(s), names(d));
    let mut pairs: Vec<(RelPath, bool, bool)> = Vec::with_capacity(s_subs.len().max(d_subs.len()));
    let (mut a, mut b) = (s_subs.into_iter().peekable(), d_subs.into_iter().peekable());
    loop {
        let next = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) if x == y => {
                b.next();
                a.next().map(|p| (p, true, true))
            }
            (Some(x), Some(y)) if x < y => a.next().map(|p| (p, true, false)),
            (Some(_), None) => a.next().map(|p| (p, true, false)),
            (_, Some(_)) => b.next().map(|p| (p, false, true)),
            (None, None) => None,
        };
        match next {
            Some(pair) => pairs.push(pair),
            None => break,
        }
    }
    pairs.retain(|(child, in_s, _)| *in_s || !d_fences.contains(child));
    pairs.into_par_iter().for_each(|(child, in_s, in_d)| {
        walk_pair_of(src, dst, (&child, in_s, in_d), visit, found);
    });
}
