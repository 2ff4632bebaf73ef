//! A `[[vm]]` with a `[vm.bench]` table: a block-level imitation of one of seed 004's
//! Table 7 benchmarks (crates/workload/src/bench says what each copies and what is ours).
//!
//! ```toml
//! [vm.bench]
//! kind = "dbench"        # or "iozone-write", "iozone-read", "kernel-compile"
//! procs = 16             # dbench clients, IOzone processes, make jobs; default 1
//! size = "1g"            # region; default the volume from `offset`
//! offset = "0"
//! record = "128k"        # IOzone: bytes per request (default 128k)
//! think_ms = 5.0         # kernel compile: mean CPU time per unit (default 5)
//! runtime_s = 30         # or ops = N (over all processes)
//! ```

use serde::Deserialize;
use tiervisor_conf::{SizeVal, Source, Spanned};
use tiervisor_workload::{BenchJob, BenchKind};

use super::ScenarioError;

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBench {
    kind: Spanned<String>,
    procs: Option<Spanned<u32>>,
    size: Option<Spanned<SizeVal>>,
    offset: Option<Spanned<SizeVal>>,
    record: Option<Spanned<SizeVal>>,
    think_ms: Option<Spanned<f64>>,
    ops: Option<Spanned<u64>>,
    runtime_s: Option<Spanned<f64>>,
}

/// Most processes a job runs (dbench's own limit is far above the paper's 16).
const MAX_PROCS: u32 = 1024;

/// Validate a `[vm.bench]` table against a volume of `vol_bytes`.
pub(super) fn bench_job(
    cx: &Source,
    b: &RawBench,
    vol_bytes: u64,
) -> Result<BenchJob, ScenarioError> {
    let Some(kind) = BenchKind::parse(b.kind.get_ref()) else {
        return cx.err(
            b.kind.span(),
            format!(
                "[vm.bench] kind {:?}: expected one of {}",
                b.kind.get_ref(),
                BenchKind::names()
            ),
        );
    };
    let procs = match &b.procs {
        Some(p) if !(1..=MAX_PROCS).contains(p.get_ref()) => {
            return cx.err(
                p.span(),
                format!(
                    "[vm.bench] procs = {}: expected 1 to {MAX_PROCS}",
                    p.get_ref()
                ),
            );
        }
        Some(p) => *p.get_ref(),
        None => kind.default_procs(),
    };
    let record_bytes = match &b.record {
        Some(r) => {
            let v = cx.size(r, "record")?;
            if v == 0 || v % 512 != 0 || v > 64 << 20 {
                return cx.err(
                    r.span(),
                    format!("[vm.bench] record = {v} bytes: expected a multiple of 512 up to 64m"),
                );
            }
            v
        }
        None => 128 << 10,
    };
    let offset_bytes = match &b.offset {
        Some(o) => cx.size(o, "offset")?,
        None => 0,
    };
    let size_bytes = match &b.size {
        Some(s) => cx.size(s, "size")?,
        None => vol_bytes.saturating_sub(offset_bytes),
    };
    let min = kind.min_size_bytes(procs, record_bytes);
    if offset_bytes
        .checked_add(size_bytes)
        .is_none_or(|e| e > vol_bytes)
        || size_bytes < min
        || offset_bytes % 4096 != 0
    {
        return cx.err(
            b.size.as_ref().map_or(b.kind.span(), |s| s.span()),
            format!(
                "[vm.bench] offset + size must lie inside the volume ({vol_bytes} bytes), the offset a multiple of 4096, and {} with {procs} process(es) needs at least {min} bytes",
                kind.name()
            ),
        );
    }
    let think_ns = match &b.think_ms {
        Some(t) if !(t.get_ref().is_finite() && (0.0..=60_000.0).contains(t.get_ref())) => {
            return cx.err(
                t.span(),
                format!(
                    "[vm.bench] think_ms = {}: expected 0 to 60000 milliseconds",
                    t.get_ref()
                ),
            );
        }
        Some(t) => (t.get_ref() * 1e6) as u64,
        None => 5_000_000,
    };
    let runtime_ns = match &b.runtime_s {
        Some(r) if !(r.get_ref().is_finite() && *r.get_ref() > 0.0) => {
            return cx.err(
                r.span(),
                format!(
                    "[vm.bench] runtime_s = {}: expected a positive number",
                    r.get_ref()
                ),
            );
        }
        Some(r) => Some((r.get_ref() * 1e9) as u64),
        None => None,
    };
    let ops = match &b.ops {
        Some(n) if *n.get_ref() == 0 => {
            return cx.err(n.span(), "[vm.bench] ops = 0: expected at least 1");
        }
        Some(n) => Some(*n.get_ref()),
        None => None,
    };
    if ops.is_none() && runtime_ns.is_none() {
        return cx.err(b.kind.span(), "[vm.bench] needs `ops` or `runtime_s`");
    }
    Ok(BenchJob {
        kind,
        offset_bytes,
        size_bytes,
        procs,
        record_bytes,
        think_ns,
        ops,
        runtime_ns,
        seed: 0,
    })
}

