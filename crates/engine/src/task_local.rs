//! Running a task run's workers in this process: the local executor
//! (`MemoryQueue`, N threads) and the threads of one `accord worker`
//! (a `RedisQueue` each).

use crate::task_run::{open_task_roots, work, WorkerEnd, WorkerOptions};
use crate::task_spec::RunSpec;
use crate::Progress;
use accord_queue::TaskQueue;
use std::sync::atomic::AtomicBool;

/// Run one worker thread per queue (each thread its own connection when
/// the queue is remote) until the run is done or stopped; how each ended.
pub fn run_workers(
    queues: &[&dyn TaskQueue],
    spec: &RunSpec,
    opts: &WorkerOptions,
    progress: &Progress,
    stop: &AtomicBool,
) -> Vec<WorkerEnd> {
    let (src, dst) = match open_task_roots(spec) {
        Ok(r) => r,
        Err(f) => return vec![WorkerEnd::Fatal(f.to_string())],
    };
    std::thread::scope(|s| {
        let threads: Vec<_> = queues
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let (src, dst) = (&src, &dst);
                let thread = format!("{}/{i}", opts.name);
                s.spawn(move || work(*q, (src, dst), spec, opts, &thread, progress, stop))
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join()
                    .unwrap_or_else(|_| WorkerEnd::Fatal("a worker thread panicked".into()))
            })
            .collect()
    })
}
