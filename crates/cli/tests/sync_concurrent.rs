//! Concurrent modification (issue 12, acceptance 4): a file written
//! between update detection and propagation is never overwritten; the run
//! reports it ("changed during sync") and the next run syncs it. The run
//! is held between planning and propagation by the test hook
//! `ACCORD_TEST_SYNC_PAUSE` while the test writes.
//!
//! Every scenario runs three times (acceptance 7): both roots local, B over
//! ssh (a real sshd started for the run) and B from an `accord server`
//! daemon; with B remote, B's re-checks and fingerprints are made by the
//! server on its own host.

mod mirror_common;
mod remote_common;
#[macro_use]
mod sync_common;
use sync_common::*;

type MakePair<'a> = &'a dyn Fn() -> Pair;

fn synced_pair(make_pair: MakePair) -> Pair {
    let pair = make_pair();
    pair.write('a', "f", "original");
    pair.write('a', "other", "other file");
    pair.sync_json(&[], 0);
    pair
}

fn error_paths(report: &serde_json::Value) -> Vec<String> {
    report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap().to_string())
        .collect()
}

fn a_target_written_during_the_sync_is_not_overwritten(make_pair: MakePair) {
    let pair = synced_pair(make_pair);
    pair.write('a', "f", "new version from a");
    pair.write('a', "other", "also new from a");
    let report = sync_with_change(&pair, 2, || {
        pair.write('b', "f", "written on b during the sync");
    });
    assert_eq!(error_paths(&report), ["f"], "{report}");
    let message = report["errors"][0]["error"].as_str().unwrap();
    assert!(message.contains("changed during sync"), "{message}");
    assert_eq!(
        pair.read('b', "f").as_deref(),
        Some("written on b during the sync")
    );
    assert_eq!(pair.read('a', "f").as_deref(), Some("new version from a"));
    // The rest of the run was done.
    assert_eq!(pair.read('b', "other").as_deref(), Some("also new from a"));
    // Next run: both sides changed f since the last agreement.
    let next = pair.sync_json(&[], 1);
    assert_eq!(conflict_paths(&next), ["f"]);
}

fn a_source_written_during_the_sync_is_synced_next_time(make_pair: MakePair) {
    let pair = synced_pair(make_pair);
    pair.write('a', "f", "new version from a");
    let report = sync_with_change(&pair, 2, || {
        pair.write('a', "f", "newer still, written during the sync");
    });
    assert_eq!(error_paths(&report), ["f"], "{report}");
    assert_eq!(pair.read('b', "f").as_deref(), Some("original"));
    pair.sync_json(&[], 0);
    assert_eq!(
        pair.read('b', "f").as_deref(),
        Some("newer still, written during the sync")
    );
    pair.assert_equal();
}

/// A write that keeps the size and puts the mtime back passes every
/// metadata check; the fingerprint of what arrived catches it.
fn a_write_hidden_from_metadata_is_caught_by_the_fingerprint(make_pair: MakePair) {
    let pair = synced_pair(make_pair);
    pair.write('a', "f", "new version AAA");
    let path = pair.path('a', "f");
    let report = sync_with_change(&pair, 2, || {
        rewrite_keeping_mtime(&path, b"new version BBB");
    });
    assert_eq!(error_paths(&report), ["f"], "{report}");
    assert_eq!(pair.read('b', "f").as_deref(), Some("original"));
    pair.sync_json(&[], 0);
    assert_eq!(pair.read('b', "f").as_deref(), Some("new version BBB"));
}

fn a_target_deleted_during_the_sync_is_not_recreated(make_pair: MakePair) {
    let pair = synced_pair(make_pair);
    pair.write('a', "f", "new version from a");
    let report = sync_with_change(&pair, 2, || {
        std::fs::remove_file(pair.path('b', "f")).unwrap();
    });
    assert_eq!(error_paths(&report), ["f"], "{report}");
    assert!(!pair.exists('b', "f"));
    // Deleted on b, changed on a: a conflict, with a's version kept.
    let next = pair.sync_json(&[], 1);
    assert_eq!(conflict_paths(&next), ["f"]);
    assert_eq!(pair.read('a', "f").as_deref(), Some("new version from a"));
}

/// B is the source and is written again while the run holds: with B
/// remote, the server reads it and the client checks what arrived.
fn a_source_on_b_written_during_the_sync_is_synced_next_time(make_pair: MakePair) {
    let pair = synced_pair(make_pair);
    pair.write('b', "f", "new version from b");
    let report = sync_with_change(&pair, 2, || {
        pair.write('b', "f", "newer still, written on b during the sync");
    });
    assert_eq!(error_paths(&report), ["f"], "{report}");
    assert_eq!(pair.read('a', "f").as_deref(), Some("original"));
    pair.sync_json(&[], 0);
    assert_eq!(
        pair.read('a', "f").as_deref(),
        Some("newer still, written on b during the sync")
    );
    pair.assert_equal();
}

local_and_remote!(a_target_written_during_the_sync_is_not_overwritten:
    target_written_local, target_written_b_over_ssh, target_written_b_from_the_daemon);
local_and_remote!(a_source_written_during_the_sync_is_synced_next_time:
    source_written_local, source_written_b_over_ssh, source_written_b_from_the_daemon);
local_and_remote!(a_write_hidden_from_metadata_is_caught_by_the_fingerprint:
    hidden_write_local, hidden_write_b_over_ssh, hidden_write_b_from_the_daemon);
local_and_remote!(a_target_deleted_during_the_sync_is_not_recreated:
    target_deleted_local, target_deleted_b_over_ssh, target_deleted_b_from_the_daemon);
local_and_remote!(a_source_on_b_written_during_the_sync_is_synced_next_time:
    source_on_b_written_local, source_on_b_written_b_over_ssh,
    source_on_b_written_b_from_the_daemon);
