//! Engine configuration: pools, volumes, and engine-wide settings.

use serde::Serialize;

use crate::sched::{SchedSpec, VolumeQos};
use crate::types::PoolId;

/// The medium behind a pool; placement policies use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Medium {
    Ssd,
    Hdd,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PoolConfig {
    pub name: String,
    pub medium: Medium,
    pub capacity_bytes: u64,
    /// Operations the engine keeps outstanding on the device at once.
    pub queue_depth: u32,
    pub scheduler: SchedSpec,
    /// Gather small and random writes into log appends on this pool (seed 002).
    pub log: bool,
    /// Hold completions to a drive model times k (seed 003's virtual throttle).
    pub throttle: Option<crate::throttle::ThrottleConfig>,
    /// A host write-back buffer for the pool (`direct` pools in `serve`; `wbuf.rs`).
    pub write_buffer: Option<crate::wbuf::WriteBufferConfig>,
}

/// How a volume's space is reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Provisioning {
    /// A contiguous home region on the home pool, reserved at creation: logical chunk i
    /// lives at home chunk i unless moved, which keeps an HDD's locality.
    Thick,
    /// Chunks are allocated on first write; never-written chunks cost nothing.
    Thin,
}

impl Provisioning {
    pub fn name(self) -> &'static str {
        match self {
            Provisioning::Thick => "thick",
            Provisioning::Thin => "thin",
        }
    }
}

/// Where a volume's chunks go (seed 000's placement policies).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase", tag = "policy")]
pub enum Placement {
    /// Every chunk on the home pool ("HDD only" or "SSD only").
    Pinned,
    /// A fixed share of chunks, chosen by a hash of the chunk number, on the fast pool
    /// (the paper's "50% HDD and 50% SSD").
    Split { fast_percent: u8 },
    /// Monitor-driven: hot, random chunks are promoted to the fast pool; cold or
    /// sequential ones are demoted when a hotter one needs the room. At most
    /// `fast_budget_bytes` on the fast pool (0: as much as the pool has); when volumes
    /// contend for the fast pool, higher `priority` wins.
    Hot {
        fast_budget_bytes: u64,
        priority: u8,
    },
    /// A write-back cache of the home (slow) pool on the fast pool, as an operator would
    /// deploy dm-cache or bcache instead of tiering (`cache.rs`): a cached chunk is
    /// *copied* to the fast pool and keeps its home slot. At most `fast_budget_bytes` on
    /// the fast pool (0: the pool divided evenly among the cache volumes using it).
    Cache {
        cache_policy: CachePolicy,
        fast_budget_bytes: u64,
    },
}

/// What a `cache` volume admits (docs/ARCHITECTURE.md, "Cache placement").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CachePolicy {
    /// dm-cache's smq, approximated: promote on repeated access, no sequential detection.
    Smq,
    /// bcache, approximated: admit on first access unless the request belongs to a
    /// sequential stream longer than `sequential_cutoff_bytes`.
    Bcache,
}

impl CachePolicy {
    pub const NAMES: &'static str = "\"smq\" or \"bcache\"";
    pub fn name(self) -> &'static str {
        match self {
            CachePolicy::Smq => "smq",
            CachePolicy::Bcache => "bcache",
        }
    }
    pub fn parse(s: &str) -> Option<CachePolicy> {
        match s {
            "smq" => Some(CachePolicy::Smq),
            "bcache" => Some(CachePolicy::Bcache),
            _ => None,
        }
    }
}

impl Placement {
    pub fn name(&self) -> &'static str {
        match self {
            Placement::Pinned => "pinned",
            Placement::Split { .. } => "split",
            Placement::Hot { .. } => "hot",
            Placement::Cache { .. } => "cache",
        }
    }
}

/// Background tier migration and the monitor's clock.
#[derive(Clone, Debug, PartialEq)]
pub struct TieringConfig {
    /// How often placement is reconsidered.
    pub interval_ns: u64,
    /// Chunk moves in flight at once, engine-wide.
    pub max_moves: u32,
    /// Migration bandwidth cap, so foreground I/O keeps priority.
    pub bytes_per_s: u64,
    /// Access counts halve every this long (recency).
    pub decay_ns: u64,
    /// A chunk needs at least this heat to be promoted.
    pub promote_min_heat: u32,
    /// A chunk displaces a fast-pool chunk only if this many percent hotter.
    pub hysteresis_pct: u32,
    /// `cache` volumes: dirty chunks are written back while more than this percentage
    /// of the volume's cache is dirty (bcache's `writeback_percent`, default 10).
    pub writeback_percent: u32,
    /// `cache` volumes with the bcache policy: a request in a sequential stream longer
    /// than this bypasses the cache (bcache's `sequential_cutoff`, default 4 MiB).
    pub sequential_cutoff_bytes: u64,
    /// `hot` volumes (and directed moves of pinned ones): a promotion copies the chunk and
    /// keeps its slow-pool copy while the fast copy stays clean, so demoting a clean chunk
    /// is a journalled remap, not a copy back (`tier_home.rs`).
    pub keep_home: bool,
}

