//! `accord`: the command line. Arguments become option structs handed to the
//! library crates; this crate only parses, prints and picks exit codes.

mod cmd_cluster;
mod cmd_daemon;
mod cmd_delta;
mod cmd_docs;
mod cmd_keygen;
mod cmd_mirror;
mod cmd_server;
mod cmd_sync;
mod cmd_sync_set;
mod cmd_tasks;
mod cmd_union;
mod cmd_worker;
mod exit;
mod logging;
mod mirror_rules;
mod mirror_sources;
mod progress;
mod remote_args;
mod root_identities;
mod summary;
mod sync_profile;
mod sync_rules;
mod sync_tui;
mod sync_tui_diff;
mod sync_tui_set;
mod sync_tui_set_view;
mod sync_tui_view;
mod sync_watch;
mod sync_watch_remote;
mod version;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

// The system allocator (glibc): a walk allocates and frees a few small
// objects per entry on several threads, and mimalloc kept the pages freed
// on each worker thread, so a no-change mirror of 200,000 files peaked at
// 1.62x the memory of one of 20,000 (11.5 against 7.1 MB) where glibc peaks
// at 1.29x (8.0 against 6.2 MB); glibc cost 3% more wall time on that run
// (15 paired runs, median ratio 1.03).

/// Accord keeps directory trees in agreement: two-way sync, one-way mirror
/// with delta transfer, parallel and distributed copies, and a union file system.
#[derive(Parser)]
#[command(name = "accord", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Two-way synchronisation of two roots (one of them may be remote), or of a profile.
    Sync(cmd_sync::SyncArgs),
    /// Make DST an exact copy of SRC.
    Mirror(Box<cmd_mirror::MirrorArgs>),
    /// Signatures, deltas and patches of single files (rsync-style, with true in-place patching).
    Delta(cmd_delta::DeltaArgs),
    /// A union file system over FUSE.
    Union(cmd_union::UnionArgs),
    /// The far side of a remote root (started over ssh), or the accord:// daemon (--listen).
    Server(cmd_server::ServerArgs),
    /// Make a key pair for accord:// connections.
    Keygen(cmd_keygen::KeygenArgs),
    /// Run the tasks of a cluster run (`accord mirror --cluster`) on this machine.
    Worker(cmd_worker::WorkerArgs),
    /// Look at a cluster run, pause, resume, stop or restart it, list its failures.
    Cluster(cmd_cluster::ClusterArgs),
    /// Print the completion script of a shell (bash, zsh, fish, …) on stdout.
    Completions(cmd_docs::CompletionsArgs),
    /// Write the man pages into a directory (for packagers).
    #[command(hide = true)]
    Man(cmd_docs::ManArgs),
}

/// The command line as parsed, documented and completed.
fn command() -> clap::Command {
    version::describe(Cli::command())
}

fn main() {
    // Run as mount(8)'s helper for type fuse.accord (a link named mount.fuse.accord).
    if let Some(code) = cmd_union::run_as_mount_helper() {
        std::process::exit(code);
    }
    let args = match sync_profile::expand(std::env::args_os().collect()) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("accord sync: {e}");
            std::process::exit(exit::USAGE);
        }
    };
    // The matches are kept: a mirror's --exclude, --include and --filter
    // decide in the order they were given (see mirror_rules).
    let parsed = command()
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m).map(|cli| (cli, m)));
    let (cli, matches) = match parsed {
        Ok(parsed) => parsed,
        Err(err) => {
            let code = match err.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => 0,
                _ => exit::USAGE,
            };
            let _ = err.print();
            std::process::exit(code);
        }
    };
    let code = match cli.command {
        Command::Sync(args) => cmd_sync::run(args),
        Command::Mirror(args) => {
            let m = matches.subcommand_matches("mirror").unwrap_or(&matches);
            cmd_mirror::run(*args, m)
        }
        Command::Delta(args) => cmd_delta::run(args),
        Command::Union(args) => cmd_union::run(args),
        Command::Server(args) => cmd_server::run(args),
        Command::Keygen(args) => cmd_keygen::run(args),
        Command::Worker(args) => cmd_worker::run(args),
        Command::Cluster(args) => cmd_cluster::run(args),
        Command::Completions(args) => cmd_docs::completions(&args, command()),
        Command::Man(args) => cmd_docs::man(&args, command()),
    };
    std::process::exit(code);
}
