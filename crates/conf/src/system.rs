//! The system specification scenarios and server configurations share: engine-wide keys,
//! pools and volumes. Each driver reads its own file and keeps its own parts beside this
//! (a scenario: device models, workloads; a server config: paths, sockets), hands the
//! shared keys here, and gets one [`EngineConfig`] back, so a scenario and a server config
//! that say the same thing build the same engine, with the same defaults and checks.

use std::ops::Range;

use tiervisor_engine::config::{DEFAULT_CHUNK_BYTES, DEFAULT_JOURNAL_BYTES};
use tiervisor_engine::wbuf::WriteBufferConfig;
use tiervisor_engine::{
    EngineConfig, Medium, Placement, PoolConfig, PoolId, Provisioning, VolumeConfig,
};
use toml::Spanned;

use crate::sched::{QosKeys, qos, scheduler};
use crate::volume::{PlacementKeys, fast_pool, placement, pool_named, provisioning};
use crate::{ConfError, LogToml, SizeVal, Source, Switch, TieringToml};

/// Operations kept outstanding on a device unless `queue_depth` says otherwise: one on a
/// disk, so the engine's scheduler (not the drive) orders the seeks; 32 on an SSD.
pub fn default_queue_depth(medium: Medium) -> u32 {
    match medium {
        Medium::Hdd => 1,
        Medium::Ssd => 32,
    }
}

/// Volumes are thin unless they say `provisioning = "thick"`.
pub const DEFAULT_PROVISIONING: Provisioning = Provisioning::Thin;

/// Engine-wide keys as written.
#[derive(Default)]
pub struct EngineKeys<'a> {
    pub chunk: Option<&'a Spanned<SizeVal>>,
    pub journal: Option<&'a Spanned<SizeVal>>,
    pub commit_interval_ms: Option<&'a Spanned<u64>>,
    pub metadata_pool: Option<&'a Spanned<String>>,
    /// Tell devices about freed chunks (hole punching in pool files). Default on.
    pub discard: Option<Switch>,
    pub tiering: Option<&'a TieringToml>,
    pub log: Option<&'a LogToml>,
    /// How shards share the budgets that span volumes: `"demand"` (default) or `"fixed"`.
    pub shard_budgets: Option<&'a Spanned<String>>,
    /// How shards share a pool's device under a weighted scheduler: `"pool"` (default)
    /// or `"local"`.
    pub shard_qos: Option<&'a Spanned<String>>,
    /// How long a shard holds a wholly free borrowed run before giving it back, in ms
    /// (`engine::give_back`); 0 keeps borrowed space.
    pub give_back_hold_ms: Option<&'a Spanned<u64>>,
}

/// One pool's shared keys. The driver says what medium and capacity the pool has (from
/// `kind` and `size`, or from a device model).
pub struct PoolKeys<'a> {
    pub name: &'a Spanned<String>,
    pub medium: Medium,
    /// Bytes and where they were written (the name's span if they come from a model);
    /// `None` when the device reports its own size at start (block devices).
    pub capacity: Option<(u64, Range<usize>)>,
    pub queue_depth: Option<&'a Spanned<u32>>,
    pub scheduler: Option<&'a Spanned<toml::Value>>,
    pub throttle: Option<&'a Spanned<toml::Value>>,
    pub log: Option<Switch>,
    /// The host write-back buffer's size (`"256m"`; 0 or absent: none).
    pub write_buffer: Option<&'a Spanned<SizeVal>>,
}

/// One volume's shared keys.
pub struct VolumeKeys<'a> {
    pub name: &'a Spanned<String>,
    pub size: &'a Spanned<SizeVal>,
    pub pool: &'a Spanned<String>,
    pub provisioning: Option<&'a Spanned<String>>,
    pub placement: Option<&'a Spanned<String>>,
    pub fast_pool: Option<&'a Spanned<String>>,
    pub fast_percent: Option<&'a Spanned<u8>>,
    pub fast_budget: Option<&'a Spanned<SizeVal>>,
    pub priority: Option<u8>,
    pub cache_policy: Option<&'a Spanned<String>>,
    pub log: Option<Switch>,
    pub reservation_iops: Option<&'a Spanned<u32>>,
    pub limit_iops: Option<&'a Spanned<u32>>,
    pub weight: Option<&'a Spanned<u32>>,
}

/// The smallest pool the engine can hold a volume table, journals and data in.
pub fn min_pool_bytes(chunk_bytes: u64) -> u64 {
    (16 << 20u64).max((2 << 20) + 8 * chunk_bytes)
}

