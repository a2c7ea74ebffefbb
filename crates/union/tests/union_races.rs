//! Races between requests served at the same time: a path the daemon resolves for one request
//! must not name another file by the time it is used because a rename ran in between.

mod common;

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

fn mount(b: &Path) -> UnionMount {
    UnionMount::new(
        &b.join("mnt"),
        &[
            format!("{}=rw", b.join("up").display()),
            format!("{}=ro", b.join("lo").display()),
        ],
    )
}

/// Two files swap names through the union over and over while another thread opens one of the
/// names for writing (every other time with O_TRUNC), writes the mark of the inode the open
/// reached and sets that inode's mode mark. An open or a change the daemon resolved to a path
/// that a rename meanwhile gave to the other file would write one file's mark into the other
/// (or truncate the other). (The attribute reads in between must not fail either.)
#[test]
fn opens_never_reach_a_file_renamed_meanwhile() {
    if !fuse_ok("opens_never_reach_a_file_renamed_meanwhile") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path();
    fs::create_dir_all(b.join("up")).unwrap();
    fs::create_dir_all(b.join("lo")).unwrap();
    fs::write(b.join("up/a"), "x").unwrap();
    fs::write(b.join("up/b"), "y").unwrap();
    let branch_x = fs::metadata(b.join("up/a")).unwrap().ino();
    let branch_y = fs::metadata(b.join("up/b")).unwrap().ino();
    let m = mount(b);
    let (x, y) = (
        fs::metadata(m.mnt.join("a")).unwrap().ino(),
        fs::metadata(m.mnt.join("b")).unwrap().ino(),
    );
    // Held open, so the kernel keeps both inodes and their numbers stay (a name looked up
    // again after the kernel evicted its inode, say under memory pressure, may get a new one).
    let _held = (
        fs::File::open(m.mnt.join("a")).unwrap(),
        fs::File::open(m.mnt.join("b")).unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (mnt, stop) = (m.mnt.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::Relaxed) {
                fs::rename(mnt.join("a"), mnt.join("t")).unwrap();
                fs::rename(mnt.join("b"), mnt.join("a")).unwrap();
                fs::rename(mnt.join("t"), mnt.join("b")).unwrap();
                swaps += 1;
            }
            swaps
        })
    };
    let start = Instant::now();
    let mut opens = 0u64;
    while start.elapsed() < Duration::from_secs(3) {
        let truncate = opens % 2 == 1;
        let f = match OpenOptions::new()
            .write(true)
            .truncate(truncate)
            .open(m.mnt.join("a"))
        {
            Ok(f) => f,
            // "a" is briefly absent in every swap.
            Err(_) => continue,
        };
        let ino = f.metadata().unwrap().ino();
        let mark = if ino == x {
            b"x"
        } else if ino == y {
            b"y"
        } else {
            panic!("unexpected inode {ino}")
        };
        f.write_all_at(mark, 0).unwrap();
        // A change of attributes must reach the same file (fchmod: by inode, not by path).
        let mode = if ino == x { 0o640 } else { 0o604 };
        f.set_permissions(fs::Permissions::from_mode(mode)).unwrap();
        opens += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    eprintln!("{opens} opens during {swaps} swaps");
    for e in fs::read_dir(b.join("up")).unwrap() {
        let e = e.unwrap();
        let ino = e.metadata().unwrap().ino();
        let want = if ino == branch_x {
            "x"
        } else if ino == branch_y {
            "y"
        } else {
            continue;
        };
        let got = fs::read_to_string(e.path()).unwrap();
        assert_eq!(got, want, "{:?} holds another file's mark", e.file_name());
        let mode = e.metadata().unwrap().mode() & 0o777;
        let want_mode = if want == "x" { 0o640 } else { 0o604 };
        assert_eq!(
            mode,
            want_mode,
            "{:?} has another file's mode",
            e.file_name()
        );
    }
}

