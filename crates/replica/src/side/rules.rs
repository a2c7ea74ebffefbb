//! What a two-way sync leaves out: `--exclude` patterns and `.accordignore`
//! files, in gitignore syntax, matched by the mirror's matcher
//! (`accord_fsys::IgnoreRules`); and always the backup directory at the
//! top of a root.
//!
//! An excluded path is out of the run on both sides. Each side applies its
//! own rules on its own host: its walk neither lists an excluded entry nor,
//! when its archive still holds one from before the rule, takes it as
//! deleted (the archive's entries there are passed over and kept, so
//! removing the rule later finds them unchanged where the files are); and
//! a lookup of a path its rules exclude answers "excluded"
//! (`SideScan::excluded`), which takes the path out of the merge with its
//! subtree. So a path excluded by either side's rules is excluded on both:
//! the sides' `.accordignore` files may differ (one not yet propagated, or
//! excluded itself), and a path one side ignores but the other does not
//! would otherwise be copied to the ignoring side again on every run.

use crate::local::LocalReplica;
use crate::side::{SideCause, SideFailure};
use accord_fsys::IgnoreRules;
use accord_model::{Kind, Observed, RelPath};
use std::collections::HashMap;

/// The directory at the top of each root where a sync keeps backups
/// (`--backup`): always left out of a sync's walks.
pub const BACKUP_DIR: &[u8] = b".accord-backup";

/// What a sync is told to leave out (the user's choices; the backup
/// directory is always left out besides).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncRules {
    /// `--exclude` patterns and `--exclude-from` lines.
    pub excludes: Vec<String>,
    /// Read each side's `.accordignore` files (`--no-ignore-files`: not).
    pub ignore_files: bool,
    /// `--follow` patterns: the symlinks each side treats as what they
    /// point to (the replica crate's local/follow.rs; same syntax as `excludes`).
    pub follow: Vec<String>,
}

impl Default for SyncRules {
    fn default() -> SyncRules {
        SyncRules {
            excludes: Vec::new(),
            ignore_files: true,
            follow: Vec::new(),
        }
    }
}

/// The matcher of one side's walk: the backup directory, then `rules`'
/// patterns (None: a client that sent no rules, which gets the backup
/// directory only). Its `.accordignore` files are added as the walk reads
/// them.
pub fn side_matcher(rules: Option<&SyncRules>) -> Result<IgnoreRules, SideFailure> {
    let backups = format!("/{}", String::from_utf8_lossy(BACKUP_DIR));
    let mut patterns = vec![backups];
    if let Some(rules) = rules {
        patterns.extend(rules.excludes.iter().cloned());
    }
    IgnoreRules::new(&patterns).map_err(|e| SideFailure::Failed(SideCause::ExcludePattern(e)))
}

fn is_dir(observed: Option<&Observed>) -> bool {
    observed.is_some_and(|o| o.entry.kind == Kind::Dir)
}

/// Is a child the walk meets left out? `listed`: this side's entry, which
/// the listing kept (so its own kind is not excluded); `archived`: the
/// archive's entry, and `archived_beneath`: the archive holds paths under
/// it. Excluded as the kind it has now or had when archived, so a kind
/// change under a pattern for directories only (`cache/`) neither walks
/// an excluded tree nor takes it as deleted. A name only the archive
/// holds that is still present here was left out of the listing: by the
/// rules.
pub fn child_excluded(
    rules: &IgnoreRules,
    replica: &LocalReplica,
    child: &RelPath,
    listed: Option<&Observed>,
    archived: Option<&Observed>,
    archived_beneath: bool,
) -> bool {
    if archived.is_none() && !archived_beneath {
        return false;
    }
    let archived_dir = is_dir(archived) || archived_beneath;
    match listed {
        // The listing matched it as this same kind already: no second
        // match for every unchanged entry of a large tree.
        Some(listed) if is_dir(Some(listed)) == archived_dir => false,
        Some(_) => rules.is_excluded(child, archived_dir),
        None => rules.is_excluded(child, archived_dir) || present_here(replica, child),
    }
}

