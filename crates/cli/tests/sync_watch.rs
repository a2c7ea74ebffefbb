//! `accord sync --watch` (issue 12, acceptance 6): the real binary runs
//! in the background with `--json` (one object per cycle on stdout), and
//! is killed when a test ends, passing or not. Every wait is bounded.

mod mirror_common;
mod remote_common;
mod sync_common;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};
use sync_common::*;

/// A running `accord sync --watch --json`, killed on drop.
struct Watch {
    child: Child,
    cycles: Receiver<serde_json::Value>,
    stderr: Receiver<String>,
    /// Every stderr line seen so far (the receiver drains them).
    stderr_seen: Vec<String>,
}

impl Watch {
    fn start(pair: &Pair, args: &[&str], env: &[(&str, &str)]) -> Watch {
        let mut all = vec!["--watch", "--json"];
        all.extend_from_slice(args);
        let mut command = pair.command(&all);
        command.envs(env.iter().copied());
        Watch::start_command(command)
    }

    fn start_command(mut command: std::process::Command) -> Watch {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start accord sync --watch");
        let (cycle_tx, cycles) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("not one JSON object a line ({e}): {line}"));
                if cycle_tx.send(value).is_err() {
                    break;
                }
            }
        });
        let (err_tx, stderr) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if err_tx.send(line).is_err() {
                    break;
                }
            }
        });
        Watch {
            child,
            cycles,
            stderr,
            stderr_seen: Vec::new(),
        }
    }

    /// The next cycle's report, within `limit`.
    fn next_cycle(&self, limit: Duration) -> serde_json::Value {
        self.cycles
            .recv_timeout(limit)
            .unwrap_or_else(|_| panic!("no sync cycle within {limit:?}"))
    }

    /// Cycles reported so far and not yet read.
    fn drain_cycles(&self) -> Vec<serde_json::Value> {
        self.cycles.try_iter().collect()
    }

    /// Wait for a stderr line containing `text`, within `limit`.
    fn wait_stderr(&mut self, text: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(line) = self.stderr_seen.iter().find(|line| line.contains(text)) {
                return line.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.stderr.recv_timeout(left) {
                Ok(line) => self.stderr_seen.push(line),
                Err(_) => panic!(
                    "no stderr line with {text:?} within {limit:?}; seen: {:#?}",
                    self.stderr_seen
                ),
            }
        }
    }

    /// After changes: wait for the run that finds nothing left to do
    /// (each run that propagated something is followed by one, raised by
    /// its own renames, however late a loaded machine delivers their
    /// events), then until no cycle has been reported for `quiet`.
    fn settle_after_changes(&self, quiet: Duration) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last_found_nothing = false;
        loop {
            match self.cycles.recv_timeout(quiet) {
                Ok(cycle) => last_found_nothing = cycle["propagated"] == 0,
                Err(_) if last_found_nothing => return,
                Err(_) => {}
            }
            assert!(Instant::now() < deadline, "the watch never settled");
        }
    }

    /// Wait until no cycle has been reported for `quiet` (bounded).
    fn settle(&self, quiet: Duration) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.cycles.recv_timeout(quiet).is_ok() {
            assert!(Instant::now() < deadline, "the watch never settled");
        }
    }

    fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child's pid, which we have not reaped.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(rc, 0, "kill failed");
    }

    /// Wait for the child's exit status, within `limit`.
    fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "accord did not exit in {limit:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Poll `done` every few milliseconds until it holds or `limit` passes.
fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    done()
}

/// Save a file as editors do: write a temp file, rename it over the name.
fn save(dir: &Path, name: &str, contents: &str) {
    let temp = dir.join(format!(".{name}.swp"));
    std::fs::write(&temp, contents).unwrap();
    std::fs::rename(&temp, dir.join(name)).unwrap();
}

fn started_watch(pair: &Pair, args: &[&str], env: &[(&str, &str)]) -> Watch {
    let watch = Watch::start(pair, args, env);
    let first = watch.next_cycle(Duration::from_secs(30));
    assert_eq!(first["fatal"], serde_json::Value::Null, "{first}");
    watch
}

/// Acceptance 6: every saved file appears on the other side (20 saves,
/// alternating sides; their median latency is printed, and measured
/// against its one-second target by bench/sync/watch.py); and once the
/// pair agrees the watch goes quiet (our own writes do not start cycles
/// forever).
#[test]
fn a_saved_file_appears_on_the_other_side() {
    saves_arrive(Pair::new(), "local");
}

