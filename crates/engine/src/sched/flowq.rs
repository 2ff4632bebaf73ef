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
    /// Whether and how long to idle for its process's next request.
    pub window: IdleWindow,
}

/// Below this mean seek distance (sectors) a process is not seeky (2.6.30's
/// `CIC_SEEKY(cic)`: `seek_mean > 8 * 1024`).
const SEEKY_SECTORS: u64 = 8 * 1024;
/// How long a seeky process is idled for (`CFQ_MIN_TT`, 2 ms; `BFQ_MIN_TT` the same).
const SEEKY_IDLE_NS: u64 = 2_000_000;

/// A sync queue's idle window as Linux 2.6.30's CFQ keeps it per process (and the first
/// BFQ, which copied it): `cfq_update_io_thinktime`, `cfq_update_io_seektime` and
/// `cfq_update_idle_window` run at each arrival, `cfq_arm_slice_timer` when the queue
/// empties. The window opens when the queue is created; once the think time is valid
/// (the third arrival) it stays open only while the mean think time is at most
/// `slice_idle`; with tagged queueing (`HwTag`) a seeky process closes it too. An open
/// window idles `slice_idle`, or `CFQ_MIN_TT` (2 ms) for a seeky process: "we don't want
/// to idle for seeks, but we do want to allow fair distribution of slice time for a
/// process doing back-to-back seeks".
#[derive(Clone, Copy, Debug)]
pub(super) struct IdleWindow {
    think: ThinkTime,
    seek: SeekMean,
    /// `cfq_cfqq_idle_window(cfqq)`.
    open: bool,
}

impl Default for IdleWindow {
    fn default() -> Self {
        IdleWindow {
            think: ThinkTime::default(),
            seek: SeekMean::default(),
            open: true,
        }
    }
}

impl IdleWindow {
    /// A request of the queue arrives (`cfq_rq_enqueued`). `hw_tag`: the device queues
    /// several commands ([`HwTag`]).
    pub fn arrival(&mut self, now_ns: u64, op: &QueuedOp, slice_idle_ns: u64, hw_tag: bool) {
        self.think.arrival(now_ns, 2 * slice_idle_ns);
        self.seek.arrival(op);
        if slice_idle_ns == 0 || (hw_tag && self.seek.seeky()) {
            self.open = false;
        } else if self.think.valid() {
            self.open = self.think.mean_ns() <= slice_idle_ns;
        }
    }

    /// A request of the queue completed.
    pub fn completed(&mut self, now_ns: u64) {
        self.think.completed(now_ns);
    }

    /// How long to idle for the next request once the queue is empty, if at all.
    pub fn idle_ns(&self, slice_idle_ns: u64) -> Option<u64> {
        if !self.open || slice_idle_ns == 0 {
            return None;
        }
        Some(if self.seek.valid() && self.seek.seeky() {
            slice_idle_ns.min(SEEKY_IDLE_NS)
        } else {
            slice_idle_ns
        })
    }
}

/// A decaying mean as the kernel keeps think times and seek distances: each sample
/// weighs 1/8 against 7/8 for the past, in fixed point of 256; valid once the weight is
/// above 80 (`sample_valid`, the third sample).
#[derive(Clone, Copy, Debug, Default)]
struct Decaying {
    samples: u64,
    total: u64,
}

impl Decaying {
    fn add(&mut self, x: u64) {
        self.samples = (7 * self.samples + 256) / 8;
        self.total = (7 * self.total + 256 * x) / 8;
    }

    fn valid(&self) -> bool {
        self.samples > 80
    }
}

/// A sync queue's think time as CFQ keeps it (2.6.30 `cfq_update_io_thinktime`): each
/// arrival samples the time since the queue's last completion, capped at twice
/// `slice_idle`. The kernel keeps it in jiffies; here in ns.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct ThinkTime {
    last_end_ns: Option<u64>,
    mean: Decaying,
}

impl ThinkTime {
    /// A request of the queue arrives.
    pub fn arrival(&mut self, now_ns: u64, cap_ns: u64) {
        let think = self
            .last_end_ns
            .map_or(0, |e| now_ns.saturating_sub(e))
            .min(cap_ns);
        self.mean.add(think);
    }

    /// A request of the queue completed.
    pub fn completed(&mut self, now_ns: u64) {
        self.last_end_ns = Some(now_ns);
    }

    pub fn valid(&self) -> bool {
        self.mean.valid()
    }

    /// `ttime_mean = (ttime_total + 128) / ttime_samples`.
    pub fn mean_ns(&self) -> u64 {
        (self.mean.total + 128) / self.mean.samples.max(1)
    }
}

