//! Journal records and the 4 KiB blocks that carry them.
//!
//! A block: magic, volume id, block sequence number, mount generation, the CRC of the
//! previous block (so blocks form a chain and a stale block from an earlier lap never
//! continues a new one), the sequence number of its first record,
//! a record count, 32-byte records, and its own CRC32C in the last 4 bytes.

use crate::codec::{Dec, Enc, sealed_ok};
use crate::layout::BLOCK_BYTES;
use crate::overlay::Overlay;
use crate::types::PoolId;

const BLOCK_MAGIC: u32 = 0x4A42_5654; // "TVBJ"
const HEADER_BYTES: usize = 40;
const RECORD_BYTES: usize = 32;
/// Records that fit in one block.
pub const RECORDS_PER_BLOCK: usize = (BLOCK_BYTES as usize - 4 - HEADER_BYTES) / RECORD_BYTES;

/// One change to a volume's mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// Set a chunk map entry (raw [`crate::chunkmap::ChunkLoc`] encoding).
    Map { chunk: u64, entry: u64 },
    /// Map `[start, end)` of the volume in the overlay.
    Overlay {
        start: u64,
        end: u64,
        value: Overlay,
    },
    /// Remove `[start, end)` from the overlay.
    OverlayClear { start: u64, end: u64 },
    /// `cache` placement: chunk `chunk` is now read and written at `fast` (a raw map
    /// entry) and keeps its slow slot `slow` (`cache::encode_slot`). A later `Map`
    /// record of the chunk ends its caching.
    Cache { chunk: u64, fast: u64, slow: u64 },
}

impl Record {
    fn encode(&self, e: &mut Enc) {
        match *self {
            Record::Map { chunk, entry } => {
                e.u8(1).u8(0).u16(0).u32(0).u64(chunk).u64(entry).u64(0);
            }
            Record::Overlay { start, end, value } => {
                let (kind, pool, off) = match value {
                    Overlay::Zero => (1, 0, 0),
                    Overlay::Log { pool, dev_offset } => (2, pool.0, dev_offset),
                    Overlay::Moved { pool, dev_offset } => (3, pool.0, dev_offset),
                };
                e.u8(2)
                    .u8(kind)
                    .u16(pool)
                    .u32(0)
                    .u64(start)
                    .u64(end)
                    .u64(off);
            }
            Record::OverlayClear { start, end } => {
                e.u8(3).u8(0).u16(0).u32(0).u64(start).u64(end).u64(0);
            }
            Record::Cache { chunk, fast, slow } => {
                e.u8(4).u8(0).u16(0).u32(0).u64(chunk).u64(fast).u64(slow);
            }
        }
    }

    fn decode(d: &mut Dec) -> Option<Record> {
        let kind = d.u8()?;
        let sub = d.u8()?;
        let pool = d.u16()?;
        d.u32()?;
        let (a, b, c) = (d.u64()?, d.u64()?, d.u64()?);
        match kind {
            1 => Some(Record::Map { chunk: a, entry: b }),
            2 => {
                let value = match sub {
                    1 => Overlay::Zero,
                    2 => Overlay::Log {
                        pool: PoolId(pool),
                        dev_offset: c,
                    },
                    3 => Overlay::Moved {
                        pool: PoolId(pool),
                        dev_offset: c,
                    },
                    _ => return None,
                };
                (a < b && overlay_fits(a, b, value)).then_some(Record::Overlay {
                    start: a,
                    end: b,
                    value,
                })
            }
            3 => (a < b).then_some(Record::OverlayClear { start: a, end: b }),
            4 => Some(Record::Cache {
                chunk: a,
                fast: b,
                slow: c,
            }),
            _ => None,
        }
    }
}

/// Whether an overlay extent read from disk can be used: log data must not run past the
/// end of the address space (splitting and merging extents adds to `dev_offset`).
pub(crate) fn overlay_fits(start: u64, end: u64, v: Overlay) -> bool {
    match v {
        Overlay::Zero => true,
        Overlay::Log { dev_offset, .. } | Overlay::Moved { dev_offset, .. } => {
            dev_offset.checked_add(end - start).is_some()
        }
    }
}

/// A decoded, valid journal block.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    pub volume_id: u32,
    pub block_seq: u64,
    pub mount_generation: u64,
    pub prev_crc: u32,
    pub first_record_seq: u64,
    pub records: Vec<Record>,
}

impl Block {
    /// Encode to exactly one 4 KiB block. `records.len()` must be at most RECORDS_PER_BLOCK.
    pub fn encode(&self) -> Vec<u8> {
        assert!(self.records.len() <= RECORDS_PER_BLOCK);
        let mut e = Enc::with_capacity(BLOCK_BYTES as usize);
        e.u32(BLOCK_MAGIC)
            .u32(self.volume_id)
            .u64(self.block_seq)
            .u64(self.mount_generation)
            .u32(self.prev_crc);
        e.u64(self.first_record_seq)
            .u16(self.records.len() as u16)
            .u16(0);
        for r in &self.records {
            r.encode(&mut e);
        }
        e.seal(BLOCK_BYTES as usize)
    }

    /// The CRC stored in an encoded block (what the next block names as `prev_crc`).
    pub fn crc_of(encoded: &[u8]) -> u32 {
        let n = BLOCK_BYTES as usize;
        u32::from_le_bytes([
            encoded[n - 4],
            encoded[n - 3],
            encoded[n - 2],
            encoded[n - 1],
        ])
    }

    pub fn decode(buf: &[u8]) -> Option<Block> {
        if !sealed_ok(buf, BLOCK_BYTES as usize) {
            return None;
        }
        let mut d = Dec::new(buf);
        if d.u32()? != BLOCK_MAGIC {
            return None;
        }
        let volume_id = d.u32()?;
        let block_seq = d.u64()?;
        let mount_generation = d.u64()?;
        let prev_crc = d.u32()?;
        let first_record_seq = d.u64()?;
        let count = d.u16()? as usize;
        d.u16()?;
        if count > RECORDS_PER_BLOCK {
            return None;
        }
        let records = (0..count)
            .map(|_| Record::decode(&mut d))
            .collect::<Option<Vec<_>>>()?;
        Some(Block {
            volume_id,
            block_seq,
            mount_generation,
            prev_crc,
            first_record_seq,
            records,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_roundtrip_and_torn_block_rejected() {
        let records: Vec<Record> = (0..RECORDS_PER_BLOCK as u64)
            .map(|i| match i % 3 {
                0 => Record::Map {
                    chunk: i,
                    entry: i * 7 + 1,
                },
                1 => Record::Overlay {
                    start: i * 512,
                    end: i * 512 + 512,
                    value: Overlay::Log {
                        pool: PoolId(1),
                        dev_offset: i << 20,
                    },
                },
                _ => Record::OverlayClear {
                    start: i,
                    end: i + 9,
                },
            })
            .collect();
        let b = Block {
            volume_id: 3,
            block_seq: 10,
            mount_generation: 2,
            prev_crc: 99,
            first_record_seq: 500,
            records,
        };
        let enc = b.encode();
        assert_eq!(enc.len(), 4096);
        assert_eq!(Block::decode(&enc).unwrap(), b);
        // A torn write: the second half still holds an older block's bytes.
        let mut torn = enc.clone();
        for x in &mut torn[2048..] {
            *x = 0;
        }
        assert!(Block::decode(&torn).is_none());
    }
}
