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

/// Promotion candidates kept per volume (as for `hot`).
const MAX_CANDIDATES: usize = 4096;
/// smq, approximated: a chunk is promoted once its decayed access count reaches this,
/// i.e. on the second recent access. smq keeps no per-block hit count; it promotes
/// from a "hotspot" queue of coarse regions whose level rises with hits
/// (Documentation/admin-guide/device-mapper/cache-policies.rst; dm-cache-policy-smq.c).
pub const SMQ_PROMOTE_HITS: u32 = 2;

/// A slow slot in journal records and checkpoints: 0 is a thick volume's home slot,
/// else a `ChunkLoc::At` encoding.
pub fn encode_slot(loc: ChunkLoc) -> u64 {
    match loc {
        ChunkLoc::At(..) => loc.encode(),
        _ => 0,
    }
}

pub fn decode_slot(raw: u64) -> ChunkLoc {
    match raw {
        0 => ChunkLoc::Home,
        r => ChunkLoc::decode(r),
    }
}

/// Bytes a writeback of dirty parts `parts` (a bit per sixty-fourth) of a `chunk_bytes`
/// chunk copies: the same parts `start_cache_clean` copies.
fn dirty_bytes(parts: u64, chunk_bytes: u64) -> u64 {
    let part = (chunk_bytes / 64).max(1);
    let n = 64u64.min(chunk_bytes / part);
    let mask = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    (parts & mask).count_ones() as u64 * part
}

/// One cached chunk in 12 bytes: logical chunk (40 bits; volumes have at most 2^35),
/// slow slot's physical chunk on the home pool (48 bits, the map's limit; all ones: a
/// thick volume's home slot), dirty and referenced bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Entry([u32; 3]);

const CHUNK_BITS: u32 = 40;
const PCHUNK_BITS: u32 = 48;
const HOME_SLOT: u64 = (1 << PCHUNK_BITS) - 1;
const DIRTY_BIT: u32 = CHUNK_BITS + PCHUNK_BITS;
const REF_BIT: u32 = DIRTY_BIT + 1;

impl Entry {
    fn new(chunk: u64, pchunk: u64, dirty: bool) -> Entry {
        debug_assert!(chunk < 1 << CHUNK_BITS && pchunk <= HOME_SLOT);
        let v = chunk as u128 | (pchunk as u128) << CHUNK_BITS | (dirty as u128) << DIRTY_BIT;
        Entry::from_u128(v)
    }
    fn from_u128(v: u128) -> Entry {
        Entry([v as u32, (v >> 32) as u32, (v >> 64) as u32])
    }
    fn get(self) -> u128 {
        self.0[0] as u128 | (self.0[1] as u128) << 32 | (self.0[2] as u128) << 64
    }
    fn chunk(self) -> u64 {
        (self.get() & ((1 << CHUNK_BITS) - 1)) as u64
    }
    fn pchunk(self) -> u64 {
        ((self.get() >> CHUNK_BITS) as u64) & HOME_SLOT
    }
    fn flag(self, bit: u32) -> bool {
        self.get() >> bit & 1 == 1
    }
    fn set_flag(&mut self, bit: u32, on: bool) {
        let v = self.get() & !(1 << bit) | (on as u128) << bit;
        *self = Entry::from_u128(v);
    }
}

/// The side table of cached chunks, sorted by logical chunk; the slow slots are on the
/// volume's home pool.
#[derive(Clone, Debug)]
pub struct CacheTable {
    home_pool: PoolId,
    entries: Vec<Entry>,
    /// CLOCK hand: where the eviction sweep resumes.
    hand: usize,
    /// Where the writeback scan resumes (chunk order, like bcache's writeback).
    clean_at: usize,
    dirty: u64,
    /// Which sixty-fourths of a dirty chunk were written since it was last clean (bit
    /// per part), so a writeback copies only those, as bcache writes back only dirty
    /// extents. A dirty chunk without an entry is dirty throughout (after a mount).
    dirty_parts: std::collections::BTreeMap<u64, u64>,
    /// Dirty evictions in flight (their writebacks): the room they make is coming.
    pub evicting: u32,
    /// Writebacks in flight, evictions' included.
    pub cleaning: u32,
    /// Mount only: chunks a replayed record cached with a slow slot off the home pool.
    /// Such a record is older than a migration that moved the home (which drained the
    /// cache first, `jobs/migrate/cache_drain.rs`), so a later record must end its
    /// caching; one left at the end of replay fails the mount. Empty once mounted.
    pub foreign: std::collections::BTreeSet<u64>,
}

