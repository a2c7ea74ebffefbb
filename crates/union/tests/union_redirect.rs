//! Issue 14, section 1: directory renames across branches with redirects (`redirect.rs`).
//! What the differential run against overlayfs cannot show: the on-branch format, what the
//! union makes of redirects it did not write (half-done renames, hostile values), the option
//! that keeps EXDEV, and listings racing renames.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use common::*;

const REDIRECT: &str = "trusted.accord.redirect";

fn getxattr(p: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid strings and buffer.
    let r = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

fn names(dir: &Path) -> std::io::Result<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for e in fs::read_dir(dir)? {
        out.insert(e?.file_name().to_string_lossy().into_owned());
    }
    Ok(out)
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// upper (rw) over lower (ro) with lower `d/{a,b,sub/s}`; returns the branch arguments.
fn two_branches(b: &Path) -> Vec<String> {
    fs::create_dir_all(b.join("up")).unwrap();
    fs::create_dir_all(b.join("lo/d/sub")).unwrap();
    for f in ["d/a", "d/b", "d/sub/s"] {
        fs::write(b.join("lo").join(f), f).unwrap();
    }
    vec![
        format!("{}=rw", b.join("up").display()),
        format!("{}=ro", b.join("lo").display()),
    ]
}

/// The format documented in README and `redirect.rs`: the moved upper copy holds the lower
/// path in `trusted.accord.redirect`, the old name has a `.wh.` whiteout; the attribute is
/// neither shown nor settable through the union.
#[test]
fn redirect_format_and_privacy() {
    if !fuse_ok("redirect_format_and_privacy") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    let m = UnionMount::new(&b.join("mnt"), &two_branches(&b));
    fs::create_dir(m.mnt.join("x")).unwrap();
    fs::rename(m.mnt.join("d"), m.mnt.join("x/e")).unwrap();
    fs::rename(m.mnt.join("x/e/sub"), m.mnt.join("sub2")).unwrap();
    assert_eq!(getxattr(&b.join("up/x/e"), REDIRECT).unwrap(), b"d");
    assert_eq!(getxattr(&b.join("up/sub2"), REDIRECT).unwrap(), b"d/sub");
    assert!(b.join("up/.wh.d").exists());
    assert!(b.join("up/x/e/.wh.sub").exists());
    assert_eq!(names(&m.mnt.join("x/e")).unwrap(), set(&["a", "b"]));
    assert_eq!(names(&m.mnt.join("sub2")).unwrap(), set(&["s"]));
    let e = getxattr(&m.mnt.join("x/e"), REDIRECT).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENODATA));
    assert!(!user_and_all_xattrs(&m.mnt.join("x/e")).contains("accord"));
    let e = setxattr(&m.mnt.join("x"), REDIRECT, b"d").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM));
}

