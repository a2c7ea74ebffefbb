//! Deltas whose literals are compressed against the matched bytes (format
//! version 2, coding 1): round trips across segments, and hostile frames
//! refused with clean errors before anything is written.

use accord_delta::format::{encode, Command, Header};
use accord_delta::packed::SEGMENT;
use accord_delta::*;

fn pseudo_text(len: usize, seed: u64) -> Vec<u8> {
    // Compressible but not repetitive: words from a small vocabulary.
    const WORDS: [&[u8]; 8] = [
        b"delta ",
        b"segment ",
        b"literal ",
        b"basis ",
        b"zstd ",
        b"frame ",
        b"copy\n",
        b"add ",
    ];
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(WORDS[(x % 8) as usize]);
        out.extend_from_slice(&(x >> 40).to_le_bytes()[..1]);
    }
    out.truncate(len);
    out
}

fn sig_of(old: &[u8]) -> Signature {
    Signature::generate(old, &SignatureOptions::default()).unwrap()
}

fn packed_delta(old: &[u8], new: &[u8]) -> (Vec<u8>, DeltaStats) {
    let mut out = Vec::new();
    let coding = LiteralCoding::Zstd { level: 3 };
    let st = make_delta_with(
        &sig_of(old),
        new,
        &DeltaOptions::default(),
        coding,
        &mut out,
    )
    .unwrap();
    (out, st)
}

fn patched(old: &[u8], delta: &[u8]) -> Result<Vec<u8>, DeltaError> {
    let d = Delta::parse(delta)?;
    let mut out = Vec::new();
    patch_to(old, &d, &mut out)?;
    Ok(out)
}

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A sequential version-2 delta header for `new` against `old_len` bytes.
fn head(old_len: u64, new: &[u8], count: u64) -> Vec<u8> {
    let mut d = b"ACDL\x02\x00".to_vec();
    varint(&mut d, old_len);
    varint(&mut d, new.len() as u64);
    d.extend_from_slice(blake3::hash(new).as_bytes());
    varint(&mut d, 0);
    varint(&mut d, count);
    d
}

fn zstd_frame(data: &[u8], declared: Option<u64>) -> Vec<u8> {
    use zstd::zstd_safe::{CCtx, CParameter};
    let mut c = CCtx::create();
    c.set_parameter(CParameter::CompressionLevel(3)).unwrap();
    c.set_parameter(CParameter::ContentSizeFlag(declared.is_some()))
        .unwrap();
    c.set_pledged_src_size(declared).unwrap();
    let mut out = Vec::with_capacity(data.len() + 64);
    c.compress2(&mut out, data).unwrap();
    out
}

#[test]
fn files_of_several_segments_round_trip_and_shrink() {
    let old = pseudo_text((2 * SEGMENT + SEGMENT / 2) as usize, 1);
    let mut new = old.clone();
    // New data across the first segment end (the ADD is cut there), an edit
    // in the middle of a segment, and a tail that moves a copy across the
    // second segment end.
    let s = SEGMENT as usize;
    new.splice(s - 5000..s - 5000, pseudo_text(20_000, 2));
    new[s + s / 2..s + s / 2 + 3000].copy_from_slice(&pseudo_text(3000, 3));
    new.splice(2 * s - 100..2 * s - 100, pseudo_text(777, 4));
    let (delta, st) = packed_delta(&old, &new);
    assert!(st.literal_bytes > 20_000, "{st:?}");
    let mut raw = Vec::new();
    make_delta(&sig_of(&old), &new, &DeltaOptions::default(), &mut raw).unwrap();
    assert!(
        delta.len() * 2 < raw.len(),
        "compressed {} B, raw {} B",
        delta.len(),
        raw.len()
    );
    assert!(Delta::parse(&delta).unwrap().has_packed_literals());
    assert_eq!(patched(&old, &delta).unwrap(), new);
}

#[test]
fn empty_tiny_and_unrelated_files_round_trip() {
    let cases: [(&[u8], &[u8]); 6] = [
        (b"", b""),
        (b"", b"abc"),
        (b"abc", b""),
        (b"abc", b"abc"),
        (b"a", b"ab"),
        (&[7; 5000], &[9; 70_000]),
    ];
    for (old, new) in cases {
        let (delta, _) = packed_delta(old, new);
        assert_eq!(patched(old, &delta).unwrap(), new);
    }
}

#[test]
fn incompressible_literals_are_stored_raw() {
    let old = pseudo_text(100_000, 5);
    let mut noise = vec![0u8; 50_000];
    getrandom::getrandom(&mut noise).unwrap();
    let mut new = old.clone();
    new.splice(50_000..50_000, noise);
    let (delta, st) = packed_delta(&old, &new);
    assert!(!Delta::parse(&delta).unwrap().has_packed_literals());
    assert!(delta.len() as u64 >= st.literal_bytes);
    assert_eq!(patched(&old, &delta).unwrap(), new);
}

