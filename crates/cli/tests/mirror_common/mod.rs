//! Helpers for the `accord mirror` integration tests: running the binary,
//! building trees with every entry kind, and an independent comparison of
//! two trees in every attribute.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn bin() -> PathBuf {
    std::env::var_os("ACCORD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_accord")))
}

pub fn is_root() -> bool {
    unsafe { libc::geteuid() == 0 }
}

/// Strict mode: `ACCORD_TEST_STRICT` set (to 1; scripts/test sets it).
/// Then a test that cannot run here fails, so that a missing package or
/// privilege cannot turn coverage off while the suite stays green.
pub fn strict() -> bool {
    std::env::var_os("ACCORD_TEST_STRICT").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Something this test needs is missing here: `reason` says what, and how
/// to get it. In strict mode the test fails with `reason`; otherwise a SKIP
/// line goes to stderr and the caller returns (or leaves out the part that
/// needed it), so that `cargo test` still runs without root.
#[track_caller]
pub fn skip_or_fail(reason: &str) {
    if strict() {
        panic!("{reason} (ACCORD_TEST_STRICT is set: a test that cannot run fails)");
    }
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("this test");
    eprintln!("SKIP {test}: {reason}; NOT TESTED");
}

/// Root? If not, `skip_or_fail` says that `what` needs it.
#[track_caller]
pub fn need_root(what: &str) -> bool {
    let root = is_root();
    if !root {
        skip_or_fail(&format!(
            "{what} needs root (run the tests as root, as CI does)"
        ));
    }
    root
}

/// Is `tool` on PATH? If not, `skip_or_fail` names it and the Debian
/// package that has it.
#[track_caller]
pub fn need(tool: &str, package: &str) -> bool {
    let found = have(tool);
    if !found {
        skip_or_fail(&format!(
            "{tool} is not installed (apt-get install {package}; scripts/test installs it)"
        ));
    }
    found
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A mount made by `mount(8)`, unmounted when dropped.
pub struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// `mount ARGS AT`; `None` when it fails.
pub fn mount(args: &[&str], at: &Path) -> Option<Mounted> {
    let ok = Command::new("mount")
        .args(args)
        .arg(at)
        .status()
        .is_ok_and(|st| st.success());
    ok.then(|| Mounted(at.to_path_buf()))
}

/// A temp dir with the paths `src`, `dst` and `state` in it (not created).
pub fn roots() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().to_path_buf();
    (t, p.join("src"), p.join("dst"), p.join("state"))
}

/// Run `accord mirror ARGS` with a private state directory.
pub fn mirror(state: &Path, args: &[&str]) -> Output {
    let mut all = executor_args(args);
    all.extend_from_slice(args);
    mirror_walk(state, &all)
}

/// Run `accord mirror ARGS` as `mirror` does, but never as a task run
/// whatever `ACCORD_TEST_MIRROR_EXECUTOR` says (for options task runs
/// refuse, and the runs compared with them).
pub fn mirror_walk(state: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .arg("mirror")
        .args(args)
        .env("ACCORD_STATE_DIR", state)
        .output()
        .expect("run accord")
}

/// Run `accord mirror ARGS` as `mirror` does, but with stderr on a
/// pseudo-terminal, as for a person at one: the run draws its progress
/// and ends with its summary line (both only on a terminal). The output's
/// stderr is what the terminal showed (lines end in `\r\n`).
pub fn mirror_on_terminal(state: &Path, args: &[&str]) -> Output {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let (mut master, mut slave) = (-1, -1);
    let made = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(made, 0, "openpty: {}", std::io::Error::last_os_error());
    let mut master = unsafe { std::fs::File::from_raw_fd(master) };
    let terminal = unsafe { std::fs::File::from_raw_fd(slave) };
    // Read the terminal while the run writes to it (its buffer is small).
    let reader = std::thread::spawn(move || {
        let mut shown = Vec::new();
        let mut buf = [0u8; 4096];
        // The end of the run's side reads as EIO, not as an end of file.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            shown.extend_from_slice(&buf[..n]);
        }
        shown
    });
    let mut cmd = Command::new(bin());
    cmd.arg("mirror")
        .args(executor_args(args))
        .args(args)
        .env("ACCORD_STATE_DIR", state)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(terminal);
    let child = cmd.spawn().expect("run accord");
    // This process's copy of the terminal's end closes with the command,
    // so that the reader sees the run's end.
    drop(cmd);
    let mut out = child.wait_with_output().expect("run accord");
    out.stderr = reader.join().unwrap();
    out
}

