#![no_main]
//! A compressed connection's input (`-z`), hostile: through the zstd reader and the frame reader as a connection reads it; never a panic, never a frame above the limit.
use libfuzzer_sys::fuzz_target;

// The property tests use the module's other bodies; this target one.
#[allow(dead_code)]
#[path = "../../tests/compress_bodies/mod.rs"]
mod compress_bodies;

fuzz_target!(|data: &[u8]| compress_bodies::frames(data));
