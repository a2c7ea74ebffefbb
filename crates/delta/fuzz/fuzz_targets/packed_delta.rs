#![no_main]
//! Compressed literals (delta format 2): a delta made from the input round
//! trips; the same delta damaged where the input says parses and applies
//! cleanly or fails, never panics, and never yields a wrong result.
use accord_delta::{
    make_delta_with, patch_to, Delta, DeltaOptions, LiteralCoding, Signature, SignatureOptions,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    // old = a pattern; new = old with the input spliced in where it says,
    // so there are matched bytes to compress against.
    let at = u16::from_le_bytes([data[0], data[1]]) as usize % 3000;
    let cut = (data[2] as usize * 7) % data.len().max(1);
    let (edit, damage) = data[3..].split_at(cut.min(data.len() - 3));
    let old: Vec<u8> = (0..3000u32).map(|i| (i * 31 % 251) as u8).collect();
    let mut new = old.clone();
    new.splice(at..at, edit.iter().copied());
    let opts = SignatureOptions {
        block_len: Some(64),
        ..Default::default()
    };
    let sig = Signature::generate(&old, &opts).unwrap();
    let mut delta = Vec::new();
    let coding = LiteralCoding::Zstd { level: 1 };
    make_delta_with(&sig, &new, &DeltaOptions::default(), coding, &mut delta).unwrap();
    let mut out = Vec::new();
    patch_to(&old, &Delta::parse(&delta).unwrap(), &mut out).unwrap();
    assert_eq!(out, new);
    // Damage: each pair of bytes is (position, xor).
    for pair in damage.chunks(2) {
        if let [p, x] = *pair {
            let i = (p as usize * 131) % delta.len();
            delta[i] ^= x;
        } else if let [p] = *pair {
            delta.truncate(p as usize * delta.len() / 256);
        }
    }
    if let Ok(d) = Delta::parse(&delta) {
        let mut out = Vec::new();
        if patch_to(&old, &d, &mut out).is_ok() {
            assert_eq!(blake3::hash(&out).as_bytes(), &d.result_hash);
        }
    }
});
