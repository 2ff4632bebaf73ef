//! A volume: its content mapping table, overlay, journal, and in-flight chunk activity.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::chunkmap::{ChunkLoc, ChunkMap};
use crate::extents::ExtentMap;
use crate::journal::{Journal, Record};
use crate::layout::{JournalHeader, VolumeRecord};
use crate::overlay::Overlay;
use crate::stats::VolumeStats;
use crate::types::{Errno, PoolId, VolumeId};

pub(crate) mod waiter;
pub use waiter::Waiter;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkState {
    Idle,
    /// First write to an unmapped chunk: data and zero-fill of the rest are in flight.
    Allocating {
        pending: u32,
        loc: ChunkLoc,
        start: u64,
        end: u64,
        /// The first device error of the allocation's writes (`NoSpc` kept as such).
        failed: Option<Errno>,
        req: usize,
    },
    /// Tier migration: the chunk is being copied to `dst`; writes wait, reads use the source.
    Moving {
        dst: ChunkLoc,
    },
    /// Live migration: the chunk is being copied (or copied back); writes wait.
    Migrating,
    /// Live migration of a logged volume: the chunk's log data is being written back
    /// into it (`jobs/migrate/log_drain.rs`); writes wait, reads use the log.
    LogDrain,
    /// `cache` placement: the chunk's dirty parts are being written back to its slow
    /// slot in `pending` copies (then evicted when `evict`, unless one `failed`); writes
    /// wait, reads use the fast copy.
    Cleaning {
        evict: bool,
        pending: u32,
        failed: bool,
    },
}

/// What is going on in one chunk right now; only chunks with activity have an entry.
#[derive(Debug)]
pub struct Activity {
    pub writes_in_flight: u32,
    pub state: ChunkState,
    pub waiters: VecDeque<Waiter>,
    /// Home writes queued to the chunk while it was active (their sequence numbers).
    pub home_seq: u64,
    /// Ranges whose newer data went elsewhere while home writes were in flight (a log
    /// append, or an LR/SLR write to a migration's destination), with the last home
    /// sequence number queued before them: a home write with a sequence number up to that
    /// one is older than that data, so its completion must not clear the range's overlay
    /// (DST seed 5548: an old home write cleared a trim's `Moved` entry).
    pub newer_elsewhere: Vec<(u64, u64, u64)>,
    /// Ranges home writes wrote while other writes of the chunk were in flight, with
    /// their sequence numbers: a migration's destination write queued before such a
    /// write (its `home_seq` below that number) is older than the data at home, so its
    /// completion must not point the range at the destination (DST seed 13127: after a
    /// cancel, an older SLR write's `Moved` entry hid a newer home write, and the
    /// destination held an even older write's data there).
    pub newer_at_home: Vec<(u64, u64, u64)>,
    /// Of `writes_in_flight`, those to a migration's destination (LR/SLR): only while
    /// one is in flight is `newer_at_home` kept, so it stays bounded (after a cancel no
    /// new one starts).
    pub dst_writes_in_flight: u32,
}

impl Default for Activity {
    fn default() -> Self {
        Activity {
            writes_in_flight: 0,
            state: ChunkState::Idle,
            waiters: VecDeque::new(),
            home_seq: 0,
            newer_elsewhere: Vec::new(),
            newer_at_home: Vec::new(),
            dst_writes_in_flight: 0,
        }
    }
}

impl Activity {
    pub fn is_quiet(&self) -> bool {
        self.writes_in_flight == 0 && self.state == ChunkState::Idle && self.waiters.is_empty()
    }

    /// Data of `[s, e)` newer than home write `after_seq` went elsewhere than the chunk's
    /// home (the overlay points at it): keep it from the completions of home writes up
    /// to that one still in flight.
    pub fn protect_from_home_writes(&mut self, after_seq: u64, s: u64, e: u64) {
        if self.writes_in_flight > 0 {
            self.newer_elsewhere.push((after_seq, s, e));
        }
    }

