//! How far into each pool a volume's on-disk metadata reaches (issue 18's give-back): the
//! highest chunk and device byte named by its durable checkpoint image and by every
//! journal record since it began. A mount reads exactly those (`mount/recover.rs`
//! refuses a mapping beyond the pool), so a shard may drop a borrowed run from the end of
//! its address space only once no volume's reach extends into it (`give_back.rs`), and
//! the invariant check holds every volume's reach inside its pools.
//!
//! Kept per checkpoint round: a round's image is what a mount loads once its header is
//! durable, and the records it covers (sequence numbers up to its `last_seq`) stop
//! counting then; until then (and after a failed round, whose header may have landed)
//! both still count. Records appended meanwhile count in `open`.

use crate::chunkmap::ChunkLoc;
use crate::journal::Record;
use crate::overlay::Overlay;
use crate::types::PoolId;

/// Per pool: one past the highest chunk named (a map entry, a cached chunk's slots) and
/// one past the highest device byte named (an overlay's log or moved data).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reach {
    chunk_end: Vec<u64>,
    byte_end: Vec<u64>,
}

impl Reach {
    fn at(v: &mut Vec<u64>, p: PoolId) -> &mut u64 {
        let p = p.0 as usize;
        if v.len() <= p {
            v.resize(p + 1, 0);
        }
        &mut v[p]
    }

    pub fn chunk(&mut self, loc: ChunkLoc) {
        if let ChunkLoc::At(p, c) = loc {
            let e = Reach::at(&mut self.chunk_end, p);
            *e = (*e).max(c + 1);
        }
    }

    pub fn overlay(&mut self, start: u64, end: u64, v: Overlay) {
        if let Overlay::Log { pool, dev_offset } | Overlay::Moved { pool, dev_offset } = v {
            let e = Reach::at(&mut self.byte_end, pool);
            *e = (*e).max(dev_offset.saturating_add(end - start));
        }
    }

    pub fn record(&mut self, r: &Record) {
        match *r {
            Record::Map { entry, .. } => self.chunk(ChunkLoc::decode(entry)),
            Record::Cache { fast, slow, .. } => {
                self.chunk(ChunkLoc::decode(fast));
                self.chunk(crate::cache::decode_slot(slow));
            }
            Record::Overlay { start, end, value } => self.overlay(start, end, value),
            Record::OverlayClear { .. } => {}
        }
    }

    fn join(&mut self, o: &Reach) {
        for (p, &c) in o.chunk_end.iter().enumerate() {
            let e = Reach::at(&mut self.chunk_end, PoolId(p as u16));
            *e = (*e).max(c);
        }
        for (p, &b) in o.byte_end.iter().enumerate() {
            let e = Reach::at(&mut self.byte_end, PoolId(p as u16));
            *e = (*e).max(b);
        }
    }

    /// One past the highest chunk of `pool` named, counting a named device byte as its
    /// chunk (`chunk_bytes`, data from `DATA_START_BYTES`).
    pub fn chunk_end(&self, pool: PoolId, chunk_bytes: u64) -> u64 {
        let p = pool.0 as usize;
        let c = self.chunk_end.get(p).copied().unwrap_or(0);
        let b = self.byte_end.get(p).copied().unwrap_or(0);
        let from_bytes = b
            .saturating_sub(crate::layout::DATA_START_BYTES)
            .div_ceil(chunk_bytes);
        c.max(from_bytes)
    }
}

/// A volume's reach, by checkpoint round (see the module's comment).
#[derive(Clone, Debug, Default)]
pub struct JournalReach {
    /// The durable checkpoint's image (empty: no checkpoint, the volume's initial map).
    image: Reach,
    /// Rounds begun and not yet superseded by a durable checkpoint: (their `last_seq`,
    /// their image, the records up to it).
    rounds: Vec<(u64, Reach, Reach)>,
    /// Records appended since the last round began.
    open: Reach,
}

impl JournalReach {
    /// A mount: the checkpoint image loaded.
    pub fn mounted(image: Reach) -> JournalReach {
        JournalReach {
            image,
            ..Default::default()
        }
    }

    /// A record was appended (or replayed at mount).
    pub fn note(&mut self, r: &Record) {
        self.open.record(r);
    }

    /// A checkpoint round began, covering records up to `last_seq`, its image naming
    /// `image`.
    pub fn round_began(&mut self, last_seq: u64, image: Reach) {
        let records = std::mem::take(&mut self.open);
        self.rounds.push((last_seq, image, records));
    }

    /// The checkpoint covering records up to `seq` is durable (its header written).
    pub fn checkpointed(&mut self, seq: u64) {
        if let Some(i) = self.rounds.iter().rposition(|r| r.0 == seq) {
            self.image = self.rounds[i].1.clone();
        }
        self.rounds.retain(|r| r.0 > seq);
    }

    /// Everything a mount might read now.
    pub fn total(&self) -> Reach {
        let mut t = self.image.clone();
        for (_, i, r) in &self.rounds {
            t.join(i);
            t.join(r);
        }
        t.join(&self.open);
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::chunk_offset;

    fn map(c: u64) -> Record {
        Record::Map {
            chunk: 0,
            entry: ChunkLoc::At(PoolId(1), c).encode(),
        }
    }

    /// A record counts until a checkpoint begun after it is durable; the image of that
    /// checkpoint counts from then on.
    #[test]
    fn records_count_until_a_later_checkpoint_is_durable() {
        let cb = 1 << 20;
        let mut j = JournalReach::default();
        j.note(&map(40));
        assert_eq!(j.total().chunk_end(PoolId(1), cb), 41);
        assert_eq!(j.total().chunk_end(PoolId(0), cb), 0);
        let mut img = Reach::default();
        img.chunk(ChunkLoc::At(PoolId(1), 3));
        j.round_began(1, img.clone());
        j.note(&map(7));
        // The round is not durable yet: its records and its image both count.
        assert_eq!(j.total().chunk_end(PoolId(1), cb), 41);
        j.checkpointed(1);
        assert_eq!(j.total().chunk_end(PoolId(1), cb), 8);
        // A failed round (no header) keeps counting until a later one is durable.
        j.round_began(2, Reach::default());
        j.round_began(2, img);
        j.checkpointed(2);
        assert_eq!(j.total().chunk_end(PoolId(1), cb), 4);
        // Log data counts by the chunk its last byte lies in.
        j.note(&Record::Overlay {
            start: 0,
            end: 4096,
            value: Overlay::Log {
                pool: PoolId(1),
                dev_offset: chunk_offset(9, cb) + 8192,
            },
        });
        assert_eq!(j.total().chunk_end(PoolId(1), cb), 10);
    }
}
