//! Property tests: patch(old, delta(sig(old), new)) == new, sequentially and
//! in place, for every cycle-breaking policy, scratch size and window size.

use accord_delta::*;
use proptest::prelude::*;

fn sig_of(old: &[u8], block: u32) -> Signature {
    let opts = SignatureOptions {
        block_len: Some(block),
        strong_len: None,
        key: Some([7; 32]),
        verified: false,
    };
    Signature::generate(old, &opts).unwrap()
}

/// `len` pseudo-random bytes (xorshift from `seed`).
fn noise(len: usize, mut x: u64) -> Vec<u8> {
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn delta_bytes(
    sig: &Signature,
    new: &[u8],
    in_place: Option<InPlaceOptions>,
) -> (Vec<u8>, DeltaStats) {
    let mut out = Vec::new();
    let st = make_delta(sig, new, &DeltaOptions { in_place }, &mut out).unwrap();
    (out, st)
}

/// Checks every way of applying a delta and returns the in-place stats.
fn check_all(old: &[u8], new: &[u8], block: u32) {
    let sig = sig_of(old, block);
    let (seq, seq_st) = delta_bytes(&sig, new, None);
    let d = Delta::parse(&seq).unwrap();
    let mut out = Vec::new();
    patch_to(old, &d, &mut out).unwrap();
    assert_eq!(out, new, "sequential");
    for level in [1, 9] {
        let mut packed = Vec::new();
        let opts = DeltaOptions::default();
        let coding = LiteralCoding::Zstd { level };
        let st = make_delta_with(&sig, new, &opts, coding, &mut packed).unwrap();
        assert_eq!(st.literal_bytes, seq_st.literal_bytes);
        // Never larger than raw literals (format 1) but for the literal
        // section's coding byte and a few bytes a segment (its kind, its
        // frame's length, an ADD cut at its end).
        let segments = 1 + (new.len() >> 24);
        assert!(
            packed.len() <= seq.len() + 1 + 8 * segments,
            "level {level}"
        );
        assert_eq!(seq[4], 1, "raw literals are written in format 1");
        let mut out = Vec::new();
        patch_to(old, &Delta::parse(&packed).unwrap(), &mut out).unwrap();
        assert_eq!(out, new, "compressed literals, level {level}");
    }
    for policy in [CyclePolicy::Stash, CyclePolicy::Trim, CyclePolicy::Delete] {
        for scratch in [0u64, 64, 1 << 20] {
            for window_nodes in [2usize, 5, 1 << 20] {
                let ip = InPlaceOptions {
                    scratch,
                    policy,
                    window_nodes,
                };
                let (bytes, st) = delta_bytes(&sig, new, Some(ip.clone()));
                let d = Delta::parse(&bytes).unwrap_or_else(|e| panic!("{ip:?}: {e}"));
                let mut target = old.to_vec();
                patch_in_place(&mut target, &d, &PatchOptions::default())
                    .unwrap_or_else(|e| panic!("{ip:?}: {e}"));
                assert_eq!(target, new, "in place {ip:?}");
                let mut streamed = Vec::new();
                patch_to(old, &d, &mut streamed).unwrap();
                assert_eq!(streamed, new, "in-place delta streamed {ip:?}");
                assert!(st.literal_bytes >= seq_st.literal_bytes, "{ip:?}");
                assert_eq!(
                    st.literal_bytes - seq_st.literal_bytes,
                    st.plan.converted_bytes,
                    "{ip:?}"
                );
                assert!(st.plan.scratch_len <= scratch, "{ip:?}");
            }
        }
    }
}

#[derive(Debug, Clone)]
enum Edit {
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Move(usize, usize, usize),
    ReverseChunks(usize),
    Repeat(usize, usize, usize),
    Overwrite(usize, Vec<u8>),
}

fn apply(mut v: Vec<u8>, e: &Edit) -> Vec<u8> {
    let n = v.len();
    match e {
        Edit::Insert(at, bytes) => {
            let at = at % (n + 1);
            v.splice(at..at, bytes.iter().copied());
        }
        Edit::Delete(at, len) if n > 0 => {
            let at = at % n;
            let end = (at + len).min(n);
            v.drain(at..end);
        }
        Edit::Move(from, len, to) if n > 0 => {
            let from = from % n;
            let end = (from + len).min(n);
            let piece: Vec<u8> = v.drain(from..end).collect();
            let to = to % (v.len() + 1);
            v.splice(to..to, piece);
        }
        Edit::ReverseChunks(chunk) if n > 0 => {
            let chunk = (*chunk).max(1);
            let chunks: Vec<Vec<u8>> = v.chunks(chunk).map(|c| c.to_vec()).collect();
            v = chunks.into_iter().rev().flatten().collect();
        }
        Edit::Repeat(from, len, times) if n > 0 => {
            let from = from % n;
            let end = (from + len).min(n);
            let piece = v[from..end].to_vec();
            for _ in 0..*times {
                v.splice(from..from, piece.iter().copied());
            }
        }
        Edit::Overwrite(at, bytes) if n > 0 => {
            let at = at % n;
            for (i, b) in bytes.iter().enumerate() {
                if at + i < n {
                    v[at + i] = *b;
                }
            }
        }
        _ => {}
    }
    v
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        (any::<usize>(), prop::collection::vec(any::<u8>(), 0..100))
            .prop_map(|(a, b)| Edit::Insert(a, b)),
        (any::<usize>(), 0usize..300).prop_map(|(a, l)| Edit::Delete(a, l)),
        (any::<usize>(), 0usize..400, any::<usize>()).prop_map(|(a, l, t)| Edit::Move(a, l, t)),
        (1usize..300).prop_map(Edit::ReverseChunks),
        (any::<usize>(), 1usize..100, 1usize..5).prop_map(|(a, l, t)| Edit::Repeat(a, l, t)),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..50))
            .prop_map(|(a, b)| Edit::Overwrite(a, b)),
    ]
}

