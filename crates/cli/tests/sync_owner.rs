//! `accord sync --owner` keeps owners and groups in agreement (issue 12,
//! "what is synced"), by number: carried with new entries and alone, a
//! conflict when both sides give a file to different owners. Without it
//! each side's files belong to whoever made them, and a pair synced
//! without it never has an owner carried back when `--owner` is first
//! given. Giving a file away needs root: as another user these tests say
//! so and skip (or fail, in strict mode: `ACCORD_TEST_STRICT`). Each
//! scenario runs with both roots local, with B over ssh and with B from
//! the daemon.

mod mirror_common;
mod remote_common;
#[macro_use]
mod sync_common;
use std::os::unix::fs::MetadataExt;
use sync_common::*;

fn is_root() -> bool {
    mirror_common::need_root("giving files to other owners (sync --owner)")
}

fn owner(pair: &Pair, side: char, rel: &str) -> (u32, u32) {
    let meta = std::fs::symlink_metadata(pair.path(side, rel)).unwrap();
    (meta.uid(), meta.gid())
}

fn chown(pair: &Pair, side: char, rel: &str, id: u32) {
    std::os::unix::fs::lchown(pair.path(side, rel), Some(id), Some(id)).unwrap();
}

const NOBODY: u32 = 65534;
const OTHER: u32 = 4242;

fn owners_travel_with_new_entries_and_alone(pair: &dyn Fn() -> Pair) {
    if !is_root() {
        return;
    }
    let pair = pair();
    pair.write('a', "dir/f", "x\n");
    chown(&pair, 'a', "dir/f", NOBODY);
    chown(&pair, 'a', "dir", OTHER);
    pair.sync_json(&["--batch", "--owner"], 0);
    assert_eq!(owner(&pair, 'b', "dir/f"), (NOBODY, NOBODY));
    assert_eq!(owner(&pair, 'b', "dir"), (OTHER, OTHER));

    let inode = std::fs::metadata(pair.path('a', "dir/f")).unwrap().ino();
    chown(&pair, 'b', "dir/f", OTHER);
    pair.sync_json(&["--batch", "--owner"], 0);
    assert_eq!(owner(&pair, 'a', "dir/f"), (OTHER, OTHER));
    let same = std::fs::metadata(pair.path('a', "dir/f")).unwrap().ino();
    assert_eq!(inode, same, "changed in place, not copied");
    let again = pair.sync_json(&["--batch", "--owner"], 0);
    assert_eq!(again["changes"].as_array().unwrap().len(), 0);
}

fn different_owners_on_both_sides_are_a_conflict(pair: &dyn Fn() -> Pair) {
    if !is_root() {
        return;
    }
    let pair = pair();
    pair.write('a', "f", "x\n");
    pair.sync_json(&["--batch", "--owner"], 0);
    chown(&pair, 'a', "f", NOBODY);
    chown(&pair, 'b', "f", OTHER);
    let report = pair.sync_json(&["--batch", "--owner"], 1);
    assert_eq!(conflict_paths(&report), ["f"]);
    assert_eq!(owner(&pair, 'a', "f"), (NOBODY, NOBODY));
    assert_eq!(owner(&pair, 'b', "f"), (OTHER, OTHER));
}

fn without_it_owners_are_each_sides_and_never_carried_back(pair: &dyn Fn() -> Pair) {
    if !is_root() {
        return;
    }
    let pair = pair();
    pair.write('a', "f", "x\n");
    chown(&pair, 'a', "f", NOBODY);
    pair.sync_json(&["--batch"], 0);
    // B's copy belongs to whoever made it (root here), and that is no
    // change of B's: --owner now must not give A's file to root.
    assert_eq!(owner(&pair, 'b', "f"), (0, 0));
    let report = pair.sync_json(&["--batch", "--owner"], 0);
    assert_eq!(report["changes"].as_array().unwrap().len(), 0);
    assert_eq!(owner(&pair, 'a', "f"), (NOBODY, NOBODY));
    // The next change of the file carries its owner.
    pair.write('a', "f", "y\n");
    chown(&pair, 'a', "f", NOBODY);
    pair.sync_json(&["--batch", "--owner"], 0);
    assert_eq!(owner(&pair, 'b', "f"), (NOBODY, NOBODY));
}

local_and_remote!(owners_travel_with_new_entries_and_alone:
    local_owners_travel, ssh_owners_travel, daemon_owners_travel);
local_and_remote!(different_owners_on_both_sides_are_a_conflict:
    local_owner_conflict, ssh_owner_conflict, daemon_owner_conflict);
local_and_remote!(without_it_owners_are_each_sides_and_never_carried_back:
    local_owner_upgrade, ssh_owner_upgrade, daemon_owner_upgrade);
