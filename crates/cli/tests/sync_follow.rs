//! `accord sync --follow PATTERN` (issue 12): the symlinks whose paths
//! match are treated as what they point to. A followed link to a file is
//! synced as that file, and an update from the other side is written
//! through the link into its target (the link stays); a followed link to a
//! directory is walked as one; the side without the link gets a real file
//! or directory. Unmatched links stay links; a followed link that dangles
//! or loops is an error for its path that deletes nothing; a link
//! retargeted during the run is "changed during sync", nothing written;
//! switching --follow off and on again changes nothing by itself.
//!
//! The links are on B, outside B's root: each scenario runs with both
//! roots local, with B over ssh (its server follows them) and with B from
//! a daemon module (whose server follows only links that stay inside the
//! module; one test shows a link out of it refused).

mod mirror_common;
mod remote_common;
#[macro_use]
mod sync_common;
use std::path::{Path, PathBuf};
use sync_common::*;

type MakePair<'a> = &'a dyn Fn() -> Pair;

fn paths_of(report: &serde_json::Value, key: &str) -> Vec<String> {
    let mut paths: Vec<String> = report[key]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["path"].as_str().unwrap().to_string())
        .collect();
    paths.sort();
    paths
}

/// A directory beside B's root (on B's host, outside the root) that B's
/// followed links lead into.
fn outside_b(pair: &Pair) -> PathBuf {
    let dir = pair.b.parent().unwrap().join("outside");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn link(target: &str, at: &Path) {
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, at).unwrap();
}

fn is_link_to(at: &Path, target: &str) -> bool {
    std::fs::read_link(at).is_ok_and(|t| t == Path::new(target))
}

fn is_plain_file(at: &Path) -> bool {
    std::fs::symlink_metadata(at).is_ok_and(|m| m.file_type().is_file())
}

fn is_plain_dir(at: &Path) -> bool {
    std::fs::symlink_metadata(at).is_ok_and(|m| m.file_type().is_dir())
}

/// Rewrite `path` with a later mtime (a change whatever the clock's
/// granularity).
fn rewrite(path: &Path, contents: &str, mtime: i64) {
    std::fs::write(path, contents).unwrap();
    set_mtime(path, mtime);
}

fn a_followed_file_link_syncs_both_ways(make_pair: MakePair) {
    let pair = make_pair();
    let outside = outside_b(&pair);
    std::fs::write(outside.join("notes"), "first").unwrap();
    link("../outside/notes", &pair.path('b', "notes"));

    let report = pair.sync_json(&["--follow", "notes"], 0);
    assert_eq!(paths_of(&report, "changes"), ["notes"]);
    assert!(is_plain_file(&pair.path('a', "notes")));
    assert_eq!(pair.read('a', "notes").as_deref(), Some("first"));

    // An update on A is written through B's link into its target.
    rewrite(&pair.path('a', "notes"), "edited on A", 2_000_000_000);
    let report = pair.sync_json(&["--follow", "notes"], 0);
    assert_eq!(paths_of(&report, "changes"), ["notes"]);
    assert_eq!(
        std::fs::read_to_string(outside.join("notes")).unwrap(),
        "edited on A"
    );
    assert!(is_link_to(&pair.path('b', "notes"), "../outside/notes"));

    // The target changed on B's host: an update of B's path.
    rewrite(&outside.join("notes"), "edited through B", 2_000_000_100);
    let report = pair.sync_json(&["--follow", "notes"], 0);
    assert_eq!(paths_of(&report, "changes"), ["notes"]);
    assert_eq!(pair.read('a', "notes").as_deref(), Some("edited through B"));
    assert!(is_link_to(&pair.path('b', "notes"), "../outside/notes"));

    let report = pair.sync_json(&["--follow", "notes"], 0);
    assert!(paths_of(&report, "changes").is_empty(), "{report}");

    // Deleted on A: B's link goes, what it pointed to stays.
    std::fs::remove_file(pair.path('a', "notes")).unwrap();
    pair.write('a', "keep", "so that A is not empty");
    let report = pair.sync_json(&["--follow", "notes", "--max-delete", "100%"], 0);
    assert_eq!(paths_of(&report, "changes"), ["keep", "notes"]);
    assert!(!pair.exists('b', "notes"));
    assert_eq!(
        std::fs::read_to_string(outside.join("notes")).unwrap(),
        "edited through B"
    );
}

