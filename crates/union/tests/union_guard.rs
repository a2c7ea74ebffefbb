//! Issue 14, section 2: branches that would make a union wait on itself are refused, and the
//! messages of `accord union` name what is wrong.

mod common;

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// How long a listing of a live union may take before it counts as hung.
const HUNG: Duration = Duration::from_secs(5);

fn two_branches(b: &Path) -> Vec<String> {
    fs::create_dir_all(b.join("up")).unwrap();
    fs::create_dir_all(b.join("lo")).unwrap();
    vec![
        format!("{}=rw", b.join("up").display()),
        format!("{}=ro", b.join("lo").display()),
    ]
}

/// Whether a walk of the union (a few levels: a union that shows itself inside itself hangs
/// only deeper down) ends within `HUNG`. A union that does not is freed by aborting its FUSE
/// connection, so a regression fails this test instead of hanging the suite.
fn answers(mnt: &Path) -> bool {
    let mut ls = Command::new("find")
        .arg(mnt)
        .args(["-maxdepth", "12"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while start.elapsed() < HUNG {
        if ls.try_wait().unwrap().is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    abort_connection(mnt);
    let _ = ls.kill();
    let _ = ls.wait();
    false
}

/// Abort the FUSE connection of the mount at `mnt` (found in the mount table: a stat of the
/// hung mount would hang too).
fn abort_connection(mnt: &Path) {
    let info = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mnt = mnt.to_string_lossy().replace(' ', "\\040");
    let Some(dev) = info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(4) == Some(&mnt.as_str())).then(|| f[2].to_string())
    }) else {
        return;
    };
    let minor = dev.split(':').nth(1).unwrap();
    let conn = Path::new("/sys/fs/fuse/connections");
    if !conn.join(minor).exists() {
        let _ = Command::new("mount")
            .args(["-t", "fusectl", "fusectl"])
            .arg(conn)
            .status();
    }
    let _ = fs::write(conn.join(minor).join("abort"), "1");
}

/// `accord union ARGS...`: (success, stderr).
fn union(args: &[&OsStr]) -> (bool, String) {
    let mut all = vec![OsStr::new("union")];
    all.extend_from_slice(args);
    let (ok, _, err) = accord_cmd(&all);
    (ok, err)
}

/// Adding the union's own mount point, a directory inside it, a directory inside another
/// union of ours or one that holds the mount point as a branch, and a snapshot into the
/// union, are refused (by the command and,
/// asked directly over the control socket, by the daemon), and the union keeps answering.
/// Before the fix each was accepted and every access to the union then blocked for good.
#[test]
fn branches_inside_a_union_are_refused() {
    if !fuse_ok("branches_inside_a_union_are_refused") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    let m = UnionMount::new(&b.join("mnt"), &two_branches(&b.join("one")));
    let other = UnionMount::new(&b.join("other"), &two_branches(&b.join("two")));
    fs::create_dir(m.mnt.join("sub")).unwrap();
    fs::create_dir(other.mnt.join("sub")).unwrap();
    let mnt = m.mnt.as_os_str();
    let inside = m.mnt.join("sub");
    let elsewhere = other.mnt.join("sub");
    let snap = m.mnt.join("snap");
    let attempts: Vec<(&str, Vec<&OsStr>)> = vec![
        ("add MNT MNT", vec!["add".as_ref(), mnt, mnt]),
        (
            "add MNT MNT/sub",
            vec!["add".as_ref(), mnt, inside.as_os_str()],
        ),
        (
            "add MNT OTHER/sub",
            vec!["add".as_ref(), mnt, elsewhere.as_os_str()],
        ),
        (
            "snapshot MNT MNT/snap",
            vec!["snapshot".as_ref(), mnt, snap.as_os_str()],
        ),
        ("add MNT PARENT", vec!["add".as_ref(), mnt, b.as_os_str()]),
    ];
    let mut wrong = Vec::new();
    for (what, args) in attempts {
        let (ok, err) = union(&args);
        // Probed after each attempt, so a union hung by one is freed before the next.
        let alive = answers(&m.mnt) && answers(&other.mnt);
        let said = err.contains("inside the accord union") || err.contains("contain itself");
        if ok || !alive || !said {
            wrong.push(format!(
                "{what}: exit ok={ok}, alive={alive}, stderr {err:?}"
            ));
        }
    }
    // The daemon's own check, without the command's.
    for dir in [m.mnt.clone(), inside.clone(), elsewhere.clone(), b.clone()] {
        let asked = accord_union::control::request(
            &m.mnt,
            &["add".as_ref(), dir.as_os_str(), "0".as_ref(), "ro".as_ref()],
        );
        let alive = answers(&m.mnt);
        if asked.is_ok() || !alive {
            wrong.push(format!(
                "daemon add {}: {asked:?}, alive={alive}",
                dir.display()
            ));
        }
    }
    assert!(wrong.is_empty(), "accepted or hung: {wrong:#?}");
    assert!(!snap.exists(), "a refused snapshot created its directory");
    assert_eq!(
        m.ctl(&["list"]).lines().count(),
        2,
        "the branches are unchanged"
    );
}

