//! The queue in one process's memory: the local executor's, and the twin
//! that tests of the layers above use instead of a Redis server.

use crate::{
    check_adds, check_tasks, Add, DeadTask, Lease, Policy, QueueError, RunState, Stats, TaskId,
    TaskQueue, MAX_ERROR, MAX_LEASE,
};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

struct Leased {
    task: Vec<u8>,
    attempts: u32,
    worker: String,
    since: Instant,
}

struct State {
    waiting: VecDeque<(TaskId, Vec<u8>, u32)>,
    leased: HashMap<TaskId, Leased>,
    done: u64,
    dead: Vec<DeadTask>,
    run: RunState,
    claims: HashMap<Vec<u8>, String>,
    counters: HashMap<Vec<u8>, i64>,
    marks: HashSet<Vec<u8>>,
    /// Tasks parked under a mark not set yet.
    parked: HashMap<Vec<u8>, Vec<Vec<u8>>>,
    values: HashMap<Vec<u8>, Vec<u8>>,
    next_id: u64,
}

/// A [`TaskQueue`] in memory.
pub struct MemoryQueue {
    policy: Policy,
    state: Mutex<State>,
    changed: Condvar,
}

impl MemoryQueue {
    pub fn new(policy: Policy) -> MemoryQueue {
        MemoryQueue {
            policy,
            state: Mutex::new(State {
                waiting: VecDeque::new(),
                leased: HashMap::new(),
                done: 0,
                dead: Vec::new(),
                run: RunState::Running,
                claims: HashMap::new(),
                counters: HashMap::new(),
                marks: HashSet::new(),
                parked: HashMap::new(),
                values: HashMap::new(),
                next_id: 1,
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take up to `max` tasks now: expired leases, then waiting ones.
    fn take(&self, st: &mut State, worker: &str, max: usize, now: Instant) -> Vec<Lease> {
        // Lost leases first: tasks pushed again and again (a task waiting
        // on others goes back in the queue) must not keep a lost task from
        // ever being handed out.
        let mut out = Vec::new();
        self.reclaim(st, worker, max, now, &mut out);
        while out.len() < max {
            let Some((id, task, attempts)) = st.waiting.pop_front() else {
                break;
            };
            out.push(Lease {
                id,
                task,
                attempts,
                worker: worker.to_string(),
            });
        }
        for l in &out {
            st.leased.insert(
                l.id.clone(),
                Leased {
                    task: l.task.clone(),
                    attempts: l.attempts,
                    worker: worker.to_string(),
                    since: now,
                },
            );
        }
        out
    }

    /// Leases older than the claim timeout: their worker is taken as lost,
    /// which counts as an attempt.
    fn reclaim(
        &self,
        st: &mut State,
        worker: &str,
        max: usize,
        now: Instant,
        out: &mut Vec<Lease>,
    ) {
        let mut expired: Vec<TaskId> = st
            .leased
            .iter()
            .filter(|(_, l)| now.duration_since(l.since) >= self.policy.claim_timeout)
            .map(|(id, _)| id.clone())
            .collect();
        // Oldest first (ids are numbers in the order tasks were pushed).
        expired.sort_by_key(|id| id.0.parse::<u64>().unwrap_or(u64::MAX));
        for id in expired {
            if out.len() >= max {
                break;
            }
            let l = st.leased.remove(&id).expect("listed above");
            let attempts = l.attempts + 1;
            if attempts >= self.policy.max_attempts {
                st.dead.push(DeadTask {
                    task: l.task,
                    attempts,
                    error: format!("its worker was lost {attempts} times"),
                });
            } else {
                out.push(Lease {
                    id,
                    task: l.task,
                    attempts,
                    worker: worker.to_string(),
                });
            }
        }
    }

    /// When the next lease passes the claim timeout (`None`: no lease).
    fn next_expiry(&self, st: &State) -> Option<Instant> {
        st.leased
            .values()
            .map(|l| l.since + self.policy.claim_timeout)
            .min()
    }
}

impl State {
    fn push(&mut self, tasks: &[Vec<u8>]) {
        for t in tasks {
            let id = TaskId(self.next_id.to_string());
            self.next_id += 1;
            self.waiting.push_back((id, t.clone(), 0));
        }
    }
}

impl TaskQueue for MemoryQueue {
    fn push(&self, tasks: &[Vec<u8>]) -> Result<(), QueueError> {
        check_tasks(tasks)?;
        self.lock().push(tasks);
        self.changed.notify_all();
        Ok(())
    }

    fn lease(&self, worker: &str, max: usize, wait: Duration) -> Result<Vec<Lease>, QueueError> {
        let max = max.clamp(1, MAX_LEASE);
        let deadline = Instant::now() + wait;
        let mut st = self.lock();
        let mut woken = false;
        loop {
            let now = Instant::now();
            if st.run == RunState::Running {
                let out = self.take(&mut st, worker, max, now);
                if !out.is_empty() {
                    return Ok(out);
                }
            }
            // Drained while this call waited (the last lease acknowledged),
            // or before it came when tasks were done already (the last one
            // acknowledged between the caller's look at the queue and this
            // call, whose wake-up it then missed): nothing can come, the
            // caller may see whether the run is over now rather than at
            // the end of its wait. A queue not started yet is waited on.
            let drained = st.waiting.is_empty() && st.leased.is_empty();
            let started = st.done > 0 || !st.dead.is_empty();
            if now >= deadline || (drained && (woken || started)) {
                return Ok(Vec::new());
            }
            woken = true;
            let until = match self.next_expiry(&st) {
                Some(e) if st.run == RunState::Running => e.min(deadline),
                _ => deadline,
            };
            let pause = until
                .saturating_duration_since(now)
                .max(Duration::from_millis(1));
            st = self
                .changed
                .wait_timeout(st, pause)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    fn renew(&self, leases: &[Lease]) -> Result<(), QueueError> {
        let mut st = self.lock();
        let now = Instant::now();
        for lease in leases {
            if let Some(l) = st.leased.get_mut(&lease.id) {
                if l.worker == lease.worker {
                    l.since = now;
                }
            }
        }
        Ok(())
    }

    fn claim_timeout(&self) -> Duration {
        self.policy.claim_timeout
    }

    fn ack(&self, ids: &[TaskId]) -> Result<(), QueueError> {
        let mut st = self.lock();
        for id in ids {
            // A lease reclaimed meanwhile and acknowledged by its new
            // worker is done once.
            if st.leased.remove(id).is_some() {
                st.done += 1;
            }
        }
        let drained = st.waiting.is_empty() && st.leased.is_empty();
        drop(st);
        if drained {
            self.changed.notify_all();
        }
        Ok(())
    }

    fn fail(&self, lease: &Lease, error: &str) -> Result<(), QueueError> {
        self.fail_with(lease, error, false)
    }

    fn give_up(&self, lease: &Lease, error: &str) -> Result<(), QueueError> {
        self.fail_with(lease, error, true)
    }

    fn report(&self, task: &[u8], error: &str) -> Result<(), QueueError> {
        check_tasks(&[task.to_vec()])?;
        self.lock().dead.push(DeadTask {
            task: task.to_vec(),
            attempts: 0,
            error: error.chars().take(MAX_ERROR).collect(),
        });
        Ok(())
    }

    fn set_state(&self, state: RunState) -> Result<(), QueueError> {
        self.lock().run = state;
        self.changed.notify_all();
        Ok(())
    }

    fn state(&self) -> Result<RunState, QueueError> {
        Ok(self.lock().run)
    }

    fn stats(&self) -> Result<Stats, QueueError> {
        let st = self.lock();
        Ok(Stats {
            waiting: st.waiting.len() as u64,
            leased: st.leased.len() as u64,
            done: st.done,
            dead: st.dead.len() as u64,
        })
    }

    fn dead(&self, max: usize) -> Result<Vec<DeadTask>, QueueError> {
        Ok(self.lock().dead.iter().take(max).cloned().collect())
    }

    fn claim(&self, key: &[u8], owner: &str) -> Result<Option<String>, QueueError> {
        let mut st = self.lock();
        match st.claims.get(key) {
            Some(o) if o == owner => Ok(None),
            Some(o) => Ok(Some(o.clone())),
            None => {
                st.claims.insert(key.to_vec(), owner.to_string());
                Ok(None)
            }
        }
    }

    fn add(&self, key: &[u8], delta: i64) -> Result<i64, QueueError> {
        let mut st = self.lock();
        let v = st.counters.entry(key.to_vec()).or_insert(0);
        *v = v.saturating_add(delta);
        Ok(*v)
    }

    fn add_once(
        &self,
        mark: &[u8],
        counter: &[u8],
        delta: i64,
        tasks: &[Vec<u8>],
    ) -> Result<(i64, bool), QueueError> {
        check_tasks(tasks)?;
        let mut st = self.lock();
        let applied = st.marks.insert(mark.to_vec());
        let v = st.counters.entry(counter.to_vec()).or_insert(0);
        if applied {
            *v = v.saturating_add(delta);
        }
        let value = *v;
        if applied {
            st.push(tasks);
        }
        drop(st);
        self.changed.notify_all();
        Ok((value, applied))
    }

    fn park(&self, mark: &[u8], task: &[u8]) -> Result<bool, QueueError> {
        check_tasks(&[task.to_vec()])?;
        let mut st = self.lock();
        if st.marks.contains(mark) {
            return Ok(false);
        }
        st.parked
            .entry(mark.to_vec())
            .or_default()
            .push(task.to_vec());
        Ok(true)
    }

    fn wake(&self, mark: &[u8]) -> Result<(), QueueError> {
        let mut st = self.lock();
        st.marks.insert(mark.to_vec());
        let tasks = st.parked.remove(mark).unwrap_or_default();
        st.push(&tasks);
        drop(st);
        self.changed.notify_all();
        Ok(())
    }

    fn add_many(&self, adds: &[Add]) -> Result<Vec<i64>, QueueError> {
        check_adds(adds)?;
        let mut st = self.lock();
        for a in adds {
            let applied = match &a.mark {
                Some(m) => st.marks.insert(m.clone()),
                None => true,
            };
            let v = st.counters.entry(a.counter.clone()).or_insert(0);
            if applied {
                *v = v.saturating_add(a.delta);
            }
        }
        Ok(adds
            .iter()
            .map(|a| st.counters.get(&a.counter).copied().unwrap_or(0))
            .collect())
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), QueueError> {
        check_tasks(&[value.to_vec()])?;
        self.lock().values.insert(key.to_vec(), value.to_vec());
        Ok(())
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, QueueError> {
        Ok(self.lock().values.get(key).cloned())
    }
}

impl MemoryQueue {
    /// `fail`, or `give_up` when `last`.
    fn fail_with(&self, lease: &Lease, error: &str, last: bool) -> Result<(), QueueError> {
        let mut st = self.lock();
        if st
            .leased
            .get(&lease.id)
            .is_none_or(|l| l.worker != lease.worker)
        {
            return Ok(());
        }
        let l = st.leased.remove(&lease.id).expect("checked above");
        let attempts = l.attempts + 1;
        if last || attempts >= self.policy.max_attempts {
            st.dead.push(DeadTask {
                task: l.task,
                attempts,
                error: error.chars().take(MAX_ERROR).collect(),
            });
        } else {
            st.waiting.push_back((lease.id.clone(), l.task, attempts));
        }
        drop(st);
        self.changed.notify_all();
        Ok(())
    }
}
