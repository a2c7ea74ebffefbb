//! What a person who knows rsync types works as they meant it: `-avP
//! --delete SRC/ DST/`, `-n -v`, `--include`/`--exclude`/`--filter` in
//! rsync's first-match order, `--size-only`, `--ignore-existing`,
//! `--min-size`/`--max-size` (each checked against rsync itself on the
//! same trees), `--stats` off a terminal, and messages that say what is
//! wrong with a root before anything is made.

mod mirror_common;
use mirror_common::*;
use std::collections::BTreeSet;
use std::fs;
use std::path::Path;
use std::process::{Command, Output};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn write(p: &Path, data: &[u8]) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

/// A small tree with names that rules tell apart.
fn tree(root: &Path) {
    for (p, data) in [
        ("top.txt", &b"top"[..]),
        ("keep.tmp", b"keep"),
        ("drop.tmp", b"drop"),
        ("a/x.c", b"int x;"),
        ("a/x.o", b"\x7fELF"),
        ("a/deep/y.c", b"int y;"),
        ("a/deep/notes.txt", b"notes"),
        ("build/out.o", b"obj"),
        ("build/log.txt", b"log"),
        ("sub/z.c", b"int z;"),
        ("sub/big.bin", &[7u8; 5000]),
        ("sub/mid.bin", &[8u8; 1500]),
        ("sub/small.bin", &[9u8; 100]),
    ] {
        write(&root.join(p), data);
        set_mtime(&root.join(p), 1_600_000_000, 0);
    }
}

/// Every path under `root` with its contents ("/" for a directory), the
/// contents as a short digest so that a difference reads well.
fn contents(root: &Path) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                out.insert((rel + "/", String::new()));
                stack.push(p);
            } else {
                let data = fs::read(&p).unwrap();
                let digest = blake3::hash(&data).to_hex()[..12].to_string();
                out.insert((rel, format!("{} bytes {digest}", data.len())));
            }
        }
    }
    out
}

fn rsync(args: &[&str], src: &Path, dst: &Path) {
    let o = Command::new("rsync")
        .args(["-a", "--delete"])
        .args(args)
        .arg(format!("{}/", s(src)))
        .arg(format!("{}/", s(dst)))
        .output()
        .expect("run rsync");
    assert!(o.status.success(), "rsync {args:?}: {}", text(&o.stderr));
}

/// Mirror with `rules` into a fresh destination (prepared by `before`) with
/// accord and with rsync, and compare what the two destinations hold.
fn same_as_rsync(rules: &[&str], before: impl Fn(&Path)) {
    let (_t, src, dst, state) = roots();
    tree(&src);
    let theirs = dst.with_file_name("theirs");
    before(&dst);
    before(&theirs);
    fs::create_dir_all(&theirs).unwrap();
    rsync(rules, &src, &theirs);
    let mut args = rules.to_vec();
    args.extend([s(&src), s(&dst)]);
    let o = mirror(&state, &args);
    assert_exit(&o, 0);
    assert_eq!(
        contents(&dst),
        contents(&theirs),
        "accord mirror {rules:?} differs from rsync -a --delete"
    );
}

#[test]
fn include_exclude_and_filter_rules_decide_as_in_rsync() {
    if !need("rsync", "rsync") {
        return;
    }
    let none = |_: &Path| {};
    for rules in [
        &["--include", "*/", "--include", "*.c", "--exclude", "*"][..],
        &["--exclude", "*.o"],
        &["--exclude", "build/"],
        &["--exclude", "/top.txt"],
        &["--filter", "+ keep.tmp", "--filter", "- *.tmp"],
        &["--filter", "- *.tmp", "--filter", "+ keep.tmp"],
        &["--include", "sub/", "--exclude", "/*"],
        &[
            "-f",
            "- *.o",
            "--exclude",
            "notes.txt",
            "--include",
            "a/",
            "--exclude",
            "*.txt",
        ],
    ] {
        same_as_rsync(rules, none);
    }
}

