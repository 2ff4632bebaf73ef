//! Background tier migration (seed 000's "migrate data between SSDs and HDDs").
//!
//! `split` placement is static: a chunk goes where its hash says when it is allocated
//! (or provisioned). Every `interval_ns` the engine reconsiders `hot` placement: `hot`
//! volumes promote their hottest random chunks to the
//! fast pool and, when it is full, demote the coldest there if a candidate is hotter by
//! the hysteresis margin (scaled by volume priority, so a higher-priority volume wins
//! contested space) and, if the coldest is in use, by more than counting noise
//! (`clearly_hotter`). Moves are rate-limited by a token bucket and a cap on moves in
//! flight, so foreground I/O keeps priority.
//!
//! A move copies a whole chunk: read the source, write the destination, then switch the
//! map and journal it. While it runs, writes and trims to the chunk wait (reads use the
//! source), so no write is lost or left stale. The source is freed only once the switch
//! record is durable and no operation still targets it (see `reclaim.rs`), so a crash
//! mid-move leaves the old mapping, intact.

use crate::chunkmap::ChunkLoc;
use crate::config::{Placement, Provisioning};
use crate::engine::{Engine, EngineState};
use crate::jobs::copy::CopyFor;
use crate::layout::chunk_offset;
use crate::types::{Errno, Outputs, PoolId, VolumeId};
use crate::volume::ChunkState;

/// Hot-candidate list bound per volume.
const MAX_CANDIDATES: usize = 4096;
/// Fast-pool chunks of a volume compared per step when looking for the coldest.
const DEMOTE_SAMPLE: u64 = 512;
/// Chunks of a volume examined per step at most in that search. Scanning until 512 fast
/// chunks were seen (up to 64 Ki chunks) found the true coldest on sparse volumes and made
/// the SPC-like rows 10-60 % faster, but on the `wsrch` trace (reuse 1.0) it let every
/// chunk read 4 times displace an untouched one, and `hot` fell behind `split` there
/// (BENCHMARKS.md, issue 17 item 4); a window of 512 chunks refuses most such swaps.
const DEMOTE_SCAN_MAX: u64 = 512;

/// A volume with no request arriving or completing for this long is idle: its fast
/// chunks are the first to go when a busy volume needs room, whatever their heat (a VM
/// that stopped or finished keeps its heat for several decay periods otherwise).
pub const IDLE_VOLUME_NS: u64 = 1_000_000_000;

/// Heat differences smaller than this many standard deviations of their noise, squared,
/// are not acted on (4: two sigmas).
const NOISE_SIGMAS_SQUARED: u64 = 4;

/// Whether a candidate of heat `cand` should displace a fast chunk of heat `cold` (both
/// weighted by priority): hotter by `hysteresis_pct`, and by more than noise. Heat is a
/// decayed access count, so two chunks with the same access rate differ by about the
/// square root of their sum by chance; the hottest of hundreds of candidates against the
/// coldest of hundreds of fast chunks clears any fixed percentage when heat is flat (fio
/// zipf:0.8 over 1 MiB chunks: 1912 swaps of 4-13 against 0-8 in one run), and each swap
/// costs two chunk copies. So when the victim is in use (accessed in the current decay
/// period) the difference must also exceed two standard deviations:
/// (cand - cold)^2 >= 4 (cand + cold).
pub(crate) fn clearly_hotter(cand: u64, cold: u64, hysteresis_pct: u32, cold_in_use: bool) -> bool {
    let margin = 100 + hysteresis_pct as u64;
    let diff = cand.saturating_sub(cold);
    cand * 100 > cold.max(1) * margin
        && (!cold_in_use || diff * diff >= NOISE_SIGMAS_SQUARED * (cand + cold))
}

/// Whether `split` placement puts chunk `c` of volume `vol_id` on the fast pool.
pub fn split_selects(vol_id: u32, c: u64, fast_percent: u8) -> bool {
    let mut z = (vol_id as u64) << 40 ^ c ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    z % 100 < fast_percent as u64
}

impl Engine {
    pub(crate) fn decay_epoch(&self, now: u64) -> u16 {
        (now / self.cfg.tiering.decay_ns.max(1)) as u16
    }

