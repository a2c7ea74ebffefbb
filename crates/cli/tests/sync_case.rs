//! Case-insensitive roots for `accord sync` (issue 12): with case ignored
//! (`--ignorecase true`, or detected), names are matched by their folded
//! form: a file under names differing by case on the two sides is one
//! path (agreed or in conflict by contents, never duplicated), a change
//! reaches the name the other side has, a change of case only is not
//! propagated, names on one side that differ only by case are refused
//! with a message naming them (both untouched, nothing deleted, the rest
//! synced, exit 2), and each archive keeps one record per folded path.
//!
//! The forced scenarios run with both roots local, with B over ssh and
//! with B from the daemon. Detection runs on a real case-insensitive file
//! system: exFAT (exfat-fuse over a loop device, as root); where it cannot
//! be mounted the test skips loudly, or fails in strict mode
//! (`ACCORD_TEST_STRICT`).

mod mirror_common;
mod remote_common;
#[macro_use]
mod sync_common;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use sync_common::*;

type MakePair<'a> = &'a dyn Fn() -> Pair;

/// The names directly in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn error_messages(report: &serde_json::Value) -> Vec<(String, String)> {
    report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let path = e["path"].as_str().unwrap().to_string();
            (path, e["error"].as_str().unwrap().to_string())
        })
        .collect()
}

const FORCED: &[&str] = &["--ignorecase", "true"];

local_and_remote!(names_differing_by_case_are_one_path:
    names_differing_by_case_are_one_path_local,
    names_differing_by_case_are_one_path_over_ssh,
    names_differing_by_case_are_one_path_from_the_daemon);

fn names_differing_by_case_are_one_path(make: MakePair) {
    let pair = make();
    pair.write('a', "Readme", "the same");
    pair.write('b', "README", "the same");
    pair.write('a', "Notes", "a's notes");
    pair.write('b', "NOTES", "b's notes, longer");
    pair.write('a', "Docs/one", "in a's Docs");
    pair.write('b', "docs/two", "in b's docs");
    let report = pair.sync_json(FORCED, 1);
    assert_eq!(conflict_paths(&report), vec!["Notes"]);
    assert_eq!(names(&pair.a), ["Docs", "Notes", "Readme"]);
    assert_eq!(names(&pair.b), ["NOTES", "README", "docs"]);
    // Each side's directory took the other's file under its own name.
    assert_eq!(names(&pair.path('a', "Docs")), ["one", "two"]);
    assert_eq!(names(&pair.path('b', "docs")), ["one", "two"]);
    assert_eq!(pair.read('b', "docs/one").unwrap(), "in a's Docs");

    // An edit reaches the other side's own name, both ways.
    pair.write('a', "Readme", "edited on a");
    pair.write('b', "docs/one", "edited on b");
    let report = pair.sync_json(FORCED, 1);
    assert_eq!(conflict_paths(&report), vec!["Notes"]);
    assert_eq!(pair.read('b', "README").unwrap(), "edited on a");
    assert_eq!(pair.read('a', "Docs/one").unwrap(), "edited on b");
    assert_eq!(names(&pair.b), ["NOTES", "README", "docs"]);
    assert_eq!(names(&pair.a), ["Docs", "Notes", "Readme"]);

    // A deletion reaches it too.
    std::fs::remove_file(pair.path('b', "README")).unwrap();
    pair.sync_json(FORCED, 1);
    assert_eq!(names(&pair.a), ["Docs", "Notes"]);
    // Switched off, names are matched exactly: the conflict never agreed
    // is two new paths, each copied to the other side.
    let report = pair.sync_json(&["--ignorecase", "false"], 0);
    assert_eq!(report["ignorecase"], false);
    assert_eq!(names(&pair.b), ["NOTES", "Notes", "docs"]);
    assert_eq!(names(&pair.a), ["Docs", "NOTES", "Notes"]);
}

local_and_remote!(names_that_fold_to_one_are_refused:
    names_that_fold_to_one_are_refused_local,
    names_that_fold_to_one_are_refused_over_ssh,
    names_that_fold_to_one_are_refused_from_the_daemon);

