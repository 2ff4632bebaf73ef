//! CFQ as Linux had it around 2.6.30-2.6.33: a synchronous queue per issuing process
//! (volume and I/O context, `flowq::FlowId`) and an asynchronous one per volume, served
//! round robin, each for a time slice; within its slice a queue has at most `quantum`
//! requests on the device; an emptied synchronous queue keeps the disk idle for
//! `slice_idle` in case its process sends the next nearby request (anticipation), through
//! `Dispatch::WaitUntil`. A client that names no process has one synchronous queue per
//! volume (context `Volume`), as before contexts existed.
//!
//! Defaults from the kernel's block/cfq-iosched.c (2.6.33): `cfq_slice_sync = HZ / 10`
//! (100 ms), `cfq_slice_async = HZ / 25` (40 ms), `cfq_slice_idle = HZ / 125` (8 ms),
//! `cfq_quantum = 8`, `cfq_fifo_expire = { HZ / 4, HZ / 8 }` (async 250 ms, sync 125 ms).
//! Not modelled: I/O priorities (every queue is best-effort priority 4, so slices are
//! the base length), short back seeks (`back_seek_max` / `back_seek_penalty`: requests
//! go in circular-scan order from the queue's position), `slice_async_rq`, and the
//! 2.6.33 workload groups (sync-noidle trees), preemption of an idling queue by another
//! process's request near the head (`cfq_rq_close`), and I/O priorities.
//!
//! Whether to idle for a process is 2.6.30's idle window (`idle_window = true`, the
//! default since issue 12's stop 38; `flowq::IdleWindow`), the rule of the kernel the
//! paper measured (its Linux 2.6.30): a process whose mean think time exceeds
//! `slice_idle` is not idled for, a seeky one (mean seek over 8,192 sectors) only 2 ms
//! (`CFQ_MIN_TT`), and not at all while the device queues commands (`hw_tag`, judged as
//! `cfq_update_hw_tag` does; the paper's drive had tagged queueing off).
//! `idle_window = false` idles `slice_idle` for every sync queue (the default before).

use std::collections::{BTreeMap, VecDeque};

use super::api::{Dispatch, QueuedOp, Registration, Scheduler};
use super::flowq::{FlowId, FlowQueue, HwTag, flow_of};
use super::params::Params;
use crate::inject::InjectedBug;
use crate::types::IoContext;

pub(super) const REGISTRATION: Registration = Registration {
    name: "cfq",
    aliases: &[],
    about: "CFQ (Linux 2.6.3x): per-process queues, time slices, idling for sync queues",
    build: |p| Ok(Box::new(Cfq::new(CfqParams::from_params(p)?))),
};

#[derive(Clone, Copy, Debug)]
pub struct CfqParams {
    pub slice_sync_ns: u64,
    pub slice_async_ns: u64,
    pub slice_idle_ns: u64,
    pub quantum: u32,
    pub fifo_expire_sync_ns: u64,
    pub fifo_expire_async_ns: u64,
    /// Linux 2.6.30's idle window (`flowq::IdleWindow`): idle only for a process whose
    /// mean think time is at most `slice_idle`, and only `CFQ_MIN_TT` for a seeky one;
    /// false: idle `slice_idle` for every sync queue.
    pub idle_window: bool,
}

impl Default for CfqParams {
    fn default() -> Self {
        CfqParams {
            slice_sync_ns: 100_000_000,
            slice_async_ns: 40_000_000,
            slice_idle_ns: 8_000_000,
            quantum: 8,
            fifo_expire_sync_ns: 125_000_000,
            fifo_expire_async_ns: 250_000_000,
            idle_window: true,
        }
    }
}

