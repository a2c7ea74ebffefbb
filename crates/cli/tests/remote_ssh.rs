//! Remote roots over a real ssh (issue 11, acceptance 1): an sshd started
//! for the run on a loopback port, `accord server` on the far side. A
//! mirror through it must give the same tree as a local mirror, in every
//! attribute; failures to reach the far side are one line and exit 69; a
//! restricted key stays in its tree; a dropped connection is exit 3 and
//! leaves every file with its old or its new contents.

mod mirror_common;
mod remote_common;

use mirror_common::*;
use remote_common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn assert_ok(out: &std::process::Output) {
    assert_exit(out, 0);
    let text = String::from_utf8_lossy(&out.stdout);
    if text.lines().last().is_some_and(|l| l.starts_with('{')) {
        assert_eq!(
            json_field(&out.stdout, "errors"),
            serde_json::json!([]),
            "{text}"
        );
    }
}

fn assert_same_tree(want: &Path, got: &Path, what: &str) {
    assert_same_tree_but(want, got, what, &[]);
}

/// As `assert_same_tree`, with differences containing any of `known`
/// left out (each is a bug with its own failing test).
fn assert_same_tree_but(want: &Path, got: &Path, what: &str, known: &[&str]) {
    let d: Vec<String> = differences(&snapshot(want), &snapshot(got))
        .into_iter()
        .filter(|line| !known.iter().any(|k| line.contains(k)))
        .collect();
    assert!(
        d.is_empty(),
        "{what}: {} and {} differ:\n{}",
        want.display(),
        got.display(),
        d.join("\n")
    );
}

/// ctimes of every entry: a run that touches nothing leaves them all.
fn ctimes(root: &Path) -> BTreeMap<String, (i64, i64)> {
    snapshot(root)
        .into_iter()
        .map(|(k, n)| (k, n.ctime))
        .collect()
}

fn json_u64(out: &std::process::Output, key: &str) -> u64 {
    json_field(&out.stdout, key)
        .as_u64()
        .unwrap_or_else(|| panic!("no {key} in {}", String::from_utf8_lossy(&out.stdout)))
}

/// The second run after a mirror changes nothing; the third transfers
/// nothing and says so in --json, with only listings on the wire.
fn rerun_changes_nothing(state: &Path, rsh: &str, args: &[&str], copy: &Path, what: &str) {
    let before = ctimes(copy);
    assert_ok(&remote_mirror(state, rsh, args));
    assert_eq!(
        before,
        ctimes(copy),
        "{what}: the second run touched entries"
    );
    let mut with_json = args.to_vec();
    with_json.push("--json");
    let o = remote_mirror(state, rsh, &with_json);
    assert_ok(&o);
    for key in ["files_transferred", "bytes_written", "files_deleted"] {
        assert_eq!(json_u64(&o, key), 0, "{what}: third run {key}");
    }
    let (sent, received) = (json_u64(&o, "bytes_sent"), json_u64(&o, "bytes_received"));
    eprintln!("{what}: third run sent {sent} bytes, received {received}");
    // Requests and listings of a tree of about 40 entries: a few KiB.
    assert!(sent < 64 << 10, "{what}: third run sent {sent} bytes");
    assert!(
        received < 256 << 10,
        "{what}: third run received {received} bytes"
    );
    assert_eq!(
        before,
        ctimes(copy),
        "{what}: the third run touched entries"
    );
}