fn user_and_all_xattrs(p: &Path) -> String {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    let mut buf = vec![0u8; 65536];
    // SAFETY: valid string and buffer.
    let n = unsafe { libc::llistxattr(c.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    String::from_utf8_lossy(&buf[..n.max(0) as usize]).into_owned()
}

/// A rename stopped after any of its steps (redirect set; whiteout of the old name written;
/// renamed) leaves branches the union reads with every child shown once, at one name.
#[test]
fn renames_stopped_half_way_read_correctly() {
    if !fuse_ok("renames_stopped_half_way_read_correctly") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    let branches = two_branches(&b);
    let up = b.join("up");
    let all = set(&["a", "b", "sub"]);
    // Step 1 done: the upper copy exists with a redirect to its own lower path.
    fs::create_dir(up.join("d")).unwrap();
    setxattr(&up.join("d"), REDIRECT, b"d").unwrap();
    {
        let m = UnionMount::new(&b.join("mnt"), &branches);
        assert_eq!(names(&m.mnt).unwrap(), set(&["d"]));
        assert_eq!(names(&m.mnt.join("d")).unwrap(), all);
    }
    // Step 2 done: the old name is whited out while the upper copy still holds it.
    fs::write(up.join(".wh.d"), "").unwrap();
    {
        let m = UnionMount::new(&b.join("mnt"), &branches);
        assert_eq!(names(&m.mnt).unwrap(), set(&["d"]));
        assert_eq!(names(&m.mnt.join("d")).unwrap(), all);
        assert_eq!(names(&m.mnt.join("d/sub")).unwrap(), set(&["s"]));
    }
    // Step 3 done: renamed.
    fs::rename(up.join("d"), up.join("e")).unwrap();
    let m = UnionMount::new(&b.join("mnt"), &branches);
    assert_eq!(names(&m.mnt).unwrap(), set(&["e"]));
    assert_eq!(names(&m.mnt.join("e")).unwrap(), all);
    assert_eq!(
        fs::read_to_string(m.mnt.join("e/sub/s")).unwrap(),
        "d/sub/s"
    );
}

/// Redirects the union did not write and that could lead outside the branches (absolute,
/// `..`, reserved names, too long) are ignored: the directory shows its upper copy only.
#[test]
fn hostile_redirects_are_ignored() {
    if !fuse_ok("hostile_redirects_are_ignored") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    let branches = two_branches(&b);
    fs::create_dir_all(b.join("outside/secret-dir")).unwrap();
    fs::write(b.join("outside/secret-dir/secret"), "secret").unwrap();
    fs::create_dir_all(b.join("lo/.wh.hidden")).unwrap();
    let long = "a/".repeat(2000) + "a";
    let bad: Vec<(&str, Vec<u8>)> = vec![
        (
            "abs",
            b.join("outside/secret-dir")
                .to_string_lossy()
                .as_bytes()
                .to_vec(),
        ),
        ("dotdot", b"../outside/secret-dir".to_vec()),
        ("inner", b"d/../../outside/secret-dir".to_vec()),
        ("dot", b".".to_vec()),
        ("reserved", b".wh.hidden".to_vec()),
        ("long", long.into_bytes()),
        ("nul", b"d\0x".to_vec()),
    ];
    for (name, value) in &bad {
        fs::create_dir(b.join("up").join(name)).unwrap();
        fs::write(b.join("up").join(name).join("own"), "own").unwrap();
        setxattr(&b.join("up").join(name), REDIRECT, value).unwrap();
    }
    let m = UnionMount::new(&b.join("mnt"), &branches);
    for (name, _) in &bad {
        assert_eq!(
            names(&m.mnt.join(name)).unwrap(),
            set(&["own"]),
            "redirect {name} was followed"
        );
    }
}

/// `-o redirect_dir=off`: a directory with lower parts does not move (EXDEV, so `mv`
/// copies), one entirely in the upper branch does, and no redirect is written.
#[test]
fn redirect_dir_off_keeps_exdev() {
    if !fuse_ok("redirect_dir_off_keeps_exdev") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    let branches = two_branches(&b);
    let m = UnionMount::with_options(&b.join("mnt"), &branches, &["-o", "redirect_dir=off"]);
    let e = fs::rename(m.mnt.join("d"), m.mnt.join("e")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EXDEV));
    fs::create_dir(m.mnt.join("n")).unwrap();
    fs::rename(m.mnt.join("n"), m.mnt.join("n2")).unwrap();
    assert!(getxattr(&b.join("up/n2"), REDIRECT).is_err());
    assert_eq!(names(&m.mnt).unwrap(), set(&["d", "n2"]));
}

/// Listings while a merged directory is renamed back and forth: the root shows it at exactly
/// one name, and a listing of the directory itself always holds every child exactly once.
#[test]
fn listings_during_renames_show_every_child_once() {
    if !fuse_ok("listings_during_renames_show_every_child_once") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    let m = UnionMount::new(&b.join("mnt"), &two_branches(&b));
    fs::write(m.mnt.join("d/upper-file"), "u").unwrap();
    let mnt = m.mnt.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let renamer = {
        let (mnt, stop) = (mnt.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && n < 400 {
                let (from, to) = if n % 2 == 0 { ("d", "e") } else { ("e", "d") };
                fs::rename(mnt.join(from), mnt.join(to)).unwrap();
                n += 1;
            }
            n
        })
    };
    let all = set(&["a", "b", "sub", "upper-file"]);
    let (mut roots, mut inside) = (0, 0);
    let start = std::time::Instant::now();
    while !renamer.is_finished() && start.elapsed().as_secs() < 20 {
        let root = names(&mnt).unwrap();
        let shown = root.intersection(&set(&["d", "e"])).count();
        assert_eq!(shown, 1, "root listing {root:?}");
        roots += 1;
        for name in ["d", "e"] {
            match names(&mnt.join(name)) {
                Ok(children) => {
                    assert_eq!(children, all, "listing of {name}");
                    inside += 1;
                }
                Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT)),
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let renames = renamer.join().unwrap();
    eprintln!("{renames} renames, {roots} root listings, {inside} directory listings");
    assert!(renames > 10 && inside > 10);
}
