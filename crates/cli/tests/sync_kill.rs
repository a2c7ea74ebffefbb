//! The crash invariant (issue 12, acceptance 3): `accord sync` killed with
//! SIGKILL at a random moment leaves every file with its original or its
//! final contents, and the next run completes the sync with no false
//! conflicts. Trials: `ACCORD_SYNC_KILL_TRIALS` (default 12; half that,
//! at least 1, with B a remote root over a real sshd).

mod mirror_common;
mod remote_common;
mod sync_common;
use std::collections::BTreeMap;
use std::time::Instant;
use sync_common::*;

const FILES: usize = 400;

fn name(i: usize) -> String {
    format!("d{}/f{i:03}", i % 7)
}

fn original(i: usize) -> String {
    format!("original {i} ").repeat(400)
}

fn from_a(i: usize) -> String {
    format!("new from a {i} ").repeat(300 + i)
}

fn from_b(i: usize) -> String {
    format!("new from b {i} ").repeat(200 + i)
}

fn created_on_b(i: usize) -> String {
    format!("created on b {i}")
}

/// Files of a tree that A moves into a new directory: B renames its own.
const MOVED: usize = 40;

/// Files with a second name: each tenth from the third (odd: B writes it
/// in place, through its first name, so the group's new contents reach A
/// as one copy and a link) and each tenth from the second (even: A writes
/// it and then gives it a second name, a new group that reaches B so).
fn grouped(i: usize) -> Option<String> {
    match i % 10 {
        3 => Some(format!("grp/g{i:03}")),
        2 => Some(format!("links/l{i:03}")),
        _ => None,
    }
}

fn in_tree(i: usize) -> String {
    format!("tree/t{i:02}")
}

fn moved(i: usize) -> String {
    format!("moved/tree/t{i:02}")
}

fn tree_contents(i: usize) -> String {
    format!("in the tree {i} ").repeat(100)
}

/// A replica pair in agreement, then changed on both sides without a
/// conflict: A rewrites the even files, deletes each tenth and moves a
/// tree into a new directory, B rewrites the odd ones and creates new
/// files.
fn prepared_pair(remote: Option<&RemoteB>) -> Pair {
    let pair = match remote {
        Some(remote) => Pair::with_remote_b(remote),
        None => Pair::new(),
    };
    for i in 0..FILES {
        pair.write('a', &name(i), &original(i));
    }
    for i in 0..MOVED {
        pair.write('a', &in_tree(i), &tree_contents(i));
    }
    for i in (0..FILES).filter(|i| i % 10 == 3) {
        link(&pair, 'a', &name(i), &grouped(i).unwrap());
    }
    pair.sync_json(&[], 0);
    std::fs::create_dir(pair.path('a', "moved")).unwrap();
    std::fs::rename(pair.path('a', "tree"), pair.path('a', "moved/tree")).unwrap();
    for i in 0..FILES {
        if i % 10 == 4 {
            std::fs::remove_file(pair.path('a', &name(i))).unwrap();
        } else if i.is_multiple_of(2) {
            pair.write('a', &name(i), &from_a(i));
        } else {
            pair.write('b', &name(i), &from_b(i));
        }
    }
    for i in (0..FILES).filter(|i| i % 10 == 2) {
        link(&pair, 'a', &name(i), &grouped(i).unwrap());
    }
    for i in 0..FILES / 4 {
        pair.write('b', &format!("new/g{i:03}"), &created_on_b(i));
    }
    pair
}

fn link(pair: &Pair, side: char, existing: &str, new: &str) {
    let target = pair.path(side, new);
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::fs::hard_link(pair.path(side, existing), target).unwrap();
}

/// What each path may hold at any moment: its original or final contents
/// (None: absent).
fn allowed(rel: &str) -> Vec<Option<String>> {
    if let Some(rest) = rel.strip_prefix("grp/g") {
        let i: usize = rest.parse().unwrap();
        return vec![Some(original(i)), Some(from_b(i))];
    }
    if let Some(rest) = rel.strip_prefix("links/l") {
        let i: usize = rest.parse().unwrap();
        return vec![None, Some(from_a(i))];
    }
    if let Some(rest) = rel.strip_prefix("new/g") {
        let i: usize = rest.parse().unwrap();
        return vec![None, Some(created_on_b(i))];
    }
    if let Some(rest) = rel.strip_prefix("tree/t") {
        return vec![Some(tree_contents(rest.parse().unwrap())), None];
    }
    if let Some(rest) = rel.strip_prefix("moved/tree/t") {
        return vec![None, Some(tree_contents(rest.parse().unwrap()))];
    }
    let i: usize = rel.rsplit("/f").next().unwrap().parse().unwrap();
    if i % 10 == 4 {
        vec![Some(original(i)), None]
    } else if i.is_multiple_of(2) {
        vec![Some(original(i)), Some(from_a(i))]
    } else {
        vec![Some(original(i)), Some(from_b(i))]
    }
}