    /// After a request to a `hot` volume: remember chunks worth promoting.
    pub(crate) fn note_hot(&mut self, v: u32, off: u64, len: u64, epoch: u16) {
        let cb = self.cfg.chunk_bytes;
        let min = self.cfg.tiering.promote_min_heat;
        let vol = &mut self.vols[v as usize];
        let Some(fast) = vol.rec.fast_pool else {
            return;
        };
        if len == 0 {
            return;
        }
        for c in off / cb..=((off + len - 1) / cb).min(vol.chunks - 1) {
            let on_fast = vol
                .resolve(vol.map.get(c), c)
                .is_some_and(|(p, _)| p == fast);
            if on_fast {
                vol.promo.hit(c);
            } else if vol.hot_candidates.len() < MAX_CANDIDATES
                && vol.monitor.score(c, epoch) >= min
            {
                vol.hot_candidates.insert(c);
            }
        }
    }

    /// Whether a tier tick could have anything to do.
    fn tier_work(&self) -> bool {
        self.tier.in_flight() > 0
            || (0..self.vols.len()).any(|i| match self.vols[i].rec.placement {
                Placement::Pinned => false,
                Placement::Split { .. } => false,
                Placement::Hot { .. } => !self.vols[i].hot_candidates.is_empty(),
                Placement::Cache { .. } => self.cache_work(i),
            })
    }

    pub(crate) fn arm_tier_timer(&mut self, now: u64) {
        if self.tier.timer_at.is_none() && self.state == EngineState::Ready && self.tier_work() {
            let t = now + self.cfg.tiering.interval_ns;
            self.tier.timer_at = Some(t);
        }
    }

    /// While a live migration of volume `v` runs, no tier move of it starts: the job
    /// copies every chunk from where the map says and switches them all at its pivot, and
    /// LR holds a destination copy of each switched chunk that a move would free
    /// (injected bug `tier-moves-while-migrating`; docs/MIGRATION.md, tiered volumes).
    pub(crate) fn tiers_frozen(&self, v: usize) -> bool {
        (self.migrations.jobs.contains_key(&(v as u32))
            || self.migrations.thick.rehoming.contains(&(v as u32))
            || self.migrations.cache_rehoming.contains(&(v as u32)))
            && !self.bug_is(crate::inject::InjectedBug::TierMovesWhileMigrating)
    }

    /// Fast-pool chunks volume `v` may hold.
    fn fast_budget(&self, v: usize) -> u64 {
        match self.vols[v].rec.placement {
            Placement::Hot {
                fast_budget_bytes, ..
            } if fast_budget_bytes > 0 => fast_budget_bytes / self.cfg.chunk_bytes,
            _ => u64::MAX,
        }
    }

    /// Whether volume `v` may put one more chunk on fast pool `f` by promotion or a new
    /// chunk.
    pub(crate) fn hot_has_room(&self, v: usize, f: PoolId) -> bool {
        self.chunks_on_fast(v, f) + self.vols[v].promoting < self.fast_budget(v)
            && self.pools[f.0 as usize].alloc.available_chunks() > 0
    }

    /// Chunks of volume `v` on pool `f`, counting new chunks whose first write to `f` is
    /// still in flight: `chunks_on` counts a chunk once it is mapped, so several first
    /// writes in flight at once would each see the same room (9 chunks on an 8 MiB budget
    /// under fio at queue depth 4). The activity map holds only chunks with I/O in flight.
    fn chunks_on_fast(&self, v: usize, f: PoolId) -> u64 {
        let vol = &self.vols[v];
        let allocating = vol
            .activity
            .values()
            .filter(|a| {
                matches!(a.state, ChunkState::Allocating { loc: ChunkLoc::At(p, _), .. } if p == f)
            })
            .count() as u64;
        vol.chunks_on[f.0 as usize] + allocating
    }

