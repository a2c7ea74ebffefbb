//! The TCP daemon (issue 11, acceptance 2): `accord server --listen` on a
//! loopback port with keys made by `accord keygen` for the run. An
//! authenticated mirror works both ways; unknown, wrong and unpinned keys,
//! plaintext and garbage are refused and the daemon keeps serving others;
//! a read-only module refuses writes; nothing leaves its module; 20
//! clients at once all finish; idle and surplus connections are closed.

mod daemon_common;
mod mirror_common;

use accord_remote::{parse_remote, DaemonOptions};
use daemon_common::*;
use mirror_common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

#[test]
fn a_mirror_works_both_ways() {
    let w = World::new();
    let d = w.start(&[]);
    let src = w.path("src");
    small_tree(&src, 7);
    let out = w.mirror(&[s(&src), &d.url("rw/copy"), "--json"]);
    assert_exit(&out, 0);
    assert_same_tree(&src, &w.rw.join("copy"));
    let sent = json_field(&out.stdout, "bytes_sent").as_u64().unwrap();
    assert!(sent > 200_000, "bytes_sent {sent}");
    let back = w.path("back");
    let out = w.mirror(&[&d.url("rw/copy"), s(&back), "--json"]);
    assert_exit(&out, 0);
    assert_same_tree(&src, &back);
    let received = json_field(&out.stdout, "bytes_received").as_u64().unwrap();
    assert!(received > 200_000, "bytes_received {received}");
    // One line per session as it ends: who, what, how it went, what it did.
    let pushed = "key \"test\", module rw, path \"copy\", to write, done; ";
    d.wait_lines(pushed, 1, Duration::from_secs(5));
    let fetched = "key \"test\", module rw, path \"copy\", to read, done; ";
    d.wait_lines(fetched, 1, Duration::from_secs(5));
    let lines = d.lines();
    let line = lines.iter().find(|l| l.contains(pushed)).unwrap();
    assert!(line.contains(" INFO "), "{line}");
    assert!(
        line.contains("files written; ") && line.contains(" bytes in, "),
        "{line}"
    );
    let line = lines.iter().find(|l| l.contains(fetched)).unwrap();
    assert!(line.contains("files sent; "), "{line}");
    assert!(d.log_has("authenticated as \"test\""));
}

/// `-z` through the daemon: compressed inside the encryption, so a
/// compressible file costs a fraction of its size on the wire.
#[test]
fn a_compressed_mirror_through_the_daemon() {
    let w = World::new();
    let d = w.start(&[]);
    let src = w.path("src");
    std::fs::create_dir_all(&src).unwrap();
    let text: String = (0..40_000)
        .map(|i| format!("line {} of a log\n", i % 977))
        .collect();
    std::fs::write(src.join("log.txt"), &text).unwrap();
    let out = w.mirror(&[s(&src), &d.url("rw/z"), "-z", "--json"]);
    assert_exit(&out, 0);
    assert_same_tree(&src, &w.rw.join("z"));
    let sent = json_field(&out.stdout, "bytes_sent").as_u64().unwrap();
    assert!(
        sent < text.len() as u64 / 4,
        "{sent} bytes sent for {}",
        text.len()
    );
}

