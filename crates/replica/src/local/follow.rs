//! `accord sync --follow`: a [`LocalReplica`] that treats the symlinks the
//! patterns name as what they point to (`accord_fsys::FollowRules`).
//!
//! Paths resolve through those links only (`open_dir_following`), and a
//! [`LocalDir`] operation on a followed link's name acts on its target: a
//! stat, a read, a signature and a property change reach the target; new
//! contents are received into a temp beside the target (made durable on
//! its own, since the target may lie on another file system than the
//! root's) and renamed over the target at commit, after re-resolving the
//! link and checking that it still leads to the same directory and to what
//! update detection saw there (else "changed during sync", nothing
//! written). A deletion removes the link itself; a followed directory's
//! entries were deleted inside it first, as any directory's. The link
//! itself is never replaced by a write of contents.

use super::{LocalDir, LocalReplica};
use crate::error::{Action, End, Error};
use crate::pending::{Deleted, Incoming};
use crate::seam::ReplicaDir;
use accord_fsys::{Dir, FollowListing, FollowRules, Followed, IgnoreRules, PropsMask, ScanOptions};
use accord_model::{Expect, Kind, Props, RelPath};
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::sync::{Arc, Mutex, RwLock};

/// A replica's follow patterns, and where each temp written through a
/// followed link lies (by temp name: the commit renames it there).
#[derive(Default)]
pub(crate) struct FollowState {
    rules: RwLock<Option<Arc<FollowRules>>>,
    temps: Mutex<HashMap<Vec<u8>, Dir>>,
    /// Follow only links leading inside this directory (a server's
    /// confined tree).
    fence: Option<std::path::PathBuf>,
}

impl FollowState {
    pub(crate) fn take_temp(&self, temp: &[u8]) -> Option<Dir> {
        let mut temps = self.temps.lock().unwrap();
        if temps.is_empty() {
            return None;
        }
        temps.remove(temp)
    }

    fn put_temp(&self, temp: Vec<u8>, dir: Dir) {
        self.temps.lock().unwrap().insert(temp, dir);
    }
}

impl LocalReplica {
    /// Follow only links that lead inside `base` (a server confined to a
    /// tree, into which a client may have put any link).
    pub fn with_follow_fence(mut self, base: &std::path::Path) -> LocalReplica {
        self.follow.fence = Some(base.to_path_buf());
        self
    }

    /// Follow the links `patterns` name from now on (none: follow none).
    pub fn set_follow(&self, patterns: &[String]) -> io::Result<()> {
        let rules = if patterns.is_empty() {
            None
        } else {
            let rules = FollowRules::new(patterns)?.fenced(self.follow.fence.as_deref());
            Some(Arc::new(rules))
        };
        *self.follow.rules.write().unwrap() = rules;
        Ok(())
    }

    pub(crate) fn follow_rules(&self) -> Option<Arc<FollowRules>> {
        self.follow.rules.read().unwrap().clone()
    }

    /// Does this replica follow any link?
    pub fn follows(&self) -> bool {
        self.follow.rules.read().unwrap().is_some()
    }

    /// The directory `rel`, through the links this replica follows.
    pub fn open_dir_following(&self, rel: &RelPath) -> io::Result<Dir> {
        match self.follow_rules() {
            Some(follow) if !rel.is_root() => {
                accord_fsys::open_dir_following(self.root(), rel, &follow).map(|(dir, _)| dir)
            }
            _ => self.root().open_dir(rel),
        }
    }

    /// The regular file at `path`, through the links this replica follows.
    pub(crate) fn open_file_following(&self, path: &RelPath) -> io::Result<File> {
        let Some(follow) = self.follow_rules() else {
            return self.root().open_file(path);
        };
        let dir = self.open_dir_following(&path.parent().unwrap_or_default())?;
        let name = path.file_name();
        let is_link = dir.stat(name).is_ok_and(|st| st.kind == Kind::Symlink);
        if is_link && follow.follows(path, false) {
            let target = follow.resolve(&dir, name)?;
            return target.dir.open_read(&target.name);
        }
        dir.open_read(name)
    }

    /// One directory's listing for a sync's walk: its followed links
    /// listed as what they lead to, and those that lead nowhere in
    /// `broken`.
    pub(crate) fn list_dir_for_sync(
        &self,
        rel: &RelPath,
        rules: &IgnoreRules,
        opts: &ScanOptions,
    ) -> FollowListing {
        match self.follow_rules() {
            Some(follow) => accord_fsys::list_dir_following(self.root(), rel, rules, opts, &follow),
            None => {
                let (listing, scan) = accord_fsys::list_dir(self.root(), rel, rules, opts);
                FollowListing {
                    listing,
                    scan,
                    broken: Vec::new(),
                }
            }
        }
    }
}

impl<'a> LocalDir<'a> {
    /// Is `name` here a link this replica follows (to anything)?
    pub(crate) fn follows(&self, name: &[u8]) -> bool {
        matches!(self.through(name), Ok(Some(_)) | Err(_))
    }

