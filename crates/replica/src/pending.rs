//! The handles of calls that may still be on their way: a replica across
//! a wire sends a request and returns one of these at once, so many
//! requests are in flight together; a local replica's are ready.

use crate::error::Error;
use accord_model::Expect;
use std::io;

/// The result of a call that may still be on its way (a remote replica
/// sends the request and returns; the reply is waited for only when the
/// engine needs it, so many requests are in flight at once and a run's
/// time does not grow with round trips times files). A local replica's
/// calls are done when they return: their results are ready.
#[must_use = "a pending result must be waited for"]
pub struct Pending<T>(PendingInner<T>);

enum PendingInner<T> {
    Ready(T),
    Later(Box<dyn FnOnce() -> T + Send>),
}

impl<T> Pending<T> {
    pub fn ready(value: T) -> Pending<T> {
        Pending(PendingInner::Ready(value))
    }

    /// A result that `wait` computes (by waiting for a reply).
    pub fn later(f: impl FnOnce() -> T + Send + 'static) -> Pending<T> {
        Pending(PendingInner::Later(Box::new(f)))
    }

    /// Whether `wait` returns at once (a local replica's result).
    pub fn is_ready(&self) -> bool {
        matches!(self.0, PendingInner::Ready(_))
    }

    pub fn wait(self) -> T {
        match self.0 {
            PendingInner::Ready(v) => v,
            PendingInner::Later(f) => f(),
        }
    }
}

/// A temp file on its way (from `start_receive`, `start_make_node` or
/// `start_link_temp`). A replica that carries out calls in the order they
/// were sent (one across a wire) gives it a handle at once: a commit or
/// discard of the handle may then be started before the temp is known to
/// exist, and the replica refuses it if the temp was never made. This
/// saves a round trip per batch (the commits travel with the receives).
#[must_use = "a pending temp must be waited for"]
pub struct PendingTemp {
    handle: Option<Vec<u8>>,
    made: Pending<Result<Vec<u8>, Error>>,
}

impl PendingTemp {
    /// A temp already made, or a call that failed (a local replica's).
    pub fn ready(made: Result<Vec<u8>, Error>) -> PendingTemp {
        PendingTemp {
            handle: None,
            made: Pending::ready(made),
        }
    }

    /// A temp whose making is on its way, named by `handle` from now on;
    /// `made` gives the same handle back once it exists.
    pub fn named(handle: Vec<u8>, made: Pending<Result<Vec<u8>, Error>>) -> PendingTemp {
        PendingTemp {
            handle: Some(handle),
            made,
        }
    }

    /// The temp's name, usable before `wait` (see the type's comment).
    pub fn handle(&self) -> Option<&[u8]> {
        self.handle.as_deref()
    }

    /// The temp's name once it exists, or why it could not be made.
    pub fn wait(self) -> Result<Vec<u8>, Error> {
        self.made.wait()
    }
}

/// New contents for [`ReplicaDir::receive`].
pub enum Incoming<'a> {
    /// The whole file as a stream.
    Whole(&'a mut dyn io::Read),
    /// An encoded delta against the file now at the same name, which must
    /// still be what `basis` says.
    Delta { basis: Expect, delta: &'a [u8] },
    /// An encoded delta against this name's partial file (what arrived in
    /// an interrupted transfer; see `ReplicaDir::partial_signature`).
    Resume { delta: &'a [u8] },
}

/// How a deletion ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    Done,
    /// Nothing was there any more.
    Gone,
    /// A directory that still holds entries (excluded ones, say).
    NotEmpty,
}
