//! On-drive command queueing (SATA NCQ, SCSI TCQ) for a disk.
//!
//! [`crate::DeviceModel::submit`] computes a command's completion when it arrives, so it
//! cannot let a later command overtake an earlier one. A drive that queues commands
//! holds up to `queue_depth` of them and, each time its mechanism is free, serves the one
//! it can reach first. [`CommandQueue`] does that in front of a model: the host pushes
//! commands as they arrive, and whenever the drive is idle it asks for the next one
//! ([`CommandQueue::start_next`]), which it starts on the model at once and whose
//! completion time it returns. One command is in service at a time.
//!
//! The rule, per pick:
//! - **FLUSH is a barrier.** SATA's FLUSH CACHE is a non-queued command: the host lets
//!   the queue drain before issuing it and queues nothing behind it until it completes.
//!   So only commands that arrived before the oldest queued FLUSH are candidates, and
//!   that FLUSH is served once they are all done.
//! - **Queue depth.** Only the `queue_depth` oldest commands are in the drive; the rest
//!   wait in the host's queue, in arrival order.
//! - **Aging.** If the oldest command has waited [`AGE_LIMIT_NS`] or more, it is served
//!   next, whatever else is nearer.
//! - **Shortest positioning time first** otherwise: the command with the least
//!   [`crate::Hdd::positioning_ns`] (seek and rotation from the head's present position,
//!   0 for a cache hit or a write into the write cache), the earlier arrival on a tie.
//!
//! Every choice depends only on the queue and the model's state, so the same arrivals
//! give the same order and the same times.

use std::collections::VecDeque;

use crate::{DevOpKind, DevRequest, DeviceModel, Model, NS_PER_MS};

/// The aging bound (an estimate: drive makers do not publish theirs). At queue depth 32
/// a 7,200 rpm disk serves about 150-200 random commands per second, so a full queue
/// turns over in about 160-210 ms and the mean wait is about that. 500 ms is well past
/// it, so aging only overrides the positioning rule for the few commands that rule keeps
/// passing over (those far from where the head works), and it is far below the 30 s
/// after which Linux's SCSI layer times a command out. Once a command is aged, it waits
/// at most for the command in service and for the aged commands older than itself.
pub const AGE_LIMIT_NS: u64 = 500 * NS_PER_MS;

/// A command waiting in the queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queued {
    /// The host's name for it (the simulator's operation id).
    pub id: u64,
    pub req: DevRequest,
    pub arrived_ns: u64,
}

/// Counters of a command queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Commands served.
    pub served: u64,
    /// Commands served ahead of an older one still queued.
    pub reordered: u64,
    /// Commands served because they had waited past the aging bound.
    pub aged: u64,
    /// The longest any command waited between arrival and the start of its service.
    pub max_wait_ns: u64,
}

/// The commands queued at one drive. See the module documentation.
#[derive(Clone, Debug)]
pub struct CommandQueue {
    depth: usize,
    age_limit_ns: u64,
    waiting: VecDeque<Queued>,
    busy: bool,
    stats: QueueStats,
    /// A deliberate defect for DST: FLUSH is no barrier.
    ignore_barrier: bool,
}

impl CommandQueue {
    /// A queue of `depth` commands (at least 1) with the given aging bound.
    pub fn new(depth: u32, age_limit_ns: u64) -> CommandQueue {
        CommandQueue {
            depth: depth.max(1) as usize,
            age_limit_ns,
            waiting: VecDeque::new(),
            busy: false,
            stats: QueueStats::default(),
            ignore_barrier: false,
        }
    }

    /// The queue a model's drive has: Some for a single disk whose preset queues more
    /// than one command, None for drives served in arrival order (SSD models keep their
    /// own parallelism; an array's members are served in arrival order).
    pub fn for_model(m: &Model) -> Option<CommandQueue> {
        match m {
            Model::Hdd(h) if h.params().queue_depth > 1 => Some(CommandQueue::new(
                h.params().queue_depth,
                h.params().queue_age_limit_ns,
            )),
            _ => None,
        }
    }

    /// Deliberate defect (DST must catch it): commands queued after a FLUSH may be
    /// served before it.
    pub fn inject_barrier_bug(&mut self) {
        self.ignore_barrier = true;
    }