    /// Whether a new chunk of `hot` volume `v` starts on fast pool `f`: only while the
    /// volume is under its share of the pool (weighted by priority among the `hot`
    /// volumes using it), so the first volume to write cannot take the whole pool before
    /// the monitor knows anything. Promotion may go beyond the share into free room.
    pub(crate) fn hot_places_new_on_fast(&self, v: usize, f: PoolId) -> bool {
        let weights: u64 = (0..self.vols.len())
            .filter(|&w| {
                matches!(self.vols[w].rec.placement, Placement::Hot { .. })
                    && self.vols[w].rec.fast_pool == Some(f)
            })
            .map(|w| self.priority(w) as u64)
            .sum();
        let pool_chunks = self.pools[f.0 as usize].alloc.chunks();
        let share = pool_chunks * self.priority(v) as u64 / weights.max(1);
        self.chunks_on_fast(v, f) < share && self.hot_has_room(v, f)
    }

    /// Whether volume `v` has seen no request for [`IDLE_VOLUME_NS`].
    fn volume_idle(&self, now: u64, v: usize) -> bool {
        let st = &self.vols[v].stats;
        st.first_arrival_ns.is_some()
            && now.saturating_sub(st.last_arrival_ns.max(st.last_completion_ns)) > IDLE_VOLUME_NS
    }

    fn priority(&self, v: usize) -> u32 {
        match self.vols[v].rec.placement {
            Placement::Hot { priority, .. } => priority as u32 + 1,
            _ => 1,
        }
    }

    /// Earn the migration bandwidth (`bytes_per_s`) since the last refill.
    pub(crate) fn refill_tier_bucket(&mut self, now: u64) {
        (self.tier).refill(now, &self.cfg.tiering, self.cfg.chunk_bytes);
    }

    /// Reconsider placement; start moves within the rate limit.
    pub(crate) fn tier_tick(&mut self, now: u64, out: &mut Outputs) {
        self.refill_tier_bucket(now);
        let epoch = self.decay_epoch(now);
        let n = self.vols.len();
        let mut idle = 0;
        // Round-robin over volumes so none monopolises the budget.
        while (self.tier).may_start(self.cfg.tiering.max_moves, self.cfg.chunk_bytes) && idle < n {
            let v = self.tier.next_volume(n);
            let started = match self.vols[v].rec.placement {
                Placement::Pinned => false,
                Placement::Split { .. } => false,
                // A migrating volume's chunks stay where the job expects them.
                Placement::Hot { .. } | Placement::Cache { .. } if self.tiers_frozen(v) => false,
                Placement::Hot { .. } => self.hot_step(now, v, epoch, out),
                Placement::Cache { .. } => self.cache_step(now, v, epoch, out),
            };
            if started {
                idle = 0;
            } else {
                idle += 1;
            }
        }
        if idle < n && self.cfg.budget_reports {
            // The budget stopped it with volumes still to consider.
            self.tier.note_throttled();
        }
        self.arm_tier_timer(now);
    }

