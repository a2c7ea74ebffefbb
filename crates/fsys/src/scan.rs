//! Parallel scanner: one task per directory on the rayon pool.

use crate::rules::{IgnoreRules, IGNORE_FILE};
use crate::xattr::{self, XattrFilter};
use crate::xattr_memo::{memo_key, settled, XattrMemo};
use crate::{is_reserved_name, Dir, Root, Stat, INPLACE_PREFIX, TEMP_PREFIX};
use accord_model::{Entry, Kind, PathFailure, Props, RelPath};
use rayon::prelude::*;
use std::io::Read;
use std::sync::Mutex;

/// What a scan reads.
#[derive(Clone, Copy, Debug)]
pub struct ScanOptions<'a> {
    pub xattrs: XattrFilter,
    /// Entries known to have no extended attributes (their lists are not
    /// read again while their inode and ctime are unchanged).
    pub xattr_memo: Option<&'a XattrMemo>,
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
    /// Memo digests of the entries seen without extended attributes (for
    /// the next scan; see `XattrMemo`).
    pub xattr_free: Vec<u64>,
}

struct Ctx<'a> {
    rules: &'a IgnoreRules,
    opts: ScanOptions<'a>,
    /// Seconds since the epoch when the scan began (for `settled`).
    start_s: i64,
    xattr_free: Mutex<Vec<u64>>,
    errors: Mutex<Vec<PathFailure>>,
    incomplete: std::sync::atomic::AtomicBool,
    stale: Mutex<Vec<RelPath>>,
    markers: Mutex<Vec<RelPath>>,
}

impl Ctx<'_> {
    /// The extended attributes of an entry: from the memo when it knows the
    /// entry has none, else read by `read` (and remembered when empty).
    fn xattrs_of(
        &self,
        path: &RelPath,
        st: &Stat,
        read: impl FnOnce() -> std::io::Result<Vec<accord_model::Xattr>>,
        free: &mut Vec<u64>,
    ) -> std::io::Result<Vec<accord_model::Xattr>> {
        let key = memo_key(path, st.ino, st.ctime, self.opts.xattrs);
        if self.opts.xattr_memo.is_some_and(|m| m.contains(key)) {
            free.push(key);
            return Ok(Vec::new());
        }
        let x = read()?;
        if x.is_empty() && settled(st.ctime, self.start_s) {
            free.push(key);
        }
        Ok(x)
    }

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
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    scan_at(root, rules, opts, now_s)
}

/// `scan` as if it began at `start_s` seconds since the epoch.
fn scan_at(root: &Root, rules: &IgnoreRules, opts: &ScanOptions, start_s: i64) -> Scan {
    let ctx = Ctx {
        rules,
        opts: *opts,
        start_s,
        xattr_free: Mutex::new(Vec::new()),
        errors: Mutex::new(Vec::new()),
        incomplete: std::sync::atomic::AtomicBool::new(false),
        stale: Mutex::new(Vec::new()),
        markers: Mutex::new(Vec::new()),
    };
    let rootp = RelPath::root();
    let tree = match root.dir().try_clone() {
        Ok(d) => scan_dir(d, rootp.clone(), &ctx),
        Err(e) => {
            ctx.fail(&rootp, e);
            ctx.incomplete
                .store(true, std::sync::atomic::Ordering::Relaxed);
            None
        }
    };
    let mut entries = Vec::new();
    if let Some(t) = tree {
        entries.reserve(t.count());
        t.flatten_into(&mut entries);
    }
    debug_assert!(entries.is_sorted_by(|a, b| a.path < b.path));
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
        xattr_free: ctx.xattr_free.into_inner().unwrap(),
    }
}

/// One scanned directory: its own entry first, then its other children
/// sorted by name; its subdirectories, sorted by name.
struct Node {
    entries: Vec<Entry>,
    subdirs: Vec<Node>,
}

impl Node {
    fn count(&self) -> usize {
        self.entries.len() + self.subdirs.iter().map(Node::count).sum::<usize>()
    }

    /// Depth first, names in order: with `RelPath`'s component order this
    /// is sorted, so no sort of the whole scan is needed.
    fn flatten_into(self, out: &mut Vec<Entry>) {
        let mut files = self.entries.into_iter().peekable();
        out.extend(files.next());
        for sub in self.subdirs {
            let name = sub.entries[0].path.file_name();
            while let Some(f) = files.next_if(|f| f.path.file_name() < name) {
                out.push(f);
            }
            sub.flatten_into(out);
        }
        out.extend(files);
    }
}

