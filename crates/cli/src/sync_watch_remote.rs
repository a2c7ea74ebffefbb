//! `accord sync --watch` with a remote root: the root is watched on its
//! own host by its `accord server` (inotify sees only its own host), over
//! a connection of its own that does nothing but wait for news, so a save
//! there reaches this side within the watch's debounce, as a local one
//! does. What comes of the news is the same as for a local root: a full
//! sync run of the pair.
//!
//! The watch connection is made, and the server's watch started, before
//! the first run, so nothing changed during that run is missed. When the
//! connection fails, or the server cannot watch (an older release, the
//! kernel's watch limit there), the root is synced every `--watch-interval`
//! instead, and the watch is tried again as for a local root.

use crate::sync_watch::{note_seen, Inbox, WatchDown};
use accord_fsys::watch::Seen;
use accord_remote::{RemoteReplica, WatchNews};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Opens a connection to the remote root (read-only: the watch changes
/// nothing there).
pub(crate) type Connect = Box<dyn Fn() -> Result<RemoteReplica, String> + Send + Sync>;

/// How long one wait lasts before it is asked again: short enough that a
/// watch given up (its `RemoteWatch` dropped) ends its thread soon.
const WAIT: Duration = Duration::from_secs(10);

/// A remote root being watched: its thread ends once this is dropped
/// (after the wait in progress) or the watch fails.
pub(crate) struct RemoteWatch {
    stop: Arc<AtomicBool>,
}

impl Drop for RemoteWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Connect, start the server's watch, and hand the news of root `index`
/// to `inbox` from a thread of its own.
pub(crate) fn start(
    connect: &Connect,
    index: usize,
    inbox: &Arc<Inbox>,
    rules: &accord_engine::SyncRules,
) -> Result<RemoteWatch, WatchDown> {
    let replica = connect().map_err(WatchDown::unwatched)?;
    // Before the watch starts: changes of excluded paths are no news.
    replica.watch_rules(rules).map_err(WatchDown::unwatched)?;
    // Starts the watch; what changed before this run is the run's to find.
    match replica.wait_change(Duration::ZERO) {
        Ok(WatchNews::Limit) => return Err(WatchDown::limit()),
        Ok(WatchNews::Unwatchable(why)) => return Err(WatchDown::unwatchable(why)),
        Ok(_) => {}
        Err(why) => return Err(WatchDown::unwatched(why)),
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (inbox, stopped) = (Arc::clone(inbox), Arc::clone(&stop));
    std::thread::Builder::new()
        .name(format!("watch-remote-{index}"))
        .spawn(move || {
            if let Some(down) = relay(&replica, index, &inbox, &stopped) {
                if !stopped.load(Ordering::Relaxed) {
                    inbox.update(|pending| {
                        pending.remote_down.insert(index, down);
                        pending.note_change();
                    });
                }
            }
        })
        .map_err(|e| WatchDown::unwatched(format!("cannot start a thread: {e}")))?;
    Ok(RemoteWatch { stop })
}

/// Pass the server's news on until stopped (`None`) or the watch ends
/// (why).
fn relay(
    replica: &RemoteReplica,
    index: usize,
    inbox: &Inbox,
    stop: &AtomicBool,
) -> Option<WatchDown> {
    while !stop.load(Ordering::Relaxed) {
        match replica.wait_change(WAIT) {
            Ok(WatchNews::Quiet) => {}
            Ok(WatchNews::Changed) => note_seen(inbox, index, Seen::Change),
            Ok(WatchNews::Rescan(why)) => note_seen(inbox, index, Seen::Rescan(why)),
            // The server watches the root again at the next wait; a run
            // now finds out whether it is still there.
            Ok(WatchNews::Lost) => note_seen(inbox, index, Seen::Change),
            Ok(WatchNews::Limit) => return Some(WatchDown::limit()),
            Ok(WatchNews::Unwatchable(why)) => return Some(WatchDown::unwatchable(why)),
            Err(why) => {
                return Some(WatchDown::unwatched(format!(
                    "the watch connection failed: {why}"
                )))
            }
        }
    }
    None
}
