//! Task runs of `accord mirror` (issue 13): the local executor at one and
//! four threads, and cluster runs on a real `redis-server` that each test
//! starts on a loopback port with its own directory, done by `accord
//! worker` processes: every run ends with a tree identical to the source;
//! a worker killed with SIGKILL mid-run leaves its tasks to the others; a
//! paused run hands out nothing until resumed; a stopped run restarted
//! later finishes without writing any file twice.

mod mirror_common;

use mirror_common::*;
use std::collections::HashSet;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Files above this are copied in ranges (small, so that the test trees'
/// big files are split).
const RANGE: &str = "1048576";

/// A `redis-server` of the test's own.
struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    /// `None` (after `skip_or_fail`) when redis-server is not installed.
    fn start() -> Option<Redis> {
        if !need("redis-server", "redis-server") {
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let child = Redis::spawn(port, dir.path());
        Some(Redis {
            child,
            port,
            _dir: dir,
        })
    }

    /// A server on `port` keeping its writes in an append-only file in
    /// `dir` (a restarted one has the run as it was).
    fn spawn(port: u16, dir: &Path) -> Child {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "yes"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "redis did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        child
    }

    /// Stop the server as a service manager does (SIGTERM: it writes what
    /// it holds) and start it again on the same port and files.
    fn restart(&mut self) {
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
        std::thread::sleep(Duration::from_millis(500));
        self.child = Redis::spawn(self.port, self._dir.path());
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One run in a Redis.
struct Run<'a> {
    redis: &'a Redis,
    name: &'static str,
}

impl Run<'_> {
    fn create(&self, src: &Path, dst: &Path, state: &Path) {
        let out = mirror(
            state,
            &[
                "--cluster",
                &self.redis.url(),
                "--run",
                self.name,
                "--detach",
                "--range-size",
                RANGE,
                "--claim-timeout",
                "2",
                src.to_str().unwrap(),
                dst.to_str().unwrap(),
            ],
        );
        assert_exit(&out, 0);
    }

    fn worker(&self, name: &str, jobs: u32) -> Child {
        Command::new(bin())
            .args(["worker", "--cluster", &self.redis.url(), "--run", self.name])
            .args(["--jobs", &jobs.to_string(), "--name", name])
            .args(["--claim-timeout", "2"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    fn cluster(&self, action: &str) -> Output {
        let out = Command::new(bin())
            .args(["cluster", action, "--cluster", &self.redis.url()])
            .args(["--run", self.name])
            .output()
            .unwrap();
        assert_exit(&out, 0);
        out
    }

    fn status(&self) -> Status {
        Status::parse(&String::from_utf8_lossy(&self.cluster("status").stdout))
    }

    /// Wait until the run exists and `ok` holds of its status (at most a
    /// minute).
    fn wait_for(&self, what: &str, ok: impl Fn(&Status) -> bool) -> Status {
        let start = Instant::now();
        loop {
            let out = Command::new(bin())
                .args(["cluster", "status", "--cluster", &self.redis.url()])
                .args(["--run", self.name])
                .output()
                .unwrap();
            let s = match out.status.success() {
                true => Status::parse(&String::from_utf8_lossy(&out.stdout)),
                false => Status::default(),
            };
            if out.status.success() && ok(&s) {
                return s;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "{what}: {s:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// What `accord cluster status` says.
#[derive(Debug, Default)]
struct Status {
    state: String,
    written: u64,
    waiting: u64,
    leased: u64,
    done: u64,
    failed: u64,
}

impl Status {
    fn parse(line: &str) -> Status {
        let after = line.split_once(": ").map_or("", |x| x.1);
        let state = after.split(',').next().unwrap_or("").trim().to_string();
        let (figures, tasks) = after.split_once("tasks:").unwrap_or((after, ""));
        let num_in = |part: &str, word: &str| -> u64 {
            let words: Vec<&str> = part.split_whitespace().collect();
            let i = words
                .iter()
                .position(|w| w.trim_end_matches(',') == word)
                .filter(|i| *i > 0)
                .unwrap_or_else(|| panic!("no {word:?} in {line:?}"));
            words[i - 1].replace(',', "").parse().unwrap()
        };
        Status {
            state,
            written: num_in(figures, "files"),
            waiting: num_in(tasks, "waiting"),
            leased: num_in(tasks, "in"),
            done: num_in(tasks, "done"),
            failed: num_in(tasks, "failed"),
        }
    }
}

fn wait_all(children: &mut [Child]) {
    for c in children {
        let st = c.wait().unwrap();
        assert!(st.success(), "a worker failed: {st:?}");
    }
}

fn assert_same(src: &Path, dst: &Path) {
    let d = differences(&snapshot(src), &snapshot(dst));
    assert!(
        d.is_empty(),
        "{} differences: {:?}",
        d.len(),
        &d[..d.len().min(20)]
    );
}

/// Every entry kind of the mirror's tests, plus: a hard-link group spread
/// over three directories, files above the range size, and `dirs`
/// directories of `per_dir` small files (several `files` tasks each).
fn tree(root: &Path, dirs: usize, per_dir: usize) {
    full_tree(root);
    let mut rng = Rng(7);
    std::fs::write(root.join("a/ranged"), rng.bytes(3 << 20)).unwrap();
    for d in 0..dirs {
        let dir = root.join(format!("many/d{d:02}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..per_dir {
            std::fs::write(dir.join(format!("f{f:04}")), rng.bytes(100 + f % 700)).unwrap();
        }
    }
    std::fs::hard_link(root.join("many/d00/f0001"), root.join("a/group-b")).unwrap();
    std::fs::hard_link(root.join("many/d00/f0001"), root.join("nested/group-c")).unwrap();
}

/// Small leaf directories (`dirs` of `per_dir` files under two parents):
/// a cluster run finishes each where it scans it, several to a task.
fn leaves(root: &Path, dirs: usize, per_dir: usize) {
    let mut rng = Rng(11);
    for d in 0..dirs {
        let dir = root.join(format!("p{}/leaf{d:03}", d % 2));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..per_dir {
            std::fs::write(dir.join(format!("f{f:03}")), rng.bytes(50 + f % 300)).unwrap();
        }
    }
}

/// Regular files with contents to write: one per inode.
fn inodes(root: &Path) -> u64 {
    let snap = snapshot(root);
    let mut seen = HashSet::new();
    for (k, n) in &snap {
        if n.kind == libc::S_IFREG {
            let md = std::fs::symlink_metadata(root.join(k)).unwrap();
            seen.insert((md.dev(), md.ino()));
        }
    }
    seen.len() as u64
}

/// Files whose contents a run wrote, from the summary line a local run
/// prints on a terminal (see `mirror_on_terminal`).
fn written(stderr: &[u8]) -> u64 {
    summary_figures(stderr)[1]
}

#[test]
fn local_task_runs_at_1_and_4_threads_give_the_source_tree() {
    let (_t, src, dst, state) = roots();
    tree(&src, 3, 300);
    let files = inodes(&src);
    for jobs in ["1", "4"] {
        let dst = dst.with_file_name(format!("dst{jobs}"));
        let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
        let args = [
            "--executor",
            "tasks",
            "-j",
            jobs,
            "--range-size",
            RANGE,
            s,
            d,
        ];
        let out = mirror_on_terminal(&state, &args);
        assert_exit(&out, 0);
        assert_eq!(written(&out.stderr), files, "jobs {jobs}");
        assert_same(&src, &dst);
        // Again: nothing to write.
        let again = mirror_on_terminal(&state, &args);
        assert_exit(&again, 0);
        assert_eq!(written(&again.stderr), 0, "jobs {jobs}, no change");
        assert_same(&src, &dst);
    }
}

/// The local executor keeps the walk's extended-attribute memos (entries
/// known to have none are not read again while unchanged): they are
/// written, and an attribute added since the last run (which moves the
/// file's ctime) is still copied, as is one removed.
#[test]
fn a_local_task_run_keeps_xattr_memos_that_miss_no_change() {
    let (_t, src, dst, state) = roots();
    leaves(&src, 4, 20);
    set_xattr(&src.join("p1/leaf001/f003"), "user.early", b"e");
    let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
    let args = ["--executor", "tasks", "-j", "2", s, d];
    assert_exit(&mirror(&state, &args), 0);
    // Both sides older than the memo's settling time: the second run
    // remembers them.
    std::thread::sleep(Duration::from_secs(3));
    assert_exit(&mirror(&state, &args), 0);
    let memos: Vec<u64> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("xattr-memo-"))
        .map(|e| e.metadata().unwrap().len())
        .collect();
    assert_eq!(memos.len(), 2, "a memo per root: {memos:?}");
    assert!(memos.iter().all(|&n| n > 16), "memos with keys: {memos:?}");
    set_xattr(&src.join("p0/leaf000/f005"), "user.late", b"1");
    let early = std::ffi::CString::new(
        src.join("p1/leaf001/f003")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    let gone = unsafe { libc::lremovexattr(early.as_ptr(), c"user.early".as_ptr()) };
    assert_eq!(gone, 0, "{}", std::io::Error::last_os_error());
    let out = mirror_on_terminal(&state, &args);
    assert_exit(&out, 0);
    assert_eq!(written(&out.stderr), 0);
    assert_same(&src, &dst);
}

/// A local task run that would delete more than `--max-delete` pauses
/// itself before deleting; nothing can resume it in that process, so it
/// ends (it used to wait forever), in error, saying why, nothing deleted.
#[test]
fn a_local_task_run_past_max_delete_ends_without_deleting() {
    let (_t, src, dst, state) = roots();
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("kept"), b"k").unwrap();
    std::fs::create_dir_all(&dst).unwrap();
    for i in 0..10 {
        std::fs::write(dst.join(format!("extra{i}")), b"x").unwrap();
    }
    let mut child = Command::new(bin())
        .args([
            "mirror",
            "--executor",
            "tasks",
            "-j",
            "2",
            "--max-delete",
            "2",
        ])
        .args([&src, &dst])
        .env("ACCORD_STATE_DIR", &state)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the run did not end");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--max-delete"), "{err}");
    assert_eq!(std::fs::read_dir(&dst).unwrap().count(), 10);
}

/// A destination with extras (files, a nested extra tree, an extra
/// symlink) and kind changes both ways (a directory where the source has
/// a file, a file where it has a directory) ends as the source.
#[test]
fn a_task_run_deletes_extras_and_replaces_kinds() {
    let (_t, src, dst, state) = roots();
    tree(&src, 1, 20);
    std::fs::write(src.join("was-dir"), b"now a file").unwrap();
    std::fs::create_dir_all(src.join("was-file/inside")).unwrap();
    std::fs::write(src.join("was-file/inside/x"), b"x").unwrap();
    let junk = |p: &str| {
        let path = dst.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, b"junk").unwrap();
    };
    for p in [
        "extra",
        "many/d00/extra",
        "gone/a/b/c",
        "gone/a/d",
        "was-dir/deep/f",
    ] {
        junk(p);
    }
    std::fs::write(dst.join("was-file"), b"a file").unwrap();
    std::os::unix::fs::symlink("nowhere", dst.join("extra-link")).unwrap();
    let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
    let args = ["--executor", "tasks", "-j", "3", "--force", s, d];
    assert_exit(&mirror(&state, &args), 0);
    assert_same(&src, &dst);
}

/// Without --no-times a copy keeps its own mtime: hard-link names must
/// still find their leader's copy, and a second run still ends.
#[test]
fn a_task_run_without_times_still_links_groups() {
    let (_t, src, dst, state) = roots();
    tree(&src, 1, 20);
    let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
    let args = ["--executor", "tasks", "-j", "3", "--no-times", s, d];
    for _ in 0..2 {
        assert_exit(&mirror(&state, &args), 0);
        let mut a = snapshot(&src);
        let mut b = snapshot(&dst);
        for n in a.values_mut().chain(b.values_mut()) {
            n.mtime = (0, 0);
        }
        let d = differences(&a, &b);
        assert!(d.is_empty(), "{d:?}");
    }
}

/// The deletion guard over a streamed run: deletions are counted as
/// directories are planned; past --max-delete the run pauses itself
/// before deleting more and says why; `resume --force` goes on.
#[test]
fn a_cluster_run_past_max_delete_pauses_itself_until_forced() {
    let Some(redis) = Redis::start() else { return };
    let (_t, src, dst, state) = roots();
    std::fs::create_dir_all(src.join("keep")).unwrap();
    std::fs::write(src.join("keep/f"), b"f").unwrap();
    for i in 0..30 {
        let p = dst.join(format!("old/o{i:02}"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, b"old").unwrap();
    }
    let run = Run {
        redis: &redis,
        name: "guard",
    };
    let out = mirror(
        &state,
        &[
            "--cluster",
            &redis.url(),
            "--run",
            "guard",
            "--detach",
            "--max-delete",
            "10",
            src.to_str().unwrap(),
            dst.to_str().unwrap(),
        ],
    );
    assert_exit(&out, 0);
    let mut worker = run.worker("w", 2);
    let paused = run.wait_for("the guard's pause", |s| s.state == "paused");
    let text = String::from_utf8_lossy(&run.cluster("status").stdout).into_owned();
    assert!(text.contains("--max-delete"), "{text}");
    std::thread::sleep(Duration::from_millis(500));
    assert!(dst.join("old/o00").exists(), "deleted past the guard");
    assert_eq!(paused.failed, 0);
    Command::new(bin())
        .args(["cluster", "resume", "--force", "--cluster", &redis.url()])
        .args(["--run", "guard"])
        .status()
        .unwrap();
    wait_all(std::slice::from_mut(&mut worker));
    assert_same(&src, &dst);
}

#[test]
fn three_cluster_workers_give_the_source_tree() {
    let Some(redis) = Redis::start() else { return };
    let (_t, src, dst, state) = roots();
    tree(&src, 3, 300);
    let run = Run {
        redis: &redis,
        name: "three",
    };
    // The starter follows the run until it is over.
    let follower = Command::new(bin())
        .args(["mirror", "--cluster", &redis.url(), "--run", "three"])
        .args(["--range-size", RANGE, "--verify"])
        .args([&src, &dst])
        .env("ACCORD_STATE_DIR", &state)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    run.wait_for("the run created", |s| s.state == "running");
    let mut workers: Vec<Child> = (0..3).map(|i| run.worker(&format!("w{i}"), 2)).collect();
    wait_all(&mut workers);
    let out = follower.wait_with_output().unwrap();
    assert_exit(&out, 0);
    assert_same(&src, &dst);
    let s = run.status();
    assert_eq!((s.state.as_str(), s.failed), ("done", 0));
    assert_eq!(s.written, inodes(&src));
    // `status` shows each worker's share and rate.
    let out = String::from_utf8_lossy(&run.cluster("status").stdout).into_owned();
    let shares: Vec<u64> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("worker w"))
        .map(|l| {
            assert!(l.contains(" files/s, "), "{l}");
            let after = l.split_once(": ").unwrap().1;
            after.split_whitespace().next().unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(shares.len(), 3, "{out}");
    assert_eq!(shares.iter().sum::<u64>(), s.written, "{out}");
}

#[test]
fn a_worker_killed_mid_run_leaves_its_tasks_to_the_others() {
    // Directories above a batch of a remote queue (1024 files): `files`
    // tasks of their own.
    killed_mid_run(|src| tree(src, 4, 2500));
}

/// The same with leaves finished in `scan-dirs` tasks: the victim's task
/// is done again by another (its files found written, each leaf counted
/// once in its parent).
#[test]
fn a_worker_killed_mid_run_of_small_leaves_leaves_its_tasks_to_the_others() {
    killed_mid_run(|src| leaves(src, 120, 40));
}

fn killed_mid_run(make: impl Fn(&Path)) {
    let Some(redis) = Redis::start() else { return };
    let (_t, src, dst, state) = roots();
    make(&src);
    let run = Run {
        redis: &redis,
        name: "kill",
    };
    run.create(&src, &dst, &state);
    let mut victim = run.worker("victim", 1);
    let mut others: Vec<Child> = (0..2).map(|i| run.worker(&format!("w{i}"), 1)).collect();
    let at_kill = run.wait_for("some files written", |s| s.written > 0);
    unsafe { libc::kill(victim.id() as i32, libc::SIGKILL) };
    let _ = victim.wait();
    assert_ne!(at_kill.state, "done", "the run ended before the kill");
    wait_all(&mut others);
    let s = run.status();
    let errors = run.cluster("errors");
    assert_eq!(
        (s.state.as_str(), s.failed),
        ("done", 0),
        "{s:?}\n{}",
        String::from_utf8_lossy(&errors.stderr)
    );
    assert_same_but_the_victims_temp(&src, &dst, &state);
}

/// After a run whose worker was killed: the destination is the source's
/// copy but for the temp files the victim was writing (docs/cluster.md),
/// which the next run into it removes.
fn assert_same_but_the_victims_temp(src: &Path, dst: &Path, state: &Path) {
    let d = differences(&snapshot(src), &snapshot(dst));
    let temps = d
        .iter()
        .filter(|x| x.starts_with("extra in copy") && x.contains(".accord-tmp-"))
        .count();
    assert!(
        temps == d.len(),
        "{} differences: {:?}",
        d.len(),
        &d[..d.len().min(20)]
    );
    let out = Command::new(bin())
        .args(["mirror", "-q"])
        .args([src, dst])
        .env("ACCORD_STATE_DIR", state)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_same(src, dst);
}

#[test]
fn a_paused_run_hands_out_nothing_until_resumed() {
    let Some(redis) = Redis::start() else { return };
    let (_t, src, dst, state) = roots();
    tree(&src, 12, 400);
    let run = Run {
        redis: &redis,
        name: "pause",
    };
    run.create(&src, &dst, &state);
    let mut workers: Vec<Child> = (0..2).map(|i| run.worker(&format!("w{i}"), 2)).collect();
    run.wait_for("some files written", |s| s.written > 0);
    run.cluster("pause");
    // Leases handed out before the pause finish; then nothing moves.
    let paused = run.wait_for("leases finished", |s| s.leased == 0);
    assert_eq!(paused.state, "paused");
    assert!(
        paused.waiting > 0,
        "the run ended before the pause: {paused:?}"
    );
    std::thread::sleep(Duration::from_secs(2));
    let later = run.status();
    assert_eq!(
        (later.done, later.written, later.leased),
        (paused.done, paused.written, 0),
        "tasks handed out while paused"
    );
    run.cluster("resume");
    wait_all(&mut workers);
    let s = run.status();
    assert_eq!((s.state.as_str(), s.failed), ("done", 0), "{s:?}");
    assert_same(&src, &dst);
}

#[test]
fn a_stopped_run_restarted_later_writes_no_file_twice() {
    stopped_and_restarted(|src| tree(src, 4, 2500));
}

#[test]
fn a_stopped_run_of_small_leaves_restarted_later_writes_no_file_twice() {
    stopped_and_restarted(|src| leaves(src, 120, 40));
}

fn stopped_and_restarted(make: impl Fn(&Path)) {
    let Some(redis) = Redis::start() else { return };
    let (_t, src, dst, state) = roots();
    make(&src);
    let run = Run {
        redis: &redis,
        name: "stop",
    };
    run.create(&src, &dst, &state);
    let mut first: Vec<Child> = (0..2).map(|i| run.worker(&format!("a{i}"), 2)).collect();
    run.wait_for("some files written", |s| s.written > 0);
    run.cluster("stop");
    // The workers finish what they hold and leave.
    wait_all(&mut first);
    let stopped = run.status();
    assert_eq!(stopped.state, "stopped");
    assert!(stopped.waiting > 0, "the run ended before the stop");
    assert!(stopped.written < inodes(&src));
    run.cluster("restart");
    let mut second: Vec<Child> = (0..2).map(|i| run.worker(&format!("b{i}"), 2)).collect();
    wait_all(&mut second);
    let s = run.status();
    assert_eq!((s.state.as_str(), s.failed), ("done", 0), "{s:?}");
    // Every file was written exactly once over both halves.
    assert_eq!(s.written, inodes(&src));
    assert_same(&src, &dst);
}

#[test]
fn a_run_goes_on_after_redis_restarts() {
    let Some(mut redis) = Redis::start() else {
        return;
    };
    let (_t, src, dst, state) = roots();
    tree(&src, 12, 400);
    let url = redis.url();
    fn run(redis: &Redis) -> Run<'_> {
        Run {
            redis,
            name: "restart",
        }
    }
    run(&redis).create(&src, &dst, &state);
    let mut workers: Vec<Child> = (0..2)
        .map(|i| run(&redis).worker(&format!("w{i}"), 2))
        .collect();
    let before = run(&redis).wait_for("some files written", |s| s.written > 0);
    assert_ne!(before.state, "done", "the run ended before the restart");
    redis.restart();
    assert_eq!(redis.url(), url);
    wait_all(&mut workers);
    let s = run(&redis).status();
    assert_eq!((s.state.as_str(), s.failed), ("done", 0), "{s:?}");
    assert_same(&src, &dst);
}

/// `.accordignore` files at several levels: what they exclude is neither
/// copied nor, in the destination, deleted; a deeper file re-includes. A
/// cluster worker that plans a deep directory reads the files above it
/// itself (no worker sees the whole walk).
fn write(p: &Path, data: &[u8]) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, data).unwrap();
}

fn ignore_files_tree(src: &Path, dst: &Path) {
    write(&src.join(".accordignore"), b"*.log\n/build/\n");
    write(&src.join("a/.accordignore"), b"!keep.log\ncache/\n");
    for d in ["a", "a/b", "a/b/c", "x"] {
        write(&src.join(d).join("f"), b"file");
        write(&src.join(d).join("noise.log"), b"log");
    }
    write(&src.join("a/b/keep.log"), b"kept");
    write(&src.join("build/out"), b"o");
    write(&src.join("a/b/cache/c1"), b"c");
    // Excluded entries the destination has of its own stay.
    write(&dst.join("a/b/c/mine.log"), b"mine");
    write(&dst.join("build/mine"), b"mine");
    write(&dst.join("a/b/cache/mine"), b"mine");
}

fn check_ignore_files_result(dst: &Path) {
    for d in ["a", "a/b", "a/b/c", "x"] {
        assert!(dst.join(d).join("f").exists(), "{d}/f not copied");
        assert!(
            !dst.join(d).join("noise.log").exists(),
            "{d}/noise.log copied"
        );
    }
    assert_eq!(std::fs::read(dst.join("a/b/keep.log")).unwrap(), b"kept");
    assert!(!dst.join("build/out").exists());
    assert!(!dst.join("a/b/cache/c1").exists());
    for kept in ["a/b/c/mine.log", "build/mine", "a/b/cache/mine"] {
        assert!(dst.join(kept).exists(), "{kept}: excluded, yet deleted");
    }
}

#[test]
fn a_local_task_run_reads_accordignore_files() {
    let (_t, src, dst, state) = roots();
    ignore_files_tree(&src, &dst);
    let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
    let out = mirror(&state, &["--executor", "tasks", "-j", "4", s, d]);
    assert_exit(&out, 0);
    check_ignore_files_result(&dst);
}

#[test]
fn cluster_workers_read_the_accordignore_files_above_their_directory() {
    let Some(redis) = Redis::start() else { return };
    let (_t, src, dst, state) = roots();
    ignore_files_tree(&src, &dst);
    let run = Run {
        redis: &redis,
        name: "ignore",
    };
    run.create(&src, &dst, &state);
    let mut workers: Vec<Child> = (0..3).map(|i| run.worker(&format!("w{i}"), 2)).collect();
    wait_all(&mut workers);
    let s = run.status();
    assert_eq!((s.state.as_str(), s.failed), ("done", 0));
    check_ignore_files_result(&dst);
}

/// A percentage `--max-delete` is of the whole destination, as the walk's
/// is: extras planned early (here all of `a`, before `b`'s entries are
/// seen) are held until every directory is counted, then deleted when
/// within the limit, and kept, with the run ended in error, when past it.
fn percentage_guard(extras: usize, kept: usize) -> (Output, std::path::PathBuf, tempfile::TempDir) {
    let (t, src, dst, state) = roots();
    for i in 0..kept {
        write(&src.join(format!("b/f{i}")), b"k");
        write(&dst.join(format!("b/f{i}")), b"k");
    }
    write(&src.join("a/kept"), b"k");
    write(&dst.join("a/kept"), b"k");
    for i in 0..extras {
        write(&dst.join(format!("a/extra{i}")), b"x");
    }
    let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
    let out = mirror(&state, &["-j", "2", s, d]);
    (out, dst, t)
}

#[test]
fn a_percentage_max_delete_is_of_the_whole_destination() {
    // 10 of 113 entries: within 50%, though 10 of the 13 seen when `a`
    // is planned are not.
    let (out, dst, _t) = percentage_guard(10, 100);
    assert_exit(&out, 0);
    assert_eq!(std::fs::read_dir(dst.join("a")).unwrap().count(), 1);
    // 60 of 103 (the walk says the same): past it; nothing deleted.
    let (out, dst, _t) = percentage_guard(60, 40);
    assert_exit(&out, 3);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("60 of the destination's 103 entries"), "{err}");
    assert_eq!(std::fs::read_dir(dst.join("a")).unwrap().count(), 61);
}

/// `accord worker` without `--run` serves the runs of its Redis as they
/// are created, one after the other, and leaves on SIGTERM.
#[test]
fn a_worker_without_a_run_serves_each_run_created() {
    let Some(redis) = Redis::start() else { return };
    let mut worker = Command::new(bin())
        .args(["worker", "--cluster", &redis.url(), "--jobs", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = tempfile::tempdir().unwrap();
    for name in ["first", "second"] {
        let (src, dst) = (t.path().join(name), t.path().join(format!("{name}-copy")));
        tree(&src, 3, 50);
        let run = Run {
            redis: &redis,
            name,
        };
        run.create(&src, &dst, &t.path().join("state"));
        let s = run.wait_for("the run done by the worker", |s| s.state == "done");
        assert_eq!(s.failed, 0);
        assert_same(&src, &dst);
    }
    unsafe { libc::kill(worker.id() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(20);
    while worker.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the worker did not leave on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = worker.wait_with_output().unwrap();
    assert_exit(&out, 0);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("run first: the run is over"), "{err}");
    assert!(err.contains("run second: the run is over"), "{err}");
    // One line per task, in words: what it copied, and how it ended.
    let copied =
        |l: &&str| l.contains(" INFO ") && l.contains("copying ") && l.contains(" files of ");
    assert!(
        err.lines().filter(copied).all(|l| l.contains(": done in ")),
        "{err}"
    );
    assert!(err.lines().filter(copied).count() >= 2, "{err}");
    assert!(err.lines().any(|l| l.contains("listing ")), "{err}");
}

/// A destination file linked to a name in another directory, where the
/// source has two separate files with the same contents and times: each
/// executor leaves them separate, as in the source (a task sees one
/// directory: it rewrites a file whose inode has names out of its sight).
#[test]
fn destination_links_across_directories_that_the_source_lacks_are_broken() {
    for executor in ["tasks", "walk"] {
        let (_tmp, src, dst, state) = roots();
        for root in [&src, &dst] {
            std::fs::create_dir_all(root.join("x")).unwrap();
            std::fs::create_dir_all(root.join("y")).unwrap();
        }
        for p in ["x/f", "y/g"] {
            std::fs::write(src.join(p), b"same contents").unwrap();
            set_mtime(&src.join(p), 1_600_000_000, 0);
        }
        std::fs::write(dst.join("x/f"), b"same contents").unwrap();
        set_mtime(&dst.join("x/f"), 1_600_000_000, 0);
        std::fs::hard_link(dst.join("x/f"), dst.join("y/g")).unwrap();
        let args = [
            "--executor",
            executor,
            src.to_str().unwrap(),
            dst.to_str().unwrap(),
        ];
        assert_exit(&mirror(&state, &args), 0);
        let ino = |p: &str| std::fs::metadata(dst.join(p)).unwrap().ino();
        assert_ne!(
            ino("x/f"),
            ino("y/g"),
            "{executor}: the destination's link was kept"
        );
        assert_eq!(
            differences(&snapshot(&src), &snapshot(&dst)),
            Vec::<String>::new()
        );
    }
}
