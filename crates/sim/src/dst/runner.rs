//! One deterministic simulation run: a random system (pools, volumes, chunk and journal
//! sizes) and a random multi-volume workload, chosen by the seed; the full engine with
//! data-carrying devices under virtual time; power loss, device errors, latent sector
//! errors and stalls per the fault level; every read and every recovery checked against
//! the reference disks; engine invariants checked as it goes.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use bytes::{Bytes, BytesMut};
use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use tiervisor_engine::host::{self, Wakeups};
use tiervisor_engine::jobs::migrate::{
    CopyPriority, MAX_COPY_WINDOW_CHUNKS, MigrationParams, MigrationPhase, Scheme, SchemeChoice,
};

use crate::shards::Sharded;
use tiervisor_engine::wbuf::WriteBufferConfig;
use tiervisor_engine::{
    CachePolicy, CleanerPolicy, DevKind, DeviceCompletion, DeviceOp, EngineConfig, EngineEvent,
    EngineState, Errno, InjectedBug, IoContext, LogConfig, LogMode, Medium, OpId, Outputs,
    Placement, PoolConfig, PoolId, Provisioning, ReqKind, SchedSpec, StartMode, ThrottleConfig,
    TieringConfig, VmRequest, VolumeConfig, VolumeId, VolumeQos,
};

use super::device::{DataDevice, Faults, below};
use super::ncq::{HDD_POOL, NcqDrive, Started};
use super::pattern::{SECTOR, Seen, decode, sector_data};
use super::probe::{Follow, Probe};
use super::reference::RefDisk;
use super::space::SpaceFaults;

#[path = "stop.rs"]
mod stop;
use stop::Marker;

/// What to run.
#[derive(Clone, Debug)]
pub struct DstConfig {
    pub seed: u64,
    pub steps: u64,
    pub faults: Faults,
    pub bug: Option<InjectedBug>,
}

/// What a passing run did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DstStats {
    pub requests: u64,
    pub reads_checked: u64,
    pub sectors_checked: u64,
    pub crashes: u64,
    pub recoveries: u64,
    /// Orderly stops, each followed by a power loss and a mount that checked the
    /// clean-stop marker and every write acknowledged before the stop (`stop.rs`).
    pub clean_stops: u64,
    pub injected_errors: u64,
    /// Seeds that ran out of space, the device writes that failed with ENOSPC (counted
    /// in `injected_errors` too), and the lasting spells of a full pool.
    pub space_seeds: u64,
    pub space_errors: u64,
    pub space_spells: u64,
    /// Recoveries that found no space for a metadata write and waited for it.
    pub space_mounts: u64,
    pub checkpoints: u64,
    /// Chunks moved between pools by tier migration (promotions plus demotions).
    pub chunk_moves: u64,
    /// Of those, the fills and evictions of `cache` volumes.
    pub cache_moves: u64,
    /// Demotions that were a remap to a kept home (`[tiering] keep_home`), and directed
    /// moves (`Engine::move_chunk`) the engine started (`directed.rs`).
    pub clean_demotions: u64,
    pub directed_moves: u64,
    /// Dirty demotions to a kept home that copied only the span written since the
    /// promotion.
    pub span_demotions: u64,
    /// `cache` volumes' background writebacks (not for an eviction), and the quiet
    /// spells that let idle cleaning run (`idle.rs`).
    pub cache_writebacks: u64,
    pub idle_spells: u64,
    /// Log appends and segments the cleaner emptied.
    pub log_appends: u64,
    pub segments_cleaned: u64,
    /// Times the cleaner waited for its bandwidth cap.
    pub cleaner_waits: u64,
    /// The longest an operation waited in a pool's scheduler (the starvation bound).
    pub sched_wait_max_ns: u64,
    /// Live migrations started, pivoted (done), and cancelled or failed.
    pub migrations: u64,
    pub migration_pivots: u64,
    pub migration_cancels: u64,
    /// Of the migrations started, those of tiered (`hot`, `split` or `cache`) volumes,
    /// those of thick volumes (their home region moves), and those of `cache` volumes
    /// (their cache drained first).
    pub migrations_tiered: u64,
    pub migrations_thick: u64,
    pub migrations_cache: u64,
    /// Of the migrations started, those of volumes that log (their log drained first).
    pub migrations_logged: u64,
    /// VM writes the host write buffer absorbed, and FLUSHes sent to tag-aware devices
    /// with a volume's tag.
    pub buffered_writes: u64,
    pub tagged_flushes: u64,
    /// Data operations given a target by a pool's virtual performance throttle.
    pub throttled_ops: u64,
    /// Volumes created while running and announced (`Control::CreateVolume`).
    pub volumes_created: u64,
    /// Seeds run as several engines (`draw_shards`), and the engines of all seeds.
    pub sharded_seeds: u64,
    pub shards: u64,
    /// Space moved between shards (`engine::loan`): seeds that borrowed, runs borrowed,
    /// and runs a mount gave back to their donor (a crash between lend and borrow).
    pub loan_seeds: u64,
    pub loans: u64,
    pub loans_returned: u64,
    /// Borrowed runs given back by their borrowers (`engine::give_back`).
    pub given_back: u64,
    /// Of them, those a hint after another shard's denial started at once
    /// (`Control::GiveBackNow`).
    pub given_back_on_hint: u64,
    /// Borrowed runs seen wholly free behind a used one (only the last run of a pool
    /// can go back), each once, and their chunks.
    pub stuck_runs: u64,
    pub stuck_chunks: u64,
    /// Write pieces that waited for a loan's answer instead of failing with ENOSPC
    /// (`engine::loan_wait`), in the tight seeds whose loan steps are delayed.
    pub loan_waits: u64,
    /// Tight migrating seeds whose driver carries loan steps slowly
    /// (`SLOW_LOAN_DELAY_NS`), and the write pieces whose loan's answer came while their
    /// volume was paused for its pivot (`Engine::loan_answers_in_pauses`).
    pub slow_loan_seeds: u64,
    pub pause_answers: u64,
    /// Sharded seeds whose budgets follow demand (`engine::budget_broker`), and the
    /// budget commands their brokers sent.
    pub budget_seeds: u64,
    pub budget_steps: u64,
    /// Sharded seeds that share weighted pools' devices (`shard_qos`), the device-share
    /// commands their brokers sent, and of them those that set a gate.
    pub share_seeds: u64,
    pub share_steps: u64,
    pub gated_steps: u64,
    /// Volumes grown or shrunk while running and announced (`Control::ResizeVolume`),
    /// and of them the shrinks.
    pub volumes_resized: u64,
    pub volumes_shrunk: u64,
    /// Volumes deleted while running and announced (`Control::DeleteVolume`).
    pub volumes_deleted: u64,
    /// Volumes that moved down an index at a mount, because one before them was deleted.
    pub volumes_moved_down: u64,
    /// Seeds that ran the migration-heavy profile (`probe.rs`), and the power losses it
    /// made right after a FLUSH completed or a pivot became durable.
    pub probe_seeds: u64,
    pub probe_crashes: u64,
    /// Seeds whose HDD drive queued and reordered commands (`ncq.rs`), the commands it
    /// served and how many of them overtook an older one.
    pub ncq_seeds: u64,
    pub ncq_served: u64,
    pub ncq_reordered: u64,
    /// NCQ seeds whose HDD pool was an array of queueing drives (`ncq.rs`).
    pub array_seeds: u64,
    /// Seeds whose requests named processes (I/O contexts: a pool ran cfq, bfq or
    /// cats), and the requests that named one.
    pub context_seeds: u64,
    pub context_requests: u64,
}

/// No operation may wait longer than this in a scheduler (virtual time). Legitimate waits
/// stay far below it: deadlines of 0.5-5 s, slices of 100 ms, device stalls of up to 3 s.
pub const SCHED_WAIT_BOUND_NS: u64 = 30_000_000_000;

/// A failed run, with everything needed to replay it.
#[derive(Clone, Debug)]
pub struct DstFailure {
    pub seed: u64,
    pub step: u64,
    pub message: String,
    pub replay: String,
}

impl std::fmt::Display for DstFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} failed at step {}: {}\n  replay: {}",
            self.seed, self.step, self.message, self.replay
        )
    }
}

#[derive(Clone, Debug)]
struct ReqInfo {
    vol: u32,
    kind: ReqKind,
    first: u64,
    n: u64,
    version: u64,
    fua: bool,
    submitted: u64,
}

const EV_DEV: u8 = 0;
const EV_WAKE: u8 = 1;
/// A part of an operation at one member of an array (`ncq.rs`): payload
/// `Started::part_payload`.
const EV_PART: u8 = 2;

struct Sim {
    /// Print every request, device operation and crash (TIERVISOR_DST_TRACE=1).
    trace: bool,
    cfg: DstConfig,
    rng: Xoshiro256PlusPlus,
    engine_cfg: EngineConfig,
    /// One engine per shard (`shards.rs`); one shard is the engine itself.
    engine: Sharded,
    devs: Vec<DataDevice>,
    /// Each volume's reference, by index; its `vol` is the volume's tag in the data
    /// written to it, which stays when the index moves down (`delete.rs`).
    refs: Vec<RefDisk>,
    /// The next tag a created volume takes: no tag is used twice.
    next_tag: u32,
    heap: BinaryHeap<Reverse<(u64, u64, u8, u64)>>,
    /// Wake-ups queued in `heap` for the engine's timers.
    wakeups: Wakeups,
    /// Volumes the batch being delivered deleted (`pump`).
    deleted: Vec<String>,
    seq: u64,
    now_ns: u64,
    /// Logical time for the reference model: one tick per submission or completion.
    clock: u64,
    in_flight_ops: BTreeMap<u64, DeviceOp>,
    reqs: BTreeMap<u64, ReqInfo>,
    next_req: u64,
    next_version: u64,
    max_in_flight: usize,
    recovering: bool,
    /// A start reached Ready once: later starts are mounts, never formats.
    mounted_once: bool,
    /// What the next mount must say of the last stop (`stop.rs`).
    marker: Marker,
    step: u64,
    stats: DstStats,
    last_end: Vec<u64>,
    hot: Vec<(u64, u64)>,
    /// Live migrations: their own stream, so seeds without them replay as before; `None`
    /// in the seeds that do not migrate.
    mrng: Option<Xoshiro256PlusPlus>,
    /// Device writes failing with ENOSPC, in the seeds that run out of space.
    space: Option<SpaceFaults>,
    /// The result of each volume's last FLUSH.
    last_flush: Vec<Option<Result<(), Errno>>>,
    /// Volumes created at run time, in the seeds that do (`create.rs`).
    creates: Option<super::create::CreateDraws>,
    /// Volumes grown at run time, in the seeds that create them (`resize.rs`).
    resizes: Option<super::resize::ResizeDraws>,
    deletes: Option<super::delete::DeleteDraws>,
    /// Quiet spells, in the seeds with a `cache` volume (`idle.rs`).
    idles: Option<super::idle::IdleDraws>,
    /// Whole-volume trims in the tight sharded seeds (`release.rs`).
    releases: Option<super::release::ReleaseDraws>,
    /// Directed tier moves, in the seeds with a pinned volume that has a fast pool
    /// (`directed.rs`).
    directed: Option<super::directed::DirectedDraws>,
    /// The migration-heavy profile, in a share of the migrating seeds (`probe.rs`).
    probe: Option<Probe>,
    /// The HDD pool's queueing drive, in the NCQ seeds (`ncq.rs`).
    ncq: Option<NcqDrive>,
    /// Tiered volumes may migrate: half the migrating seeds, drawn on a stream of its
    /// own. In the others a start of a tiered volume is not asked, as when the engine
    /// refused every one, so those seeds replay as before tiered volumes could move.
    tiered_migrations: bool,
    /// Processes per volume and their stream, in the seeds where a pool runs a scheduler
    /// that serves processes (`draw_contexts`).
    contexts: Option<(u64, Xoshiro256PlusPlus)>,
    /// Thick volumes may migrate (their home region moves): half the migrating seeds, on
    /// a stream of its own; in the others a start of a thick volume is not asked, as when
    /// the engine refused every one. TIERVISOR_DST_NO_THICK_MIGRATE=1 leaves them out.
    thick_migrations: bool,
    /// `cache` volumes may migrate (the job drains their cache first), in every migrating
    /// seed (few have a `cache` volume), whether or not tiered volumes do; a start goes
    /// to the volume's home pool, as a tiered one's. TIERVISOR_DST_NO_CACHE_MIGRATE=1
    /// leaves them out (no start of a `cache` volume is asked, as when the engine refused
    /// every one).
    cache_migrations: bool,
    /// Volumes that log may migrate (the job writes their log back home first), in every
    /// migrating seed. TIERVISOR_DST_NO_LOG_MIGRATE=1 leaves them out (no start of a
    /// volume that logs is asked, as when the engine refused every one).
    log_migrations: bool,
}

