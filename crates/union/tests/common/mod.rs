//! Shared helpers for the union's FUSE tests: finding the binary, mounting with guaranteed
//! unmount on drop (also when a test panics), and describing trees for comparison.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::ffi::{CString, OsStr};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `accord` binary: `ACCORD_BIN` (set by scripts/test), else the one built next to this
/// test in the same target directory.
pub fn accord() -> PathBuf {
    if let Some(p) = std::env::var_os("ACCORD_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/test-xxxx -> target/<profile>/accord
    let p = exe.parent().unwrap().parent().unwrap().join("accord");
    assert!(
        p.exists(),
        "accord binary not found: set ACCORD_BIN or build it first (cargo build --release -p accord-cli)"
    );
    p
}

/// Strict mode: `ACCORD_TEST_STRICT` set (to 1; scripts/test sets it). Then a test that cannot
/// run here fails, so that a missing package or privilege cannot turn coverage off while the
/// suite stays green.
pub fn strict() -> bool {
    std::env::var_os("ACCORD_TEST_STRICT").is_some_and(|v| !v.is_empty() && v != "0")
}

/// Something `test` needs is missing here: `reason` says what, and how to get it. In strict
/// mode the test fails with `reason`; otherwise a SKIP line goes to stderr and the caller
/// returns, so that `cargo test` still runs without root.
#[track_caller]
pub fn skip_or_fail(test: &str, reason: &str) {
    if strict() {
        panic!("{test}: {reason} (ACCORD_TEST_STRICT is set: a test that cannot run fails)");
    }
    eprintln!("SKIP {test}: {reason}; NOT TESTED");
}

/// FUSE tests need root (overlayfs, chown, mknod) and /dev/fuse; `skip_or_fail` when missing.
#[track_caller]
pub fn fuse_ok(test: &str) -> bool {
    // SAFETY: no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let dev = Path::new("/dev/fuse").exists();
    if !root || !dev {
        skip_or_fail(
            test,
            &format!("needs root and /dev/fuse (root={root}, /dev/fuse={dev})"),
        );
        return false;
    }
    true
}

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool} >/dev/null"))
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Is `tool` on PATH? If not, `skip_or_fail` says so for `test`, naming the Debian package
/// that has it.
#[track_caller]
pub fn need(test: &str, tool: &str, package: &str) -> bool {
    let found = have(tool);
    if !found {
        skip_or_fail(
            test,
            &format!(
                "{tool} is not installed (apt-get install {package}; scripts/test installs it)"
            ),
        );
    }
    found
}

pub fn accord_cmd(args: &[&OsStr]) -> (bool, String, String) {
    let out = Command::new(accord()).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An `accord union` mount, unmounted when dropped.
pub struct UnionMount {
    pub mnt: PathBuf,
}

impl UnionMount {
    pub fn new(mnt: &Path, branches: &[String]) -> UnionMount {
        UnionMount::with_options(mnt, branches, &[])
    }

    /// A mount with extra arguments before the branches (`-o redirect_dir=off`).
    pub fn with_options(mnt: &Path, branches: &[String], options: &[&str]) -> UnionMount {
        fs::create_dir_all(mnt).unwrap();
        let mut args: Vec<&OsStr> = vec![OsStr::new("union"), OsStr::new("mount"), mnt.as_os_str()];
        args.extend(options.iter().map(OsStr::new));
        for b in branches {
            args.push(OsStr::new(b));
        }
        let (mut ok, _, mut err) = accord_cmd(&args);
        // A union just unmounted here may still be ending (its control socket lives until
        // its process exits): wait for it.
        for _ in 0..50 {
            if ok || !err.contains("already mounted?") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
            (ok, _, err) = accord_cmd(&args);
        }
        assert!(ok, "accord union mount failed: {err}");
        UnionMount {
            mnt: mnt.to_path_buf(),
        }
    }

    pub fn ctl(&self, args: &[&str]) -> String {
        let mut a: Vec<&OsStr> = vec![
            OsStr::new("union"),
            OsStr::new(args[0]),
            self.mnt.as_os_str(),
        ];
        a.extend(args[1..].iter().map(OsStr::new));
        let (ok, out, err) = accord_cmd(&a);
        assert!(ok, "accord union {args:?} failed: {err}");
        out
    }
}

impl Drop for UnionMount {
    fn drop(&mut self) {
        unmount(&self.mnt, "fusermount3", &["-u"]);
    }
}

/// A kernel overlayfs mount, unmounted when dropped.
pub struct OverlayMount {
    pub mnt: PathBuf,
}

impl OverlayMount {
    /// overlayfs with the options that match the union's documented semantics: no
    /// redirect_dir (merged directories cannot be renamed: EXDEV), index (lower hard links stay
    /// linked across a copy-up), no metacopy.
    pub fn new(
        lower: &Path,
        upper: &Path,
        work: &Path,
        mnt: &Path,
    ) -> Result<OverlayMount, String> {
        OverlayMount::with(&[lower], upper, work, mnt, "off")
    }

    /// overlayfs over `lowers` (highest first) with `redirect_dir` set to `redirect`.
    pub fn with(
        lowers: &[&Path],
        upper: &Path,
        work: &Path,
        mnt: &Path,
        redirect: &str,
    ) -> Result<OverlayMount, String> {
        for d in [upper, work, mnt] {
            fs::create_dir_all(d).unwrap();
        }
        let lower: Vec<String> = lowers.iter().map(|l| l.display().to_string()).collect();
        let opts = format!(
            "lowerdir={},upperdir={},workdir={},redirect_dir={redirect},index=on,metacopy=off,xino=off",
            lower.join(":"),
            upper.display(),
            work.display()
        );
        let out = Command::new("mount")
            .args(["-t", "overlay", "overlay", "-o", &opts])
            .arg(mnt)
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned());
        }
        Ok(OverlayMount {
            mnt: mnt.to_path_buf(),
        })
    }
}