/// Is there an entry at `path` on this side (an error counts as one: it is
/// nothing to take as deleted)? A parent that is a symlink now (ELOOP: a
/// walk never goes through one unless `--follow` says so) holds nothing
/// here, as a parent that is a file does: a directory replaced by a link
/// has its old contents deleted. With `--follow`, ELOOP may also be a
/// followed link's loop, and counts as an entry, as other errors do.
fn present_here(replica: &LocalReplica, path: &RelPath) -> bool {
    let parent = path.parent().unwrap_or_default();
    match replica.open_dir_following(&parent) {
        Ok(dir) => match dir.stat(path.file_name()) {
            Ok(_) => true,
            Err(e) => e.raw_os_error() != Some(libc::ENOENT),
        },
        Err(e) => match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => false,
            Some(libc::ELOOP) => replica.follows(),
            _ => true,
        },
    }
}

/// The kind of what is at `path` on this side now, if anything.
fn kind_here(replica: &LocalReplica, path: &RelPath) -> Option<Kind> {
    let parent = path.parent().unwrap_or_default();
    let dir = replica.open_dir_following(&parent).ok()?;
    dir.stat(path.file_name()).ok().map(|st| st.kind)
}

/// Judges the paths a lookup asks for: is one excluded on this side,
/// beneath a directory the rules exclude, or itself as what it is here,
/// was in the archive, or is on the other side? The `.accordignore` files
/// of its ancestors were read by this side's walk (every directory present
/// here that is not excluded is walked).
pub struct LookupRules<'a> {
    rules: &'a IgnoreRules,
    replica: &'a LocalReplica,
    /// Directories judged (they or one above excluded): a lookup's paths
    /// come in order, siblings one after the other.
    dirs: HashMap<RelPath, bool>,
}

/// Directories' judgements kept at most.
const MAX_DIRS_KEPT: usize = 4096;

impl<'a> LookupRules<'a> {
    pub fn new(rules: &'a IgnoreRules, replica: &'a LocalReplica) -> Self {
        LookupRules {
            rules,
            replica,
            dirs: HashMap::new(),
        }
    }

    /// Before `path`'s parent is listed: excluded beneath an excluded
    /// directory, or as the kind the archive or the other side gives it
    /// (`other`: `Kind::Dir` when paths beneath it were asked for too; a
    /// pattern for directories only, `cache/`, must not let the other
    /// side's directory in, nor keep its file out).
    pub fn excluded(
        &mut self,
        path: &RelPath,
        archived: Option<&Observed>,
        other: Option<Kind>,
    ) -> bool {
        if path
            .parent()
            .is_some_and(|parent| self.dir_excluded(&parent))
        {
            return true;
        }
        let other_is_dir = other == Some(Kind::Dir);
        self.rules
            .is_excluded(path, is_dir(archived) || other_is_dir)
    }

    /// `path` is not in its parent's listing: is that because something
    /// is there that the rules exclude as what it is?
    pub fn hidden(&self, path: &RelPath) -> bool {
        let might = self.rules.is_excluded(path, false) || self.rules.is_excluded(path, true);
        might
            && kind_here(self.replica, path)
                .is_some_and(|kind| self.rules.is_excluded(path, kind == Kind::Dir))
    }