    /// Parts of [start, end) whose overlay the completing home write `seq` may clear:
    /// all but the ranges whose newer data went elsewhere after it was queued.
    pub fn unprotected(&self, start: u64, end: u64, seq: u64) -> Vec<(u64, u64)> {
        let newer = self
            .newer_elsewhere
            .iter()
            .filter(|&&(after, s, e)| after >= seq && s < end && e > start)
            .map(|&(_, s, e)| (s.max(start), e.min(end)))
            .collect();
        gaps_between(start, end, newer)
    }

    /// Home write `seq` of `[s, e)` completed: remember it while destination writes of
    /// the chunk (perhaps older than it) are still in flight.
    pub fn wrote_at_home(&mut self, seq: u64, s: u64, e: u64) {
        if self.dst_writes_in_flight > 0 {
            self.newer_at_home.push((seq, s, e));
        }
    }

    /// Parts of [start, end) that a destination write completing now may point at the
    /// destination: all but the ranges home writes queued after it (sequence numbers
    /// above `home_seq`, the last home write queued before it) have already written.
    pub fn not_newer_at_home(&self, start: u64, end: u64, home_seq: u64) -> Vec<(u64, u64)> {
        let newer = self
            .newer_at_home
            .iter()
            .filter(|&&(seq, s, e)| seq > home_seq && s < end && e > start)
            .map(|&(_, s, e)| (s.max(start), e.min(end)))
            .collect();
        gaps_between(start, end, newer)
    }

    /// No write of the chunk is in flight: nothing is older or newer than another.
    pub fn forget_orders(&mut self) {
        self.newer_elsewhere.clear();
        self.newer_at_home.clear();
    }
}

/// The parts of `[start, end)` outside the ranges `covered` (each inside it).
fn gaps_between(start: u64, end: u64, mut covered: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    covered.sort_unstable();
    let mut gaps = Vec::new();
    let mut at = start;
    for (s, e) in covered {
        if s > at {
            gaps.push((at, s));
        }
        at = at.max(e);
    }
    if at < end {
        gaps.push((at, end));
    }
    gaps
}

/// A commit round of a volume's flush domain.
#[derive(Debug)]
pub struct Commit {
    pub phase: CommitPhase,
    pub pending_ops: u32,
    /// The worst error of the round's device operations so far ([`Errno::worse`]).
    pub failed: Option<Errno>,
    /// FLUSH requests and FUA writes that complete with this round.
    pub waiters: Vec<usize>,
    pub work: CommitWork,
    /// Highest record sequence this round makes durable.
    pub last_seq: u64,
    /// Pools flushed in the data phase (dirty again if the round fails).
    pub flushed_pools: u64,
    /// Log appends with ids below this must land before the data flush.
    pub log_wait_upto: u64,
    pub started_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitPhase {
    /// Waiting for log appends that carry data the records point at.
    LogWait,
    DataFlush,
    Write,
    Header,
}

#[derive(Debug)]
pub enum CommitWork {
    /// Only make completed data durable.
    FlushOnly,
    Blocks {
        records: Vec<Record>,
        image: Vec<u8>,
        blocks: u64,
        new_crc: u32,
    },
    Checkpoint {
        records: Vec<Record>,
        images: Vec<Vec<u8>>,
        chunks: Vec<(PoolId, u64)>,
        header: Option<JournalHeader>,
    },
}

pub struct Volume {
    pub id: VolumeId,
    /// The QoS its schedulers apply now (configured, or changed by `Control::SetQos`).
    pub qos: crate::sched::VolumeQos,
    pub rec: VolumeRecord,
    pub chunks: u64,
    pub map: ChunkMap,
    pub overlay: ExtentMap<Overlay>,
    pub journal: Journal,
    pub activity: FxHashMap<u64, Activity>,
    /// Pools holding data written since the last commit's data flush (bit per pool).
    pub dirty_pools: u64,
    pub commit: Option<Commit>,
    pub flush_waiters: Vec<usize>,
    pub checkpoint_wanted: bool,
    /// The process that ran the volume before this mount stopped in order, its writes all
    /// durable (`stopmark.rs`); false until the mount says so.
    pub stopped_clean_before_mount: bool,
    pub stats: VolumeStats,
    pub monitor: crate::monitor::Monitor,
    /// Mapped chunks per pool (thick home chunks count on the home pool).
    pub chunks_on: Vec<u64>,
    /// Promotions in flight (counted against the fast-pool budget before they land).
    pub promoting: u64,
    /// Chunks hot enough to promote, not yet on the fast pool (bounded).
    pub hot_candidates: std::collections::BTreeSet<u64>,
    /// Whether its `hot` promotions pay off (`promo.rs`).
    pub promo: crate::promo::PromoHits,
    /// Where the demotion scan resumes.
    pub scan_cursor: u64,
    pub log: crate::log::vol::VolLog,
    /// `cache` placement: slow slots and dirty bits of cached chunks (`cache.rs`).
    pub cache: crate::cache::table::CacheTable,
    /// `cache` placement: when its cleaner writes back (`cache_writeback.rs`).
    pub writeback: crate::cache_writeback::pace::WritebackPace,
}

impl Volume {
    /// Physical location of a logical chunk, resolving `Home`.
    #[inline]
    pub fn resolve(&self, loc: ChunkLoc, chunk: u64) -> Option<(PoolId, u64)> {
        match loc {
            ChunkLoc::Unmapped => None,
            ChunkLoc::Home => Some((self.rec.home_pool, self.rec.home_base_chunk + chunk)),
            ChunkLoc::At(p, c) => Some((p, c)),
        }
    }

