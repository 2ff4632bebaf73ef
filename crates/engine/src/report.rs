//! Read-only views of the engine's state for monitoring (`ctl stat`, simulator reports).

use serde::Serialize;

use crate::chunkmap::ChunkLoc;
use crate::config::Medium;
use crate::engine::{Engine, EngineState};
use crate::stats::{
    KindStats, LATENCY_BUCKETS_NS, LatencyHistogram, LatencySummary, PoolStats, VolumeStats,
};
use crate::types::VolumeId;

#[derive(Clone, Debug, Serialize)]
pub struct KindReport {
    pub requests: u64,
    pub bytes: u64,
    pub errors: u64,
    pub latency: LatencySummary,
}

impl From<&KindStats> for KindReport {
    fn from(k: &KindStats) -> Self {
        KindReport {
            requests: k.requests,
            bytes: k.bytes,
            errors: k.errors,
            latency: k.latency.summary(),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct VolumeReport {
    pub name: String,
    pub size_bytes: u64,
    /// The QoS its schedulers apply now.
    pub qos: crate::sched::VolumeQos,
    pub provisioning: String,
    pub placement: String,
    pub read: KindReport,
    pub write: KindReport,
    pub flush: KindReport,
    pub trim: KindReport,
    pub write_zeroes: KindReport,
    pub latency: LatencySummary,
    /// Mapped chunks per pool, by pool name.
    pub chunks_by_pool: Vec<(String, u64)>,
    pub overlay_extents: u64,
    /// RAM used by the content mapping table and its sub-chunk detail.
    pub map_memory_bytes: u64,
    /// RAM of the mapping table and monitor per chunk of the volume.
    pub map_bytes_per_chunk: f64,
    /// The same per GiB of volume (every chunk has an entry, mapped or not).
    pub map_bytes_per_gib: f64,
    pub journal_commits: u64,
    pub journal_blocks: u64,
    pub journal_pending_records: u64,
    pub checkpoints: u64,
    pub commit_failures: u64,
    /// FLUSH request and commit round latency histograms.
    pub flush_histogram: LatencyHistogram,
    pub commit_histogram: LatencyHistogram,
    /// The journal ring: bytes holding records not yet covered by a checkpoint, of its size.
    pub journal_used_bytes: u64,
    pub journal_ring_bytes: u64,
    pub chunks_allocated: u64,
    /// Zeroes written around first writes to thin chunks.
    pub zero_fill_bytes: u64,
    pub fast_pool: Option<String>,
    pub promotions: u64,
    pub demotions: u64,
    /// Demotions that were a remap to a kept home, without a copy (`tier_home.rs`).
    pub clean_demotions: u64,
    /// Dirty demotions to a kept home that copied only the span written, not the chunk.
    pub span_demotions: u64,
    pub migrated_bytes: u64,
    pub monitor: crate::monitor::MonitorReport,
    /// `cache` placement only: the cache's contents and traffic.
    pub cache: Option<CacheReport>,
}

/// A `cache` volume's cache (docs/ARCHITECTURE.md, "Cache placement").
#[derive(Clone, Debug, Serialize)]
pub struct CacheReport {
    pub policy: String,
    /// Chunks the volume may hold on the fast pool.
    pub budget_chunks: u64,
    /// Chunks cached on the fast pool now, and of them dirty (not yet written back).
    pub cached_chunks: u64,
    pub dirty_chunks: u64,
    /// The dirty parts of those chunks, in bytes (what writebacks would copy; bcache's
    /// measure of dirty data).
    pub dirty_bytes: u64,
    #[serde(flatten)]
    pub counts: crate::stats::CacheStats,
}

#[derive(Clone, Debug, Serialize)]
pub struct PoolReport {
    pub name: String,
    pub medium: Medium,
    pub scheduler: String,
    pub queue_depth: u32,
    pub capacity_bytes: u64,
    pub chunk_bytes: u64,
    pub chunks: u64,
    pub free_chunks: u64,
    pub used_bytes: u64,
    pub in_flight: u32,
    pub queued: u64,
    pub io: PoolStats,
    /// The log-structured write path on this pool (None when nothing logs here).
    pub log: Option<LogReport>,
    /// The virtual performance throttle (None: not throttled).
    pub throttle: Option<crate::throttle::ThrottleReport>,
    /// The host write-back buffer (None when the pool has none).
    pub write_buffer: Option<crate::wbuf::WriteBufferStats>,
}

/// A pool's log: space, traffic and the cleaner's work.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LogReport {
    pub segment_bytes: u64,
    pub segments: u64,
    pub free_segments: u64,
    pub live_bytes: u64,
    /// VM writes taken by the log, and their bytes.
    pub user_writes: u64,
    pub user_bytes: u64,
    pub appends: u64,
    pub append_bytes: u64,
    /// Bytes the cleaner read and copied forward.
    pub cleaner_read_bytes: u64,
    pub cleaner_bytes: u64,
    pub segments_cleaned: u64,
    pub segments_freed: u64,
    /// Writes that would have been logged but went home (no free segment, too many
    /// extents).
    pub home_fallbacks: u64,
    pub relocations: u64,
    /// Times the cleaner waited for its bandwidth cap (`clean_bytes_per_s`).
    pub cleaner_waits: u64,
    /// Device bytes the log wrote per VM byte it took (1.0 = no cleaning).
    pub write_amplification: f64,
    /// Acknowledged data waiting in RAM for its append.
    pub buffered_bytes: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct EngineReport {
    pub state: String,
    pub volumes: Vec<VolumeReport>,
    pub pools: Vec<PoolReport>,
}

impl Engine {
    pub fn volume_stats(&self, v: VolumeId) -> Option<&VolumeStats> {
        self.vols.get(v.0 as usize).map(|v| &v.stats)
    }

    /// Where chunk `chunk` of volume `v` lives: pool and physical chunk (None: unmapped).
    pub fn chunk_location(&self, v: VolumeId, chunk: u64) -> Option<(crate::types::PoolId, u64)> {
        let vol = self.vols.get(v.0 as usize)?;
        if chunk >= vol.chunks {
            return None;
        }
        vol.resolve(vol.map.get(chunk), chunk)
    }

    /// `None` for an unknown volume and for one deleted while running (its hollow slot
    /// stays until the next start, but the volume is gone for `ctl stat` and metrics).
    pub fn volume_report(&self, v: VolumeId) -> Option<VolumeReport> {
        let vol = self.vols.get(v.0 as usize).filter(|v| !v.rec.deleted)?;
        let mut per_pool = vec![0u64; self.pools.len()];
        for (c, loc) in vol.map.iter() {
            if loc != ChunkLoc::Unmapped
                && let Some((p, _)) = vol.resolve(loc, c)
            {
                per_pool[p.0 as usize] += 1;
            }
        }

        // Promotion candidates: a bounded set, about 16 bytes an entry in a B-tree.
        let candidates = vol.hot_candidates.len() as u64 * 16;
        let mem = vol.map.memory_bytes()
            + vol.overlay.memory_bytes()
            + vol.monitor.memory_bytes()
            + vol.cache.memory_bytes()
            + candidates;

        let s = &vol.stats;
        Some(VolumeReport {
            name: vol.rec.name.clone(),
            size_bytes: vol.rec.size_bytes,
            qos: vol.qos,
            provisioning: format!("{:?}", vol.rec.provisioning).to_lowercase(),
            placement: vol.rec.placement.name().to_string(),
            read: (&s.read).into(),
            write: (&s.write).into(),
            flush: (&s.flush).into(),
            trim: (&s.trim).into(),
            write_zeroes: (&s.write_zeroes).into(),
            latency: s.all.summary(),
            chunks_by_pool: self
                .cfg
                .pools
                .iter()
                .map(|p| p.name.clone())
                .zip(per_pool)
                .collect(),
            overlay_extents: vol.overlay.len() as u64,
            map_memory_bytes: mem,
            map_bytes_per_chunk: mem as f64 / vol.chunks.max(1) as f64,
            map_bytes_per_gib: mem as f64 / (vol.chunks.max(1) * self.cfg.chunk_bytes) as f64
                * (1u64 << 30) as f64,
            journal_commits: s.journal_commits,
            journal_blocks: s.journal_blocks,
            journal_pending_records: vol.journal.pending.len() as u64,
            checkpoints: s.checkpoints,
            commit_failures: s.commit_failures,
            flush_histogram: s.flush.latency.histogram(&LATENCY_BUCKETS_NS),
            commit_histogram: s.commit_latency.histogram(&LATENCY_BUCKETS_NS),
            journal_used_bytes: vol.journal.used_blocks() * crate::layout::BLOCK_BYTES,
            journal_ring_bytes: vol.journal.ring_blocks * crate::layout::BLOCK_BYTES,
            chunks_allocated: s.chunks_allocated,
            zero_fill_bytes: s.zero_fill_bytes,
            fast_pool: vol
                .rec
                .fast_pool
                .map(|p| self.cfg.pools[p.0 as usize].name.clone()),
            promotions: s.promotions,
            demotions: s.demotions,
            clean_demotions: s.clean_demotions,
            span_demotions: s.span_demotions,
            migrated_bytes: s.migrated_bytes,
            monitor: self.monitor_report(vol),
            cache: match vol.rec.placement {
                crate::config::Placement::Cache { cache_policy, .. } => Some(CacheReport {
                    policy: cache_policy.name().to_string(),
                    budget_chunks: self.cache_budget(v.0 as usize),
                    cached_chunks: vol.cache.len(),
                    dirty_chunks: vol.cache.dirty_count(),
                    dirty_bytes: vol.cache.dirty_bytes(self.cfg.chunk_bytes),
                    counts: s.cache,
                }),
                _ => None,
            },
        })
    }

    fn monitor_report(&self, vol: &crate::volume::Volume) -> crate::monitor::MonitorReport {
        let epoch = self.decay_epoch(self.last_now_ns);
        let m = &vol.monitor;
        let mut hot: Vec<(u32, u64)> = (0..vol.chunks)
            .map(|c| (m.score(c, epoch), c))
            .filter(|(s, _)| *s > 0)
            .collect();
        hot.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let pool_name = |c: u64| {
            vol.resolve(vol.map.get(c), c)
                .map_or("unmapped".to_string(), |(p, _)| {
                    self.cfg.pools[p.0 as usize].name.clone()
                })
        };
        crate::monitor::MonitorReport {
            sequential_requests: m.sequential_requests,
            random_requests: m.random_requests,
            size_histogram: m
                .size_histogram
                .iter()
                .enumerate()
                .filter(|(_, n)| **n > 0)
                .map(|(i, n)| {
                    (
                        if i + 1 == crate::monitor::SIZE_BUCKETS {
                            format!(">{}", 512u64 << (i - 1))
                        } else {
                            format!("<={}", 512u64 << i)
                        },
                        *n,
                    )
                })
                .collect(),
            hottest: hot
                .into_iter()
                .take(5)
                .map(|(s, c)| (c, s, pool_name(c)))
                .collect(),
        }
    }

    pub fn report(&self) -> EngineReport {
        let state = match &self.state {
            EngineState::Failed(r) => format!("failed: {r}"),
            s => format!("{s:?}").to_lowercase(),
        };
        EngineReport {
            state,
            volumes: (0..self.vols.len())
                .filter_map(|i| self.volume_report(VolumeId(i as u32)))
                .collect(),
            pools: self
                .pools
                .iter()
                .enumerate()
                .map(|(i, p)| PoolReport {
                    name: p.cfg.name.clone(),
                    medium: p.cfg.medium,
                    scheduler: p.sched.scheduler_name().to_string(),
                    queue_depth: p.cfg.queue_depth,
                    capacity_bytes: p.cfg.capacity_bytes,
                    chunk_bytes: self.cfg.chunk_bytes,
                    chunks: p.alloc.chunks(),
                    free_chunks: p.alloc.free_chunks(),
                    used_bytes: (p.alloc.chunks() - p.alloc.free_chunks()) * self.cfg.chunk_bytes,
                    in_flight: p.in_flight,
                    queued: p.sched.scheduler_len() as u64,
                    io: p.stats.clone(),
                    log: self.log_report(i),
                    throttle: p.throttle.as_ref().map(|t| t.report()),
                    write_buffer: p.wbuf.enabled().then_some(p.wbuf.stats),
                })
                .collect(),
        }
    }
}
