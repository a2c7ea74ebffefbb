//! `accord server --listen … | --config …`: the flags of the TCP daemon,
//! merged with its configuration file into `accord_remote::DaemonConfig`.
//! It logs to stderr or `--log-file` (`crate::logging`): a line as it
//! starts, then one per connection (who, which module, how it ended).

use crate::exit;
use accord_remote::keys::{self, AuthorizedKeys, KeyPair, DEFAULT_PORT};
use accord_remote::{check_modules, parse_module_arg, ConfigFile, DaemonConfig};
use std::path::PathBuf;
use std::time::Duration;

/// Authenticated sessions at once unless configured.
const DEFAULT_MAX_CONNECTIONS: usize = 64;
/// Connections still in their handshake at once unless configured. A real
/// client is through it in milliseconds, so these places only fill up with
/// peers that have no key; a waiting handshake costs a thread blocked on
/// its socket (tens of KiB), so hundreds of slow peers fit before any is
/// cut short, and the threads stay bounded.
const DEFAULT_MAX_HANDSHAKES: usize = 256;
/// Of those, from one address (one IPv6 /64) unless configured: more than
/// a host, or an office behind one address, starts at once, and few
/// enough that one address alone cannot fill the pool.
const DEFAULT_MAX_HANDSHAKES_PER_ADDRESS: usize = 32;
/// Seconds without traffic before a connection is closed, unless configured.
const DEFAULT_IDLE_TIMEOUT: u64 = 300;

#[derive(clap::Args, Debug, Default)]
pub struct DaemonArgs {
    /// Serve accord:// clients on ADDR (HOST:PORT, or HOST for port 8730)
    /// instead of one session on stdin/stdout.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// A directory to serve as MODULE (":ro": read-only); repeatable.
    #[arg(long = "module", value_name = "NAME=PATH[:ro]")]
    modules: Vec<String>,
    /// The client keys let in (lines "accord-x25519 BASE64 COMMENT").
    #[arg(long, value_name = "FILE")]
    auth_keys: Option<PathBuf>,
    /// The daemon's private key [default: the one `accord keygen` makes].
    #[arg(long, value_name = "FILE")]
    key: Option<PathBuf>,
    /// A TOML file with listen, key, auth_keys, max_connections,
    /// max_per_address, max_handshakes, max_handshakes_per_address,
    /// idle_timeout and [modules.NAME] tables (path, read_only); flags
    /// given as well override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Most authenticated sessions at once; a client with a known key
    /// over it is told the server is busy [default: 64].
    #[arg(long, value_name = "N")]
    max_connections: Option<usize>,
    /// Most authenticated sessions at once from one address (one IPv6
    /// /64) [default: no limit but --max-connections].
    #[arg(long, value_name = "N")]
    max_per_address: Option<usize>,
    /// Most connections still in their handshake (no key proved yet).
    /// When all are taken a newcomer is still let in: the oldest pending
    /// handshake is closed [default: 256].
    #[arg(long, value_name = "N")]
    max_handshakes: Option<usize>,
    /// Most connections in their handshake from one address (one IPv6
    /// /64); one more closes that address's oldest [default: 32].
    #[arg(long, value_name = "N")]
    max_handshakes_per_address: Option<usize>,
    /// Close a connection after SECS seconds without traffic [default: 300].
    #[arg(long, value_name = "SECS")]
    idle_timeout: Option<u64>,
    /// Memory all sessions together may hold for their clients' large
    /// requests (deltas, signatures, a sync's records), beyond 4 MiB each;
    /// a request that does not fit fails with a message [default: 256].
    #[arg(long, value_name = "MIB")]
    max_memory: Option<u64>,
    #[command(flatten)]
    pub log: crate::logging::LogArgs,
}

impl DaemonArgs {
    /// Whether the daemon was asked for (rather than a stdio session).
    pub fn wanted(&self) -> bool {
        self.listen.is_some() || self.config.is_some()
    }
}

pub fn run(args: &DaemonArgs, server: &accord_remote::ServerConfig) -> i32 {
    let cfg = match config(args, server) {
        Ok(cfg) => cfg,
        Err(e) => {
            eprintln!("accord server: {e}");
            return exit::USAGE;
        }
    };
    if let Err(e) = crate::logging::init(&args.log) {
        eprintln!("accord server: {e}");
        return exit::USAGE;
    }
    log_settings(&cfg);
    match accord_remote::run_daemon(cfg) {
        Ok(()) => exit::OK,
        Err(e) => {
            tracing::error!("accord server: {e}");
            exit::FATAL
        }
    }
}

