//! When a `cache` volume writes its dirty chunks back (issue 17), following the two
//! kernels the placement imitates (docs/ARCHITECTURE.md, "Cache placement", cleaning):
//!
//! - **smq** (dm-cache): `clean_target_met()` in `drivers/md/dm-cache-policy-smq.c` asks
//!   for every dirty block to be cleaned when the cache is idle and for none while it is
//!   busy ("If we're busy we don't worry about cleaning at all"); a dirty block is written
//!   back while busy only when a demotion needs it (`queue_demotion()` finds no clean
//!   block). Idle is `iot_idle_for(&cache->tracker, HZ)` in `dm-cache-target.c`: no I/O
//!   for one second. So: no background writeback while the volume had a request in the
//!   last second; after that, every dirty chunk, as fast as the migration limits allow.
//! - **bcache**: `__update_writeback_rate()` in `drivers/md/bcache/writeback.c`, a PI
//!   controller (a PD controller before Linux 4.16; bcache.rst still says PD) updated every
//!   `writeback_rate_update_seconds` (5): error = dirty bytes − `writeback_percent` of the
//!   cache; rate = error / `writeback_rate_p_term_inverse` (40, "retire all the dirty
//!   blocks in 40 seconds") + integral / `writeback_rate_i_term_inverse` (10000), the
//!   integral growing by error × 5 s per update while the error is positive and shrinking
//!   while it is negative and the integral positive. Writebacks are spaced by their size
//!   over the rate (`bch_next_delay()`, its schedule clamped to [now − 2 s, now + 2.5 s]).
//!   After about six updates without I/O (`set_at_max_writeback_rate()`, 30 s with one
//!   backing device) the rate goes to its maximum: everything is written back.
//!
//! Measured in bytes for bcache (dirty sectors; a chunk dirty in one sixty-fourth counts
//! 1/64 of a chunk) and in whole chunks for smq (a dm-cache block is dirty or not).
//! Not copied: bcache's minimum rate below the target (8 sectors/s; here nothing is
//! written back below it until idle), its "device is keeping up" check on the integral,
//! dm-cache's `migration_threshold` (the `[tiering]` cap on copies in flight and
//! bytes per second bounds all cleaning instead).

pub(crate) mod pace;

pub use pace::*;

use crate::config::{CachePolicy, Placement};
use crate::engine::Engine;
use crate::types::Outputs;
use crate::volume::ChunkState;

impl Engine {
    /// Whether `cache` volume `v` should start a background writeback now (see the
    /// module's rules). Runs bcache's rate controller when its period is due.
    pub(crate) fn cache_should_clean(&mut self, now: u64, v: usize) -> bool {
        let Placement::Cache { cache_policy, .. } = self.vols[v].rec.placement else {
            return false;
        };
        if self.vols[v].cache.dirty_count() == 0 {
            return false;
        }
        match cache_policy {
            CachePolicy::Smq => self.vols[v].writeback.idle(now, SMQ_IDLE_NS),
            CachePolicy::Bcache => {
                if self.vols[v].writeback.idle(now, BCACHE_IDLE_NS) {
                    return true;
                }
                let cb = self.cfg.chunk_bytes;
                let target =
                    self.cache_budget(v) * cb * self.cfg.tiering.writeback_percent as u64 / 100;
                let vol = &mut self.vols[v];
                if vol.writeback.update_due(now) {
                    let dirty = vol.cache.dirty_bytes(cb);
                    vol.writeback.update(now, dirty, target);
                }
                vol.writeback.may_start(now)
            }
        }
    }

    /// Start one background writeback of volume `v` if its rules and the migration
    /// limits (copies in flight, at most half of them writebacks; bytes per second)
    /// allow. True if it started one.
    pub(crate) fn cache_clean_step(&mut self, now: u64, v: usize, out: &mut Outputs) -> bool {
        // Background cleaning takes at most half the moves in flight, engine-wide, so
        // fills keep going while writes dirty the caches faster than they are cleaned
        // (with all of them, zipf1.0 one VM filled 222 of its 256 chunks in 264 s).
        let clean_slots = (self.cfg.tiering.max_moves / 2).max(1);
        let cleaning: u32 = self.vols.iter().map(|w| w.cache.cleaning).sum();
        if cleaning >= clean_slots
            || self.tier.in_flight() >= self.cfg.tiering.max_moves
            || !self.cache_should_clean(now, v)
        {
            return false;
        }
        let vol = &mut self.vols[v];
        let activity = &vol.activity;
        let busy = |c: u64| {
            activity
                .get(&c)
                .is_some_and(|a| a.writes_in_flight > 0 || a.state != ChunkState::Idle)
        };
        let Some(c) = vol.cache.next_dirty(busy) else {
            return false;
        };
        let bytes = vol.cache.dirty_bytes_of(c, self.cfg.chunk_bytes);
        if !self.start_cache_clean(now, v, c, false, out) {
            return false;
        }
        self.vols[v].writeback.started(now, bytes);
        true
    }

    /// A writeback of volume `v` finished: the cleaner goes on at once (within its
    /// rules and the limits) rather than at the next tier tick, which capped it at two
    /// chunks per `interval_ms` (20 chunks a second at the defaults, whatever the disks
    /// could do).
    pub(crate) fn cache_clean_more(&mut self, now: u64, v: usize, out: &mut Outputs) {
        if self.tiers_frozen(v) {
            return;
        }
        self.refill_tier_bucket(now);
        if self.tier.has_tokens() {
            self.cache_clean_step(now, v, out);
        }
    }
}
