//! The pool model (mergerfs's): every writable branch takes new names as the create policy
//! chooses (`crate::pool`), changes act on the copies the action policy names, and nothing is
//! copied up or whited out. Each operation here replaces the overlay's when the union is a
//! pool; all run with the namespace lock held, as the overlay's do.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use fuser::FileAttr;

use super::{Errno, Op, R, ROOT};
use crate::merge::{Kind, MergedEntry};
use crate::pool::{
    choose_action, choose_create, Action, ActionFn, Candidate, Create, CreateFn, Holder, Policies,
};
use crate::sys;

impl Op<'_> {
    /// The pool's policies as they are now; None for an overlay.
    pub(super) fn pool(&self) -> Option<Policies> {
        (self.shared.pool.as_ref()).map(|p| *super::lock(p))
    }

    /// The branch a new name in directory `parent` goes to (by the create policy of function
    /// `f`), with the directory made there (cloned from the first branch that holds it) when
    /// the policy is not path-preserving.
    pub(super) fn pool_create_branch(&self, parent: u64, p: &Policies, f: CreateFn) -> R<u32> {
        let create = p.create(f);
        let layers = self.ensure_view(parent)?.layers.clone();
        let mut levels = vec![self.candidates(&layers, create, p.min_free)];
        if create.most_shared_path() {
            let mut dir = parent;
            while dir != ROOT {
                // (The node table's guard must be gone before the view is built.)
                let up = self.nodes().entry(dir).ok_or(libc::ENOENT)?.0;
                let up_layers = &self.ensure_view(up)?.layers;
                levels.push(self.candidates(up_layers, create, p.min_free));
                dir = up;
            }
        }
        let b = choose_create(create, &levels, &mut draw)?;
        if !layers.contains(&b) {
            self.ensure_dir_in(parent, b, layers.first().copied())?;
        }
        Ok(b)
    }

    /// Every branch as policy `create` sees it from a directory held by `layers` (`min_free`:
    /// the pool's `minfreespace`). The space of a branch the policy passes over anyway (`nc`,
    /// `ro`, or without the parent for a path-preserving policy) is not read: a statvfs per
    /// branch per create is most of what placing a name costs.
    fn candidates(&self, layers: &[u32], create: Create, min_free: u64) -> Vec<Candidate> {
        (0..self.table.branches.len() as u32)
            .map(|b| {
                let has_parent = layers.contains(&b);
                let weighed =
                    self.table.get(b).creatable() && (has_parent || !create.path_preserving());
                match weighed {
                    true => self.candidate(b, has_parent, min_free),
                    false => Candidate {
                        branch: b,
                        creatable: self.table.get(b).creatable(),
                        has_parent,
                        fs_readonly: false,
                        avail: 0,
                        used: u64::MAX,
                        min_free,
                    },
                }
            })
            .collect()
    }

    /// Branch `b` as a create policy sees it, its space read now (a branch whose space
    /// cannot be read is never chosen, as in mergerfs). `min_free` is the pool's
    /// `minfreespace`, which the branch's own replaces.
    pub(super) fn candidate(&self, b: u32, has_parent: bool, min_free: u64) -> Candidate {
        let branch = self.table.get(b);
        let space = self.space(b);
        Candidate {
            branch: b,
            creatable: branch.creatable(),
            has_parent,
            fs_readonly: space.readonly,
            avail: space.avail,
            used: space.used,
            min_free: branch.min_free.unwrap_or(min_free),
        }
    }

    /// Branch `b`'s file system now: bytes available and used, and whether it is mounted
    /// read-only (so it is when its state cannot be read).
    fn space(&self, b: u32) -> Space {
        match sys::fstatvfs(self.fd(b)) {
            Ok(v) => {
                let frsize = v.f_frsize;
                Space {
                    avail: v.f_bavail.saturating_mul(frsize),
                    used: v.f_blocks.saturating_sub(v.f_bavail).saturating_mul(frsize),
                    readonly: v.f_flag & libc::ST_RDONLY != 0,
                }
            }
            Err(_) => Space {
                avail: 0,
                used: u64::MAX,
                readonly: true,
            },
        }
    }

    /// The copies of `e` (at `loc` paths, see `Loc::at`) that action policy `policy` acts
    /// on: EROFS when every copy is on a read-only branch. Each writable copy's file system
    /// is asked whether it is mounted read-only (as mergerfs does), and its space or the
    /// copy's age only when the policy weighs them.
    fn acted_on(
        &self,
        e: &MergedEntry,
        at: &dyn Fn(u32) -> PathBuf,
        policy: Action,
    ) -> R<Vec<u32>> {
        let holders: Vec<Holder> = (e.positions.iter())
            .map(|&b| {
                let writable = self.table.get(b).writable();
                let space = match writable {
                    true => self.space(b),
                    false => Space {
                        avail: 0,
                        used: u64::MAX,
                        readonly: true,
                    },
                };
                let mtime = match writable && policy.weighs_mtime() {
                    true => sys::fstatat(self.fd(b), &at(b)).map_or(i64::MIN, |st| st.st_mtime),
                    false => 0,
                };
                Holder {
                    branch: b,
                    writable,
                    fs_readonly: space.readonly,
                    avail: space.avail,
                    used: space.used,
                    mtime,
                }
            })
            .collect();
        choose_action(policy, &holders, &mut draw)
    }

    /// The path of `name` of directory `parent` in every branch (a pool has no redirects
    /// of its own, but may sit on branches an overlay wrote).
    fn paths_of(&self, parent: u64, name: &OsStr) -> R<impl Fn(u32) -> PathBuf> {
        let view = self.ensure_view(parent)?;
        let rel = self.path(parent)?;
        let name = name.to_os_string();
        Ok(move |b: u32| view.path_in(b, &rel).join(&name))
    }

    /// Apply `f` to the copies of `ino` that action policy `policy` names. As mergerfs
    /// answers: Ok if every copy took it, the first error if none did, else what the copy the
    /// union shows answered.
    pub(super) fn pool_act(
        &self,
        ino: u64,
        policy: Action,
        f: impl Fn(u32, &Path) -> R<()>,
    ) -> R<()> {
        let loc = self.locate(ino)?;
        let targets = self.acted_on(&loc.entry, &|b| loc.at(b), policy)?;
        let results: Vec<(u32, R<()>)> = targets.iter().map(|&b| (b, f(b, &loc.at(b)))).collect();
        if results.iter().all(|(_, r)| r.is_err()) {
            return results[0].1;
        }
        let shown = loc.entry.winner();
        (results.iter().find(|(b, _)| *b == shown)).map_or(Ok(()), |(_, r)| *r)
    }

    /// unlink(2) in a pool: every copy `func.unlink` names goes (mergerfs's `epall` removes
    /// them all); the first error is the answer.
    pub(super) fn pool_unlink(&self, parent: u64, name: &OsStr, p: &Policies) -> R<()> {
        let _ns = self.ns();
        self.ns_changing();
        let e = self.child(parent, name)?.ok_or(libc::ENOENT)?;
        if e.kind == Kind::Dir {
            return Err(libc::EISDIR);
        }
        self.remove_copies(parent, name, &e, p.action(ActionFn::Unlink), false)
    }

    /// rmdir(2) in a pool: refused while the merged directory has names; then as unlink, by
    /// `func.rmdir`.
    pub(super) fn pool_rmdir(&self, parent: u64, name: &OsStr, p: &Policies) -> R<()> {
        let _ns = self.ns();
        self.dirs_moving();
        let e = self.child(parent, name)?.ok_or(libc::ENOENT)?;
        if e.kind != Kind::Dir {
            return Err(libc::ENOTDIR);
        }
        let ino = self.nodes().get_or_create(parent, name);
        if !self.ensure_view(ino)?.entries.is_empty() {
            return Err(libc::ENOTEMPTY);
        }
        let before = self.dir_attr(parent, name, e.winner(), ino);
        let r = self.remove_copies(parent, name, &e, p.action(ActionFn::Rmdir), true);
        self.forget_view(ino);
        if r.is_ok() {
            self.keep_removed_dir(ino, before);
        }
        r
    }

    fn remove_copies(
        &self,
        parent: u64,
        name: &OsStr,
        e: &MergedEntry,
        policy: Action,
        dir: bool,
    ) -> R<()> {
        let mut first_err = None;
        let targets;
        {
            // (`at` holds the cached view: gone before the view is patched, or the patch
            // would copy it whole.)
            let at = self.paths_of(parent, name)?;
            targets = self.acted_on(e, &at, policy)?;
            for &b in &targets {
                if let Err(err) = sys::unlinkat(self.fd(b), &at(b), dir) {
                    first_err.get_or_insert(sys::errno(&err));
                }
            }
        }
        let all_gone = first_err.is_none() && e.positions.iter().all(|b| targets.contains(b));
        if all_gone {
            // The name is gone from every branch: patched in the cached view, not read
            // again (re-reading the directory in every branch after each unlink made
            // `rm -rf` of a big directory quadratic).
            self.view_remove(parent, name);
            self.nodes().detach(parent, name);
        } else {
            // A copy is left, which may be of another kind than the one shown until now.
            self.settle(parent, name);
        }
        first_err.map_or(Ok(()), Err)
    }

    /// After copies of `name` changed in several branches: read the directory again, and let
    /// the name's node go if no copy is left. If copies are left, the one shown may now be
    /// another (the shown one went): the kernel must drop what it cached of the inode.
    fn settle(&self, parent: u64, name: &OsStr) {
        self.forget_view(parent);
        if !matches!(self.child(parent, name), Ok(Some(_))) {
            self.nodes().detach(parent, name);
        } else if let Some(ino) = self.nodes().lookup(parent, name) {
            self.shown_copy_changed(ino);
        }
    }

    /// The copy inode `ino` shows may now be another one, with other bytes of the same size
    /// (an action that acted on some copies only): make the kernel drop its cached pages and
    /// attributes. (Reads run on worker threads, so a page a reader holds locked meanwhile is
    /// answered while we wait.)
    fn shown_copy_changed(&self, ino: u64) {
        if let Some(n) = self.shared.notifier.get() {
            let _ = n.inval_inode(fuser::INodeNo(ino), 0, 0);
        }
    }

    /// rename(2) in a pool, as mergerfs does it: the name moves in every branch that holds it
    /// (as `func.rename` names them). With a path-preserving `func.create` a branch
    /// without the new parent directory fails, and if all fail the answer is EXDEV (so `mv`
    /// copies); otherwise the directory is cloned there first. Once one branch moved it, the
    /// copies that could not move go, and so do other branches' copies of the new name.
    pub(super) fn pool_rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        p: &Policies,
    ) -> R<()> {
        let _ns = self.ns();
        let src = self.child(parent, name)?.ok_or(libc::ENOENT)?;
        let dst = self.child(newparent, newname)?;
        self.pool_rename_checks(&src, dst.as_ref(), newparent, newname, flags)?;
        if parent == newparent && name == newname {
            return Ok(());
        }
        let is_dir = src.kind == Kind::Dir;
        match is_dir {
            true => self.dirs_moving(),
            false => self.ns_changing(),
        }
        let preserving = p.create(CreateFn::Create).path_preserving();
        let from = self.paths_of(parent, name)?;
        let holders = self.acted_on(&src, &from, p.action(ActionFn::Rename))?;
        let to = self.paths_of(newparent, newname)?;
        let clone_from = self.ensure_view(newparent)?.layers.first().copied();
        let mut moved = Vec::new();
        let mut last_err = libc::EXDEV;
        let mut leftovers: Vec<(u32, PathBuf)> = Vec::new();
        for b in 0..self.table.branches.len() as u32 {
            if !holders.contains(&b) {
                // Another branch's copy of the new name goes (only where the merged view has
                // one: an unlink per branch per rename was most of a rename's system calls).
                let stale = dst.as_ref().is_some_and(|d| d.positions.contains(&b));
                if stale && self.table.get(b).writable() {
                    leftovers.push((b, to(b)));
                }
                continue;
            }
            let mut r = sys::renameat(self.fd(b), &from(b), &to(b), 0);
            if r.is_err() && !preserving && self.ensure_dir_in(newparent, b, clone_from).is_ok() {
                r = sys::renameat(self.fd(b), &from(b), &to(b), 0);
            }
            match r {
                Ok(()) => moved.push(b),
                Err(e) => {
                    last_err = sys::errno(&e);
                    leftovers.push((b, from(b)));
                }
            }
        }
        // rename(2) of one file's two hard links leaves both names: then the old name's
        // copies are still there.
        let whole = !is_dir
            && moved.len() == src.positions.len()
            && dst.as_ref().is_none_or(|d| {
                d.positions.iter().all(|b| moved.contains(b))
                    && moved
                        .iter()
                        .all(|&b| sys::fstatat(self.fd(b), &from(b)).is_err())
            });
        // (The closures hold the cached views: gone before the views are patched, or the
        // patch would copy them whole.)
        drop((from, to));
        if moved.is_empty() {
            return Err(match preserving {
                true => libc::EXDEV,
                false => last_err,
            });
        }
        for (b, rel) in &leftovers {
            remove_any(self.fd(*b), rel);
        }
        let src_ino = self.nodes().lookup(parent, name);
        let copies_left = moved[..] != src.positions[..];
        if whole {
            // Every copy moved and nothing else held the new name: the views are patched,
            // not read again in every branch (as a create or an unlink patches them).
            let entry = MergedEntry {
                kind: src.kind,
                positions: moved.into(),
            };
            self.view_rename(parent, name, newparent, newname, entry);
        } else {
            self.forget_view(parent);
            self.forget_view(newparent);
        }
        self.nodes().rename(parent, name, newparent, newname);
        if let Some(ino) = src_ino.filter(|_| is_dir) {
            self.forget_view(ino);
            if copies_left {
                // Copies of the directory went: every name below it may now show another
                // branch's copy (seen: a file showing the bytes of its removed copy).
                let below = self.nodes().below(ino);
                for n in below {
                    self.forget_view(n);
                    self.shown_copy_changed(n);
                }
            }
        }
        if let Some(ino) = src_ino.filter(|_| !is_dir && copies_left) {
            // Copies stayed behind: the new name may show another copy than the old did.
            self.shown_copy_changed(ino);
        }
        Ok(())
    }

    /// After a rename that moved every copy of `name` and left no other copy of `newname`:
    /// `entry` (where the copies are now) replaces both in the cached views. Within one
    /// directory in one step, so a listing made meanwhile shows the entry once.
    fn view_rename(
        &self,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        entry: MergedEntry,
    ) {
        if parent != newparent {
            self.view_remove(parent, name);
        }
        self.edit_view(newparent, |v| {
            if parent == newparent {
                v.entries.remove(name);
            }
            v.entries.insert(newname.to_os_string(), entry);
        });
    }

    /// What makes a pool rename fail before anything changes.
    fn pool_rename_checks(
        &self,
        src: &MergedEntry,
        dst: Option<&MergedEntry>,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
    ) -> R<()> {
        let Some(d) = dst else {
            return Ok(());
        };
        if flags & libc::RENAME_NOREPLACE != 0 {
            return Err(libc::EEXIST);
        }
        match (src.kind == Kind::Dir, d.kind == Kind::Dir) {
            (true, false) => Err(libc::ENOTDIR),
            (false, true) => Err(libc::EISDIR),
            (true, true) => {
                // A replaced directory must be empty in every branch, not only in one.
                let dino = self.nodes().get_or_create(newparent, newname);
                match self.ensure_view(dino)?.entries.is_empty() {
                    true => Ok(()),
                    false => Err(libc::ENOTEMPTY),
                }
            }
            (false, false) => Ok(()),
        }
    }

    /// link(2) in a pool: a new name for the file in every branch that holds it (as
    /// `func.link` names them), the new directory cloned there unless `func.create` is
    /// path-preserving; EXDEV if no branch could.
    pub(super) fn pool_link(
        &self,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        p: &Policies,
    ) -> R<FileAttr> {
        let _ns = self.ns();
        self.ns_changing();
        let loc = self.locate(ino)?;
        if loc.entry.kind == Kind::Dir {
            return Err(libc::EPERM);
        }
        if self.child(newparent, newname)?.is_some() {
            return Err(libc::EEXIST);
        }
        let layers = self.ensure_view(newparent)?.layers.clone();
        let to = self.paths_of(newparent, newname)?;
        let mut linked = None;
        for b in self.acted_on(&loc.entry, &|b| loc.at(b), p.action(ActionFn::Link))? {
            if !layers.contains(&b) {
                if p.create(CreateFn::Create).path_preserving() {
                    continue;
                }
                self.ensure_dir_in(newparent, b, layers.first().copied())?;
            }
            sys::linkat(self.fd(b), &loc.at(b), &to(b)).e()?;
            linked.get_or_insert(b);
        }
        let b = linked.ok_or(libc::EXDEV)?;
        self.forget_view(newparent);
        let st = sys::fstatat(self.fd(b), &to(b)).e()?;
        let mut nodes = self.nodes();
        nodes.add_alias(ino, newparent, newname);
        nodes.add_ref(ino);
        drop(nodes);
        Ok(self.attr(ino, &st))
    }

    /// statfs of a pool: the sums over its branches' file systems, each counted once.
    pub(super) fn pool_statfs(&self) -> R<libc::statvfs> {
        let mut seen = Vec::new();
        let mut total: Option<libc::statvfs> = None;
        for b in &self.table.branches {
            let dev = sys::fstat(b.fd()).e()?.st_dev;
            if seen.contains(&dev) {
                continue;
            }
            seen.push(dev);
            let v = sys::fstatvfs(b.fd()).e()?;
            total = Some(match total {
                None => v,
                Some(t) => add_statvfs(t, &v),
            });
        }
        total.ok_or(libc::EIO)
    }
}