/// The figures of the summary line `accord mirror` ends with on a
/// terminal (`W of N files written (B), D deleted, in S`):
/// `[files, written, deleted]`.
pub fn summary_figures(stderr: &[u8]) -> [u64; 3] {
    let s = String::from_utf8_lossy(stderr);
    let line = s
        .lines()
        .filter_map(|l| l.rfind("accord mirror: ").map(|at| &l[at..]))
        .find(|l| l.contains(" written") && l.contains(" deleted, in "))
        .unwrap_or_else(|| panic!("no summary line in {s:?}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let number = |i: usize| -> u64 { words[i].replace(',', "").parse().unwrap() };
    let at = |word: &str| -> usize {
        words
            .iter()
            .position(|w| w.trim_end_matches(',') == word)
            .unwrap_or_else(|| panic!("no {word:?} in {line:?}"))
    };
    // accord mirror: W of N files written ..., D deleted, in S
    let of = at("of");
    [number(of + 1), number(of - 1), number(at("deleted") - 1)]
}

/// A figure of `--stats` (`Name: 1,234` or `Name: 1,234 (1.2 KiB)`).
pub fn stat(stdout: &[u8], name: &str) -> u64 {
    let s = String::from_utf8_lossy(stdout);
    let value = s
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(": ")))
        .unwrap_or_else(|| panic!("no {name:?} in --stats output {s:?}"));
    let digits: String = value.split_whitespace().next().unwrap().replace(',', "");
    digits.parse().unwrap()
}

/// The executor the mirror tests run under: with
/// `ACCORD_TEST_MIRROR_EXECUTOR=tasks` every run the task executor can
/// take (no executor named, no -n, -i, --json, no -b, -x or --bwlimit,
/// which task runs refuse, no remote root) is made with
/// `--executor tasks`, so that scripts/test runs the same tests under both
/// executors `accord mirror` has.
fn executor_args(args: &[&str]) -> Vec<&'static str> {
    let asked = std::env::var("ACCORD_TEST_MIRROR_EXECUTOR").unwrap_or_default();
    if asked.is_empty() || asked == "walk" {
        return Vec::new();
    }
    assert_eq!(
        asked, "tasks",
        "ACCORD_TEST_MIRROR_EXECUTOR is walk or tasks"
    );
    let walk_only = args.iter().any(|a| {
        matches!(
            *a,
            "--dry-run"
                | "--itemize"
                | "--verbose"
                | "--json"
                | "--executor"
                | "--cluster"
                | "--link-dest"
        ) || ["--backup", "--suffix", "--bwlimit", "--one-file-system"]
            .iter()
            .any(|walk_flag| a.starts_with(walk_flag))
            || (a.starts_with('-') && !a.starts_with("--") && a.contains(['n', 'i', 'v', 'b', 'x']))
            || a.contains(':')
    });
    match walk_only {
        true => Vec::new(),
        false => vec!["--executor", "tasks"],
    }
}

/// Assert a run's exit status, showing its stderr when it differs.
pub fn assert_exit(out: &Output, code: i32) {
    assert_eq!(
        out.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().expect("sh");
    assert!(st.success(), "command failed: {cmd}");
}

pub fn json_field(out: &[u8], key: &str) -> serde_json::Value {
    let s = String::from_utf8_lossy(out);
    let line = s.lines().last().unwrap_or("");
    let v: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("bad json {line:?}: {e}"));
    v[key].clone()
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    pub kind: u32,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: (i64, i64),
    pub size: u64,
    pub content: Option<Vec<u8>>,
    pub link: Option<Vec<u8>>,
    pub rdev: u64,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    pub ino: u64,
    pub blocks: u64,
    pub ctime: (i64, i64),
}

fn xattrs(p: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut buf = vec![0u8; 65536];
    let n =
        unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    if n <= 0 {
        return Vec::new();
    }
    buf.truncate(n as usize);
    let mut out = Vec::new();
    for name in buf.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let cn = CString::new(name).unwrap();
        let mut v = vec![0u8; 65536];
        let m = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
                cn.as_ptr(),
                v.as_mut_ptr() as *mut libc::c_void,
                v.len(),
            )
        };
        if m >= 0 {
            v.truncate(m as usize);
            out.push((name.to_vec(), v));
        }
    }
    out.sort();
    out
}

