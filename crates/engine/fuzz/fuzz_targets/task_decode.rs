#![no_main]
//! A task run's task decoder: any bytes decode to a value or an error, never a
//! panic; what decodes round-trips.
use libfuzzer_sys::fuzz_target;

#[path = "../../tests/task_bodies/mod.rs"]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::task(data));