/// 1a. Push and pull of every entry kind equal a local mirror of the same
/// data; the second run changes nothing, the third transfers nothing.
#[test]
fn every_kind_push_and_pull_equal_a_local_mirror() {
    let Some(sshd) = Sshd::start() else { return };
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let (src, local, pushed, pulled) = (
        p.join("src"),
        p.join("local"),
        p.join("pushed"),
        p.join("pulled"),
    );
    std::fs::create_dir(&src).unwrap();
    full_tree(&src);
    let o = mirror(&p.join("state-l"), &[s(&src), s(&local), "--json"]);
    assert_ok(&o);

    let rsh = sshd.rsh();
    let push_dst = sshd.root(&pushed);
    let push = [s(&src), push_dst.as_str()];
    let o = remote_mirror(&p.join("state-push"), &rsh, &[push[0], push[1], "--json"]);
    assert_ok(&o);
    eprintln!(
        "push: sent {} received {}",
        json_u64(&o, "bytes_sent"),
        json_u64(&o, "bytes_received")
    );
    // Holes are filled over the wire: see sparse_file_stays_sparse_over_ssh.
    let sparse = ["allocation (sparse)"];
    assert_same_tree_but(&local, &pushed, "push vs local mirror", &sparse);
    assert_same_tree_but(&src, &pushed, "push vs source", &sparse);

    // The URL spelling, with the port in it rather than in --rsh.
    let pull_src = format!("ssh://127.0.0.1:{}{}", sshd.port, src.display());
    let pull = [pull_src.as_str(), s(&pulled)];
    let rsh_url = sshd.rsh_without_port();
    let o = remote_mirror(
        &p.join("state-pull"),
        &rsh_url,
        &[pull[0], pull[1], "--json"],
    );
    assert_ok(&o);
    assert_same_tree_but(&local, &pulled, "pull vs local mirror", &sparse);
    assert_same_tree_but(&src, &pulled, "pull vs source", &sparse);

    rerun_changes_nothing(&p.join("state-push"), &rsh, &push, &pushed, "push");
    rerun_changes_nothing(&p.join("state-pull"), &rsh_url, &pull, &pulled, "pull");
}

/// `-z`: the connection is zstd both ways. A tree of text-like files (a
/// log repeated with variations, many small files with similar names)
/// costs a fraction of its size on the wire pushed and pulled, and the
/// copies are the same as without `-z`; random data costs no more than
/// without compression, to within zstd's framing.
#[test]
fn compress_shrinks_the_wire_and_changes_nothing_else() {
    let Some(sshd) = Sshd::start() else { return };
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let src = p.join("src");
    std::fs::create_dir_all(src.join("logs")).unwrap();
    let mut rng = Rng(11);
    let mut log = String::new();
    for i in 0..60_000u32 {
        let r = rng.bytes(2);
        log.push_str(&format!(
            "2026-11-24 12:{:02}:{:02} worker {} took {} ms for job {i}\n",
            i / 60 % 60,
            i % 60,
            r[0] % 8,
            r[1]
        ));
    }
    std::fs::write(src.join("app.log"), &log).unwrap();
    for i in 0..500 {
        std::fs::write(
            src.join(format!("logs/entry-{i:04}.txt")),
            format!("entry {i}\n").repeat(40),
        )
        .unwrap();
    }
    std::fs::write(src.join("random.bin"), Rng(12).bytes(1 << 20)).unwrap();
    let size: u64 = log.len() as u64 + 500 * 400 + (1 << 20);
    let rsh = sshd.rsh();
    let mut wire = Vec::new();
    for (i, z) in [&[][..], &["-z"][..]].iter().enumerate() {
        let (pushed, pulled) = (p.join(format!("pushed{i}")), p.join(format!("pulled{i}")));
        let push_root = sshd.root(&pushed);
        let mut args = vec![s(&src), push_root.as_str(), "--json"];
        args.extend_from_slice(z);
        let o = remote_mirror(&p.join(format!("s{i}a")), &rsh, &args);
        assert_ok(&o);
        let push = json_u64(&o, "bytes_sent");
        let pull_root = sshd.root(&src);
        let mut args = vec![pull_root.as_str(), s(&pulled), "--json"];
        args.extend_from_slice(z);
        let o = remote_mirror(&p.join(format!("s{i}b")), &rsh, &args);
        assert_ok(&o);
        let pull = json_u64(&o, "bytes_received");
        assert_same_tree(&src, &pushed, "push");
        assert_same_tree(&src, &pulled, "pull");
        wire.push((push, pull));
    }
    eprintln!(
        "{size} bytes of files; wire bytes (push sent, pull received): plain {:?}, -z {:?}",
        wire[0], wire[1]
    );
    let (plain, z) = (wire[0], wire[1]);
    assert!(
        plain.0 > size && plain.1 > size,
        "plain {plain:?} for {size}"
    );
    // The text compresses about tenfold; the random megabyte does not.
    let bound = (1 << 20) + (size - (1 << 20)) / 4;
    assert!(z.0 < bound && z.1 < bound, "-z {z:?}, bound {bound}");
}