/// Old files: random, or built from few distinct blocks (many identical blocks).
fn old_file() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..3000),
        (
            prop::collection::vec(prop::collection::vec(any::<u8>(), 16), 1..3),
            prop::collection::vec(0usize..3, 0..150)
        )
            .prop_map(|(blocks, picks)| picks
                .iter()
                .flat_map(|&p| blocks[p % blocks.len()].clone())
                .collect()),
        (0usize..2000, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn edited_files_round_trip(old in old_file(), edits in prop::collection::vec(edit(), 0..6), block in prop_oneof![Just(16u32), Just(32), Just(61), Just(128)]) {
        let new = edits.iter().fold(old.clone(), apply);
        check_all(&old, &new, block);
    }

    #[test]
    fn unrelated_files_round_trip(old in prop::collection::vec(any::<u8>(), 0..2000), new in prop::collection::vec(any::<u8>(), 0..2000)) {
        check_all(&old, &new, 32);
    }
}

#[test]
fn empty_and_tiny_files() {
    for (old, new) in [
        (&b""[..], &b""[..]),
        (b"", b"abc"),
        (b"abc", b""),
        (b"abc", b"abc"),
        (b"a", b"ab"),
    ] {
        check_all(old, new, 16);
        check_all(old, new, 700);
    }
}

#[test]
fn reversed_chunks_cost_nothing_with_stash() {
    let old: Vec<u8> = (0..64 * 4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 7) as u8)
        .collect();
    let new: Vec<u8> = old.chunks(4096).rev().flatten().copied().collect();
    let sig = sig_of(&old, 512);
    let (bytes, st) = delta_bytes(
        &sig,
        &new,
        Some(InPlaceOptions {
            scratch: 64 << 10,
            ..Default::default()
        }),
    );
    assert_eq!(st.literal_bytes, 0, "{st:?}");
    assert!(st.plan.cycles_stashed > 0);
    let mut target = old.clone();
    patch_in_place(
        &mut target,
        &Delta::parse(&bytes).unwrap(),
        &PatchOptions::default(),
    )
    .unwrap();
    assert_eq!(target, new);
}

