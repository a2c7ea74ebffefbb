//! `accord sync --follow PATTERN`: symlinks treated as what they point to.
//!
//! Everything else in this crate resolves paths without following any
//! symlink, so nothing leaves a root by a link. A link whose path matches
//! the user's follow patterns (the syntax of `--exclude`, the same matcher)
//! is the one exception, scoped to that link: its target is resolved as the
//! kernel resolves a path (other links on the way included, since the user
//! named this one), and the result stands for the link's path. A link to a
//! file is that file; a link to a directory is walked as that directory.
//! A followed directory that is one of the directories above the link (the
//! chain from the root, compared by device and inode) would make the walk
//! endless: it is refused as an error for that path, as a dangling link is.

use crate::rules::IgnoreRules;
use crate::scan::{entry_from, list_opened_dir};
use crate::{check_name, cvt_retry, Dir, Listing, Root, Scan, ScanOptions, Stat};
use accord_model::{Entry, Kind, PathFailure, Props, RelPath, Time};
use std::io;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Most links followed one after another from one followed link (the
/// kernel's own limit for a path).
const MAX_HOPS: usize = 40;

/// The links a sync follows: gitignore-syntax patterns, as `--exclude`.
pub struct FollowRules {
    rules: IgnoreRules,
    /// Follow only links that lead inside this directory (canonical): a
    /// server confined to a tree (a daemon module, a restricted key).
    fence: Option<PathBuf>,
}

impl FollowRules {
    pub fn new(patterns: &[String]) -> io::Result<FollowRules> {
        Ok(FollowRules {
            rules: IgnoreRules::new(patterns)?,
            fence: None,
        })
    }

    /// Follow only the links that lead inside `base` (a client may have
    /// put any link in a confined tree: one out of it is refused).
    pub fn fenced(mut self, base: Option<&Path>) -> FollowRules {
        self.fence = base.map(crate::canonical);
        self
    }

    /// Resolve the followed link `name` in `dir` (`resolve_link`), refused
    /// when it leads out of the fence.
    pub fn resolve(&self, dir: &Dir, name: &[u8]) -> io::Result<Followed> {
        let target = resolve_link(dir, name)?;
        if let Some(fence) = &self.fence {
            // The directory the kernel opened, by the path it knows it by:
            // what is used from here on is beneath it, by name, unfollowed.
            let at = std::fs::read_link(format!("/proc/self/fd/{}", target.dir.raw()))?;
            if !at.starts_with(fence) {
                return Err(io::Error::other(
                    "the followed link leads out of the tree this server serves",
                ));
            }
        }
        Ok(target)
    }

    /// The patterns, as given.
    pub fn patterns(&self) -> &[String] {
        self.rules.patterns()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.patterns().is_empty()
    }

    /// May the link at `path` be followed? (Its target's kind is not known
    /// yet: a pattern ending in `/` names a link to a directory only.)
    pub fn may_follow(&self, path: &RelPath) -> bool {
        self.rules.is_excluded(path, false) || self.rules.is_excluded(path, true)
    }

    /// Is the link at `path`, to a directory or not, followed?
    pub fn follows(&self, path: &RelPath, to_dir: bool) -> bool {
        self.rules.is_excluded(path, to_dir)
    }
}

/// Where a followed link leads: the directory holding its final target
/// and the target's name there (empty: `dir` is the target itself, for a
/// link such as `..` or `/`), with the target's `lstat`.
#[derive(Debug)]
pub struct Followed {
    /// The link's own target, as read.
    pub link: Vec<u8>,
    pub dir: Dir,
    pub name: Vec<u8>,
    pub stat: Stat,
}

impl Followed {
    /// The target as a directory.
    pub fn open_dir(&self) -> io::Result<Dir> {
        if self.name.is_empty() {
            self.dir.try_clone()
        } else {
            self.dir.open_subdir(&self.name)
        }
    }

    /// (device, inode) of the target.
    pub fn identity(&self) -> (u64, u64) {
        (self.stat.dev, self.stat.ino)
    }

    /// The target's `lstat` now (the same target: the link is not read
    /// again).
    pub fn stat_now(&self) -> io::Result<Stat> {
        if self.name.is_empty() {
            self.dir.stat_self()
        } else {
            self.dir.stat(&self.name)
        }
    }

    /// Set the target's properties.
    pub fn set_props(&self, props: &Props, mask: crate::PropsMask) -> io::Result<()> {
        if self.stat.kind == Kind::Dir {
            crate::set_props_fd(self.open_dir()?.as_fd(), props, mask)
        } else {
            self.dir
                .set_props_at(&self.name, self.stat.kind, props, mask)
        }
    }
}

/// Open `path` from `base` as the kernel resolves it, following links:
/// only ever the target of a link the user asked to follow.
fn open_following(base: &Dir, path: &[u8], flags: libc::c_int) -> io::Result<Dir> {
    let c = std::ffi::CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fd =
        cvt_retry(|| unsafe { libc::openat(base.raw(), c.as_ptr(), flags | libc::O_CLOEXEC) })?;
    Ok(Dir {
        fd: unsafe { OwnedFd::from_raw_fd(fd) },
        at_start: true,
        // Outside the root's tree maybe: never repaired by a run of ours.
        repair: false,
    })
}

/// A link's target split at its last component: (the directory part,
/// the last name), or None when the target names a directory by itself
/// (`/`, `..`, `.`, or a trailing slash).
fn split_target(target: &[u8]) -> Option<(&[u8], &[u8])> {
    if target.ends_with(b"/") {
        return None;
    }
    let (parent, last) = match target.iter().rposition(|&b| b == b'/') {
        Some(0) => (&target[..1], &target[1..]),
        Some(i) => (&target[..i], &target[i + 1..]),
        None => (&target[..0], target),
    };
    if last == b"." || last == b".." || check_name(last).is_err() {
        return None;
    }
    Some((parent, last))
}

/// Resolve the link `name` in `dir` to its final target, through links
/// to links (at most `MAX_HOPS`). An error when it dangles or loops.
fn resolve_link(dir: &Dir, name: &[u8]) -> io::Result<Followed> {
    let first = dir.read_link(name)?;
    let mut base = dir.try_clone()?;
    base.repair = false;
    let mut target = first.clone();
    for _ in 0..MAX_HOPS {
        let Some((parent, last)) = split_target(&target) else {
            let whole = open_following(&base, &target, libc::O_RDONLY | libc::O_DIRECTORY)?;
            let stat = whole.stat_self()?;
            return Ok(Followed {
                link: first,
                dir: whole,
                name: Vec::new(),
                stat,
            });
        };
        if !parent.is_empty() {
            base = open_following(&base, parent, libc::O_RDONLY | libc::O_DIRECTORY)?;
        }
        let stat = base.stat(last)?;
        if stat.kind != Kind::Symlink {
            return Ok(Followed {
                link: first,
                dir: base,
                name: last.to_vec(),
                stat,
            });
        }
        target = base.read_link(last)?;
    }
    Err(io::Error::from_raw_os_error(libc::ELOOP))
}

/// Why a followed link is refused, as a message for its path.
fn loop_error() -> io::Error {
    io::Error::other("the followed link loops back to a directory above it")
}

/// Open the directory `rel` of `root`, going through the links on the
/// way that `follow` names (each checked against the directories above
/// it); every other link refuses the open, as `Root::open_dir` does.
/// Also returns the (device, inode) of each directory on the way, the
/// root first and the directory last.
pub fn open_dir_following(
    root: &Root,
    rel: &RelPath,
    follow: &FollowRules,
) -> io::Result<(Dir, Vec<(u64, u64)>)> {
    let mut dir = root.open_dir(&RelPath::root())?;
    let mut chain = vec![root.identity()];
    let mut at = RelPath::root();
    for name in rel.components() {
        at = at
            .join(name)
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        dir = match dir.open_subdir(name) {
            Ok(sub) => sub,
            Err(e) => enter_link(&dir, name, &at, follow, &chain).ok_or(e)??,
        };
        let st = dir.stat_self()?;
        chain.push((st.dev, st.ino));
    }
    Ok((dir, chain))
}

/// The directory a followed link `name` in `dir` leads to; None when it
/// is no link `follow` names (the caller's own error stands).
fn enter_link(
    dir: &Dir,
    name: &[u8],
    at: &RelPath,
    follow: &FollowRules,
    chain: &[(u64, u64)],
) -> Option<io::Result<Dir>> {
    let is_link = dir.stat(name).is_ok_and(|st| st.kind == Kind::Symlink);
    if !is_link || !follow.follows(at, true) {
        return None;
    }
    Some(follow.resolve(dir, name).and_then(|target| {
        if target.stat.kind != Kind::Dir {
            return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
        }
        if chain.contains(&target.identity()) {
            return Err(loop_error());
        }
        target.open_dir()
    }))
}

/// A listing of a sync's walk with its followed links replaced by what
/// they lead to; `broken`: the followed links that lead nowhere usable
/// (dangling, looping, to something that is neither a file nor a
/// directory), left in the listing as links for the caller to fail.
pub struct FollowListing {
    pub listing: Option<Listing>,
    pub scan: Scan,
    pub broken: Vec<PathFailure>,
}

/// `list_dir` of a sync that follows the links `follow` names: the
/// directory is opened through the followed links above it, and its own
/// followed links are listed as their targets (with `link_target` set to
/// the link's target, which says the entry was seen through a link).
pub fn list_dir_following(
    root: &Root,
    rel: &RelPath,
    rules: &IgnoreRules,
    opts: &ScanOptions,
    follow: &FollowRules,
) -> FollowListing {
    let mut opened = open_dir_following(root, rel, follow);
    let (mut listing, scan) =
        list_opened_dir(opened.as_mut().map(|(dir, _)| dir), rel, rules, opts);
    let mut broken = Vec::new();
    if let (Some(listing), Ok((dir, chain))) = (listing.as_mut(), opened.as_ref()) {
        broken = follow_listed(listing, dir, chain, follow);
    }
    FollowListing {
        listing,
        scan,
        broken,
    }
}

/// Replace the followed links of `listing` (of `dir`) by their targets.
fn follow_listed(
    listing: &mut Listing,
    dir: &Dir,
    chain: &[(u64, u64)],
    follow: &FollowRules,
) -> Vec<PathFailure> {
    let with_ctimes = listing.ctimes().is_some();
    let mut ctimes = std::mem::take(&mut listing.ctimes).into_iter();
    let mut files = Vec::new();
    let mut subdirs = Vec::new();
    let mut broken = Vec::new();
    for entry in listing.entries.drain(..) {
        let ctime = ctimes.next().unwrap_or_default();
        if entry.kind != Kind::Symlink || !follow.may_follow(&entry.path) {
            files.push((entry, ctime));
            continue;
        }
        match follow_one(dir, &entry.path, chain, follow) {
            Ok(Some((target, ctime))) if target.kind == Kind::Dir => subdirs.push((target, ctime)),
            Ok(Some(target)) => files.push(target),
            Ok(None) => files.push((entry, ctime)),
            Err(e) => {
                broken.push(PathFailure {
                    message: format!("cannot follow the link: {e}"),
                    path: entry.path.clone(),
                });
                files.push((entry, ctime));
            }
        }
    }
    subdirs.extend(
        listing
            .subdirs
            .drain(..)
            .map(|entry| (entry, ctimes.next().unwrap_or_default())),
    );
    // The directory's own entry stays first; the others in name order.
    files[1..].sort_by(|x, y| x.0.path.cmp(&y.0.path));
    subdirs.sort_by(|x, y| x.0.path.cmp(&y.0.path));
    let (entries, mut entry_ctimes): (Vec<Entry>, Vec<Time>) = files.into_iter().unzip();
    let (dirs, dir_ctimes): (Vec<Entry>, Vec<Time>) = subdirs.into_iter().unzip();
    listing.entries = entries;
    listing.subdirs = dirs;
    if with_ctimes {
        entry_ctimes.extend(dir_ctimes);
        listing.ctimes = entry_ctimes;
    }
    broken
}

/// What the followed link at `path` (named in `dir`) stands for, with its
/// ctime; None when the patterns name links to directories only and this
/// one leads to a file.
fn follow_one(
    dir: &Dir,
    path: &RelPath,
    chain: &[(u64, u64)],
    follow: &FollowRules,
) -> io::Result<Option<(Entry, Time)>> {
    let target = follow.resolve(dir, path.file_name())?;
    let to_dir = target.stat.kind == Kind::Dir;
    if !follow.follows(path, to_dir) {
        return Ok(None);
    }
    match target.stat.kind {
        Kind::Dir if chain.contains(&target.identity()) => return Err(loop_error()),
        Kind::Dir | Kind::File => {}
        _ => {
            return Err(io::Error::other(
                "it leads to neither a file nor a directory",
            ))
        }
    }
    let mut entry = entry_from(path.clone(), &target.stat);
    entry.link_target = Some(target.link);
    Ok(Some((entry, target.stat.ctime)))
}

/// Make the file `name` in `dir` (a temp written beside a followed link's
/// target) durable on its own: that target may lie on a file system other
/// than the root's, which the run's flush (`syncfs` of the root) does not
/// reach. A file we may not open for reading flushes its whole file system.
pub fn flush_file(dir: &Dir, name: &[u8]) -> io::Result<()> {
    match dir.open_read(name) {
        Ok(f) => crate::fsync(&f),
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            cvt_retry(|| unsafe { libc::syncfs(dir.raw()) }).map(|_| ())
        }
        Err(e) => Err(e),
    }
}