/// Holes stay holes both ways (as in a local mirror, which keeps them), and
/// a file that is mostly a hole does not cross the wire as zeros.
#[test]
fn sparse_file_stays_sparse_over_ssh() {
    let Some(sshd) = Sshd::start() else { return };
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let (src, pushed, pulled) = (p.join("src"), p.join("pushed"), p.join("pulled"));
    std::fs::create_dir(&src).unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::File::create(src.join("sparse.img")).unwrap();
        f.set_len(64 << 20).unwrap();
        f.write_all_at(b"start", 0).unwrap();
        f.write_all_at(&Rng(5).bytes(10_000), 40 << 20).unwrap();
    }
    let rsh = sshd.rsh();
    let o = remote_mirror(
        &p.join("s1"),
        &rsh,
        &[s(&src), &sshd.root(&pushed), "--json"],
    );
    assert_ok(&o);
    let sent = json_u64(&o, "bytes_sent");
    let o = remote_mirror(
        &p.join("s2"),
        &rsh,
        &[&sshd.root(&src), s(&pulled), "--json"],
    );
    assert_ok(&o);
    let received = json_u64(&o, "bytes_received");
    let blocks = |d: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(d.join("sparse.img")).unwrap().blocks()
    };
    eprintln!(
        "64 MiB file, 20 KiB of data: push sent {sent} bytes, pull received {received}; \
         512-byte blocks: source {}, pushed {}, pulled {}",
        blocks(&src),
        blocks(&pushed),
        blocks(&pulled)
    );
    assert_same_tree(&src, &pushed, "push");
    assert_same_tree(&src, &pulled, "pull");
    assert!(sent < 4 << 20, "push sent {sent} bytes for 20 KiB of data");
    assert!(
        received < 4 << 20,
        "pull received {received} bytes for 20 KiB of data"
    );
}

/// A tree for the update tests: a big file (a delta's case), small ones.
fn update_tree(root: &Path, rng: &mut Rng) {
    std::fs::create_dir_all(root.join("d/e")).unwrap();
    std::fs::write(root.join("big"), rng.bytes(4 << 20)).unwrap();
    std::fs::write(root.join("d/big2"), rng.bytes(1 << 20)).unwrap();
    for i in 0..12 {
        std::fs::write(
            root.join(format!("d/{}f{i}", if i % 2 == 0 { "e/" } else { "" })),
            rng.bytes(100 + i * 300),
        )
        .unwrap();
    }
}

fn append(p: &Path, data: &[u8]) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
    f.write_all(data).unwrap();
}

fn change(root: &Path, rng: &mut Rng, round: usize) {
    append(&root.join("big"), format!("line {round}\n").as_bytes());
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(root.join("d/big2"))
            .unwrap();
        f.write_all_at(&rng.bytes(200), 500_000).unwrap();
    }
    std::fs::write(root.join("d/f1"), format!("rewritten {round}")).unwrap();
    let _ = std::fs::remove_file(root.join(format!("d/e/f{}", round * 2)));
    let _ = std::fs::remove_file(root.join(format!("d/f{}", round * 2 + 3)));
    std::fs::create_dir_all(root.join(format!("new{round}/sub"))).unwrap();
    std::fs::write(root.join(format!("new{round}/sub/n")), rng.bytes(5000)).unwrap();
    std::os::unix::fs::symlink("../big", root.join(format!("new{round}/link"))).unwrap();
}

