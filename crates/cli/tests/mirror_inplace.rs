//! `--inplace` keeps the user's data: it does not rewrite an inode the
//! destination shares with another name, a half-finished in-place file in
//! the source is not copied as user data, and a source truncated while it
//! is read is an error of that file, not a crash.

mod mirror_common;
use mirror_common::*;
use std::fs;
use std::path::Path;

fn write(p: &Path, data: &[u8]) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
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