impl Drop for OverlayMount {
    fn drop(&mut self) {
        unmount(&self.mnt, "umount", &[]);
    }
}

/// A tmpfs mount, unmounted when dropped.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    pub fn new(dir: &Path, mb: u64) -> Tmpfs {
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

    /// Mount it read-only or read-write again.
    pub fn remount(&self, ro: bool) {
        let opts = if ro { "remount,ro" } else { "remount,rw" };
        let ok = Command::new("mount")
            .args(["-o", opts])
            .arg(&self.0)
            .status();
        assert!(
            ok.unwrap().success(),
            "mount -o {opts} {}",
            self.0.display()
        );
    }

    pub fn wipe(&self) {
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

pub fn unmount(mnt: &Path, tool: &str, args: &[&str]) {
    for _ in 0..50 {
        let ok = Command::new(tool)
            .args(args)
            .arg(mnt)
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok || !is_mounted(mnt) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // Still busy: detach it lazily rather than leave it behind.
    let _ = Command::new("umount").arg("-l").arg(mnt).status();
}

pub fn is_mounted(mnt: &Path) -> bool {
    let m = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let p = mnt.canonicalize().unwrap_or(mnt.to_path_buf());
    m.lines()
        .any(|l| l.split(' ').nth(1) == Some(&p.to_string_lossy().replace(' ', "\\040")))
}

/// user.* extended attributes of a path (not following symlinks), sorted.
pub fn user_xattrs(p: &Path) -> Vec<(String, Vec<u8>)> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut buf = vec![0u8; 65536];
    // SAFETY: valid string and buffer.
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if n <= 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    for name in buf[..n as usize]
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
    {
        if !name.starts_with(b"user.") {
            continue;
        }
        let cn = CString::new(name).unwrap();
        let mut v = vec![0u8; 65536];
        // SAFETY: valid strings and buffer.
        let m = unsafe { libc::lgetxattr(c.as_ptr(), cn.as_ptr(), v.as_mut_ptr().cast(), v.len()) };
        if m >= 0 {
            v.truncate(m as usize);
            out.push((String::from_utf8_lossy(name).into_owned(), v));
        }
    }
    out.sort();
    out
}

/// Times before this are "old" (set deliberately) and must match exactly; later ones only need
/// to be later on both sides.
pub const OLD: i64 = 1_500_000_000;

/// What a person can see of one entry. `strict_dirs` adds directory mtimes and sizes, used when
/// checking that a branch did not change at all.
pub fn describe(root: &Path, strict: bool) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    walk(root, root, strict, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, strict: bool, out: &mut BTreeMap<String, String>) {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    for n in names {
        let p = dir.join(&n);
        let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        let m = fs::symlink_metadata(&p).unwrap();
        let ft = m.file_type();
        let mtime = if m.mtime() < OLD && !ft.is_dir() || strict {
            format!("{}.{}", m.mtime(), m.mtime_nsec())
        } else if ft.is_dir() {
            "-".into()
        } else {
            "recent".into()
        };
        let mut d = format!(
            "mode={:o} uid={} gid={} mtime={} xattrs={:?}",
            m.mode(),
            m.uid(),
            m.gid(),
            mtime,
            user_xattrs(&p)
        );
        if ft.is_file() {
            let data = fs::read(&p).unwrap();
            d += &format!(
                " size={} nlink={} data={:x}",
                m.len(),
                m.nlink(),
                fnv(&data)
            );
        } else if ft.is_symlink() {
            d += &format!(" target={:?}", fs::read_link(&p).unwrap());
        } else if ft.is_char_device() || ft.is_block_device() {
            d += &format!(" rdev={}", m.rdev());
        } else if ft.is_dir() && strict {
            d += &format!(" size={} ctime={}.{}", m.len(), m.ctime(), m.ctime_nsec());
        }
        if !ft.is_dir() && strict {
            d += &format!(" ctime={}.{}", m.ctime(), m.ctime_nsec());
        }
        out.insert(rel, d);
        if ft.is_dir() {
            walk(root, &p, strict, out);
        }
    }
}

fn fnv(data: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &b in data {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    h
}

/// Set a file's times to a fixed old value (what makes "old" mtimes comparable).
pub fn set_old_times(p: &Path, secs: i64) {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let ts = [
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
    ];
    // SAFETY: valid path and two timespecs.
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

pub fn setxattr(p: &Path, name: &str, value: &[u8]) -> std::io::Result<()> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: valid strings and buffer.
    let r = unsafe {
        libc::lsetxattr(
            c.as_ptr(),
            n.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

pub fn removexattr(p: &Path, name: &str) -> std::io::Result<()> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: valid strings.
    let r = unsafe { libc::lremovexattr(c.as_ptr(), n.as_ptr()) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

pub fn mknod(p: &Path, mode: u32, dev: u64) -> std::io::Result<()> {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: valid string.
    let r = unsafe { libc::mknod(c.as_ptr(), mode, dev) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

pub fn sh(script: &str) {
    let st = Command::new("sh").arg("-c").arg(script).status().unwrap();
    assert!(st.success(), "failed: {script}");
}

/// How many inodes the daemon holds now.
pub fn daemon_inodes(m: &UnionMount) -> usize {
    let out = accord_union::control::request(&m.mnt, &[std::ffi::OsStr::new("stats")]).unwrap();
    out.trim()
        .strip_prefix("inodes\t")
        .unwrap()
        .parse()
        .unwrap()
}
