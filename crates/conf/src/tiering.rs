//! The `[tiering]` table, shared by scenarios and server configurations.

use serde::Deserialize;
use tiervisor_engine::TieringConfig;
use toml::Spanned;

use crate::{ConfError, SizeVal, Source};

/// `[tiering]` as written; every key optional (defaults: [`TieringConfig::default`]).
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct TieringToml {
    interval_ms: Option<u64>,
    max_moves: Option<u32>,
    bytes_per_s: Option<Spanned<SizeVal>>,
    decay_s: Option<f64>,
    promote_min_heat: Option<u32>,
    hysteresis_pct: Option<u32>,
    writeback_percent: Option<Spanned<u32>>,
    sequential_cutoff: Option<Spanned<SizeVal>>,
    keep_home: Option<bool>,
}

impl TieringToml {
    pub fn resolve(t: Option<&TieringToml>, src: &Source) -> Result<TieringConfig, ConfError> {
        let d = TieringConfig::default();
        let Some(t) = t else { return Ok(d) };
        Ok(TieringConfig {
            interval_ns: t
                .interval_ms
                .map_or(d.interval_ns, |m| m.max(1) * 1_000_000),
            max_moves: t.max_moves.unwrap_or(d.max_moves).max(1),
            bytes_per_s: match &t.bytes_per_s {
                Some(b) => src.size(b, "bytes_per_s")?,
                None => d.bytes_per_s,
            },
            decay_ns: t
                .decay_s
                .map_or(d.decay_ns, |x| (x.max(0.001) * 1e9) as u64),
            promote_min_heat: t.promote_min_heat.unwrap_or(d.promote_min_heat),
            hysteresis_pct: t.hysteresis_pct.unwrap_or(d.hysteresis_pct),
            writeback_percent: match &t.writeback_percent {
                Some(w) if *w.get_ref() > 100 => {
                    return src.err(w.span(), "writeback_percent: expected 0 to 100");
                }
                Some(w) => *w.get_ref(),
                None => d.writeback_percent,
            },
            sequential_cutoff_bytes: match &t.sequential_cutoff {
                Some(b) => src.size(b, "sequential_cutoff")?,
                None => d.sequential_cutoff_bytes,
            },
            keep_home: t.keep_home.unwrap_or(d.keep_home),
        })
    }
}