impl CacheTable {
    pub fn new(home_pool: PoolId) -> CacheTable {
        CacheTable {
            home_pool,
            entries: Vec::new(),
            hand: 0,
            clean_at: 0,
            dirty: 0,
            dirty_parts: Default::default(),
            evicting: 0,
            cleaning: 0,
            foreign: Default::default(),
        }
    }
    /// The volume's home pool moved (a migration's pivot): slow slots are on `pool` from
    /// now on. Only an empty table moves (the job drained it).
    pub fn rehome(&mut self, pool: PoolId) {
        debug_assert!(self.entries.is_empty(), "a cache moves home only empty");
        if self.entries.is_empty() {
            self.home_pool = pool;
        }
    }
    fn find(&self, c: u64) -> Result<usize, usize> {
        self.entries.binary_search_by_key(&c, |e| e.chunk())
    }
    fn slot_of(&self, e: Entry) -> ChunkLoc {
        match e.pchunk() {
            HOME_SLOT => ChunkLoc::Home,
            pc => ChunkLoc::At(self.home_pool, pc),
        }
    }
    pub fn len(&self) -> u64 {
        self.entries.len() as u64
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn dirty_count(&self) -> u64 {
        self.dirty
    }
    /// The slow slot of a cached chunk.
    pub fn slow_slot(&self, c: u64) -> Option<ChunkLoc> {
        self.find(c).ok().map(|i| self.slot_of(self.entries[i]))
    }
    pub fn is_dirty(&self, c: u64) -> bool {
        self.find(c).is_ok_and(|i| self.entries[i].flag(DIRTY_BIT))
    }
    /// Whether `slow` can be a slow slot here: the home slot, or a chunk of the home pool.
    pub fn fits(&self, c: u64, slow: ChunkLoc) -> bool {
        c < 1 << CHUNK_BITS
            && match slow {
                ChunkLoc::Home => true,
                ChunkLoc::At(p, pc) => p == self.home_pool && pc < HOME_SLOT,
                ChunkLoc::Unmapped => false,
            }
    }
    /// Cache chunk `c` with slow slot `slow` (replacing any entry); `slow` must
    /// [`fit`](Self::fits).
    pub fn insert(&mut self, c: u64, slow: ChunkLoc, dirty: bool) {
        debug_assert!(self.fits(c, slow));
        let pc = match slow {
            ChunkLoc::At(_, pc) => pc,
            _ => HOME_SLOT,
        };
        let e = Entry::new(c, pc, dirty);
        self.dirty_parts.remove(&c);
        self.foreign.remove(&c);
        match self.find(c) {
            Ok(i) => {
                self.dirty -= self.entries[i].flag(DIRTY_BIT) as u64;
                self.entries[i] = e;
            }
            Err(i) => {
                // Grow by an eighth, not double, to stay near 12 bytes per entry.
                if self.entries.len() == self.entries.capacity() {
                    self.entries.reserve_exact(self.entries.len() / 8 + 8);
                }
                self.entries.insert(i, e);
                if i < self.hand {
                    self.hand += 1;
                }
                if i < self.clean_at {
                    self.clean_at += 1;
                }
            }
        }
        self.dirty += dirty as u64;
    }
    /// Stop caching chunk `c`; returns its slow slot.
    pub fn remove(&mut self, c: u64) -> Option<ChunkLoc> {
        self.foreign.remove(&c);
        let i = self.find(c).ok()?;
        let e = self.entries.remove(i);
        self.dirty -= e.flag(DIRTY_BIT) as u64;
        self.dirty_parts.remove(&c);
        if i < self.hand {
            self.hand -= 1;
        }
        if i < self.clean_at {
            self.clean_at -= 1;
        }
        Some(self.slot_of(e))
    }
    /// An access: the CLOCK sweep passes over the chunk once before evicting it.
    pub fn touch(&mut self, c: u64) {
        if let Ok(i) = self.find(c) {
            self.entries[i].set_flag(REF_BIT, true);
        }
    }
    /// Chunk `c` is dirty throughout (`true`) or clean.
    pub fn set_dirty(&mut self, c: u64, dirty: bool) {
        self.dirty_parts.remove(&c);
        if let Ok(i) = self.find(c) {
            let was = self.entries[i].flag(DIRTY_BIT);
            if was != dirty {
                self.entries[i].set_flag(DIRTY_BIT, dirty);
                if dirty {
                    self.dirty += 1;
                } else {
                    self.dirty -= 1;
                }
            }
        }
    }
    /// Parts `parts` (a bit per sixty-fourth) of cached chunk `c` were written.
    pub fn mark_dirty(&mut self, c: u64, parts: u64) {
        let Ok(i) = self.find(c) else { return };
        if !self.entries[i].flag(DIRTY_BIT) {
            self.entries[i].set_flag(DIRTY_BIT, true);
            self.dirty += 1;
            self.dirty_parts.insert(c, parts);
        } else if let Some(p) = self.dirty_parts.get_mut(&c) {
            *p |= parts;
        }
    }
    /// The dirty parts of chunk `c`: all when dirty throughout, none when clean.
    pub fn dirty_parts(&self, c: u64) -> u64 {
        if !self.is_dirty(c) {
            return 0;
        }
        self.dirty_parts.get(&c).copied().unwrap_or(u64::MAX)
    }
    /// Bytes a writeback of chunk `c` copies now (its dirty parts).
    pub fn dirty_bytes_of(&self, c: u64, chunk_bytes: u64) -> u64 {
        dirty_bytes(self.dirty_parts(c), chunk_bytes)
    }
    /// Dirty bytes of the whole cache (bcache's measure: dirty data, not dirty chunks).
    pub fn dirty_bytes(&self, chunk_bytes: u64) -> u64 {
        let partial: u64 = self
            .dirty_parts
            .values()
            .map(|&p| dirty_bytes(p, chunk_bytes))
            .sum();
        partial + (self.dirty - self.dirty_parts.len() as u64) * chunk_bytes
    }
    /// (chunk, slow slot, dirty) in chunk order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, ChunkLoc, bool)> + '_ {
        self.entries
            .iter()
            .map(|&e| (e.chunk(), self.slot_of(e), e.flag(DIRTY_BIT)))
    }
    /// CLOCK (second chance), the recency approximation both policies evict by: sweep
    /// from the hand, clearing reference bits, until an unreferenced chunk not `busy`.
    pub fn victim(&mut self, busy: impl Fn(u64) -> bool) -> Option<u64> {
        let n = self.entries.len();
        for _ in 0..2 * n {
            if self.hand >= n {
                self.hand = 0;
            }
            let e = self.entries[self.hand];
            self.hand += 1;
            if e.flag(REF_BIT) {
                self.entries[self.hand - 1].set_flag(REF_BIT, false);
            } else if !busy(e.chunk()) {
                return Some(e.chunk());
            }
        }
        None
    }
    /// The next dirty chunk not `busy`, in chunk order from where the last scan ended.
    pub fn next_dirty(&mut self, busy: impl Fn(u64) -> bool) -> Option<u64> {
        let n = self.entries.len();
        for _ in 0..n {
            if self.clean_at >= n {
                self.clean_at = 0;
            }
            let e = self.entries[self.clean_at];
            self.clean_at += 1;
            if e.flag(DIRTY_BIT) && !busy(e.chunk()) {
                return Some(e.chunk());
            }
        }
        None
    }
    /// Bytes of RAM the table uses.
    pub fn memory_bytes(&self) -> u64 {
        // The dirty parts: a B-tree of 16-byte entries, counted at 24 with its nodes.
        (self.entries.capacity() * std::mem::size_of::<Entry>()) as u64
            + self.dirty_parts.len() as u64 * 24
    }
    /// Entries for a checkpoint: (chunk, [`encode_slot`] of the slow slot).
    pub fn raw(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.entries
            .iter()
            .map(|&e| (e.chunk(), encode_slot(self.slot_of(e))))
    }
}

