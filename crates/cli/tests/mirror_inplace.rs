//! Regression tests for the data-loss review of `accord mirror`: each test is
//! a reproduction of a bug found then, and must keep the user's data.

mod mirror_common;
use mirror_common::*;
use std::fs;
use std::path::Path;

fn write(p: &Path, data: &[u8]) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

/// An `.accordignore` that cannot be read (here: a symlink, refused by
/// O_NOFOLLOW) must suspend deletions, not drop its rules and delete the
/// excluded entries of DST.
#[test]
fn unreadable_ignore_file_suspends_deletions() {
    let (_tmp, src, dst, state) = roots();
    for i in 0..20 {
        write(&src.join(format!("proj/f{i}")), b"x");
    }
    write(&src.join("proj/.accordignore"), b"cache/\n");
    write(&dst.join("proj/cache/keep.bin"), b"precious");
    let out = mirror(&state, &[src.to_str().unwrap(), dst.to_str().unwrap()]);
    assert_exit(&out, 0);
    fs::remove_file(src.join("proj/.accordignore")).unwrap();
    write(&src.parent().unwrap().join("common/ignore"), b"cache/\n");
    std::os::unix::fs::symlink("../../common/ignore", src.join("proj/.accordignore")).unwrap();
    let out = mirror(&state, &[src.to_str().unwrap(), dst.to_str().unwrap()]);
    assert_exit(&out, 2);
    assert_eq!(
        fs::read(dst.join("proj/cache/keep.bin")).unwrap(),
        b"precious"
    );
}

