//! `accord server`: the far side of a remote root. Started by the client
//! over ssh, it speaks the protocol on stdin and stdout (nothing else may
//! be written there) and logs to stderr.

use crate::exit;
use accord_remote::{serve, ServerConfig};
use std::path::PathBuf;

/// Serve one session on stdin/stdout (started over ssh by `accord mirror`
/// with a remote root), or, with --listen or --config, be the TCP daemon
/// of accord:// roots.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "In an authorized_keys line, `command=\"accord server --restrict DIR\"` \
limits a key to one tree (as rrsync does for rsync): every root the client asks for is taken \
inside DIR and may not leave it; add --read-only to refuse every write."
)]
pub struct ServerArgs {
    /// Take every root inside DIR and refuse any that leaves it.
    #[arg(long, value_name = "DIR")]
    restrict: Option<PathBuf>,
    /// Refuse every write.
    #[arg(long)]
    read_only: bool,
    /// Skip the fsyncs (faster; a crash may lose the latest writes).
    #[arg(long)]
    no_fsync: bool,
    #[command(flatten)]
    daemon: crate::cmd_daemon::DaemonArgs,
}

pub fn run(args: ServerArgs) -> i32 {
    if args.daemon.wanted() && (args.restrict.is_some() || args.read_only) {
        eprintln!("accord server: --restrict and --read-only are for ssh sessions; a daemon's modules say what each serves");
        return exit::USAGE;
    }
    if !args.daemon.wanted() && args.daemon.log.given() {
        eprintln!("accord server: -v and --log-file are for the daemon (--listen or --config); an ssh session's messages go to its client");
        return exit::USAGE;
    }
    if let Some(dir) = &args.restrict {
        if let Err(e) = std::fs::metadata(dir) {
            eprintln!("accord server: --restrict {}: {e}", dir.display());
            return exit::USAGE;
        }
    }
    let cfg = ServerConfig {
        restrict: args.restrict.clone(),
        read_only: args.read_only,
        state_dir: std::env::var_os("ACCORD_STATE_DIR")
            .map(PathBuf::from)
            .or_else(crate::cmd_mirror::default_state_dir),
        archive_dir: std::env::var_os("ACCORD_STATE_DIR")
            .map(PathBuf::from)
            .or_else(crate::cmd_sync::default_archive_dir),
        local: accord_engine::LocalOptions {
            fsync: !args.no_fsync,
            ..Default::default()
        },
        ..Default::default()
    };
    if args.daemon.wanted() {
        return crate::cmd_daemon::run(&args.daemon, &cfg);
    }
    let stdin = Box::new(std::io::stdin());
    let stdout = Box::new(std::io::stdout());
    match serve(stdin, stdout, &cfg) {
        Ok(()) => exit::OK,
        Err(why) => {
            eprintln!("accord server: {why}");
            exit::FATAL
        }
    }
}
