//! BFQ: a synchronous queue per issuing process (volume and I/O context,
//! `flowq::FlowId`) and an asynchronous one per volume, served one at a time with a
//! budget in sectors, chosen by B-WF2Q+: a busy entity has a virtual start S and finish
//! F = S + budget / weight; the eligible one (S <= V) with the smallest F is served next;
//! on expiry it is charged the sectors it actually used, F = S + service / weight, and
//! the virtual time V grows by service / (sum of busy weights). Two levels, as the
//! kernel's BFQ with groups: the volumes (the QoS unit, each a group with its own `weight`
//! through `set_volume_qos`), then the queues inside the chosen volume (equal weights).
//! So service in sectors is proportional to the volumes' weights however many processes
//! each has, and a volume's processes share its part equally.
//!
//! A queue in service expires when its budget is used, after `timeout_ms`, or when it
//! empties; an emptied sync queue first keeps the disk idle for its process's next
//! request, as its idle window allows (`idle_window = true`, the default: the first
//! BFQ's `bfq_update_idle_window` and `bfq_arm_slice_timer`, copied from CFQ 2.6.30 and
//! shared here as `flowq::IdleWindow`: not for a process whose mean think time exceeds
//! `slice_idle_ms`, 2 ms (`BFQ_MIN_TT`) for a seeky one, not for a seeky one while the
//! device queues commands); `idle_window = false` idles `slice_idle_ms` for every sync
//! queue (the default before issue 12's stop 38). Budget feedback: a queue that used its budget gets twice as much next time
//! (up to `max_budget`), one that emptied gets what it used.
//!
//! Defaults from the kernel's block/bfq-iosched.c: `bfq_default_max_budget = 16 * 1024`
//! sectors, `bfq_timeout = HZ / 8` (125 ms), `bfq_slice_idle = NSEC_PER_SEC / 125` (8 ms),
//! `bfq_fifo_expire = { NSEC_PER_SEC / 4, NSEC_PER_SEC / 8 }` (async 250 ms, sync
//! 125 ms), weights 1..1000 with 100 by default (`BFQ_DEFAULT_GRP_WEIGHT`). Not modelled:
//! budget auto-tuning from the measured peak rate, weight raising for interactive and
//! soft real-time queues, queue merging, and group hierarchies deeper than volume and
//! process.

use std::collections::BTreeMap;

use super::api::{Dispatch, QueuedOp, Registration, Scheduler, VolumeQos};
use super::flowq::{FlowId, FlowQueue, HwTag, flow_of};
use super::params::Params;

pub(super) const REGISTRATION: Registration = Registration {
    name: "bfq",
    aliases: &[],
    about: "BFQ: per-process sector budgets, volumes weighted (B-WF2Q+), idling for sync queues",
    build: |p| Ok(Box::new(Bfq::new(BfqParams::from_params(p)?))),
};

#[derive(Clone, Copy, Debug)]
pub struct BfqParams {
    pub max_budget_sectors: u64,
    pub timeout_ns: u64,
    pub slice_idle_ns: u64,
    pub fifo_expire_sync_ns: u64,
    pub fifo_expire_async_ns: u64,
    /// The kernel's idle window (`flowq::IdleWindow`); false: idle for every sync queue.
    pub idle_window: bool,
}

impl Default for BfqParams {
    fn default() -> Self {
        BfqParams {
            max_budget_sectors: 16 * 1024,
            timeout_ns: 125_000_000,
            slice_idle_ns: 8_000_000,
            fifo_expire_sync_ns: 125_000_000,
            fifo_expire_async_ns: 250_000_000,
            idle_window: true,
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
            idle_window: p.bool("idle_window", d.idle_window)?,
        })
    }
}

/// The weight of every queue inside its volume: the kernel's default for a process of
/// best-effort priority 4 (`BFQ_DEFAULT_GRP_WEIGHT`); processes of one volume share its
/// part equally.
const QUEUE_WEIGHT: u32 = 100;

struct BfqQueue {
    q: FlowQueue,
    budget_sectors: u64,
    /// Virtual start and finish inside the volume (sectors per unit of weight).
    start: f64,
    finish: f64,
    /// In its volume's busy set (has requests, or is in service).
    busy: bool,
}

