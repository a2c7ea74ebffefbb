//! What can go wrong with an archive, typed so that the caller can choose:
//! a damaged archive is treated as lost (the Unison paper's conservative
//! rule), a newer one stops the run, a locked one names the other run.

use accord_model::RelPath;
use std::fmt;
use std::io;
use std::path::PathBuf;

#[derive(Debug)]
pub enum ArchiveError {
    /// Another run holds this pair's lock.
    Locked {
        lock_file: PathBuf,
        /// The other run's process id, when its lock file could be read.
        holder: Option<u32>,
    },
    /// Written by a newer Accord. Left exactly as it is: rewriting it would
    /// lose what the newer format knows.
    NewerFormat {
        file: PathBuf,
        found: i64,
        supported: i64,
    },
    /// Not a readable archive of ours: corrupt or truncated, another
    /// program's file, or holding a value no archive of ours holds. The
    /// caller treats the pair as having no archive on either side ("both
    /// replicas were empty" at the last sync) and may start afresh with
    /// [`crate::Archive::recreate`].
    Damaged { file: PathBuf, reason: String },
    /// An entry that cannot be stored: a value out of the bounds every
    /// archive entry keeps (a file without its fingerprint, an overlong
    /// link target, ...). Nothing was written.
    Unstorable { path: RelPath, reason: String },
    /// The state directory or the lock file could not be used.
    Io { file: PathBuf, source: io::Error },
    /// SQLite failed for a reason that says nothing about the archive's
    /// contents (a full disk, permissions, an I/O error).
    Storage {
        file: PathBuf,
        source: rusqlite::Error,
    },
}

impl ArchiveError {
    /// True for [`ArchiveError::Damaged`]: the archive is to be treated as lost.
    pub fn is_damaged(&self) -> bool {
        matches!(self, ArchiveError::Damaged { .. })
    }

    /// Sort a SQLite error: corruption and "not a database" say the archive
    /// is damaged; anything else is a failure to use it.
    pub(crate) fn from_sqlite(file: &std::path::Path, source: rusqlite::Error) -> ArchiveError {
        if let rusqlite::Error::SqliteFailure(failure, _) = &source {
            if matches!(
                failure.code,
                rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
            ) {
                return ArchiveError::Damaged {
                    file: file.to_path_buf(),
                    reason: source.to_string(),
                };
            }
        }
        ArchiveError::Storage {
            file: file.to_path_buf(),
            source,
        }
    }

    pub(crate) fn damaged(file: &std::path::Path, reason: impl Into<String>) -> ArchiveError {
        ArchiveError::Damaged {
            file: file.to_path_buf(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ArchiveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ArchiveError::Locked { lock_file, holder } => {
                write!(f, "another sync of this pair is running (")?;
                match holder {
                    Some(pid) => write!(f, "pid {pid}")?,
                    None => write!(f, "pid unknown")?,
                }
                write!(f, "); it holds {}", lock_file.display())
            }
            ArchiveError::NewerFormat {
                file,
                found,
                supported,
            } => write!(
                f,
                "the archive {} has format version {found}, newer than the {supported} this \
                 Accord reads; it was left untouched (use a newer Accord)",
                file.display()
            ),
            ArchiveError::Damaged { file, reason } => {
                write!(f, "the archive {} is damaged: {reason}", file.display())
            }
            ArchiveError::Unstorable { path, reason } => {
                write!(
                    f,
                    "cannot record {} in the archive: {reason}",
                    path.display()
                )
            }
            ArchiveError::Io { file, source } => write!(f, "{}: {source}", file.display()),
            ArchiveError::Storage { file, source } => {
                write!(f, "the archive {}: {source}", file.display())
            }
        }
    }
}

impl std::error::Error for ArchiveError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ArchiveError::Io { source, .. } => Some(source),
            ArchiveError::Storage { source, .. } => Some(source),
            _ => None,
        }
    }
}