fn names_that_fold_to_one_are_refused(make: MakePair) {
    let pair = make();
    pair.write('a', "a.txt", "lower");
    pair.write('a', "A.txt", "upper, longer");
    pair.write('a', "Dir/x", "in Dir");
    pair.write('a', "dir/y", "in dir");
    pair.write('b', "a.TXT", "b's, which a clash must not touch");
    pair.write('a', "other", "synced");
    let report = pair.sync_json(FORCED, 2);
    let errors = error_messages(&report);
    assert_eq!(errors.len(), 2, "{errors:?}");
    let clash = errors.iter().find(|(path, _)| path == "A.txt").unwrap();
    assert!(
        clash.1.contains("'A.txt' and 'a.txt'") && clash.1.contains("differ only by case"),
        "{clash:?}"
    );
    let dirs = errors.iter().find(|(path, _)| path == "Dir").unwrap();
    assert!(dirs.1.contains("'Dir' and 'dir'"), "{dirs:?}");
    // Both untouched, nothing of them on B, B's own file left alone.
    assert_eq!(pair.read('a', "a.txt").unwrap(), "lower");
    assert_eq!(pair.read('a', "A.txt").unwrap(), "upper, longer");
    assert_eq!(pair.read('a', "Dir/x").unwrap(), "in Dir");
    assert_eq!(pair.read('a', "dir/y").unwrap(), "in dir");
    assert_eq!(names(&pair.b), ["a.TXT", "other"]);
    assert_eq!(
        pair.read('b', "a.TXT").unwrap(),
        "b's, which a clash must not touch"
    );
    // Refused again while it lasts; once one name goes, the other syncs.
    pair.sync_json(FORCED, 2);
    std::fs::remove_file(pair.path('a', "A.txt")).unwrap();
    std::fs::remove_dir_all(pair.path('a', "dir")).unwrap();
    let report = pair.sync_json(FORCED, 1);
    assert_eq!(conflict_paths(&report), vec!["a.txt"]);
    assert_eq!(names(&pair.b), ["Dir", "a.TXT", "other"]);
    assert_eq!(pair.read('b', "Dir/x").unwrap(), "in Dir");
}

local_and_remote!(a_change_of_case_only_is_not_propagated:
    a_change_of_case_only_is_not_propagated_local,
    a_change_of_case_only_is_not_propagated_over_ssh,
    a_change_of_case_only_is_not_propagated_from_the_daemon);

fn a_change_of_case_only_is_not_propagated(make: MakePair) {
    let pair = make();
    pair.write('a', "f", "contents");
    pair.write('a', "d/g", "in d");
    pair.sync_json(FORCED, 0);
    std::fs::rename(pair.path('a', "f"), pair.path('a', "F")).unwrap();
    std::fs::rename(pair.path('b', "d"), pair.path('b', "D")).unwrap();
    let report = pair.sync_json(FORCED, 0);
    assert_eq!(report["propagated"], 0, "{report}");
    assert_eq!(names(&pair.a), ["F", "d"]);
    assert_eq!(names(&pair.b), ["D", "f"]);
    // What changes later reaches the other side's spelling.
    pair.write('a', "F", "edited");
    pair.write('a', "d/new", "new in d");
    let report = pair.sync_json(FORCED, 0);
    assert_eq!(report["propagated"], 2, "{report}");
    assert_eq!(pair.read('b', "f").unwrap(), "edited");
    assert_eq!(pair.read('b', "D/new").unwrap(), "new in d");
    assert_eq!(names(&pair.b), ["D", "f"]);
    assert_eq!(names(&pair.path('b', "D")), ["g", "new"]);
    // And nothing is left to do.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    pair.sync_json(FORCED, 0);
    let report = pair.sync_json(FORCED, 0);
    assert_eq!(report["propagated"], 0, "{report}");
}

/// A directory renamed by case on one side keeps the records beneath it:
/// an edit on the other side next run is propagated (not "changed on both
/// sides"), and a conflict beneath it (deleted on one side, changed on the
/// other) stays a conflict until it is resolved.
fn a_directory_renamed_by_case_keeps_its_records(make: MakePair) {
    let pair = make();
    pair.write('a', "Dir/x", "x");
    pair.write('a', "Dir/y", "y");
    pair.write('a', "Dir/Sub/z", "z");
    pair.sync_json(FORCED, 0);
    pair.sync_json(FORCED, 0);
    std::fs::rename(pair.path('b', "Dir"), pair.path('b', "DIR")).unwrap();
    std::fs::rename(pair.path('b', "DIR/Sub"), pair.path('b', "DIR/sub")).unwrap();
    std::fs::remove_file(pair.path('b', "DIR/y")).unwrap();
    pair.write('a', "Dir/y", "y changed on a");
    let report = pair.sync_json(FORCED, 1);
    assert_eq!(conflict_paths(&report), vec!["Dir/y"], "{report}");
    assert_eq!(report["propagated"], 0, "{report}");
    pair.write('a', "Dir/x", "x edited on a");
    pair.write('a', "Dir/Sub/z", "z edited on a");
    let report = pair.sync_json(FORCED, 1);
    assert_eq!(conflict_paths(&report), vec!["Dir/y"], "{report}");
    assert_eq!(report["propagated"], 2, "{report}");
    assert_eq!(pair.read('b', "DIR/x").unwrap(), "x edited on a");
    assert_eq!(pair.read('b', "DIR/sub/z").unwrap(), "z edited on a");
    assert_eq!(names(&pair.b), ["DIR"]);
    assert_eq!(names(&pair.path('b', "DIR")), ["sub", "x"]);
}