/// Are `a` and `b` the same directory?
pub fn same_dir(a: &Dir, b: &Dir) -> io::Result<bool> {
    let (x, y) = (a.stat_self()?, b.stat_self()?);
    Ok((x.dev, x.ino) == (y.dev, y.ino))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn rel(path: &str) -> RelPath {
        RelPath::new(path.as_bytes()).unwrap()
    }

    fn opts() -> ScanOptions<'static> {
        ScanOptions::plain(crate::XattrFilter::NONE, false)
    }

    fn rules(patterns: &[&str]) -> FollowRules {
        let patterns: Vec<String> = patterns.iter().map(|p| p.to_string()).collect();
        FollowRules::new(&patterns).unwrap()
    }

    #[test]
    fn a_target_splits_at_its_last_name_unless_it_names_a_directory() {
        assert_eq!(split_target(b"f"), Some((&b""[..], &b"f"[..])));
        assert_eq!(split_target(b"../x/f"), Some((&b"../x"[..], &b"f"[..])));
        assert_eq!(split_target(b"/f"), Some((&b"/"[..], &b"f"[..])));
        for whole in [&b"/"[..], b"..", b".", b"a/..", b"d/"] {
            assert_eq!(split_target(whole), None, "{whole:?}");
        }
    }

    #[test]
    fn a_link_to_a_link_resolves_to_the_last_target() {
        let tmp = tempfile::tempdir().unwrap();
        let root_path = tmp.path().join("root");
        std::fs::create_dir_all(tmp.path().join("out/d")).unwrap();
        std::fs::create_dir_all(&root_path).unwrap();
        std::fs::write(tmp.path().join("out/d/f"), "x").unwrap();
        symlink("d/f", tmp.path().join("out/second")).unwrap();
        symlink("../out/second", root_path.join("first")).unwrap();
        symlink("nowhere", root_path.join("dangling")).unwrap();
        symlink("loop", root_path.join("loop")).unwrap();
        let root = Root::open(&root_path).unwrap();
        let target = resolve_link(root.dir(), b"first").unwrap();
        assert_eq!(target.link, b"../out/second");
        assert_eq!(target.name, b"f");
        assert_eq!(target.stat.kind, Kind::File);
        let dangling = resolve_link(root.dir(), b"dangling").unwrap_err();
        assert_eq!(dangling.raw_os_error(), Some(libc::ENOENT));
        let looping = resolve_link(root.dir(), b"loop").unwrap_err();
        assert_eq!(looping.raw_os_error(), Some(libc::ELOOP));
    }

    #[test]
    fn only_named_links_are_entered_and_never_an_ancestor() {
        let tmp = tempfile::tempdir().unwrap();
        let root_path = tmp.path().join("root");
        std::fs::create_dir_all(root_path.join("a/b")).unwrap();
        std::fs::create_dir_all(tmp.path().join("out/inner")).unwrap();
        symlink("../out", root_path.join("followed")).unwrap();
        symlink("../out", root_path.join("other")).unwrap();
        symlink("../..", root_path.join("a/b/up")).unwrap();
        let root = Root::open(&root_path).unwrap();
        let follow = rules(&["followed", "up"]);
        let (_, chain) = open_dir_following(&root, &rel("followed/inner"), &follow).unwrap();
        assert_eq!(chain.len(), 3);
        assert!(open_dir_following(&root, &rel("other/inner"), &follow).is_err());
        let up = open_dir_following(&root, &rel("a/b/up"), &follow).unwrap_err();
        assert!(up.to_string().contains("loops back"), "{up}");
        // Listed: the followed link as a directory with its target, the
        // other as a link, the loop as broken.
        let listed = list_dir_following(
            &root,
            &rel("a/b"),
            &IgnoreRules::default(),
            &opts(),
            &follow,
        );
        assert_eq!(listed.broken.len(), 1);
        assert_eq!(listed.broken[0].path, rel("a/b/up"));
        let top = list_dir_following(
            &root,
            &RelPath::root(),
            &IgnoreRules::default(),
            &opts(),
            &follow,
        );
        let listing = top.listing.unwrap();
        let followed = listing.subdirs.iter().find(|e| e.path == rel("followed"));
        assert_eq!(
            followed.and_then(|e| e.link_target.clone()),
            Some(b"../out".to_vec())
        );
        let other = listing.entries.iter().find(|e| e.path == rel("other"));
        assert_eq!(other.map(|e| e.kind), Some(Kind::Symlink));
        assert_eq!(listing.ctimes().map(<[Time]>::len), Some(4));
    }

    #[test]
    fn a_fenced_rule_refuses_a_link_out_of_its_tree() {
        let tmp = tempfile::tempdir().unwrap();
        let served = tmp.path().join("served");
        std::fs::create_dir_all(served.join("root/d")).unwrap();
        std::fs::write(tmp.path().join("secret"), "x").unwrap();
        symlink("../../secret", served.join("root/out")).unwrap();
        symlink("d", served.join("root/in")).unwrap();
        let root = Root::open(&served.join("root")).unwrap();
        let follow = rules(&["out", "in"]).fenced(Some(&served));
        let refused = follow.resolve(root.dir(), b"out").unwrap_err();
        assert!(refused.to_string().contains("out of the tree"), "{refused}");
        assert!(follow.resolve(root.dir(), b"in").is_ok());
    }
}
