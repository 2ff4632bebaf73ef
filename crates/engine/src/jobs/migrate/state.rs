//! A migration job's state, apart from the engine glue in the other files of
//! `jobs/migrate/` (issue 11's import cycle): the jobs in progress and what each holds
//! (progress per chunk, copies in flight, AIO duplicates, the pre-sync rounds, thick
//! volumes' regions, log write-backs), as plain data `engine.rs` holds without the glue.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;

use super::dirty::DirtyMap;
use super::params::{CopyPriority, MigrationParams, Scheme};
pub(crate) use super::progress::Progress;
use super::sweep::LeftSweep;
use crate::bucket::TokenBucket;
use crate::chunkmap::ChunkLoc;
use crate::types::{DevKind, Errno, PoolId, VmRequest};

/// Where a job is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationPhase {
    /// Copying; `pass` counts DBT's passes from 1.
    Copying {
        pass: u32,
    },
    /// The volume is paused; requests in flight drain.
    Draining,
    /// DBT's last dirty blocks are copied with the volume paused.
    FinalCopy,
    /// The switch records are being made durable (the volume runs on the switched map
    /// meanwhile; FLUSH and FUA wait for them).
    Committing {
        seq: u64,
    },
    /// Cancel asked: destination data is copied back (LR, SLR) or dropped.
    Cancelling,
    Done,
    Cancelled,
    /// Failed on an error; the source is authoritative (see `error`).
    Failed,
}

impl MigrationPhase {
    /// Lower-case name for reports and status lines.
    pub fn name(self) -> &'static str {
        match self {
            MigrationPhase::Copying { .. } => "copying",
            MigrationPhase::Draining => "draining",
            MigrationPhase::FinalCopy => "final-copy",
            MigrationPhase::Committing { .. } => "committing",
            MigrationPhase::Cancelling => "cancelling",
            MigrationPhase::Done => "done",
            MigrationPhase::Cancelled => "cancelled",
            MigrationPhase::Failed => "failed",
        }
    }

    /// The volume's requests wait (the pivot's pause; it ends once the switch is made in
    /// memory, before it is durable).
    pub fn pauses_the_volume(self) -> bool {
        matches!(self, MigrationPhase::Draining | MigrationPhase::FinalCopy)
    }

    /// The job is over: done, cancelled or failed.
    pub fn is_over(self) -> bool {
        matches!(
            self,
            MigrationPhase::Done | MigrationPhase::Cancelled | MigrationPhase::Failed
        )
    }
}

/// What a job has done and what it cost (seed 004's metrics, section 4).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MigrationStats {
    pub started_ns: u64,
    /// When every chunk had been copied once.
    pub image_copied_ns: Option<u64>,
    pub finished_ns: Option<u64>,
    pub paused_ns: Option<u64>,
    /// The pivot's pause: new requests wait from the pause until every chunk is switched
    /// to the destination in memory (and DBT's last dirty blocks are copied).
    pub downtime_ns: u64,
    /// From the pause until the switch is durable (the pivot's commit, which the volume
    /// no longer waits for; a FLUSH or FUA write made meanwhile does). 0 until then.
    pub pivot_durable_ns: u64,
    pub copied_bytes: u64,
    /// Bytes written to the destination twice or needlessly (DBT recopies, mirrored
    /// duplicates).
    pub redundant_bytes: u64,
    pub mirrored_bytes: u64,
    /// VM bytes written during the job, and those that reached an SSD pool.
    pub vm_write_bytes: u64,
    pub ssd_write_bytes: u64,
    pub dirty_bytes: u64,
    pub pass: u32,
    pub aio_delays: u64,
    /// DBT's dirty chunks copied whole (`MigrationParams::coalesce_runs`).
    pub whole_chunk_copies: u64,
    /// Chunks whose data the copy wrote to the destination (first copies; not the ones
    /// it passed because they were unmapped, already there, or all written by the VM).
    pub chunks_copied: u64,
    /// Bytes of the volume on other pools when the job started: what a copy alone moves.
    pub image_bytes: u64,
    /// The volume's requests before the job (from its first request) and during it, for
    /// lambda_IO.
    pub vm_requests_before: u64,
    pub vm_active_before_ns: u64,
    pub vm_requests_during: u64,
    /// Time since the start (to the end, once over).
    pub elapsed_ns: u64,
}

