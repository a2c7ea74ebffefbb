//! Issue 27: a hostile SERVER against the real `accord` binary (the
//! hostile-client suites play the other part). Each case runs
//! `accord mirror fakehost:/src DST` with `--rsh` reaching a fake server
//! that the test drives (see `hostile_server_common`), and checks that
//! the client writes nothing outside DST (a sentinel directory beside it),
//! fails what it must with a message and a non-zero status, and stays
//! under `RSS_BUDGET_KIB` at its peak (printed by every case).

mod hostile_common;
mod hostile_server_common;
mod mirror_common;

use accord_model::{Entry, Found, Kind, Time};
use accord_proto::frame::{encode_frame, FrameKind};
use accord_proto::hello::FEATURE_ZSTD;
use accord_proto::Request;
use hostile_common::*;
use hostile_server_common::*;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// Not a test of its own: the client's `--rsh` runs this binary here,
/// as the relay between the client and the fake server.
#[test]
fn relay_main() {
    relay_if_asked();
}

/// Bytes a reply that never ends may carry before the fake gives up: above
/// anything a client may keep (2 GiB is the most a reply may be now).
const FLOOD_CAP: u64 = 3 << 30;

/// A case's places: DST inside a sandbox with a sentinel beside it, and
/// the fake's work directory.
struct Case {
    sb: Sandbox,
    work: Work,
    /// Everything beside DST, as it was before the run.
    before: Vec<(std::path::PathBuf, Vec<u8>)>,
}

impl Case {
    fn new() -> Case {
        let sb = Sandbox::new();
        let before = sb.around_root();
        Case {
            sb,
            work: Work::new(),
            before,
        }
    }

    fn dst(&self) -> &Path {
        &self.sb.root
    }

    /// `accord mirror fakehost:/src DST` (and `extra` options).
    fn pull(&self, extra: &[&str]) -> Client {
        let mut args: Vec<&OsStr> = extra.iter().map(OsStr::new).collect();
        args.push(OsStr::new("fakehost:/src"));
        args.push(self.dst().as_os_str());
        self.work.mirror(&args)
    }

    /// Nothing beside DST was created, changed or removed.
    fn assert_nothing_outside(&self, what: &str) {
        assert_eq!(
            self.sb.around_root(),
            self.before,
            "{what}: something changed outside DST"
        );
    }
}

/// A fake source whose root listing is `root` and whose other listings
/// and files are given.
fn source(
    root: Vec<u8>,
    more: &[(&[u8], Vec<u8>)],
    files: &[(&[u8], &[u8])],
) -> impl FnMut(&Asked) -> Answer {
    let mut listings: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    listings.insert(Vec::new(), root);
    for (dir, l) in more {
        listings.insert(dir.to_vec(), l.clone());
    }
    let files = files
        .iter()
        .map(|(p, c)| (p.to_vec(), c.to_vec()))
        .collect();
    fake_source(listings, files)
}

/// The stream of the first listing the client asks for.
fn first_listing(s: &Session) -> u32 {
    loop {
        let a = s.next_request().expect("the client hung up before listing");
        if matches!(a.request, Request::ListDir { .. }) {
            return a.stream;
        }
        // Whatever came first (nothing, for a source) gets an empty reply.
        let _ = s.reply(a.stream, &[]);
    }
}

// ---------------------------------------------------------------------
// 1. Names that are not names.
// ---------------------------------------------------------------------

/// Listed paths that must never become files, each with why; every one is
/// listed with contents a read would fetch.
fn bad_listed_paths(outside: &Path) -> Vec<(&'static str, Vec<u8>)> {
    let mut absolute = outside.as_os_str().as_bytes().to_vec();
    absolute.extend_from_slice(b"/escaped");
    vec![
        ("dot-dot", b"..".to_vec()),
        ("up and out", b"../outside/escaped".to_vec()),
        ("the sentinel's absolute path", absolute),
        ("a slash", b"a/b".to_vec()),
        ("NUL", b"esc\0aped".to_vec()),
        ("NUL at the end", b"outside\0".to_vec()),
        (
            "not UTF-8, then up and out",
            b"\xff\xfe/../../outside/escaped".to_vec(),
        ),
        ("a name of 256 bytes", vec![b'n'; 256]),
        ("a name of 4096 bytes", vec![b'n'; 4096]),
    ]
}

