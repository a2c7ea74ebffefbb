//! Issue 11, section 3, items 1 and 2: paths from the other side.
//!
//! 1. Paths with `..`, absolute, empty or NUL components, over-long names:
//!    rejected, by the real server (from a hostile client) and by the real
//!    client (from a hostile server).
//! 2. A name that was not asked for, or that the receiver's own filters
//!    exclude: rejected.

mod hostile_common;

use accord_engine::{Incoming, Replica};
use accord_model::{Expect, Kind, RelPath};
use accord_proto::frame::FrameKind;
use accord_proto::{Hello, Request, RootMode, Welcome};
use accord_remote::ServerConfig;
use hostile_common::*;
use std::collections::HashMap;

/// Paths no `RelPath` may be, each with why.
fn bad_paths() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("dot-dot", b"..".to_vec()),
        ("dot-dot inside", b"a/../../outside".to_vec()),
        ("dot-dot last", b"a/..".to_vec()),
        ("absolute", b"/etc".to_vec()),
        ("absolute root", b"/".to_vec()),
        ("empty component", b"a//b".to_vec()),
        ("trailing slash", b"a/".to_vec()),
        ("dot", b"./a".to_vec()),
        ("NUL", b"a\0b".to_vec()),
        ("NUL alone", b"\0".to_vec()),
        ("name of 256 bytes", vec![b'n'; 256]),
        ("path of 4097 bytes", {
            let mut p = Vec::new();
            while p.len() < 4097 {
                p.extend_from_slice(b"abcdefg/");
            }
            p.truncate(4097);
            p
        }),
    ]
}

/// Names (single components) that are not names.
fn bad_names() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("empty", Vec::new()),
        ("dot", b".".to_vec()),
        ("dot-dot", b"..".to_vec()),
        ("a slash", b"a/b".to_vec()),
        ("up and out", b"../outside/secret".to_vec()),
        ("absolute", b"/etc/passwd".to_vec()),
        ("NUL", b"secret\0".to_vec()),
        ("256 bytes", vec![b'n'; 256]),
    ]
}

/// One hostile request on a fresh writable session: the session must end
/// with an error that says the request did not decode, and nothing may be
/// made in the root or beside it.
fn refused(what: &str, header: &[u8], body: Option<&[u8]>) {
    let sb = Sandbox::new();
    let before = sb.around_root();
    let (mut c, server) = RawClient::start(&sb.root, RootMode::Write);
    match body {
        None => {
            c.send(header);
        }
        Some(b) => {
            c.send_body(header, b);
        }
    }
    let why = server.ended_with_error();
    assert!(
        why.contains("does not decode"),
        "{what}: the session ended for another reason: {why}"
    );
    assert_eq!(
        sb.around_root(),
        before,
        "{what}: something changed outside the root"
    );
    assert_eq!(
        names(&sb.root),
        Vec::<String>::new(),
        "{what}: the root changed"
    );
    c.hang_up();
}

#[test]
fn bad_directories_from_a_client_end_the_session() {
    for (what, p) in bad_paths() {
        refused(&format!("mkdir in {what}"), &raw::mkdir(&p, b"x"), None);
        refused(&format!("stat in {what}"), &raw::stat(&p, b"x"), None);
        refused(&format!("list {what}"), &raw::list(&p), None);
        refused(
            &format!("receive in {what}"),
            &raw::receive(&p, b"x", None),
            Some(b"contents"),
        );
    }
}

#[test]
fn bad_names_from_a_client_end_the_session() {
    for (what, n) in bad_names() {
        refused(&format!("mkdir {what}"), &raw::mkdir(b"", &n), None);
        refused(
            &format!("receive {what}"),
            &raw::receive(b"", &n, None),
            Some(b"contents"),
        );
        refused(
            &format!("symlink {what}"),
            &raw::make_symlink(b"", &n, b"target"),
            None,
        );
        refused(
            &format!("read {what}"),
            &raw::open_read(b"", &n, &accord_model::Expect::Made(Kind::File)),
            None,
        );
        refused(
            &format!("delete {what}"),
            &raw::delete(b"", &n, &accord_model::Expect::Made(Kind::File)),
            None,
        );
        refused(
            &format!("commit onto {what}"),
            &raw::commit(b"", 1, &n, &accord_model::Expect::Absent),
            None,
        );
    }
}

#[test]
fn a_bad_hard_link_leader_from_a_client_ends_the_session() {
    for (what, p) in bad_paths() {
        refused(&format!("leader {what}"), &raw::link(b"", b"x", &p), None);
    }
}

