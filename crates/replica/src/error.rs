//! Typed errors that keep their cause: per-path failures (the run goes on)
//! and fatal ones (the run stops). The cli maps them to messages, exit codes
//! and JSON fields without parsing text.

use accord_fsys::IoWords;
use accord_model::RelPath;
use std::fmt;
use std::io;

/// What the engine was doing when an operation failed (so a permission error
/// says which operation it refused).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    OpenSource,
    ReadSource,
    OpenDestination,
    WriteTemp,
    Flush,
    Replace,
    SetProps,
    MakeDir,
    MakeLink,
    MakeNode,
    Delete,
    ListDir,
    UpdateInPlace,
    Fingerprint,
    Scan,
    Rename,
}

impl Action {
    fn doing(self, words: &EndWords) -> &'static str {
        match self {
            Action::OpenSource => words.opening_read,
            Action::ReadSource => words.reading,
            Action::OpenDestination => words.opening_written,
            Action::WriteTemp => "writing the temp file",
            Action::Flush => "flushing to disk",
            Action::Replace => "renaming the new version into place",
            Action::SetProps => "setting properties",
            Action::MakeDir => "making the directory",
            Action::MakeLink => "making the hard link",
            Action::MakeNode => "making the entry",
            Action::Delete => "deleting",
            Action::ListDir => "listing the directory",
            Action::UpdateInPlace => "updating in place",
            Action::Fingerprint => "computing the fingerprint",
            Action::Scan => "scanning",
            Action::Rename => "renaming",
        }
    }
}

/// The words a job gives the two ends of a copy in its messages. The seam
/// knows only the end a copy reads from and the end it writes to; which
/// replica each is, only the job knows: a mirror's source and destination,
/// or, in a sync whose copies run either way between A and B, the file to
/// copy and the entry it replaces ([`EndWords::NEUTRAL`], what `Display`
/// of [`Error`] says).
#[derive(Clone, Copy, Debug)]
pub struct EndWords {
    /// The end read from, as a subject: "the source".
    pub read: &'static str,
    /// The end written to: "the destination".
    pub written: &'static str,
    /// Opening the file to read: "opening the source file".
    pub opening_read: &'static str,
    /// Reading it: "reading the source file".
    pub reading: &'static str,
    /// Opening what is written to: "opening the destination".
    pub opening_written: &'static str,
}

impl EndWords {
    /// Words that name no replica.
    pub const NEUTRAL: EndWords = EndWords {
        read: "the file to copy",
        written: "the entry to replace",
        opening_read: "opening the file to copy",
        reading: "reading the file to copy",
        opening_written: "opening the entry to replace",
    };

    fn end(&self, end: End) -> &'static str {
        match end {
            End::Read => self.read,
            End::Written => self.written,
        }
    }
}

/// Which end of a copy or an update a check or a failure is about: the
/// replica read from, or the one written to. Only the job knows which
/// replica that is (see [`EndWords`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    Read,
    Written,
}

/// Why one path failed.
#[derive(Debug)]
pub enum Error {
    /// An operating-system error during an action.
    Io { action: Action, source: io::Error },
    /// Safety rule 3: the entry is not what the plan was made on.
    Changed(End),
    /// The delta engine refused (a damaged basis, an inconsistent delta).
    Delta {
        action: Action,
        source: accord_delta::DeltaError,
    },
    /// An in-place update failed after it began writing: the file holds
    /// neither version and was moved to `recovery` (or could not be moved).
    InPlaceFailed {
        cause: Box<Error>,
        recovery: Result<Vec<u8>, io::Error>,
    },
    /// A source file holds a half-finished in-place update of an earlier run.
    HalfUpdated,
    /// A destination file was being updated in place when an earlier run
    /// stopped: it held a mix of both versions and was moved to `recovery`
    /// (or could not be moved); this run copies it again.
    InterruptedInPlace {
        recovery: Result<Vec<u8>, io::Error>,
    },
    /// A hard link's leader is not a regular file.
    LeaderNotFile(RelPath),
    /// A hard link's leader could not be given its new contents: linking to
    /// it would give this name neither its old nor its new contents.
    LeaderNotWritten(RelPath),
    /// A scan could not read the entry (the scanner's own message).
    Scan(String),
}

