//! Cache placement (issue 17): the fast pool as a write-back cache of the home (slow)
//! pool, the way an operator would deploy dm-cache (smq policy) or bcache instead of
//! tiering. Unlike a tier move, a promotion *copies* the chunk: its slow slot stays
//! reserved, so evicting a clean chunk costs no I/O (the map points back at the slot).
//!
//! State: the chunk map entry of a cached chunk points at its fast copy (so reads and
//! writes need no extra lookup), and [`CacheTable`] holds, for cached chunks only, the
//! slow slot and a dirty bit: 16 bytes per cached chunk, so with the map and the monitor
//! a fully cached volume stays at 32 bytes per chunk.
//!
//! Crash safety (docs/ARCHITECTURE.md, "Cache placement"):
//! - A fill (slow -> fast copy) is journaled as one `Record::Cache { chunk, fast, slow }`
//!   after the copy, with the fast pool flushed first (the commit's data phase); a crash
//!   before it leaves the chunk at its slow slot and the fast chunk unreferenced.
//! - Clean/dirty is not journaled: **every cached chunk is dirty at mount**. So no write
//!   to a chunk "recorded clean" can be forgotten, and the FLUSH rule holds trivially;
//!   the price is one writeback per cached chunk after a crash or restart.
//! - Eviction maps the chunk back to its slow slot with a `Record::Map`, only when the
//!   chunk is clean: its writeback (fast -> slow copy) has completed and no write came
//!   since (writes to a chunk being cleaned wait, as for tier moves). The commit flushes
//!   the slow pool before that record, and the fast chunk is freed only once the record
//!   is durable and nothing reads it (`reclaim.rs`).
//! - Replay: `Record::Cache` maps the chunk to its fast copy and records its slow slot;
//!   `Record::Map` of a chunk ends its caching. Checkpoints carry the table after the
//!   overlay; mount claims both slots of every cached chunk.

pub(crate) mod table;

pub use table::{CacheTable, CachedChunk, SMQ_PROMOTE_HITS, decode_slot, encode_slot};
use table::{MAX_CANDIDATES, dirty_bytes};

use crate::chunkmap::ChunkLoc;
use crate::config::{CachePolicy, Placement, Provisioning};
use crate::engine::Engine;
use crate::inject::InjectedBug;
use crate::jobs::copy::CopyFor;
use crate::journal::Record;
use crate::layout::chunk_offset;
use crate::reclaim::Freed;
use crate::types::{Errno, Outputs, PoolId};
use crate::volume::ChunkState;

impl Engine {
    /// Whether chunk `c` of volume `v` is cached, where its slow slot is and whether it
    /// is dirty.
    pub fn cached_chunk(&self, v: crate::types::VolumeId, c: u64) -> Option<CachedChunk> {
        let vol = self.vols.get(v.0 as usize)?;
        let slow = vol.cache.slow_slot(c)?;
        Some(CachedChunk {
            slow: vol.resolve(slow, c)?,
            dirty: vol.cache.is_dirty(c),
        })
    }

    fn cache_policy(&self, v: usize) -> Option<CachePolicy> {
        match self.vols[v].rec.placement {
            Placement::Cache { cache_policy, .. } => Some(cache_policy),
            _ => None,
        }
    }

    /// After a request to a `cache` volume: touch its cached chunks and remember the
    /// ones the policy admits. `stream_bytes`: the length of the sequential stream the
    /// request belongs to (its own length if random).
    pub(crate) fn cache_note(
        &mut self,
        now: u64,
        v: u32,
        off: u64,
        len: u64,
        stream_bytes: u64,
        epoch: u16,
    ) {
        let vi = v as usize;
        let Some(policy) = self.cache_policy(vi) else {
            return;
        };
        let cb = self.cfg.chunk_bytes;
        let cutoff = self.cfg.tiering.sequential_cutoff_bytes;
        let vol = &mut self.vols[vi];
        vol.writeback.request(now);
        if len == 0 || vol.chunks == 0 {
            return;
        }
        for c in off / cb..=((off + len - 1) / cb).min(vol.chunks - 1) {
            if vol.cache.slow_slot(c).is_some() {
                vol.cache.touch(c);
                continue;
            }
            let admit = match policy {
                // bcache: a sequential stream past the cutoff bypasses the cache.
                CachePolicy::Bcache => stream_bytes <= cutoff,
                CachePolicy::Smq => vol.monitor.accesses(c, epoch) >= SMQ_PROMOTE_HITS,
            };
            if admit && vol.hot_candidates.len() < MAX_CANDIDATES {
                vol.hot_candidates.insert(c);
            }
        }
    }

