//! The queue on Redis Streams, shared by the workers of any number of
//! machines. One run's keys share the prefix `accord:{RUN}:` (the braces
//! keep them in one slot of a Redis Cluster):
//!
//! - `tasks`: a stream read by the consumer group `workers`; each entry
//!   holds the task (`t`) and the attempts it used before (`a`). An entry
//!   is deleted when acknowledged, so the stream's length is what is left.
//! - `attempts`: a hash of the leases reclaimed from lost workers, by id.
//! - `dead`: a stream of tasks set aside, with their attempts and error.
//! - `state`: `running`, `paused` or `stopped` (absent: running).
//! - `done`: how many tasks were acknowledged.
//! - `claims`, `counters`: hashes for `claim` and `add`.
//! - `marks`: a hash of the marks `add_once`, `add_many` and `wake` set.
//! - `parked:MARK`: a list of the tasks parked until `MARK` is set.
//! - `values`: a hash for `put` and `get` (the run's settings).
//!
//! And one key of all runs, `accord:runs`: a set of the names of runs
//! created and not yet seen over, where `accord worker` without `--run`
//! looks for work.
//!
//! Every step that must not be split (check the state and hand out; take a
//! lease back and re-add or bury it) is one Lua script, so a paused run
//! hands out nothing, and a task is never both waiting and dead.

use crate::{
    check_adds, check_tasks, Add, CallCost, DeadTask, Lease, Policy, QueueError, RunState, Stats,
    TaskId, TaskQueue, MAX_ERROR, MAX_LEASE, MAX_TASK,
};
use redis::{Connection, RedisError, Script};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

const GROUP: &str = "workers";
/// The set of the runs to look at (see the module).
const RUNS: &str = "accord:runs";
/// Most run names read from `RUNS` (a store anybody may write to).
const MAX_RUNS_LISTED: usize = 10_000;

/// Where a run's queue lives: a Redis URL (`redis://[:PASSWORD@]HOST[:PORT][/DB]`,
/// or with a user, `redis://USER:PASSWORD@…`) and the run's name.
#[derive(Clone, Debug)]
pub struct RedisTarget {
    pub url: String,
    pub run: String,
}

/// A [`TaskQueue`] in Redis.
pub struct RedisQueue {
    client: redis::Client,
    run: String,
    prefix: String,
    policy: Policy,
    /// One connection, made again after it fails.
    conn: Mutex<Option<Connection>>,
    scripts: Scripts,
    /// The pause before the next poll of an empty queue: it grows over
    /// consecutive empty polls, across `lease` calls, and is reset by a
    /// lease that found work (idle workers cost the server little).
    idle_pause: Mutex<Duration>,
    /// When this process last looked at lost leases before new tasks
    /// (`LEASE`).
    last_reclaim: Mutex<Instant>,
}

/// First and longest pause between polls of an empty queue.
const FIRST_PAUSE: Duration = Duration::from_millis(2);
const LONGEST_PAUSE: Duration = Duration::from_millis(500);

struct Scripts {
    lease: Script,
    ack: Script,
    fail: Script,
    add_once: Script,
    add_many: Script,
    park: Script,
    wake: Script,
    renew: Script,
}

/// Hand out up to ARGV[3] tasks unless the run is not running: new ones,
/// and leases idle for ARGV[4] ms (a lost worker's), each counted as an
/// attempt, buried once it reaches ARGV[5]. Lost leases come first when
/// ARGV[6] is '1', else only when there is no new task: tasks pushed
/// again and again (one that waits on others goes back in the queue) must
/// not keep a lost lease from ever being handed out, and a look at the
/// lost ones costs commands that most calls need not make. Returns
/// {id, task, attempts}.
const LEASE: &str = r"
local st = redis.call('GET', KEYS[2])
if st and st ~= 'running' then return {} end
local max = tonumber(ARGV[3])
local function field(fields, name)
  for i = 1, #fields, 2 do
    if fields[i] == name then return fields[i + 1] end
  end
  return nil