#[test]
fn a_bad_rename_source_from_a_client_ends_the_session() {
    let file = accord_model::Expect::Made(Kind::File);
    for (what, p) in bad_paths() {
        refused(
            &format!("rename from {what}"),
            &raw::rename(b"", b"x", &p, &file),
            None,
        );
    }
    refused(
        "rename of the root",
        &raw::rename(b"", b"x", b"", &file),
        None,
    );
    for (what, n) in bad_names() {
        refused(
            &format!("rename to {what}"),
            &raw::rename(b"", &n, b"f", &file),
            None,
        );
    }
}

/// A rename never goes through a symlink: not to reach its source, not to
/// reach its target's directory. Nothing outside the root moves.
#[test]
fn a_rename_through_a_symlink_fails_and_moves_nothing() {
    let sb = Sandbox::new();
    std::fs::write(sb.outside.join("secret"), "outside").unwrap();
    std::fs::write(sb.root.join("f"), "inside").unwrap();
    std::os::unix::fs::symlink(&sb.outside, sb.root.join("out")).unwrap();
    let before = sb.around_root();
    let (mut c, server) = RawClient::start(&sb.root, RootMode::Write);
    let file = accord_model::Expect::Made(Kind::File);
    for (what, header) in [
        (
            "a source beyond a symlink",
            raw::rename(b"", b"stolen", b"out/secret", &file),
        ),
        (
            "a target beyond a symlink",
            raw::rename(b"out", b"planted", b"f", &file),
        ),
    ] {
        match c.call(&header) {
            Outcome::Failed(_) => {}
            other => panic!("{what}: {other:?}"),
        }
    }
    // And an honest one works, refusing to replace what is there.
    assert!(matches!(
        c.call(&raw::rename(b"", b"g", b"f", &file)),
        Outcome::Reply(_)
    ));
    std::fs::write(sb.root.join("h"), "already here").unwrap();
    assert!(matches!(
        c.call(&raw::rename(b"", b"h", b"g", &file)),
        Outcome::Failed(_)
    ));
    c.hang_up();
    server.finish().unwrap();
    assert_eq!(
        sb.around_root(),
        before,
        "something outside the root changed"
    );
    assert_eq!(names(&sb.root), ["g", "h", "out"]);
    assert_eq!(
        std::fs::read_to_string(sb.root.join("h")).unwrap(),
        "already here"
    );
}

/// Send a handshake asking for `root`; the server's answer (`None`: it
/// hung up without one).
fn ask_root(root: &[u8], mode: RootMode, cfg: ServerConfig) -> Option<Welcome> {
    let (sock, server) = spawn_server(cfg);
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let mut w = sock.try_clone().unwrap();
    Hello {
        version: accord_proto::hello::VERSION,
        features: 0,
        mode,
        root: root.to_vec(),
    }
    .write(&mut w)
    .unwrap();
    let mut r = sock.try_clone().unwrap();
    let answer = Welcome::read(&mut r).ok();
    let _ = sock.shutdown(std::net::Shutdown::Both);
    let _ = server.finish();
    answer
}

#[test]
fn a_restricted_server_refuses_roots_that_leave_its_tree() {
    let sb = Sandbox::new();
    std::fs::create_dir(sb.root.join("inside")).unwrap();
    std::os::unix::fs::symlink(&sb.outside, sb.root.join("link-out")).unwrap();
    std::os::unix::fs::symlink("../outside", sb.root.join("rel-out")).unwrap();
    let before = sb.around_root();
    let cfg = ServerConfig {
        restrict: Some(sb.root.clone()),
        ..ServerConfig::default()
    };
    for root in [
        &b"../outside"[..],
        b"inside/../../outside",
        b"/../outside",
        b"..",
        b"link-out",
        b"rel-out",
        b"link-out/new",
        b"inside/../link-out",
    ] {
        for mode in [
            RootMode::Read,
            RootMode::Write,
            RootMode::Inspect,
            RootMode::WriteExisting,
        ] {
            let shown = String::from_utf8_lossy(root);
            match ask_root(root, mode, cfg.clone()) {
                Some(Welcome::Accepted { describe, .. }) => {
                    panic!("{shown} ({mode:?}) was accepted as {describe}")
                }
                Some(Welcome::Refused { .. }) | None => {}
            }
        }
    }
    // An absolute root is taken inside the restriction, not as this host's.
    match ask_root(b"/inside", RootMode::Read, cfg.clone()) {
        Some(Welcome::Accepted { identity, .. }) => {
            use std::os::unix::fs::MetadataExt;
            let md = std::fs::metadata(sb.root.join("inside")).unwrap();
            assert_eq!(identity, (md.dev(), md.ino()));
        }
        other => panic!("/inside under the restriction: {other:?}"),
    }
    let etc = ask_root(b"/etc", RootMode::Read, cfg);
    assert!(
        matches!(etc, Some(Welcome::Refused { .. })),
        "/etc under a restriction must be looked for inside it: {etc:?}"
    );
    assert_eq!(sb.around_root(), before);
    assert_eq!(names(&sb.root), ["inside", "link-out", "rel-out"]);
}

