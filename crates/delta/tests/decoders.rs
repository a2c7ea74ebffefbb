//! Hostile inputs for the decoders: damaged signatures and deltas must give an
//! error (or, if still well-formed, a checked result), never a panic, a hang
//! or a huge allocation. (A cargo-fuzz target runs the same bodies: fuzz/.)

use accord_delta::*;
use proptest::prelude::*;

/// An old file, its signature, and deltas against it: sequential, in
/// place, and sequential with compressed literals.
struct Sample {
    old: Vec<u8>,
    sig: Vec<u8>,
    seq: Vec<u8>,
    ip: Vec<u8>,
    packed: Vec<u8>,
}

fn sample() -> Sample {
    let old: Vec<u8> = (0..5000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
        .collect();
    let mut new = old.clone();
    new.splice(700..700, b"inserted".iter().copied());
    new[3000..3010].copy_from_slice(b"overwrite!");
    let new: Vec<u8> = new.chunks(500).rev().flatten().copied().collect();
    let sig = Signature::generate(
        &old,
        &SignatureOptions {
            block_len: Some(64),
            ..Default::default()
        },
    )
    .unwrap();
    let mut seq = Vec::new();
    make_delta(&sig, &new, &DeltaOptions::default(), &mut seq).unwrap();
    // Compressed literals: the inserted text compresses against the
    // matched bytes around it.
    let mut packed_new = old.clone();
    packed_new.splice(2000..2000, old[100..1100].iter().copied());
    let mut packed = Vec::new();
    let coding = LiteralCoding::Zstd { level: 3 };
    make_delta_with(
        &sig,
        &packed_new,
        &DeltaOptions::default(),
        coding,
        &mut packed,
    )
    .unwrap();
    assert!(Delta::parse(&packed).unwrap().has_packed_literals());
    let mut ip = Vec::new();
    let ipo = InPlaceOptions {
        scratch: 256,
        ..Default::default()
    };
    make_delta(
        &sig,
        &new,
        &DeltaOptions {
            in_place: Some(ipo),
        },
        &mut ip,
    )
    .unwrap();
    Sample {
        old,
        sig: sig.encode(),
        seq,
        ip,
        packed,
    }
}

/// Applying whatever parses must either reproduce the promised checksum or fail.
fn apply_all_ways(old: &[u8], bytes: &[u8]) {
    if let Ok(d) = Delta::parse(bytes) {
        let mut out = Vec::new();
        let _ = patch_to(old, &d, &mut out);
        let mut target = old.to_vec();
        if patch_in_place(
            &mut target,
            &d,
            &PatchOptions {
                max_scratch: 1 << 20,
                sync: false,
            },
        )
        .is_ok()
        {
            assert_eq!(blake3::hash(&target).as_bytes(), &d.result_hash);
        }
    }
}

#[derive(Debug, Clone)]
enum Damage {
    Flip(usize, u8),
    Cut(usize),
    Insert(usize, Vec<u8>),
    Set(usize, u8),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(a, b)| Damage::Flip(a, b)),
        any::<usize>().prop_map(Damage::Cut),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..12))
            .prop_map(|(a, b)| Damage::Insert(a, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Damage::Set(a, b)),
    ]
}

fn hurt(mut v: Vec<u8>, d: &Damage) -> Vec<u8> {
    if v.is_empty() {
        return v;
    }
    let n = v.len();
    match d {
        Damage::Flip(a, b) => v[a % n] ^= b,
        Damage::Cut(a) => v.truncate(a % n),
        Damage::Insert(a, b) => {
            let a = a % n;
            v.splice(a..a, b.iter().copied());
        }
        Damage::Set(a, b) => v[a % n] = *b,
    }
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn damaged_deltas_never_panic(which in 0usize..3, damages in prop::collection::vec(damage(), 1..4)) {
        let Sample { old, seq, ip, packed, .. } = sample();
        let base = vec![seq, ip, packed].swap_remove(which);
        let bad = damages.iter().fold(base, hurt);
        apply_all_ways(&old, &bad);
    }

    #[test]
    fn damaged_signatures_never_panic(damages in prop::collection::vec(damage(), 1..4)) {
        let Sample { sig, .. } = sample();
        let bad = damages.iter().fold(sig, hurt);
        if let Ok(s) = Signature::decode(&bad) {
            let mut out = Vec::new();
            let _ = make_delta(&s, b"some new data that is long enough to roll over a block or two.", &DeltaOptions::default(), &mut out);
        }
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = Signature::decode(&bytes);
        for version in [1u8, 2] {
            let mut with_magic = b"ACDL".to_vec();
            with_magic.push(version);
            with_magic.extend_from_slice(&bytes);
            apply_all_ways(&[1, 2, 3], &with_magic);
        }
    }
}

/// Regression (review of the delta engine): a delta of many one-byte stashes
/// made parsing quadratic; 200,000 of them took minutes, and would stall the
/// suite again if the bookkeeping regressed.
#[test]
fn many_small_stashes_parse_in_linear_time() {
    use accord_delta::format::{encode, Command, Header};
    let n = 200_000u64;
    let new = vec![0u8; n as usize];
    let mut cmds: Vec<Command> = (0..n)
        .map(|i| Command::Stash {
            src: i,
            len: 1,
            slot: i,
        })
        .collect();
    cmds.push(Command::Keep { dst: 0, len: n });
    let h = Header {
        layout: Layout::InPlace,
        old_len: n,
        new_len: n,
        result_hash: *blake3::hash(&new).as_bytes(),
        scratch_len: n,
    };
    let mut bytes = Vec::new();
    encode(&h, &cmds, &new, &mut bytes).unwrap();
    let d = Delta::parse(&bytes).unwrap();
    let mut target = new.clone();
    patch_in_place(
        &mut target,
        &d,
        &PatchOptions {
            max_scratch: n,
            sync: false,
        },
    )
    .unwrap();
    let mut out = Vec::new();
    patch_to(&new, &d, &mut out).unwrap();
    assert_eq!(out, new);
}