    fn dir_excluded(&mut self, dir: &RelPath) -> bool {
        let Some(parent) = dir.parent() else {
            return false;
        };
        if let Some(&known) = self.dirs.get(dir) {
            return known;
        }
        let excluded = self.dir_excluded(&parent) || self.rules.is_excluded(dir, true);
        if self.dirs.len() >= MAX_DIRS_KEPT {
            self.dirs.clear();
        }
        self.dirs.insert(dir.clone(), excluded);
        excluded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use accord_model::{Entry, Props, Time};

    fn path(p: &str) -> RelPath {
        RelPath::new(p.as_bytes()).unwrap()
    }

    fn observed(p: &str, kind: Kind) -> Observed {
        Observed {
            entry: Entry {
                path: path(p),
                kind,
                size: 0,
                props: Props::default(),
                dev: 1,
                ino: 2,
                nlink: 1,
                rdev: 0,
                blocks: 0,
                link_target: None,
                hash: None,
            },
            ctime: Time { sec: 5, nsec: 0 },
        }
    }

    fn replica(dir: &std::path::Path) -> LocalReplica {
        LocalReplica::open(dir).unwrap()
    }

    #[test]
    fn the_backup_directory_is_always_left_out() {
        let rules = side_matcher(None).unwrap();
        assert!(rules.is_excluded(&path(".accord-backup"), true));
        assert!(!rules.is_excluded(&path("a/.accord-backup"), true));
        let rules = side_matcher(Some(&SyncRules {
            excludes: vec!["*.o".into()],
            ignore_files: true,
            follow: Vec::new(),
        }))
        .unwrap();
        assert!(rules.is_excluded(&path(".accord-backup"), true));
        assert!(rules.is_excluded(&path("x/y.o"), false));
    }

    #[test]
    fn a_kind_change_under_a_directory_pattern_is_left_out() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("cache"), b"now a file").unwrap();
        let replica = replica(tmp.path());
        let rules = side_matcher(Some(&SyncRules {
            excludes: vec!["cache/".into()],
            ignore_files: true,
            follow: Vec::new(),
        }))
        .unwrap();
        let archived = observed("cache", Kind::Dir);
        let listed = observed("cache", Kind::File);
        let child = path("cache");
        // Archived as a directory: its archived tree is neither walked
        // nor taken as deleted, and the file now there is left out too.
        assert!(child_excluded(
            &rules,
            &replica,
            &child,
            Some(&listed),
            Some(&archived),
            true
        ));
        // New here (nothing archived): the listing decided.
        assert!(!child_excluded(
            &rules,
            &replica,
            &child,
            Some(&listed),
            None,
            false
        ));
        let mut lookups = LookupRules::new(&rules, &replica);
        assert!(lookups.excluded(&child, Some(&archived), None));
        // A file here is listed; nothing hides it.
        assert!(!lookups.excluded(&child, None, None) && !lookups.hidden(&child));
        std::fs::remove_file(tmp.path().join("cache")).unwrap();
        std::fs::create_dir(tmp.path().join("cache")).unwrap();
        // A directory here: left out of the listing, and hidden by the rules.
        assert!(!lookups.excluded(&child, None, None) && lookups.hidden(&child));
        assert!(lookups.excluded(&path("cache/deep/x"), None, None));
        std::fs::remove_dir(tmp.path().join("cache")).unwrap();
        // Absent here, a directory on the other side.
        let mut lookups = LookupRules::new(&rules, &replica);
        assert!(lookups.excluded(&child, None, Some(Kind::Dir)));
        assert!(!lookups.excluded(&child, None, Some(Kind::File)) && !lookups.hidden(&child));
    }

    #[test]
    fn a_name_the_listing_left_out_is_not_deleted() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("build")).unwrap();
        let replica = replica(tmp.path());
        let rules = side_matcher(Some(&SyncRules {
            excludes: vec!["build/".into()],
            ignore_files: true,
            follow: Vec::new(),
        }))
        .unwrap();
        // Archived as a file, a directory now (excluded, so not listed).
        let archived = observed("build", Kind::File);
        let child = path("build");
        assert!(child_excluded(
            &rules,
            &replica,
            &child,
            None,
            Some(&archived),
            false
        ));
        std::fs::remove_dir(tmp.path().join("build")).unwrap();
        // Gone: a deletion like any other.
        assert!(!child_excluded(
            &rules,
            &replica,
            &child,
            None,
            Some(&archived),
            false
        ));
    }
}