fn final_state(rel: &str) -> Option<String> {
    allowed(rel).pop().unwrap()
}

fn files(root: &std::path::Path) -> BTreeMap<String, String> {
    snapshot(root)
        .into_iter()
        .filter_map(|(rel, node)| match node {
            Node::File { contents, .. } => Some((rel, String::from_utf8(contents).unwrap())),
            _ => None,
        })
        .collect()
}

fn every_path() -> Vec<String> {
    (0..FILES)
        .map(name)
        .chain((0..FILES / 4).map(|i| format!("new/g{i:03}")))
        .chain((0..MOVED).map(in_tree))
        .chain((0..MOVED).map(moved))
        .chain((0..FILES).filter_map(grouped))
        .collect()
}

fn check_original_or_final(pair: &Pair, trial: usize) {
    for side in ['a', 'b'] {
        let now = files(pair.root(side));
        for rel in every_path() {
            let held = now.get(&rel).cloned();
            assert!(
                allowed(&rel).contains(&held),
                "trial {trial}: {side}/{rel} holds neither its original nor its final contents"
            );
        }
        for rel in now.keys() {
            assert!(
                every_path().contains(rel),
                "trial {trial}: stray {side}/{rel}"
            );
        }
        // A moved file is at its old place or its new one, never lost.
        for i in 0..MOVED {
            assert!(
                now.contains_key(&in_tree(i)) || now.contains_key(&moved(i)),
                "trial {trial}: {side}/{} is nowhere",
                in_tree(i)
            );
        }
    }
}

fn check_converged(pair: &Pair, trial: usize) {
    for side in ['a', 'b'] {
        let now = files(pair.root(side));
        for rel in every_path() {
            assert_eq!(
                now.get(&rel).cloned(),
                final_state(&rel),
                "trial {trial}: {side}/{rel}"
            );
        }
        for i in 0..FILES {
            if let Some(second) = grouped(i) {
                assert_eq!(
                    inode(pair, side, &name(i)),
                    inode(pair, side, &second),
                    "trial {trial}: {side}/{second} is not a name of {}",
                    name(i)
                );
            }
        }
    }
    pair.assert_equal();
}

fn inode(pair: &Pair, side: char, rel: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(pair.path(side, rel))
        .unwrap()
        .ino()
}

/// A small deterministic generator (no dependency for one number a trial).
fn next_random(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}

/// When each trial of a series kills its run: after a random part of how
/// long an uninterrupted run takes. A run that ends before its kill shows
/// the machine got faster since the run was timed (a build beside it
/// ended): the estimate shrinks to what that run took and one more trial
/// is made (up to twice the series), so a change of load cannot leave a
/// series without runs killed mid-way. A run is watched until its kill, so
/// its end is seen when it comes, not guessed.
struct KillSchedule {
    full_run: std::time::Duration,
    random: u64,
    planned: usize,
    made: usize,
    killed_midway: usize,
}

impl KillSchedule {
    fn new(full_run: std::time::Duration, seed: u64, planned: usize) -> KillSchedule {
        KillSchedule {
            full_run,
            random: seed ^ std::process::id() as u64,
            planned,
            made: 0,
            killed_midway: 0,
        }
    }

    /// The delay of the next trial's kill; `None` when the series is done.
    fn next(&mut self) -> Option<std::time::Duration> {
        let enough = self.killed_midway * 2 >= self.planned;
        if self.made >= self.planned && (enough || self.made >= 2 * self.planned) {
            return None;
        }
        self.made += 1;
        let part = (next_random(&mut self.random) % 1000) as f64 / 1000.0;
        Some(self.full_run.mul_f64(part))
    }

