#![no_main]
//! Any bytes: decoding a signature never panics, and a decoded one can be used.
use accord_delta::{make_delta, DeltaOptions, Signature};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(sig) = Signature::decode(data) {
        let _ = make_delta(&sig, b"new data to scan against the signature", &DeltaOptions::default(), &mut std::io::sink());
    }
});