/// 1b. Changes, deletions and additions propagate both ways; appending to a
/// big file sends a delta (far fewer bytes than the file); `--inplace` to a
/// remote destination works.
#[test]
fn updates_propagate_both_ways_with_deltas_and_inplace() {
    let Some(sshd) = Sshd::start() else { return };
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let (src, pushed, pulled) = (p.join("src"), p.join("pushed"), p.join("pulled"));
    let mut rng = Rng(1234);
    update_tree(&src, &mut rng);
    let rsh = sshd.rsh();
    let push_dst = sshd.root(&pushed);
    let pull_src = sshd.root(&src);
    let push = |extra: &[&str]| {
        let mut a = vec![s(&src), push_dst.as_str(), "--json", "--delta", "always"];
        a.extend_from_slice(extra);
        remote_mirror(&p.join("state-push"), &rsh, &a)
    };
    let pull = || {
        remote_mirror(
            &p.join("state-pull"),
            &rsh,
            &[pull_src.as_str(), s(&pulled), "--json", "--delta", "always"],
        )
    };
    assert_ok(&push(&[]));
    assert_ok(&pull());
    assert_same_tree(&src, &pushed, "first push");
    assert_same_tree(&src, &pulled, "first pull");

    let big = (4u64 << 20) + (1 << 20);
    for round in 0..2 {
        change(&src, &mut rng, round);
        let o = if round == 0 {
            push(&[])
        } else {
            push(&["--inplace"])
        };
        assert_ok(&o);
        assert_same_tree(&src, &pushed, &format!("push, round {round}"));
        let (sent, matched) = (json_u64(&o, "bytes_sent"), json_u64(&o, "matched_bytes"));
        eprintln!("push round {round}: sent {sent}, matched {matched}");
        assert!(matched > big / 2, "push round {round}: matched {matched}");
        assert!(sent < big / 4, "push round {round}: sent {sent} of {big}");
        assert!(json_u64(&o, "files_deleted") >= 2, "push round {round}");

        let o = pull();
        assert_ok(&o);
        assert_same_tree(&src, &pulled, &format!("pull, round {round}"));
        let (received, matched) = (
            json_u64(&o, "bytes_received"),
            json_u64(&o, "matched_bytes"),
        );
        eprintln!("pull round {round}: received {received}, matched {matched}");
        assert!(matched > big / 2, "pull round {round}: matched {matched}");
        assert!(
            received < big / 4,
            "pull round {round}: received {received}"
        );
    }
    // Nothing of ours is left on the far side.
    let leftovers: Vec<String> = snapshot(&pushed)
        .into_keys()
        .filter(|k| k.rsplit('/').next().unwrap().starts_with(".accord-"))
        .collect();
    assert!(leftovers.is_empty(), "left on the far side: {leftovers:?}");
}

/// 1c. A port where nothing listens: one line, exit 69.
#[test]
fn unreachable_port_is_one_line_and_69() {
    if ssh_tools_missing() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("src")).unwrap();
    let key = t.path().join("key");
    std::fs::write(&key, b"").unwrap();
    let rsh = format!(
        "ssh -p {} -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR -o ConnectTimeout=5",
        free_port()
    );
    let dst = format!("127.0.0.1:{}", t.path().join("dst").display());
    let o = remote_mirror(
        &t.path().join("state"),
        &rsh,
        &[s(&t.path().join("src")), &dst],
    );
    assert_exit(&o, 69);
    let line = one_line_stderr(&o);
    eprintln!("said: {line}");
    assert!(line.contains("127.0.0.1"), "{line}");
    assert!(line.to_lowercase().contains("refused"), "{line}");
    assert!(!t.path().join("dst").exists());
}

/// 1c. A key the server does not accept: one line, exit 69.
#[test]
fn unauthorized_key_is_one_line_and_69() {
    let Some(sshd) = Sshd::start() else { return };
    let stranger = sshd.new_key("stranger_key");
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("src")).unwrap();
    let dst = sshd.root(&t.path().join("dst"));
    let o = remote_mirror(
        &t.path().join("state"),
        &sshd.rsh_with(&stranger),
        &[s(&t.path().join("src")), &dst],
    );
    assert_exit(&o, 69);
    let line = one_line_stderr(&o);
    eprintln!("said: {line}");
    assert!(line.contains("Permission denied"), "{line}");
    assert!(!t.path().join("dst").exists());
}

