//! Issue 11, section 3, item 8: control characters in file names (and in
//! any text the other side sends) are escaped in everything shown to a
//! person.
//!
//! These run the `accord` binary (`ACCORD_BIN`, else the one built in the
//! same target directory) with `--rsh` pointing at a script that starts,
//! instead of ssh, either a real `accord server` or this test binary acting
//! as a hostile server (`fake_server_main`, which does nothing unless
//! `HOSTILE_FAKE` is set).

mod hostile_common;

use accord_model::Kind;
use accord_proto::frame::{read_frame, write_frame, FrameKind};
use accord_proto::{Hello, Refusal, Request, Welcome, WireError};
use hostile_common::*;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The `accord` binary.
fn accord() -> PathBuf {
    if let Some(p) = std::env::var_os("ACCORD_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().unwrap();
    let p = exe.parent().unwrap().parent().unwrap().join("accord");
    assert!(
        p.exists(),
        "accord binary not found: set ACCORD_BIN or build it first (cargo build --release -p accord-cli)"
    );
    p
}

/// Names with every kind of control character a terminal acts on.
fn hostile_names() -> Vec<Vec<u8>> {
    vec![
        b"esc\x1b[31mred".to_vec(),
        b"osc\x1b]0;owned\x07title".to_vec(),
        b"bell\x07".to_vec(),
        b"line\nfeed".to_vec(),
        b"carriage\rreturn".to_vec(),
        b"tab\there".to_vec(),
        b"back\x08space".to_vec(),
        b"del\x7f".to_vec(),
        // C1 control CSI, as UTF-8.
        "csi\u{9b}31m".as_bytes().to_vec(),
    ]
}

/// Fail if `out` holds a control character other than the line ends, or
/// a C1 control.
fn assert_clean(what: &str, out: &[u8]) {
    let text = String::from_utf8_lossy(out);
    for (i, ch) in text.char_indices() {
        if ch.is_control() && ch != '\n' {
            panic!(
                "{what}: a raw control character {:?} at byte {i} in:\n{}",
                ch,
                text.escape_debug()
            );
        }
    }
}

/// A line count check: a name with a newline must not split its line.
fn assert_lines(what: &str, out: &[u8], at_most: usize) {
    let n = String::from_utf8_lossy(out).lines().count();
    assert!(
        n <= at_most,
        "{what}: {n} lines, expected at most {at_most}"
    );
}

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn run(args: &[&std::ffi::OsStr], env: &[(&str, &str)], state: &Path) -> Output {
    let mut c = Command::new(accord());
    c.arg("mirror").args(args).env("ACCORD_STATE_DIR", state);
    for (k, v) in env {
        c.env(k, v);
    }
    c.stdin(Stdio::null()).output().expect("run accord")
}

// ---------------------------------------------------------------------
// A real server, hostile names in the trees.
// ---------------------------------------------------------------------

#[test]
fn hostile_names_are_escaped_in_the_output_of_a_remote_mirror() {
    let sb = Sandbox::new();
    let src = sb.tmp.path().join("src");
    std::fs::create_dir(&src).unwrap();
    for n in hostile_names() {
        std::fs::write(src.join(std::ffi::OsStr::from_bytes(&n)), b"x\n").unwrap();
    }
    // An error on a hostile name: in the destination it is a non-empty
    // directory, which a file cannot replace without --force (or, if
    // replaced, a deletion is itemized: either way the name is shown).
    std::fs::create_dir_all(sb.root.join("push/esc\x1b[31mred/inner")).unwrap();
    let rsh = script(
        sb.tmp.path(),
        "real-server",
        &format!("exec '{}' server", accord().display()),
    );
    let state = sb.tmp.path().join("state");
    let push_dst = format!("fakehost:{}", sb.root.join("push").display());
    let pull_dst = sb.tmp.path().join("pulled");
    for (what, from, to) in [
        (
            "push",
            src.clone().into_os_string(),
            push_dst.clone().into(),
        ),
        (
            "pull",
            push_dst.clone().into(),
            pull_dst.clone().into_os_string(),
        ),
    ] {
        let out = run(
            &[
                "-i".as_ref(),
                "--delete".as_ref(),
                from.as_os_str(),
                to.as_os_str(),
                "--rsh".as_ref(),
                rsh.as_os_str(),
            ],
            &[],
            &state,
        );
        assert_clean(&format!("{what} stdout"), &out.stdout);
        assert_clean(&format!("{what} stderr"), &out.stderr);
        let shown = String::from_utf8_lossy(&out.stdout);
        assert!(
            shown.contains("esc\\x1b[31mred")
                || String::from_utf8_lossy(&out.stderr).contains("esc\\x1b[31mred"),
            "{what}: the name is not shown escaped:\n{shown}"
        );
        assert!(
            shown.contains("line\\x0afeed"),
            "{what}: the name with a newline is not shown escaped:\n{shown}"
        );
        // One line per name at most, and a few for errors and summaries.
        assert_lines(what, &out.stdout, hostile_names().len() + 4);
    }
    assert!(pull_dst
        .join(std::ffi::OsStr::from_bytes(b"bell\x07"))
        .exists());
}

// ---------------------------------------------------------------------
// A hostile server: its messages carry control characters.
// ---------------------------------------------------------------------

/// Text with terminal escapes: clear the screen, set the title, a newline
/// that starts a fake line of output.
const NASTY: &str = "\x1b[2J\x1b]0;owned\x07\nfake: all good\r";

/// Not a test of its own: the hostile server, run by the `--rsh` script
/// with `HOSTILE_FAKE` set. Reads the protocol on stdin and writes it on
/// descriptor 3 (stdout is libtest's).
#[test]
fn fake_server_main() {
    let Some(mode) = std::env::var_os("HOSTILE_FAKE") else {
        return;
    };
    use std::os::fd::FromRawFd;
    // SAFETY: the script opened descriptor 3 for us, and nothing else
    // in this process uses it.
    let mut out = unsafe { std::fs::File::from_raw_fd(3) };
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let _ = Hello::read(&mut input).unwrap();
    if mode == "refuse" {
        Welcome::Refused {
            version: accord_proto::hello::VERSION,
            why: Refusal::Denied,
            message: NASTY.into(),
        }
        .write(&mut out)
        .unwrap();
        return;
    }
    Welcome::Accepted {
        version: accord_proto::hello::VERSION,
        features: 0,
        identity: (77, 77),
        describe: NASTY.into(),
    }
    .write(&mut out)
    .unwrap();
    let name = "victim\x1b[31m";
    let listing = {
        let mut b = listing_reply(
            &[root_entry(), file_at(name, b"contents\n")],
            &[entry_at("sub", Kind::Dir, 0)],
        );
        // Replace "no failures, complete, no ignore file" with a failure
        // whose message is hostile.
        b.truncate(b.len() - 3);
        let mut e = accord_proto::Enc::new();
        e.varint(1).bytes(b"sub").str(NASTY);
        e.bool(true).u8(0);
        b.extend_from_slice(&e.finish());
        b
    };
    let error = WireError {
        code: 1,
        action: 0,
        side: 0,
        errno: 0,
        message: NASTY.into(),
        path: None,
    };
    while let Ok(Some(f)) = read_frame(&mut input) {
        if !matches!(f.kind, FrameKind::Open | FrameKind::OpenFin) {
            continue;
        }
        let reply: Result<Vec<u8>, WireError> = match Request::decode(&f.payload) {
            Ok(Request::Lock) => Ok(vec![1]),
            Ok(Request::ListDir { dir, .. }) if dir.is_root() => Ok(listing.clone()),
            Ok(Request::ListDir { .. }) => Err(error.clone()),
            Ok(Request::ReadState { .. }) => Ok(vec![0]),
            Ok(_) => Err(error.clone()),
            Err(_) => break,
        };
        let r = match reply {
            Ok(b) => write_frame(&mut out, f.stream, FrameKind::End, &b),
            Err(e) => write_frame(&mut out, f.stream, FrameKind::Error, &e.encode()),
        };
        if r.is_err() {
            break;
        }
        let _ = out.flush();
    }
}

/// `accord mirror` against the fake in `mode`.
fn against_fake(mode: &str, pull: bool) -> Output {
    let sb = Sandbox::new();
    let exe = std::env::current_exe().unwrap();
    let rsh = script(
        sb.tmp.path(),
        "fake-server",
        &format!(
            "exec 3>&1 1>&2\nexec '{}' --exact fake_server_main --nocapture --test-threads=1",
            exe.display()
        ),
    );
    let local = sb.tmp.path().join("local");
    std::fs::create_dir(&local).unwrap();
    std::fs::write(local.join("victim\x1b[31m"), b"local\n").unwrap();
    let remote = std::ffi::OsString::from("fakehost:/x");
    let (from, to) = if pull {
        (remote, local.into_os_string())
    } else {
        (local.into_os_string(), remote)
    };
    run(
        &[
            "-i".as_ref(),
            from.as_os_str(),
            to.as_os_str(),
            "--rsh".as_ref(),
            rsh.as_os_str(),
        ],
        &[("HOSTILE_FAKE", mode)],
        &sb.tmp.path().join("state"),
    )
}

/// Issue 11: the messages of a hostile server (its error replies, the
/// failures of its listings) reach the terminal escaped.
#[test]
fn a_hostile_servers_messages_are_escaped() {
    for pull in [true, false] {
        let what = if pull { "pull" } else { "push" };
        let out = against_fake("serve", pull);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("owned"),
            "{what}: the hostile message was not shown at all:\n{}",
            err.escape_debug()
        );
        assert_clean(&format!("{what} stdout"), &out.stdout);
        assert_clean(&format!("{what} stderr"), &out.stderr);
        assert!(!err.contains("\nfake: all good"), "{what}: a forged line");
    }
}

