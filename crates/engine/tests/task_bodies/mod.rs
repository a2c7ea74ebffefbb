//! The bodies of the task decoders' fuzz targets, shared word for word by
//! the cargo-fuzz targets (`crates/engine/fuzz`, which include this file)
//! and the property tests of the stable suite (`tests/task_decoders.rs`).
//! Each takes any bytes as they could come from a Redis anybody on the
//! network may write to: decoding ends in a value or an error, never a
//! panic, and whatever decodes survives being encoded and decoded again.
#![allow(dead_code)]

use accord_engine::tasks::Task;
use accord_engine::RunSpec;

pub fn task(data: &[u8]) {
    if let Ok(t) = Task::decode(data) {
        let _ = (t.kind(), t.paths());
        let again = Task::decode(&t.encode()).expect("a decoded task re-encodes");
        assert_eq!(again, t);
    }
}

pub fn spec(data: &[u8]) {
    if let Ok(s) = RunSpec::decode(data) {
        let bytes = s.encode();
        let again = RunSpec::decode(&bytes).expect("decoded settings re-encode");
        assert_eq!(again.encode(), bytes);
    }
}
