//! The queue's promises, checked on both implementations: the in-memory
//! one, and Redis Streams on a real `redis-server` that the test starts on
//! a loopback port with a configuration made for the run.

use accord_queue::{
    Add, MemoryQueue, Policy, QueueError, RedisQueue, RedisTarget, RunState, TaskId, TaskQueue,
    MAX_TASK,
};
use std::collections::HashSet;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Strict mode: `ACCORD_TEST_STRICT` set (to 1; scripts/test sets it).
/// Then a test that cannot run here fails, so that a missing package cannot
/// turn coverage off while the suite stays green.
fn strict() -> bool {
    std::env::var_os("ACCORD_TEST_STRICT").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Something this test needs is missing here: `reason` says what, and how
/// to get it. In strict mode the test fails with `reason`; otherwise a SKIP
/// line goes to stderr and the caller returns.
#[track_caller]
fn skip_or_fail(reason: &str) {
    if strict() {
        panic!("{reason} (ACCORD_TEST_STRICT is set: a test that cannot run fails)");
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("this test");
    eprintln!("SKIP {test}: {reason}; NOT TESTED");
}

/// A `redis-server` of the test's own.
struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    /// `None` (after `skip_or_fail`) when redis-server is not installed.
    fn start(password: Option<&str>) -> Option<Redis> {
        if Command::new("redis-server")
            .arg("--version")
            .output()
            .is_err()
        {
            skip_or_fail(
                "redis-server is not installed (apt-get install redis-server; scripts/test \
                 installs it)",
            );
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(p) = password {
            cmd.args(["--requirepass", p]);
        }
        let child = cmd.spawn().unwrap();
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Redis {
            child,
            port,
            _dir: dir,
        })
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    fn queue(&self, run: &str, policy: Policy) -> RedisQueue {
        let target = RedisTarget {
            url: self.url(),
            run: run.into(),
        };
        RedisQueue::open(&target, policy).unwrap()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn policy(claim_ms: u64, max_attempts: u32) -> Policy {
    Policy {
        claim_timeout: Duration::from_millis(claim_ms),
        max_attempts,
    }
}

/// Run `check` on a fresh queue of each kind.
fn on_both(policy: Policy, check: impl Fn(&dyn TaskQueue)) {
    check(&MemoryQueue::new(policy));
    if let Some(redis) = Redis::start(None) {
        check(&redis.queue("test-run", policy));
    }
}

fn tasks(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| format!("task {i}").into_bytes()).collect()
}

fn ids(leases: &[accord_queue::Lease]) -> Vec<TaskId> {
    leases.iter().map(|l| l.id.clone()).collect()
}

const NO_WAIT: Duration = Duration::ZERO;

#[test]
fn pushed_tasks_are_leased_in_batches_and_done_once() {
    on_both(Policy::default(), |q| {
        q.push(&tasks(10)).unwrap();
        let first = q.lease("w1", 4, NO_WAIT).unwrap();
        assert_eq!(first.len(), 4);
        assert_eq!(first[0].task, b"task 0");
        assert!(first.iter().all(|l| l.attempts == 0));
        let s = q.stats().unwrap();
        assert_eq!((s.waiting, s.leased, s.done), (6, 4, 0));
        q.ack(&ids(&first)).unwrap();
        q.ack(&ids(&first)).unwrap();
        let rest = q.lease("w2", 100, NO_WAIT).unwrap();
        assert_eq!(rest.len(), 6);
        q.ack(&ids(&rest)).unwrap();
        let s = q.stats().unwrap();
        assert_eq!((s.waiting, s.leased, s.done, s.dead), (0, 0, 10, 0));
    });
}

#[test]
fn an_empty_queue_waits_then_hands_out_nothing() {
    on_both(Policy::default(), |q| {
        let start = Instant::now();
        assert!(q
            .lease("w", 8, Duration::from_millis(150))
            .unwrap()
            .is_empty());
        assert!(start.elapsed() >= Duration::from_millis(150));
    });
}

/// In one process, a worker waiting for a task hears at once when the
/// last lease is acknowledged (the run may be over), instead of at the
/// end of its wait.
#[test]
fn a_wait_on_the_memory_queue_ends_when_the_queue_drains() {
    let q = MemoryQueue::new(Policy::default());
    q.push(&tasks(1)).unwrap();
    let held = q.lease("w1", 1, NO_WAIT).unwrap();
    let start = Instant::now();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| q.lease("w2", 1, Duration::from_secs(20)).unwrap());
        std::thread::sleep(Duration::from_millis(100));
        q.ack(&ids(&held)).unwrap();
        assert!(waiter.join().unwrap().is_empty());
    });
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

/// A wait that starts after the last acknowledgement (which woke no one:
/// the worker was between its look at the queue and this call) ends at
/// once as well; a queue where nothing was done yet is still waited on.
#[test]
fn a_wait_on_a_drained_memory_queue_ends_at_once() {
    let q = MemoryQueue::new(Policy::default());
    let start = Instant::now();
    assert!(q
        .lease("w", 1, Duration::from_millis(150))
        .unwrap()
        .is_empty());
    assert!(start.elapsed() >= Duration::from_millis(150));
    q.push(&tasks(1)).unwrap();
    let held = q.lease("w1", 1, NO_WAIT).unwrap();
    q.ack(&ids(&held)).unwrap();
    let start = Instant::now();
    assert!(q
        .lease("w2", 1, Duration::from_secs(20))
        .unwrap()
        .is_empty());
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_paused_run_hands_out_no_task_and_resumes_where_it_was() {
    on_both(Policy::default(), |q| {
        q.push(&tasks(5)).unwrap();
        let before = q.lease("w", 2, NO_WAIT).unwrap();
        q.set_state(RunState::Paused).unwrap();
        assert_eq!(q.state().unwrap(), RunState::Paused);
        let mut handed_out = 0;
        for _ in 0..5 {
            handed_out += q.lease("w", 10, Duration::from_millis(20)).unwrap().len();
        }
        assert_eq!(handed_out, 0, "tasks handed out while paused");
        // What was leased before the pause may still finish.
        q.ack(&ids(&before)).unwrap();
        q.set_state(RunState::Stopped).unwrap();
        assert!(q.lease("w", 10, NO_WAIT).unwrap().is_empty());
        q.set_state(RunState::Running).unwrap();
        let after = q.lease("w", 10, NO_WAIT).unwrap();
        assert_eq!(after.len(), 3);
        q.ack(&ids(&after)).unwrap();
        assert_eq!(q.stats().unwrap().done, 5);
    });
}

#[test]
fn a_lost_workers_tasks_go_to_another_after_the_claim_timeout() {
    on_both(policy(200, 5), |q| {
        q.push(&tasks(3)).unwrap();
        let lost = q.lease("w-lost", 10, NO_WAIT).unwrap();
        assert_eq!(lost.len(), 3);
        assert!(q.lease("w-alive", 10, NO_WAIT).unwrap().is_empty());
        std::thread::sleep(Duration::from_millis(250));
        let taken = q.lease("w-alive", 10, Duration::from_millis(100)).unwrap();
        assert_eq!(taken.len(), 3, "a lost worker's tasks were not handed on");
        assert!(taken.iter().all(|l| l.attempts == 1));
        q.ack(&ids(&taken)).unwrap();
        // The lost worker comes back and acknowledges late: done once.
        q.ack(&ids(&lost)).unwrap();
        let s = q.stats().unwrap();
        assert_eq!((s.waiting, s.leased, s.done), (0, 0, 3));
    });
}

#[test]
fn a_renewed_lease_stays_with_its_worker_past_the_claim_timeout() {
    on_both(policy(300, 5), |q| {
        q.push(&tasks(1)).unwrap();
        let slow = q.lease("w-slow", 1, NO_WAIT).unwrap();
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(150));
            q.renew(&slow).unwrap();
            assert!(
                q.lease("w-other", 1, NO_WAIT).unwrap().is_empty(),
                "a renewed lease was handed to another"
            );
        }
        // Not renewed any more: its worker is lost.
        std::thread::sleep(Duration::from_millis(350));
        let taken = q.lease("w-other", 1, Duration::from_millis(100)).unwrap();
        assert_eq!(ids(&taken), ids(&slow));
        // The lost worker's late renewal does not restart the new lease.
        std::thread::sleep(Duration::from_millis(200));
        q.renew(&slow).unwrap();
        std::thread::sleep(Duration::from_millis(150));
        let again = q.lease("w-third", 1, Duration::from_millis(50)).unwrap();
        assert_eq!(ids(&again), ids(&slow), "a stale renewal kept the lease");
        assert_eq!(again[0].attempts, 2);
    });
}

