//! The server's side of `accord sync --watch` with a remote root: the root
//! is watched here, on its own host (inotify cannot see another host's
//! changes), and a client's `WaitChange` is answered as soon as something
//! changed, so a save on this side reaches the other within the watch's
//! debounce instead of a polling interval.
//!
//! The watch starts with the session's first `WaitChange` (the client
//! sends one with no wait before its first sync run, so nothing that
//! changes during that run is missed) and lasts as long as the session.
//! What happened between two requests is kept as one piece of news, the
//! most serious: a client that asks again later still hears of it.

use accord_fsys::watch::WatchRules;
use accord_fsys::watch::{canonical_prefix, watch_tree, OwnFiles, Seen, TreeWatch, WatchFailure};
use accord_proto::WatchNews;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// News kept between two requests.
#[derive(Default)]
struct Inbox {
    news: Mutex<Option<WatchNews>>,
    wake: Condvar,
}

impl Inbox {
    fn lock(&self) -> MutexGuard<'_, Option<WatchNews>> {
        self.news.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep the more serious of what is pending and `news`.
    fn add(&self, news: WatchNews) {
        let mut pending = self.lock();
        if pending.as_ref().is_none_or(|old| rank(&news) > rank(old)) {
            *pending = Some(news);
        }
        self.wake.notify_all();
    }
}

/// How much a piece of news asks of the client (more is more serious).
fn rank(news: &WatchNews) -> u8 {
    match news {
        WatchNews::Quiet => 0,
        WatchNews::Changed => 1,
        WatchNews::Rescan(_) => 2,
        WatchNews::Lost => 3,
        WatchNews::Unwatchable(_) => 4,
        WatchNews::Limit => 5,
    }
}

/// One session's watch of its root.
pub(crate) struct RootWatch {
    root: PathBuf,
    /// Our own writes there are never news.
    archive_dir: Option<PathBuf>,
    inbox: Arc<Inbox>,
    /// The watches, once started; dropped when lost, so the next request
    /// watches the root again.
    watch: Mutex<Option<TreeWatch>>,
    /// A sync's ignore rules (patterns, read `.accordignore` files): their
    /// paths' changes are no news.
    rules: Mutex<Option<(Vec<String>, bool)>>,
}

impl RootWatch {
    /// `archive_dir`: where this host's archives are written (our own
    /// writes, never news), if it lies under the root.
    pub(crate) fn new(root: &Path, archive_dir: Option<&Path>) -> RootWatch {
        RootWatch {
            // Resolved (as inotify names paths) only when a watch starts:
            // most sessions never ask for one.
            root: root.to_path_buf(),
            archive_dir: archive_dir.map(Path::to_path_buf),
            inbox: Arc::new(Inbox::default()),
            watch: Mutex::new(None),
            rules: Mutex::new(None),
        }
    }

