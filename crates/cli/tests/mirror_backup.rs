//! `-b`/`--backup`, `--backup-dir` and `--suffix`: what a run overwrites
//! or deletes is kept, checked against rsync itself (`rsync -a --delete
//! -b`) on the same trees, names and contents: beside the file with `~`
//! or another suffix, under a backup directory outside DST, an older
//! backup replaced by the next run, a deleted directory's files kept. And
//! what rsync leaves to the user: a backup directory inside DST is left
//! out of the mirror, a dry run keeps nothing, and the same over ssh.

mod mirror_common;
mod remote_common;

use mirror_common::*;
use remote_common::*;
use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn write(p: &Path, data: &[u8], mtime: i64) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
    set_mtime(p, mtime, 0);
}

/// The source: changed files, a new one, a symlink that points elsewhere
/// now, a file named like a backup (`notes~`, which is copied as any
/// other).
fn source(root: &Path) {
    for (p, data) in [
        ("a.txt", &b"a, second version"[..]),
        ("same.txt", b"unchanged"),
        ("d/b.txt", b"b, second version, longer"),
        ("d/new.txt", b"new"),
        ("notes~", b"a source file named like a backup"),
    ] {
        write(&root.join(p), data, 1_600_000_000);
    }
    std::os::unix::fs::symlink("there", root.join("link")).unwrap();
}

/// The destination before the run: old versions of the source's files,
/// extra files, an extra directory with files in two levels, an earlier
/// run's backups beside their files (`stale~`, a directory `old~/`).
fn destination(root: &Path) {
    for (p, data) in [
        ("a.txt", &b"a, first"[..]),
        ("same.txt", b"unchanged"),
        ("d/b.txt", b"b, first"),
        ("extra.txt", b"extra"),
        ("gone/f.txt", b"in a deleted directory"),
        ("gone/sub/g.txt", b"deeper in it"),
        ("stale~", b"an earlier backup"),
        ("old~/q.txt", b"in an earlier backup directory"),
    ] {
        let mtime = if p == "same.txt" {
            1_600_000_000
        } else {
            1_500_000_000
        };
        write(&root.join(p), data, mtime);
    }
    std::os::unix::fs::symlink("here", root.join("link")).unwrap();
}

