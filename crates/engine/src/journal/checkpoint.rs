//! Checkpoints: a volume's whole mapping state, written to a chain of chunks.
//!
//! Payload: magic, the dense chunk map (raw entries) and the overlay extents. It is cut
//! into pieces of `chunk_bytes - 64`; each chunk starts with a header naming the volume,
//! the checkpoint's record sequence number, its index, the next chunk of the chain, and
//! CRCs of itself and of its piece of payload.

use crate::chunkmap::ChunkMap;
use crate::codec::{Dec, Enc};
use crate::extents::ExtentMap;
use crate::overlay::Overlay;
use crate::types::PoolId;

const STATE_MAGIC: &[u8; 8] = b"TVSTATE1";
const CKPT_MAGIC: &[u8; 8] = b"TVCKPT01";
pub const CKPT_HEADER_BYTES: u64 = 64;

/// Serialize a volume's mapping state.
pub fn encode_state(map: &ChunkMap, overlay: &ExtentMap<Overlay>) -> Vec<u8> {
    let mut e = Enc::with_capacity(32 + map.raw().len() * 8 + overlay.len() * 32);
    e.bytes(STATE_MAGIC).u64(map.len());
    for &raw in map.raw() {
        e.u64(raw);
    }
    e.u64(overlay.len() as u64);
    for (s, end, v) in overlay.iter() {
        let (kind, pool, off) = match v {
            Overlay::Zero => (1u8, 0u16, 0u64),
            Overlay::Log { pool, dev_offset } => (2, pool.0, dev_offset),
            Overlay::Moved { pool, dev_offset } => (3, pool.0, dev_offset),
        };
        e.u64(s).u64(end).u8(kind).u16(pool).u64(off);
    }
    e.buf
}

/// [`encode_state`] followed by the cached chunks of a `cache` volume, (chunk, slow slot)
/// pairs (`cache.rs`); written only when there are any, so other volumes' checkpoints
/// are as before.
pub fn encode_state_with_cache(
    map: &ChunkMap,
    overlay: &ExtentMap<Overlay>,
    cached: impl ExactSizeIterator<Item = (u64, u64)>,
) -> Vec<u8> {
    let mut buf = encode_state(map, overlay);
    if cached.len() > 0 {
        let mut e = Enc::with_capacity(8 + cached.len() * 16);
        e.bytes(CACHE_MAGIC).u64(cached.len() as u64);
        for (c, slot) in cached {
            e.u64(c).u64(slot);
        }
        buf.extend_from_slice(&e.buf);
    }
    buf
}

const CACHE_MAGIC: &[u8; 8] = b"TVCACHE1";

/// Parse a state payload; `None` if it is malformed.
pub fn decode_state(buf: &[u8], expect_chunks: u64) -> Option<(ChunkMap, ExtentMap<Overlay>)> {
    decode_state_full(buf, expect_chunks).map(|(m, o, _)| (m, o))
}

/// Cached chunks as read from a checkpoint: (chunk, slow slot).
pub type CachedEntries = Vec<(u64, u64)>;

/// [`decode_state`] with the cached chunks that may follow (empty if none).
pub fn decode_state_full(
    buf: &[u8],
    expect_chunks: u64,
) -> Option<(ChunkMap, ExtentMap<Overlay>, CachedEntries)> {
    let mut d = Dec::new(buf);
    if d.bytes(8)? != STATE_MAGIC {
        return None;
    }
    let n = d.u64()?;
    // Fewer chunks than the table names: the volume grew after this checkpoint was
    // written (`resize.rs`), and the chunks past it were never mapped in it.
    if n > expect_chunks {
        return None;
    }
    let mut entries = Vec::with_capacity(expect_chunks as usize);
    for _ in 0..n {
        entries.push(d.u64()?);
    }
    entries.resize(
        expect_chunks as usize,
        crate::chunkmap::ChunkLoc::Unmapped.encode(),
    );
    let m = d.u64()?;
    let mut overlay = ExtentMap::new();
    for _ in 0..m {
        let (s, end, kind, pool, off) = (d.u64()?, d.u64()?, d.u8()?, d.u16()?, d.u64()?);
        let v = match kind {
            1 => Overlay::Zero,
            2 => Overlay::Log {
                pool: PoolId(pool),
                dev_offset: off,
            },
            3 => Overlay::Moved {
                pool: PoolId(pool),
                dev_offset: off,
            },
            _ => return None,
        };
        if s >= end || !crate::journal::record::overlay_fits(s, end, v) {
            return None;
        }
        overlay.insert(s, end, v);
    }
    let mut cached = Vec::new();
    if let Some(magic) = d.bytes(8) {
        if magic != CACHE_MAGIC {
            return None;
        }
        let k = d.u64()?;
        if k > n {
            return None;
        }
        let mut prev = None;
        for _ in 0..k {
            let (c, slot) = (d.u64()?, d.u64()?);
            // Sorted and unique, as written.
            if prev.is_some_and(|p| p >= c) {
                return None;
            }
            prev = Some(c);
            cached.push((c, slot));
        }
    }
    Some((ChunkMap::from_raw(entries), overlay, cached))
}

/// Header of one chunk of a checkpoint chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CkptChunkHeader {
    pub volume_id: u32,
    pub checkpoint_seq: u64,
    pub index: u32,
    pub next: Option<(PoolId, u64)>,
    pub payload_bytes: u32,
    pub payload_crc: u32,
}

