//! `accord sync` keeps user.* extended attributes and POSIX ACLs in
//! agreement (issue 12, "what is synced"; on by default, `--no-xattrs`,
//! `--no-acls`): carried with a new file, changed alone without copying
//! the contents, a conflict when both sides change them differently, and
//! read for the first time on a pair synced without them. Each scenario
//! runs with both roots local, with B over ssh and with B from the daemon
//! (B's attributes are then read and written by the server).

mod mirror_common;
mod remote_common;
#[macro_use]
mod sync_common;
use std::process::Command;
use sync_common::*;

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn set_xattr(pair: &Pair, side: char, rel: &str, name: &str, value: &str) {
    let path = pair.path(side, rel);
    run(
        "setfattr",
        &["-n", name, "-v", value, path.to_str().unwrap()],
    );
}

/// The value of `name`, None when the file has no such attribute.
fn xattr(pair: &Pair, side: char, rel: &str, name: &str) -> Option<String> {
    let path = pair.path(side, rel);
    let out = Command::new("getfattr")
        .args(["--only-values", "-n", name, path.to_str().unwrap()])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The file's ACL entries, one per line (`getfacl` without comments).
fn acl(pair: &Pair, side: char, rel: &str) -> String {
    let path = pair.path(side, rel);
    let out = Command::new("getfacl")
        .args(["-c", "--omit-header", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "getfacl {}", path.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn change_paths(report: &serde_json::Value) -> Vec<String> {
    report["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect()
}

fn attributes_travel_with_new_files_and_alone(pair: &dyn Fn() -> Pair) {
    let pair = pair();
    pair.write('a', "tagged", "contents\n");
    set_xattr(&pair, 'a', "tagged", "user.colour", "blue");
    std::fs::create_dir(pair.path('a', "dir")).unwrap();
    set_xattr(&pair, 'a', "dir", "user.project", "x");
    pair.sync_json(&["--batch"], 0);
    assert_eq!(
        xattr(&pair, 'b', "tagged", "user.colour").as_deref(),
        Some("blue")
    );
    assert_eq!(
        xattr(&pair, 'b', "dir", "user.project").as_deref(),
        Some("x")
    );

    // An attribute changed on B alone crosses back, contents untouched.
    let inode_before = std::fs::metadata(pair.path('a', "tagged")).unwrap();
    set_xattr(&pair, 'b', "tagged", "user.colour", "green");
    set_xattr(&pair, 'b', "tagged", "user.extra", "1");
    let report = pair.sync_json(&["--batch"], 0);
    assert_eq!(change_paths(&report), ["tagged"]);
    assert_eq!(
        xattr(&pair, 'a', "tagged", "user.colour").as_deref(),
        Some("green")
    );
    assert_eq!(
        xattr(&pair, 'a', "tagged", "user.extra").as_deref(),
        Some("1")
    );
    use std::os::unix::fs::MetadataExt;
    let inode_after = std::fs::metadata(pair.path('a', "tagged")).unwrap();
    assert_eq!(
        inode_before.ino(),
        inode_after.ino(),
        "set in place, not copied"
    );

    // A removal is a change too; then nothing is left to do.
    run(
        "setfattr",
        &[
            "-x",
            "user.extra",
            pair.path('a', "tagged").to_str().unwrap(),
        ],
    );
    pair.sync_json(&["--batch"], 0);
    assert_eq!(xattr(&pair, 'b', "tagged", "user.extra"), None);
    let again = pair.sync_json(&["--batch"], 0);
    assert_eq!(change_paths(&again), Vec::<String>::new());
    pair.assert_equal();
}

fn acls_are_synced(pair: &dyn Fn() -> Pair) {
    let pair = pair();
    pair.write('a', "shared", "for nobody too\n");
    run(
        "setfacl",
        &[
            "-m",
            "u:65534:r",
            pair.path('a', "shared").to_str().unwrap(),
        ],
    );
    pair.sync_json(&["--batch"], 0);
    assert!(
        acl(&pair, 'b', "shared").contains("user:65534:r--")
            || acl(&pair, 'b', "shared").contains("user:nobody:r--")
    );
    run(
        "setfacl",
        &["-x", "u:65534", pair.path('b', "shared").to_str().unwrap()],
    );
    pair.sync_json(&["--batch"], 0);
    assert_eq!(acl(&pair, 'a', "shared"), acl(&pair, 'b', "shared"));
    assert!(
        !acl(&pair, 'a', "shared").contains("65534")
            && !acl(&pair, 'a', "shared").contains("nobody")
    );
}

fn different_changes_on_both_sides_are_a_conflict(pair: &dyn Fn() -> Pair) {
    let pair = pair();
    pair.write('a', "f", "same\n");
    pair.sync_json(&["--batch"], 0);
    set_xattr(&pair, 'a', "f", "user.state", "draft");
    set_xattr(&pair, 'b', "f", "user.state", "final");
    let report = pair.sync_json(&["--batch"], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    assert_eq!(
        xattr(&pair, 'a', "f", "user.state").as_deref(),
        Some("draft")
    );
    assert_eq!(
        xattr(&pair, 'b', "f", "user.state").as_deref(),
        Some("final")
    );
    // The same change on both sides agrees silently.
    set_xattr(&pair, 'a', "f", "user.state", "done");
    set_xattr(&pair, 'b', "f", "user.state", "done");
    let report = pair.sync_json(&["--batch"], 0);
    assert_eq!(conflict_paths(&report), Vec::<String>::new());
}

fn switched_off_they_are_left_alone_and_read_when_switched_on(pair: &dyn Fn() -> Pair) {
    let pair = pair();
    pair.write('a', "f", "x\n");
    set_xattr(&pair, 'a', "f", "user.k", "1");
    pair.sync_json(&["--batch", "--no-xattrs"], 0);
    assert_eq!(xattr(&pair, 'b', "f", "user.k"), None);
    // B's own attribute survives a run that does not sync them.
    set_xattr(&pair, 'b', "f", "user.mine", "b");
    pair.sync_json(&["--batch", "--no-xattrs"], 0);
    assert_eq!(xattr(&pair, 'a', "f", "user.mine"), None);
    assert_eq!(xattr(&pair, 'b', "f", "user.mine").as_deref(), Some("b"));
    // Switched on, the archive has none recorded: each side's are read
    // for the first time and count as new, different ones a conflict.
    let report = pair.sync_json(&["--batch"], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    run(
        "setfattr",
        &["-x", "user.mine", pair.path('b', "f").to_str().unwrap()],
    );
    set_xattr(&pair, 'b', "f", "user.k", "1");
    pair.sync_json(&["--batch"], 0);
    let again = pair.sync_json(&["--batch"], 0);
    assert_eq!(change_paths(&again), Vec::<String>::new());
    assert_eq!(xattr(&pair, 'b', "f", "user.k").as_deref(), Some("1"));
}

local_and_remote!(attributes_travel_with_new_files_and_alone:
    local_attributes_travel, ssh_attributes_travel, daemon_attributes_travel);
local_and_remote!(acls_are_synced: local_acls, ssh_acls, daemon_acls);
local_and_remote!(different_changes_on_both_sides_are_a_conflict:
    local_attribute_conflict, ssh_attribute_conflict, daemon_attribute_conflict);
local_and_remote!(switched_off_they_are_left_alone_and_read_when_switched_on:
    local_switched_off, ssh_switched_off, daemon_switched_off);