    /// `hot`: promote the hottest candidate, demoting the coldest fast chunk if needed.
    fn hot_step(&mut self, now: u64, v: usize, epoch: u16, out: &mut Outputs) -> bool {
        let Some(fast) = self.vols[v].rec.fast_pool else {
            return false;
        };
        let min = self.cfg.tiering.promote_min_heat;
        // The hottest candidate still on the slow tier.
        let vol = &mut self.vols[v];
        let mut best: Option<(u32, u64)> = None;
        let mut stale = Vec::new();
        for &c in &vol.hot_candidates {
            let on_fast = vol
                .resolve(vol.map.get(c), c)
                .is_none_or(|(p, _)| p == fast);
            let s = vol.monitor.score(c, epoch);
            if on_fast || s < min {
                stale.push(c);
            } else if best.is_none_or(|(bs, _)| s > bs) {
                best = Some((s, c));
            }
        }
        for c in stale {
            vol.hot_candidates.remove(&c);
        }
        let Some((score, c)) = best else { return false };
        let room_in_budget =
            self.chunks_on_fast(v, fast) + self.vols[v].promoting < self.fast_budget(v);
        if self.hot_has_room(v, fast) {
            self.vols[v].hot_candidates.remove(&c);
            return self.start_move(now, v, c, fast, out);
        }
        // Room is already being made: promote when it lands rather than demote more. A
        // remap to a kept home makes room without a move: its fast chunk is free once the
        // record is durable (`tier_home.rs`).
        if self.tier.demoting(fast) > 0
            || (self.cfg.tiering.keep_home && self.kept_home_room_coming(fast))
        {
            return false;
        }
        // Full: find the coldest fast chunk, of this volume if over its budget, else of
        // any `hot` volume on the pool, weighed by priority.
        let weight = score as u64 * self.priority(v) as u64;
        let owners: Vec<usize> = if room_in_budget {
            (0..self.vols.len())
                .filter(|&w| {
                    matches!(self.vols[w].rec.placement, Placement::Hot { .. })
                        && self.vols[w].rec.fast_pool == Some(fast)
                        && !self.tiers_frozen(w)
                })
                .collect()
        } else {
            vec![v]
        };
        // A volume whose promotions are re-read searches the whole volume for the
        // coldest fast chunk; otherwise, and until its promotions have shown it, a window
        // (`promo.rs`).
        self.vols[v].promo.age(epoch);
        let paying = self.vols[v].promo.pays();
        let coldest = self.coldest_fast_chunk(now, v, fast, epoch, owners, paying);
        let Some((cold, w, d, unused)) = coldest else {
            return false;
        };
        // The noise test applies to a victim in use (accessed since this decay period
        // began) and to any victim of the candidate's own volume: swapping two chunks of
        // one VM only re-ranks them, which at flat heat is noise (zipf0.8 one VM: 909 ->
        // 629 swaps). A victim of another volume not accessed this period shows no current
        // use: the percentage margin alone decides, so room passes quickly from a VM that
        // has moved on to one that is busy (requiring the noise test there slowed the
        // VMs' race for the pool: zipf1.0 with 2 VMs 11 % slower).
        let in_use = !unused || w == v;
        if clearly_hotter(weight, cold, self.cfg.tiering.hysteresis_pct, in_use) {
            let home = self.vols[w].rec.home_pool;
            return self.start_move(now, w, d, home, out);
        }
        false
    }

    /// The coldest chunk on pool `fast` among `owners`' volumes, sampled from each one's
    /// scan cursor (the whole volume when `paying`): (weighted heat, volume, chunk, unused
    /// this period).
    fn coldest_fast_chunk(
        &mut self,
        now: u64,
        v: usize,
        fast: PoolId,
        epoch: u16,
        owners: Vec<usize>,
        paying: bool,
    ) -> Option<(u64, usize, u64, bool)> {
        let mut coldest: Option<(u64, usize, u64, bool)> = None;
        for w in owners {
            let prio = self.priority(w) as u64;
            let vol_idle = w != v && self.volume_idle(now, w);
            let vol = &mut self.vols[w];
            let mut seen = 0;
            let scan = if paying { vol.chunks } else { DEMOTE_SCAN_MAX };
            for _ in 0..scan.min(vol.chunks) {
                if seen == DEMOTE_SAMPLE {
                    break;
                }
                let d = vol.scan_cursor % vol.chunks;
                vol.scan_cursor += 1;
                let on_fast = vol
                    .resolve(vol.map.get(d), d)
                    .is_some_and(|(p, _)| p == fast);
                if on_fast {
                    seen += 1;
                    // An idle volume's chunks are cold whatever their heat says: its
                    // VM has stopped (or finished) and the room is worth more in use.
                    let (s, unused) = if vol_idle {
                        (0, true)
                    } else {
                        let s = vol.monitor.score(d, epoch) as u64 * prio;
                        (s, vol.monitor.idle_epochs(d, epoch) > 0)
                    };
                    if coldest.is_none_or(|(cs, _, _, _)| s < cs) {
                        coldest = Some((s, w, d, unused));
                    }
                }
            }
        }
        coldest
    }

