//! The progress line on a terminal (stderr), drawn by a thread of its own
//! from the engine's `Progress` counters while a run goes on: the mirror's
//! and the sync's.

use accord_engine::Progress;
use std::sync::atomic::{AtomicBool, Ordering};

/// Run `work`, showing `progress` on stderr meanwhile when it is given.
/// `spinner`: tick a "scanning" spinner until the plan is made (a sync
/// draws nothing before: its interactive mode has the terminal then).
pub fn while_showing<T>(progress: Option<&Progress>, spinner: bool, work: impl FnOnce() -> T) -> T {
    let Some(progress) = progress else {
        return work();
    };
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| draw(progress, spinner, &done));
        let result = work();
        done.store(true, Ordering::SeqCst);
        result
    })
}

/// What the display shows while a run's totals are unknown: scanning, or,
/// for a run that writes as it scans (a task run), what it did so far.
const SCANNING: &str = "{spinner} {msg}";
const STREAMING: &str = "{spinner} {msg} {bytes} {bytes_per_sec}";
/// Once the plan is made: how far along, with its rate and time left.
const PLANNED: &str = "{spinner} {msg} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}";

/// One progress display for every run: a spinner until files are done or
/// the totals are known, then the files and bytes so far (against the
/// totals, with the time left, once the plan gives them).
fn draw(p: &Progress, spinner: bool, done: &AtomicBool) {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10));
    let style = |template| {
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar())
    };
    let mut shown = SCANNING;
    bar.set_style(style(shown));
    bar.set_message("scanning");
    while !done.load(Ordering::SeqCst) {
        let planned = p.planned.load(Ordering::Relaxed);
        if !planned && !spinner {
            // Nothing is drawn before the plan (see `while_showing`).
            std::thread::sleep(std::time::Duration::from_millis(100));
            continue;
        }
        let files_done = p.files_done.load(Ordering::Relaxed);
        let want = if planned {
            PLANNED
        } else if files_done > 0 {
            STREAMING
        } else {
            SCANNING
        };
        if want != shown {
            shown = want;
            bar.set_style(style(shown));
        }
        bar.set_position(p.bytes_done.load(Ordering::Relaxed));
        if shown == PLANNED {
            bar.set_length(p.bytes_total.load(Ordering::Relaxed));
            bar.set_message(format!(
                "files {files_done}/{}",
                p.files_total.load(Ordering::Relaxed)
            ));
        } else if shown == STREAMING {
            bar.set_message(format!("files {files_done}"));
        }
        if shown != PLANNED {
            bar.tick();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    bar.finish_and_clear();
}
