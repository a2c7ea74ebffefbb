//! Acceptance 1 and 2: every entry kind kept exactly (checked independently
//! and against rsync -aHAXS), convergence after random modifications, and a
//! third run that writes nothing.

mod mirror_common;
use mirror_common::*;
use std::path::Path;

fn assert_same(src: &Path, dst: &Path) {
    let d = differences(&snapshot(src), &snapshot(dst));
    assert!(d.is_empty(), "trees differ:\n{}", d.join("\n"));
    if have("rsync") {
        let it = rsync_itemize(src, dst);
        assert!(
            it.trim().is_empty(),
            "rsync -aHAXS would still change:\n{it}"
        );
    } else {
        skip_or_fail(
            "rsync is not installed (apt-get install rsync): no comparison with rsync -aHAXS",
        );
    }
}

/// Another run itemizes nothing.
fn assert_nothing_left(state: &Path, src: &str, dst: &str) {
    let again = mirror(state, &[src, dst, "-i"]);
    assert_exit(&again, 0);
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        "",
        "nothing left to do"
    );
}

#[test]
fn every_kind_identical() {
    let t = tempfile::tempdir().unwrap();
    let (src, dst, state) = (
        t.path().join("src"),
        t.path().join("dst"),
        t.path().join("state"),
    );
    std::fs::create_dir(&src).unwrap();
    full_tree(&src);
    let o = mirror(
        &state,
        &[src.to_str().unwrap(), dst.to_str().unwrap(), "--json"],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(json_field(&o.stdout, "errors"), serde_json::json!([]));
    assert_same(&src, &dst);

    // The reference tool, for comparison: rsync's own copy agrees with ours.
    if have("rsync") {
        let refd = t.path().join("ref");
        sh(&format!(
            "rsync -aHAXS --delete '{}/' '{}/'",
            src.display(),
            refd.display()
        ));
        let d = differences(&snapshot(&refd), &snapshot(&dst));
        // rsync does not keep directory... everything it keeps must match ours.
        assert!(
            d.is_empty(),
            "accord and rsync copies differ:\n{}",
            d.join("\n")
        );
    }
}

fn modify(root: &Path, rng: &mut Rng) {
    // Edit, grow, shrink.
    std::fs::write(root.join("plain.txt"), b"edited\n").unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(root.join("a/big"))
            .unwrap();
        f.write_all_at(&rng.bytes(100), 1_000_000).unwrap();
    }
    std::fs::write(root.join("nested/deeper/deepest/data.bin"), rng.bytes(1000)).unwrap();
    // Renames (file and directory).
    std::fs::rename(root.join("名前/ファイル"), root.join("名前/renamed")).unwrap();
    std::fs::rename(root.join("unicodé ü"), root.join("moved dir")).unwrap();
    // Deletes.
    std::fs::remove_file(root.join("links/dangling")).unwrap();
    std::fs::remove_dir(root.join("nested/empty")).unwrap();
    // Kind changes: file -> dir, symlink -> file, dir -> file.
    std::fs::remove_file(root.join("empty-file")).unwrap();
    std::fs::create_dir(root.join("empty-file")).unwrap();
    std::fs::write(root.join("empty-file/inside"), b"x").unwrap();
    std::fs::remove_file(root.join("dirlink")).unwrap();
    std::fs::write(root.join("dirlink"), b"now a file").unwrap();
    std::fs::remove_dir(root.join("empty dir")).unwrap();
    std::fs::write(root.join("empty dir"), b"was a dir").unwrap();
    // Modes and times.
    chmod(&root.join("links/one"), 0o600);
    set_mtime(&root.join("nested"), 1_234_567_890, 5);
    set_mtime(&root.join("links/rel"), 1_234_567_891, 6);
    // New hard links, one breaking an old group.
    std::fs::hard_link(root.join("plain.txt"), root.join("nested/plain-link")).unwrap();
    std::fs::remove_file(root.join("links/two-b")).unwrap();
    std::fs::write(root.join("links/two-b"), b"separate now").unwrap();
    // Xattr changes.
    set_xattr(&root.join("links/one"), "user.new", b"1");
    // New files.
    for i in 0..20 {
        let n = rng.below(5000) as usize;
        std::fs::write(root.join(format!("nested/new-{i}")), rng.bytes(n)).unwrap();
    }
}

