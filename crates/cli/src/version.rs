//! What `accord --version` says: the release, the protocol it speaks (a
//! remote root needs the same protocol at the far end) and what this build
//! can do, as `rsync --version` lists its capabilities.

use accord_proto::hello::VERSION as PROTOCOL;
use std::sync::OnceLock;

/// `cmd` with `-V` giving `0.1.0 (protocol N)` and `--version` adding the
/// features and which releases talk to each other.
pub fn describe(cmd: clap::Command) -> clap::Command {
    cmd.version(short()).long_version(long())
}

fn short() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| format!("{} (protocol {PROTOCOL})", env!("CARGO_PKG_VERSION")))
}

fn long() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "{}\nfeatures: {}\n\
             remote roots: the far end (over ssh or accord://) must run an accord of protocol {PROTOCOL}; \
             another protocol is refused at the handshake. With an older release of protocol {PROTOCOL}, \
             what it lacks is done another way (renames as copies, --watch by periodic runs, \
             no compression, deltas with raw literals) or refused with a message (a sync's --exclude and --follow)",
            short(),
            features().join(", ")
        )
    })
}

/// What this build does beyond local mirrors and syncs.
fn features() -> Vec<&'static str> {
    let mut f = vec![
        "remote roots over ssh",
        "accord:// daemon (Noise, X25519 keys)",
        "zstd compression",
        "sync --watch (inotify)",
        "union file system (FUSE)",
        "cluster runs (Redis)",
    ];
    if cfg!(feature = "test-hooks") {
        f.push("test hooks (a build for the test suite, not for use)");
    }
    f
}
