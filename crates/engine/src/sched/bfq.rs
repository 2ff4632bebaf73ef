//! BFQ: per-volume queues (sync reads, async writes) served one at a time with a budget
//! in sectors, chosen by B-WF2Q+: a busy queue has a virtual start S and finish
//! F = S + budget / weight; the eligible queue (S <= V) with the smallest F is served
//! next; on expiry it is charged the sectors it actually used, F = S + service / weight,
//! and the system virtual time V grows by service / (sum of busy weights). So service in
//! sectors is proportional to the volumes' weights (`weight` through `set_volume_qos`).
//!
//! A queue in service expires when its budget is used, after `timeout_ms`, or when it
//! empties; an emptied sync queue first keeps the disk idle `slice_idle_ms` for its next
//! request. Budget feedback: a queue that used its budget gets twice as much next time
//! (up to `max_budget`), one that emptied gets what it used.
//!
//! Defaults from the kernel's block/bfq-iosched.c: `bfq_default_max_budget = 16 * 1024`
//! sectors, `bfq_timeout = HZ / 8` (125 ms), `bfq_slice_idle = NSEC_PER_SEC / 125` (8 ms),
//! `bfq_fifo_expire = { NSEC_PER_SEC / 4, NSEC_PER_SEC / 8 }` (async 250 ms, sync
//! 125 ms), weights 1..1000 with 100 by default (`BFQ_DEFAULT_GRP_WEIGHT`). Not modelled:
//! budget auto-tuning from the measured peak rate, weight raising for interactive and
//! soft real-time queues, queue merging, and groups.

use std::collections::BTreeMap;

use super::api::{Dispatch, QueuedOp, Registration, Scheduler, VolumeQos};
use super::flowq::{FlowId, FlowQueue, flow_of};
use super::params::Params;

pub(super) const REGISTRATION: Registration = Registration {
    name: "bfq",
    aliases: &[],
    about: "BFQ: per-volume sector budgets by weight (B-WF2Q+), idling for sync queues",
    build: |p| Ok(Box::new(Bfq::new(BfqParams::from_params(p)?))),
};

#[derive(Clone, Copy, Debug)]
pub struct BfqParams {
    pub max_budget_sectors: u64,
    pub timeout_ns: u64,
    pub slice_idle_ns: u64,
    pub fifo_expire_sync_ns: u64,
    pub fifo_expire_async_ns: u64,
}

impl Default for BfqParams {
    fn default() -> Self {
        BfqParams {
            max_budget_sectors: 16 * 1024,
            timeout_ns: 125_000_000,
            slice_idle_ns: 8_000_000,
            fifo_expire_sync_ns: 125_000_000,
            fifo_expire_async_ns: 250_000_000,
        }
    }
}

impl BfqParams {
    fn from_params(p: &mut Params) -> Result<Self, String> {
        let d = BfqParams::default();
        let ms = |ns: u64| ns as f64 / 1e6;
        Ok(BfqParams {
            max_budget_sectors: p.u64_in("max_budget", d.max_budget_sectors, 8..=1 << 24)?,
            timeout_ns: p.ms_as_ns("timeout_ms", ms(d.timeout_ns), 1.0..=10_000.0)?,
            slice_idle_ns: p.ms_as_ns("slice_idle_ms", ms(d.slice_idle_ns), 0.0..=1_000.0)?,
            fifo_expire_sync_ns: p.ms_as_ns(
                "fifo_expire_sync_ms",
                ms(d.fifo_expire_sync_ns),
                1.0..=60_000.0,
            )?,
            fifo_expire_async_ns: p.ms_as_ns(
                "fifo_expire_async_ms",
                ms(d.fifo_expire_async_ns),
                1.0..=60_000.0,
            )?,
        })
    }
}

struct BfqQueue {
    q: FlowQueue,
    weight: u32,
    budget_sectors: u64,
    /// Virtual start and finish (sectors per unit of weight).
    start: f64,
    finish: f64,
    /// In the scheduler's busy set (has requests, or is in service).
    busy: bool,
}

