//! `[[migration]]`: a live storage migration (seed 004) started at a simulated time.
//!
//! ```toml
//! [[migration]]
//! volume = "vm1"
//! to = "ssd"
//! at_s = 2.0            # seconds after the workloads start (default 0)
//! scheme = "lr"         # dbt, mirror, lr, slr, aio or auto (default auto)
//! rate_mb_s = 100       # copy rate cap in MB/s (default 64 MiB/s)
//! granularity = "64k"   # DBT's dirty-tracking unit
//! buffer = "1m"         # largest single copy operation
//! dbt_max_passes = 8
//! aio_threshold = 100
//! aio_delay_us = 1000
//! gamma = 0.5           # wear against I/O performance, for `auto` and the cost
//! copy_priority = "background"  # or "equal": the copy queues with the VM's I/O (seed 004's)
//! copy_window_chunks = 16       # DBT's dirty copies in flight, 1 to 64 (1: seed 004's)
//! coalesce_runs = 4             # DBT copies a chunk whole from this many dirty runs (0: never;
//!                               # default 4 into an HDD, 0 into an SSD)
//! ```
//! The engine checks the rest (thin, pinned volumes; granularity a divisor of the chunk)
//! when the migration starts; a refusal fails the run with its reason.

use serde::Deserialize;
use tiervisor_conf::{SizeVal, Source, Spanned};
use tiervisor_engine::PoolId;
use tiervisor_engine::jobs::migrate::{
    CopyPriority, MAX_COALESCE_RUNS, MAX_COPY_WINDOW_CHUNKS, MigrationParams, SchemeChoice,
};

use super::{PoolSpec, ScenarioError, VolumeSpec};

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMigration {
    volume: Spanned<String>,
    to: Spanned<String>,
    at_s: Option<Spanned<f64>>,
    scheme: Option<Spanned<String>>,
    rate_mb_s: Option<Spanned<f64>>,
    granularity: Option<Spanned<SizeVal>>,
    buffer: Option<Spanned<SizeVal>>,
    dbt_max_passes: Option<Spanned<u32>>,
    aio_threshold: Option<u32>,
    aio_delay_us: Option<u64>,
    gamma: Option<Spanned<f64>>,
    copy_priority: Option<Spanned<String>>,
    copy_window_chunks: Option<Spanned<u32>>,
    coalesce_runs: Option<Spanned<u32>>,
}

/// A migration the run starts.
#[derive(Clone, Debug)]
pub struct MigrationSpec {
    pub volume: usize,
    /// After the workloads start.
    pub at_ns: u64,
    pub params: MigrationParams,
}

fn unknown(what: &str, name: &str, known: impl Iterator<Item = String>) -> String {
    format!(
        "unknown {what} {name:?}; defined: {}",
        known.collect::<Vec<_>>().join(", ")
    )
}

pub(super) fn migration(
    cx: &Source,
    m: &RawMigration,
    pools: &[PoolSpec],
    volumes: &[VolumeSpec],
) -> Result<MigrationSpec, ScenarioError> {
    let Some(volume) = volumes.iter().position(|v| v.name == *m.volume.get_ref()) else {
        return cx.err(
            m.volume.span(),
            unknown(
                "volume",
                m.volume.get_ref(),
                volumes.iter().map(|v| v.name.clone()),
            ),
        );
    };
    let Some(to) = pools.iter().position(|p| p.name == *m.to.get_ref()) else {
        return cx.err(
            m.to.span(),
            unknown("pool", m.to.get_ref(), pools.iter().map(|p| p.name.clone())),
        );
    };
    let mut params = MigrationParams::new(PoolId(to as u16));
    if let Some(s) = &m.scheme {
        params.scheme = SchemeChoice::parse(s.get_ref()).or_else(|e| cx.err(s.span(), e))?;
    }
    let positive = |v: &Spanned<f64>, what: &str| -> Result<f64, ScenarioError> {
        match *v.get_ref() {
            x if x.is_finite() && x > 0.0 => Ok(x),
            _ => cx.err(v.span(), format!("{what}: expected a positive number")),
        }
    };
    if let Some(r) = &m.rate_mb_s {
        params.rate_bytes_per_s = (positive(r, "rate_mb_s")? * 1e6) as u64;
    }
    if let Some(g) = &m.granularity {
        params.granularity_bytes = cx.size(g, "granularity")?;
    }
    if let Some(b) = &m.buffer {
        params.buffer_bytes = cx.size(b, "buffer")?;
        if params.buffer_bytes == 0 || !params.buffer_bytes.is_multiple_of(512) {
            return cx.err(b.span(), "buffer: expected a positive multiple of 512");
        }
    }
    if let Some(p) = &m.dbt_max_passes {
        if *p.get_ref() == 0 {
            return cx.err(p.span(), "dbt_max_passes = 0: expected at least 1");
        }
        params.dbt_max_passes = *p.get_ref();
    }
    if let Some(t) = m.aio_threshold {
        params.aio_threshold = t;
    }
    if let Some(d) = m.aio_delay_us {
        params.aio_delay_ns = d.saturating_mul(1_000);
    }
    if let Some(g) = &m.gamma {
        match *g.get_ref() {
            x if (0.0..=1.0).contains(&x) => params.gamma = x,
            _ => return cx.err(g.span(), "gamma: expected 0 to 1"),
        }
    }
    if let Some(c) = &m.copy_priority {
        params.copy_priority = CopyPriority::parse(c.get_ref()).or_else(|e| cx.err(c.span(), e))?;
    }
    if let Some(w) = &m.copy_window_chunks {
        let max = MAX_COPY_WINDOW_CHUNKS;
        if !(1..=max).contains(w.get_ref()) {
            return cx.err(
                w.span(),
                format!("copy_window_chunks = {}: expected 1 to {max}", w.get_ref()),
            );
        }
        params.copy_window_chunks = *w.get_ref();
    }
    if let Some(n) = &m.coalesce_runs {
        if *n.get_ref() > MAX_COALESCE_RUNS {
            return cx.err(
                n.span(),
                format!(
                    "coalesce_runs = {}: expected 0 (never) to {MAX_COALESCE_RUNS}",
                    n.get_ref()
                ),
            );
        }
        params.coalesce_runs = Some(*n.get_ref());
    }
    let at_ns = match &m.at_s {
        Some(a) if !(a.get_ref().is_finite() && *a.get_ref() >= 0.0) => {
            return cx.err(a.span(), "at_s: expected 0 or a positive number of seconds");
        }
        Some(a) => (a.get_ref() * 1e9) as u64,
        None => 0,
    };
    Ok(MigrationSpec {
        volume,
        at_ns,
        params,
    })
}
