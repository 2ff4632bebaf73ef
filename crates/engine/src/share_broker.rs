//! The driver's side of QoS across shards (issue 12): each shard's share of each pool's
//! device. The `BudgetBroker` (`budget_broker.rs`) owns one and feeds it the shards'
//! demand reports, so the simulator's `Sharded` and the threaded server's front run it
//! without knowing it is there; its commands (`Control::SetDeviceShares`) travel with the
//! budget commands.
//!
//! **Policy**, per pool whose scheduler honours weights (`mclock`, `bfq`), from each
//! shard's last report (`device_share::PoolService`):
//! - A shard is *active* on the pool when it reported a backlog (work queued the device
//!   did not take) with the weights of the volumes that queued it. Idle shards keep a
//!   floor share, a quarter of an equal one.
//! - Active shards split the rest: reservations first (a shard whose volumes reserve 500
//!   IOPS of a pool serving 2,000 gets 0.25; scaled down together if they ask for more
//!   than there is), then the remainder by active weight, as mClock gives a volume its
//!   reservation plus its weight's part of what is left. Rounding's leftovers go to the
//!   largest share, so a pool's shares sum to exactly 1,000,000 ppm.
//! - The *pool's rate* is what the device served the shards per second (each shard's
//!   last report). A shard's gate is its share of that rate (at least
//!   [`MIN_GATE_IOPS`]), except the largest share's, which stays open: that shard takes
//!   whatever the others leave, so the device is never idle while it has work (a gate
//!   on every shard would cap the sum at the measured rate and the measured rate would
//!   only ever fall). With fewer than two active shards no gate is set at all: nobody
//!   waits on a share of a device the others do not want.

use crate::budgets::state::BudgetDemand;
use crate::config::EngineConfig;
use crate::control::Control;
use crate::device_share::state::{DeviceShare, PoolService};

/// The whole device, in the shares' unit.
pub const WHOLE_PPM: u64 = 1_000_000;

/// The least a gate lets through: a shard beside much heavier ones still makes progress
/// on its own metadata (journal commits, checkpoints).
pub const MIN_GATE_IOPS: u64 = 10;

/// Whether a pool's scheduler shares the device by the volumes' weights (the others
/// ignore them, so a share by weight would be a policy the pool does not have).
pub fn honours_weights(scheduler: &str) -> bool {
    matches!(
        crate::sched::lookup(scheduler).map(|r| r.name),
        Some("mclock" | "bfq")
    )
}

/// A shard's last report for one pool.
#[derive(Clone, Copy, Debug, Default)]
struct Report {
    service: PoolService,
    interval_ns: u64,
}

pub struct ShareBroker {
    shards: usize,
    /// Per pool: shares are decided for it (`shard_qos` and a weighted scheduler).
    weighted: Vec<bool>,
    /// [shard][pool]: the last report.
    reports: Vec<Vec<Report>>,
    /// [shard][pool]: the shares last sent (none yet: open gates, share 0).
    sent: Vec<Vec<DeviceShare>>,
    /// DST's `share-overcommit`: reservations are given on top of a weight split of all
    /// that is left after the floors, so the shares sum to more than the device.
    overcommit: bool,
}

impl ShareBroker {
    pub fn new(cfg: &EngineConfig, shards: u16) -> ShareBroker {
        let n = usize::from(shards.max(1));
        let pools = cfg.pools.len();
        ShareBroker {
            shards: n,
            weighted: (cfg.pools.iter())
                .map(|p| cfg.shard_qos && n > 1 && honours_weights(&p.scheduler.name))
                .collect(),
            reports: vec![vec![Report::default(); pools]; n],
            sent: vec![vec![DeviceShare::default(); pools]; n],
            overcommit: false,
        }
    }

    /// DST's `share-overcommit` defect (see the field).
    pub fn inject_overcommit(&mut self) {
        self.overcommit = true;
    }

    /// Every engine was thrown away: their gates are open again, their reports gone.
    pub fn reset(&mut self) {
        for r in self.reports.iter_mut().flatten() {
            *r = Report::default();
        }
        for s in self.sent.iter_mut().flatten() {
            *s = DeviceShare::default();
        }
    }

    /// [shard][pool]: the shares last sent.
    pub fn shares(&self) -> &[Vec<DeviceShare>] {
        &self.sent
    }