type Fail = String;

/// Any registered scheduler, with its defaults.
fn draw_scheduler(srng: &mut Xoshiro256PlusPlus) -> SchedSpec {
    let names = tiervisor_engine::sched::names();
    SchedSpec::named(names[below(srng, names.len() as u64) as usize])
}

/// The schedulers that key queues and anticipation on the issuing process.
const CONTEXT_SCHEDULERS: [&str; 3] = ["cfq", "bfq", "cats"];

/// In the seeds where a pool runs one of [`CONTEXT_SCHEDULERS`], requests name one of 1
/// to 4 processes per volume (or none, the volume's shared context), drawn on a stream
/// of their own so every other choice of a seed stays. TIERVISOR_DST_NO_CONTEXTS=1
/// leaves them out (every request the volume's, as before contexts existed).
fn draw_contexts(cfg: &EngineConfig, seed: u64) -> Option<(u64, Xoshiro256PlusPlus)> {
    let serves_processes = cfg
        .pools
        .iter()
        .any(|p| CONTEXT_SCHEDULERS.contains(&p.scheduler.name.as_str()));
    if !serves_processes || std::env::var_os("TIERVISOR_DST_NO_CONTEXTS").is_some() {
        return None;
    }
    let mut r = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xc0de_c7c5_u64.rotate_left(20));
    let processes = 1 + below(&mut r, 4);
    Some((processes, r))
}

/// A volume's QoS: any weight; sometimes a reservation, sometimes a limit (high enough
/// that DST's bursts drain within the starvation bound).
fn draw_qos(srng: &mut Xoshiro256PlusPlus) -> VolumeQos {
    VolumeQos {
        reservation_iops: [0, 0, 50, 500][below(srng, 4) as usize],
        limit_iops: [0, 0, 1000, 5000][below(srng, 4) as usize],
        weight: 1 + below(srng, 1000) as u32,
    }
}

/// Seed 001's host and device halves, on their own stream (every other choice of a seed
/// stays): a third of the seeds give pools a host write-back buffer (small, so the
/// high-water mark and fair shares matter; short ages, so age write-back runs), and a
/// third of the seeds, independently, have tag-aware devices whose tagged FLUSH makes only
/// that volume's cached writes stable. `TIERVISOR_DST_NO_WBUF=1` leaves both out.
fn draw_host_flush(seed: u64) -> ([Option<WriteBufferConfig>; 2], bool) {
    if !host_flush_on() {
        return ([None, None], false);
    }
    let mut frng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xf1u64.rotate_left(52));
    let buffered = below(&mut frng, 3) == 0;
    let mut wb = [None, None];
    for w in &mut wb {
        if buffered && below(&mut frng, 4) != 0 {
            *w = Some(WriteBufferConfig {
                size_bytes: [64u64 << 10, 256 << 10, 4 << 20][below(&mut frng, 3) as usize],
                max_age_ns: [1_000_000, 20_000_000, 500_000_000][below(&mut frng, 3) as usize],
            });
        }
    }
    (wb, below(&mut frng, 3) == 0)
}

/// How many shards the seed runs (1-3), from a stream of its own so that the seeds
/// drawing one shard replay exactly as before sharding. `TIERVISOR_DST_SHARDS=N` forces
/// N for every seed (1: every seed as before sharding).
pub fn draw_shards(seed: u64) -> u16 {
    if let Some(n) = forced_shards() {
        return n;
    }
    let mut r = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x54a2d_u64.rotate_left(28));
    1 + below(&mut r, 3) as u16
}

/// How long the tight seeds carry each loan step (`Sharded::set_loan_delay_ns`), on a
/// stream of its own: at once in a third, else up to 50 ms (several requests' worth of
/// DST's device latencies), so a shard fills while its loan is on its way and its writes
/// wait for it.
fn draw_loan_delay_ns(seed: u64) -> u64 {
    let mut r = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x10a4_u64.rotate_left(16));
    [0, 0, 0, 100_000, 2_000_000, 50_000_000][below(&mut r, 6) as usize]
}

/// How long a tight seed's shards hold a wholly free borrowed run before giving it back
/// (`engine::give_back`), on a stream of its own: a seed spans a few seconds of engine
/// time, so the default 1 s would give back little; 0 keeps borrowed space in a seventh;
/// 60 s outlasts a seed, so there a run goes back only on the hint another shard's
/// denial sends (`Control::GiveBackNow`).
fn draw_give_back_hold_ns(seed: u64) -> u64 {
    let mut r = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x61b4_u64.rotate_left(12));
    [
        0,
        1_000_000,
        5_000_000,
        20_000_000,
        100_000_000,
        1_000_000_000,
        60_000_000_000,
    ][below(&mut r, 7) as usize]
}

/// How long a slow driver carries each loan step: four times the longest drawn above, far
/// inside the engine's wait for an answer (`ANSWER_WAIT_NS`, 5 s), so that a job of the
/// asking shard often ends its copy and pauses its volume for the pivot while a write of
/// the volume waits for the answer; the answer (a denial, mostly) then ends the last
/// request the pause waits for, in an admin command (`loan-answer-no-step`). With 50 ms
/// no seed of 0..2048 met that; with 200 ms in every tight seed, seeds 117, 340, 359 and
/// 400 of 0..400 did (1 s: 240, 359, 360 and 964 of 0..1024), measured before the
/// give-back draws (03b1222) moved the tight seeds; with this profile in half of them,
/// seed 117 of 0..256 catches it now (the CI bug set).
const SLOW_LOAN_DELAY_NS: u64 = 200_000_000;

/// Whether a tight seed that migrates has a slow driver (`SLOW_LOAN_DELAY_NS`): half of
/// them, on a stream of their own (`TIERVISOR_DST_NO_SLOW_LOANS=1` leaves them out).
fn draw_slow_loans(seed: u64, migrating: bool) -> bool {
    let mut r = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x510e_u64.rotate_left(52));
    migrating && std::env::var_os("TIERVISOR_DST_NO_SLOW_LOANS").is_none() && below(&mut r, 2) == 0
}

/// Whether a sharded seed without logs shares its room for thin data among its shards
/// (half of them; `TIERVISOR_DST_NO_TIGHT=1` leaves them out to compare counters).
fn draw_tight(seed: u64) -> bool {
    let mut r = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x7197_u64.rotate_left(20));
    std::env::var_os("TIERVISOR_DST_NO_TIGHT").is_none() && below(&mut r, 2) == 0
}

/// Whether a sharded seed's budgets follow demand (two thirds of them, on a stream of
/// their own; `TIERVISOR_DST_NO_BUDGETS=1` keeps every one at the fixed 1/N split).
fn draw_budgets(seed: u64) -> bool {
    let mut r = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xb0d6_u64.rotate_left(24));
    std::env::var_os("TIERVISOR_DST_NO_BUDGETS").is_none() && below(&mut r, 3) != 0
}

/// Whether a sharded seed shares each weighted pool's device across its shards by weight
/// (`shard_qos`, `engine::share_broker`) in two thirds of the seeds (unless
/// `TIERVISOR_DST_NO_SHARES=1`).
fn draw_shares(seed: u64) -> bool {
    let mut r = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5a4e_u64.rotate_left(40));
    std::env::var_os("TIERVISOR_DST_NO_SHARES").is_none() && below(&mut r, 3) != 0
}

fn forced_shards() -> Option<u16> {
    std::env::var("TIERVISOR_DST_SHARDS")
        .ok()
        .and_then(|v| v.parse::<u16>().ok())
        .filter(|n| (1..=8).contains(n))
}

/// Whether seed 001's host and device halves are drawn (unless `TIERVISOR_DST_NO_WBUF=1`).
fn host_flush_on() -> bool {
    std::env::var_os("TIERVISOR_DST_NO_WBUF").is_none_or(|v| v != "1")
}

/// A third of the pools hold completions to a disk model (seed 003's throttle): a small
/// linear model mostly, so DST's time scale stays, sometimes the Cheetah fit at k = 1;
/// any k from 1 to 4.5, adapting or not, with or without a shadow cache.
fn draw_throttle(hrng: &mut Xoshiro256PlusPlus) -> Option<ThrottleConfig> {
    if below(hrng, 3) != 0 {
        return None;
    }
    let k = 1.0 + below(hrng, 8) as f64 / 2.0;
    let adapt = below(hrng, 2) == 0;
    if below(hrng, 4) == 0 {
        return Some(ThrottleConfig::cheetah_15k4(1.0, adapt));
    }
    let cached = below(hrng, 2) == 0;
    Some(ThrottleConfig {
        model: "linear".into(),
        half_rotation_ns: 10_000 + below(hrng, 1_000_000),
        max_seek_ns: below(hrng, 3_000_000),
        max_seek_sectors: [0, 2048, 1 << 20][below(hrng, 3) as usize],
        cache_segments: if cached {
            1 + below(hrng, 8) as usize
        } else {
            0
        },
        sectors_per_segment: 64,
        prefetch_sectors: 16,
        cache_hit_ns: 20_000,
        k,
        adapt,
    })
}