/// One pull whose listing of `dir` (the root, or `sub` below it) holds
/// `path`: refused, with nothing written anywhere. Whether the message
/// says why (names the listing or the entry).
fn bad_name_refused(what: &str, path: &[u8], in_sub: bool) -> bool {
    let case = Case::new();
    let file = entry(Kind::File);
    let bad = [(path, Entry { size: 8, ..file })];
    let (root, more) = if in_sub {
        let sub = entry_at("sub", Kind::Dir, 0);
        let root = listing_reply(&[root_entry()], std::slice::from_ref(&sub));
        let listing = raw_listing_reply(&[(b"sub" as &[u8], sub), bad[0].clone()], &[]);
        (root, vec![(b"sub" as &[u8], listing)])
    } else {
        (
            raw_listing_reply(&[(b"", root_entry()), bad[0].clone()], &[]),
            vec![],
        )
    };
    let client = case.pull(&[]);
    let s = case.work.accept(0, None);
    let seen = s.serve(source(root, &more, &[(path, b"escaped\n")]));
    let fin = client.finish(what);
    fin.assert_failed_clearly(what);
    assert!(
        !seen.iter().any(|r| matches!(r, Request::OpenRead { .. })),
        "{what}: a file was read for the bad name"
    );
    let left = paths_under(case.dst());
    assert!(
        left.iter().all(|p| in_sub && p == "sub"),
        "{what}: DST holds more than it may: {left:?}"
    );
    case.assert_nothing_outside(what);
    fin.assert_within_budget(what);
    fin.stderr.contains("entry") || fin.stderr.contains("listing")
}

#[test]
fn names_that_are_not_names_are_refused() {
    let outside = Case::new().sb.outside.clone();
    let mut unexplained = Vec::new();
    for (what, path) in bad_listed_paths(&outside) {
        for (what, in_sub) in [(what.to_string(), false), (format!("{what}, in sub"), true)] {
            if !bad_name_refused(&what, &path, in_sub) {
                unexplained.push(what);
            }
        }
    }
    // Every case above ran: only now the messages that do not say why.
    assert!(
        unexplained.is_empty(),
        "refused without saying why (no word of the listing or the entry): {unexplained:?}"
    );
}

/// A name that is only not UTF-8 is a name (Linux allows it): the client
/// writes it in DST under exactly those bytes, and nowhere else.
#[test]
fn a_name_that_is_not_utf8_stays_inside_dst() {
    let case = Case::new();
    let what = "a name that is not UTF-8";
    let name: &[u8] = b"\xff\xfe-not-utf8";
    // As the fake's stat of it says (or the client takes it as changed).
    let file = Entry {
        size: 6,
        ino: ino_of(name),
        ..entry(Kind::File)
    };
    let root = raw_listing_reply(&[(b"", root_entry()), (name, file)], &[]);
    let client = case.pull(&[]);
    let s = case.work.accept(0, None);
    s.serve(source(root, &[], &[(name, b"bytes\n")]));
    let fin = client.finish(what);
    assert_eq!(fin.code, Some(0), "{fin:?}");
    let written = case.dst().join(OsStr::from_bytes(name));
    assert_eq!(std::fs::read(&written).unwrap(), b"bytes\n");
    assert_eq!(paths_under(case.dst()).len(), 1);
    case.assert_nothing_outside(what);
    fin.assert_within_budget(what);
}

// ---------------------------------------------------------------------
// 2. A symlink, then a file beneath it.
// ---------------------------------------------------------------------

/// One run against a fake source; its end.
fn run_source(
    what: &str,
    case: &Case,
    root: Vec<u8>,
    more: &[(&[u8], Vec<u8>)],
    files: &[(&[u8], &[u8])],
) -> Finished {
    let client = case.pull(&[]);
    let s = case.work.accept(0, None);
    s.serve(source(root, more, files));
    client.finish(what)
}