/// A task that waits on others goes back in the queue again and again;
/// that stream of new tasks must not hide a lost lease for ever.
#[test]
fn a_lost_lease_is_handed_out_while_new_tasks_keep_coming() {
    on_both(policy(200, 5), |q| {
        q.push(&tasks(1)).unwrap();
        let lost = q.lease("w-lost", 1, NO_WAIT).unwrap();
        let start = Instant::now();
        loop {
            q.push(&[b"again".to_vec()]).unwrap();
            let got = q.lease("w-busy", 1, NO_WAIT).unwrap();
            assert_eq!(got.len(), 1);
            q.ack(&ids(&got)).unwrap();
            if got[0].id == lost[0].id {
                assert_eq!(got[0].attempts, 1);
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "a lost lease was never handed out while new tasks came"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    });
}

#[test]
fn a_parked_task_waits_for_its_mark_and_is_pushed_when_woken() {
    on_both(Policy::default(), |q| {
        assert!(q.park(b"leader a", b"follower 1").unwrap());
        assert!(q.park(b"leader a", b"follower 2").unwrap());
        assert!(q.park(b"leader b", b"follower 3").unwrap());
        let s = q.stats().unwrap();
        assert_eq!(
            (s.waiting, s.leased),
            (0, 0),
            "parked tasks are not waiting"
        );
        assert!(q.lease("w", 10, NO_WAIT).unwrap().is_empty());
        q.wake(b"leader a").unwrap();
        let woken = q.lease("w", 10, NO_WAIT).unwrap();
        let mut got: Vec<&[u8]> = woken.iter().map(|l| l.task.as_slice()).collect();
        got.sort();
        assert_eq!(got, [&b"follower 1"[..], b"follower 2"]);
        assert!(woken.iter().all(|l| l.attempts == 0));
        q.ack(&ids(&woken)).unwrap();
        // Once the mark is set, nothing is parked under it; waking again
        // pushes nothing.
        assert!(!q.park(b"leader a", b"follower 4").unwrap());
        q.wake(b"leader a").unwrap();
        assert!(q.lease("w", 10, NO_WAIT).unwrap().is_empty());
        // The marks are `add_once`'s.
        assert_eq!(q.add_once(b"leader a", b"c", 1, &[]).unwrap(), (0, false));
        q.add_once(b"leader c", b"c", 1, &[]).unwrap();
        assert!(!q.park(b"leader c", b"follower 5").unwrap());
        // The other mark's task still waits.
        assert_eq!(q.stats().unwrap().waiting, 0);
        q.wake(b"leader b").unwrap();
        let last = q.lease("w", 10, NO_WAIT).unwrap();
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].task, b"follower 3");
    });
}

