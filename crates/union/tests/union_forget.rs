//! Forgetting: the daemon drops the inodes the kernel forgets. In a test binary of its own,
//! because it makes the kernel drop its caches (which would change inode numbers under the
//! other tests, run in parallel threads of one binary); the tests here take `KERNEL_CACHES`
//! for the same reason, so one's drop does not forget what another is counting.

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::*;

/// Held by each test of this binary for its whole run: the caches it drops are the whole
/// kernel's, not its mount's.
static KERNEL_CACHES: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn caches() -> std::sync::MutexGuard<'static, ()> {
    KERNEL_CACHES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Inodes the kernel forgets are dropped by the daemon too, so its memory follows what the
/// kernel caches instead of every name ever seen; forgotten names still resolve.
#[test]
fn forgotten_inodes_are_dropped() {
    if !fuse_ok("forgotten_inodes_are_dropped") {
        return;
    }
    let _caches = caches();
    let t = tempfile::tempdir().unwrap();
    let b = t.path();
    fs::create_dir_all(b.join("up")).unwrap();
    fs::create_dir_all(b.join("lo/d")).unwrap();
    for i in 0..500 {
        fs::write(b.join(format!("lo/d/l{i}")), "l").unwrap();
    }
    let m = UnionMount::new(
        &b.join("mnt"),
        &[
            format!("{}=rw", b.join("up").display()),
            format!("{}=ro", b.join("lo").display()),
        ],
    );
    let inodes = || daemon_inodes(&m);
    let d = m.mnt.join("d");
    for i in 0..1000 {
        fs::write(d.join(format!("u{i}")), "u").unwrap();
    }
    assert_eq!(fs::read_dir(&d).unwrap().count(), 1500);
    for i in 0..500 {
        fs::remove_file(d.join(format!("u{i}"))).unwrap();
        fs::remove_file(d.join(format!("l{i}"))).unwrap();
    }
    assert!(inodes() > 500, "the kernel still holds the names");
    // Make the kernel drop its unused dentries and inodes: it sends FORGET for each.
    forget_all(&m, 19);
    // Names resolve again (with new inode numbers) and the tree is intact.
    assert_eq!(fs::read_to_string(d.join("u999")).unwrap(), "u");
    let mut left: Vec<String> = fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left.len(), 500);
    assert!(left.iter().all(|n| n.starts_with('u')));
}

/// Drop the kernel's caches until the daemon holds at most `keep` inodes: the directories'
/// views go with their inodes, so the next names are found cold.
fn forget_all(m: &UnionMount, keep: usize) {
    let start = Instant::now();
    loop {
        fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
        let n = daemon_inodes(m);
        if n <= keep {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{n} inodes still alive after the kernel forgot them"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Names looked up, stat'ed and removed cold (the union keeps no view of their directory):
/// in a directory made through the union, which shows only its upper copy, each is one call
/// on the branch; a directory renamed with lower parts shows them through its redirect all
/// the same, and reserved names stay hidden in both.
#[test]
fn cold_names_in_new_and_renamed_directories() {
    if !fuse_ok("cold_names_in_new_and_renamed_directories") {
        return;
    }
    let _caches = caches();
    let t = tempfile::tempdir().unwrap();
    let b = t.path();
    fs::create_dir_all(b.join("up")).unwrap();
    fs::create_dir_all(b.join("lo/old")).unwrap();
    fs::write(b.join("lo/old/x"), "lower x").unwrap();
    fs::write(b.join("lo/old/y"), "lower y").unwrap();
    let m = UnionMount::new(
        &b.join("mnt"),
        &[
            format!("{}=rw", b.join("up").display()),
            format!("{}=ro", b.join("lo").display()),
        ],
    );
    let (new, moved) = (m.mnt.join("new"), m.mnt.join("moved"));
    fs::create_dir(&new).unwrap();
    fs::write(new.join("a"), "a").unwrap();
    fs::write(new.join("b"), "b").unwrap();
    fs::create_dir(new.join("sub")).unwrap();
    fs::rename(m.mnt.join("old"), &moved).unwrap();
    forget_all(&m, 3);
    let gone = |p: &std::path::Path| {
        fs::symlink_metadata(p).err().map(|e| e.kind()) == Some(std::io::ErrorKind::NotFound)
    };
    // A name made in the branch behind the union's back shows; a reserved one does not.
    fs::write(b.join("up/new/c"), "c").unwrap();
    fs::write(b.join("up/new/.wh.hidden"), "").unwrap();
    assert_eq!(fs::read_to_string(new.join("c")).unwrap(), "c");
    assert!(
        gone(&new.join(".wh.hidden")),
        "a reserved name stays hidden"
    );
    assert!(gone(&new.join("nothing")));
    assert_eq!(fs::read_to_string(moved.join("x")).unwrap(), "lower x");
    forget_all(&m, 3);
    let err = fs::remove_file(new.join("sub")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EISDIR), "{err}");
    fs::remove_file(new.join("a")).unwrap();
    assert!(gone(&new.join("a")) && gone(&b.join("up/new/a")));
    assert!(gone(&b.join("up/new/.wh.a")), "nothing below to hide");
    let err = fs::remove_file(new.join(".wh.hidden")).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
    fs::remove_file(moved.join("x")).unwrap();
    assert!(gone(&moved.join("x")));
    assert_eq!(fs::read_to_string(moved.join("y")).unwrap(), "lower y");
    let names = |d: &std::path::Path| {
        let mut v: Vec<String> = (fs::read_dir(d).unwrap())
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(&new), ["b", "c", "sub"]);
    assert_eq!(names(&moved), ["y"]);
    assert_eq!(fs::read_to_string(b.join("lo/old/x")).unwrap(), "lower x");
}