#[cfg(test)]
mod tests {
    use crate::scenario::WorkloadSpec;
    use crate::{Scenario, ScenarioError};

    fn parse(bench: &str) -> Result<Scenario, ScenarioError> {
        let text = format!(
            "seed = 7\n[[pool]]\nname = \"hdd\"\nmodel = \"hitachi-7k1000c\"\ncapacity = \"10g\"\n\
             [[volume]]\nname = \"v\"\npool = \"hdd\"\nsize = \"1g\"\n[[vm]]\nvolume = \"v\"\n\
             [vm.bench]\n{bench}"
        );
        Scenario::parse("s.toml", &text, std::path::Path::new("."))
    }

    #[test]
    fn bench_tables_parse_and_bad_values_name_the_line() {
        let s = parse("kind = \"dbench\"\nprocs = 16\nruntime_s = 10\n").unwrap();
        assert!(matches!(&s.vms[0].workload, WorkloadSpec::Bench(j)
            if j.procs == 16 && j.size_bytes == 1 << 30 && j.runtime_ns == Some(10_000_000_000)));
        let s =
            parse("kind = \"iozone-write\"\nrecord = \"64k\"\nsize = \"64m\"\nops = 5\n").unwrap();
        assert!(matches!(&s.vms[0].workload, WorkloadSpec::Bench(j)
            if j.record_bytes == 64 << 10 && j.ops == Some(5)));
        assert_eq!(s.touched_chunks(0).len(), 64);
        for (bad, what) in [
            ("kind = \"make\"\nops = 1\n", "kernel-compile"),
            ("kind = \"dbench\"\nprocs = 0\nops = 1\n", "procs = 0"),
            ("kind = \"dbench\"\nprocs = 2000\nops = 1\n", "procs = 2000"),
            (
                "kind = \"iozone-read\"\nrecord = \"1000\"\nops = 1\n",
                "record = 1000",
            ),
            (
                "kind = \"iozone-read\"\nsize = \"2g\"\nops = 1\n",
                "inside the volume",
            ),
            (
                "kind = \"dbench\"\nprocs = 1000\nsize = \"32m\"\nops = 1\n",
                "at least",
            ),
            (
                "kind = \"kernel-compile\"\nthink_ms = -1\nops = 1\n",
                "think_ms = -1",
            ),
            (
                "kind = \"kernel-compile\"\nruntime_s = 0\n",
                "runtime_s = 0",
            ),
            ("kind = \"kernel-compile\"\nops = 0\n", "ops = 0"),
            ("kind = \"kernel-compile\"\n", "needs `ops` or `runtime_s`"),
            ("kind = \"dbench\"\nops = 1\nclients = 4\n", "clients"),
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.file, "s.toml");
            assert!(e.line.is_some_and(|l| l >= 13), "{bad}: {e}");
            assert!(e.message.contains(what), "{bad}: {e}");
        }
    }
}