/// Everything about a tree, keyed by relative path ("" is the root).
pub fn snapshot(root: &Path) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn walk(root: &Path, p: &Path, out: &mut BTreeMap<String, Node>) {
    let md = std::fs::symlink_metadata(p).unwrap();
    let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
    let kind = md.mode() & libc::S_IFMT;
    let content = (kind == libc::S_IFREG).then(|| std::fs::read(p).unwrap());
    let link = (kind == libc::S_IFLNK).then(|| {
        std::fs::read_link(p)
            .unwrap()
            .as_os_str()
            .as_bytes()
            .to_vec()
    });
    out.insert(
        rel,
        Node {
            kind,
            mode: md.mode() & 0o7777,
            uid: md.uid(),
            gid: md.gid(),
            mtime: (md.mtime(), md.mtime_nsec()),
            size: if kind == libc::S_IFDIR { 0 } else { md.size() },
            content,
            link,
            rdev: md.rdev(),
            xattrs: xattrs(p),
            ino: md.ino(),
            blocks: md.blocks(),
            ctime: (md.ctime(), md.ctime_nsec()),
        },
    );
    if kind == libc::S_IFDIR {
        let mut names: Vec<_> = std::fs::read_dir(p)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        for c in names {
            walk(root, &c, out);
        }
    }
}

/// Differences between two snapshots, in every attribute (symlink modes
/// excepted: Linux has none), with hard-link groups and holes.
pub fn differences(a: &BTreeMap<String, Node>, b: &BTreeMap<String, Node>) -> Vec<String> {
    let mut d = Vec::new();
    for (k, x) in a {
        let Some(y) = b.get(k) else {
            d.push(format!("missing in copy: {k:?}"));
            continue;
        };
        let mut f = |what: &str, ok: bool| {
            if !ok {
                d.push(format!("{k:?}: {what} differs"));
            }
        };
        f("kind", x.kind == y.kind);
        if x.kind != libc::S_IFLNK {
            f("mode", x.mode == y.mode);
        }
        f("owner", (x.uid, x.gid) == (y.uid, y.gid));
        f("mtime", x.mtime == y.mtime);
        f("size", x.size == y.size);
        f("content", x.content == y.content);
        f("link target", x.link == y.link);
        if x.kind == libc::S_IFCHR || x.kind == libc::S_IFBLK {
            f("rdev", x.rdev == y.rdev);
        }
        f("xattrs/ACLs", x.xattrs == y.xattrs);
        if x.kind == libc::S_IFREG {
            // Holes stay holes (allow a little allocation slack).
            f("allocation (sparse)", y.blocks <= x.blocks + 16);
        }
    }
    for k in b.keys() {
        if !a.contains_key(k) {
            d.push(format!("extra in copy: {k:?}"));
        }
    }
    let groups = |s: &BTreeMap<String, Node>| {
        let mut by: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for (k, n) in s {
            if n.kind == libc::S_IFREG {
                by.entry(n.ino).or_default().push(k.clone());
            }
        }
        let mut g: Vec<Vec<String>> = by.into_values().filter(|v| v.len() > 1).collect();
        g.sort();
        g
    };
    let (ga, gb) = (groups(a), groups(b));
    if ga != gb {
        d.push(format!("hard-link groups differ: {ga:?} vs {gb:?}"));
    }
    d
}

/// `rsync -aHAXS --delete -n -i SRC/ DST/`: what rsync would still change.
pub fn rsync_itemize(src: &Path, dst: &Path) -> String {
    let o = Command::new("rsync")
        .args(["-aHAXS", "--delete", "-n", "-i"])
        .arg(format!("{}/", src.display()))
        .arg(format!("{}/", dst.display()))
        .output()
        .expect("rsync");
    assert!(
        o.status.success(),
        "rsync failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn set_mtime(p: &Path, sec: i64, nsec: i64) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let ts = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        },
    ];
    let r = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            ts.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(r, 0, "utimensat {}", p.display());
}

pub fn set_xattr(p: &Path, name: &str, value: &[u8]) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr() as *const libc::c_void,
            value.len(),
            0,
        )
    };
    assert_eq!(r, 0, "setxattr {} {name}", p.display());
}

