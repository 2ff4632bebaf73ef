//! One volume's queue (per direction class) as CFQ and BFQ keep them: requests in sector
//! order served as a circular scan from where the queue last was, unless the oldest has
//! waited past its FIFO expiry; plus the count the queue has on the device.

use super::api::QueuedOp;
use super::sorted::SortedQueue;

/// Which queue a request belongs to: its volume, and whether it is synchronous (reads;
/// writes are treated as asynchronous, as buffered writes are in the kernel). The
/// engine's own reads (superblocks, journals at mount; volume `u32::MAX`) count as
/// asynchronous: no process waits to send a nearby next one, so idling for them only
/// delays the mount.
pub(super) type FlowId = (u32, bool);

pub(super) fn flow_of(op: &QueuedOp) -> FlowId {
    (op.volume, !op.is_write && op.volume != u32::MAX)
}

#[derive(Default)]
pub(super) struct FlowQueue {
    pub reqs: SortedQueue,
    /// Byte position after the last request this queue dispatched.
    pub last_pos: u64,
    /// Requests dispatched and not yet completed.
    pub in_flight: u32,
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
