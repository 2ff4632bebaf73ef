//! Coarse timestamps: traces whose clock ticks far slower than requests arrive (many
//! records per distinct time) replay as bursts; spreading each tick's records evenly over
//! the tick is an option, never a default.

use super::TraceRecord;

/// Distinct arrival times of records sorted by time.
pub(crate) fn distinct(records: &[TraceRecord]) -> u64 {
    if records.is_empty() {
        return 0;
    }
    1 + records
        .windows(2)
        .filter(|w| w[1].arrival_ns != w[0].arrival_ns)
        .count() as u64
}

/// Give the records of each distinct time (sorted by time) evenly spaced times over the
/// gap to the next distinct time; the last group uses the median gap.
pub(crate) fn spread(records: &mut [TraceRecord]) {
    // (start index, time) of each group.
    let mut groups: Vec<(usize, u64)> = Vec::new();
    for (i, r) in records.iter().enumerate() {
        if groups.last().is_none_or(|g| g.1 != r.arrival_ns) {
            groups.push((i, r.arrival_ns));
        }
    }
    let mut gaps: Vec<u64> = groups.windows(2).map(|w| w[1].1 - w[0].1).collect();
    gaps.sort_unstable();
    let median_gap = gaps.get(gaps.len() / 2).copied().unwrap_or(0);
    for (g, &(start, t)) in groups.iter().enumerate() {
        let (end, gap) = match groups.get(g + 1) {
            Some(&(next, tn)) => (next, tn - t),
            None => (records.len(), median_gap),
        };
        let n = (end - start) as u64;
        for (k, r) in records[start..end].iter_mut().enumerate() {
            r.arrival_ns = t + (gap as u128 * k as u128 / n as u128) as u64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceOp;

    fn at(times: &[u64]) -> Vec<TraceRecord> {
        times
            .iter()
            .map(|&t| TraceRecord {
                arrival_ns: t,
                device: 0,
                offset_bytes: 0,
                len_bytes: 512,
                op: TraceOp::Read,
            })
            .collect()
    }

    #[test]
    fn each_tick_is_spread_evenly_and_order_kept() {
        let mut r = at(&[0, 0, 0, 0, 1000, 1000, 3000]);
        assert_eq!(distinct(&r), 3);
        spread(&mut r);
        let t: Vec<u64> = r.iter().map(|r| r.arrival_ns).collect();
        // Gaps 1000 and 2000: the median (index 1 of [1000, 2000]) is 2000.
        assert_eq!(t, vec![0, 250, 500, 750, 1000, 2000, 3000]);
        assert!(t.windows(2).all(|w| w[0] <= w[1]));
    }
}