/// A job's public view.
#[derive(Clone, Debug, PartialEq)]
pub struct MigrationStatus {
    pub volume: String,
    pub from: Vec<PoolId>,
    pub to: PoolId,
    pub scheme: Scheme,
    /// Why `auto` chose the scheme (empty when it was given).
    pub why: String,
    /// The workload as the engine saw it at the start (`auto`'s input; for every job).
    pub profile: super::WorkloadProfile,
    pub phase: MigrationPhase,
    pub chunks: u64,
    /// Chunks the copy has passed: copied, or nothing to copy (`stats.chunks_copied`
    /// counts those whose data it copied).
    pub chunks_done: u64,
    /// Wear against I/O performance in the cost (`MigrationParams::gamma`).
    pub gamma: f64,
    pub error: Option<String>,
    /// The copy rate cap now (`set_migration_rate` changes it).
    pub rate_bytes_per_s: u64,
    /// Whether the copy yields to the VM's I/O or competes with it.
    pub copy_priority: CopyPriority,
    /// DBT's chunk copies in flight in its dirty passes and final copy.
    pub copy_window_chunks: u32,
    /// DBT copies a chunk whole from this many dirty runs (0: never).
    pub coalesce_runs: u32,
    pub stats: MigrationStats,
}

impl MigrationStatus {
    pub fn percent_copied(&self) -> f64 {
        if self.chunks == 0 {
            return 100.0;
        }
        100.0 * self.chunks_done as f64 / self.chunks as f64
    }
}

/// A chunk copy in flight.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Copying {
    pub chunk: u64,
    pub pieces: u32,
    pub failed: bool,
    /// Copying destination data back to the source (cancel).
    pub back: bool,
}

pub(crate) struct Job {
    pub vol: u32,
    pub params: MigrationParams,
    pub scheme: Scheme,
    pub why: String,
    pub profile: super::WorkloadProfile,
    pub phase: MigrationPhase,
    pub from: Vec<PoolId>,
    pub progress: Vec<Progress>,
    /// Destination physical chunk per logical chunk (allocated when first needed; a
    /// thick volume's slot `thick_base + c`).
    pub dst: Vec<Option<u64>>,
    /// A thick volume's new home region on the destination: its first chunk
    /// (`thick.rs`).
    pub thick_base: Option<u64>,
    /// LR may send writes to the destination: at once for a thin volume, once its new
    /// region's record is durable for a thick one (set by the first copy step after).
    pub may_write_dst: bool,
    /// LR: the source location of chunks already switched to the destination, kept
    /// until the pivot (freed) or a cancel (copied back into it).
    pub kept_src: Vec<Option<ChunkLoc>>,
    /// DBT: dirty blocks per chunk (bit per `granularity_bytes`).
    pub dirty: DirtyMap,
    pub cursor: u64,
    /// Chunks to (re)visit after the cursor passed them (busy then, or newly allocated).
    pub late: BTreeSet<u64>,
    /// The pause's sweep for chunks left uncopied (`sweep.rs`).
    pub left: LeftSweep,
    /// Chunk copies in flight: one in the first pass and a cancel's copy back, up to
    /// `params.copy_window_chunks` in DBT's dirty passes and the final copy, never two of one
    /// chunk (an older copy landing last would leave stale data with its bits clear).
    pub copying: Vec<Copying>,
    pub bucket: TokenBucket,
    /// Requests that arrived while the volume was paused.
    pub parked: VecDeque<VmRequest>,
    /// AIO duplicates in flight, and those waiting behind one to the same chunk.
    pub dups_in_flight: u32,
    pub dup_busy: BTreeSet<u64>,
    pub dup_queue: VecDeque<Dup>,
    /// AIO writes held back by the delay: (due time, waiter).
    pub delayed: VecDeque<(u64, crate::volume::Waiter)>,
    /// DBT: dirty bytes when the last pass began.
    pub last_dirty_bytes: u64,
    pub cancel_wanted: bool,
    /// A thick volume's cancel: the last record its copy back made (switches home,
    /// `Moved` ranges cleared). The table write clearing the job waits until it is
    /// durable: a power loss between them would mount a table that no longer claims the
    /// region while the durable map still points into it.
    pub cancel_records_seq: Option<u64>,
    /// A `cache` volume's drain: the last record of its evictions, once the cache was
    /// empty. The copy waits until it is durable (`cache_drain.rs`).
    pub cache_drain_seq: Option<u64>,
    /// A logged volume's drain (`log_drain.rs`): the last record of its write-backs (0 if
    /// it had none), once no log data was left. The copy waits until it is durable.
    pub log_drain_seq: Option<u64>,
    /// The drain wrote some log data back (its records must be durable before the copy).
    pub log_drained: bool,
    /// After a copy back failed (a full or failing source pool), no copy back before
    /// this: retried at once, it failed again at once while the pool stayed full, as fast
    /// as the devices answered (DST seed 3736 grew past 6 GB in such a spell).
    pub copy_back_retry_at_ns: Option<u64>,
    /// The volume runs again on the switched map while the pivot's commit is made
    /// durable (or retried, after a failure for space) (`pass.rs`, `resume_before_durable`).
    pub resumed_before_durable: bool,
    /// When the pivot's pause began (for `stats.pivot_durable_ns`).
    pub pause_began_ns: Option<u64>,
    /// Chunks allocated after the pivot, where they were placed: the volume's placement,
    /// not the job, places them, so a `split` or `hot` volume's new chunk may go to its
    /// fast pool (`check_pivoted`).
    pub placed_after_pivot: BTreeMap<u64, ChunkLoc>,
    /// The copy's flush before the pause (`presync.rs`).
    pub presync: PreSync,
    pub error: Option<String>,
    pub stats: MigrationStats,
}