/// The seed's configuration, and per pool the room it has beyond its volumes' metadata
/// and thick regions (what thin data and logs share).
fn build_config(rng: &mut Xoshiro256PlusPlus, seed: u64) -> (EngineConfig, [u64; 2]) {
    let (write_buffers, _) = draw_host_flush(seed);
    // Tiering choices come from their own stream, so seeds without it replay exactly as
    // they did before tiering existed (the regression seeds keep their meaning).
    let mut trng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x7153_u64.rotate_left(40));
    let tiered = below(&mut trng, 2) == 0;
    // The log-structured write path likewise: half the seeds, with small segments so
    // the cleaner runs often.
    let mut lrng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x106_u64.rotate_left(48));
    let logged = below(&mut lrng, 2) == 0;
    let pool_log = [
        logged && below(&mut lrng, 4) != 0,
        logged && below(&mut lrng, 2) == 0,
    ];
    let chunk_bytes = [64u64 << 10, 128 << 10, 1 << 20][below(rng, 3) as usize];
    let journal_bytes: u64 = if below(rng, 2) == 0 {
        64 << 10
    } else {
        256 << 10
    };
    // Schedulers and QoS on their own stream, so every other choice of a seed stays.
    let mut srng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5c4_u64.rotate_left(36));
    let nvols = 2 + below(rng, 2) as usize;
    // `cache` placements (issue 17) replace half the `hot` volumes, drawn from their own
    // stream: seeds without a `hot` volume replay as before.
    let mut crng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xcac4e_u64.rotate_left(24));
    let no_cache = std::env::var_os("TIERVISOR_DST_NO_CACHE").is_some();
    let mut khrng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x40e_u64.rotate_left(52));
    let mut drng = super::directed::config_rng(seed);
    let mut volumes = Vec::new();
    let mut thick_bytes = [0u64; 2];
    for i in 0..nvols {
        let size_bytes = (1 + below(rng, 6)) << 20 | (below(rng, 4) * 512 * 64);
        let thick = below(rng, 3) == 0;
        let home = below(rng, 2) as usize;
        if thick {
            thick_bytes[home] += size_bytes.div_ceil(chunk_bytes) * chunk_bytes;
        }
        let placement = if !tiered {
            Placement::Pinned
        } else {
            match below(&mut trng, 4) {
                0 => Placement::Pinned,
                1 => Placement::Split {
                    fast_percent: below(&mut trng, 101) as u8,
                },
                _ => Placement::Hot {
                    // 0: as much as the pool has; else a few chunks, so demotions happen.
                    fast_budget_bytes: below(&mut trng, 3)
                        * (1 + below(&mut trng, 4))
                        * chunk_bytes,
                    priority: below(&mut trng, 3) as u8,
                },
            }
        };
        let placement = match placement {
            Placement::Hot { .. } if !no_cache && below(&mut crng, 2) == 0 => Placement::Cache {
                cache_policy: if below(&mut crng, 2) == 0 {
                    CachePolicy::Smq
                } else {
                    CachePolicy::Bcache
                },
                // A few chunks, so evictions (clean and dirty) happen; now and then
                // the pool's share.
                fast_budget_bytes: if below(&mut crng, 4) == 0 {
                    0
                } else {
                    (1 + below(&mut crng, 3)) * chunk_bytes
                },
            },
            p => p,
        };
        volumes.push(VolumeConfig {
            name: format!("v{i}"),
            size_bytes,
            home_pool: PoolId(home as u16),
            // A pinned volume of a tiered seed may have a fast pool, for directed moves.
            fast_pool: (placement != Placement::Pinned
                || (tiered && super::directed::pinned_gets_fast_pool(&mut drng)))
            .then_some(PoolId(1 - home as u16)),
            provisioning: if thick {
                Provisioning::Thick
            } else {
                Provisioning::Thin
            },
            placement,
            log: match below(&mut lrng, 6) {
                0 if logged => Some(true),
                1 => Some(false),
                _ => None,
            },
            qos: draw_qos(&mut srng),
        });
    }
    let seg_chunks = 1u64 << below(&mut lrng, 3);
    let segment_bytes = seg_chunks * chunk_bytes;
    let append_bytes = [4096, 16 << 10, segment_bytes][below(&mut lrng, 3) as usize];
    // Its own stream, so adding these left every other choice of a seed as it was.
    let mut grng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x6a7_u64.rotate_left(44));
    let log = LogConfig {
        segment_bytes,
        append_bytes,
        threshold_bytes: [4096, 64 << 10, append_bytes][below(&mut lrng, 3) as usize]
            .min(append_bytes),
        appends_in_flight: 1 + below(&mut lrng, 3) as u32,
        cleaner: if below(&mut lrng, 2) == 0 {
            CleanerPolicy::Greedy
        } else {
            CleanerPolicy::CostBenefit
        },
        clean_below_free_segments: 2 + below(&mut lrng, 6),
        reserve_segments: 1 + below(&mut lrng, 2),
        gather_ns: [0, 50_000, 2_000_000][below(&mut grng, 3) as usize],
        // No cap, a cap tight enough to hold the cleaner back often, the default.
        clean_bytes_per_s: [0, 256 << 10, 64 << 20][below(&mut grng, 3) as usize],
        // Seed 002's write-through redirection in a quarter of the seeds (drawn last from
        // this stream, so the other choices of a seed stay as they were).
        mode: if below(&mut grng, 4) == 0 {
            LogMode::Bitvisor
        } else {
            LogMode::Gather
        },
    };
    let any_log = pool_log.iter().any(|&l| l) || volumes.iter().any(|v| v.log == Some(true));
    let journals = nvols as u64 * journal_bytes.div_ceil(chunk_bytes) * chunk_bytes;
    // The checkpoint reserve the engine insists on: 3 chains of each volume's map.
    let reserve: u64 = volumes
        .iter()
        .map(|v| {
            let overlay = if v.log.unwrap_or(any_log) {
                2 * v.size_bytes.div_ceil(2048).max(64) * 32
            } else {
                0
            };
            3 * (64 + v.size_bytes.div_ceil(chunk_bytes) * 8 + overlay).div_ceil(chunk_bytes - 64)
                * chunk_bytes
        })
        .sum::<u64>()
        + 4 * chunk_bytes;
    // Sometimes the data pool is too small for every thin volume: ENOSPC paths run too.
    let slack = [2u64 << 20, 8 << 20, 24 << 20][below(rng, 3) as usize]
        + if any_log {
            (log.clean_below_free_segments + log.reserve_segments + 2) * segment_bytes
        } else {
            0
        };
    let cap = |thick: u64, extra: u64| (1 << 20) + thick + extra + 8 * chunk_bytes;
    let mut uuid = [0u8; 16];
    uuid[..8].copy_from_slice(&seed.to_le_bytes());
    // Throttles on their own stream too.
    let mut hrng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x7407_u64.rotate_left(52));
    let throttles = [draw_throttle(&mut hrng), draw_throttle(&mut hrng)];
    let [ssd_throttle, hdd_throttle] = throttles;
    let cfg = EngineConfig {
        system_uuid: uuid,
        chunk_bytes,
        track_data: true,
        pools: vec![
            PoolConfig {
                name: "ssd".into(),
                medium: Medium::Ssd,
                capacity_bytes: cap(thick_bytes[0], journals + reserve + slack),
                queue_depth: 1 + below(rng, 16) as u32,
                scheduler: draw_scheduler(&mut srng),
                log: pool_log[0],
                throttle: ssd_throttle,
                write_buffer: write_buffers[0],
            },
            PoolConfig {
                name: "hdd".into(),
                medium: Medium::Hdd,
                capacity_bytes: cap(thick_bytes[1], slack),
                queue_depth: 1 + below(rng, 4) as u32,
                scheduler: draw_scheduler(&mut srng),
                log: pool_log[1],
                throttle: hdd_throttle,
                write_buffer: write_buffers[1],
            },
        ],
        volumes,
        meta_pool: PoolId(0),
        journal_bytes,
        commit_interval_ns: (1 + below(rng, 50)) * 1_000_000,
        discard_freed: below(rng, 2) == 0,
        // Aggressive migration, so moves overlap writes, trims, crashes and faults.
        tiering: TieringConfig {
            interval_ns: (1 + below(&mut trng, 20)) * 1_000_000,
            max_moves: 1 + below(&mut trng, 4) as u32,
            bytes_per_s: 1 << 30,
            decay_ns: (10 + below(&mut trng, 500)) * 1_000_000,
            promote_min_heat: 1 + below(&mut trng, 2) as u32,
            hysteresis_pct: below(&mut trng, 60) as u32,
            writeback_percent: [0, 10, 50, 100][below(&mut crng, 4) as usize],
            // Small enough that DST's short streams cross it.
            sequential_cutoff_bytes: [64 << 10, 1 << 20, 4 << 20][below(&mut crng, 3) as usize],
            // Kept homes (`engine::tier_home`) in half the seeds, drawn from their own
            // stream so every other choice of a seed stays.
            keep_home: below(&mut khrng, 2) == 0,
        },
        log,
        ..EngineConfig::default()
    };
    (cfg, [slack, slack])
}

impl Sim {
    /// A trace line's prefix: the step and the virtual time (µs), so events at one
    /// instant show as such.
    fn at(&self) -> String {
        format!("{} @{}us", self.step, self.now_ns / 1000)
    }

