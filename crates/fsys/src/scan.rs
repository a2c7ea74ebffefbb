//! Parallel scanner: one task per directory on the rayon pool.

use crate::rules::{IgnoreRules, IGNORE_FILE};
use crate::xattr::{self, XattrFilter};
use crate::{is_reserved_name, Dir, Root, Stat, INPLACE_PREFIX, TEMP_PREFIX};
use accord_model::{Entry, Kind, PathFailure, Props, RelPath};
use rayon::prelude::*;
use std::io::Read;
use std::sync::Mutex;

/// What a scan reads.
#[derive(Clone, Copy, Debug)]
pub struct ScanOptions {
    pub xattrs: XattrFilter,
    /// Read `.accordignore` files into the rules (source side).
    pub read_ignore_files: bool,
    /// This is the source: its entries with names reserved for our own temp
    /// and recovery files are reported, since they are not copied.
    pub source: bool,
}

/// The result of scanning a replica.
#[derive(Debug, Default)]
pub struct Scan {
    /// Sorted by path; the first entry is the root itself.
    pub entries: Vec<Entry>,
    /// Paths that could not be read.
    pub errors: Vec<PathFailure>,
    /// True if some directory could not be listed (its contents are unknown).
    pub incomplete: bool,
    /// Temp files left by an interrupted run.
    pub stale_temps: Vec<RelPath>,
    /// Markers of in-place updates that did not finish.
    pub inplace_markers: Vec<RelPath>,
}

struct Ctx<'a> {
    rules: &'a IgnoreRules,
    opts: ScanOptions,
    errors: Mutex<Vec<PathFailure>>,
    incomplete: std::sync::atomic::AtomicBool,
    stale: Mutex<Vec<RelPath>>,
    markers: Mutex<Vec<RelPath>>,
}

impl Ctx<'_> {
    fn fail(&self, path: &RelPath, msg: impl std::fmt::Display) {
        self.errors.lock().unwrap().push(PathFailure {
            path: path.clone(),
            message: msg.to_string(),
        });
    }
}

/// Largest `.accordignore` read; a larger one is an error, not silently cut.
const MAX_IGNORE_FILE: u64 = 1 << 20;

fn entry_from(path: RelPath, st: &Stat) -> Entry {
    Entry {
        path,
        kind: st.kind,
        size: if st.kind == Kind::File || st.kind == Kind::Symlink {
            st.size
        } else {
            0
        },
        props: Props {
            mode: st.mode,
            uid: st.uid,
            gid: st.gid,
            mtime: st.mtime,
            xattrs: None,
        },
        dev: st.dev,
        ino: st.ino,
        nlink: st.nlink,
        rdev: if st.kind.is_device() { st.rdev } else { 0 },
        blocks: st.blocks,
        link_target: None,
        hash: None,
    }
}

/// Scan a whole replica.
pub fn scan(root: &Root, rules: &IgnoreRules, opts: &ScanOptions) -> Scan {
    let ctx = Ctx {
        rules,
        opts: *opts,
        errors: Mutex::new(Vec::new()),
        incomplete: std::sync::atomic::AtomicBool::new(false),
        stale: Mutex::new(Vec::new()),
        markers: Mutex::new(Vec::new()),
    };
    let rootp = RelPath::root();
    let mut entries = match root.dir().try_clone() {
        Ok(d) => scan_dir(d, rootp.clone(), &ctx),
        Err(e) => {
            ctx.fail(&rootp, e);
            ctx.incomplete
                .store(true, std::sync::atomic::Ordering::Relaxed);
            Vec::new()
        }
    };
    entries.par_sort_unstable_by(|a, b| a.path.cmp(&b.path));
    let mut errors = ctx.errors.into_inner().unwrap();
    errors.sort_by(|a, b| a.path.cmp(&b.path));
    let mut stale_temps = ctx.stale.into_inner().unwrap();
    stale_temps.sort();
    Scan {
        entries,
        errors,
        incomplete: ctx.incomplete.into_inner(),
        stale_temps,
        inplace_markers: ctx.markers.into_inner().unwrap(),
    }
}

