//! The second, finer round of a delta (`accord_delta::fine`): deltas it
//! refines rebuild the new file with fewer literal bytes; its two messages
//! round-trip, and damaged or hostile ones get clean errors, never a panic.

use accord_delta::fine::{refine, FineSignature, Gap, GapRequest, MIN_LITERAL};
use accord_delta::*;
use proptest::prelude::*;

fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// `old` with one byte changed every `every` bytes inside `from..to`: a
/// rebuilt program's moved addresses, too dense for whole blocks to match.
fn sparse_edits(old: &[u8], from: usize, to: usize, every: usize) -> Vec<u8> {
    let mut new = old.to_vec();
    for i in (from..to).step_by(every) {
        new[i] ^= 0x5a;
    }
    new
}

fn first_round(old: &[u8], new: &[u8], coding: LiteralCoding) -> Vec<u8> {
    let opts = SignatureOptions {
        verified: true,
        ..SignatureOptions::default()
    };
    let sig = Signature::generate(old, &opts).unwrap();
    let mut out = Vec::new();
    make_delta_with(&sig, new, &DeltaOptions::default(), coding, &mut out).unwrap();
    out
}

/// Both rounds through their encoded messages: the refined delta and its
/// literal bytes.
fn two_rounds(old: &[u8], new: &[u8], coding: LiteralCoding) -> Option<(Vec<u8>, u64)> {
    let first = first_round(old, new, coding);
    let d1 = Delta::parse(&first).unwrap();
    let req = GapRequest::for_delta(&d1)?;
    let req = GapRequest::decode(&req.encode()).unwrap();
    let fine = FineSignature::generate(old, &req).unwrap();
    let fine = FineSignature::decode(&fine.encode(), &req).unwrap();
    let mut out = Vec::new();
    let st = refine(&d1, &fine, new, coding, &mut out).unwrap();
    Some((out, st.literal_bytes))
}

fn rebuilt(old: &[u8], delta: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    patch_to(old, &Delta::parse(delta).unwrap(), &mut out).unwrap();
    out
}

fn literal_of(delta: &[u8]) -> u64 {
    Delta::parse(delta)
        .unwrap()
        .commands
        .iter()
        .map(|c| match c {
            Command::Add { len, .. } => *len,
            _ => 0,
        })
        .sum()
}

#[test]
fn dense_small_edits_refine_to_fewer_literals() {
    let old = noise(2 << 20, 7);
    // One byte in 400 changed over the middle half: blocks of ~1400 bytes
    // all miss there, blocks of 64 mostly match.
    let new = sparse_edits(&old, 512 << 10, 1536 << 10, 400);
    for coding in [LiteralCoding::Raw, LiteralCoding::Zstd { level: 3 }] {
        let first = first_round(&old, &new, coding);
        let (refined, literal) = two_rounds(&old, &new, coding).expect("a second round");
        assert_eq!(rebuilt(&old, &refined), new, "{coding:?}");
        assert_eq!(literal, literal_of(&refined));
        assert!(
            literal * 2 < literal_of(&first),
            "{coding:?}: {literal} literal bytes after the second round, {} before",
            literal_of(&first)
        );
        assert!(refined.len() * 2 < first.len(), "{coding:?}");
    }
}

#[test]
fn few_literals_take_no_second_round() {
    let old = noise(1 << 20, 3);
    let mut new = old.clone();
    new.extend_from_slice(b"one more line\n");
    let first = first_round(&old, &new, LiteralCoding::Raw);
    assert!(literal_of(&first) < MIN_LITERAL);
    assert_eq!(GapRequest::for_delta(&Delta::parse(&first).unwrap()), None);
}

#[test]
fn an_in_place_delta_takes_no_second_round() {
    let old = noise(1 << 20, 5);
    let new = sparse_edits(&old, 0, old.len(), 300);
    let sig = Signature::generate(&old, &SignatureOptions::default()).unwrap();
    let opts = DeltaOptions {
        in_place: Some(InPlaceOptions::default()),
    };
    let mut out = Vec::new();
    make_delta(&sig, &new, &opts, &mut out).unwrap();
    assert_eq!(GapRequest::for_delta(&Delta::parse(&out).unwrap()), None);
}

#[test]
fn a_fine_signature_for_other_gaps_is_refused() {
    let old = noise(1 << 20, 9);
    let new = sparse_edits(&old, 0, 512 << 10, 300);
    let first = first_round(&old, &new, LiteralCoding::Raw);
    let d1 = Delta::parse(&first).unwrap();
    let mut req = GapRequest::for_delta(&d1).unwrap();
    req.gaps[0].len -= 1;
    let fine = FineSignature::generate(&old, &req).unwrap();
    let err = refine(&d1, &fine, &new, LiteralCoding::Raw, &mut Vec::new()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the fine signature answers other gaps than this delta's"
    );
    // Signed against a file of another length: refused by the signer.
    let err = FineSignature::generate(&old[1..], &req).unwrap_err();
    assert!(matches!(err, DeltaError::WrongBasis { .. }), "{err}");
}

