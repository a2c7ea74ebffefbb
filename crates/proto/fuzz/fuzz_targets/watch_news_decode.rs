#![no_main]
//! `WatchNews::decode`: a `--watch` server's answer: any bytes decode to a value or an error,
//! never a panic; what decodes round-trips.
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/bodies/mod.rs"]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::watch_news(data));
