//! The `[log]` table (log-structured write path), shared by scenarios and server
//! configurations. Whether a pool or volume logs is its own `log = true/false` key.

use serde::Deserialize;
use tiervisor_engine::{CleanerPolicy, LogConfig, LogMode};
use toml::Spanned;

use crate::{ConfError, SizeVal, Source};

/// `[log]` as written; every key optional (defaults: [`LogConfig::default`]).
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct LogToml {
    mode: Option<Spanned<String>>,
    segment: Option<Spanned<SizeVal>>,
    threshold: Option<Spanned<SizeVal>>,
    append: Option<Spanned<SizeVal>>,
    appends_in_flight: Option<u32>,
    gather_us: Option<u64>,
    cleaner: Option<Spanned<String>>,
    clean_below_free_segments: Option<u64>,
    clean_bytes_per_s: Option<Spanned<SizeVal>>,
    reserve_segments: Option<u64>,
}

impl LogToml {
    pub fn resolve(t: Option<&LogToml>, src: &Source) -> Result<LogConfig, ConfError> {
        let d = LogConfig::default();
        let Some(t) = t else { return Ok(d) };
        let size = |v: &Option<Spanned<SizeVal>>, what: &str, dflt: u64| match v {
            Some(b) => src.size(b, what),
            None => Ok(dflt),
        };
        let cleaner = match &t.cleaner {
            Some(c) => CleanerPolicy::parse(c.get_ref()).ok_or_else(|| {
                src.error(
                    c.span(),
                    format!(
                        "unknown cleaner {:?}; expected \"greedy\" or \"cost-benefit\"",
                        c.get_ref()
                    ),
                )
            })?,
            None => d.cleaner,
        };
        let mode = match &t.mode {
            Some(m) => LogMode::parse(m.get_ref()).ok_or_else(|| {
                src.error(
                    m.span(),
                    format!(
                        "unknown log mode {:?}; expected \"gather\" (tiervisor's log) or \"bitvisor\" (seed 002's write-through redirection)",
                        m.get_ref()
                    ),
                )
            })?,
            None => d.mode,
        };
        Ok(LogConfig {
            mode,
            segment_bytes: size(&t.segment, "segment", d.segment_bytes)?,
            threshold_bytes: size(&t.threshold, "threshold", d.threshold_bytes)?,
            append_bytes: size(&t.append, "append", d.append_bytes)?,
            appends_in_flight: t.appends_in_flight.unwrap_or(d.appends_in_flight),
            gather_ns: t
                .gather_us
                .map_or(d.gather_ns, |us| us.saturating_mul(1000)),
            cleaner,
            clean_below_free_segments: t
                .clean_below_free_segments
                .unwrap_or(d.clean_below_free_segments),
            reserve_segments: t.reserve_segments.unwrap_or(d.reserve_segments),
            clean_bytes_per_s: size(
                &t.clean_bytes_per_s,
                "clean_bytes_per_s",
                d.clean_bytes_per_s,
            )?,
        })
    }
}
