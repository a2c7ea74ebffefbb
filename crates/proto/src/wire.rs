//! Byte-level encoding of messages: LEB128 varints, length-prefixed byte
//! strings, and a reader over untrusted bytes that checks every length and
//! count against a bound and against what is really there before it
//! allocates anything.

use std::fmt;

/// Why a message could not be decoded. The session that received it ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProtoError {
    /// The message ended inside the named field.
    Truncated(&'static str),
    /// A length or count above its bound.
    TooLarge {
        what: &'static str,
        len: u64,
        max: u64,
    },
    /// A value that is not allowed.
    Invalid(String),
}

impl fmt::Display for ProtoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtoError::Truncated(what) => write!(f, "message ends inside {what}"),
            ProtoError::TooLarge { what, len, max } => {
                write!(f, "{what} of {len} is above the limit of {max}")
            }
            ProtoError::Invalid(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ProtoError {}

/// Builds one message.
#[derive(Default)]
pub struct Enc {
    pub buf: Vec<u8>,
}

impl Enc {
    pub fn new() -> Enc {
        Enc::default()
    }

    pub fn u8(&mut self, v: u8) -> &mut Enc {
        self.buf.push(v);
        self
    }

    pub fn bool(&mut self, v: bool) -> &mut Enc {
        self.u8(v as u8)
    }

    pub fn varint(&mut self, mut v: u64) -> &mut Enc {
        while v >= 0x80 {
            self.buf.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.buf.push(v as u8);
        self
    }

    /// A signed value, zigzag-encoded so small negative numbers stay short.
    pub fn svarint(&mut self, v: i64) -> &mut Enc {
        self.varint(((v << 1) ^ (v >> 63)) as u64)
    }

    pub fn bytes(&mut self, b: &[u8]) -> &mut Enc {
        self.varint(b.len() as u64);
        self.buf.extend_from_slice(b);
        self
    }

    pub fn str(&mut self, s: &str) -> &mut Enc {
        self.bytes(s.as_bytes())
    }

    pub fn raw(&mut self, b: &[u8]) -> &mut Enc {
        self.buf.extend_from_slice(b);
        self
    }

    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// A cursor over untrusted bytes.
pub struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Dec<'a> {
    pub fn new(buf: &'a [u8]) -> Dec<'a> {
        Dec { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// What is left, consumed.
    pub fn rest(&mut self) -> &'a [u8] {
        let r = &self.buf[self.pos..];
        self.pos = self.buf.len();
        r
    }

    pub fn raw(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
        if n > self.remaining() {
            return Err(ProtoError::Truncated(what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, ProtoError> {
        Ok(self.raw(1, what)?[0])
    }

    pub fn bool(&mut self, what: &'static str) -> Result<bool, ProtoError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(ProtoError::Invalid(format!("{what}: {v} is not a boolean"))),
        }
    }

    pub fn varint(&mut self, what: &'static str) -> Result<u64, ProtoError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8(what)?;
            let bits = (b & 0x7f) as u64;
            if shift == 63 && bits > 1 {
                return Err(ProtoError::Invalid(format!("{what}: varint overflows")));
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ProtoError::Invalid(format!("{what}: varint too long")))
    }

    pub fn svarint(&mut self, what: &'static str) -> Result<i64, ProtoError> {
        let v = self.varint(what)?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// A varint no larger than `max`.
    pub fn bounded(&mut self, max: u64, what: &'static str) -> Result<u64, ProtoError> {
        let v = self.varint(what)?;
        if v > max {
            return Err(ProtoError::TooLarge { what, len: v, max });
        }
        Ok(v)
    }

    pub fn u32(&mut self, what: &'static str) -> Result<u32, ProtoError> {
        Ok(self.bounded(u32::MAX as u64, what)? as u32)
    }

    /// A count of items that each take at least `min_item` bytes: bounded
    /// by `max` and by what the message still holds, so a claimed count
    /// never makes us reserve memory the message cannot fill.
    pub fn count(
        &mut self,
        max: u64,
        min_item: usize,
        what: &'static str,
    ) -> Result<usize, ProtoError> {
        let n = self.bounded(max, what)?;
        if n.saturating_mul(min_item.max(1) as u64) > self.remaining() as u64 {
            return Err(ProtoError::Truncated(what));
        }
        Ok(n as usize)
    }

    /// A length-prefixed byte string of at most `max` bytes.
    pub fn bytes(&mut self, max: usize, what: &'static str) -> Result<&'a [u8], ProtoError> {
        let n = self.bounded(max as u64, what)? as usize;
        self.raw(n, what)
    }

    pub fn string(&mut self, max: usize, what: &'static str) -> Result<String, ProtoError> {
        let b = self.bytes(max, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| ProtoError::Invalid(format!("{what}: not UTF-8")))
    }

    /// Text from the other side that will be shown to a person (an error
    /// message, a refusal, a root's name): UTF-8 of at most `max` bytes,
    /// with every control character escaped (see `printable`).
    pub fn text(&mut self, max: usize, what: &'static str) -> Result<String, ProtoError> {
        Ok(printable(&self.string(max, what)?))
    }

    pub fn end(&self, what: &'static str) -> Result<(), ProtoError> {
        if self.remaining() != 0 {
            return Err(ProtoError::Invalid(format!(
                "{} unexpected bytes after {what}",
                self.remaining()
            )));
        }
        Ok(())
    }
}

/// `s` with each control character (C0, DEL and C1, newlines included)
/// shown as `\xNN` per byte: a peer's text can neither drive a terminal
/// nor forge a line of our output.
pub fn printable(s: &str) -> String {
    use std::fmt::Write;
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 16);
    for ch in s.chars() {
        if ch.is_control() {
            let mut buf = [0u8; 4];
            for b in ch.encode_utf8(&mut buf).as_bytes() {
                let _ = write!(out, "\\x{b:02x}");
            }
        } else {
            out.push(ch);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varints_round_trip(v: u64, s: i64) {
            let mut e = Enc::new();
            e.varint(v).svarint(s);
            let b = e.finish();
            let mut d = Dec::new(&b);
            prop_assert_eq!(d.varint("v").unwrap(), v);
            prop_assert_eq!(d.svarint("s").unwrap(), s);
            prop_assert!(d.end("t").is_ok());
        }
    }

    /// Issue 11: text from a peer keeps no control character.
    #[test]
    fn issue_11_peer_text_is_printable() {
        let mut e = Enc::new();
        e.str("a\x1b[2J\nb\u{9b}c\\d\u{7f}");
        let b = e.finish();
        let t = Dec::new(&b).text(100, "t").unwrap();
        assert_eq!(t, "a\\x1b[2J\\x0ab\\xc2\\x9bc\\d\\x7f");
        assert!(!t.chars().any(char::is_control));
    }

    #[test]
    fn a_claimed_count_beyond_the_message_is_refused() {
        let mut e = Enc::new();
        e.varint(1 << 40);
        let b = e.finish();
        assert!(Dec::new(&b).count(u64::MAX, 1, "n").is_err());
        assert!(Dec::new(&b).bytes(1 << 20, "b").is_err());
    }
}
