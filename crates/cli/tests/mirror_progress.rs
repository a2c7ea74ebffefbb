//! The progress display a person sees, read off a real terminal (tmux): a
//! 100,000-file mirror shows its totals and a time left, and the time
//! left it shows while the run is under way puts the end within 30% of
//! when the run really ends, wherever the run kept the pace it had when
//! that was shown. Where the machine's pace changed after (another job
//! started or ended), no estimate could have known: there the time left
//! must be what the pace shown on the screen just before gives.

mod mirror_common;
use mirror_common::*;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const FILES: usize = 100_000;
/// How long the run may take at most on a loaded 2-core machine.
const WAIT: Duration = Duration::from_secs(600);

struct Tmux(String);

impl Tmux {
    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .args(["-L", &self.0, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("run tmux")
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "mirror"]).stdout)
            .into_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// `FILES` files of 0–8 KiB in 200 directories, flushed to disk so that
/// their own writeback does not slow the run down part-way.
fn many_files(root: &Path) {
    let mut rng = Rng(7);
    let data = vec![0x5au8; 8192];
    for d in 0..200 {
        let dir = root.join(format!("d{d:03}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..FILES / 200 {
            let len = (rng.next() % 8192) as usize;
            std::fs::write(dir.join(format!("f{f:04}")), &data[..len]).unwrap();
        }
    }
    unsafe { libc::sync() };
}

/// "12.3 s left", "4 min 05 s left", "1 h 02 min left" → seconds.
fn seconds_left(line: &str) -> Option<f64> {
    let before = line.split(" left").next()?;
    let words: Vec<&str> = before.rsplit(", ").next()?.split_whitespace().collect();
    match words.as_slice() {
        [s, "s"] => s.parse().ok(),
        [m, "min", s, "s"] => Some(m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?),
        [h, "h", m, "min"] => Some(h.parse::<f64>().ok()? * 3600.0 + m.parse::<f64>().ok()? * 60.0),
        _ => None,
    }
}

#[test]
fn a_big_run_shows_its_totals_and_a_time_left_that_comes_true() {
    if !need("tmux", "tmux") {
        return;
    }
    let (t, src, dst, state) = roots();
    many_files(&src);
    let status = t.path().join("status");
    let shell = format!(
        "ACCORD_STATE_DIR={} {} mirror {}/ {}; echo $? > {}; sleep 600",
        state.display(),
        bin().display(),
        src.display(),
        dst.display(),
        status.display()
    );
    let tmux = Tmux(format!("accord-progress-{}", std::process::id()));
    let out = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "mirror",
        "-x",
        "160",
        "-y",
        "10",
        &shell,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started = Instant::now();
    // (seconds since the start, time left shown, files done shown) while
    // the run goes on.
    let mut shown: Vec<Shown> = Vec::new();
    let mut totals_seen = false;
    let ended = loop {
        if std::fs::read_to_string(&status).is_ok_and(|s| !s.trim().is_empty()) {
            break started.elapsed().as_secs_f64();
        }
        assert!(
            started.elapsed() < WAIT,
            "the mirror did not end within {WAIT:?}"
        );
        let screen = tmux.screen();
        let at = started.elapsed().as_secs_f64();
        for line in screen.lines() {
            let planned = line.contains("/100,000 files");
            totals_seen |= planned;
            // Every line with the totals, with or without a time left yet:
            // the display's own pace goes back to the first of them.
            if let Some(done) = files_done(line).filter(|_| planned) {
                let left = seconds_left(line);
                shown.push(Shown { at, left, done });
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        std::fs::read_to_string(&status).unwrap().trim(),
        "0",
        "{}",
        tmux.screen()
    );
    assert!(
        totals_seen,
        "no total shown; last screen:\n{}",
        tmux.screen()
    );
    // The estimates of the middle half of the run, each against the end
    // where the pace held, else against the pace shown before it.
    let mut errors: Vec<f64> = Vec::new();
    let mut steady = 0;
    for (i, now) in shown.iter().enumerate() {
        let Some(left) = now.left else {
            continue;
        };
        if !(0.25 * ended..=0.75 * ended).contains(&now.at) {
            continue;
        }
        let Some(before) = pace_before(&shown[..=i]) else {
            continue;
        };
        let after = (FILES as f64 - now.done) / (ended - now.at);
        let expected_left = if (1.0 / PACE_HELD..=PACE_HELD).contains(&(after / before)) {
            steady += 1;
            ended - now.at
        } else {
            (FILES as f64 - now.done) / before
        };
        errors.push((left - expected_left).abs() / ended);
    }
    assert!(
        errors.len() >= 3,
        "too few estimates in the middle of a {ended:.1} s run: {shown:?}"
    );
    errors.sort_by(f64::total_cmp);
    let median = errors[errors.len() / 2];
    eprintln!(
        "mirror of {FILES} files: {ended:.1} s; {} estimates in its middle half \
         ({steady} where the pace held to the end), median error {:.0}%",
        errors.len(),
        median * 100.0
    );
    assert!(
        median <= 0.30,
        "the time left missed by {:.0}% (median) of a {ended:.1} s run: {shown:?}",
        median * 100.0
    );
}

/// What the progress line said at one moment of the run.
#[derive(Debug)]
struct Shown {
    /// Seconds since the run started.
    at: f64,
    /// The time left, in seconds (None: not estimated yet).
    left: Option<f64>,
    /// Files done.
    done: f64,
}

/// The pace after a moment counts as the one before it when they differ
/// by at most this factor.
const PACE_HELD: f64 = 1.3;

/// Files a second over the last five seconds of `shown` (the window the
/// display itself goes by), or None before there is a second of them.
fn pace_before(shown: &[Shown]) -> Option<f64> {
    let now = shown.last()?;
    let first = shown.iter().find(|s| now.at - s.at <= 5.0)?;
    (now.at - first.at >= 1.0 && now.done > first.done)
        .then(|| (now.done - first.done) / (now.at - first.at))
}

/// "12,345/100,000 files, …" → 12345.
fn files_done(line: &str) -> Option<f64> {
    let (done, _) = line.split_once('/')?;
    let done = done.rsplit(' ').next()?.replace(',', "");
    done.parse().ok()
}

#[test]
fn times_left_are_read_as_shown() {
    assert_eq!(
        seconds_left("⠁ 1/2 files, 1 B/2 B (1 B/s), 12.3 s left"),
        Some(12.3)
    );
    assert_eq!(seconds_left("x, 4 min 05 s left"), Some(245.0));
    assert_eq!(seconds_left("x, 1 h 02 min left"), Some(3720.0));
    assert_eq!(seconds_left("x, estimating time left"), None);
    assert_eq!(
        files_done("⠁ 12,345/100,000 files, 1 B/2 B (1 B/s), 1 s left"),
        Some(12345.0)
    );
}