#[test]
fn a_nul_in_the_root_ends_the_handshake() {
    let sb = Sandbox::new();
    let mut root = sb.root.as_os_str().as_encoded_bytes().to_vec();
    root.extend_from_slice(b"\0/../outside");
    let answer = ask_root(&root, RootMode::Write, ServerConfig::default());
    assert!(
        !matches!(answer, Some(Welcome::Accepted { .. })),
        "a root with a NUL was accepted"
    );
}

// ---------------------------------------------------------------------
// A hostile server, a real client.
// ---------------------------------------------------------------------

/// Pull from a fake source whose root listing is `reply` into a fresh
/// destination: nothing may be written anywhere, and no file may have been
/// read for it.
fn pull_refused(what: &str, reply: Vec<u8>) {
    let sb = Sandbox::new();
    let before = sb.around_root();
    let mut listings = HashMap::new();
    listings.insert(Vec::new(), reply);
    let mut files = HashMap::new();
    files.insert(b"x".to_vec(), b"escaped\n".to_vec());
    let (src, fake) = hostile_server(RootMode::Read, fake_source(listings, files));
    let dst = sb.root.join("dst");
    let report = mirror_into_local(&src, &dst);
    let why = src.closed();
    drop(src);
    let seen = fake.join().unwrap();
    assert!(
        why.as_deref().is_some_and(|w| w.contains("listing")),
        "{what}: the client did not end the session over the listing ({why:?})"
    );
    assert!(
        report.fatal.is_some() || !report.errors.is_empty(),
        "{what}: the run reported nothing wrong"
    );
    assert!(
        !seen.iter().any(|r| matches!(r, Request::OpenRead { .. })),
        "{what}: a file was read for the listing"
    );
    assert_eq!(
        tree(&dst),
        Vec::<String>::new(),
        "{what}: the destination changed"
    );
    assert_eq!(
        sb.around_root(),
        before,
        "{what}: something changed outside the root"
    );
}

#[test]
fn bad_paths_in_a_listing_are_rejected() {
    let f = file_at("x", b"escaped\n");
    for (what, p) in bad_paths() {
        pull_refused(
            what,
            raw_listing_reply(&[(b"", root_entry()), (&p, f.clone())], &[]),
        );
        let d = entry_at("d", Kind::Dir, 0);
        pull_refused(what, raw_listing_reply(&[(b"", root_entry())], &[(&p, d)]));
    }
}

#[test]
fn names_not_asked_for_in_a_listing_are_rejected() {
    let f = |p: &str| file_at(p, b"escaped\n");
    let d = |p: &str| entry_at(p, Kind::Dir, 0);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "a grandchild",
            raw_listing_reply(&[(b"", root_entry()), (b"a/x", f("x"))], &[]),
        ),
        (
            "the directory itself missing",
            raw_listing_reply(&[(b"x", f("x"))], &[]),
        ),
        (
            "the directory as a file",
            raw_listing_reply(&[(b"", entry(Kind::File))], &[]),
        ),
        (
            "a name twice",
            raw_listing_reply(&[(b"", root_entry()), (b"x", f("x")), (b"x", f("x"))], &[]),
        ),
        (
            "names out of order",
            raw_listing_reply(&[(b"", root_entry()), (b"y", f("y")), (b"x", f("x"))], &[]),
        ),
        (
            "a directory among the files",
            raw_listing_reply(&[(b"", root_entry()), (b"x", d("x"))], &[]),
        ),
        (
            "a file among the directories",
            raw_listing_reply(&[(b"", root_entry())], &[(b"x", f("x"))]),
        ),
    ];
    for (what, reply) in cases {
        pull_refused(what, reply);
    }
}

