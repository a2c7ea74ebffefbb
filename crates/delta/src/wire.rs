//! Byte-level encoding shared by signatures and deltas: LEB128 varints and a
//! bounds-checked reader that never allocates more than it has seen.

use crate::DeltaError;

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A cursor over untrusted bytes; every read says what was being read when it fails.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub fn position(&self) -> usize {
        self.pos
    }

    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], DeltaError> {
        if n > self.remaining() {
            return Err(DeltaError::Truncated(what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn u8(&mut self, what: &'static str) -> Result<u8, DeltaError> {
        Ok(self.bytes(1, what)?[0])
    }

    pub fn u32_le(&mut self, what: &'static str) -> Result<u32, DeltaError> {
        let b = self.bytes(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn varint(&mut self, what: &'static str) -> Result<u64, DeltaError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8(what)?;
            let bits = (b & 0x7f) as u64;
            if shift == 63 && bits > 1 {
                return Err(DeltaError::Corrupt(format!(
                    "{what}: varint overflows 64 bits"
                )));
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DeltaError::Corrupt(format!("{what}: varint too long")))
    }

    pub fn expect_end(&self, what: &'static str) -> Result<(), DeltaError> {
        if self.remaining() != 0 {
            return Err(DeltaError::Corrupt(format!(
                "{} unexpected bytes after the {what}",
                self.remaining()
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_reject_overflow() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(Reader::new(&out).varint("v").unwrap(), v);
        }
        let bad = [0xffu8; 11];
        assert!(Reader::new(&bad).varint("v").is_err());
        let truncated = [0x80u8];
        assert!(matches!(
            Reader::new(&truncated).varint("v"),
            Err(DeltaError::Truncated(_))
        ));
    }
}