#[test]
fn modify_and_remirror_converges_third_run_writes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let (src, dst, state) = (
        t.path().join("src"),
        t.path().join("dst"),
        t.path().join("state"),
    );
    std::fs::create_dir(&src).unwrap();
    full_tree(&src);
    let args = [src.to_str().unwrap(), dst.to_str().unwrap()];
    assert_eq!(mirror(&state, &args).status.code(), Some(0));
    let mut rng = Rng(42);
    modify(&src, &mut rng);
    let o = mirror(&state, &[args[0], args[1], "-i"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "stderr: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!o.stdout.is_empty(), "second run itemized nothing");
    assert_same(&src, &dst);

    // Third run: nothing to do, and nothing touched (ctimes unchanged).
    let before = snapshot(&dst);
    let o = mirror(&state, &[args[0], args[1], "-i", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(json_field(&o.stdout, "files_transferred"), 0);
    assert_eq!(json_field(&o.stdout, "bytes_written"), 0);
    assert_eq!(json_field(&o.stdout, "files_deleted"), 0);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        text.lines().count(),
        1,
        "third run itemized changes:\n{text}"
    );
    let after = snapshot(&dst);
    for (k, b) in &before {
        assert_eq!(
            Some(b.ctime),
            after.get(k).map(|a| a.ctime),
            "{k:?} was touched"
        );
    }
}

#[test]
fn dry_run_changes_nothing_and_checksum_finds_same_size_same_time_edits() {
    let t = tempfile::tempdir().unwrap();
    let (src, dst, state) = (
        t.path().join("src"),
        t.path().join("dst"),
        t.path().join("state"),
    );
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d/f"), b"aaaa").unwrap();
    let o = mirror(
        &state,
        &[src.to_str().unwrap(), dst.to_str().unwrap(), "-n"],
    );
    assert_eq!(o.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&o.stdout).contains("created   d/f"));
    assert!(!dst.exists(), "dry run created the destination");
    assert_eq!(
        mirror(&state, &[src.to_str().unwrap(), dst.to_str().unwrap()])
            .status
            .code(),
        Some(0)
    );
    // Same size, same mtime, different bytes: only --checksum sees it.
    let md = std::fs::metadata(src.join("d/f")).unwrap();
    std::fs::write(src.join("d/f"), b"bbbb").unwrap();
    {
        use std::os::unix::fs::MetadataExt;
        set_mtime(&src.join("d/f"), md.mtime(), md.mtime_nsec());
        set_mtime(
            &src.join("d"),
            std::fs::metadata(dst.join("d")).unwrap().mtime(),
            std::fs::metadata(dst.join("d")).unwrap().mtime_nsec(),
        );
    }
    mirror(&state, &[src.to_str().unwrap(), dst.to_str().unwrap()]);
    assert_eq!(std::fs::read(dst.join("d/f")).unwrap(), b"aaaa");
    let o = mirror(
        &state,
        &[
            src.to_str().unwrap(),
            dst.to_str().unwrap(),
            "--checksum",
            "-i",
        ],
    );
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(std::fs::read(dst.join("d/f")).unwrap(), b"bbbb");
}

/// `-i` lists changes by path, whatever order the parallel phases made
/// them in, so two runs of the same change print the same lines.
#[test]
fn itemized_changes_come_in_path_order() {
    let (_tmp, src, dst, state) = roots();
    let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
    for i in 0..40 {
        let dir = src.join(format!("d{}", i % 7));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("f{i:02}")), b"x").unwrap();
        std::fs::create_dir_all(dst.join(format!("d{}", i % 5))).unwrap();
        std::fs::write(dst.join(format!("d{}/g{i:02}", i % 5)), b"y").unwrap();
    }
    let o = mirror(&state, &[s, d, "-i", "--force"]);
    assert_exit(&o, 0);
    let text = String::from_utf8(o.stdout).unwrap();
    let paths: Vec<&str> = text
        .lines()
        .map(|l| l.split_once(' ').unwrap().1.trim_start())
        .collect();
    assert!(
        paths.len() > 80,
        "created and deleted entries listed:\n{text}"
    );
    // These names sort the same bytewise and by component.
    let mut sorted = paths.clone();
    sorted.sort();
    assert_eq!(paths, sorted, "itemized:\n{text}");
}