/// A process's mean seek distance in sectors (2.6.30 `cfq_update_io_seektime`): the
/// distance from the end of its previous request to the start of this one, capped at 4
/// times the mean plus 1 GiB for the first three samples and plus 64 MiB after ("don't
/// allow the seek distance to get too large from the odd fragment, pagein, etc"). As in
/// 2.6.30 the first request measures from sector 0.
#[derive(Clone, Copy, Debug, Default)]
struct SeekMean {
    last_end_sector: u64,
    mean_sectors: u64,
    dist: Decaying,
}

impl SeekMean {
    fn arrival(&mut self, op: &QueuedOp) {
        let sector = op.offset_bytes / 512;
        let d = sector.abs_diff(self.last_end_sector);
        let cap = if self.dist.samples <= 60 {
            2 * 1024 * 1024
        } else {
            2 * 1024 * 64
        };
        self.dist.add(d.min(self.mean_sectors * 4 + cap));
        self.mean_sectors = (self.dist.total + self.dist.samples / 2) / self.dist.samples;
        self.last_end_sector = (op.offset_bytes + op.len_bytes).div_ceil(512);
    }

    fn valid(&self) -> bool {
        self.dist.valid()
    }

    fn seeky(&self) -> bool {
        self.mean_sectors > SEEKY_SECTORS
    }
}

/// Whether the device queues commands (2.6.30 `cfq_update_hw_tag`): assumed at first;
/// under load (more than `CFQ_HW_QUEUE_MIN` = 5 requests queued or on the device) every
/// 50 completions it is re-judged by whether the peak on the device reached 5. The
/// paper's drive had tagged queueing off, so there it turns false once loaded.
#[derive(Clone, Copy, Debug)]
pub(super) struct HwTag {
    on: bool,
    in_driver: u32,
    peak: u32,
    samples: u32,
}

impl Default for HwTag {
    fn default() -> Self {
        HwTag {
            on: true,
            in_driver: 0,
            peak: 0,
            samples: 0,
        }
    }
}

const HW_QUEUE_MIN: u32 = 5;

impl HwTag {
    pub fn on(&self) -> bool {
        self.on
    }

    pub fn dispatched(&mut self) {
        self.in_driver += 1;
    }

    /// A request completed; `queued`: requests the scheduler holds.
    pub fn completed(&mut self, queued: usize) {
        self.peak = self.peak.max(self.in_driver);
        let loaded = queued > HW_QUEUE_MIN as usize || self.in_driver > HW_QUEUE_MIN;
        if loaded {
            self.samples += 1;
            if self.samples > 50 {
                self.on = self.peak >= HW_QUEUE_MIN;
                self.samples = 0;
                self.peak = 0;
            }
        }
        self.in_driver = self.in_driver.saturating_sub(1);
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

#[cfg(test)]
mod tests {
    use super::super::sorted::testing::read_by;
    use super::*;

    const MS: u64 = 1_000_000;

    /// 2.6.30's decaying means: think times and seek distances are valid from the third
    /// sample; the mean is the kernel's fixed-point one.
    #[test]
    fn think_time_and_seek_means_follow_the_kernel() {
        let mut t = ThinkTime::default();
        for (i, think_ms) in [0u64, 20, 20].into_iter().enumerate() {
            t.arrival(i as u64 * 100 * MS + think_ms * MS, 16 * MS);
            t.completed(i as u64 * 100 * MS + 100 * MS);
            assert_eq!(t.valid(), i == 2, "sample {i}");
        }
        // Samples 0, then 20 ms capped at 16 ms twice; weights 32, 60, 84 of 256.
        let total = (7 * (256 * 16 * MS / 8) + 256 * 16 * MS) / 8;
        assert_eq!(t.mean_ns(), (total + 128) / 84);
        assert_eq!(t.mean_ns() / 100_000, 114, "about 11.4 ms");
        let mut s = SeekMean::default();
        for i in 0..3u64 {
            s.arrival(&read_by(0, 100 + i * 8, 0, 1, 0));
        }
        assert!(
            s.valid() && !s.seeky(),
            "sequential: mean {}",
            s.mean_sectors
        );
    }

    #[test]
    fn a_drive_that_takes_one_command_at_a_time_has_no_tagged_queueing() {
        let mut h = HwTag::default();
        assert!(h.on(), "assumed until judged, as 2.6.30 starts");
        for _ in 0..51 {
            h.dispatched();
            h.completed(10);
        }
        assert!(!h.on());
        // Idle (few queued): not re-judged, even with 5 on the device.
        let mut h = HwTag::default();
        for _ in 0..200 {
            (0..5).for_each(|_| h.dispatched());
            (0..5).for_each(|_| h.completed(0));
        }
        assert!(h.on());
        // Loaded with 5 on the device: tagged.
        for _ in 0..60 {
            (0..6).for_each(|_| h.dispatched());
            (0..6).for_each(|_| h.completed(10));
        }
        assert!(h.on());
    }
}
