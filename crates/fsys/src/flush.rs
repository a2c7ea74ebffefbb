//! Flushes of one file system, asked for by several threads at once.
//!
//! A run asks for a flush after each batch of temps, from as many threads
//! as batches are in flight. Each flush of a disk costs a journal commit
//! and a cache flush of the device whatever it carries, so calls that
//! arrive while one runs are served by a single next one (a group commit):
//! it begins after each of them was asked for, so it covers what each
//! wrote before asking.
//!
//! A failed flush is reported to every caller whose call it ended within:
//! the kernel reports a writeback error to one `syncfs` of a descriptor
//! only, and the pages that failed may be any caller's.

use std::io;
use std::sync::{Condvar, Mutex};

#[derive(Debug, Default)]
pub(crate) struct FlushGroup {
    state: Mutex<Flushes>,
    ended_one: Condvar,
}

#[derive(Debug, Default)]
struct Flushes {
    /// Flushes begun, and ended (they run one at a time).
    begun: u64,
    ended: u64,
    running: bool,
    /// Callers waiting for a flush to end.
    waiting: usize,
    /// The last flush that failed: its number and its error.
    failed: Option<(u64, i32)>,
}

impl FlushGroup {
    /// Make durable what this thread wrote before the call: `flush` is
    /// called by this thread, or by another whose call began after ours.
    pub(crate) fn flush(&self, flush: impl Fn() -> io::Result<()>) -> io::Result<()> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let ended_before = s.ended;
        // A flush that begins after this point covers our writes.
        let covering = s.begun + 1;
        while s.ended < covering {
            if s.running {
                s.waiting += 1;
                s = self.ended_one.wait(s).unwrap_or_else(|e| e.into_inner());
                s.waiting -= 1;
                continue;
            }
            s.running = true;
            s.begun += 1;
            let number = s.begun;
            drop(s);
            let result = flush();
            s = self.state.lock().unwrap_or_else(|e| e.into_inner());
            s.running = false;
            s.ended = number;
            if let Err(e) = &result {
                s.failed = Some((number, e.raw_os_error().unwrap_or(libc::EIO)));
            }
            self.ended_one.notify_all();
        }
        match s.failed {
            Some((number, errno)) if number > ended_before => {
                Err(io::Error::from_raw_os_error(errno))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;
    use std::thread;

    impl FlushGroup {
        fn waiting(&self) -> usize {
            self.state.lock().unwrap().waiting
        }
    }

    /// Start `n` callers while a first flush is held running; once they
    /// all wait, let it end with `first`. Returns each later caller's
    /// result and how many flushes ran.
    fn callers_during_a_flush(
        n: usize,
        first: io::Result<()>,
    ) -> (io::Result<()>, Vec<io::Result<()>>, usize) {
        let group = FlushGroup::default();
        let runs = AtomicUsize::new(0);
        let (began, on_begin) = mpsc::channel();
        let (end, on_end) = mpsc::channel::<()>();
        let on_end = Mutex::new(on_end);
        let first = Mutex::new(Some(first));
        let flush = || {
            runs.fetch_add(1, Ordering::SeqCst);
            let _ = began.send(());
            let mine = first.lock().unwrap().take();
            match mine {
                // The first flush ends when the test says so.
                Some(result) => {
                    on_end.lock().unwrap().recv().unwrap();
                    result
                }
                None => Ok(()),
            }
        };
        thread::scope(|s| {
            let a = s.spawn(|| group.flush(flush));
            on_begin.recv().unwrap();
            let later: Vec<_> = (0..n).map(|_| s.spawn(|| group.flush(flush))).collect();
            while group.waiting() < n {
                thread::yield_now();
            }
            end.send(()).unwrap();
            let a = a.join().unwrap();
            let later = later.into_iter().map(|t| t.join().unwrap()).collect();
            (a, later, runs.load(Ordering::SeqCst))
        })
    }

    #[test]
    fn calls_made_during_a_flush_share_the_next_one() {
        let (a, later, runs) = callers_during_a_flush(3, Ok(()));
        assert!(a.is_ok());
        assert!(later.iter().all(|r| r.is_ok()));
        // Their writes may have missed the first flush: one more covers
        // all three.
        assert_eq!(runs, 2);
    }

    #[test]
    fn a_failed_flush_fails_every_call_it_ended_within() {
        let eio = io::Error::from_raw_os_error(libc::EIO);
        let (a, later, runs) = callers_during_a_flush(2, Err(eio));
        assert_eq!(a.unwrap_err().raw_os_error(), Some(libc::EIO));
        // The kernel may have reported their pages' error to the first
        // flush only: the next one succeeding proves nothing.
        for r in later {
            assert_eq!(r.unwrap_err().raw_os_error(), Some(libc::EIO));
        }
        assert_eq!(runs, 2);
    }

    #[test]
    fn a_call_after_a_failure_gets_its_own_result() {
        let group = FlushGroup::default();
        let failed = group.flush(|| Err(io::Error::from_raw_os_error(libc::ENOSPC)));
        assert_eq!(failed.unwrap_err().raw_os_error(), Some(libc::ENOSPC));
        assert!(group.flush(|| Ok(())).is_ok());
    }
}