/// A destination that already holds older versions of some files.
fn older(dst: &Path) {
    for (p, data) in [
        ("top.txt", &b"old"[..]),
        ("sub/big.bin", b"old big"),
        ("sub/mid.bin", &[1u8; 1500]),
        ("extra.txt", b"extra"),
        ("a/x.c", b"int x;"),
        ("a/deep/y.c", b"int y;"),
    ] {
        write(&dst.join(p), data);
        set_mtime(&dst.join(p), 1_500_000_000, 0);
    }
}

#[test]
fn size_and_existence_rules_keep_what_rsync_keeps() {
    if !need("rsync", "rsync") {
        return;
    }
    for rules in [
        &["--max-size", "2K"][..],
        &["--min-size", "1K"],
        &["--min-size", "1K", "--max-size", "1.6K"],
        &["--ignore-existing"],
        &["--size-only"],
    ] {
        same_as_rsync(rules, older);
    }
}

#[test]
fn avp_delete_with_trailing_slashes_makes_the_copy_and_lists_it() {
    let (_t, src, dst, state) = roots();
    tree(&src);
    older(&dst);
    let (src_slash, dst_slash) = (format!("{}/", s(&src)), format!("{}/", s(&dst)));
    let o = mirror(&state, &["-avP", "--delete", &src_slash, &dst_slash]);
    assert_exit(&o, 0);
    assert_eq!(contents(&dst), contents(&src));
    let out = text(&o.stdout);
    assert!(out.contains("created   a/deep/notes.txt"), "{out}");
    assert!(out.contains("deleted   extra.txt"), "{out}");
    // -v ends with the summary even off a terminal.
    let err = text(&o.stderr);
    assert!(
        err.contains("accord mirror: 13 of 13 files written"),
        "{err}"
    );
}

#[test]
fn n_v_shows_the_plan_and_makes_nothing() {
    let (_t, src, dst, state) = roots();
    tree(&src);
    let o = mirror(&state, &["-n", "-v", s(&src), s(&dst)]);
    assert_exit(&o, 0);
    assert!(!dst.exists(), "a dry run made the destination");
    let out = text(&o.stdout);
    assert!(out.contains("created   sub/z.c"), "{out}");
    assert!(
        out.contains(
            "dry run, nothing was changed: 13 of 13 files would be written (6.5 KiB), 0 deleted"
        ),
        "{out}"
    );
}

#[test]
fn stats_are_printed_off_a_terminal() {
    let (_t, src, dst, state) = roots();
    tree(&src);
    let o = mirror(&state, &["--stats", s(&src), s(&dst)]);
    assert_exit(&o, 0);
    assert_eq!(stat(&o.stdout, "Files in the source"), 13);
    assert_eq!(stat(&o.stdout, "Files written"), 13);
    assert_eq!(stat(&o.stdout, "Bytes written"), 6644);
    assert_eq!(stat(&o.stdout, "Entries deleted"), 0);
    // No summary line off a terminal without -v: the figures are on stdout.
    assert!(
        !text(&o.stderr).contains("files written"),
        "{}",
        text(&o.stderr)
    );
}