/// What the cache holds of one chunk, for tests and reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachedChunk {
    /// The slow slot kept while the chunk is cached (pool, physical chunk).
    pub slow: (PoolId, u64),
    pub dirty: bool,
}

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
    fn start_cache_fill(&mut self, now: u64, v: usize, c: u64, out: &mut Outputs) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use PoolId;

    #[test]
    fn table_keeps_order_flags_and_counts() {
        let mut t = CacheTable::new(PoolId(1));
        t.insert(5, ChunkLoc::At(PoolId(1), 9), false);
        t.insert(2, ChunkLoc::Home, true);
        t.insert(7, ChunkLoc::At(PoolId(1), 3), false);
        assert!(!t.fits(8, ChunkLoc::At(PoolId(0), 3)), "not the home pool");
        assert_eq!(t.dirty_count(), 1);
        assert_eq!(t.slow_slot(2), Some(ChunkLoc::Home));
        assert_eq!(t.slow_slot(5), Some(ChunkLoc::At(PoolId(1), 9)));
        t.set_dirty(5, true);
        assert!(t.is_dirty(5));
        assert_eq!(t.dirty_count(), 2);
        // CLOCK: referenced chunks get a second chance.
        t.touch(2);
        assert_eq!(t.victim(|_| false), Some(5));
        assert_eq!(t.victim(|_| false), Some(7));
        assert_eq!(
            t.victim(|_| false),
            Some(2),
            "its bit was cleared by the sweep"
        );
        assert_eq!(t.next_dirty(|_| false), Some(2));
        assert_eq!(t.next_dirty(|_| false), Some(5));
        // Dirty parts: a clean chunk written in parts 1 and 3 is dirty there only; one
        // dirty throughout (as at mount) stays so.
        t.mark_dirty(7, 0b10);
        t.mark_dirty(7, 0b1000);
        assert_eq!(t.dirty_parts(7), 0b1010);
        assert_eq!(t.dirty_parts(2), u64::MAX);
        t.mark_dirty(2, 1);
        assert_eq!(t.dirty_parts(2), u64::MAX);
        t.set_dirty(7, false);
        assert_eq!(t.dirty_parts(7), 0);
        assert_eq!(t.remove(2), Some(ChunkLoc::Home));
        assert_eq!(t.dirty_count(), 1);
        assert_eq!(t.len(), 2);
        assert_eq!(t.memory_bytes() / t.entries.capacity() as u64, 12);
        let big = (1u64 << 35) - 1;
        t.insert(big, ChunkLoc::At(PoolId(1), (1 << 48) - 2), true);
        assert_eq!(
            t.slow_slot(big),
            Some(ChunkLoc::At(PoolId(1), (1 << 48) - 2))
        );
        assert!(t.is_dirty(big));
    }
}
