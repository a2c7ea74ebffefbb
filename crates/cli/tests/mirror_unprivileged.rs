//! `accord mirror` run by an unprivileged user (65534, through setpriv, so
//! these tests need root to set it up): it does not lock itself out of
//! directories whose modes it copied, updates files in read-only
//! directories, reads destination directories it cannot search, leaves
//! them alone in a dry run, and names the operation a permission error
//! stopped.

mod mirror_common;
use mirror_common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// The temp dir of `roots()`, handed to user 65534 (nobody), with `src`
/// created; `None` (after saying why) when that cannot be done here.
fn nobody_roots() -> Option<(tempfile::TempDir, PathBuf, PathBuf, PathBuf)> {
    if !need_root("running the mirror as user 65534") || !need("setpriv", "util-linux") {
        return None;
    }
    let (t, src, dst, state) = roots();
    std::fs::create_dir(&src).unwrap();
    Some((t, src, dst, state))
}

/// Give the whole tree under `dir` to user 65534.
fn give_to_nobody(dir: &Path) {
    sh(&format!("chown -R 65534:65534 '{}'", dir.display()));
}

/// `accord mirror -i ARGS` as user 65534, with no supplementary groups.
fn mirror_as_nobody(state: &Path, args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin())
        .arg("mirror")
        .arg("-i")
        .args(args)
        .env("ACCORD_STATE_DIR", state)
        .output()
        .expect("run accord through setpriv")
}

fn assert_same_trees(src: &Path, dst: &Path) {
    let d = differences(&snapshot(src), &snapshot(dst));
    assert!(d.is_empty(), "{d:#?}");
}

/// As an unprivileged user, a source directory of mode 000 was once
/// copied with its mode, and every later run stopped with "cannot read
/// destination" (exit 3), even after the source was fixed.
#[test]
fn nonroot_mirror_does_not_lock_itself_out_of_a_copied_mode_000() {
    let Some((t, src, dst, state)) = nobody_roots() else {
        return;
    };
    std::fs::create_dir(src.join("locked")).unwrap();
    std::fs::create_dir(src.join("ro")).unwrap();
    std::fs::write(src.join("ro/f"), b"one").unwrap();
    give_to_nobody(t.path());
    chmod(&src.join("ro"), 0o555);
    chmod(&src.join("locked"), 0o000);
    let args = [s(&src), s(&dst)];

    // The source's own 000 directory cannot be read (exit 2, deletions
    // suspended), but it is copied, with its mode.
    let o = mirror_as_nobody(&state, &args);
    assert_exit(&o, 2);
    assert_eq!(mode(&dst.join("locked")), 0o000);
    assert_eq!(mode(&dst.join("ro")), 0o555);

    // A later run still compares the destination (exit 2 for the source
    // alone, not 3) and updates a file inside the 0555 directory.
    std::fs::write(src.join("ro/f"), b"changed").unwrap();
    let o = mirror_as_nobody(&state, &args);
    assert_exit(&o, 2);
    assert!(
        !stderr(&o).contains("cannot read destination"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(dst.join("ro/f")).unwrap(), b"changed");
    assert_eq!(mode(&dst.join("locked")), 0o000, "its mode is set again");
    assert_eq!(mode(&dst.join("ro")), 0o555);

    // Once the source is fixed, the destination follows it exactly.
    chmod(&src.join("locked"), 0o755);
    let o = mirror_as_nobody(&state, &args);
    assert_exit(&o, 0);
    assert_eq!(mode(&dst.join("locked")), 0o755);
    assert_same_trees(&src, &dst);
}

/// The write side of that: a file changed inside a directory of mode 0555
/// or 0500 is updated (the directory is made writable for the commit and
/// given its mode and time back after), and a run with nothing to do
/// changes nothing.
#[test]
fn nonroot_mirror_updates_files_in_read_only_directories() {
    let Some((t, src, dst, state)) = nobody_roots() else {
        return;
    };
    for d in ["r555", "r500", "r500/inner"] {
        std::fs::create_dir(src.join(d)).unwrap();
    }
    for f in ["r555/f", "r500/f", "r500/inner/g", "r500/gone"] {
        std::fs::write(src.join(f), b"one").unwrap();
    }
    give_to_nobody(t.path());
    for (d, m) in [("r555", 0o555), ("r500/inner", 0o500), ("r500", 0o500)] {
        chmod(&src.join(d), m);
    }
    let args = [s(&src), s(&dst)];
    assert_exit(&mirror_as_nobody(&state, &args), 0);
    assert_same_trees(&src, &dst);

    // Contents changed, a file deleted, a file added (as root: the
    // source's directories are read-only).
    for f in ["r555/f", "r500/f", "r500/inner/g"] {
        std::fs::write(src.join(f), b"changed contents").unwrap();
    }
    std::fs::remove_file(src.join("r500/gone")).unwrap();
    std::fs::write(src.join("r555/new"), b"new").unwrap();
    give_to_nobody(&src);
    let o = mirror_as_nobody(&state, &args);
    assert_exit(&o, 0);
    assert_same_trees(&src, &dst);
    assert_eq!(mode(&dst.join("r555")), 0o555);
    assert_eq!(mode(&dst.join("r500/inner")), 0o500);

    // Nothing left to do: nothing is changed (no chmod back and forth).
    let o = mirror_as_nobody(&state, &args);
    assert_exit(&o, 0);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "", "{}", stderr(&o));
}

