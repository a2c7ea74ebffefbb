//! Watching a tree for changes (inotify, through `notify`), as `accord sync
//! --watch` needs it on whichever host a root lives: the client watches its
//! local roots, `accord server` watches a remote root and tells the client.
//!
//! Events only say *that* something changed. The watcher's user runs a full
//! sync on a change: inotify can lose events (queue overflow, a directory
//! created just before its watch), a full run cannot.

pub use crate::watch_rules::WatchRules;
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A test hook, built only with the `test-hooks` feature (no user
/// feature): with `ACCORD_TEST_WATCH_LIMIT=1` in the
/// environment of the process that watches, every attempt to watch fails
/// as if the kernel's inotify watch limit had been reached (ENOSPC), so a
/// test can see the fallback without lowering
/// `/proc/sys/fs/inotify/max_user_watches` for the whole machine.
pub const TEST_WATCH_LIMIT: &str = "ACCORD_TEST_WATCH_LIMIT";

/// What one notification from a watcher means.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    /// Reads, and our own files: nothing to sync.
    Nothing,
    Change,
    /// Events were lost: only a full run can tell what changed.
    Rescan(String),
    /// The root itself was moved or deleted: its watch is gone.
    Lost,
    /// The kernel's limit on inotify watches was reached.
    Limit,
}

/// Paths whose changes are our own doing: temp, partial and recovery
/// files in the roots, and the archives (when kept inside a root); and,
/// with `excluding`, paths the sync leaves out, whose changes are no
/// change to it either.
#[derive(Clone)]
pub struct OwnFiles {
    state_dir: Option<PathBuf>,
    excluded: Option<Arc<WatchRules>>,
}

impl OwnFiles {
    /// `state_dir`: where archives and memos are written, if anywhere.
    pub fn new(state_dir: Option<&Path>) -> OwnFiles {
        OwnFiles {
            state_dir: state_dir.map(canonical_prefix),
            excluded: None,
        }
    }

    /// These, and what `rules` exclude.
    pub fn excluding(self, rules: WatchRules) -> OwnFiles {
        OwnFiles {
            excluded: Some(Arc::new(rules)),
            ..self
        }
    }

    pub fn contains(&self, path: &Path) -> bool {
        let reserved = path
            .file_name()
            .is_some_and(|name| crate::is_reserved_name(name.as_bytes()));
        reserved
            || self.state_dir.as_ref().is_some_and(|s| path.starts_with(s))
            || self.excluded.as_ref().is_some_and(|r| r.excludes(path))
    }
}