    /// A write of volume bytes `[s, e)` is about to be issued to chunk `c`: a cached
    /// chunk becomes dirty there. Called after any wait behind a fill or a writeback, so
    /// a writeback that completed before this write cannot leave it recorded clean.
    pub(crate) fn cache_wrote(&mut self, now: u64, v: u32, c: u64, s: u64, e: u64) {
        let cb = self.cfg.chunk_bytes;
        let part = (cb / 64).max(1);
        let base = c * cb;
        let (first, last) = ((s - base) / part, (e.max(s + 1) - 1 - base) / part);
        let (first, last) = (first.min(63), last.min(63));
        let parts = if last - first == 63 {
            u64::MAX
        } else {
            ((1u64 << (last - first + 1)) - 1) << first
        };
        if self.cache_policy(v as usize).is_none() {
            // Not a cache: a kept home (`tier_home.rs`), if any, is stale there.
            return self.kept_home_written(v as usize, c, parts);
        }
        let cache = &mut self.vols[v as usize].cache;
        let was_dirty = cache.dirty_count();
        cache.mark_dirty(c, parts);
        // A first dirty chunk gives the tier tick work (its cleaning, once idle): the
        // request's own arming ran before the write dirtied anything, and without this
        // a last write would stay dirty however long the volume then sat idle.
        if was_dirty == 0 && cache.dirty_count() > 0 {
            self.arm_tier_timer(now);
        }
    }

    /// Fast-pool chunks `cache` volume `v` may hold.
    pub(crate) fn cache_budget(&self, v: usize) -> u64 {
        let Placement::Cache {
            fast_budget_bytes, ..
        } = self.vols[v].rec.placement
        else {
            return 0;
        };
        if fast_budget_bytes > 0 {
            return fast_budget_bytes / self.cfg.chunk_bytes;
        }
        let Some(f) = self.vols[v].rec.fast_pool else {
            return 0;
        };
        // dm-cache and bcache give each cached device its own cache (or one shared
        // set); here each volume gets an equal slice of the pool.
        let sharing = self
            .vols
            .iter()
            .filter(|w| {
                matches!(w.rec.placement, Placement::Cache { .. }) && w.rec.fast_pool == Some(f)
            })
            .count() as u64;
        self.pools[f.0 as usize].alloc.chunks() / sharing.max(1)
    }

    /// Whether a tier tick has anything to do for `cache` volume `v`: candidates to fill,
    /// or dirty chunks (the cleaner's rules depend on time: idle, bcache's pace;
    /// `cache_writeback.rs`).
    pub(crate) fn cache_work(&self, v: usize) -> bool {
        !self.vols[v].hot_candidates.is_empty() || self.vols[v].cache.dirty_count() > 0
    }

    /// Whether chunk `c` of volume `v` has writes in flight or a fill, writeback or move
    /// under way.
    pub(crate) fn cache_chunk_busy(&self, v: usize, c: u64) -> bool {
        self.vols[v]
            .activity
            .get(&c)
            .is_some_and(|a| a.writes_in_flight > 0 || a.state != ChunkState::Idle)
    }

    /// One step of the cache of volume `v` within the tier tick's rate limit: write back
    /// when the cleaner's rules say so, else fill the hottest candidate, evicting (by
    /// CLOCK) when the volume's cache is full. True if it started something.
    pub(crate) fn cache_step(&mut self, now: u64, v: usize, epoch: u16, out: &mut Outputs) -> bool {
        let Some(fast) = self.vols[v].rec.fast_pool else {
            return false;
        };
        if self.cache_clean_step(now, v, out) {
            return true;
        }
        // The hottest candidate still uncached (and mapped: nothing to copy otherwise).
        let vol = &mut self.vols[v];
        let mut best: Option<(u32, u64)> = None;
        let mut stale = Vec::new();
        for &c in &vol.hot_candidates {
            let on_slow = vol
                .resolve(vol.map.get(c), c)
                .is_some_and(|(p, _)| p == vol.rec.home_pool);
            if !on_slow || vol.cache.slow_slot(c).is_some() {
                stale.push(c);
            } else {
                let s = vol.monitor.score(c, epoch);
                if best.is_none_or(|(bs, _)| s > bs) {
                    best = Some((s, c));
                }
            }
        }
        for c in stale {
            vol.hot_candidates.remove(&c);
        }
        let Some((_, c)) = best else { return false };
        if self.cache_chunk_busy(v, c) {
            return false;
        }
        let held = self.vols[v].cache.len() + self.vols[v].promoting;
        if held < self.cache_budget(v) {
            if self.pools[fast.0 as usize].alloc.available_chunks() == 0 {
                // Room is on its way back (a freed chunk waiting for durability).
                return false;
            }
            self.vols[v].hot_candidates.remove(&c);
            return self.start_cache_fill(now, v, c, out);
        }
        // Full: evict by recency. A clean victim goes at once, without I/O; the fill
        // follows when its fast chunk is free. A dirty one is written back first, and
        // while it is, no other victim is taken for the same room.
        let vol = &mut self.vols[v];
        if vol.cache.evicting > 0 {
            return false;
        }
        let activity = &vol.activity;
        let busy = |c: u64| {
            activity
                .get(&c)
                .is_some_and(|a| a.writes_in_flight > 0 || a.state != ChunkState::Idle)
        };
        let Some(victim) = vol.cache.victim(busy) else {
            return false;
        };
        if vol.cache.is_dirty(victim) {
            self.start_cache_clean(now, v, victim, true, out)
        } else {
            self.cache_evict(now, v, victim, false);
            true
        }
    }