local_and_remote!(a_directory_renamed_by_case_keeps_its_records:
    a_directory_renamed_by_case_keeps_its_records_local,
    a_directory_renamed_by_case_keeps_its_records_over_ssh,
    a_directory_renamed_by_case_keeps_its_records_from_the_daemon);

/// Every key of every archive in `state`, one list per archive.
fn archive_keys(state: &Path) -> Option<Vec<Vec<String>>> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(state).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "sqlite") {
            continue;
        }
        // Keys hold '/' as 0x00, which the shell's text output cuts at.
        let out = Command::new("sqlite3")
            .arg(&path)
            .arg("select hex(key) from entries")
            .output()
            .ok()?;
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        all.push(text.lines().map(unhex).collect());
    }
    Some(all)
}

/// A key written as hex, with its 0x00 separators as '/'.
fn unhex(hex: &str) -> String {
    let bytes: Vec<u8> = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .map(|b| if b == 0 { b'/' } else { b })
        .collect();
    String::from_utf8(bytes).unwrap()
}

#[test]
fn each_archive_holds_one_record_per_folded_path() {
    let pair = Pair::new();
    pair.write('a', "Readme", "the same");
    pair.write('b', "README", "the same");
    pair.write('a', "f", "f");
    pair.write('a', "Dir/x", "x");
    pair.sync_json(FORCED, 0);
    std::fs::rename(pair.path('a', "f"), pair.path('a', "F")).unwrap();
    std::fs::rename(pair.path('b', "Dir"), pair.path('b', "DIR")).unwrap();
    pair.sync_json(FORCED, 0);
    pair.write('b', "README", "edited on b");
    pair.write('a', "F", "edited on a");
    pair.write('a', "Dir/x", "edited on a");
    pair.sync_json(FORCED, 0);
    pair.sync_json(FORCED, 0);
    let Some(archives) = archive_keys(&pair.state) else {
        mirror_common::skip_or_fail(
            "sqlite3 is not installed (apt-get install sqlite3); the archives were not read",
        );
        return;
    };
    assert_eq!(archives.len(), 2);
    for keys in archives {
        let folded: BTreeSet<String> = keys.iter().map(|k| k.to_lowercase()).collect();
        assert_eq!(
            folded.len(),
            keys.len(),
            "two records of one path: {keys:?}"
        );
        assert_eq!(folded.len(), 5, "{keys:?}");
    }
    assert_eq!(pair.read('a', "Readme").unwrap(), "edited on b");
    assert_eq!(pair.read('b', "f").unwrap(), "edited on a");
    assert_eq!(pair.read('b', "DIR/x").unwrap(), "edited on a");
}

#[test]
fn a_bad_ignorecase_value_is_a_usage_error() {
    let pair = Pair::new();
    let out = pair.sync(&["--ignorecase", "maybe"]);
    assert_exit(&out, 64);
}

/// An exFAT file system (case-insensitive) mounted through exfat-fuse on
/// a loop device; unmounted and detached when dropped.
struct Exfat {
    _dir: tempfile::TempDir,
    device: String,
    mount: PathBuf,
}

impl Exfat {
    /// None (after `skip_or_fail` with the reason) where it cannot be made.
    fn mount() -> Option<Exfat> {
        let skip = |why: &str| {
            mirror_common::skip_or_fail(&format!(
                "no case-insensitive file system to test on: {why}"
            ));
            None
        };
        let uid = Command::new("id").arg("-u").output().unwrap().stdout;
        if uid.trim_ascii() != b"0" {
            return skip("not root (a loop device and a mount are needed)");
        }
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("exfat.img");
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).unwrap();
        std::fs::File::create(&image)
            .unwrap()
            .set_len(64 << 20)
            .unwrap();
        if !run("mkfs.exfat", &[image.as_os_str()]) {
            return skip("mkfs.exfat failed or is missing (package exfatprogs)");
        }
        let out = Command::new("losetup")
            .args(["-f", "--show"])
            .arg(&image)
            .output();
        let device = match out {
            Ok(out) if out.status.success() => String::from_utf8(out.stdout).unwrap(),
            _ => return skip("losetup cannot attach a loop device"),
        };
        let device = device.trim().to_string();
        let options = ["-o", "uid=0,gid=0"].map(std::ffi::OsStr::new);
        let args = [options[0], options[1], device.as_ref(), mount.as_os_str()];
        if !run("mount.exfat-fuse", &args) {
            run("losetup", &["-d".as_ref(), device.as_ref()]);
            return skip("mount.exfat-fuse failed or is missing (package exfat-fuse)");
        }
        Some(Exfat {
            _dir: dir,
            device,
            mount,
        })
    }
}

