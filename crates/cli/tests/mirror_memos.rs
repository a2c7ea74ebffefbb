//! The memos that let a run skip work (entries remembered without extended
//! attributes, directories remembered with their names) miss no change made
//! since, on either side, by either executor.

mod mirror_common;
use mirror_common::*;
use std::fs;
use std::path::Path;

fn write(p: &Path, data: &[u8]) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
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