#[test]
fn in_place_deltas_keep_raw_literals() {
    let old = pseudo_text(200_000, 6);
    let new: Vec<u8> = old.chunks(10_000).rev().flatten().copied().collect();
    let opts = DeltaOptions {
        in_place: Some(InPlaceOptions::default()),
    };
    let mut out = Vec::new();
    make_delta_with(
        &sig_of(&old),
        &new,
        &opts,
        LiteralCoding::Zstd { level: 3 },
        &mut out,
    )
    .unwrap();
    let d = Delta::parse(&out).unwrap();
    assert!(!d.has_packed_literals());
    let mut target = old.clone();
    patch_in_place(&mut target, &d, &PatchOptions::default()).unwrap();
    assert_eq!(target, new);
}

/// One ADD of `lits.len()` bytes, literals coded 1, one zstd segment.
fn one_add(lits: &[u8], seg: &[u8]) -> Vec<u8> {
    let mut d = head(0, lits, 1);
    d.push(1);
    varint(&mut d, lits.len() as u64);
    d.push(1); // literal coding: compressed segments
    d.extend_from_slice(seg);
    d
}

fn zstd_seg(frame: &[u8], zlen: u64) -> Vec<u8> {
    let mut s = vec![1u8];
    varint(&mut s, zlen);
    s.extend_from_slice(frame);
    s
}

fn corrupt(delta: &[u8], needle: &str) {
    match patched(&[], delta) {
        Err(DeltaError::Corrupt(m)) if m.contains(needle) => {}
        Err(DeltaError::Truncated(w)) if w.contains(needle) => {}
        Ok(out) => panic!(
            "expected an error about {needle:?}, got {} bytes",
            out.len()
        ),
        Err(e) => panic!("expected an error about {needle:?}, got {e:?}"),
    }
}

#[test]
fn hostile_frames_get_clean_errors() {
    let lits = pseudo_text(10_000, 7);
    let good = zstd_frame(&lits, Some(lits.len() as u64));
    assert_eq!(
        patched(&[], &one_add(&lits, &zstd_seg(&good, good.len() as u64))).unwrap(),
        lits
    );
    // A frame declaring more than the commands need (a bomb): refused at parse.
    let big = vec![0u8; 1 << 20];
    let bomb = zstd_frame(&big, Some(big.len() as u64));
    corrupt(
        &one_add(&lits, &zstd_seg(&bomb, bomb.len() as u64)),
        "holds 1048576 bytes",
    );
    // No declared size.
    let no_size = zstd_frame(&lits, None);
    corrupt(
        &one_add(&lits, &zstd_seg(&no_size, no_size.len() as u64)),
        "declare",
    );
    // Truncated frames, cut anywhere, with the length saying so or not.
    for cut in [1, 5, good.len() / 2, good.len() - 1] {
        let short = &good[..cut];
        assert!(patched(&[], &one_add(&lits, &zstd_seg(short, cut as u64))).is_err());
        corrupt(
            &one_add(&lits, &zstd_seg(short, good.len() as u64)),
            "compressed literals",
        );
    }
    // A length beyond the input, and a huge one.
    corrupt(
        &one_add(&lits, &zstd_seg(&good, good.len() as u64 + 1)),
        "compressed literals",
    );
    corrupt(
        &one_add(&lits, &zstd_seg(&good, u64::MAX >> 1)),
        "compressed literals",
    );
    // Two frames where one is expected, and garbage.
    let two = [good.clone(), good.clone()].concat();
    corrupt(
        &one_add(&lits, &zstd_seg(&two, two.len() as u64)),
        "after the frame",
    );
    corrupt(
        &one_add(&lits, &zstd_seg(&[0xff; 40], 40)),
        "not a zstd frame",
    );
    // Unknown segment kind and literal coding.
    corrupt(&one_add(&lits, &[7]), "segment kind 7");
    let mut d = one_add(&lits, &zstd_seg(&good, good.len() as u64));
    let at = head(0, &lits, 1).len() + 3; // tag, two-byte length, coding
    d[at] = 9;
    corrupt(&d, "literal coding 9");
}

#[test]
fn a_wrong_dictionary_is_a_clean_error() {
    let old = pseudo_text(300_000, 8);
    let mut new = old.clone();
    new.splice(150_000..150_000, pseudo_text(30_000, 9));
    let (delta, _) = packed_delta(&old, &new);
    assert!(Delta::parse(&delta).unwrap().has_packed_literals());
    let other = pseudo_text(old.len(), 10);
    let e = patched(&other, &delta).unwrap_err();
    assert!(
        matches!(e, DeltaError::Corrupt(_) | DeltaError::ChecksumMismatch),
        "{e:?}"
    );
}