/// Resolve the shared keys into the engine's configuration. `system_uuid` is zero and
/// `track_data` true: drivers set those (the simulator runs timing only). Pools whose
/// capacity the device reports get 0 until the driver fills it in.
pub fn resolve(
    src: &Source,
    engine: EngineKeys,
    pools: &[PoolKeys],
    volumes: &[VolumeKeys],
) -> Result<EngineConfig, ConfError> {
    let chunk_bytes = match engine.chunk {
        Some(c) => {
            let v = src.size(c, "chunk")?;
            if !v.is_power_of_two() || !(64 << 10..=64 << 20).contains(&v) {
                return src.err(
                    c.span(),
                    "chunk: expected a power of two between 64k and 64m",
                );
            }
            v
        }
        None => DEFAULT_CHUNK_BYTES,
    };
    let journal_bytes = match engine.journal {
        Some(j) => {
            let v = src.size(j, "journal")?;
            if v < 64 << 10 || v % 4096 != 0 {
                return src.err(j.span(), "journal: expected a multiple of 4k, at least 64k");
            }
            v
        }
        None => DEFAULT_JOURNAL_BYTES,
    };
    let commit_interval_ns = match engine.commit_interval_ms {
        Some(m) if !(1..=3_600_000).contains(m.get_ref()) => {
            return src.err(
                m.span(),
                "commit_interval_ms: expected 1 to 3600000 (one hour)",
            );
        }
        Some(m) => m.get_ref() * 1_000_000,
        None => 1_000_000_000,
    };
    // Demand: a broker moves the write buffer and the tier and cleaner bandwidth to the
    // shards that use them (engine::budget_broker); fixed: 1/N each, for comparison.
    let budget_reports = match engine.shard_budgets {
        None => true,
        Some(s) => match s.get_ref().as_str() {
            "demand" => true,
            "fixed" => false,
            o => {
                return src.err(
                    s.span(),
                    format!("shard_budgets {o:?}: expected \"demand\" or \"fixed\""),
                );
            }
        },
    };
    // Pool: a broker gives each shard a share of every pool's device by its volumes'
    // weights and reservations (engine::device_share); local: each shard's scheduler
    // orders only its own volumes and the device serves the shards as they come.
    let shard_qos = match engine.shard_qos {
        None => true,
        Some(s) => match s.get_ref().as_str() {
            "pool" => true,
            "local" => false,
            o => {
                return src.err(
                    s.span(),
                    format!("shard_qos {o:?}: expected \"pool\" or \"local\""),
                );
            }
        },
    };
    let give_back_hold_ns = match engine.give_back_hold_ms {
        Some(m) if *m.get_ref() > 3_600_000 => {
            return src.err(
                m.span(),
                "give_back_hold_ms: expected 0 (keep borrowed space) to 3600000 (one hour)",
            );
        }
        Some(m) => m.get_ref() * 1_000_000,
        None => EngineConfig::default().give_back_hold_ns,
    };
    let mut pool_cfgs: Vec<PoolConfig> = Vec::with_capacity(pools.len());
    for p in pools {
        pool_cfgs.push(pool(src, p, chunk_bytes, &pool_cfgs)?);
    }
    if pool_cfgs.is_empty() {
        return Err(ConfError::at(src.file, 1, "expected at least one [[pool]]"));
    }
    let names: Vec<&str> = pool_cfgs.iter().map(|p| p.name.as_str()).collect();
    let meta_pool = match engine.metadata_pool {
        Some(m) => pool_named(src, m, &names)?,
        None => pool_cfgs
            .iter()
            .position(|p| p.medium == Medium::Ssd)
            .unwrap_or(0),
    };
    let mut vol_cfgs: Vec<VolumeConfig> = Vec::with_capacity(volumes.len());
    for v in volumes {
        let cfg = volume(src, v, &pool_cfgs)?;
        if vol_cfgs.iter().any(|w| w.name == cfg.name) {
            return src.err(
                v.name.span(),
                format!("volume {:?} is defined twice", cfg.name),
            );
        }
        vol_cfgs.push(cfg);
    }
    Ok(EngineConfig {
        system_uuid: [0; 16],
        chunk_bytes,
        track_data: true,
        pools: pool_cfgs,
        volumes: vol_cfgs,
        meta_pool: PoolId(meta_pool as u16),
        journal_bytes,
        commit_interval_ns,
        discard_freed: engine.discard.is_none_or(|d| d.0),
        tiering: TieringToml::resolve(engine.tiering, src)?,
        log: LogToml::resolve(engine.log, src)?,
        budget_reports,
        shard_qos,
        give_back_hold_ns,
        ..EngineConfig::default()
    })
}

