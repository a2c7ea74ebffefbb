//! The sync's progress line on a terminal (stderr): a spinner while the
//! roots are scanned, then files and bytes against the plan's totals with
//! the time left. It is a display that can be stopped and started again:
//! the interactive mode stops it, and waits until it is erased, before it
//! takes the screen, so no line of it can land in the list or stay under
//! it.

use accord_engine::Progress;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the line is drawn again.
const TICK: Duration = Duration::from_millis(100);

/// A progress line that can be stopped (joined and erased) and started
/// again around the interactive mode.
pub(crate) struct Display {
    progress: Arc<Progress>,
    running: Mutex<Option<Running>>,
}

struct Running {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl Display {
    /// The display of `progress`, not yet drawing; `None` when nothing is
    /// to be drawn (quiet, JSON, or stderr is not a terminal).
    pub(crate) fn for_run(progress: Arc<Progress>, quiet: bool) -> Option<Display> {
        (!quiet && std::io::stderr().is_terminal()).then(|| Display {
            progress,
            running: Mutex::new(None),
        })
    }

    /// Draw until `stop` (nothing if already drawing).
    pub(crate) fn start(&self) {
        let mut running = self.running.lock().unwrap_or_else(|e| e.into_inner());
        if running.is_some() {
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (progress, flag) = (self.progress.clone(), stop.clone());
        let thread = std::thread::spawn(move || draw(&progress, &flag));
        *running = Some(Running { stop, thread });
    }

    /// Stop drawing and return once the line is erased: after this,
    /// nothing of the display is written until `start`.
    pub(crate) fn stop(&self) {
        let running = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(running) = running {
            running.stop.store(true, Ordering::SeqCst);
            let _ = running.thread.join();
        }
    }
}

impl Drop for Display {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Draw the line every tick until `stop`, then erase it.
fn draw(p: &Progress, stop: &AtomicBool) {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10));
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
        bar.set_style(style);
    }
    let scan_start = Instant::now();
    let mut copy_start = None;
    while !stop.load(Ordering::SeqCst) {
        let line = if p.planned.load(Ordering::Relaxed) {
            let started = *copy_start.get_or_insert_with(Instant::now);
            copying_line(&Counts::of(p), started.elapsed())
        } else {
            format!("scanning {}", clock(scan_start.elapsed()))
        };
        bar.set_message(line);
        bar.tick();
        std::thread::sleep(TICK);
    }
    bar.finish_and_clear();
}

/// The counters read once.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counts {
    pub files_done: u64,
    pub files_total: u64,
    pub bytes_done: u64,
    pub bytes_total: u64,
}

impl Counts {
    fn of(p: &Progress) -> Counts {
        Counts {
            files_done: p.files_done.load(Ordering::Relaxed),
            files_total: p.files_total.load(Ordering::Relaxed),
            bytes_done: p.bytes_done.load(Ordering::Relaxed),
            bytes_total: p.bytes_total.load(Ordering::Relaxed),
        }
    }

    /// How far along the copies are, 0 to 1: the mean of the files' and
    /// the bytes' shares. A run of many small files costs by the file, one
    /// of a few large ones by the byte; the mean follows whichever leads
    /// the run (bytes alone said 16 minutes for a run of small files that
    /// ended in 13 seconds).
    pub(crate) fn fraction(&self) -> f64 {
        let share = |done: u64, total: u64| {
            if total == 0 {
                1.0
            } else {
                (done as f64 / total as f64).min(1.0)
            }
        };
        (share(self.files_done, self.files_total) + share(self.bytes_done, self.bytes_total)) / 2.0
    }
}

/// The line while copying: `files 3/10, 1.2 MiB/4.0 MiB, 2.3 MiB/s, 0:12 left`.
pub(crate) fn copying_line(c: &Counts, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        c.bytes_done as f64 / secs
    } else {
        0.0
    };
    let mut line = format!(
        "files {}/{}, {}/{}, {}/s",
        c.files_done,
        c.files_total,
        human_bytes(c.bytes_done),
        human_bytes(c.bytes_total),
        human_bytes(rate as u64)
    );
    if let Some(left) = time_left(c.fraction(), elapsed) {
        line.push_str(&format!(", {} left", clock(left)));
    }
    line
}

/// The time left at `fraction` done after `elapsed`, once it can be told
/// (a second in, something done).
pub(crate) fn time_left(fraction: f64, elapsed: Duration) -> Option<Duration> {
    if elapsed < Duration::from_secs(1) || fraction <= 0.0 {
        return None;
    }
    let left = elapsed.as_secs_f64() * (1.0 - fraction) / fraction;
    Some(Duration::from_secs_f64(left.min(360_000.0)))
}

/// `m:ss`, or `h:mm:ss` from an hour.
pub(crate) fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// Bytes in binary units, as the mirror's summary shows them.
pub(crate) use crate::summary::bytes as human_bytes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_shown_in_binary_units() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.0 KiB");
        assert_eq!(human_bytes(1_258_291), "1.2 MiB");
        assert_eq!(human_bytes(5 << 30), "5.0 GiB");
    }

    #[test]
    fn the_time_left_weighs_files_and_bytes() {
        // Half the files and half the bytes after 10 s: 10 s left.
        let half = Counts {
            files_done: 50,
            files_total: 100,
            bytes_done: 500,
            bytes_total: 1000,
        };
        let left = time_left(half.fraction(), Duration::from_secs(10)).unwrap();
        assert_eq!(left.as_secs(), 10);
        // Most files done, a large one still going: neither 0 nor bytes'
        // own guess (which would be 9 times the elapsed time).
        let big_last = Counts {
            files_done: 99,
            files_total: 100,
            bytes_done: 100,
            bytes_total: 1000,
        };
        let left = time_left(big_last.fraction(), Duration::from_secs(10)).unwrap();
        assert!(left.as_secs() > 5 && left.as_secs() < 90, "{left:?}");
        assert_eq!(time_left(0.0, Duration::from_secs(10)), None);
        assert_eq!(time_left(0.5, Duration::from_millis(10)), None);
    }

    #[test]
    fn clock_reads_as_minutes_and_hours() {
        assert_eq!(clock(Duration::from_secs(5)), "0:05");
        assert_eq!(clock(Duration::from_secs(754)), "12:34");
        assert_eq!(clock(Duration::from_secs(3723)), "1:02:03");
    }
}
