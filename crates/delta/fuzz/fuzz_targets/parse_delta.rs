#![no_main]
//! Any bytes: parsing never panics; whatever parses applies or fails cleanly.
use accord_delta::{patch_in_place, patch_to, Delta, PatchOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let old: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    if let Ok(d) = Delta::parse(data) {
        let _ = patch_to(&old, &d, &mut std::io::sink());
        let mut target = old.clone();
        let _ = patch_in_place(&mut target, &d, &PatchOptions { max_scratch: 1 << 16, sync: false });
    }
});
