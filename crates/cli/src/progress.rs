//! The progress line on a terminal (stderr), the mirror's, the task
//! runs' and the sync's alike: a spinner while the roots are scanned, then
//! files and bytes against the plan's totals, the rate and the time left,
//! drawn by a thread of its own from the engine's `Progress` counters.
//! `while_showing` draws around one piece of work; a `Display` can be
//! stopped (joined and erased) and started again, which the sync's
//! interactive mode does before it takes the screen, so that no line of
//! it lands in the list or stays under it.

use accord_engine::Progress;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the line is drawn again.
const TICK: Duration = Duration::from_millis(100);

/// Run `work`, showing `progress` on stderr meanwhile when it is given;
/// the line is erased before this returns.
pub fn while_showing<T>(progress: Option<&Progress>, work: impl FnOnce() -> T) -> T {
    let Some(progress) = progress else {
        return work();
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let drawer = s.spawn(|| draw(progress, &stop));
        let result = work();
        stop.store(true, Ordering::SeqCst);
        let _ = drawer.join();
        result
    })
}

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

/// What the display shows: a spinner and a line of our own making
/// (`Line`), so that totals, rates and the estimate are in the summary's
/// units.
const TEMPLATE: &str = "{spinner} {msg}";

/// Draw the line every tick until `stop`, then erase it.
fn draw(p: &Progress, stop: &AtomicBool) {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10));
    bar.set_style(
        ProgressStyle::with_template(TEMPLATE).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message("scanning");
    let mut line = Line::new();
    while !stop.load(Ordering::SeqCst) {
        if let Some(text) = line.text(&Counts::read(p)) {
            bar.set_message(text);
        }
        bar.tick();
        std::thread::sleep(TICK);
    }
    bar.finish_and_clear();
}

/// The counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Counts {
    planned: bool,
    files_done: u64,
    files_total: u64,
    bytes_done: u64,
    bytes_total: u64,
}

impl Counts {
    fn read(p: &Progress) -> Counts {
        Counts {
            planned: p.planned.load(Ordering::Relaxed),
            files_done: p.files_done.load(Ordering::Relaxed),
            files_total: p.files_total.load(Ordering::Relaxed),
            bytes_done: p.bytes_done.load(Ordering::Relaxed),
            bytes_total: p.bytes_total.load(Ordering::Relaxed),
        }
    }

    /// How much of the work is done, from files and bytes together: each
    /// file costs as much as `PER_FILE` bytes besides its own bytes
    /// (opening, creating, renaming, flushing), so that a run of many
    /// small files is not measured by its bytes alone, nor one of a few
    /// big files by its count alone.
    fn fraction(&self) -> f64 {
        let units = |files: u64, bytes: u64| files as f64 * PER_FILE + bytes as f64;
        let total = units(self.files_total, self.bytes_total);
        if total <= 0.0 {
            return 1.0;
        }
        (units(self.files_done, self.bytes_done) / total).clamp(0.0, 1.0)
    }
}

/// What one file costs besides its bytes, in bytes: about what a disk
/// writes in the time a file's create, rename and flush take.
const PER_FILE: f64 = 128.0 * 1024.0;

/// The line's state: when the planned work began, and the recent pace.
struct Line {
    started: Option<std::time::Instant>,
    begun: std::time::Instant,
    pace: Pace,
}

impl Line {
    fn new() -> Line {
        Line {
            started: None,
            begun: std::time::Instant::now(),
            pace: Pace::default(),
        }
    }

