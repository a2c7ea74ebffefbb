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

/// What the display shows: a spinner and a line of our own making
/// (`Line`), so that totals, rates and the estimate are in the summary's
/// units.
const TEMPLATE: &str = "{spinner} {msg}";

/// One progress display for every run: a spinner while scanning, then the
/// files and bytes so far (against the totals, with the time left, once
/// the plan gives them).
fn draw(p: &Progress, spinner: bool, done: &AtomicBool) {
    use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10));
    bar.set_style(
        ProgressStyle::with_template(TEMPLATE).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_message("scanning");
    let mut line = Line::new();
    while !done.load(Ordering::SeqCst) {
        let planned = p.planned.load(Ordering::Relaxed);
        if !planned && !spinner {
            // Nothing is drawn before the plan (see `while_showing`).
            std::thread::sleep(std::time::Duration::from_millis(100));
            continue;
        }
        if let Some(text) = line.text(&Counts::read(p)) {
            bar.set_message(text);
        }
        bar.tick();
        std::thread::sleep(std::time::Duration::from_millis(100));
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