#[test]
fn a_failure_from_a_worker_whose_lease_went_to_another_changes_nothing() {
    on_both(policy(200, 5), |q| {
        q.push(&tasks(1)).unwrap();
        let stale = q.lease("w-slow", 1, NO_WAIT).unwrap();
        std::thread::sleep(Duration::from_millis(250));
        let current = q.lease("w-new", 1, Duration::from_millis(100)).unwrap();
        assert_eq!(current.len(), 1);
        q.fail(&stale[0], "late failure").unwrap();
        let s = q.stats().unwrap();
        assert_eq!(
            (s.waiting, s.leased, s.dead),
            (0, 1, 0),
            "the new lease was cancelled"
        );
        q.ack(&ids(&current)).unwrap();
        assert_eq!(q.stats().unwrap().done, 1);
    });
}

#[test]
fn acks_of_more_ids_than_one_script_call_takes_all_count() {
    on_both(Policy::default(), |q| {
        q.push(&tasks(2500)).unwrap();
        let mut held = Vec::new();
        while held.len() < 2500 {
            let got = q.lease("w", 1024, NO_WAIT).unwrap();
            assert!(!got.is_empty());
            held.extend(got);
        }
        q.ack(&ids(&held)).unwrap();
        assert_eq!(q.stats().unwrap().done, 2500);
    });
}

#[test]
fn a_task_that_keeps_failing_is_set_aside_with_its_error() {
    on_both(policy(60_000, 3), |q| {
        q.push(&[b"poison".to_vec(), b"fine".to_vec()]).unwrap();
        let mut failures = 0;
        loop {
            let got = q.lease("w", 10, NO_WAIT).unwrap();
            if got.is_empty() {
                break;
            }
            for l in got {
                if l.task == b"poison" {
                    failures += 1;
                    q.fail(&l, &format!("read error, attempt {}", l.attempts + 1))
                        .unwrap();
                } else {
                    q.ack(&[l.id]).unwrap();
                }
            }
            assert!(failures <= 3, "a failing task kept coming back");
        }
        assert_eq!(failures, 3);
        let dead = q.dead(10).unwrap();
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].task, b"poison");
        assert_eq!(dead[0].attempts, 3);
        assert_eq!(dead[0].error, "read error, attempt 3");
        let s = q.stats().unwrap();
        assert_eq!((s.waiting, s.leased, s.done, s.dead), (0, 0, 1, 1));
    });
}

