//! What the archive of a set of more than two replicas keeps besides the
//! entries: per path, the version vector of the last version this replica
//! agreed on (a path with a vector and no entry is a deletion the replica
//! agreed on), and the count of the runs this replica took part in, which
//! counts its changes. The archive stores the counts as given; their
//! meaning is the plan crate's (`version_vector.rs`).
//!
//! A pair's archive has no table of versions; [`Archive::open_set`] makes
//! one in the archives it opens.

use crate::{codec, make_state_dir, open_locked, pair_files, set_aside, take_lock};
use crate::{Archive, ArchiveError, Batch};
use accord_model::RelPath;
use rusqlite::OptionalExtension;
use std::path::Path;

pub(crate) const CREATE_VERSIONS: &str = "CREATE TABLE versions (\
key BLOB PRIMARY KEY NOT NULL, counts BLOB NOT NULL) WITHOUT ROWID";

/// The most `(replica, count)` pairs one stored vector may hold.
pub const MAX_VERSION_COUNTS: usize = 32;

/// A version vector as stored: `(replica, count)` pairs.
pub type VersionCounts = Vec<(u8, u64)>;

/// The bytes of one pair: the replica, then the count (little-endian).
const PAIR_LEN: usize = 9;

/// Where the count of runs is kept in `meta`.
const RUNS: &str = "runs";

/// Where the digest of every stored vector is kept in `meta`: the XOR of a
/// hash of each row, kept as rows change, so that two replicas whose
/// digests are equal hold the same vectors (a run then reads only the
/// vectors of the paths some replica changed, not every one).
const DIGEST: &str = "versions_digest";

impl Archive {
    /// Open (creating if need be) the archive `this_root` keeps of the set
    /// named `set` (the identities of all its roots), with its table of
    /// versions.
    pub fn open_set(
        state_dir: &Path,
        this_root: &[u8],
        set: &[u8],
    ) -> Result<Archive, ArchiveError> {
        let files = pair_files(state_dir, this_root, set);
        make_state_dir(state_dir)?;
        let lock = take_lock(&files.lock)?;
        let archive = open_locked(files.archive, lock, this_root, set)?;
        archive.make_versions_table()
    }

    /// [`Archive::recreate`] for a set's archive.
    pub fn recreate_set(
        state_dir: &Path,
        this_root: &[u8],
        set: &[u8],
    ) -> Result<Archive, ArchiveError> {
        let files = pair_files(state_dir, this_root, set);
        make_state_dir(state_dir)?;
        let lock = take_lock(&files.lock)?;
        set_aside(&files)?;
        let archive = open_locked(files.archive, lock, this_root, set)?;
        archive.make_versions_table()
    }

