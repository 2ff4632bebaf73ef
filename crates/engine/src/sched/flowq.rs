//! One volume's queue (per direction class) as CFQ and BFQ keep them: requests in sector
//! order served as a circular scan from where the queue last was, unless the oldest has
//! waited past its FIFO expiry; plus the count the queue has on the device.

use super::api::{NO_VOLUME, QueuedOp};
use super::sorted::SortedQueue;
use crate::types::IoContext;

/// Which queue a request belongs to, as the kernel's `cfq_get_queue` and `bfq_get_queue`
/// choose one: a synchronous request (a read) goes to its issuer's own queue, keyed on
/// (volume, I/O context), as the kernel keys it on the process; asynchronous requests
/// (writes, treated as buffered writes are in the kernel) share one queue per volume, as
/// the kernel's async queues are shared by every process of a cgroup (the volume is our
/// cgroup). The engine's own reads (context [`IoContext::Engine`]: superblocks and
/// journals at mount, copies, cleaning) count as asynchronous too: no process waits to
/// send a nearby next one, so idling for them only delays them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct FlowId {
    pub volume: u32,
    /// The issuer of a synchronous queue; `None` for the volume's asynchronous queue.
    pub context: Option<IoContext>,
}

impl FlowId {
    /// Synchronous queues are the ones a scheduler idles for.
    pub fn is_sync(&self) -> bool {
        self.context.is_some()
    }
}

pub(super) fn flow_of(op: &QueuedOp) -> FlowId {
    let sync = !op.is_write && op.volume != NO_VOLUME && op.context != IoContext::Engine;
    FlowId {
        volume: op.volume,
        context: sync.then_some(op.context),
    }
}

#[derive(Default)]
pub(super) struct FlowQueue {
    pub reqs: SortedQueue,
    /// Byte position after the last request this queue dispatched.
    pub last_pos: u64,
    /// Requests dispatched and not yet completed.
    pub in_flight: u32,
    /// How long its process thinks between a completion and its next request.
    pub think: ThinkTime,
}

/// A sync queue's think time as CFQ keeps it (2.6.30 `cfq_update_io_thinktime`): each
/// arrival samples the time since the queue's last completion, capped at twice
/// `slice_idle`, into a decaying mean (7/8 old, 1/8 new, in the kernel's fixed point of
/// 256). Idling for the queue is worth it only while the mean is at most `slice_idle`
/// (`cfq_update_idle_window`), judged once the samples are valid (weight above 80, the
/// third arrival); before that the queue is idled for.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ThinkTime {
    last_end_ns: Option<u64>,
    samples: u64,
    total_ns: u64,
}

impl ThinkTime {
    /// A request of the queue arrives.
    pub fn arrival(&mut self, now_ns: u64, cap_ns: u64) {
        let think = self
            .last_end_ns
            .map_or(0, |e| now_ns.saturating_sub(e))
            .min(cap_ns);
        self.samples = (7 * self.samples + 256) / 8;
        self.total_ns = (7 * self.total_ns + 256 * think) / 8;
    }

    /// A request of the queue completed.
    pub fn completed(&mut self, now_ns: u64) {
        self.last_end_ns = Some(now_ns);
    }

    /// Whether idling for the queue's next request is worth it.
    pub fn worth_idling(&self, slice_idle_ns: u64) -> bool {
        if self.samples <= 80 {
            return true;
        }
        (self.total_ns + 128) / self.samples <= slice_idle_ns
    }
}

impl FlowQueue {
    /// Take the next request: the oldest if it waited `fifo_expire_ns`, else the next in
    /// sector order from the queue's last position.
    pub fn pop(&mut self, now_ns: u64, fifo_expire_ns: u64) -> Option<QueuedOp> {
        let op = match self.reqs.oldest() {
            Some(o) if o.arrival_ns + fifo_expire_ns <= now_ns => o,
            _ => self.reqs.cscan_from(self.last_pos)?,
        };
        self.reqs.remove(&op);
        self.last_pos = op.offset_bytes + op.len_bytes;
        self.in_flight += 1;
        Some(op)
    }

    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }
}