#[test]
fn shifted_file_in_place_costs_only_the_insertion() {
    let old: Vec<u8> = (0..1 << 20)
        .map(|i: u32| (i.wrapping_mul(2246822519) >> 11) as u8)
        .collect();
    let mut new = old.clone();
    new.splice(100..100, vec![9u8; 1024]);
    let sig = sig_of(&old, 1024);
    let (_, seq) = delta_bytes(&sig, &new, None);
    let (_, ip) = delta_bytes(&sig, &new, Some(InPlaceOptions::default()));
    assert_eq!(ip.literal_bytes, seq.literal_bytes, "{ip:?}");
}

/// Blocks shuffled by a fixed permutation make many cycles; each policy must
/// break them its own way and still rebuild the file.
#[test]
fn every_policy_breaks_cycles_its_own_way() {
    let block = 256usize;
    let old: Vec<u8> = (0..200 * block as u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 9) as u8)
        .collect();
    let mut order: Vec<usize> = (0..200).collect();
    // A deterministic shuffle (LCG) so the test is repeatable.
    let mut x = 12345u64;
    for i in (1..order.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        order.swap(i, (x >> 33) as usize % (i + 1));
    }
    let new: Vec<u8> = order
        .iter()
        .flat_map(|&b| old[b * block..(b + 1) * block].to_vec())
        .collect();
    let sig = sig_of(&old, block as u32);
    for (policy, scratch) in [
        (CyclePolicy::Stash, 1 << 20),
        (CyclePolicy::Stash, 1024),
        (CyclePolicy::Trim, 0),
        (CyclePolicy::Delete, 0),
    ] {
        for window_nodes in [1 << 20, 16] {
            let ip = InPlaceOptions {
                scratch,
                policy,
                window_nodes,
            };
            let (bytes, st) = delta_bytes(&sig, &new, Some(ip.clone()));
            let p = &st.plan;
            // Small windows cut most cycles apart (reads of earlier windows become literal).
            if window_nodes == 16 {
                assert!(p.windows > 1 && p.converted_bytes > 0, "{p:?}");
            } else {
                assert!(p.cycles_broken > 0, "{ip:?} {p:?}");
            }
            match policy {
                _ if window_nodes == 16 => {}
                CyclePolicy::Stash => {
                    assert!(p.cycles_stashed > 0 && p.stashed_bytes > 0, "{ip:?} {p:?}")
                }
                CyclePolicy::Trim => assert!(
                    p.cycles_trimmed > 0 && p.converted_bytes > 0,
                    "{ip:?} {p:?}"
                ),
                CyclePolicy::Delete => assert!(
                    p.cycles_deleted > 0 && p.converted_bytes > 0,
                    "{ip:?} {p:?}"
                ),
            }
            if policy == CyclePolicy::Stash && scratch == 1 << 20 && window_nodes > 16 {
                assert_eq!(
                    st.literal_bytes, 0,
                    "ample scratch breaks every cycle for free: {p:?}"
                );
            }
            let mut target = old.clone();
            patch_in_place(
                &mut target,
                &Delta::parse(&bytes).unwrap(),
                &PatchOptions::default(),
            )
            .unwrap();
            assert_eq!(target, new, "{ip:?}");
        }
    }
}

