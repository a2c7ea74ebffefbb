//! The bodies of the protocol's fuzz targets, shared word for word by the
//! cargo-fuzz targets (`crates/proto/fuzz`, which include this file) and the
//! property tests of the stable suite (`tests/decoders.rs`). Each takes any
//! bytes as they could come from a hostile peer: decoding must end in a
//! value or an error, never a panic, and whatever decodes must survive being
//! encoded and decoded again unchanged.
#![allow(dead_code)]

use accord_model::RelPath;
use accord_proto::codec::{get_failures, get_listing, put_failures, put_listing};
use accord_proto::frame::{parse_credit, read_frame, FrameKind};
use accord_proto::msg::{decode_case_probe, encode_case_probe};
use accord_proto::msg::{decode_found, decode_vouched, encode_found, encode_vouched};
use accord_proto::{Dec, Enc, Hello, Request, WatchNews, Welcome, WireError};

pub fn request(data: &[u8]) {
    if let Ok(r) = Request::decode(data) {
        let _ = (r.has_body(), r.writes(), r.name());
        let again = Request::decode(&r.encode()).expect("a decoded request re-encodes");
        assert_eq!(again, r);
    }
}

/// The handshake's body decoder, and its framed reader over the same bytes
/// (magic, length, body: a peer that is not accord, or lies about length).
pub fn hello(data: &[u8]) {
    if let Ok(h) = Hello::decode(data) {
        let mut framed = Vec::new();
        h.write(&mut framed).unwrap();
        assert_eq!(Hello::read(&mut &framed[..]).expect("re-read"), h);
    }
    let _ = Hello::read(&mut &data[..]);
}

pub fn welcome(data: &[u8]) {
    if let Ok(w) = Welcome::decode(data) {
        let mut framed = Vec::new();
        w.write(&mut framed).unwrap();
        assert_eq!(Welcome::read(&mut &framed[..]).expect("re-read"), w);
    }
    let _ = Welcome::read(&mut &data[..]);
}

pub fn wire_error(data: &[u8]) {
    if let Ok(e) = WireError::decode(data) {
        assert_eq!(WireError::decode(&e.encode()).expect("re-decode"), e);
    }
}

/// `WatchNews::decode`: what decodes re-decodes to itself from its own
/// encoding (a reason is escaped for display and bounded on the way in).
pub fn watch_news(data: &[u8]) {
    if let Ok(n) = WatchNews::decode(data) {
        assert_eq!(WatchNews::decode(&n.encode()).expect("re-decode"), n);
    }
}

/// A listing of a fixed directory: whatever decodes holds only that
/// directory's own entry and its children (the decoder's promise), and
/// re-encodes to the same bytes' meaning. The first byte picks the
/// directory, so the root and a nested one are both exercised.
pub fn listing(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let dir = if pick & 1 == 0 {
        RelPath::root()
    } else {
        RelPath::new(b"a/b").unwrap()
    };
    let mut d = Dec::new(rest);
    if let Ok(l) = get_listing(&mut d, &dir) {
        assert!(l.entries.first().is_some_and(|e| e.path == dir));
        for e in l.entries.iter().skip(1).chain(&l.subdirs) {
            assert_eq!(e.path.parent().as_ref(), Some(&dir));
        }
        let mut e = Enc::new();
        put_listing(&mut e, &l);
        let bytes = e.finish();
        let again = get_listing(&mut Dec::new(&bytes), &dir).expect("re-decode");
        assert_eq!(again.entries, l.entries);
        assert_eq!(again.subdirs, l.subdirs);
        assert_eq!(again.stale_temps, l.stale_temps);
        assert_eq!(again.markers, l.markers);
    }
    if let Ok(f) = get_failures(&mut Dec::new(rest)) {
        let mut e = Enc::new();
        put_failures(&mut e, &f);
        let bytes = e.finish();
        assert_eq!(get_failures(&mut Dec::new(&bytes)).expect("re-decode"), f);
    }
}

/// Frames read one after another from a stream of any bytes, as the
/// connection's reader does, until the end or the first error.
pub fn frames(data: &[u8]) {
    let mut r = data;
    // Every frame takes at least its 9-byte header, so this always ends.
    while let Ok(Some(f)) = read_frame(&mut r) {
        assert!(f.payload.len() <= accord_proto::frame::MAX_PAYLOAD);
        if f.kind == FrameKind::Credit {
            let _ = parse_credit(&f.payload);
        }
    }
}

pub fn found(data: &[u8]) {
    if let Ok(f) = decode_found(data) {
        assert_eq!(
            decode_found(&encode_found(f.as_ref())).expect("re-decode"),
            f
        );
    }
}

pub fn case_probe(data: &[u8]) {
    if let Ok(p) = decode_case_probe(data) {
        assert_eq!(
            decode_case_probe(&encode_case_probe(&p)).expect("re-decode"),
            p
        );
    }
}

pub fn vouched(data: &[u8]) {
    if let Ok(v) = decode_vouched(data) {
        assert_eq!(
            decode_vouched(&encode_vouched(v.as_ref())).expect("re-decode"),
            v
        );
    }
}