impl Default for TieringConfig {
    fn default() -> Self {
        TieringConfig {
            interval_ns: 100_000_000,
            max_moves: 4,
            bytes_per_s: 64 << 20,
            decay_ns: 10_000_000_000,
            promote_min_heat: 4,
            hysteresis_pct: 50,
            writeback_percent: 10,
            sequential_cutoff_bytes: 4 << 20,
            keep_home: false,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct VolumeConfig {
    pub name: String,
    pub size_bytes: u64,
    pub home_pool: PoolId,
    /// The pool `split` and `hot` placement move chunks to.
    pub fast_pool: Option<PoolId>,
    pub provisioning: Provisioning,
    pub placement: Placement,
    /// Override the pool's `log` setting for this volume.
    pub log: Option<bool>,
    /// Reservation, limit and weight for schedulers that share a device by volume.
    pub qos: VolumeQos,
}

impl VolumeConfig {
    /// The checks of one volume against a system of `pools` pools (names must also be
    /// unique among the volumes, which the caller checks).
    pub fn check(&self, pools: usize) -> Result<(), String> {
        let v = self;
        if v.name.is_empty() || v.name.len() > MAX_NAME_BYTES {
            return Err(format!(
                "volume name {:?} is empty or longer than {MAX_NAME_BYTES} bytes",
                v.name
            ));
        }
        if v.size_bytes == 0 || !v.size_bytes.is_multiple_of(512) {
            return Err(format!(
                "volume {}: size must be a positive multiple of 512 bytes",
                v.name
            ));
        }
        if v.size_bytes > MAX_VOLUME_BYTES {
            return Err(format!(
                "volume {}: {} bytes is more than the {MAX_VOLUME_BYTES} (1 PiB) a volume may have",
                v.name, v.size_bytes
            ));
        }
        if v.home_pool.0 as usize >= pools {
            return Err(format!("volume {}: home pool does not exist", v.name));
        }
        match (&v.placement, v.fast_pool) {
            (Placement::Pinned, _) => Ok(()),
            (_, None) => Err(format!(
                "volume {}: {} placement needs a fast pool",
                v.name,
                v.placement.name()
            )),
            (_, Some(f)) if f.0 as usize >= pools || f == v.home_pool => Err(format!(
                "volume {}: the fast pool must exist and differ from the home pool",
                v.name
            )),
            (Placement::Split { fast_percent }, _) if *fast_percent > 100 => Err(format!(
                "volume {}: split fast_percent must be 0..=100",
                v.name
            )),
            _ => Ok(()),
        }
    }
}

/// How the segment cleaner picks its victim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CleanerPolicy {
    /// The segment with the least live data.
    Greedy,
    /// Sprite LFS: the highest (1 - u) * age / (1 + u), which lets cold segments fill up
    /// before they are cleaned.
    CostBenefit,
}

impl CleanerPolicy {
    pub fn name(self) -> &'static str {
        match self {
            CleanerPolicy::Greedy => "greedy",
            CleanerPolicy::CostBenefit => "cost-benefit",
        }
    }
    pub fn parse(s: &str) -> Option<CleanerPolicy> {
        match s {
            "greedy" => Some(CleanerPolicy::Greedy),
            "cost-benefit" => Some(CleanerPolicy::CostBenefit),
            _ => None,
        }
    }
}

/// How the log takes a write (seed 002's mechanism, or tiervisor's own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogMode {
    /// tiervisor's log: writes are gathered per stream and acknowledged from RAM; one
    /// append carries many of them.
    #[default]
    Gather,
    /// Seed 002's BitVisor redirection: each write command's address is redirected as
    /// it arrives to the next sequential location and written through (one device write
    /// per guest write piece, acknowledged only once the device completed it; nothing
    /// gathered, nothing acknowledged from RAM).
    Bitvisor,
}

impl LogMode {
    pub fn parse(s: &str) -> Option<LogMode> {
        match s {
            "gather" => Some(LogMode::Gather),
            "bitvisor" => Some(LogMode::Bitvisor),
            _ => None,
        }
    }
}

