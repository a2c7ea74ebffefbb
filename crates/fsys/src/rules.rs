//! Ignore rules in gitignore syntax: global patterns (`--exclude`,
//! `--exclude-from`) and per-directory `.accordignore` files.

use accord_model::RelPath;
use ignore::gitignore::{Gitignore, GitignoreBuilder};
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

/// Name of the per-directory ignore file.
pub const IGNORE_FILE: &[u8] = b".accordignore";
/// Most `--exclude` patterns one run takes (they may travel to a server).
pub const MAX_PATTERNS: u64 = 1 << 16;
/// Longest `--exclude` pattern, in bytes.
pub const MAX_PATTERN: usize = 4096;

/// Ignore rules for one run. The per-directory files are read from the source
/// replica while it is scanned, and the same rules then decide what is
/// excluded on the destination (so excluded entries there are never deleted).
#[derive(Default)]
pub struct IgnoreRules {
    /// The patterns `global` was built from (a remote replica builds its
    /// own rules from them).
    patterns: Vec<String>,
    global: Option<Gitignore>,
    per_dir: RwLock<HashMap<RelPath, Arc<Gitignore>>>,
    /// Set once `per_dir` holds rules: until then a lookup skips the lock
    /// (every scan task asks for every entry).
    any_per_dir: AtomicBool,
}

fn os(b: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(b))
}

impl IgnoreRules {
    /// Build from `--exclude` patterns and `--exclude-from` file contents.
    pub fn new(patterns: &[String]) -> io::Result<IgnoreRules> {
        let global = if patterns.is_empty() {
            None
        } else {
            let mut b = GitignoreBuilder::new("");
            for p in patterns {
                b.add_line(None, p)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
            }
            Some(
                b.build()
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?,
            )
        };
        Ok(IgnoreRules {
            patterns: patterns.to_vec(),
            global,
            per_dir: RwLock::new(HashMap::new()),
            any_per_dir: AtomicBool::new(false),
        })
    }

    /// The `--exclude` patterns the rules were built from.
    pub fn patterns(&self) -> &[String] {
        &self.patterns
    }

    /// Record the contents of `dir/.accordignore`.
    pub fn add_dir_file(&self, dir: &RelPath, contents: &[u8]) {
        let mut b = GitignoreBuilder::new("");
        for line in String::from_utf8_lossy(contents).lines() {
            // A bad line is skipped, like git does.
            let _ = b.add_line(None, line);
        }
        if let Ok(gi) = b.build() {
            if !gi.is_empty() {
                self.per_dir
                    .write()
                    .expect("ignore rules lock")
                    .insert(dir.clone(), Arc::new(gi));
                self.any_per_dir.store(true, Ordering::Release);
            }
        }
    }

    /// Is `path` excluded by the rules themselves (not by an excluded parent)?
    pub fn is_excluded(&self, path: &RelPath, is_dir: bool) -> bool {
        if path.is_root() {
            return false;
        }
        if let Some(g) = &self.global {
            let m = g.matched(os(path.as_bytes()), is_dir);
            if m.is_ignore() {
                return true;
            }
        }
        if !self.any_per_dir.load(Ordering::Acquire) {
            return false;
        }
        let map = self.per_dir.read().expect("ignore rules lock");
        // Deepest .accordignore first: it has the last word.
        let mut anc = path.parent();
        while let Some(dir) = anc {
            if let Some(gi) = map.get(&dir) {
                let rel = &path.as_bytes()[if dir.is_root() {
                    0
                } else {
                    dir.as_bytes().len() + 1
                }..];
                let m = gi.matched(os(rel), is_dir);
                if m.is_ignore() {
                    return true;
                }
                if m.is_whitelist() {
                    return false;
                }
            }
            anc = dir.parent();
        }
        false
    }

    pub fn has_rules(&self) -> bool {
        self.global.is_some() || !self.per_dir.read().expect("ignore rules lock").is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RelPath {
        RelPath::new(s.as_bytes()).unwrap()
    }

    #[test]
    fn global_and_per_dir() {
        let r = IgnoreRules::new(&["*.o".into(), "/top".into(), "cache/".into()]).unwrap();
        assert!(r.is_excluded(&p("a/b/x.o"), false));
        assert!(r.is_excluded(&p("top"), false));
        assert!(!r.is_excluded(&p("a/top"), false));
        assert!(r.is_excluded(&p("a/cache"), true));
        assert!(!r.is_excluded(&p("a/cache"), false));
        r.add_dir_file(&p("a"), b"*.log\n!keep.log\n/only-here\n");
        assert!(r.is_excluded(&p("a/x.log"), false));
        assert!(r.is_excluded(&p("a/b/x.log"), false));
        assert!(!r.is_excluded(&p("a/keep.log"), false));
        assert!(!r.is_excluded(&p("b/x.log"), false));
        assert!(r.is_excluded(&p("a/only-here"), false));
        assert!(!r.is_excluded(&p("a/b/only-here"), false));
    }
}
