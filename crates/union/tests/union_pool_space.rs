//! A pool's space rules on small file systems (tmpfs mounts of 2M and 16M): `minfreespace`
//! keeps new files off a branch with too little room, and `moveonenospc` finishes a write that
//! fills its branch on another one, with the file's bytes intact. Where mergerfs is installed
//! the same steps run on it too, and every branch must end up holding the same files.

mod common;

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fuse_ok, have, is_mounted, unmount, Tmpfs, UnionMount};

struct Mergerfs(PathBuf);

impl Drop for Mergerfs {
    fn drop(&mut self) {
        unmount(&self.0, "fusermount3", &["-u"]);
    }
}

const OPTS: &str = "category.create=ff,minfreespace=1M,moveonenospc=true";

fn bytes(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 % 253) as u8).collect()
}

/// The steps: a small file lands on the first branch (ff); a 3M file started there fills it
/// (2M) and must move on; once the first branch has less than 1M free a new file skips it.
fn steps(mnt: &Path) {
    fs::write(mnt.join("small"), b"small").unwrap();
    let mut f = fs::File::create(mnt.join("big")).unwrap();
    for chunk in bytes(3 << 20).chunks(256 << 10) {
        f.write_all(chunk)
            .expect("a write that fills its branch moves the file and goes on");
    }
    drop(f);
    assert_eq!(fs::read(mnt.join("big")).unwrap(), bytes(3 << 20));
    fs::write(mnt.join("filler"), bytes(1536 << 10)).unwrap();
    fs::write(mnt.join("after"), b"after").unwrap();
}

/// Which branch holds each name.
fn placement(branches: &[Tmpfs]) -> Vec<Vec<String>> {
    let names = |b: &Tmpfs| -> Vec<String> {
        let mut v: Vec<String> = (fs::read_dir(&b.0).unwrap())
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    branches.iter().map(names).collect()
}

#[test]
fn full_branches_move_writes_and_take_no_new_files() {
    let test = "full_branches_move_writes_and_take_no_new_files";
    if !fuse_ok(test) {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let ours = [
        Tmpfs::new(&t.path().join("o0"), 2),
        Tmpfs::new(&t.path().join("o1"), 16),
    ];
    {
        let list: Vec<String> = ours.iter().map(|b| b.0.display().to_string()).collect();
        let mnt = t.path().join("mnt");
        let _u = UnionMount::with_options(&mnt, &list, &["-o", OPTS]);
        steps(&mnt);
    }
    let got = placement(&ours);
    assert_eq!(
        got,
        [vec!["filler", "small"], vec!["after", "big"]],
        "big moved off the full branch; after skipped the branch below minfreespace"
    );
    assert_eq!(fs::read(ours[1].0.join("big")).unwrap(), bytes(3 << 20));
    if !have("mergerfs") {
        eprintln!("{test}: mergerfs is not installed; not compared with it");
        return;
    }
    let theirs = [
        Tmpfs::new(&t.path().join("m0"), 2),
        Tmpfs::new(&t.path().join("m1"), 16),
    ];
    let list: Vec<String> = theirs.iter().map(|b| b.0.display().to_string()).collect();
    let mnt = t.path().join("mnt-mergerfs");
    fs::create_dir_all(&mnt).unwrap();
    let ok = Command::new("mergerfs")
        .args(["-o", OPTS, &list.join(":")])
        .arg(&mnt)
        .status()
        .unwrap()
        .success();
    assert!(ok && is_mounted(&mnt), "mergerfs did not mount");
    let m = Mergerfs(mnt.clone());
    steps(&mnt);
    drop(m);
    assert_eq!(placement(&theirs), got, "mergerfs placed the files alike");
}
