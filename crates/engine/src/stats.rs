//! Counters and latency histograms the engine keeps per volume and per pool.

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::types::{IoClass, ReqKind};

/// Latency distribution in nanoseconds (3 significant figures, up to 1 hour).
#[derive(Clone, Debug)]
pub struct Latency {
    h: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Latency {
            h: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid histogram bounds"),
        }
    }
}

/// Cumulative counts at bounds, for a Prometheus histogram (`_bucket{le}`, `_sum`,
/// `_count`). Bounds and counts are as precise as the histogram (3 significant figures).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LatencyHistogram {
    pub le_seconds: Vec<f64>,
    pub counts: Vec<u64>,
    pub count: u64,
    pub sum_seconds: f64,
}

/// Bounds of the flush and commit latency histograms: 100 µs to 10 s.
pub const LATENCY_BUCKETS_NS: [u64; 11] = [
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    50_000_000,
    250_000_000,
    1_000_000_000,
    10_000_000_000,
];

#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Latency {
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.h.saturating_record(ns.max(1));
    }
    pub fn merge(&mut self, other: &Latency) {
        let _ = self.h.add(&other.h);
    }
    pub fn count(&self) -> u64 {
        self.h.len()
    }
    /// Mean in nanoseconds (0 when empty; as precise as the histogram).
    pub fn mean_ns(&self) -> f64 {
        self.h.mean()
    }
    /// A Prometheus-style histogram: how many took at most each bound (cumulative).
    pub fn histogram(&self, le_ns: &[u64]) -> LatencyHistogram {
        LatencyHistogram {
            le_seconds: le_ns.iter().map(|&b| b as f64 / 1e9).collect(),
            counts: le_ns.iter().map(|&b| self.h.count_between(0, b)).collect(),
            count: self.h.len(),
            sum_seconds: self.h.mean() * self.h.len() as f64 / 1e9,
        }
    }
    pub fn summary(&self) -> LatencySummary {
        if self.h.is_empty() {
            return LatencySummary::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        LatencySummary {
            count: self.h.len(),
            mean_us: self.h.mean() / 1000.0,
            p50_us: us(self.h.value_at_quantile(0.5)),
            p99_us: us(self.h.value_at_quantile(0.99)),
            p999_us: us(self.h.value_at_quantile(0.999)),
            max_us: us(self.h.max()),
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct KindStats {
    pub requests: u64,
    pub bytes: u64,
    pub errors: u64,
    pub latency: Latency,
}

/// Per-volume counters.
#[derive(Clone, Debug, Default)]
pub struct VolumeStats {
    pub read: KindStats,
    pub write: KindStats,
    pub flush: KindStats,
    pub trim: KindStats,
    pub write_zeroes: KindStats,
    pub all: Latency,
    pub first_arrival_ns: Option<u64>,
    /// When the latest request arrived (`hot` placement treats a volume with no recent
    /// request as idle).
    pub last_arrival_ns: u64,
    pub last_completion_ns: u64,
    pub journal_commits: u64,
    pub journal_blocks: u64,
    pub checkpoints: u64,
    /// Commit rounds that failed (their records were retried in a later round).
    pub commit_failures: u64,
    /// Time from a commit round's start to its end (success or failure).
    pub commit_latency: Latency,
    pub chunks_allocated: u64,
    /// Bytes written as zeroes around the first write to a thin chunk (device writes the
    /// workload did not ask for).
    pub zero_fill_bytes: u64,
    pub promotions: u64,
    pub demotions: u64,
    /// Demotions that were a remap to a kept home, with no copy (`tier_home.rs`).
    pub clean_demotions: u64,
    /// Dirty demotions to a kept home that copied only the span written since the
    /// promotion, not the whole chunk (`tier_home.rs`).
    pub span_demotions: u64,
    pub migrated_bytes: u64,
    /// `cache` placement (`cache.rs`); zero for other volumes.
    pub cache: CacheStats,
}

/// A `cache` volume's cache traffic since the engine started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CacheStats {
    /// Chunks copied to the fast pool (their `Cache` records appended).
    pub fills: u64,
    /// Evictions of clean chunks (no I/O) and of dirty ones (after their writeback).
    pub evictions_clean: u64,
    pub evictions_dirty: u64,
    /// Writebacks completed (cleaning and evictions'), and the bytes they copied.
    pub writebacks: u64,
    pub writeback_bytes: u64,
    /// Chunks cached at mount, all counted dirty: clean/dirty is not journaled, so each
    /// costs a writeback after a restart or crash.
    pub dirty_at_mount: u64,
}

impl VolumeStats {
    pub fn kind_mut(&mut self, k: ReqKind) -> &mut KindStats {
        match k {
            ReqKind::Read => &mut self.read,
            ReqKind::Write => &mut self.write,
            ReqKind::Flush => &mut self.flush,
            ReqKind::Trim => &mut self.trim,
            ReqKind::WriteZeroes => &mut self.write_zeroes,
        }
    }
    pub fn requests(&self) -> u64 {
        self.read.requests
            + self.write.requests
            + self.flush.requests
            + self.trim.requests
            + self.write_zeroes.requests
    }
}

/// Per-pool device counters, by class of work.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct ClassCounters {
    pub read_ops: u64,
    pub read_bytes: u64,
    pub write_ops: u64,
    pub write_bytes: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct PoolStats {
    pub foreground: ClassCounters,
    pub metadata: ClassCounters,
    pub migration: ClassCounters,
    pub cleaner: ClassCounters,
    pub flushes: u64,
    pub errors: u64,
    /// Of `errors`: writes that found no space (ENOSPC, EDQUOT).
    pub nospace_errors: u64,
}

impl PoolStats {
    pub fn class_mut(&mut self, c: IoClass) -> &mut ClassCounters {
        match c {
            IoClass::Foreground => &mut self.foreground,
            IoClass::Metadata => &mut self.metadata,
            IoClass::Migration => &mut self.migration,
            IoClass::Cleaner => &mut self.cleaner,
        }
    }
}
