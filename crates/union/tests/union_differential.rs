//! Acceptance 1: the same scripted operations on kernel overlayfs and on `accord union`, over
//! copies of the same lower branch; after every step the visible trees (names, kinds, sizes,
//! contents, modes, owners, old mtimes, symlink targets, user xattrs, link counts, devices)
//! and the operation's outcome (success or errno) must be equal, and the lower branch must be
//! byte-for-byte unchanged (including mtimes and ctimes).
//!
//! Legitimate differences not compared: overlayfs's whiteouts are 0/0 char devices and ours
//! `.wh.` files (only visible trees are compared); directory sizes, link counts and mtimes
//! (they depend on the upper file system's bookkeeping in both); times of entries created
//! during the test (only "recent on both sides" is checked).

mod common;

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;

use common::*;

fn build_lower(l: &Path) {
    fs::create_dir_all(l.join("d/sub")).unwrap();
    fs::create_dir_all(l.join("d2")).unwrap();
    fs::create_dir_all(l.join("emptydir")).unwrap();
    fs::create_dir_all(l.join("emptydir2")).unwrap();
    fs::create_dir_all(l.join("deep/a/b/c")).unwrap();
    for (p, data) in [
        ("a.txt", "alpha\n"),
        ("b.txt", "bravo bravo\n"),
        ("c.txt", "charlie\n"),
        ("g.txt", "golf\n"),
        ("k.txt", "kilo\n"),
        ("t.txt", "tango tango tango\n"),
        ("x.txt", "xray\n"),
        ("d/e.txt", "echo\n"),
        ("d/f.txt", "foxtrot\n"),
        ("d/sub/s.txt", "sierra\n"),
        ("d2/h", "hotel\n"),
        ("deep/a/b/c/leaf", "leaf\n"),
    ] {
        fs::write(l.join(p), data).unwrap();
    }
    fs::write(l.join("big.bin"), vec![7u8; 300_000]).unwrap();
    fs::hard_link(l.join("k.txt"), l.join("k-link")).unwrap();
    std::os::unix::fs::symlink("a.txt", l.join("lower-link")).unwrap();
    mknod(&l.join("lower-fifo"), libc::S_IFIFO | 0o640, 0).unwrap();
    fs::set_permissions(l.join("c.txt"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(l.join("d/sub"), fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::lchown(l.join("g.txt"), Some(1000), Some(1000)).unwrap();
    std::os::unix::fs::lchown(l.join("d/sub"), Some(42), Some(43)).unwrap();
    setxattr(&l.join("x.txt"), "user.k", b"v1").unwrap();
    setxattr(&l.join("d/sub"), "user.dir", b"yes").unwrap();
    sh(&format!(
        "find {} -depth -exec touch -h -d @1000000000 {{}} +",
        l.display()
    ));
}

type Op = (&'static str, fn(&Path) -> io::Result<()>);

fn ops() -> Vec<Op> {
    vec![
        ("create new file", |r| {
            fs::write(r.join("new.txt"), "hello\n")
        }),
        ("append to lower file", |r| {
            OpenOptions::new()
                .append(true)
                .open(r.join("a.txt"))?
                .write_all(b"appended\n")
        }),
        ("truncate lower file", |r| {
            OpenOptions::new()
                .write(true)
                .open(r.join("b.txt"))?
                .set_len(3)
        }),
        ("chmod lower file", |r| {
            fs::set_permissions(r.join("c.txt"), fs::Permissions::from_mode(0o600))
        }),
        ("chown lower file in lower dir", |r| {
            std::os::unix::fs::lchown(r.join("d/e.txt"), Some(1234), Some(5678))
        }),
        ("utimens lower file", |r| {
            set_old_times(&r.join("d/f.txt"), 1_200_000_000);
            Ok(())
        }),
        ("pwrite into lower file", |r| {
            OpenOptions::new()
                .write(true)
                .open(r.join("big.bin"))?
                .write_all_at(b"XYZ", 1000)
        }),
        ("O_TRUNC open of lower file", |r| {
            fs::write(r.join("t.txt"), "new\n")
        }),
        ("rename lower file across dirs", |r| {
            fs::rename(r.join("a.txt"), r.join("d/a-moved.txt"))
        }),
        ("mkdir + file in new dir", |r| {
            fs::create_dir(r.join("nd"))?;
            fs::write(r.join("nd/x"), "x\n")
        }),
        ("rename upper-only dir", |r| {
            fs::rename(r.join("nd"), r.join("nd2"))
        }),
        ("rename merged dir (EXDEV)", |r| {
            fs::rename(r.join("d"), r.join("d-renamed"))
        }),
        ("rename lower-only empty dir (EXDEV)", |r| {
            fs::rename(r.join("emptydir2"), r.join("emptydir3"))
        }),
        ("unlink lower file", |r| fs::remove_file(r.join("g.txt"))),
        ("rmdir lower empty dir", |r| {
            fs::remove_dir(r.join("emptydir"))
        }),
        ("rmdir non-empty lower dir (ENOTEMPTY)", |r| {
            fs::remove_dir(r.join("d2"))
        }),
        ("empty and rmdir lower dir", |r| {
            fs::remove_file(r.join("d2/h"))?;
            fs::remove_dir(r.join("d2"))
        }),
        ("mkdir over deleted dir is opaque", |r| {
            fs::create_dir(r.join("d2"))?;
            fs::write(r.join("d2/fresh"), "fresh\n")
        }),
        ("recreate unlinked file", |r| {
            fs::remove_file(r.join("k.txt"))?;
            fs::write(r.join("k.txt"), "kilo again\n")
        }),
        ("symlink", |r| {
            std::os::unix::fs::symlink("new.txt", r.join("sl"))
        }),
        ("hard link upper file", |r| {
            fs::hard_link(r.join("new.txt"), r.join("new-link"))
        }),
        ("hard link lower file (copy-up)", |r| {
            fs::hard_link(r.join("c.txt"), r.join("c-link"))
        }),
        ("append through one hard link", |r| {
            OpenOptions::new()
                .append(true)
                .open(r.join("new-link"))?
                .write_all(b"via link\n")
        }),
        ("setxattr on lower file", |r| {
            setxattr(&r.join("d/sub/s.txt"), "user.added", b"1")
        }),
        ("removexattr on lower file", |r| {
            removexattr(&r.join("x.txt"), "user.k")
        }),
        ("removexattr missing (ENODATA)", |r| {
            removexattr(&r.join("b.txt"), "user.none")
        }),
        ("mknod fifo", |r| {
            mknod(&r.join("fifo"), libc::S_IFIFO | 0o644, 0)
        }),
        ("mknod char device", |r| {
            mknod(&r.join("cdev"), libc::S_IFCHR | 0o600, libc::makedev(1, 3))
        }),
        ("chmod lower dir", |r| {
            fs::set_permissions(r.join("d/sub"), fs::Permissions::from_mode(0o711))
        }),
        ("rename new file over lower file", |r| {
            fs::rename(r.join("new.txt"), r.join("b.txt"))
        }),
        ("rename lower symlink", |r| {
            fs::rename(r.join("lower-link"), r.join("moved-link"))
        }),
        ("unlink lower hard link", |r| {
            fs::remove_file(r.join("k-link"))
        }),
        ("deep copy-up creates parents", |r| {
            fs::write(r.join("deep/a/b/c/leaf"), "leaf2\n")
        }),
        ("mkdir existing (EEXIST)", |r| fs::create_dir(r.join("d"))),
        ("unlink missing (ENOENT)", |r| {
            fs::remove_file(r.join("nope"))
        }),
        ("rename file over dir (EISDIR)", |r| {
            fs::rename(r.join("c.txt"), r.join("emptydir2"))
        }),
        ("rename dir over non-empty dir (ENOTEMPTY)", |r| {
            fs::create_dir(r.join("nd3"))?;
            fs::rename(r.join("nd3"), r.join("d"))
        }),
        ("rename upper dir over empty lower dir", |r| {
            fs::rename(r.join("nd3"), r.join("emptydir2"))
        }),
        ("delete whole merged tree", |r| {
            fs::remove_dir_all(r.join("d"))
        }),
        ("recreate merged tree path", |r| {
            fs::create_dir_all(r.join("d/sub"))?;
            fs::write(r.join("d/sub/s.txt"), "new sierra\n")
        }),
    ]
}

/// One step of the `redirect_dir=on` run: an operation through both mounts, or a change of
/// the mounts themselves (the same on both sides).
enum Step {
    Op(Op),
    /// Unmount both and mount them again on the same directories.
    Remount,
    /// Freeze the writable branch below a new one (overlayfs: remount with the old upper as
    /// the highest lower layer; accord: `accord union snapshot`, live).
    Snapshot,
    /// Put a branch with more of the renamed directories' lower paths at the bottom
    /// (overlayfs: remount with one more lower layer; accord: `accord union add`, live).
    AddBottom,
    /// Take that branch away again (accord: `accord union remove`, live).
    RemoveBottom,
}

fn mv(r: &Path, from: &str, to: &str) -> io::Result<()> {
    fs::rename(r.join(from), r.join(to))
}

/// Renames of merged directories: nested, repeated, back and forth, into a renamed parent, of
/// a renamed parent, with a remount and a snapshot in between, and what follows them (writes,
/// deletes, rmdir, the old names reused).
fn redirect_steps() -> Vec<Step> {
    use Step::{AddBottom, Op as O, Remount, RemoveBottom, Snapshot};
    vec![
        O(("rename merged dir", |r| mv(r, "d", "d-renamed"))),
        O(("old name is gone", |r| match fs::metadata(r.join("d")) {
            Ok(_) => Ok(()),
            Err(e) => Err(e),
        })),
        O(("write into renamed dir", |r| {
            fs::write(r.join("d-renamed/new.txt"), "new\n")
        })),
        O(("edit lower file in renamed dir", |r| {
            OpenOptions::new()
                .append(true)
                .open(r.join("d-renamed/e.txt"))?
                .write_all(b"more\n")
        })),
        O(("rename nested merged dir to another parent", |r| {
            mv(r, "deep/a/b", "deep/b2")
        })),
        AddBottom,
        O(("rename renamed dir again", |r| {
            mv(r, "d-renamed", "d-again")
        })),
        O(("rename back to original name", |r| mv(r, "d-again", "d"))),
        O(("rename forth again", |r| mv(r, "d", "dx"))),
        O(("rename lower-only empty dir", |r| {
            mv(r, "emptydir2", "emptydir3")
        })),
        O(("rename merged dir into renamed parent", |r| {
            mv(r, "d2", "dx/d2-in")
        })),
        O(("mkdir at a renamed dir's old name is empty", |r| {
            fs::create_dir(r.join("d"))?;
            fs::write(r.join("d/only"), "only\n")
        })),
        O(("rename subdir of renamed dir", |r| {
            mv(r, "dx/sub", "dx/sub2")
        })),
        Remount,
        O(("rename after remount", |r| mv(r, "dx", "dy"))),
        RemoveBottom,
        O(("unlink lower file in redirected dir", |r| {
            fs::remove_file(r.join("dy/f.txt"))
        })),
        O(("rename renamed parent into new dir", |r| {
            fs::create_dir(r.join("top"))?;
            mv(r, "dy", "top/dy")
        })),
        Snapshot,
        O(("rename after snapshot", |r| mv(r, "top/dy", "dz"))),
        O(("rename nested renamed dir into renamed parent", |r| {
            mv(r, "deep/b2", "dz/b3")
        })),
        O(("rename snapshot-renamed child", |r| {
            mv(r, "dz/d2-in", "d2-back")
        })),
        O(("rmdir redirected non-empty dir (ENOTEMPTY)", |r| {
            fs::remove_dir(r.join("dz"))
        })),
        O(("rename dir over empty lower dir", |r| {
            mv(r, "emptydir3", "emptydir")
        })),
        O(("rename merged dir over non-empty dir (ENOTEMPTY)", |r| {
            mv(r, "d2-back", "dz")
        })),
        O(("rename dir into its own child (EINVAL)", |r| {
            mv(r, "dz", "dz/b3/inside")
        })),
        Remount,
        O(("empty and rmdir redirected dir", |r| {
            fs::remove_dir_all(r.join("dz/b3"))
        })),
        O(("rename to the original name after snapshot", |r| {
            fs::remove_dir_all(r.join("d"))?;
            mv(r, "dz", "d")
        })),
        O(("mkdir at old name after rmdir", |r| {
            fs::create_dir_all(r.join("deep/a/b"))?;
            fs::write(r.join("deep/a/b/fresh"), "fresh\n")
        })),
        O(("remove whole renamed tree", |r| {
            fs::remove_dir_all(r.join("d2-back"))
        })),
        Remount,
    ]
}

/// The trees under two mounts as a list of differences (empty when equal).
fn tree_diff(a: &Path, b: &Path) -> String {
    let (ta, tb) = (describe(a, false), describe(b, false));
    let mut diff = String::new();
    for k in ta
        .keys()
        .chain(tb.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        if ta.get(k) != tb.get(k) {
            diff += &format!(
                "\n  {k}:\n    overlayfs {:?}\n    accord    {:?}",
                ta.get(k),
                tb.get(k)
            );
        }
    }
    diff
}

/// Both sides of the `redirect_dir=on` run: the directories and the live mounts.
struct Redirect {
    base: std::path::PathBuf,
    /// overlayfs's lower layers and accord's read-only branches, highest first.
    ovl_lowers: Vec<std::path::PathBuf>,
    acc_lowers: Vec<std::path::PathBuf>,
    /// Snapshots taken so far (the writable directories are `*-upper{n}`).
    snaps: usize,
    ovl: Option<OverlayMount>,
    acc: Option<UnionMount>,
}

impl Redirect {
    fn upper(&self, side: &str) -> std::path::PathBuf {
        self.base.join(format!("{side}-upper{}", self.snaps))
    }

    fn mount(&mut self) -> Result<(), String> {
        let lowers: Vec<&Path> = self.ovl_lowers.iter().map(|p| p.as_path()).collect();
        let work = self.base.join(format!("ovl-work{}", self.snaps));
        let ovl_mnt = self.base.join("ovl");
        self.ovl = Some(OverlayMount::with(
            &lowers,
            &self.upper("ovl"),
            &work,
            &ovl_mnt,
            "on",
        )?);
        let upper = self.upper("acc");
        fs::create_dir_all(&upper).unwrap();
        let mut branches = vec![format!("{}=rw", upper.display())];
        branches.extend(
            self.acc_lowers
                .iter()
                .map(|l| format!("{}=ro", l.display())),
        );
        self.acc = Some(UnionMount::new(&self.base.join("acc"), &branches));
        Ok(())
    }

    fn remount(&mut self) {
        self.ovl = None;
        self.acc = None;
        self.mount().unwrap();
    }

    fn snapshot(&mut self) {
        let (old_ovl, old_acc) = (self.upper("ovl"), self.upper("acc"));
        self.ovl = None;
        self.snaps += 1;
        self.ovl_lowers.insert(0, old_ovl);
        let lowers: Vec<&Path> = self.ovl_lowers.iter().map(|p| p.as_path()).collect();
        let work = self.base.join(format!("ovl-work{}", self.snaps));
        self.ovl = Some(
            OverlayMount::with(
                &lowers,
                &self.upper("ovl"),
                &work,
                &self.base.join("ovl"),
                "on",
            )
            .unwrap(),
        );
        let new = self.upper("acc");
        self.acc
            .as_ref()
            .unwrap()
            .ctl(&["snapshot", &new.to_string_lossy()]);
        self.acc_lowers.insert(0, old_acc);
    }

    /// A branch below all others with more under the lower paths of renamed directories.
    fn add_bottom(&mut self) {
        let (ovl_extra, acc_extra) = (self.base.join("ovl-extra"), self.base.join("acc-extra"));
        for extra in [&ovl_extra, &acc_extra] {
            for f in [
                "d/from-extra",
                "d/sub/from-extra",
                "deep/a/b/from-extra",
                "d2/x",
            ] {
                fs::create_dir_all(extra.join(f).parent().unwrap()).unwrap();
                fs::write(extra.join(f), f).unwrap();
            }
        }
        self.ovl_lowers.push(ovl_extra);
        self.remount_ovl();
        let after = self.acc_lowers.len().to_string();
        let dir = acc_extra.to_string_lossy().into_owned();
        self.acc
            .as_ref()
            .unwrap()
            .ctl(&["add", &dir, "--after", &after]);
        self.acc_lowers.push(acc_extra);
    }

    fn remove_bottom(&mut self) {
        self.ovl_lowers.pop();
        self.remount_ovl();
        let dir = self.acc_lowers.pop().unwrap();
        self.acc
            .as_ref()
            .unwrap()
            .ctl(&["remove", &dir.to_string_lossy()]);
    }

    fn remount_ovl(&mut self) {
        self.ovl = None;
        let lowers: Vec<&Path> = self.ovl_lowers.iter().map(|p| p.as_path()).collect();
        let work = self.base.join(format!("ovl-work{}", self.snaps));
        self.ovl = Some(
            OverlayMount::with(
                &lowers,
                &self.upper("ovl"),
                &work,
                &self.base.join("ovl"),
                "on",
            )
            .unwrap(),
        );
    }

    /// accord's read-only branches, described strictly (they must never change).
    fn frozen(&self) -> Vec<std::collections::BTreeMap<String, String>> {
        self.acc_lowers.iter().map(|l| describe(l, true)).collect()
    }
}

#[test]
fn differential_redirect_dir_on() {
    if !fuse_ok("differential_redirect_dir_on") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let base = t.path();
    build_lower(&base.join("ovl-lower"));
    build_lower(&base.join("acc-lower"));
    let mut run = Redirect {
        base: base.to_path_buf(),
        ovl_lowers: vec![base.join("ovl-lower")],
        acc_lowers: vec![base.join("acc-lower")],
        snaps: 0,
        ovl: None,
        acc: None,
    };
    if let Err(e) = run.mount() {
        skip_or_fail(
            "differential_redirect_dir_on",
            &format!("cannot mount overlayfs here: {e}"),
        );
        return;
    }
    let mut frozen = run.frozen();
    let mut failures = Vec::new();
    for step in redirect_steps() {
        let name = match step {
            Step::Op((name, op)) => {
                let a = outcome(op(&run.ovl.as_ref().unwrap().mnt));
                let b = outcome(op(&run.acc.as_ref().unwrap().mnt));
                eprintln!("step {name:?}: overlayfs {a}, accord {b}");
                if a != b {
                    failures.push(format!("step {name:?}: overlayfs {a}, accord {b}"));
                }
                name
            }
            Step::Remount => {
                run.remount();
                "remount"
            }
            Step::Snapshot => {
                run.snapshot();
                frozen = run.frozen();
                "snapshot"
            }
            Step::AddBottom => {
                run.add_bottom();
                frozen = run.frozen();
                "add a branch at the bottom"
            }
            Step::RemoveBottom => {
                run.remove_bottom();
                frozen = run.frozen();
                "remove the bottom branch"
            }
        };
        let diff = tree_diff(&base.join("ovl"), &base.join("acc"));
        if !diff.is_empty() {
            failures.push(format!("after step {name:?} trees differ:{diff}"));
        }
        assert_eq!(
            run.frozen(),
            frozen,
            "a read-only branch changed at step {name:?}"
        );
    }
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
    let fin = describe(&base.join("acc"), false);
    for must in [
        "d/e.txt",
        "d/new.txt",
        "d/sub2/s.txt",
        "deep/a/b/fresh",
        "emptydir",
    ] {
        assert!(fin.contains_key(must), "{must} missing at the end");
    }
    for gone in [
        "dz",
        "d2-back",
        "d/only",
        "deep/a/b/c",
        "d/f.txt",
        "emptydir3",
    ] {
        assert!(!fin.contains_key(gone), "{gone} still visible at the end");
    }
}

/// A small deterministic generator (xorshift64*), so a failing run can be replayed by seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &'a [String]) -> &'a str {
        &items[self.below(items.len())]
    }
}

/// The directories (with "" for the root) and the other names under `root`, sorted.
fn dirs_and_files(root: &Path) -> (Vec<String>, Vec<String>) {
    let (mut dirs, mut files) = (vec![String::new()], Vec::new());
    for k in describe(root, false).into_keys() {
        if fs::symlink_metadata(root.join(&k)).is_ok_and(|m| m.is_dir()) {
            dirs.push(k);
        } else {
            files.push(k);
        }
    }
    (dirs, files)
}

/// One random step over the tree that overlayfs shows now: mostly directory renames (into
/// any directory, renamed ones included), with mkdir, rmdir, writes, unlinks and file renames
/// between them. Returns a description and the operation (as paths relative to a mount).
/// An operation on the tree under a mount.
type DynOp = Box<dyn Fn(&Path) -> io::Result<()>>;

fn random_op(rng: &mut Rng, root: &Path) -> (String, DynOp) {
    const NAMES: [&str; 8] = ["a", "b", "c", "n1", "n2", "x", "q", "zz"];
    let (dirs, files) = dirs_and_files(root);
    let subdirs = &dirs[1..];
    let join = |parent: &str, name: &str| Path::new(parent).join(name);
    let name = NAMES[rng.below(NAMES.len())];
    let kind = rng.below(10);
    let (desc, from, to) = match kind {
        0..=4 if !subdirs.is_empty() => {
            let src = rng.pick(subdirs).to_string();
            ("mv dir", join(&src, ""), join(rng.pick(&dirs), name))
        }
        5 => ("mkdir", join(rng.pick(&dirs), name), Default::default()),
        6 if !subdirs.is_empty() => ("rmdir", join(rng.pick(subdirs), ""), Default::default()),
        7 if !files.is_empty() => ("rm", join(rng.pick(&files), ""), Default::default()),
        8 if !files.is_empty() => {
            let src = rng.pick(&files).to_string();
            (
                "mv file",
                join(&src, ""),
                join(rng.pick(&dirs), &format!("f{name}")),
            )
        }
        _ => (
            "write",
            join(rng.pick(&dirs), &format!("w{name}")),
            Default::default(),
        ),
    };
    let text = format!("{desc} {} {}", from.display(), to.display());
    let op: DynOp = match desc {
        "mv dir" | "mv file" => Box::new(move |r| fs::rename(r.join(&from), r.join(&to))),
        "mkdir" => Box::new(move |r| fs::create_dir(r.join(&from))),
        "rmdir" => Box::new(move |r| fs::remove_dir(r.join(&from))),
        "rm" => Box::new(move |r| fs::remove_file(r.join(&from))),
        _ => Box::new(move |r| {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(r.join(&from))?
                .write_all(b"w\n")
        }),
    };
    (text, op)
}

/// Random sequences (fixed seeds) of directory renames and the changes around them, with
/// remounts and snapshots now and then, agree with overlayfs `redirect_dir=on` after every
/// step; the read-only branches never change.
#[test]
fn differential_redirect_random() {
    if !fuse_ok("differential_redirect_random") {
        return;
    }
    for seed in [1u64, 7, 42] {
        if let Err(e) = random_run(seed, 150) {
            panic!("seed {seed}: {e}");
        }
    }
}

fn random_run(seed: u64, steps: usize) -> Result<(), String> {
    let t = tempfile::tempdir().unwrap();
    let base = t.path();
    build_lower(&base.join("ovl-lower"));
    build_lower(&base.join("acc-lower"));
    let mut run = Redirect {
        base: base.to_path_buf(),
        ovl_lowers: vec![base.join("ovl-lower")],
        acc_lowers: vec![base.join("acc-lower")],
        snaps: 0,
        ovl: None,
        acc: None,
    };
    if let Err(e) = run.mount() {
        skip_or_fail(
            "differential_redirect_random",
            &format!("cannot mount overlayfs here: {e}"),
        );
        return Ok(());
    }
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut frozen = run.frozen();
    for i in 0..steps {
        let desc = match rng.below(40) {
            0 => {
                run.remount();
                "remount".to_string()
            }
            1 => {
                run.snapshot();
                frozen = run.frozen();
                "snapshot".to_string()
            }
            _ => {
                let (desc, op) = random_op(&mut rng, &base.join("ovl"));
                let a = outcome(op(&base.join("ovl")));
                let b = outcome(op(&base.join("acc")));
                if a != b {
                    return Err(format!("step {i} {desc}: overlayfs {a}, accord {b}"));
                }
                desc
            }
        };
        let diff = tree_diff(&base.join("ovl"), &base.join("acc"));
        if !diff.is_empty() {
            return Err(format!("after step {i} {desc} trees differ:{diff}"));
        }
        if run.frozen() != frozen {
            return Err(format!("a read-only branch changed at step {i} {desc}"));
        }
    }
    Ok(())
}

fn outcome(r: io::Result<()>) -> String {
    match r {
        Ok(()) => "ok".into(),
        Err(e) => format!("errno {}", e.raw_os_error().unwrap_or(-1)),
    }
}

#[test]
fn differential_against_overlayfs() {
    if !fuse_ok("differential_against_overlayfs") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let base = t.path();
    let pristine = base.join("pristine");
    build_lower(&pristine);
    sh(&format!(
        "cp -a {p} {b}/ovl-lower && cp -a {p} {b}/acc-lower",
        p = pristine.display(),
        b = base.display()
    ));
    let want_lower = describe(&pristine, true);
    assert_eq!(
        describe(&base.join("acc-lower"), false),
        describe(&pristine, false)
    );

    let ovl = match OverlayMount::new(
        &base.join("ovl-lower"),
        &base.join("ovl-upper"),
        &base.join("ovl-work"),
        &base.join("ovl"),
    ) {
        Ok(m) => m,
        Err(e) => {
            skip_or_fail(
                "differential_against_overlayfs",
                &format!("cannot mount overlayfs here: {e}"),
            );
            return;
        }
    };
    fs::create_dir_all(base.join("acc-upper")).unwrap();
    // EXDEV for merged directories, as overlayfs without redirect_dir.
    let acc = UnionMount::with_options(
        &base.join("acc"),
        &[
            format!("{}=rw", base.join("acc-upper").display()),
            format!("{}=ro", base.join("acc-lower").display()),
        ],
        &["-o", "redirect_dir=off"],
    );
    let acc_lower_before = describe(&base.join("acc-lower"), true);

    assert_eq!(
        describe(&ovl.mnt, false),
        describe(&acc.mnt, false),
        "initial trees"
    );
    let mut failures = Vec::new();
    for (name, op) in ops() {
        let a = outcome(op(&ovl.mnt));
        let b = outcome(op(&acc.mnt));
        eprintln!("step {name:?}: overlayfs {a}, accord {b}");
        if a != b {
            failures.push(format!("step {name:?}: overlayfs {a}, accord {b}"));
        }
        let ta = describe(&ovl.mnt, false);
        let tb = describe(&acc.mnt, false);
        if ta != tb {
            let mut diff = String::new();
            for k in ta
                .keys()
                .chain(tb.keys())
                .collect::<std::collections::BTreeSet<_>>()
            {
                if ta.get(k) != tb.get(k) {
                    diff += &format!(
                        "\n  {k}:\n    overlayfs {:?}\n    accord    {:?}",
                        ta.get(k),
                        tb.get(k)
                    );
                }
            }
            failures.push(format!("after step {name:?} trees differ:{diff}"));
        }
        // The read-only branch never changes, not even its times.
        assert_eq!(
            describe(&base.join("acc-lower"), true),
            acc_lower_before,
            "lower branch changed at step {name:?}"
        );
    }
    let fin = describe(&acc.mnt, false);
    for must in [
        "d2/fresh",
        "b.txt",
        "new-link",
        "c-link",
        "cdev",
        "fifo",
        "d/sub/s.txt",
        "nd2/x",
    ] {
        assert!(fin.contains_key(must), "{must} missing at the end");
    }
    for gone in ["g.txt", "d2/h", "k-link", "d/e.txt", "emptydir", "new.txt"] {
        assert!(!fin.contains_key(gone), "{gone} still visible at the end");
    }
    drop(acc);
    drop(ovl);
    let after = describe(&base.join("acc-lower"), true);
    // ctimes differ from the pristine tree (cp -a sets them), so compare to the mounted state.
    assert_eq!(after, acc_lower_before, "lower branch changed");
    assert_eq!(want_lower.len(), after.len());
    assert!(
        failures.is_empty(),
        "{} differences:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
