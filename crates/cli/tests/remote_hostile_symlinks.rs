//! Issue 11, section 3, items 3 and 4: symlinks the peer made.
//!
//! 3. A path through a symlink the peer just created (`d -> /etc`, then
//!    `d/file`): nothing is written outside the root.
//! 4. A basis or reference file outside the root: refused, never opened.
//!
//! The root lives beside an `outside` directory in the same sandbox, so a
//! write or a read that escapes is seen: its tree is compared before and
//! after, its modes too, and an inotify watch on `outside/secret` sees any
//! open of it.

mod hostile_common;

use accord_delta::{DeltaOptions, InPlaceOptions, Signature, SignatureOptions};
use accord_model::{Expect, Kind};
use accord_proto::RootMode;
use accord_remote::ServerConfig;
use hostile_common::*;
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn mode_of(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

/// What `outside` looks like, modes included.
fn outside_state(sb: &Sandbox) -> (Vec<(std::path::PathBuf, Vec<u8>)>, u32, u32) {
    (
        sb.around_root(),
        mode_of(&sb.outside),
        mode_of(&sb.outside.join("secret")),
    )
}

fn bytes(p: &Path) -> Vec<u8> {
    p.as_os_str().as_encoded_bytes().to_vec()
}

/// A delta that turns `old` into `new` (in place when asked).
fn delta(old: &[u8], new: &[u8], in_place: bool) -> Vec<u8> {
    let sig = Signature::generate(old, &SignatureOptions::default()).unwrap();
    let opts = DeltaOptions {
        in_place: in_place.then(InPlaceOptions::default),
    };
    let mut out = Vec::new();
    accord_delta::make_delta(&sig, new, &opts, &mut out).unwrap();
    out
}

/// Make `name -> target` in the root through the server, as a hostile
/// client would: a symlink temp, committed.
fn plant_symlink(c: &mut RawClient, dir: &[u8], name: &[u8], target: &[u8]) {
    let made = c.send(&raw::make_symlink(dir, name, target));
    c.outcome(made).reply();
    let r = c.call(&raw::commit(dir, made, name, &Expect::Absent));
    assert!(matches!(r, Outcome::Reply(_)), "planting {name:?}: {r:?}");
}

// ---------------------------------------------------------------------
// Item 3, a hostile client.
// ---------------------------------------------------------------------

/// Every request a client can send that names a path through `d`.
fn through_d(c: &mut RawClient, sb: &Sandbox) {
    let secret = expect_of(&sb.outside.join("secret"));
    let outside = expect_of(&sb.outside);
    type Case = (&'static str, Vec<u8>, Option<Vec<u8>>);
    let cases: Vec<Case> = vec![
        ("mkdir d/new", raw::mkdir(b"d", b"new"), None),
        (
            "receive d/planted",
            raw::receive(b"d", b"planted", None),
            Some(b"planted\n".to_vec()),
        ),
        (
            "receive d/secret over it",
            raw::receive(b"d", b"secret", None),
            Some(b"overwritten\n".to_vec()),
        ),
        ("symlink d/s", raw::make_symlink(b"d", b"s", b"/"), None),
        (
            "delete d/secret",
            raw::delete(b"d", b"secret", &secret),
            None,
        ),
        (
            "chmod d itself",
            raw::set_own_props(b"d", &outside, 0o777),
            None,
        ),
        (
            "chmod d/secret",
            raw::set_props(b"d", b"secret", &secret, Kind::File, 0o777),
            None,
        ),
        (
            "remove a temp-like name in d",
            raw::remove_stale_temp(b"d", b".accord-tmp-victim"),
            None,
        ),
        (
            "hard link to d/secret",
            raw::link(b"", b"stolen", b"d/secret"),
            None,
        ),
        ("fingerprint d/secret", raw::fingerprint(b"d/secret"), None),
        (
            "read d/secret",
            raw::open_read(b"d", b"secret", &secret),
            None,
        ),
        (
            "signature of d/secret",
            raw::signature(b"d", b"secret", &secret),
            None,
        ),
        ("stat d/secret", raw::stat(b"d", b"secret"), None),
    ];
    for (what, header, body) in cases {
        let out = match body {
            None => c.call(&header),
            Some(b) => c.call_body(&header, &b),
        };
        match out {
            // A stat may say "nothing there"; nothing else may succeed.
            Outcome::Reply(b) if what.starts_with("stat") && b == [0] => {}
            Outcome::Reply(b) => panic!("{what} went through the symlink: {b:?}"),
            Outcome::Failed(w) => {
                if std::env::var_os("HOSTILE_SHOW").is_some() {
                    eprintln!("{what}: errno {} {}", w.errno, w.message);
                }
            }
            Outcome::Closed(why) => panic!("{what}: the session ended ({why})"),
        }
    }
    // A listing through `d` may not show what is outside.
    match c.call(&raw::list(b"d")) {
        Outcome::Reply(b) => assert!(
            !b.windows(6).any(|w| w == b"secret"),
            "the listing of d shows the outside directory"
        ),
        Outcome::Failed(_) => {}
        Outcome::Closed(why) => panic!("list d: the session ended ({why})"),
    }
    // The symlink's own properties, asked for as if it were a file or a
    // directory: the target's mode stays.
    let d = expect_of(&sb.root.join("d"));
    for kind in [Kind::File, Kind::Dir] {
        let _ = c.call(&raw::set_props(b"", b"d", &d, kind, 0o777));
    }
}

#[test]
fn a_path_through_a_symlink_the_client_just_made_writes_nothing_outside() {
    for target in ["ABS", "../outside", "../outside/", "./../outside"] {
        let sb = Sandbox::new();
        std::fs::write(sb.outside.join(".accord-tmp-victim"), b"victim\n").unwrap();
        let before = outside_state(&sb);
        let target = if target == "ABS" {
            bytes(&sb.outside)
        } else {
            target.as_bytes().to_vec()
        };
        let watch = OpenWatch::new(&sb.outside.join("secret"));
        let (mut c, server) = RawClient::start(&sb.root, RootMode::Write);
        plant_symlink(&mut c, b"", b"d", &target);
        assert!(std::fs::symlink_metadata(sb.root.join("d"))
            .unwrap()
            .file_type()
            .is_symlink());
        through_d(&mut c, &sb);
        c.hang_up();
        server.finish().unwrap();
        watch.assert_untouched();
        assert_eq!(outside_state(&sb), before, "target {target:?}");
        assert_eq!(names(&sb.root), ["d"], "target {target:?}");
    }
}

#[test]
fn a_symlink_deeper_in_the_tree_leads_nowhere_either() {
    let sb = Sandbox::new();
    std::fs::write(sb.outside.join(".accord-tmp-victim"), b"victim\n").unwrap();
    let before = outside_state(&sb);
    let watch = OpenWatch::new(&sb.outside.join("secret"));
    let (mut c, server) = RawClient::start(&sb.root, RootMode::Write);
    assert!(matches!(c.call(&raw::mkdir(b"", b"a")), Outcome::Reply(_)));
    plant_symlink(&mut c, b"a", b"b", b"../../outside");
    for (what, out) in [
        (
            "receive a/b/planted",
            c.call_body(&raw::receive(b"a/b", b"planted", None), b"x"),
        ),
        ("mkdir a/b/new", c.call(&raw::mkdir(b"a/b", b"new"))),
        (
            "link to a/b/secret",
            c.call(&raw::link(b"a", b"l", b"a/b/secret")),
        ),
    ] {
        assert!(out.is_refusal(), "{what}: {out:?}");
    }
    c.hang_up();
    server.finish().unwrap();
    watch.assert_untouched();
    assert_eq!(outside_state(&sb), before);
}

/// An honest client mirrors into a root where a hostile session left
/// `d -> outside`: the source's directory `d` replaces the symlink, and its
/// files land in the root.
#[test]
fn a_planted_symlink_is_replaced_not_followed_by_the_next_mirror() {
    let sb = Sandbox::new();
    let before = outside_state(&sb);
    let watch = OpenWatch::new(&sb.outside.join("secret"));
    let (mut c, server) = RawClient::start(&sb.root, RootMode::Write);
    plant_symlink(&mut c, b"", b"d", &bytes(&sb.outside));
    c.hang_up();
    server.finish().unwrap();

    let src = sb.tmp.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("d/secret"), b"from the source\n").unwrap();
    std::fs::write(src.join("d/new"), b"new\n").unwrap();
    let (dst, server) = real_pair(&sb.root, RootMode::Write, ServerConfig::default());
    let report = mirror_from_local(&src, &dst);
    drop(dst);
    server.finish().unwrap();
    assert!(report.fatal.is_none(), "{:?}", report.fatal);
    watch.assert_untouched();
    // `src` is beside the root too: leave it out of the comparison.
    let mut after = outside_state(&sb);
    after.0.retain(|(p, _)| !p.starts_with("src"));
    assert_eq!(after, before);
    assert!(sb.root.join("d").is_dir() && !sb.root.join("d").is_symlink());
    assert_eq!(
        std::fs::read(sb.root.join("d/secret")).unwrap(),
        b"from the source\n"
    );
}

// ---------------------------------------------------------------------
// Item 3, a hostile server.
// ---------------------------------------------------------------------

/// A fake source whose root holds only `listing`, and `files`.
fn pull_from(
    dst: &Path,
    root: Vec<u8>,
    more: Vec<(&str, Vec<u8>)>,
    files: &[(&str, &[u8])],
) -> accord_engine::Report {
    let mut listings = HashMap::new();
    listings.insert(Vec::new(), root);
    for (dir, reply) in more {
        listings.insert(dir.as_bytes().to_vec(), reply);
    }
    let files = files
        .iter()
        .map(|(p, b)| (p.as_bytes().to_vec(), b.to_vec()))
        .collect();
    let (src, fake) = hostile_server(RootMode::Read, fake_source(listings, files));
    let report = mirror_into_local(&src, dst);
    drop(src);
    fake.join().unwrap();
    report
}

#[test]
fn a_symlink_sent_by_the_server_then_a_directory_through_it_writes_nothing_outside() {
    let sb = Sandbox::new();
    let before = outside_state(&sb);
    let watch = OpenWatch::new(&sb.outside.join("secret"));
    let dst = sb.root.join("dst");
    // Run 1: `d -> outside`.
    let r1 = pull_from(
        &dst,
        listing_reply(&[root_entry(), symlink_at("d", &bytes(&sb.outside))], &[]),
        vec![],
        &[],
    );
    assert!(r1.fatal.is_none() && r1.errors.is_empty(), "{r1:?}");
    assert!(dst.join("d").is_symlink(), "run 1 did not make the symlink");
    // Run 2: `d` is a directory holding `secret` and `planted`.
    let d = entry_at("d", Kind::Dir, 0);
    let secret = b"written through the link\n";
    let r2 = pull_from(
        &dst,
        listing_reply(&[root_entry()], std::slice::from_ref(&d)),
        vec![(
            "d",
            listing_reply(
                &[
                    d.clone(),
                    file_at("d/planted", b"p\n"),
                    file_at("d/secret", secret),
                ],
                &[],
            ),
        )],
        &[("d/secret", secret), ("d/planted", b"p\n")],
    );
    assert!(r2.fatal.is_none(), "{:?}", r2.fatal);
    watch.assert_untouched();
    assert_eq!(outside_state(&sb), before);
    assert!(dst.join("d").is_dir() && !dst.join("d").is_symlink());
    assert_eq!(std::fs::read(dst.join("d/secret")).unwrap(), secret);
}

// ---------------------------------------------------------------------
// Item 4, a hostile client: a basis or reference outside the root.
// ---------------------------------------------------------------------

#[test]
fn a_basis_or_leader_outside_the_root_is_refused_and_never_opened() {
    let sb = Sandbox::new();
    let secret_path = sb.outside.join("secret");
    let old = std::fs::read(&secret_path).unwrap();
    std::os::unix::fs::symlink(&secret_path, sb.root.join("link")).unwrap();
    std::os::unix::fs::symlink(&sb.outside, sb.root.join("dlink")).unwrap();
    let before = outside_state(&sb);
    // The outside file as it is: an expectation a client could forge.
    let forged = expect_of(&secret_path);
    let link = expect_of(&sb.root.join("link"));
    let seq = delta(&old, b"outside contents, and more\n", false);
    let inp = delta(&old, b"outside contents, and more\n", true);
    let sig = Signature::generate(b"anything", &SignatureOptions::default())
        .unwrap()
        .encode();
    let watch = OpenWatch::new(&secret_path);
    let (mut c, server) = RawClient::start(&sb.root, RootMode::Write);
    let refused = |what: &str, out: Outcome| {
        if let (Outcome::Failed(w), Some(_)) = (&out, std::env::var_os("HOSTILE_SHOW")) {
            eprintln!("{what}: errno {} {}", w.errno, w.message);
        }
        assert!(out.is_refusal(), "{what}: {out:?}");
        assert!(!matches!(out, Outcome::Closed(_)), "{what}: {out:?}");
    };
    for (name, dir) in [(&b"link"[..], &b""[..]), (b"secret", b"dlink")] {
        for basis in [forged, link, Expect::Made(Kind::File)] {
            let out = c.call_body(&raw::receive(dir, name, Some(&basis)), &seq);
            refused("receive with a basis through a symlink", out);
            let out = c.call_body(&raw::patch_in_place(dir, name, &basis), &inp);
            refused("patch in place through a symlink", out);
            let out = c.call(&raw::signature(dir, name, &basis));
            refused("signature through a symlink", out);
            let out = c.call(&raw::open_read(dir, name, &basis));
            refused("read through a symlink", out);
            let out = c.call_body(&raw::make_delta(dir, name, &basis), &sig);
            refused("delta from a file through a symlink", out);
        }
    }
    for leader in [&b"link"[..], b"dlink/secret"] {
        refused(
            "hard link to a leader through a symlink",
            c.call(&raw::link(b"", b"stolen", leader)),
        );
    }
    // A fingerprint of a symlink is of the link, never of its target.
    let _ = c.call(&raw::fingerprint(b"link"));
    refused(
        "fingerprint through a symlink",
        c.call(&raw::fingerprint(b"dlink/secret")),
    );
    c.hang_up();
    server.finish().unwrap();
    watch.assert_untouched();
    assert_eq!(outside_state(&sb), before);
    assert_eq!(names(&sb.root), ["dlink", "link"]);
}

// ---------------------------------------------------------------------
// Item 4, a hostile server: a basis in the client's destination that is a
// symlink to outside.
// ---------------------------------------------------------------------

#[test]
fn a_destination_symlink_is_never_taken_as_a_basis() {
    let sb = Sandbox::new();
    let secret_path = sb.outside.join("secret");
    let old = std::fs::read(&secret_path).unwrap();
    let dst = sb.root.join("dst");
    std::fs::create_dir(&dst).unwrap();
    std::os::unix::fs::symlink(&secret_path, dst.join("f")).unwrap();
    std::os::unix::fs::symlink(&sb.outside, dst.join("d")).unwrap();
    let before = outside_state(&sb);
    let watch = OpenWatch::new(&secret_path);
    // The source holds `f` and `d/secret`, of the outside file's size, so
    // a delta against what the destination "has" would be tempting.
    let mut new = old.clone();
    new[0] ^= 1;
    let d = entry_at("d", Kind::Dir, 0);
    let report = pull_from(
        &dst,
        listing_reply(
            &[root_entry(), file_at("f", &new)],
            std::slice::from_ref(&d),
        ),
        vec![(
            "d",
            listing_reply(&[d.clone(), file_at("d/secret", &new)], &[]),
        )],
        &[("f", &new), ("d/secret", &new)],
    );
    assert!(report.fatal.is_none(), "{:?}", report.fatal);
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    watch.assert_untouched();
    assert_eq!(outside_state(&sb), before);
    assert_eq!(std::fs::read(dst.join("f")).unwrap(), new);
    assert!(!dst.join("f").is_symlink());
    assert_eq!(std::fs::read(dst.join("d/secret")).unwrap(), new);
    assert!(!dst.join("d").is_symlink());
}

/// The instrument itself: the watch sees an open of the file.
#[test]
fn the_open_watch_sees_a_read() {
    let sb = Sandbox::new();
    let watch = OpenWatch::new(&sb.outside.join("secret"));
    let _ = std::fs::read(sb.outside.join("secret")).unwrap();
    assert!(!watch.events().is_empty());
}
