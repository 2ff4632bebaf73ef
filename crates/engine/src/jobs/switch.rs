//! Switching a chunk to a new location: the map entry changes, a `Map` record is
//! journaled, and the old location is freed only once that record is durable and no
//! operation that could still read it is in flight (`reclaim.rs`). A crash before the
//! record is durable leaves the old mapping and its intact data; the new location was
//! never referenced and mount's allocator rebuild reclaims it.

use crate::chunkmap::ChunkLoc;
use crate::engine::Engine;
use crate::journal::Record;
use crate::reclaim::Freed;

impl Engine {
    /// Point chunk `c` of volume `v` at `to`; returns the record's sequence number.
    /// The old location is freed when `free_old` (a thick volume's home slot stays).
    pub(crate) fn switch_chunk(&mut self, v: u32, c: u64, to: ChunkLoc, free_old: bool) -> u64 {
        let vol = &mut self.vols[v as usize];
        let old = vol.map.get(c);
        vol.set_loc(c, to);
        let seq = vol.journal.append(Record::Map {
            chunk: c,
            entry: to.encode(),
        });
        if let Some((p, _)) = vol.resolve(to, c) {
            vol.dirty_pools |= 1 << p.0;
        }
        // A slot of a thick volume's region is freed only with the whole region.
        if free_old
            && let ChunkLoc::At(p, pc) = old
            && !self.in_thick_region(v, p, pc)
        {
            self.defer_free(
                Freed::Chunks {
                    pool: p,
                    first: pc,
                    n: 1,
                },
                smallvec::smallvec![(v, seq)],
            );
        }
        seq
    }
}