fn a_followed_directory_link_is_walked(make_pair: MakePair) {
    let pair = make_pair();
    let outside = outside_b(&pair);
    std::fs::create_dir_all(outside.join("photos/2024")).unwrap();
    std::fs::write(outside.join("photos/one.jpg"), "one").unwrap();
    std::fs::write(outside.join("photos/2024/two.jpg"), "two").unwrap();
    link("../outside/photos", &pair.path('b', "pics"));

    let report = pair.sync_json(&["--follow", "/pics"], 0);
    assert_eq!(
        paths_of(&report, "changes"),
        ["pics", "pics/2024", "pics/2024/two.jpg", "pics/one.jpg"]
    );
    assert!(is_plain_dir(&pair.path('a', "pics")));
    assert!(is_plain_dir(&pair.path('a', "pics/2024")));
    assert_eq!(pair.read('a', "pics/2024/two.jpg").as_deref(), Some("two"));

    // New and changed entries on A land inside the link's target.
    pair.write('a', "pics/2024/three.jpg", "three");
    rewrite(
        &pair.path('a', "pics/one.jpg"),
        "one, edited",
        2_000_000_000,
    );
    let report = pair.sync_json(&["--follow", "/pics"], 0);
    assert_eq!(
        paths_of(&report, "changes"),
        ["pics/2024/three.jpg", "pics/one.jpg"]
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("photos/2024/three.jpg")).unwrap(),
        "three"
    );
    assert_eq!(
        std::fs::read_to_string(outside.join("photos/one.jpg")).unwrap(),
        "one, edited"
    );
    assert!(is_link_to(&pair.path('b', "pics"), "../outside/photos"));

    // A deletion on A deletes inside the target too.
    std::fs::remove_file(pair.path('a', "pics/2024/three.jpg")).unwrap();
    let report = pair.sync_json(&["--follow", "/pics"], 0);
    assert_eq!(paths_of(&report, "changes"), ["pics/2024/three.jpg"]);
    assert!(!outside.join("photos/2024/three.jpg").exists());
    assert!(outside.join("photos/2024/two.jpg").exists());

    // The whole directory deleted on A: its entries go inside the target
    // (as any directory's), then B's link; the target directory stays.
    std::fs::remove_dir_all(pair.path('a', "pics")).unwrap();
    pair.write('a', "keep", "so that A is not empty");
    pair.sync_json(&["--follow", "/pics", "--max-delete", "100%"], 0);
    assert!(!pair.exists('b', "pics"));
    assert!(outside.join("photos").is_dir());
    assert_eq!(
        std::fs::read_dir(outside.join("photos")).unwrap().count(),
        0
    );
}

fn an_unmatched_link_stays_a_link(make_pair: MakePair) {
    let pair = make_pair();
    let outside = outside_b(&pair);
    std::fs::write(outside.join("f"), "out there").unwrap();
    link("../outside/f", &pair.path('b', "followed"));
    link("../outside/f", &pair.path('b', "opaque"));
    link("../outside/f", &pair.path('b', "sub/followed"));

    let report = pair.sync_json(&["--follow", "/followed"], 0);
    assert_eq!(
        paths_of(&report, "changes"),
        ["followed", "opaque", "sub", "sub/followed"]
    );
    assert!(is_plain_file(&pair.path('a', "followed")));
    // Another link, and one of the same name elsewhere that the anchored
    // pattern does not name, are copied as links.
    assert!(is_link_to(&pair.path('a', "opaque"), "../outside/f"));
    assert!(is_link_to(&pair.path('a', "sub/followed"), "../outside/f"));
}