/// The read side of that: a destination directory that can be opened but
/// not searched (0600: its entries cannot be stat'ed) or not opened at all
/// (0000).
#[test]
fn nonroot_mirror_reads_destination_directories_it_cannot_search() {
    let Some((t, src, dst, state)) = nobody_roots() else {
        return;
    };
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    std::fs::write(src.join("a/b/f"), b"one").unwrap();
    give_to_nobody(t.path());
    let args = [s(&src), s(&dst)];
    assert_exit(&mirror_as_nobody(&state, &args), 0);
    for m in [0o600, 0o000, 0o100, 0o400] {
        chmod(&dst.join("a/b"), m);
        chmod(&dst.join("a"), m);
        std::fs::write(src.join("a/b/f"), format!("mode {m:o}")).unwrap();
        let o = mirror_as_nobody(&state, &args);
        assert_exit(&o, 0);
        assert_same_trees(&src, &dst);
    }
}

/// A dry run changes nothing, not even a mode: a destination
/// directory it cannot read stays unread (and is reported).
#[test]
fn nonroot_dry_run_leaves_an_unreadable_destination_directory_alone() {
    let Some((t, src, dst, state)) = nobody_roots() else {
        return;
    };
    std::fs::create_dir(src.join("d")).unwrap();
    give_to_nobody(t.path());
    let args = [s(&src), s(&dst)];
    assert_exit(&mirror_as_nobody(&state, &args), 0);
    chmod(&dst.join("d"), 0o000);
    let o = mirror_as_nobody(&state, &["-n", s(&src), s(&dst)]);
    assert_exit(&o, 3);
    assert_eq!(mode(&dst.join("d")), 0o000);
    assert_exit(&mirror_as_nobody(&state, &args), 0);
    assert_eq!(mode(&dst.join("d")), 0o755);
}

#[test]
fn permission_errors_name_the_operation() {
    if !need_root("running the mirror as another user") || !need("setpriv", "util-linux") {
        return;
    }
    let (_t, src, dst, state) = roots();
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("secret"), b"s").unwrap();
    std::fs::write(src.join("open"), b"o").unwrap();
    chmod(&src.join("secret"), 0o000);
    std::fs::create_dir_all(&dst).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    for p in [src.parent().unwrap(), &src, &dst, &state] {
        sh(&format!("chown 65534:65534 '{}'", s(p)));
    }
    sh(&format!("chown 65534:65534 '{}'", s(&src.join("open"))));
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(bin())
        .args(["mirror", s(&src), s(&dst)])
        .env("ACCORD_STATE_DIR", &state)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("secret: opening the source file: Permission denied"),
        "{err}"
    );
    assert_eq!(std::fs::read(dst.join("open")).unwrap(), b"o");
}