fn refused(o: &Output, words: &str) {
    assert_exit(o, 3);
    let err = text(&o.stderr);
    assert!(err.contains(words), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(!err.contains("os error"), "{err}");
}

#[test]
fn a_root_that_cannot_be_one_is_refused_before_anything_is_made() {
    let (t, src, dst, state) = roots();
    tree(&src);
    // A file as the source: no destination is made.
    let o = mirror(&state, &[s(&src.join("top.txt")), s(&dst)]);
    refused(&o, "is not a directory");
    assert!(!dst.exists());
    // The destination inside the source: not made there.
    let inside = src.join("backup");
    let o = mirror(&state, &[s(&src), s(&inside)]);
    refused(&o, "is inside the source");
    assert!(!inside.exists());
    // A file as the destination: said so, and left as it was.
    let file = t.path().join("file");
    write(&file, b"mine");
    let o = mirror(&state, &[s(&src), s(&file)]);
    refused(&o, "exists and is not a directory");
    assert_eq!(fs::read(&file).unwrap(), b"mine");
}

#[test]
fn rsync_filter_rules_not_built_are_a_usage_error() {
    let (_t, src, dst, state) = roots();
    tree(&src);
    let o = mirror(&state, &["--filter", "P keep", s(&src), s(&dst)]);
    assert_exit(&o, 64);
    assert!(text(&o.stderr).contains("not built"), "{}", text(&o.stderr));
    let o = mirror(&state, &["--max-size", "lots", s(&src), s(&dst)]);
    assert_exit(&o, 64);
    assert!(!dst.exists());
}

/// A backup of a home directory holds Accord's own state directory: its
/// memos change during the run, so they are left out rather than reported
/// as changed on every run after the first.
#[test]
fn our_own_state_inside_the_source_is_left_out() {
    let (_t, src, dst, _) = roots();
    tree(&src);
    let state = src.join(".local/state/accord");
    for _ in 0..2 {
        let o = mirror(&state, &[s(&src), s(&dst)]);
        assert_exit(&o, 0);
    }
    assert!(state.exists(), "the run kept no state");
    assert!(
        !dst.join(".local/state/accord").exists(),
        "the state was copied"
    );
    assert!(dst.join("sub/z.c").exists());
}

/// `--files-from`: the listed paths (a directory with all it holds, as
/// rsync's `-r --files-from`), with the directories above them; the
/// destination's other entries are left alone.
#[test]
fn files_from_copies_what_rsync_copies_and_leaves_the_rest() {
    if !need("rsync", "rsync") {
        return;
    }
    let (t, src, dst, state) = roots();
    tree(&src);
    let list = t.path().join("list");
    fs::write(&list, "a/deep/y.c\n./sub/\ntop.txt\n").unwrap();
    let theirs = t.path().join("theirs");
    fs::create_dir_all(&theirs).unwrap();
    let o = Command::new("rsync")
        .args(["-a", "-r", "--files-from"])
        .arg(&list)
        .arg(format!("{}/", s(&src)))
        .arg(format!("{}/", s(&theirs)))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = mirror(&state, &["--files-from", s(&list), s(&src), s(&dst)]);
    assert_exit(&o, 0);
    assert_eq!(contents(&dst), contents(&theirs));
    // What the destination had besides stays.
    write(&dst.join("mine.txt"), b"mine");
    let o = mirror(&state, &["--files-from", s(&list), s(&src), s(&dst)]);
    assert_exit(&o, 0);
    assert_eq!(fs::read(dst.join("mine.txt")).unwrap(), b"mine");
}

/// Every path under `root` that is a regular file, with its inode.
fn inodes(root: &Path) -> std::collections::BTreeMap<String, u64> {
    use std::os::unix::fs::MetadataExt;
    contents(root)
        .into_iter()
        .filter(|(p, _)| !p.ends_with('/'))
        .map(|(p, _)| {
            let ino = fs::symlink_metadata(root.join(&p)).unwrap().ino();
            (p, ino)
        })
        .collect()
}

/// The files of `new` that are hard links to the file at their path in `old`.
fn linked(old: &Path, new: &Path) -> BTreeSet<String> {
    let before = inodes(old);
    inodes(new)
        .into_iter()
        .filter(|(p, ino)| before.get(p) == Some(ino))
        .map(|(p, _)| p)
        .collect()
}

/// `--link-dest`: a snapshot links the files that did not change to the
/// previous snapshot, the ones rsync's `--link-dest` links, and copies the
/// others; a relative DIR is taken from DST (which does not exist yet).
#[test]
fn link_dest_links_what_rsync_links() {
    if !need("rsync", "rsync") {
        return;
    }
    let (t, src, _, state) = roots();
    tree(&src);
    let (ours, theirs) = (t.path().join("ours"), t.path().join("theirs"));
    let o = mirror(&state, &[s(&src), s(&ours.join("1"))]);
    assert_exit(&o, 0);
    fs::create_dir_all(theirs.join("1")).unwrap();
    rsync(&[], &src, &theirs.join("1"));
    // Changes: new contents, a new file, a new mtime, a new mode.
    write(&src.join("top.txt"), b"changed");
    write(&src.join("new.txt"), b"new");
    set_mtime(&src.join("a/x.c"), 1_700_000_000, 0);
    chmod(&src.join("sub/z.c"), 0o600);
    let o = mirror(
        &state,
        &[
            "--stats",
            "--link-dest",
            "../1",
            s(&src),
            s(&ours.join("2")),
        ],
    );
    assert_exit(&o, 0);
    // Linked files are counted as links, not as files written (as rsync).
    let stats = text(&o.stdout);
    assert!(stats.contains("Files written: 4\n"), "{stats}");
    assert!(stats.contains("Hard links made: 10\n"), "{stats}");
    fs::create_dir_all(theirs.join("2")).unwrap();
    rsync(&["--link-dest=../1"], &src, &theirs.join("2"));
    assert_eq!(contents(&ours.join("2")), contents(&src));
    let ours_linked = linked(&ours.join("1"), &ours.join("2"));
    assert_eq!(ours_linked, linked(&theirs.join("1"), &theirs.join("2")));
    assert!(ours_linked.contains("sub/big.bin"), "{ours_linked:?}");
    assert!(!ours_linked.contains("top.txt"), "{ours_linked:?}");
    // The first snapshot is as it was.
    assert_eq!(fs::read(ours.join("1/top.txt")).unwrap(), b"top");
}

/// `accord mirror A B DST` against `rsync -a --delete A B DST/`: each
/// source goes into DST/NAME, DST's own extra entries stay, and extras
/// inside DST/NAME are deleted.
#[test]
fn several_sources_go_where_rsync_puts_them() {
    if !need("rsync", "rsync") {
        return;
    }
    let (t, src, _, state) = roots();
    tree(&src);
    let other = t.path().join("other");
    write(&other.join("o.txt"), b"other");
    let (ours, theirs) = (t.path().join("ours"), t.path().join("theirs"));
    for dst in [&ours, &theirs] {
        write(&dst.join("mine.txt"), b"not from a source");
        write(&dst.join("other/stale.txt"), b"stale");
        write(&dst.join("other/o.txt"), b"old");
    }
    let o = mirror(
        &state,
        &["-v", s(&src), &format!("{}/", s(&other)), s(&ours)],
    );
    assert_exit(&o, 0);
    let listed = text(&o.stdout);
    assert!(listed.contains("other/o.txt"), "{listed}");
    assert!(listed.contains("deleted   other/stale.txt"), "{listed}");
    // rsync's own form for the same wish: no trailing slash on the sources.
    let r = Command::new("rsync")
        .args(["-a", "--delete", s(&src), s(&other)])
        .arg(format!("{}/", s(&theirs)))
        .output()
        .expect("run rsync");
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert_eq!(contents(&ours), contents(&theirs));
    // Backups of several sources: DIR/NAME/PATH, DIR taken from DST.
    write(&other.join("o.txt"), b"other, again");
    fs::remove_file(src.join("top.txt")).unwrap();
    let o = mirror(
        &state,
        &["--backup-dir", "../bak-ours", s(&src), s(&other), s(&ours)],
    );
    assert_exit(&o, 0);
    let r = Command::new("rsync")
        .args([
            "-a",
            "--delete",
            "-b",
            "--backup-dir=../bak-theirs",
            s(&src),
            s(&other),
        ])
        .arg(format!("{}/", s(&theirs)))
        .output()
        .expect("run rsync");
    assert!(r.status.success(), "{}", text(&r.stderr));
    assert_eq!(contents(&ours), contents(&theirs));
    let bak = |name: &str| contents(&t.path().join(name));
    assert_eq!(bak("bak-ours"), bak("bak-theirs"));
    assert_eq!(bak("bak-ours").len(), 4, "{:?}", bak("bak-ours"));
    // Two sources of one name would land on each other: refused, nothing made.
    let twin = t.path().join("x").join(src.file_name().unwrap());
    fs::create_dir_all(&twin).unwrap();
    let fresh = t.path().join("fresh");
    let o = mirror(&state, &[s(&src), s(&twin), s(&fresh)]);
    assert_exit(&o, 64);
    assert!(
        text(&o.stderr).contains("would both go to"),
        "{}",
        text(&o.stderr)
    );
    assert!(!fresh.exists());
}