/// Acceptance 6 and 7: the same with B over ssh (a real sshd): B is
/// watched on its own host by its `accord server`.
#[test]
fn with_b_over_ssh_a_saved_file_appears() {
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    let base = tempfile::tempdir().unwrap();
    let remote = RemoteB::over_ssh(base.path(), &sshd.rsh());
    saves_arrive(Pair::with_remote_b(&remote), "B over ssh");
}

/// Acceptance 6 and 7: the same with B from an `accord server` daemon.
#[test]
fn with_b_from_the_daemon_a_saved_file_appears() {
    let daemon = Daemon::start();
    let pair = Pair::with_remote_b(&daemon.remote_b());
    saves_arrive(pair, "B from the daemon");
}

/// The latency tests measure time: they run one at a time, so that they
/// do not slow each other down (the ssh variant opens a connection per
/// cycle, about half a second on the 2-core build machine).
static ONE_LATENCY_TEST_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn saves_arrive(pair: Pair, how: &str) {
    let _alone = ONE_LATENCY_TEST_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    pair.write('a', "seed", "seed");
    let watch = started_watch(&pair, &[], &[]);
    let mut latencies = Vec::new();
    for i in 0..20 {
        let (from, to) = if i % 2 == 0 { ('a', 'b') } else { ('b', 'a') };
        let name = format!("saved{i}.txt");
        let contents = format!("version {i} saved on {from}\n");
        let start = Instant::now();
        save(pair.root(from), &name, &contents);
        let arrived = wait_until(Duration::from_secs(10), || {
            pair.read(to, &name).as_deref() == Some(contents.as_str())
        });
        assert!(arrived, "save {i} did not reach {to} within 10 s");
        latencies.push(start.elapsed());
    }
    latencies.sort();
    let median = (latencies[9] + latencies[10]) / 2;
    eprintln!(
        "sync --watch ({how}): median latency of 20 saves {:.0} ms (min {:.0}, max {:.0})",
        median.as_secs_f64() * 1e3,
        latencies[0].as_secs_f64() * 1e3,
        latencies[19].as_secs_f64() * 1e3
    );
    // The one-second target is a benchmark's (bench/sync/watch.py, on an
    // idle machine): a timed bound here would fail on a loaded one.

    watch.settle_after_changes(Duration::from_millis(700));
    std::thread::sleep(Duration::from_millis(1500));
    let extra = watch.drain_cycles();
    assert!(extra.is_empty(), "cycles with nothing changed: {extra:?}");
    pair.assert_equal();
}

/// Acceptance 6: 10,000 files created at once on one side all arrive
/// (far more events than the kernel's default queue of 16,384 holds, so
/// this also goes through an overflow's rescan when one happens). On the
/// 2-core build machine most of this test's minute or so is the removal of
/// the 20,000 files afterwards, not the sync.
#[test]
fn ten_thousand_files_created_at_once_all_arrive() {
    const FILES: usize = 10_000;
    let pair = Pair::new();
    let watch = started_watch(&pair, &["-q"], &[]);
    let start = Instant::now();
    for dir in 0..100 {
        let dir_path = pair.path('a', &format!("d{dir:02}"));
        std::fs::create_dir(&dir_path).unwrap();
        for i in 0..FILES / 100 {
            std::fs::write(dir_path.join(format!("f{i:03}")), format!("{dir}/{i}")).unwrap();
        }
    }
    let created = start.elapsed();
    let count_b = || {
        (0..100)
            .map(|dir| {
                std::fs::read_dir(pair.path('b', &format!("d{dir:02}")))
                    .map(|entries| entries.count())
                    .unwrap_or(0)
            })
            .sum::<usize>()
    };
    let arrived = wait_until(Duration::from_secs(180), || count_b() >= FILES);
    assert!(
        arrived,
        "only {} of {FILES} files arrived in 180 s",
        count_b()
    );
    eprintln!(
        "sync --watch: {FILES} files created in {:.2}s all arrived {:.2}s after the first",
        created.as_secs_f64(),
        start.elapsed().as_secs_f64()
    );
    watch.settle(Duration::from_millis(1500));
    pair.assert_equal();
}

