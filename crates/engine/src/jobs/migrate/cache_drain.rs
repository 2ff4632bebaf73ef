//! Cache-placement volumes (issue 13): the job first cleans and drops the volume's cache,
//! then migrates its home copy like a pinned volume's; caching starts again relative to
//! the new home once the volume table naming it is durable.
//!
//! Why drain rather than move the cache along: a cached chunk has two copies (the fast
//! copy the map points at, and its slow slot on the home pool), and the home pool is what
//! moves. Copying the fast copy would leave the cache table naming slow slots on the old
//! pool; copying the slow slot under a dirty fast copy copies stale data. Draining first
//! turns the volume into a plain one (every chunk on its home, by records the existing
//! eviction path already makes crash-safe), which every scheme migrates as it is; the
//! price is a cold cache after the move and the writeback of the dirty chunks before it.
//!
//! 1. *Drain* (`cache_drained`, before the first copy): admission is frozen for the job's
//!    life (the tier tick skips a migrating volume, `tiers_frozen`); fills in flight end
//!    and are then evicted; clean chunks are evicted at once (a `Map` record back to the
//!    slow slot, no I/O); dirty ones are written back one at a time at the job's rate and
//!    evicted when the writeback lands (writes to the chunk wait meanwhile, as for any
//!    writeback). LR sends no write to the destination until the cache is empty.
//! 2. *Copy and pivot* as for a pinned volume.
//! 3. *After the pivot* the (empty) cache table's home is the new pool, and no fill starts
//!    until the table naming that home is durable (`Migrations::cache_rehoming`): a fill's
//!    record names its slow slot's pool, which mount checks against the table's home.
//!
//! Crash: the drain's evictions are journal records like any eviction, ordered before
//! every record of the copy and the pivot, so a mount sees a prefix: the chunks not yet
//! evicted are cached (and dirty, as after every mount), and the resumed job drains them
//! again. A mount with the new home in the table replays the old home's `Cache` records
//! before the evictions that ended them (`CacheTable::foreign`).

use crate::config::Placement;
use crate::engine::Engine;
use crate::inject::InjectedBug;
use crate::types::{Outputs, PoolId};
use crate::volume::Volume;

/// Where chunk `c`'s home copy is: its slow slot if cached, else where the map says.
pub(super) fn home_copy(vol: &Volume, c: u64) -> Option<(PoolId, u64)> {
    match vol.cache.slow_slot(c) {
        Some(slow) => vol.resolve(slow, c),
        None => vol.resolve(vol.map.get(c), c),
    }
}

impl Engine {
    /// Whether volume `v` has no cache to drain: not a `cache` volume, or its cache is
    /// empty with no fill or writeback in flight. Otherwise evict what can go now and
    /// start the next dirty chunk's writeback (each completion steps the job again).
    pub(super) fn cache_drained(&mut self, now: u64, v: u32, out: &mut Outputs) -> bool {
        let vi = v as usize;
        let vol = &self.vols[vi];
        if !matches!(vol.rec.placement, Placement::Cache { .. }) {
            return true;
        }
        let job = self.migrations.jobs.get_mut(&v).expect("a job drains");
        if job.cache_drain_seq.is_none()
            && vol.cache.is_empty()
            && vol.promoting == 0
            && vol.cache.cleaning == 0
        {
            job.cache_drain_seq = Some(vol.journal.next_seq - 1);
        }
        if let Some(seq) = job.cache_drain_seq {
            return self.drain_durable(now, v, seq, out);
        }
        let drop_dirty = self.bug_is(InjectedBug::CacheMigrateDropsDirty);
        let entries: Vec<(u64, bool)> = vol.cache.iter().map(|(c, _, d)| (c, d)).collect();
        let mut next_dirty = None;
        for (c, dirty) in entries {
            // Writes in flight, a fill or a writeback: its completion steps again.
            if self.cache_chunk_busy(vi, c) {
                continue;
            }
            if dirty && !drop_dirty {
                next_dirty.get_or_insert(c);
                continue;
            }
            // Clean: its slow slot holds its data (the injected bug takes a dirty one
            // too, dropping its cached writes).
            self.cache_evict(now, vi, c, dirty);
        }
        let Some(c) = next_dirty else {
            return false;
        };
        if self.vols[vi].cache.cleaning > 0 {
            return false; // one writeback at a time; its completion steps again
        }
        let cb = self.cfg.chunk_bytes;
        let bytes = self.vols[vi].cache.dirty_bytes_of(c, cb);
        let job = self.migrations.jobs.get_mut(&v).expect("a job drains");
        if let Err(at) = job.take_rate(now, cb, bytes) {
            self.migration_wake_at(at);
            return false;
        }
        self.start_cache_clean(now, vi, c, true, out);
        false
    }

    /// Whether the drain's evictions (records up to `seq`) are durable; else a commit
    /// makes them so (its completion steps again). Until then a table naming a new home
    /// could become durable before them, and a mount would replay `Cache` records of the
    /// old home that nothing durable ends.
    pub(super) fn drain_durable(&mut self, now: u64, v: u32, seq: u64, out: &mut Outputs) -> bool {
        let vol = &self.vols[v as usize];
        if vol.journal.durable_seq >= seq {
            return true;
        }
        if vol.commit.is_none() && !self.logs.nospace.commit_backs_off(v) {
            self.start_commit(now, v, out);
        }
        false
    }

    /// Volume `v`'s job is done: a `cache` volume's (drained) cache is of its new home,
    /// and fills wait until the table naming that home is durable.
    pub(super) fn cache_rehome(&mut self, v: u32) {
        let keeps_home = self.keeps_home(v as usize);
        let vol = &mut self.vols[v as usize];
        // A `hot` volume's table (kept homes, `tier_home.rs`) was emptied at the job's
        // start and moves home too; its promotions keep homes again once the table is
        // durable, like a cache's fills.
        if vol.cache.is_empty() {
            vol.cache.rehome(vol.rec.home_pool);
        }
        if matches!(vol.rec.placement, Placement::Cache { .. }) || keeps_home {
            self.migrations.cache_rehoming.insert(v);
        }
    }

    /// A volume table write is durable: fills of a `cache` volume whose new home it names
    /// may start again.
    pub(crate) fn cache_table_durable(&mut self) {
        let voltab = &self.voltab.volumes();
        let vols = &self.vols;
        self.migrations.cache_rehoming.retain(|&v| {
            let r = &vols[v as usize].rec;
            !voltab.get(v as usize).is_some_and(|t| {
                t.home_pool == r.home_pool && t.home_base_chunk == r.home_base_chunk
            })
        });
    }
}