    /// A command arrives at `now_ns`.
    pub fn push(&mut self, now_ns: u64, id: u64, req: DevRequest) {
        self.waiting.push_back(Queued {
            id,
            req,
            arrived_ns: now_ns,
        });
    }

    /// Whether a command is in service.
    pub fn busy(&self) -> bool {
        self.busy
    }

    /// Commands queued, not yet in service.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    pub fn stats(&self) -> QueueStats {
        self.stats
    }

    /// The command in service has completed (at or before the caller's present time).
    pub fn finished(&mut self) {
        self.busy = false;
    }

    /// If the drive is idle at `now_ns` and a command waits, pick one by the rule, start
    /// it on `model` and return it with its completion time.
    pub fn start_next(&mut self, now_ns: u64, model: &mut Model) -> Option<(Queued, u64)> {
        if self.busy || self.waiting.is_empty() {
            return None;
        }
        // One command waiting (always so at the engine's default HDD depth of 1): no pick.
        let i = if self.waiting.len() == 1 {
            0
        } else {
            self.pick(now_ns, model)
        };
        let q = if i == 0 {
            self.waiting.pop_front()?
        } else {
            self.waiting.remove(i)?
        };
        self.busy = true;
        let s = &mut self.stats;
        s.served += 1;
        s.reordered += u64::from(i > 0);
        let wait_ns = now_ns.saturating_sub(q.arrived_ns);
        s.aged += u64::from(i == 0 && wait_ns >= self.age_limit_ns);
        s.max_wait_ns = s.max_wait_ns.max(wait_ns);
        let done_ns = model.submit(now_ns, &q.req).max(now_ns);
        Some((q, done_ns))
    }

    /// The index of the command to serve next.
    fn pick(&self, now_ns: u64, model: &Model) -> usize {
        let is_flush = |q: &Queued| q.req.kind == DevOpKind::Flush;
        let barrier = if self.ignore_barrier {
            self.waiting.len()
        } else {
            self.waiting
                .iter()
                .position(is_flush)
                .unwrap_or(self.waiting.len())
        };
        let window = barrier.min(self.depth);
        if window <= 1 {
            // The FLUSH at the head (everything before it is done), or one candidate.
            return 0;
        }
        if now_ns.saturating_sub(self.waiting[0].arrived_ns) >= self.age_limit_ns {
            return 0;
        }
        let Model::Hdd(h) = model else {
            return 0;
        };
        let mut best = (u64::MAX, 0);
        for (i, q) in self.waiting.iter().take(window).enumerate() {
            // With the barrier ignored a FLUSH ranks last, so later commands overtake it.
            let cost = if is_flush(q) {
                u64::MAX - 1
            } else {
                h.positioning_ns(now_ns, &q.req)
            };
            if cost < best.0 {
                best = (cost, i);
            }
        }
        best.1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::queued_random_4k_read_iops;
    use crate::units::{KIB, MIB};

    fn hitachi() -> Model {
        Model::from_preset(&crate::preset("hitachi-7k1000c").expect("preset"), None)
    }

    /// Serve everything queued, one command at a time; the ids in service order.
    fn drain(q: &mut CommandQueue, m: &mut Model, mut t: u64) -> Vec<u64> {
        let mut order = Vec::new();
        while let Some((c, done)) = q.start_next(t, m) {
            order.push(c.id);
            q.finished();
            t = done;
        }
        order
    }

    #[test]
    fn presets_queue_where_the_drive_did() {
        assert!(CommandQueue::for_model(&hitachi()).is_some());
        let cheetah = Model::from_preset(&crate::preset("cheetah-15k4").expect("preset"), None);
        assert!(CommandQueue::for_model(&cheetah).is_none());
        let ssd = Model::from_preset(&crate::preset("intel-320-160g").expect("preset"), None);
        assert!(CommandQueue::for_model(&ssd).is_none());
    }

    /// Fails without the reordering: a queue of depth 1 serves in arrival order and gets
    /// QD1's IOPS at QD32.
    #[test]
    fn reordering_at_qd32_raises_random_read_iops() {
        let run = |depth: u32, qd: u64| {
            let q = CommandQueue::new(depth, AGE_LIMIT_NS);
            queued_random_4k_read_iops(&mut hitachi(), q, qd, 6_000, 5)
        };
        let (qd1, _) = run(32, 1);
        let (fifo32, fifo) = run(1, 32);
        let (ncq32, ncq) = run(32, 32);
        assert_eq!(fifo.reordered, 0);
        assert!(ncq.reordered > ncq.served / 2, "{ncq:?}");
        assert!((fifo32 / qd1 - 1.0).abs() < 0.1, "{fifo32} vs {qd1}");
        assert!(ncq32 > 1.6 * qd1, "NCQ {ncq32} IOPS vs QD1 {qd1}");
    }

    /// A stream of reads near the head keeps a far read waiting for ever under pure
    /// shortest-positioning-first; the aging bound serves it.
    #[test]
    fn aging_bounds_the_wait_of_a_far_command() {
        let run = |age_limit_ns: u64| {
            let mut m = hitachi();
            let mut q = CommandQueue::new(32, age_limit_ns);
            let far = m.capacity_bytes() - MIB;
            q.push(0, 0, DevRequest::read(far, 4 * KIB));
            let mut next = 1u64;
            let mut t = 0;
            let mut far_wait = None;
            // 31 near reads always queued, each a fresh 4 KiB within the first 64 MiB.
            for _ in 0..31 {
                q.push(
                    0,
                    next,
                    DevRequest::read((next * 7919 % 16_384) * 4 * KIB, 4 * KIB),
                );
                next += 1;
            }
            let mut max_service = 0;
            while next < 2_000 {
                let Some((c, done)) = q.start_next(t, &mut m) else {
                    break;
                };
                max_service = max_service.max(done - t);
                if c.id == 0 {
                    far_wait = Some(t - c.arrived_ns);
                }
                q.finished();
                t = done;
                q.push(
                    t,
                    next,
                    DevRequest::read((next * 7919 % 16_384) * 4 * KIB, 4 * KIB),
                );
                next += 1;
            }
            (far_wait, max_service, q.stats())
        };
        let (starved, _, _) = run(u64::MAX);
        assert_eq!(starved, None, "without aging the far read is never served");
        let (wait, max_service, stats) = run(AGE_LIMIT_NS);
        let wait = wait.expect("aging serves the far read");
        assert!(wait >= AGE_LIMIT_NS, "served by age, not nearness: {wait}");
        assert!(wait <= AGE_LIMIT_NS + max_service, "{wait} ns");
        assert!(stats.aged >= 1);
        assert!(
            stats.max_wait_ns <= AGE_LIMIT_NS + 32 * max_service,
            "{stats:?}"
        );
    }

    /// Nothing queued after a FLUSH is served before it, nor anything queued before it
    /// after it, however near the head it is. With the injected defect the near read
    /// queued after the FLUSH overtakes it (the check DST relies on, at model level).
    #[test]
    fn flush_is_a_barrier() {
        let run = |bug: bool| {
            let mut m = hitachi();
            let mut q = CommandQueue::new(32, AGE_LIMIT_NS);
            if bug {
                q.inject_barrier_bug();
            }
            let far = m.capacity_bytes() / 2;
            q.push(0, 0, DevRequest::read(far, 4 * KIB));
            q.push(0, 1, DevRequest::write(far + MIB, 4 * KIB));
            q.push(0, 2, DevRequest::flush());
            q.push(0, 3, DevRequest::read(0, 4 * KIB));
            q.push(0, 4, DevRequest::read(8 * KIB, 4 * KIB));
            drain(&mut q, &mut m, 0)
        };
        let order = run(false);
        let pos = |order: &[u64], id| order.iter().position(|&i| i == id).expect("served");
        assert_eq!(order.len(), 5);
        assert!(pos(&order, 0) < pos(&order, 2) && pos(&order, 1) < pos(&order, 2));
        assert!(pos(&order, 3) > pos(&order, 2) && pos(&order, 4) > pos(&order, 2));
        let buggy = run(true);
        assert!(pos(&buggy, 3) < pos(&buggy, 2), "{buggy:?}");
    }

    #[test]
    fn same_arrivals_same_order_and_times() {
        let run = || {
            let q = CommandQueue::new(32, AGE_LIMIT_NS);
            let (iops, stats) = queued_random_4k_read_iops(&mut hitachi(), q, 32, 3_000, 9);
            (iops.to_bits(), stats)
        };
        assert_eq!(run(), run());
    }
}