/// When the kernel's watch limit is reached (simulated by the test hook
/// ACCORD_TEST_WATCH_LIMIT), the watch says so, naming the sysctl file,
/// and syncs every --watch-interval instead of missing changes.
#[test]
fn at_the_watch_limit_it_says_so_and_syncs_periodically() {
    let pair = Pair::new();
    let mut watch = started_watch(
        &pair,
        &["--watch-interval", "1"],
        &[("ACCORD_TEST_WATCH_LIMIT", "1")],
    );
    watch.wait_stderr(
        "/proc/sys/fs/inotify/max_user_watches",
        Duration::from_secs(5),
    );
    pair.write('a', "polled.txt", "found by a periodic sync");
    let arrived = wait_until(Duration::from_secs(5), || pair.exists('b', "polled.txt"));
    assert!(arrived, "a periodic sync should have carried the file over");
    assert_eq!(
        pair.read('b', "polled.txt").as_deref(),
        Some("found by a periodic sync")
    );
}

/// SIGHUP makes the watch rescan in full (a cycle, announced on stderr);
/// SIGTERM ends it cleanly with 0 when the last cycle agreed.
#[test]
fn sighup_rescans_and_sigterm_ends_cleanly() {
    let pair = Pair::new();
    pair.write('a', "f", "f");
    let mut watch = started_watch(&pair, &[], &[]);
    watch.settle_after_changes(Duration::from_millis(500));
    watch.signal(libc::SIGHUP);
    watch.wait_stderr("SIGHUP", Duration::from_secs(5));
    let rescan = watch.next_cycle(Duration::from_secs(5));
    assert_eq!(rescan["propagated"], 0, "{rescan}");
    assert_eq!(rescan["conflicts"].as_array().map(Vec::len), Some(0));
    watch.signal(libc::SIGTERM);
    assert_eq!(watch.wait_exit(Duration::from_secs(10)), Some(0));
}

/// SIGINT during a run ends the watch only once that run is done: what
/// it planned is all carried out, and the exit status is 0. (The test
/// hook ACCORD_TEST_SYNC_PAUSE holds the first run between its plan and
/// its first change.)
#[test]
fn sigint_during_a_run_ends_the_watch_after_it() {
    let pair = Pair::new();
    pair.write('a', "planned", "carried over after the signal");
    let pause = pair.state.with_file_name("pause");
    let pause_text = pause.display().to_string();
    let mut watch = Watch::start(&pair, &[], &[("ACCORD_TEST_SYNC_PAUSE", &pause_text)]);
    assert!(wait_until(Duration::from_secs(30), || pause.exists()));
    watch.signal(libc::SIGINT);
    watch.wait_stderr("stopping after this run", Duration::from_secs(5));
    std::fs::remove_file(&pause).unwrap();
    assert_eq!(watch.wait_exit(Duration::from_secs(30)), Some(0));
    let cycle = watch.next_cycle(Duration::from_secs(1));
    assert_eq!(cycle["propagated"], 1, "{cycle}");
    assert_eq!(
        pair.read('b', "planned").as_deref(),
        Some("carried over after the signal")
    );
}

/// A root moved away and back loses its watch: the watch says so,
/// rescans, and watches the root again, so later saves still arrive.
#[test]
fn a_lost_watch_is_set_up_again() {
    let pair = Pair::new();
    pair.write('a', "f", "f");
    let mut watch = started_watch(&pair, &["--watch-interval", "1"], &[]);
    watch.settle_after_changes(Duration::from_millis(500));
    let away = pair.a.with_file_name("a-away");
    std::fs::rename(&pair.a, &away).unwrap();
    std::fs::rename(&away, &pair.a).unwrap();
    watch.wait_stderr("lost the watch", Duration::from_secs(5));
    watch.settle(Duration::from_millis(1500));
    let start = Instant::now();
    save(&pair.a, "after", "saved after the move");
    assert!(wait_until(Duration::from_secs(5), || pair.exists('b', "after")));
    // The root was back long before the debounced rescan, so it was
    // watched again at once: inotify, not the 1 s fallback, carried it.
    let cannot = watch
        .stderr_seen
        .iter()
        .find(|l| l.contains("cannot watch"));
    assert_eq!(cannot, None);
    let took = start.elapsed();
    assert!(took < Duration::from_millis(900), "{took:?}");
}

