//! Requests sorted by sector with their arrival order beside: the building block of the
//! schedulers that sweep the disk (deadline's batches, CFQ's and BFQ's per-queue order,
//! CATS's writes and its READDELAY sweep).

use std::collections::BTreeMap;

use super::api::QueuedOp;

#[derive(Default)]
pub(super) struct SortedQueue {
    /// (offset, key) -> op: the sweep order; keys break ties so equal offsets coexist.
    by_pos: BTreeMap<(u64, usize), QueuedOp>,
    /// (arrival, key) -> offset: the age order.
    by_arrival: BTreeMap<(u64, usize), u64>,
}

impl SortedQueue {
    pub fn insert(&mut self, op: QueuedOp) {
        self.by_pos.insert((op.offset_bytes, op.key), op);
        self.by_arrival
            .insert((op.arrival_ns, op.key), op.offset_bytes);
    }

    pub fn remove(&mut self, op: &QueuedOp) -> bool {
        let had = self.by_pos.remove(&(op.offset_bytes, op.key)).is_some();
        self.by_arrival.remove(&(op.arrival_ns, op.key));
        had
    }

    pub fn is_empty(&self) -> bool {
        self.by_pos.is_empty()
    }

    /// The request that arrived first.
    pub fn oldest(&self) -> Option<QueuedOp> {
        let (&(_, key), &off) = self.by_arrival.iter().next()?;
        self.by_pos.get(&(off, key)).copied()
    }

    /// The first request at or after `pos_bytes` in sector order, if any (no wrap).
    pub fn at_or_after(&self, pos_bytes: u64) -> Option<QueuedOp> {
        self.by_pos
            .range((pos_bytes, 0)..)
            .next()
            .map(|(_, op)| *op)
    }

    /// Every request, in sector order.
    pub fn iter(&self) -> impl Iterator<Item = &QueuedOp> {
        self.by_pos.values()
    }

    /// Circular scan: the next request at or after `pos_bytes`, else the lowest one.
    pub fn cscan_from(&self, pos_bytes: u64) -> Option<QueuedOp> {
        self.at_or_after(pos_bytes)
            .or_else(|| self.by_pos.values().next().copied())
    }
}

#[cfg(test)]
pub(super) mod testing {
    //! Helpers the scheduler tests share.
    use super::super::api::{Dispatch, QueuedOp, Scheduler};
    use crate::types::{IoClass, IoContext};

    pub fn op(key: usize, sector: u64, is_write: bool, volume: u32, arrival_ns: u64) -> QueuedOp {
        QueuedOp {
            key,
            offset_bytes: sector * 512,
            len_bytes: 4096,
            is_write,
            class: IoClass::Foreground,
            volume,
            context: IoContext::Volume,
            arrival_ns,
        }
    }

    /// A read of 4 KiB by process `process` of `volume`.
    pub fn read_by(
        key: usize,
        sector: u64,
        volume: u32,
        process: u32,
        arrival_ns: u64,
    ) -> QueuedOp {
        QueuedOp {
            context: IoContext::Client(process),
            ..op(key, sector, false, volume, arrival_ns)
        }
    }

    /// A device serving one request at a time in `service_ns`, with `arrivals` (time, op)
    /// added as time passes, until `end_ns` or nothing is left. Returns (dispatch time, op).
    pub fn run_serial(
        s: &mut dyn Scheduler,
        service_ns: u64,
        mut arrivals: Vec<(u64, QueuedOp)>,
        end_ns: u64,
    ) -> Vec<(u64, QueuedOp)> {
        // Popped from the end: latest last, and in the given order among equal times.
        arrivals.reverse();
        arrivals.sort_by_key(|a| std::cmp::Reverse(a.0));
        let mut now = 0;
        let mut out = Vec::new();
        while now < end_ns {
            while arrivals.last().is_some_and(|a| a.0 <= now) {
                let (_, op) = arrivals.pop().expect("checked");
                s.add(now, op);
            }
            let next_arrival = arrivals.last().map(|a| a.0);
            match s.dispatch(now) {
                Dispatch::Op(o) => {
                    out.push((now, o));
                    now += service_ns;
                    // Arrivals during the service are seen before the completion.
                    while arrivals.last().is_some_and(|a| a.0 <= now) {
                        let (t, op) = arrivals.pop().expect("checked");
                        s.add(t, op);
                    }
                    s.completed(now, &o);
                }
                Dispatch::WaitUntil(t) => {
                    now = next_arrival.map_or(t, |a| a.min(t)).max(now + 1);
                }
                Dispatch::Idle => match next_arrival {
                    Some(a) => now = a,
                    None => break,
                },
            }
        }
        out
    }

    /// Drain everything dispatchable at `now` (completing each at once).
    pub fn drain(s: &mut dyn Scheduler, now: u64) -> Vec<QueuedOp> {
        let mut out = Vec::new();
        while let Dispatch::Op(o) = s.dispatch(now) {
            s.completed(now, &o);
            out.push(o);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::testing::op;
    use super::*;

    #[test]
    fn cscan_wraps_and_oldest_tracks_arrival() {
        let mut q = SortedQueue::default();
        q.insert(op(1, 50, false, 0, 30));
        q.insert(op(2, 10, false, 0, 10));
        q.insert(op(3, 90, false, 0, 20));
        assert_eq!(q.oldest().map(|o| o.key), Some(2));
        assert_eq!(q.cscan_from(60 * 512).map(|o| o.key), Some(3));
        assert!(q.remove(&op(3, 90, false, 0, 20)));
        assert_eq!(q.cscan_from(95 * 512).map(|o| o.key), Some(2));
        assert!(q.remove(&op(2, 10, false, 0, 10)));
        assert_eq!(q.oldest().map(|o| o.key), Some(1));
        assert!(!q.is_empty());
    }
}
