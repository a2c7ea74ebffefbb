//! `--bwlimit`: a rate shared by every thread that moves bytes. Each
//! caller reports the bytes it just moved; the bytes owed beyond the rate
//! since the last report are a debt, and once the debt is worth a tenth of
//! a second the caller sleeps it off (under the lock: every mover waits).
//! Averaged this way, as rsync does, short bursts pass at full speed and
//! no burst goes beyond a tenth of a second's worth ahead of the rate.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The debt that is let run before a sleep pays it off.
const SLACK: Duration = Duration::from_millis(100);

/// The most bytes one call moves before it reports them when paced: with
/// the slack above, what bounds a burst.
pub const PACED_CHUNK: usize = 64 << 10;

#[derive(Debug)]
pub struct Throttle {
    /// Bytes per second; 0: no limit.
    rate: AtomicU64,
    /// Bytes moved and not yet paid for by time, and when last counted.
    debt: Mutex<(f64, Option<Instant>)>,
}

impl Throttle {
    /// A throttle at `rate` bytes per second (0: none).
    pub fn new(rate: u64) -> Throttle {
        Throttle {
            rate: AtomicU64::new(rate),
            debt: Mutex::new((0.0, None)),
        }
    }

    pub fn set_rate(&self, rate: u64) {
        self.rate.store(rate, Ordering::Relaxed);
    }

    pub fn rate(&self) -> u64 {
        self.rate.load(Ordering::Relaxed)
    }

    /// `n` bytes were just moved: sleep as long as the rate asks.
    pub fn pace(&self, n: usize) {
        let rate = self.rate() as f64;
        if rate == 0.0 || n == 0 {
            return;
        }
        let mut debt = self.debt.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let paid = debt
            .1
            .map_or(0.0, |t| now.duration_since(t).as_secs_f64() * rate);
        debt.0 = (debt.0 - paid).max(0.0) + n as f64;
        debt.1 = Some(now);
        let owed = Duration::from_secs_f64(debt.0 / rate);
        if owed < SLACK {
            return;
        }
        std::thread::sleep(owed);
        // What the sleep paid, measured: an oversleep is credited.
        let after = Instant::now();
        let slept = after.duration_since(now).as_secs_f64() * rate;
        debt.0 = (debt.0 - slept).max(0.0);
        debt.1 = Some(after);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_beyond_the_slack_take_their_time() {
        let t = Throttle::new(1 << 20);
        let start = Instant::now();
        for _ in 0..8 {
            t.pace(64 << 10);
        }
        // 512 KiB at 1 MiB/s: half a second, less the slack at most.
        assert!(start.elapsed() >= Duration::from_millis(400));
    }
}
