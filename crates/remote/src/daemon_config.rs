//! The daemon's configuration file (TOML) and `--module NAME=PATH[:ro]`.
//!
//! ```toml
//! listen = "0.0.0.0:8730"
//! key = "key"                      # paths are taken from the file's directory
//! auth_keys = "authorized_keys"
//! max_connections = 64             # authenticated sessions
//! max_per_address = 8              # sessions from one address (no limit if absent)
//! max_handshakes = 256             # connections still in their handshake
//! max_handshakes_per_address = 32
//! idle_timeout = 300               # seconds
//! max_memory = 256                 # MiB, for all sessions' large requests
//! [modules.photos]
//! path = "/srv/photos"
//! read_only = true
//! ```

use crate::daemon::Module;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Largest configuration file read.
const MAX_CONFIG: u64 = 1 << 20;

/// What a configuration file may say; every field optional, so that
/// flags can complete it.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    pub listen: Option<String>,
    pub key: Option<PathBuf>,
    pub auth_keys: Option<PathBuf>,
    pub max_connections: Option<usize>,
    pub max_per_address: Option<usize>,
    pub max_handshakes: Option<usize>,
    pub max_handshakes_per_address: Option<usize>,
    /// Seconds.
    pub idle_timeout: Option<u64>,
    /// MiB.
    pub max_memory: Option<u64>,
    #[serde(default)]
    pub modules: BTreeMap<String, ModuleEntry>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModuleEntry {
    pub path: PathBuf,
    #[serde(default)]
    pub read_only: bool,
}

impl ConfigFile {
    /// Read and check `path`; relative paths in it are made relative to
    /// its directory (not to wherever the daemon was started).
    pub fn load(path: &Path) -> Result<ConfigFile, String> {
        use std::io::Read;
        let shown = path.display();
        let mut text = String::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_CONFIG).read_to_string(&mut text))
            .map_err(|e| format!("{shown}: {e}"))?;
        let mut cfg: ConfigFile = toml::from_str(&text).map_err(|e| format!("{shown}: {e}"))?;
        let base = path.parent().unwrap_or(Path::new("."));
        for p in [&mut cfg.key, &mut cfg.auth_keys].into_iter().flatten() {
            *p = base.join(&*p);
        }
        for m in cfg.modules.values_mut() {
            m.path = base.join(&m.path);
        }
        for name in cfg.modules.keys() {
            check_module_name(name).map_err(|e| format!("{shown}: {e}"))?;
        }
        Ok(cfg)
    }

    /// The modules, as the daemon takes them.
    pub fn modules(&self) -> BTreeMap<String, Module> {
        self.modules
            .iter()
            .map(|(name, m)| {
                let module = Module {
                    path: m.path.clone(),
                    read_only: m.read_only,
                };
                (name.clone(), module)
            })
            .collect()
    }
}

/// A module name is one path component that a URL can carry plainly.
pub fn check_module_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-+".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a module name (letters, digits, '.', '_', '-', '+')"
        ))
    }
}

/// `NAME=PATH` or `NAME=PATH:ro`.
pub fn parse_module_arg(arg: &str) -> Result<(String, Module), String> {
    let (name, path) = arg
        .split_once('=')
        .ok_or_else(|| format!("--module {arg:?}: write NAME=PATH or NAME=PATH:ro"))?;
    check_module_name(name)?;
    let (path, read_only) = match path.strip_suffix(":ro") {
        Some(p) => (p, true),
        None => (path.strip_suffix(":rw").unwrap_or(path), false),
    };
    if path.is_empty() {
        return Err(format!("--module {arg:?}: the path is empty"));
    }
    let module = Module {
        path: PathBuf::from(path),
        read_only,
    };
    Ok((name.to_string(), module))
}

/// Every module's directory must exist before the daemon starts: a typo
/// should stop it at once, not fail each client later.
pub fn check_modules(modules: &BTreeMap<String, Module>) -> Result<(), String> {
    if modules.is_empty() {
        return Err("no module to serve: give --module NAME=PATH or a [modules.NAME] table".into());
    }
    for (name, m) in modules {
        match std::fs::metadata(&m.path) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(format!(
                    "module {name}: {} is not a directory",
                    m.path.display()
                ))
            }
            Err(e) => return Err(format!("module {name}: {}: {e}", m.path.display())),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_file_reads_with_paths_beside_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("accord.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:0\"\nkey = \"k\"\nidle_timeout = 5\n\
             max_handshakes = 20\nmax_handshakes_per_address = 3\nmax_per_address = 2\n\
             [modules.data]\npath = \"d\"\nread_only = true\n",
        )
        .unwrap();
        let cfg = ConfigFile::load(&path).unwrap();
        assert_eq!(
            (cfg.max_handshakes, cfg.max_handshakes_per_address),
            (Some(20), Some(3))
        );
        assert_eq!(cfg.max_per_address, Some(2));
        assert_eq!(cfg.key.as_deref(), Some(dir.path().join("k").as_path()));
        let m = &cfg.modules()["data"];
        assert!(m.read_only);
        assert_eq!(m.path, dir.path().join("d"));
        std::fs::write(&path, "lisen = \"x\"\n").unwrap();
        assert!(ConfigFile::load(&path).is_err());
    }

    #[test]
    fn module_arguments() {
        let (n, m) = parse_module_arg("pub=/srv/pub:ro").unwrap();
        assert_eq!((n.as_str(), m.read_only), ("pub", true));
        assert_eq!(m.path, PathBuf::from("/srv/pub"));
        assert!(parse_module_arg("a/b=/x").is_err());
        assert!(parse_module_arg("nopath").is_err());
    }
}
