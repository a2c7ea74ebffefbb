//! Measures where a delta's bytes go on one pair of files, and what a
//! second, finer round over the unmatched regions would save:
//! `cargo run --release -p accord-delta --example rounds OLD NEW`.
//!
//! Round 1 is the wire's (a verified signature of the whole old file).
//! Round 2 signs only the old file's bytes between two neighbouring
//! matches (the gap a literal run replaces) at a smaller block, and scans
//! only the literal run against it. The figures: signature bytes, literal
//! bytes, and the literals compressed plain, against the matched bytes
//! (what both sides hold) and against the old gaps (what only the
//! receiver holds: the bound no sender without the old file can reach).

use accord_delta::{make_delta, Command, Delta, DeltaOptions, Signature, SignatureOptions};
use zstd::bulk::Compressor;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let old = std::fs::read(&args[1]).expect("old file");
    let new = std::fs::read(&args[2]).expect("new file");
    let (sig1, runs) = round_one(&old, &new);
    let sig1_bytes = sig1.encode().len();
    let lit: Vec<u8> = runs
        .iter()
        .flat_map(|r| new[r.new.0..r.new.1].to_vec())
        .collect();
    let gaps: Vec<u8> = runs
        .iter()
        .flat_map(|r| old[r.old.0..r.old.1].to_vec())
        .collect();
    let matched = matched_bytes(&new, &runs);
    println!(
        "round 1: block {} strong {} signature {sig1_bytes} B, {} literal runs, literal {} B, old gaps {} B",
        sig1.block_len,
        sig1.strong_len,
        runs.len(),
        lit.len(),
        gaps.len()
    );
    for level in [3, 9, 19] {
        println!(
            "  zstd {level}: literals plain {}, against matched {}, against old gaps {}",
            pack(&lit, &[], level),
            pack(&lit, &matched, level),
            pack(&lit, &gaps, level)
        );
    }
    if std::env::var_os("ROUNDS_SWEEP").is_some() {
        for block in [1024u32, 512, 256, 128, 64, 32] {
            for strong in [2u8, 3, 4] {
                round_two(&old, &new, &runs, block, strong, sig1_bytes);
            }
        }
    }
    two_rounds(&old, &new, &sig1);
}

/// The library's two rounds, as the wire runs them: the bytes of each
/// message and of the delta, raw and compressed at levels 3 and 9.
fn two_rounds(old: &[u8], new: &[u8], sig1: &Signature) {
    use accord_delta::fine::{refine, FineSignature, GapRequest};
    use accord_delta::{make_delta_with, LiteralCoding};
    for coding in [
        LiteralCoding::Raw,
        LiteralCoding::Zstd { level: 3 },
        LiteralCoding::Zstd { level: 9 },
    ] {
        let mut first = Vec::new();
        make_delta_with(sig1, new, &DeltaOptions::default(), coding, &mut first).unwrap();
        let d1 = Delta::parse(&first).unwrap();
        let Some(req) = GapRequest::for_delta(&d1) else {
            println!("{coding:?}: no second round");
            continue;
        };
        let req_bytes = req.encode();
        let fine = FineSignature::generate(old, &GapRequest::decode(&req_bytes).unwrap()).unwrap();
        let fine_bytes = fine.encode();
        let fine = FineSignature::decode(&fine_bytes, &req).unwrap();
        let mut second = Vec::new();
        let st = refine(&d1, &fine, new, coding, &mut second).unwrap();
        let mut rebuilt = Vec::new();
        accord_delta::patch_to(old, &Delta::parse(&second).unwrap(), &mut rebuilt).unwrap();
        assert!(rebuilt == new, "the refined delta rebuilds the new file");
        let sig1_len = sig1.encode().len();
        println!(
            "{coding:?}: round 1 signature {sig1_len} B, delta {} B; gap request {} B ({} gaps, block {}), fine signature {} B, refined delta {} B (literal {} B); total {} B",
            first.len(),
            req_bytes.len(),
            req.gaps.len(),
            req.block_len,
            fine_bytes.len(),
            second.len(),
            st.literal_bytes,
            sig1_len + req_bytes.len() + fine_bytes.len() + second.len()
        );
    }
}