    fn new(cfg: DstConfig) -> Result<Sim, Fail> {
        let mut rng =
            Xoshiro256PlusPlus::seed_from_u64(cfg.seed.wrapping_mul(0x2545_F491_4F6C_DD1D) ^ 0xD57);
        let (mut engine_cfg, slack) = build_config(&mut rng, cfg.seed);
        // Every shard gets a slice of each pool as large as the unsharded seed's pool, so
        // no seed runs out of space for being sharded; except in a share of the sharded
        // seeds without logs (`draw_tight`), where the shards share one seed's room for
        // thin data: every slice still holds every volume's metadata and thick region,
        // and a shard whose volumes write more than its share borrows space from
        // another (`engine::loan`).
        let shards = draw_shards(cfg.seed);
        let logged_cfg = engine_cfg.pools.iter().any(|p| p.log)
            || engine_cfg.volumes.iter().any(|v| v.log == Some(true));
        let tight = shards > 1 && !logged_cfg && draw_tight(cfg.seed);
        for (p, room) in engine_cfg.pools.iter_mut().zip(slack) {
            p.capacity_bytes *= u64::from(shards);
            if tight {
                p.capacity_bytes -= (u64::from(shards) - 1) * room;
            }
        }
        engine_cfg.budget_reports = shards > 1 && draw_budgets(cfg.seed);
        if tight {
            engine_cfg.give_back_hold_ns = draw_give_back_hold_ns(cfg.seed);
        }
        engine_cfg.shard_qos = shards > 1 && draw_shares(cfg.seed);
        if std::env::var_os("TIERVISOR_DST_TRACE").is_some() {
            eprintln!("config ({shards} shard(s)): {engine_cfg:?}");
        }
        let mut mrng = Xoshiro256PlusPlus::seed_from_u64(cfg.seed ^ 0x4d16_u64.rotate_left(36));
        // Half the seeds start, cancel and crash live storage migrations (every scheme
        // and `auto`); TIERVISOR_DST_NO_MIGRATE=1 leaves them out to compare counters.
        let enabled = std::env::var_os("TIERVISOR_DST_NO_MIGRATE").is_none();
        let mrng = (enabled && below(&mut mrng, 2) == 0).then_some(mrng);
        let logged = engine_cfg.pools.iter().any(|p| p.log)
            || engine_cfg.volumes.iter().any(|v| v.log == Some(true));
        let log_migrations =
            mrng.is_some() && std::env::var_os("TIERVISOR_DST_NO_LOG_MIGRATE").is_none();
        // The migration-heavy profile (`probe.rs`), in a share of the migrating seeds
        // that do not log: every volume there is thin and pinned, so every one may move.
        // (Not in logged seeds: its jobs run most of the time, and a migrating volume
        // does not log, so the log and its cleaner would go mostly unexercised there;
        // with it, the CI set cleaned 190 segments, against 316 before logged volumes
        // could migrate and 233 without it, measured before the clean-stop marker.)
        let probe = Probe::draw(
            cfg.seed,
            mrng.is_some() && !logged,
            cfg.faults >= Faults::Crash,
        );
        if probe.is_some() {
            for v in &mut engine_cfg.volumes {
                v.provisioning = Provisioning::Thin;
                v.placement = Placement::Pinned;
                v.fast_pool = None;
            }
        }
        let mut tm = Xoshiro256PlusPlus::seed_from_u64(cfg.seed ^ 0x71e4_u64.rotate_left(44));
        let tiered_migrations = mrng.is_some()
            && std::env::var_os("TIERVISOR_DST_NO_TIERED_MIGRATE").is_none()
            && below(&mut tm, 2) == 0;
        let mut th = Xoshiro256PlusPlus::seed_from_u64(cfg.seed ^ 0x7c1c_u64.rotate_left(40));
        let thick_migrations = mrng.is_some()
            && std::env::var_os("TIERVISOR_DST_NO_THICK_MIGRATE").is_none()
            && below(&mut th, 2) == 0;
        let cache_migrations =
            mrng.is_some() && std::env::var_os("TIERVISOR_DST_NO_CACHE_MIGRATE").is_none();
        if probe.is_some() && std::env::var_os("TIERVISOR_DST_TRACE").is_some() {
            eprintln!("the migration-heavy profile is on (probe.rs)");
        }
        // A share of the seeds run out of space (their own stream, so the others replay as
        // before); TIERVISOR_DST_NO_SPACE=1 leaves them out to compare counters.
        let space_on = std::env::var_os("TIERVISOR_DST_NO_SPACE").is_none();
        let space = (space_on && cfg.faults >= Faults::Crash)
            .then(|| SpaceFaults::draw(cfg.seed, engine_cfg.pools.len()))
            .flatten();
        let ncq_depth = NcqDrive::draw(cfg.seed);
        if let Some(depth) = ncq_depth {
            engine_cfg.pools[HDD_POOL].queue_depth = depth;
        }
        let contexts = draw_contexts(&engine_cfg, cfg.seed);
        let mut engine =
            Sharded::new(&engine_cfg, shards, cfg.bug).map_err(|e| format!("config: {e}"))?;
        let slow = tight && draw_slow_loans(cfg.seed, mrng.is_some());
        if tight {
            engine.set_loan_delay_ns(if slow {
                SLOW_LOAN_DELAY_NS
            } else {
                draw_loan_delay_ns(cfg.seed)
            });
            if slow && std::env::var_os("TIERVISOR_DST_TRACE").is_some() {
                eprintln!("a slow driver: loan steps take {SLOW_LOAN_DELAY_NS} ns");
            }
        }
        let mut devs: Vec<DataDevice> = engine_cfg
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| DataDevice::new(i as u16, p.capacity_bytes))
            .collect();
        let ncq = match ncq_depth {
            Some(_) => Some(NcqDrive::new(
                engine_cfg.pools[HDD_POOL].capacity_bytes,
                NcqDrive::draw_array(cfg.seed),
                cfg.bug == Some(InjectedBug::NcqJumpsFlush),
            )?),
            None => None,
        };
        let tagged = draw_host_flush(cfg.seed).1;
        for d in &mut devs {
            d.tagged = tagged;
        }
        if cfg.faults >= Faults::Latent {
            // Latent errors on the data pool only: metadata reads at mount must succeed.
            let n = 2 + below(&mut rng, 6);
            let plan = engine.plan();
            let skip: Vec<_> = (1..plan.shards())
                .map(|k| {
                    let b = plan.base_bytes(1, k);
                    b..b + tiervisor_engine::layout::DATA_START_BYTES
                })
                .collect();
            devs[1].add_latent(&mut rng, n, 1 << 20, &skip);
        }
        let refs: Vec<RefDisk> = engine_cfg
            .volumes
            .iter()
            .enumerate()
            .map(|(i, v)| RefDisk::new(i as u32, v.size_bytes / SECTOR as u64))
            .collect();
        let nv = engine_cfg.volumes.len();
        let hot = engine_cfg
            .volumes
            .iter()
            .map(|v| {
                let len = (256u64 << 10).min(v.size_bytes / 2);
                let start = below(&mut rng, (v.size_bytes - len) / SECTOR as u64) * SECTOR as u64;
                (start, len)
            })
            .collect();
        let max_in_flight = 1 + below(&mut rng, 24) as usize;
        let creates = super::create::CreateDraws::draw(cfg.seed, logged, mrng.is_some());
        let resizes = super::resize::ResizeDraws::draw(cfg.seed, creates.is_some());
        let deletes =
            super::delete::DeleteDraws::draw(cfg.seed, creates.is_some(), engine.shards());
        let caching = engine_cfg
            .volumes
            .iter()
            .any(|v| matches!(v.placement, Placement::Cache { .. }));
        let idles = super::idle::IdleDraws::draw(cfg.seed, caching);
        let releases = super::release::ReleaseDraws::draw(cfg.seed, tight);
        let directing = engine_cfg
            .volumes
            .iter()
            .any(|v| v.placement == Placement::Pinned && v.fast_pool.is_some());
        let directed = super::directed::DirectedDraws::draw(cfg.seed, directing);
        Ok(Sim {
            trace: std::env::var_os("TIERVISOR_DST_TRACE").is_some(),
            cfg,
            rng,
            engine_cfg,
            engine,
            devs,
            next_tag: refs.len() as u32,
            refs,
            heap: BinaryHeap::new(),
            wakeups: Wakeups::default(),
            deleted: Vec::new(),
            seq: 0,
            now_ns: 0,
            clock: 1,
            in_flight_ops: BTreeMap::new(),
            reqs: BTreeMap::new(),
            next_req: 1,
            next_version: 1,
            max_in_flight,
            recovering: false,
            mounted_once: false,
            marker: Marker::Unknown,
            step: 0,
            stats: DstStats {
                slow_loan_seeds: u64::from(slow),
                ..DstStats::default()
            },
            last_end: vec![0; nv],
            hot,
            mrng,
            space,
            last_flush: vec![None; nv],
            creates,
            resizes,
            deletes,
            idles,
            releases,
            directed,
            probe,
            ncq,
            tiered_migrations,
            contexts,
            thick_migrations,
            cache_migrations,
            log_migrations,
        })
    }

    /// A volume joined the engine (index `refs.len()`): it reads as zeros until written.
    fn add_volume(&mut self, size_bytes: u64) {
        // A fresh tag: its index, unless a deletion moved the indexes.
        let tag = self.next_tag;
        self.next_tag += 1;
        self.refs
            .push(RefDisk::new(tag, size_bytes / SECTOR as u64));
        self.last_end.push(0);
        self.hot.push((0, (256u64 << 10).min(size_bytes / 2)));
        self.last_flush.push(None);
    }

    /// The configuration of volume `vol`, found by name (an index moves down when a
    /// volume before it is deleted); `None` for a volume created at run time.
    fn volume_cfg(&self, vol: VolumeId) -> Option<&tiervisor_engine::VolumeConfig> {
        let (name, _) = self.engine.volumes().into_iter().nth(vol.0 as usize)?;
        self.engine_cfg.volumes.iter().find(|c| c.name == name)
    }

    /// Whether volume `v` is being deleted or deleted (its slot hollow until the next
    /// mount): nothing is sent to it.
    fn hollow(&self, v: usize) -> bool {
        self.deletes.as_ref().is_some_and(|d| d.refuses(v))
    }

    /// Deleted volumes' slots (sorted indexes) are gone after a mount: every per-volume
    /// table drops them, and the volumes after each move down, as the engine's do.
    fn remove_volumes(&mut self, gone: &[usize]) {
        let moved = (0..self.refs.len())
            .filter(|v| !gone.contains(v) && gone.iter().any(|g| g < v))
            .count();
        self.stats.volumes_moved_down += moved as u64;
        for &v in gone.iter().rev() {
            self.refs.remove(v);
            self.last_end.remove(v);
            self.hot.remove(v);
            self.last_flush.remove(v);
            if let Some(p) = self.probe.as_mut() {
                p.remove_volume(v);
            }
        }
        if let Some(r) = self.resizes.as_mut() {
            r.remap(|v| (!gone.contains(&v)).then(|| v - gone.iter().filter(|g| **g < v).count()));
        }
    }

    /// Now and then, in the seeds with a `cache` volume: submit nothing for a spell of
    /// virtual time (requests in flight complete, timers fire), so idle cleaning runs.
    /// Now and then, in the tight sharded seeds: trim a whole volume (`release.rs`).
    fn release_action(&mut self) -> Result<bool, Fail> {
        let n = self.refs.len();
        let Some(v) = self.releases.as_mut().and_then(|r| r.volume(n)) else {
            return Ok(false);
        };
        let sectors = self.serving_sectors(v);
        if self.recovering || self.hollow(v) || sectors == 0 {
            return Ok(false);
        }
        if self.trace {
            eprintln!("[{}] trim volume {v} whole", self.at());
        }
        // In requests the engine takes (at most `max_request_bytes` each).
        let most = (self.engine_cfg.max_request_bytes / SECTOR as u64).max(1);
        let mut first = 0;
        while first < sectors {
            let n = most.min(sectors - first);
            self.submit(v as u32, ReqKind::Trim, first, n, false, false)?;
            first += n;
        }
        Ok(true)
    }

    fn idle_action(&mut self) -> Result<bool, Fail> {
        let Some(ns) = self.idles.as_mut().and_then(|d| d.spell_ns()) else {
            return Ok(false);
        };
        let until = self.now_ns + ns;
        while self.now_ns < until && self.next_event()? {}
        Ok(true)
    }

    /// Now and then, in the seeds with a pinned volume that has a fast pool: move one of
    /// its chunks to the fast pool or home (`directed.rs`). `Ok(false)` answers (over the
    /// budget, the chunk busy) and refusals (a chunk past a shrunk end, a deleted volume,
    /// a home that moved) are part of the test.
    fn directed_move_action(&mut self) -> Result<bool, Fail> {
        if self.recovering {
            return Ok(false);
        }
        let cb = self.engine_cfg.chunk_bytes;
        let vols: Vec<(u32, u64)> = (self.engine_cfg.volumes.iter().enumerate())
            .filter(|(_, v)| v.placement == Placement::Pinned && v.fast_pool.is_some())
            .map(|(i, v)| (i as u32, v.size_bytes.div_ceil(cb)))
            .collect();
        let Some((v, c, up)) = self.directed.as_mut().and_then(|d| d.pick(&vols)) else {
            return Ok(false);
        };
        let vc = &self.engine_cfg.volumes[v as usize];
        let to = match (up, vc.fast_pool) {
            (true, Some(f)) => f,
            _ => vc.home_pool,
        };
        let mut out = Outputs::default();
        let r = self
            .engine
            .move_chunk(self.now_ns, VolumeId(v), c, to, &mut out);
        if self.trace {
            eprintln!(
                "[{}] move chunk {c} of volume {v} to pool {}: {r:?}",
                self.at(),
                to.0
            );
        }
        if r == Ok(true)
            && let Some(d) = self.directed.as_mut()
        {
            d.started += 1;
        }
        self.pump(&mut out)?;
        Ok(true)
    }

    /// Now and then, in the seeds that create volumes: ask for a new one. Refusals (no
    /// room, one under way) are part of the test.
    fn create_action(&mut self) -> Result<bool, Fail> {
        let pools = self.engine_cfg.pools.len();
        let nv = self.refs.len();
        let blocked = self.deletes.as_ref().is_some_and(|d| d.blocks_creation());
        let Some(vc) = self
            .creates
            .as_mut()
            .filter(|_| !self.recovering && !blocked)
            .and_then(|c| c.maybe(nv, pools))
        else {
            return Ok(false);
        };
        let mut out = Outputs::default();
        let res = self.engine.control(
            self.now_ns,
            tiervisor_engine::Control::CreateVolume { config: vc.clone() },
            &mut out,
        );
        if self.trace {
            eprintln!("[{}] create volume {vc:?}: {res:?}", self.at());
        }
        if res.is_ok()
            && let Some(c) = self.creates.as_mut()
        {
            c.started(&vc);
        }
        self.pump(&mut out)?;
        Ok(true)
    }

    /// Now and then, in the seeds that resize volumes: ask for one to grow, or trim a
    /// tail and then ask for the volume to shrink to it.
    fn resize_action(&mut self) -> Result<bool, Fail> {
        let sizes: Vec<u64> = self
            .refs
            .iter()
            .map(|r| r.sectors() * SECTOR as u64)
            .collect();
        let chunk_bytes = self.engine_cfg.chunk_bytes;
        let created: Vec<bool> = (0..sizes.len())
            .map(|v| self.volume_cfg(VolumeId(v as u32)).is_none())
            .collect();
        let Some(draw) = self
            .resizes
            .as_mut()
            .filter(|_| !self.recovering)
            .and_then(|r| r.maybe(&sizes, chunk_bytes, &created))
        else {
            return Ok(false);
        };
        let (v, new) = match draw {
            super::resize::Draw::Trim(v, from, to) => {
                if self.deletes.as_ref().is_some_and(|d| d.refuses(v)) {
                    return Ok(false);
                }
                if self.trace {
                    eprintln!("[{}] trim volume {v} from {from} for a shrink", self.step);
                }
                let s = SECTOR as u64;
                self.submit(
                    v as u32,
                    ReqKind::Trim,
                    from / s,
                    (to - from) / s,
                    false,
                    false,
                )?;
                return Ok(true);
            }
            super::resize::Draw::Resize(v, new) => (v, new),
        };
        let mut out = Outputs::default();
        let res = self.engine.control(
            self.now_ns,
            tiervisor_engine::Control::ResizeVolume {
                volume: VolumeId(v as u32),
                size_bytes: new,
            },
            &mut out,
        );
        if self.trace {
            eprintln!("[{}] resize volume {v} to {new}: {res:?}", self.step);
        }
        let busy = matches!(res, Err(tiervisor_engine::ControlError::Busy(_)));
        if let Some(r) = self.resizes.as_mut() {
            r.answered(v, sizes[v], new, res.is_ok(), busy);
        }
        self.pump(&mut out)?;
        Ok(true)
    }

    /// The sectors requests to volume `v` may reach now (a shrink under way serves its
    /// new size before it is announced).
    fn serving_sectors(&self, v: usize) -> u64 {
        let bytes = self.refs[v].sectors() * SECTOR as u64;
        let bytes = (self.resizes.as_ref()).map_or(bytes, |r| r.serving_bytes(v, bytes));
        bytes / SECTOR as u64
    }

    /// The engine announced a grown volume: the reference grows with it.
    fn volume_resized(&mut self, name: &str, size: u64) -> Result<(), Fail> {
        let v = self
            .engine
            .volume_id(name)
            .map(|v| v.0 as usize)
            .ok_or_else(|| format!("volume {name} announced as resized, but it is unknown"))?;
        if !self.resizes.as_mut().is_some_and(|r| r.announced(v, size)) {
            return Err(format!(
                "volume {name} announced as {size} bytes, but no such resize was asked for"
            ));
        }
        self.resize_ref(v, size);
        Ok(())
    }

    /// The reference of volume `v` takes its announced (or recovered) size.
    fn resize_ref(&mut self, v: usize, size: u64) {
        let sectors = size / SECTOR as u64;
        if sectors < self.refs[v].sectors() {
            self.refs[v].truncate(sectors);
            if let Some(r) = self.resizes.as_mut() {
                r.count_shrink();
            }
        } else {
            self.refs[v].grow(sectors);
        }
    }

    /// After a recovery: every volume has the size announced before the crash, and a
    /// resize the crash interrupted left the old size or the new one.
    fn reconcile_resized(&mut self) -> Result<(), Fail> {
        let interrupted = self.resizes.as_mut().and_then(|r| r.interrupted());
        for v in 0..self.refs.len() {
            let before = self.refs[v].sectors() * SECTOR as u64;
            let now = (self.engine.engine_for(VolumeId(v as u32)))
                .and_then(|(e, local)| e.volume_size(local))
                .unwrap_or(0);
            match interrupted {
                Some((iv, old, new)) if iv == v && old == before && now == new => {
                    self.resize_ref(v, new);
                }
                _ if now != before => {
                    return Err(format!(
                        "volume {v} is {now} bytes after recovery, {before} before (a resize \
                         was lost or invented)"
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Now and then, in the seeds that delete volumes: ask for one to go (`delete.rs`).
    fn delete_action(&mut self) -> Result<bool, Fail> {
        let nv = self.refs.len();
        let creating = self.creates.as_ref().is_some_and(|c| c.pending());
        let Some(v) = self
            .deletes
            .as_mut()
            .filter(|_| !self.recovering && !creating)
            .and_then(|d| d.maybe(nv))
        else {
            return Ok(false);
        };
        let Some((name, _)) = self.engine.volumes().get(v).cloned() else {
            return Err(format!("volume {v} has no name"));
        };
        let mut out = Outputs::default();
        let res = self.engine.control(
            self.now_ns,
            tiervisor_engine::Control::DeleteVolume {
                volume: VolumeId(v as u32),
            },
            &mut out,
        );
        if self.trace {
            eprintln!("[{}] delete volume {v} ({name}): {res:?}", self.at());
        }
        if res.is_ok()
            && let Some(d) = self.deletes.as_mut()
        {
            d.started(v, name);
        }
        self.pump(&mut out)?;
        Ok(true)
    }

    /// The engine announced a deleted volume: its slot stays hollow until the next
    /// mount (the engine keeps it too, refusing everything), where the reference forgets
    /// it.
    fn volume_deleted(&mut self, name: &str) -> Result<(), Fail> {
        (self.deletes.as_mut())
            .and_then(|d| d.announced(name))
            .ok_or_else(|| format!("volume {name} announced deleted, but none was asked"))?;
        Ok(())
    }

    /// After a recovery: the volumes announced deleted are gone, and their slots with
    /// them (the volumes after move down); a deletion the crash interrupted left the
    /// volume whole (verified with the rest) or gone.
    fn reconcile_deleted(&mut self) -> Result<(), Fail> {
        let Some(d) = self.deletes.as_mut() else {
            return Ok(());
        };
        let hollow = d.mounted();
        let interrupted = d.interrupted();
        let vols = self.engine.volumes();
        let present = |name: &str| vols.iter().any(|(n, _)| n == name);
        if let Some((v, name)) = hollow.iter().find(|(_, n)| present(n)) {
            return Err(format!(
                "volume {name} (index {v}) was announced deleted; after recovery it is back"
            ));
        }
        let mut gone: Vec<usize> = hollow.iter().map(|(v, _)| *v).collect();
        if let Some((v, name)) = interrupted {
            let now_at = v - gone.iter().filter(|g| **g < v).count();
            match vols.get(now_at) {
                Some((n, _)) if *n == name => {}
                _ if !present(&name) => gone.push(v),
                other => {
                    return Err(format!(
                        "volume {name} (index {v}, {now_at} after the mount) was being \
                         deleted; after recovery that index holds {other:?}"
                    ));
                }
            }
        }
        gone.sort_unstable();
        gone.dedup();
        self.remove_volumes(&gone);
        Ok(())
    }

    /// The engine announced a created volume: it is the next index, and usable.
    fn volume_announced(&mut self, name: &str) -> Result<(), Fail> {
        let size = self
            .creates
            .as_mut()
            .and_then(|c| c.announced(name))
            .ok_or_else(|| format!("volume {name} announced, but none was being created"))?;
        if self.engine.volume_id(name) != Some(VolumeId(self.refs.len() as u32)) {
            return Err(format!(
                "volume {name} announced at {:?}, expected index {}",
                self.engine.volume_id(name),
                self.refs.len()
            ));
        }
        self.add_volume(size);
        Ok(())
    }

    /// After a recovery: every volume announced before the crash is there, and a creation
    /// the crash interrupted left its volume whole or absent.
    fn reconcile_created(&mut self) -> Result<(), Fail> {
        let interrupted = self.creates.as_mut().and_then(|c| c.interrupted());
        let vols = self.engine.volumes();
        for (i, (name, _)) in vols.iter().enumerate().take(self.refs.len()) {
            if self.engine.volume_id(name) != Some(VolumeId(i as u32)) {
                return Err(format!("volume {name} moved to another index"));
            }
        }
        if vols.len() < self.refs.len() {
            return Err(format!(
                "{} volume(s) after recovery, {} before (an announced volume was lost)",
                vols.len(),
                self.refs.len()
            ));
        }
        match (vols.get(self.refs.len()), interrupted) {
            (None, _) => Ok(()),
            (Some((name, size)), Some((want, want_size)))
                if *name == want && *size == want_size =>
            {
                self.add_volume(*size);
                Ok(())
            }
            (Some((name, _)), _) => Err(format!("volume {name} appeared after recovery")),
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn push(&mut self, t: u64, kind: u8, payload: u64) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, kind, payload)));
    }

    /// Queue the completions of what the queueing drive (or an array's members) started.
    fn push_started(&mut self, started: Vec<Started>) {
        for st in started {
            match st {
                Started::Whole { id, done_ns } => self.push(done_ns, EV_DEV, id),
                Started::Part {
                    id,
                    member,
                    done_ns,
                } => self.push(done_ns, EV_PART, Started::part_payload(id, member)),
            }
        }
    }

    fn latency_ns(&mut self) -> u64 {
        let mut l = 5_000 + below(&mut self.rng, 2_000_000);
        if self.cfg.faults >= Faults::Crash && below(&mut self.rng, 300) == 0 {
            l += below(&mut self.rng, 3_000_000_000); // a stalled device
        }
        l
    }

    /// Carry out the engine's outputs and check its completions.
    fn pump(&mut self, out: &mut Outputs) -> Result<(), Fail> {
        // Deletions wait for the batch's completions (the volume's last ones may be in
        // it). A check may pump again, so each pump keeps its own batch's.
        let outer = std::mem::take(&mut self.deleted);
        let r = host::deliver(out, self);
        let deleted = std::mem::replace(&mut self.deleted, outer);
        r?;
        // After every call: a job paused for its pivot was stepped on once nothing it
        // waits for is left (DST only ticks at deadlines, so a missed step would only
        // delay it until some unrelated event: `loan-answer-no-step`).
        self.engine.check_pauses_stepped()?;
        for name in deleted {
            self.volume_deleted(&name)?;
        }
        Ok(())
    }

    fn errors_allowed(&self) -> bool {
        self.cfg.faults >= Faults::Errors
    }

    fn completed(
        &mut self,
        id: u64,
        result: Result<(), Errno>,
        data: Option<Bytes>,
    ) -> Result<(), Fail> {
        let Some(r) = self.reqs.remove(&id) else {
            return Err(format!("completion for unknown request {id}"));
        };
        if self.trace {
            eprintln!(
                "[{}] done req {id} {:?} vol {} {}+{} v{} -> {:?}",
                self.at(),
                r.kind,
                r.vol,
                r.first,
                r.n,
                r.version,
                result
            );
        }
        let t = self.tick();
        let v = r.vol as usize;
        let space = self.space.is_some();
        let bad_error = |e: Errno| -> bool {
            match e {
                // Where devices run out of space, their write errors are all ENOSPC: a
                // plain (not FUA) write, trim or zeroing failing with EIO means the
                // engine reported a full disk as a broken one.
                Errno::Io if space && !r.fua => {
                    !self.errors_allowed()
                        || matches!(
                            r.kind,
                            ReqKind::Write | ReqKind::WriteZeroes | ReqKind::Trim
                        )
                }
                Errno::Io => !self.errors_allowed(),
                // A trim zeroes part of a chunk in place, which may need space.
                Errno::NoSpc => {
                    let may = matches!(
                        r.kind,
                        ReqKind::Write | ReqKind::WriteZeroes | ReqKind::Flush
                    ) || (space && r.kind == ReqKind::Trim);
                    !may
                }
                _ => true,
            }
        };
        if let Err(e) = result
            && bad_error(e)
        {
            return Err(format!(
                "{:?} of volume {} sectors {}+{} failed with {e:?}, which no injected fault explains",
                r.kind, r.vol, r.first, r.n
            ));
        }
        match r.kind {
            ReqKind::Read => {
                if result.is_ok() {
                    let d = data.ok_or("a successful read returned no data")?;
                    if d.len() as u64 != r.n * SECTOR as u64 {
                        return Err(format!(
                            "read returned {} bytes, asked {}",
                            d.len(),
                            r.n * SECTOR as u64
                        ));
                    }
                    let seen: Vec<Seen> = d.chunks(SECTOR).map(decode).collect();
                    self.refs[v].check_read(r.first, &seen, r.submitted, t)?;
                    let (e, local) = self
                        .engine
                        .engine_for(VolumeId(r.vol))
                        .ok_or("a read of a volume no shard holds")?;
                    // A volume being deleted may be gone by now (its mapping with it).
                    if !self.deletes.as_ref().is_some_and(|d| d.refuses(v)) {
                        super::status::check(e, local, &self.refs[v], r.first, r.n, t)?;
                    }
                    self.stats.reads_checked += 1;
                    self.stats.sectors_checked += r.n;
                }
            }
            ReqKind::Write | ReqKind::Trim | ReqKind::WriteZeroes => {
                self.refs[v].complete_write(r.first, r.n, r.version, result.is_ok(), r.fua, t);
                if let Some(p) = self.probe.as_mut()
                    && r.kind == ReqKind::Write
                    && result.is_ok()
                {
                    p.write_done(r.vol, r.first, r.n);
                }
            }
            ReqKind::Flush => {
                self.last_flush[v] = Some(result);
                if let Some(p) = self.probe.as_mut()
                    && result.is_ok()
                {
                    p.flush_done(r.vol);
                }
                if result.is_ok() {
                    let oldest = self
                        .reqs
                        .values()
                        .filter(|q| q.vol == r.vol && q.kind == ReqKind::Read)
                        .map(|q| q.submitted)
                        .min()
                        .unwrap_or(u64::MAX);
                    self.refs[v].flush_ok(r.submitted, oldest);
                }
            }
        }
        Ok(())
    }

    fn submit(
        &mut self,
        vol: u32,
        kind: ReqKind,
        first: u64,
        n: u64,
        fua: bool,
        no_hole: bool,
    ) -> Result<(), Fail> {
        let id = self.next_req;
        self.next_req += 1;
        let t = self.tick();
        let version = self.next_version;
        self.next_version += 1;
        let mut req = VmRequest::new(
            id,
            VolumeId(vol),
            kind,
            first * SECTOR as u64,
            n * SECTOR as u64,
        );
        req.fua = fua;
        req.no_hole = no_hole;
        if let Some((processes, r)) = &mut self.contexts {
            // One draw past the processes: the volume's shared context.
            let p = below(r, *processes + 1);
            if p < *processes {
                req.context = IoContext::Client(p as u32);
                self.stats.context_requests += 1;
            }
        }
        match kind {
            ReqKind::Write => {
                let mut b = BytesMut::zeroed((n * SECTOR as u64) as usize);
                // The volume's tag, not its index: indexes move down at a mount after a
                // deletion, and the data already written must still read as this volume's.
                let tag = self.refs[vol as usize].vol;
                for (i, s) in b.chunks_mut(SECTOR).enumerate() {
                    sector_data(tag, version, first + i as u64, s);
                }
                req.payload = Some(b.freeze());
                self.refs[vol as usize].submit_write(first, n, version, false, t);
            }
            ReqKind::Trim | ReqKind::WriteZeroes => {
                self.refs[vol as usize].submit_write(first, n, version, true, t)
            }
            ReqKind::Read | ReqKind::Flush => {}
        }
        if self.trace {
            eprintln!(
                "[{}] submit req {id} {kind:?} vol {vol} {first}+{n} v{version} fua {fua} no_hole {no_hole}",
                self.at()
            );
        }
        self.reqs.insert(
            id,
            ReqInfo {
                vol,
                kind,
                first,
                n,
                version,
                fua,
                submitted: t,
            },
        );
        self.stats.requests += 1;
        let mut out = Outputs::default();
        self.engine.submit(self.now_ns, req, &mut out);
        self.pump(&mut out)
    }

    /// A random request: mixes of kinds, sizes from one sector to 1 MiB, hot spots and
    /// sequential runs, overlapping whatever is in flight.
    fn random_request(&mut self) -> Result<(), Fail> {
        let nv = self.refs.len() as u64;
        let pick = below(&mut self.rng, nv);
        let focused = self
            .probe
            .as_mut()
            .and_then(|p| p.focus(pick))
            .filter(|&v| u64::from(v) < nv);
        let vol = focused.unwrap_or(pick as u32);
        if self
            .deletes
            .as_ref()
            .is_some_and(|d| d.refuses(vol as usize))
        {
            return Ok(()); // the engine refuses requests to a volume being deleted
        }
        let sectors = self.serving_sectors(vol as usize);
        let n = match below(&mut self.rng, 10) {
            0..=2 => 1,
            3..=5 => 1 + below(&mut self.rng, 8),
            6..=8 => 8 + below(&mut self.rng, 120),
            _ => 128 + below(&mut self.rng, 1921),
        }
        .min(sectors);
        let first = match below(&mut self.rng, 10) {
            0..=3 => {
                let (hs, hl) = self.hot[vol as usize];
                (hs / SECTOR as u64 + below(&mut self.rng, hl / SECTOR as u64)).min(sectors - n)
            }
            4..=5 => self.last_end[vol as usize].min(sectors - n),
            _ => below(&mut self.rng, sectors - n + 1),
        };
        let chunk_sectors = self.engine_cfg.chunk_bytes / SECTOR as u64;
        let first = match self.probe.as_mut().filter(|_| focused.is_some()) {
            Some(p) => p.place(first, n, sectors, chunk_sectors),
            None => first,
        };
        self.last_end[vol as usize] = (first + n) % sectors;
        let (kind, fua, no_hole) = match below(&mut self.rng, 100) {
            0..=34 => (ReqKind::Read, false, false),
            35..=66 => (ReqKind::Write, false, false),
            67..=76 => (ReqKind::Write, true, false),
            77..=84 => (ReqKind::Flush, false, false),
            85..=91 => (ReqKind::Trim, below(&mut self.rng, 4) == 0, false),
            _ => (ReqKind::WriteZeroes, false, below(&mut self.rng, 2) == 0),
        };
        let (first, n) = if kind == ReqKind::Flush {
            (0, 0)
        } else {
            (first, n)
        };
        self.submit(vol, kind, first, n, fua, no_hole)
    }

    /// Process the next event; false if there is none.
    fn next_event(&mut self) -> Result<bool, Fail> {
        let Some(Reverse((t, _, kind, payload))) = self.heap.pop() else {
            return Ok(false);
        };
        self.now_ns = self.now_ns.max(t);
        let mut out = Outputs::default();
        if kind == EV_DEV {
            let Some(op) = self.in_flight_ops.remove(&payload) else {
                return Ok(true);
            };
            if let Some(q) = self.ncq.as_mut().filter(|_| op.pool.0 as usize == HDD_POOL) {
                let next = q.complete(self.now_ns, payload)?;
                self.push_started(next);
            }
            let meta = op.pool.0 == self.engine_cfg.meta_pool.0;
            let fail = self.errors_allowed()
                && !(self.recovering && meta)
                && below(&mut self.rng, 250) == 0;
            let mut fail = fail.then_some(Errno::Io);
            let write = matches!(
                op.kind,
                DevKind::Write | DevKind::WriteZeroes | DevKind::Punch
            );
            // Space runs out during recovery too, in half the seeds that run out of it.
            let spaceless_recovery = self.recovering
                && !(self.mounted_once && self.space.as_ref().is_some_and(|s| s.during_recovery));
            if let Some(sp) = self.space.as_mut().filter(|_| write && !spaceless_recovery) {
                // In these seeds a write that fails finds no space rather than a bad disk.
                if fail.is_some() || sp.write_fails(op.pool.0) {
                    fail = Some(Errno::NoSpc);
                }
            }
            let dev = &mut self.devs[op.pool.0 as usize];
            if dev.tagged && op.kind == DevKind::Flush && op.tag.code() != 0 {
                self.stats.tagged_flushes += 1;
            }
            let (result, data) = dev.complete(&op, fail, &mut self.rng);
            if self.trace {
                eprintln!("[{}] op {} done {:?}", self.at(), payload, result);
            }
            self.engine.device_done(
                self.now_ns,
                DeviceCompletion {
                    id: OpId(payload),
                    result,
                    data,
                },
                &mut out,
            );
        } else if kind == EV_PART {
            // A member's part: the operation completes (an EV_DEV now) with its last part.
            let (id, member) = (payload >> 6, (payload & 63) as usize);
            if let Some(q) = self.ncq.as_mut() {
                let (whole, next) = q.part_done(self.now_ns, id, member)?;
                if whole {
                    self.push(self.now_ns, EV_DEV, id);
                }
                self.push_started(next);
            }
            return Ok(true);
        } else {
            self.wakeups.fired(t);
            self.engine.tick(self.now_ns, &mut out);
        }
        self.pump(&mut out)?;
        Ok(true)
    }

    /// Power loss now: devices keep what the fault model says; a new engine recovers.
    /// No request starves: nothing waited in a scheduler past the bound.
    fn check_sched_wait(&mut self) -> Result<(), Fail> {
        let w = self.engine.sched_wait_max_ns();
        self.stats.sched_wait_max_ns = self.stats.sched_wait_max_ns.max(w);
        if w > SCHED_WAIT_BOUND_NS {
            return Err(format!(
                "an operation waited {:.3} s in a scheduler (bound {} s)",
                w as f64 / 1e9,
                SCHED_WAIT_BOUND_NS / 1_000_000_000
            ));
        }
        Ok(())
    }

    fn crash(&mut self) -> Result<(), Fail> {
        self.marker = self.marker.after_crash(self.recovering);
        self.power_loss()
    }

    /// Lose power: devices keep what a power loss may leave, the engine is rebuilt and
    /// mounts (after a crash, or right after an orderly stop: `stop.rs`).
    fn power_loss(&mut self) -> Result<(), Fail> {
        if self.trace {
            eprintln!(
                "[{}] POWER LOSS ({} ops in flight)",
                self.at(),
                self.in_flight_ops.len()
            );
        }
        self.stats.crashes += 1;
        if let Some(p) = self.probe.as_mut() {
            p.crashed();
        }
        self.check_sched_wait()?;
        self.fold_engine_counters();
        for p in 0..self.devs.len() {
            let ops: Vec<&DeviceOp> = self
                .in_flight_ops
                .values()
                .filter(|o| o.pool.0 as usize == p)
                .collect();
            self.devs[p].power_loss(&ops, &mut self.rng);
        }
        for r in &mut self.refs {
            r.crash();
        }
        self.heap.clear();
        self.wakeups.clear();
        self.in_flight_ops.clear();
        if let Some(q) = self.ncq.as_mut() {
            q.power_loss()?;
        }
        self.reqs.clear();
        self.engine.reset()?;
        self.recover()
    }

    /// Add the engine's counters to the run's totals (a new engine starts them at zero).
    fn fold_engine_counters(&mut self) {
        self.stats.pause_answers += (self.engine.engines().iter())
            .map(|e| e.loan_answers_in_pauses())
            .sum::<u64>();
        let reports: Vec<_> = self.engine.engines().iter().map(|e| e.report()).collect();
        for r in reports {
            self.fold_report(r);
        }
        for m in self.engine.migrations() {
            match m.phase {
                MigrationPhase::Done => self.stats.migration_pivots += 1,
                MigrationPhase::Cancelled | MigrationPhase::Failed => {
                    self.stats.migration_cancels += 1
                }
                _ => {}
            }
        }
    }

    fn fold_report(&mut self, r: tiervisor_engine::EngineReport) {
        for v in r.volumes {
            self.stats.checkpoints += v.checkpoints;
            self.stats.chunk_moves += v.promotions + v.demotions;
            if v.placement == "cache" {
                self.stats.cache_moves += v.promotions + v.demotions;
            }
            self.stats.clean_demotions += v.clean_demotions;
            self.stats.span_demotions += v.span_demotions;
            if let Some(c) = &v.cache {
                self.stats.cache_writebacks +=
                    c.counts.writebacks.saturating_sub(c.counts.evictions_dirty);
            }
        }
        for w in r.pools.iter().filter_map(|p| p.write_buffer.as_ref()) {
            self.stats.buffered_writes += w.absorbed_writes;
        }
        for t in r.pools.iter().filter_map(|p| p.throttle.as_ref()) {
            self.stats.throttled_ops += t.ops;
        }
        for l in r.pools.iter().filter_map(|p| p.log.as_ref()) {
            self.stats.log_appends += l.appends;
            self.stats.segments_cleaned += l.segments_cleaned;
            self.stats.cleaner_waits += l.cleaner_waits;
        }
    }

    /// In migrating seeds, now and then: start a migration of a random volume to a random
    /// pool with a random scheme and parameters, cancel one, or change its rate. Refusals
    /// (ineligible volume, a job already running) are part of the test, not failures.
    /// Whether volume `v` logs (its `log`, else its pools'; a volume created while
    /// running does not: seeds that log create none).
    fn volume_logs(&self, v: VolumeId) -> bool {
        self.engine_cfg
            .volumes
            .get(v.0 as usize)
            .is_some_and(|c| match c.log {
                Some(l) => l,
                None => self.engine_cfg.pools.iter().any(|p| p.log),
            })
    }

    fn migration_action(&mut self) -> Result<bool, Fail> {
        // The migration-heavy profile (`probe.rs`) wants jobs that reach their pivot:
        // no slow copy rates, a third of the cancels, and each to the pool the volume is
        // not on (as far as its last job or its configuration says).
        let heavy = self.probe.is_some();
        let Some(m) = self.mrng.as_mut() else {
            return Ok(false);
        };
        let roll = below(m, 1000);
        if roll >= 12 || self.recovering {
            return Ok(false);
        }
        let vol = VolumeId(below(m, self.refs.len() as u64) as u32);
        let mut out = Outputs::default();
        let now = self.now_ns;
        if roll < 6 {
            let mut to = PoolId(below(m, 2) as u16);
            if let Some(on) = self.lives_on(vol) {
                to = PoolId(1 - on);
            }
            let tiered = (self.volume_cfg(vol)).filter(|v| v.placement != Placement::Pinned);
            // A tiered volume here may only go to its home pool (the other is its fast
            // pool, which is refused): aim every drawn start there, so its fast chunks drain.
            let cache = tiered.is_some_and(|v| matches!(v.placement, Placement::Cache { .. }));
            if let Some(v) = tiered
                && (self.tiered_migrations || (cache && self.cache_migrations))
            {
                to = v.home_pool;
            }
            let tiered = tiered.is_some();
            let logs = self.volume_logs(vol);
            let thick = (self.engine.engine_for(vol)).and_then(|(e, lv)| e.volume_provisioning(lv))
                == Some(Provisioning::Thick);
            let Some(m) = self.mrng.as_mut() else {
                return Ok(false);
            };
            let mut p = MigrationParams::new(to);
            // Every scheme, and now and then `auto` (which picks by predicted cost); the
            // profile draws mirror and AIO twice as often (their windows are the
            // narrowest: one duplicate's flight).
            let mut i = below(m, Scheme::ALL.len() as u64 + 1 + 2 * u64::from(heavy)) as usize;
            if i > Scheme::ALL.len() {
                i = [1, 4][i - Scheme::ALL.len() - 1];
            }
            p.scheme = Scheme::ALL
                .get(i)
                .map_or(SchemeChoice::Auto, |&s| SchemeChoice::Fixed(s));
            p.rate_bytes_per_s = [256u64 << 10, 4 << 20, 1 << 30][below(m, 3) as usize];
            if heavy {
                // Slow enough that writes meet the copied region, fast enough to pivot
                // between power losses.
                p.rate_bytes_per_s = p.rate_bytes_per_s.max(1 << 20);
            }
            let cb = self.engine_cfg.chunk_bytes;
            // One draw in five tracks the paper's sectors (512 bytes: several bitmap
            // words a chunk), the others a chunk down to a sixteenth.
            let shift = below(m, 5);
            p.granularity_bytes = if shift == 4 { 512 } else { cb >> shift };
            p.buffer_bytes = [4096u64, 64 << 10, cb][below(m, 3) as usize];
            p.dbt_max_passes = 1 + below(m, 6) as u32;
            p.aio_threshold = below(m, 8) as u32;
            p.aio_delay_ns = below(m, 3_000_000);
            p.gamma = below(m, 11) as f64 / 10.0;
            // A third of the jobs copy as the VM's equal (taken from a value already
            // drawn, so every later draw is as before; TIERVISOR_DST_NO_COPY_EQUAL=1 leaves
            // them out). Drawn only on request until seed 1032's hang was found: a pause
            // left waiting for a write whose loan was denied (`loan_wait.rs`).
            if p.aio_delay_ns.is_multiple_of(3)
                && std::env::var_os("TIERVISOR_DST_NO_COPY_EQUAL").is_none()
            {
                p.copy_priority = CopyPriority::Equal;
            }
            // DBT's copy window, also from that value (independent of the third above):
            // one chunk at a time (seed 004's), 2, QEMU's 16, and the bound.
            p.copy_window_chunks =
                [1, 2, 16, MAX_COPY_WINDOW_CHUNKS][(p.aio_delay_ns / 3 % 4) as usize];
            // DBT's whole-chunk copies, from that value again (independent of both above):
            // never (seed 004's), every dirty chunk, from 2 runs, and by the destination's
            // medium (4 into an HDD, never into an SSD).
            p.coalesce_runs = [Some(0), Some(1), Some(2), None][(p.aio_delay_ns / 12 % 4) as usize];
            // A `cache` volume's start is asked in every migrating seed (`cache_migrations`),
            // another tiered volume's only where tiered volumes migrate.
            let res = if cache && !self.cache_migrations {
                Err("cache volumes do not migrate in this seed".to_string())
            } else if tiered && !cache && !self.tiered_migrations {
                Err("tiered volumes do not migrate in this seed".to_string())
            } else if thick && !self.thick_migrations {
                Err("thick volumes do not migrate in this seed".to_string())
            } else if logs && !self.log_migrations {
                Err("volumes that log do not migrate in this seed".to_string())
            } else {
                self.engine.start_migration(now, vol, p, &mut out)
            };
            if self.trace {
                eprintln!(
                    "[{}] migrate vol {} to pool {}: {res:?}",
                    self.at(),
                    vol.0,
                    to.0
                );
            }
            if let Ok(st) = &res {
                self.stats.migrations += 1;
                self.stats.migrations_tiered += u64::from(tiered);
                self.stats.migrations_thick += u64::from(thick);
                self.stats.migrations_cache += u64::from(cache);
                self.stats.migrations_logged += u64::from(logs);
                if let Some(pr) = self.probe.as_mut() {
                    // A job starts without a phase event.
                    pr.phase(vol.0, st.phase.name(), true);
                    if st.from == [to] {
                        pr.now_on(vol.0, to.0);
                    }
                }
            }
        } else if roll < 9 {
            if heavy && below(m, 3) != 0 {
                return Ok(false);
            }
            let res = self.engine.cancel_migration(now, vol, &mut out);
            if self.trace {
                eprintln!("[{}] cancel migration of vol {}: {res:?}", self.at(), vol.0);
            }
        } else {
            let mut rate = [128u64 << 10, 8 << 20, 1 << 30][below(m, 3) as usize];
            if heavy {
                rate = rate.max(1 << 20);
            }
            let _ = self.engine.set_migration_rate(now, vol, rate, &mut out);
        }
        self.pump(&mut out)?;
        Ok(true)
    }

    /// In the migration-heavy profile, the pool volume `vol` lives on, as the profile saw
    /// it or else its configuration says.
    fn lives_on(&self, vol: VolumeId) -> Option<u16> {
        let p = self.probe.as_ref()?;
        p.lives_on(vol.0)
            .or_else(|| Some(self.volume_cfg(vol)?.home_pool.0))
    }

    fn recover(&mut self) -> Result<(), Fail> {
        self.recovering = true;
        if let Some(sp) = self.space.as_mut().filter(|_| self.mounted_once) {
            sp.begin_recovery();
        }
        let mut out = Outputs::default();
        self.engine.start(self.now_ns, StartMode::Auto, &mut out);
        self.pump(&mut out)?;
        // Sometimes the power fails again during recovery.
        let crash_at = (self.cfg.faults >= Faults::Crash && below(&mut self.rng, 5) == 0)
            .then(|| 1 + below(&mut self.rng, 20));
        let mut events = 0;
        while self.engine.state() == EngineState::Starting {
            if crash_at == Some(events) {
                return self.crash();
            }
            if !self.next_event()? {
                return Err("recovery stalled with nothing in flight".into());
            }
            events += 1;
            if let Some(sp) = self.space.as_mut() {
                sp.on_recovery_event();
            }
        }
        self.recovering = false;
        if let EngineState::Failed(r) = self.engine.state() {
            return Err(format!("recovery failed on a state a crash can leave: {r}"));
        }
        self.mounted_once = true;
        self.check_marker()?;
        self.reconcile_deleted()?;
        self.reconcile_created()?;
        self.reconcile_resized()?;
        self.engine
            .check_invariants()
            .map_err(|e| format!("after recovery: {e}"))?;
        self.verify_all()
    }

    /// At the end of a run: a deletion under way must finish (its volume quiet, its
    /// tombstone durable) before everything is flushed and checked.
    fn finish_deletion(&mut self) -> Result<(), Fail> {
        let mut guard = 0u64;
        while self.deletes.as_ref().is_some_and(|d| d.is_pending()) {
            if !self.next_event()? || guard > 1_000_000 {
                return Err("a deletion never finished".into());
            }
            guard += 1;
        }
        Ok(())
    }

    /// Read every volume end to end and check it.
    fn verify_all(&mut self) -> Result<(), Fail> {
        for v in 0..self.refs.len() {
            if self.hollow(v) {
                continue;
            }
            let sectors = self.serving_sectors(v);
            let mut s = 0;
            while s < sectors {
                let n = 2048.min(sectors - s);
                self.submit(v as u32, ReqKind::Read, s, n, false, false)?;
                s += n;
                while !self.reqs.is_empty() {
                    if !self.next_event()? {
                        return Err("verification read never completed".into());
                    }
                }
            }
        }
        Ok(())
    }

    /// Wait for every request, and for every device operation except where the engine
    /// may be retrying writes on a full pool: a write buffer's write-backs, or log
    /// appends parked for space (log/nospace.rs), are tried again until space returns,
    /// so such an engine is not idle before then. Seed 53 with `--bug
    /// wbuf-replace-forgets` retried for minutes of virtual time and grew past 6 GB;
    /// seed 1259 with a queueing HDD always had a retried append in flight during the
    /// spell at the end, and the device model's volatile cache, which keeps every failed
    /// write's landed prefix until a FLUSH, grew until memory ran out.
    fn settle(&mut self) -> Result<(), Fail> {
        let buffered = self
            .engine_cfg
            .pools
            .iter()
            .any(|p| p.write_buffer.is_some());
        let full = self.space.as_ref().is_some_and(|s| s.in_spell());
        self.run_until_idle(!(buffered || full) || self.space.is_none())
    }

    /// Wait for every request and every device operation.
    fn drain(&mut self) -> Result<(), Fail> {
        self.run_until_idle(true)
    }

    /// Run events until no request is outstanding and, with `ops`, no device operation.
    fn run_until_idle(&mut self, ops: bool) -> Result<(), Fail> {
        let mut guard = 0u64;
        let from_ns = self.now_ns;
        while !self.reqs.is_empty() || (ops && !self.in_flight_ops.is_empty()) {
            if !self.next_event()? {
                return Err(format!("{} request(s) never completed", self.reqs.len()));
            }
            guard += 1;
            // Steps stand still while the run settles: check between events too.
            if guard.is_multiple_of(64) {
                self.engine.check_invariants()?;
            }
            if guard > 10_000_000 {
                // Whether virtual time moved tells a spin at one instant from work that
                // waits forever while timers go on firing.
                return Err(format!(
                    "the engine does not settle: {} request(s) and {} device operation(s) \
                     outstanding after {guard} events, from {:.3} s to {:.3} s of virtual time",
                    self.reqs.len(),
                    self.in_flight_ops.len(),
                    from_ns as f64 / 1e9,
                    self.now_ns as f64 / 1e9
                ));
            }
        }
        Ok(())
    }

    /// FLUSH every volume. Where space ran out, space is back now: what failed for space
    /// must be retried, so a FLUSH must succeed again (within a few tries, as transient
    /// device errors may still fail one).
    fn final_flush(&mut self) -> Result<(), Fail> {
        for v in 0..self.refs.len() {
            if !self.hollow(v) {
                self.submit(v as u32, ReqKind::Flush, 0, 0, false, false)?;
            }
        }
        self.drain()?;
        if self.space.is_none() {
            return Ok(());
        }
        for v in 0..self.refs.len() {
            if self.hollow(v) {
                continue;
            }
            let mut attempts = 1;
            while self.last_flush[v] != Some(Ok(())) {
                if attempts == 8 {
                    return Err(format!(
                        "volume {v}: FLUSH still fails after space returned: {:?}",
                        self.last_flush[v]
                    ));
                }
                self.submit(v as u32, ReqKind::Flush, 0, 0, false, false)?;
                self.drain()?;
                attempts += 1;
            }
        }
        Ok(())
    }

    fn run(&mut self) -> Result<(), Fail> {
        self.recover()?;
        let crash_one_in = 600;
        while self.step < self.cfg.steps {
            self.step += 1;
            if let Some(sp) = self.space.as_mut() {
                sp.on_step(self.step);
            }
            // The migration-heavy profile's follow-ups go first, before any other event.
            let follow = self.probe.as_mut().and_then(|p| p.next());
            if let Some(f) = follow {
                match f {
                    Follow::Crash => self.crash()?,
                    // The engine refuses requests to a volume being deleted; a deleted one
                    // is gone from the reference.
                    Follow::Req { vol, .. }
                        if vol as usize >= self.refs.len()
                            || self
                                .deletes
                                .as_ref()
                                .is_some_and(|d| d.refuses(vol as usize)) => {}
                    Follow::Req {
                        vol,
                        kind,
                        first,
                        n,
                    } => self.submit(vol, kind, first, n, false, false)?,
                }
            } else {
                let roll = below(&mut self.rng, 1000);
                let aimed = self.cfg.faults >= Faults::Crash
                    && (self.deletes.as_mut().is_some_and(|d| d.crash_now())
                        | self.resizes.as_mut().is_some_and(|r| r.crash_now()));
                if self.cfg.faults >= Faults::Crash && below(&mut self.rng, crash_one_in) == 0
                    || aimed
                {
                    self.crash()?;
                } else if self.migration_action()?
                    || self.create_action()?
                    || self.resize_action()?
                    || self.delete_action()?
                    || self.idle_action()?
                    || self.release_action()?
                    || self.directed_move_action()?
                {
                } else if self.reqs.len() < self.max_in_flight
                    && (roll < 450 || self.heap.is_empty())
                {
                    self.random_request()?;
                } else {
                    self.next_event()?;
                }
            }
            if self.step.is_multiple_of(64) {
                self.engine.check_invariants()?;
                self.check_sched_wait()?;
            }
        }
        // Settle, flush everything, check everything; then lose power once more.
        self.settle()?;
        if let Some(sp) = self.space.as_mut() {
            sp.end();
        }
        self.finish_deletion()?;
        self.final_flush()?;
        self.verify_all()?;
        self.engine.check_invariants()?;
        self.check_sched_wait()?;
        if self.cfg.faults >= Faults::Crash {
            self.crash()?;
            self.orderly_stop_then_crash()?;
        }
        self.stats.injected_errors = self.devs.iter().map(|d| d.injected_errors).sum();
        self.stats.volumes_created = self.creates.as_ref().map_or(0, |c| c.created);
        self.stats.shards = u64::from(self.engine.shards());
        self.stats.sharded_seeds = u64::from(self.engine.shards() > 1);
        self.stats.loan_waits = self.engine.loan_waits();
        self.stats.given_back_on_hint = self.engine.give_backs_on_hint();
        (self.stats.stuck_runs, self.stats.stuck_chunks) = self.engine.give_back_stuck();
        if self.engine.shards() > 1 && self.engine.budget_reports() {
            self.stats.budget_seeds = 1;
            self.stats.budget_steps = self.engine.budget_steps().iter().sum();
        }
        if self.engine.shards() > 1 && self.engine.shard_qos() {
            self.stats.share_seeds = 1;
            (self.stats.share_steps, self.stats.gated_steps) = self.engine.share_steps();
        }
        self.stats.volumes_resized = self.resizes.as_ref().map_or(0, |r| r.resized);
        self.stats.volumes_shrunk = self.resizes.as_ref().map_or(0, |r| r.shrunk);
        self.stats.volumes_deleted = self.deletes.as_ref().map_or(0, |d| d.deleted);
        if let Some(q) = &self.ncq {
            let st = q.stats();
            self.stats.ncq_seeds = 1;
            self.stats.ncq_served = st.served;
            self.stats.ncq_reordered = st.reordered;
            self.stats.array_seeds = u64::from(q.array().is_some());
        }
        self.stats.context_seeds = u64::from(self.contexts.is_some());
        if let Some(p) = &self.probe {
            self.stats.probe_seeds = 1;
            self.stats.probe_crashes = p.crashes;
        }
        self.stats.idle_spells = self.idles.as_ref().map_or(0, |d| d.spells);
        self.stats.directed_moves = self.directed.as_ref().map_or(0, |d| d.started);
        if let Some(sp) = &self.space {
            self.stats.space_seeds = 1;
            self.stats.space_errors = sp.injected;
            self.stats.space_spells = sp.spells;
        }
        Ok(())
    }
}

/// Run one seed.
pub fn run_seed(cfg: &DstConfig) -> Result<DstStats, DstFailure> {
    let replay = format!(
        "{}{}tiervisor dst --seeds {}..{} --steps {} --faults {}{}",
        if host_flush_on() {
            ""
        } else {
            "TIERVISOR_DST_NO_WBUF=1 "
        },
        forced_shards().map_or(String::new(), |n| format!("TIERVISOR_DST_SHARDS={n} ")),
        cfg.seed,
        cfg.seed + 1,
        cfg.steps,
        cfg.faults as u8,
        cfg.bug
            .map_or(String::new(), |b| format!(" --bug {}", b.name()))
    );
    let fail = |step: u64, message: String| DstFailure {
        seed: cfg.seed,
        step,
        message,
        // The run is deterministic: stopping at the failing step reproduces it.
        replay: replay.replace(
            &format!("--steps {}", cfg.steps),
            &format!("--steps {}", step.max(1)),
        ),
    };
    let mut sim = Sim::new(cfg.clone()).map_err(|m| fail(0, m))?;
    // A panic in the engine is a failure of this seed, reported with its replay command.
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| sim.run()));
    let run = run.unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(format!("panicked: {what}"))
    });
    match run {
        Ok(()) => {
            sim.fold_engine_counters();
            Ok(sim.stats)
        }
        Err(m) => {
            if sim.trace {
                for (k, e) in sim.engine.engines().iter().enumerate() {
                    for p in e.report().pools {
                        eprintln!(
                            "shard {k} pool {}: {} chunks, {} free",
                            p.name, p.chunks, p.free_chunks
                        );
                    }
                    eprintln!("shard {k} owners: {:?}", e.chunk_owners());
                }
                eprintln!(
                    "{}",
                    sim.engine.check_invariants().err().unwrap_or_default()
                );
                eprintln!("migrations: {:?}", sim.engine.migrations());
            }
            Err(fail(sim.step, m))
        }
    }
}

