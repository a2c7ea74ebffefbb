//! A pool keeps its cached directory listings up to date through unlinks and renames (patched
//! in place rather than read again from every branch), and reads them again where a patch
//! could be wrong: a copy left on an `ro` branch, a copy of another kind below, and a rename
//! of one file's two hard links, which leaves both names. A directory renamed in one branch
//! only: the files below it show the moved copies' bytes, not pages cached of another copy.

mod common;

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::{fuse_ok, Tmpfs, UnionMount};

fn names(dir: &Path) -> BTreeSet<String> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect()
}

/// Branches b0..b{n} under `root`, made and named for a mount.
fn branches(root: &Path, n: usize) -> (Vec<PathBuf>, Vec<String>) {
    let dirs: Vec<PathBuf> = (0..n).map(|i| root.join(format!("b{i}"))).collect();
    for d in &dirs {
        fs::create_dir_all(d).unwrap();
    }
    let spec = dirs.iter().map(|d| d.display().to_string()).collect();
    (dirs, spec)
}

fn files_in(dirs: &[PathBuf], sub: &str) -> usize {
    dirs.iter()
        .filter_map(|d| fs::read_dir(d.join(sub)).ok())
        .map(|r| r.count())
        .sum()
}

#[test]
fn unlinks_and_renames_show_at_once_in_a_spread_directory() {
    if !fuse_ok("unlinks_and_renames_show_at_once_in_a_spread_directory") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (dirs, spec) = branches(t.path(), 4);
    let mnt = t.path().join("mnt");
    // rand spreads the names (and clones the directory) over all four branches.
    let _u = UnionMount::with_options(&mnt, &spec, &["-o", "category.create=rand,minfreespace=1K"]);
    let d = mnt.join("d");
    fs::create_dir(&d).unwrap();
    fs::create_dir(mnt.join("e")).unwrap();
    let mut expect = BTreeSet::new();
    for i in 0..600 {
        fs::write(d.join(format!("f{i}")), format!("{i}")).unwrap();
        expect.insert(format!("f{i}"));
    }
    let used = dirs.iter().filter(|b| b.join("d").is_dir()).count();
    assert!(used > 1, "the names went to {used} branch(es), not spread");
    assert_eq!(names(&d), expect);
    for i in (0..600).step_by(3) {
        fs::remove_file(d.join(format!("f{i}"))).unwrap();
        expect.remove(&format!("f{i}"));
        assert!(!d.join(format!("f{i}")).exists(), "f{i} gone at once");
    }
    for i in (1..600).step_by(3) {
        fs::rename(d.join(format!("f{i}")), d.join(format!("g{i}"))).unwrap();
        expect.remove(&format!("f{i}"));
        expect.insert(format!("g{i}"));
    }
    for i in (2..600).step_by(30) {
        fs::rename(d.join(format!("f{i}")), mnt.join("e").join(format!("h{i}"))).unwrap();
        expect.remove(&format!("f{i}"));
    }
    // Over an existing name: the old file goes, the moved one takes its name.
    fs::rename(d.join("f5"), d.join("g4")).unwrap();
    expect.remove("f5");
    assert_eq!(names(&d), expect, "the listing right after the changes");
    assert_eq!(fs::read_to_string(d.join("g4")).unwrap(), "5");
    assert_eq!(fs::read_to_string(d.join("g7")).unwrap(), "7");
    assert_eq!(fs::read_to_string(mnt.join("e/h32")).unwrap(), "32");
    assert_eq!(files_in(&dirs, "d"), expect.len(), "every branch agrees");
    fs::remove_dir_all(&d).unwrap();
    assert!(!d.exists());
    assert_eq!(files_in(&dirs, "d"), 0, "nothing left in any branch");
    assert_eq!(names(&mnt), BTreeSet::from(["e".to_string()]));
}