/// Issue 11: a name listed both as a file and as a subdirectory (each list
/// in order on its own) is refused, so the walk never descends into a
/// directory that is also planned as a file or a symlink.
#[test]
fn a_name_listed_both_as_a_file_and_a_directory_is_rejected() {
    let d = |p: &str| entry_at(p, Kind::Dir, 0);
    let f = |p: &str| file_at(p, b"escaped\n");
    pull_refused(
        "a name both a file and a directory",
        raw_listing_reply(&[(b"", root_entry()), (b"x", f("x"))], &[(b"x", d("x"))]),
    );
    pull_refused(
        "a name both a symlink and a directory",
        raw_listing_reply(
            &[
                (b"", root_entry()),
                (b"a", f("a")),
                (b"x", symlink_at("x", b"/etc")),
            ],
            &[(b"b", d("b")), (b"x", d("x"))],
        ),
    );
}

#[test]
fn a_listing_of_a_subdirectory_holding_another_directorys_names_is_rejected() {
    // The root is honest; the listing of `a` holds `b/x`.
    let sb = Sandbox::new();
    let mut listings = HashMap::new();
    listings.insert(
        Vec::new(),
        listing_reply(&[root_entry()], &[entry_at("a", Kind::Dir, 0)]),
    );
    listings.insert(
        b"a".to_vec(),
        raw_listing_reply(
            &[
                (b"a", entry_at("a", Kind::Dir, 0)),
                (b"b/x", file_at("x", b"sneaked\n")),
            ],
            &[],
        ),
    );
    let (src, fake) = hostile_server(RootMode::Read, fake_source(listings, HashMap::new()));
    let dst = sb.root.join("dst");
    let report = mirror_into_local(&src, &dst);
    assert!(src.closed().is_some_and(|w| w.contains("listing")));
    drop(src);
    fake.join().unwrap();
    assert!(report.fatal.is_some() || !report.errors.is_empty());
    assert!(!dst.join("b").exists());
    assert!(!dst.join("a/x").exists());
}

/// Issue 11: a hostile source may not slip in a name that the receiver's
/// own filters (`--exclude`) exclude.
#[test]
fn a_name_the_receivers_excludes_match_is_rejected() {
    let sb = Sandbox::new();
    let mut listings = HashMap::new();
    listings.insert(
        Vec::new(),
        listing_reply(
            &[
                root_entry(),
                file_at("keys.secret", b"planted\n"),
                file_at("wanted", b"wanted\n"),
            ],
            &[entry_at("cache", Kind::Dir, 0)],
        ),
    );
    listings.insert(
        b"cache".to_vec(),
        listing_reply(
            &[
                entry_at("cache", Kind::Dir, 0),
                file_at("cache/blob", b"blob\n"),
            ],
            &[],
        ),
    );
    let mut files = HashMap::new();
    files.insert(b"keys.secret".to_vec(), b"planted\n".to_vec());
    files.insert(b"wanted".to_vec(), b"wanted\n".to_vec());
    files.insert(b"cache/blob".to_vec(), b"blob\n".to_vec());
    let (src, fake) = hostile_server(RootMode::Read, fake_source(listings, files));
    let dst = sb.root.join("dst");
    let local = accord_engine::LocalReplica::create(&dst).unwrap();
    let cfg = accord_engine::MirrorConfig {
        excludes: vec!["*.secret".into(), "cache/".into()],
        ..test_config()
    };
    let report = accord_engine::mirror_replicas(
        &src,
        Some(&local),
        "destination",
        &cfg,
        &accord_engine::Progress::default(),
    );
    drop(src);
    let seen = fake.join().unwrap();
    assert!(
        !dst.join("keys.secret").exists(),
        "an excluded name was written"
    );
    assert!(
        !dst.join("cache").exists(),
        "an excluded directory was made"
    );
    assert!(
        !seen.iter().any(|r| matches!(r,
            Request::OpenRead { name, .. } if name == b"keys.secret" || name == b"blob")),
        "an excluded file was asked for"
    );
    assert!(
        !seen
            .iter()
            .any(|r| matches!(r, Request::ListDir { dir, .. } if dir.as_bytes() == b"cache")),
        "an excluded directory was listed"
    );
    assert!(
        report.fatal.is_some() || !report.errors.is_empty(),
        "the run did not report the hostile listing"
    );
}