    /// Where a followed link `name` leads; None when `name` is no link the
    /// replica follows. An error when it is one that leads nowhere.
    pub(crate) fn through(&self, name: &[u8]) -> io::Result<Option<Followed>> {
        let Some(rel) = &self.rel else {
            return Ok(None);
        };
        let Some(follow) = self.replica.follow_rules() else {
            return Ok(None);
        };
        let Ok(path) = rel.join(name) else {
            return Ok(None);
        };
        if !follow.may_follow(&path) {
            return Ok(None);
        }
        if !self.dir.stat(name).is_ok_and(|st| st.kind == Kind::Symlink) {
            return Ok(None);
        }
        let target = follow.resolve(&self.dir, name)?;
        if !follow.follows(&path, target.stat.kind == Kind::Dir) {
            return Ok(None);
        }
        Ok(Some(target))
    }

    /// A followed link `name`'s target as a directory of its own with the
    /// target's name in it, for the operations on a file by name.
    pub(crate) fn beyond(&self, name: &[u8]) -> io::Result<Option<(LocalDir<'a>, Vec<u8>)>> {
        let Some(target) = self.through(name)? else {
            return Ok(None);
        };
        if target.name.is_empty() {
            // A link such as `..`: a directory, which has no contents to
            // read or write.
            return Err(io::Error::from_raw_os_error(libc::EISDIR));
        }
        let dir = LocalDir {
            dir: target.dir,
            replica: self.replica,
            rel: None,
            beyond_link: true,
        };
        Ok(Some((dir, target.name)))
    }

    /// `receive` of the followed link's target `name` in `target`'s
    /// directory: the temp lies beside the target, flushed on its own.
    pub(crate) fn receive_through(
        &self,
        target: LocalDir<'a>,
        name: &[u8],
        incoming: Incoming<'_>,
        props: &Props,
        mask: PropsMask,
    ) -> Result<Vec<u8>, Error> {
        let temp = target.receive(name, incoming, props, mask)?;
        if let Err(e) = accord_fsys::flush_file(&target.dir, &temp) {
            let _ = target.dir.unlink(&temp);
            return Err(Error::io(Action::Flush)(e));
        }
        self.replica.follow.put_temp(temp.clone(), target.dir);
        Ok(temp)
    }

    /// Put the temp `temp` (in `dir`, beside a followed link's target)
    /// over that target, when the link `name` still leads to the same
    /// directory and the target is still what `expect` says. Anything
    /// else is a change during the run: the temp goes, nothing is written.
    pub(crate) fn commit_through(
        &self,
        dir: Dir,
        temp: &[u8],
        name: &[u8],
        expect: &Expect,
    ) -> Result<(), Error> {
        let verdict = self.still_leads_to(&dir, name, expect);
        let target_name = match verdict {
            Ok(Some(target_name)) => target_name,
            Ok(None) => {
                let _ = dir.unlink(temp);
                return Err(Error::Changed(End::Written));
            }
            Err(e) => {
                let _ = dir.unlink(temp);
                return Err(Error::io(Action::OpenDestination)(e));
            }
        };
        dir.rename(temp, &target_name)
            .map_err(Error::io(Action::Replace))?;
        // Durable now: the run's flush may not reach this file system, and
        // the archive records the new version once the run has flushed.
        dir.sync().map_err(Error::io(Action::Flush))
    }

    /// The target's name in `dir` when the link `name` leads there still,
    /// to what `expect` says; None when not.
    fn still_leads_to(
        &self,
        dir: &Dir,
        name: &[u8],
        expect: &Expect,
    ) -> io::Result<Option<Vec<u8>>> {
        let Some(target) = self.through(name)? else {
            return Ok(None);
        };
        if target.name.is_empty() || !accord_fsys::same_dir(&target.dir, dir)? {
            return Ok(None);
        }
        let now = match target.stat_now() {
            Ok(st) => Some(st.found()),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => None,
            Err(e) => return Err(e),
        };
        Ok(expect.still_holds(now.as_ref()).then_some(target.name))
    }

    /// Delete a followed link `name`: the link goes, what it leads to
    /// stays (a directory's entries were deleted before it, and one that
    /// still holds some keeps the link too).
    pub(crate) fn delete_link(
        &self,
        name: &[u8],
        target: &Followed,
        expect: &Expect,
    ) -> Result<Deleted, Error> {
        if !expect.still_holds(Some(&target.stat.found())) {
            return Err(Error::Changed(End::Written));
        }
        if target.stat.kind == Kind::Dir {
            let listed = target.open_dir().and_then(|dir| dir.list());
            if !listed.map_err(Error::io(Action::Delete))?.is_empty() {
                return Ok(Deleted::NotEmpty);
            }
        }
        match self.dir.unlink(name) {
            Ok(()) => Ok(Deleted::Done),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(Deleted::Gone),
            Err(e) => Err(Error::io(Action::Delete)(e)),
        }
    }
}
