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

/// Run `work`, showing what a streamed run (no totals known in advance)
/// has done so far, when `progress` is given.
pub fn while_streaming<T>(progress: Option<&Progress>, work: impl FnOnce() -> T) -> T {
    let Some(progress) = progress else {
        return work();
    };
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| draw_streamed(progress, &done));
        let result = work();
        done.store(true, Ordering::SeqCst);
        result
    })
}

fn draw_streamed(p: &Progress, done: &AtomicBool) {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10));
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} {bytes} {bytes_per_sec}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    while !done.load(Ordering::SeqCst) {
        bar.set_position(p.bytes_done.load(Ordering::Relaxed));
        bar.set_message(format!("files {}", p.files_done.load(Ordering::Relaxed)));
        bar.tick();
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    bar.finish_and_clear();
}

fn draw(p: &Progress, spinner: bool, done: &AtomicBool) {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10));
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} {msg} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message("scanning");
    while !done.load(Ordering::SeqCst) {
        if p.planned.load(Ordering::Relaxed) {
            bar.set_length(p.bytes_total.load(Ordering::Relaxed));
            bar.set_position(p.bytes_done.load(Ordering::Relaxed));
            bar.set_message(format!(
                "files {}/{}",
                p.files_done.load(Ordering::Relaxed),
                p.files_total.load(Ordering::Relaxed)
            ));
        } else if spinner {
            bar.tick();
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    bar.finish_and_clear();
}
