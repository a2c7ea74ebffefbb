#![no_main]
//! The encrypted stream after the handshake, forged or a real one edited: never a panic, never a byte that was not sent, every edit an error.
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/daemon_bodies/mod.rs"]
mod daemon_bodies;

fuzz_target!(|data: &[u8]| daemon_bodies::transport(data));
