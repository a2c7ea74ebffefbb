//! Acceptance 2: Postmark completes on the union, and a generated C project (~150 modules)
//! untarred and built with `make -j2` on the union gives the same files and program output as
//! on a plain directory.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn gen_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/union/gen-cproject.sh")
}

#[test]
fn postmark_completes_on_the_union() {
    if !fuse_ok("postmark_completes_on_the_union") {
        return;
    }
    if !need("postmark_completes_on_the_union", "postmark", "postmark") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (up, lo) = (t.path().join("up"), t.path().join("lo"));
    fs::create_dir_all(lo.join("pm")).unwrap();
    fs::write(lo.join("pm/lower-file"), "from below\n").unwrap();
    fs::create_dir_all(&up).unwrap();
    let m = UnionMount::new(
        &t.path().join("mnt"),
        &[
            format!("{}=rw", up.display()),
            format!("{}=ro", lo.display()),
        ],
    );
    let cfg = t.path().join("pm.cfg");
    fs::write(
        &cfg,
        format!(
            "set location {}\nset number 1000\nset transactions 3000\nset subdirectories 10\nrun\nquit\n",
            m.mnt.join("pm").display()
        ),
    )
    .unwrap();
    let out = Command::new("postmark").arg(&cfg).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "postmark failed: {text}");
    assert!(
        text.contains("transactions"),
        "unexpected postmark output: {text}"
    );
    for l in text
        .lines()
        .filter(|l| l.contains("seconds") || l.contains("per second"))
    {
        eprintln!("postmark on the union: {}", l.trim());
    }
    // Postmark deletes what it made; the lower file is still there and untouched.
    let names: Vec<_> = fs::read_dir(m.mnt.join("pm"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("lower-file")]);
    assert_eq!(
        fs::read_to_string(lo.join("pm/lower-file")).unwrap(),
        "from below\n"
    );
}

fn build(dir: &Path) -> String {
    let out = Command::new("make")
        .args(["-s", "-j2"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "make failed in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(dir.join("prog")).output().unwrap();
    assert!(run.status.success());
    String::from_utf8(run.stdout).unwrap()
}

#[test]
fn c_project_builds_the_same_on_the_union() {
    if !fuse_ok("c_project_builds_the_same_on_the_union") {
        return;
    }
    if !need("c_project_builds_the_same_on_the_union", "make", "make")
        || !need("c_project_builds_the_same_on_the_union", "cc", "gcc")
    {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let base = t.path();
    sh(&format!(
        "{} {}/proj 150 && tar -C {b} -cf {b}/proj.tar proj",
        gen_script().display(),
        base.display(),
        b = base.display()
    ));
    // The tarball sits in a read-only branch; it is unpacked and built through the union.
    let (up, lo) = (base.join("up"), base.join("lo"));
    fs::create_dir_all(&up).unwrap();
    fs::create_dir_all(&lo).unwrap();
    fs::rename(base.join("proj.tar"), lo.join("proj.tar")).unwrap();
    let m = UnionMount::new(
        &base.join("mnt"),
        &[
            format!("{}=rw", up.display()),
            format!("{}=ro", lo.display()),
        ],
    );
    fs::create_dir_all(base.join("plain")).unwrap();
    sh(&format!(
        "tar -C {}/plain -xf {}/proj.tar && tar -C {m} -xf {m}/proj.tar",
        base.display(),
        lo.display(),
        m = m.mnt.display()
    ));
    let t0 = std::time::Instant::now();
    let plain_out = build(&base.join("plain/proj"));
    let t1 = std::time::Instant::now();
    let union_out = build(&m.mnt.join("proj"));
    eprintln!(
        "make -j2 of 150 modules: plain {:?}, union {:?}; program output {} lines, identical: {}",
        t1 - t0,
        t1.elapsed(),
        union_out.lines().count(),
        plain_out == union_out
    );
    assert_eq!(plain_out, union_out);
    assert!(union_out.contains("total "));
    // Same files with the same bytes (objects and the program included).
    let a = describe(&base.join("plain/proj"), false);
    let b = describe(&m.mnt.join("proj"), false);
    let strip = |d: std::collections::BTreeMap<String, String>| -> Vec<(String, String)> {
        d.into_iter()
            .map(|(k, v)| {
                let keep: Vec<&str> = v
                    .split(' ')
                    .filter(|f| {
                        f.starts_with("size=") || f.starts_with("data=") || f.starts_with("mode=")
                    })
                    .collect();
                (k, keep.join(" "))
            })
            .collect()
    };
    assert_eq!(strip(a), strip(b));
    // `make clean` through the union, then the build again (whiteout-free: all upper).
    sh(&format!("make -s -C {}/proj clean", m.mnt.display()));
    assert_eq!(build(&m.mnt.join("proj")), plain_out);
}