/// The queue in service.
struct InService {
    id: FlowId,
    served_sectors: u64,
    started_ns: Option<u64>,
    idle_from_ns: Option<u64>,
}

pub struct Bfq {
    p: BfqParams,
    queues: BTreeMap<FlowId, BfqQueue>,
    weights: BTreeMap<u32, u32>,
    vtime: f64,
    active: Option<InService>,
    len: usize,
}

impl Bfq {
    pub fn new(p: BfqParams) -> Self {
        Bfq {
            p,
            queues: BTreeMap::new(),
            weights: BTreeMap::new(),
            vtime: 0.0,
            active: None,
            len: 0,
        }
    }

    /// B-WF2Q+: the eligible busy queue with the smallest finish time.
    fn select(&mut self) -> Option<FlowId> {
        let busy = || self.queues.iter().filter(|(_, b)| b.busy);
        let min_start = busy().map(|(_, b)| b.start).reduce(f64::min)?;
        // No queue eligible: V jumps to the smallest start (WF2Q+'s V = max(V, min S)).
        self.vtime = self.vtime.max(min_start);
        let v = self.vtime;
        busy()
            .filter(|(_, b)| b.start <= v)
            .min_by(|a, b| a.1.finish.total_cmp(&b.1.finish))
            .map(|(id, _)| *id)
    }

    /// End the service of the active queue, charging it what it used.
    fn expire(&mut self, used_budget: bool) {
        let Some(a) = self.active.take() else { return };
        let total_weight: u64 = self
            .queues
            .values()
            .filter(|b| b.busy)
            .map(|b| b.weight as u64)
            .sum();
        let b = self.queues.get_mut(&a.id).expect("active queue exists");
        let served = a.served_sectors as f64;
        b.finish = b.start + served / b.weight as f64;
        self.vtime += served / total_weight.max(1) as f64;
        b.budget_sectors = if used_budget {
            (b.budget_sectors * 2).min(self.p.max_budget_sectors)
        } else {
            a.served_sectors.clamp(8, self.p.max_budget_sectors)
        };
        b.busy = !b.q.is_empty();
        if b.busy {
            b.start = b.finish;
            b.finish = b.start + b.budget_sectors as f64 / b.weight as f64;
        }
    }
}