/// A directory is renamed back and forth through the union while another thread looks up
/// names inside it that the kernel has not seen yet. A lookup that raced a rename (its path
/// resolved under the old name) must not leave the kernel caching the name as absent: right
/// after the renames stop, every name is there.
#[test]
fn lookups_racing_a_directory_rename_cache_no_absence() {
    if !fuse_ok("lookups_racing_a_directory_rename_cache_no_absence") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path();
    fs::create_dir_all(b.join("up/d1")).unwrap();
    fs::create_dir_all(b.join("lo")).unwrap();
    const N: usize = 2000;
    for i in 0..N {
        fs::write(b.join(format!("up/d1/f{i}")), "").unwrap();
    }
    let m = mount(b);
    let mut missing = Vec::new();
    for round in 0..20 {
        let stop = Arc::new(AtomicBool::new(false));
        let renamer = {
            let (mnt, stop) = (m.mnt.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    fs::rename(mnt.join("d1"), mnt.join("d2")).unwrap();
                    fs::rename(mnt.join("d2"), mnt.join("d1")).unwrap();
                }
            })
        };
        let names: Vec<String> = (round * 100..(round + 1) * 100)
            .map(|i| format!("f{i}"))
            .collect();
        for n in &names {
            // Whichever name the directory has at the moment.
            let _ = fs::symlink_metadata(m.mnt.join("d1").join(n))
                .or_else(|_| fs::symlink_metadata(m.mnt.join("d2").join(n)));
        }
        stop.store(true, Ordering::Relaxed);
        renamer.join().unwrap();
        // Well within the one second a cached absence would last.
        for n in &names {
            if fs::symlink_metadata(m.mnt.join("d1").join(n)).is_err() {
                missing.push(n.clone());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "names shown as absent after the renames stopped: {missing:?}"
    );
}

/// Two directories swap names through the union over and over (x -> t, y -> x, t -> y) while
/// another thread lists `x/d` again and again through a descriptor it holds (so the kernel
/// never walks the changing path: every failure is the daemon's). A listing whose path was
/// resolved just before a rename must be read again: it must never fail, and never show the
/// names or the attributes of the other directory's files (`y/d` holds the same names, with
/// other sizes), which the path names for a moment.
#[test]
fn listings_racing_a_parent_swap_show_their_own_directory() {
    if !fuse_ok("listings_racing_a_parent_swap_show_their_own_directory") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path();
    // Only on the writable branch: a directory that also exists below cannot be renamed.
    for (dir, size) in [("x", 1), ("y", 7)] {
        fs::create_dir_all(b.join("up").join(dir).join("d")).unwrap();
        for n in ["one", "two"] {
            fs::write(b.join("up").join(dir).join("d").join(n), vec![b'.'; size]).unwrap();
        }
    }
    fs::create_dir_all(b.join("lo")).unwrap();
    let m = mount(b);
    listings_while_renaming(&m.mnt, "x/d", &[("x", "t"), ("y", "x"), ("t", "y")], 1);
}

/// A directory's parent is renamed back and forth through the union while another thread
/// lists the directory through a descriptor it holds. A listing whose path was resolved just
/// before a rename (so the path named nothing) must be read again, not fail with ENOENT or
/// leave names out.
#[test]
fn listings_racing_a_parent_rename_never_fail() {
    if !fuse_ok("listings_racing_a_parent_rename_never_fail") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path();
    fs::create_dir_all(b.join("up/p1/d")).unwrap();
    fs::create_dir_all(b.join("lo")).unwrap();
    fs::write(b.join("up/p1/d/one"), "").unwrap();
    fs::write(b.join("up/p1/d/two"), "").unwrap();
    let m = mount(b);
    listings_while_renaming(&m.mnt, "p1/d", &[("p1", "p2"), ("p2", "p1")], 0);
}

