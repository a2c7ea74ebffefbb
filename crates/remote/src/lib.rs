//! Remote replicas: the `RemoteReplica` client of the replica seam, the
//! `accord server` that answers it over any byte stream, the ssh
//! transport that starts one on another host, and the TCP daemon
//! (`daemon`, `tcp`: Noise-encrypted, key-authenticated).

mod admission;
mod ahead;
mod budget;
mod client;
pub mod compress;
mod daemon;
mod daemon_config;
mod errors;
pub mod keys;
mod mux;
pub mod noise;
mod owners;
mod server;
mod ssh;
mod sync_client;
mod sync_server;
pub mod sync_set_wire;
pub mod sync_wire;
mod tally;
mod tcp;
mod watch_server;

pub use accord_proto::{RootMode, WatchNews};
pub use budget::Pool;
pub use client::{ConnectError, RemoteReplica};
pub use compress::DEFAULT_LEVEL as DEFAULT_COMPRESS_LEVEL;
pub use daemon::{run_daemon, split_module, DaemonConfig, Module, DEFAULT_MAX_MEMORY_MIB};
pub use daemon_config::{check_modules, parse_module_arg, ConfigFile};
pub use server::{serve, Memory, ServerConfig};
pub use ssh::{connect_ssh, parse_remote, RemoteSpec, SshOptions};
pub use tally::Tally;
pub use tcp::{connect_daemon, dial_daemon, DaemonOptions, Halves};
