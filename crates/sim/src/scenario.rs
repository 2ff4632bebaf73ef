//! Scenario files: pools (device presets), volumes and per-VM workloads, in TOML.
//!
//! ```toml
//! seed = 1
//! [[pool]]
//! name = "hdd"
//! model = "hitachi-7k1000c"
//! capacity = "200g"        # default: the preset's capacity
//! queue_depth = 1          # default: 1 for HDDs, 32 for SSDs
//! ncq = true               # HDDs: the drive (each drive of an array) reorders queued
//!                          # commands (default: the preset's; matters only with
//!                          # queue_depth above 1)
//! flush = "tagged"         # SSDs: what a FLUSH writes back, "all" (default) or "tagged"
//! [[volume]]
//! name = "vm1"
//! pool = "hdd"
//! size = "20g"
//! provisioning = "thick"   # or "thin" (the default)
//! [[vm]]
//! volume = "vm1"
//! trace = "../../shared/traces/wsrch-small.trace.xz"   # relative to this file
//! devices = [0]            # trace devices/ASUs this VM replays (default: all)
//! mode = "closed"          # or "timed", or "rate" (fixed arrivals, `iops = N`)
//! depth = 1                # closed: requests outstanding
//! speed = 1.0              # timed: time compression
//! # format = "arc", assume_op = "mix:0.7", event = "Q", block_size = "4k",
//! # spread_ticks = true: see docs/CONFIG.md (traces)
//! repeat = 1
//! # or instead of a trace:
//! [vm.fio]
//! rw = "randread"
//! bs = "4k"
//! iodepth = 1
//! size = "1g"
//! ios = 10000
//! ```
//! Every error names the file and line and says what was expected.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use tiervisor_conf::{LogToml, SizeVal, Source, Spanned, TieringToml, system};
use tiervisor_engine::{Medium, SchedSpec};

#[path = "scenario_bench.rs"]
mod bench_vm;
#[path = "scenario_host.rs"]
mod host_vm;
#[path = "scenario_migration.rs"]
mod mig;
#[path = "scenario_spc.rs"]
mod spc_vm;
#[path = "scenario_trace.rs"]
mod trace_vm;
pub use host_vm::HostJournalJob;
pub use mig::MigrationSpec;
use tiervisor_model::{DeviceKind, FlushMode, Preset, preset, preset_names};
use tiervisor_workload::{
    AppJob, AppKind, Distribution, FioJob, FioRw, ReplayMode, SleepMode, SpcJob, SurgeConfig,
    Trace, TraceWorkload, Workload, WorkloadError,
};