    fn make_versions_table(self) -> Result<Archive, ArchiveError> {
        let exists: bool = self
            .connection
            .query_row(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'versions')",
                [],
                |row| row.get(0),
            )
            .map_err(|e| self.sqlite(e))?;
        if !exists {
            self.connection
                .execute_batch(CREATE_VERSIONS)
                .map_err(|e| self.sqlite(e))?;
        }
        let mut archive = self;
        if archive.stored_digest()?.is_none() {
            // Made before digests were kept: count every row once.
            let digest = archive
                .versions()?
                .iter()
                .fold([0; 32], |d, (path, counts)| xor(d, row_hash(path, counts)));
            let mut batch = archive.batch()?;
            batch.versions_digest = Some(digest);
            batch.commit()?;
        }
        Ok(archive)
    }

    /// The digest of every stored vector: equal on two replicas when they
    /// hold the same vectors.
    pub fn versions_digest(&self) -> Result<[u8; 32], ArchiveError> {
        Ok(self.stored_digest()?.unwrap_or([0; 32]))
    }

    fn stored_digest(&self) -> Result<Option<[u8; 32]>, ArchiveError> {
        let stored: Option<Vec<u8>> = self
            .connection
            .query_row("SELECT value FROM meta WHERE name = ?1", [DIGEST], |row| {
                row.get(0)
            })
            .optional()
            .map_err(|e| self.sqlite(e))?;
        stored
            .map(|bytes| {
                bytes.try_into().map_err(|_| {
                    ArchiveError::damaged(&self.file, "its digest of versions is not 32 bytes")
                })
            })
            .transpose()
    }

    /// Count one more run of this replica, durably, and return the new
    /// count: above every count this replica has given a change before.
    pub fn count_run(&mut self) -> Result<u64, ArchiveError> {
        let batch = self.batch()?;
        let stored: Option<Vec<u8>> = batch
            .transaction
            .query_row("SELECT value FROM meta WHERE name = ?1", [RUNS], |row| {
                row.get(0)
            })
            .optional()
            .map_err(|e| batch.sqlite(e))?;
        let runs = match stored {
            None => 0,
            Some(bytes) => u64::from_le_bytes(bytes.try_into().map_err(|_| {
                ArchiveError::damaged(batch.file, "its count of runs is not 8 bytes")
            })?),
        };
        let next = runs
            .checked_add(1)
            .ok_or_else(|| ArchiveError::damaged(batch.file, "its count of runs is at its end"))?;
        batch
            .transaction
            .execute(
                "INSERT OR REPLACE INTO meta (name, value) VALUES (?1, ?2)",
                rusqlite::params![RUNS, next.to_le_bytes().to_vec()],
            )
            .map_err(|e| batch.sqlite(e))?;
        batch.commit()?;
        Ok(next)
    }

    /// Every stored vector, in `RelPath` order.
    pub fn versions(&self) -> Result<Vec<(RelPath, VersionCounts)>, ArchiveError> {
        let mut statement = self.prepare("SELECT key, counts FROM versions ORDER BY key")?;
        let mut rows = statement.query([]).map_err(|e| self.sqlite(e))?;
        let mut versions: Vec<(RelPath, VersionCounts)> = Vec::new();
        while let Some(row) = rows.next().map_err(|e| self.sqlite(e))? {
            let key: Vec<u8> = row.get(0).map_err(|e| self.sqlite(e))?;
            let counts: Vec<u8> = row.get(1).map_err(|e| self.sqlite(e))?;
            let damaged = |reason: String| ArchiveError::damaged(&self.file, reason);
            let path = codec::path_of(&key).map_err(damaged)?;
            if versions.last().is_some_and(|(last, _)| *last >= path) {
                return Err(damaged("its versions are out of order".into()));
            }
            versions.push((path, decode_counts(&counts).map_err(damaged)?));
        }
        Ok(versions)
    }

    /// The vector stored at `path`, if any.
    pub fn version(&self, path: &RelPath) -> Result<Option<VersionCounts>, ArchiveError> {
        let mut statement = self.prepare("SELECT counts FROM versions WHERE key = ?1")?;
        let counts: Option<Vec<u8>> = statement
            .query_row([codec::key_of(path)], |row| row.get(0))
            .optional()
            .map_err(|e| self.sqlite(e))?;
        counts
            .map(|bytes| decode_counts(&bytes))
            .transpose()
            .map_err(|reason| ArchiveError::damaged(&self.file, reason))
    }
}

impl Batch<'_> {
    /// Store the vector of the version this replica holds at `path` (or,
    /// with no entry there, the deletion it agreed on).
    pub fn put_version(
        &mut self,
        path: &RelPath,
        counts: &[(u8, u64)],
    ) -> Result<(), ArchiveError> {
        if counts.len() > MAX_VERSION_COUNTS {
            return Err(ArchiveError::Unstorable {
                path: path.clone(),
                reason: format!("a vector of {} counts", counts.len()),
            });
        }
        let old: Option<Vec<u8>> = self
            .prepare("SELECT counts FROM versions WHERE key = ?1")?
            .query_row([codec::key_of(path)], |row| row.get(0))
            .optional()
            .map_err(|e| self.sqlite(e))?;
        let mut digest = self.current_digest()?;
        if let Some(old) = old {
            let old =
                decode_counts(&old).map_err(|reason| ArchiveError::damaged(self.file, reason))?;
            digest = xor(digest, row_hash(path, &old));
        }
        self.versions_digest = Some(xor(digest, row_hash(path, counts)));
        let mut statement =
            self.prepare("INSERT OR REPLACE INTO versions (key, counts) VALUES (?1, ?2)")?;
        statement
            .execute(rusqlite::params![
                codec::key_of(path),
                encode_counts(counts)
            ])
            .map_err(|e| self.sqlite(e))?;
        Ok(())
    }

    /// The digest as this batch has left it so far.
    fn current_digest(&self) -> Result<[u8; 32], ArchiveError> {
        if let Some(digest) = self.versions_digest {
            return Ok(digest);
        }
        let stored: Option<Vec<u8>> = self
            .transaction
            .query_row("SELECT value FROM meta WHERE name = ?1", [DIGEST], |row| {
                row.get(0)
            })
            .optional()
            .map_err(|e| self.sqlite(e))?;
        match stored {
            None => Ok([0; 32]),
            Some(bytes) => bytes.try_into().map_err(|_| {
                ArchiveError::damaged(self.file, "its digest of versions is not 32 bytes")
            }),
        }
    }

    /// Keep the digest this batch changed (called by `commit`).
    pub(crate) fn store_versions_digest(&mut self) -> Result<(), ArchiveError> {
        let Some(digest) = self.versions_digest else {
            return Ok(());
        };
        self.transaction
            .execute(
                "INSERT OR REPLACE INTO meta (name, value) VALUES (?1, ?2)",
                rusqlite::params![DIGEST, digest.to_vec()],
            )
            .map_err(|e| self.sqlite(e))?;
        Ok(())
    }

    /// Forget every stored vector (the set's agreement is lost).
    pub fn clear_versions(&mut self) -> Result<(), ArchiveError> {
        self.transaction
            .execute("DELETE FROM versions", [])
            .map_err(|e| self.sqlite(e))?;
        self.versions_digest = Some([0; 32]);
        Ok(())
    }
}