/// For 3 s, list `dir` of the union at `mnt` through a descriptor held open while another
/// thread runs the `renames` (from, to) in a loop; every listing must be `one` and `two`, each
/// `size` bytes long (as the attributes the listing handed to the kernel say).
fn listings_while_renaming(mnt: &Path, dir: &str, renames: &[(&str, &str)], size: u64) {
    let held = fs::File::open(mnt.join(dir)).unwrap();
    let via = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&held));
    let stop = Arc::new(AtomicBool::new(false));
    let renamer = {
        let (stop, mnt) = (stop.clone(), mnt.to_path_buf());
        let renames: Vec<(String, String)> = renames
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        std::thread::spawn(move || {
            let mut rounds = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for (from, to) in &renames {
                    fs::rename(mnt.join(from), mnt.join(to)).unwrap();
                }
                rounds += 1;
            }
            rounds
        })
    };
    let want = [("one".to_string(), size), ("two".to_string(), size)];
    let mut failures = Vec::new();
    let start = Instant::now();
    let mut listings = 0;
    while start.elapsed() < Duration::from_secs(3) {
        match fs::read_dir(&via) {
            Ok(rd) => {
                let mut names: Vec<(String, u64)> = rd
                    .map(|e| {
                        let e = e.unwrap();
                        let len = e.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
                        (e.file_name().into_string().unwrap(), len)
                    })
                    .collect();
                names.sort();
                if names != want {
                    failures.push(format!("listed {names:?}"));
                }
            }
            Err(e) => failures.push(e.to_string()),
        }
        listings += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = renamer.join().unwrap();
    assert!(rounds > 100, "only {rounds} rounds of renames ran");
    assert!(
        failures.is_empty(),
        "{} of {listings} listings failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}

/// Listings racing renames of every kind never fail: for 3 s one thread renames the parent
/// of a listed directory back and forth, files inside it back and forth, and lower files out
/// of a directory that exists only in a read-only branch (so that directory is copied up and
/// whiteouts appear while it is listed); others open and list both directories, through a
/// held descriptor and by path, and must never see an error.
#[test]
fn listings_racing_renames_never_fail() {
    if !fuse_ok("listings_racing_renames_never_fail") {
        return;
    }
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    fs::create_dir_all(b.join("up/p1/d")).unwrap();
    fs::create_dir_all(b.join("lo/q")).unwrap();
    fs::create_dir_all(b.join("lo/r")).unwrap();
    for i in 0..20 {
        fs::write(b.join(format!("up/p1/d/f{i}")), "").unwrap();
    }
    for i in 0..2000 {
        fs::write(b.join(format!("lo/q/l{i}")), "").unwrap();
    }
    let m = UnionMount::new(
        &b.join("mnt"),
        &[
            format!("{}=rw", b.join("up").display()),
            format!("{}=ro", b.join("lo").display()),
        ],
    );
    let mnt = m.mnt.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let held = fs::File::open(mnt.join("p1/d")).unwrap();
    let via = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&held));
    let renamer = {
        let (mnt, stop) = (mnt.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                fs::rename(mnt.join("p1"), mnt.join("p2")).unwrap();
                fs::rename(mnt.join("p2/d/f0"), mnt.join("p2/d/g0")).unwrap();
                fs::rename(mnt.join("p2"), mnt.join("p1")).unwrap();
                fs::rename(mnt.join("p1/d/g0"), mnt.join("p1/d/f0")).unwrap();
                if i < 2000 {
                    let (from, to) = (format!("q/l{i}"), format!("r/l{i}"));
                    fs::rename(mnt.join(from), mnt.join(to)).unwrap();
                    i += 1;
                }
            }
        })
    };
    let listers: Vec<_> = [via, mnt.join("q").display().to_string()]
        .into_iter()
        .map(|dir| {
            let (stop, failures) = (stop.clone(), failures.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // (Entries are not stat'ed here: a name renamed away since the listing
                    // would rightly be missing. The listing's own lookups run in the daemon.)
                    let listed =
                        fs::read_dir(&dir).and_then(|mut rd| rd.try_for_each(|e| e.map(drop)));
                    if let Err(e) = listed {
                        failures.lock().unwrap().push(format!("{dir}: {e}"));
                    }
                    n += 1;
                }
                n
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    renamer.join().unwrap();
    let listed: Vec<u64> = listers.into_iter().map(|l| l.join().unwrap()).collect();
    let failures = failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} listings failed (of {listed:?}): {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
}