#[test]
fn what_an_unlink_or_rename_leaves_below_shows() {
    if !fuse_ok("what_an_unlink_or_rename_leaves_below_shows") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (dirs, mut spec) = branches(t.path(), 3);
    spec[2].push_str("=ro");
    fs::write(dirs[0].join("kept"), "rw").unwrap();
    fs::write(dirs[2].join("kept"), "ro").unwrap();
    fs::write(dirs[0].join("moved"), "rw").unwrap();
    fs::write(dirs[2].join("moved"), "ro").unwrap();
    fs::write(dirs[0].join("shadow"), "file").unwrap();
    fs::create_dir(dirs[2].join("shadow")).unwrap();
    fs::write(dirs[2].join("shadow/inside"), "x").unwrap();
    let mnt = t.path().join("mnt");
    let _u = UnionMount::with_options(&mnt, &spec, &["-o", "category.create=ff,minfreespace=1K"]);
    assert_eq!(fs::read_to_string(mnt.join("kept")).unwrap(), "rw");
    fs::remove_file(mnt.join("kept")).unwrap();
    assert_eq!(
        fs::read_to_string(mnt.join("kept")).unwrap(),
        "ro",
        "the copy on the ro branch shows once the writable one is gone"
    );
    fs::rename(mnt.join("moved"), mnt.join("there")).unwrap();
    assert_eq!(fs::read_to_string(mnt.join("there")).unwrap(), "rw");
    assert_eq!(fs::read_to_string(mnt.join("moved")).unwrap(), "ro");
    assert!(mnt.join("shadow").is_file());
    fs::remove_file(mnt.join("shadow")).unwrap();
    assert!(
        mnt.join("shadow").is_dir(),
        "the ro branch's directory shows"
    );
    assert_eq!(
        names(&mnt.join("shadow")),
        BTreeSet::from(["inside".to_string()])
    );
    // Two hard links of one file: rename(2) from one to the other changes nothing.
    fs::write(mnt.join("one"), "1").unwrap();
    fs::hard_link(mnt.join("one"), mnt.join("two")).unwrap();
    fs::rename(mnt.join("one"), mnt.join("two")).unwrap();
    assert!(mnt.join("one").exists() && mnt.join("two").exists());
    assert_eq!(fs::metadata(mnt.join("one")).unwrap().nlink(), 2);
    let all = names(&mnt);
    for n in ["kept", "moved", "there", "shadow", "one", "two"] {
        assert!(all.contains(n), "{n} listed: {all:?}");
    }
}

/// A directory renamed in one branch while another keeps its copy under the old name: a file
/// below the new name shows the moved copy's bytes, not the ones read before the rename (the
/// kernel's cached pages of it belonged to the other branch's copy; same size, same time).
#[test]
fn a_file_below_a_renamed_directory_shows_the_moved_copy() {
    if !fuse_ok("a_file_below_a_renamed_directory_shows_the_moved_copy") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    // Both writable; `func.rename=lfs` moves only the copy on the smaller branch, while a
    // lookup (ff) shows the first branch's.
    let (dirs, spec) = branches(t.path(), 2);
    let _mounts = [Tmpfs::new(&dirs[0], 8), Tmpfs::new(&dirs[1], 4)];
    let when = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    for (d, bytes) in dirs.iter().zip(["first", "other"]) {
        fs::create_dir_all(d.join("d/sub")).unwrap();
        let f = d.join("d/sub/x");
        fs::write(&f, bytes).unwrap();
        let h = fs::File::options().write(true).open(&f).unwrap();
        h.set_modified(when).unwrap();
    }
    let mnt = t.path().join("mnt");
    let opts = "category.create=ff,func.rename=lfs,minfreespace=1K";
    let _u = UnionMount::with_options(&mnt, &spec, &["-o", opts]);
    assert_eq!(fs::read_to_string(mnt.join("d/sub/x")).unwrap(), "first");
    fs::rename(mnt.join("d"), mnt.join("e")).unwrap();
    assert!(dirs[1].join("e/sub/x").is_file() && !dirs[1].join("d").exists());
    assert_eq!(fs::read_to_string(mnt.join("e/sub/x")).unwrap(), "other");
    assert_eq!(fs::read_to_string(mnt.join("d/sub/x")).unwrap(), "first");
}
