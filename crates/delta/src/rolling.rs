//! The weak rolling checksum: a polynomial (Rabin-Karp) hash modulo 2^32.
//!
//! `h(x_0..x_n) = Σ (x_i + OFFSET) · B^(n-1-i)`. Rolling by one byte costs one
//! multiply-add pair, and a whole block is hashed with four independent lanes
//! so the multiply latency is hidden. The byte offset keeps runs of zeros from
//! hashing to zero, which would make a zero block collide with every run of a
//! constant byte whose count of factors of two is high enough.

/// The multiplier (the one librsync's RabinKarp sum uses; any odd constant with
/// well-spread bits works).
pub const MULT: u32 = 0x0810_4225;
const OFFSET: u32 = 31;

/// `base^exp` modulo 2^32.
pub fn pow(mut base: u32, mut exp: u64) -> u32 {
    let mut acc: u32 = 1;
    while exp > 0 {
        if exp & 1 == 1 {
            acc = acc.wrapping_mul(base);
        }
        base = base.wrapping_mul(base);
        exp >>= 1;
    }
    acc
}

/// Hash of a whole block.
pub fn weak(data: &[u8]) -> u32 {
    let head = data.len() % 4;
    let mut h: u32 = 0;
    for &b in &data[..head] {
        h = h.wrapping_mul(MULT).wrapping_add(b as u32 + OFFSET);
    }
    let body = &data[head..];
    if body.is_empty() {
        return h;
    }
    let m4 = pow(MULT, 4);
    let mut lanes = [0u32; 4];
    for c in body.chunks_exact(4) {
        for r in 0..4 {
            lanes[r] = lanes[r].wrapping_mul(m4).wrapping_add(c[r] as u32 + OFFSET);
        }
    }
    let m2 = MULT.wrapping_mul(MULT);
    let m3 = m2.wrapping_mul(MULT);
    let body_hash = lanes[0]
        .wrapping_mul(m3)
        .wrapping_add(lanes[1].wrapping_mul(m2))
        .wrapping_add(lanes[2].wrapping_mul(MULT))
        .wrapping_add(lanes[3]);
    h.wrapping_mul(pow(MULT, body.len() as u64))
        .wrapping_add(body_hash)
}

/// Rolls a window of fixed length one byte forward.
#[derive(Clone, Copy)]
pub struct Roller {
    /// `MULT^len`: the weight the outgoing byte had when it entered.
    out_weight: u32,
}

impl Roller {
    pub fn new(window_len: usize) -> Self {
        Roller {
            out_weight: pow(MULT, window_len as u64),
        }
    }

    /// The hash of the window moved one byte on: `out` leaves, `inb` enters.
    #[inline(always)]
    pub fn roll(&self, h: u32, out: u8, inb: u8) -> u32 {
        h.wrapping_mul(MULT)
            .wrapping_add(inb as u32 + OFFSET)
            .wrapping_sub((out as u32 + OFFSET).wrapping_mul(self.out_weight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(data: &[u8]) -> u32 {
        data.iter().fold(0u32, |h, &b| {
            h.wrapping_mul(MULT).wrapping_add(b as u32 + OFFSET)
        })
    }

    #[test]
    fn lanes_agree_with_horner() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7919 % 251) as u8).collect();
        for len in [0, 1, 2, 3, 4, 5, 7, 8, 63, 64, 999, 1000] {
            assert_eq!(weak(&data[..len]), naive(&data[..len]), "len {len}");
        }
    }

    #[test]
    fn rolling_agrees_with_recomputing() {
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let w = 701;
        let r = Roller::new(w);
        let mut h = weak(&data[..w]);
        for p in 1..(data.len() - w) {
            h = r.roll(h, data[p - 1], data[p + w - 1]);
            assert_eq!(h, weak(&data[p..p + w]), "pos {p}");
        }
    }

    #[test]
    fn zero_block_differs_from_constant_blocks() {
        for len in [512usize, 1024, 2048, 4096, 8192, 65536, 131072] {
            let z = weak(&vec![0u8; len]);
            for c in [0x80u8, 0x40, 0xff, 1] {
                assert_ne!(z, weak(&vec![c; len]), "len {len} byte {c:#x}");
            }
        }
    }
}
