//! Tests' device: a closed loop over a workload on a device that takes 1 ms per read or
//! write and 3 ms per FLUSH, completing in order of completion time and honouring
//! not-before times.

use crate::{WlKind, WlRequest, Workload};

/// Run `w` to its end: (issue time, request) for every request, and when the last ended.
pub(crate) fn run(w: &mut dyn Workload) -> (Vec<(u64, WlRequest)>, u64) {
    let mut out = Vec::new();
    // (completion time, index)
    let mut inflight: Vec<(u64, u64)> = Vec::new();
    let mut now = 0;
    loop {
        while (inflight.len() as u32) < w.depth() && w.ready(now) {
            let Some(r) = w.next(now) else {
                assert!(inflight.is_empty(), "finished with requests in flight");
                return (out, now);
            };
            let start = r.at_ns.unwrap_or(0).max(now);
            let took = if r.kind == WlKind::Flush {
                3_000_000
            } else {
                1_000_000
            };
            inflight.push((start + took, out.len() as u64));
            out.push((start, r));
        }
        assert!(
            !inflight.is_empty(),
            "stuck: nothing in flight and not ready"
        );
        inflight.sort();
        let (t, i) = inflight.remove(0);
        now = t;
        w.completed(i, now);
    }
}