/// Conflicts do not stop the watch; the deletion guard does (exit 3).
#[test]
fn conflicts_go_on_and_the_deletion_guard_stops_the_watch() {
    let pair = Pair::new();
    for i in 0..10 {
        pair.write('a', &format!("f{i}"), "original");
    }
    let mut watch = started_watch(&pair, &[], &[]);
    watch.settle_after_changes(Duration::from_millis(500));
    // Both sides change f0 between two cycles: hold the watch up by
    // writing both within one debounce window.
    pair.write('a', "f0", "a's edit");
    pair.write('b', "f0", "b's edit");
    let cycle = watch.next_cycle(Duration::from_secs(5));
    assert_eq!(conflict_paths(&cycle), ["f0"], "{cycle}");
    pair.write('a', "later", "still watching");
    assert!(wait_until(Duration::from_secs(5), || pair.exists('b', "later")));
    // Emptying one side is the deletion guard's business: a person decides.
    for i in 1..10 {
        std::fs::remove_file(pair.path('b', &format!("f{i}"))).unwrap();
    }
    std::fs::remove_file(pair.path('b', "later")).unwrap();
    assert_eq!(watch.wait_exit(Duration::from_secs(10)), Some(3));
    watch.wait_stderr("needs a person", Duration::from_secs(1));
    assert!(pair.exists('a', "f5"), "nothing may be deleted on A");
}

/// A remote root is watched on its own host by its `accord server`: a
/// change there starts a cycle at once, with no polling. When that host
/// cannot watch (its watch limit, simulated by the test hook
/// ACCORD_TEST_WATCH_LIMIT in the server's environment), the watch says
/// so and syncs every --watch-interval instead. The "remote" is `accord
/// server` started by a stand-in for ssh, which passes the environment.
#[test]
fn a_remote_root_is_watched_on_its_host() {
    let pair = Pair::new();
    let watch = remote_watch(&pair, "3600", &[]);
    watch.next_cycle(Duration::from_secs(30));
    pair.write('b', "on_remote", "seen by the server's watch");
    // The interval is an hour: only the server's news can bring it.
    assert!(wait_until(Duration::from_secs(6), || pair.exists('a', "on_remote")));
    pair.write('a', "on_local", "seen by inotify");
    assert!(wait_until(Duration::from_secs(6), || pair.exists('b', "on_local")));
    let said: Vec<String> = watch.stderr.try_iter().collect();
    assert!(!said.iter().any(|l| l.contains("cannot watch")), "{said:?}");
}

#[test]
fn a_remote_root_its_host_cannot_watch_is_synced_periodically() {
    let pair = Pair::new();
    let mut watch = remote_watch(&pair, "1", &[("ACCORD_TEST_WATCH_LIMIT", "1")]);
    watch.next_cycle(Duration::from_secs(30));
    let said = watch.wait_stderr("on its host", Duration::from_secs(5));
    assert!(said.contains("max_user_watches"), "{said}");
    pair.write('b', "on_remote", "seen by polling");
    assert!(wait_until(Duration::from_secs(6), || pair.exists('a', "on_remote")));
}

/// `accord sync --watch` of A and `localhost:B` through a stand-in for
/// ssh that runs the command here, syncing every `interval` seconds when
/// a root cannot be watched.
fn remote_watch(pair: &Pair, interval: &str, env: &[(&str, &str)]) -> Watch {
    remote_watch_with(pair, interval, env, &[])
}