#[test]
fn a_task_given_up_is_set_aside_at_once_and_a_report_lists_beside_it() {
    on_both(policy(60_000, 5), |q| {
        q.push(&[b"full disk".to_vec(), b"fine".to_vec()]).unwrap();
        let got = q.lease("w", 10, NO_WAIT).unwrap();
        assert_eq!(got.len(), 2);
        for l in got {
            if l.task == b"full disk" {
                q.give_up(&l, "no space left").unwrap();
            } else {
                q.report(&l.task, "a.tmp: not copied").unwrap();
                q.ack(&[l.id]).unwrap();
            }
        }
        assert!(
            q.lease("w", 10, NO_WAIT).unwrap().is_empty(),
            "given up, yet handed out again"
        );
        let dead = q.dead(10).unwrap();
        assert_eq!(dead.len(), 2);
        let given_up = dead.iter().find(|d| d.task == b"full disk").unwrap();
        assert_eq!(
            (given_up.attempts, given_up.error.as_str()),
            (1, "no space left")
        );
        let report = dead.iter().find(|d| d.task == b"fine").unwrap();
        assert_eq!(
            (report.attempts, report.error.as_str()),
            (0, "a.tmp: not copied")
        );
        let s = q.stats().unwrap();
        assert_eq!((s.waiting, s.leased, s.done, s.dead), (0, 0, 1, 2));
    });
}

#[test]
fn a_claim_is_taken_once_and_counters_add_up() {
    on_both(Policy::default(), |q| {
        assert_eq!(q.claim(b"inode 7:42", "w1").unwrap(), None);
        assert_eq!(q.claim(b"inode 7:42", "w2").unwrap(), Some("w1".into()));
        assert_eq!(q.claim(b"inode 7:42", "w1").unwrap(), None);
        assert_eq!(q.add(b"dir a/b", 5).unwrap(), 5);
        assert_eq!(q.add(b"dir a/b", -2).unwrap(), 3);
        assert_eq!(q.add(b"dir other", -1).unwrap(), -1);
    });
}

#[test]
fn add_once_counts_and_pushes_once_per_mark() {
    on_both(Policy::default(), |q| {
        let first = q.add_once(b"scan a", b"dir a", 3, &tasks(3)).unwrap();
        assert_eq!(first, (3, true));
        // The same mark again (a task run twice): nothing added or pushed.
        let again = q.add_once(b"scan a", b"dir a", 3, &tasks(3)).unwrap();
        assert_eq!(again, (3, false));
        assert_eq!(q.stats().unwrap().waiting, 3);
        assert_eq!(q.add_once(b"done 1", b"dir a", -1, &[]).unwrap(), (2, true));
        assert_eq!(
            q.add_once(b"done 1", b"dir a", -1, &[]).unwrap(),
            (2, false)
        );
        assert_eq!(q.add(b"dir a", 0).unwrap(), 2);
    });
}

/// The counts of a whole task in one step: marks shared with `add_once`
/// (a child counted either way is counted once), several marks on one
/// counter, additions without a mark made every time, and each counter's
/// value after all of them.
#[test]
fn add_many_counts_each_mark_once_and_figures_every_time() {
    on_both(Policy::default(), |q| {
        q.add_once(b"scan p", b"p", 5, &[]).unwrap();
        q.add_once(b"dm p/b", b"p", -1, &[]).unwrap();
        let adds = vec![
            Add::once(b"dm p/a".to_vec(), b"p", -1),
            Add::once(b"dm p/b".to_vec(), b"p", -1),
            Add::once(b"dm p/c".to_vec(), b"p", -1),
            Add::always(b"written", 200),
            Add::once(b"e p/a".to_vec(), b"seen", 0),
        ];
        assert_eq!(q.add_many(&adds).unwrap(), vec![2, 2, 2, 200, 0]);
        // Again (a task run twice): the marked ones change nothing.
        assert_eq!(q.add_many(&adds).unwrap(), vec![2, 2, 2, 400, 0]);
        assert_eq!(q.add_once(b"dm p/c", b"p", -1, &[]).unwrap(), (2, false));
        assert_eq!(q.add_many(&[]).unwrap(), Vec::<i64>::new());
        let empty = [Add::once(Vec::new(), b"p", 1)];
        assert!(matches!(q.add_many(&empty), Err(QueueError::Refused(_))));
        let too_many = vec![Add::always(b"x", 1); accord_queue::MAX_ADDS + 1];
        assert!(matches!(q.add_many(&too_many), Err(QueueError::Refused(_))));
        assert_eq!(q.add(b"x", 0).unwrap(), 0);
        assert_eq!(q.add(b"p", 0).unwrap(), 2);
    });
}