impl CfqParams {
    fn from_params(p: &mut Params) -> Result<Self, String> {
        let d = CfqParams::default();
        let ms = |ns: u64| ns as f64 / 1e6;
        Ok(CfqParams {
            slice_sync_ns: p.ms_as_ns("slice_sync_ms", ms(d.slice_sync_ns), 1.0..=10_000.0)?,
            slice_async_ns: p.ms_as_ns("slice_async_ms", ms(d.slice_async_ns), 1.0..=10_000.0)?,
            slice_idle_ns: p.ms_as_ns("slice_idle_ms", ms(d.slice_idle_ns), 0.0..=1_000.0)?,
            quantum: p.u64_in("quantum", d.quantum as u64, 1..=1024)? as u32,
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

/// The queue being served and its slice.
struct Active {
    id: FlowId,
    /// Set at the slice's first dispatch.
    slice_end_ns: Option<u64>,
    /// When the queue emptied with nothing on the device: idling starts here.
    idle_from_ns: Option<u64>,
}

pub struct Cfq {
    p: CfqParams,
    queues: BTreeMap<FlowId, FlowQueue>,
    /// Busy queues waiting for a slice, in round-robin order.
    rr: VecDeque<FlowId>,
    active: Option<Active>,
    len: usize,
    /// Whether the device queues commands, for the idle window's seek test.
    hw_tag: HwTag,
    /// `InjectedBug::CfqCompletesWrongContext`.
    bug_wrong_context: bool,
    /// `InjectedBug::CfqThinkTimeUnrecorded`.
    bug_think_unrecorded: bool,
}

impl Cfq {
    pub fn new(p: CfqParams) -> Self {
        Cfq {
            p,
            queues: BTreeMap::new(),
            rr: VecDeque::new(),
            active: None,
            len: 0,
            hw_tag: HwTag::default(),
            bug_wrong_context: false,
            bug_think_unrecorded: false,
        }
    }

    /// End the active slice; the queue goes to the back of the round if still busy.
    fn expire(&mut self) {
        if let Some(a) = self.active.take()
            && !self.queues[&a.id].is_empty()
        {
            self.rr.push_back(a.id);
        }
    }
}

impl Scheduler for Cfq {
    fn name(&self) -> &'static str {
        "cfq"
    }

    fn add(&mut self, now_ns: u64, op: QueuedOp) {
        let id = flow_of(&op);
        let q = self.queues.entry(id).or_default();
        if id.is_sync() {
            q.window
                .arrival(now_ns, &op, self.p.slice_idle_ns, self.hw_tag.on());
        }
        let was_empty = q.is_empty();
        q.reqs.insert(op);
        self.len += 1;
        let active = self.active.as_ref().is_some_and(|a| a.id == id);
        if was_empty && !active && !self.rr.contains(&id) {
            self.rr.push_back(id);
        }
    }

    fn dispatch(&mut self, now_ns: u64) -> Dispatch {
        loop {
            if self.active.is_none() {
                let Some(id) = self.rr.pop_front() else {
                    return Dispatch::Idle;
                };
                self.active = Some(Active {
                    id,
                    slice_end_ns: None,
                    idle_from_ns: None,
                });
            }
            let a = self.active.as_mut().expect("set above");
            let sync = a.id.is_sync();
            if a.slice_end_ns.is_some_and(|e| now_ns >= e) {
                self.expire();
                continue;
            }
            let q = self.queues.get_mut(&a.id).expect("active queue exists");
            if !q.is_empty() {
                if q.in_flight >= self.p.quantum {
                    return Dispatch::Idle; // a completion asks again
                }
                let (slice, expire) = if sync {
                    (self.p.slice_sync_ns, self.p.fifo_expire_sync_ns)
                } else {
                    (self.p.slice_async_ns, self.p.fifo_expire_async_ns)
                };
                a.slice_end_ns.get_or_insert(now_ns + slice);
                a.idle_from_ns = None;
                let op = q.pop(now_ns, expire).expect("non-empty");
                self.len -= 1;
                self.hw_tag.dispatched();
                return Dispatch::Op(op);
            }
            if sync && q.in_flight > 0 {
                return Dispatch::Idle; // wait for the queue's own requests to finish
            }
            let idle_ns = if self.p.idle_window {
                q.window.idle_ns(self.p.slice_idle_ns)
            } else {
                Some(self.p.slice_idle_ns).filter(|&ns| ns > 0)
            };
            if sync
                && let Some(idle_ns) = idle_ns
                && let (Some(end), Some(from)) = (a.slice_end_ns, a.idle_from_ns)
            {
                let until = end.min(from + idle_ns);
                if now_ns < until {
                    return Dispatch::WaitUntil(until);
                }
            }
            self.expire();
        }
    }

    fn completed(&mut self, now_ns: u64, op: &QueuedOp) {
        self.hw_tag.completed(self.len);
        let mut id = flow_of(op);
        if self.bug_wrong_context {
            id.context = id.context.map(|_| IoContext::Volume);
        }
        let Some(q) = self.queues.get_mut(&id) else {
            return;
        };
        q.in_flight = q.in_flight.saturating_sub(1);
        if !self.bug_think_unrecorded {
            q.window.completed(now_ns);
        }
        if q.in_flight == 0
            && q.is_empty()
            && let Some(a) = self.active.as_mut()
            && a.id == id
        {
            a.idle_from_ns = Some(now_ns);
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn inject_bug(&mut self, bug: InjectedBug) {
        self.bug_wrong_context = bug == InjectedBug::CfqCompletesWrongContext;
        self.bug_think_unrecorded = bug == InjectedBug::CfqThinkTimeUnrecorded;
    }
}

#[cfg(test)]
mod tests {
    use super::super::sorted::testing::{op, read_by, run_serial};
    use super::*;

    const MS: u64 = 1_000_000;

    /// Two processes of one volume: process 1 reads a file block by block, sending each
    /// read 1 ms after the last completes; process 2 has five far reads queued from the
    /// start. CFQ keys queues on the process, so process 1's queue is served alone for
    /// its slice, the disk idling for each next block; keyed on the volume (as before
    /// I/O contexts), process 2's reads shared the queue and went between them.
    #[test]
    fn a_process_s_sequential_stream_is_anticipated_within_its_volume() {
        let mut c = Cfq::new(CfqParams::default());
        let mut arrivals: Vec<(u64, QueuedOp)> = (0..4u64)
            .map(|i| {
                (
                    i * 6 * MS,
                    read_by(i as usize, 1000 + i * 8, 0, 1, i * 6 * MS),
                )
            })
            .collect();
        arrivals.extend((0..5u64).map(|i| (0, read_by(10 + i as usize, 900_000 + i * 8, 0, 2, 0))));
        let served = run_serial(&mut c, 5 * MS, arrivals, 200 * MS);
        let seq: Vec<(u64, usize)> = served.iter().map(|(t, o)| (*t, o.key)).collect();
        assert_eq!(
            &seq[..5],
            &[
                (0, 0),
                (6 * MS, 1),
                (12 * MS, 2),
                (18 * MS, 3),
                (31 * MS, 10)
            ],
            "process 1 served at each arrival, then 8 ms idle, then process 2"
        );
    }

    #[test]
    fn busy_sync_queues_take_100ms_slices_in_turn() {
        let mut c = Cfq::new(CfqParams::default());
        let arrivals = (0..200u64)
            .flat_map(|i| {
                [
                    (0, op(i as usize, i * 64, false, 0, 0)),
                    (0, op(1000 + i as usize, 1_000_000 + i * 64, false, 1, 0)),
                ]
            })
            .collect();
        // 5 ms per request: a 100 ms slice holds 20.
        let served = run_serial(&mut c, 5 * MS, arrivals, 400 * MS);
        let vols: Vec<u32> = served.iter().map(|(_, o)| o.volume).collect();
        assert_eq!(vols.len(), 80);
        for (i, chunk) in vols.chunks(20).enumerate() {
            assert!(
                chunk.iter().all(|v| *v == (i % 2) as u32),
                "slice {i}: {chunk:?}"
            );
        }
    }

    #[test]
    fn an_emptied_sync_queue_idles_for_its_next_request() {
        let mut c = Cfq::new(CfqParams::default());
        let mut arrivals = vec![(0, op(1, 100, false, 0, 0))];
        arrivals.extend((0..5).map(|i| (0, op(10 + i, 900_000 + i as u64 * 8, false, 1, 0))));
        // Volume 0 sends its next read 3 ms after the first completes (at 5 ms).
        arrivals.push((8 * MS, op(2, 108, false, 0, 8 * MS)));
        let served = run_serial(&mut c, 5 * MS, arrivals, 200 * MS);
        let seq: Vec<(u64, usize)> = served.iter().map(|(t, o)| (*t, o.key)).collect();
        // Key 2 is served at its arrival, before volume 1, though volume 1 waited.
        assert_eq!(seq[0], (0, 1));
        assert_eq!(seq[1], (8 * MS, 2));
        // After key 2 completes at 13 ms nothing comes: idle 8 ms, then volume 1.
        assert_eq!(seq[2], (21 * MS, 10));
    }

    /// `InjectedBug::CfqCompletesWrongContext`: a completion charged to the volume's
    /// queue leaves the process's queue with a request "on the device" for ever, and
    /// the other process's reads behind it are never dispatched.
    #[test]
    fn a_completion_charged_to_the_wrong_context_starves_the_rest() {
        let arrivals = || {
            let mut a = vec![(0, read_by(1, 100, 0, 1, 0))];
            a.extend((0..3u64).map(|i| (0, read_by(10 + i as usize, 900_000 + i * 8, 0, 2, 0))));
            a
        };
        let served = run_serial(
            &mut Cfq::new(CfqParams::default()),
            5 * MS,
            arrivals(),
            10_000 * MS,
        );
        assert_eq!(served.len(), 4);
        let mut c = Cfq::new(CfqParams::default());
        c.inject_bug(InjectedBug::CfqCompletesWrongContext);
        let served = run_serial(&mut c, 5 * MS, arrivals(), 10_000 * MS);
        assert_eq!(
            served.len(),
            1,
            "process 2 starves behind process 1's stuck queue"
        );
    }

    /// The idle window: a process that thinks 20 ms after each completion (more than
    /// `slice_idle`) is idled for only until its think time is known (the third
    /// arrival); one that thinks 1 ms keeps it. Returns, per round, how long the emptied
    /// queue was idled for (ms), with `p`; `stride` sectors between reads.
    fn idle_ms_per_round(p: CfqParams, think_ms: u64, stride: u64) -> Vec<u64> {
        idle_ms_with(Cfq::new(p), think_ms, stride)
    }

    fn idle_ms_with(mut c: Cfq, think_ms: u64, stride: u64) -> Vec<u64> {
        let mut now = 0;
        (0..6)
            .map(|i| {
                c.add(now, read_by(i, 1000 + i as u64 * stride, 0, 1, now));
                let Dispatch::Op(o) = c.dispatch(now) else {
                    panic!("round {i}: the read is dispatched")
                };
                now += 5 * MS;
                c.completed(now, &o);
                let idled = match c.dispatch(now) {
                    Dispatch::WaitUntil(t) => (t - now) / MS,
                    _ => 0,
                };
                now += think_ms * MS;
                idled
            })
            .collect()
    }

    /// The default is 2.6.30's idle window: a process thinking longer than `slice_idle`
    /// stops being idled for once its think time is valid, a quick one keeps its 8 ms.
    #[test]
    fn a_process_that_thinks_longer_than_slice_idle_is_not_idled_for() {
        let d = CfqParams::default();
        assert_eq!(idle_ms_per_round(d, 20, 8), [8, 8, 0, 0, 0, 0]);
        assert_eq!(idle_ms_per_round(d, 1, 8), [8; 6]);
        let always = CfqParams {
            idle_window: false,
            ..d
        };
        assert_eq!(idle_ms_per_round(always, 20, 8), [8; 6]);
        // `InjectedBug::CfqThinkTimeUnrecorded`: completions not recorded, every think
        // time reads 0 and the sleeper is idled for every round.
        let mut c = Cfq::new(d);
        c.inject_bug(InjectedBug::CfqThinkTimeUnrecorded);
        assert_eq!(idle_ms_with(c, 20, 8), [8; 6]);
    }

    /// A seeky process (reads 1 GiB apart) with a quick think time: while the device is
    /// assumed to queue commands (2.6.30 starts with `hw_tag` on, and this light load
    /// never re-judges it) its window closes once its seek mean exceeds 8,192 sectors;
    /// on a drive found not to queue, it is idled for `CFQ_MIN_TT` (2 ms), not 8.
    #[test]
    fn a_seeky_process_is_idled_for_2_ms_and_not_at_all_with_tagged_queueing() {
        let d = CfqParams::default();
        let stride = 2 * 1024 * 1024;
        assert_eq!(idle_ms_per_round(d, 1, stride), [8, 0, 0, 0, 0, 0]);
        // Load that re-judges `hw_tag`: 51 completions with more than 5 queued and never
        // more than one on the device.
        let mut c = Cfq::new(d);
        for i in 0..60 {
            c.add(0, read_by(100 + i, 5_000_000 + i as u64 * 8, 0, 2, 0));
        }
        for _ in 0..52 {
            let Dispatch::Op(o) = c.dispatch(0) else {
                panic!("process 2's reads are dispatched")
            };
            c.completed(0, &o);
        }
        assert!(
            !c.hw_tag.on(),
            "one on the device at a time: no tagged queueing"
        );
        let mut now = 0;
        let idled: Vec<u64> = (0..6)
            .map(|i| {
                c.add(now, read_by(i, 1000 + i as u64 * stride, 0, 1, now));
                c.expire(); // process 2's slice ends; process 1 is next
                while let Dispatch::Op(o) = c.dispatch(now) {
                    now += 5 * MS;
                    c.completed(now, &o);
                    if o.key == i {
                        break;
                    }
                }
                let idled = match c.dispatch(now) {
                    Dispatch::WaitUntil(t) => (t - now) / MS,
                    _ => 0,
                };
                now += MS;
                idled
            })
            .collect();
        assert_eq!(idled, [8, 8, 2, 2, 2, 2]);
    }

    #[test]
    fn without_idling_the_other_queue_goes_at_once() {
        let p = CfqParams {
            slice_idle_ns: 0,
            ..Default::default()
        };
        let mut c = Cfq::new(p);
        let mut arrivals = vec![(0, op(1, 100, false, 0, 0))];
        arrivals.push((0, op(10, 900_000, false, 1, 0)));
        arrivals.push((8 * MS, op(2, 108, false, 0, 8 * MS)));
        let served = run_serial(&mut c, 5 * MS, arrivals, 200 * MS);
        assert_eq!(served[1].1.key, 10);
        assert_eq!(served[1].0, 5 * MS);
    }

    #[test]
    fn async_queues_do_not_idle_and_quantum_caps_the_device_share() {
        let mut c = Cfq::new(CfqParams::default());
        for i in 0..20 {
            c.add(0, op(i, i as u64 * 8, true, 0, 0));
        }
        let mut n = 0;
        while let Dispatch::Op(_) = c.dispatch(0) {
            n += 1;
        }
        assert_eq!(n, 8, "quantum: at most 8 of one queue on the device");
    }
}
