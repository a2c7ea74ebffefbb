//! Regression tests of issue 10's defects that the reshaped engine fixes:
//! nesting through a bind mount, a nearly full disk, messages that said
//! something false or too little, and `-n` showing the transfer method.

mod mirror_common;
use mirror_common::*;
use std::path::Path;
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Unmounts when dropped.
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

fn mount(args: &[&str], at: &Path) -> Option<Mounted> {
    let ok = Command::new("mount")
        .args(args)
        .arg(at)
        .status()
        .is_ok_and(|st| st.success());
    ok.then(|| Mounted(at.to_path_buf()))
}

#[test]
fn issue10_bind_mount_of_a_source_directory_as_destination_is_refused() {
    if !is_root() {
        eprintln!("SKIPPED: a bind mount needs root");
        return;
    }
    let (_t, src, dst, state) = roots();
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/onlyhere"), b"the only copy").unwrap();
    std::fs::write(src.join("top"), b"top").unwrap();
    std::fs::create_dir_all(&dst).unwrap();
    let Some(_m) = mount(&["--bind", s(&src.join("sub"))], &dst) else {
        eprintln!("SKIPPED: cannot bind-mount here");
        return;
    };
    let o = mirror(&state, &[s(&src), s(&dst)]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("inside the source"), "{err}");
    assert!(err.contains("bind mount"), "{err}");
    assert_eq!(
        std::fs::read(src.join("sub/onlyhere")).unwrap(),
        b"the only copy"
    );
    // The other way round: the source is a directory inside the destination.
    let (_t2, src2, dst2, state2) = roots();
    std::fs::create_dir_all(dst2.join("inner")).unwrap();
    std::fs::write(dst2.join("inner/keep"), b"keep").unwrap();
    std::fs::create_dir_all(&src2).unwrap();
    let Some(_m2) = mount(&["--bind", s(&dst2.join("inner"))], &src2) else {
        return;
    };
    let o = mirror(&state2, &[s(&src2), s(&dst2), "--force"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("inside the destination"), "{err}");
    assert_eq!(std::fs::read(dst2.join("inner/keep")).unwrap(), b"keep");
}

#[test]
fn issue10_nearly_full_disk_goes_on_file_by_file() {
    if !is_root() {
        eprintln!("SKIPPED: mounting a small tmpfs needs root");
        return;
    }
    let (_t, src, dst, state) = roots();
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::create_dir_all(&dst).unwrap();
    let Some(_m) = mount(&["-t", "tmpfs", "-o", "size=12m", "accord-test"], &dst) else {
        eprintln!("SKIPPED: cannot mount tmpfs here");
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

#[test]
fn issue10_dry_run_shows_the_transfer_method() {
    let (_t, src, dst, state) = roots();
    std::fs::create_dir_all(&src).unwrap();
    let mut rng = Rng(3);
    let big = rng.bytes(200_000);
    std::fs::write(src.join("big"), &big).unwrap();
    std::fs::write(src.join("small"), b"small").unwrap();
    assert_exit(&mirror(&state, &[s(&src), s(&dst)]), 0);
    let mut changed = big.clone();
    changed[5] ^= 1;
    changed.extend_from_slice(b"more");
    std::fs::write(src.join("big"), &changed).unwrap();
    std::fs::write(src.join("small"), b"smaller!").unwrap();
    let o = mirror(&state, &[s(&src), s(&dst), "-n"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("updated   big (delta)"), "{out}");
    assert!(out.contains("updated   small\n"), "{out}");
    let o = mirror(&state, &[s(&src), s(&dst), "-n", "--inplace"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("updated   big (inplace)"), "{out}");
}

#[test]
fn issue10_permission_errors_name_the_operation() {
    if !is_root() || !have("setpriv") {
        eprintln!("SKIPPED: needs root and setpriv to run as another user");
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