impl CkptChunkHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc::with_capacity(CKPT_HEADER_BYTES as usize);
        e.bytes(CKPT_MAGIC)
            .u32(self.volume_id)
            .u64(self.checkpoint_seq)
            .u32(self.index);
        match self.next {
            Some((p, c)) => e.u8(1).u16(p.0).u64(c),
            None => e.u8(0).u16(0).u64(0),
        };
        e.u32(self.payload_bytes).u32(self.payload_crc);
        e.seal(CKPT_HEADER_BYTES as usize)
    }

    /// Decode and check the header and its payload (which follows it in `chunk`).
    pub fn decode(chunk: &[u8]) -> Option<(CkptChunkHeader, &[u8])> {
        let hb = CKPT_HEADER_BYTES as usize;
        if chunk.len() < hb || &chunk[..8] != CKPT_MAGIC || !crate::codec::sealed_ok(chunk, hb) {
            return None;
        }
        let mut d = Dec::new(chunk);
        d.skip(8)?;
        let volume_id = d.u32()?;
        let checkpoint_seq = d.u64()?;
        let index = d.u32()?;
        let has = d.u8()?;
        let pool = PoolId(d.u16()?);
        let next_chunk = d.u64()?;
        let payload_bytes = d.u32()?;
        let payload_crc = d.u32()?;
        let payload = chunk.get(hb..hb + payload_bytes as usize)?;
        if crc32c::crc32c(payload) != payload_crc {
            return None;
        }
        let h = CkptChunkHeader {
            volume_id,
            checkpoint_seq,
            index,
            next: (has == 1).then_some((pool, next_chunk)),
            payload_bytes,
            payload_crc,
        };
        Some((h, payload))
    }
}

/// Cut a payload into chunk images linked in order through `chunks` (one per piece).
pub fn build_chain(
    volume_id: u32,
    checkpoint_seq: u64,
    payload: &[u8],
    chunk_bytes: u64,
    chunks: &[(PoolId, u64)],
) -> Vec<Vec<u8>> {
    let piece = (chunk_bytes - CKPT_HEADER_BYTES) as usize;
    assert_eq!(
        chunks.len(),
        pieces_needed(payload.len() as u64, chunk_bytes) as usize
    );
    payload
        .chunks(piece)
        .enumerate()
        .map(|(i, p)| {
            let h = CkptChunkHeader {
                volume_id,
                checkpoint_seq,
                index: i as u32,
                next: chunks.get(i + 1).copied(),
                payload_bytes: p.len() as u32,
                payload_crc: crc32c::crc32c(p),
            };
            let mut img = h.encode();
            img.extend_from_slice(p);
            // Round up to whole 4 KiB blocks; the rest of the chunk is never read.
            img.resize(img.len().div_ceil(4096) * 4096, 0);
            img
        })
        .collect()
}

pub fn pieces_needed(payload_bytes: u64, chunk_bytes: u64) -> u64 {
    payload_bytes
        .div_ceil(chunk_bytes - CKPT_HEADER_BYTES)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunkmap::ChunkLoc;

    /// Found by the `checkpoint` fuzz target: log extents whose device offset runs past
    /// u64::MAX made merging neighbours overflow. Such a state is refused.
    #[test]
    fn log_extents_past_the_address_space_are_refused() {
        let map = ChunkMap::new(2, ChunkLoc::Unmapped);
        let mut ov = ExtentMap::new();
        let log = |dev_offset| Overlay::Log {
            pool: PoolId(0),
            dev_offset,
        };
        ov.insert(0, 100, log(u64::MAX - 50));
        ov.insert(200, 300, log(7));
        assert!(decode_state(&encode_state(&map, &ov), 2).is_none());
        // The same layout with offsets that fit decodes.
        let mut ok = ExtentMap::new();
        ok.insert(0, 100, log(u64::MAX - 100));
        ok.insert(100, 300, log(7));
        assert_eq!(
            decode_state(&encode_state(&map, &ok), 2).map(|x| x.1),
            Some(ok)
        );
    }

    #[test]
    fn state_roundtrips_through_a_chain() {
        let mut map = ChunkMap::new(300_000, ChunkLoc::Unmapped);
        for c in (0..300_000).step_by(7) {
            map.set(c, ChunkLoc::At(PoolId((c % 3) as u16), c * 2));
        }
        let mut ov = ExtentMap::new();
        ov.insert(4096, 8192, Overlay::Zero);
        ov.insert(
            1 << 30,
            (1 << 30) + 512,
            Overlay::Log {
                pool: PoolId(1),
                dev_offset: 12345,
            },
        );
        let payload = encode_state(&map, &ov);
        let chunk_bytes = 1 << 20;
        let n = pieces_needed(payload.len() as u64, chunk_bytes);
        assert!(n >= 3);
        let places: Vec<(PoolId, u64)> = (0..n).map(|i| (PoolId(0), 100 + i)).collect();
        let imgs = build_chain(5, 77, &payload, chunk_bytes, &places);
        let mut out = Vec::new();
        for (i, img) in imgs.iter().enumerate() {
            let (h, p) = CkptChunkHeader::decode(img).unwrap();
            assert_eq!(h.index as usize, i);
            assert_eq!(h.next, places.get(i + 1).copied());
            out.extend_from_slice(p);
        }
        let (m2, o2) = decode_state(&out, 300_000).unwrap();
        assert_eq!(m2, map);
        assert_eq!(o2, ov);
        let mut bad = imgs[1].clone();
        bad[200] ^= 1;
        assert!(CkptChunkHeader::decode(&bad).is_none());
    }
}