/// Regression (review of the delta engine): shuffled blocks shifted by a few
/// bytes made deep DFS stacks with many back edges, and inspecting whole
/// cycles made planning quadratic (24 s for 32k blocks). Bounded lookback keeps
/// it linear; this must stay fast and correct for every policy.
#[test]
fn shuffled_and_shifted_blocks_plan_in_linear_time() {
    let block = 64usize;
    let count = 32 * 1024;
    let old: Vec<u8> = (0..(block * count) as u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 9) as u8)
        .collect();
    let mut order: Vec<usize> = (0..count).collect();
    let mut x = 99u64;
    for i in (1..count).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        order.swap(i, (x >> 33) as usize % (i + 1));
    }
    let mut new = b"0123456789".to_vec();
    new.extend(
        order
            .iter()
            .flat_map(|&b| old[b * block..(b + 1) * block].iter().copied()),
    );
    let sig = sig_of(&old, block as u32);
    for policy in [CyclePolicy::Stash, CyclePolicy::Trim, CyclePolicy::Delete] {
        let ip = InPlaceOptions {
            policy,
            ..Default::default()
        };
        let (bytes, st) = delta_bytes(&sig, &new, Some(ip));
        assert!(st.plan.cycles_broken > 0);
        let mut target = old.clone();
        patch_in_place(
            &mut target,
            &Delta::parse(&bytes).unwrap(),
            &PatchOptions::default(),
        )
        .unwrap();
        assert_eq!(target, new, "{policy:?}");
    }
}

/// Issue 11: a signature for a delta that is checked whole afterwards takes
/// rsync's trade (blocks of √len, strong sums of a few bytes), round-trips,
/// finds the same matches, and is refused for an in-place delta.
#[test]
fn verified_signatures_are_small_and_never_used_in_place() {
    let old = noise(4_500_000, 0x9e37_79b9_7f4a_7c15);
    let mut new = old.clone();
    new.extend_from_slice(b"one more line\n");
    let verified = SignatureOptions {
        verified: true,
        ..SignatureOptions::default()
    };
    let short = Signature::generate(&old, &verified).unwrap();
    let full = Signature::generate(&old, &SignatureOptions::default()).unwrap();
    let (short_len, full_len) = (short.encode().len(), full.encode().len());
    assert!(short.strong_len <= 4, "{}", short.strong_len);
    assert!(short_len * 2 < full_len, "{short_len} vs {full_len}");
    let back = Signature::decode(&short.encode()).unwrap();
    assert_eq!(back, short);
    let (seq, st) = delta_bytes(&short, &new, None);
    assert!(st.literal_bytes < 10_000, "{}", st.literal_bytes);
    let mut out = Vec::new();
    patch_to(&old, &Delta::parse(&seq).unwrap(), &mut out).unwrap();
    assert_eq!(out, new);
    let opts = DeltaOptions {
        in_place: Some(InPlaceOptions::default()),
    };
    let e = make_delta(&short, &new, &opts, &mut Vec::new()).unwrap_err();
    assert!(e.to_string().contains("in-place"), "{e}");
}

/// A run of matching blocks followed into a block whose short strong sum
/// equals the next old block's, but whose weak sum does not: the run ends
/// there and the block goes as literal bytes. (A run was once followed on
/// its strong sums alone, and with two-byte sums one run's end in 65,536
/// became a false match.)
#[test]
fn a_run_of_matches_does_not_continue_on_a_strong_sum_alone() {
    let bl = 64usize;
    let old = noise(bl * 8, 0x2545_f491_4f6c_dd1d);
    let opts = SignatureOptions {
        block_len: Some(bl as u32),
        strong_len: Some(2),
        key: Some([7; 32]),
        verified: true,
    };
    let sig = Signature::generate(&old, &opts).unwrap();
    // Block 4 of the new file: not old's block 4, but with its strong sum.
    let old_block = &old[4 * bl..5 * bl];
    let block = (1u32..1 << 24)
        .map(|v| {
            let mut b = old_block.to_vec();
            b[..4].copy_from_slice(&v.to_le_bytes());
            b
        })
        .find(|b| {
            b[..] != *old_block
                && sig.strong_sum(b)[..2] == *sig.strong_of(4)
                && rolling::weak(b) != sig.weak[4]
        })
        .expect("a block with the same two-byte strong sum");
    let mut new = old.clone();
    new[4 * bl..5 * bl].copy_from_slice(&block);
    let (delta, st) = delta_bytes(&sig, &new, None);
    let mut out = Vec::new();
    patch_to(&old, &Delta::parse(&delta).unwrap(), &mut out).unwrap();
    assert_eq!(out, new);
    assert_eq!(st.literal_bytes, bl as u64);
}