/// Scan one directory, its subdirectories as tasks of their own; `None`
/// when even the directory itself could not be read.
fn scan_dir(mut dir: Dir, rel: RelPath, ctx: &Ctx) -> Option<Node> {
    let (mut entries, mut subdirs) = scan_dir_entries(&mut dir, &rel, ctx)?;
    entries[1..].sort_unstable_by(|a, b| a.path.file_name().cmp(b.path.file_name()));
    subdirs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    let subdirs = subdirs
        .into_par_iter()
        .filter_map(|(name, child)| match dir.open_subdir(&name) {
            Ok(d) => scan_dir(d, child, ctx),
            Err(e) => {
                // Report it, and still list the directory itself so that it
                // is not mistaken for something to delete.
                ctx.fail(&child, format!("cannot open directory: {e}"));
                ctx.incomplete
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                dir.stat(&name).ok().map(|st| Node {
                    entries: vec![entry_from(child, &st)],
                    subdirs: Vec::new(),
                })
            }
        })
        .collect();
    Some(Node { entries, subdirs })
}

type Subdirs = Vec<(Vec<u8>, RelPath)>;

/// The entries of one directory (itself first) and the subdirectories to
/// scan next; `None` when even the directory itself could not be read.
fn scan_dir_entries(dir: &mut Dir, rel: &RelPath, ctx: &Ctx) -> Option<(Vec<Entry>, Subdirs)> {
    let rel = rel.clone();
    let mut out = Vec::new();
    let st = match dir.stat_self() {
        Ok(st) => st,
        Err(e) => {
            ctx.fail(&rel, e);
            ctx.incomplete
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return None;
        }
    };
    let mut free = Vec::new();
    let mut me = entry_from(rel.clone(), &st);
    if ctx.opts.xattrs.any() {
        match ctx.xattrs_of(
            &rel,
            &st,
            || xattr::list_fd(dir.raw(), ctx.opts.xattrs),
            &mut free,
        ) {
            Ok(x) => me.props.xattrs = Some(x),
            Err(e) => ctx.fail(&rel, format!("reading extended attributes: {e}")),
        }
    }
    out.push(me);
    let mut names = match dir.list_mut() {
        Ok(n) => n,
        Err(e) => {
            ctx.fail(&rel, format!("cannot read directory: {e}"));
            ctx.incomplete
                .store(true, std::sync::atomic::Ordering::Relaxed);
            return Some((out, Vec::new()));
        }
    };
    if ctx.opts.read_ignore_files && names.iter().any(|(n, _, _)| n == IGNORE_FILE) {
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
    let mut files_xattrs: Vec<(usize, u64, bool)> = Vec::new();
    // In inode order: inodes sit in the inode table (and in memory) roughly
    // in that order, so the stats below touch neighbouring inodes.
    names.sort_unstable_by_key(|n| n.2);
    for (name, _dtype, _ino) in names {
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
            Kind::File if ctx.opts.xattrs.any() => {
                // Read after the loop, all memo lookups together (they miss
                // the caches; back to back, their misses overlap).
                let key = memo_key(&e.path, st.ino, st.ctime, ctx.opts.xattrs);
                files_xattrs.push((out.len(), key, settled(st.ctime, ctx.start_s)));
            }
            _ => {
                if ctx.opts.xattrs.any() {
                    e.props.xattrs = Some(Vec::new());
                }
            }
        }
        out.push(e);
    }
    file_xattrs(dir, ctx, &mut out, &files_xattrs, &mut free);
    if !free.is_empty() {
        ctx.xattr_free.lock().unwrap().append(&mut free);
    }
    Some((out, subdirs))
}

