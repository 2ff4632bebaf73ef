//! The real traces in ../shared/traces parse with the counts SOURCES.md gives.

mod common;

use tiervisor_workload::{Trace, TraceFormat};

#[test]
fn shared_traces_parse_with_documented_counts() {
    let Some(dir) = common::shared_traces() else {
        return;
    };
    let cases = [
        ("wsrch-small.trace.xz", TraceFormat::Disksim, 24_783, None),
        (
            "tpcc-small.trace.xz",
            TraceFormat::Disksim,
            6_999,
            Some((4_381, 2_618)),
        ),
        (
            "msr-cambridge1-sample.csv.xz",
            TraceFormat::Msr,
            1_000,
            Some((508, 492)),
        ),
    ];
    for (file, fmt, n, mix) in cases {
        let t = Trace::load(&dir.join(file), None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(t.format, fmt, "{file}");
        let i = t.info();
        assert_eq!(i.requests, n, "{file}");
        if let Some((r, w)) = mix {
            assert_eq!((i.reads, i.writes), (r, w), "{file}");
        }
    }
    let w = Trace::load(&dir.join("wsrch-small.trace.xz"), None)
        .unwrap()
        .info();
    assert!(w.read_fraction > 0.99);
    assert!((59.0..61.0).contains(&w.span_s), "span {}", w.span_s);
    let msr = Trace::load(&dir.join("msr-cambridge1-sample.csv.xz"), None)
        .unwrap()
        .info();
    assert!((120.0..135.0).contains(&msr.span_s), "span {}", msr.span_s);
}