/// The hash of one row, as the digest counts it.
fn row_hash(path: &RelPath, counts: &[(u8, u64)]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key("accord set archive version row, version 1");
    let key = codec::key_of(path);
    hasher.update(&(key.len() as u64).to_le_bytes());
    hasher.update(&key);
    hasher.update(&encode_counts(counts));
    *hasher.finalize().as_bytes()
}

fn xor(mut digest: [u8; 32], hash: [u8; 32]) -> [u8; 32] {
    for (byte, other) in digest.iter_mut().zip(hash) {
        *byte ^= other;
    }
    digest
}

fn encode_counts(counts: &[(u8, u64)]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(counts.len() * PAIR_LEN);
    for &(replica, count) in counts {
        bytes.push(replica);
        bytes.extend_from_slice(&count.to_le_bytes());
    }
    bytes
}

/// The pairs of a stored vector: whole pairs, at most
/// [`MAX_VERSION_COUNTS`] (their order and values are checked where they
/// are given a meaning).
fn decode_counts(bytes: &[u8]) -> Result<VersionCounts, String> {
    if !bytes.len().is_multiple_of(PAIR_LEN) || bytes.len() / PAIR_LEN > MAX_VERSION_COUNTS {
        return Err(format!("a stored vector of {} bytes", bytes.len()));
    }
    Ok(bytes
        .chunks_exact(PAIR_LEN)
        .map(|pair| {
            let count = u64::from_le_bytes(pair[1..].try_into().expect("9-byte chunks"));
            (pair[0], count)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(name: &str) -> RelPath {
        RelPath::new(name.as_bytes()).unwrap()
    }

    #[test]
    fn versions_and_runs_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let set = b"set of three".as_slice();
        {
            let mut archive = Archive::open_set(dir.path(), b"this", set).unwrap();
            assert!(archive.was_created());
            assert_eq!(archive.count_run().unwrap(), 1);
            assert_eq!(archive.count_run().unwrap(), 2);
            let mut batch = archive.batch().unwrap();
            batch.put_version(&path("b"), &[(0, 2), (3, 9)]).unwrap();
            batch.put_version(&path("a/c"), &[(1, 1)]).unwrap();
            batch.commit().unwrap();
            // A dropped batch leaves nothing.
            let mut batch = archive.batch().unwrap();
            batch.put_version(&path("z"), &[(1, 1)]).unwrap();
            drop(batch);
        }
        let mut archive = Archive::open_set(dir.path(), b"this", set).unwrap();
        assert!(!archive.was_created());
        assert_eq!(archive.count_run().unwrap(), 3);
        assert_eq!(
            archive.versions().unwrap(),
            [
                (path("a/c"), vec![(1, 1)]),
                (path("b"), vec![(0, 2), (3, 9)])
            ]
        );
        assert_eq!(archive.version(&path("z")).unwrap(), None);
        // The digest follows the rows: the same rows written in another
        // order, or overwritten back, give the same digest.
        let digest = archive.versions_digest().unwrap();
        assert_ne!(digest, [0; 32]);
        let other_dir = tempfile::tempdir().unwrap();
        let mut other = Archive::open_set(other_dir.path(), b"that", set).unwrap();
        let mut batch = other.batch().unwrap();
        batch.put_version(&path("b"), &[(0, 1)]).unwrap();
        batch.put_version(&path("a/c"), &[(1, 1)]).unwrap();
        batch.put_version(&path("b"), &[(0, 2), (3, 9)]).unwrap();
        batch.commit().unwrap();
        assert_eq!(other.versions_digest().unwrap(), digest);
        let mut batch = archive.batch().unwrap();
        batch.clear_versions().unwrap();
        batch.commit().unwrap();
        assert!(archive.versions().unwrap().is_empty());
    }

    #[test]
    fn a_pair_archive_has_no_versions_and_stays_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        drop(Archive::open(dir.path(), b"this", b"other").unwrap());
        let archive = Archive::open(dir.path(), b"this", b"other").unwrap();
        assert!(archive.version(&path("a")).is_err());
    }

    #[test]
    fn damaged_vectors_are_reported() {
        assert!(decode_counts(&[1, 2, 3]).is_err());
        assert!(decode_counts(&vec![0; PAIR_LEN * (MAX_VERSION_COUNTS + 1)]).is_err());
        let pairs = [(2, 7), (5, u64::MAX)];
        assert_eq!(decode_counts(&encode_counts(&pairs)).unwrap(), pairs);
    }
}