fn a_dangling_followed_link_is_an_error_that_deletes_nothing(make_pair: MakePair) {
    let pair = make_pair();
    let outside = outside_b(&pair);
    std::fs::create_dir_all(outside.join("d")).unwrap();
    std::fs::write(outside.join("f"), "contents").unwrap();
    std::fs::write(outside.join("d/x"), "x").unwrap();
    link("../outside/f", &pair.path('b', "lf"));
    link("../outside/d", &pair.path('b', "ld"));
    let follow = ["--follow", "lf", "--follow", "ld"];
    pair.sync_json(&follow, 0);
    assert_eq!(pair.read('a', "lf").as_deref(), Some("contents"));

    // Both targets go: B's links dangle. Nothing is deleted on A.
    std::fs::remove_file(outside.join("f")).unwrap();
    std::fs::remove_dir_all(outside.join("d")).unwrap();
    let report = pair.sync_json(&follow, 2);
    assert_eq!(paths_of(&report, "errors"), ["ld", "lf"]);
    assert!(paths_of(&report, "changes").is_empty(), "{report}");
    assert_eq!(pair.read('a', "lf").as_deref(), Some("contents"));
    assert_eq!(pair.read('a', "ld/x").as_deref(), Some("x"));
    assert!(is_link_to(&pair.path('b', "lf"), "../outside/f"));

    // The targets are back: nothing to do.
    std::fs::write(outside.join("f"), "contents").unwrap();
    set_mtime(&outside.join("f"), 1_900_000_000);
    std::fs::create_dir_all(outside.join("d")).unwrap();
    std::fs::write(outside.join("d/x"), "x").unwrap();
    let report = pair.sync_json(&follow, 0);
    assert!(conflict_paths(&report).is_empty(), "{report}");
    assert_eq!(pair.read('a', "lf").as_deref(), Some("contents"));
}

fn a_followed_link_that_loops_is_refused(make_pair: MakePair) {
    let pair = make_pair();
    pair.write('b', "sub/f", "f");
    link("..", &pair.path('b', "sub/up"));
    link(".", &pair.path('b', "here"));
    let report = pair.sync_json(&["--follow", "up", "--follow", "here"], 2);
    assert_eq!(paths_of(&report, "errors"), ["here", "sub/up"]);
    assert_eq!(pair.read('a', "sub/f").as_deref(), Some("f"));
    assert!(!pair.exists('a', "sub/up"));
    assert!(!pair.exists('a', "here"));
}

fn switching_follow_off_and_on_changes_nothing(make_pair: MakePair) {
    let pair = make_pair();
    let outside = outside_b(&pair);
    std::fs::create_dir_all(outside.join("d")).unwrap();
    std::fs::write(outside.join("f"), "file").unwrap();
    std::fs::write(outside.join("d/x"), "x").unwrap();
    link("../outside/f", &pair.path('b', "lf"));
    link("../outside/d", &pair.path('b', "ld"));
    let follow = ["--follow", "lf", "--follow", "ld"];
    pair.sync_json(&follow, 0);
    let a_before = snapshot(&pair.a);

    // Off: B's links are links again, seen as the archive recorded what
    // they led to: no change, no conflict, no deletion.
    for _ in 0..2 {
        let report = pair.sync_json(&[], 0);
        assert!(paths_of(&report, "changes").is_empty(), "{report}");
        assert!(conflict_paths(&report).is_empty(), "{report}");
        assert_eq!(snapshot(&pair.a), a_before);
        assert!(is_link_to(&pair.path('b', "lf"), "../outside/f"));
    }

    // On again: the targets are compared with what was recorded.
    let report = pair.sync_json(&follow, 0);
    assert!(paths_of(&report, "changes").is_empty(), "{report}");
    rewrite(&outside.join("d/x"), "x, edited", 2_000_000_000);
    let report = pair.sync_json(&follow, 0);
    assert_eq!(paths_of(&report, "changes"), ["ld/x"]);
    assert_eq!(pair.read('a', "ld/x").as_deref(), Some("x, edited"));
}

