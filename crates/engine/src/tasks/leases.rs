//! The leases a worker process is at work on, renewed a few times per
//! claim timeout by a thread of their own: a task that takes longer than
//! the timeout (a big file's range on slow storage, a huge directory) is
//! not handed to another worker while its own is alive. Only a lost
//! worker's leases run out.

use accord_queue::{Lease, TaskId, TaskQueue};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

/// The leases held now, by id (their tasks' bytes are not kept: a renewal
/// names a lease by its id and worker).
#[derive(Default)]
pub(crate) struct Held {
    leases: Mutex<HashMap<TaskId, String>>,
}

impl Held {
    fn lock(&self) -> MutexGuard<'_, HashMap<TaskId, String>> {
        self.leases.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn hold(&self, lease: &Lease) {
        self.lock().insert(lease.id.clone(), lease.worker.clone());
    }

    pub fn release(&self, id: &TaskId) {
        self.lock().remove(id);
    }

    fn list(&self) -> Vec<Lease> {
        self.lock()
            .iter()
            .map(|(id, worker)| Lease {
                id: id.clone(),
                task: Vec::new(),
                attempts: 0,
                worker: worker.clone(),
            })
            .collect()
    }
}

/// Renew `held` on `queue` every third of its claim timeout until `over`
/// (whoever sets it unparks this thread, so a run's end does not wait for
/// it). A renewal that fails is not retried early: at worst a lease goes
/// to another worker, and tasks are idempotent.
pub(crate) fn renew_until(queue: &dyn TaskQueue, held: &Held, over: &AtomicBool) {
    let every = queue.claim_timeout() / 3;
    let mut last = Instant::now();
    while !over.load(Ordering::Acquire) {
        let now = Instant::now();
        let next = last + every;
        if now < next {
            std::thread::park_timeout(next - now);
            continue;
        }
        last = now;
        let leases = held.list();
        if !leases.is_empty() {
            let _ = queue.renew(&leases);
        }
    }
}
