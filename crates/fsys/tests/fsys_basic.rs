//! Confinement under a root handle, the scanner, sparse copies, properties.

use accord_fsys::{
    copy_data, scan, IgnoreRules, PropsMask, Reflink, Root, ScanOptions, XattrFilter,
};
use accord_model::{Kind, Props, RelPath, Time};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;

fn rp(s: &str) -> RelPath {
    RelPath::new(s.as_bytes()).unwrap()
}

#[test]
fn never_resolves_through_symlinks() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("root");
    let outside = t.path().join("outside");
    std::fs::create_dir_all(root.join("real/sub")).unwrap();
    std::fs::create_dir_all(outside.join("sub")).unwrap();
    std::fs::write(outside.join("secret"), b"secret").unwrap();
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    std::os::unix::fs::symlink("../outside/secret", root.join("real/fl")).unwrap();
    let r = Root::open(&root).unwrap();
    assert!(r.open_dir(&rp("real/sub")).is_ok());
    assert!(r.open_dir(&rp("link")).is_err());
    assert!(r.open_dir(&rp("link/sub")).is_err());
    assert!(r.open_file(&rp("link/secret")).is_err());
    assert!(r.open_file(&rp("real/fl")).is_err());
    let d = r.open_dir(&rp("real")).unwrap();
    assert!(d.open_read(b"fl").is_err(), "followed a symlink to read");
    assert!(d.open_rw(b"fl").is_err(), "followed a symlink to write");
    assert!(d.open_subdir(b"fl").is_err());
    // Names are validated.
    assert!(d.open_read(b"..").is_err());
    assert!(d.stat(b"a/b").is_err());
    // Temp files are new, hidden and private.
    let (name, _f) = d.create_temp(b"x").unwrap();
    assert!(name.starts_with(accord_fsys::TEMP_PREFIX));
    let st = d.stat(&name).unwrap();
    assert_eq!(st.mode & 0o777, 0o600);
    // Renaming over the symlink replaces the link, not its target.
    d.rename(&name, b"fl").unwrap();
    assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"secret");
    assert!(std::fs::symlink_metadata(root.join("real/fl"))
        .unwrap()
        .is_file());
}

#[test]
fn scan_lists_kinds_skips_reserved_and_excluded() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    std::fs::create_dir_all(root.join("d/e")).unwrap();
    std::fs::write(root.join("d/f"), b"12345").unwrap();
    std::fs::write(root.join("d/skip.o"), b"o").unwrap();
    std::fs::write(root.join("d/.accord-tmp-f.123"), b"stale").unwrap();
    std::fs::write(root.join("d/e/.accordignore"), b"*.log\n").unwrap();
    std::fs::write(root.join("d/e/x.log"), b"log").unwrap();
    std::fs::write(root.join("d/x.log"), b"kept: rule is below").unwrap();
    std::os::unix::fs::symlink("f", root.join("d/l")).unwrap();
    let r = Root::open(root).unwrap();
    let rules = IgnoreRules::new(&["*.o".into()]).unwrap();
    let s = scan(
        &r,
        &rules,
        &ScanOptions {
            xattrs: XattrFilter {
                xattrs: true,
                acls: true,
                user_only: false,
            },
            xattr_memo: None,
            listing_memo: None,
            read_ignore_files: true,
            only_names: None,
            source: true,
            same_fs: None,
            alone: false,
        },
    );
    let paths: Vec<String> = s.entries.iter().map(|e| e.path.display()).collect();
    assert_eq!(
        paths,
        [
            ".",
            "d",
            "d/e",
            "d/e/.accordignore",
            "d/f",
            "d/l",
            "d/x.log"
        ]
    );
    assert_eq!(s.stale_temps, vec![rp("d/.accord-tmp-f.123")]);
    assert!(!s.incomplete);
    let f = s.entries.iter().find(|e| e.path == rp("d/f")).unwrap();
    assert_eq!((f.kind, f.size), (Kind::File, 5));
    let l = s.entries.iter().find(|e| e.path == rp("d/l")).unwrap();
    assert_eq!(l.link_target.as_deref(), Some(&b"f"[..]));
}

#[test]
fn sparse_copy_keeps_holes() {
    use std::os::unix::fs::FileExt;
    let t = tempfile::tempdir().unwrap();
    let a = std::fs::File::create(t.path().join("a")).unwrap();
    a.set_len(32 << 20).unwrap();
    a.write_all_at(b"data", 16 << 20).unwrap();
    drop(a);
    let a = std::fs::File::open(t.path().join("a")).unwrap();
    let b = std::fs::File::create(t.path().join("b")).unwrap();
    let st = copy_data(&a, &b, 32 << 20, true, Reflink::Never).unwrap();
    assert!(st.written < 1 << 20, "wrote {} bytes", st.written);
    let mb = std::fs::metadata(t.path().join("b")).unwrap();
    assert_eq!(mb.len(), 32 << 20);
    assert!(mb.blocks() * 512 < 1 << 20, "holes were filled");
    assert_eq!(
        std::fs::read(t.path().join("a")).unwrap(),
        std::fs::read(t.path().join("b")).unwrap()
    );
}

#[test]
fn props_on_symlinks_and_files() {
    let t = tempfile::tempdir().unwrap();
    std::fs::write(t.path().join("target"), b"t").unwrap();
    std::os::unix::fs::symlink("target", t.path().join("l")).unwrap();
    let r = Root::open(t.path()).unwrap();
    let before = std::fs::metadata(t.path().join("target")).unwrap().mtime();
    let props = Props {
        mode: 0o600,
        uid: 0,
        gid: 0,
        mtime: Time {
            sec: 1_000_000_000,
            nsec: 123_456_789,
        },
        xattrs: Some(vec![]),
    };
    let mask = PropsMask {
        perms: true,
        owner: false,
        times: true,
        xattrs: None,
    };
    r.dir()
        .set_props_at(b"l", Kind::Symlink, &props, mask)
        .unwrap();
    let lm = std::fs::symlink_metadata(t.path().join("l")).unwrap();
    assert_eq!((lm.mtime(), lm.mtime_nsec()), (1_000_000_000, 123_456_789));
    let tm = std::fs::metadata(t.path().join("target")).unwrap();
    assert_eq!(tm.mtime(), before, "the symlink's target was touched");
    let f = std::fs::File::open(t.path().join("target")).unwrap();
    let props = Props {
        mode: 0o4751,
        xattrs: Some(vec![(b"user.k".to_vec(), b"v".to_vec())]),
        ..props
    };
    accord_fsys::set_props_fd(
        f.as_fd(),
        &props,
        PropsMask {
            xattrs: Some(XattrFilter {
                xattrs: true,
                acls: true,
                user_only: false,
            }),
            ..mask
        },
    )
    .unwrap();
    let tm = std::fs::metadata(t.path().join("target")).unwrap();
    assert_eq!(tm.mode() & 0o7777, 0o4751);
    assert_eq!(
        r.dir()
            .xattrs_at(
                b"target",
                XattrFilter {
                    xattrs: true,
                    acls: true,
                    user_only: false,
                }
            )
            .unwrap(),
        vec![(b"user.k".to_vec(), b"v".to_vec())]
    );
}
