//! Kept homes (issue 17, `[tiering] keep_home`): a promotion of a `hot` chunk (or a
//! directed move of a pinned one, `tier_directed.rs`) *copies* it to the fast pool and
//! keeps its slot on the home pool, as a cache fill does. While no write reaches the fast
//! copy the home holds the same data, so demoting the chunk is a remap back to the home
//! (one journal record, no I/O); a write makes the home stale where it wrote, and
//! demoting a dirty chunk copies the span from the first to the last thirty-second written
//! since the promotion back into its home slot (one write, without allocating a slot),
//! then remaps. A chunk dirty since a mount is dirty throughout: its whole chunk is copied.
//!
//! State: the volume's [`CacheTable`](crate::cache::CacheTable), the same 12 bytes per
//! promoted chunk as a `cache` volume's; the dirty span lives in spare bits of the entry
//! (not in the cache's 24-byte map of sixty-fourths, which would break issue 17's 32 bytes
//! per chunk with the map and the monitor).
//!
//! Crash safety is the cache's (`cache/mod.rs`), whose paths these reuse:
//! - the promotion is a fill (`start_cache_fill`), journalled as `Record::Cache` after the
//!   copy with the fast pool flushed first; a crash before it leaves the chunk at home;
//! - clean/dirty is not journalled: every kept home is dirty at mount, so a write made to
//!   the fast copy before a crash is never remapped away;
//! - a clean demotion is `cache_evict`: a `Record::Map` back to the home, the fast chunk
//!   freed once that record is durable and no operation reads it; a crash before the
//!   record is durable mounts the chunk on the fast pool (dirty), its home still kept;
//! - a dirty demotion is `start_cache_clean` with eviction: writes to the chunk, to a
//!   part in the span being copied or outside it, wait until the copy has landed and the
//!   remap is made, so none lands on a fast copy that is then dropped; the span is
//!   cleared only then (a crash before the remap's record is durable mounts the chunk on
//!   its fast copy, dirty throughout);
//! - a live migration of the volume drops its kept homes first (`drop_kept_homes`: a
//!   `Record::Map` of each chunk to its fast copy, the home freed once durable), so the
//!   job sees a plain `hot` volume.

use crate::chunkmap::ChunkLoc;
use crate::config::Placement;
use crate::engine::Engine;
use crate::inject::InjectedBug;
use crate::reclaim::Freed;
use crate::types::{Outputs, PoolId};

impl Engine {
    /// Whether promotions of volume `v` keep the chunk's home copy: `keep_home` on, and a
    /// `hot` volume, or a pinned one with a fast pool (directed moves).
    pub(crate) fn keeps_home(&self, v: usize) -> bool {
        let vol = &self.vols[v];
        self.cfg.tiering.keep_home
            && vol.rec.fast_pool.is_some()
            && matches!(vol.rec.placement, Placement::Hot { .. } | Placement::Pinned)
    }

    /// Promote chunk `c` of volume `v` (on its home pool, idle) keeping its home: a fill.
    /// None when the home cannot be kept (a slot the table cannot hold): move instead.
    pub(crate) fn promote_keeping_home(
        &mut self,
        now: u64,
        v: usize,
        c: u64,
        out: &mut Outputs,
    ) -> Option<bool> {
        let vol = &self.vols[v];
        let home = vol.map.get(c);
        let on_home = vol
            .resolve(home, c)
            .is_some_and(|(p, _)| p == vol.rec.home_pool);
        if !self.keeps_home(v) || !on_home || !vol.cache.fits(c, home) {
            return None;
        }
        Some(self.start_cache_fill(now, v, c, out))
    }

    /// Demote chunk `c` of volume `v`, whose home is kept (idle: the caller checked):
    /// clean, a remap; dirty, a copy into the home slot, then the remap.
    pub(crate) fn demote_to_kept_home(
        &mut self,
        now: u64,
        v: usize,
        c: u64,
        out: &mut Outputs,
    ) -> bool {
        let dirty = self.vols[v].cache.is_dirty(c);
        // The injected bug remaps a chunk written since its promotion to its stale home.
        if !dirty || self.bug_is(InjectedBug::HotDemotesStaleHome) {
            self.vols[v].stats.clean_demotions += 1;
            let from = self.vols[v].map.get(c);
            self.cache_evict(now, v, c, false);
            if let ChunkLoc::At(f, _) = from {
                let seq = self.vols[v].journal.next_seq - 1;
                self.tier.remapped(f, v as u32, seq);
            }
            // The fast chunk is free once the remap is durable: commit now rather than at
            // the commit timer (up to `commit_interval_ns` later), or each swap would
            // wait that long for its room.
            let vol = &self.vols[v];
            if vol.commit.is_none() && !self.logs.nospace.commit_backs_off(v as u32) {
                self.start_commit(now, v as u32, out);
            }
            return true;
        }
        let started = self.start_cache_clean(now, v, c, true, out);
        if started && self.vols[v].cache.dirty_parts(c) != u64::MAX {
            self.vols[v].stats.span_demotions += 1;
        }
        started
    }

    /// A write is about to reach parts `parts` (a bit per sixty-fourth) of chunk `c` of
    /// non-`cache` volume `v`: if its home is kept, that home is stale there from now on,
    /// so demoting the chunk copies the span from the first part written to the last.
    pub(crate) fn kept_home_written(&mut self, v: usize, c: u64, parts: u64) {
        // The injected bug forgets the span written before (or the whole chunk, dirty
        // since a mount): the next demotion leaves those parts stale at home.
        if self.bug_is(InjectedBug::HotSpanNotWidened) {
            self.vols[v].cache.set_dirty(c, false);
        }
        self.vols[v].cache.mark_dirty_span(c, parts);
    }

    /// Whether room on fast pool `f` is on its way from a demotion of a kept-home chunk:
    /// a dirty one's copy in flight, or a clean one's remap not yet durable (its commit
    /// started with it). Like a move's, a remap's fast chunk is free a little after its
    /// record is durable, when the I/O in flight then has drained.
    pub(crate) fn kept_home_room_coming(&mut self, f: PoolId) -> bool {
        let vols = &self.vols;
        self.tier
            .forget_remaps(|v, seq| vols[v as usize].journal.durable_seq >= seq);
        self.tier.remapping(f)
            || self.vols.iter().any(|w| {
                w.rec.fast_pool == Some(f)
                    && !matches!(w.rec.placement, Placement::Cache { .. })
                    && w.cache.evicting > 0
            })
    }

    /// Before a live migration of non-`cache` volume `v`: stop keeping its homes. Each
    /// chunk is mapped to its fast copy by a `Map` record (which ends the keeping at
    /// replay) and its home slot freed once that record is durable, so the job copies a
    /// plain volume and no record names a slot on the pool it leaves.
    pub(crate) fn drop_kept_homes(&mut self, v: usize) {
        if matches!(self.vols[v].rec.placement, Placement::Cache { .. }) {
            return;
        }
        let kept: Vec<(u64, ChunkLoc)> = self.vols[v]
            .cache
            .iter()
            .map(|(c, slow, _)| (c, slow))
            .collect();
        for (c, slow) in kept {
            self.vols[v].cache.remove(c);
            let fast = self.vols[v].map.get(c);
            let seq = self.switch_chunk(v as u32, c, fast, false);
            if let ChunkLoc::At(p, pc) = slow
                && !self.in_thick_region(v as u32, p, pc)
            {
                self.defer_free(
                    Freed::Chunks {
                        pool: p,
                        first: pc,
                        n: 1,
                    },
                    smallvec::smallvec![(v as u32, seq)],
                );
            }
        }
    }
}
