#![no_main]
//! The bodies of the two-way sync's requests and replies (a scan's
//! outcome, a lookup's paths, the archive's records): no panic, no large
//! allocation, whatever the bytes; what decodes encodes back the same.
use accord_remote::sync_wire::{
    decode_paths, decode_records, encode_paths, encode_records, get_outcome, get_side_scan,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    match which % 3 {
        0 => {
            let _ = get_outcome(body, get_side_scan);
        }
        1 => {
            if let Ok(paths) = decode_paths(body) {
                assert_eq!(decode_paths(&encode_paths(&paths)).unwrap(), paths);
            }
        }
        _ => {
            if let Ok(records) = decode_records(body) {
                assert_eq!(decode_records(&encode_records(&records)).unwrap(), records);
            }
        }
    }
});