/// A first run makes `link -> OUTSIDE` in DST, as the source lists it; a
/// second run's source says `link` is a directory holding `file`. The
/// file must land in a real directory in DST (the link replaced) or not at
/// all: never in OUTSIDE.
#[test]
fn a_file_beneath_a_symlink_is_never_written_through_it() {
    let case = Case::new();
    let target = case.sb.outside.as_os_str().as_bytes().to_vec();
    let link = symlink_at("link", &target);
    let first = "the first run (the link)";
    let fin = run_source(
        first,
        &case,
        listing_reply(&[root_entry(), link], &[]),
        &[],
        &[],
    );
    assert_eq!(fin.code, Some(0), "the first run: {}", fin.stderr);
    assert_eq!(
        std::fs::read_link(case.dst().join("link")).unwrap(),
        case.sb.outside,
        "the first run did not make the link"
    );
    fin.assert_within_budget("the first run (the link)");

    let dir = entry_at("link", Kind::Dir, 0);
    let root = listing_reply(&[root_entry()], std::slice::from_ref(&dir));
    let inner = listing_reply(&[dir, file_at("link/file", b"through\n")], &[]);
    let second = "the second run (a file beneath the link)";
    let fin = run_source(
        second,
        &case,
        root,
        &[(b"link", inner)],
        &[(b"link/file", b"through\n")],
    );

    assert!(
        !case.sb.outside.join("file").exists(),
        "the file was written through the link"
    );
    case.assert_nothing_outside("the second run (a file beneath the link)");
    let at = case.dst().join("link");
    let md = std::fs::symlink_metadata(&at).unwrap();
    if md.is_dir() {
        assert_eq!(std::fs::read(at.join("file")).unwrap(), b"through\n");
    } else {
        fin.assert_failed_clearly("a file beneath a link left in place");
    }
    fin.assert_within_budget("the second run (a file beneath the link)");
}

/// One listing that holds both `link -> OUTSIDE` and `link/file`: refused
/// (a listing holds only the children of the directory asked for).
#[test]
fn a_listing_with_a_file_beneath_its_own_symlink_is_refused() {
    let case = Case::new();
    let target = case.sb.outside.as_os_str().as_bytes().to_vec();
    let link = symlink_at("link", &target);
    let file = Entry {
        size: 8,
        ..entry(Kind::File)
    };
    let root = raw_listing_reply(
        &[(b"", root_entry()), (b"link", link), (b"link/file", file)],
        &[],
    );
    let what = "link and link/file in one listing";
    let fin = run_source(what, &case, root, &[], &[(b"link/file", b"through\n")]);
    fin.assert_failed_clearly("link and link/file in one listing");
    assert_eq!(paths_under(case.dst()), Vec::<String>::new());
    case.assert_nothing_outside("link and link/file in one listing");
    fin.assert_within_budget("link and link/file in one listing");
}

// ---------------------------------------------------------------------
// 3. Sizes that lie.
// ---------------------------------------------------------------------

