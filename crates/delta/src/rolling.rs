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
    #[cfg(target_arch = "x86_64")]
    {
        if data.len() >= 256 && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { weak_avx2(data) };
        }
    }
    weak_lanes::<4>(data)
}

/// The same sum with 16 lanes, compiled for AVX2 so the lanes become vector
/// multiplies.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn weak_avx2(data: &[u8]) -> u32 {
    weak_lanes::<16>(data)
}

/// `L` independent Horner chains over bytes `i ≡ r (mod L)`, combined at the end.
#[inline(always)]
fn weak_lanes<const L: usize>(data: &[u8]) -> u32 {
    let head = data.len() % L;
    let mut h: u32 = 0;
    for &b in &data[..head] {
        h = h.wrapping_mul(MULT).wrapping_add(b as u32 + OFFSET);
    }
    let body = &data[head..];
    if body.is_empty() {
        return h;
    }
    let ml = pow(MULT, L as u64);
    let mut lanes = [0u32; L];
    for c in body.chunks_exact(L) {
        for r in 0..L {
            lanes[r] = lanes[r].wrapping_mul(ml).wrapping_add(c[r] as u32 + OFFSET);
        }
    }
    let mut body_hash: u32 = 0;
    for lane in lanes {
        body_hash = body_hash.wrapping_mul(MULT).wrapping_add(lane);
    }
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
        for len in [
            0, 1, 2, 3, 4, 5, 7, 8, 63, 64, 255, 256, 257, 300, 999, 1000,
        ] {
            assert_eq!(weak(&data[..len]), naive(&data[..len]), "len {len}");
            assert_eq!(
                weak_lanes::<4>(&data[..len]),
                naive(&data[..len]),
                "len {len}"
            );
            assert_eq!(
                weak_lanes::<16>(&data[..len]),
                naive(&data[..len]),
                "len {len}"
            );
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