    /// Change a chunk's location, keeping the per-pool counts.
    pub fn set_loc(&mut self, chunk: u64, loc: ChunkLoc) {
        if let Some((p, _)) = self.resolve(self.map.get(chunk), chunk) {
            self.chunks_on[p.0 as usize] -= 1;
        }
        self.map.set(chunk, loc);
        if let Some((p, _)) = self.resolve(loc, chunk) {
            self.chunks_on[p.0 as usize] += 1;
        }
    }

    /// Recount `chunks_on` from the map (after recovery).
    pub fn recount(&mut self, pools: usize) {
        self.chunks_on = vec![0; pools];
        for c in 0..self.chunks {
            if let Some((p, _)) = self.resolve(self.map.get(c), c) {
                self.chunks_on[p.0 as usize] += 1;
            }
        }
    }

    /// Take the RAM a growth to `chunks` chunks needs, so that [`Volume::grow`] cannot fail.
    pub fn reserve_growth(&mut self, chunks: u64) -> Result<(), std::collections::TryReserveError> {
        let more = chunks.saturating_sub(self.chunks) as usize;
        self.map.try_reserve(more)?;
        self.monitor.try_reserve(more)
    }

    /// Grow to `size_bytes` (a thin volume's resize once durable): the new chunks are
    /// unmapped and cold.
    pub fn grow(&mut self, size_bytes: u64, chunk_bytes: u64) {
        let chunks = size_bytes.div_ceil(chunk_bytes);
        self.map.grow(chunks);
        self.monitor.grow(chunks);
        self.chunks = chunks;
        self.rec.size_bytes = size_bytes;
        self.log.max_extents = crate::log::vol::max_extents_for(size_bytes);
    }

    /// Shrink to `size_bytes` (a thin volume's shrink, whose cut chunks are all unmapped).
    pub fn shrink(&mut self, size_bytes: u64, chunk_bytes: u64) {
        let chunks = size_bytes.div_ceil(chunk_bytes);
        self.map.truncate(chunks);
        self.monitor.truncate(chunks);
        self.chunks = chunks;
        self.rec.size_bytes = size_bytes;
        self.log.max_extents = crate::log::vol::max_extents_for(size_bytes);
    }

    pub fn has_commit_work(&self) -> bool {
        self.journal.has_pending() || !self.flush_waiters.is_empty() || self.checkpoint_wanted
    }
}
