//! The answers a program gets through the union are the ones its branch would give, checked
//! call by call against a plain directory on the branches' file system, in an overlay and in a
//! pool: a name longer than the branch can hold is ENAMETOOLONG from every call that takes a
//! name (not "no such file" from those that look the name up first); a tree deeper than
//! PATH_MAX from the union's root works as it does in a plain directory; and an open file whose
//! name was unlinked reports the links it has left (none for its only name, also a lower file
//! hidden by a whiteout).

mod common;

use std::ffi::CString;
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::*;

/// A test directory with a plain directory `plain` and the branches of an overlay (`up` over
/// `lo`) or of a pool (`p1`, `p2`), all on one file system, with `here` in `plain` and in the
/// lower (or second) branch.
struct Setup {
    _t: tempfile::TempDir,
    base: PathBuf,
    mount: UnionMount,
}

impl Setup {
    fn new(pool: bool) -> Setup {
        Setup::prepared(pool, |_| {})
    }

    /// A union whose branches `prepare` fills (given the base directory)
    /// before it is mounted: what a test puts in a branch behind a mounted
    /// union's back, the union may not see at once.
    fn prepared(pool: bool, prepare: impl FnOnce(&Path)) -> Setup {
        let t = tempfile::tempdir().unwrap();
        let base = t.path().canonicalize().unwrap();
        for d in ["up", "lo", "p1", "p2", "plain"] {
            fs::create_dir_all(base.join(d)).unwrap();
        }
        let (first, second) = if pool { ("p1", "p2") } else { ("up", "lo") };
        fs::write(base.join(second).join("here"), "here\n").unwrap();
        fs::write(base.join("plain/here"), "here\n").unwrap();
        prepare(&base);
        let mnt = base.join("mnt");
        let mount = if pool {
            let branches = [first, second].map(|d| base.join(d).display().to_string());
            let opts = ["-o", "category.create=ff,minfreespace=1M"];
            UnionMount::with_options(&mnt, &branches, &opts)
        } else {
            let branches = [
                format!("{}=rw", base.join(first).display()),
                format!("{}=ro", base.join(second).display()),
            ];
            UnionMount::new(&mnt, &branches)
        };
        Setup { _t: t, base, mount }
    }

    fn mnt(&self) -> &Path {
        &self.mount.mnt
    }

