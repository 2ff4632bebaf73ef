//! The content mapping table: each logical chunk of a volume -> (pool, physical chunk).
//!
//! One `u64` per logical chunk (8 bytes per MiB at 1 MiB chunks), dense, so lookup and
//! update are O(1). Encoding: 0 = unmapped (reads as zeros), `HOME` = the volume's
//! reserved home slot (thick volumes), otherwise `(pool + 1) << 48 | physical chunk`.

use crate::types::PoolId;

/// Where a logical chunk lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkLoc {
    Unmapped,
    /// The volume's home region: home pool, home base + logical chunk.
    Home,
    At(PoolId, u64),
}

const UNMAPPED: u64 = 0;
const HOME: u64 = u64::MAX;
const PCHUNK_MASK: u64 = (1 << 48) - 1;

impl ChunkLoc {
    #[inline]
    pub fn encode(self) -> u64 {
        match self {
            ChunkLoc::Unmapped => UNMAPPED,
            ChunkLoc::Home => HOME,
            ChunkLoc::At(pool, pchunk) => {
                debug_assert!(pchunk <= PCHUNK_MASK);
                ((pool.0 as u64 + 1) << 48) | pchunk
            }
        }
    }
    #[inline]
    pub fn decode(raw: u64) -> ChunkLoc {
        match raw {
            UNMAPPED => ChunkLoc::Unmapped,
            HOME => ChunkLoc::Home,
            r => ChunkLoc::At(PoolId(((r >> 48) - 1) as u16), r & PCHUNK_MASK),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChunkMap {
    entries: Vec<u64>,
}

impl ChunkMap {
    pub fn new(chunks: u64, initial: ChunkLoc) -> ChunkMap {
        ChunkMap {
            entries: vec![initial.encode(); chunks as usize],
        }
    }
    #[inline]
    pub fn get(&self, chunk: u64) -> ChunkLoc {
        ChunkLoc::decode(self.entries[chunk as usize])
    }
    #[inline]
    pub fn set(&mut self, chunk: u64, loc: ChunkLoc) {
        self.entries[chunk as usize] = loc.encode();
    }
    pub fn len(&self) -> u64 {
        self.entries.len() as u64
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn raw(&self) -> &[u64] {
        &self.entries
    }
    pub fn from_raw(entries: Vec<u64>) -> ChunkMap {
        ChunkMap { entries }
    }
    /// Make room for `more` entries without growing.
    pub fn try_reserve(&mut self, more: usize) -> Result<(), std::collections::TryReserveError> {
        self.entries.try_reserve_exact(more)
    }
    /// Grow to `chunks` entries; the new ones are unmapped.
    pub fn grow(&mut self, chunks: u64) {
        if chunks as usize > self.entries.len() {
            self.entries.resize(chunks as usize, UNMAPPED);
        }
    }
    /// Shrink to `chunks` entries (a shrunk volume; the cut ones are unmapped).
    pub fn truncate(&mut self, chunks: u64) {
        self.entries.truncate(chunks as usize);
        self.entries.shrink_to_fit();
    }
    /// Bytes of RAM the table uses.
    pub fn memory_bytes(&self) -> u64 {
        self.entries.capacity() as u64 * 8
    }
    pub fn iter(&self) -> impl Iterator<Item = (u64, ChunkLoc)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .map(|(i, &r)| (i as u64, ChunkLoc::decode(r)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_roundtrips() {
        for loc in [
            ChunkLoc::Unmapped,
            ChunkLoc::Home,
            ChunkLoc::At(PoolId(0), 0),
            ChunkLoc::At(PoolId(63), PCHUNK_MASK),
        ] {
            assert_eq!(ChunkLoc::decode(loc.encode()), loc);
        }
        let mut m = ChunkMap::new(4, ChunkLoc::Home);
        m.set(2, ChunkLoc::At(PoolId(1), 9));
        assert_eq!(m.get(2), ChunkLoc::At(PoolId(1), 9));
        assert_eq!(m.get(3), ChunkLoc::Home);
    }
}