impl Error {
    pub fn io(action: Action) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Io { action, source }
    }

    /// True when the disk (or a quota) is full: fatal for a run.
    pub fn is_no_space(&self) -> bool {
        match self {
            Error::Io { source, .. } => accord_fsys::is_no_space(source),
            Error::Delta {
                source: accord_delta::DeltaError::Io(e),
                ..
            } => accord_fsys::is_no_space(e),
            Error::InPlaceFailed { cause, .. } => cause.is_no_space(),
            _ => false,
        }
    }

    /// A delta's result that failed its check although neither side
    /// changed: a false match of the signature's short strong sums (rare
    /// by design); the file is then sent whole.
    pub fn is_false_match(&self) -> bool {
        matches!(
            self,
            Error::Delta {
                source: accord_delta::DeltaError::ChecksumMismatch,
                ..
            }
        )
    }

    /// A remote side that had not the memory to make or hold a delta
    /// now (its budget was in use); the file is then sent whole.
    pub fn is_over_memory(&self) -> bool {
        matches!(self, Error::Io { source, .. } if source.kind() == io::ErrorKind::OutOfMemory)
    }

    /// True when the connection to a remote replica is gone: fatal for a
    /// run (every later call would fail the same way).
    pub fn is_lost(&self) -> bool {
        match self {
            Error::Io { source, .. } => source.kind() == io::ErrorKind::ConnectionAborted,
            Error::InPlaceFailed { cause, .. } => cause.is_lost(),
            _ => false,
        }
    }

    /// The OS error number, if the cause is an OS error.
    pub fn os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}

impl Error {
    /// This error in the words of a job that knows which replica each end
    /// of a copy is (see [`EndWords`]).
    pub fn in_words<'a>(&'a self, words: &'a EndWords) -> InWords<'a> {
        InWords { error: self, words }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.in_words(&EndWords::NEUTRAL))
    }
}

/// An [`Error`] shown in a job's words (from [`Error::in_words`]).
pub struct InWords<'a> {
    error: &'a Error,
    words: &'a EndWords,
}

impl fmt::Display for InWords<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let words = self.words;
        match self.error {
            Error::Io { action, source } => {
                write!(f, "{}: {}", action.doing(words), IoWords(source))
            }
            Error::Changed(side) => write!(
                f,
                "{} changed since it was scanned; left alone",
                words.end(*side)
            ),
            Error::Delta { action, source } => write!(f, "{}: {source}", action.doing(words)),
            Error::InPlaceFailed { cause, recovery } => {
                match cause.as_ref() {
                    Error::Changed(side) => {
                        write!(f, "{} changed during the update", words.end(*side))?
                    }
                    cause => write!(f, "{}", cause.in_words(words))?,
                }
                match recovery {
                    Ok(rec) => write!(
                        f,
                        "; the partly updated file was moved to {}",
                        accord_model::escape_for_display(rec)
                    ),
                    Err(e) => write!(
                        f,
                        "; moving the partly updated file aside failed: {}",
                        IoWords(e)
                    ),
                }
            }
            Error::HalfUpdated => write!(
                f,
                "{} holds a half-finished in-place update (an earlier run stopped); not copied",
                words.read
            ),
            other => other.fmt_same_in_every_job(f),
        }
    }
}

impl Error {
    /// The messages that name no end of a copy.
    fn fmt_same_in_every_job(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InterruptedInPlace { recovery } => {
                f.write_str(
                    "was being updated in place when an earlier run stopped, \
                     so it held a mix of old and new data; ",
                )?;
                match recovery {
                    Ok(rec) => write!(
                        f,
                        "it was moved to {} and is copied again",
                        accord_model::escape_for_display(rec)
                    ),
                    Err(e) => write!(f, "moving it aside failed: {}", IoWords(e)),
                }
            }
            Error::LeaderNotFile(leader) => {
                write!(f, "cannot link to {}: not a file", leader.display())
            }
            Error::LeaderNotWritten(leader) => write!(
                f,
                "not linked: the first file of its hard-link group, {}, was not updated",
                leader.display()
            ),
            Error::Scan(msg) => f.write_str(msg),
            // Named by `InWords`, which calls this only for the others.
            _ => write!(f, "{}", self.in_words(&EndWords::NEUTRAL)),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Delta { source, .. } => Some(source),
            Error::InPlaceFailed { cause, .. } => Some(cause.as_ref()),
            _ => None,
        }
    }
}