/// Issue 11: the same through an `.accordignore` the listing reply itself
/// carries: the names it excludes may not be in the same listing.
#[test]
fn a_name_the_listings_own_ignore_file_excludes_is_rejected() {
    let sb = Sandbox::new();
    let mut listings = HashMap::new();
    listings.insert(
        Vec::new(),
        listing_reply_with_ignore(
            &[
                root_entry(),
                file_at(".accordignore", b"*.o\n"),
                file_at("main.o", b"object\n"),
            ],
            &[],
            b"*.o\n",
        ),
    );
    let mut files = HashMap::new();
    files.insert(b".accordignore".to_vec(), b"*.o\n".to_vec());
    files.insert(b"main.o".to_vec(), b"object\n".to_vec());
    let (src, fake) = hostile_server(RootMode::Read, fake_source(listings, files));
    let dst = sb.root.join("dst");
    let report = mirror_into_local(&src, &dst);
    drop(src);
    fake.join().unwrap();
    assert!(!dst.join("main.o").exists(), "an excluded name was written");
    assert!(report.fatal.is_some() || !report.errors.is_empty());
}

/// An honest listing of the same shape goes through: the checks above
/// refuse what is hostile, not what is merely unusual.
#[test]
fn an_honest_fake_listing_is_mirrored() {
    let sb = Sandbox::new();
    let mut listings = HashMap::new();
    listings.insert(
        Vec::new(),
        listing_reply(
            &[root_entry(), file_at("wanted", b"wanted\n")],
            &[entry_at("sub", Kind::Dir, 0)],
        ),
    );
    listings.insert(
        b"sub".to_vec(),
        listing_reply(
            &[
                entry_at("sub", Kind::Dir, 0),
                file_at("sub/deep", b"deep\n"),
            ],
            &[],
        ),
    );
    let mut files = HashMap::new();
    files.insert(b"wanted".to_vec(), b"wanted\n".to_vec());
    files.insert(b"sub/deep".to_vec(), b"deep\n".to_vec());
    let (src, fake) = hostile_server(RootMode::Read, fake_source(listings, files));
    let dst = sb.root.join("dst");
    let report = mirror_into_local(&src, &dst);
    drop(src);
    fake.join().unwrap();
    assert!(report.fatal.is_none(), "{:?}", report.fatal);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(std::fs::read(dst.join("wanted")).unwrap(), b"wanted\n");
    assert_eq!(std::fs::read(dst.join("sub/deep")).unwrap(), b"deep\n");
}

/// The client names a temp by the number of the request that made it,
/// and commits nothing else: a server that answers a receive with a name
/// (`../x`, an existing file) is not believed.
#[test]
fn a_receive_reply_that_names_a_temp_is_rejected() {
    for bad in [
        &b"../../outside/secret"[..],
        b"victim",
        b".accord-tmp-x/../../y",
        b"/etc/passwd",
    ] {
        let reply = bad.to_vec();
        let (replica, fake) = hostile_server(RootMode::Write, move |a| match a.request {
            Request::Receive { .. } => Answer::Reply(reply.clone()),
            Request::Lock => Answer::Reply(vec![1]),
            _ => Answer::Reply(Vec::new()),
        });
        let dir = replica.open_dir(&RelPath::root()).unwrap();
        let mut body = &b"contents"[..];
        let r = dir.receive(b"f", Incoming::Whole(&mut body), &file_props(), no_props());
        assert!(
            r.is_err(),
            "temp name {:?} was taken",
            String::from_utf8_lossy(bad)
        );
        drop(dir);
        drop(replica);
        fake.join().unwrap();
    }
}

// ---------------------------------------------------------------------
// A hostile client: names that were not handed out.
// ---------------------------------------------------------------------

