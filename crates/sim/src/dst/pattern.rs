//! Self-describing sector contents: every 512-byte sector a test writes names its volume,
//! its write (version) and its sector, and the rest is derived from those, so a read tells
//! exactly which write it returned, whose data it is, or that it is device garbage.

pub const SECTOR: usize = 512;
const DATA_MAGIC: &[u8; 8] = b"TVDSTSEC";
const GARBAGE_MAGIC: &[u8; 8] = b"GARBAGE!";

fn fill(seed: u64, out: &mut [u8]) {
    let mut x = seed | 1;
    for c in out.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
    }
}

fn mix(a: u64, b: u64, c: u64) -> u64 {
    let mut h = a.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ b.rotate_left(21) ^ c.rotate_left(42);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// The bytes version `id` of volume `vol` puts in `sector`.
pub fn sector_data(vol: u32, id: u64, sector: u64, out: &mut [u8]) {
    debug_assert_eq!(out.len(), SECTOR);
    out[..8].copy_from_slice(DATA_MAGIC);
    out[8..12].copy_from_slice(&vol.to_le_bytes());
    out[12..16].copy_from_slice(&[0; 4]);
    out[16..24].copy_from_slice(&id.to_le_bytes());
    out[24..32].copy_from_slice(&sector.to_le_bytes());
    fill(mix(vol as u64, id, sector), &mut out[32..]);
}

/// What a device holds before anything is written: recognisable garbage.
pub fn garbage(pool: u16, dev_sector: u64, out: &mut [u8]) {
    out[..8].copy_from_slice(GARBAGE_MAGIC);
    fill(mix(0xBAD, pool as u64, dev_sector), &mut out[8..]);
}

/// What a sector read back is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    Zeros,
    Data {
        vol: u32,
        id: u64,
        sector: u64,
    },
    /// Bytes never written by the test (device garbage, or torn/corrupt data).
    Garbage,
}

pub fn decode(b: &[u8]) -> Seen {
    if b.iter().all(|&x| x == 0) {
        return Seen::Zeros;
    }
    if &b[..8] != DATA_MAGIC {
        return Seen::Garbage;
    }
    let vol = u32::from_le_bytes(b[8..12].try_into().unwrap_or_default());
    let id = u64::from_le_bytes(b[16..24].try_into().unwrap_or_default());
    let sector = u64::from_le_bytes(b[24..32].try_into().unwrap_or_default());
    let mut expect = [0u8; SECTOR];
    sector_data(vol, id, sector, &mut expect);
    if expect[..] == b[..SECTOR] {
        Seen::Data { vol, id, sector }
    } else {
        Seen::Garbage
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_detection() {
        let mut b = [0u8; SECTOR];
        sector_data(3, 77, 1234, &mut b);
        assert_eq!(
            decode(&b),
            Seen::Data {
                vol: 3,
                id: 77,
                sector: 1234
            }
        );
        b[300] ^= 1;
        assert_eq!(decode(&b), Seen::Garbage);
        garbage(1, 5, &mut b);
        assert_eq!(decode(&b), Seen::Garbage);
        assert_eq!(decode(&[0u8; SECTOR]), Seen::Zeros);
    }
}