    fn plain(&self) -> PathBuf {
        self.base.join("plain")
    }
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

/// 0 for success, else the errno.
fn errno_of(r: libc::c_int) -> i32 {
    if r >= 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

fn io_errno(r: std::io::Result<()>) -> i32 {
    r.err().and_then(|e| e.raw_os_error()).unwrap_or(0)
}

/// The errno of each call that takes a name, on `name` in `dir` (0: it succeeded), in order.
fn answers(dir: &Path, name: &str) -> Vec<(&'static str, i32)> {
    let p = dir.join(name);
    let cp = c(&p);
    let here = dir.join("here");
    let attr = CString::new("user.x").unwrap();
    let mut v = vec![
        ("lstat", io_errno(fs::symlink_metadata(&p).map(drop))),
        ("open", io_errno(fs::File::open(&p).map(drop))),
        ("creat", io_errno(fs::write(&p, b"x"))),
        ("mkdir", io_errno(fs::create_dir(&p))),
        // SAFETY: valid path.
        (
            "mkfifo",
            errno_of(unsafe { libc::mkfifo(cp.as_ptr(), 0o600) }),
        ),
        ("mknod", io_errno(mknod(&p, libc::S_IFREG | 0o600, 0))),
        (
            "symlink",
            io_errno(std::os::unix::fs::symlink("target", &p)),
        ),
        ("link", io_errno(fs::hard_link(&here, &p))),
        ("setxattr", io_errno(setxattr(&p, "user.x", b"1"))),
    ];
    let mut buf = [0u8; 64];
    // SAFETY: valid strings and buffer.
    let r = unsafe { libc::lgetxattr(cp.as_ptr(), attr.as_ptr(), buf.as_mut_ptr().cast(), 64) };
    v.push(("getxattr", errno_of(r as libc::c_int)));
    // SAFETY: valid string and buffer.
    let r = unsafe { libc::llistxattr(cp.as_ptr(), buf.as_mut_ptr().cast(), 64) };
    v.push(("listxattr", errno_of(r as libc::c_int)));
    v.extend([
        ("readlink", io_errno(fs::read_link(&p).map(drop))),
        (
            "chmod",
            io_errno(fs::set_permissions(
                &p,
                std::os::unix::fs::PermissionsExt::from_mode(0o600),
            )),
        ),
        (
            "chown",
            io_errno(std::os::unix::fs::lchown(&p, Some(1), Some(1))),
        ),
        (
            "truncate",
            io_errno(fs::File::options().write(true).open(&p).map(drop)),
        ),
        ("opendir", io_errno(fs::read_dir(&p).map(drop))),
        ("below", io_errno(fs::write(p.join("x"), b"x"))),
        ("rename-old", io_errno(fs::rename(&p, dir.join("other")))),
        ("rename-new", io_errno(fs::rename(&here, &p))),
        ("unlink", io_errno(fs::remove_file(&p))),
        ("rmdir", io_errno(fs::remove_dir(&p))),
    ]);
    v
}

fn name_lengths(pool: bool) {
    let s = Setup::new(pool);
    // The branches' NAME_MAX, as pathconf gives it for the plain directory beside them.
    // SAFETY: valid path.
    let name_max = unsafe { libc::pathconf(c(&s.plain()).as_ptr(), libc::_PC_NAME_MAX) };
    assert!(
        name_max > 0,
        "pathconf: {}",
        std::io::Error::last_os_error()
    );
    let name_max = name_max as usize;
    for len in [name_max + 1, name_max + 2, 1000] {
        let long = "n".repeat(len);
        let ours = answers(s.mnt(), &long);
        assert_eq!(ours, answers(&s.plain(), &long), "{len} bytes, pool={pool}");
        let other: Vec<_> = (ours.iter())
            .filter(|(_, e)| *e != libc::ENAMETOOLONG)
            .collect();
        assert!(other.is_empty(), "{len} bytes, pool={pool}: {other:?}");
    }
    // A name that fits: the same answers as well (here most calls succeed or find the name).
    let fits = "f".repeat(name_max);
    assert_eq!(
        answers(s.mnt(), &fits),
        answers(&s.plain(), &fits),
        "{name_max} bytes, pool={pool}"
    );
}

#[test]
fn a_name_too_long_is_too_long_from_every_call_in_an_overlay() {
    if !fuse_ok("a_name_too_long_is_too_long_from_every_call_in_an_overlay") {
        return;
    }
    name_lengths(false);
}

#[test]
fn a_name_too_long_is_too_long_from_every_call_in_a_pool() {
    if !fuse_ok("a_name_too_long_is_too_long_from_every_call_in_a_pool") {
        return;
    }
    name_lengths(true);
}

/// Open directory `name` of `dir` (a descriptor), for the *at calls below.
fn open_dir(dir: RawFd, name: &CString) -> std::io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: valid string; the descriptor is owned by the result.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Make a chain of `depth` directories with names of 200 bytes under `top` (deeper than
/// PATH_MAX from `top`, while each call names one component), and answer the calls of a
/// program working at its bottom, through a descriptor as a shell's working directory would.
fn deep_answers(top: &Path, depth: usize) -> Vec<(&'static str, i32)> {
    let part = CString::new("d".repeat(200)).unwrap();
    let mut dir = open_dir(libc::AT_FDCWD, &c(top)).unwrap();
    for _ in 0..depth {
        // SAFETY: valid descriptor and string.
        let r = unsafe { libc::mkdirat(dir.as_raw_fd(), part.as_ptr(), 0o755) };
        assert_eq!(errno_of(r), 0, "mkdirat below {}", top.display());
        dir = open_dir(dir.as_raw_fd(), &part).unwrap();
    }
    let d = dir.as_raw_fd();
    let name = |s: &str| CString::new(s).unwrap();
    let (f, g, l, s, sub) = (name("f"), name("g"), name("l"), name("s"), name("sub"));
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let mut buf = [0u8; 64];
    let proc_f = CString::new(format!("/proc/self/fd/{d}/f")).unwrap();
    let attr = name("user.deep");
    // SAFETY (all below): valid descriptors, strings and buffers.
    unsafe {
        let fd = libc::openat(d, f.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644);
        let created = errno_of(fd);
        if fd >= 0 {
            libc::write(fd, b"deep\n".as_ptr().cast(), 5);
            libc::close(fd);
        }
        vec![
            ("create", created),
            (
                "fstatat",
                errno_of(libc::fstatat(d, f.as_ptr(), &mut st, 0)),
            ),
            ("size", st.st_size as i32),
            ("mkdirat", errno_of(libc::mkdirat(d, sub.as_ptr(), 0o700))),
            (
                "symlinkat",
                errno_of(libc::symlinkat(f.as_ptr(), d, s.as_ptr())),
            ),
            (
                "readlinkat",
                errno_of(libc::readlinkat(d, s.as_ptr(), buf.as_mut_ptr().cast(), 64) as i32),
            ),
            (
                "linkat",
                errno_of(libc::linkat(d, f.as_ptr(), d, l.as_ptr(), 0)),
            ),
            (
                "renameat",
                errno_of(libc::renameat(d, l.as_ptr(), d, g.as_ptr())),
            ),
            (
                "fchmodat",
                errno_of(libc::fchmodat(d, g.as_ptr(), 0o600, 0)),
            ),
            (
                "setxattr",
                errno_of(libc::lsetxattr(
                    proc_f.as_ptr(),
                    attr.as_ptr(),
                    b"1".as_ptr().cast(),
                    1,
                    0,
                )),
            ),
            (
                "getxattr",
                errno_of(libc::lgetxattr(
                    proc_f.as_ptr(),
                    attr.as_ptr(),
                    buf.as_mut_ptr().cast(),
                    64,
                ) as i32),
            ),
            ("unlinkat", errno_of(libc::unlinkat(d, g.as_ptr(), 0))),
            (
                "rmdir",
                errno_of(libc::unlinkat(d, sub.as_ptr(), libc::AT_REMOVEDIR)),
            ),
        ]
    }
}

fn deep_tree(pool: bool) {
    let s = Setup::new(pool);
    // 25 levels of 201 bytes: 5025 bytes from the union's root, more than PATH_MAX (4096) in
    // the branch too.
    let ours = deep_answers(s.mnt(), 25);
    assert_eq!(ours, deep_answers(&s.plain(), 25), "pool={pool}");
    let failed: Vec<_> = (ours.iter())
        .filter(|(n, e)| *n != "size" && *e != 0)
        .collect();
    assert!(failed.is_empty(), "pool={pool}: {failed:?}");
    assert_eq!(ours[2], ("size", 5), "pool={pool}");
}

#[test]
fn a_tree_deeper_than_path_max_works_as_in_a_plain_directory_in_an_overlay() {
    if !fuse_ok("a_tree_deeper_than_path_max_works_as_in_a_plain_directory_in_an_overlay") {
        return;
    }
    deep_tree(false);
}

#[test]
fn a_tree_deeper_than_path_max_works_as_in_a_plain_directory_in_a_pool() {
    if !fuse_ok("a_tree_deeper_than_path_max_works_as_in_a_plain_directory_in_a_pool") {
        return;
    }
    deep_tree(true);
}

/// The link counts fstat gives for files open while their names go, in `dir`: one whose only
/// name was unlinked, one of two hard links, one replaced by a rename, one opened for writing,
/// a directory removed, and `extra` files and directories already in `dir` (each unlinked or
/// removed while open).
fn open_link_counts(dir: &Path, extra: &[&str]) -> Vec<(String, u64)> {
    let open_then = |name: &str, write: bool, gone: &dyn Fn()| {
        let f = fs::File::options()
            .read(true)
            .write(write)
            .open(dir.join(name))
            .unwrap();
        gone();
        f.metadata().unwrap().nlink()
    };
    let mut v = Vec::new();
    fs::write(dir.join("own"), "own\n").unwrap();
    let n = open_then("own", false, &|| fs::remove_file(dir.join("own")).unwrap());
    v.push(("own".to_string(), n));
    fs::write(dir.join("h1"), "h\n").unwrap();
    fs::hard_link(dir.join("h1"), dir.join("h2")).unwrap();
    let n = open_then("h1", false, &|| fs::remove_file(dir.join("h1")).unwrap());
    v.push(("one of two links".to_string(), n));
    fs::write(dir.join("r1"), "r1\n").unwrap();
    fs::write(dir.join("r2"), "r2\n").unwrap();
    let n = open_then("r1", false, &|| {
        fs::rename(dir.join("r2"), dir.join("r1")).unwrap()
    });
    v.push(("renamed over".to_string(), n));
    fs::write(dir.join("w"), "w\n").unwrap();
    let n = open_then("w", true, &|| fs::remove_file(dir.join("w")).unwrap());
    v.push(("open for writing".to_string(), n));
    fs::create_dir(dir.join("d")).unwrap();
    let n = open_then("d", false, &|| fs::remove_dir(dir.join("d")).unwrap());
    v.push(("directory".to_string(), n));
    for name in extra {
        let p = dir.join(name);
        let n = match p.is_dir() {
            true => open_then(name, false, &|| fs::remove_dir(&p).unwrap()),
            false => open_then(name, false, &|| fs::remove_file(&p).unwrap()),
        };
        v.push((name.to_string(), n));
    }
    v
}

/// Files already in branches and in the plain directory (`dirs`): one name, two hard links
/// of which the first will be unlinked, and an empty directory.
fn branch_files(dirs: &[&Path]) {
    for d in dirs {
        fs::create_dir(d.join("empty")).unwrap();
        fs::write(d.join("one"), "one\n").unwrap();
        fs::write(d.join("ln1"), "ln\n").unwrap();
        fs::hard_link(d.join("ln1"), d.join("ln2")).unwrap();
    }
}

#[test]
fn an_open_file_whose_name_went_has_the_links_the_branch_counts_in_an_overlay() {
    if !fuse_ok("an_open_file_whose_name_went_has_the_links_the_branch_counts_in_an_overlay") {
        return;
    }
    // Upper files made in the branch (their other name unknown to the union so far), and
    // lower ones (a whiteout hides the name; the lower file keeps its names in its branch).
    let s = Setup::prepared(false, |b| {
        for dir in ["up/u", "lo/l", "plain/u", "plain/l"] {
            fs::create_dir_all(b.join(dir)).unwrap();
        }
        branch_files(&[
            &b.join("up/u"),
            &b.join("lo/l"),
            &b.join("plain/u"),
            &b.join("plain/l"),
        ]);
    });
    let (b, plain) = (&s.base, s.plain());
    for sub in ["u", "l"] {
        let extra = ["one", "ln1", "empty"];
        let ours = open_link_counts(&s.mnt().join(sub), &extra);
        assert_eq!(ours, open_link_counts(&plain.join(sub), &extra), "{sub}");
    }
    // The lower files' other names show the count the open file gave, and the lower branch
    // is unchanged.
    assert_eq!(fs::metadata(s.mnt().join("l/ln2")).unwrap().nlink(), 1);
    assert_eq!(fs::metadata(b.join("lo/l/ln2")).unwrap().nlink(), 2);
    assert_eq!(fs::read_to_string(b.join("lo/l/one")).unwrap(), "one\n");
}

#[test]
fn an_open_file_whose_name_went_has_the_links_the_branch_counts_in_a_pool() {
    if !fuse_ok("an_open_file_whose_name_went_has_the_links_the_branch_counts_in_a_pool") {
        return;
    }
    // Files on the second branch (new ones go to the first), and one with a copy on each.
    let s = Setup::prepared(true, |b| {
        branch_files(&[&b.join("p2"), &b.join("plain")]);
        for d in ["p1", "p2", "plain"] {
            fs::write(b.join(d).join("both"), "both\n").unwrap();
        }
    });
    let (b, plain) = (&s.base, s.plain());
    let extra = ["one", "ln1", "both", "empty"];
    let ours = open_link_counts(s.mnt(), &extra);
    assert_eq!(ours, open_link_counts(&plain, &extra));
    assert!(!b.join("p1/both").exists() && !b.join("p2/both").exists());
}