    /// Begin moving chunk `c` of volume `v` to pool `dst_pool`. False if not possible now.
    pub(crate) fn start_move(
        &mut self,
        now: u64,
        v: usize,
        c: u64,
        dst_pool: PoolId,
        out: &mut Outputs,
    ) -> bool {
        let cb = self.cfg.chunk_bytes;
        let vol = &self.vols[v];
        if self.tiers_frozen(v)
            || vol
                .activity
                .get(&c)
                .is_some_and(|a| a.writes_in_flight > 0 || a.state != ChunkState::Idle)
        {
            return false;
        }
        let Some((src_pool, src)) = vol.resolve(vol.map.get(c), c) else {
            return false;
        };
        if src_pool == dst_pool {
            return false;
        }
        let is_demotion = dst_pool == vol.rec.home_pool;
        // A chunk whose home was kept goes back to it (even with `keep_home` since
        // turned off: the table still holds the home); a promotion keeps the home when
        // `keep_home` says so (`tier_home.rs`).
        if is_demotion && vol.cache.slow_slot(c).is_some() {
            return self.demote_to_kept_home(now, v, c, out);
        }
        if !is_demotion && let Some(started) = self.promote_keeping_home(now, v, c, out) {
            return started;
        }
        let vol = &self.vols[v];
        // Back to a thick volume's home: its reserved slot. Anywhere else: a free chunk.
        let dst = if dst_pool == vol.rec.home_pool && vol.rec.provisioning == Provisioning::Thick {
            ChunkLoc::Home
        } else {
            let hint = if dst_pool == vol.rec.home_pool {
                vol.rec.home_base_chunk + c
            } else {
                0
            };
            match self.pools[dst_pool.0 as usize].alloc.allocate(hint, false) {
                Some(pc) => ChunkLoc::At(dst_pool, pc),
                None => return false,
            }
        };
        self.vols[v].activity.entry(c).or_default().state = ChunkState::Moving { dst };
        self.tier.started(cb, is_demotion.then_some(src_pool));
        if !is_demotion {
            self.vols[v].promoting += 1;
        }
        let Some(to) = self.vols[v].resolve(dst, c) else {
            unreachable!("a move targets a concrete chunk")
        };
        self.start_copy(
            now,
            CopyFor::TierMove {
                vol: v as u32,
                chunk: c,
            },
            (src_pool, chunk_offset(src, cb)),
            (to.0, chunk_offset(to.1, cb)),
            cb,
            out,
        );
        true
    }

    /// The copy of a moving chunk finished (`result` says whether both halves worked).
    pub(crate) fn move_done(
        &mut self,
        now: u64,
        v: u32,
        c: u64,
        result: Result<(), Errno>,
        out: &mut Outputs,
    ) {
        let Some(ChunkState::Moving { dst, .. }) =
            self.vols[v as usize].activity.get(&c).map(|a| a.state)
        else {
            return;
        };
        self.end_move(now, v, c, result.is_ok().then_some(dst), out);
    }

    /// Finish a move: switch the map (on success) and let waiting writes go.
    fn end_move(&mut self, now: u64, v: u32, c: u64, done: Option<ChunkLoc>, out: &mut Outputs) {
        let vi = v as usize;
        let cb = self.cfg.chunk_bytes;
        let epoch = self.decay_epoch(now);
        let Some(ChunkState::Moving { dst, .. }) = self.vols[vi].activity.get(&c).map(|a| a.state)
        else {
            self.tier.ended(None);
            return;
        };
        let vol = &mut self.vols[vi];
        let is_demotion = vol
            .resolve(dst, c)
            .is_some_and(|(p, _)| p == vol.rec.home_pool);
        if !is_demotion {
            vol.promoting -= 1;
            self.tier.ended(None);
        } else {
            let src = vol.resolve(vol.map.get(c), c).map(|(p, _)| p);
            self.tier.ended(src);
        }
        let vol = &mut self.vols[vi];
        match done {
            Some(dst) => {
                let fast = vol.rec.fast_pool;
                if let Some((p, _)) = vol.resolve(dst, c) {
                    if Some(p) == fast {
                        vol.stats.promotions += 1;
                        vol.promo.promoted(c, epoch);
                    } else {
                        vol.stats.demotions += 1;
                        vol.promo.demoted(c);
                    }
                }
                vol.stats.migrated_bytes += cb;
                // A thick volume's home slot stays reserved; anything else is freed.
                self.switch_chunk(v, c, dst, true);
                self.arm_commit_timer(now);
            }
            None => {
                // Never referenced by any mapping: give the destination straight back.
                if let ChunkLoc::At(p, pc) = dst {
                    self.pools[p.0 as usize].alloc.release(pc);
                }
            }
        }
        if let Some(a) = self.vols[vi].activity.get_mut(&c) {
            a.state = ChunkState::Idle;
        }
        self.wake_waiters(now, v, c, out);
    }