    /// The line for these counts (None: leave the scanning message).
    fn text(&mut self, c: &Counts) -> Option<String> {
        use crate::summary::{bytes, count};
        if !c.planned {
            if c.files_done == 0 {
                return None;
            }
            // A run that writes as it scans: what it did so far.
            let rate = c.bytes_done as f64 / self.begun.elapsed().as_secs_f64().max(0.001);
            return Some(format!(
                "{} files, {} ({}/s)",
                count(c.files_done),
                bytes(c.bytes_done),
                bytes(rate as u64)
            ));
        }
        let started = *self.started.get_or_insert_with(std::time::Instant::now);
        let elapsed = started.elapsed().as_secs_f64();
        let rate = c.bytes_done as f64 / elapsed.max(0.001);
        let fraction = c.fraction();
        self.pace.add(elapsed, fraction);
        Some(format!(
            "{}/{} files, {}/{} ({}/s), {}",
            count(c.files_done),
            count(c.files_total),
            bytes(c.bytes_done),
            bytes(c.bytes_total),
            bytes(rate as u64),
            time_left(fraction, elapsed, self.pace.per_second())
        ))
    }
}

/// How fast the work went lately: the fraction done per second over the
/// last `PACE_WINDOW` seconds, so that the estimate follows a run whose
/// pace changes (a disk that fills its cache, a busy machine) instead of
/// its average since the start.
#[derive(Default)]
struct Pace {
    samples: std::collections::VecDeque<(f64, f64)>,
}

const PACE_WINDOW: f64 = 5.0;

impl Pace {
    fn add(&mut self, at: f64, fraction: f64) {
        self.samples.push_back((at, fraction));
        while self
            .samples
            .front()
            .is_some_and(|(t, _)| at - t > PACE_WINDOW)
        {
            self.samples.pop_front();
        }
    }

    /// None until the window holds a second of progress.
    fn per_second(&self) -> Option<f64> {
        let (&(t0, f0), &(t1, f1)) = (self.samples.front()?, self.samples.back()?);
        (t1 - t0 >= 1.0 && f1 > f0).then(|| (f1 - f0) / (t1 - t0))
    }
}

/// "3 min 05 s left", from how much is done and how fast it went lately;
/// "estimating time left" until there is enough to go by.
fn time_left(fraction: f64, elapsed: f64, pace: Option<f64>) -> String {
    if fraction >= 1.0 {
        return "finishing".into();
    }
    let Some(pace) = pace.filter(|_| fraction >= 0.01 && elapsed >= 1.0) else {
        return "estimating time left".into();
    };
    let left = (1.0 - fraction) / pace;
    format!("{} left", crate::summary::duration(left))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_count_as_well_as_bytes() {
        // 1,000 empty files done of 2,000, and no bytes at all: half done.
        let c = Counts {
            planned: true,
            files_done: 1000,
            files_total: 2000,
            ..Counts::default()
        };
        assert!((c.fraction() - 0.5).abs() < 1e-9);
        // One big file done of two: half the work whatever the count says.
        let c = Counts {
            planned: true,
            files_done: 1,
            files_total: 2,
            bytes_done: 1 << 30,
            bytes_total: 2 << 30,
        };
        assert!((c.fraction() - 0.5).abs() < 1e-3);
    }

    #[test]
    fn the_time_left_follows_the_recent_pace() {
        assert_eq!(time_left(0.6, 10.0, Some(0.05)), "8.00 s left");
        assert_eq!(time_left(0.25, 60.0, Some(0.25 / 60.0)), "3 min 00 s left");
        assert_eq!(time_left(0.001, 60.0, Some(0.1)), "estimating time left");
        assert_eq!(time_left(0.5, 60.0, None), "estimating time left");
        assert_eq!(time_left(1.0, 60.0, None), "finishing");
    }

    #[test]
    fn the_pace_forgets_what_is_older_than_its_window() {
        let mut pace = Pace::default();
        // Slow for 20 s (1% a second), then fast (5% a second) for 10 s.
        for t in 0..=20 {
            pace.add(t as f64, t as f64 * 0.01);
        }
        for t in 21..=30 {
            pace.add(t as f64, 0.2 + (t - 20) as f64 * 0.05);
        }
        assert!((pace.per_second().unwrap() - 0.05).abs() < 1e-9);
    }
}
