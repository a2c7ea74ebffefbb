//! Tests of `LocalDir`: which partial files a whole file's receive removes.

use super::*;
use crate::Replica;

fn rel(p: &str) -> RelPath {
    RelPath::new(p.as_bytes()).unwrap()
}

/// Receive `name` whole into `dir` and commit it.
fn receive_into(r: &LocalReplica, dir: &str, name: &str) {
    let d = r.open_dir(&rel(dir)).unwrap();
    let mut body: &[u8] = b"new contents";
    let props = Props {
        mode: 0o644,
        uid: 0,
        gid: 0,
        mtime: Time { sec: 1, nsec: 0 },
        xattrs: None,
    };
    let mask = PropsMask {
        perms: true,
        owner: false,
        times: false,
        xattrs: None,
    };
    let temp = d
        .receive(name.as_bytes(), Incoming::Whole(&mut body), &props, mask)
        .unwrap();
    d.commit(&temp, name.as_bytes(), &Expect::Absent).unwrap();
}

fn partial_of(root: &std::path::Path, dir: &str, name: &str) -> std::path::PathBuf {
    let p = accord_model::partial_name(name.as_bytes()).unwrap();
    root.join(dir).join(String::from_utf8(p).unwrap())
}

/// A directory the replica did not make may hold an earlier run's
/// partial file of a name received whole: it is removed. One the
/// replica made holds none of an earlier run, and is not looked in;
/// once a directory was moved in or removed, the replica knows no
/// directory as its own any more.
#[test]
fn a_whole_file_removes_its_partial_unless_the_replica_made_the_directory() {
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("old")).unwrap();
    std::fs::write(partial_of(t.path(), "old", "f"), b"an earlier run's").unwrap();
    let r = LocalReplica::open(t.path()).unwrap();
    receive_into(&r, "old", "f");
    assert!(!partial_of(t.path(), "old", "f").exists());

    r.open_dir(&RelPath::root()).unwrap().mkdir(b"new").unwrap();
    // Only another process could put one there meanwhile.
    std::fs::write(partial_of(t.path(), "new", "g"), b"not ours").unwrap();
    receive_into(&r, "new", "g");
    assert!(partial_of(t.path(), "new", "g").exists());

    // A directory moved in over the path of one the replica made.
    std::fs::create_dir(t.path().join("elsewhere")).unwrap();
    std::fs::write(partial_of(t.path(), "elsewhere", "h"), b"moved in").unwrap();
    let root = r.open_dir(&RelPath::root()).unwrap();
    std::fs::remove_dir_all(t.path().join("new")).unwrap();
    let elsewhere = root.stat(b"elsewhere").unwrap().unwrap();
    root.rename_from(b"new", &rel("elsewhere"), &Expect::Entry(elsewhere))
        .unwrap();
    receive_into(&r, "new", "h");
    assert!(!partial_of(t.path(), "new", "h").exists());
}

/// A replica remembers at most `MADE_DIRS_MAX` directories it made: in a
/// directory made beyond them, a partial file is looked for and removed
/// as in any directory it did not make.
#[test]
fn the_directories_remembered_are_bounded() {
    let t = tempfile::tempdir().unwrap();
    let r = LocalReplica::open(t.path()).unwrap();
    let root = r.open_dir(&RelPath::root()).unwrap();
    for i in 0..super::super::MADE_DIRS_MAX {
        root.mkdir(format!("d{i}").as_bytes()).unwrap();
    }
    root.mkdir(b"last").unwrap();
    assert_eq!(
        r.made_dirs.lock().unwrap().len(),
        super::super::MADE_DIRS_MAX
    );
    std::fs::write(partial_of(t.path(), "last", "f"), b"not ours").unwrap();
    receive_into(&r, "last", "f");
    assert!(!partial_of(t.path(), "last", "f").exists());
}