end
local out = {}
local function read_new()
  local r = redis.call('XREADGROUP', 'GROUP', ARGV[1], ARGV[2], 'COUNT', max - #out, 'STREAMS', KEYS[1], '>')
  if r then
    for _, e in ipairs(r[1][2]) do
      table.insert(out, {e[1], field(e[2], 't') or '', tonumber(field(e[2], 'a') or '0')})
    end
  end
end
-- The scan goes on where the last one stopped, so a lease far down the
-- pending list is reached however many are younger.
local function reclaim()
  local from = redis.call('GET', KEYS[5]) or '0-0'
  local c = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[4], from, 'COUNT', max - #out)
  if c[1] ~= from then redis.call('SET', KEYS[5], c[1]) end
  for _, e in ipairs(c[2]) do
    local id, fields = e[1], e[2]
    local t = field(fields, 't') or ''
    local n = tonumber(field(fields, 'a') or '0') + redis.call('HINCRBY', KEYS[3], id, 1)
    if n >= tonumber(ARGV[5]) then
      redis.call('XADD', KEYS[4], '*', 't', t, 'n', n, 'e', 'its worker was lost ' .. n .. ' times')
      redis.call('XACK', KEYS[1], ARGV[1], id)
      redis.call('XDEL', KEYS[1], id)
      redis.call('HDEL', KEYS[3], id)
    else
      table.insert(out, {id, t, n})
    end
  end
end
if ARGV[6] == '1' then reclaim() end
if #out < max then read_new() end
if #out == 0 and ARGV[6] ~= '1' then reclaim() end
return out
";

/// Acknowledge the ids in ARGV[2..]; count only those still leased (a
/// lease reclaimed and acknowledged twice is done once).
const ACK: &str = r"
local ids = {}
for i = 2, #ARGV do ids[#ids + 1] = ARGV[i] end
local n = redis.call('XACK', KEYS[1], ARGV[1], unpack(ids))
redis.call('XDEL', KEYS[1], unpack(ids))
redis.call('HDEL', KEYS[2], unpack(ids))
redis.call('INCRBY', KEYS[3], n)
return n
";

/// A failed lease (ARGV[2], task ARGV[3]): waiting again with ARGV[4]
/// attempts, or buried with error ARGV[6] once that reaches ARGV[5] (or
/// at once when ARGV[8] is '1': it was given up). Nothing when the lease is not held by worker ARGV[7] any more (it was
/// handed to another, or is done).
const FAIL: &str = r"
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 or p[1][2] ~= ARGV[7] then return 0 end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('XDEL', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[2], ARGV[2])
if ARGV[8] == '1' or tonumber(ARGV[4]) >= tonumber(ARGV[5]) then
  redis.call('XADD', KEYS[3], '*', 't', ARGV[3], 'n', ARGV[4], 'e', ARGV[6])
else
  redis.call('XADD', KEYS[1], '*', 't', ARGV[3], 'a', ARGV[4])
end
return 1
";

/// Unless mark ARGV[1] is set: set it, add ARGV[3] to counter ARGV[2] and
/// push the tasks ARGV[4..]. Returns {counter, 1 if this call did it}.
const ADD_ONCE: &str = r"
if redis.call('HSETNX', KEYS[1], ARGV[1], 1) == 0 then
  return {tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0'), 0}
end
local v = redis.call('HINCRBY', KEYS[2], ARGV[2], ARGV[3])
for i = 4, #ARGV do
  redis.call('XADD', KEYS[3], '*', 't', ARGV[i], 'a', 0)
end
return {v, 1}
";

/// Additions as triples in ARGV: a mark ('' for none), a counter, a delta.
/// Each whose mark is new (or that has none) is summed per counter, and
/// each counter moved once: one HSETNX per mark, one HINCRBY (or HGET) per
/// counter. Returns each addition's counter value after all of them.
const ADD_MANY: &str = r"
local sums, order = {}, {}
for i = 1, #ARGV, 3 do
  local m, c = ARGV[i], ARGV[i + 1]
  if sums[c] == nil then sums[c] = 0; order[#order + 1] = c end
  if m == '' or redis.call('HSETNX', KEYS[1], m, 1) == 1 then
    sums[c] = sums[c] + tonumber(ARGV[i + 2])
  end
end
local values = {}
for _, c in ipairs(order) do
  if sums[c] ~= 0 then
    values[c] = redis.call('HINCRBY', KEYS[2], c, string.format('%d', sums[c]))
  else
    values[c] = tonumber(redis.call('HGET', KEYS[2], c) or '0')
  end
end
local out = {}
for i = 1, #ARGV, 3 do out[#out + 1] = values[ARGV[i + 1]] end
return out
";

/// Restart the idle time of each lease in ARGV[2..] (pairs of an id and
/// its worker) still held by that worker.
const RENEW: &str = r"
for i = 2, #ARGV, 2 do
  local id, w = ARGV[i], ARGV[i + 1]
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)
  if #p > 0 and p[1][2] == w then
    redis.call('XCLAIM', KEYS[1], ARGV[1], w, 0, id, 'JUSTID')
  end
end
return 0
";

/// Unless mark ARGV[1] is set in KEYS[1], keep task ARGV[2] in the list
/// KEYS[2]. Returns 1 when it was kept.
const PARK: &str = r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
redis.call('RPUSH', KEYS[2], ARGV[2])
return 1
";

/// Set mark ARGV[1] in KEYS[1] and move the tasks kept in the list KEYS[2]
/// to the stream KEYS[3].
const WAKE: &str = r"
redis.call('HSETNX', KEYS[1], ARGV[1], 1)
local parked = redis.call('LRANGE', KEYS[2], 0, -1)
for _, t in ipairs(parked) do
  redis.call('XADD', KEYS[3], '*', 't', t, 'a', 0)
end
if #parked > 0 then redis.call('DEL', KEYS[2]) end
return #parked
";

/// Most tasks pushed by one `add_once` (the script walks its arguments
/// one by one, so Lua's stack does not bound them; this bounds one call's
/// size).
const ADD_ONCE_MAX: usize = 1 << 16;

/// Most ids acknowledged by one script call (Lua's stack bounds how many
/// arguments a call may spread).
const ACK_CHUNK: usize = 1000;

/// Longest a call may wait for Redis before the connection is taken as
/// lost (a worker then backs off and tries again).
const IO_TIMEOUT: Duration = Duration::from_secs(30);

impl RedisQueue {
    /// Connect and make sure the run's stream and group exist.
    pub fn open(target: &RedisTarget, policy: Policy) -> Result<RedisQueue, QueueError> {
        check_run_name(&target.run)?;
        policy.check()?;
        let client = redis::Client::open(target.url.as_str())
            .map_err(|e| QueueError::Refused(format!("{}: {e}", target.url)))?;
        let q = RedisQueue {
            client,
            run: target.run.clone(),
            prefix: format!("accord:{{{}}}:", target.run),
            policy,
            conn: Mutex::new(None),
            idle_pause: Mutex::new(FIRST_PAUSE),
            scripts: Scripts {
                lease: Script::new(LEASE),
                ack: Script::new(ACK),
                fail: Script::new(FAIL),
                add_once: Script::new(ADD_ONCE),
                add_many: Script::new(ADD_MANY),
                park: Script::new(PARK),
                wake: Script::new(WAKE),
                renew: Script::new(RENEW),
            },
            last_reclaim: Mutex::new(Instant::now()),
        };
        q.with_conn(|c| {
            let made: Result<(), RedisError> = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(q.key("tasks"))
                .arg(GROUP)
                .arg("0")
                .arg("MKSTREAM")
                .query(c);
            match made {
                Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
                other => other,
            }
        })?;
        Ok(q)
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// List the run where workers look for runs (`list_runs`), or take it
    /// off (`listed` false: the run is over).
    pub fn set_listed(&self, listed: bool) -> Result<(), QueueError> {
        let cmd = if listed { "SADD" } else { "SREM" };
        self.with_conn(|c| redis::cmd(cmd).arg(RUNS).arg(&self.run).query::<()>(c))
    }

    fn lock(&self) -> MutexGuard<'_, Option<Connection>> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `f` on the connection (made now if there is none); a failed
    /// connection is dropped, to be made again by the next call.
    fn with_conn<T>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T, RedisError>,
    ) -> Result<T, QueueError> {
        let mut slot = self.lock();
        if slot.is_none() {
            let c = self
                .client
                .get_connection_with_timeout(Duration::from_secs(10))
                .map_err(map_error)?;
            c.set_read_timeout(Some(IO_TIMEOUT)).map_err(map_error)?;
            c.set_write_timeout(Some(IO_TIMEOUT)).map_err(map_error)?;
            *slot = Some(c);
        }
        let r = f(slot.as_mut().expect("made above"));
        if let Err(e) = &r {
            if is_connection_error(e) {
                *slot = None;
            }
        }
        r.map_err(map_error)
    }

    /// Is it time to look at lost leases before new tasks? A few times
    /// per claim timeout: a lost lease is then handed out within about
    /// 1.25 claim timeouts however busy the queue is.
    fn reclaim_due(&self) -> bool {
        let mut last = self.last_reclaim.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let due = now.duration_since(*last) >= self.policy.claim_timeout / 4;
        if due {
            *last = now;
        }
        due
    }

    /// The list where tasks parked under `mark` wait.
    fn parked_key(&self, mark: &[u8]) -> Vec<u8> {
        let mut k = self.key("parked:").into_bytes();
        k.extend_from_slice(mark);
        k
    }

    fn lease_now(&self, worker: &str, max: usize) -> Result<Vec<Lease>, QueueError> {
        let reclaim_first = self.reclaim_due();
        let rows: Vec<(String, Vec<u8>, i64)> = self.with_conn(|c| {
            self.scripts
                .lease
                .key(self.key("tasks"))
                .key(self.key("state"))
                .key(self.key("attempts"))
                .key(self.key("dead"))
                .key(self.key("reclaim-cursor"))
                .arg(GROUP)
                .arg(worker)
                .arg(max)
                .arg(self.policy.claim_timeout.as_millis() as u64)
                .arg(self.policy.max_attempts)
                .arg(if reclaim_first { "1" } else { "0" })
                .invoke(c)
        })?;
        rows.into_iter()
            .map(|(id, task, attempts)| {
                if task.len() > MAX_TASK {
                    return Err(QueueError::Corrupt(format!(
                        "task {id} of {} bytes",
                        task.len()
                    )));
                }
                let attempts = u32::try_from(attempts)
                    .map_err(|_| QueueError::Corrupt(format!("task {id}: {attempts} attempts")))?;
                Ok(Lease {
                    id: TaskId(id),
                    task,
                    attempts,
                    worker: worker.to_string(),
                })
            })
            .collect()
    }
}

impl TaskQueue for RedisQueue {
    fn push(&self, tasks: &[Vec<u8>]) -> Result<(), QueueError> {
        check_tasks(tasks)?;
        if tasks.is_empty() {
            return Ok(());
        }
        let key = self.key("tasks");
        self.with_conn(|c| {
            let mut p = redis::pipe();
            for t in tasks {
                p.cmd("XADD")
                    .arg(&key)
                    .arg("*")
                    .arg("t")
                    .arg(t)
                    .arg("a")
                    .arg(0)
                    .ignore();
            }
            p.query::<()>(c)
        })
    }

    fn lease(&self, worker: &str, max: usize, wait: Duration) -> Result<Vec<Lease>, QueueError> {
        let max = max.clamp(1, MAX_LEASE);
        let deadline = Instant::now() + wait;
        // Scripts cannot block: poll, quickly at first, then less and less
        // often while the queue stays empty.
        loop {
            let got = self.lease_now(worker, max)?;
            let mut pause = self.idle_pause.lock().unwrap_or_else(|e| e.into_inner());
            if !got.is_empty() {
                *pause = FIRST_PAUSE;
                return Ok(got);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(got);
            }
            let sleep = pause.min(deadline - now);
            *pause = (*pause * 2).min(LONGEST_PAUSE);
            drop(pause);
            std::thread::sleep(sleep);
        }
    }

    fn renew(&self, leases: &[Lease]) -> Result<(), QueueError> {
        for chunk in leases.chunks(ACK_CHUNK / 2) {
            self.with_conn(|c| {
                let mut inv = self.scripts.renew.prepare_invoke();
                inv.key(self.key("tasks")).arg(GROUP);
                for l in chunk {
                    inv.arg(&l.id.0).arg(&l.worker);
                }
                inv.invoke::<i64>(c).map(|_| ())
            })?;
        }
        Ok(())
    }

    fn claim_timeout(&self) -> Duration {
        self.policy.claim_timeout
    }

    fn ack(&self, ids: &[TaskId]) -> Result<(), QueueError> {
        for chunk in ids.chunks(ACK_CHUNK) {
            self.with_conn(|c| {
                let mut inv = self.scripts.ack.prepare_invoke();
                inv.key(self.key("tasks"))
                    .key(self.key("attempts"))
                    .key(self.key("done"))
                    .arg(GROUP);
                for id in chunk {
                    inv.arg(&id.0);
                }
                inv.invoke::<i64>(c).map(|_| ())
            })?;
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
        let error: String = error.chars().take(MAX_ERROR).collect();
        self.with_conn(|c| {
            redis::cmd("XADD")
                .arg(self.key("dead"))
                .arg("*")
                .arg("t")
                .arg(task)
                .arg("n")
                .arg(0)
                .arg("e")
                .arg(&error)
                .query::<String>(c)
                .map(|_| ())
        })
    }

    fn set_state(&self, state: RunState) -> Result<(), QueueError> {
        self.with_conn(|c| {
            redis::cmd("SET")
                .arg(self.key("state"))
                .arg(state.name())
                .query::<()>(c)
        })
    }

    fn state(&self) -> Result<RunState, QueueError> {
        let v: Option<String> =
            self.with_conn(|c| redis::cmd("GET").arg(self.key("state")).query(c))?;
        match v {
            None => Ok(RunState::Running),
            Some(s) => RunState::from_name(&s)
                .ok_or_else(|| QueueError::Corrupt(format!("run state {s:?}"))),
        }
    }

    fn stats(&self) -> Result<Stats, QueueError> {
        let (len, pending, done, dead): (
            u64,
            (u64, redis::Value, redis::Value, redis::Value),
            Option<u64>,
            u64,
        ) = self.with_conn(|c| {
            redis::pipe()
                .cmd("XLEN")
                .arg(self.key("tasks"))
                .cmd("XPENDING")
                .arg(self.key("tasks"))
                .arg(GROUP)
                .cmd("GET")
                .arg(self.key("done"))
                .cmd("XLEN")
                .arg(self.key("dead"))
                .query(c)
        })?;
        let leased = pending.0;
        Ok(Stats {
            waiting: len.saturating_sub(leased),
            leased,
            done: done.unwrap_or(0),
            dead,
        })
    }

    fn dead(&self, max: usize) -> Result<Vec<DeadTask>, QueueError> {
        type Entry = (String, Vec<(String, Vec<u8>)>);
        let rows: Vec<Entry> = self.with_conn(|c| {
            redis::cmd("XRANGE")
                .arg(self.key("dead"))
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(max.max(1))
                .query(c)
        })?;
        rows.into_iter()
            .map(|(id, fields)| dead_task(&id, &fields))
            .collect()
    }

    fn claim(&self, key: &[u8], owner: &str) -> Result<Option<String>, QueueError> {
        let claims = self.key("claims");
        let (took, holder): (bool, Option<String>) = self.with_conn(|c| {
            redis::pipe()
                .cmd("HSETNX")
                .arg(&claims)
                .arg(key)
                .arg(owner)
                .cmd("HGET")
                .arg(&claims)
                .arg(key)
                .query(c)
        })?;
        match holder {
            _ if took => Ok(None),
            Some(h) if h == owner => Ok(None),
            Some(h) => Ok(Some(h)),
            None => Err(QueueError::Corrupt("a claim that vanished".into())),
        }
    }

    fn add(&self, key: &[u8], delta: i64) -> Result<i64, QueueError> {
        self.with_conn(|c| {
            redis::cmd("HINCRBY")
                .arg(self.key("counters"))
                .arg(key)
                .arg(delta)
                .query(c)
        })
    }

    fn add_once(
        &self,
        mark: &[u8],
        counter: &[u8],
        delta: i64,
        tasks: &[Vec<u8>],
    ) -> Result<(i64, bool), QueueError> {
        check_tasks(tasks)?;
        if tasks.len() > ADD_ONCE_MAX {
            return Err(QueueError::Refused(format!(
                "{} tasks counted at once (at most {ADD_ONCE_MAX})",
                tasks.len()
            )));
        }
        let (value, did): (i64, i64) = self.with_conn(|c| {
            let mut call = self.scripts.add_once.prepare_invoke();
            call.key(self.key("marks"))
                .key(self.key("counters"))
                .key(self.key("tasks"))
                .arg(mark)
                .arg(counter)
                .arg(delta);
            for t in tasks {
                call.arg(t);
            }
            call.invoke(c)
        })?;
        Ok((value, did == 1))
    }

    fn park(&self, mark: &[u8], task: &[u8]) -> Result<bool, QueueError> {
        check_tasks(&[task.to_vec()])?;
        let kept: i64 = self.with_conn(|c| {
            self.scripts
                .park
                .key(self.key("marks"))
                .key(self.parked_key(mark))
                .arg(mark)
                .arg(task)
                .invoke(c)
        })?;
        Ok(kept == 1)
    }

    fn wake(&self, mark: &[u8]) -> Result<(), QueueError> {
        self.with_conn(|c| {
            self.scripts
                .wake
                .key(self.key("marks"))
                .key(self.parked_key(mark))
                .key(self.key("tasks"))
                .arg(mark)
                .invoke::<i64>(c)
                .map(|_| ())
        })
    }

    fn add_many(&self, adds: &[Add]) -> Result<Vec<i64>, QueueError> {
        check_adds(adds)?;
        if adds.is_empty() {
            return Ok(Vec::new());
        }
        let values: Vec<i64> = self.with_conn(|c| {
            let mut call = self.scripts.add_many.prepare_invoke();
            call.key(self.key("marks")).key(self.key("counters"));
            for a in adds {
                call.arg(a.mark.as_deref().unwrap_or_default())
                    .arg(&a.counter)
                    .arg(a.delta);
            }
            call.invoke(c)
        })?;
        match values.len() == adds.len() {
            true => Ok(values),
            false => Err(QueueError::Corrupt(format!(
                "{} values for {} additions",
                values.len(),
                adds.len()
            ))),
        }
    }

    fn call_cost(&self) -> CallCost {
        CallCost::Remote
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), QueueError> {
        check_tasks(&[value.to_vec()])?;
        self.with_conn(|c| {
            redis::cmd("HSET")
                .arg(self.key("values"))
                .arg(key)
                .arg(value)
                .query(c)
        })
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, QueueError> {
        let v: Option<Vec<u8>> =
            self.with_conn(|c| redis::cmd("HGET").arg(self.key("values")).arg(key).query(c))?;
        match v {
            Some(v) if v.len() > MAX_TASK => Err(QueueError::Corrupt(format!(
                "a value of {} bytes (at most {MAX_TASK})",
                v.len()
            ))),
            v => Ok(v),
        }
    }
}

fn dead_task(id: &str, fields: &[(String, Vec<u8>)]) -> Result<DeadTask, QueueError> {
    let get = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v);
    let bad = |what: &str| QueueError::Corrupt(format!("dead task {id}: {what}"));
    let task = get("t").ok_or_else(|| bad("no task"))?.clone();
    let attempts = get("n")
        .and_then(|n| std::str::from_utf8(n).ok()?.parse().ok())
        .ok_or_else(|| bad("no attempt count"))?;
    let error = get("e")
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .unwrap_or_default();
    if task.len() > MAX_TASK {
        return Err(bad("a task above the limit"));
    }
    Ok(DeadTask {
        task,
        attempts,
        error,
    })
}

/// A run's name goes into key names: letters, digits, `-`, `_`, `.`.
/// The runs listed in the Redis at `url` (see the module), sorted; names
/// that cannot be runs' are left out.
pub fn list_runs(url: &str) -> Result<Vec<String>, QueueError> {
    let client =
        redis::Client::open(url).map_err(|e| QueueError::Refused(format!("{url}: {e}")))?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(10))
        .map_err(map_error)?;
    conn.set_read_timeout(Some(IO_TIMEOUT)).map_err(map_error)?;
    let names: Vec<Vec<u8>> = redis::cmd("SRANDMEMBER")
        .arg(RUNS)
        .arg(MAX_RUNS_LISTED)
        .query(&mut conn)
        .map_err(map_error)?;
    let mut runs: Vec<String> = names
        .into_iter()
        .filter_map(|n| String::from_utf8(n).ok())
        .filter(|n| check_run_name(n).is_ok())
        .collect();
    runs.sort();
    Ok(runs)
}

fn check_run_name(run: &str) -> Result<(), QueueError> {
    let ok = !run.is_empty()
        && run.len() <= 64
        && run
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    match ok {
        true => Ok(()),
        false => Err(QueueError::Refused(format!(
            "run name {run:?}: use 1 to 64 letters, digits, '-', '_' or '.'"
        ))),
    }
}

/// Errors that pass: the connection, or a server loading, busy, failing
/// over or read-only for now. A worker waits and tries again.
fn is_connection_error(e: &RedisError) -> bool {
    const PASSING: [&str; 5] = ["LOADING", "BUSY", "TRYAGAIN", "READONLY", "MASTERDOWN"];
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.code().is_some_and(|c| PASSING.contains(&c))
}

fn map_error(e: RedisError) -> QueueError {
    if is_connection_error(&e) {
        QueueError::Unavailable(e.to_string())
    } else {
        QueueError::Refused(e.to_string())
    }
}

impl RedisQueue {
    /// `fail`, or `give_up` when `last`.
    fn fail_with(&self, lease: &Lease, error: &str, last: bool) -> Result<(), QueueError> {
        let error: String = error.chars().take(MAX_ERROR).collect();
        self.with_conn(|c| {
            self.scripts
                .fail
                .key(self.key("tasks"))
                .key(self.key("attempts"))
                .key(self.key("dead"))
                .arg(GROUP)
                .arg(&lease.id.0)
                .arg(&lease.task)
                .arg(lease.attempts + 1)
                .arg(self.policy.max_attempts)
                .arg(&error)
                .arg(&lease.worker)
                .arg(if last { "1" } else { "0" })
                .invoke::<i64>(c)
                .map(|_| ())
        })
    }
}