/// `--inplace` must not rewrite an inode that DST shares with another name
/// (here an excluded file): such files go through temp + rename.
#[test]
fn inplace_leaves_other_names_of_a_shared_inode_alone() {
    let (_tmp, src, dst, state) = roots();
    write(&src.join("a"), &vec![1u8; 100_000]);
    fs::hard_link(src.join("a"), src.join("b")).unwrap();
    write(&dst.join("a"), &vec![2u8; 100_000]);
    fs::hard_link(dst.join("a"), dst.join("notes.keep")).unwrap();
    // An older mtime, so size and time tell the files apart.
    set_mtime(&dst.join("a"), 1_000_000_000, 0);
    let out = mirror(
        &state,
        &[
            "--inplace",
            "--exclude",
            "*.keep",
            src.to_str().unwrap(),
            dst.to_str().unwrap(),
        ],
    );
    assert_exit(&out, 0);
    let all = |p: &str, b: u8| fs::read(dst.join(p)).unwrap().iter().all(|&x| x == b);
    assert!(
        all("notes.keep", 2),
        "the excluded name of the shared inode was rewritten"
    );
    assert!(
        all("a", 1) && all("b", 1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// A source file with an in-place marker beside it (an interrupted in-place
/// run into what is now the source) holds neither version: it must not be
/// copied as user data, and the destination's copy must stay.
#[test]
fn half_finished_inplace_file_in_the_source_is_not_copied() {
    let (_tmp, src, dst, state) = roots();
    write(&src.join("db"), b"half written");
    write(&src.join(".accord-inplace-0123456789abcdef"), b"db");
    write(&src.join("other"), b"fine");
    write(&dst.join("db"), b"good old version");
    let out = mirror(&state, &[src.to_str().unwrap(), dst.to_str().unwrap()]);
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("half-finished"));
    assert_eq!(fs::read(dst.join("db")).unwrap(), b"good old version");
    assert_eq!(fs::read(dst.join("other")).unwrap(), b"fine");
}

/// One root inside the other is refused before anything changes.
#[test]
fn nested_roots_are_refused() {
    let t = tempfile::tempdir().unwrap();
    let (backup, state) = (t.path().join("backup"), t.path().join("state"));
    write(&backup.join("photos/p1.jpg"), b"jpeg");
    write(&backup.join("other"), b"x");
    let photos = backup.join("photos");
    for (s, d) in [(&photos, &backup), (&backup, &photos)] {
        let out = mirror(
            &state,
            &["--force", s.to_str().unwrap(), d.to_str().unwrap()],
        );
        assert_exit(&out, 3);
        assert!(String::from_utf8_lossy(&out.stderr).contains("inside"));
    }
    assert_eq!(fs::read(backup.join("photos/p1.jpg")).unwrap(), b"jpeg");
    assert!(!backup.join("photos/photos").exists());
}

/// Two runs into one destination: the second refuses while the first holds
/// the destination's lock (here taken by flock(1) the same way).
#[test]
fn a_second_run_into_a_locked_destination_is_refused() {
    if !have("flock") {
        eprintln!("SKIPPED: flock(1) is not installed (util-linux)");
        return;
    }
    let (_tmp, src, dst, state) = roots();
    write(&src.join("f"), b"new");
    write(&dst.join("f"), b"old");
    set_mtime(&dst.join("f"), 1_000_000_000, 0);
    // -o: only flock(1) itself holds the lock, so killing it releases it.
    let mut holder = std::process::Command::new("flock")
        .arg("-o")
        .arg(&dst)
        .args(["sleep", "5"])
        .spawn()
        .unwrap();
    // Wait until the holder has the lock (a non-blocking probe fails).
    for _ in 0..100 {
        let probe = std::process::Command::new("flock")
            .args(["-n"])
            .arg(&dst)
            .arg("true")
            .status()
            .unwrap();
        if !probe.success() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let out = mirror(&state, &[src.to_str().unwrap(), dst.to_str().unwrap()]);
    holder.kill().unwrap();
    let _ = holder.wait();
    assert_exit(&out, 3);
    assert!(String::from_utf8_lossy(&out.stderr).contains("another accord run"));
    assert_eq!(fs::read(dst.join("f")).unwrap(), b"old");
    let out = mirror(&state, &[src.to_str().unwrap(), dst.to_str().unwrap()]);
    assert_exit(&out, 0);
    assert_eq!(fs::read(dst.join("f")).unwrap(), b"new");
}

/// A source file whose name is reserved for accord's own temp or recovery
/// files is not copied, and the run says so instead of reporting success.
#[test]
fn reserved_source_names_are_reported_not_silently_skipped() {
    let (_tmp, src, dst, state) = roots();
    write(&src.join("ok"), b"fine");
    write(&src.join(".accord-recovery-notes"), b"user data");
    let out = mirror(&state, &[src.to_str().unwrap(), dst.to_str().unwrap()]);
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("reserved"));
    assert_eq!(fs::read(dst.join("ok")).unwrap(), b"fine");
}

fn get_xattr(p: &Path, name: &str) -> Option<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    let r = unsafe { libc::lgetxattr(c.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    (r >= 0).then(|| buf[..r as usize].to_vec())
}

/// Settled entries are remembered as having no extended attributes (the
/// xattr memo), and a later change on either side is still mirrored: the
/// change moves the entry's ctime, so the memo no longer vouches for it.
#[test]
fn changes_after_a_memoised_run_are_mirrored() {
    let (_tmp, src, dst, state) = roots();
    write(&src.join("a"), b"one");
    write(&src.join("d/b"), b"two");
    let run_with = |executor: &str| {
        let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
        let out = mirror(&state, &["--executor", executor, s, d]);
        assert_exit(&out, 0);
    };
    // The xattr memos are kept by both executors.
    let run = || run_with("tasks");
    run();
    // Entries are remembered only a while after their last change.
    std::thread::sleep(std::time::Duration::from_millis(3200));
    run();
    let memos: Vec<_> = fs::read_dir(&state)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("xattr-memo-"))
        .collect();
    assert_eq!(memos.len(), 2, "one memo per root");
    for m in &memos {
        let len = m.metadata().unwrap().len();
        assert!(
            len > 16,
            "memo {:?} remembers entries ({len} bytes)",
            m.path()
        );
    }
    // A new attribute on a remembered source file reaches the destination.
    set_xattr(&src.join("d/b"), "user.tag", b"v1");
    run();
    assert_eq!(
        get_xattr(&dst.join("d/b"), "user.tag").as_deref(),
        Some(&b"v1"[..])
    );
    // One planted in the destination on a remembered file is removed again.
    set_xattr(&dst.join("a"), "user.stray", b"x");
    run();
    assert_eq!(get_xattr(&dst.join("a"), "user.stray"), None);
    assert_eq!(
        get_xattr(&dst.join("d/b"), "user.tag").as_deref(),
        Some(&b"v1"[..])
    );
    // The listing memo (both executors keep it): destination directory d
    // was remembered holding the source's names, so runs stat its entries
    // without listing it. Names planted there since must still be found
    // and deleted, by either executor.
    for executor in ["walk", "tasks"] {
        listing_memo_misses_no_planted_name(&state, &dst, || run_with(executor));
    }
}

fn listing_memo_misses_no_planted_name(state: &Path, dst: &Path, run: impl Fn()) {
    let _ = fs::remove_dir_all(state);
    run();
    std::thread::sleep(std::time::Duration::from_millis(3200));
    run();
    let listing = fs::read_dir(state)
        .unwrap()
        .filter_map(|e| e.ok())
        .find(|e| e.file_name().to_string_lossy().starts_with("listing-memo-"))
        .expect("a listing memo for the destination");
    assert!(
        listing.metadata().unwrap().len() > 16,
        "it remembers directories"
    );
    write(&dst.join("d/planted"), b"p");
    fs::create_dir(dst.join("d/planted-dir")).unwrap();
    run();
    assert!(!dst.join("d/planted").exists());
    assert!(!dst.join("d/planted-dir").exists());
    assert_eq!(fs::read(dst.join("d/b")).unwrap(), b"two");
}

/// A source truncated while `--inplace` reads it through a mapping (a log
/// rotated with copytruncate) must not kill the run with SIGBUS: the file is
/// reported, and the next run converges.
#[test]
fn source_truncated_during_an_inplace_update_is_an_error_not_a_crash() {
    use std::os::unix::process::ExitStatusExt;
    let (_tmp, src, dst, state) = roots();
    let size = 96usize << 20;
    let mut data: Vec<u8> = (0..size).map(|i| (i / 4096 % 251) as u8).collect();
    write(&src.join("log"), &data);
    write(&src.join("other"), b"x");
    let run = || {
        std::process::Command::new(bin())
            .args(["mirror", "--inplace", "-q"])
            .arg(&src)
            .arg(&dst)
            .env("ACCORD_STATE_DIR", &state)
            .output()
            .unwrap()
    };
    assert!(run().status.success());
    for (trial, delay_ms) in [0u64, 5, 20, 40, 80, 160].into_iter().enumerate() {
        // Shift the data so the update needs the in-place planner.
        data.rotate_left(4096 * (trial + 1));
        write(&src.join("log"), &data);
        let child = std::process::Command::new(bin())
            .args(["mirror", "--inplace", "-q"])
            .arg(&src)
            .arg(&dst)
            .env("ACCORD_STATE_DIR", &state)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        fs::OpenOptions::new()
            .write(true)
            .open(src.join("log"))
            .unwrap()
            .set_len(4096)
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.signal(),
            None,
            "trial {trial}: killed by a signal; {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            matches!(out.status.code(), Some(0) | Some(2)),
            "trial {trial}: {:?} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // The next run converges on the truncated source.
        let again = run();
        assert_exit(&again, 0);
        assert_eq!(
            fs::read(dst.join("log")).unwrap(),
            fs::read(src.join("log")).unwrap()
        );
    }
}