/// The listing says `liar` has 10 bytes; reading it gives `delivered`.
/// An honest file beside it is copied; `liar` fails with a message that
/// names it, and no file (or temp) of other contents is left.
fn a_lying_size(what: &str, delivered: Vec<u8>) {
    let case = Case::new();
    let root = listing_reply(
        &[
            root_entry(),
            entry_at("honest", Kind::File, 7),
            entry_at("liar", Kind::File, 10),
        ],
        &[],
    );
    let mut files = source(
        root,
        &[],
        &[(b"honest", b"honest\n"), (b"liar", &delivered)],
    );
    // A stat of it (after the read) keeps to the listing's lie.
    let answer = move |a: &Asked| match &a.request {
        Request::Stat { name, .. } if name == b"liar" => {
            let found = Found {
                kind: Kind::File,
                dev: 1,
                ino: ino_of(b"liar"),
                size: 10,
                mtime: Time { sec: 0, nsec: 0 },
            };
            Answer::Reply(accord_proto::msg::encode_found(Some(&found)))
        }
        _ => files(a),
    };
    let client = case.pull(&[]);
    let s = case.work.accept(0, None);
    let seen = s.serve(answer);
    let fin = client.finish(what);
    assert!(
        seen.iter()
            .any(|r| matches!(r, Request::OpenRead { name, .. } if name == b"liar")),
        "{what}: the client never read the file"
    );
    if let Ok(md) = std::fs::metadata(case.dst().join("liar")) {
        eprintln!("{what}: DST/liar was kept with {} bytes", md.len());
    }
    fin.assert_failed_clearly(what);
    assert!(
        fin.stderr.contains("liar"),
        "{what}: the message does not name the file: {}",
        fin.stderr
    );
    assert_eq!(
        std::fs::read(case.dst().join("honest")).unwrap(),
        b"honest\n",
        "{what}: the honest file"
    );
    assert_eq!(
        paths_under(case.dst()),
        vec!["honest".to_string()],
        "{what}: a wrong file (or a temp) was kept"
    );
    case.assert_nothing_outside(what);
    fin.assert_within_budget(what);
}

#[test]
fn a_file_longer_than_listed_fails() {
    a_lying_size("10 bytes listed, 10 MiB read", vec![b'L'; 10 << 20]);
}

#[test]
fn a_file_shorter_than_listed_fails() {
    a_lying_size("10 bytes listed, 1 byte read", b"S".to_vec());
}

// ---------------------------------------------------------------------
// 4, 5. Replies that never end.
// ---------------------------------------------------------------------

/// The first listing's reply never ends: frames made by `frame`, within
/// the credit the client grants, until the client stops it (or stops
/// reading: the fake then hangs up) or `FLOOD_CAP`. The client must end
/// with an error, within its budget.
fn endless_listing(
    what: &str,
    opts: &[&str],
    features: u64,
    frame: impl FnMut(u32, usize, &mut Vec<u8>),
) {
    let case = Case::new();
    let client = case.pull(opts);
    let s = case.work.accept(features, None);
    let stream = first_listing(&s);
    let started = Instant::now();
    let (sent, why) = s.flood(stream, FLOOD_CAP, frame);
    eprintln!(
        "{what}: the fake sent {} MiB of reply in {:.1?} and stopped: {why:?}",
        sent >> 20,
        started.elapsed()
    );
    s.close();
    let fin = client.finish(what);
    case.assert_nothing_outside(what);
    assert_eq!(paths_under(case.dst()), Vec::<String>::new(), "{what}");
    fin.assert_within_budget(what);
    fin.assert_failed_clearly(what);
}

#[test]
fn a_listing_of_endless_data_frames_is_bounded() {
    let bytes = vec![b'D'; 1 << 20];
    endless_listing(
        "a listing reply of DATA frames without end",
        &[],
        0,
        |stream, n, buf| encode_frame(buf, stream, FrameKind::Data, &bytes[..n]),
    );
}

#[test]
fn a_listing_of_endless_zeros_frames_is_bounded() {
    endless_listing(
        "a listing reply of ZEROS frames without end",
        &[],
        0,
        |stream, n, buf| encode_frame(buf, stream, FrameKind::Zeros, &(n as u32).to_le_bytes()),
    );
}

/// `-z`: the fake's zstd stream inflates into DATA frames of zeros (a few
/// bytes on the wire per MiB) without end.
#[test]
fn a_decompression_bomb_is_bounded() {
    let zeros = vec![0u8; 1 << 20];
    endless_listing(
        "-z: a listing reply that inflates without end",
        &["-z"],
        FEATURE_ZSTD,
        |stream, n, buf| encode_frame(buf, stream, FrameKind::Data, &zeros[..n]),
    );
}