    /// What the sync leaves out; a watch already started starts again
    /// with them at the next wait (a client sends them before its first).
    pub(crate) fn set_rules(&self, excludes: &[String], ignore_files: bool) {
        // The sync never takes its backup directory as part of the tree.
        let mut patterns = vec!["/.accord-backup".to_string()];
        patterns.extend(excludes.iter().cloned());
        *self.rules.lock().unwrap_or_else(|e| e.into_inner()) = Some((patterns, ignore_files));
        *self.watch.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Answer a `WaitChange`: the news since the last answer, waiting up
    /// to `timeout` for some if there is none.
    pub(crate) fn wait(&self, timeout: Duration) -> WatchNews {
        if let Err(news) = self.ensure_watching() {
            return news;
        }
        let deadline = Instant::now() + timeout;
        let mut pending = self.inbox.lock();
        loop {
            if let Some(news) = pending.take() {
                drop(pending);
                if matches!(news, WatchNews::Lost | WatchNews::Limit) {
                    // Gone, or incomplete: watched again at the next request.
                    *self.watch.lock().unwrap_or_else(|e| e.into_inner()) = None;
                }
                return news;
            }
            let now = Instant::now();
            if now >= deadline {
                return WatchNews::Quiet;
            }
            pending = self
                .inbox
                .wake
                .wait_timeout(pending, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Start watching if not watching yet. `Err`: the news that the root
    /// cannot be watched.
    fn ensure_watching(&self) -> Result<(), WatchNews> {
        let mut watch = self.watch.lock().unwrap_or_else(|e| e.into_inner());
        if watch.is_some() {
            return Ok(());
        }
        let inbox = Arc::clone(&self.inbox);
        let on_seen = move |seen| match seen {
            Seen::Nothing => {}
            Seen::Change => inbox.add(WatchNews::Changed),
            Seen::Rescan(why) => inbox.add(WatchNews::Rescan(why)),
            Seen::Lost => inbox.add(WatchNews::Lost),
            Seen::Limit => inbox.add(WatchNews::Limit),
        };
        let root = canonical_prefix(&self.root);
        let mut own = OwnFiles::new(self.archive_dir.as_deref());
        let rules = self.rules.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some((patterns, ignore_files)) = rules {
            // Patterns that do not build were refused to the sync already:
            // every change is news then.
            if let Ok(excluded) = WatchRules::new(&root, &patterns, ignore_files) {
                own = own.excluding(excluded);
            }
        }
        match watch_tree(&root, own, on_seen) {
            Ok(w) => {
                *watch = Some(w);
                Ok(())
            }
            Err(WatchFailure::Limit) => Err(WatchNews::Limit),
            Err(WatchFailure::Other(why)) => Err(WatchNews::Unwatchable(why)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_news_once_and_quiet_after() {
        let tmp = tempfile::tempdir().unwrap();
        let w = RootWatch::new(tmp.path(), None);
        assert_eq!(w.wait(Duration::ZERO), WatchNews::Quiet);
        std::fs::write(tmp.path().join("f"), "x").unwrap();
        assert_eq!(w.wait(Duration::from_secs(10)), WatchNews::Changed);
        // Events of the same write may still trickle in (later on a loaded
        // machine); once they are read, it is quiet.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while w.wait(Duration::from_millis(300)) != WatchNews::Quiet {
            assert!(
                std::time::Instant::now() < deadline,
                "still news 10 s after one write"
            );
        }
    }

    #[test]
    fn our_own_temps_are_not_news() {
        let tmp = tempfile::tempdir().unwrap();
        let w = RootWatch::new(tmp.path(), None);
        assert_eq!(w.wait(Duration::ZERO), WatchNews::Quiet);
        std::fs::write(tmp.path().join(".accord-tmp-x1"), "x").unwrap();
        assert_eq!(w.wait(Duration::from_millis(300)), WatchNews::Quiet);
    }

    #[test]
    fn changes_the_sync_excludes_are_not_news() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("build")).unwrap();
        let w = RootWatch::new(tmp.path(), None);
        w.set_rules(&["build/".into()], true);
        assert_eq!(w.wait(Duration::ZERO), WatchNews::Quiet);
        std::fs::write(tmp.path().join("build/x.o"), "x").unwrap();
        std::fs::write(tmp.path().join(".accord-backup"), "x").unwrap();
        assert_eq!(w.wait(Duration::from_millis(300)), WatchNews::Quiet);
        std::fs::write(tmp.path().join("f"), "x").unwrap();
        assert_eq!(w.wait(Duration::from_secs(10)), WatchNews::Changed);
    }

    #[test]
    fn a_missing_root_cannot_be_watched() {
        let tmp = tempfile::tempdir().unwrap();
        let w = RootWatch::new(&tmp.path().join("gone"), None);
        assert!(matches!(w.wait(Duration::ZERO), WatchNews::Unwatchable(_)));
    }

    #[test]
    fn the_most_serious_news_is_kept() {
        let inbox = Inbox::default();
        inbox.add(WatchNews::Changed);
        inbox.add(WatchNews::Rescan("overflow".into()));
        inbox.add(WatchNews::Changed);
        assert_eq!(
            inbox.lock().take(),
            Some(WatchNews::Rescan("overflow".into()))
        );
    }
}
