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
//!
//! A second test does the same for the action policies, function by function
//! (`func.chmod=epff`, `func.unlink=eplfs` …, and chowns, truncations and time changes besides):
//! the branches start with copies of the same names on several branches, one branch is tagged
//! `RO` and its file system mounted read-only, and some branches have a `minfreespace` of their
//! own (`DIR=RW,7M`), which the create policies must honour as mergerfs does. (`newest` compares
//! modification times, which the two sides give at their own instants: left to the unit tests.)

mod common;

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fuse_ok, is_mounted, need, unmount, Tmpfs, UnionMount};

const SIZES_MB: [u64; 3] = [6, 7, 8];
const MIN_FREE: &str = "2M";
const POLICIES: [&str; 11] = [
    "ff", "epff", "mfs", "epmfs", "lfs", "eplfs", "lus", "eplus", "mspmfs", "msplfs", "msplus",
];
const NAMES: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];
const MODES: [u32; 5] = [0o600, 0o644, 0o700, 0o755, 0o750];

/// A mergerfs mount, unmounted when dropped.
struct Mergerfs(PathBuf);

impl Mergerfs {
    fn new(branches: &[String], mnt: &Path, opts: &str) -> Mergerfs {
        fs::create_dir_all(mnt).unwrap();
        let list = branches;
        let out = Command::new("mergerfs")
            .args(["-o", opts, &list.join(":")])
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
    Chown(String, u32),
    Truncate(String, u64),
    Utimens(String, i64),
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

/// `random_op`, or with `attrs` as often one of the other changes of attributes (chown,
/// truncate, utimens: each its own function for the action policies).
fn random_step(rng: &mut Rng, view: &BTreeMap<String, String>, attrs: bool) -> Op {
    if !attrs || rng.below(4) != 0 {
        return random_op(rng, view);
    }
    let existing: Vec<String> = view.keys().cloned().collect();
    let p = path(rng, &existing);
    match rng.below(3) {
        0 => Op::Chown(p, 1000 + rng.below(3) as u32),
        1 => Op::Truncate(p, rng.below(32 * 1024) as u64),
        _ => Op::Utimens(p, 1_000_000 + rng.below(1000) as i64),
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
        Op::Chown(f, uid) => std::os::unix::fs::lchown(p(f), Some(*uid), None),
        Op::Truncate(f, len) => by_path(&p(f), |c| unsafe { libc::truncate(c, *len as i64) }),
        Op::Utimens(f, secs) => {
            let t = libc::timespec {
                tv_sec: *secs,
                tv_nsec: 0,
            };
            let times = [t, t];
            // SAFETY: a valid path and two timespecs.
            by_path(&p(f), |c| unsafe {
                libc::utimensat(libc::AT_FDCWD, c, times.as_ptr(), 0)
            })
        }
    }
    .map_err(errno)
}

/// Call `f` with `p` as a C string (a change by path: the kernel sends no file handle, so the
/// function's own policy applies on both sides); its -1 as the error.
fn by_path(p: &Path, f: impl FnOnce(*const libc::c_char) -> i32) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    match f(c.as_ptr()) {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
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
        let mut d = format!("mode={:o} uid={}", m.mode(), m.uid());
        // Times the test set itself (far in the past) are compared; the others are each
        // side's own clock.
        if m.mtime() < 1_000_000_000 && !m.is_dir() {
            d += &format!(" mtime={}", m.mtime());
        }
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

/// For each name the merged views disagree on, what every branch holds there (the branches
/// agree with their twins by then): which copy each side chose to show.
fn holders(
    branches: &[Tmpfs],
    a: &BTreeMap<String, String>,
    b: &BTreeMap<String, String>,
) -> String {
    let keys: std::collections::BTreeSet<_> = a.keys().chain(b.keys()).collect();
    let views: Vec<_> = branches.iter().map(|t| view(&t.0, false)).collect();
    let lines: Vec<String> = (keys.into_iter())
        .filter(|k| a.get(*k) != b.get(*k))
        .take(8)
        .flat_map(|k| {
            let on = views.iter().enumerate();
            on.map(move |(i, v)| format!("  {k} on branch {i}: {:?}", v.get(k)))
        })
        .collect();
    lines.join("\n")
}

struct Sides {
    ours: Vec<Tmpfs>,
    theirs: Vec<Tmpfs>,
    mnt_ours: PathBuf,
    mnt_theirs: PathBuf,
}

/// One run's setup: the options (both sides take the same), each branch's suffix
/// (`=RW`, `=RO`, `=RW,7M`), the branch whose file system is mounted read-only, whether the
/// branches start with copies of the same names, and whether chowns, truncations and time
/// changes are among the steps.
struct Setup<'a> {
    opts: String,
    suffixes: [&'a str; 3],
    ro_mounted: Option<usize>,
    seeded: bool,
    attrs: bool,
}

impl Setup<'_> {
    fn create(policy: &str) -> Setup<'static> {
        Setup {
            opts: format!("category.create={policy}"),
            suffixes: ["=RW"; 3],
            ro_mounted: None,
            seeded: false,
            attrs: false,
        }
    }
}

/// Copies of the same names on several branches, the same on both sides (`seed` chooses
/// which): files and directories at the root, some with a file inside.
fn seed_copies(s: &Sides, seed: u64) {
    for side in [&s.ours, &s.theirs] {
        let mut rng = Rng(seed);
        for (i, name) in NAMES.iter().enumerate() {
            let dir = rng.below(3) == 0;
            let mask = 1 + rng.below(7);
            let inner = rng.below(2) == 0;
            for (b, t) in side
                .iter()
                .enumerate()
                .filter(|(b, _)| mask & (1 << b) != 0)
            {
                let p = t.0.join(name);
                match dir {
                    true => fs::create_dir(&p).unwrap(),
                    false => fs::write(&p, data(1024 * (i + 1), b)).unwrap(),
                }
                if dir && inner {
                    fs::write(p.join("x"), data(512, b)).unwrap();
                }
            }
        }
    }
}

/// Run `ops` random steps with `setup`; returns (steps run, skipped, failures seen).
fn run_setup(s: &Sides, setup: &Setup, seed: u64, ops: usize) -> (usize, usize, usize) {
    for t in s.ours.iter().chain(&s.theirs) {
        t.remount(false);
        t.wipe();
    }
    if setup.seeded {
        seed_copies(s, seed);
    }
    if let Some(i) = setup.ro_mounted {
        s.ours[i].remount(true);
        s.theirs[i].remount(true);
    }
    let spec = |ts: &[Tmpfs]| -> Vec<String> {
        (ts.iter().zip(setup.suffixes))
            .map(|(t, sfx)| format!("{}{sfx}", t.0.display()))
            .collect()
    };
    let opts = format!("{},minfreespace={MIN_FREE}", setup.opts);
    // mergerfs keeps attributes and names for a second by default: after a directory's
    // rename the kernel may show a file inside it with the size its old copy had (seen with
    // a size no branch held). Its view is compared uncached.
    let uncached = format!("{opts},cache.attr=0,cache.entry=0,cache.negative_entry=0");
    let _m = Mergerfs::new(&[spec(&s.theirs).join(":")], &s.mnt_theirs, &uncached);
    let _u = UnionMount::with_options(&s.mnt_ours, &spec(&s.ours), &["-o", &opts]);
    let mut rng = Rng(seed);
    let (mut skipped, mut failed) = (0, 0);
    let what = format!("{} with branches {:?}", setup.opts, setup.suffixes);
    for step in 0..ops {
        let op = random_step(&mut rng, &view(&s.mnt_ours, false), setup.attrs);
        if deliberately_different(&op, &s.mnt_ours) {
            skipped += 1;
            continue;
        }
        let (a, b) = (run(&op, &s.mnt_ours), run(&op, &s.mnt_theirs));
        let at = format!("{what}, seed {seed}, step {step}, {op:?}");
        assert_eq!(a, b, "{at}: accord answered {a:?}, mergerfs {b:?}");
        failed += a.is_err() as usize;
        let data = step % DATA_EVERY == 0 || step + 1 == ops;
        for (i, (o, t)) in s.ours.iter().zip(&s.theirs).enumerate() {
            let (vo, vt) = (view(&o.0, data), view(&t.0, data));
            assert!(vo == vt, "{at}: branch {i} differs:\n{}", diff(&vo, &vt));
        }
        let (vo, vt) = (view(&s.mnt_ours, data), view(&s.mnt_theirs, data));
        assert!(
            vo == vt,
            "{at}: merged views differ:\n{}\nthe branches hold:\n{}",
            diff(&vo, &vt),
            holders(&s.ours, &vo, &vt)
        );
    }
    (ops, skipped, failed)
}

/// The seed (ACCORD_POOL_SEED, else from the clock) and the length of a run (ACCORD_POOL_OPS).
fn seed_and_length(test: &str) -> (u64, usize) {
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
    eprintln!("{test}: seed {seed} (ACCORD_POOL_SEED={seed} replays it), {ops} operations a run");
    (seed, ops)
}

/// Three tmpfs branches a side, of `SIZES_MB`, under `t`.
fn sides(t: &Path) -> Sides {
    let tmpfs = |side: &str| -> Vec<Tmpfs> {
        (SIZES_MB.iter().enumerate())
            .map(|(i, mb)| Tmpfs::new(&t.join(format!("{side}{i}")), *mb))
            .collect()
    };
    Sides {
        ours: tmpfs("ours"),
        theirs: tmpfs("theirs"),
        mnt_ours: t.join("mnt-ours"),
        mnt_theirs: t.join("mnt-theirs"),
    }
}

fn report(test: &str, what: &str, s: &Sides, (n, skipped, failed): (usize, usize, usize)) {
    let per_branch: Vec<usize> = (s.ours.iter()).map(|b| view(&b.0, false).len()).collect();
    eprintln!(
        "{test}: {what}: {n} operations agreed ({skipped} skipped on purpose, {failed} failed \
         alike); names per branch at the end {per_branch:?}"
    );
}

#[test]
fn pool_places_names_as_mergerfs_does() {
    let test = "pool_places_names_as_mergerfs_does";
    if !fuse_ok(test) || !need(test, "mergerfs", "mergerfs") {
        return;
    }
    let (seed, ops) = seed_and_length(test);
    let t = tempfile::tempdir().unwrap();
    let s = sides(t.path());
    for policy in POLICIES {
        let r = run_setup(&s, &Setup::create(policy), seed, ops);
        report(test, policy, &s, r);
    }
}

#[test]
fn pool_acts_as_mergerfs_does() {
    let test = "pool_acts_as_mergerfs_does";
    if !fuse_ok(test) || !need(test, "mergerfs", "mergerfs") {
        return;
    }
    let (seed, ops) = seed_and_length(test);
    let t = tempfile::tempdir().unwrap();
    let s = sides(t.path());
    let setups = [
        Setup {
            opts: "category.create=ff,func.chmod=epff,func.unlink=eplfs,func.rename=eplus,\
                   func.rmdir=epmfs,func.chown=ff,func.truncate=mfs,func.utimens=lus"
                .into(),
            suffixes: ["=RW", "=RO", "=RW"],
            ro_mounted: Some(1),
            seeded: true,
            attrs: true,
        },
        Setup {
            opts: "category.create=epmfs,category.action=ff,func.truncate=epall".into(),
            suffixes: ["=RW", "=RW", "=RW"],
            ro_mounted: None,
            seeded: true,
            attrs: true,
        },
        Setup {
            opts: "category.create=mfs,category.action=lfs,func.chmod=all,func.utimens=erofs"
                .into(),
            suffixes: ["=RW", "=RW", "=RW"],
            ro_mounted: None,
            seeded: true,
            attrs: true,
        },
        // A branch's own minfreespace: the largest drops out of mfs's choice once it has
        // less than 7M (the pool's is 2M); the first out of ff's below 5M.
        Setup {
            suffixes: ["=RW", "=RW", "=RW,7M"],
            ..Setup::create("mfs")
        },
        Setup {
            suffixes: ["=RW,5M", "=RW", "=RW"],
            ..Setup::create("ff")
        },
        Setup {
            opts: "category.create=eplus,func.mkdir=mfs,func.create=lfs".into(),
            suffixes: ["=RW", "=RW,4M", "=RW"],
            ro_mounted: None,
            seeded: true,
            attrs: false,
        },
    ];
    for setup in &setups {
        let r = run_setup(&s, setup, seed, ops);
        report(test, &format!("{} {:?}", setup.opts, setup.suffixes), &s, r);
    }
}
