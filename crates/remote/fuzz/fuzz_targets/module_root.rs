#![no_main]
//! The root a client asks a daemon for: the path inside its module never climbs out.
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/daemon_bodies/mod.rs"]
mod daemon_bodies;

fuzz_target!(|data: &[u8]| daemon_bodies::module_root(data));