fn request(gaps: &[(u64, u64)]) -> GapRequest {
    GapRequest {
        old_len: 10_000,
        new_len: 10_000,
        block_len: 64,
        gaps: gaps
            .iter()
            .map(|&(start, len)| Gap { start, len })
            .collect(),
    }
}

#[test]
fn malformed_gap_requests_get_their_errors() {
    let good = request(&[(0, 100), (200, 64), (9_000, 1_000)]);
    let bytes = good.encode();
    assert_eq!(GapRequest::decode(&bytes).unwrap(), good);
    let err = |b: &[u8]| GapRequest::decode(b).unwrap_err().to_string();
    assert_eq!(
        err(b"ACSG\x01"),
        "corrupt input: not an Accord gap request (bad magic)"
    );
    assert_eq!(
        err(&[&bytes[..], &[0][..]].concat()),
        "corrupt input: 1 bytes after the end of the gap request"
    );
    assert_eq!(
        err(&bytes[..bytes.len() - 1]),
        "truncated input: it ends inside the gap length"
    );
    // Past the end, empty, a block too small for any signature.
    let past = request(&[(9_000, 1_001)]).encode();
    assert_eq!(
        err(&past),
        "corrupt input: a gap past the end of the old file"
    );
    let empty = request(&[(10, 0)]).encode();
    assert_eq!(err(&empty), "corrupt input: an empty gap");
    let mut tiny = request(&[(0, 10)]);
    tiny.block_len = 8;
    assert_eq!(
        err(&tiny.encode()),
        "corrupt input: block length 8 out of range"
    );
    // A count no body could hold is refused before anything is allocated.
    let mut huge = b"ACGQ\x01".to_vec();
    huge.extend_from_slice(&[0x90, 0x4e, 0x90, 0x4e, 0x40]);
    huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x0f]);
    assert_eq!(err(&huge), "truncated input: it ends inside the gaps");
}

#[test]
fn malformed_fine_signatures_get_their_errors() {
    let old = noise(10_000, 11);
    let req = request(&[(0, 100), (200, 64), (9_000, 1_000)]);
    let fine = FineSignature::generate(&old, &req).unwrap();
    let bytes = fine.encode();
    assert_eq!(FineSignature::decode(&bytes, &req).unwrap(), fine);
    let err = |b: &[u8], r: &GapRequest| FineSignature::decode(b, r).unwrap_err().to_string();
    assert_eq!(
        err(&bytes, &request(&[(0, 100)])),
        "corrupt input: 3 gaps signed, 1 asked for"
    );
    assert_eq!(
        err(&bytes[..bytes.len() - 1], &req),
        "truncated input: it ends inside the fine signature blocks"
    );
    assert_eq!(
        err(&[&bytes[..], &[0][..]].concat(), &req),
        "corrupt input: 1 bytes after the end of the fine signature"
    );
    // The first gap's strong-sum length (after magic, version, key, count).
    let mut bad = bytes.clone();
    bad[4 + 1 + 32 + 1] = 33;
    assert_eq!(
        err(&bad, &req),
        "corrupt input: strong sum length 33 out of range"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any bytes: a clean result, never a panic, and never more memory
    /// than the bytes present justify.
    #[test]
    fn random_requests_and_signatures_never_panic(
        head in prop::collection::vec(any::<u8>(), 0..64),
        body in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut req = b"ACGQ\x01".to_vec();
        req.extend_from_slice(&head);
        let _ = GapRequest::decode(&head);
        if let Ok(r) = GapRequest::decode(&req) {
            let mut sig = b"ACFS\x01".to_vec();
            sig.extend_from_slice(&body);
            let _ = FineSignature::decode(&sig, &r);
        }
    }

    /// Whatever the edits, the refined delta rebuilds the new file and
    /// never holds more literal bytes than the first round's.
    #[test]
    fn refined_deltas_rebuild_the_new_file(
        seed in any::<u64>(),
        every in 40usize..2_000,
        from in 0usize..(256 << 10),
        tail in prop::collection::vec(any::<u8>(), 0..3_000),
    ) {
        let old = noise(384 << 10, seed);
        let mut new = sparse_edits(&old, from, old.len(), every);
        new.truncate(old.len() - tail.len() / 2);
        new.extend_from_slice(&tail);
        let first = first_round(&old, &new, LiteralCoding::Raw);
        if let Some((refined, literal)) = two_rounds(&old, &new, LiteralCoding::Raw) {
            prop_assert_eq!(rebuilt(&old, &refined), new);
            prop_assert!(literal <= literal_of(&first));
        }
    }
}