/// DST's devices: a reordering queue per pool (or a queueing drive) that completes an
/// operation at a drawn later time, and a checker for every answer.
impl host::Driver for Sim {
    type Stop = Fail;

    fn device_op(&mut self, op: DeviceOp) -> Result<(), Fail> {
        if self.trace {
            eprintln!(
                "[{}] op {} {:?} pool {} off {} len {} fua {} vol {:?} class {:?}",
                self.at(),
                op.id.0,
                op.kind,
                op.pool.0,
                op.offset_bytes,
                op.len_bytes,
                op.fua,
                op.volume,
                op.class
            );
        }
        let id = op.id.0;
        if let Some(q) = self.ncq.as_mut().filter(|_| op.pool.0 as usize == HDD_POOL) {
            // The drive queues it and serves one command at a time.
            let started = q.issue(self.now_ns, &op);
            self.in_flight_ops.insert(id, op);
            self.push_started(started);
            return Ok(());
        }
        let t = self.now_ns + self.latency_ns();
        self.in_flight_ops.insert(id, op);
        self.push(t, EV_DEV, id);
        Ok(())
    }

    fn ops_delivered(&mut self) -> Result<(), Fail> {
        if let Some(t) = self
            .wakeups
            .to_queue_at(self.engine.next_deadline(), self.now_ns)
        {
            self.push(t, EV_WAKE, 0);
        }
        Ok(())
    }