#[test]
fn values_put_are_got_back() {
    on_both(Policy::default(), |q| {
        assert_eq!(q.get(b"spec").unwrap(), None);
        q.put(b"spec", b"\x00\x01settings").unwrap();
        assert_eq!(
            q.get(b"spec").unwrap().as_deref(),
            Some(&b"\x00\x01settings"[..])
        );
        assert!(q.put(b"big", &vec![0; accord_queue::MAX_TASK + 1]).is_err());
    });
}

#[test]
fn a_task_above_the_limit_is_refused_and_nothing_is_pushed() {
    on_both(Policy::default(), |q| {
        let r = q.push(&[b"small".to_vec(), vec![0; MAX_TASK + 1]]);
        assert!(matches!(r, Err(QueueError::Refused(_))), "{r:?}");
        assert_eq!(q.stats().unwrap().waiting, 0);
    });
}

#[test]
fn many_workers_at_once_do_every_task_exactly_once() {
    on_both(Policy::default(), |q| {
        let n = 2000;
        let all = tasks(n);
        for chunk in all.chunks(250) {
            q.push(chunk).unwrap();
        }
        let seen = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for w in 0..4 {
                let seen = &seen;
                s.spawn(move || loop {
                    let got = q
                        .lease(&format!("w{w}"), 32, Duration::from_millis(50))
                        .unwrap();
                    if got.is_empty() {
                        return;
                    }
                    seen.lock()
                        .unwrap()
                        .extend(got.iter().map(|l| l.task.clone()));
                    q.ack(&ids(&got)).unwrap();
                });
            }
        });
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), n, "a task was handed out twice or not at all");
        let distinct: HashSet<_> = seen.into_iter().collect();
        assert_eq!(distinct, all.into_iter().collect());
        assert_eq!(q.stats().unwrap().done, n as u64);
    });
}

#[test]
fn redis_runs_are_apart_and_names_are_checked() {
    let Some(redis) = Redis::start(None) else {
        return;
    };
    let a = redis.queue("run-a", Policy::default());
    let b = redis.queue("run-b", Policy::default());
    a.push(&tasks(2)).unwrap();
    assert!(b.lease("w", 10, NO_WAIT).unwrap().is_empty());
    assert_eq!(a.lease("w", 10, NO_WAIT).unwrap().len(), 2);
    for bad in ["", "a b", "x}y", "../up", &"n".repeat(65)] {
        let target = RedisTarget {
            url: redis.url(),
            run: bad.into(),
        };
        let r = RedisQueue::open(&target, Policy::default());
        assert!(matches!(r, Err(QueueError::Refused(_))), "run name {bad:?}");
    }
}

#[test]
fn redis_with_a_password_takes_it_from_the_url_and_refuses_a_wrong_one() {
    let Some(redis) = Redis::start(Some("s3cret")) else {
        return;
    };
    let open = |url: String| {
        RedisQueue::open(
            &RedisTarget {
                url,
                run: "pw".into(),
            },
            Policy::default(),
        )
    };
    let good = open(format!("redis://:s3cret@127.0.0.1:{}/0", redis.port)).unwrap();
    good.push(&tasks(1)).unwrap();
    for url in [
        format!("redis://:wrong@127.0.0.1:{}/0", redis.port),
        format!("redis://127.0.0.1:{}/0", redis.port),
    ] {
        let r = open(url.clone());
        assert!(
            matches!(r, Err(QueueError::Refused(_))),
            "{url}: {:?}",
            r.err()
        );
    }
}

#[test]
fn redis_lost_then_back_is_unavailable_then_works_again() {
    let Some(mut redis) = Redis::start(None) else {
        return;
    };
    let q = redis.queue("lost", Policy::default());
    q.push(&tasks(1)).unwrap();
    let _ = redis.child.kill();
    let _ = redis.child.wait();
    let r = q.lease("w", 1, NO_WAIT);
    assert!(matches!(r, Err(QueueError::Unavailable(_))), "{r:?}");
    // Back on the same port (no persistence here: an empty server).
    let port = redis.port;
    redis.child = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        match q.push(&tasks(1)) {
            Ok(()) => break,
            Err(QueueError::Unavailable(_)) if start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("{e}"),
        }
    }
}