/// 1c. No accord at the path given on the far side: the message says
/// accord could not be started there.
#[test]
fn no_accord_on_the_far_side_is_one_line_and_69() {
    let Some(sshd) = Sshd::start() else { return };
    let t = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("src")).unwrap();
    let dst = sshd.root(&t.path().join("dst"));
    let o = Command::new(bin())
        .arg("mirror")
        .arg(t.path().join("src"))
        .arg(&dst)
        .arg("--rsh")
        .arg(sshd.rsh())
        .arg("--remote-accord")
        .arg("/nonexistent/accord")
        .env("ACCORD_STATE_DIR", t.path().join("state"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_exit(&o, 69);
    let line = one_line_stderr(&o);
    eprintln!("said: {line}");
    assert!(line.contains("could not be started"), "{line}");
    assert!(line.contains("/nonexistent/accord"), "{line}");
}

/// 1c. A remote source that does not exist: one line naming it, exit 69,
/// and the local destination is not made.
#[test]
fn missing_remote_source_is_one_line_and_69() {
    let Some(sshd) = Sshd::start() else { return };
    let t = tempfile::tempdir().unwrap();
    let missing = t.path().join("no-such-dir");
    let src = sshd.root(&missing);
    let o = remote_mirror(
        &t.path().join("state"),
        &sshd.rsh(),
        &[&src, s(&t.path().join("dst"))],
    );
    assert_exit(&o, 69);
    let line = one_line_stderr(&o);
    eprintln!("said: {line}");
    assert!(line.contains("no-such-dir"), "{line}");
    assert!(line.contains("No such file"), "{line}");
    assert!(!t.path().join("dst").exists());
}

/// An sshd with two more keys, each forced to `accord server --restrict
/// JAIL` (the second `--read-only`), as rrsync would be set up.
fn restricted(sshd: &Sshd, jail: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let rw = sshd.new_key("restricted_key");
    let ro = sshd.new_key("read_only_key");
    let cmd = format!("{} server --restrict {}", bin().display(), jail.display());
    sshd.authorize(
        &rw,
        Some(&format!("command=\"{cmd}\",no-pty,no-port-forwarding")),
    );
    sshd.authorize(
        &ro,
        Some(&format!(
            "command=\"{cmd} --read-only\",no-pty,no-port-forwarding"
        )),
    );
    (rw, ro)
}

/// 1d. A restricted key: roots inside its tree work (an absolute path is
/// taken inside it), `..` out of it is refused, and a read-only key
/// refuses a push but serves a pull.
#[test]
fn restricted_key_stays_in_its_tree() {
    let Some(sshd) = Sshd::start() else { return };
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let jail = p.join("jail");
    std::fs::create_dir_all(jail.join("inside")).unwrap();
    std::fs::create_dir_all(p.join("outside")).unwrap();
    std::fs::write(p.join("outside/secret"), b"secret").unwrap();
    let src = p.join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d/f"), b"data").unwrap();
    let (rw, ro) = restricted(&sshd, &jail);
    let state = p.join("state");

    // Inside: a relative root, and an absolute one taken inside the jail.
    let o = remote_mirror(
        &state,
        &sshd.rsh_with(&rw),
        &[s(&src), "127.0.0.1:inside/copy"],
    );
    assert_ok(&o);
    assert_same_tree(&src, &jail.join("inside/copy"), "restricted push");
    let o = remote_mirror(&state, &sshd.rsh_with(&rw), &[s(&src), "127.0.0.1:/abs"]);
    assert_ok(&o);
    assert_same_tree(&src, &jail.join("abs"), "restricted push to /abs");
    let o = remote_mirror(
        &state,
        &sshd.rsh_with(&rw),
        &["127.0.0.1:inside/copy", s(&p.join("pulled"))],
    );
    assert_ok(&o);
    assert_same_tree(&src, &p.join("pulled"), "restricted pull");

    // Out by `..`: refused, both ways, nothing read or written outside.
    for (args, what) in [
        (vec![s(&src), "127.0.0.1:../outside"], "push to ../outside"),
        (
            vec!["127.0.0.1:inside/../../outside", s(&p.join("stolen"))],
            "pull from inside/../../outside",
        ),
    ] {
        let o = remote_mirror(&state, &sshd.rsh_with(&rw), &args);
        assert_exit(&o, 69);
        let line = one_line_stderr(&o);
        eprintln!("{what}: {line}");
        assert!(line.contains("leaves the tree"), "{what}: {line}");
    }
    assert!(!p.join("stolen").exists());
    assert_eq!(
        std::fs::read_dir(p.join("outside")).unwrap().count(),
        1,
        "something was written outside the jail"
    );

    // Read-only: a push is refused at the handshake, a pull works.
    let o = remote_mirror(
        &state,
        &sshd.rsh_with(&ro),
        &[s(&src), "127.0.0.1:inside/ro"],
    );
    let line = one_line_stderr(&o);
    eprintln!("read-only push: exit {:?}: {line}", o.status.code());
    assert_exit(&o, 69);
    assert!(line.contains("read-only"), "{line}");
    assert!(!jail.join("inside/ro").exists());
    let o = remote_mirror(
        &state,
        &sshd.rsh_with(&ro),
        &["127.0.0.1:inside/copy", s(&p.join("pulled-ro"))],
    );
    assert_ok(&o);
    assert_same_tree(&src, &p.join("pulled-ro"), "read-only pull");
}

/// 1d. A restricted key may not leave its tree through a symlink it
/// planted there itself: push a link pointing outside, then name a root
/// through it. Nothing may be written outside, nothing read from there.
#[test]
fn restricted_key_cannot_leave_through_a_symlink_it_planted() {
    let Some(sshd) = Sshd::start() else { return };
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let jail = p.join("jail");
    std::fs::create_dir_all(&jail).unwrap();
    std::fs::create_dir_all(p.join("outside")).unwrap();
    std::fs::write(p.join("outside/secret"), b"secret").unwrap();
    let src = p.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::os::unix::fs::symlink(p.join("outside"), src.join("esc")).unwrap();
    std::fs::write(src.join("planted"), b"planted").unwrap();
    let (rw, _) = restricted(&sshd, &jail);
    let state = p.join("state");
    let rsh = sshd.rsh_with(&rw);
    // The link itself may land in the jail: it is just data there.
    assert_ok(&remote_mirror(&state, &rsh, &[s(&src), "127.0.0.1:tree"]));
    assert!(std::fs::symlink_metadata(jail.join("tree/esc"))
        .unwrap()
        .file_type()
        .is_symlink());

    // A push through it must not write outside the jail...
    let o = remote_mirror(&state, &rsh, &[s(&src), "127.0.0.1:tree/esc/written"]);
    eprintln!(
        "push through the link: exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    let wrote = p.join("outside/written").exists();
    // ...and a pull through it must not read from outside.
    let o = remote_mirror(&state, &rsh, &["127.0.0.1:tree/esc", s(&p.join("stolen"))]);
    eprintln!(
        "pull through the link: exit {:?}: {}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    let read = p.join("stolen/secret").exists();
    assert!(
        !wrote && !read,
        "a restricted key left its tree through a symlink: wrote outside: {wrote}, read outside: {read}"
    );
}

fn is_reserved(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or("");
    name.starts_with(".accord-tmp-")
        || name.starts_with(".accord-partial-")
        || name.starts_with(".accord-inplace-")
        || name.starts_with(".accord-recovery-")
}

/// 1e. The ssh process killed in the middle of a push of big files: exit 3,
/// and on the far side every file has its old contents, its new ones, or
/// is absent (never a mix); anything else there is under a name reserved
/// for our temp files. The next run converges and leaves no temp file.
#[test]
fn dropped_connection_mid_push_leaves_old_or_new_contents() {
    cut_push();
}

/// 1e. What a person reads when the connection drops: one line that says
/// the connection was lost, not one "Broken pipe" per file in flight.
#[test]
fn dropped_connection_says_so_in_one_line() {
    let Some(stderr) = cut_push() else { return };
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines.len() == 1 && lines[0].to_lowercase().contains("connection"),
        "not one line saying the connection was lost:\n{stderr}"
    );
}

/// The push of the cut tests, cut, with everything but its message
/// checked; its stderr.
fn cut_push() -> Option<String> {
    let sshd = Sshd::start()?;
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let (src, dst) = (p.join("src"), p.join("dst"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&dst).unwrap();
    let mut rng = Rng(99);
    let size = 32usize << 20;
    // Contents by hash: 256 MiB of bodies need not stay in memory.
    let mut new: BTreeMap<String, blake3::Hash> = BTreeMap::new();
    let mut old: BTreeMap<String, blake3::Hash> = BTreeMap::new();
    for i in 0..8 {
        let name = format!("f{i}");
        // A cheap, distinct 32 MiB body: a random block repeated with the
        // file's number mixed in, so no two files (or versions) agree.
        let block = rng.bytes(1 << 20);
        let body: Vec<u8> = block
            .iter()
            .cycle()
            .take(size)
            .enumerate()
            .map(|(j, b)| b ^ ((j >> 20) as u8) ^ (i as u8))
            .collect();
        std::fs::write(src.join(&name), &body).unwrap();
        new.insert(name.clone(), blake3::hash(&body));
        if i % 2 == 0 {
            // Half of them have an old version on the far side already.
            let o = rng.bytes(100_000 + i * 1000);
            std::fs::write(dst.join(&name), &o).unwrap();
            old.insert(name, blake3::hash(&o));
        }
    }
    let pid_file = p.join("ssh.pid");
    let wrapper = pid_recording_ssh(p, &pid_file);
    let rsh = sshd
        .rsh()
        .replacen("ssh", &wrapper.display().to_string(), 1);
    let dst_root = sshd.root(&dst);
    // --delta never: whole files, so the temp files grow steadily.
    let mut child = Command::new(bin())
        .args([
            "mirror",
            s(&src),
            &dst_root,
            "--delta",
            "never",
            "--rsh",
            &rsh,
        ])
        .arg("--remote-accord")
        .arg(bin())
        .env("ACCORD_STATE_DIR", p.join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill ssh once a temp file on the far side holds 8 MiB: mid-transfer,
    // whatever the speed of this machine.
    let killed = kill_ssh_when_a_temp_holds(&mut child, &dst, &pid_file, 8 << 20);
    let out = child.wait_with_output().unwrap();
    assert!(killed, "the push ended before it could be cut: {out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("cut push: exit {:?}: {stderr}", out.status.code());
    assert_exit(&out, 3);
    // The server finishes on its own once its input is gone.
    assert!(
        sshd.wait_sessions_gone(Duration::from_secs(20)),
        "accord server still running 20s after its connection was cut: {:?}",
        sshd.session_pids()
    );
    let mut temps = Vec::new();
    for (name, got) in hashes(&dst) {
        if is_reserved(&name) {
            temps.push(name);
            continue;
        }
        let ok = Some(&got) == new.get(&name) || Some(&got) == old.get(&name);
        assert!(ok, "{name}: neither its old nor its new contents");
    }
    eprintln!("temp files left after the cut: {temps:?}");
    for name in old.keys() {
        assert!(dst.join(name).exists(), "{name}: an old version was lost");
    }

    // The next run converges and cleans up after the cut one.
    let o = remote_mirror(&p.join("state"), &sshd.rsh(), &[s(&src), &dst_root]);
    assert_ok(&o);
    assert_eq!(hashes(&dst), hashes(&src), "rerun after the cut");
    Some(stderr.into_owned())
}

/// Wait until a temp file in `dst` holds `bytes`, then kill the ssh whose
/// pid is in `pid_file`; false when `child` ended first.
fn kill_ssh_when_a_temp_holds(
    child: &mut std::process::Child,
    dst: &Path,
    pid_file: &Path,
    bytes: u64,
) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        let temp_size = std::fs::read_dir(dst)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with(".accord-tmp-"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .max()
            .unwrap_or(0);
        if temp_size >= bytes {
            let pid = std::fs::read_to_string(pid_file).unwrap();
            let st = Command::new("kill")
                .args(["-KILL", pid.trim()])
                .status()
                .unwrap();
            assert!(st.success());
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

/// Acceptance 7, scaled: a push of one big file cut at about half-way
/// leaves what arrived as the file's partial file on the far side; the
/// next run builds the file from it and sends little more than the half
/// that was missing; no partial file is left. A partial file whose name is
/// not written again is removed.
#[test]
fn cut_push_resumes_from_what_arrived() {
    let Some(sshd) = Sshd::start() else { return };
    let t = tempfile::tempdir().unwrap();
    let p = t.path();
    let (src, dst) = (p.join("src"), p.join("dst"));
    std::fs::create_dir_all(&src).unwrap();
    std::fs::create_dir_all(&dst).unwrap();
    let size: u64 = 96 << 20;
    let body = Rng(7).bytes(size as usize);
    std::fs::write(src.join("big.img"), &body).unwrap();
    drop(body);
    // Left by an earlier cut transfer of a file that is gone from SRC.
    std::fs::write(dst.join(".accord-partial-gone.img"), vec![1u8; 2 << 20]).unwrap();
    let pid_file = p.join("ssh.pid");
    let wrapper = pid_recording_ssh(p, &pid_file);
    let rsh = sshd
        .rsh()
        .replacen("ssh", &wrapper.display().to_string(), 1);
    let dst_root = sshd.root(&dst);
    let mut child = Command::new(bin())
        .args(["mirror", s(&src), &dst_root, "--rsh", &rsh])
        .arg("--remote-accord")
        .arg(bin())
        .env("ACCORD_STATE_DIR", p.join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let killed = kill_ssh_when_a_temp_holds(&mut child, &dst, &pid_file, size / 2);
    let out = child.wait_with_output().unwrap();
    assert!(killed, "the push ended before it could be cut: {out:?}");
    assert_exit(&out, 3);
    assert!(sshd.wait_sessions_gone(Duration::from_secs(20)));
    let partial = dst.join(".accord-partial-big.img");
    let arrived = std::fs::metadata(&partial)
        .expect("what arrived is kept as the partial file")
        .len();
    assert!(!dst.join("big.img").exists());

    let o = remote_mirror(
        &p.join("state"),
        &sshd.rsh(),
        &[s(&src), &dst_root, "--json"],
    );
    assert_ok(&o);
    let sent = json_u64(&o, "bytes_sent");
    eprintln!(
        "{size} bytes cut after {arrived} arrived; the next run sent {sent} ({:.1}% of the file)",
        sent as f64 * 100.0 / size as f64
    );
    assert_eq!(hashes(&dst), hashes(&src), "after the resumed run");
    assert!(
        sent < size - arrived + (size >> 4),
        "sent {sent} bytes, {} were missing",
        size - arrived
    );
}

/// The BLAKE3 of every file directly in `dir` (the cut test's tree is flat).
fn hashes(dir: &Path) -> BTreeMap<String, blake3::Hash> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let mut h = blake3::Hasher::new();
            h.update_reader(std::fs::File::open(e.path()).unwrap())
                .unwrap();
            (name, h.finalize())
        })
        .collect()
}

/// What an rsync user types for a push works as they meant it: `-avP
/// --delete SRC/ HOST:DST/` makes DST SRC's copy, lists each change and
/// ends with the summary line (off a terminal too, for `-v`).
#[test]
fn an_rsync_users_push_works_as_typed() {
    let Some(sshd) = Sshd::start() else { return };
    let t = tempfile::tempdir().unwrap();
    let (src, dst) = (t.path().join("src"), t.path().join("dst"));
    std::fs::create_dir(&src).unwrap();
    full_tree(&src);
    std::fs::create_dir(&dst).unwrap();
    for i in 0..3 {
        std::fs::write(dst.join(format!("old{i}")), b"old").unwrap();
    }
    std::fs::write(dst.join("extra"), b"x").unwrap();
    let src_arg = format!("{}/", s(&src));
    let dst_arg = format!("{}/", sshd.root(&dst));
    let o = remote_mirror(
        &t.path().join("state"),
        &sshd.rsh(),
        &[
            "-avP",
            "--delete",
            "--max-delete",
            "100%",
            &src_arg,
            &dst_arg,
        ],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_same_tree_but(&src, &dst, "-avP push", &["allocation (sparse)"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("deleted   extra"), "{out}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(" files written"), "{err}");
}

/// `accord mirror A B host:DST` puts each source in DST/NAME on the far
/// side, as `rsync -a A B host:DST/` does, and leaves DST's other entries.
#[test]
fn several_sources_go_into_a_remote_destination() {
    let Some(sshd) = Sshd::start() else { return };
    let t = tempfile::tempdir().unwrap();
    let (one, two, dst) = (
        t.path().join("one"),
        t.path().join("two"),
        t.path().join("dst"),
    );
    std::fs::create_dir(&one).unwrap();
    full_tree(&one);
    std::fs::create_dir_all(two.join("sub")).unwrap();
    std::fs::write(two.join("sub/f"), b"two").unwrap();
    std::fs::create_dir(&dst).unwrap();
    std::fs::write(dst.join("mine"), b"kept").unwrap();
    let o = remote_mirror(
        &t.path().join("state"),
        &sshd.rsh(),
        &[s(&one), s(&two), &sshd.root(&dst)],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_same_tree_but(
        &one,
        &dst.join("one"),
        "first source",
        &["allocation (sparse)"],
    );
    assert_eq!(std::fs::read(dst.join("two/sub/f")).unwrap(), b"two");
    assert_eq!(std::fs::read(dst.join("mine")).unwrap(), b"kept");
}
