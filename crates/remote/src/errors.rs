//! The engine's per-path errors as they cross the wire, and back. The
//! numbers are part of the protocol: add, never renumber.

use accord_proto::msg::{WireError, CODE_DENIED, CODE_PROTOCOL};
use accord_replica::{Action, End, Error};
use std::io;

const ACTIONS: [Action; 16] = [
    Action::OpenSource,
    Action::ReadSource,
    Action::OpenDestination,
    Action::WriteTemp,
    Action::Flush,
    Action::Replace,
    Action::SetProps,
    Action::MakeDir,
    Action::MakeLink,
    Action::MakeNode,
    Action::Delete,
    Action::ListDir,
    Action::UpdateInPlace,
    Action::Fingerprint,
    Action::Scan,
    Action::Rename,
];

fn action_code(a: Action) -> u8 {
    ACTIONS.iter().position(|x| *x == a).unwrap_or(0) as u8
}

fn action_of(c: u8) -> Action {
    ACTIONS.get(c as usize).copied().unwrap_or(Action::Scan)
}

fn end_code(s: End) -> u8 {
    match s {
        End::Read => 0,
        End::Written => 1,
    }
}

fn end_of(c: u8) -> End {
    if c == 0 {
        End::Read
    } else {
        End::Written
    }
}

fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(0)
}

fn io_back(errno: i32, message: &str) -> io::Error {
    if errno > 0 {
        io::Error::from_raw_os_error(errno)
    } else {
        io::Error::other(message.to_string())
    }
}

fn wire(code: u8, action: Action, errno: i32, message: String) -> WireError {
    WireError {
        code,
        action: action_code(action),
        side: 0,
        errno,
        message,
        path: None,
    }
}

/// An engine error, for the wire.
pub fn to_wire(e: &Error) -> WireError {
    let message = e.to_string();
    match e {
        Error::Io { action, source } => wire(1, *action, errno_of(source), source.to_string()),
        Error::Changed(side) => WireError {
            side: end_code(*side),
            ..wire(2, Action::Scan, 0, message)
        },
        // The receiver's check of a delta's result: the sender redoes the
        // file whole, so it must know this case from a damaged delta.
        Error::Delta {
            action,
            source: accord_delta::DeltaError::ChecksumMismatch,
        } => wire(10, *action, 0, message),
        Error::Delta { action, source } => {
            let errno = match source {
                accord_delta::DeltaError::Io(io) => errno_of(io),
                _ => 0,
            };
            wire(3, *action, errno, source.to_string())
        }
        Error::InPlaceFailed { cause, recovery } => WireError {
            errno: match &**cause {
                Error::Io { source, .. } => errno_of(source),
                _ => 0,
            },
            path: recovery.as_ref().ok().cloned(),
            ..wire(4, Action::UpdateInPlace, 0, cause.to_string())
        },
        Error::HalfUpdated => wire(5, Action::Scan, 0, message),
        Error::InterruptedInPlace { recovery } => WireError {
            path: recovery.as_ref().ok().cloned(),
            ..wire(6, Action::UpdateInPlace, 0, message)
        },
        Error::LeaderNotFile(p) => WireError {
            path: Some(p.as_bytes().to_vec()),
            ..wire(7, Action::MakeLink, 0, message)
        },
        Error::LeaderNotWritten(p) => WireError {
            path: Some(p.as_bytes().to_vec()),
            ..wire(8, Action::MakeLink, 0, message)
        },
        Error::Scan(m) => wire(9, Action::Scan, 0, m.clone()),
    }
}

/// An error that came over the wire, as the engine's. A code this build
/// does not know becomes an I/O error carrying the peer's message.
pub fn from_wire(w: WireError) -> Error {
    let action = action_of(w.action);
    let recovery = || match &w.path {
        Some(p) => Ok(p.clone()),
        None => Err(io::Error::other("the remote side could not move it aside")),
    };
    let path = || {
        w.path
            .as_deref()
            .and_then(|p| accord_model::RelPath::new(p).ok())
            .unwrap_or_default()
    };
    match w.code {
        1 => Error::Io {
            action,
            source: io_back(w.errno, &w.message),
        },
        2 => Error::Changed(end_of(w.side)),
        3 => Error::Delta {
            action,
            source: if w.errno > 0 {
                accord_delta::DeltaError::Io(io::Error::from_raw_os_error(w.errno))
            } else {
                accord_delta::DeltaError::Corrupt(w.message.clone())
            },
        },
        10 => Error::Delta {
            action,
            source: accord_delta::DeltaError::ChecksumMismatch,
        },
        4 => Error::InPlaceFailed {
            cause: Box::new(Error::Io {
                action: Action::UpdateInPlace,
                source: io_back(w.errno, &w.message),
            }),
            recovery: recovery(),
        },
        5 => Error::HalfUpdated,
        6 => Error::InterruptedInPlace {
            recovery: recovery(),
        },
        7 => Error::LeaderNotFile(path()),
        8 => Error::LeaderNotWritten(path()),
        9 => Error::Scan(w.message),
        11 => Error::Io {
            action,
            source: io::Error::new(io::ErrorKind::OutOfMemory, w.message),
        },
        CODE_DENIED => Error::Io {
            action,
            source: io::Error::new(io::ErrorKind::PermissionDenied, w.message),
        },
        CODE_PROTOCOL => Error::Io {
            action,
            source: io::Error::new(io::ErrorKind::InvalidData, w.message),
        },
        _ => Error::Io {
            action,
            source: io::Error::other(w.message),
        },
    }
}

/// A refusal of the server's own (a read-only root, a bad request).
pub fn denied(message: impl Into<String>) -> WireError {
    wire(CODE_DENIED, Action::Scan, libc::EACCES, message.into())
}

/// A request the server could not make sense of.
pub fn protocol(message: impl Into<String>) -> WireError {
    wire(CODE_PROTOCOL, Action::Scan, 0, message.into())
}

/// A request that needs more memory than the session may hold now.
pub fn over_budget(action: Action, e: crate::budget::OverBudget) -> WireError {
    wire(11, action, 0, e.to_string())
}

/// An I/O error outside a seam call (opening a directory, reading a body).
pub fn io_error(action: Action, e: &io::Error) -> WireError {
    wire(1, action, errno_of(e), e.to_string())
}
