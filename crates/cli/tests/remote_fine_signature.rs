//! A delta's second round crosses the wire only to a server that agreed
//! to `FEATURE_FINE_SIGNATURE`: the client names the gaps of its first
//! round (a `FineSignature` request) and sends the refined delta; an older
//! server is never asked and gets the first round's delta, as before. A
//! fine signature that does not decode fails the file cleanly. The server
//! is a fake that signs what it is asked with the library and keeps what
//! it is sent.

mod hostile_common;

use accord_delta::fine::{FineSignature, GapRequest};
use accord_delta::{patch_to, Command, Delta, Signature, SignatureOptions};
use accord_proto::hello::{FEATURE_FINE_SIGNATURE, FEATURE_ZSTD};
use accord_proto::{Request, RootMode};
use hostile_common::*;
use std::sync::{Arc, Mutex};

/// An old file of noise and its new version with one byte in 300 changed
/// over its second half: whole blocks there all miss, small ones match.
fn versions() -> (Vec<u8>, Vec<u8>) {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let old: Vec<u8> = (0..1 << 20)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect();
    let mut new = old.clone();
    for i in (old.len() / 2..old.len()).step_by(300) {
        new[i] ^= 0xa5;
    }
    (old, new)
}

/// What the fake answers a `FineSignature` with.
#[derive(Clone, Copy)]
enum FineReply {
    Signed,
    Garbage,
}

/// Push the new version to a fake server holding the old one and agreeing
/// to `features`: the requests it saw, the delta it was sent (if any),
/// and whether the run reported an error.
fn push(features: u64, fine: FineReply) -> (Vec<Request>, Option<Vec<u8>>, bool) {
    let sb = Sandbox::new();
    let src = sb.root.join("src");
    std::fs::create_dir(&src).unwrap();
    let (old, new) = versions();
    std::fs::write(src.join("f"), &new).unwrap();
    let opts = SignatureOptions {
        verified: true,
        ..SignatureOptions::default()
    };
    let sig = Signature::generate(&old, &opts).unwrap().encode();
    let listing = listing_reply(&[root_entry(), file_at("f", &old)], &[]);
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let kept = bodies.clone();
    let (dst, fake) = fake_server(RootMode::Write, (features, None), move |a| {
        match &a.request {
            Request::Lock => Answer::Reply(vec![1]),
            Request::ListDir { .. } => Answer::Reply(listing.clone()),
            Request::ReadState { .. } => Answer::Reply(vec![0]),
            Request::Signature { .. } => Answer::Reply(sig.clone()),
            Request::FineSignature { .. } => match fine {
                FineReply::Signed => {
                    let req = GapRequest::decode(&a.body).expect("a gap request");
                    Answer::Reply(FineSignature::generate(&old, &req).unwrap().encode())
                }
                FineReply::Garbage => Answer::Reply(b"ACFS\x01 not a signature".to_vec()),
            },
            Request::Receive { .. } => {
                kept.lock().unwrap().push(a.body.clone());
                Answer::Reply(Vec::new())
            }
            _ => Answer::Reply(Vec::new()),
        }
    });
    let report = mirror_from_local(&src, &dst);
    drop(dst);
    let seen = fake.join().unwrap();
    assert!(report.fatal.is_none(), "{:?}", report.fatal);
    let bodies = bodies.lock().unwrap().clone();
    assert!(bodies.len() <= 1, "one delta at most");
    (seen, bodies.into_iter().next(), !report.errors.is_empty())
}

fn asked_for_fine(seen: &[Request]) -> usize {
    seen.iter()
        .filter(|r| matches!(r, Request::FineSignature { .. }))
        .count()
}

fn literal_of(delta: &Delta) -> u64 {
    delta
        .commands
        .iter()
        .map(|c| match c {
            Command::Add { len, .. } => *len,
            _ => 0,
        })
        .sum()
}

/// The delta rebuilds the new version from the old: its literal bytes.
fn check(delta: &[u8]) -> u64 {
    let (old, new) = versions();
    let d = Delta::parse(delta).expect("the pushed delta decodes");
    let mut out = Vec::new();
    patch_to(&old, &d, &mut out).unwrap();
    assert!(out == new, "the delta rebuilds the new version");
    literal_of(&d)
}

#[test]
fn a_server_that_agreed_is_asked_for_the_gaps_and_sent_fewer_literals() {
    let (seen, delta, failed) = push(FEATURE_FINE_SIGNATURE, FineReply::Signed);
    assert!(!failed);
    assert_eq!(asked_for_fine(&seen), 1, "{seen:?}");
    let refined = check(&delta.expect("a delta pushed"));
    let (seen, delta, _) = push(FEATURE_ZSTD, FineReply::Signed);
    assert_eq!(asked_for_fine(&seen), 0, "an older server is never asked");
    let first = check(&delta.expect("a delta pushed"));
    // Half the file changed in one byte of 300: the first round sends that
    // half; the second, about a sixth of it.
    assert!(first > 400_000, "{first} literal bytes in one round");
    assert!(
        refined * 3 < first,
        "{refined} after two rounds, {first} in one"
    );
}

#[test]
fn a_fine_signature_that_does_not_decode_fails_the_file() {
    let (seen, delta, failed) = push(FEATURE_FINE_SIGNATURE, FineReply::Garbage);
    assert_eq!(asked_for_fine(&seen), 1);
    assert!(failed, "the file did not fail");
    assert_eq!(delta, None, "nothing sent for it");
}
