//! `mount -t fuse.accord` and an fstab line of type fuse.accord: mount(8) runs
//! `/sbin/mount.fuse.accord` (a link to `accord`), which mounts the union, leaves it served by a
//! daemon and returns; `umount` ends the daemon. Run in a private mount namespace whose /sbin
//! holds only that link, so the host's /sbin is never changed.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

/// Run `script` with `sh -e` in a private mount namespace whose /sbin holds only the link
/// `mount.fuse.accord` -> accord. Returns (success, stdout + stderr).
fn with_helper(dir: &Path, script: &str) -> (bool, String) {
    let sbin = dir.join("sbin");
    fs::create_dir_all(&sbin).unwrap();
    std::os::unix::fs::symlink(accord(), sbin.join("mount.fuse.accord")).unwrap();
    let setup = format!("set -e; mount --bind {} /sbin; {script}", sbin.display());
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &setup])
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// The lines of `text` that start with `key=`, without it.
fn values<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    text.lines()
        .filter_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .collect()
}

/// Shell that prints `DAEMON=PID` for every accord process in this mount namespace (the
/// union's daemon: the helper itself has returned by then).
const FIND_DAEMON: &str = r#"ns=$(readlink /proc/self/ns/mnt); for p in /proc/[0-9]*; do if [ "$(readlink $p/ns/mnt 2>/dev/null)" = "$ns" ] && [ "$(cat $p/comm 2>/dev/null)" = accord ]; then echo "DAEMON=${p#/proc/}"; fi; done"#;

/// Wait (up to 10 s) until process `pid` has ended (gone, or a zombie nobody reaped).
fn wait_ended(pid: &str) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(s) if s.rsplit_once(") ").is_some_and(|(_, r)| r.starts_with('Z')) => return true,
            Ok(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    false
}

fn branches(d: &Path) -> (String, String) {
    for b in ["up", "lo", "mnt"] {
        fs::create_dir_all(d.join(b)).unwrap();
    }
    fs::write(d.join("lo/from-lower"), "lower\n").unwrap();
    let d = d.canonicalize().unwrap();
    (
        format!(
            "{}=rw:{}=ro",
            d.join("up").display(),
            d.join("lo").display()
        ),
        d.join("mnt").display().to_string(),
    )
}

#[test]
fn an_fstab_line_mounts_and_umount_ends_the_daemon() {
    if !fuse_ok("an_fstab_line_mounts_and_umount_ends_the_daemon") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let (source, mnt) = branches(d);
    let fstab = d.join("fstab");
    // The words mount(8), fstab and systemd keep for themselves ride along and are ignored.
    fs::write(
        &fstab,
        format!(
            "# a union of two directories\n{source} {mnt} fuse.accord \
             defaults,noauto,_netdev,nofail,x-systemd.automount,nosuid,allow_other 0 0\n"
        ),
    )
    .unwrap();
    let script = format!(
        "mount --fstab {fstab} {mnt}; \
         echo \"READ=$(cat {mnt}/from-lower)\"; echo new > {mnt}/written; \
         echo \"LINE=$(grep ' {mnt} ' /proc/self/mountinfo)\"; {FIND_DAEMON}; \
         umount {mnt}; echo \"AFTER=$(grep -c ' {mnt} ' /proc/self/mountinfo || true)\"",
        fstab = fstab.display()
    );
    let (ok, said) = with_helper(d, &script);
    assert!(ok, "{said}");
    assert_eq!(values(&said, "READ"), ["lower"], "{said}");
    let line = values(&said, "LINE");
    assert_eq!(line.len(), 1, "{said}");
    let (left, right) = line[0].split_once(" - ").unwrap();
    assert!(
        right.starts_with(&format!("fuse.accord {source} ")),
        "the mount table should show type fuse.accord and the fstab's source: {}",
        line[0]
    );
    assert!(
        left.split(' ').nth(5).unwrap().contains("nosuid"),
        "{}",
        line[0]
    );
    assert_eq!(values(&said, "AFTER"), ["0"], "{said}");
    assert_eq!(fs::read_to_string(d.join("up/written")).unwrap(), "new\n");
    let daemons = values(&said, "DAEMON");
    assert_eq!(daemons.len(), 1, "one daemon serves the union: {said}");
    assert!(wait_ended(daemons[0]), "the daemon outlived umount: {said}");
}

#[test]
fn mount_t_fuse_accord_with_options() {
    if !fuse_ok("mount_t_fuse_accord_with_options") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    let (source, mnt) = branches(d);
    let script = format!(
        "mount -t fuse.accord -o ro,fsname=pool {source} {mnt}; \
         echo \"LINE=$(grep ' {mnt} ' /proc/self/mountinfo)\"; \
         if echo x > {mnt}/x 2>/dev/null; then echo WROTE=yes; fi; \
         {FIND_DAEMON}; umount {mnt}; \
         if mount -t fuse.accord -o nosuid,bogus {source} {mnt} 2>{err}; then echo BOGUS=mounted; \
         else echo \"BOGUS=$?\"; cat {err}; fi",
        err = d.join("err").display()
    );
    let (ok, said) = with_helper(d, &script);
    assert!(ok, "{said}");
    let line = values(&said, "LINE");
    assert_eq!(line.len(), 1, "{said}");
    assert!(line[0].contains(" - fuse.accord pool "), "{}", line[0]);
    assert!(
        values(&said, "WROTE").is_empty(),
        "a ro union took a write: {said}"
    );
    let daemons = values(&said, "DAEMON");
    assert_eq!(daemons.len(), 1, "{said}");
    assert!(wait_ended(daemons[0]), "the daemon outlived umount: {said}");
    // An unknown option: mount(8) passes on the helper's message and its status (1: wrong
    // invocation; mount(8) reads 64 as "some mounts succeeded").
    assert_eq!(values(&said, "BOGUS"), ["1"], "{said}");
    assert!(
        said.contains("mount.fuse.accord: unknown mount option \"bogus\""),
        "{said}"
    );
}
