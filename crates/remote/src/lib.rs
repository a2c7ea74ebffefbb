//! Remote replicas: the `RemoteReplica` client of the replica seam, the
//! `accord server` that answers it over any byte stream, and the ssh
//! transport that starts one on another host.

mod client;
mod compress;
mod errors;
mod mux;
mod server;
mod ssh;

pub use accord_proto::RootMode;
pub use client::{ConnectError, RemoteReplica};
pub use compress::DEFAULT_LEVEL as DEFAULT_COMPRESS_LEVEL;
pub use server::{serve, ServerConfig};
pub use ssh::{connect_ssh, parse_remote, RemoteSpec, SshOptions};
