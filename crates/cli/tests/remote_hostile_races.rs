//! Issue 11, section 3, items 6 and 7: races with the file system.
//!
//! 6. A directory swapped for a symlink during a transfer: no write lands
//!    outside the root.
//! 7. A source file swapped for a symlink between scan and read: detected
//!    (same device and inode as scanned), not read through the link.
//!
//! The swaps happen at exact moments: a relay between the real client and
//! the real server shows each frame to the test before passing it on
//! (`tapped_pair`), or the raw client pauses in the middle of a body.

mod hostile_common;

use accord_model::Expect;
use accord_proto::frame::FrameKind;
use accord_proto::{Request, RootMode};
use accord_remote::ServerConfig;
use hostile_common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

fn mode_of(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

fn outside_state(sb: &Sandbox) -> (Vec<(PathBuf, Vec<u8>)>, u32, u32) {
    let mut around = sb.around_root();
    around.retain(|(p, _)| !p.starts_with("src") && !p.starts_with("dst"));
    (
        around,
        mode_of(&sb.outside),
        mode_of(&sb.outside.join("secret")),
    )
}

/// Replace the directory `d` with a symlink to `target` (the directory
/// moves to `d.old`).
fn swap_dir(d: &Path, target: &Path) {
    let old = d.with_extension("old");
    std::fs::rename(d, &old).unwrap();
    std::os::unix::fs::symlink(target, d).unwrap();
}

/// Replace the file `f` with a symlink to `target`.
fn swap_file(f: &Path, target: &Path) {
    std::fs::rename(f, f.with_extension("old")).unwrap();
    std::os::unix::fs::symlink(target, f).unwrap();
}

// ---------------------------------------------------------------------
// Item 6, a hostile (or just unlucky) client, raw.
// ---------------------------------------------------------------------

#[test]
fn a_directory_swapped_in_the_middle_of_a_body_takes_no_commit() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.root.join("d")).unwrap();
    let before = outside_state(&sb);
    let watch = OpenWatch::new(&sb.outside.join("secret"));
    let (mut c, server) = RawClient::start(&sb.root, RootMode::Write);
    let s = c.open_body(&raw::receive(b"d", b"secret", None));
    c.frame(s, FrameKind::Data, b"first half, ");
    // Wait for the temp to exist in `d`: the server is inside the body.
    let start = Instant::now();
    while temps_in(&sb.root.join("d")).is_empty() {
        assert!(start.elapsed() < WAIT, "no temp appeared in d");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    swap_dir(&sb.root.join("d"), &sb.outside);
    c.frame(s, FrameKind::End, b"second half\n");
    c.outcome(s).reply();
    for (what, out) in [
        (
            "commit into d",
            c.call(&raw::commit(b"d", s, b"secret", &Expect::Absent)),
        ),
        (
            "receive into d",
            c.call_body(&raw::receive(b"d", b"g", None), b"g\n"),
        ),
        ("mkdir in d", c.call(&raw::mkdir(b"d", b"sub"))),
        ("discard in d", c.call(&raw::discard(b"d", s))),
    ] {
        assert!(out.is_refusal(), "{what}: {out:?}");
    }
    c.hang_up();
    server.finish().unwrap();
    watch.assert_untouched();
    assert_eq!(outside_state(&sb), before);
    // What arrived stayed in the directory it was written to.
    assert_eq!(temps_in(&sb.root.join("d.old")).len(), 1);
}

// ---------------------------------------------------------------------
// Item 6, the real client and engine, with the swap made by the tap.
// ---------------------------------------------------------------------

/// When to swap the server's directory `d` in a push.
#[derive(Clone, Copy, Debug)]
enum Moment {
    /// As the first bytes of a file in `d` arrive.
    FirstData,
    /// As the commit of a file in `d` arrives.
    Commit,
    /// As `d`'s own properties are set.
    DirProps,
    /// As a subdirectory of `d` is made.
    Mkdir,
}