/// `path` with its longest existing ancestor resolved (symlinks, `..`),
/// as inotify names paths, even before the directory itself exists.
pub fn canonical_prefix(path: &Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut ancestor = path;
    loop {
        if let Ok(found) = ancestor.canonicalize() {
            return missing.iter().rev().fold(found, |acc, part| acc.join(part));
        }
        match (ancestor.parent(), ancestor.file_name()) {
            (Some(parent), Some(name)) => {
                missing.push(name.to_owned());
                ancestor = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// What `event`, seen under `root`, means.
pub fn classify(root: &Path, own: &OwnFiles, event: notify::Result<Event>) -> Seen {
    let event = match event {
        Ok(event) => event,
        Err(e) if matches!(e.kind, notify::ErrorKind::MaxFilesWatch) => return Seen::Limit,
        Err(e) => return Seen::Rescan(format!("watching {} failed: {e}", root.display())),
    };
    if event.need_rescan() {
        return Seen::Rescan("the kernel's event queue overflowed (events were lost)".into());
    }
    match event.kind {
        // Opening or reading (our own scans fingerprint files) changes
        // nothing; a close after writing marks the end of a save.
        EventKind::Access(notify::event::AccessKind::Close(notify::event::AccessMode::Write)) => {}
        EventKind::Access(_) => return Seen::Nothing,
        EventKind::Remove(_) | EventKind::Modify(notify::event::ModifyKind::Name(_))
            if event.paths.iter().any(|path| path == root) =>
        {
            return Seen::Lost
        }
        _ => {}
    }
    if !event.paths.is_empty() && event.paths.iter().all(|path| own.contains(path)) {
        return Seen::Nothing;
    }
    Seen::Change
}

/// A tree being watched: the watches live as long as this value.
pub struct TreeWatch {
    _watcher: RecommendedWatcher,
}

/// Why a tree could not be watched.
#[derive(Debug, PartialEq, Eq)]
pub enum WatchFailure {
    /// The kernel's limit on inotify watches was reached.
    Limit,
    /// Anything else, in words for a person ("it is missing", ...).
    Other(String),
}

/// Watch `root` (canonical: see `canonical_prefix`) recursively, symlinks
/// not followed (they are synced as links), calling `on_seen` with what
/// each event means, `Seen::Nothing` left out.
pub fn watch_tree(
    root: &Path,
    own: OwnFiles,
    on_seen: impl Fn(Seen) + Send + 'static,
) -> Result<TreeWatch, WatchFailure> {
    #[cfg(feature = "test-hooks")]
    if std::env::var_os(TEST_WATCH_LIMIT).is_some_and(|v| v == "1") {
        return Err(WatchFailure::Limit);
    }
    let root_path = root.to_path_buf();
    let handler = move |event| match classify(&root_path, &own, event) {
        Seen::Nothing => {}
        seen => on_seen(seen),
    };
    let config = notify::Config::default().with_follow_symlinks(false);
    let mut watcher = RecommendedWatcher::new(handler, config).map_err(failure)?;
    watcher
        .watch(root, RecursiveMode::Recursive)
        .map_err(failure)?;
    Ok(TreeWatch { _watcher: watcher })
}

fn failure(e: notify::Error) -> WatchFailure {
    match &e.kind {
        notify::ErrorKind::MaxFilesWatch => WatchFailure::Limit,
        notify::ErrorKind::PathNotFound => WatchFailure::Other("it is missing".into()),
        notify::ErrorKind::Io(io) if io.kind() == std::io::ErrorKind::NotFound => {
            WatchFailure::Other("it is missing".into())
        }
        _ => WatchFailure::Other(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind, RenameMode};

    fn own() -> OwnFiles {
        OwnFiles {
            state_dir: Some(PathBuf::from("/r/a/.state")),
            excluded: None,
        }
    }

    fn seen(kind: EventKind, path: &str) -> Seen {
        let event = Event::new(kind).add_path(PathBuf::from(path));
        classify(Path::new("/r/a"), &own(), Ok(event))
    }

    #[test]
    fn reads_and_our_own_files_are_no_change() {
        let open = EventKind::Access(AccessKind::Open(AccessMode::Any));
        assert_eq!(seen(open, "/r/a/f"), Seen::Nothing);
        let create = EventKind::Create(CreateKind::File);
        assert_eq!(seen(create, "/r/a/d/.accord-tmp-x1"), Seen::Nothing);
        assert_eq!(seen(create, "/r/a/.state/archive.db"), Seen::Nothing);
        assert_eq!(seen(create, "/r/a/d/f"), Seen::Change);
        let closed = EventKind::Access(AccessKind::Close(AccessMode::Write));
        assert_eq!(seen(closed, "/r/a/f"), Seen::Change);
    }

    #[test]
    fn changes_the_sync_excludes_are_no_change() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let rules = WatchRules::new(&root, &["build/".into()], true).unwrap();
        let own = OwnFiles::new(None).excluding(rules);
        let create = EventKind::Create(CreateKind::File);
        let seen = |path: PathBuf| {
            let event = Event::new(create).add_path(path);
            classify(&root, &own, Ok(event))
        };
        assert_eq!(seen(root.join("build/x.o")), Seen::Nothing);
        assert_eq!(seen(root.join("src/x.o")), Seen::Change);
        // A rename out of an excluded directory is a change.
        let rename = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        let event = Event::new(rename)
            .add_path(root.join("build/x"))
            .add_path(root.join("x"));
        assert_eq!(classify(&root, &own, Ok(event)), Seen::Change);
    }

    #[test]
    fn without_a_state_dir_only_reserved_names_are_ours() {
        let own = OwnFiles::new(None);
        assert!(own.contains(Path::new("/r/a/d/.accord-tmp-x1")));
        assert!(!own.contains(Path::new("/r/a/.state/archive.db")));
    }

    #[test]
    fn the_root_moved_or_removed_loses_the_watch() {
        let moved = EventKind::Modify(ModifyKind::Name(RenameMode::From));
        assert_eq!(seen(moved, "/r/a"), Seen::Lost);
        assert_eq!(
            seen(EventKind::Remove(RemoveKind::Folder), "/r/a"),
            Seen::Lost
        );
        assert_eq!(
            seen(EventKind::Remove(RemoveKind::Folder), "/r/a/d"),
            Seen::Change
        );
    }

    #[test]
    fn overflow_and_the_watch_limit() {
        let overflow = Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
        let root = Path::new("/r/a");
        assert!(matches!(
            classify(root, &own(), Ok(overflow)),
            Seen::Rescan(_)
        ));
        let limit = notify::Error::new(notify::ErrorKind::MaxFilesWatch);
        assert_eq!(classify(root, &own(), Err(limit)), Seen::Limit);
    }

    #[test]
    fn canonical_prefix_keeps_what_does_not_exist_yet() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().canonicalize().unwrap();
        let missing = tmp.path().join("y/z");
        assert_eq!(canonical_prefix(&missing), real.join("y/z"));
    }
}
