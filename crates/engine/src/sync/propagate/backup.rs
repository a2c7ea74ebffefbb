//! `--backup`: before a sync overwrites or deletes a version of a
//! non-directory on a side, that version is kept on that side in
//! `.accord-backup/` at the top of its root, under its relative path with
//! a suffix `.~N~` (the highest N the newest), as a hard link (a regular
//! file: no data copied) or a copy of the node (a symlink, a fifo…); only
//! the newest `--max-backups` per path are kept. `.accord-backup` itself is
//! never scanned as part of the tree (the replica crate's side/), with or without
//! `--backup`.
//!
//! Backups are made for a whole chunk of overwrites (or for all the
//! deletions of a pass) before its flush, so one flush makes them durable
//! before anything they keep is replaced or removed.
//!
//! The link is made of whatever the path holds when it is made, then
//! checked to be the version the plan saw (else it is removed again and
//! the path fails "changed during sync", nothing overwritten); the
//! overwrite or deletion still re-checks its target after it. A run
//! stopped between the backup and the overwrite leaves a backup of the
//! version that is still in place: the next run finds it as the newest
//! backup (same inode, size and mtime) and does not make it again.

use super::{index, split, synced_props, Propagation, Staged};
use crate::sync::propagate::keep_name::expect_found;
use crate::sync::SyncError;
use accord_fsys::{IgnoreRules, ScanOptions, XattrFilter};
use accord_model::{Entry, Expect, Kind, RelPath};
use accord_plan::{Side, SyncItem};
use accord_replica::Action as Step;
use accord_replica::ReplicaDir;

pub(crate) use accord_replica::BACKUP_DIR;

/// Is `path` the backup directory at the top of a root, or beneath it?
/// (A side's walk never reports one; an older `accord server` would.)
pub(crate) fn in_backup_dir(path: &RelPath) -> bool {
    path.components().next() == Some(BACKUP_DIR)
}

/// A backup found in the backup directory: its number and entry.
type Found = (u64, Entry);

impl<'a> Propagation<'a> {
    /// Keep `entry` (what `side` holds at its path, about to be overwritten
    /// or deleted) in the backup directory, when `--backup` is on. An
    /// error means the version could not be kept: the caller then leaves
    /// the path alone.
    pub(super) fn back_up(&self, side: Side, entry: Option<&Entry>) -> Result<(), SyncError> {
        let (Some(keep), Some(entry)) = (self.cfg.backups, entry) else {
            return Ok(());
        };
        if entry.kind == Kind::Dir {
            return Ok(());
        }
        // Gone already: nothing to keep (the deletion finds it gone, an
        // overwrite's re-check refuses).
        if self.stat(side, &entry.path).is_none() {
            return Ok(());
        }
        let (parent, name) = split(&entry.path);
        let dir_path = self.backup_dir(side, &parent)?;
        let dir = self.dir(side, &dir_path, Step::MakeDir)?;
        let mut found = self.backups_of(side, &dir_path, name);
        let newest = found.last().map_or(0, |(n, _)| *n);
        let already = found
            .last()
            .is_some_and(|(_, e)| Expect::entry(entry).still_holds(Some(&found_of(e))));
        if !already {
            let number = newest + 1;
            let backup_name = backup_name(name, number).ok_or_else(name_too_long)?;
            self.link_backup(dir.as_ref(), &backup_name, entry)?;
            let path = dir_path.join(&backup_name).map_err(|_| name_too_long())?;
            found.push((
                number,
                Entry {
                    path,
                    ..entry.clone()
                },
            ));
        }
        rotate(dir.as_ref(), &found, keep);
        Ok(())
    }

    /// Back up what each deletion removes; those whose version could not
    /// be kept fail and are left out. The backups are flushed before any
    /// deletion is started.
    pub(super) fn back_up_deleted<'i>(
        &mut self,
        chosen: Vec<(&'i SyncItem, Side)>,
    ) -> Vec<(&'i SyncItem, Side)> {
        if self.cfg.backups.is_none() {
            return chosen;
        }
        let mut kept = Vec::with_capacity(chosen.len());
        for (item, on) in chosen {
            match self.back_up(on, item.entry(on)) {
                Ok(()) => kept.push((item, on)),
                Err(error) => self.fail(&item.path, error),
            }
        }
        self.flush_replicas();
        kept
    }

