//! A delta's second round: a gap request from any bytes, then a fine
//! signature from any bytes read against it. Neither may panic or allocate
//! beyond what the bytes present justify; what decodes survives a round
//! trip through its encoder.
#![no_main]
use accord_delta::fine::{FineSignature, GapRequest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte splits the input between the two messages.
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let (req, sig) = rest.split_at((cut as usize).min(rest.len()));
    let Ok(req_decoded) = GapRequest::decode(req) else {
        return;
    };
    assert_eq!(GapRequest::decode(&req_decoded.encode()).unwrap(), req_decoded);
    if let Ok(fine) = FineSignature::decode(sig, &req_decoded) {
        let again = FineSignature::decode(&fine.encode(), &req_decoded).unwrap();
        assert_eq!(again, fine);
    }
});