/// A volume: the group its processes' queues share, as a cgroup is in the kernel's BFQ
/// (`bfq_group`). It has its own virtual clock for its queues, and a start and finish
/// of its own among the volumes, by its weight.
struct Group {
    weight: u32,
    /// Virtual time of the queues inside it.
    vtime: f64,
    start: f64,
    finish: f64,
    /// Busy queues inside it; the group is busy while any is.
    busy_queues: u32,
}

impl Group {
    fn new(weight: u32) -> Group {
        Group {
            weight,
            vtime: 0.0,
            start: 0.0,
            finish: 0.0,
            busy_queues: 0,
        }
    }
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
    groups: BTreeMap<u32, Group>,
    /// Virtual time among the volumes.
    vtime: f64,
    active: Option<InService>,
    len: usize,
    /// Whether the device queues commands, for the idle window's seek test.
    hw_tag: HwTag,
}

/// B-WF2Q+ over `(key, start, finish)` entities: the eligible one (start <= V, after V
/// jumps to the smallest start if none is: WF2Q+'s V = max(V, min S)) with the smallest
/// finish, the first of equals. Returns the chosen key and the new V.
fn wf2q<K: Copy>(
    vtime: f64,
    entities: impl Iterator<Item = (K, f64, f64)> + Clone,
) -> Option<(K, f64)> {
    let min_start = entities.clone().map(|e| e.1).reduce(f64::min)?;
    let v = vtime.max(min_start);
    let chosen = entities
        .filter(|e| e.1 <= v)
        .min_by(|a, b| a.2.total_cmp(&b.2))?;
    Some((chosen.0, v))
}

impl Bfq {
    pub fn new(p: BfqParams) -> Self {
        Bfq {
            p,
            queues: BTreeMap::new(),
            groups: BTreeMap::new(),
            vtime: 0.0,
            active: None,
            len: 0,
            hw_tag: HwTag::default(),
        }
    }

    /// The busy queues of volume `volume`.
    fn busy_in(&self, volume: u32) -> impl Iterator<Item = (FlowId, f64, f64)> + Clone + '_ {
        self.queues
            .iter()
            .filter(move |(id, b)| id.volume == volume && b.busy)
            .map(|(id, b)| (*id, b.start, b.finish))
    }

    /// Two levels of B-WF2Q+, as the kernel's BFQ schedules groups and then the queues
    /// inside the chosen one: the volume by its weight, then its process by theirs.
    fn select(&mut self) -> Option<FlowId> {
        let busy_groups = self
            .groups
            .iter()
            .filter(|(_, g)| g.busy_queues > 0)
            .map(|(v, g)| (*v, g.start, g.finish));
        let (volume, v) = wf2q(self.vtime, busy_groups)?;
        self.vtime = v;
        let group_vtime = self.groups[&volume].vtime;
        let (id, gv) = wf2q(group_vtime, self.busy_in(volume))?;
        self.groups.get_mut(&volume).expect("chosen above").vtime = gv;
        Some(id)
    }

    /// End the service of the active queue, charging it (inside its volume) and its
    /// volume (among the volumes) the sectors it used.
    fn expire(&mut self, used_budget: bool) {
        let Some(a) = self.active.take() else { return };
        let served = a.served_sectors as f64;
        let total_weight: u64 = self
            .groups
            .values()
            .filter(|g| g.busy_queues > 0)
            .map(|g| g.weight as u64)
            .sum();
        self.vtime += served / total_weight.max(1) as f64;
        let max_budget = self.p.max_budget_sectors;
        let b = self.queues.get_mut(&a.id).expect("active queue exists");
        let qw = QUEUE_WEIGHT as f64;
        b.finish = b.start + served / qw;
        b.budget_sectors = if used_budget {
            (b.budget_sectors * 2).min(max_budget)
        } else {
            a.served_sectors.clamp(8, max_budget)
        };
        b.busy = !b.q.is_empty();
        if b.busy {
            b.start = b.finish;
            b.finish = b.start + b.budget_sectors as f64 / qw;
        }
        let still_busy = b.busy;
        let g = self
            .groups
            .get_mut(&a.id.volume)
            .expect("a queue's group exists");
        g.vtime += served / (g.busy_queues.max(1) as f64 * qw);
        g.finish = g.start + served / g.weight as f64;
        if !still_busy {
            g.busy_queues -= 1;
        }
        if g.busy_queues > 0 {
            // Its next service is its next queue's budget (`bfq_update_next_in_service`).
            let (gv, w, start) = (g.vtime, g.weight as f64, g.finish);
            let next = wf2q(gv, self.busy_in(a.id.volume))
                .map(|(id, _)| self.queues[&id].budget_sectors)
                .unwrap_or(max_budget);
            let g = self.groups.get_mut(&a.id.volume).expect("exists");
            g.start = start;
            g.finish = start + next as f64 / w;
        }
    }
}

