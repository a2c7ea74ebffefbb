//! A session's hand-offs to its reader and writer threads. A thread sleeps
//! only when there is nothing to take, and is woken only when one sleeps:
//! a push of many small files, whose writes keep the writer threads busy,
//! then costs no system call per file to hand each over (a channel behind
//! a mutex cost about ten futex calls and five context switches per file).

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, MutexGuard};

/// Jobs for a pool of threads, at most `capacity` waiting.
pub(super) struct WorkQueue<T> {
    state: Mutex<Queued<T>>,
    /// A job came, or the queue closed (for the threads that sleep).
    ready: Condvar,
    /// A job was taken from a full queue (for the sender).
    room: Condvar,
    capacity: usize,
}

struct Queued<T> {
    jobs: VecDeque<T>,
    closed: bool,
    /// Threads asleep until a job comes.
    idle: usize,
    /// Senders asleep until there is room.
    full: usize,
}

impl<T> WorkQueue<T> {
    pub(super) fn new(capacity: usize) -> WorkQueue<T> {
        WorkQueue {
            state: Mutex::new(Queued {
                jobs: VecDeque::new(),
                closed: false,
                idle: 0,
                full: 0,
            }),
            ready: Condvar::new(),
            room: Condvar::new(),
            capacity: capacity.max(1),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queued<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queue `job`, waiting while the queue is full (`before_sleep` is
    /// called, without the queue's lock, before each wait: called under
    /// it, the flush it makes held up the other threads of the queue, and
    /// a push of 6,000 files cost 20% more context switches).
    pub(super) fn push(&self, job: T, before_sleep: &dyn Fn()) {
        let mut queued = self.lock();
        while queued.jobs.len() >= self.capacity {
            drop(queued);
            before_sleep();
            queued = self.lock();
            if queued.jobs.len() < self.capacity {
                break;
            }
            queued.full += 1;
            queued = self.room.wait(queued).unwrap_or_else(|e| e.into_inner());
            queued.full -= 1;
        }
        queued.jobs.push_back(job);
        let wake = queued.idle > 0;
        drop(queued);
        if wake {
            self.ready.notify_one();
        }
    }

    /// The next job, waiting for one; None once the queue is closed and
    /// every job was taken (`before_sleep` as for `push`).
    pub(super) fn pop(&self, before_sleep: &dyn Fn()) -> Option<T> {
        let mut queued = self.lock();
        let mut flushed = false;
        loop {
            if let Some(job) = queued.jobs.pop_front() {
                let wake = queued.full > 0;
                drop(queued);
                if wake {
                    self.room.notify_one();
                }
                return Some(job);
            }
            if queued.closed {
                return None;
            }
            if !flushed {
                // Look again after it: a job may have come meanwhile.
                flushed = true;
                drop(queued);
                before_sleep();
                queued = self.lock();
                continue;
            }
            flushed = false;
            queued.idle += 1;
            queued = self.ready.wait(queued).unwrap_or_else(|e| e.into_inner());
            queued.idle -= 1;
        }
    }

    /// No more jobs come: the threads end once the queue is empty.
    pub(super) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }
}

/// Writes handed to the writer threads and not finished yet.
#[derive(Default)]
pub(super) struct InFlight {
    /// Writes not finished, and threads waiting for none to be left.
    state: Mutex<(usize, usize)>,
    done: Condvar,
}

impl InFlight {
    fn lock(&self) -> MutexGuard<'_, (usize, usize)> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn add(&self) {
        self.lock().0 += 1;
    }

    fn finish(&self) {
        let mut state = self.lock();
        state.0 -= 1;
        let wake = state.0 == 0 && state.1 > 0;
        drop(state);
        if wake {
            self.done.notify_all();
        }
    }

    /// Wait until every write handed over is finished (`before_sleep`
    /// as for `WorkQueue::push`).
    pub(super) fn wait_idle(&self, before_sleep: &dyn Fn()) {
        let mut state = self.lock();
        if state.0 > 0 {
            drop(state);
            before_sleep();
            state = self.lock();
        }
        while state.0 > 0 {
            state.1 += 1;
            state = self.done.wait(state).unwrap_or_else(|e| e.into_inner());
            state.1 -= 1;
        }
    }
}

/// Marks one write of the writer threads finished when dropped (even if
/// the write panics, or every later write would wait for it for good).
pub(super) struct Finish<'a>(pub(super) &'a InFlight);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.0.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_is_taken_once_and_the_threads_end_when_closed() {
        let queue = WorkQueue::new(3);
        let taken = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    while let Some(job) = queue.pop(&|| ()) {
                        taken.lock().unwrap().push(job);
                    }
                });
            }
            for job in 0..1000 {
                queue.push(job, &|| ());
            }
            queue.close();
        });
        let mut taken = taken.into_inner().unwrap();
        taken.sort_unstable();
        assert_eq!(taken, (0..1000).collect::<Vec<_>>());
    }

    #[test]
    fn wait_idle_returns_once_every_write_is_finished() {
        let in_flight = InFlight::default();
        let finished = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..8 {
                in_flight.add();
                s.spawn(|| {
                    let _done = Finish(&in_flight);
                    finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                });
            }
            in_flight.wait_idle(&|| ());
            assert_eq!(finished.load(std::sync::atomic::Ordering::SeqCst), 8);
        });
    }
}
