//! The pool against mergerfs (Debian's package): for each create policy both are mounted over
//! their own copies of three branches, small tmpfs mounts of different sizes (so free space
//! differs, and changes, the same way on both sides), and the same seeded random sequence of
//! creates, mkdirs, renames, unlinks, rmdirs, chmods and writes runs on both. After every step
//! the outcomes (success or errno) must be equal, every branch must hold the same tree as its
//! twin (so every name went to the same branch), and the merged views must agree.
//! `minfreespace` is 2M, so the branches fill up and drop out of the choice during the run.
//!
//! Set ACCORD_POOL_SEED to replay a run (the seed is printed), ACCORD_POOL_OPS to change the
//! length. Where the pool deliberately differs from mergerfs, the operation is not sent to
//! either (counted as skipped): removing or renaming over a directory that is empty in one
//! branch but not in the merged view (mergerfs removes the empty copies and reports
//! ENOTEMPTY or success; the pool refuses with ENOTEMPTY and changes nothing, as POSIX asks).
//! The random policies (rand, eprand, pfrd, eppfrd, msppfrd) cannot be compared step by step and are
//! left to the unit tests.

mod common;

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fuse_ok, is_mounted, need, unmount, UnionMount};

const SIZES_MB: [u64; 3] = [6, 7, 8];
const MIN_FREE: &str = "2M";
const POLICIES: [&str; 11] = [
    "ff", "epff", "mfs", "epmfs", "lfs", "eplfs", "lus", "eplus", "mspmfs", "msplfs", "msplus",
];
const NAMES: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];
const MODES: [u32; 5] = [0o600, 0o644, 0o700, 0o755, 0o750];

/// A tmpfs mount, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn new(dir: &Path, mb: u64) -> Tmpfs {
        fs::create_dir_all(dir).unwrap();
        let opts = format!("size={mb}M,mode=755");
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &opts, "tmpfs"])
            .arg(dir)
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount -t tmpfs on {} failed", dir.display());
        Tmpfs(dir.to_path_buf())
    }

    fn wipe(&self) {
        for e in fs::read_dir(&self.0).unwrap() {
            let p = e.unwrap().path();
            match p.is_dir() && !p.is_symlink() {
                true => fs::remove_dir_all(&p).unwrap(),
                false => fs::remove_file(&p).unwrap(),
            }
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        unmount(&self.0, "umount", &[]);
    }
}

/// A mergerfs mount, unmounted when dropped.
struct Mergerfs(PathBuf);

