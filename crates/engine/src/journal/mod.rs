//! A volume's metadata journal: a ring of record blocks plus checkpoints.
//!
//! Records get consecutive sequence numbers. A commit writes the pending records as
//! blocks at the ring head (one device write, FUA). When the ring would overflow, the
//! commit writes a checkpoint of the whole state instead and restarts the ring there.

pub mod checkpoint;
pub mod reach;
pub mod record;

pub use record::{Block, RECORDS_PER_BLOCK, Record};

use crate::layout::{BLOCK_BYTES, JournalHeader};
use crate::types::PoolId;

/// The journal region's two header slots precede the ring.
pub const HEADER_SLOTS_BYTES: u64 = 2 * BLOCK_BYTES;

#[derive(Clone, Debug)]
pub struct Journal {
    pub pool: PoolId,
    /// Byte offset of the region (header slots, then ring) on the pool.
    pub region_offset: u64,
    pub ring_blocks: u64,
    /// The header as last written (durable).
    pub header: JournalHeader,
    /// Sequence number the next record gets.
    pub next_seq: u64,
    /// Records up to this sequence number are durable.
    pub durable_seq: u64,
    /// Records not yet being written, with sequence numbers following the in-flight ones.
    pub pending: Vec<Record>,
    /// Block sequence of the next block to write (its ring slot is `head % ring_blocks`).
    pub head: u64,
    /// Oldest block replay needs.
    pub tail: u64,
    /// CRC of the last block written (the next block's `prev_crc`).
    pub last_crc: u32,
    /// Chunks of the durable checkpoint chain.
    pub checkpoint_chunks: Vec<(PoolId, u64)>,
    /// Chains whose header write failed: the header slot may still name them.
    pub orphan_chunks: Vec<(PoolId, u64)>,
    /// Records replayed at mount (for reports).
    pub replayed: u64,
    /// Nothing more is written in this run (`abandon`).
    abandoned: bool,
    /// How far into each pool what a mount would read reaches (`reach.rs`).
    pub reach: reach::JournalReach,
}

impl Journal {
    pub fn new(
        pool: PoolId,
        region_offset: u64,
        region_bytes: u64,
        header: JournalHeader,
    ) -> Journal {
        // A deleted volume's hollow slot has no region (`delete.rs`): no ring, never used.
        let ring_blocks = region_bytes.saturating_sub(HEADER_SLOTS_BYTES) / BLOCK_BYTES;
        Journal {
            pool,
            region_offset,
            ring_blocks,
            next_seq: header.checkpoint_seq + 1,
            durable_seq: header.checkpoint_seq,
            head: header.replay_block_seq,
            tail: header.replay_block_seq,
            last_crc: header.replay_prev_crc,
            header,
            pending: Vec::new(),
            checkpoint_chunks: Vec::new(),
            orphan_chunks: Vec::new(),
            replayed: 0,
            abandoned: false,
            reach: Default::default(),
        }
    }

    /// Drop the records not yet being written and write nothing more in this run (a
    /// commit failed while the engine stops: what it could not make durable is lost, as
    /// in a crash). Their sequence numbers are spent, so a later block would start after
    /// a gap, where the mount's replay stops (`mount/recover.rs`), while this run would
    /// count its records durable and release the frees waiting on them. DST seed 100,
    /// once NCQ seeds migrated: a tier move that finished after the failed final commit
    /// was committed that way; the free of the chunk's old copy discarded it, and the
    /// mount's map still named it (flushed data read back as zeros).
    pub fn abandon(&mut self) {
        self.pending.clear();
        self.abandoned = true;
    }

    /// Whether `abandon` was called: records appended since are never written.
    pub fn abandoned(&self) -> bool {
        self.abandoned
    }

    /// Whether records wait to be written.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty() && !self.abandoned
    }

    /// Append a record; returns its sequence number.
    pub fn append(&mut self, r: Record) -> u64 {
        self.reach.note(&r);
        self.pending.push(r);
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    pub fn ring_offset(&self) -> u64 {
        self.region_offset + HEADER_SLOTS_BYTES
    }

    /// Byte offset on the pool of the ring slot of block sequence `seq`.
    pub fn block_offset(&self, seq: u64) -> u64 {
        self.ring_offset() + (seq % self.ring_blocks) * BLOCK_BYTES
    }

    /// Byte offset of the header slot the next header write goes to.
    pub fn next_header_offset(&self) -> u64 {
        self.region_offset + ((self.header.generation + 1) % 2) * BLOCK_BYTES
    }

    pub fn used_blocks(&self) -> u64 {
        self.head - self.tail
    }

    /// Whether `blocks` more blocks fit without overwriting what replay needs.
    pub fn fits(&self, blocks: u64) -> bool {
        self.used_blocks() + blocks <= self.ring_blocks
    }

    /// Encode `records` (with first sequence `first_seq`) as blocks at the head.
    /// Returns the images; the caller advances the head when they are durable.
    pub fn build_blocks(
        &self,
        volume_id: u32,
        first_seq: u64,
        records: &[Record],
    ) -> (Vec<u8>, u32) {
        let mut out =
            Vec::with_capacity(records.len().div_ceil(RECORDS_PER_BLOCK) * BLOCK_BYTES as usize);
        let mut prev = self.last_crc;
        let mut seq = first_seq;
        for (i, part) in records.chunks(RECORDS_PER_BLOCK).enumerate() {
            let b = Block {
                volume_id,
                block_seq: self.head + i as u64,
                mount_generation: self.header.mount_generation,
                prev_crc: prev,
                first_record_seq: seq,
                records: part.to_vec(),
            };
            let img = b.encode();
            prev = Block::crc_of(&img);
            seq += part.len() as u64;
            out.extend_from_slice(&img);
        }
        (out, prev)
    }

    /// Blocks needed for `n` records.
    pub fn blocks_for(n: usize) -> u64 {
        n.div_ceil(RECORDS_PER_BLOCK) as u64
    }
}
