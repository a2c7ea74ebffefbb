//! The options that reach a remote root, shared by `mirror` and `sync`:
//! ssh's command and the remote program, compression, and the keys of an
//! `accord://` daemon.

use accord_remote::{
    connect_daemon, connect_ssh, keys, DaemonOptions, RemoteReplica, RemoteSpec, RootMode,
    SshOptions, DEFAULT_COMPRESS_LEVEL,
};
use std::path::PathBuf;

#[derive(clap::Args, Debug, Clone)]
pub struct RemoteArgs {
    /// The command that reaches a remote host instead of `ssh` (e.g.
    /// "ssh -p 2222 -i KEY"); `accord server` is run through it.
    #[arg(short = 'e', long, value_name = "CMD")]
    pub rsh: Option<String>,
    /// The accord program on the remote host (when not on its PATH).
    #[arg(long, value_name = "PATH")]
    pub remote_accord: Option<String>,
    /// Compress the connection to a remote root with zstd (both ways).
    #[arg(short = 'z', long)]
    pub compress: bool,
    /// zstd level of -z (1 fastest, 19 smallest; negative: faster still).
    #[arg(long, value_name = "N", allow_negative_numbers = true,
          value_parser = clap::value_parser!(i32).range(-7..=19))]
    pub compress_level: Option<i32>,

    /// Our private key for accord:// roots [default: the one `accord keygen` makes].
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// The accord:// server's public key file, instead of its line in
    /// ~/.config/accord/known_servers.
    #[arg(long, value_name = "FILE")]
    pub server_key: Option<PathBuf>,
}

impl RemoteArgs {
    /// Reach a remote root: over ssh, or a daemon's for `accord://`.
    pub fn connect(&self, spec: &RemoteSpec, mode: RootMode) -> Result<RemoteReplica, String> {
        let compress = (self.compress || self.compress_level.is_some())
            .then(|| self.compress_level.unwrap_or(DEFAULT_COMPRESS_LEVEL));
        if !spec.daemon {
            let opts = SshOptions {
                rsh: self.rsh.clone(),
                remote_accord: self.remote_accord.clone(),
                compress,
            };
            return connect_ssh(spec, &opts, mode);
        }
        let key = self.key.clone().or_else(keys::default_key_path);
        let opts = DaemonOptions {
            key: key.ok_or("no key: give --key FILE (made by `accord keygen`)")?,
            server_key: self.server_key.clone(),
            known_servers: keys::default_known_servers(),
            compress,
        };
        connect_daemon(spec, &opts, mode)
    }
}
