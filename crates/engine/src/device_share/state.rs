//! The device shares' state, apart from the engine's glue in `device_share.rs`: the
//! share and gate of one pool on one shard and what a shard reports, as plain data the
//! event types and the broker can name without the engine (issue 11's import cycle).

use std::collections::BTreeSet;

/// How late a dispatch may be and the gate still follow its ideal schedule: a server's
/// loop wakes a millisecond or more after the time asked for, and a gate at thousands of
/// operations per second that counted from each late wake would lose most of its rate
/// (a page-cached pool gated at 7,000 IOPS passed 700 through `serve`). mClock's limit
/// has the same grace, for the same reason (`sched/mclock.rs`).
const LATE_GRACE_NS: u64 = 10_000_000;

/// A pool's share of its device given to one shard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceShare {
    /// The shard's share of the device, in millionths (the shards' shares of a pool sum
    /// to exactly 1,000,000).
    pub share_ppm: u32,
    /// What its gate lets through, in operations per second; 0: open.
    pub gate_iops: u32,
}

/// What one shard's volumes asked of and got from one pool in a report's interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolService {
    /// Sum of the weights of the volumes that queued work while the scheduler had a
    /// backlog (0: the shard got all it asked for).
    pub active_weight: u64,
    /// Sum of those volumes' reservations, in IOPS.
    pub reserved_iops: u64,
    /// Operations the device completed for the shard (flushes not counted).
    pub served: u64,
}

impl PoolService {
    pub fn active(&self) -> bool {
        self.active_weight > 0 || self.served > 0
    }
}

/// One pool's gate and service meter on one shard.
#[derive(Default)]
pub(crate) struct PoolShare {
    share: DeviceShare,
    /// GCRA's theoretical arrival time of the next operation (engine ns).
    tat_ns: u64,
    /// Operations the gate let through at once beyond the rate (the pool's depth).
    burst: u32,
    /// Since the last report: the scheduler still held work when dispatch stopped.
    backlogged: bool,
    /// Since the last report: volumes that queued foreground work.
    queued_by: BTreeSet<u32>,
    served: u64,
    /// Times dispatch stopped at the gate, since start.
    pub(crate) gate_waits: u64,
}

impl PoolShare {
    pub(crate) fn new(queue_depth: u32) -> PoolShare {
        PoolShare {
            burst: queue_depth.max(1),
            ..PoolShare::default()
        }
    }

    pub(crate) fn share(&self) -> DeviceShare {
        self.share
    }

    fn interval_ns(&self) -> u64 {
        1_000_000_000 / u64::from(self.share.gate_iops.max(1))
    }

    /// A new share from the broker, in force for the next dispatch. The bucket keeps
    /// what it owed, but never more than one interval of the new rate ahead of now.
    pub(crate) fn set(&mut self, now: u64, s: DeviceShare) {
        self.share = s;
        if s.gate_iops > 0 {
            self.tat_ns = self.tat_ns.min(now + self.interval_ns());
        }
    }

    /// `None`: an operation may go now; `Some(t)`: not before `t`.
    pub(crate) fn closed_until(&self, now: u64) -> Option<u64> {
        if self.share.gate_iops == 0 {
            return None;
        }
        let tolerance = self.interval_ns() * u64::from(self.burst - 1);
        let earliest = self.tat_ns.saturating_sub(tolerance);
        (earliest > now).then_some(earliest)
    }

    /// An operation went through the gate: the next is due one interval later, counted
    /// from the ideal schedule while the pool is up to [`LATE_GRACE_NS`] behind it.
    pub(crate) fn take(&mut self, now: u64) {
        if self.share.gate_iops > 0 {
            let from = self.tat_ns.max(now.saturating_sub(LATE_GRACE_NS));
            self.tat_ns = from + self.interval_ns();
        }
    }

    /// Volume `volume` queued foreground work (engine-wide work is not counted: the
    /// caller leaves it out).
    pub(crate) fn queued(&mut self, volume: u32) {
        self.queued_by.insert(volume);
    }

    pub(crate) fn dispatch_stopped(&mut self, work_left: bool) {
        self.backlogged |= work_left;
    }

    pub(crate) fn completed(&mut self) {
        self.served += 1;
    }

    /// The interval's service, the meter reset for the next. `qos` gives a volume's
    /// (weight, reservation).
    pub(crate) fn report(&mut self, qos: impl Fn(u32) -> Option<(u32, u32)>) -> PoolService {
        let mut s = PoolService {
            served: std::mem::take(&mut self.served),
            ..PoolService::default()
        };
        let vols = std::mem::take(&mut self.queued_by);
        if std::mem::take(&mut self.backlogged) {
            for (w, r) in vols.into_iter().filter_map(qos) {
                s.active_weight += u64::from(w.max(1));
                s.reserved_iops += u64::from(r);
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_lets_its_rate_through_with_a_burst_of_the_depth() {
        let mut g = PoolShare::new(2);
        assert_eq!(g.closed_until(0), None, "open until the broker sets a rate");
        g.set(
            0,
            DeviceShare {
                share_ppm: 100_000,
                gate_iops: 10,
            },
        );
        // Two at once (the depth), then one per 100 ms.
        let mut went = Vec::new();
        let mut now = 0;
        while went.len() < 5 {
            match g.closed_until(now) {
                None => {
                    g.take(now);
                    went.push(now / 1_000_000);
                }
                Some(t) => now = t,
            }
        }
        assert_eq!(went, vec![0, 0, 100, 200, 300]);
        // A pool whose loop wakes 4.5 ms late (at 6.5 ms instead of 2 ms) catches up at
        // once on what the ideal schedule had for 2, 3, 4, 5 and 6 ms, within the 10 ms
        // grace, so the rate loses nothing; the next is due at 7 ms.
        let mut g = PoolShare::new(1);
        g.set(
            0,
            DeviceShare {
                share_ppm: 100_000,
                gate_iops: 1_000,
            },
        );
        g.take(0);
        assert_eq!(g.closed_until(0), Some(1_000_000));
        g.take(1_000_000);
        let now = 6_500_000;
        let mut at_once = 0;
        while g.closed_until(now).is_none() {
            g.take(now);
            at_once += 1;
        }
        assert_eq!(at_once, 5);
        assert_eq!(g.closed_until(now), Some(7_000_000));
        // Opened: at once.
        g.set(now, DeviceShare::default());
        assert_eq!(g.closed_until(now), None);
    }

    #[test]
    fn a_report_counts_weights_only_with_a_backlog() {
        let mut g = PoolShare::new(1);
        let qos = |v: u32| Some((v * 10, v));
        g.queued(1);
        g.queued(2);
        g.queued(2);
        g.completed();
        g.dispatch_stopped(false);
        let r = g.report(qos);
        assert_eq!((r.active_weight, r.served), (0, 1), "got all it asked");
        g.queued(1);
        g.queued(2);
        g.dispatch_stopped(true);
        let r = g.report(qos);
        assert_eq!((r.active_weight, r.reserved_iops, r.served), (30, 3, 0));
        assert_eq!(g.report(qos), PoolService::default(), "reset by a report");
    }
}