/// The log-structured write path (seed 002).
#[derive(Clone, Debug, PartialEq)]
pub struct LogConfig {
    /// Gathering (tiervisor's) or write-through redirection (the paper's BitVisor).
    pub mode: LogMode,
    /// Segment size: a multiple of the chunk size, at most 64 chunks.
    pub segment_bytes: u64,
    /// Writes up to this size are logged; larger ones only when the monitor sees them
    /// as random (and they fit in one append).
    pub threshold_bytes: u64,
    /// Largest single append (the gathering buffer of one stream).
    pub append_bytes: u64,
    /// Appends in flight per stream; more writes wait in RAM (acknowledged).
    pub appends_in_flight: u32,
    /// How long an idle stream's first buffered write waits for others to join it
    /// before the buffer is appended (a full buffer and a commit do not wait). Writes
    /// are acknowledged from RAM either way; on a fast device, appending at once would
    /// send nearly every write as its own small append.
    pub gather_ns: u64,
    pub cleaner: CleanerPolicy,
    /// The cleaner runs while a pool has fewer free segments than this.
    pub clean_below_free_segments: u64,
    /// The cleaner's bandwidth cap (bytes read plus bytes copied, per second) while free
    /// segments are not short; 0: no cap. Below the urgency mark it runs uncapped.
    pub clean_bytes_per_s: u64,
    /// Free segments kept for the cleaner and for retries: below this, new writes go to
    /// their home location instead of the log.
    pub reserve_segments: u64,
}

impl LogConfig {
    /// The log's sizes against each other and the chunk size.
    fn check(&self, chunk_bytes: u64) -> Result<(), String> {
        let l = self;
        if l.segment_bytes == 0
            || !l.segment_bytes.is_multiple_of(chunk_bytes)
            || l.segment_bytes / chunk_bytes > 64
        {
            return Err(format!(
                "log segment size {} must be a multiple of the chunk size {} and at most 64 chunks",
                l.segment_bytes, chunk_bytes
            ));
        }
        if l.append_bytes < 4096
            || l.append_bytes > l.segment_bytes
            || !l.append_bytes.is_multiple_of(512)
        {
            return Err(format!(
                "log append size {} must be a multiple of 512, at least 4 KiB and at most the segment size",
                l.append_bytes
            ));
        }
        if l.threshold_bytes > l.append_bytes {
            return Err(format!(
                "log threshold {} must not exceed the append size {}",
                l.threshold_bytes, l.append_bytes
            ));
        }
        if l.appends_in_flight == 0 {
            return Err("log appends in flight must be at least 1".into());
        }
        if l.gather_ns > 1_000_000_000 {
            return Err(format!(
                "log gather time (gather_us) {} us is over a second: buffered writes would sit in RAM that long",
                l.gather_ns / 1000
            ));
        }
        Ok(())
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            mode: LogMode::Gather,
            segment_bytes: 4 << 20,
            threshold_bytes: 64 << 10,
            append_bytes: 1 << 20,
            appends_in_flight: 2,
            gather_ns: 500_000,
            cleaner: CleanerPolicy::CostBenefit,
            clean_below_free_segments: 16,
            clean_bytes_per_s: 64 << 20,
            reserve_segments: 4,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct EngineConfig {
    /// Identifies the set of pools that belong together.
    pub system_uuid: [u8; 16],
    /// Allocation and mapping unit (power of two).
    pub chunk_bytes: u64,
    /// Whether requests carry data (false in timing-only simulation).
    pub track_data: bool,
    pub pools: Vec<PoolConfig>,
    pub volumes: Vec<VolumeConfig>,
    /// The pool holding the volume table, journals and checkpoints.
    pub meta_pool: PoolId,
    /// Size of each volume's journal region.
    pub journal_bytes: u64,
    /// Background commit of journal records and release of freed space.
    pub commit_interval_ns: u64,
    /// Largest read or write accepted.
    pub max_request_bytes: u64,
    /// Tell devices about freed chunks (punch holes in pool files).
    pub discard_freed: bool,
    /// Whether a flush takes one of its pool's `queue_depth` slots while it runs. True for
    /// the simulator's drives (a disk's cache flush holds the drive); false in `serve`,
    /// where a flush is an `fdatasync` of a pool file and the kernel keeps taking reads and
    /// writes beside it: at an HDD pool's depth of 1 it would otherwise hold every request
    /// of the pool for the whole write-back (hundreds of ms under random writes).
    pub flush_takes_queue_slot: bool,
    pub tiering: TieringConfig,
    pub log: LogConfig,
    /// Which shard of the system this engine is (`shard.rs`); recorded in every slice's
    /// superblock, so a system is never mounted with another shard count.
    pub shard: crate::shard::id::ShardId,
    /// A shard reports its use of the budgets that span volumes (`budgets.rs`) for a
    /// driver that runs a `BudgetBroker`; off, each keeps `ShardPlan`'s fixed 1/N.
    pub budget_reports: bool,
    /// Shards share each pool's device by their volumes' weights and reservations
    /// (`device_share.rs`): they report their service per pool and take the driver's
    /// shares, gating dispatch by them. Off, each shard's scheduler orders only its own
    /// volumes (`shard_qos = "local"`).
    pub shard_qos: bool,
    /// A shard gives a borrowed run back once it has been wholly free at two looks this
    /// far apart and the shard keeps three low-water marks without it (`give_back.rs`);
    /// 0: borrowed space is kept.
    pub give_back_hold_ns: u64,
}

pub const DEFAULT_CHUNK_BYTES: u64 = 1 << 20;
pub const DEFAULT_JOURNAL_BYTES: u64 = 4 << 20;
pub const MAX_REQUEST_BYTES: u64 = 32 << 20;
pub const MAX_VOLUMES: usize = 200;
pub const MAX_POOLS: usize = 64;
pub const MAX_NAME_BYTES: usize = 63;
/// The largest size a volume may have or grow to (1 PiB: 16 GiB of tables at 1 MiB
/// chunks). The cache table's 35-bit logical chunk relies on it (2^34 chunks of 64 KiB).
pub const MAX_VOLUME_BYTES: u64 = 1 << 50;

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            system_uuid: [0; 16],
            chunk_bytes: DEFAULT_CHUNK_BYTES,
            track_data: true,
            pools: Vec::new(),
            volumes: Vec::new(),
            meta_pool: PoolId(0),
            journal_bytes: DEFAULT_JOURNAL_BYTES,
            commit_interval_ns: 1_000_000_000,
            max_request_bytes: MAX_REQUEST_BYTES,
            discard_freed: false,
            flush_takes_queue_slot: true,
            tiering: TieringConfig::default(),
            log: LogConfig::default(),
            shard: crate::shard::id::ShardId::default(),
            budget_reports: false,
            shard_qos: false,
            give_back_hold_ns: 1_000_000_000,
        }
    }
}