#[test]
fn unknown_and_wrong_keys_are_refused() {
    let w = World::new();
    let mut d = w.start(&[]);
    let src = w.path("src");
    small_tree(&src, 3);
    let target = d.url("rw/t");
    let server_pub = pub_of(&w.server_key);
    // A client key the server does not know.
    let stranger = w.path("stranger/key");
    keygen(&stranger);
    let out = w.mirror_as(&stranger, Some(&server_pub), &[s(&src), &target]);
    assert_refused(&out, "does not know your key");
    // A wrong client key file: a public key where the private one goes.
    let out = w.mirror_as(
        &pub_of(&w.client_key),
        Some(&server_pub),
        &[s(&src), &target],
    );
    assert_refused(&out, "not an accord private key file");
    // The server's key is not the one pinned: nothing is sent.
    let out = w.mirror_as(&w.client_key, Some(&pub_of(&stranger)), &[s(&src), &target]);
    assert_refused(&out, "NOT the key pinned");
    // No pin at all: the key is shown with how to pin it, and refused.
    let out = w.mirror_as(&w.client_key, None, &[s(&src), &target]);
    assert_refused(&out, "the server's key is not known");
    let line = std::fs::read_to_string(&server_pub).unwrap();
    let key = line
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(stderr(&out).contains(&key), "{}", stderr(&out));
    assert!(!w.rw.join("t").exists(), "a refused client wrote");
    // Pinned in known_servers, the same run goes through.
    let known = w.path("client-config/accord/known_servers");
    std::fs::create_dir_all(known.parent().unwrap()).unwrap();
    std::fs::write(&known, format!("127.0.0.1:{} {key}\n", d.port)).unwrap();
    let out = w.mirror_as(&w.client_key, None, &[s(&src), &target]);
    assert_exit(&out, 0);
    assert_same_tree(&src, &w.rw.join("t"));
    d.assert_alive();
    assert!(d.log_has("refused: unknown client key"));
}

/// Raw bytes to the daemon's port; what it answered (up to its close).
fn raw(port: u16, send: &[u8]) -> Vec<u8> {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = c.write_all(send);
    let mut got = Vec::new();
    let _ = c.read_to_end(&mut got);
    got
}

#[test]
fn plaintext_and_garbage_are_refused_and_others_still_served() {
    let w = World::new();
    let mut d = w.start(&[]);
    // A plaintext accord client: its handshake's magic, a version, a root.
    let answer = raw(d.port, b"\0ACCORD\0\x05\0\0\0\x01\0\0\0\0");
    assert!(answer.starts_with(b"\0ACCORD\0"), "{answer:?}");
    assert!(String::from_utf8_lossy(&answer).contains("only encrypted"));
    let answer = raw(d.port, b"GET / HTTP/1.0\r\n\r\n");
    assert!(String::from_utf8_lossy(&answer).contains("only encrypted"));
    let _ = raw(d.port, &[0xff; 70_000]);
    // Half a handshake, then gone; and one that connects and leaves.
    {
        let mut c = TcpStream::connect(("127.0.0.1", d.port)).unwrap();
        c.write_all(&[0, 32, 1, 2, 3]).unwrap();
    }
    drop(TcpStream::connect(("127.0.0.1", d.port)).unwrap());
    // A right-sized first message of noise: the handshake fails cleanly.
    let mut junk = vec![0, 32];
    junk.extend_from_slice(&[7; 32]);
    junk.extend_from_slice(&[9; 100]);
    let _ = raw(d.port, &junk);
    let src = w.path("src");
    small_tree(&src, 11);
    let out = w.mirror(&[s(&src), &d.url("rw/after")]);
    assert_exit(&out, 0);
    assert_same_tree(&src, &w.rw.join("after"));
    d.assert_alive();
    assert!(d.log_has("not an encrypted accord connection"));
}

#[test]
fn a_read_only_module_refuses_a_push_and_allows_a_pull() {
    let w = World::new();
    let d = w.start(&[]);
    small_tree(&w.ro.join("pub"), 5);
    let src = w.path("src");
    small_tree(&src, 6);
    let out = w.mirror(&[s(&src), &d.url("ro/pub")]);
    assert_refused(&out, "read-only");
    assert_eq!(out.status.code(), Some(69));
    let back = w.path("back");
    let out = w.mirror(&[&d.url("ro/pub"), s(&back)]);
    assert_exit(&out, 0);
    assert_same_tree(&w.ro.join("pub"), &back);
}

#[test]
fn nothing_leaves_its_module() {
    let w = World::new();
    let d = w.start(&[]);
    let src = w.path("src");
    small_tree(&src, 8);
    let out = w.mirror(&[s(&src), &d.url("rw/../ro/x")]);
    assert_refused(&out, "may not leave its module");
    let out = w.mirror(&[s(&src), &d.url("rw/a/../../x")]);
    assert_refused(&out, "may not leave its module");
    let out = w.mirror(&[s(&src), &d.url("nosuch/x")]);
    assert_refused(&out, "no module \"nosuch\"");
    // A symlink inside the module that points out of it is not followed.
    std::os::unix::fs::symlink(&w.ro, w.rw.join("escape")).unwrap();
    let out = w.mirror(&[s(&src), &d.url("rw/escape/x")]);
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!w.ro.join("x").exists(), "a write left the module");
}

