//! Which paths of a watched root a sync leaves out, so that `accord sync
//! --watch` does not run for a change there (a build writing its objects
//! under an excluded `target/`). The same matcher as the sync's walk
//! (`IgnoreRules`): the `--exclude` patterns, and the `.accordignore` files
//! of the event's ancestors, read when first needed and forgotten when one
//! of them changes (that change itself is a change: it is synced).
//!
//! Only this root's rules are known here; a path that only the other
//! side's rules exclude still starts a run, which then leaves it alone:
//! a run too many, never one too few.

use crate::rules::{IgnoreRules, IGNORE_FILE};
use accord_model::RelPath;
use std::collections::HashSet;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Largest `.accordignore` read (as the scanner).
const MAX_IGNORE_FILE: u64 = 1 << 20;

/// The ignore rules of one watched root.
pub struct WatchRules {
    /// Canonical, as the watcher names paths.
    root: PathBuf,
    patterns: Vec<String>,
    read_ignore_files: bool,
    loaded: Mutex<Loaded>,
}

/// The matcher, and the directories whose `.accordignore` it holds (or
/// that have none).
struct Loaded {
    rules: IgnoreRules,
    read: HashSet<RelPath>,
}

impl WatchRules {
    /// `root` must be canonical (`watch::canonical_prefix`).
    pub fn new(root: &Path, patterns: &[String], read_ignore_files: bool) -> io::Result<Self> {
        Ok(WatchRules {
            root: root.to_path_buf(),
            patterns: patterns.to_vec(),
            read_ignore_files,
            loaded: Mutex::new(Loaded {
                rules: IgnoreRules::new(patterns)?,
                read: HashSet::new(),
            }),
        })
    }

    /// Is the event path `path` one the sync leaves out? False for
    /// anything it cannot judge (outside the root, a name it cannot
    /// read): a run too many is harmless.
    pub fn excludes(&self, path: &Path) -> bool {
        let Ok(rel) = path.strip_prefix(&self.root) else {
            return false;
        };
        let Ok(rel) = RelPath::new(rel.as_os_str().as_bytes()) else {
            return false;
        };
        if rel.is_root() {
            return false;
        }
        let mut loaded = self.loaded.lock().expect("watch rules lock");
        if self.read_ignore_files && rel.file_name() == IGNORE_FILE {
            // The rules change: read them again when next needed.
            loaded.forget(&self.patterns);
            return false;
        }
        self.excluded_beneath(&mut loaded, &rel) || loaded.rules.is_excluded(&rel, is_dir(path))
    }

    /// Does a directory above `rel` fall under the rules? Reads the
    /// `.accordignore` of each directory on the way down.
    fn excluded_beneath(&self, loaded: &mut Loaded, rel: &RelPath) -> bool {
        let mut ancestors: Vec<RelPath> =
            std::iter::successors(rel.parent(), RelPath::parent).collect::<Vec<_>>();
        ancestors.reverse();
        for dir in ancestors {
            if !dir.is_root() && loaded.rules.is_excluded(&dir, true) {
                return true;
            }
            if self.read_ignore_files {
                self.load(loaded, dir);
            }
        }
        false
    }

    fn load(&self, loaded: &mut Loaded, dir: RelPath) {
        if loaded.read.contains(&dir) {
            return;
        }
        let file = self
            .root
            .join(Path::new(std::ffi::OsStr::from_bytes(dir.as_bytes())))
            .join(std::ffi::OsStr::from_bytes(IGNORE_FILE));
        if let Some(contents) = read_bounded(&file) {
            loaded.rules.add_dir_file(&dir, &contents);
        }
        loaded.read.insert(dir);
    }
}

impl Loaded {
    fn forget(&mut self, patterns: &[String]) {
        if let Ok(rules) = IgnoreRules::new(patterns) {
            self.rules = rules;
            self.read.clear();
        }
    }
}

/// A path that is gone counts as a file: a pattern for directories only
/// then does not match, and the event starts a run.
fn is_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir())
}

fn read_bounded(file: &Path) -> Option<Vec<u8>> {
    let mut contents = Vec::new();
    std::fs::File::open(file)
        .ok()?
        .take(MAX_IGNORE_FILE)
        .read_to_end(&mut contents)
        .ok()?;
    Some(contents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_and_ignore_files_of_ancestors() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(root.join("src/gen")).unwrap();
        std::fs::create_dir_all(root.join("target/debug")).unwrap();
        std::fs::write(root.join("src/.accordignore"), "gen/\n*.bak\n").unwrap();
        let rules = WatchRules::new(&root, &["target/".into(), "*.o".into()], true).unwrap();
        assert!(rules.excludes(&root.join("target")));
        assert!(rules.excludes(&root.join("target/debug/x")));
        assert!(rules.excludes(&root.join("a/b.o")));
        assert!(rules.excludes(&root.join("src/gen/out.rs")));
        assert!(rules.excludes(&root.join("src/x.bak")));
        assert!(!rules.excludes(&root.join("x.bak")));
        assert!(!rules.excludes(&root.join("src/main.rs")));
        assert!(!rules.excludes(&root.join("src/.accordignore")));
        assert!(!rules.excludes(&root));
        assert!(!rules.excludes(Path::new("/elsewhere/x.o")));
        // A changed .accordignore is read again.
        std::fs::write(root.join("src/.accordignore"), "*.rs\n").unwrap();
        assert!(!rules.excludes(&root.join("src/.accordignore")));
        assert!(rules.excludes(&root.join("src/main.rs")));
        assert!(!rules.excludes(&root.join("src/x.bak")));
        // Without reading them, only the patterns count.
        let rules = WatchRules::new(&root, &["*.o".into()], false).unwrap();
        assert!(!rules.excludes(&root.join("src/main.rs")));
        assert!(rules.excludes(&root.join("x.o")));
    }
}
