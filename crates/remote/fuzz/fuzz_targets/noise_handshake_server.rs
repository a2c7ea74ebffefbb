#![no_main]
//! The daemon's side of the Noise handshake against any bytes: an error, never a panic, never a session.
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/daemon_bodies/mod.rs"]
mod daemon_bodies;

fuzz_target!(|data: &[u8]| daemon_bodies::handshake_server(data));
