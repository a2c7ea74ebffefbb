#![no_main]
//! `msg::decode_case_probe`: a case probe's reply: any bytes decode to a value or an error, never
//! a panic; what decodes round-trips.
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/bodies/mod.rs"]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::case_probe(data));
