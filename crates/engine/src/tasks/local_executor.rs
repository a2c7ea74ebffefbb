//! Running a task run's workers in this process: the local executor
//! (`MemoryQueue`, N threads) and the threads of one `accord worker`
//! (a `RedisQueue` each).

use crate::tasks::error::RunFailure;
use crate::tasks::ignore_files::TaskIgnore;
use crate::tasks::leases::{renew_until, Held};
use crate::tasks::memos::TaskMemos;
use crate::tasks::run::{open_task_roots, work, Shared, WorkerEnd, WorkerOptions};
use crate::tasks::spec::RunSpec;
use crate::Progress;
use accord_queue::{CallCost, TaskQueue};
use accord_replica::Replica;
use std::sync::atomic::{AtomicBool, Ordering};

/// Run one worker thread per queue (each thread its own connection when
/// the queue is remote) until the run is done or stopped; how each ended.
///
/// Each worker thread carries out its tasks' plans in a thread pool of its
/// own, as large as its share of the cores: with as many worker threads
/// as cores or more, a task's files go one after the other on its thread.
/// On the shared pool every task would wake every pool thread (spinning
/// for work, then sleeping) and its files' renames would contend for
/// their one directory's lock, for parallelism the other worker threads
/// already give.
pub fn run_workers(
    queues: &[&dyn TaskQueue],
    spec: &RunSpec,
    opts: &WorkerOptions,
    progress: &Progress,
    stop: &AtomicBool,
) -> Vec<WorkerEnd> {
    let (src, dst) = match open_task_roots(spec) {
        Ok((s, d)) => (
            s.with_state_dir(opts.memo_dir.clone()),
            d.with_state_dir(opts.memo_dir.clone()),
        ),
        Err(f) => return vec![WorkerEnd::Fatal(f.into())],
    };
    if let Some(q) = queues.first() {
        // Only for `accord cluster status`: a run goes on without it.
        let _ = crate::tasks::run::join_run(*q, &opts.name);
    }
    let memos = (opts.memo_dir.is_some() && spec.xattrs.any()).then(|| TaskMemos::load(&src, &dst));
    let ignore = match TaskIgnore::new(spec) {
        Ok(i) => i,
        Err(e) => return vec![WorkerEnd::Fatal(e)],
    };
    let held = Held::default();
    let shared = Shared {
        progress,
        memos: memos.as_ref(),
        ignore: &ignore,
        held: &held,
    };
    let over = AtomicBool::new(false);
    let per_thread = pool_threads(queues.len());
    let mut ends = std::thread::scope(|s| {
        let renewer = queues.first().map(|q| {
            let (held, over) = (&held, &over);
            s.spawn(move || renew_until(*q, held, over))
        });
        let threads: Vec<_> = queues
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let (src, dst) = (&src, &dst);
                let thread = format!("{}/{i}", opts.name);
                s.spawn(move || {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(per_thread)
                        .thread_name(move |n| format!("accord-task-{i}.{n}"))
                        .build()
                        .map_err(|e| WorkerEnd::Fatal(RunFailure::ThreadPool(e)))?;
                    let run = || work(*q, (src, dst), spec, opts, &thread, shared, stop);
                    Ok(pool.install(run))
                })
            })
            .collect();
        let ends = threads
            .into_iter()
            .map(|t| match t.join() {
                Ok(Ok(end)) | Ok(Err(end)) => end,
                Err(_) => WorkerEnd::Fatal(RunFailure::Panicked),
            })
            .collect::<Vec<_>>();
        over.store(true, Ordering::Release);
        if let Some(r) = &renewer {
            r.thread().unpark();
        }
        ends
    });
    if let Some(m) = memos {
        m.save(&src, &dst);
    }
    if let Some(end) = final_flush(queues, spec, &dst) {
        ends.push(end);
    }
    ends
}

/// Threads of each worker thread's pool: its share of the cores, at
/// least one.
fn pool_threads(workers: usize) -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / workers.max(1)).max(1)
}

/// A run on a queue of this process flushes the destination once at its
/// end (its tasks do not: see `task_do::carry_out`); a failed flush ends
/// the run in error, since what it wrote may not survive a crash.
fn final_flush(
    queues: &[&dyn TaskQueue],
    spec: &RunSpec,
    dst: &crate::LocalReplica,
) -> Option<WorkerEnd> {
    let in_process = queues.iter().all(|q| q.call_cost() == CallCost::InProcess);
    if !in_process || !spec.fsync {
        return None;
    }
    dst.sync_all()
        .err()
        .map(|e| WorkerEnd::Fatal(RunFailure::Flush(e)))
}