/// Every migration: jobs by volume, finished ones' last status, and the wake-up timer.
#[derive(Default)]
pub(crate) struct Migrations {
    pub jobs: std::collections::BTreeMap<u32, Job>,
    pub finished: std::collections::BTreeMap<u32, MigrationStatus>,
    pub timer_at: Option<u64>,
    /// Set while a delayed AIO write goes on, so it is not delayed again.
    pub bypass_delay: bool,
    /// Thick volumes' regions waiting for a table write (`thick.rs`).
    pub thick: ThickRegions,
    /// `cache` volumes whose job moved their home: no fill until the volume table naming
    /// the new home is durable (`cache_drain.rs`).
    pub cache_rehoming: BTreeSet<u32>,
    /// Logged chunks being written back home, by (volume, chunk) (`log_drain.rs`).
    pub log_drains: std::collections::BTreeMap<(u32, u64), DrainChunk>,
}

/// Physical chunks that `Moved` overlay entries of volume `vol` point into.
pub(crate) fn moved_chunks(vol: &crate::volume::Volume, cb: u64) -> BTreeSet<(PoolId, u64)> {
    let mut out = BTreeSet::new();
    if !vol
        .overlay
        .iter()
        .any(|(_, _, o)| matches!(o, crate::overlay::Overlay::Moved { .. }))
    {
        return out;
    }
    // A chunk the map already points at (an LR switch whose overlay clears a crash cut
    // off) is the map's: the entries read the same bytes.
    let mapped: BTreeSet<(PoolId, u64)> = vol
        .map
        .iter()
        .filter_map(|(_, l)| match l {
            crate::chunkmap::ChunkLoc::At(p, pc) => Some((p, pc)),
            _ => None,
        })
        .collect();
    for (s, e, o) in vol.overlay.iter() {
        if let crate::overlay::Overlay::Moved { pool, dev_offset } = o {
            let first = (dev_offset - crate::layout::DATA_START_BYTES) / cb;
            let last = (dev_offset + (e - s) - 1 - crate::layout::DATA_START_BYTES) / cb;
            for pc in first..=last {
                if !mapped.contains(&(pool, pc)) {
                    out.insert((pool, pc));
                }
            }
        }
    }
    out
}