    /// Copy chunk `c` of volume `v` from its slow slot to a fresh fast chunk.
    pub(crate) fn start_cache_fill(
        &mut self,
        now: u64,
        v: usize,
        c: u64,
        out: &mut Outputs,
    ) -> bool {
        let cb = self.cfg.chunk_bytes;
        let vol = &self.vols[v];
        let (Some(fast), Some((src_pool, src))) =
            (vol.rec.fast_pool, vol.resolve(vol.map.get(c), c))
        else {
            return false;
        };
        if src_pool == fast {
            return false;
        }
        let Some(pc) = self.pools[fast.0 as usize].alloc.allocate(0, false) else {
            return false;
        };
        let dst = ChunkLoc::At(fast, pc);
        self.vols[v].activity.entry(c).or_default().state = ChunkState::Moving { dst };
        self.vols[v].promoting += 1;
        self.tier.started(cb, None);
        self.start_copy(
            now,
            CopyFor::CacheFill {
                vol: v as u32,
                chunk: c,
            },
            (src_pool, chunk_offset(src, cb)),
            (fast, chunk_offset(pc, cb)),
            cb,
            out,
        );
        true
    }

    /// Write cached chunk `c` back to its slow slot; evict it after when `evict`.
    pub(crate) fn start_cache_clean(
        &mut self,
        now: u64,
        v: usize,
        c: u64,
        evict: bool,
        out: &mut Outputs,
    ) -> bool {
        let cb = self.cfg.chunk_bytes;
        let vol = &self.vols[v];
        let (Some(slow), Some((fp, fc))) = (vol.cache.slow_slot(c), vol.resolve(vol.map.get(c), c))
        else {
            return false;
        };
        let Some((sp, sc)) = vol.resolve(slow, c) else {
            return false;
        };
        // One copy per run of dirty parts.
        let parts = vol.cache.dirty_parts(c);
        let part = (cb / 64).max(1);
        let mut runs: Vec<(u64, u64)> = Vec::new();
        for i in 0..64u64.min(cb / part) {
            if parts >> i & 1 == 1 {
                match runs.last_mut() {
                    Some(r) if r.1 == i * part => r.1 += part,
                    _ => runs.push((i * part, (i + 1) * part)),
                }
            }
        }
        if runs.is_empty() {
            return false;
        }
        self.vols[v].activity.entry(c).or_default().state = ChunkState::Cleaning {
            evict,
            pending: runs.len() as u32,
            failed: false,
        };
        self.vols[v].cache.evicting += evict as u32;
        self.vols[v].cache.cleaning += 1;
        let bytes: u64 = runs.iter().map(|r| r.1 - r.0).sum();
        self.tier.started(bytes, None);
        self.vols[v].stats.migrated_bytes += bytes;
        for (a, b) in runs {
            self.start_copy(
                now,
                CopyFor::CacheClean {
                    vol: v as u32,
                    chunk: c,
                },
                (fp, chunk_offset(fc, cb) + a),
                (sp, chunk_offset(sc, cb) + a),
                b - a,
                out,
            );
        }
        // The injected bug maps the chunk back before its writeback has landed: reads
        // see the stale slow copy, and a crash after the record is durable keeps it.
        if evict && self.bug_is(InjectedBug::CacheCleanTooEarly) {
            self.cache_evict(now, v, c, true);
        }
        true
    }

    /// Evict clean chunk `c`: map it back to its slow slot; the fast chunk is freed once
    /// that is durable and drained. `was_dirty`: it was written back first (for stats).
    pub(crate) fn cache_evict(&mut self, now: u64, v: usize, c: u64, was_dirty: bool) {
        let Some(slow) = self.vols[v].cache.remove(c) else {
            return;
        };
        self.vols[v].promo.demoted(c);
        let st = &mut self.vols[v].stats;
        st.demotions += 1;
        if was_dirty {
            st.cache.evictions_dirty += 1;
        } else {
            st.cache.evictions_clean += 1;
        }
        self.switch_chunk(v as u32, c, slow, true);
        self.arm_commit_timer(now);
    }