/// An error in a scenario: `file:line: message`.
pub type ScenarioError = WorkloadError;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    seed: Option<u64>,
    /// Engines the system is split into (issue 18): each owns a slice of every pool.
    shards: Option<Spanned<u16>>,
    /// How shards share the budgets that span volumes: "demand" (default) or "fixed".
    shard_budgets: Option<Spanned<String>>,
    /// How shards share a pool's device under a weighted scheduler: "pool" (default) or
    /// "local".
    shard_qos: Option<Spanned<String>>,
    /// How long a shard holds a wholly free borrowed run before giving it back (ms; 0
    /// keeps borrowed space).
    give_back_hold_ms: Option<Spanned<u64>>,
    chunk: Option<Spanned<SizeVal>>,
    journal: Option<Spanned<SizeVal>>,
    commit_interval_ms: Option<Spanned<u64>>,
    metadata_pool: Option<Spanned<String>>,
    discard: Option<tiervisor_conf::Switch>,
    /// Record throughput and log counters every this many simulated seconds.
    sample_interval_s: Option<Spanned<f64>>,
    tiering: Option<TieringToml>,
    log: Option<LogToml>,
    #[serde(default, rename = "pool")]
    pools: Vec<RawPool>,
    #[serde(default, rename = "volume")]
    volumes: Vec<RawVolume>,
    #[serde(default, rename = "vm")]
    vms: Vec<Spanned<RawVm>>,
    #[serde(default, rename = "migration")]
    migrations: Vec<mig::RawMigration>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RawPool {
    name: Spanned<String>,
    model: Spanned<String>,
    capacity: Option<Spanned<SizeVal>>,
    queue_depth: Option<Spanned<u32>>,
    scheduler: Option<Spanned<toml::Value>>,
    /// Seed 003's virtual performance throttle.
    throttle: Option<Spanned<toml::Value>>,
    /// Gather small and random writes into log appends (seed 002).
    log: Option<tiervisor_conf::Switch>,
    /// What a device FLUSH writes back on SSDs: "all" or "tagged" (seed 001).
    flush: Option<Spanned<String>>,
    /// A striped array (RAID 0) of this many drives of `model` (default 1: one drive).
    drives: Option<Spanned<u32>>,
    /// The array's stripe unit (default 512 KiB, mdadm's default chunk).
    stripe: Option<Spanned<SizeVal>>,
    /// A single disk's command queueing (NCQ/TCQ): default the preset's.
    ncq: Option<Spanned<bool>>,
    /// The host write-back buffer (`"256m"`; 0 or absent: none).
    write_buffer: Option<Spanned<SizeVal>>,
    /// O_DIRECT in `serve`; accepted so a scenario can say what a server config says, but
    /// the simulator has no host page cache, so it changes nothing here.
    #[allow(dead_code)]
    direct: Option<tiervisor_conf::Switch>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RawVolume {
    name: Spanned<String>,
    pool: Spanned<String>,
    size: Spanned<SizeVal>,
    provisioning: Option<Spanned<String>>,
    placement: Option<Spanned<String>>,
    fast_pool: Option<Spanned<String>>,
    /// split: percent of chunks on the fast pool.
    fast_percent: Option<Spanned<u8>>,
    /// hot: most bytes on the fast pool (0: no limit).
    fast_budget: Option<Spanned<SizeVal>>,
    /// cache: "smq" (default) or "bcache".
    cache_policy: Option<Spanned<String>>,
    priority: Option<u8>,
    /// Map the chunks the volume's workloads touch before the run, as an existing disk.
    prefill: Option<bool>,
    /// Override the pools' `log`.
    log: Option<tiervisor_conf::Switch>,
    /// QoS for schedulers that share a device by volume (mclock, bfq).
    reservation_iops: Option<Spanned<u32>>,
    limit_iops: Option<Spanned<u32>>,
    weight: Option<Spanned<u32>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RawVm {
    name: Option<String>,
    volume: Spanned<String>,
    trace: Option<Spanned<String>>,
    format: Option<Spanned<String>>,
    devices: Option<Vec<u32>>,
    mode: Option<Spanned<String>>,
    depth: Option<Spanned<u32>>,
    speed: Option<Spanned<f64>>,
    /// `mode = "rate"`: requests per second.
    iops: Option<Spanned<f64>>,
    repeat: Option<Spanned<u32>>,
    /// blkparse traces: "D" (default) or "Q".
    event: Option<Spanned<String>>,
    /// raw-u32 traces: bytes per block number.
    block_size: Option<Spanned<SizeVal>>,
    /// Address-only traces: "read", "write" or "mix:FRACTION".
    assume_op: Option<Spanned<String>>,
    assume_seed: Option<u64>,
    spread_ticks: Option<bool>,
    fio: Option<RawFio>,
    surge: Option<RawSurge>,
    app: Option<RawApp>,
    spc: Option<spc_vm::RawSpc>,
    bench: Option<bench_vm::RawBench>,
    host: Option<host_vm::RawHost>,
    host_journal: Option<host_vm::RawHostJournal>,
}

/// `[vm.surge]`: seed 003's web-server workload; the distributions are the paper's.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RawSurge {
    processes: Option<Spanned<u32>>,
    files: Option<Spanned<u64>>,
    /// Where the files live: the first `region` bytes of the volume (default: all).
    region: Option<Spanned<SizeVal>>,
    block: Option<Spanned<SizeVal>>,
    /// Host page cache size; absent: O_DIRECT.
    page_cache: Option<Spanned<SizeVal>>,
    readahead: Option<Spanned<SizeVal>>,
    requests: Option<Spanned<u64>>,
    /// When a process sleeps: "on_period" (default) or "per_block".
    sleep: Option<Spanned<String>>,
}

/// An application-shaped generator (seed 001's Figure 9 workloads).
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RawApp {
    kind: Spanned<String>,
    size: Option<Spanned<SizeVal>>,
    offset: Option<Spanned<SizeVal>>,
    threads: Option<Spanned<u32>>,
    loops: Option<u64>,
    runtime_s: Option<Spanned<f64>>,
    guest_commit_s: Option<Spanned<f64>>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct RawFio {
    rw: Spanned<String>,
    bs: Spanned<SizeVal>,
    iodepth: Option<Spanned<u32>>,
    size: Option<Spanned<SizeVal>>,
    offset: Option<Spanned<SizeVal>>,
    rwmixread: Option<Spanned<u32>>,
    fsync: Option<u32>,
    ios: Option<u64>,
    runtime_s: Option<Spanned<f64>>,
    random_map: Option<bool>,
    end_fsync: Option<bool>,
    random_distribution: Option<Spanned<String>>,
    guest_commit_s: Option<Spanned<f64>>,
}

/// An `[vm.app]` table as a job on a volume of `vol_size` bytes.
fn app_job(cx: &Source, a: &RawApp, vol_size: u64) -> Result<AppJob, ScenarioError> {
    let Some(kind) = AppKind::parse(a.kind.get_ref()) else {
        return cx.err(
            a.kind.span(),
            format!(
                "kind {:?}: expected one of {}",
                a.kind.get_ref(),
                AppKind::names()
            ),
        );
    };
    let offset_bytes = match &a.offset {
        Some(o) => cx.size(o, "offset")?,
        None => 0,
    };
    let size_bytes = match &a.size {
        Some(s) => cx.size(s, "size")?,
        None => vol_size.saturating_sub(offset_bytes),
    };
    if offset_bytes + size_bytes > vol_size || size_bytes < kind.min_size_bytes() {
        return cx.err(
            a.size.as_ref().map_or(a.kind.span(), |s| s.span()),
            format!(
                "offset + size must lie inside the volume ({vol_size} bytes), and {} needs at least {} bytes",
                kind.name(),
                kind.min_size_bytes()
            ),
        );
    }
    let runtime_ns = match &a.runtime_s {
        Some(r) if !(r.get_ref().is_finite() && *r.get_ref() > 0.0) => {
            return cx.err(r.span(), "runtime_s: expected a positive number");
        }
        Some(r) => Some((r.get_ref() * 1e9) as u64),
        None => None,
    };
    if a.loops.is_none() && runtime_ns.is_none() {
        return cx.err(a.kind.span(), "an [vm.app] needs `loops` or `runtime_s`");
    }
    Ok(AppJob {
        kind,
        offset_bytes,
        size_bytes,
        threads: match &a.threads {
            Some(t) if *t.get_ref() == 0 => {
                return cx.err(t.span(), "threads: expected at least 1");
            }
            Some(t) => *t.get_ref(),
            None => kind.default_threads(),
        },
        loops: a.loops,
        runtime_ns,
        seed: 0,
    })
}

/// `placement = "oracle"` or `"oracle-dynamic"`: the simulator's own placements, which
/// read the workload before the run.
fn is_oracle(p: &Spanned<String>) -> bool {
    p.get_ref() == "oracle" || is_dynamic_oracle(p)
}

fn is_dynamic_oracle(p: &Spanned<String>) -> bool {
    p.get_ref() == "oracle-dynamic"
}

/// Apply a pool's `flush` key to its SSD preset.
fn set_flush_mode(cx: &Source, pr: &mut Preset, f: &Spanned<String>) -> Result<(), ScenarioError> {
    let Some(mode) = FlushMode::parse(f.get_ref()) else {
        return cx.err(
            f.span(),
            format!(
                "flush: expected \"all\" or \"tagged\", not {:?}",
                f.get_ref()
            ),
        );
    };
    match pr {
        Preset::Ssd { params, .. } if mode == FlushMode::Tagged && !params.write_back => cx.err(
            f.span(),
            "flush = \"tagged\" needs an SSD model with a write-back buffer (openssd-jasmine)",
        ),
        Preset::Ssd { params, .. } => {
            params.flush = mode;
            Ok(())
        }
        Preset::Hdd { .. } => cx.err(f.span(), "flush: only SSD pools have a flush mode"),
    }
}

/// Commands a disk queues when a scenario turns `ncq` on for a preset that has none
/// (SATA NCQ's 32).
const NCQ_DEPTH: u32 = 32;

/// A pool's `ncq` key: command queueing on or off in its disk (or in each disk of its
/// array: `drives` are built from this preset).
fn set_ncq(cx: &Source, pr: &mut Preset, ncq: &Spanned<bool>) -> Result<(), ScenarioError> {
    match pr {
        Preset::Hdd { params, .. } => {
            params.queue_depth = match (*ncq.get_ref(), params.queue_depth) {
                (false, _) => 1,
                (true, d) if d > 1 => d,
                (true, _) => NCQ_DEPTH,
            };
            Ok(())
        }
        Preset::Ssd { .. } => cx.err(
            ncq.span(),
            "ncq: only HDD pools have command queueing (SSD models serve commands in parallel)",
        ),
    }
}

/// mdadm's default chunk: an array's stripe unit when the scenario gives none.
const DEFAULT_STRIPE_BYTES: u64 = 512 * 1024;

/// A pool's `drives` and `stripe` keys: None for one drive.
fn array_of(cx: &Source, p: &RawPool) -> Result<Option<(u32, u64)>, ScenarioError> {
    let drives = match &p.drives {
        None => 1,
        Some(d) if (1..=64).contains(d.get_ref()) => *d.get_ref(),
        Some(d) => {
            return cx.err(
                d.span(),
                format!("drives = {}: expected 1 to 64", d.get_ref()),
            );
        }
    };
    let Some(s) = &p.stripe else {
        return Ok((drives > 1).then_some((drives, DEFAULT_STRIPE_BYTES)));
    };
    if drives == 1 {
        return cx.err(
            s.span(),
            "stripe: only an array (drives = 2 or more) has one",
        );
    }
    let bytes = cx.size(s, "stripe")?;
    if bytes == 0 || !bytes.is_multiple_of(512) {
        return cx.err(
            s.span(),
            format!("stripe = {bytes} bytes: expected a positive multiple of 512"),
        );
    }
    Ok(Some((drives, bytes)))
}

#[derive(Clone, Debug)]
pub struct PoolSpec {
    pub name: String,
    pub preset: Preset,
    pub capacity_bytes: u64,
    pub queue_depth: u32,
    pub scheduler: SchedSpec,
    pub log: bool,
    /// A striped array: (drives, stripe bytes); None for a single drive.
    pub array: Option<(u32, u64)>,
}

impl PoolSpec {
    pub fn medium(&self) -> Medium {
        medium_of(&self.preset)
    }
}

/// A count that must be at least 1 (`depth`, `iodepth`, `repeat`); 1 when absent.
fn at_least_one(cx: &Source, v: Option<&Spanned<u32>>, what: &str) -> Result<u32, ScenarioError> {
    match v {
        None => Ok(1),
        Some(v) if *v.get_ref() == 0 => {
            cx.err(v.span(), format!("{what} = 0: expected at least 1"))
        }
        Some(v) => Ok(*v.get_ref()),
    }
}

fn medium_of(p: &Preset) -> Medium {
    match p.kind() {
        DeviceKind::Hdd => Medium::Hdd,
        DeviceKind::Ssd => Medium::Ssd,
    }
}

#[derive(Clone, Debug)]
pub struct VolumeSpec {
    pub name: String,
    pub pool: usize,
    pub size_bytes: u64,
    pub provisioning: tiervisor_engine::Provisioning,
    pub placement: tiervisor_engine::Placement,
    pub fast_pool: Option<usize>,
    pub prefill: bool,
    /// `placement = "oracle"`: before the run, the chunks the workloads will access most
    /// go to the fast pool, up to its room (see `oracle.rs`); nothing moves during it.
    /// Also set for `"oracle-dynamic"`, which starts from that placement.
    pub oracle: bool,
    /// `placement = "oracle-dynamic"`: during the run, chunks move ahead of the accesses
    /// the workload will make, through the engine's tier moves (`oracle_dynamic.rs`).
    pub oracle_dynamic: bool,
    pub log: Option<bool>,
    pub qos: tiervisor_engine::VolumeQos,
}

#[derive(Clone, Debug)]
pub enum WorkloadSpec {
    Trace {
        trace: Arc<Trace>,
        devices: Vec<u32>,
        mode: ReplayMode,
        repeat: u32,
    },
    Fio(FioJob),
    Surge(SurgeConfig),
    /// An application-shaped generator (varmail, fileserver, TPC-C).
    App(AppJob),
    /// An imitation of one of seed 000's SPC traces.
    Spc(SpcJob),
    /// A block-level imitation of one of seed 004's Table 7 benchmarks.
    Bench(tiervisor_workload::BenchJob),
    /// The host file system's periodic journal commits (seed 001's hTag FLUSHes).
    HostJournal(host_vm::HostJournalJob),
}

#[derive(Clone, Debug)]
pub struct VmSpec {
    pub name: String,
    pub volume: usize,
    pub workload: WorkloadSpec,
    /// The guest file system's journal commit interval (`guest_commit_s`): a journal
    /// write and a FLUSH once this long has passed since the first write after the last
    /// FLUSH (`tiervisor_workload::commit`). None: no timer.
    pub guest_commit_ns: Option<u64>,
    /// `[vm.host]`: the host path between the workload and the volume (page-cache
    /// writeback, per-request host cost); default direct.
    pub host: tiervisor_workload::HostProfile,
}

/// A `guest_commit_s` key: a positive number of seconds.
fn guest_commit(cx: &Source, v: Option<&Spanned<f64>>) -> Result<Option<u64>, ScenarioError> {
    match v {
        Some(s) if !(s.get_ref().is_finite() && *s.get_ref() > 0.0) => cx.err(
            s.span(),
            "guest_commit_s: expected a positive number of seconds",
        ),
        Some(s) => Ok(Some((s.get_ref() * 1e9) as u64)),
        None => Ok(None),
    }
}

/// A validated scenario.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub source: String,
    pub seed: u64,
    /// Engines the system runs as (`shards = N`, default 1): each owns an equal slice of
    /// every pool and a share of the volumes (`engine::shard`).
    pub shards: u16,
    pub chunk_bytes: u64,
    pub journal_bytes: u64,
    pub commit_interval_ns: u64,
    /// 0: no timeline.
    pub sample_interval_ns: u64,
    pub tiering: tiervisor_engine::TieringConfig,
    pub log: tiervisor_engine::LogConfig,
    pub pools: Vec<PoolSpec>,
    pub volumes: Vec<VolumeSpec>,
    pub vms: Vec<VmSpec>,
    /// Live storage migrations the run starts (`[[migration]]`).
    pub migrations: Vec<MigrationSpec>,
    /// What the pools, volumes and engine keys resolve to, exactly as a server config
    /// saying the same would (crates/conf/src/system.rs); the fields above are views of it.
    pub engine: tiervisor_engine::EngineConfig,
}

impl Scenario {
    /// The chunks of volume `vi` its VMs' workloads touch (traces replayed once).
    pub fn touched_chunks(&self, vi: usize) -> std::collections::BTreeSet<u64> {
        let cb = self.chunk_bytes;
        let size_bytes = self.volumes[vi].size_bytes;
        let mut touched = std::collections::BTreeSet::new();
        for vm in self.vms.iter().filter(|m| m.volume == vi) {
            match &vm.workload {
                WorkloadSpec::Trace {
                    trace,
                    devices,
                    mode,
                    ..
                } => {
                    let mut w = TraceWorkload::new(trace.clone(), devices, *mode, 1, size_bytes);
                    while let Some(r) = w.next(0) {
                        if r.len_bytes > 0 {
                            touched.extend(
                                r.offset_bytes / cb..=(r.offset_bytes + r.len_bytes - 1) / cb,
                            );
                        }
                    }
                }
                WorkloadSpec::Fio(j) => {
                    touched
                        .extend(j.offset_bytes / cb..(j.offset_bytes + j.size_bytes).div_ceil(cb));
                }
                WorkloadSpec::Surge(c) => touched.extend(0..c.region_bytes.div_ceil(cb)),
                WorkloadSpec::App(j) => {
                    touched
                        .extend(j.offset_bytes / cb..(j.offset_bytes + j.size_bytes).div_ceil(cb));
                }
                WorkloadSpec::Bench(j) => {
                    touched
                        .extend(j.offset_bytes / cb..(j.offset_bytes + j.size_bytes).div_ceil(cb));
                }
                WorkloadSpec::Spc(j) => {
                    touched.extend(
                        j.offset_bytes / cb..(j.offset_bytes + j.footprint_bytes).div_ceil(cb),
                    );
                }
                // The journal wraps around its whole volume.
                WorkloadSpec::HostJournal(_) => touched.extend(0..size_bytes.div_ceil(cb)),
            }
        }
        touched
    }

    /// Read and validate a scenario file. Trace paths are relative to the file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| WorkloadError::file(&file, format!("cannot read scenario: {e}")))?;
        Self::parse(&file, &text, path.parent().unwrap_or(Path::new(".")))
    }

    pub fn parse(file: &str, text: &str, base: &Path) -> Result<Scenario, ScenarioError> {
        let cx = Source::new(file, text);
        let raw: RawScenario = cx.parse()?;
        // The simulator's own pool keys: a device model, whose capacity is the default.
        let mut presets = Vec::with_capacity(raw.pools.len());
        let mut arrays = Vec::with_capacity(raw.pools.len());
        for p in &raw.pools {
            let Some(pr) = preset(p.model.get_ref()) else {
                return cx.err(
                    p.model.span(),
                    format!(
                        "unknown model {:?}; expected one of: {}",
                        p.model.get_ref(),
                        preset_names().join(", ")
                    ),
                );
            };
            let array = array_of(&cx, p)?;
            // An array's default capacity is that of all its drives.
            let drives = array.map_or(1, |(d, _)| u64::from(d));
            let capacity = match &p.capacity {
                Some(c) => (cx.size(c, "capacity")?, c.span()),
                None => (pr.capacity_bytes() * drives, p.model.span()),
            };
            let mut pr = pr;
            if let Some(f) = &p.flush {
                set_flush_mode(&cx, &mut pr, f)?;
            }
            if let Some(n) = &p.ncq {
                set_ncq(&cx, &mut pr, n)?;
            }
            arrays.push(array);
            presets.push((pr, capacity));
        }
        // Everything else is the system specification servers share.
        let engine = system::resolve(
            &cx,
            system::EngineKeys {
                chunk: raw.chunk.as_ref(),
                journal: raw.journal.as_ref(),
                commit_interval_ms: raw.commit_interval_ms.as_ref(),
                metadata_pool: raw.metadata_pool.as_ref(),
                discard: raw.discard,
                tiering: raw.tiering.as_ref(),
                log: raw.log.as_ref(),
                shard_budgets: raw.shard_budgets.as_ref(),
                shard_qos: raw.shard_qos.as_ref(),
                give_back_hold_ms: raw.give_back_hold_ms.as_ref(),
            },
            &raw.pools
                .iter()
                .zip(&presets)
                .map(|(p, (pr, capacity))| system::PoolKeys {
                    name: &p.name,
                    medium: medium_of(pr),
                    capacity: Some(capacity.clone()),
                    queue_depth: p.queue_depth.as_ref(),
                    scheduler: p.scheduler.as_ref(),
                    throttle: p.throttle.as_ref(),
                    log: p.log,
                    write_buffer: p.write_buffer.as_ref(),
                })
                .collect::<Vec<_>>(),
            &raw.volumes
                .iter()
                .map(|v| system::VolumeKeys {
                    name: &v.name,
                    size: &v.size,
                    pool: &v.pool,
                    provisioning: v.provisioning.as_ref(),
                    // The oracle is the simulator's own (it reads the workload before the
                    // run); to the engine its volumes are pinned with a fast pool.
                    placement: v.placement.as_ref().filter(|p| !is_oracle(p)),
                    fast_pool: v.fast_pool.as_ref(),
                    fast_percent: v.fast_percent.as_ref(),
                    fast_budget: v.fast_budget.as_ref(),
                    priority: v.priority,
                    cache_policy: v.cache_policy.as_ref(),
                    log: v.log,
                    reservation_iops: v.reservation_iops.as_ref(),
                    limit_iops: v.limit_iops.as_ref(),
                    weight: v.weight.as_ref(),
                })
                .collect::<Vec<_>>(),
        )?;
        let pools: Vec<PoolSpec> = engine
            .pools
            .iter()
            .zip(presets)
            .zip(arrays)
            .map(|((p, (preset, _)), array)| PoolSpec {
                name: p.name.clone(),
                preset,
                capacity_bytes: p.capacity_bytes,
                queue_depth: p.queue_depth,
                scheduler: p.scheduler.clone(),
                log: p.log,
                array,
            })
            .collect();
        let volumes: Vec<VolumeSpec> = engine
            .volumes
            .iter()
            .zip(&raw.volumes)
            .map(|(v, raw)| VolumeSpec {
                name: v.name.clone(),
                pool: v.home_pool.0 as usize,
                size_bytes: v.size_bytes,
                provisioning: v.provisioning,
                placement: v.placement.clone(),
                fast_pool: v.fast_pool.map(|f| f.0 as usize),
                prefill: raw.prefill.unwrap_or(false),
                oracle: raw.placement.as_ref().is_some_and(is_oracle),
                oracle_dynamic: raw.placement.as_ref().is_some_and(is_dynamic_oracle),
                log: v.log,
                qos: v.qos,
            })
            .collect();
        for (v, raw) in volumes.iter().zip(&raw.volumes) {
            if let Some(p) = raw.placement.as_ref().filter(|p| is_oracle(p))
                && (!v.prefill || v.fast_pool.is_none_or(|f| f == v.pool))
            {
                return cx.err(
                    p.span(),
                    format!(
                        "volume {}: placement \"{}\" needs prefill = true (it places existing data) and a fast_pool other than its own pool",
                        v.name,
                        p.get_ref()
                    ),
                );
            }
        }
        let mut traces = trace_vm::TraceCache::new();
        let mut vms = Vec::new();
        for (i, svm) in raw.vms.iter().enumerate() {
            let vm = svm.get_ref();
            let host = match &vm.host {
                Some(h) => host_vm::host_profile(&cx, h)?,
                None => Default::default(),
            };
            let Some(volume) = volumes.iter().position(|v| v.name == *vm.volume.get_ref()) else {
                return cx.err(
                    vm.volume.span(),
                    format!(
                        "unknown volume {:?}; defined volumes: {}",
                        vm.volume.get_ref(),
                        volumes
                            .iter()
                            .map(|v| v.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
            };
            // A VM without a name is called after its position and volume.
            let vm_name = || {
                vm.name
                    .clone()
                    .unwrap_or_else(|| format!("vm{}-{}", i + 1, vm.volume.get_ref()))
            };
            if vm.trace.is_some() as u8
                + vm.fio.is_some() as u8
                + vm.surge.is_some() as u8
                + vm.app.is_some() as u8
                + vm.spc.is_some() as u8
                + vm.bench.is_some() as u8
                + vm.host_journal.is_some() as u8
                != 1
            {
                return cx.err(
                    svm.span(),
                    "a [[vm]] needs exactly one of `trace = ...`, a [vm.fio], a [vm.surge], a [vm.app], a [vm.spc], a [vm.bench] or a [vm.host_journal] table",
                );
            }
            if let Some(h) = &vm.host_journal {
                vms.push(VmSpec {
                    host: host.clone(),
                    name: vm_name(),
                    volume,
                    workload: WorkloadSpec::HostJournal(host_vm::host_journal(&cx, h)?),
                    guest_commit_ns: None,
                });
                continue;
            }
            if let Some(sp) = &vm.spc {
                let job = spc_vm::spc_job(&cx, sp, volumes[volume].size_bytes)?;
                vms.push(VmSpec {
                    host: host.clone(),
                    name: vm_name(),
                    volume,
                    workload: WorkloadSpec::Spc(job),
                    guest_commit_ns: None,
                });
                continue;
            }
            if let Some(b) = &vm.bench {
                let job = bench_vm::bench_job(&cx, b, volumes[volume].size_bytes)?;
                vms.push(VmSpec {
                    host: host.clone(),
                    name: vm_name(),
                    volume,
                    workload: WorkloadSpec::Bench(job),
                    guest_commit_ns: None,
                });
                continue;
            }
            if let Some(a) = &vm.app {
                let job = app_job(&cx, a, volumes[volume].size_bytes)?;
                vms.push(VmSpec {
                    host: host.clone(),
                    name: vm_name(),
                    volume,
                    workload: WorkloadSpec::App(job),
                    guest_commit_ns: guest_commit(&cx, a.guest_commit_s.as_ref())?,
                });
                continue;
            }
            if let Some(sg) = &vm.surge {
                vms.push(VmSpec {
                    host: host.clone(),
                    name: vm_name(),
                    volume,
                    workload: WorkloadSpec::Surge(surge_config(
                        &cx,
                        sg,
                        volumes[volume].size_bytes,
                    )?),
                    guest_commit_ns: None,
                });
                continue;
            }
            let workload = match (&vm.trace, &vm.fio) {
                (None, None) | (Some(_), Some(_)) => unreachable!("checked above"),
                (Some(t), None) => trace_vm::trace_vm(&cx, base, vm, t, &mut traces)?,
                (None, Some(f)) => {
                    let rw = FioRw::parse(f.rw.get_ref()).map_or_else(
                        || {
                            cx.err(
                                f.rw.span(),
                                format!(
                                    "rw {:?}: expected one of {}",
                                    f.rw.get_ref(),
                                    FioRw::names()
                                ),
                            )
                        },
                        Ok,
                    )?;
                    let bs = cx.size(&f.bs, "bs")?;
                    if bs == 0 || bs % 512 != 0 {
                        return cx.err(f.bs.span(), "bs: expected a positive multiple of 512");
                    }
                    let vol_size = volumes[volume].size_bytes;
                    let offset_bytes = match &f.offset {
                        Some(o) => cx.size(o, "offset")?,
                        None => 0,
                    };
                    let size_bytes = match &f.size {
                        Some(s) => cx.size(s, "size")?,
                        None => vol_size.saturating_sub(offset_bytes),
                    };
                    if offset_bytes + size_bytes > vol_size || size_bytes < bs {
                        return cx.err(f.size.as_ref().map_or(f.bs.span(), |s| s.span()), format!("offset + size must lie inside the volume ({vol_size} bytes) and hold at least one block"));
                    }
                    let rwmixread = match &f.rwmixread {
                        Some(m) if *m.get_ref() > 100 => {
                            return cx.err(m.span(), "rwmixread: expected 0 to 100");
                        }
                        Some(m) => *m.get_ref(),
                        None => 50,
                    };
                    let runtime_ns = match &f.runtime_s {
                        Some(r) if !(r.get_ref().is_finite() && *r.get_ref() > 0.0) => {
                            return cx.err(r.span(), "runtime_s: expected a positive number");
                        }
                        Some(r) => Some((r.get_ref() * 1e9) as u64),
                        None => None,
                    };
                    let distribution = match &f.random_distribution {
                        None => Distribution::Uniform,
                        Some(d) => Distribution::parse(d.get_ref())
                            .map_err(|e| cx.error(d.span(), format!("[vm.fio] {e}")))?,
                    };
                    WorkloadSpec::Fio(FioJob {
                        distribution,
                        rw,
                        bs,
                        iodepth: at_least_one(&cx, f.iodepth.as_ref(), "iodepth")?,
                        offset_bytes,
                        size_bytes,
                        rwmixread,
                        fsync_every: f.fsync.unwrap_or(0),
                        ios: f.ios,
                        runtime_ns,
                        seed: 0,
                        random_map: f.random_map.unwrap_or(false),
                        end_fsync: f.end_fsync.unwrap_or(false),
                    })
                }
            };
            let guest_commit_ns = match &vm.fio {
                Some(f) => guest_commit(&cx, f.guest_commit_s.as_ref())?,
                None => None,
            };
            vms.push(VmSpec {
                host: host.clone(),
                name: vm_name(),
                volume,
                workload,
                guest_commit_ns,
            });
        }
        let migrations = raw
            .migrations
            .iter()
            .map(|m| mig::migration(&cx, m, &pools, &volumes))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Scenario {
            source: file.to_string(),
            seed: raw.seed.unwrap_or(1),
            shards: match &raw.shards {
                Some(n) if !(1..=tiervisor_engine::shard::MAX_SHARDS).contains(n.get_ref()) => {
                    return cx.err(
                        n.span(),
                        format!(
                            "shards: expected 1..={}",
                            tiervisor_engine::shard::MAX_SHARDS
                        ),
                    );
                }
                Some(n) => *n.get_ref(),
                None => 1,
            },
            chunk_bytes: engine.chunk_bytes,
            journal_bytes: engine.journal_bytes,
            commit_interval_ns: engine.commit_interval_ns,
            sample_interval_ns: match &raw.sample_interval_s {
                Some(s) if !(s.get_ref().is_finite() && *s.get_ref() > 0.0) => {
                    return cx.err(s.span(), "sample_interval_s: expected a positive number");
                }
                Some(s) => (s.get_ref() * 1e9) as u64,
                None => 0,
            },
            tiering: engine.tiering.clone(),
            log: engine.log.clone(),
            pools,
            volumes,
            vms,
            migrations,
            engine,
        })
    }
}

/// Validate a `[vm.surge]` table against its volume.
fn surge_config(
    cx: &Source,
    sg: &RawSurge,
    volume_bytes: u64,
) -> Result<SurgeConfig, ScenarioError> {
    let mut c = SurgeConfig::paper(volume_bytes);
    if let Some(r) = &sg.region {
        c.region_bytes = cx.size(r, "region")?;
        if c.region_bytes == 0 || c.region_bytes > volume_bytes {
            return cx.err(
                r.span(),
                format!("region: expected 1 byte to the volume's {volume_bytes}"),
            );
        }
    }
    let positive = |v: &Spanned<u64>, what: &str| -> Result<u64, ScenarioError> {
        if *v.get_ref() == 0 {
            return cx.err(v.span(), format!("{what}: expected a positive number"));
        }
        Ok(*v.get_ref())
    };
    if let Some(p) = &sg.processes {
        if *p.get_ref() == 0 {
            return cx.err(p.span(), "processes: expected a positive number");
        }
        c.processes = *p.get_ref();
    }
    if let Some(f) = &sg.files {
        c.files = positive(f, "files")?;
    }
    if let Some(n) = &sg.requests {
        c.requests = positive(n, "requests")?;
    }
    for (v, what, dst) in [
        (&sg.block, "block", &mut c.block_bytes),
        (&sg.readahead, "readahead", &mut c.readahead_bytes),
    ] {
        if let Some(v) = v {
            let b = cx.size(v, what)?;
            if b == 0 || b % 4096 != 0 {
                return cx.err(
                    v.span(),
                    format!("{what}: expected a positive multiple of 4k"),
                );
            }
            *dst = b;
        }
    }
    if let Some(pc) = &sg.page_cache {
        c.page_cache_bytes = Some(cx.size(pc, "page_cache")?);
    }
    if let Some(s) = &sg.sleep {
        c.sleep = match s.get_ref().as_str() {
            "on_period" => SleepMode::OnPeriod,
            "per_block" => SleepMode::PerBlock,
            other => {
                return cx.err(
                    s.span(),
                    format!("sleep: {other:?}: expected \"on_period\" or \"per_block\""),
                );
            }
        };
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Scenario, ScenarioError> {
        Scenario::parse("s.toml", text, Path::new("."))
    }

    const GOOD: &str = r#"
seed = 7
[[pool]]
name = "hdd"
model = "hitachi-7k1000c"
capacity = "10g"
[[volume]]
name = "v"
pool = "hdd"
size = "1g"
[[vm]]
volume = "v"
[vm.fio]
rw = "randread"
bs = "4k"
ios = 100
"#;

    #[test]
    fn good_scenario_parses() {
        let s = parse(GOOD).unwrap();
        assert_eq!(s.seed, 7);
        assert_eq!(s.pools[0].capacity_bytes, 10 << 30);
        assert_eq!(s.pools[0].queue_depth, 1);
        assert!(
            matches!(&s.vms[0].workload, WorkloadSpec::Fio(j) if j.bs == 4096 && j.size_bytes == 1 << 30)
        );
    }

    #[test]
    fn a_log_mode_is_gather_or_bitvisor_with_a_located_error() {
        let s = parse(&format!("{GOOD}[log]\nmode = \"bitvisor\"\n")).unwrap();
        assert_eq!(s.log.mode, tiervisor_engine::LogMode::Bitvisor);
        assert_eq!(
            parse(GOOD).unwrap().log.mode,
            tiervisor_engine::LogMode::Gather
        );
        let e = parse(&format!("{GOOD}[log]\nmode = \"sync\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("s.toml:") && e.contains("unknown log mode \"sync\""),
            "{e}"
        );
    }

    #[test]
    fn a_host_journal_vm_commits_every_5_s_by_default_and_needs_a_positive_runtime() {
        let host = |body: &str| {
            GOOD.replace(
                "[vm.fio]\nrw = \"randread\"\nbs = \"4k\"\nios = 100\n",
                &format!("[vm.host_journal]\n{body}"),
            )
        };
        let s = parse(&host("runtime_s = 20\n")).unwrap();
        assert!(matches!(
            s.vms[0].workload,
            WorkloadSpec::HostJournal(j) if j.commit_ns == 5_000_000_000 && j.runtime_ns == 20_000_000_000
        ));
        let e = parse(&host("commit_s = 0\nruntime_s = 20\n")).unwrap_err();
        assert!(e.message.contains("commit_s"), "{e}");
        let e = parse(&host("commit_s = 5\n")).unwrap_err();
        assert!(e.message.contains("runtime_s"), "{e}");
    }

    #[test]
    fn a_guest_commit_interval_is_a_positive_number_of_seconds() {
        let s = parse(&GOOD.replace("ios = 100", "ios = 100\nguest_commit_s = 5")).unwrap();
        assert_eq!(s.vms[0].guest_commit_ns, Some(5_000_000_000));
        assert_eq!(parse(GOOD).unwrap().vms[0].guest_commit_ns, None);
        let e = parse(&GOOD.replace("ios = 100", "ios = 100\nguest_commit_s = 0")).unwrap_err();
        assert_eq!(e.line, Some(17));
        assert!(e.message.contains("guest_commit_s"), "{e}");
    }

    #[test]
    fn errors_point_at_the_line() {
        let e = parse(&GOOD.replace("hitachi-7k1000c", "nope")).unwrap_err();
        assert_eq!(e.line, Some(5));
        assert!(
            e.message.contains("unknown model") && e.message.contains("intel-320-160g"),
            "{e}"
        );
        let e = parse(&GOOD.replace("size = \"1g\"", "size = \"1q\"")).unwrap_err();
        assert_eq!(e.line, Some(10));
        let e = parse(&GOOD.replace("ios = 100", "ios = 100\nbogus = 1")).unwrap_err();
        assert!(e.message.contains("bogus"), "{e}");
        assert_eq!(e.line, Some(17));
        let e = parse(&GOOD.replace("pool = \"hdd\"", "pool = \"ssd\"")).unwrap_err();
        assert_eq!(
            (e.line, e.message.contains("unknown pool")),
            (Some(9), true)
        );
        // Zero depths and repeats run nothing; they are mistakes, not defaults (issue 15).
        let e = parse(&GOOD.replace("ios = 100", "ios = 100\niodepth = 0")).unwrap_err();
        assert_eq!(e.line, Some(17), "{e}");
        assert!(
            e.message.contains("iodepth = 0: expected at least 1"),
            "{e}"
        );
        // A skewed distribution: a bad parameter names the file, line and key.
        let zipf = |v: &str| {
            GOOD.replace(
                "ios = 100",
                &format!("ios = 100\nrandom_distribution = \"{v}\""),
            )
        };
        let s = parse(&zipf("zipf:1.2")).unwrap();
        assert!(matches!(&s.vms[0].workload, WorkloadSpec::Fio(j)
            if j.distribution == Distribution::Zipf { theta: 1.2 }));
        for bad in ["zipf:0", "pareto:1.0", "zipf"] {
            let e = parse(&zipf(bad)).unwrap_err();
            assert_eq!((e.file.as_str(), e.line), ("s.toml", Some(17)), "{e}");
            assert!(
                e.to_string().contains("[vm.fio] random_distribution") && e.message.contains(bad),
                "{e}"
            );
        }
        let e = parse(&GOOD.replace("bs = \"4k\"", "bs = 4.5")).unwrap_err();
        assert!(e.message.contains("a size such as 4096"), "{e}");
        let dir = std::env::temp_dir().join(format!("tv-scenario-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("t.trace"), "0 0 8 8 1\n").unwrap();
        let traced = GOOD.replace(
            "[vm.fio]\nrw = \"randread\"\nbs = \"4k\"\nios = 100\n",
            "trace = \"t.trace\"\n",
        );
        for key in ["depth", "repeat"] {
            let text = format!("{traced}{key} = 0\n");
            let e = Scenario::parse("s.toml", &text, &dir).unwrap_err();
            assert_eq!(e.line, Some(14), "{e}");
            assert!(e.message.contains(&format!("{key} = 0")), "{e}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
        let e = parse("seed = [").unwrap_err();
        assert_eq!(e.file, "s.toml");
        assert!(e.to_string().starts_with("s.toml:1:"), "{e}");
    }

    #[test]
    fn surge_sleeps_per_on_period_or_per_block() {
        let surge = |extra: &str| {
            GOOD.replace(
                "[vm.fio]\nrw = \"randread\"\nbs = \"4k\"\nios = 100\n",
                &format!("[vm.surge]\nfiles = 1000\n{extra}"),
            )
        };
        let sleep_of = |s: &Scenario| match &s.vms[0].workload {
            WorkloadSpec::Surge(c) => c.sleep,
            _ => panic!("a surge VM"),
        };
        assert_eq!(sleep_of(&parse(&surge("")).unwrap()), SleepMode::OnPeriod);
        let pb = parse(&surge("sleep = \"per_block\"\n")).unwrap();
        assert_eq!(sleep_of(&pb), SleepMode::PerBlock);
        let e = parse(&surge("sleep = \"often\"\n"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("per_block"), "{e}");
    }

    #[test]
    fn spc_tables_parse_and_bad_values_name_the_line() {
        let spc = GOOD.replace(
            "[vm.fio]\nrw = \"randread\"\nbs = \"4k\"\nios = 100\n",
            "[vm.spc]\nkind = \"financial\"\nfootprint = \"64m\"\n",
        );
        let s = parse(&spc).unwrap();
        assert!(matches!(&s.vms[0].workload, WorkloadSpec::Spc(j)
            if j.footprint_bytes == 64 << 20 && (j.reuse - 4.61).abs() < 0.01 && j.streams == 4));
        assert_eq!(s.touched_chunks(0).len(), 64);
        for (bad, line, what) in [
            (
                "kind = \"financial\"",
                "kind = \"tpcc\"",
                "websearch, financial",
            ),
            (
                "footprint = \"64m\"",
                "footprint = \"2g\"",
                "inside the volume",
            ),
            (
                "footprint = \"64m\"",
                "footprint = \"64m\"\nreuse = 0.5",
                "reuse = 0.5",
            ),
            (
                "footprint = \"64m\"",
                "footprint = \"64m\"\nstreams = 0",
                "streams = 0",
            ),
        ] {
            let e = parse(&spc.replace(bad, line)).unwrap_err();
            assert_eq!(e.file, "s.toml");
            assert!(e.line.is_some_and(|l| l >= 14), "{e}");
            assert!(
                e.message.contains("[vm.spc]") && e.message.contains(what),
                "{e}"
            );
        }
    }

    #[test]
    fn arrays_parse_and_bad_ones_say_why() {
        let arr = GOOD.replace(
            "capacity = \"10g\"",
            "capacity = \"10g\"\ndrives = 4\nstripe = \"64k\"",
        );
        let s = parse(&arr).unwrap();
        assert_eq!(s.pools[0].array, Some((4, 64 << 10)));
        let s = parse(&GOOD.replace("capacity = \"10g\"", "drives = 3")).unwrap();
        assert_eq!(s.pools[0].array, Some((3, 512 << 10)));
        assert_eq!(s.pools[0].capacity_bytes, 3 * 1_000_204_886_016);
        assert_eq!(parse(GOOD).unwrap().pools[0].array, None);
        for (bad, line, why) in [
            ("drives = 0", 7, "drives = 0: expected 1 to 64"),
            (
                "drives = 2\nstripe = \"1000\"",
                8,
                "positive multiple of 512",
            ),
            ("stripe = \"64k\"", 7, "only an array"),
        ] {
            let e =
                parse(&GOOD.replace("capacity = \"10g\"", &format!("capacity = \"10g\"\n{bad}")))
                    .unwrap_err();
            assert_eq!(e.line, Some(line), "{bad}: {e}");
            assert!(e.message.contains(why), "{bad}: {e}");
        }
    }

    /// Random 4 KiB reads at queue depth 32 on one Hitachi: its NCQ (on in the preset)
    /// serves them about twice as fast as the same drive with `ncq = false`, which serves
    /// them in arrival order. Fails without the driver's command queue.
    /// Seconds the example scenario's VM takes for `ios` random 4 KiB reads, `iodepth` at
    /// once, over a 90 GiB thick volume on a 100 GiB HDD pool with `pool_keys`.
    fn queued_random_reads_s(pool_keys: &str, ios: u32, iodepth: u32) -> f64 {
        let text = GOOD
            .replace(
                "capacity = \"10g\"",
                &format!("capacity = \"100g\"\n{pool_keys}"),
            )
            .replace("ios = 100", &format!("ios = {ios}\niodepth = {iodepth}"))
            .replace("size = \"1g\"", "size = \"90g\"\nprovisioning = \"thick\"");
        let sc = parse(&text).unwrap();
        let sim = crate::Simulation::new(sc, &crate::RunOptions::default()).unwrap();
        let r = sim.run().unwrap();
        r.vms.values().map(|v| v.exec_time_s).fold(0.0, f64::max)
    }

    #[test]
    fn ncq_serves_queued_random_reads_faster() {
        let run =
            |extra: &str| queued_random_reads_s(&format!("queue_depth = 32{extra}"), 3000, 32);
        let (ncq, fifo) = (run(""), run("\nncq = false"));
        assert!(ncq * 1.5 < fifo, "NCQ {ncq} s vs arrival order {fifo} s");
        assert_eq!(run("\nncq = true"), ncq, "the preset's default is on");
    }

    #[test]
    fn ncq_applies_to_hdds_and_their_arrays() {
        let ssd = GOOD
            .replace("hitachi-7k1000c", "intel-320-160g")
            .replace("capacity = \"10g\"", "capacity = \"10g\"\nncq = true");
        let e = parse(&ssd).unwrap_err();
        assert_eq!(e.line, Some(7), "{e}");
        assert!(e.message.contains("only HDD pools"), "{e}");
        let depth = |text: &str| match &parse(text).unwrap().pools[0].preset {
            Preset::Hdd { params, .. } => params.queue_depth,
            p => panic!("{p:?}"),
        };
        let cheetah = GOOD
            .replace("hitachi-7k1000c", "cheetah-15k4")
            .replace("capacity = \"10g\"", "capacity = \"10g\"\nncq = true");
        assert_eq!(depth(&cheetah), NCQ_DEPTH);
        // An array's drives are built from the pool's preset, so they queue as it says.
        let array = GOOD.replace("capacity = \"10g\"", "capacity = \"10g\"\ndrives = 2");
        assert_eq!(depth(&array), 32);
        assert_eq!(
            depth(&array.replace("drives = 2", "drives = 2\nncq = false")),
            1
        );
    }

    /// Random 4 KiB reads at queue depth 8 run about 4x as fast on four drives as on one
    /// (each served in arrival order).
    #[test]
    fn an_array_of_four_drives_serves_random_reads_faster() {
        let run = |extra: &str| {
            let text = GOOD
                .replace(
                    "capacity = \"10g\"",
                    &format!("capacity = \"10g\"\nqueue_depth = 8{extra}"),
                )
                .replace("ios = 100", "ios = 2000\niodepth = 8")
                // Thick, so reads reach the drives (a thin volume's unwritten chunks do not).
                .replace("size = \"1g\"", "size = \"1g\"\nprovisioning = \"thick\"");
            let sc = parse(&text).unwrap();
            let sim = crate::Simulation::new(sc, &crate::RunOptions::default()).unwrap();
            let r = sim.run().unwrap();
            r.vms.values().map(|v| v.exec_time_s).fold(0.0, f64::max)
        };
        // Both in arrival order (`ncq = false`), so this is the striping alone.
        let (one, four) = (
            run("\nncq = false"),
            run("\ndrives = 4\nstripe = \"64k\"\nncq = false"),
        );
        assert!(four * 2.5 < one, "4 drives {four} s vs 1 drive {one} s");
    }

    /// The member drives of an array queue and reorder as a single drive does
    /// (`array_queue.rs`): random 4 KiB reads with 64 outstanding on four hitachi-7k1000c
    /// run faster with NCQ than in arrival order. Fails without the members' queues (both
    /// runs served in arrival order).
    #[test]
    fn an_array_s_drives_reorder_queued_reads() {
        let run = |extra: &str| {
            let pool = format!("queue_depth = 64\ndrives = 4\nstripe = \"64k\"{extra}");
            queued_random_reads_s(&pool, 6000, 64)
        };
        let (ncq, fifo) = (run(""), run("\nncq = false"));
        assert!(ncq * 1.3 < fifo, "NCQ {ncq} s vs arrival order {fifo} s");
    }

    #[test]
    fn flush_modes_apply_to_write_back_ssds_only() {
        let ssd = GOOD.replace("hitachi-7k1000c", "openssd-jasmine");
        let s = parse(&ssd.replace(
            "capacity = \"10g\"",
            "capacity = \"10g\"\nflush = \"tagged\"",
        ))
        .unwrap();
        match &s.pools[0].preset {
            Preset::Ssd { params, .. } => assert_eq!(params.flush, FlushMode::Tagged),
            p => panic!("{p:?}"),
        }
        let e = parse(&ssd.replace("capacity = \"10g\"", "capacity = \"10g\"\nflush = \"some\""))
            .unwrap_err();
        assert_eq!(e.line, Some(7));
        assert!(e.message.contains("\"all\" or \"tagged\""), "{e}");
        let e = parse(&GOOD.replace("capacity = \"10g\"", "capacity = \"10g\"\nflush = \"all\""))
            .unwrap_err();
        assert!(e.message.contains("only SSD pools"), "{e}");
        let x25 = GOOD.replace("hitachi-7k1000c", "intel-x25m-80g");
        let e = parse(&x25.replace(
            "capacity = \"10g\"",
            "capacity = \"10g\"\nflush = \"tagged\"",
        ))
        .unwrap_err();
        assert!(e.message.contains("write-back buffer"), "{e}");
    }
}
