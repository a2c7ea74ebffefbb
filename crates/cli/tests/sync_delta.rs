//! Delta transfers in `accord sync` (issue 12: "transfers use the delta
//! engine when the other side has an old version"): with one root remote,
//! an edited big file crosses the wire as an rsync delta, in both
//! directions, and the safety checks of a whole-file transfer hold for it:
//! a source written behind its metadata during the run is caught by the
//! fingerprint the delta carries, a target changed during the run is not
//! overwritten.

mod mirror_common;
mod remote_common;
mod sync_common;
use sync_common::*;

const SIZE: usize = 4 << 20;

/// `data` with `len` bytes changed at `at`.
fn edited(data: &[u8], at: usize, len: usize, seed: u64) -> Vec<u8> {
    let mut out = data.to_vec();
    out[at..at + len].copy_from_slice(&noise(len, seed));
    out
}

fn wire(report: &serde_json::Value) -> (u64, u64) {
    (
        report["bytes_sent"].as_u64().unwrap(),
        report["bytes_received"].as_u64().unwrap(),
    )
}

/// A pair (B reached as `remote`) that agrees on a 4 MiB file `big`.
fn synced_big(remote: &RemoteB) -> (Pair, Vec<u8>) {
    let pair = Pair::with_remote_b(remote);
    let data = noise(SIZE, 1);
    std::fs::write(pair.path('a', "big"), &data).unwrap();
    pair.write('a', "small", "small file");
    let first = pair.sync_json(&[], 0);
    let (sent, _) = wire(&first);
    assert!(sent > SIZE as u64, "the first copy is whole: {first}");
    (pair, data)
}

fn edits_cross_as_deltas_both_ways(remote: &RemoteB, how: &str) {
    let (pair, data) = synced_big(remote);
    // Edited on A (local): the signature comes from B, the delta goes to B.
    let on_a = edited(&data, SIZE / 2, 100, 2);
    std::fs::write(pair.path('a', "big"), &on_a).unwrap();
    let report = pair.sync_json(&[], 0);
    let (sent, received) = wire(&report);
    eprintln!("{how}: 100 bytes edited in 4 MiB on A: {sent} B sent, {received} B received");
    assert!(sent < 256 << 10, "{sent} bytes sent: {report}");
    assert_eq!(std::fs::read(pair.path('b', "big")).unwrap(), on_a);
    // Edited on B (remote): the delta is made there, only it comes back.
    let on_b = edited(&on_a, 1000, 100, 3);
    std::fs::write(pair.path('b', "big"), &on_b).unwrap();
    let report = pair.sync_json(&[], 0);
    let (sent, received) = wire(&report);
    eprintln!("{how}: 100 bytes edited in 4 MiB on B: {sent} B sent, {received} B received");
    assert!(received < 256 << 10, "{received} bytes received: {report}");
    assert_eq!(std::fs::read(pair.path('a', "big")).unwrap(), on_b);
    pair.assert_equal();
    assert_eq!(pair.sync_json(&[], 0)["propagated"], 0);
}

/// The source keeps its size and mtime while its bytes change after
/// detection: only the fingerprint can tell, and the delta carries it.
fn a_hidden_write_to_the_source_is_caught(remote: &RemoteB) {
    let (pair, data) = synced_big(remote);
    let path = pair.path('a', "big");
    std::fs::write(&path, edited(&data, 10, 100, 4)).unwrap();
    let report = sync_with_change(&pair, 2, || {
        rewrite_keeping_mtime(&path, &edited(&data, 10, 100, 5));
    });
    let errors = report["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{report}");
    assert_eq!(errors[0]["path"], "big");
    assert_eq!(std::fs::read(pair.path('b', "big")).unwrap(), data);
    // The next run carries what A holds now.
    pair.sync_json(&[], 0);
    pair.assert_equal();
}

/// The target's old version changes after detection: its signature is
/// refused, and nothing of B's is overwritten.
fn a_target_written_during_the_run_is_kept(remote: &RemoteB) {
    let (pair, data) = synced_big(remote);
    std::fs::write(pair.path('a', "big"), edited(&data, 10, 100, 6)).unwrap();
    let on_b = edited(&data, 5000, 100, 7);
    let report = sync_with_change(&pair, 2, || {
        std::fs::write(pair.path('b', "big"), &on_b).unwrap();
    });
    let message = report["errors"][0]["error"].as_str().unwrap_or_default();
    assert!(message.contains("changed during sync"), "{report}");
    assert_eq!(std::fs::read(pair.path('b', "big")).unwrap(), on_b);
    // Both changed since they last agreed: a conflict next time.
    let next = pair.sync_json(&[], 1);
    assert_eq!(conflict_paths(&next), ["big"]);
}

fn all_scenarios(remote: &RemoteB, how: &str) {
    edits_cross_as_deltas_both_ways(remote, how);
    a_hidden_write_to_the_source_is_caught(remote);
    a_target_written_during_the_run_is_kept(remote);
}

#[test]
fn with_b_over_ssh_edits_cross_as_deltas() {
    let Some(sshd) = remote_common::Sshd::start() else {
        return;
    };
    let base = tempfile::tempdir().unwrap();
    all_scenarios(&RemoteB::over_ssh(base.path(), &sshd.rsh()), "over ssh");
}

#[test]
fn with_b_from_the_daemon_edits_cross_as_deltas() {
    let daemon = Daemon::start();
    all_scenarios(&daemon.remote_b(), "from the daemon");
}