fn run(program: &str, args: &[&std::ffi::OsStr]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .is_ok_and(|out| out.status.success())
}

impl Drop for Exfat {
    fn drop(&mut self) {
        run("umount", &[self.mount.as_os_str()]);
        run("losetup", &["-d".as_ref(), self.device.as_ref()]);
    }
}

/// Make every entry of `root` (itself too) mode 0777: what exFAT shows.
fn like_exfat(root: &Path) {
    let status = Command::new("chmod")
        .args(["-R", "0777"])
        .arg(root)
        .status()
        .unwrap();
    assert!(status.success());
}

fn no_temps_left(root: &Path) {
    for name in names(root) {
        assert!(!name.starts_with(".accord-tmp-"), "{name} left in {root:?}");
    }
}

#[test]
fn a_case_insensitive_root_is_detected_and_its_names_matched() {
    let Some(exfat) = Exfat::mount() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    let b = &exfat.mount;
    let state = tmp.path().join("state");
    let sync = |args: &[&str], code: i32| -> serde_json::Value {
        let out = Command::new(bin())
            .args(["sync", "--batch", "--json"])
            .arg(&a)
            .arg(b)
            .args(args)
            .env("ACCORD_STATE_DIR", &state)
            .output()
            .unwrap();
        assert_exit(&out, code);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    std::fs::create_dir(&a).unwrap();
    std::fs::write(a.join("README"), "the same").unwrap();
    std::fs::write(a.join("a.txt"), "lower").unwrap();
    std::fs::write(a.join("A.txt"), "upper").unwrap();
    std::fs::create_dir(a.join("Docs")).unwrap();
    std::fs::write(a.join("Docs/f"), "in Docs").unwrap();
    like_exfat(&a);
    // B empty: its probe makes a file of ours and takes it away.
    let report = sync(&[], 2);
    assert_eq!(report["ignorecase"], true, "{report}");
    assert_eq!(report["case_insensitive"], serde_json::json!([false, true]));
    no_temps_left(&a);
    no_temps_left(b);
    let errors = error_messages(&report);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].1.contains("'A.txt' and 'a.txt'"), "{errors:?}");
    assert_eq!(names(b), ["Docs", "README"]);

    // A name B holds otherwise is one path: agreed, then edited.
    std::fs::remove_file(b.join("README")).unwrap();
    std::fs::write(b.join("readme"), "the same").unwrap();
    sync(&[], 2);
    assert_eq!(names(b), ["Docs", "readme"]);
    std::fs::write(a.join("README"), "edited on a").unwrap();
    // Written under its own name: exfat-fuse gives the kernel another
    // inode for each spelling looked up, whose cached attributes lag.
    std::fs::write(b.join("Docs/f"), "edited on b").unwrap();
    let report = sync(&[], 2);
    assert_eq!(report["propagated"], 2, "{report}");
    assert_eq!(names(b), ["Docs", "readme"]);
    assert_eq!(
        std::fs::read_to_string(b.join("readme")).unwrap(),
        "edited on a"
    );
    assert_eq!(
        std::fs::read_to_string(a.join("Docs/f")).unwrap(),
        "edited on b"
    );
    assert_eq!(names(&a), ["A.txt", "Docs", "README", "a.txt"]);
    no_temps_left(b);
}

/// B over ssh on a case-insensitive file system, and empty: its server
/// probes its own root in one call (an empty root gets a file of ours,
/// made and taken away), so the run knows B ignores case. Through the
/// probe's separate calls an empty remote root counted as case-sensitive.
#[test]
fn an_empty_case_insensitive_root_over_ssh_is_detected() {
    let Some(exfat) = Exfat::mount() else {
        return;
    };
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    std::fs::create_dir_all(a.join("Docs")).unwrap();
    std::fs::write(a.join("README"), "read me").unwrap();
    std::fs::write(a.join("Docs/f"), "in Docs").unwrap();
    like_exfat(&a);
    let out = Command::new(bin())
        .args([
            "sync",
            "--batch",
            "--json",
            "--rsh",
            &sshd.rsh(),
            "--remote-accord",
        ])
        .arg(bin())
        .arg(&a)
        .arg(sshd.root(&exfat.mount))
        .env("ACCORD_STATE_DIR", tmp.path().join("state"))
        .output()
        .unwrap();
    let report = json_report(&out, 0);
    assert_eq!(report["ignorecase"], true, "{report}");
    assert_eq!(report["case_insensitive"], serde_json::json!([false, true]));
    assert_eq!(names(&exfat.mount), ["Docs", "README"]);
    no_temps_left(&exfat.mount);
}
