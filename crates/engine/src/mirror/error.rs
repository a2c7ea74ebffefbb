//! A mirror run's failures: per path (the run goes on) and fatal (the run
//! stops). The cli maps them to messages, exit codes and JSON fields
//! without parsing text.

use accord_fsys::IoWords;
use accord_model::RelPath;
use accord_replica::{EndWords, Error, InWords};
use std::fmt;
use std::io;
use std::path::PathBuf;

/// A per-path failure: the run went on without this path.
#[derive(Debug)]
pub struct Failure {
    pub path: RelPath,
    pub error: Error,
}

/// A mirror's words for the two ends of its copies: they always run from
/// the source to the destination.
pub const MIRROR_WORDS: EndWords = EndWords {
    read: "the source",
    written: "the destination",
    opening_read: "opening the source file",
    reading: "reading the source file",
    opening_written: "opening the destination",
};

impl Failure {
    /// Why the path failed, in a mirror's words.
    pub fn message(&self) -> InWords<'_> {
        self.error.in_words(&MIRROR_WORDS)
    }
}

/// Why a run stopped.
#[derive(Debug)]
pub enum Fatal {
    OpenSource {
        path: PathBuf,
        source: io::Error,
    },
    OpenDestination {
        path: PathBuf,
        source: io::Error,
    },
    SameDirectory,
    /// One root inside the other.
    Nested(String),
    /// Another run holds the destination's lock.
    Busy(PathBuf),
    Lock {
        path: PathBuf,
        source: io::Error,
    },
    BadExclude(io::Error),
    ThreadPool(rayon::ThreadPoolBuildError),
    /// The source root could not be read at all (why, when the scan said).
    SourceUnreadable {
        path: PathBuf,
        detail: String,
    },
    /// Some destination directory could not be read: what to delete or
    /// replace is unknown.
    DestinationUnreadable {
        path: PathBuf,
        detail: String,
    },
    /// The disk filled up; `path` is the file being written, `replaced`
    /// whether it had an old version (which was left in place).
    DiskFull {
        path: RelPath,
        replaced: bool,
        source: Box<Error>,
    },
    /// The final flush of the destination failed.
    Sync(io::Error),
    /// Files that did not fit on the destination even one at a time, after
    /// the run went on file by file committing what fitted; with whether
    /// each had an old version (which was left in place).
    DidNotFit {
        files: Vec<(RelPath, bool)>,
        source: Box<Error>,
    },
    /// The connection to a remote replica was lost (the call that found
    /// out, and why).
    ConnectionLost(Box<Error>),
}

impl fmt::Display for Fatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fatal::OpenSource { path, source } if not_a_directory(source) => write!(
                f,
                "the source {} is not a directory: accord mirror makes a directory a copy \
                 of another (for one file, mirror its directory with --include NAME \
                 --exclude '*'); nothing was changed",
                path.display()
            ),
            Fatal::OpenDestination { path, source } if not_a_directory(source) => write!(
                f,
                "the destination {} exists and is not a directory; nothing was changed \
                 (name a directory, or a path that does not exist yet)",
                path.display()
            ),
            Fatal::OpenSource { path, source } => write!(
                f,
                "cannot open source {}: {}; nothing was changed",
                path.display(),
                IoWords(source)
            ),
            Fatal::OpenDestination { path, source } => write!(
                f,
                "cannot open or create destination {}: {}",
                path.display(),
                IoWords(source)
            ),
            Fatal::ConnectionLost(why) => write!(
                f,
                "connection lost: {}; every file holds its old or its new contents",
                why.in_words(&MIRROR_WORDS)
            ),
            Fatal::SameDirectory => f.write_str("source and destination are the same directory"),
            Fatal::Nested(why) => f.write_str(why),
            Fatal::Busy(path) => write!(
                f,
                "another accord run is writing into {}; try again when it is done",
                path.display()
            ),
            Fatal::Lock { path, source } => {
                write!(f, "cannot lock {}: {}", path.display(), IoWords(source))
            }
            Fatal::BadExclude(e) => write!(f, "bad exclude pattern: {}", IoWords(e)),
            Fatal::ThreadPool(e) => write!(f, "cannot start worker threads: {e}"),
            Fatal::SourceUnreadable { path, detail } if detail.is_empty() => {
                write!(f, "cannot read source {}", path.display())
            }
            Fatal::SourceUnreadable { path, detail } => {
                write!(f, "cannot read source {}: {detail}", path.display())
            }
            Fatal::DestinationUnreadable { path, detail } => {
                write!(f, "cannot read destination {}: {detail}", path.display())
            }
            Fatal::DiskFull {
                path,
                replaced,
                source,
            } => {
                write!(
                    f,
                    "disk full writing {}: {}",
                    path.display(),
                    source.in_words(&MIRROR_WORDS)
                )?;
                if *replaced {
                    f.write_str("; the old file was left in place")?;
                }
                Ok(())
            }
            Fatal::Sync(e) => write!(
                f,
                "flushing the destination to disk failed: {}; the files written may not \
                 survive a crash",
                IoWords(e)
            ),
            Fatal::DidNotFit { files, source } => {
                write!(
                    f,
                    "disk full ({}): {} file(s) did not fit:",
                    source.in_words(&MIRROR_WORDS),
                    files.len()
                )?;
                for (p, _) in files.iter().take(10) {
                    write!(f, " {}", p.display())?;
                }
                if files.len() > 10 {
                    write!(f, " and {} more", files.len() - 10)?;
                }
                if files.iter().any(|(_, replaced)| *replaced) {
                    f.write_str(" (their old versions were left in place)")?;
                }
                Ok(())
            }
        }
    }
}

/// What opening a root as a directory says when something else is there.
fn not_a_directory(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOTDIR) | Some(libc::EEXIST))
}

impl std::error::Error for Fatal {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Fatal::OpenSource { source, .. }
            | Fatal::OpenDestination { source, .. }
            | Fatal::Lock { source, .. } => Some(source),
            Fatal::BadExclude(e) | Fatal::Sync(e) => Some(e),
            Fatal::ThreadPool(e) => Some(e),
            Fatal::DiskFull { source, .. } | Fatal::DidNotFit { source, .. } => {
                Some(source.as_ref())
            }
            Fatal::ConnectionLost(e) => Some(e.as_ref()),
            Fatal::SameDirectory
            | Fatal::Nested(_)
            | Fatal::Busy(_)
            | Fatal::SourceUnreadable { .. }
            | Fatal::DestinationUnreadable { .. } => None,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message())
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}