fn scan_dir(dir: Dir, rel: RelPath, ctx: &Ctx) -> Vec<Entry> {
    let mut out = Vec::new();
    let st = match dir.stat_self() {
        Ok(st) => st,
        Err(e) => {
            ctx.fail(&rel, e);
            ctx.incomplete
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return out;
        }
    };
    let mut me = entry_from(rel.clone(), &st);
    if ctx.opts.xattrs.any() {
        match xattr::list_fd(dir.raw(), ctx.opts.xattrs) {
            Ok(x) => me.props.xattrs = Some(x),
            Err(e) => ctx.fail(&rel, format!("reading extended attributes: {e}")),
        }
    }
    out.push(me);
    let names = match dir.list() {
        Ok(n) => n,
        Err(e) => {
            ctx.fail(&rel, format!("cannot read directory: {e}"));
            ctx.incomplete
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return out;
        }
    };
    if ctx.opts.read_ignore_files && names.iter().any(|(n, _)| n == IGNORE_FILE) {
        // Rules that cannot be read would leave excluded DST entries looking
        // like extras: any failure here suspends deletions for the run.
        let read = dir.open_read(IGNORE_FILE).and_then(|f| {
            let mut buf = Vec::new();
            f.take(MAX_IGNORE_FILE + 1).read_to_end(&mut buf)?;
            if buf.len() as u64 > MAX_IGNORE_FILE {
                return Err(std::io::Error::other("larger than 1 MiB"));
            }
            Ok(buf)
        });
        match read {
            Ok(buf) => ctx.rules.add_dir_file(&rel, &buf),
            Err(e) => {
                ctx.fail(&rel, format!("reading .accordignore: {e}"));
                ctx.incomplete
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }
    let mut subdirs = Vec::new();
    for (name, _dtype) in names {
        if is_reserved_name(&name) {
            if name.starts_with(TEMP_PREFIX) {
                if let Ok(p) = rel.join(&name) {
                    ctx.stale.lock().unwrap().push(p);
                }
            } else if name.starts_with(INPLACE_PREFIX) {
                if let Ok(p) = rel.join(&name) {
                    ctx.markers.lock().unwrap().push(p);
                }
            }
            if ctx.opts.source && !name.starts_with(INPLACE_PREFIX) {
                if let Ok(p) = rel.join(&name) {
                    ctx.fail(
                        &p,
                        "not copied: names starting with .accord-tmp- or .accord-recovery- \
                         are reserved for accord's own temporary and recovery files",
                    );
                }
            }
            continue;
        }
        let child = match rel.join(&name) {
            Ok(c) => c,
            Err(e) => {
                ctx.fail(
                    &rel,
                    format!(
                        "unusable name {:?}: {e}",
                        accord_model::escape_for_display(&name)
                    ),
                );
                continue;
            }
        };
        let st = match dir.stat(&name) {
            Ok(st) => st,
            Err(e) => {
                // Gone since the listing: really gone. Any other error hides an
                // entry that exists, which must never look like a deletion.
                if e.raw_os_error() != Some(libc::ENOENT) {
                    ctx.fail(&child, e);
                    ctx.incomplete
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                }
                continue;
            }
        };
        let is_dir = st.kind == Kind::Dir;
        if ctx.rules.is_excluded(&child, is_dir) {
            continue;
        }
        if is_dir {
            subdirs.push((name, child));
            continue;
        }
        let mut e = entry_from(child, &st);
        match st.kind {
            Kind::Symlink => match dir.read_link(&name) {
                Ok(t) => {
                    e.size = t.len() as u64;
                    e.link_target = Some(t);
                    e.props.xattrs = Some(Vec::new());
                }
                Err(err) => {
                    ctx.fail(&e.path, err);
                    ctx.incomplete
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    continue;
                }
            },
            Kind::File if ctx.opts.xattrs.any() => match dir.xattrs_at(&name, ctx.opts.xattrs) {
                Ok(x) => e.props.xattrs = Some(x),
                Err(err) => ctx.fail(&e.path, format!("reading extended attributes: {err}")),
            },
            _ => {
                if ctx.opts.xattrs.any() {
                    e.props.xattrs = Some(Vec::new());
                }
            }
        }
        out.push(e);
    }
    let nested: Vec<Vec<Entry>> = subdirs
        .into_par_iter()
        .map(|(name, child)| match dir.open_subdir(&name) {
            Ok(d) => scan_dir(d, child, ctx),
            Err(e) => {
                // Report it, and still list the directory itself so that it
                // is not mistaken for something to delete.
                ctx.fail(&child, format!("cannot open directory: {e}"));
                ctx.incomplete
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                match dir.stat(&name) {
                    Ok(st) => vec![entry_from(child, &st)],
                    Err(_) => Vec::new(),
                }
            }
        })
        .collect();
    for mut n in nested {
        out.append(&mut n);
    }
    out
}