#[test]
fn a_commit_or_discard_of_a_temp_not_made_is_refused() {
    let sb = Sandbox::new();
    std::fs::write(sb.root.join("precious"), b"precious\n").unwrap();
    std::fs::write(sb.root.join("other"), b"other\n").unwrap();
    // A temp of another session (an honest client's, still in flight).
    let (mut honest, honest_server) = RawClient::start(&sb.root, RootMode::Write);
    let theirs = honest.send_body(&raw::receive(b"", b"new", None), b"honest\n");
    honest.outcome(theirs).reply();
    let their_temp = temps_in(&sb.root);
    assert_eq!(their_temp.len(), 1);

    let (mut c, server) = RawClient::start(&sb.root, RootMode::Write);
    let precious = expect_of(&sb.root.join("precious"));
    let other = expect_of(&sb.root.join("other"));
    // A request of ours that made no temp, and a number we never used
    // (the other session's temp has it on its own connection).
    let a_stat = c.send(&raw::stat(b"", b"other"));
    c.outcome(a_stat).reply();
    for made_by in [a_stat, theirs, 1_000_000] {
        assert!(c
            .call(&raw::commit(b"", made_by, b"precious", &precious))
            .is_refusal());
        assert!(c.call(&raw::discard(b"", made_by)).is_refusal());
    }
    // A receive that failed made no temp: its commit is refused.
    let failed = c.send_body(&raw::receive(b"nowhere", b"x", None), b"x\n");
    let _ = c.outcome(failed);
    assert!(c
        .call(&raw::commit(b"nowhere", failed, b"x", &Expect::Absent))
        .is_refusal());
    // A stale-temp removal of a name that is not reserved for temps.
    let mut e = accord_proto::Enc::new();
    e.u8(22).bytes(b"").bytes(b"other");
    assert!(c.call(&e.finish()).is_refusal());
    // Our own temp, committed under the wrong directory, then twice.
    std::fs::create_dir(sb.root.join("sub")).unwrap();
    let ours = c.send_body(&raw::receive(b"", b"mine", None), b"mine\n");
    c.outcome(ours).reply();
    assert!(c
        .call(&raw::commit(b"sub", ours, b"mine", &Expect::Absent))
        .is_refusal());
    assert!(matches!(
        c.call(&raw::commit(b"", ours, b"mine", &Expect::Absent)),
        Outcome::Reply(_)
    ));
    assert!(c
        .call(&raw::commit(b"", ours, b"precious", &precious))
        .is_refusal());
    assert_eq!(
        std::fs::read(sb.root.join("precious")).unwrap(),
        b"precious\n"
    );
    assert_eq!(std::fs::read(sb.root.join("other")).unwrap(), b"other\n");
    assert_eq!(expect_of(&sb.root.join("other")), other);
    assert_eq!(std::fs::read(sb.root.join("mine")).unwrap(), b"mine\n");
    assert_eq!(temps_in(&sb.root), their_temp);
    c.hang_up();
    server.finish().unwrap();
    // The honest session's temp is still its own to commit.
    assert!(matches!(
        honest.call(&raw::commit(b"", theirs, b"new", &Expect::Absent)),
        Outcome::Reply(_)
    ));
    assert_eq!(std::fs::read(sb.root.join("new")).unwrap(), b"honest\n");
    honest.hang_up();
    honest_server.finish().unwrap();
}

#[test]
fn a_body_for_a_request_that_takes_none_ends_the_session() {
    let sb = Sandbox::new();
    let (mut c, server) = RawClient::start(&sb.root, RootMode::Write);
    // DATA on a stream never opened.
    c.frame(7, FrameKind::Data, b"stray");
    let why = server.ended_with_error();
    assert!(why.contains("expects none"), "{why}");
    c.hang_up();
}

/// The check of excluded names does not refuse an honest server: a real
/// source with `--exclude` patterns and `.accordignore` files (a negated
/// pattern included) mirrors without an error.
#[test]
fn an_honest_source_with_excludes_and_ignore_files_is_not_refused() {
    let sb = Sandbox::new();
    let src = sb.root.join("src");
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(src.join("cache")).unwrap();
    std::fs::write(src.join(".accordignore"), b"*.o\n!keep.o\n").unwrap();
    std::fs::write(src.join("sub/.accordignore"), b"/only-here\n*.tmp\n").unwrap();
    for f in [
        "a.o",
        "keep.o",
        "x.secret",
        "plain",
        "cache/blob",
        "sub/only-here",
        "sub/b.tmp",
        "sub/c.o",
        "sub/deeper/only-here",
        "sub/deeper/d.tmp",
    ] {
        std::fs::write(src.join(f), f.as_bytes()).unwrap();
    }
    let (remote, server) = real_pair(&src, RootMode::Read, ServerConfig::default());
    let dst = sb.root.join("dst");
    let local = accord_engine::LocalReplica::create(&dst).unwrap();
    let cfg = accord_engine::MirrorConfig {
        excludes: vec!["*.secret".into(), "cache/".into()],
        ..test_config()
    };
    let report = accord_engine::mirror_replicas(
        &remote,
        Some(&local),
        "destination",
        &cfg,
        &accord_engine::Progress::default(),
    );
    drop(remote);
    server.finish().unwrap();
    assert!(report.fatal.is_none(), "{:?}", report.fatal);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(
        tree(&dst),
        [
            ".accordignore",
            "keep.o",
            "plain",
            "sub",
            "sub/.accordignore",
            "sub/deeper",
            "sub/deeper/only-here",
        ]
    );
}
