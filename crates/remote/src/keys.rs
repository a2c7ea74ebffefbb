//! The daemon's static X25519 keys and the files that hold them: a private
//! key file (`accord-x25519-private BASE64`, mode 0600), its public half
//! (`accord-x25519 BASE64 comment`, one line, the format every list of
//! keys uses), the server's list of authorized client keys, and the
//! client's list of pinned server keys (`known_servers`).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use std::collections::HashMap;
use std::fs;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The word that starts a public key line.
pub const KEY_TYPE: &str = "accord-x25519";
/// The word that starts a private key file.
const PRIVATE_TYPE: &str = "accord-x25519-private";
/// Largest key or key-list file read (a list of a few thousand keys).
const MAX_KEY_FILE: u64 = 4 << 20;
/// The default TCP port of `accord server --listen` and `accord://` roots.
pub const DEFAULT_PORT: u16 = 8730;

/// A static public key.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PublicKey(pub [u8; 32]);

impl PublicKey {
    /// Parse `accord-x25519 BASE64 [comment]`; the key and the comment.
    pub fn parse(line: &str) -> Result<(PublicKey, String), String> {
        let mut words = line.split_whitespace();
        if words.next() != Some(KEY_TYPE) {
            return Err(format!("a public key line starts with {KEY_TYPE}"));
        }
        let b64 = words.next().ok_or("the key is missing after its type")?;
        let key = decode_key(b64)?;
        let comment = words.collect::<Vec<_>>().join(" ");
        Ok((PublicKey(key), comment))
    }

    /// Read a public key file (the first key line in it).
    pub fn load(path: &Path) -> Result<PublicKey, String> {
        let text = read_small(path)?;
        let line = key_lines(&text)
            .next()
            .ok_or_else(|| format!("{}: no {KEY_TYPE} key in it", path.display()))?;
        PublicKey::parse(line)
            .map(|(k, _)| k)
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// `accord-x25519 BASE64`, as it is written in key lists.
    pub fn to_line(&self) -> String {
        format!("{KEY_TYPE} {}", B64.encode(self.0))
    }
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_line())
    }
}

fn decode_key(b64: &str) -> Result<[u8; 32], String> {
    let bytes = B64
        .decode(b64)
        .map_err(|e| format!("the key is not base64: {e}"))?;
    bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("a key is 32 bytes, this one {}", b.len()))
}

/// Lines that are not blank and not `#` comments.
fn key_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// Read a key file or key list, bounded.
fn read_small(path: &Path) -> Result<String, String> {
    let file = fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut text = String::new();
    file.take(MAX_KEY_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if text.len() as u64 > MAX_KEY_FILE {
        return Err(format!("{}: larger than a key file can be", path.display()));
    }
    Ok(text)
}

/// A static key pair.
pub struct KeyPair {
    private: [u8; 32],
    pub public: PublicKey,
}

impl KeyPair {
    /// A new random key pair.
    pub fn generate() -> Result<KeyPair, String> {
        let builder = snow::Builder::new(crate::noise::params());
        let pair = builder
            .generate_keypair()
            .map_err(|e| format!("cannot make a key: {e}"))?;
        let private: [u8; 32] = pair.private[..].try_into().map_err(|_| "a bad key size")?;
        Ok(KeyPair::from_private(private))
    }

    /// The pair of a private key (its public half is computed).
    pub fn from_private(private: [u8; 32]) -> KeyPair {
        use snow::resolvers::{CryptoResolver, DefaultResolver};
        let mut dh = DefaultResolver
            .resolve_dh(&snow::params::DHChoice::Curve25519)
            .expect("the default resolver has X25519");
        dh.set(&private);
        let mut public = [0u8; 32];
        public.copy_from_slice(dh.pubkey());
        KeyPair {
            private,
            public: PublicKey(public),
        }
    }

    pub fn private(&self) -> &[u8; 32] {
        &self.private
    }

    /// Read a private key file. Like ssh, refuse one that others may read:
    /// the key would no longer say who is connecting.
    pub fn load(path: &Path) -> Result<KeyPair, String> {
        let shown = path.display();
        let meta = fs::metadata(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => {
                format!("{shown}: no such key file (make one with `accord keygen -f {shown}`)")
            }
            _ => format!("{shown}: {e}"),
        })?;
        let text = read_small(path)?;
        let mut words = text.split_whitespace();
        match words.next() {
            Some(PRIVATE_TYPE) => {}
            Some(KEY_TYPE) => {
                return Err(format!(
                    "{shown}: not an accord private key file (a public key: give the file without .pub)"
                ))
            }
            _ => return Err(format!("{shown}: not an accord private key file")),
        }
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(format!(
                "{shown}: other users may read this private key; `chmod 600 {shown}` first"
            ));
        }
        let b64 = words.next().ok_or(format!("{shown}: the key is missing"))?;
        let private = decode_key(b64).map_err(|e| format!("{shown}: {e}"))?;
        Ok(KeyPair::from_private(private))
    }

    /// Write this pair to `path` (mode 0600) and `path.pub`, refusing to
    /// replace either.
    pub fn save(&self, path: &Path, comment: &str) -> Result<(), String> {
        let public_path = public_path(path);
        for p in [path, &public_path] {
            if fs::symlink_metadata(p).is_ok() {
                return Err(format!("{} already exists; not overwritten", p.display()));
            }
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let private = format!("{PRIVATE_TYPE} {}\n", B64.encode(self.private));
        write_new(path, private.as_bytes(), 0o600)?;
        let public = format!("{} {comment}\n", self.public.to_line());
        write_new(&public_path, public.trim_end().as_bytes(), 0o644)?;
        Ok(())
    }
}