/// An initial copy into an empty destination is carried out while the
/// walk plans it, in parts of a commit batch (so memory does not hold an
/// item per entry of the tree). A tree of many parts, with every kind of
/// entry and hard links across directories, comes out whole; `-i` lists
/// each entry once, in path order; a second run changes nothing.
#[test]
fn an_initial_copy_of_many_parts_is_whole() {
    let (_tmp, src, dst, state) = roots();
    std::fs::create_dir_all(src.join("kinds")).unwrap();
    full_tree(&src.join("kinds"));
    for d in 0..12 {
        for e in 0..3 {
            let dir = src.join(format!("d{d:02}/e{e}"));
            std::fs::create_dir_all(&dir).unwrap();
            for f in 0..200 {
                std::fs::write(dir.join(format!("f{f:03}")), format!("{d} {e} {f}")).unwrap();
            }
        }
        std::fs::hard_link(src.join("d00/e0/f000"), src.join(format!("d{d:02}/link"))).unwrap();
    }
    let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
    let o = mirror(&state, &[s, d, "-i"]);
    assert_exit(&o, 0);
    assert_same(&src, &dst);
    let text = String::from_utf8(o.stdout).unwrap();
    // (The root's own line, its properties set, is not an entry copied.)
    let listed: Vec<&str> = text
        .lines()
        .map(|l| l.split_once(' ').unwrap().1.trim_start())
        .filter(|p| *p != ".")
        .collect();
    // Path order: by component ("a/b" before "a.c").
    let by_component = |p: &&str| p.split('/').map(str::to_owned).collect::<Vec<_>>();
    let mut sorted = listed.clone();
    sorted.sort_by_key(by_component);
    assert_eq!(listed, sorted, "itemized in path order");
    let keys: Vec<String> = snapshot(&src)
        .into_keys()
        .filter(|p| !p.is_empty())
        .collect();
    let mut entries: Vec<&str> = keys.iter().map(String::as_str).collect();
    entries.sort_by_key(by_component);
    assert!(entries.len() > 7200, "{} entries", entries.len());
    assert_eq!(listed, entries, "each entry listed once");

    assert_nothing_left(&state, s, d);
}

/// A directory of more names than the walk's slice (1,024) is planned a
/// slice at a time: each change is made in whichever slice it falls, a
/// name on one side only is copied or deleted, and the directory's own
/// properties are set again when only its first slice changed (the
/// rename of a rewritten file moves the copy's mtime).
#[test]
fn a_directory_of_many_names_converges_slice_by_slice() {
    let (_tmp, src, dst, state) = roots();
    let big = src.join("big");
    std::fs::create_dir_all(&big).unwrap();
    for f in 0..5000 {
        std::fs::write(big.join(format!("f{f:04}")), format!("file {f}")).unwrap();
    }
    for sub in ["f0100d", "f2500d", "f4900d"] {
        std::fs::create_dir(big.join(sub)).unwrap();
        std::fs::write(big.join(sub).join("inner"), sub).unwrap();
    }
    std::os::unix::fs::symlink("f0000", big.join("f3000l")).unwrap();
    let (s, d) = (src.to_str().unwrap(), dst.to_str().unwrap());
    assert_exit(&mirror(&state, &[s, d]), 0);
    assert_same(&src, &dst);

    // Only a file of the first slice rewritten (the directory's own mtime
    // does not move in the source; it does in the copy).
    let dir_mtime = std::fs::metadata(&big).unwrap().modified().unwrap();
    std::fs::write(big.join("f0001"), "rewritten, first slice").unwrap();
    assert_eq!(
        std::fs::metadata(&big).unwrap().modified().unwrap(),
        dir_mtime
    );
    let o = mirror(&state, &[s, d, "-i"]);
    assert_exit(&o, 0);
    assert_same(&src, &dst);

    // Changes in every slice, and an extra in the copy's first slice.
    std::fs::write(dst.join("big/f0002x"), "extra").unwrap();
    std::fs::remove_file(big.join("f2600")).unwrap();
    std::fs::write(big.join("f4999x"), "added, last slice").unwrap();
    std::fs::write(big.join("f2500d/new"), "below a slice").unwrap();
    std::fs::write(big.join("f3500"), "rewritten, third slice").unwrap();
    let o = mirror(&state, &[s, d, "-i"]);
    assert_exit(&o, 0);
    assert_same(&src, &dst);
    let text = String::from_utf8(o.stdout).unwrap();
    for path in [
        "big/f0002x",
        "big/f2600",
        "big/f4999x",
        "big/f2500d/new",
        "big/f3500",
    ] {
        assert!(
            text.lines().any(|l| l.ends_with(path)),
            "{path} in:\n{text}"
        );
    }
    assert_nothing_left(&state, s, d);
}