impl Scheduler for Bfq {
    fn name(&self) -> &'static str {
        "bfq"
    }

    fn add(&mut self, now_ns: u64, op: QueuedOp) {
        let id = flow_of(&op);
        let max_budget = self.p.max_budget_sectors;
        let b = self.queues.entry(id).or_insert_with(|| BfqQueue {
            q: FlowQueue::default(),
            budget_sectors: max_budget,
            start: 0.0,
            finish: 0.0,
            busy: false,
        });
        if id.is_sync() {
            b.q.window
                .arrival(now_ns, &op, self.p.slice_idle_ns, self.hw_tag.on());
        }
        b.q.reqs.insert(op);
        self.len += 1;
        if b.busy {
            return;
        }
        let g = self
            .groups
            .entry(id.volume)
            .or_insert_with(|| Group::new(VolumeQos::default().weight));
        b.busy = true;
        b.start = g.vtime.max(b.finish);
        b.finish = b.start + b.budget_sectors as f64 / QUEUE_WEIGHT as f64;
        g.busy_queues += 1;
        if g.busy_queues == 1 {
            g.start = self.vtime.max(g.finish);
            g.finish = g.start + b.budget_sectors as f64 / g.weight as f64;
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
            let sync = a.id.is_sync();
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
                self.hw_tag.dispatched();
                return Dispatch::Op(op);
            }
            if sync && b.q.in_flight > 0 {
                return Dispatch::Idle; // its own completions decide whether to idle
            }
            let idle_ns = if self.p.idle_window {
                b.q.window.idle_ns(self.p.slice_idle_ns)
            } else {
                Some(self.p.slice_idle_ns).filter(|&ns| ns > 0)
            };
            if sync
                && let Some(idle_ns) = idle_ns
                && let Some(from) = a.idle_from_ns
            {
                let until = from + idle_ns;
                if now_ns < until {
                    return Dispatch::WaitUntil(until);
                }
            }
            self.expire(false);
        }
    }

    fn completed(&mut self, now_ns: u64, op: &QueuedOp) {
        self.hw_tag.completed(self.len);
        let id = flow_of(op);
        let Some(b) = self.queues.get_mut(&id) else {
            return;
        };
        b.q.in_flight = b.q.in_flight.saturating_sub(1);
        b.q.window.completed(now_ns);
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
        self.groups
            .entry(volume)
            .or_insert_with(|| Group::new(w))
            .weight = w;
    }
}

#[cfg(test)]
mod tests {
    use super::super::sorted::testing::{op, read_by, run_serial};
    use super::*;
    use crate::types::IoContext;

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

    /// Saturating random readers: `procs[v]` processes in volume `v`. Returns the
    /// sectors served per (volume, process) over `end_ns` of a 1 ms-per-request disk.
    fn sectors_by_process(
        s: &mut dyn Scheduler,
        procs: [u32; 2],
        end_ns: u64,
    ) -> BTreeMap<(u32, u32), u64> {
        let mut arrivals = Vec::new();
        let mut key = 0;
        for (v, n) in procs.into_iter().enumerate() {
            for p in 0..n {
                for i in 0..20_000u64 {
                    key += 1;
                    let sector = (v as u64 * 1_000_000) + (i * 7919 + p as u64 * 104_729) % 500_000;
                    arrivals.push((0, read_by(key, sector, v as u32, p, 0)));
                }
            }
        }
        let served = run_serial(s, MS, arrivals, end_ns);
        let mut out = BTreeMap::new();
        for (_, o) in served {
            let IoContext::Client(p) = o.context else {
                panic!("a client read")
            };
            *out.entry((o.volume, p)).or_default() += o.len_bytes / 512;
        }
        out
    }