    fn event(&mut self, e: EngineEvent) -> Result<(), Fail> {
        if let EngineEvent::Failed { reason } = e {
            return Err(format!("the engine failed: {reason}"));
        }
        if self.trace {
            eprintln!("[{}] event {e:?}", self.at());
        }
        if let EngineEvent::Recovered { .. } = e {
            self.stats.recoveries += 1;
        }
        if let EngineEvent::Borrowed { .. } = e {
            self.stats.loans += 1;
            self.stats.loan_seeds = 1;
        }
        if let EngineEvent::LoanReturned { .. } = e {
            self.stats.loans_returned += 1;
        }
        if let EngineEvent::GaveBack { .. } = e {
            self.stats.given_back += 1;
        }
        if let EngineEvent::Warning { message } = &e
            && self.recovering
            && message.contains("no space left on pool")
        {
            self.stats.space_mounts += 1;
        }
        if let EngineEvent::VolumeCreated { volume } = &e
            && !self.recovering
        {
            self.volume_announced(volume)?;
        }
        if let EngineEvent::VolumeResized { volume, size_bytes } = &e
            && !self.recovering
        {
            self.volume_resized(volume, *size_bytes)?;
        }
        if let EngineEvent::MigrationPhase { volume, phase, .. } = &e
            && let Some(v) = self.engine.volume_id(volume)
            && self.probe.is_some()
        {
            let done_on = (*phase == "done")
                .then(|| self.engine.engine_for(v))
                .flatten()
                .and_then(|(e, l)| e.migration_status(l))
                .map(|st| st.to.0);
            if let Some(p) = self.probe.as_mut() {
                if let Some(pool) = done_on {
                    p.now_on(v.0, pool);
                }
                p.phase(v.0, phase, !self.recovering);
            }
        }
        if let EngineEvent::VolumeDeleted { volume } = e {
            self.deleted.push(volume);
        }
        Ok(())
    }

    fn completed(&mut self, c: tiervisor_engine::VmCompletion) -> Result<(), Fail> {
        // The inherent `completed`: the reference disk's check of the answer.
        self.completed(c.id, c.result, c.data)
    }
}