/// `-z`: a zstd stream that asks for a 128 MiB window is refused before
/// the client gives it that memory.
#[test]
fn a_compressed_stream_with_a_huge_window_is_refused() {
    let what = "-z: a zstd window of 128 MiB";
    let case = Case::new();
    let client = case.pull(&["-z"]);
    let s = case.work.accept(FEATURE_ZSTD, Some(27));
    assert_ne!(
        s.hello.features & FEATURE_ZSTD,
        0,
        "-z did not ask for zstd"
    );
    let stream = first_listing(&s);
    // A listing of 64 MiB (so the window is used), within credit.
    let zeros = vec![0u8; 1 << 20];
    let (sent, why) = s.flood(stream, 64 << 20, |stream, n, buf| {
        encode_frame(buf, stream, FrameKind::Data, &zeros[..n])
    });
    eprintln!("{what}: the fake sent {} MiB; stopped: {why:?}", sent >> 20);
    s.close();
    let fin = client.finish(what);
    fin.assert_failed_clearly(what);
    case.assert_nothing_outside(what);
    fin.assert_within_budget(what);
}

// ---------------------------------------------------------------------
// 6. A server that stalls mid-reply.
// ---------------------------------------------------------------------

/// How long the client is watched while the fake stalls.
const STALL: Duration = Duration::from_secs(2);

/// Most the client's resident size may grow while it waits on a stall.
const STALL_GROWTH_KIB: u64 = 16 << 10;

/// The fake sends 3 MiB of an 8 MiB file, then nothing: the client waits
/// without growing; when the fake hangs up, it fails with a message, and
/// DST holds no part of the file under its name. (What arrived may stay
/// under a reserved name, as a partial file the next run resumes from:
/// only bytes the fake sent.)
#[test]
fn a_server_that_stalls_mid_reply_then_hangs_up() {
    let what = "a stall mid-reply";
    let case = Case::new();
    let root = listing_reply(
        &[
            root_entry(),
            entry_at("big", Kind::File, 8 << 20),
            entry_at("small", Kind::File, 6),
        ],
        &[],
    );
    let client = case.pull(&[]);
    let s = case.work.accept(0, None);
    let (half_sent, stalled) = std::sync::mpsc::channel();
    let tx = s.tx();
    let closer = s.tx();
    let mut answer = source(root, &[], &[(b"small", b"small\n")]);
    let server = std::thread::spawn(move || {
        s.serve(move |a| match &a.request {
            Request::OpenRead { name, .. } if name == b"big" => {
                let (tx, done, stream) = (tx.clone(), half_sent.clone(), a.stream);
                std::thread::spawn(move || {
                    let _ = done.send(tx.reply_part(stream, &vec![b'B'; 3 << 20]));
                });
                Answer::Nothing
            }
            _ => answer(a),
        })
    });
    let sent = stalled.recv_timeout(LONG).expect("big was never asked for");
    assert_eq!(sent, Ok(()), "{what}: the client stopped taking the file");
    let before = client.rss_kib();
    let t0 = Instant::now();
    let mut most = before;
    while t0.elapsed() < STALL {
        most = most.max(client.rss_kib());
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "{what}: resident {} MiB when the stall began, at most {} MiB in {STALL:?}",
        before >> 10,
        most >> 10
    );
    assert!(!client.ended(), "{what}: the client ended during the stall");
    assert!(
        most <= before + STALL_GROWTH_KIB,
        "{what}: the client grew from {before} KiB to {most} KiB while it waited"
    );
    closer.close();
    let fin = client.finish(what);
    let _ = server.join();
    fin.assert_failed_clearly(what);
    let left = paths_under(case.dst());
    let unreserved = |p: &&String| !accord_fsys::is_reserved_name(p.as_bytes());
    assert!(
        left.iter().filter(unreserved).all(|p| p == "small"),
        "{what}: DST holds part of the file under a name of its own: {left:?}"
    );
    for p in &left {
        let got = std::fs::read(case.dst().join(p)).unwrap();
        let sent = p == "small" && got == b"small\n" || got.iter().all(|b| *b == b'B');
        assert!(sent, "{what}: {p} holds bytes the fake never sent");
    }
    case.assert_nothing_outside(what);
    fin.assert_within_budget(what);
}