impl Scheduler for Bfq {
    fn name(&self) -> &'static str {
        "bfq"
    }

    fn add(&mut self, _now_ns: u64, op: QueuedOp) {
        let id = flow_of(&op);
        let weight = self.weights.get(&op.volume).copied().unwrap_or(100);
        let max_budget = self.p.max_budget_sectors;
        let b = self.queues.entry(id).or_insert_with(|| BfqQueue {
            q: FlowQueue::default(),
            weight,
            budget_sectors: max_budget,
            start: 0.0,
            finish: 0.0,
            busy: false,
        });
        b.q.reqs.insert(op);
        self.len += 1;
        if !b.busy {
            b.busy = true;
            b.start = self.vtime.max(b.finish);
            b.finish = b.start + b.budget_sectors as f64 / b.weight as f64;
        }
    }

    fn dispatch(&mut self, now_ns: u64) -> Dispatch {
        loop {
            if self.active.is_none() {
                let Some(id) = self.select() else {
                    return Dispatch::Idle;
                };
                self.active = Some(InService {
                    id,
                    served_sectors: 0,
                    started_ns: None,
                    idle_from_ns: None,
                });
            }
            let a = self.active.as_mut().expect("set above");
            let b = self.queues.get_mut(&a.id).expect("active queue exists");
            let sync = a.id.1;
            if a.served_sectors >= b.budget_sectors {
                self.expire(true);
                continue;
            }
            if a.started_ns
                .is_some_and(|s| now_ns >= s + self.p.timeout_ns)
            {
                self.expire(false);
                continue;
            }
            if !b.q.is_empty() {
                let expire = if sync {
                    self.p.fifo_expire_sync_ns
                } else {
                    self.p.fifo_expire_async_ns
                };
                let op = b.q.pop(now_ns, expire).expect("non-empty");
                a.started_ns.get_or_insert(now_ns);
                a.idle_from_ns = None;
                a.served_sectors += op.len_bytes.div_ceil(512).max(1);
                self.len -= 1;
                return Dispatch::Op(op);
            }
            if sync && b.q.in_flight > 0 {
                return Dispatch::Idle; // its own completions decide whether to idle
            }
            if sync
                && self.p.slice_idle_ns > 0
                && let Some(from) = a.idle_from_ns
            {
                let until = from + self.p.slice_idle_ns;
                if now_ns < until {
                    return Dispatch::WaitUntil(until);
                }
            }
            self.expire(false);
        }
    }

    fn completed(&mut self, now_ns: u64, op: &QueuedOp) {
        let id = flow_of(op);
        let Some(b) = self.queues.get_mut(&id) else {
            return;
        };
        b.q.in_flight = b.q.in_flight.saturating_sub(1);
        if b.q.in_flight == 0
            && b.q.is_empty()
            && let Some(a) = self.active.as_mut()
            && a.id == id
        {
            a.idle_from_ns = Some(now_ns);
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn set_volume_qos(&mut self, volume: u32, qos: VolumeQos) {
        let w = qos.weight.clamp(1, 1000);
        self.weights.insert(volume, w);
        for ((v, _), b) in self.queues.iter_mut() {
            if *v == volume {
                b.weight = w;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::sorted::testing::{op, run_serial};
    use super::*;

    const MS: u64 = 1_000_000;

    fn weighted(w0: u32, w1: u32) -> Bfq {
        let mut b = Bfq::new(BfqParams::default());
        for (v, w) in [(0, w0), (1, w1)] {
            b.set_volume_qos(
                v,
                VolumeQos {
                    weight: w,
                    ..Default::default()
                },
            );
        }
        b
    }

    fn sectors_by_volume(w0: u32, w1: u32) -> (f64, f64) {
        let mut b = weighted(w0, w1);
        let arrivals = (0..40_000u64)
            .flat_map(|i| {
                [
                    (0, op(i as usize, (i * 7919) % 100_000, false, 0, 0)),
                    (
                        0,
                        op(
                            100_000 + i as usize,
                            200_000 + (i * 104_729) % 100_000,
                            false,
                            1,
                            0,
                        ),
                    ),
                ]
            })
            .collect();
        let served = run_serial(&mut b, MS, arrivals, 20_000 * MS);
        let s = |v| {
            served
                .iter()
                .filter(|(_, o)| o.volume == v)
                .map(|(_, o)| o.len_bytes / 512)
                .sum::<u64>() as f64
        };
        (s(0), s(1))
    }

    #[test]
    fn service_is_proportional_to_weights_within_10_percent() {
        for (w0, w1) in [(100, 300), (100, 100), (500, 100)] {
            let (s0, s1) = sectors_by_volume(w0, w1);
            let want = w1 as f64 / w0 as f64;
            let got = s1 / s0;
            assert!(
                (got / want - 1.0).abs() <= 0.10,
                "weights {w0}:{w1}: sectors {s0}:{s1}, ratio {got:.3} vs {want:.3}"
            );
        }
    }

    #[test]
    fn an_emptied_sync_queue_idles_then_expires() {
        let mut b = Bfq::new(BfqParams::default());
        let mut arrivals = vec![(0, op(1, 100, false, 0, 0))];
        arrivals.extend((0..5).map(|i| (0, op(10 + i, 900_000 + i as u64 * 8, false, 1, 0))));
        arrivals.push((8 * MS, op(2, 108, false, 0, 8 * MS)));
        let served = run_serial(&mut b, 5 * MS, arrivals, 200 * MS);
        let seq: Vec<(u64, usize)> = served.iter().map(|(t, o)| (*t, o.key)).collect();
        assert_eq!(&seq[..3], &[(0, 1), (8 * MS, 2), (21 * MS, 10)]);
    }
}
