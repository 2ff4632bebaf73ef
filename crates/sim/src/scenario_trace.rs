//! A `[[vm]]` that replays a trace: the reading options (format, blkparse event, block
//! size, assumed operation, tick spreading) and the replay mode, checked against what the
//! trace carries (an address-only trace has no times to replay).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use tiervisor_conf::{Source, Spanned};
use tiervisor_workload::trace::{AssumeOp, BlkEvent, LoadOptions};
use tiervisor_workload::{ReplayMode, Trace, TraceFormat};

use super::{RawVm, ScenarioError, WorkloadSpec, at_least_one};

/// Traces already read, by path and reading options, shared by the VMs that replay them.
pub(super) type TraceCache = BTreeMap<String, Arc<Trace>>;

fn options(cx: &Source, vm: &RawVm) -> Result<LoadOptions, ScenarioError> {
    let format = match &vm.format {
        Some(f) => Some(TraceFormat::from_name(f.get_ref()).or_else(|m| cx.err(f.span(), m))?),
        None => None,
    };
    let blkparse_event = match &vm.event {
        Some(e) => BlkEvent::parse(e.get_ref()).map_or_else(
            || {
                cx.err(
                    e.span(),
                    format!(
                        "event {:?}: expected \"D\" (issued) or \"Q\" (queued)",
                        e.get_ref()
                    ),
                )
            },
            Ok,
        )?,
        None => BlkEvent::default(),
    };
    let block_size_bytes = match &vm.block_size {
        Some(b) => Some(cx.size(b, "block_size")?)
            .filter(|b| *b > 0)
            .map_or_else(
                || cx.err(b.span(), "block_size: expected a positive size"),
                |b| Ok(Some(b)),
            )?,
        None => None,
    };
    let assume_op = match &vm.assume_op {
        Some(a) => Some(
            AssumeOp::parse(a.get_ref(), vm.assume_seed.unwrap_or(1))
                .or_else(|m| cx.err(a.span(), m))?,
        ),
        None => None,
    };
    Ok(LoadOptions {
        format,
        blkparse_event,
        block_size_bytes,
        assume_op,
        spread_ticks: vm.spread_ticks.unwrap_or(false),
    })
}

fn mode(cx: &Source, vm: &RawVm) -> Result<ReplayMode, ScenarioError> {
    let positive = |v: Option<&Spanned<f64>>, what: &str, default: Option<f64>| match (
        v.map(|s| *s.get_ref()).or(default),
        v,
    ) {
        (Some(x), _) if x.is_finite() && x > 0.0 => Ok(x),
        (_, s) => cx.err(
            s.map_or(vm.mode.as_ref().map_or(0..0, |m| m.span()), |s| s.span()),
            format!("{what}: expected a positive number"),
        ),
    };
    match vm.mode.as_ref().map(|m| m.get_ref().as_str()) {
        None | Some("closed") => Ok(ReplayMode::Closed {
            depth: at_least_one(cx, vm.depth.as_ref(), "depth")?,
        }),
        Some("timed") => Ok(ReplayMode::Timed {
            speed: positive(vm.speed.as_ref(), "speed", Some(1.0))?,
        }),
        Some("rate") => Ok(ReplayMode::Rate {
            iops: positive(vm.iops.as_ref(), "iops (mode = \"rate\" needs one)", None)?,
        }),
        Some(o) => cx.err(
            vm.mode.as_ref().map_or(0..0, |m| m.span()),
            format!("mode {o:?}: expected \"closed\", \"timed\" or \"rate\""),
        ),
    }
}

/// The workload of a VM whose `trace` key is `t`.
pub(super) fn trace_vm(
    cx: &Source,
    base: &Path,
    vm: &RawVm,
    t: &Spanned<String>,
    cache: &mut TraceCache,
) -> Result<WorkloadSpec, ScenarioError> {
    let path = base.join(t.get_ref());
    let opts = options(cx, vm)?;
    if !path.exists() {
        return cx.err(t.span(), format!("trace {} does not exist", path.display()));
    }
    let key = format!("{}\u{0}{opts:?}", path.display());
    let trace = match cache.get(&key) {
        Some(tr) => tr.clone(),
        None => {
            let tr = Arc::new(Trace::load_with(&path, &opts)?);
            cache.insert(key, tr.clone());
            tr
        }
    };
    let mode = mode(cx, vm)?;
    trace
        .check_mode(mode)
        .or_else(|m| cx.err(vm.mode.as_ref().map_or(t.span(), |m| m.span()), m))?;
    Ok(WorkloadSpec::Trace {
        trace,
        devices: vm.devices.clone().unwrap_or_default(),
        mode,
        repeat: at_least_one(cx, vm.repeat.as_ref(), "repeat")?,
    })
}
