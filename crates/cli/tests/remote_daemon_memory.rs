//! Issue 27: what an authenticated client can make the daemon hold.
//! A read-only client that sends a `MakeDelta` whose body is a run of
//! ZEROS frames (13 bytes on the wire for each MiB) once took the daemon
//! to 1.5 GB; now the body is refused at its kind's limit and the
//! daemon's peak memory barely moves. The Welcome names the module, not
//! where it is on the server.

mod daemon_common;
mod mirror_common;

use accord_model::{Expect, Found, Kind, RelPath};
use accord_proto::{Request, RootMode};
use daemon_common::*;
use mirror_common::*;

/// A world with a read-only module `ro/pub` holding one file.
fn world_with_file() -> (World, Daemon) {
    let w = World::new();
    let d = w.start(&[]);
    std::fs::create_dir_all(w.ro.join("pub")).unwrap();
    std::fs::write(w.ro.join("pub/file"), vec![7u8; 100_000]).unwrap();
    (w, d)
}

/// Defect 4: the Welcome names the module and the path in it.
#[test]
fn the_welcome_names_the_module_not_its_path() {
    let (w, d) = world_with_file();
    let (_, _, describe) = open_session(&w, &d, "ro/pub", RootMode::Read);
    assert!(!describe.contains(s(&w.ro)), "{describe}");
    assert_eq!(describe, "ro/pub");
}

/// Defect 2: 1,500 MiB of zeros as a signature, from a read-only key.
#[test]
fn a_zeros_signature_is_refused_at_its_limit() {
    let (w, mut d) = world_with_file();
    let before = peak_kib(&d);
    let meta = std::fs::metadata(w.ro.join("pub/file")).unwrap();
    let expect = Expect::Entry(Found {
        kind: Kind::File,
        dev: 0,
        ino: 0,
        size: meta.len(),
        mtime: accord_model::Time::default(),
    });
    let make_delta = Request::MakeDelta {
        dir: RelPath::root(),
        name: b"file".to_vec(),
        expect,
        in_place: false,
        pack_level: None,
    };
    let answer = zeros_body(&w, &d, ("ro/pub", RootMode::Read), make_delta, 1500).unwrap();
    let grew = peak_kib(&d).saturating_sub(before);
    eprintln!("the daemon's peak memory grew by {} MiB", grew >> 10);
    assert!(
        grew < 96 << 10,
        "the daemon's peak memory grew by {grew} KiB"
    );
    let answer = answer.expect("the daemon took 1,500 MiB of signature");
    assert!(answer.contains("signature above its limit"), "{answer}");
    d.assert_alive();
    // And it still serves.
    let out = w.mirror(&[&d.url("ro/pub"), s(&w.path("copy"))]);
    assert_exit(&out, 0);
    assert_same_tree(&w.ro.join("pub"), &w.path("copy"));
}

/// A client names the state files and the sync archives it has the server
/// keep: past a cap, no new one is made.
#[test]
fn a_client_cannot_make_the_server_keep_files_without_end() {
    use accord_engine::Replica;
    let w = World::new();
    let d = w.start(&[]);
    let spec = accord_remote::parse_remote(&d.url("rw/caps"))
        .unwrap()
        .unwrap();
    let opts = accord_remote::DaemonOptions {
        key: w.client_key.clone(),
        server_key: Some(pub_of(&w.server_key)),
        ..Default::default()
    };
    let r = accord_remote::connect_daemon(&spec, &opts, RootMode::Write).unwrap();
    let written = (0..40)
        .filter(|i| r.write_state(&format!("made-up-{i}"), b"x", true).is_ok())
        .count();
    assert_eq!(written, 16, "state files written");
    // Rewriting one that exists is still allowed.
    r.write_state("made-up-0", b"y", true).unwrap();
    // Archives: the server's archive directory is full of other pairs'.
    let archives = w.path("server-state");
    std::fs::create_dir_all(&archives).unwrap();
    for i in 0..4096 {
        std::fs::write(archives.join(format!("archive-{i:032x}.sqlite")), b"").unwrap();
    }
    // The opening's outcome is read by the side's first call after its
    // rules (a server that carries rules out in order is sent them, and
    // the opening, without waiting): here a forget.
    let refused = r
        .open_sync_side(b"a made-up root", &archives)
        .and_then(|mut side| {
            side.set_rules(&accord_engine::SyncRules::default())?;
            side.forget()
        })
        .expect_err("a new archive past the cap");
    let refused = refused.to_string();
    assert!(refused.contains("sync archives, its limit"), "{refused}");
}

/// A delta the daemon has not the memory to make (its pool is 1 MiB
/// here) is made by the client from the file read as a stream: the pull
/// still ends with the right file.
#[test]
fn a_delta_the_server_cannot_hold_is_made_by_the_client() {
    let w = World::new();
    let d = w.start(&["--max-memory", "1"]);
    let mut rng = Rng(5);
    let old = rng.bytes(12 << 20);
    let mut new = old.clone();
    new[1 << 20..(1 << 20) + 4096].fill(1);
    std::fs::create_dir_all(w.ro.join("pub")).unwrap();
    std::fs::write(w.ro.join("pub/big"), &new).unwrap();
    let dst = w.path("copy");
    std::fs::create_dir_all(&dst).unwrap();
    std::fs::write(dst.join("big"), &old).unwrap();
    // Written in the same clock tick, the two would look the same.
    set_mtime(&dst.join("big"), 1_000_000_000, 0);
    let out = w.mirror(&[&d.url("ro/pub"), s(&dst), "--json"]);
    assert_exit(&out, 0);
    assert!(std::fs::read(dst.join("big")).unwrap() == new);
    // The file came whole (read as a stream), the delta was made here.
    let received = json_field(&out.stdout, "bytes_received").as_u64().unwrap();
    let literal = json_field(&out.stdout, "literal_bytes").as_u64().unwrap();
    assert!(received >= 12 << 20, "bytes_received {received}");
    assert!(literal < 1 << 20, "literal_bytes {literal}");
}

/// A push whose delta the daemon has not the memory to hold sends the
/// file whole instead: the destination still ends right.
#[test]
fn a_delta_the_server_cannot_take_is_sent_whole() {
    let w = World::new();
    let d = w.start(&["--max-memory", "1"]);
    // 8 MiB of new data: a delta above the 5 MiB the session may hold.
    let mut rng = Rng(6);
    let old = rng.bytes(12 << 20);
    let mut new = old.clone();
    new[1 << 20..9 << 20].copy_from_slice(&rng.bytes(8 << 20));
    let src = w.path("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("big"), &new).unwrap();
    std::fs::create_dir_all(w.rw.join("push")).unwrap();
    std::fs::write(w.rw.join("push/big"), &old).unwrap();
    // Written in the same clock tick, the two would look the same.
    set_mtime(&w.rw.join("push/big"), 1_000_000_000, 0);
    let out = w.mirror(&[s(&src), &d.url("rw/push"), "--json"]);
    assert_exit(&out, 0);
    let got = std::fs::read(w.rw.join("push/big")).unwrap();
    assert!(got == new, "{}", stderr(&out));
    let sent = json_field(&out.stdout, "bytes_sent").as_u64().unwrap();
    assert!(sent >= 12 << 20, "bytes_sent {sent}");
}