/// Fill in the extended attributes of the regular files `pending` names
/// (index into `out`, memo key, old enough to remember): from the memo when
/// it knows a file has none, else read.
fn file_xattrs(
    dir: &Dir,
    ctx: &Ctx,
    out: &mut [Entry],
    pending: &[(usize, u64, bool)],
    free: &mut Vec<u64>,
) {
    let known: Vec<bool> = match ctx.opts.xattr_memo {
        Some(m) => pending.iter().map(|p| m.contains(p.1)).collect(),
        None => vec![false; pending.len()],
    };
    for (&(i, key, settled), known) in pending.iter().zip(known) {
        let e = &mut out[i];
        if known {
            e.props.xattrs = Some(Vec::new());
            free.push(key);
            continue;
        }
        match dir.xattrs_at(e.path.file_name(), ctx.opts.xattrs) {
            Ok(x) => {
                if x.is_empty() && settled {
                    free.push(key);
                }
                e.props.xattrs = Some(x);
            }
            Err(err) => ctx.fail(&e.path, format!("reading extended attributes: {err}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_xattr(path: &std::path::Path, name: &str, value: &[u8]) {
        use std::os::unix::ffi::OsStrExt;
        let p = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
        let n = std::ffi::CString::new(name).unwrap();
        let r = unsafe {
            libc::setxattr(
                p.as_ptr(),
                n.as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                0,
            )
        };
        assert_eq!(r, 0, "setxattr: {}", std::io::Error::last_os_error());
    }

    fn xattrs_of<'a>(s: &'a Scan, path: &str) -> &'a Vec<accord_model::Xattr> {
        let e = s
            .entries
            .iter()
            .find(|e| e.path.as_bytes() == path.as_bytes());
        e.unwrap().props.xattrs.as_ref().unwrap()
    }

    #[test]
    fn scan_comes_out_sorted_without_a_sort() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path();
        for d in ["a/x/deep", "a b", "b/c", "a0"] {
            std::fs::create_dir_all(t.join(d)).unwrap();
        }
        for f in ["a.b", "a/x.txt", "a/x/y", "a/w", "a-", "b/c/z", "c", "a0/q"] {
            std::fs::write(t.join(f), b"").unwrap();
        }
        let root = Root::open(t).unwrap();
        let s = scan(
            &root,
            &IgnoreRules::new(&[]).unwrap(),
            &ScanOptions {
                xattrs: XattrFilter {
                    xattrs: false,
                    acls: false,
                },
                xattr_memo: None,
                read_ignore_files: false,
                source: true,
            },
        );
        let got: Vec<&[u8]> = s.entries.iter().map(|e| e.path.as_bytes()).collect();
        let mut want = got.clone();
        want.sort_by(|a, b| RelPath::new(a).unwrap().cmp(&RelPath::new(b).unwrap()));
        assert_eq!(got, want);
        assert_eq!(got.len(), 1 + 7 + 8, "root, seven directories, eight files");
        assert_eq!(got[..4], [&b""[..], b"a", b"a/w", b"a/x"]);
    }

    #[test]
    fn xattr_memo_skips_only_unchanged_entries() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("plain"), b"x").unwrap();
        std::fs::write(tmp.path().join("tagged"), b"y").unwrap();
        set_xattr(&tmp.path().join("tagged"), "user.t", b"1");
        let root = Root::open(tmp.path()).unwrap();
        let rules = IgnoreRules::new(&[]).unwrap();
        let filter = XattrFilter {
            xattrs: true,
            acls: true,
        };
        let opts = |memo| ScanOptions {
            xattrs: filter,
            xattr_memo: memo,
            read_ignore_files: false,
            source: true,
        };
        let later = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
            + 60;
        // Entries changed just now are not remembered (a change within the
        // same timestamp tick would go unseen).
        let fresh = scan(&root, &rules, &opts(None));
        assert!(fresh.xattr_free.is_empty());
        // Settled: the plain file and the root are remembered, the tagged
        // file is not.
        let first = scan_at(&root, &rules, &opts(None), later);
        assert_eq!(first.xattr_free.len(), 2);
        let memo = XattrMemo::from_keys(first.xattr_free.clone());
        // Setting an attribute moves the ctime: the memo no longer applies.
        set_xattr(&tmp.path().join("plain"), "user.new", b"2");
        let second = scan_at(&root, &rules, &opts(Some(&memo)), later);
        assert_eq!(xattrs_of(&second, "plain").len(), 1);
        assert_eq!(xattrs_of(&second, "tagged").len(), 1);
        assert_eq!(second.xattr_free.len(), 1, "only the root is still plain");
        // The memo is consulted: an entry it names is taken as plain without
        // asking (here a forged key for the tagged file, whose ctime is
        // unchanged, proves the read is skipped).
        let st = root.dir().stat(b"tagged").unwrap();
        let forged = memo_key(&RelPath::new(b"tagged").unwrap(), st.ino, st.ctime, filter);
        let memo = XattrMemo::from_keys(vec![forged]);
        let third = scan_at(&root, &rules, &opts(Some(&memo)), later);
        assert!(xattrs_of(&third, "tagged").is_empty());
    }
}
