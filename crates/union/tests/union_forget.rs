//! Forgetting: the daemon drops the inodes the kernel forgets. In a test binary of its own,
//! because it makes the kernel drop its caches (which would change inode numbers under the
//! other tests, run in parallel threads of one binary).

mod common;

use std::fs;
use std::time::{Duration, Instant};

use common::*;

/// Inodes the kernel forgets are dropped by the daemon too, so its memory follows what the
/// kernel caches instead of every name ever seen; forgotten names still resolve.
#[test]
fn forgotten_inodes_are_dropped() {
    if !fuse_ok("forgotten_inodes_are_dropped") {
        return;
    }
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
    let start = Instant::now();
    loop {
        fs::write("/proc/sys/vm/drop_caches", "2").unwrap();
        let n = inodes();
        if n < 20 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{n} inodes still alive after the kernel forgot them"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
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