fn pool(
    src: &Source,
    p: &PoolKeys,
    chunk_bytes: u64,
    before: &[PoolConfig],
) -> Result<PoolConfig, ConfError> {
    let name = p.name.get_ref().clone();
    if name.is_empty() || name.len() > 63 {
        return src.err(
            p.name.span(),
            format!("pool name {name:?}: expected 1 to 63 bytes"),
        );
    }
    if before.iter().any(|q| q.name == name) {
        return src.err(p.name.span(), format!("pool {name:?} is defined twice"));
    }
    if before.len() >= u16::MAX as usize {
        return src.err(p.name.span(), "too many pools (at most 65535)");
    }
    let capacity_bytes = match &p.capacity {
        Some((bytes, span)) => {
            let min = min_pool_bytes(chunk_bytes);
            if *bytes < min {
                return src.err(
                    span.clone(),
                    format!(
                        "pool {name:?}: expected at least {min} bytes (16 MiB, and 2 MiB plus 8 chunks)"
                    ),
                );
            }
            *bytes
        }
        None => 0,
    };
    let queue_depth = match p.queue_depth {
        Some(q) if !(1..=4096).contains(q.get_ref()) => {
            return src.err(q.span(), "queue_depth: expected 1 to 4096");
        }
        Some(q) => *q.get_ref(),
        None => default_queue_depth(p.medium),
    };
    Ok(PoolConfig {
        name,
        medium: p.medium,
        capacity_bytes,
        queue_depth,
        scheduler: scheduler(src, p.scheduler)?,
        log: p.log.is_some_and(|s| s.0),
        throttle: crate::throttle::throttle(src, p.throttle)?,
        write_buffer: write_buffer(src, p.write_buffer)?,
    })
}

/// The smallest write buffer: a few of the largest writes the engine absorbs.
const MIN_WRITE_BUFFER_BYTES: u64 = 1 << 20;

fn write_buffer(
    src: &Source,
    v: Option<&Spanned<SizeVal>>,
) -> Result<Option<WriteBufferConfig>, ConfError> {
    let Some(v) = v else { return Ok(None) };
    match src.size(v, "write_buffer")? {
        0 => Ok(None),
        n if n < MIN_WRITE_BUFFER_BYTES => src.err(
            v.span(),
            "write_buffer: expected 0 (off) or at least 1m, e.g. \"256m\"",
        ),
        n => Ok(Some(WriteBufferConfig {
            size_bytes: n,
            max_age_ns: WriteBufferConfig::DEFAULT_MAX_AGE_NS,
        })),
    }
}

fn volume(src: &Source, v: &VolumeKeys, pools: &[PoolConfig]) -> Result<VolumeConfig, ConfError> {
    let name = v.name.get_ref().clone();
    if name.is_empty() || name.len() > 63 || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return src.err(
            v.name.span(),
            format!("volume name {name:?}: expected 1 to 63 printable characters without spaces"),
        );
    }
    let size_bytes = src.size(v.size, "size")?;
    if size_bytes == 0 || size_bytes % 512 != 0 {
        return src.err(
            v.size.span(),
            "size: expected a positive multiple of 512 bytes",
        );
    }
    let names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
    let home = pool_named(src, v.pool, &names)?;
    let fast = fast_pool(src, v.fast_pool, &names, home, |i| {
        pools[i].medium == Medium::Ssd
    })?;
    let placement = placement(
        src,
        PlacementKeys {
            placement: v.placement,
            fast_percent: v.fast_percent,
            fast_budget: v.fast_budget,
            priority: v.priority,
            cache_policy: v.cache_policy,
        },
    )?;
    if placement != Placement::Pinned && fast.is_none_or(|f| f == home) {
        return src.err(
            v.name.span(),
            format!(
                "volume {name}: {} placement needs a fast_pool other than its own pool",
                placement.name()
            ),
        );
    }
    Ok(VolumeConfig {
        name,
        size_bytes,
        home_pool: PoolId(home as u16),
        fast_pool: fast.map(|f| PoolId(f as u16)),
        provisioning: provisioning(src, v.provisioning, DEFAULT_PROVISIONING)?,
        placement,
        log: v.log.map(|s| s.0),
        qos: qos(
            src,
            QosKeys {
                reservation_iops: v.reservation_iops,
                limit_iops: v.limit_iops,
                weight: v.weight,
            },
        )?,
    })
}