    /// Shard `k` reported: the shares that changed, to send.
    pub fn on_demand(&mut self, k: usize, d: &BudgetDemand) -> Vec<(u16, Control)> {
        if k >= self.shards || !self.weighted.iter().any(|&w| w) {
            return Vec::new();
        }
        for (p, r) in self.reports[k].iter_mut().enumerate() {
            *r = Report {
                service: d.pools.get(p).copied().unwrap_or_default(),
                interval_ns: d.interval_ns.max(1),
            };
        }
        let decided: Vec<Vec<DeviceShare>> =
            (0..self.weighted.len()).map(|p| self.decide(p)).collect();
        let mut steps = Vec::new();
        for k in 0..self.shards {
            let next: Vec<DeviceShare> = decided.iter().map(|d| d[k]).collect();
            if next != self.sent[k] {
                self.sent[k] = next.clone();
                steps.push((k as u16, Control::SetDeviceShares { shares: next }));
            }
        }
        steps
    }

    /// What the device served the shards of pool `p` per second, by their last reports.
    fn rate_iops(&self, p: usize) -> u64 {
        (self.reports.iter())
            .map(|r| {
                let r = r[p];
                (u128::from(r.service.served) * 1_000_000_000 / u128::from(r.interval_ns.max(1)))
                    as u64
            })
            .sum()
    }

    /// Every shard's share of pool `p` and its gate.
    fn decide(&self, p: usize) -> Vec<DeviceShare> {
        let n = self.shards;
        let mut out = vec![DeviceShare::default(); n];
        if !self.weighted[p] {
            return out;
        }
        let svc: Vec<PoolService> = self.reports.iter().map(|r| r[p].service).collect();
        let active: Vec<usize> = (0..n).filter(|&k| svc[k].active_weight > 0).collect();
        let floor = WHOLE_PPM / (4 * n as u64);
        let mut share = vec![0u64; n];
        if active.is_empty() {
            // Nobody waits on this device: equal shares, open gates.
            share.iter_mut().for_each(|s| *s = WHOLE_PPM / n as u64);
            share[0] += WHOLE_PPM % n as u64;
        } else {
            let rest = WHOLE_PPM - floor * (n - active.len()) as u64;
            let rate = self.rate_iops(p);
            let mut reserved: Vec<u64> = (0..n)
                .map(|k| match rate {
                    0 => 0,
                    r if active.contains(&k) => svc[k].reserved_iops * WHOLE_PPM / r,
                    _ => 0,
                })
                .collect();
            let asked: u64 = reserved.iter().sum();
            if asked > rest {
                reserved.iter_mut().for_each(|r| *r = *r * rest / asked);
            }
            let left = if self.overcommit {
                rest
            } else {
                rest - reserved.iter().sum::<u64>()
            };
            let weight: u64 = active.iter().map(|&k| svc[k].active_weight).sum();
            for k in 0..n {
                share[k] = if active.contains(&k) {
                    reserved[k]
                        + (u128::from(left) * u128::from(svc[k].active_weight) / u128::from(weight))
                            as u64
                } else {
                    floor
                };
            }
            let top = top(&share, &active);
            let sum: u64 = share.iter().sum();
            share[top] += WHOLE_PPM.saturating_sub(sum);
            if active.len() >= 2 && rate > 0 {
                for k in 0..n {
                    if k != top {
                        out[k].gate_iops = (share[k] * rate / WHOLE_PPM)
                            .max(MIN_GATE_IOPS)
                            .min(u64::from(u32::MAX))
                            as u32;
                    }
                }
            }
        }
        for k in 0..n {
            out[k].share_ppm = share[k].min(u64::from(u32::MAX)) as u32;
        }
        out
    }

    /// The cross-shard invariant: every pool's shares, as last sent, sum to the whole
    /// device (or were never set), and at most one shard's gate is open while others'
    /// are set (the one left open takes what the others leave).
    pub fn check(&self) -> Result<(), String> {
        for p in 0..self.weighted.len() {
            let shares: Vec<DeviceShare> = self.sent.iter().map(|s| s[p]).collect();
            let sum: u64 = shares.iter().map(|s| u64::from(s.share_ppm)).sum();
            if sum != 0 && sum != WHOLE_PPM {
                return Err(format!(
                    "pool {p}: the shards' device shares sum to {sum} ppm, not the whole \
                     device: {shares:?}"
                ));
            }
            let gated = shares.iter().filter(|s| s.gate_iops > 0).count();
            if gated > 0 && gated + 1 != shares.len() {
                return Err(format!(
                    "pool {p}: {gated} of {} shards gated; exactly one must stay open: \
                     {shares:?}",
                    shares.len()
                ));
            }
        }
        Ok(())
    }
}