    /// A fill or writeback copy finished.
    pub(crate) fn cache_copy_done(
        &mut self,
        now: u64,
        v: u32,
        c: u64,
        fill: bool,
        result: Result<(), Errno>,
        out: &mut Outputs,
    ) {
        let vi = v as usize;
        let cb = self.cfg.chunk_bytes;
        let epoch = self.decay_epoch(now);
        let Some(state) = self.vols[vi].activity.get(&c).map(|a| a.state) else {
            return;
        };
        // A writeback that worked lets the cleaner go on at once; one that failed is
        // retried from the tier tick, not in a loop at device speed (DST seed 172: a
        // thick volume's home pool out of space failed every writeback, and the next
        // started as each failed, so the engine never went quiet).
        let mut clean_on = false;
        match state {
            ChunkState::Moving { dst } if fill => {
                self.tier.ended(None);
                self.vols[vi].promoting -= 1;
                let vol = &mut self.vols[vi];
                let slow = vol.map.get(c);
                match (result, dst) {
                    (Ok(()), ChunkLoc::At(fp, _)) => {
                        vol.set_loc(c, dst);
                        vol.cache.insert(c, slow, false);
                        // Newest in recency: the sweep passes it once before evicting.
                        vol.cache.touch(c);
                        vol.journal.append(Record::Cache {
                            chunk: c,
                            fast: dst.encode(),
                            slow: encode_slot(slow),
                        });
                        vol.dirty_pools |= 1 << fp.0;
                        vol.stats.promotions += 1;
                        vol.stats.cache.fills += 1;
                        // A `hot` promotion that kept its home (`tier_home.rs`): scored
                        // like any other (`promo.rs`).
                        if !matches!(vol.rec.placement, Placement::Cache { .. }) {
                            vol.promo.promoted(c, epoch);
                        }
                        vol.stats.migrated_bytes += cb;
                        self.arm_commit_timer(now);
                    }
                    (_, ChunkLoc::At(p, pc)) => self.pools[p.0 as usize].alloc.release(pc),
                    _ => {}
                }
            }
            ChunkState::Cleaning {
                evict,
                pending,
                failed,
            } if !fill => {
                let failed = failed || result.is_err();
                if pending > 1 {
                    if let Some(a) = self.vols[vi].activity.get_mut(&c) {
                        a.state = ChunkState::Cleaning {
                            evict,
                            pending: pending - 1,
                            failed,
                        };
                    }
                    return;
                }
                self.tier.ended(None);
                clean_on = !failed;
                let vol = &mut self.vols[vi];
                vol.cache.evicting -= evict as u32;
                vol.cache.cleaning -= 1;
                if !failed && vol.cache.slow_slot(c).is_some() {
                    if let Some((sp, _)) = vol.cache.slow_slot(c).and_then(|s| vol.resolve(s, c)) {
                        vol.dirty_pools |= 1 << sp.0;
                    }
                    // Writes to the chunk waited for this copy, so its dirty parts are
                    // the ones copied, and it holds the newest data.
                    let parts = vol.cache.dirty_parts(c);
                    vol.stats.cache.writebacks += 1;
                    vol.stats.cache.writeback_bytes += dirty_bytes(parts, cb);
                    vol.cache.set_dirty(c, false);
                    if evict {
                        self.cache_evict(now, vi, c, true);
                    }
                }
            }
            _ => return,
        }
        if let Some(a) = self.vols[vi].activity.get_mut(&c) {
            a.state = ChunkState::Idle;
        }
        self.wake_waiters(now, v, c, out);
        if clean_on {
            self.cache_clean_more(now, vi, out);
        }
    }

    /// A whole cached chunk of a thin volume was unmapped by a trim (record `seq`): its
    /// slow slot goes too (the fast chunk is freed by the caller).
    pub(crate) fn cache_unmapped(&mut self, v: u32, c: u64, seq: u64) {
        let vol = &mut self.vols[v as usize];
        if let Some(ChunkLoc::At(p, pc)) = vol.cache.remove(c) {
            self.defer_free(
                Freed::Chunks {
                    pool: p,
                    first: pc,
                    n: 1,
                },
                smallvec::smallvec![(v, seq)],
            );
        }
    }

    /// Slow slots held by cached chunks of thin volumes (for mount and invariants).
    pub(crate) fn cache_claims(vol: &crate::volume::Volume) -> Vec<(PoolId, u64, u64)> {
        if vol.rec.provisioning == Provisioning::Thick {
            return Vec::new();
        }
        vol.cache
            .iter()
            .filter_map(|(c, slow, _)| match slow {
                ChunkLoc::At(p, pc) => Some((p, pc, c)),
                _ => None,
            })
            .collect()
    }
}
