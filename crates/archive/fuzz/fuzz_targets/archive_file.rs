#![no_main]
//! Any bytes as an archive file: opened and read without a panic, every
//! entry read back valid, damage reported as damage.
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/bodies/mod.rs"]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::archive_file(data));