fn a_link_retargeted_during_the_run_is_not_written_through(make_pair: MakePair) {
    let pair = make_pair();
    let outside = outside_b(&pair);
    std::fs::write(outside.join("f"), "old").unwrap();
    std::fs::write(outside.join("g"), "another file").unwrap();
    link("../outside/f", &pair.path('b', "lf"));
    pair.sync_json(&["--follow", "lf"], 0);

    rewrite(&pair.path('a', "lf"), "new from A", 2_000_000_000);
    let report = sync_with_change_args(&pair, &["--follow", "lf"], 2, || {
        let at = pair.path('b', "lf");
        std::fs::remove_file(&at).unwrap();
        link("../outside/g", &at);
    });
    assert_eq!(paths_of(&report, "errors"), ["lf"]);
    assert_eq!(std::fs::read_to_string(outside.join("f")).unwrap(), "old");
    assert_eq!(
        std::fs::read_to_string(outside.join("g")).unwrap(),
        "another file"
    );
    assert!(is_link_to(&pair.path('b', "lf"), "../outside/g"));
    let names: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(names.iter().all(|n| !n.starts_with(".accord")), "{names:?}");
}

local_and_remote!(a_followed_file_link_syncs_both_ways:
    file_link_local, file_link_ssh, file_link_daemon);
local_and_remote!(a_followed_directory_link_is_walked:
    dir_link_local, dir_link_ssh, dir_link_daemon);
local_and_remote!(an_unmatched_link_stays_a_link:
    unmatched_local, unmatched_ssh, unmatched_daemon);
local_and_remote!(a_dangling_followed_link_is_an_error_that_deletes_nothing:
    dangling_local, dangling_ssh, dangling_daemon);
local_and_remote!(a_followed_link_that_loops_is_refused:
    loop_local, loop_ssh, loop_daemon);
local_and_remote!(switching_follow_off_and_on_changes_nothing:
    switch_local, switch_ssh, switch_daemon);
local_and_remote!(a_link_retargeted_during_the_run_is_not_written_through:
    retarget_local, retarget_ssh, retarget_daemon);

/// A daemon module's server follows no link out of the module: a client
/// could have put any link there. The path is an error; nothing is read.
#[test]
fn a_link_out_of_a_daemon_module_is_not_followed() {
    let daemon = Daemon::start();
    let pair = Pair::with_remote_b(&daemon.remote_b());
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("secret"), "not served").unwrap();
    let target = elsewhere.path().join("secret").display().to_string();
    link(&target, &pair.path('b', "lf"));
    link("/", &pair.path('b', "top"));
    pair.write('b', "plain", "served");
    let report = pair.sync_json(&["--follow", "lf", "--follow", "top"], 2);
    assert_eq!(paths_of(&report, "errors"), ["lf", "top"]);
    assert_eq!(paths_of(&report, "changes"), ["plain"]);
    assert!(!pair.exists('a', "lf"));
    assert!(!pair.exists('a', "top"));
}

/// A profile's `follow = [...]` is `--follow` once per pattern.
#[test]
fn a_profile_names_the_links_to_follow() {
    let pair = Pair::new();
    let outside = outside_b(&pair);
    std::fs::write(outside.join("notes"), "from the profile").unwrap();
    link("../outside/notes", &pair.path('b', "notes"));
    link("../outside/notes", &pair.path('b', "opaque"));
    let config = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(config.path().join("accord")).unwrap();
    let profile = format!(
        "roots = [{:?}, {:?}]\nfollow = [\"/notes\"]\n",
        pair.a.display().to_string(),
        pair.b.display().to_string()
    );
    std::fs::write(config.path().join("accord/both.toml"), profile).unwrap();
    let out = std::process::Command::new(bin())
        .args(["sync", "both", "--batch", "--json"])
        .env("XDG_CONFIG_HOME", config.path())
        .env("ACCORD_STATE_DIR", &pair.state)
        .output()
        .unwrap();
    assert_exit(&out, 0);
    assert!(is_plain_file(&pair.path('a', "notes")));
    assert_eq!(pair.read('a', "notes").as_deref(), Some("from the profile"));
    assert!(is_link_to(&pair.path('a', "opaque"), "../outside/notes"));
}