impl Drop for KeyPair {
    fn drop(&mut self) {
        // Do not leave the private key in freed memory.
        for b in self.private.iter_mut() {
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

/// `FILE.pub`: where the public half of the key in `FILE` goes.
pub fn public_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

/// Create `path` (it must not exist) with `mode` and write `bytes` + newline.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), String> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.write_all(b"\n"))
        .and_then(|()| f.sync_all())
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// Where accord's own configuration lives: `$XDG_CONFIG_HOME/accord` or
/// `~/.config/accord`.
pub fn config_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("accord"));
    }
    std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/accord"))
}

/// The key `accord keygen` writes and `--key` reads by default.
pub fn default_key_path() -> Option<PathBuf> {
    config_dir().map(|d| d.join("key"))
}

/// The client's list of pinned server keys.
pub fn default_known_servers() -> Option<PathBuf> {
    config_dir().map(|d| d.join("known_servers"))
}

/// The client keys a daemon lets in, each with its comment (a name for
/// the logs).
#[derive(Default)]
pub struct AuthorizedKeys {
    keys: HashMap<PublicKey, String>,
}

impl AuthorizedKeys {
    /// Read a file of `accord-x25519 BASE64 comment` lines (blank lines
    /// and `#` comments allowed). A bad line is an error, not skipped: a
    /// typo would otherwise lock someone out without a word.
    pub fn load(path: &Path) -> Result<AuthorizedKeys, String> {
        let text = read_small(path)?;
        let mut keys = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (key, comment) =
                PublicKey::parse(line).map_err(|e| format!("{}:{}: {e}", path.display(), n + 1))?;
            keys.insert(key, comment);
        }
        Ok(AuthorizedKeys { keys })
    }

    /// The comment of `key`, if it is authorized.
    pub fn get(&self, key: &PublicKey) -> Option<&str> {
        self.keys.get(key).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// The keys pinned for `host_port` (`host:port`, as written in the file)
/// in a known-servers file of `host:port accord-x25519 BASE64` lines. A
/// missing file pins nothing.
pub fn known_server_keys(path: &Path, host_port: &str) -> Result<Vec<PublicKey>, String> {
    let text = match read_small(path) {
        Ok(t) => t,
        Err(_) if !path.exists() => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        let Some((name, key)) = line.split_once(char::is_whitespace) else {
            continue;
        };
        if line.starts_with('#') || name != host_port {
            continue;
        }
        let (key, _) = PublicKey::parse(key.trim())
            .map_err(|e| format!("{}:{}: {e}", path.display(), n + 1))?;
        found.push(key);
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_pair_loads_back_and_is_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/key");
        let pair = KeyPair::generate().unwrap();
        pair.save(&path, "me@here").unwrap();
        let back = KeyPair::load(&path).unwrap();
        assert_eq!(back.private(), pair.private());
        assert_eq!(back.public, pair.public);
        assert_eq!(PublicKey::load(&public_path(&path)).unwrap(), pair.public);
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert!(pair.save(&path, "again").is_err());
    }

    #[test]
    fn key_lines_are_checked() {
        let pair = KeyPair::generate().unwrap();
        let line = format!("{} alice", pair.public.to_line());
        assert_eq!(
            PublicKey::parse(&line).unwrap(),
            (pair.public, "alice".into())
        );
        assert!(PublicKey::parse("ssh-ed25519 AAAA").is_err());
        assert!(PublicKey::parse("accord-x25519 AAAA").is_err());
    }
}