impl Migrations {
    /// Whether volume `v`'s migration-class operations wait in the background queue
    /// (`CopyPriority::Background`, and any without a running job) or queue with the
    /// VM's (`Equal`).
    pub fn copy_in_background(&self, v: u32) -> bool {
        self.jobs
            .get(&v)
            .is_none_or(|j| j.params.copy_priority == CopyPriority::Background)
    }

    pub fn is_paused(&self, v: u32) -> bool {
        self.jobs
            .get(&v)
            .is_some_and(|j| j.phase.pauses_the_volume())
    }

    /// Volume `v` runs on the switched map while the pivot's records are not yet durable
    /// (`pass.rs`, `resume_before_durable`).
    pub fn in_pivot_window(&self, v: u32) -> bool {
        self.jobs.get(&v).is_some_and(|j| {
            matches!(j.phase, MigrationPhase::Committing { .. }) && j.resumed_before_durable
        })
    }
}

impl Job {
    /// Chunk `c` must be copied (again): the only way a chunk becomes `Uncopied` after the
    /// job's start, so that the pause's sweep (`sweep.rs`) passes it again.
    pub(crate) fn mark_uncopied(&mut self, c: u64) {
        self.progress[c as usize] = Progress::Uncopied;
        self.left.back_to(c);
    }

    /// Whether a copy of chunk `c` is in flight.
    pub(crate) fn copying_chunk(&self, c: u64) -> bool {
        self.copying.iter().any(|cp| cp.chunk == c)
    }

    /// AIO duplicates issued and not yet done, plus those queued behind their chunk's.
    pub(crate) fn unfinished_dups(&self) -> usize {
        self.dups_in_flight as usize + self.dup_queue.len()
    }

    /// The job's `--rate`: take `bytes` from its bucket now, or `Err(when)` they will be
    /// there. Bursts are capped at a quarter second of the rate (two chunks at least), so
    /// the copy, the cache drain and the log drain pace alike.
    pub(crate) fn take_rate(&mut self, now: u64, chunk_bytes: u64, bytes: u64) -> Result<(), u64> {
        let rate = self.params.rate_bytes_per_s;
        let burst = (rate / 4).max(2 * chunk_bytes);
        self.bucket.refill(now, rate, burst);
        if self.bucket.tokens() < bytes.min(burst) {
            return Err(self.bucket.ready_at(bytes.min(burst), rate));
        }
        self.bucket.take(bytes);
        Ok(())
    }
}

/// An AIO duplicate waiting behind another to the same chunk (so they land in order).
#[derive(Clone, Debug)]
pub(crate) struct Dup {
    pub chunk: u64,
    pub dev: u64,
    pub len: u64,
    pub kind: DevKind,
    pub payload: Option<Bytes>,
    pub not_before_ns: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PreSync {
    NotYet,
    /// Round `round` (from 1) of the volume's commits is in flight since `started_ns`.
    Started {
        round: u32,
        started_ns: u64,
    },
    Done,
}

#[derive(Clone, Debug)]
pub(crate) struct HeldRegion {
    pub vol: u32,
    pub pool: PoolId,
    pub first: u64,
    pub chunks: u64,
    /// For the invariant checker's report.
    pub what: &'static str,
}

/// Thick volumes' regions between a job's end and the table write that frees them.
#[derive(Default)]
pub(crate) struct ThickRegions {
    pub held: Vec<HeldRegion>,
    /// Volumes whose chunks point at their new region with `At` entries until the table
    /// naming it is durable (then they become `Home` again). Tier moves wait meanwhile.
    pub rehoming: BTreeSet<u32>,
}

/// A live log range of a chunk being written back: (start, end, log pool, device offset).
pub(crate) type LogPiece = (u64, u64, PoolId, u64);

/// One chunk's write-back in flight (`Migrations::log_drains`). Kept outside the job: a
/// cancel may end the job before the write-back's completions arrive.
#[derive(Debug)]
pub(crate) struct DrainChunk {
    pub(crate) pieces: Vec<LogPiece>,
    /// Copies and zero-fills not yet done.
    pub(crate) pending: u32,
    pub(crate) failed: Option<Errno>,
    /// The home chunk: where the copies go.
    pub(crate) home: (PoolId, u64),
    /// The chunk was unmapped: `home` was allocated for it and is mapped once done.
    pub(crate) allocated: bool,
}