fn push_with_swap(moment: Moment) {
    let sb = Sandbox::new();
    let src = sb.tmp.path().join("src");
    std::fs::create_dir_all(src.join("d/sub")).unwrap();
    std::fs::write(src.join("d/secret"), vec![b'x'; 300_000]).unwrap();
    std::fs::write(src.join("d/g"), b"g\n").unwrap();
    std::fs::write(src.join("d/sub/h"), b"h\n").unwrap();
    std::fs::set_permissions(src.join("d"), std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::set_permissions(src.join("d/secret"), std::fs::Permissions::from_mode(0o666)).unwrap();
    // A first run makes `d` on the server (so the second sees it there).
    if matches!(moment, Moment::FirstData | Moment::Commit) {
        std::fs::create_dir(sb.root.join("d")).unwrap();
    }
    let before = outside_state(&sb);
    let watch = OpenWatch::new(&sb.outside.join("secret"));
    let d = sb.root.join("d");
    let outside = sb.outside.clone();
    let swapped = Arc::new(AtomicBool::new(false));
    let done = swapped.clone();
    let mut receive_in_d = None;
    let tap = move |f: &accord_proto::Frame| {
        if done.load(Ordering::Relaxed) {
            return;
        }
        let now = match (moment, opened_request(f)) {
            (Moment::FirstData, Some(Request::Receive { dir, .. })) => {
                if dir.as_bytes() == b"d" {
                    receive_in_d = Some(f.stream);
                }
                false
            }
            (Moment::FirstData, None) => {
                receive_in_d == Some(f.stream) && f.kind == FrameKind::Data
            }
            (Moment::Commit, Some(Request::Commit { dir, .. })) => dir.as_bytes() == b"d",
            (Moment::DirProps, Some(Request::SetOwnProps { dir, .. })) => dir.as_bytes() == b"d",
            (Moment::Mkdir, Some(Request::Mkdir { dir, .. })) => dir.as_bytes() == b"d",
            _ => false,
        };
        // The server may still be making `d` (its writes run in order,
        // behind this frame's predecessors): give it a moment.
        let start = Instant::now();
        while now && !d.is_dir() && start.elapsed() < WAIT {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        if now && d.is_dir() {
            swap_dir(&d, &outside);
            done.store(true, Ordering::Relaxed);
        }
    };
    let (dst, server) = tapped_pair(&sb.root, RootMode::Write, ServerConfig::default(), tap);
    let report = mirror_from_local(&src, &dst);
    drop(dst);
    server.finish().unwrap();
    assert!(
        swapped.load(Ordering::Relaxed),
        "{moment:?}: the moment never came"
    );
    assert!(
        report.fatal.is_some() || !report.errors.is_empty(),
        "{moment:?}: the run reported nothing wrong"
    );
    watch.assert_untouched();
    assert_eq!(outside_state(&sb), before, "{moment:?}");
}

#[test]
fn a_directory_swapped_as_a_file_arrives_gets_nothing_outside() {
    push_with_swap(Moment::FirstData);
}

#[test]
fn a_directory_swapped_before_the_commit_gets_nothing_outside() {
    push_with_swap(Moment::Commit);
}

#[test]
fn a_directory_swapped_before_its_properties_are_set_keeps_the_outside_modes() {
    push_with_swap(Moment::DirProps);
}

#[test]
fn a_directory_swapped_before_its_subdirectory_is_made_gets_nothing_outside() {
    push_with_swap(Moment::Mkdir);
}

/// The client's own destination (a pull): a directory swapped while the
/// file for it is on the wire.
#[test]
fn a_local_destination_directory_swapped_during_a_pull_gets_nothing_outside() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.root.join("d")).unwrap();
    std::fs::write(sb.root.join("d/secret"), b"from the server\n").unwrap();
    let dst = sb.tmp.path().join("dst");
    std::fs::create_dir_all(dst.join("d")).unwrap();
    let before = outside_state(&sb);
    let watch = OpenWatch::new(&sb.outside.join("secret"));
    let (dd, outside) = (dst.join("d"), sb.outside.clone());
    let swapped = Arc::new(AtomicBool::new(false));
    let done = swapped.clone();
    let tap = move |f: &accord_proto::Frame| {
        if let Some(Request::OpenRead { dir, .. }) = opened_request(f) {
            if dir.as_bytes() == b"d" && !done.swap(true, Ordering::Relaxed) {
                swap_dir(&dd, &outside);
            }
        }
    };
    let (src, server) = tapped_pair(&sb.root, RootMode::Read, ServerConfig::default(), tap);
    let report = mirror_into_local(&src, &dst);
    drop(src);
    server.finish().unwrap();
    assert!(swapped.load(Ordering::Relaxed), "the file was never read");
    assert!(report.fatal.is_some() || !report.errors.is_empty());
    watch.assert_untouched();
    assert_eq!(outside_state(&sb), before);
}

// ---------------------------------------------------------------------
// Item 7: a source file swapped between scan and read.
// ---------------------------------------------------------------------

/// How the server's source file `f` is swapped in a pull.
#[derive(Clone, Copy, Debug)]
enum Swap {
    /// For a symlink to the outside file.
    Symlink,
    /// For another regular file (another inode) of the same size.
    OtherFile,
}

