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

use crate::config::{CachePolicy, Placement};
use crate::engine::Engine;
use crate::types::Outputs;
use crate::volume::ChunkState;

/// dm-cache: the cache is idle after a second without I/O (`iot_idle_for(.., HZ)`).
pub const SMQ_IDLE_NS: u64 = 1_000_000_000;
/// bcache: the rate controller's period (`writeback_rate_update_seconds`).
pub const BCACHE_UPDATE_NS: u64 = 5_000_000_000;
/// bcache: maximum rate after six periods without I/O (`set_at_max_writeback_rate`).
pub const BCACHE_IDLE_NS: u64 = 6 * BCACHE_UPDATE_NS;
/// bcache's `writeback_rate_p_term_inverse` and `writeback_rate_i_term_inverse`.
const BCACHE_P_TERM_INVERSE: i64 = 40;
const BCACHE_I_TERM_INVERSE: i64 = 10_000;
/// `bch_next_delay()` keeps its schedule within 2.5 s ahead of and 2 s behind now.
const PACE_AHEAD_NS: u64 = 2_500_000_000;
const PACE_BEHIND_NS: u64 = 2_000_000_000;

/// A `cache` volume's writeback pacing: when it last saw a request, and bcache's rate.
#[derive(Clone, Debug, Default)]
pub struct WritebackPace {
    /// The volume's last request (reads and writes; a flush moves no data).
    last_request_ns: u64,
    /// bcache: the current writeback rate (0 at or under the target).
    rate_bytes_per_s: u64,
    /// bcache: the integral term, in byte-seconds.
    integral_byte_s: i64,
    next_update_ns: u64,
    /// bcache: the earliest start of the next paced writeback.
    next_start_ns: u64,
}

impl WritebackPace {
    pub fn request(&mut self, now: u64) {
        self.last_request_ns = self.last_request_ns.max(now);
    }

    /// No request for `idle_ns`.
    pub fn idle(&self, now: u64, idle_ns: u64) -> bool {
        now.saturating_sub(self.last_request_ns) >= idle_ns
    }

    pub fn rate_bytes_per_s(&self) -> u64 {
        self.rate_bytes_per_s
    }

    fn update_due(&self, now: u64) -> bool {
        now >= self.next_update_ns
    }

    /// bcache's controller, run once per period: the new rate from the dirty bytes and
    /// the target.
    fn update(&mut self, now: u64, dirty_bytes: u64, target_bytes: u64) {
        if !self.update_due(now) {
            return;
        }
        self.next_update_ns = now + BCACHE_UPDATE_NS;
        let error = dirty_bytes as i64 - target_bytes as i64;
        if (error < 0 && self.integral_byte_s > 0) || error > 0 {
            self.integral_byte_s += error * (BCACHE_UPDATE_NS / 1_000_000_000) as i64;
        }
        let rate = error / BCACHE_P_TERM_INVERSE + self.integral_byte_s / BCACHE_I_TERM_INVERSE;
        self.rate_bytes_per_s = if error > 0 { rate.max(1) as u64 } else { 0 };
    }

    fn may_start(&self, now: u64) -> bool {
        self.rate_bytes_per_s > 0 && self.next_start_ns <= now
    }

    /// A paced writeback of `bytes` started: the next waits `bytes / rate`.
    fn started(&mut self, now: u64, bytes: u64) {
        let gap = (bytes as u128 * 1_000_000_000 / self.rate_bytes_per_s.max(1) as u128)
            .min(u64::MAX as u128) as u64;
        self.next_start_ns = self
            .next_start_ns
            .saturating_add(gap)
            .clamp(now.saturating_sub(PACE_BEHIND_NS), now + PACE_AHEAD_NS);
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bcache_rate_follows_the_error_and_its_integral() {
        let mut p = WritebackPace::default();
        let mib = 1u64 << 20;
        // 50 MiB over a 10 MiB target: 40 MiB / 40 = 1 MiB/s, plus 200 MiB·s / 10000.
        p.update(0, 50 * mib, 10 * mib);
        assert_eq!(p.rate_bytes_per_s(), mib + 200 * mib / 10_000);
        // Not again within the period.
        p.update(BCACHE_UPDATE_NS - 1, 90 * mib, 10 * mib);
        assert_eq!(p.rate_bytes_per_s(), mib + 200 * mib / 10_000);
        // Paced: a 1 MiB writeback, then the next about a second later.
        assert!(p.may_start(0));
        p.started(0, mib);
        assert!(!p.may_start(900_000_000));
        assert!(p.may_start(1_000_000_000));
        // Under the target: nothing until idle.
        p.update(BCACHE_UPDATE_NS, 5 * mib, 10 * mib);
        assert_eq!(p.rate_bytes_per_s(), 0);
        assert!(!p.may_start(10 * BCACHE_UPDATE_NS));
        // Idle is measured from the last request.
        p.request(7_000_000_000);
        assert!(!p.idle(7_500_000_000, SMQ_IDLE_NS));
        assert!(p.idle(8_000_000_000, SMQ_IDLE_NS));
    }
}