    /// Map chunk `c` of volume `v` on the volume's fast pool as if written there before
    /// the run, without I/O (simulation only, like [`Engine::provision`]): the oracle's
    /// static placement, which knows the workload in advance. `Ok(false)` when the fast
    /// pool has no free chunk; a chunk already mapped is left where it is.
    pub fn provision_fast(&mut self, v: VolumeId, c: u64) -> Result<bool, String> {
        if self.cfg.track_data {
            return Err("provisioning without I/O is only for timing simulation".into());
        }
        let vol = self.vols.get(v.0 as usize).ok_or("no such volume")?;
        let fast = vol.rec.fast_pool.ok_or("the volume has no fast pool")?;
        let unmapped = if vol.rec.provisioning == Provisioning::Thick {
            ChunkLoc::Home
        } else {
            ChunkLoc::Unmapped
        };
        if c >= vol.chunks || vol.map.get(c) != unmapped {
            return Ok(true);
        }
        match self.pools[fast.0 as usize].alloc.allocate(c, false) {
            Some(pc) => {
                self.vols[v.0 as usize].set_loc(c, ChunkLoc::At(fast, pc));
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The pool chunk `c` of volume `v` lives on (None: unmapped or no such chunk).
    pub fn chunk_pool(&self, v: VolumeId, c: u64) -> Option<PoolId> {
        let vol = self.vols.get(v.0 as usize)?;
        if c >= vol.chunks {
            return None;
        }
        vol.resolve(vol.map.get(c), c).map(|(p, _)| p)
    }

    /// Map chunks of a volume as if written before the run, without I/O, by the volume's
    /// placement (simulation only: nothing is journaled and no data exists).
    pub fn provision(
        &mut self,
        v: VolumeId,
        chunks: impl IntoIterator<Item = u64>,
    ) -> Result<(), String> {
        if self.cfg.track_data {
            return Err("provisioning without I/O is only for timing simulation".into());
        }
        let vi = v.0 as usize;
        let vol = self.vols.get(vi).ok_or("no such volume")?;
        let (thick, fast, id, placement, home, base) = (
            vol.rec.provisioning == Provisioning::Thick,
            vol.rec.fast_pool,
            vol.rec.id,
            vol.rec.placement.clone(),
            vol.rec.home_pool,
            vol.rec.home_base_chunk,
        );
        for c in chunks {
            if c >= self.vols[vi].chunks
                || self.vols[vi].map.get(c)
                    != if thick {
                        ChunkLoc::Home
                    } else {
                        ChunkLoc::Unmapped
                    }
            {
                continue;
            }
            let want_fast = match placement {
                Placement::Split { fast_percent } => split_selects(id, c, fast_percent),
                Placement::Hot { .. } => fast.is_some_and(|f| self.hot_places_new_on_fast(vi, f)),
                // A cache starts cold: everything on the home pool.
                Placement::Pinned | Placement::Cache { .. } => false,
            };
            let loc = match (want_fast, fast) {
                (true, Some(f)) => self.pools[f.0 as usize]
                    .alloc
                    .allocate(c, false)
                    .map(|pc| ChunkLoc::At(f, pc)),
                _ => None,
            };
            let loc = match loc {
                Some(l) => l,
                None if thick => continue,
                None => match self.pools[home.0 as usize].alloc.allocate(base + c, false) {
                    Some(pc) => ChunkLoc::At(home, pc),
                    None => {
                        return Err(format!(
                            "pool {} is full",
                            self.cfg.pools[home.0 as usize].name
                        ));
                    }
                },
            };
            self.vols[vi].set_loc(c, loc);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::clearly_hotter;

    #[test]
    fn a_displacing_candidate_must_beat_the_margin_and_the_noise() {
        assert!(!clearly_hotter(14, 10, 50, true), "under the 50 % margin");
        assert!(!clearly_hotter(14, 7, 50, true), "49 < 4 x 21: noise");
        assert!(clearly_hotter(32, 7, 50, true));
        assert!(clearly_hotter(5, 0, 50, true), "25 >= 4 x 5");
        assert!(!clearly_hotter(4, 1, 50, true), "9 < 4 x 5");
        // A victim not accessed this decay period: the percentage margin alone.
        assert!(clearly_hotter(14, 7, 50, false));
        assert!(!clearly_hotter(14, 10, 50, false));
    }
}