/// One literal run of the new file and the old bytes between the matches
/// on either side of it (empty when the matches are not in order).
struct Run {
    new: (usize, usize),
    old: (usize, usize),
}

fn round_one(old: &[u8], new: &[u8]) -> (Signature, Vec<Run>) {
    let opts = SignatureOptions {
        verified: true,
        ..SignatureOptions::default()
    };
    let sig = Signature::generate(old, &opts).unwrap();
    let mut out = Vec::new();
    make_delta(&sig, new, &DeltaOptions::default(), &mut out).unwrap();
    let delta = Delta::parse(&out).unwrap();
    (sig, runs_of(&delta.commands, old.len()))
}

fn runs_of(commands: &[Command], old_len: usize) -> Vec<Run> {
    let mut runs = Vec::new();
    let mut old_end = 0usize;
    let mut pending: Option<(usize, usize)> = None;
    for c in commands {
        match *c {
            Command::Copy { src, dst: _, len } => {
                if let Some(n) = pending.take() {
                    let o = if (src as usize) >= old_end {
                        (old_end, src as usize)
                    } else {
                        (0, 0)
                    };
                    runs.push(Run { new: n, old: o });
                }
                old_end = (src + len) as usize;
            }
            Command::Add { dst, len, .. } => {
                let n = (dst as usize, (dst + len) as usize);
                pending = Some(match pending {
                    Some((a, _)) => (a, n.1),
                    None => n,
                });
            }
            _ => unreachable!("sequential delta"),
        }
    }
    if let Some(n) = pending {
        runs.push(Run {
            new: n,
            old: (old_end.min(old_len), old_len),
        });
    }
    runs
}

fn matched_bytes(new: &[u8], runs: &[Run]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut at = 0;
    for r in runs {
        out.extend_from_slice(&new[at..r.new.0]);
        at = r.new.1;
    }
    out.extend_from_slice(&new[at..]);
    out
}

/// Round 2 at `block`: signatures of the old gaps only, each literal run
/// scanned against its own gap's.
fn round_two(old: &[u8], new: &[u8], runs: &[Run], block: u32, strong: u8, sig1: usize) {
    let mut sig_bytes = 0usize;
    let mut lit = Vec::new();
    let mut matched = Vec::new();
    for r in runs {
        let gap = &old[r.old.0..r.old.1];
        let run = &new[r.new.0..r.new.1];
        if gap.len() < block as usize {
            lit.extend_from_slice(run);
            continue;
        }
        let opts = SignatureOptions {
            block_len: Some(block),
            strong_len: Some(strong),
            verified: true,
            ..SignatureOptions::default()
        };
        let sig = Signature::generate(gap, &opts).unwrap();
        sig_bytes += sig.block_count() * (4 + strong as usize);
        let mut out = Vec::new();
        make_delta(&sig, run, &DeltaOptions::default(), &mut out).unwrap();
        let d = Delta::parse(&out).unwrap();
        for c in &d.commands {
            match *c {
                Command::Add { dst, len, .. } => {
                    lit.extend_from_slice(&run[dst as usize..(dst + len) as usize])
                }
                Command::Copy { dst, len, .. } => {
                    matched.extend_from_slice(&run[dst as usize..(dst + len) as usize])
                }
                _ => {}
            }
        }
    }
    let l3 = pack(&lit, &[], 3);
    let l9 = pack(&lit, &[], 9);
    println!(
        "round 2 block {block} strong {strong}: signature {sig_bytes} B, literal {} B, zstd 3 {l3} 9 {l9}; total with round 1 at 3: {}, at 9: {}",
        lit.len(),
        sig1 + sig_bytes + l3,
        sig1 + sig_bytes + l9
    );
}

fn pack(data: &[u8], dict: &[u8], level: i32) -> usize {
    let mut c = if dict.is_empty() {
        Compressor::new(level).unwrap()
    } else {
        Compressor::with_dictionary(level, dict).unwrap()
    };
    c.set_parameter(zstd::zstd_safe::CParameter::WindowLog(27))
        .unwrap();
    c.compress(data).unwrap().len()
}