/// Issue 11: a hostile server's refusal reaches the terminal escaped.
#[test]
fn a_hostile_servers_refusal_is_escaped() {
    let out = against_fake("refuse", true);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("owned"),
        "the refusal was not shown:\n{}",
        err.escape_debug()
    );
    assert_clean("stderr", &out.stderr);
    assert_lines("stderr", &out.stderr, 1);
}

// ---------------------------------------------------------------------
// A hostile client: what `accord server` logs for its operator.
// ---------------------------------------------------------------------

/// Feed `accord server` these bytes on stdin; its stderr.
fn server_log(input: &[u8]) -> Vec<u8> {
    let state = tempfile::tempdir().unwrap();
    let mut child = Command::new(accord())
        .arg("server")
        .env("ACCORD_STATE_DIR", state.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run accord server");
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(input);
    // Hang up only once the server has read it all (an end of input first
    // would end the session as a clean hang-up).
    std::thread::sleep(std::time::Duration::from_millis(300));
    drop(stdin);
    child.wait_with_output().unwrap().stderr
}

#[test]
fn a_hostile_clients_bytes_are_escaped_in_the_servers_log() {
    let sb = Sandbox::new();
    let hello = |root: &[u8]| {
        let mut b = Vec::new();
        Hello {
            version: accord_proto::hello::VERSION,
            features: 0,
            mode: accord_proto::RootMode::Read,
            root: root.to_vec(),
        }
        .write(&mut b)
        .unwrap();
        b
    };
    let mut missing = sb.root.as_os_str().as_bytes().to_vec();
    missing.extend_from_slice(NASTY.as_bytes());
    let mut with_requests = hello(sb.root.as_os_str().as_bytes());
    let mut e = accord_proto::Enc::new();
    e.u8(2)
        .bytes(b"")
        .varint(1)
        .str("[\x1b[2J")
        .bool(false)
        .bool(true)
        .u8(0);
    let list = e.finish();
    accord_proto::frame::encode_frame(&mut with_requests, 1, FrameKind::OpenFin, &list);
    let mut e = accord_proto::Enc::new();
    e.u8(6).str(NASTY);
    accord_proto::frame::encode_frame(&mut with_requests, 2, FrameKind::OpenFin, &e.finish());
    for (what, input) in [
        ("a root that does not exist", hello(&missing)),
        ("not a handshake", format!("{NASTY}hello\n").into_bytes()),
        ("a bad pattern, then a bad state name", with_requests),
    ] {
        let log = server_log(&input);
        assert!(!log.is_empty(), "{what}: the server logged nothing");
        assert_clean(what, &log);
        assert_lines(what, &log, 1);
    }
}
