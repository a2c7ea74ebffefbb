//! A destination that is nearly full: a run goes on file by file, copies
//! what fits, says what did not, and leaves no temporary file behind.

mod mirror_common;
use mirror_common::*;
use std::path::Path;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn nearly_full_disk_goes_on_file_by_file() {
    if !need_root("mounting a small tmpfs") {
        return;
    }
    let (_t, src, dst, state) = roots();
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::create_dir_all(&dst).unwrap();
    let Some(_m) = mount(&["-t", "tmpfs", "-o", "size=12m", "accord-test"], &dst) else {
        skip_or_fail("mount -t tmpfs failed here");
        return;
    };
    let mut rng = Rng(7);
    let mb = 1 << 20;
    for i in 0..10 {
        std::fs::write(src.join(format!("sub/f{i}")), rng.bytes(mb)).unwrap();
    }
    let o = mirror(&state, &[s(&src), s(&dst)]);
    assert_exit(&o, 0);
    // Ten changed files of 1 MiB with about 2 MiB free: a batch of ten temp
    // files cannot fit, but one at a time they do.
    for i in 0..10 {
        std::fs::write(src.join(format!("sub/f{i}")), rng.bytes(mb)).unwrap();
    }
    let o = mirror(&state, &[s(&src), s(&dst), "--json"]);
    assert_exit(&o, 0);
    assert_eq!(json_field(&o.stdout, "files_transferred"), 10);
    assert!(differences(&snapshot(&src), &snapshot(&dst)).is_empty());

    // A new directory whose files do not all fit: what fits is copied, the
    // run says what did not, and the directory gets its mode all the same.
    std::fs::create_dir(src.join("more")).unwrap();
    chmod(&src.join("more"), 0o755);
    std::fs::write(src.join("more/small"), b"small").unwrap();
    std::fs::write(src.join("more/huge"), rng.bytes(8 * mb)).unwrap();
    let o = mirror(&state, &[s(&src), s(&dst)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("did not fit: more/huge"), "{err}");
    assert!(
        !err.contains("old versions"),
        "there was no old version: {err}"
    );
    assert_eq!(std::fs::read(dst.join("more/small")).unwrap(), b"small");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(dst.join("more"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o755);
    let temps = snapshot(&dst)
        .keys()
        .filter(|k| k.contains(".accord-tmp-"))
        .count();
    assert_eq!(temps, 0);
}

/// An initial copy into an empty destination, made as it is walked in
/// parts, onto a disk that cannot hold it all: every file is tried, so
/// each source file is either copied whole or counted among those that
/// did not fit, and no temporary file is left.
#[test]
fn an_initial_copy_made_as_it_is_walked_tries_every_file() {
    if !need_root("mounting a small tmpfs") {
        return;
    }
    let (_t, src, dst, state) = roots();
    std::fs::create_dir_all(&dst).unwrap();
    let Some(_m) = mount(&["-t", "tmpfs", "-o", "size=20m", "accord-test"], &dst) else {
        skip_or_fail("mount -t tmpfs failed here");
        return;
    };
    let mut rng = Rng(5);
    let mut files = Vec::new();
    for d in 0..6 {
        std::fs::create_dir_all(src.join(format!("d{d}"))).unwrap();
        for f in 0..1000 {
            let name = format!("d{d}/f{f}");
            // A part of 1,024 files fills the disk; the ones after it
            // find it full, and are tried all the same.
            let size = if d == 0 && f % 50 == 7 && f < 600 {
                1 << 20
            } else {
                600
            };
            std::fs::write(src.join(&name), rng.bytes(size)).unwrap();
            files.push(name);
        }
    }
    // The walk's way (a task run says what did not fit task by task).
    let o = mirror_walk(&state, &[s(&src), s(&dst)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    let not_fitted: usize = err
        .split(" file(s) did not fit")
        .next()
        .and_then(|head| head.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count of files that did not fit: {err}"));
    let mut copied = 0;
    for name in &files {
        if let Ok(c) = std::fs::read(dst.join(name)) {
            assert_eq!(
                c,
                std::fs::read(src.join(name)).unwrap(),
                "{name} is not whole"
            );
            copied += 1;
        }
    }
    assert!(
        not_fitted > 0 && copied > 0,
        "{copied} copied, {not_fitted} did not fit"
    );
    assert_eq!(copied + not_fitted, files.len(), "{err}");
    let temps = snapshot(&dst)
        .keys()
        .filter(|k| k.contains(".accord-tmp-"))
        .count();
    assert_eq!(temps, 0);
}