    fn volume_ratio(by: &BTreeMap<(u32, u32), u64>) -> f64 {
        let of = |v| {
            by.iter()
                .filter(|((x, _), _)| *x == v)
                .map(|(_, s)| *s)
                .sum::<u64>() as f64
        };
        of(1) / of(0)
    }

    /// The volume is the unit of weight: a volume of weight 300 with one process gets
    /// three times the service of one of weight 100 with four, and those four share
    /// their volume's part equally. (With each queue weighted by its volume, as before
    /// the two levels, the four processes together got 4/3 of the one.)
    #[test]
    fn weights_hold_per_volume_however_many_processes_it_has() {
        let mut b = weighted(100, 300);
        let by = sectors_by_process(&mut b, [4, 1], 20_000 * MS);
        let ratio = volume_ratio(&by);
        assert!(
            (ratio / 3.0 - 1.0).abs() <= 0.10,
            "ratio {ratio:.3}: {by:?}"
        );
        let four: Vec<u64> = (0..4).map(|p| by[&(0, p)]).collect();
        let (lo, hi) = (four.iter().min().unwrap(), four.iter().max().unwrap());
        assert!(
            *hi as f64 / *lo as f64 <= 1.10,
            "processes of volume 0: {four:?}"
        );
    }

    /// Where weights differ BFQ and CFQ differ: 1:3 against CFQ's equal slices.
    #[test]
    fn bfq_follows_weights_where_cfq_takes_turns() {
        use super::super::cfq::{Cfq, CfqParams};
        let mut b = weighted(100, 300);
        let bfq = volume_ratio(&sectors_by_process(&mut b, [1, 1], 20_000 * MS));
        let mut c = Cfq::new(CfqParams::default());
        c.set_volume_qos(
            1,
            VolumeQos {
                weight: 300,
                ..Default::default()
            },
        );
        let cfq = volume_ratio(&sectors_by_process(&mut c, [1, 1], 20_000 * MS));
        assert!((bfq / 3.0 - 1.0).abs() <= 0.10, "bfq {bfq:.3}");
        assert!((cfq - 1.0).abs() <= 0.10, "cfq {cfq:.3}");
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

    /// BFQ's idle window is CFQ 2.6.30's (`flowq::IdleWindow`): a process thinking 20 ms
    /// between reads (more than `slice_idle`) stops being idled for once its think time
    /// is valid (the third read); one thinking 1 ms keeps its 8 ms; with
    /// `idle_window = false` every process is idled for.
    #[test]
    fn a_process_that_thinks_longer_than_slice_idle_is_not_idled_for() {
        let idle_ms = |p: BfqParams, think_ms: u64| -> Vec<u64> {
            let mut b = Bfq::new(p);
            let mut now = 0;
            (0..6)
                .map(|i| {
                    b.add(now, read_by(i, 1000 + i as u64 * 8, 0, 1, now));
                    let Dispatch::Op(o) = b.dispatch(now) else {
                        panic!("round {i}: the read is dispatched")
                    };
                    now += 5 * MS;
                    b.completed(now, &o);
                    let idled = match b.dispatch(now) {
                        Dispatch::WaitUntil(t) => (t - now) / MS,
                        _ => 0,
                    };
                    now += think_ms * MS;
                    idled
                })
                .collect()
        };
        let d = BfqParams::default();
        assert_eq!(idle_ms(d, 20), [8, 8, 0, 0, 0, 0]);
        assert_eq!(idle_ms(d, 1), [8; 6]);
        let always = BfqParams {
            idle_window: false,
            ..d
        };
        assert_eq!(idle_ms(always, 20), [8; 6]);
    }
}