/// Every path under `root` with its contents ("/" for a directory, "->
/// TARGET" for a symlink).
fn contents(root: &Path) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    if !root.exists() {
        return out;
    }
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let meta = fs::symlink_metadata(&p).unwrap();
            if meta.file_type().is_symlink() {
                let target = fs::read_link(&p).unwrap();
                out.insert((rel, format!("-> {}", target.display())));
            } else if meta.is_dir() {
                out.insert((rel + "/", String::new()));
                stack.push(p);
            } else {
                out.insert((rel, text(&fs::read(&p).unwrap())));
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

/// Two runs with `flags` by accord and by rsync, each into its own
/// `dst` (with `bak` beside it), the source changed between them (the
/// second replaces older backups); what each side holds is compared after
/// each run.
fn same_as_rsync(flags: &[&str]) {
    if !need("rsync", "rsync") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let src = p.join("src");
    source(&src);
    let (ours, theirs) = (p.join("ours"), p.join("theirs"));
    for side in [&ours, &theirs] {
        destination(&side.join("dst"));
    }
    let state = p.join("state");
    for round in 1..=2 {
        if round == 2 {
            write(&src.join("a.txt"), b"a, third version!", 1_700_000_000);
            fs::remove_file(src.join("d/new.txt")).unwrap();
        }
        rsync(flags, &src, &theirs.join("dst"));
        let mut args = flags.to_vec();
        args.extend(["--force", s(&src)]);
        let dst = ours.join("dst");
        args.push(s(&dst));
        let o = mirror_walk(&state, &args);
        assert_exit(&o, 0);
        assert_eq!(
            contents(&ours),
            contents(&theirs),
            "round {round}: accord mirror {flags:?} differs from rsync -a --delete {flags:?}"
        );
    }
}

#[test]
fn backups_beside_their_files_match_rsync() {
    same_as_rsync(&["-b"]);
}

#[test]
fn another_suffix_matches_rsync() {
    same_as_rsync(&["-b", "--suffix=.old"]);
}

#[test]
fn a_backup_dir_outside_dst_matches_rsync() {
    same_as_rsync(&["--backup-dir=../bak"]);
    same_as_rsync(&["-b", "--backup-dir=../bak", "--suffix=.prev"]);
}

/// A backup is the old version's own inode (a hard link: no data copied),
/// and the earlier backup it replaces is gone.
#[test]
fn a_backup_is_a_link_of_the_old_version() {
    let (_t, src, dst, state) = roots();
    write(&src.join("f"), b"new", 1_600_000_000);
    write(&dst.join("f"), b"old version", 1_500_000_000);
    write(&dst.join("f~"), b"older backup", 1_400_000_000);
    let old_ino = fs::metadata(dst.join("f")).unwrap().ino();
    assert_exit(&mirror_walk(&state, &["-b", s(&src), s(&dst)]), 0);
    let kept = fs::metadata(dst.join("f~")).unwrap();
    assert_eq!(
        kept.ino(),
        old_ino,
        "the backup is not the old file's inode"
    );
    assert_eq!(kept.nlink(), 1);
    assert_eq!(fs::read(dst.join("f~")).unwrap(), b"old version");
    assert_eq!(fs::read(dst.join("f")).unwrap(), b"new");
}

/// `--backup-dir` inside DST (unlike rsync, which backs it up into
/// itself and mirrors into it): left out of the mirror on both sides, so
/// that a source directory of that name is not copied over it and its
/// backups stay through later runs.
#[test]
fn a_backup_dir_inside_dst_is_left_out_of_the_mirror() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let (src, dst, state) = (p.join("src"), p.join("dst"), p.join("state"));
    source(&src);
    write(&src.join("bk/from-source"), b"not copied", 1_600_000_000);
    destination(&dst);
    write(&dst.join("bk/earlier"), b"an earlier run's", 1_500_000_000);
    let o = mirror_walk(&state, &["--force", "--backup-dir", "bk", s(&src), s(&dst)]);
    assert_exit(&o, 0);
    let got = contents(&dst.join("bk"));
    let want: BTreeSet<(String, String)> = [
        ("a.txt", "a, first"),
        ("d/", ""),
        ("d/b.txt", "b, first"),
        ("earlier", "an earlier run's"),
        ("extra.txt", "extra"),
        ("gone/", ""),
        ("gone/f.txt", "in a deleted directory"),
        ("gone/sub/", ""),
        ("gone/sub/g.txt", "deeper in it"),
        ("link", "-> here"),
        ("old~/", ""),
        ("old~/q.txt", "in an earlier backup directory"),
        ("stale~", "an earlier backup"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(got, want);
    // The rest of DST is the source, less its bk/.
    let mut rest = contents(&dst);
    rest.retain(|(p, _)| !p.starts_with("bk"));
    let mut from = contents(&src);
    from.retain(|(p, _)| !p.starts_with("bk"));
    assert_eq!(rest, from);
    // A second run changes nothing there.
    let o = mirror_walk(&state, &["--backup-dir", "bk", s(&src), s(&dst)]);
    assert_exit(&o, 0);
    assert_eq!(contents(&dst.join("bk")), want);
}

/// `-n` shows the run as without -b and keeps nothing.
#[test]
fn a_dry_run_makes_no_backup() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let (src, dst, state) = (p.join("src"), p.join("dst"), p.join("state"));
    source(&src);
    destination(&dst);
    let before = contents(&dst);
    let plain = mirror_walk(&state, &["-n", "--itemize", "--force", s(&src), s(&dst)]);
    assert_exit(&plain, 0);
    for flags in [["-b", "--suffix=~"], ["--backup-dir", "../bak"]] {
        let mut args = vec!["-n", "--itemize", "--force"];
        args.extend(flags);
        args.extend([s(&src), s(&dst)]);
        let o = mirror_walk(&state, &args);
        assert_exit(&o, 0);
        assert_eq!(contents(&dst), before, "{flags:?}: the dry run changed DST");
        assert!(!p.join("bak").exists(), "{flags:?}: the dry run made bak");
        if flags[0] == "--backup-dir" {
            assert_eq!(text(&o.stdout), text(&plain.stdout), "{flags:?}");
        }
    }
}

/// Flags that cannot go together, refused before anything is touched.
#[test]
fn refused_combinations_say_why() {
    let (_t, src, dst, state) = roots();
    write(&src.join("f"), b"new", 1_600_000_000);
    write(&dst.join("f"), b"old", 1_500_000_000);
    for (args, words) in [
        (&["-b", "--inplace"][..], "--inplace"),
        (&["-b", "--executor", "tasks"], "task runs"),
        (&["-b", "--suffix="], "--suffix cannot be empty"),
        (&["-b", "--suffix=a/b"], "no '/'"),
        (&["--backup-dir", "."], "DST itself"),
        (&["--backup-dir", ".."], "nor hold DST"),
    ] {
        let mut all = args.to_vec();
        all.extend([s(&src), s(&dst)]);
        let o = mirror_walk(&state, &all);
        assert_exit(&o, 64);
        let err = text(&o.stderr);
        assert!(err.contains(words), "{args:?}: {err}");
        assert_eq!(fs::read(dst.join("f")).unwrap(), b"old");
        assert_eq!(fs::read_dir(&dst).unwrap().count(), 1, "{args:?}");
    }
}

/// A destination across ssh: backups beside their files and in a backup
/// directory inside DST are made there as by a local run.
#[test]
fn backups_on_a_destination_over_ssh() {
    let Some(sshd) = Sshd::start() else { return };
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let src = p.join("src");
    source(&src);
    for flags in [&["-b"][..], &["--backup-dir", ".bak/today", "--suffix=.1"]] {
        let (local, remote) = (p.join("local"), p.join("remote"));
        for d in [&local, &remote] {
            let _ = fs::remove_dir_all(d);
            destination(d);
        }
        let mut args = flags.to_vec();
        args.extend(["--force", s(&src)]);
        let mut local_args = args.clone();
        local_args.push(s(&local));
        assert_exit(&mirror_walk(&p.join("state-l"), &local_args), 0);
        let root = sshd.root(&remote);
        args.push(&root);
        let o = remote_mirror(&p.join("state-r"), &sshd.rsh(), &args);
        assert_exit(&o, 0);
        assert_eq!(contents(&remote), contents(&local), "{flags:?}");
    }
    // Only DST's own tree is reachable over there.
    let root = sshd.root(&p.join("remote"));
    let args = ["--backup-dir", "../bak", s(&src), &root];
    let o = remote_mirror(&p.join("state-r"), &sshd.rsh(), &args);
    assert_exit(&o, 64);
    assert!(text(&o.stderr).contains("relative DIR inside DST"));
}