/// A branch's file system as the policies weigh it.
struct Space {
    avail: u64,
    used: u64,
    readonly: bool,
}

/// `t` with `v`'s blocks and files added (counted in `t`'s fragment size).
fn add_statvfs(mut t: libc::statvfs, v: &libc::statvfs) -> libc::statvfs {
    let scale = |n: u64| n.saturating_mul(v.f_frsize) / t.f_frsize.max(1);
    t.f_blocks = t.f_blocks.saturating_add(scale(v.f_blocks));
    t.f_bfree = t.f_bfree.saturating_add(scale(v.f_bfree));
    t.f_bavail = t.f_bavail.saturating_add(scale(v.f_bavail));
    t.f_files = t.f_files.saturating_add(v.f_files);
    t.f_ffree = t.f_ffree.saturating_add(v.f_ffree);
    t.f_favail = t.f_favail.saturating_add(v.f_favail);
    t.f_namemax = t.f_namemax.min(v.f_namemax);
    t
}

/// Remove `rel` of branch `fd`, a file or an empty directory (remove(3)); what is not there,
/// or not empty, stays.
fn remove_any(fd: i32, rel: &Path) {
    if let Err(e) = sys::unlinkat(fd, rel, false) {
        if matches!(sys::errno(&e), libc::EISDIR | libc::EPERM) {
            let _ = sys::unlinkat(fd, rel, true);
        }
    }
}

/// A number below `n` (n > 0) for the random policies: a xorshift generator, seeded from the
/// clock once; placement needs spread, not secrecy.
pub(super) fn draw(n: u64) -> u64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut x = STATE.load(Ordering::Relaxed);
    if x == 0 {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        x = now.map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64) | 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    STATE.store(x, Ordering::Relaxed);
    x % n.max(1)
}