/// Pull `f` from a real server whose `f` is swapped as the read (or the
/// delta, when the destination has an old `f`) is asked for.
fn pull_with_swap(swap: Swap, with_basis: bool) {
    let sb = Sandbox::new();
    let size = 200_000;
    std::fs::write(sb.root.join("f"), vec![b's'; size]).unwrap();
    std::fs::write(sb.root.join("impostor"), vec![b'i'; size]).unwrap();
    let dst = sb.tmp.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    if with_basis {
        std::fs::write(dst.join("f"), vec![b's'; size - 1000]).unwrap();
    }
    let before = outside_state(&sb);
    let watch = OpenWatch::new(&sb.outside.join("secret"));
    let (f, impostor, secret) = (
        sb.root.join("f"),
        sb.root.join("impostor"),
        sb.outside.join("secret"),
    );
    let swapped = Arc::new(AtomicBool::new(false));
    let done = swapped.clone();
    let tap = move |fr: &accord_proto::Frame| {
        let read = matches!(
            opened_request(fr),
            Some(Request::OpenRead { ref name, .. } | Request::MakeDelta { ref name, .. })
                if name == b"f"
        );
        if read && !done.swap(true, Ordering::Relaxed) {
            match swap {
                Swap::Symlink => swap_file(&f, &secret),
                Swap::OtherFile => std::fs::rename(&impostor, &f).unwrap(),
            }
        }
    };
    let (src, server) = tapped_pair(&sb.root, RootMode::Read, ServerConfig::default(), tap);
    let report = mirror_into_local(&src, &dst);
    drop(src);
    server.finish().unwrap();
    let what = format!("{swap:?}, basis {with_basis}");
    assert!(swapped.load(Ordering::Relaxed), "{what}: f was never read");
    assert!(
        report.errors.iter().any(|e| e.path.as_bytes() == b"f"),
        "{what}: the swap was not reported ({:?})",
        report.errors
    );
    watch.assert_untouched();
    assert_eq!(outside_state(&sb), before, "{what}");
    // The destination holds what it held: no byte of the link's target or
    // of the impostor.
    match std::fs::read(dst.join("f")) {
        Ok(b) => {
            assert!(with_basis, "{what}: f was written");
            assert_eq!(b, vec![b's'; size - 1000], "{what}");
        }
        Err(_) => assert!(!with_basis, "{what}: the old f is gone"),
    }
}

#[test]
fn a_source_file_swapped_for_a_symlink_is_not_read_through_it() {
    pull_with_swap(Swap::Symlink, false);
}

#[test]
fn a_source_file_swapped_for_a_symlink_makes_no_delta_through_it() {
    pull_with_swap(Swap::Symlink, true);
}

#[test]
fn a_source_file_swapped_for_another_file_is_detected() {
    pull_with_swap(Swap::OtherFile, false);
}

#[test]
fn a_source_file_swapped_for_another_file_makes_no_delta() {
    pull_with_swap(Swap::OtherFile, true);
}

/// The raw form: a read asked for with the scan's expectation after the
/// swap, and with the outside file's own identity forged.
#[test]
fn a_read_after_the_swap_is_refused_whatever_the_client_claims() {
    let sb = Sandbox::new();
    std::fs::write(sb.root.join("f"), b"scanned\n").unwrap();
    let scanned = expect_of(&sb.root.join("f"));
    swap_file(&sb.root.join("f"), &sb.outside.join("secret"));
    let forged = expect_of(&sb.outside.join("secret"));
    let watch = OpenWatch::new(&sb.outside.join("secret"));
    let (mut c, server) = RawClient::start(&sb.root, RootMode::Read);
    for (what, e) in [("as scanned", scanned), ("forged", forged)] {
        let out = c.call(&raw::open_read(b"", b"f", &e));
        assert!(out.is_refusal(), "read {what}: {out:?}");
        let out = c.call(&raw::signature(b"", b"f", &e));
        assert!(out.is_refusal(), "signature {what}: {out:?}");
    }
    c.hang_up();
    server.finish().unwrap();
    watch.assert_untouched();
}

/// A push: the client's own source file swapped after the scan (as the
/// file before it in its directory starts on its way: that file is bigger
/// than the connection lets a client send ahead of the server, so the
/// client cannot have opened the next one yet; the engine does not wait
/// for a new directory before it sends the files that go in it).
#[test]
fn a_local_source_file_swapped_after_the_scan_is_not_sent() {
    let sb = Sandbox::new();
    let src = sb.tmp.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d/a"), vec![b'a'; 48 << 20]).unwrap();
    std::fs::write(src.join("d/f"), b"scanned\n").unwrap();
    let before = outside_state(&sb);
    let watch = OpenWatch::new(&sb.outside.join("secret"));
    let (f, secret) = (src.join("d/f"), sb.outside.join("secret"));
    let swapped = Arc::new(AtomicBool::new(false));
    let done = swapped.clone();
    let tap = move |fr: &accord_proto::Frame| {
        if let Some(Request::Receive { dir, name, .. }) = opened_request(fr) {
            if dir.as_bytes() == b"d" && name == b"a" && !done.swap(true, Ordering::Relaxed) {
                swap_file(&f, &secret);
            }
        }
    };
    let (dst, server) = tapped_pair(&sb.root, RootMode::Write, ServerConfig::default(), tap);
    let report = mirror_from_local(&src, &dst);
    drop(dst);
    server.finish().unwrap();
    assert!(swapped.load(Ordering::Relaxed), "d/a was never sent");
    assert!(
        report.errors.iter().any(|e| e.path.as_bytes() == b"d/f"),
        "the swap was not reported ({:?})",
        report.errors
    );
    watch.assert_untouched();
    assert_eq!(outside_state(&sb), before);
    assert!(!sb.root.join("d/f").exists());
}