/// The settings in effect, file and flags merged (debug: `-v`).
fn log_settings(cfg: &DaemonConfig) {
    for (name, m) in &cfg.modules {
        let mode = if m.read_only {
            "read-only"
        } else {
            "read-write"
        };
        tracing::debug!(
            "accord server: module {name}: {} ({mode})",
            m.path.display()
        );
    }
    let per_address = cfg
        .max_per_address
        .map_or("no limit".to_string(), |n| n.to_string());
    tracing::debug!(
        "accord server: {} authorized keys; at most {} sessions ({per_address} per address), \
         {} handshakes ({} per address), {} MiB for large requests; idle timeout {} s",
        cfg.authorized.len(),
        cfg.max_connections,
        cfg.max_handshakes,
        cfg.max_handshakes_per_address,
        cfg.max_memory >> 20,
        cfg.idle_timeout.as_secs()
    );
    let shown = |d: &Option<PathBuf>| {
        d.as_ref()
            .map_or("none".into(), |d| d.display().to_string())
    };
    tracing::debug!(
        "accord server: state files in {}, sync archives in {}",
        shown(&cfg.state_dir),
        shown(&cfg.archive_dir)
    );
}

/// The file's settings, then the flags over them.
fn config(args: &DaemonArgs, server: &accord_remote::ServerConfig) -> Result<DaemonConfig, String> {
    let file = match &args.config {
        Some(p) => ConfigFile::load(p)?,
        None => ConfigFile::default(),
    };
    let mut modules = file.modules();
    for m in &args.modules {
        let (name, module) = parse_module_arg(m)?;
        modules.insert(name, module);
    }
    check_modules(&modules)?;
    let listen = args.listen.clone().or(file.listen.clone());
    let listen =
        listen.ok_or("no address to listen on: give --listen or `listen` in the config")?;
    let auth = args.auth_keys.clone().or(file.auth_keys.clone());
    let auth = auth.ok_or(
        "no authorized keys: give --auth-keys FILE or `auth_keys` in the config (there is no anonymous access)",
    )?;
    let authorized = AuthorizedKeys::load(&auth)?;
    if authorized.is_empty() {
        return Err(format!(
            "{}: no keys in it, so nobody could connect",
            auth.display()
        ));
    }
    let key_path = args
        .key
        .clone()
        .or(file.key.clone())
        .or_else(keys::default_key_path);
    let key_path = key_path.ok_or("no key: give --key FILE")?;
    let idle = args
        .idle_timeout
        .or(file.idle_timeout)
        .unwrap_or(DEFAULT_IDLE_TIMEOUT);
    let max = args.max_connections.or(file.max_connections);
    let handshakes = args.max_handshakes.or(file.max_handshakes);
    let handshakes_here = args
        .max_handshakes_per_address
        .or(file.max_handshakes_per_address);
    Ok(DaemonConfig {
        listen: with_default_port(&listen),
        modules,
        key: KeyPair::load(&key_path)?,
        authorized,
        max_connections: max.unwrap_or(DEFAULT_MAX_CONNECTIONS).max(1),
        max_per_address: args.max_per_address.or(file.max_per_address),
        max_handshakes: handshakes.unwrap_or(DEFAULT_MAX_HANDSHAKES).max(1),
        max_handshakes_per_address: handshakes_here
            .unwrap_or(DEFAULT_MAX_HANDSHAKES_PER_ADDRESS)
            .max(1),
        idle_timeout: Duration::from_secs(idle.max(1)),
        state_dir: server.state_dir.clone(),
        archive_dir: server.archive_dir.clone(),
        local: server.local,
        max_memory: args
            .max_memory
            .or(file.max_memory)
            .unwrap_or(accord_remote::DEFAULT_MAX_MEMORY_MIB)
            .saturating_mul(1 << 20),
    })
}

/// `HOST` → `HOST:8730`; `HOST:PORT` and `[V6]:PORT` stay as they are.
fn with_default_port(addr: &str) -> String {
    let has_port = match addr.rfind(']') {
        Some(close) => addr[close..].contains(':'),
        None => addr.contains(':'),
    };
    if has_port {
        addr.to_string()
    } else {
        format!("{addr}:{DEFAULT_PORT}")
    }
}