impl Mergerfs {
    fn new(branches: &[PathBuf], mnt: &Path, policy: &str) -> Mergerfs {
        fs::create_dir_all(mnt).unwrap();
        let list: Vec<String> = branches.iter().map(|b| b.display().to_string()).collect();
        let opts = format!("category.create={policy},minfreespace={MIN_FREE}");
        let out = Command::new("mergerfs")
            .args(["-o", &opts, &list.join(":")])
            .arg(mnt)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "mergerfs failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for _ in 0..100 {
            if is_mounted(mnt) {
                return Mergerfs(mnt.to_path_buf());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        panic!("mergerfs did not mount {}", mnt.display());
    }
}

impl Drop for Mergerfs {
    fn drop(&mut self) {
        unmount(&self.0, "fusermount3", &["-u"]);
    }
}

/// xorshift64: the same sequence for the same seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

#[derive(Debug, Clone)]
enum Op {
    Create(String, usize),
    Mkdir(String),
    Rename(String, String),
    Unlink(String),
    Rmdir(String),
    Chmod(String, u32),
    Write(String, u64, usize),
}

/// A path: an existing one (from the merged view) most of the time, else a new one of one to
/// three components.
fn path(rng: &mut Rng, existing: &[String]) -> String {
    if !existing.is_empty() && rng.below(10) < 8 {
        return rng.pick(existing).clone();
    }
    let depth = 1 + rng.below(3);
    let parts: Vec<&str> = (0..depth).map(|_| *rng.pick(&NAMES)).collect();
    parts.join("/")
}

/// A new name in an existing directory (or the root).
fn new_path(rng: &mut Rng, dirs: &[String]) -> String {
    let name = rng.pick(&NAMES);
    match rng.below(dirs.len() + 1) {
        0 => name.to_string(),
        i => format!("{}/{name}", dirs[i - 1]),
    }
}

fn random_op(rng: &mut Rng, view: &BTreeMap<String, String>) -> Op {
    let existing: Vec<String> = view.keys().cloned().collect();
    let dirs: Vec<String> = (view.iter())
        .filter(|(_, d)| d.starts_with("mode=4"))
        .map(|(k, _)| k.clone())
        .collect();
    match rng.below(13) {
        0..=2 => Op::Create(new_path(rng, &dirs), rng.below(256 * 1024)),
        3 | 4 => Op::Mkdir(new_path(rng, &dirs)),
        5 | 6 => Op::Rename(path(rng, &existing), new_path(rng, &dirs)),
        7 | 8 => Op::Unlink(path(rng, &existing)),
        9 => Op::Rmdir(path(rng, &existing)),
        10 => Op::Chmod(path(rng, &existing), *rng.pick(&MODES)),
        _ => Op::Write(
            path(rng, &existing),
            rng.below(64 * 1024) as u64,
            rng.below(64 * 1024),
        ),
    }
}

fn data(len: usize, salt: usize) -> Vec<u8> {
    (0..len).map(|i| ((i + salt) % 251) as u8).collect()
}

fn run(op: &Op, root: &Path) -> Result<(), i32> {
    let errno = |e: io::Error| e.raw_os_error().unwrap_or(-1);
    let p = |s: &str| root.join(s);
    match op {
        Op::Create(f, n) => {
            let mut o = OpenOptions::new();
            o.write(true).create_new(true).mode(0o644);
            o.open(p(f)).and_then(|mut h| h.write_all(&data(*n, *n)))
        }
        Op::Mkdir(d) => fs::DirBuilder::new().mode(0o755).create(p(d)),
        Op::Rename(a, b) => fs::rename(p(a), p(b)),
        Op::Unlink(f) => fs::remove_file(p(f)),
        Op::Rmdir(d) => fs::remove_dir(p(d)),
        Op::Chmod(f, m) => fs::set_permissions(p(f), fs::Permissions::from_mode(*m)),
        Op::Write(f, off, n) => OpenOptions::new()
            .write(true)
            .open(p(f))
            .and_then(|h| h.write_all_at(&data(*n, *off as usize), *off)),
    }
    .map_err(errno)
}

/// The cases where the pool differs from mergerfs on purpose (see the top): a directory that
/// goes, or is replaced, while the merged view shows names in it.
fn deliberately_different(op: &Op, mnt: &Path) -> bool {
    let nonempty_dir = |s: &str| fs::read_dir(mnt.join(s)).is_ok_and(|mut d| d.next().is_some());
    match op {
        Op::Rmdir(d) => nonempty_dir(d),
        Op::Rename(a, b) => mnt.join(a).is_dir() && nonempty_dir(b),
        _ => false,
    }
}

/// Every entry under `root`: kind and mode, a file's size, and with `data` a hash of its
/// bytes (read every `DATA_EVERY` steps: reading every file at every step would dominate).
fn view(root: &Path, data: bool) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    walk(root, root, data, &mut out);
    out.remove(".mergerfs");
    out
}

const DATA_EVERY: usize = 25;

fn walk(root: &Path, dir: &Path, data: bool, out: &mut BTreeMap<String, String>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let m = fs::symlink_metadata(&p).unwrap();
        let mut d = format!("mode={:o}", m.mode());
        if m.is_file() {
            d += &format!(" size={}", m.len());
            if data {
                let bytes = fs::read(&p).unwrap();
                let h = bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| {
                    (h ^ b as u64).wrapping_mul(0x100000001b3)
                });
                d += &format!(" data={h:x}");
            }
        }
        let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        out.insert(rel, d);
        if m.is_dir() {
            walk(root, &p, data, out);
        }
    }
}