/// A configuration the engine cannot run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl EngineConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| Err(ConfigError(m));
        if !self.chunk_bytes.is_power_of_two()
            || self.chunk_bytes < 64 * 1024
            || self.chunk_bytes > 64 << 20
        {
            return err(format!(
                "chunk size {} must be a power of two between 64 KiB and 64 MiB",
                self.chunk_bytes
            ));
        }
        if self.pools.is_empty() {
            return err("at least one pool is needed".into());
        }
        if self.pools.len() > MAX_POOLS {
            return err(format!("at most {MAX_POOLS} pools are supported"));
        }
        if self.volumes.len() > MAX_VOLUMES {
            return err(format!("at most {MAX_VOLUMES} volumes are supported"));
        }
        if self.meta_pool.0 as usize >= self.pools.len() {
            return err("the metadata pool does not exist".into());
        }
        let sh = self.shard;
        if sh.count == 0 || sh.count > crate::shard::id::MAX_SHARDS || sh.index >= sh.count {
            return err(format!(
                "shard {} of {}: expected a count of 1..={} and an index below it",
                sh.index,
                sh.count,
                crate::shard::id::MAX_SHARDS
            ));
        }
        if self.journal_bytes < 64 * 1024 || !self.journal_bytes.is_multiple_of(4096) {
            return err("journal size must be a multiple of 4 KiB and at least 64 KiB".into());
        }
        for p in &self.pools {
            if let Err(e) = p.scheduler.build() {
                return err(format!("pool {}: {}", p.name, e.message));
            }
            if p.write_buffer.is_some_and(|w| w.size_bytes < 64 << 10) {
                return err(format!(
                    "pool {}: write_buffer must be at least 64k",
                    p.name
                ));
            }
        }
        self.log.check(self.chunk_bytes).map_err(ConfigError)?;
        let mut names = std::collections::BTreeSet::new();
        for p in &self.pools {
            if p.name.is_empty() || p.name.len() > MAX_NAME_BYTES || !names.insert(p.name.clone()) {
                return err(format!(
                    "pool name {:?} is empty, too long or repeated",
                    p.name
                ));
            }
            let min = crate::layout::offsets::DATA_START_BYTES + 4 * self.chunk_bytes;
            if p.capacity_bytes < min {
                return err(format!(
                    "pool {} is too small ({} bytes, need at least {min})",
                    p.name, p.capacity_bytes
                ));
            }
            if p.queue_depth == 0 || p.queue_depth > 4096 {
                return err(format!("pool {}: queue depth must be 1..=4096", p.name));
            }
        }
        names.clear();
        for v in &self.volumes {
            if !names.insert(v.name.clone()) {
                return err(format!("volume name {:?} is repeated", v.name));
            }
            v.check(self.pools.len()).map_err(ConfigError)?;
        }
        Ok(())
    }

    pub fn pool_index(&self, name: &str) -> Option<PoolId> {
        self.pools
            .iter()
            .position(|p| p.name == name)
            .map(|i| PoolId(i as u16))
    }
}