#[test]
fn compressed_literals_are_refused_in_place_and_across_segment_ends() {
    let lits = b"0123456789".to_vec();
    let frame = zstd_frame(&lits, Some(10));
    // In-place layout: 1 dst len, coding 1.
    let mut d = b"ACDL\x02\x01".to_vec();
    varint(&mut d, 0);
    varint(&mut d, 10);
    d.extend_from_slice(blake3::hash(&lits).as_bytes());
    varint(&mut d, 0);
    varint(&mut d, 1);
    d.extend_from_slice(&[1, 0, 10, 1]);
    d.extend_from_slice(&zstd_seg(&frame, frame.len() as u64));
    corrupt(&d, "in-place");
    // A sequential ADD across the first segment end (no bytes needed: the
    // commands are checked before the frames).
    let mut d = b"ACDL\x02\x00".to_vec();
    varint(&mut d, SEGMENT);
    varint(&mut d, SEGMENT + 10);
    d.extend_from_slice(&[0; 32]);
    varint(&mut d, 0);
    varint(&mut d, 2);
    d.push(0);
    varint(&mut d, 0);
    varint(&mut d, SEGMENT - 5);
    d.push(1);
    varint(&mut d, 15);
    d.push(1);
    assert!(matches!(Delta::parse(&d), Err(DeltaError::Corrupt(m)) if m.contains("segment end")));
}

#[test]
fn version_1_deltas_still_apply_and_unknown_versions_say_so() {
    let old = b"the old contents of a file".to_vec();
    let new = b"the new contents of a file!".to_vec();
    // Version 1: ADD bytes right after the command.
    let mut v1 = b"ACDL\x01\x00".to_vec();
    varint(&mut v1, old.len() as u64);
    varint(&mut v1, new.len() as u64);
    v1.extend_from_slice(blake3::hash(&new).as_bytes());
    varint(&mut v1, 0);
    varint(&mut v1, 1);
    v1.push(1);
    varint(&mut v1, new.len() as u64);
    v1.extend_from_slice(&new);
    assert_eq!(patched(&old, &v1).unwrap(), new);
    let mut v9 = v1.clone();
    v9[4] = 9;
    let e = Delta::parse(&v9).unwrap_err().to_string();
    assert!(
        e.contains("version 9") && e.contains("make the delta again"),
        "{e}"
    );
}

#[test]
fn raw_literal_encoding_still_round_trips_through_encode() {
    let new = b"literal bytes".to_vec();
    let h = Header {
        layout: Layout::Sequential,
        old_len: 0,
        new_len: new.len() as u64,
        result_hash: *blake3::hash(&new).as_bytes(),
        scratch_len: 0,
    };
    let cmds = [Command::Add {
        dst: 0,
        len: new.len() as u64,
        data: 0,
    }];
    let mut out = Vec::new();
    encode(&h, &cmds, &new, &mut out).unwrap();
    assert_eq!(patched(&[], &out).unwrap(), new);
}

/// Raw literals are written in format 1 byte for byte as before format 2
/// (what every accord reads), whatever the layout; compressed ones only
/// in format 2, and never in place.
#[test]
fn raw_literals_are_format_1_byte_for_byte() {
    let new = b"0123456789literal".to_vec();
    let h = Header {
        layout: Layout::Sequential,
        old_len: 10,
        new_len: new.len() as u64,
        result_hash: *blake3::hash(&new).as_bytes(),
        scratch_len: 0,
    };
    let cmds = [
        Command::Copy {
            src: 0,
            dst: 0,
            len: 10,
        },
        Command::Add {
            dst: 10,
            len: 7,
            data: 10,
        },
    ];
    let mut out = Vec::new();
    encode(&h, &cmds, &new, &mut out).unwrap();
    let mut v1 = b"ACDL\x01\x00".to_vec();
    varint(&mut v1, 10);
    varint(&mut v1, new.len() as u64);
    v1.extend_from_slice(blake3::hash(&new).as_bytes());
    v1.extend_from_slice(&[0, 2, 0, 0, 10, 1, 7]);
    v1.extend_from_slice(b"literal");
    assert_eq!(out, v1);

    let old = pseudo_text(300_000, 8);
    let mut new = old.clone();
    new.splice(100_000..100_000, pseudo_text(40_000, 9));
    let mut raw = Vec::new();
    make_delta(&sig_of(&old), &new, &DeltaOptions::default(), &mut raw).unwrap();
    assert_eq!(raw[4], 1, "raw literals: format 1");
    let (packed, _) = packed_delta(&old, &new);
    assert_eq!(packed[4], 2, "compressed literals: format 2");
    let opts = DeltaOptions {
        in_place: Some(InPlaceOptions::default()),
    };
    let mut in_place = Vec::new();
    let coding = LiteralCoding::Zstd { level: 3 };
    make_delta_with(&sig_of(&old), &new, &opts, coding, &mut in_place).unwrap();
    assert_eq!(in_place[4], 1, "in place: format 1");
}
