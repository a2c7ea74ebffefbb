//! `--dry-run`: the run goes as far as the plan (with the interactive
//! mode's edits) and changes nothing. Each side reads a scratch copy of its
//! archive, so that even what a real run writes before propagating (an
//! archive made for a first sync, emptied when the other side's is lost)
//! touches no archive of the user's. Only local replicas: a remote one's
//! archive is opened by its own host.

use accord_plan::{Action, SyncItem};
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// A private directory of scratch copies of the pair's archives, removed
/// when dropped.
pub(crate) struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    /// Copies of both sides' archives (`identities`: A's and B's) of
    /// `state_dir`, those that exist, with their logs.
    pub(crate) fn of(state_dir: &Path, identities: &[Vec<u8>; 2]) -> io::Result<Scratch> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("accord-dry-run-{}-{stamp:x}", std::process::id()));
        std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
        let scratch = Scratch { dir };
        for (this, other) in [(0, 1), (1, 0)] {
            let from = accord_archive::pair_files(state_dir, &identities[this], &identities[other]);
            let to =
                accord_archive::pair_files(&scratch.dir, &identities[this], &identities[other]);
            for suffix in ["", "-wal"] {
                copy_if_there(
                    &with_suffix(&from.archive, suffix),
                    &with_suffix(&to.archive, suffix),
                )?;
            }
        }
        Ok(scratch)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn with_suffix(file: &Path, suffix: &str) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn copy_if_there(from: &Path, to: &Path) -> io::Result<()> {
    match std::fs::copy(from, to) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        result => result.map(drop),
    }
}

/// What the plan would change: every item but agreements, conflicts and
/// paths left alone, as the changes a real run would report.
pub(crate) fn would_propagate(items: &[SyncItem]) -> Vec<crate::Propagated> {
    items
        .iter()
        .filter(|item| {
            !matches!(
                item.action,
                Action::Agree | Action::Nothing | Action::Conflict(_) | Action::MovedWith { .. }
            )
        })
        .map(|item| crate::Propagated {
            path: item.path.clone(),
            action: item.action,
            from: match (&item.moved, item.action) {
                (Some(moved), Action::Rename { .. }) => Some(moved.from.clone()),
                _ => None,
            },
            linked_to: None,
            kept_as: None,
            merged: false,
        })
        .collect()
}