fn remote_watch_with(pair: &Pair, interval: &str, env: &[(&str, &str)], args: &[&str]) -> Watch {
    let rsh = pair.state.with_file_name("fake-rsh");
    // Called as `RSH -e none -- HOST COMMAND`: run COMMAND here.
    std::fs::write(
        &rsh,
        "#!/bin/sh\nwhile [ \"$1\" != \"--\" ]; do shift; done\nshift 2\nexec sh -c \"$1\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&rsh, std::fs::Permissions::from_mode(0o755)).unwrap();
    let remote_b = format!("localhost:{}", pair.b.display());
    let mut command = std::process::Command::new(bin());
    command
        .args([
            "sync",
            "--batch",
            "--watch",
            "--json",
            "--watch-interval",
            interval,
        ])
        .arg(&pair.a)
        .arg(&remote_b)
        .arg("--rsh")
        .arg(&rsh)
        .arg("--remote-accord")
        .arg(bin())
        .args(args)
        .env("ACCORD_STATE_DIR", &pair.state)
        .envs(env.iter().copied());
    Watch::start_command(command)
}

/// The same on a remote root: its server's watch knows the rules.
#[test]
fn changes_of_excluded_paths_on_a_remote_root_are_no_news() {
    let pair = Pair::new();
    pair.write('a', "seed", "seed");
    pair.write('b', "build/old.o", "old");
    // An hour between polls: only the server's news can start a run.
    let watch = remote_watch_with(&pair, "3600", &[], &["--exclude", "build/"]);
    watch.next_cycle(Duration::from_secs(30));
    watch.settle_after_changes(Duration::from_millis(700));
    for i in 0..20 {
        std::fs::create_dir_all(pair.path('b', "build/deep")).unwrap();
        save(&pair.path('b', "build/deep"), &format!("b{i}.o"), "object");
    }
    std::thread::sleep(Duration::from_millis(1500));
    let cycles = watch.drain_cycles();
    assert!(cycles.is_empty(), "runs for excluded changes: {cycles:?}");
    pair.write('b', "real", "a real change on the remote root");
    assert!(wait_until(Duration::from_secs(6), || pair.exists('a', "real")));
    assert!(!pair.exists('a', "build"));
}

/// Changes of paths the sync excludes (by `--exclude`, or by the root's
/// `.accordignore`) start no run; the first change outside them does.
#[test]
fn changes_of_excluded_paths_start_no_run() {
    let pair = Pair::new();
    pair.write('a', "seed", "seed");
    pair.write('a', ".accordignore", "*.log\n");
    pair.write('a', "build/old.o", "old");
    let watch = started_watch(&pair, &["--exclude", "build/"], &[]);
    watch.settle_after_changes(Duration::from_millis(700));
    for i in 0..20 {
        save(&pair.path('a', "build"), &format!("out{i}.o"), "object");
        std::fs::create_dir_all(pair.path('b', "build/deep")).unwrap();
        save(&pair.path('b', "build/deep"), &format!("b{i}.o"), "object");
        // Written in place: a save's temp name (.run.log.swp) is no log.
        std::fs::write(pair.path('a', "run.log"), format!("line {i}\n")).unwrap();
        std::fs::write(pair.path('b', "b.log"), format!("line {i}\n")).unwrap();
    }
    std::thread::sleep(Duration::from_millis(1500));
    let cycles = watch.drain_cycles();
    assert!(cycles.is_empty(), "runs for excluded changes: {cycles:?}");
    save(pair.root('a'), "real", "a real change");
    let cycle = watch.next_cycle(Duration::from_secs(10));
    assert_eq!(cycle["propagated"], 1, "{cycle}");
    assert_eq!(pair.read('b', "real").as_deref(), Some("a real change"));
    assert!(!pair.exists('b', "run.log") && !pair.exists('a', "b.log"));
    assert!(!pair.exists('a', "build/deep") && !pair.exists('b', "build/out0.o"));
}

/// `--watch` of a set of three roots: a save on any root reaches the two
/// others; a root that goes away is left out (the cycle says so) and, once
/// back, catches up with what it missed, by a periodic run.
#[test]
fn a_set_of_three_roots_is_kept_in_agreement() {
    let pair = Pair::new();
    let c = pair.a.parent().unwrap().join("c");
    std::fs::create_dir(&c).unwrap();
    pair.write('a', "seed", "seed");
    let mut command = std::process::Command::new(bin());
    command
        .args([
            "sync",
            "--batch",
            "--watch",
            "--json",
            "--watch-interval",
            "1",
        ])
        .args([&pair.a, &pair.b, &c])
        .env("ACCORD_STATE_DIR", &pair.state);
    let mut watch = Watch::start_command(command);
    let first = watch.next_cycle(Duration::from_secs(30));
    assert_eq!(first["fatal"], serde_json::Value::Null, "{first}");
    let seeded = wait_until(Duration::from_secs(10), || c.join("seed").exists());
    assert!(seeded, "the first run did not reach C");

    save(&c, "from-c.txt", "saved on C\n");
    let arrived = wait_until(Duration::from_secs(10), || {
        [&pair.a, &pair.b].iter().all(|root| {
            std::fs::read_to_string(root.join("from-c.txt"))
                .ok()
                .as_deref()
                == Some("saved on C\n")
        })
    });
    assert!(arrived, "a save on C did not reach A and B");

    let away = pair.a.parent().unwrap().join("b-away");
    std::fs::rename(&pair.b, &away).unwrap();
    save(&pair.a, "while-b-away.txt", "saved on A\n");
    let reached_c = wait_until(Duration::from_secs(10), || {
        c.join("while-b-away.txt").exists()
    });
    assert!(reached_c, "a save on A did not reach C while B was away");
    watch.wait_stderr("cannot watch", Duration::from_secs(10));
    std::fs::rename(&away, &pair.b).unwrap();
    let caught_up = wait_until(Duration::from_secs(10), || {
        pair.read('b', "while-b-away.txt").as_deref() == Some("saved on A\n")
    });
    assert!(caught_up, "B did not catch up once back");
    let cycles = watch.drain_cycles();
    assert!(
        cycles
            .iter()
            .any(|cycle| cycle["unreached"].as_array().is_some_and(|u| !u.is_empty())),
        "no cycle said B was left out: {cycles:?}"
    );
}