/// The first few differences between two trees, for the failure message.
fn diff(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> String {
    let keys: std::collections::BTreeSet<_> = a.keys().chain(b.keys()).collect();
    let lines: Vec<String> = keys
        .into_iter()
        .filter(|k| a.get(*k) != b.get(*k))
        .take(8)
        .map(|k| format!("  {k}: accord {:?} / mergerfs {:?}", a.get(k), b.get(k)))
        .collect();
    lines.join("\n")
}

struct Sides {
    ours: Vec<Tmpfs>,
    theirs: Vec<Tmpfs>,
    mnt_ours: PathBuf,
    mnt_theirs: PathBuf,
}

/// Run `ops` random steps with `policy`; returns (steps run, skipped, failures seen).
fn run_policy(s: &Sides, policy: &str, seed: u64, ops: usize) -> (usize, usize, usize) {
    for t in s.ours.iter().chain(&s.theirs) {
        t.wipe();
    }
    let theirs: Vec<PathBuf> = s.theirs.iter().map(|t| t.0.clone()).collect();
    let _m = Mergerfs::new(&theirs, &s.mnt_theirs, policy);
    let branches: Vec<String> = s
        .ours
        .iter()
        .map(|t| format!("{}=rw", t.0.display()))
        .collect();
    let opts = format!("category.create={policy},minfreespace={MIN_FREE}");
    let _u = UnionMount::with_options(&s.mnt_ours, &branches, &["-o", &opts]);
    let mut rng = Rng(seed);
    let (mut skipped, mut failed) = (0, 0);
    for step in 0..ops {
        let op = random_op(&mut rng, &view(&s.mnt_ours, false));
        if deliberately_different(&op, &s.mnt_ours) {
            skipped += 1;
            continue;
        }
        let (a, b) = (run(&op, &s.mnt_ours), run(&op, &s.mnt_theirs));
        let at = format!("policy {policy}, seed {seed}, step {step}, {op:?}");
        assert_eq!(a, b, "{at}: accord answered {a:?}, mergerfs {b:?}");
        failed += a.is_err() as usize;
        let data = step % DATA_EVERY == 0 || step + 1 == ops;
        for (i, (o, t)) in s.ours.iter().zip(&s.theirs).enumerate() {
            let (vo, vt) = (view(&o.0, data), view(&t.0, data));
            assert!(vo == vt, "{at}: branch {i} differs:\n{}", diff(&vo, &vt));
        }
        let (vo, vt) = (view(&s.mnt_ours, data), view(&s.mnt_theirs, data));
        assert!(vo == vt, "{at}: merged views differ:\n{}", diff(&vo, &vt));
    }
    (ops, skipped, failed)
}

#[test]
fn pool_places_names_as_mergerfs_does() {
    let test = "pool_places_names_as_mergerfs_does";
    if !fuse_ok(test) || !need(test, "mergerfs", "mergerfs") {
        return;
    }
    let seed = std::env::var("ACCORD_POOL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            t.unwrap().as_nanos() as u64 | 1
        });
    let ops = std::env::var("ACCORD_POOL_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    eprintln!(
        "{test}: seed {seed} (ACCORD_POOL_SEED={seed} replays it), {ops} operations per policy"
    );
    let t = tempfile::tempdir().unwrap();
    let tmpfs = |side: &str| -> Vec<Tmpfs> {
        (SIZES_MB.iter().enumerate())
            .map(|(i, mb)| Tmpfs::new(&t.path().join(format!("{side}{i}")), *mb))
            .collect()
    };
    let sides = Sides {
        ours: tmpfs("ours"),
        theirs: tmpfs("theirs"),
        mnt_ours: t.path().join("mnt-ours"),
        mnt_theirs: t.path().join("mnt-theirs"),
    };
    for policy in POLICIES {
        let (n, skipped, failed) = run_policy(&sides, policy, seed, ops);
        let per_branch: Vec<usize> = (sides.ours.iter())
            .map(|b| view(&b.0, false).len())
            .collect();
        eprintln!(
            "{test}: {policy}: {n} operations agreed ({skipped} skipped on purpose, {failed} \
             failed alike); names per branch at the end {per_branch:?}"
        );
    }
}
