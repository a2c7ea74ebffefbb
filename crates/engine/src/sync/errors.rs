//! Why a sync stopped or left a path: per path (`SyncFailure`, the run
//! went on) and fatal (`SyncFatal`, the run stopped), with the words the
//! cli shows for them.

use accord_model::RelPath;
use accord_replica::SideFailure;
use std::fmt;
use std::path::PathBuf;

/// Why one path failed in a sync (the run went on without it).
#[derive(Debug)]
pub enum SyncError {
    /// A replica refused or failed (`Error::Changed`: the path changed
    /// during the sync and was left alone).
    Replica(crate::Error),
    /// The new contents did not have the fingerprint update detection saw
    /// (the file was written while it was copied); nothing was replaced.
    ContentsChanged,
    /// A directory to delete still holds entries.
    DirectoryNotEmpty,
    /// Propagated, but the archives could not record it: the next run
    /// sees it as changed on both sides with equal results and agrees.
    Archive(SideFailure),
    /// Its update could not be detected (a file that could not be read to
    /// fingerprint it): left out of this run, with its subtree.
    Detect(String),
    /// A merge replaced `written`'s version, then the other side's failed
    /// its re-check (written in that moment) or its rename: the two sides
    /// now hold the merge and that write, a conflict for the next run.
    MergedOnOneSide {
        written: accord_plan::Side,
        cause: Box<crate::Error>,
    },
    /// Case is ignored and its name cannot be synced: names on one side
    /// that differ only by case, or a case-sensitive side that spells it
    /// otherwise (`sync/case/scan.rs`); left alone on both sides.
    /// `names`: those that clash, on the replica named `replica`.
    CaseClash {
        names: Vec<RelPath>,
        replica: String,
    },
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncError::Replica(crate::Error::Changed(_)) => {
                f.write_str("changed during sync; left alone")
            }
            SyncError::Replica(e) => f.write_str(&words_only(&e.to_string())),
            SyncError::ContentsChanged => {
                f.write_str("changed during sync (its contents moved while copied); left alone")
            }
            SyncError::DirectoryNotEmpty => f.write_str("directory not empty; left alone"),
            SyncError::Archive(e) => write!(
                f,
                "recording the agreement failed: {}",
                words_only(&e.to_string())
            ),
            SyncError::Detect(e) => {
                write!(f, "cannot tell whether it changed: {}", words_only(e))
            }
            SyncError::MergedOnOneSide { written, cause } => {
                let side = |side| match side {
                    accord_plan::Side::A => "A",
                    accord_plan::Side::B => "B",
                };
                write!(
                    f,
                    "merged on {} only; {}: {cause}",
                    side(*written),
                    side(written.other())
                )
            }
            SyncError::CaseClash { names, replica } => {
                let shown: Vec<String> =
                    names.iter().map(|p| format!("'{}'", p.display())).collect();
                write!(
                    f,
                    "{} in {replica} differ only by case, and case is ignored: none of them is \
                     synced (nothing was changed or deleted) until all but one are renamed",
                    shown.join(" and ")
                )
            }
        }
    }
}

impl From<crate::Error> for SyncError {
    fn from(e: crate::Error) -> SyncError {
        SyncError::Replica(e)
    }
}

/// A path that failed.
#[derive(Debug)]
pub struct SyncFailure {
    pub path: RelPath,
    pub error: SyncError,
}

impl fmt::Display for SyncFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.error)
    }
}

impl std::error::Error for SyncFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl std::error::Error for SyncError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SyncError::Replica(e) => Some(e),
            SyncError::MergedOnOneSide { cause, .. } => Some(cause.as_ref()),
            SyncError::Archive(e) => Some(e),
            _ => None,
        }
    }
}

/// Why a sync stopped before any change, or in the middle.
#[derive(Debug)]
pub enum SyncFatal {
    /// One root inside the other (why, naming both).
    Nested(String),
    /// A local root could not be opened (a missing root is never taken
    /// as everything deleted).
    OpenRoot {
        path: PathBuf,
        source: std::io::Error,
    },
    /// Another run holds a replica's lock.
    Busy(String),
    /// A replica's lock could not be taken.
    Lock {
        replica: String,
        source: std::io::Error,
    },
    /// Both names lead to one directory.
    SameRoot,
    /// The scratch copies of the archives for a dry run could not be made.
    DryRunScratch(std::io::Error),
    /// A remote root could not be reached (why, in one line).
    Unreachable(String),
    /// One replica's side could not go on: its archive is locked by
    /// another run or cannot be used, one of its directories could not be
    /// read (its entries would look deleted), its connection failed.
    Side {
        replica: String,
        failure: SideFailure,
    },
}

impl fmt::Display for SyncFatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyncFatal::Nested(why) => f.write_str(why),
            SyncFatal::OpenRoot { path, source }
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                write!(
                    f,
                    "root {} does not exist; nothing was changed: a sync's roots must both \
                     exist (for a first sync, create it with mkdir)",
                    path.display()
                )
            }
            SyncFatal::OpenRoot { path, source } => write!(
                f,
                "cannot open root {}: {}; nothing was changed",
                path.display(),
                crate::sync::io_words(source)
            ),
            SyncFatal::Busy(replica) => write!(
                f,
                "another accord run is writing into {replica}; try again when it is done"
            ),
            SyncFatal::Lock { replica, source } => write!(
                f,
                "cannot lock {replica}: {}; nothing was changed",
                io_words(source)
            ),
            SyncFatal::SameRoot => f.write_str("both roots are the same directory"),
            SyncFatal::DryRunScratch(e) => write!(
                f,
                "--dry-run cannot copy the archives to read them ({e}); nothing was changed: \
                 check that TMPDIR is writable"
            ),
            SyncFatal::Unreachable(why) => write!(f, "{}; nothing was changed", words_only(why)),
            SyncFatal::Side {
                failure: failure @ SideFailure::Locked { .. },
                ..
            } => f.write_str(&words_only(&failure.to_string())),
            SyncFatal::Side {
                failure: failure @ SideFailure::Unreadable(_),
                ..
            } => write!(
                f,
                "{}; nothing was changed",
                words_only(&failure.to_string())
            ),
            SyncFatal::Side { replica, failure } => {
                write!(f, "{replica}: {}", words_only(&failure.to_string()))
            }
        }
    }
}

impl std::error::Error for SyncFatal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SyncFatal::OpenRoot { source, .. } | SyncFatal::Lock { source, .. } => Some(source),
            SyncFatal::Side { failure, .. } => Some(failure),
            SyncFatal::DryRunScratch(source) => Some(source),
            SyncFatal::Nested(_)
            | SyncFatal::SameRoot
            | SyncFatal::Unreachable(_)
            | SyncFatal::Busy(_) => None,
        }
    }
}

/// An I/O error's words without the "(os error N)" that repeats them.
pub(crate) fn io_words(e: &std::io::Error) -> String {
    words_only(&e.to_string())
}

/// `text` without the " (os error N)" tails that repeat the words before
/// them (an error of another layer, shown whole).
pub(crate) fn words_only(text: &str) -> String {
    const TAIL: &str = " (os error ";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(TAIL) {
        let after = &rest[at + TAIL.len()..];
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 && after[digits..].starts_with(')') {
            out.push_str(&rest[..at]);
            rest = &after[digits + 1..];
        } else {
            out.push_str(&rest[..at + TAIL.len()]);
            rest = after;
        }
    }
    out.push_str(rest);
    out
}