    /// Kill `child` `delay` after it started (at `started`), unless it
    /// ends first.
    fn kill(
        &mut self,
        child: &mut std::process::Child,
        started: Instant,
        delay: std::time::Duration,
    ) {
        while started.elapsed() < delay {
            if child.try_wait().unwrap().is_some() {
                self.full_run = self.full_run.min(started.elapsed());
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        if child.try_wait().unwrap().is_none() {
            self.killed_midway += 1;
            child.kill().ok();
        }
        child.wait().unwrap();
    }

    /// At least half the planned series was killed mid-way.
    fn check(&self, what: &str) {
        eprintln!(
            "{} of {} {what} were killed before they finished",
            self.killed_midway, self.made
        );
        assert!(
            self.killed_midway * 2 >= self.planned,
            "too few runs were interrupted"
        );
    }
}

fn trials() -> usize {
    std::env::var("ACCORD_SYNC_KILL_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12)
}

#[test]
fn killed_syncs_leave_every_file_original_or_final_and_the_next_run_converges() {
    kill_trials(None, trials());
}

#[test]
fn with_b_over_ssh_killed_syncs_leave_every_file_original_or_final() {
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    let base = tempfile::tempdir().unwrap();
    let remote = RemoteB::over_ssh(base.path(), &sshd.rsh());
    kill_trials(Some(&remote), (trials() / 2).max(1));
}

/// The first run after a kill: a remote root's server may still be ending
/// the killed run's session (it sees the connection drop, discards that
/// run's temps and releases the root), and says the root is busy until
/// it has.
fn sync_after_kill(pair: &Pair) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let out = pair.sync(&["--json"]);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        let busy = report["fatal"]
            .as_str()
            .is_some_and(|f| f.contains("another accord run"));
        if !busy || start.elapsed() > std::time::Duration::from_secs(20) {
            assert_exit(&out, 0);
            return report;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn kill_trials(remote: Option<&RemoteB>, trials: usize) {
    // How long an uninterrupted run takes here.
    let timing = prepared_pair(remote);
    let start = Instant::now();
    timing.sync_json(&[], 0);
    let full_run = start.elapsed();
    check_converged(&timing, usize::MAX);
    eprintln!("an uninterrupted run took {full_run:?}");

    let mut schedule = KillSchedule::new(full_run, 0x5eed, trials);
    while let Some(delay) = schedule.next() {
        let trial = schedule.made - 1;
        let pair = prepared_pair(remote);
        let started = Instant::now();
        let mut child = pair
            .command(&["--json"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        schedule.kill(&mut child, started, delay);
        check_original_or_final(&pair, trial);
        let report = sync_after_kill(&pair);
        assert_eq!(
            conflict_paths(&report).len(),
            0,
            "trial {trial}: false conflicts after a kill at {delay:?}: {report}"
        );
        check_converged(&pair, trial);
        let again = pair.sync_json(&[], 0);
        assert_eq!(again["propagated"], 0, "trial {trial}: {again}");
        let leftovers: Vec<_> = ['a', 'b']
            .iter()
            .flat_map(|side| hidden_files(pair.root(*side)))
            .collect();
        assert!(leftovers.is_empty(), "trial {trial}: {leftovers:?}");
    }
    schedule.check("runs");
}

/// Our temp files anywhere under `root`.
fn hidden_files(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else if entry.file_name().to_string_lossy().starts_with(".accord-") {
                found.push(entry.path());
            }
        }
    }
    found
}

// ---- --keep-both and --backup killed midway ----------------------------

/// Conflicts kept both ways, and files overwritten on B with a backup.
const KEPT: usize = 80;
const BACKED_UP: usize = 80;

/// mtimes of the two versions of a conflict: B's is the newer, so A's
/// version is the one kept aside, as `NAME.conflict-HOST-20010909-014640`.
const LOSER_TIME: i64 = 1_000_000_000;
const WINNER_TIME: i64 = 1_100_000_000;

fn conflicted(i: usize) -> String {
    format!("k{}/c{i:03}", i % 5)
}

fn kept_copy(i: usize) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    format!("{}.conflict-{}-20010909-014640", conflicted(i), host.trim())
}

fn backed_up(i: usize) -> String {
    format!("b{}/o{i:03}", i % 5)
}

fn backup_of(i: usize) -> String {
    format!(".accord-backup/{}.~1~", backed_up(i))
}

fn losing(i: usize) -> String {
    format!("A's version of {i} ").repeat(300 + i)
}

fn winning(i: usize) -> String {
    format!("B's version of {i} ").repeat(200 + i)
}

fn first(i: usize) -> String {
    format!("first {i} ").repeat(500)
}

fn second(i: usize) -> String {
    format!("second {i} ").repeat(400 + i)
}

/// A synced pair, then: every `conflicted` file edited on both sides (B's
/// edit newer), every `backed_up` file rewritten on A.
fn keep_pair(remote: Option<&RemoteB>) -> Pair {
    let pair = match remote {
        Some(remote) => Pair::with_remote_b(remote),
        None => Pair::new(),
    };
    for i in 0..KEPT {
        pair.write('a', &conflicted(i), &first(i));
    }
    for i in 0..BACKED_UP {
        pair.write('a', &backed_up(i), &first(i));
    }
    pair.sync_json(&[], 0);
    for i in 0..KEPT {
        pair.write('a', &conflicted(i), &losing(i));
        pair.write('b', &conflicted(i), &winning(i));
        set_mtime(&pair.path('a', &conflicted(i)), LOSER_TIME);
        set_mtime(&pair.path('b', &conflicted(i)), WINNER_TIME);
    }
    for i in 0..BACKED_UP {
        pair.write('a', &backed_up(i), &second(i));
    }
    pair
}

/// At any moment: each version of a conflict is on its own side under
/// some name, each name holds one of the versions it may hold, and a
/// file B lost to A's rewrite is in B's backups. Returns how many paths
/// were caught half way: a loser kept on A but not yet on B, a backup
/// made of a version still in place.
fn check_kept_or_backed_up(pair: &Pair, trial: usize) -> [usize; 2] {
    let mut half_way = [0, 0];
    let read = |side: char, rel: &str| pair.read(side, rel);
    for i in 0..KEPT {
        let (at, copy) = (conflicted(i), kept_copy(i));
        let (a, a_copy) = (read('a', &at), read('a', &copy));
        assert!(
            a == Some(losing(i)) || (a == Some(winning(i)) && a_copy == Some(losing(i))),
            "trial {trial}: A's version of {at} is gone"
        );
        assert!(
            [None, Some(losing(i))].contains(&a_copy),
            "trial {trial}: a/{copy}"
        );
        assert_eq!(read('b', &at), Some(winning(i)), "trial {trial}: b/{at}");
        let b_copy = read('b', &copy);
        assert!(
            [None, Some(losing(i))].contains(&b_copy),
            "trial {trial}: b/{copy}"
        );
        half_way[0] += (a_copy.is_some() && b_copy.is_none()) as usize;
    }
    for i in 0..BACKED_UP {
        let (at, backup) = (backed_up(i), backup_of(i));
        let (b, b_backup) = (read('b', &at), read('b', &backup));
        assert!(
            b == Some(first(i)) || (b == Some(second(i)) && b_backup == Some(first(i))),
            "trial {trial}: B's first version of {at} is gone"
        );
        assert!(
            [None, Some(first(i))].contains(&b_backup),
            "trial {trial}: b/{backup}"
        );
        half_way[1] += (b == Some(first(i)) && b_backup.is_some()) as usize;
    }
    half_way
}

/// After the next run: both versions on both sides, each once; B's old
/// versions backed up once.
fn check_kept_converged(pair: &Pair, trial: usize) {
    for side in ['a', 'b'] {
        for i in 0..KEPT {
            assert_eq!(
                pair.read(side, &conflicted(i)),
                Some(winning(i)),
                "trial {trial}"
            );
            assert_eq!(
                pair.read(side, &kept_copy(i)),
                Some(losing(i)),
                "trial {trial}"
            );
            let twice = format!("{}-2", kept_copy(i));
            assert!(!pair.exists(side, &twice), "trial {trial}: {side}/{twice}");
        }
        for i in 0..BACKED_UP {
            assert_eq!(
                pair.read(side, &backed_up(i)),
                Some(second(i)),
                "trial {trial}"
            );
        }
    }
    for i in 0..BACKED_UP {
        assert_eq!(
            pair.read('b', &backup_of(i)),
            Some(first(i)),
            "trial {trial}"
        );
        let twice = backup_of(i).replace(".~1~", ".~2~");
        assert!(!pair.exists('b', &twice), "trial {trial}: b/{twice}");
    }
    pair.assert_equal();
}

#[test]
fn killed_keep_both_and_backup_syncs_lose_no_version_and_converge() {
    keep_kill_trials(None, trials());
}

#[test]
fn with_b_over_ssh_killed_keep_both_and_backup_syncs_lose_no_version() {
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    let base = tempfile::tempdir().unwrap();
    let remote = RemoteB::over_ssh(base.path(), &sshd.rsh());
    keep_kill_trials(Some(&remote), (trials() / 2).max(1));
}

const KEEP_ARGS: [&str; 3] = ["--json", "--keep-both", "--backup"];

/// The first run after a kill, with `KEEP_ARGS` (a remote root may say
/// it is busy for a moment: see `sync_after_kill`).
fn keep_sync_after_kill(pair: &Pair) -> serde_json::Value {
    let start = Instant::now();
    loop {
        let out = pair.sync(&KEEP_ARGS);
        let report: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
        let busy = report["fatal"]
            .as_str()
            .is_some_and(|f| f.contains("another accord run"));
        if !busy || start.elapsed() > std::time::Duration::from_secs(20) {
            assert_exit(&out, 0);
            return report;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

fn keep_kill_trials(remote: Option<&RemoteB>, trials: usize) {
    const ARGS: [&str; 3] = KEEP_ARGS;
    let timing = keep_pair(remote);
    let start = Instant::now();
    let out = timing.sync(&ARGS);
    assert_exit(&out, 0);
    let full_run = start.elapsed();
    check_kept_converged(&timing, usize::MAX);
    eprintln!("an uninterrupted keep-both and backup run took {full_run:?}");

    let mut schedule = KillSchedule::new(full_run, 0x6b65_6570, trials);
    let mut caught = [0, 0];
    while let Some(delay) = schedule.next() {
        let trial = schedule.made - 1;
        let pair = keep_pair(remote);
        let started = Instant::now();
        let mut child = pair
            .command(&ARGS)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        schedule.kill(&mut child, started, delay);
        let half_way = check_kept_or_backed_up(&pair, trial);
        caught[0] += half_way[0];
        caught[1] += half_way[1];
        let report = keep_sync_after_kill(&pair);
        assert_eq!(conflict_paths(&report).len(), 0, "trial {trial}: {report}");
        check_kept_converged(&pair, trial);
        let again = pair.sync_json(&ARGS[1..], 0);
        assert_eq!(again["propagated"], 0, "trial {trial}: {again}");
    }
    schedule.check("keep-both runs");
    eprintln!(
        "caught half way: {} losers kept on A only, {} backups of versions still in place",
        caught[0], caught[1]
    );
}

// ---- a run killed between a new directory's making and its permissions ----

/// strace kills the run at its first `chmod`: the permissions of the first
/// directory it makes on B (a directory's are set through its O_PATH
/// descriptor, files' by `fchmod`). A directory left at its name with the
/// 0700 of `mkdir` would be new on both sides with other permissions than
/// A's: a false conflict. The next run finds none, and no temp stays.
#[test]
fn a_run_killed_before_a_new_directorys_permissions_leaves_no_false_conflict() {
    if std::process::Command::new("strace")
        .arg("-V")
        .output()
        .is_err()
    {
        mirror_common::skip_or_fail("strace is not installed (apt-get install strace)");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let pair = Pair::new();
    std::fs::create_dir_all(pair.path('a', "d/e")).unwrap();
    std::fs::write(pair.path('a', "d/e/f"), "new on A").unwrap();
    for dir in ["d", "d/e"] {
        let perms = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(pair.path('a', dir), perms).unwrap();
    }
    let inner = pair.command(&[]);
    let out = std::process::Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "-e", "trace=chmod"])
        .args(["-e", "inject=chmod:error=EPERM:signal=KILL:when=1"])
        .arg(inner.get_program())
        .args(inner.get_args())
        .envs(inner.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "the run was not killed at a chmod: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = |rel: &str| {
        let meta = std::fs::symlink_metadata(pair.path('b', rel));
        meta.ok().map(|m| m.permissions().mode() & 0o7777)
    };
    assert!(
        matches!(mode("d"), None | Some(0o755)),
        "the killed run left d on B with mode {:o}",
        mode("d").unwrap()
    );
    let report = sync_after_kill(&pair);
    assert_eq!(
        conflict_paths(&report).len(),
        0,
        "false conflicts: {report}"
    );
    assert_eq!((mode("d"), mode("d/e")), (Some(0o755), Some(0o755)));
    assert_eq!(pair.read('b', "d/e/f").as_deref(), Some("new on A"));
    let names: Vec<_> = std::fs::read_dir(&pair.b)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["d"], "a temp stayed on B");
    assert_eq!(pair.sync_json(&[], 0)["propagated"], 0);
}