/// The active shard with the largest share (the lowest index among equals).
fn top(share: &[u64], active: &[usize]) -> usize {
    let mut best = active[0];
    for &k in active {
        if share[k] > share[best] {
            best = k;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Medium, PoolConfig};
    use crate::sched::SchedSpec;

    fn cfg(scheduler: &str) -> EngineConfig {
        EngineConfig {
            pools: vec![PoolConfig {
                name: "hdd".into(),
                medium: Medium::Hdd,
                capacity_bytes: 1 << 30,
                queue_depth: 1,
                scheduler: SchedSpec::named(scheduler),
                log: false,
                throttle: None,
                write_buffer: None,
            }],
            shard_qos: true,
            ..EngineConfig::default()
        }
    }

    fn report(weight: u64, reserved: u64, served: u64) -> BudgetDemand {
        BudgetDemand {
            interval_ns: 100_000_000,
            pools: vec![PoolService {
                active_weight: weight,
                reserved_iops: reserved,
                served,
            }],
            ..BudgetDemand::default()
        }
    }

    fn shares(steps: &[(u16, Control)]) -> Vec<(u16, u32, u32)> {
        steps
            .iter()
            .map(|(k, c)| match c {
                Control::SetDeviceShares { shares } => {
                    (*k, shares[0].share_ppm, shares[0].gate_iops)
                }
                c => panic!("{c:?}"),
            })
            .collect()
    }

    #[test]
    fn weights_split_the_device_and_the_largest_share_stays_open() {
        let mut b = ShareBroker::new(&cfg("mclock"), 2);
        // Shard 0 alone has a backlog: no gate, it has all but the idle one's floor.
        let s = b.on_demand(0, &report(9, 0, 1));
        assert_eq!(shares(&s), vec![(0, 875_000, 0), (1, 125_000, 0)]);
        b.check().unwrap();
        // Shard 1 (weight 1) too: 0.9 and 0.1 of the 20 IOPS served; shard 1 gated at 2,
        // raised to the minimum.
        let s = b.on_demand(1, &report(1, 0, 1));
        assert_eq!(shares(&s), vec![(0, 900_000, 0), (1, 100_000, 10)]);
        // At 150 IOPS: 15.
        let s = b.on_demand(0, &report(9, 0, 14));
        assert_eq!(shares(&s), vec![(1, 100_000, 15)]);
        b.check().unwrap();
        // Shard 0 goes idle: every gate opens.
        let s = b.on_demand(0, &report(0, 0, 0));
        assert_eq!(shares(&s), vec![(0, 125_000, 0), (1, 875_000, 0)]);
    }

    #[test]
    fn reservations_come_first_then_weights_split_what_is_left() {
        let mut b = ShareBroker::new(&cfg("bfq"), 3);
        b.on_demand(0, &report(1, 60, 1));
        // Shard 0 reserves 60 of 150 IOPS: 0.4, plus a tenth of the 0.6 left; shard 2
        // (idle) keeps its floor of 1/12.
        let s = b.on_demand(1, &report(9, 0, 14));
        let floor = 1_000_000 / 12;
        let rest = 1_000_000 - floor;
        let r0 = 60 * 1_000_000 / 150;
        let s0 = r0 + (rest - r0) / 10;
        assert_eq!(
            shares(&s),
            vec![
                (0, s0 as u32, (s0 * 150 / 1_000_000) as u32),
                (1, (1_000_000 - s0 - floor) as u32, 0),
                (2, floor as u32, (floor * 150 / 1_000_000) as u32),
            ]
        );
        b.check().unwrap();
        // Reservations beyond the device are scaled down to what there is.
        b.on_demand(2, &report(1, 1_000, 0));
        let sum: u32 = b.shares().iter().map(|s| s[0].share_ppm).sum();
        assert_eq!(sum, 1_000_000);
    }

    #[test]
    fn the_injected_overcommit_breaks_the_sum_and_the_check_says_so() {
        for over in [false, true] {
            let mut b = ShareBroker::new(&cfg("mclock"), 2);
            if over {
                b.inject_overcommit();
            }
            b.on_demand(0, &report(1, 50, 50));
            b.on_demand(1, &report(9, 0, 100));
            match (over, b.check()) {
                (false, r) => r.unwrap(),
                (true, r) => assert!(r.unwrap_err().contains("sum to"), "{over}"),
            }
        }
    }

    #[test]
    fn pools_without_weights_or_with_local_qos_get_no_shares() {
        for c in [cfg("fifo"), {
            let mut c = cfg("mclock");
            c.shard_qos = false;
            c
        }] {
            let mut b = ShareBroker::new(&c, 2);
            assert!(b.on_demand(0, &report(9, 0, 100)).is_empty());
            assert!(b.on_demand(1, &report(1, 0, 100)).is_empty());
        }
    }
}
