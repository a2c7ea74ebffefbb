//! `accord://host[:port]/MODULE/path`: a root served by `accord server
//! --listen`, reached over TCP with our own key and the server's pinned
//! key (see `noise`).

use crate::client::{ConnectError, RemoteReplica};
use crate::keys::{self, KeyPair, PublicKey, DEFAULT_PORT};
use crate::noise::{self, HandshakeError};
use crate::ssh::RemoteSpec;
use accord_proto::RootMode;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Longest wait for the TCP connection and for each handshake message.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);

/// The reading and writing halves of an encrypted session.
pub type Halves = (Box<dyn Read + Send>, Box<dyn Write + Send>);

/// How to reach a daemon.
#[derive(Clone, Debug, Default)]
pub struct DaemonOptions {
    /// Our private key file.
    pub key: PathBuf,
    /// The server's public key file (`--server-key`); without it, the key
    /// pinned for the server in `known_servers`.
    pub server_key: Option<PathBuf>,
    pub known_servers: Option<PathBuf>,
    /// Ask for zstd compression at this level (`-z`).
    pub compress: Option<i32>,
}

/// `host:port` as the known-servers file names a server.
pub fn host_port(spec: &RemoteSpec) -> String {
    let port = spec.port.unwrap_or(DEFAULT_PORT);
    if spec.host.contains(':') {
        format!("[{}]:{port}", spec.host)
    } else {
        format!("{}:{port}", spec.host)
    }
}

/// Connect to the daemon `spec` names and ask for its root.
pub fn connect_daemon(
    spec: &RemoteSpec,
    opts: &DaemonOptions,
    mode: RootMode,
) -> Result<RemoteReplica, String> {
    let shown = spec.display();
    let (reader, writer) = dial_daemon(spec, opts)?;
    let root = spec.path.as_bytes();
    match RemoteReplica::connect(reader, writer, root, mode, opts.compress) {
        Ok(r) => Ok(r.with_name(shown)),
        Err(ConnectError::Refused { message, .. }) => Err(format!("{shown}: {message}")),
        Err(e) => Err(format!("{shown}: {e}")),
    }
}

/// The two halves of an encrypted session with the daemon `spec` names,
/// its key checked against the pinned one and ours proved to it (whether
/// the daemon lets our key in, it says in its answer to our first request).
pub fn dial_daemon(spec: &RemoteSpec, opts: &DaemonOptions) -> Result<Halves, String> {
    let shown = spec.display();
    if spec.user.is_some() {
        return Err(format!(
            "{shown}: an accord:// root takes no user name (the key says who you are)"
        ));
    }
    let key = KeyPair::load(&opts.key)?;
    let pinned = pinned_keys(spec, opts)?;
    let mut stream = dial(spec)?;
    let check = |k: &PublicKey| check_server_key(spec, opts, &pinned, k);
    let session = noise::client(&mut stream, &key, check).map_err(|e| match e {
        HandshakeError::Untrusted(m) => m,
        HandshakeError::Refused(m) => format!("{shown}: the server refused: {m}"),
        e => format!("{shown}: {e}"),
    })?;
    // Past the handshake the server answers at its own pace (a scan of a
    // big tree): no timeout on the session itself.
    let _ = stream.set_read_timeout(None);
    let _ = stream.set_write_timeout(None);
    let (reader, writer, _) =
        noise::split(&stream, session, None).map_err(|e| format!("{shown}: {e}"))?;
    Ok((Box::new(reader), Box::new(writer)))
}

/// Open the TCP connection (each address the name has, in turn).
fn dial(spec: &RemoteSpec) -> Result<TcpStream, String> {
    let port = spec.port.unwrap_or(DEFAULT_PORT);
    let addrs = (spec.host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| format!("{}: {e}", spec.host))?;
    let mut last = format!("{}: no address", spec.host);
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                let _ = s.set_read_timeout(Some(CONNECT_TIMEOUT));
                let _ = s.set_write_timeout(Some(CONNECT_TIMEOUT));
                return Ok(s);
            }
            Err(e) => last = format!("cannot connect to {}: {e}", host_port(spec)),
        }
    }
    Err(last)
}

/// The keys the server may have: the one `--server-key` names, or those
/// pinned for it in the known-servers file.
fn pinned_keys(spec: &RemoteSpec, opts: &DaemonOptions) -> Result<Vec<PublicKey>, String> {
    if let Some(path) = &opts.server_key {
        return PublicKey::load(path).map(|k| vec![k]);
    }
    match &opts.known_servers {
        Some(path) => keys::known_server_keys(path, &host_port(spec)),
        None => Ok(Vec::new()),
    }
}

/// Go on only with a server whose key was pinned. There is no trust on
/// first use: an unknown key is shown with how to pin it, and the user
/// decides out of band.
fn check_server_key(
    spec: &RemoteSpec,
    opts: &DaemonOptions,
    pinned: &[PublicKey],
    key: &PublicKey,
) -> Result<(), String> {
    if pinned.contains(key) {
        return Ok(());
    }
    let hp = host_port(spec);
    let file = opts
        .known_servers
        .as_deref()
        .map(Path::display)
        .map(|d| d.to_string())
        .unwrap_or_else(|| "~/.config/accord/known_servers".into());
    if pinned.is_empty() {
        return Err(format!(
            "{hp}: the server's key is not known, so nothing was sent; it offered\n  {}\n\
             If that is the key in the server's key file (its .pub; the daemon also logs it as it starts), \
             pin it with\n  echo '{hp} {}' >> {file}\nor pass --server-key FILE.",
            key.to_line(),
            key.to_line()
        ));
    }
    let source = match &opts.server_key {
        Some(p) => format!("--server-key {}", p.display()),
        None => file,
    };
    Err(format!(
        "WARNING: {hp} offered the key\n  {}\nwhich is NOT the key pinned for it in {source}.\n\
         Someone may be intercepting the connection, or the server's key was changed. \
         Nothing was sent. If the server's key really changed, replace its line in {source}.",
        key.to_line()
    ))
}