pub fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A small deterministic generator (xorshift).
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// A tree with every entry kind the mirror keeps.
pub fn full_tree(root: &Path) {
    let w = |p: &str, data: &[u8]| {
        let path = root.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, data).unwrap();
    };
    let mut rng = Rng(0x9e3779b97f4a7c15);
    std::fs::create_dir_all(root.join("nested/deeper/deepest")).unwrap();
    std::fs::create_dir_all(root.join("empty dir")).unwrap();
    std::fs::create_dir_all(root.join("nested/empty")).unwrap();
    w("plain.txt", b"hello\n");
    w("empty-file", b"");
    w("nested/deeper/deepest/data.bin", &rng.bytes(300_000));
    w("unicodé ü/ñame with spaces.txt", "ünïcödé\n".as_bytes());
    w("名前/ファイル", b"kanji");
    w("a/big", &rng.bytes(2_000_000));
    // Hard-link groups across directories.
    w("links/one", b"linked contents");
    std::fs::create_dir_all(root.join("nested/deeper/other")).unwrap();
    std::fs::hard_link(
        root.join("links/one"),
        root.join("nested/deeper/other/one-link"),
    )
    .unwrap();
    std::fs::hard_link(root.join("links/one"), root.join("a/third-link")).unwrap();
    w("links/two", b"second group");
    std::fs::hard_link(root.join("links/two"), root.join("links/two-b")).unwrap();
    // Symlinks: relative, absolute, dangling, to a directory.
    std::os::unix::fs::symlink("../plain.txt", root.join("links/rel")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", root.join("links/abs")).unwrap();
    std::os::unix::fs::symlink("does/not/exist", root.join("links/dangling")).unwrap();
    std::os::unix::fs::symlink("nested", root.join("dirlink")).unwrap();
    // Sparse: 64 MiB with two small data regions.
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(root.join("sparse.img")).unwrap();
        f.set_len(64 << 20).unwrap();
        f.write_all_at(b"start", 0).unwrap();
        f.write_all_at(&rng.bytes(10_000), 40 << 20).unwrap();
    }
    // Fifo and socket.
    let fifo = CString::new(root.join("fifo").as_os_str().as_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o640) }, 0);
    let _ = std::os::unix::net::UnixListener::bind(root.join("socket")).unwrap();
    // Devices (root only).
    if need_root("a tree with device nodes and files of other owners") {
        let dev = CString::new(root.join("null-dev").as_os_str().as_bytes()).unwrap();
        assert_eq!(
            unsafe { libc::mknod(dev.as_ptr(), libc::S_IFCHR | 0o620, libc::makedev(1, 3)) },
            0
        );
        let blk = CString::new(root.join("blk-dev").as_os_str().as_bytes()).unwrap();
        assert_eq!(
            unsafe { libc::mknod(blk.as_ptr(), libc::S_IFBLK | 0o600, libc::makedev(7, 200)) },
            0
        );
    }
    // Modes.
    chmod(&root.join("plain.txt"), 0o640);
    chmod(&root.join("a/big"), 0o4755);
    chmod(&root.join("nested/deeper"), 0o2775);
    chmod(&root.join("empty dir"), 0o1777);
    chmod(&root.join("empty-file"), 0o400);
    // Xattrs and ACLs.
    set_xattr(&root.join("plain.txt"), "user.color", b"blue");
    set_xattr(&root.join("nested"), "user.dir-attr", b"\x00\x01binary");
    if have("setfacl") {
        sh(&format!(
            "setfacl -m u:nobody:rw- '{}'",
            root.join("links/two").display()
        ));
        sh(&format!(
            "setfacl -m u:nobody:r-x -d -m g:nogroup:rwx '{}'",
            root.join("nested/deeper/deepest").display()
        ));
    } else {
        skip_or_fail("setfacl is not installed (apt-get install acl): the tree has no ACLs");
    }
    // Owners (root only).
    if is_root() {
        sh(&format!(
            "chown 65534:65534 '{}'",
            root.join("名前/ファイル").display()
        ));
        sh(&format!(
            "chown -h 65534:0 '{}'",
            root.join("links/rel").display()
        ));
        sh(&format!(
            "chown 1234:5678 '{}'",
            root.join("empty dir").display()
        ));
    }
    // Nanosecond mtimes, directories last.
    let mut all: Vec<PathBuf> = Vec::new();
    fn collect(p: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(p).unwrap() {
            let e = e.unwrap();
            let pth = e.path();
            if e.file_type().unwrap().is_dir() {
                collect(&pth, out);
            }
            out.push(pth);
        }
    }
    collect(root, &mut all);
    for (i, p) in all.iter().enumerate() {
        set_mtime(
            p,
            1_500_000_000 + i as i64 * 1000,
            (i as i64 * 123_456_789) % 1_000_000_000,
        );
    }
    set_mtime(root, 1_600_000_000, 987_654_321);
}

/// Hold `root`'s lock the way an accord run does (flock(2) on the
/// directory), from a `flock(1)` process, until it is killed; returns once
/// the lock is held (a non-blocking probe fails).
#[allow(dead_code)]
pub fn hold_lock(root: &Path) -> std::process::Child {
    // -o: only flock(1) itself holds the lock, so killing it releases it.
    let holder = std::process::Command::new("flock")
        .arg("-o")
        .arg(root)
        .args(["sleep", "60"])
        .spawn()
        .unwrap();
    for _ in 0..100 {
        let probe = std::process::Command::new("flock")
            .arg("-n")
            .arg(root)
            .arg("true")
            .status()
            .unwrap();
        if !probe.success() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    holder
}
