//! The wire protocol between `accord` and `accord server` (see
//! `docs/protocol.md`): the handshake, frames on numbered streams with
//! credit-based flow control, and the messages, which are the calls of the
//! replica crate's seam (`accord_replica::Replica`). Bytes in, bytes out: nothing here touches a file
//! or a socket; every decoder bounds what it reads before it allocates.

pub mod codec;
pub mod frame;
pub mod hello;
pub mod limits;
pub mod msg;
pub mod wire;

pub use frame::{Frame, FrameError, FrameKind};
pub use hello::{Hello, HelloError, Refusal, RootMode, Welcome};
pub use msg::{Basis, ListOptions, Request, WatchNews, WireError};
pub use wire::{Dec, Enc, ProtoError};
