//! Deltas with compressed literals (delta format 2) cross the wire only
//! when the server agreed to `FEATURE_PACKED_DELTA` and the connection is
//! compressed (`-z`); an older server, which does not know the feature,
//! gets and is asked for format 1, as before. The server is a fake that
//! agrees to the features a case gives it and keeps what it is sent.

mod hostile_common;

use accord_delta::{Delta, Signature, SignatureOptions};
use accord_proto::hello::{FEATURE_PACKED_DELTA, FEATURE_ZSTD};
use accord_proto::{Request, RootMode};
use hostile_common::*;
use std::sync::{Arc, Mutex};

/// A new file of compressible bytes and its old version (its first three
/// quarters): a delta of some literals worth compressing.
fn versions() -> (Vec<u8>, Vec<u8>) {
    let new: Vec<u8> = (0..200_000u32).map(|i| (i * 13 % 251) as u8).collect();
    let old = new[..150_000].to_vec();
    (old, new)
}

/// Push a file to a fake server agreeing to `features` (the client's `-z`
/// at `compress`): the delta bodies it was sent.
fn pushed_deltas(features: u64, compress: Option<i32>) -> Vec<Vec<u8>> {
    let sb = Sandbox::new();
    let src = sb.root.join("src");
    std::fs::create_dir(&src).unwrap();
    let (old, new) = versions();
    std::fs::write(src.join("f"), &new).unwrap();
    let sig = Signature::generate(&old, &SignatureOptions::default())
        .unwrap()
        .encode();
    let listing = listing_reply(&[root_entry(), file_at("f", &old)], &[]);
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let kept = bodies.clone();
    let (dst, fake) = fake_server(RootMode::Write, (features, compress), move |a| {
        match &a.request {
            Request::Lock => Answer::Reply(vec![1]),
            Request::ListDir { .. } => Answer::Reply(listing.clone()),
            Request::ReadState { .. } => Answer::Reply(vec![0]),
            Request::Signature { .. } => Answer::Reply(sig.clone()),
            Request::Receive { .. } => {
                kept.lock().unwrap().push(a.body.clone());
                Answer::Reply(Vec::new())
            }
            _ => Answer::Reply(Vec::new()),
        }
    });
    let report = mirror_from_local(&src, &dst);
    drop(dst);
    fake.join().unwrap();
    assert!(report.fatal.is_none(), "{:?}", report.fatal);
    let bodies = bodies.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1, "one delta pushed");
    bodies
}

/// The `pack_level` of the `MakeDelta` a pull from a fake server agreeing
/// to `features` asks for.
fn pull_asks(features: u64, compress: Option<i32>) -> Option<i32> {
    let sb = Sandbox::new();
    let dst = sb.root.join("dst");
    std::fs::create_dir(&dst).unwrap();
    let (old, new) = versions();
    std::fs::write(dst.join("f"), &old).unwrap();
    let listing = listing_reply(&[root_entry(), file_at("f", &new)], &[]);
    let (src, fake) = fake_server(RootMode::Read, (features, compress), move |a| {
        match &a.request {
            Request::ListDir { .. } => Answer::Reply(listing.clone()),
            Request::ReadState { .. } => Answer::Reply(vec![0]),
            // The request is what this test is about: the file then fails.
            Request::MakeDelta { .. } | Request::OpenRead { .. } => {
                Answer::Error(refusal("not in this test"))
            }
            _ => Answer::Reply(Vec::new()),
        }
    });
    mirror_into_local(&src, &dst);
    drop(src);
    let seen = fake.join().unwrap();
    let asked: Vec<Option<i32>> = seen
        .iter()
        .filter_map(|r| match r {
            Request::MakeDelta { pack_level, .. } => Some(*pack_level),
            _ => None,
        })
        .collect();
    assert_eq!(asked.len(), 1, "one delta asked for: {seen:?}");
    asked[0]
}

/// The format version of an encoded delta, checked to decode.
fn version_of(delta: &[u8]) -> u8 {
    Delta::parse(delta).expect("the pushed delta decodes");
    delta[4]
}

#[test]
fn an_older_server_is_sent_format_1_even_with_z() {
    for body in pushed_deltas(FEATURE_ZSTD, Some(6)) {
        assert_eq!(version_of(&body), 1);
    }
}

#[test]
fn an_older_server_is_asked_for_format_1_even_with_z() {
    assert_eq!(pull_asks(FEATURE_ZSTD, Some(6)), None);
}

#[test]
fn without_z_literals_go_raw_in_format_1() {
    for body in pushed_deltas(FEATURE_PACKED_DELTA, None) {
        assert_eq!(version_of(&body), 1);
    }
    assert_eq!(pull_asks(FEATURE_PACKED_DELTA, None), None);
}

#[test]
fn with_z_and_the_feature_literals_are_compressed_at_the_z_level() {
    for body in pushed_deltas(FEATURE_ZSTD | FEATURE_PACKED_DELTA, Some(6)) {
        assert_eq!(version_of(&body), 2);
        // 50,000 literal bytes of a short cycle: a few hundred compressed.
        assert!(body.len() < 5_000, "{} bytes", body.len());
    }
    assert_eq!(
        pull_asks(FEATURE_ZSTD | FEATURE_PACKED_DELTA, Some(6)),
        Some(6)
    );
    assert_eq!(
        pull_asks(FEATURE_ZSTD | FEATURE_PACKED_DELTA, Some(-3)),
        Some(-3)
    );
}

/// A server that sends compressed literals it was not asked for (one that
/// did not agree to them): the file fails and keeps its old contents;
/// such a delta is never passed on to a reader that may be older.
#[test]
fn compressed_literals_not_asked_for_are_refused() {
    use accord_delta::{make_delta_with, DeltaOptions, LiteralCoding};
    let sb = Sandbox::new();
    let dst = sb.root.join("dst");
    std::fs::create_dir(&dst).unwrap();
    let (old, new) = versions();
    std::fs::write(dst.join("f"), &old).unwrap();
    let sig = Signature::generate(&old, &SignatureOptions::default()).unwrap();
    let mut delta = Vec::new();
    let coding = LiteralCoding::Zstd { level: 3 };
    make_delta_with(&sig, &new, &DeltaOptions::default(), coding, &mut delta).unwrap();
    assert_eq!(delta[4], 2);
    let mut reply = accord_proto::Enc::new();
    reply.varint(50_000).varint(150_000).raw(&delta);
    let reply = reply.finish();
    let listing = listing_reply(&[root_entry(), file_at("f", &new)], &[]);
    let (src, fake) = fake_server(RootMode::Read, (FEATURE_ZSTD, Some(6)), move |a| {
        match &a.request {
            Request::ListDir { .. } => Answer::Reply(listing.clone()),
            Request::ReadState { .. } => Answer::Reply(vec![0]),
            Request::MakeDelta { .. } => Answer::Reply(reply.clone()),
            Request::OpenRead { .. } => Answer::Error(refusal("not in this test")),
            _ => Answer::Reply(Vec::new()),
        }
    });
    let report = mirror_into_local(&src, &dst);
    drop(src);
    fake.join().unwrap();
    assert!(!report.errors.is_empty(), "the file did not fail");
    assert_eq!(std::fs::read(dst.join("f")).unwrap(), old);
}
