//! Hostile bytes for every decoder of the daemon's transport: the Noise
//! handshake on both sides, the encrypted stream after it (forged, or a
//! real one edited on the way), and the root a client asks for. The fuzz
//! targets in `fuzz/` run the same bodies (`tests/daemon_bodies`).

mod daemon_bodies;

use proptest::prelude::*;

/// Bytes that start like the real thing now and then: a first handshake
/// message of the one right length, or a transport message's length.
fn hostile() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..512),
        proptest::collection::vec(any::<u8>(), 32..200).prop_map(|mut v| {
            v.splice(0..0, [0u8, 32]);
            v
        }),
        (any::<u16>(), proptest::collection::vec(any::<u8>(), 0..300)).prop_map(|(len, mut v)| {
            v.splice(0..0, len.to_be_bytes());
            v
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    #[test]
    fn noise_handshake_server(data in hostile()) { daemon_bodies::handshake_server(&data) }
    #[test]
    fn noise_handshake_client(data in hostile()) { daemon_bodies::handshake_client(&data) }
    #[test]
    fn noise_transport(pick in any::<u8>(), data in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let mut input = vec![pick];
        input.extend_from_slice(&data);
        daemon_bodies::transport(&input)
    }
    #[test]
    fn module_root(data in proptest::collection::vec(prop_oneof![Just(b'/'), Just(b'.'), Just(b'a'), any::<u8>()], 0..40)) {
        daemon_bodies::module_root(&data)
    }
}

/// The cases the transport body exists for, each at least once.
#[test]
fn every_edit_of_a_real_stream_is_caught() {
    let plain: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
    for pick in 0..=255u8 {
        let mut input = vec![pick];
        input.extend_from_slice(&plain);
        daemon_bodies::transport(&input);
    }
}
