//! Property tests of the compressed stream's decoding (`-z`): the bodies of
//! its fuzz target, on random and on real-but-edited streams.

mod compress_bodies;

use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn hostile_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
        compress_bodies::frames(&data);
    }

    #[test]
    fn edited_streams_never_panic(
        seed in proptest::collection::vec(any::<u8>(), 0..3000),
        at in any::<usize>(),
        to in any::<u8>(),
    ) {
        compress_bodies::edited(&seed, at, to);
    }

    #[test]
    fn frames_round_trip(seed in proptest::collection::vec(any::<u8>(), 0..3000)) {
        compress_bodies::round_trip(&seed);
    }
}

/// A zstd frame that declares a window far above the limit is refused,
/// not decoded into a large buffer.
#[test]
fn a_huge_window_is_refused() {
    // Frame header: magic, a descriptor without content size, a window
    // descriptor of 16 MiB (exponent 14), then an empty raw last block:
    // a valid frame that zstd's own default limit (128 MiB) would decode.
    let mut data = vec![0x28, 0xB5, 0x2F, 0xFD, 0x00, 14 << 3];
    data.extend_from_slice(&[0x01, 0x00, 0x00]);
    let mut r =
        accord_remote::compress::ZstdReader::new(Box::new(std::io::Cursor::new(data))).unwrap();
    let mut buf = [0u8; 16];
    assert!(std::io::Read::read(&mut r, &mut buf).is_err());
}