#[test]
fn twenty_clients_at_once() {
    let w = World::new();
    let d = w.start(&[]);
    let src = w.path("src");
    small_tree(&src, 21);
    let started = Instant::now();
    let outs: Vec<Output> = std::thread::scope(|scope| {
        let runs: Vec<_> = (0..20)
            .map(|i| {
                let (w, url, src) = (&w, d.url(&format!("rw/c{i}")), &src);
                scope.spawn(move || w.mirror(&[s(src), &url, "-j", "2"]))
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    for (i, out) in outs.iter().enumerate() {
        assert_exit(out, 0);
        assert_same_tree(&src, &w.rw.join(format!("c{i}")));
    }
    eprintln!("20 clients in {:.2} s", started.elapsed().as_secs_f64());
}

#[test]
fn an_idle_connection_is_closed() {
    let w = World::new();
    let d = w.start(&["--idle-timeout", "1"]);
    // Silent before the handshake.
    let started = Instant::now();
    let answer = raw(d.port, b"");
    assert!(answer.is_empty());
    assert!(started.elapsed() < Duration::from_secs(4));
    // Silent after the handshake.
    let (mut reader, _writer) = dial(&w, &d).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let n = reader.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "the daemon sent something to a silent client");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert!(d.log_has("idle for 1 s"), "{:?}", d.lines());
}

#[test]
fn connections_over_the_limit_are_refused_with_a_reason() {
    let w = World::new();
    let d = w.start(&["--max-connections", "1"]);
    let held = dial(&w, &d).unwrap();
    let src = w.path("src");
    small_tree(&src, 9);
    let out = w.mirror(&[s(&src), &d.url("rw/busy")]);
    assert_refused(&out, "the server is busy");
    drop(held);
    // The slot comes back once the first connection is gone.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let out = w.mirror(&[s(&src), &d.url("rw/busy")]);
        if out.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "{}", stderr(&out));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// An authenticated client that turns hostile after the handshake (a
/// frame that claims 4 GiB, then garbage) ends its own session only: the
/// daemon allocates nothing on its say-so, keeps serving a mirror that
/// runs meanwhile, and logs why the session ended.
#[test]
fn a_hostile_client_after_the_handshake_ends_only_its_own_session() {
    use accord_proto::{Hello, RootMode};
    let w = World::new();
    let mut d = w.start(&[]);
    let src = w.path("src");
    small_tree(&src, 13);
    // An honest client's session is open before, and used after.
    let spec = parse_remote(&d.url("rw/honest")).unwrap().unwrap();
    let opts = DaemonOptions {
        key: w.client_key.clone(),
        server_key: Some(pub_of(&w.server_key)),
        ..Default::default()
    };
    let honest = accord_remote::connect_daemon(&spec, &opts, RootMode::Write).unwrap();
    let before = peak_kib(&d);
    for attack in [
        // A frame header: 4 GiB of payload on stream 1, kind Open.
        vec![0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 1],
        // A frame of an unknown kind.
        vec![4, 0, 0, 0, 1, 0, 0, 0, 99, 1, 2, 3, 4],
        // Random bytes.
        (0..100_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect(),
    ] {
        let (mut reader, mut writer) = dial(&w, &d).unwrap();
        Hello {
            version: accord_proto::hello::VERSION,
            features: 0,
            mode: RootMode::Write,
            root: b"rw/hostile".to_vec(),
        }
        .write(&mut writer)
        .unwrap();
        let _ = writer.write_all(&attack);
        let _ = writer.flush();
        // The daemon answers the hello, then closes: reading ends.
        let started = Instant::now();
        let mut sink = Vec::new();
        let _ = reader.read_to_end(&mut sink);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    let grew = peak_kib(&d).saturating_sub(before);
    assert!(
        grew < 64 << 10,
        "the daemon's peak memory grew by {grew} KiB"
    );
    let out = w.mirror(&[s(&src), &d.url("rw/meanwhile")]);
    assert_exit(&out, 0);
    assert_same_tree(&src, &w.rw.join("meanwhile"));
    // The honest session opened before the attacks still works.
    use accord_engine::Replica;
    assert!(honest.closed().is_none());
    let dir = honest.open_dir(&accord_model::RelPath::root()).unwrap();
    dir.mkdir(b"still-here").unwrap();
    assert!(w.rw.join("honest/still-here").is_dir());
    d.assert_alive();
    let log = d.lines().join("\n");
    assert!(
        log.contains("rw/hostile") || log.contains("module rw"),
        "{log}"
    );
    assert!(log.matches(": closed after").count() >= 3, "{log}");
}

/// A client that asks a read-only module for reading and then sends
/// writes anyway (a lying or modified client) has every one refused.
#[test]
fn a_read_only_module_refuses_writes_from_a_lying_client() {
    use accord_engine::Replica;
    use accord_proto::RootMode;
    let w = World::new();
    let d = w.start(&[]);
    small_tree(&w.ro.join("pub"), 4);
    let before = snapshot(&w.ro);
    let spec = parse_remote(&d.url("ro/pub")).unwrap().unwrap();
    let opts = DaemonOptions {
        key: w.client_key.clone(),
        server_key: Some(pub_of(&w.server_key)),
        ..Default::default()
    };
    // Asking to write is refused at once.
    let err = accord_remote::connect_daemon(&spec, &opts, RootMode::Write).err();
    assert!(err.is_some_and(|e| e.contains("read-only")));
    // Reading is allowed; every write on that session is refused.
    let r = accord_remote::connect_daemon(&spec, &opts, RootMode::Read).unwrap();
    let root = accord_model::RelPath::root();
    let dir = r.open_dir(&root).unwrap();
    assert!(dir.stat(b"hello.txt").unwrap().is_some());
    assert!(dir.mkdir(b"new").is_err());
    let hello = dir.stat(b"hello.txt").unwrap().unwrap();
    assert!(dir
        .delete(b"hello.txt", &accord_model::Expect::Entry(hello))
        .is_err());
    assert!(r.write_state("memo", b"x", true).is_err());
    assert!(differences(&before, &snapshot(&w.ro)).is_empty());
    assert!(w.ro.join("pub/hello.txt").exists());
}

/// The daemon read from a TOML file: its modules, keys and limits.
#[test]
fn a_daemon_from_a_config_file() {
    let w = World::new();
    let config = w.path("server/accord.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nkey = \"key\"\nauth_keys = \"authorized_keys\"\n\
             max_connections = 4\nidle_timeout = 30\n\
             [modules.data]\npath = \"{}\"\n\
             [modules.pub]\npath = \"{}\"\nread_only = true\n",
            s(&w.rw),
            s(&w.ro)
        ),
    )
    .unwrap();
    let mut cmd = Command::new(bin());
    cmd.args(["server", "--config", s(&config)])
        .env("ACCORD_STATE_DIR", w.path("server-state"));
    let d = Daemon::start(cmd);
    let src = w.path("src");
    small_tree(&src, 17);
    let out = w.mirror(&[s(&src), &d.url("data/x")]);
    assert_exit(&out, 0);
    assert_same_tree(&src, &w.rw.join("x"));
    let out = w.mirror(&[s(&src), &d.url("pub/x")]);
    assert_refused(&out, "read-only");
    // A misspelt setting stops the daemon before it listens.
    std::fs::write(&config, "lisen = \"127.0.0.1:0\"\n").unwrap();
    let out = Command::new(bin())
        .args(["server", "--config", s(&config)])
        .output()
        .unwrap();
    assert_exit(&out, 64);
    assert!(stderr(&out).contains("lisen"), "{}", stderr(&out));
}

/// No anonymous daemon: without authorized keys it does not start; and a
/// client's private key that others may read is refused, as ssh does.
#[test]
fn no_anonymous_daemon_and_no_shared_private_key() {
    use std::os::unix::fs::PermissionsExt;
    let w = World::new();
    let out = Command::new(bin())
        .args(["server", "--listen", "127.0.0.1:0"])
        .args(["--module", &format!("rw={}", s(&w.rw))])
        .args(["--key", s(&w.server_key)])
        .output()
        .unwrap();
    assert_exit(&out, 64);
    assert!(
        stderr(&out).contains("no anonymous access"),
        "{}",
        stderr(&out)
    );
    let empty = w.path("server/empty_keys");
    std::fs::write(&empty, "# nobody\n").unwrap();
    let out = Command::new(bin())
        .args(["server", "--listen", "127.0.0.1:0"])
        .args(["--module", &format!("rw={}", s(&w.rw))])
        .args(["--key", s(&w.server_key)])
        .args(["--auth-keys", s(&empty)])
        .output()
        .unwrap();
    assert_exit(&out, 64);
    assert!(
        stderr(&out).contains("nobody could connect"),
        "{}",
        stderr(&out)
    );
    let d = w.start(&[]);
    std::fs::set_permissions(&w.client_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let src = w.path("src");
    small_tree(&src, 2);
    let out = w.mirror(&[s(&src), &d.url("rw/x")]);
    assert_refused(&out, "other users may read this private key");
    assert!(!w.rw.join("x").exists());
}

#[test]
fn keygen_never_overwrites_a_key() {
    let w = World::new();
    let before = std::fs::read(&w.client_key).unwrap();
    let out = Command::new(bin())
        .args(["keygen", "-f", s(&w.client_key)])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    assert!(stderr(&out).contains("already exists"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&w.client_key).unwrap(), before);
    let public = std::fs::read_to_string(pub_of(&w.client_key)).unwrap();
    assert!(public.starts_with("accord-x25519 ") && public.trim_end().ends_with(" test"));
}

/// A daemon that does not run as root (the package's service runs as its
/// own user) does as rsync's receiver: it gives no file away and sets a
/// group only where its user belongs to it; the push succeeds and its
/// client says once that owners were not kept, not once per file.
#[test]
fn a_daemon_not_run_as_root_keeps_no_owners_and_its_client_says_so_once() {
    use std::os::unix::fs::MetadataExt;
    let w = World::new();
    let d = w.start_unprivileged(&[]);
    // Made after the world was handed to the daemon's user: root's files.
    let src = w.path("src");
    small_tree(&src, 11);
    let in_users = src.join("in-users");
    std::fs::write(&in_users, b"group users\n").unwrap();
    if is_root() {
        std::os::unix::fs::chown(&in_users, None, Some(100)).unwrap();
    }
    let out = w.mirror(&["--owner", s(&src), &d.url("rw/pushed")]);
    assert_exit(&out, 0);
    let pushed = w.rw.join("pushed");
    let found = differences(&snapshot(&src), &snapshot(&pushed));
    let other: Vec<_> = found
        .iter()
        .filter(|l| !l.ends_with("owner differs"))
        .collect();
    assert!(other.is_empty(), "{other:#?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let said = err.matches("owners were not kept in ").count();
    assert_eq!(said, 1, "{err}");
    assert!(err.contains("its server does not run as root"), "{err}");
    if is_root() {
        // Written by nobody; the group asked for where nobody is in it.
        let in_users = std::fs::metadata(pushed.join("in-users")).unwrap();
        assert_eq!((in_users.uid(), in_users.gid()), (NOBODY, 100));
        let hello = std::fs::metadata(pushed.join("hello.txt")).unwrap();
        assert_eq!((hello.uid(), hello.gid()), (NOBODY, NOBODY));
    }
    let line = "key \"test\", module rw, path \"pushed\", to write, done; ";
    d.wait_lines(line, 1, Duration::from_secs(5));
    assert!(
        d.log_has("owners not kept (not running as root)"),
        "{:#?}",
        d.lines()
    );
    // A second run changes nothing and says so again, once.
    let out = w.mirror(&["--owner", s(&src), &d.url("rw/pushed")]);
    assert_exit(&out, 0);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("owners were not kept in ").count(), 1, "{err}");
}
