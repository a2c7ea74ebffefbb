//! The part of [`LocalSide`] that only a sync of more than two replicas
//! uses: the set's archive, with its version vectors and count of runs.

use super::side::LocalSide;
use super::LocalReplica;
use crate::side::local_identity;
use crate::side::{ArchiveRecord, SideFailure};
use accord_archive::{Archive, ArchiveError};
use accord_model::RelPath;
use accord_plan::VersionVector;
use std::path::Path;

impl<'a> LocalSide<'a> {
    /// Open (and lock) the archive `replica` keeps of the set named `set`,
    /// as [`LocalSide::open`] does a pair's.
    pub fn open_set(
        replica: &'a LocalReplica,
        set: &[u8],
        archive_dir: &Path,
    ) -> Result<LocalSide<'a>, SideFailure> {
        let this = local_identity(replica.root().path());
        let archive = match Archive::open_set(archive_dir, &this, set) {
            Err(e) if e.is_damaged() => Archive::recreate_set(archive_dir, &this, set)?,
            result => result?,
        };
        LocalSide::with_archive(replica, archive, true)
    }
}

impl LocalSide<'_> {
    /// The vector stored at `path` (empty: none), checked.
    pub(super) fn checked_version(&self, path: &RelPath) -> Result<VersionVector, SideFailure> {
        let Some(counts) = self.archive.version(path)? else {
            return Ok(VersionVector::default());
        };
        VersionVector::from_counts(counts).map_err(|why| {
            SideFailure::from(ArchiveError::Damaged {
                file: self.archive.file().to_path_buf(),
                reason: format!("its version vector of {} {why}", path.display()),
            })
        })
    }

    /// Every stored vector, each checked.
    pub(super) fn checked_versions(&self) -> Result<Vec<(RelPath, VersionVector)>, SideFailure> {
        let file = self.archive.file().to_path_buf();
        let checked = |(path, counts): (RelPath, Vec<(u8, u64)>)| {
            VersionVector::from_counts(counts)
                .map(|vector| (path.clone(), vector))
                .map_err(|why| {
                    SideFailure::from(ArchiveError::Damaged {
                        file: file.clone(),
                        reason: format!("its version vector of {} {why}", path.display()),
                    })
                })
        };
        self.archive.versions()?.into_iter().map(checked).collect()
    }

    pub(super) fn require_set(&self) -> Result<(), SideFailure> {
        match self.set {
            true => Ok(()),
            false => Err(SideFailure::said(
                "this archive is a pair's, which keeps no version vectors",
            )),
        }
    }

    pub(super) fn record_versions_unchecked(
        &mut self,
        records: &[ArchiveRecord],
        versions: &[(RelPath, VersionVector)],
    ) -> Result<(), SideFailure> {
        let mut batch = self.archive.batch()?;
        for record in records {
            match record {
                ArchiveRecord::Put(observed) => batch.put(observed)?,
                ArchiveRecord::Remove(path) => {
                    batch.remove(path)?;
                    batch.remove_subtree(path)?;
                }
            }
        }
        for (path, vector) in versions {
            batch.put_version(path, vector.counts())?;
        }
        Ok(batch.commit()?)
    }
}
