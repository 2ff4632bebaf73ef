//! A `[[vm]]` with an `[vm.spc]` table: an imitation of one of seed 000's SPC traces
//! (crates/workload/src/spc.rs says what it copies and what not).
//!
//! ```toml
//! [vm.spc]
//! kind = "websearch"     # or "financial"
//! footprint = "256m"     # the data touched; default: the volume from `offset`
//! offset = "0"
//! reuse = 3.94           # total bytes / footprint; default the paper's (3.94, 4.61)
//! skew = 1.0             # zipf θ of re-accesses over 1 MiB regions; 0: uniform
//! streams = 4            # financial: interleaved sequential streams
//! depth = 1
//! ```

use serde::Deserialize;
use tiervisor_conf::{SizeVal, Source, Spanned};
use tiervisor_workload::{SpcJob, SpcKind};

use super::ScenarioError;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSpc {
    kind: Spanned<String>,
    footprint: Option<Spanned<SizeVal>>,
    offset: Option<Spanned<SizeVal>>,
    reuse: Option<Spanned<f64>>,
    skew: Option<Spanned<f64>>,
    streams: Option<Spanned<u32>>,
    depth: Option<Spanned<u32>>,
}

/// Validate an `[vm.spc]` table against a volume of `vol_bytes`.
pub(super) fn spc_job(cx: &Source, s: &RawSpc, vol_bytes: u64) -> Result<SpcJob, ScenarioError> {
    let Some(kind) = SpcKind::parse(s.kind.get_ref()) else {
        return cx.err(
            s.kind.span(),
            format!(
                "[vm.spc] kind {:?}: expected one of {}",
                s.kind.get_ref(),
                SpcKind::names()
            ),
        );
    };
    let offset_bytes = match &s.offset {
        Some(o) => cx.size(o, "offset")?,
        None => 0,
    };
    let footprint_bytes = match &s.footprint {
        Some(f) => cx.size(f, "footprint")?,
        None => vol_bytes.saturating_sub(offset_bytes),
    };
    if offset_bytes + footprint_bytes > vol_bytes
        || footprint_bytes < kind.min_footprint_bytes()
        || offset_bytes % 512 != 0
    {
        return cx.err(
            s.footprint.as_ref().map_or(s.kind.span(), |f| f.span()),
            format!(
                "[vm.spc] offset + footprint must lie inside the volume ({vol_bytes} bytes), the offset a multiple of 512 and the footprint at least {} bytes",
                kind.min_footprint_bytes()
            ),
        );
    }
    let number = |v: &Option<Spanned<f64>>, what: &str, ok: fn(f64) -> bool, expected: &str| match v
    {
        Some(x) if !(x.get_ref().is_finite() && ok(*x.get_ref())) => cx.err(
            x.span(),
            format!("[vm.spc] {what} = {}: expected {expected}", x.get_ref()),
        ),
        Some(x) => Ok(Some(*x.get_ref())),
        None => Ok(None),
    };
    let reuse = number(
        &s.reuse,
        "reuse",
        |x| (1.0..=1000.0).contains(&x),
        "1 to 1000 (total bytes over footprint)",
    )?
    .unwrap_or(kind.paper_reuse());
    let skew = number(
        &s.skew,
        "skew",
        |x| (0.0..=100.0).contains(&x),
        "a zipf θ from 0 (uniform) to 100",
    )?
    .unwrap_or(1.0);
    let positive = |v: &Option<Spanned<u32>>, what: &str| match v {
        Some(x) if *x.get_ref() == 0 => cx.err(
            x.span(),
            format!("[vm.spc] {what} = 0: expected at least 1"),
        ),
        Some(x) => Ok(*x.get_ref()),
        None => Ok(if what == "streams" { 4 } else { 1 }),
    };
    Ok(SpcJob {
        kind,
        offset_bytes,
        footprint_bytes,
        reuse,
        skew,
        streams: positive(&s.streams, "streams")?,
        depth: positive(&s.depth, "depth")?,
        seed: 0,
    })
}
