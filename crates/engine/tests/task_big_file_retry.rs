//! A big file's task run again after its queue call failed (the store
//! restarted, a connection dropped) finishes the copy in the temp the
//! first attempt made, and leaves no temp of its own in the destination.
//!
//! The queue is the in-process one, behind a twin that makes the first
//! push of a big file's ranges fail before the store does anything, as a
//! lost connection does.

use accord_engine::{MirrorConfig, Progress, RunSpec, WorkerEnd, WorkerOptions};
use accord_queue::{
    Add, CallCost, DeadTask, Lease, MemoryQueue, Policy, QueueError, RunState, Stats, TaskId,
    TaskQueue,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// The in-process queue, whose first push of a big file's ranges fails
/// without doing anything.
struct FirstPushLost {
    queue: MemoryQueue,
    lost: AtomicUsize,
}

impl TaskQueue for FirstPushLost {
    fn push(&self, tasks: &[Vec<u8>]) -> Result<(), QueueError> {
        self.queue.push(tasks)
    }
    fn lease(&self, worker: &str, max: usize, wait: Duration) -> Result<Vec<Lease>, QueueError> {
        self.queue.lease(worker, max, wait)
    }
    fn renew(&self, leases: &[Lease]) -> Result<(), QueueError> {
        self.queue.renew(leases)
    }
    fn claim_timeout(&self) -> Duration {
        self.queue.claim_timeout()
    }
    fn ack(&self, ids: &[TaskId]) -> Result<(), QueueError> {
        self.queue.ack(ids)
    }
    fn fail(&self, lease: &Lease, error: &str) -> Result<(), QueueError> {
        self.queue.fail(lease, error)
    }
    fn give_up(&self, lease: &Lease, error: &str) -> Result<(), QueueError> {
        self.queue.give_up(lease, error)
    }
    fn report(&self, task: &[u8], error: &str) -> Result<(), QueueError> {
        self.queue.report(task, error)
    }
    fn set_state(&self, state: RunState) -> Result<(), QueueError> {
        self.queue.set_state(state)
    }
    fn state(&self) -> Result<RunState, QueueError> {
        self.queue.state()
    }
    fn stats(&self) -> Result<Stats, QueueError> {
        self.queue.stats()
    }
    fn dead(&self, max: usize) -> Result<Vec<DeadTask>, QueueError> {
        self.queue.dead(max)
    }
    fn claim(&self, key: &[u8], owner: &str) -> Result<Option<String>, QueueError> {
        self.queue.claim(key, owner)
    }
    fn add(&self, key: &[u8], delta: i64) -> Result<i64, QueueError> {
        self.queue.add(key, delta)
    }
    fn add_once(
        &self,
        mark: &[u8],
        counter: &[u8],
        delta: i64,
        tasks: &[Vec<u8>],
    ) -> Result<(i64, bool), QueueError> {
        // A big file's ranges are counted under "rn", NUL, its path.
        if counter.starts_with(b"rn\0") && self.lost.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(QueueError::Unavailable(
                "connection reset (the test)".into(),
            ));
        }
        self.queue.add_once(mark, counter, delta, tasks)
    }
    fn park(&self, mark: &[u8], task: &[u8]) -> Result<bool, QueueError> {
        self.queue.park(mark, task)
    }
    fn wake(&self, mark: &[u8]) -> Result<(), QueueError> {
        self.queue.wake(mark)
    }
    fn add_many(&self, adds: &[Add]) -> Result<Vec<i64>, QueueError> {
        self.queue.add_many(adds)
    }
    fn call_cost(&self) -> CallCost {
        self.queue.call_cost()
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), QueueError> {
        self.queue.put(key, value)
    }
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, QueueError> {
        self.queue.get(key)
    }
}

#[test]
fn a_big_file_whose_ranges_were_lost_once_leaves_no_temp_behind() {
    let t = tempfile::tempdir().unwrap();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&dst).unwrap();
    // Three ranges of 4 KiB and a bit.
    let data: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i % 251) as u8 + 1).collect();
    std::fs::write(src.join("big"), &data).unwrap();
    let mut spec = RunSpec::new(src.clone(), dst.clone(), &MirrorConfig::default());
    spec.range_size = 4096;
    let queue = FirstPushLost {
        // The failed attempt's lease is handed out again once it times out
        // (a queue that cannot be reached is not told the task failed).
        queue: MemoryQueue::new(Policy {
            claim_timeout: Duration::from_millis(300),
            max_attempts: 5,
        }),
        lost: AtomicUsize::new(0),
    };
    accord_engine::start_run(&queue, &spec).unwrap();
    let opts = WorkerOptions {
        name: "test".into(),
        until_done: true,
        max_backoff: Duration::from_millis(50),
        memo_dir: None,
    };
    let ends = accord_engine::run_workers(
        &[&queue],
        &spec,
        &opts,
        &Progress::default(),
        &AtomicBool::new(false),
    );
    assert!(
        ends.iter().all(|e| matches!(e, WorkerEnd::Done)),
        "{ends:?}"
    );
    assert!(
        queue.lost.load(Ordering::SeqCst) >= 2,
        "the ranges were pushed again after the lost push"
    );
    assert_eq!(std::fs::read(dst.join("big")).unwrap(), data);
    let names: Vec<String> = std::fs::read_dir(&dst)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["big"], "only the copy is left in the destination");
}