/// A branch inside another union of ours is refused at mount as well.
#[test]
fn mount_refuses_a_branch_inside_a_union() {
    if !fuse_ok("mount_refuses_a_branch_inside_a_union") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    let m = UnionMount::new(&b.join("mnt"), &two_branches(&b.join("one")));
    fs::create_dir(m.mnt.join("sub")).unwrap();
    fs::create_dir_all(b.join("mnt2")).unwrap();
    let (ok, err) = union(&[
        "mount".as_ref(),
        b.join("mnt2").as_os_str(),
        m.mnt.join("sub").as_os_str(),
    ]);
    let alive = answers(&m.mnt);
    if ok {
        let _ = accord_union::unmount(&b.join("mnt2"));
    }
    assert!(!ok && alive, "accepted={ok} alive={alive}: {err}");
    assert!(err.contains("inside the accord union"), "{err}");
}

fn mount_fails(args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["union", "mount"];
    all.extend_from_slice(args);
    let out = Command::new(accord()).args(&all).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Messages a new user meets: a missing mount point is named, `DIR=xx` is a bad mode, not a
/// directory name, a mode given as a branch of its own says where it goes, and a file is no
/// mount point.
#[test]
fn mount_messages_name_what_is_wrong() {
    let t = tempfile::tempdir().unwrap();
    let b = t.path().canonicalize().unwrap();
    let lo = b.join("lo");
    fs::create_dir_all(&lo).unwrap();
    fs::create_dir_all(b.join("mnt")).unwrap();
    let missing = b.join("nonexistent");
    let (code, err) = mount_fails(&[missing.to_str().unwrap(), "ro"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("mount point {}", missing.display())),
        "the missing mount point is named: {err}"
    );
    let mnt = b.join("mnt");
    let bad = format!("{}=xx", lo.display());
    let (code, err) = mount_fails(&[mnt.to_str().unwrap(), &bad]);
    assert_eq!(code, Some(64), "a bad mode is a usage error: {err}");
    assert!(err.contains("unknown mode \"xx\""), "{err}");
    // The issue's own spelling.
    let (code, err) = mount_fails(&[mnt.to_str().unwrap(), "ro=xx"]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("branch ro=xx: unknown mode \"xx\""), "{err}");
    let (code, err) = mount_fails(&[mnt.to_str().unwrap(), lo.to_str().unwrap(), "ro"]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("a mode goes after its directory"), "{err}");
    // A mode with a mode: `rw=ro` names no directory "rw" either.
    let (code, err) = mount_fails(&[mnt.to_str().unwrap(), lo.to_str().unwrap(), "rw=ro"]);
    assert_eq!(code, Some(64), "{err}");
    assert!(err.contains("a mode goes after its directory"), "{err}");
    // A file as mount point: FUSE would mount the union's root over it (exit 0 before).
    let file = b.join("file");
    fs::write(&file, "").unwrap();
    let (code, err) = mount_fails(&[file.to_str().unwrap(), lo.to_str().unwrap()]);
    if code == Some(0) {
        let _ = accord_union::unmount(&file);
    }
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "mount point {} is not a directory",
            file.display()
        )),
        "{err}"
    );
}

/// `snapshot MNT FILE` names the file and says it must be a directory.
#[test]
fn snapshot_onto_a_file_says_why() {
    if !fuse_ok("snapshot_onto_a_file_says_why") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let b: PathBuf = t.path().canonicalize().unwrap();
    let m = UnionMount::new(&b.join("mnt"), &two_branches(&b));
    let file = b.join("file");
    fs::write(&file, "").unwrap();
    let (ok, err) = union(&["snapshot".as_ref(), m.mnt.as_os_str(), file.as_os_str()]);
    assert!(!ok);
    assert!(
        err.contains(&format!("{} exists and is not a directory", file.display())),
        "{err}"
    );
    assert!(
        err.contains("a path that does not exist yet"),
        "what to do: {err}"
    );
}
