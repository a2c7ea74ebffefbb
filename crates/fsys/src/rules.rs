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
    /// Patterns that name one path from the root and nothing else (`/name`,
    /// `/dir/name`: no wildcard, no negation), compared as bytes: the
    /// backup directory every sync leaves out is one, and a glob matcher
    /// would cost every entry of every scan a match.
    literal: Vec<Vec<u8>>,
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
        // A negation may take back what any other pattern left out: then
        // every pattern goes through the matcher, in order.
        let negated = patterns.iter().any(|p| p.starts_with('!'));
        let (literal, globs): (Vec<&String>, Vec<&String>) = patterns
            .iter()
            .partition(|p| !negated && anchored_literal(p).is_some());
        let literal = literal
            .into_iter()
            .filter_map(|p| anchored_literal(p))
            .collect();
        let global = if globs.is_empty() {
            None
        } else {
            let mut b = GitignoreBuilder::new("");
            for p in globs {
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
            literal,
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
        if self.literal.iter().any(|l| l == path.as_bytes()) {
            return true;
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
        self.global.is_some()
            || !self.literal.is_empty()
            || !self.per_dir.read().expect("ignore rules lock").is_empty()
    }
}

/// The path a pattern names when it is one path from the root, spelled
/// without anything gitignore would read specially: a leading `/`, then
/// names of plain bytes (no wildcard, escape, trailing slash or space, no
/// empty, `.` or `..` component). Such a pattern matches that path alone,
/// file or directory.
fn anchored_literal(pattern: &str) -> Option<Vec<u8>> {
    let rest = pattern.strip_prefix('/')?;
    let special = |c: char| matches!(c, '*' | '?' | '[' | ']' | '\\' | '!' | '#');
    if rest.is_empty() || rest.ends_with(' ') || rest.contains(special) {
        return None;
    }
    let path = RelPath::new(rest.as_bytes()).ok()?;
    Some(path.as_bytes().to_vec())
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

    /// Patterns compared as bytes match exactly what the glob matcher
    /// matches for them; anything else still goes through it.
    #[test]
    fn literal_patterns_match_as_globs_do() {
        let patterns = ["/top", "/a/b", "/sp ace", "/dir/", "/x*", "/./y", "/e\\*"];
        let lits: Vec<_> = patterns.iter().map(|p| anchored_literal(p)).collect();
        assert_eq!(lits[0].as_deref(), Some(&b"top"[..]));
        assert_eq!(lits[1].as_deref(), Some(&b"a/b"[..]));
        assert_eq!(lits[2].as_deref(), Some(&b"sp ace"[..]));
        assert!(lits[3..].iter().all(Option::is_none), "{lits:?}");
        let paths = [
            "top", "a/b", "a", "b", "a/top", "a/b/c", "sp ace", "dir", "x1", "e*", "y",
        ];
        for pattern in patterns {
            let ours = IgnoreRules::new(&[pattern.to_string()]).unwrap();
            let mut b = GitignoreBuilder::new("");
            b.add_line(None, pattern).unwrap();
            let glob = b.build().unwrap();
            for path in paths {
                for is_dir in [false, true] {
                    assert_eq!(
                        ours.is_excluded(&p(path), is_dir),
                        glob.matched(os(path.as_bytes()), is_dir).is_ignore(),
                        "{pattern} on {path} (dir: {is_dir})"
                    );
                }
            }
        }
        // A negation keeps every pattern in the matcher, in order.
        let r = IgnoreRules::new(&["/top".into(), "!/top".into()]).unwrap();
        assert!(r.literal.is_empty() && !r.is_excluded(&p("top"), false));
    }
}