    /// Back up what each staged temp will replace (the chunk's flush then
    /// makes the backups durable before the commits); a temp whose target
    /// could not be kept is discarded and its path fails.
    pub(super) fn back_up_staged(&mut self, staged: Vec<Staged<'a>>) -> Vec<Staged<'a>> {
        if self.cfg.backups.is_none() {
            return staged;
        }
        let mut kept = Vec::with_capacity(staged.len());
        for one in staged {
            match self.back_up(one.to, one.item.entry(one.to)) {
                Ok(()) => kept.push(one),
                Err(error) => {
                    self.discard(&one);
                    self.fail(&one.item.path, error);
                }
            }
        }
        kept
    }

    /// Make `side`'s backups durable before what they keep is removed.
    pub(super) fn flush_backups(&self, side: Side) -> Result<(), SyncError> {
        if self.cfg.backups.is_none() || !self.cfg.fsync {
            return Ok(());
        }
        self.replicas[index(side)]
            .sync_all()
            .map_err(|e| SyncError::Replica(crate::Error::io(Step::Flush)(e)))
    }

    /// `.accord-backup/PARENT` on `side`, made if missing. Directories made
    /// here keep the 0700 `mkdir` gives them: backups are the owner's.
    fn backup_dir(&self, side: Side, parent: &RelPath) -> Result<RelPath, SyncError> {
        let mut dir = RelPath::root();
        let components = std::iter::once(BACKUP_DIR).chain(parent.components());
        for component in components {
            let here = self.dir(side, &dir, Step::MakeDir)?;
            here.mkdir(component)?;
            dir = dir.join(component).map_err(|_| name_too_long())?;
        }
        Ok(dir)
    }

    /// The backups of `name` in the backup directory `dir_path`, oldest
    /// first (a directory that cannot be listed has none we know of).
    fn backups_of(&self, side: Side, dir_path: &RelPath, name: &[u8]) -> Vec<Found> {
        let rules = IgnoreRules::new(&[]).expect("no patterns");
        let options = ScanOptions::plain(XattrFilter::NONE, false);
        let (listing, _) = self.replicas[index(side)].list_dir(dir_path, &rules, &options);
        let Some(listing) = listing else {
            return Vec::new();
        };
        let mut found: Vec<Found> = listing
            .entries
            .into_iter()
            .skip(1)
            .filter_map(|e| Some((backup_number(name, e.path.file_name())?, e)))
            .collect();
        found.sort_by_key(|(n, _)| *n);
        found
    }

    /// Link (or copy, for a node) `entry` as `backup_name` in `dir`, then
    /// check that it is the version the plan saw.
    fn link_backup(
        &self,
        dir: &dyn ReplicaDir,
        backup_name: &[u8],
        entry: &Entry,
    ) -> Result<(), SyncError> {
        let temp = if entry.kind == Kind::File {
            dir.link_temp(backup_name, &entry.path)?
        } else {
            let (props, mask) = synced_props(entry, self.cfg);
            let node = Entry {
                props,
                ..entry.clone()
            };
            dir.make_node(backup_name, &node, mask)?
        };
        if let Err(e) = dir.commit(&temp, backup_name, &Expect::Absent) {
            dir.discard(&temp);
            return Err(e.into());
        }
        if entry.kind != Kind::File {
            return Ok(());
        }
        let now = dir
            .stat(backup_name)
            .map_err(crate::Error::io(Step::MakeLink))?;
        if Expect::entry(entry).still_holds(now.as_ref()) {
            return Ok(());
        }
        // The path changed since the scan: this is not the version the
        // plan would overwrite, and its overwrite will be refused.
        dir.delete(backup_name, &expect_found(now))?;
        Err(SyncError::Replica(crate::Error::Changed(
            accord_replica::End::Written,
        )))
    }
}

/// Delete all but the newest `keep` backups (a failure only leaves one
/// more than asked).
fn rotate(dir: &dyn ReplicaDir, found: &[Found], keep: u32) {
    let extra = found.len().saturating_sub(keep as usize);
    for (_, old) in &found[..extra] {
        let _ = dir.delete(old.path.file_name(), &Expect::entry(old));
    }
}

fn found_of(e: &Entry) -> accord_model::Found {
    accord_model::Found {
        kind: e.kind,
        dev: e.dev,
        ino: e.ino,
        size: e.size,
        mtime: e.props.mtime,
    }
}

fn name_too_long() -> SyncError {
    SyncError::Replica(crate::Error::io(Step::MakeLink)(std::io::Error::other(
        "the backup's name is too long",
    )))
}

/// `NAME.~N~`, if it is a valid file name.
pub(crate) fn backup_name(name: &[u8], number: u64) -> Option<Vec<u8>> {
    let mut out = name.to_vec();
    out.extend_from_slice(format!(".~{number}~").as_bytes());
    (out.len() <= 255).then_some(out)
}

/// N of a backup's file name `NAME.~N~` of `name` (N at least 1, in
/// decimal without leading zeros).
pub(crate) fn backup_number(name: &[u8], file_name: &[u8]) -> Option<u64> {
    let rest = file_name.strip_prefix(name)?.strip_prefix(b".~")?;
    let digits = std::str::from_utf8(rest.strip_suffix(b"~")?).ok()?;
    if digits.starts_with('0') || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_top_backup_directory_is_one() {
        let path = |text: &str| RelPath::new(text.as_bytes()).unwrap();
        assert!(in_backup_dir(&path(".accord-backup")));
        assert!(in_backup_dir(&path(".accord-backup/dir/f.~1~")));
        assert!(!in_backup_dir(&path("dir/.accord-backup")));
        assert!(!in_backup_dir(&path(".accord-backups")));
        assert!(!in_backup_dir(&RelPath::root()));
    }

    #[test]
    fn backup_names_round_trip_and_reject_others() {
        let name = backup_name(b"notes.txt", 12).unwrap();
        assert_eq!(name, b"notes.txt.~12~");
        assert_eq!(backup_number(b"notes.txt", &name), Some(12));
        for other in [
            &b"notes.txt"[..],
            b"notes.txt.~~",
            b"notes.txt.~01~",
            b"notes.txt.~1x~",
            b"notes.txt.~-1~",
            b"notes.txt.~1~.~2~",
            b"notes.tx.~1~",
        ] {
            assert_eq!(backup_number(b"notes.txt", other), None, "{other:?}");
        }
        // notes.txt.~1~'s own backups are not notes.txt's.
        assert_eq!(
            backup_number(b"notes.txt.~1~", b"notes.txt.~1~.~2~"),
            Some(2)
        );
        assert!(backup_name(&[b'x'; 251], 1).is_some());
        assert!(backup_name(&[b'x'; 252], 1).is_none());
    }
}
