//! Issue 27: what an authenticated client can make the daemon hold.
//! A read-only client that sends a `MakeDelta` whose body is a run of
//! ZEROS frames (13 bytes on the wire for each MiB) once took the daemon
//! to 1.5 GB; now the body is refused at its kind's limit and the
//! daemon's peak memory barely moves. The Welcome names the module, not
//! where it is on the server.

mod daemon_common;
mod mirror_common;

use accord_model::{Expect, Found, Kind, RelPath};
use accord_proto::frame::{encode_frame, read_frame, FrameKind};
use accord_proto::{Hello, Request, RootMode, Welcome, WireError};
use daemon_common::*;
use mirror_common::*;
use std::io::{Read, Write};
use std::sync::mpsc;
use std::time::Duration;

/// What the test client saw on its reply streams.
enum Seen {
    Credit(u32),
    Error(u32, String),
    Closed,
}

/// Hello for `root` (Read), and the Welcome's name for the root.
fn open_session(
    w: &World,
    d: &Daemon,
    root: &str,
) -> (Box<dyn Read + Send>, Box<dyn Write + Send>, String) {
    let (mut reader, mut writer) = dial(w, d).unwrap();
    Hello {
        version: accord_proto::hello::VERSION,
        features: 0,
        mode: RootMode::Read,
        root: root.as_bytes().to_vec(),
    }
    .write(&mut writer)
    .unwrap();
    writer.flush().unwrap();
    match Welcome::read(&mut reader).unwrap() {
        Welcome::Accepted { describe, .. } => (reader, writer, describe),
        Welcome::Refused { message, .. } => panic!("refused: {message}"),
    }
}

/// Frames from the daemon, sorted into what the sender needs.
fn watch_replies(mut reader: Box<dyn Read + Send>, tx: mpsc::Sender<Seen>) {
    std::thread::spawn(move || loop {
        let seen = match read_frame(&mut reader) {
            Ok(Some(f)) if f.kind == FrameKind::Credit => {
                Seen::Credit(u32::from_le_bytes(f.payload[..4].try_into().unwrap()))
            }
            Ok(Some(f)) if f.kind == FrameKind::Error => {
                let e = WireError::decode(&f.payload).unwrap();
                Seen::Error(f.stream, e.message)
            }
            Ok(Some(_)) => continue,
            _ => Seen::Closed,
        };
        let last = matches!(seen, Seen::Closed);
        if tx.send(seen).is_err() || last {
            return;
        }
    });
}

/// Send `request` on stream 1 with a body of `runs` ZEROS frames of
/// 1 MiB, within the body credit the daemon grants; the error it answers
/// with (`None`: it took the whole body).
fn zeros_body(w: &World, d: &Daemon, root: &str, request: Request, runs: u32) -> Option<String> {
    let (reader, mut writer, _) = open_session(w, d, root);
    let (tx, rx) = mpsc::channel();
    watch_replies(reader, tx);
    let mut buf = Vec::new();
    encode_frame(&mut buf, 1, FrameKind::Open, &request.encode());
    writer.write_all(&buf).unwrap();
    let mut credit = u64::from(accord_proto::frame::BODY_WINDOW);
    let mut answer = None;
    for _ in 0..runs {
        while credit < 1 << 20 && answer.is_none() {
            match rx.recv_timeout(Duration::from_secs(60)).unwrap() {
                Seen::Credit(n) => credit += u64::from(n),
                Seen::Error(1, m) => answer = Some(m),
                Seen::Error(..) => {}
                Seen::Closed => panic!("the daemon closed the session"),
            }
        }
        if answer.is_some() {
            break;
        }
        buf.clear();
        encode_frame(&mut buf, 1, FrameKind::Zeros, &(1u32 << 20).to_le_bytes());
        writer.write_all(&buf).unwrap();
        writer.flush().unwrap();
        credit -= 1 << 20;
    }
    buf.clear();
    encode_frame(&mut buf, 1, FrameKind::End, &[]);
    let _ = writer.write_all(&buf);
    let _ = writer.flush();
    while answer.is_none() {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Seen::Error(1, m)) => answer = Some(m),
            Ok(Seen::Closed) | Err(_) => break,
            Ok(_) => {}
        }
    }
    answer
}

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
    let (_, _, describe) = open_session(&w, &d, "ro/pub");
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
    };
    let answer = zeros_body(&w, &d, "ro/pub", make_delta, 1500);
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
    let refused = r
        .open_sync_side(b"a made-up root", &archives)
        .err()
        .expect("a new archive past the cap");
    let refused = refused.to_string();
    assert!(refused.contains("sync archives, its limit"), "{refused}");
}
