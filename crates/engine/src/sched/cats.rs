//! CATS, cache-aware table scheduling (seed 003, Geist, Jones, Westall): pending reads
//! go in the order of the Geist-Ross table (`cats_table`) under the linear model
//! X = R/2 + S * d / D; a shadow of the drive's on-board cache predicts hits, which are
//! dispatched first; after a read completes the disk waits up to the busdriver delay for
//! its process's next read (the same volume and I/O context); reads go before writes, writes in CSCAN order; once the
//! oldest read has waited READDELAY, reads go in CSCAN order (no table) until it has not.
//!
//! Defaults are the paper's for the Seagate Cheetah 15K.4 (ST373454): rotation R = 4 ms,
//! S = 5.25 ms over D = 143,374,744 sectors (the fitted X = 4.25 + 5.25 d/D: the
//! intercept does not change the order, a constant per request adds the same to every
//! order), busdriver 7 ms, READDELAY 100 ms, cache of 64 segments of 221 sectors (7,077
//! KB) with a 64-sector prefetch. The shadow cache is fully associative, FIFO, and a
//! span longer than a segment keeps its last sectors (wrap-around with over-write).
//!
//! Choices the paper leaves open: the table holds at most `table_cap` reads (128); with
//! more pending, the `table_cap` nearest the head enter it and the rest wait for a
//! later table (READDELAY bounds their wait). The busdriver waits only while nothing is
//! on the device; the paper's process is the request's (volume, I/O context), so a
//! client that names no process waits for its volume, and the engine's own reads
//! (context `Engine`) are never waited for. Writes are recorded in
//! the shadow cache without prefetch. tiervisor adds `write_expire_ms` (5 s, as
//! deadline's): a write older than that goes ahead of reads, so writes cannot starve.
//!
//! When the busdriver waits: the paper says only that it waits for "the process that
//! issued the most recently serviced request", for a fixed 7 ms; it names no test of
//! whether that process is likely to send another (its source, Geist, Steele and
//! Westall, is not in our library). So by default it waits after every read of a
//! process with no other read pending. `busdriver_think_gate = true` is tiervisor's own
//! variant, not the paper's: Linux 2.6.30 CFQ's think-time test (`flowq::ThinkTime`)
//! applied to the busdriver, waiting only for a process whose mean think time (samples
//! capped at twice the delay) is at most the busdriver delay.

use super::api::{Dispatch, NO_VOLUME, QueuedOp, Registration, Scheduler};
use super::cats_table::optimal_order;
use super::flowq::ThinkTime;
use super::params::Params;
use super::sorted::SortedQueue;
use crate::types::IoContext;
use std::collections::BTreeMap;

/// The process the busdriver waits for.
type Issuer = (u32, IoContext);

fn issuer(op: &QueuedOp) -> Issuer {
    (op.volume, op.context)
}

/// Whether a read has a process the busdriver may wait for: the engine's own reads
/// (and engine-wide work) have none.
fn waits_for(op: &QueuedOp) -> bool {
    op.volume != NO_VOLUME && op.context != IoContext::Engine
}

pub(super) const REGISTRATION: Registration = Registration {
    name: "cats",
    aliases: &[],
    about: "CATS (seed 003): optimal read order table, shadow disk cache, busdriver delay",
    build: |p| Ok(Box::new(Cats::new(CatsParams::from_params(p)?))),
};

#[derive(Clone, Copy, Debug)]
pub struct CatsParams {
    pub rotation_ns: u64,
    pub max_seek_ns: u64,
    pub max_seek_sectors: u64,
    pub table_cap: usize,
    pub busdriver_ns: u64,
    pub readdelay_ns: u64,
    pub write_expire_ns: u64,
    pub cache_segments: usize,
    pub sectors_per_segment: u64,
    pub prefetch_sectors: u64,
    /// tiervisor's own (not the paper's): the busdriver waits only for a process whose
    /// mean think time is at most `busdriver_ns`.
    pub busdriver_think_gate: bool,
}

impl Default for CatsParams {
    fn default() -> Self {
        CatsParams {
            rotation_ns: 4_000_000,
            max_seek_ns: 5_250_000,
            max_seek_sectors: 143_374_744,
            table_cap: 128,
            busdriver_ns: 7_000_000,
            readdelay_ns: 100_000_000,
            write_expire_ns: 5_000_000_000,
            cache_segments: 64,
            sectors_per_segment: 221,
            prefetch_sectors: 64,
            busdriver_think_gate: false,
        }
    }
}

impl CatsParams {
    fn from_params(p: &mut Params) -> Result<Self, String> {
        let d = CatsParams::default();
        let ms = |ns: u64| ns as f64 / 1e6;
        let c = CatsParams {
            rotation_ns: p.ms_as_ns("rotation_ms", ms(d.rotation_ns), 0.0..=1000.0)?,
            max_seek_ns: p.ms_as_ns("max_seek_ms", ms(d.max_seek_ns), 0.0..=1000.0)?,
            max_seek_sectors: p.u64_in("max_seek_sectors", d.max_seek_sectors, 1..=1 << 48)?,
            table_cap: p.u64_in("table_cap", d.table_cap as u64, 1..=4096)? as usize,
            busdriver_ns: p.ms_as_ns("busdriver_ms", ms(d.busdriver_ns), 0.0..=1000.0)?,
            readdelay_ns: p.ms_as_ns("readdelay_ms", ms(d.readdelay_ns), 1.0..=60_000.0)?,
            write_expire_ns: p.ms_as_ns(
                "write_expire_ms",
                ms(d.write_expire_ns),
                1.0..=3_600_000.0,
            )?,
            cache_segments: p.u64_in("cache_segments", d.cache_segments as u64, 0..=4096)? as usize,
            sectors_per_segment: p.u64_in(
                "sectors_per_segment",
                d.sectors_per_segment,
                1..=1 << 20,
            )?,
            prefetch_sectors: p.u64_in("prefetch_sectors", d.prefetch_sectors, 0..=1 << 20)?,
            busdriver_think_gate: p.bool("busdriver_think_gate", d.busdriver_think_gate)?,
        };
        if c.prefetch_sectors >= c.sectors_per_segment {
            return Err(format!(
                "cats scheduler: prefetch_sectors = {}: expected less than sectors_per_segment ({})",
                c.prefetch_sectors, c.sectors_per_segment
            ));
        }
        Ok(c)
    }
}

/// The scheduler's model of the drive's cache: FIFO segments of (start, end) sectors.
/// The virtual performance throttle keeps one too.
pub(crate) struct ShadowCache {
    segments: Vec<(u64, u64)>,
    next: usize,
    sectors_per_segment: u64,
}

impl ShadowCache {
    pub(crate) fn new(segments: usize, sectors_per_segment: u64) -> ShadowCache {
        ShadowCache {
            segments: vec![(0, 0); segments],
            next: 0,
            sectors_per_segment,
        }
    }

    pub(crate) fn record(&mut self, start: u64, end: u64) {
        if self.segments.is_empty() {
            return;
        }
        // Wrap-around: a span longer than a segment leaves its last sectors there.
        let start = start.max(end.saturating_sub(self.sectors_per_segment));
        self.segments[self.next] = (start, end);
        self.next = (self.next + 1) % self.segments.len();
    }

    fn hit_op(&self, op: &QueuedOp) -> bool {
        let (s, e) = span(op);
        self.hit(s, e)
    }

    /// Whether sectors [s, e) are all in one segment.
    pub(crate) fn hit(&self, s: u64, e: u64) -> bool {
        self.segments
            .iter()
            .any(|&(a, b)| a < b && a <= s && e <= b)
    }
}

/// A request's sectors, [start, end).
fn span(op: &QueuedOp) -> (u64, u64) {
    let s = op.offset_bytes / 512;
    (s, (op.offset_bytes + op.len_bytes).div_ceil(512).max(s + 1))
}

pub struct Cats {
    p: CatsParams,
    reads: SortedQueue,
    writes: SortedQueue,
    /// Reads in table order, next last; rebuilt when a read arrives.
    plan: Vec<QueuedOp>,
    plan_valid: bool,
    /// Byte position after the last dispatched request.
    head: u64,
    shadow: ShadowCache,
    /// Waiting for this process's next read until this time.
    busdriver: Option<(Issuer, u64)>,
    /// Each process's think time, kept with `busdriver_think_gate` only.
    think: BTreeMap<Issuer, ThinkTime>,
    in_flight: u32,
    len: usize,
}

impl Cats {
    pub fn new(p: CatsParams) -> Self {
        Cats {
            p,
            reads: SortedQueue::default(),
            writes: SortedQueue::default(),
            plan: Vec::new(),
            plan_valid: false,
            head: 0,
            shadow: ShadowCache::new(p.cache_segments, p.sectors_per_segment),
            busdriver: None,
            think: BTreeMap::new(),
            in_flight: 0,
            len: 0,
        }
    }

    fn build_plan(&mut self) {
        let head = self.head / 512;
        let mut cands: Vec<QueuedOp> = self.reads.iter().copied().collect();
        if cands.len() > self.p.table_cap {
            cands.sort_by_key(|o| ((o.offset_bytes / 512).abs_diff(head), o.key));
            cands.truncate(self.p.table_cap);
        }
        let positions: Vec<u64> = cands.iter().map(|o| o.offset_bytes / 512).collect();
        let per_sector = self.p.max_seek_ns as f64 / self.p.max_seek_sectors as f64;
        let order = optimal_order(
            head,
            &positions,
            self.p.rotation_ns as f64 / 2.0,
            per_sector,
        );
        self.plan = order.into_iter().rev().map(|i| cands[i]).collect();
        self.plan_valid = true;
    }

    fn next_read(&mut self, now_ns: u64) -> Option<QueuedOp> {
        // Predicted cache hits first, however far they are.
        if let Some(hit) = self.reads.iter().find(|o| self.shadow.hit_op(o)).copied() {
            return Some(hit);
        }
        let oldest = self.reads.oldest()?;
        if oldest.arrival_ns + self.p.readdelay_ns <= now_ns {
            return self.reads.cscan_from(self.head);
        }
        if !self.plan_valid || self.plan.is_empty() {
            self.build_plan();
        }
        self.plan.pop()
    }

    fn take(&mut self, op: QueuedOp) -> Dispatch {
        let queue = if op.is_write {
            &mut self.writes
        } else {
            &mut self.reads
        };
        queue.remove(&op);
        self.plan.retain(|o| o.key != op.key);
        let (s, e) = span(&op);
        let prefetch = if op.is_write {
            0
        } else {
            self.p.prefetch_sectors
        };
        self.shadow.record(s, e + prefetch);
        self.head = op.offset_bytes + op.len_bytes;
        self.in_flight += 1;
        self.len -= 1;
        Dispatch::Op(op)
    }
}

impl Scheduler for Cats {
    fn name(&self) -> &'static str {
        "cats"
    }

    fn add(&mut self, now_ns: u64, op: QueuedOp) {
        self.len += 1;
        if op.is_write {
            self.writes.insert(op);
            return;
        }
        if self.p.busdriver_think_gate && waits_for(&op) {
            self.think
                .entry(issuer(&op))
                .or_default()
                .arrival(now_ns, 2 * self.p.busdriver_ns);
        }
        if self.busdriver.is_some_and(|(who, _)| who == issuer(&op)) {
            self.busdriver = None;
        }
        self.reads.insert(op);
        self.plan_valid = false;
    }

    fn dispatch(&mut self, now_ns: u64) -> Dispatch {
        if self.len == 0 {
            return Dispatch::Idle;
        }
        if let Some((_, until)) = self.busdriver {
            if now_ns < until && self.in_flight == 0 {
                return Dispatch::WaitUntil(until);
            }
            self.busdriver = None;
        }
        if let Some(w) = self.writes.oldest()
            && w.arrival_ns + self.p.write_expire_ns <= now_ns
        {
            return self.take(w);
        }
        if let Some(r) = self.next_read(now_ns) {
            return self.take(r);
        }
        match self.writes.cscan_from(self.head) {
            Some(w) => self.take(w),
            None => Dispatch::Idle,
        }
    }

    fn completed(&mut self, now_ns: u64, op: &QueuedOp) {
        self.in_flight = self.in_flight.saturating_sub(1);
        if op.is_write || !waits_for(op) {
            return;
        }
        let who = issuer(op);
        let thinks_long = match self.think.get_mut(&who) {
            Some(t) if self.p.busdriver_think_gate => {
                t.completed(now_ns);
                t.valid() && t.mean_ns() > self.p.busdriver_ns
            }
            _ => false,
        };
        if self.p.busdriver_ns > 0 && !thinks_long && !self.reads.iter().any(|o| issuer(o) == who) {
            self.busdriver = Some((who, now_ns + self.p.busdriver_ns));
        }
    }

    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::super::sorted::testing::op;
    use super::*;

    const MS: u64 = 1_000_000;

    fn one_sector(key: usize, sector: u64, is_write: bool, arrival_ns: u64) -> QueuedOp {
        QueuedOp {
            len_bytes: 512,
            ..op(key, sector, is_write, 0, arrival_ns)
        }
    }

    /// Cost = distance (R = 0), no cache, no busdriver: the paper's Table 1 setting.
    fn table1() -> Cats {
        let mut c = Cats::new(CatsParams {
            rotation_ns: 0,
            max_seek_ns: 1000,
            max_seek_sectors: 1000,
            busdriver_ns: 0,
            cache_segments: 0,
            ..Default::default()
        });
        // Put the head at sector 100.
        c.add(0, one_sector(0, 99, false, 0));
        assert!(matches!(c.dispatch(0), Dispatch::Op(_)));
        c
    }

    fn order(c: &mut Cats, now: u64) -> Vec<u64> {
        std::iter::from_fn(|| match c.dispatch(now) {
            Dispatch::Op(o) => Some(o.offset_bytes / 512),
            _ => None,
        })
        .collect()
    }

    #[test]
    fn reads_follow_the_optimal_order_of_the_papers_table_1() {
        let mut c = table1();
        for (k, s) in [20, 82, 120, 200].into_iter().enumerate() {
            c.add(MS, one_sector(k + 1, s, false, MS));
        }
        // Greedy would take 82, 120, 200, 20 (mean response 131.5 vs 124.5).
        assert_eq!(order(&mut c, 2 * MS), vec![120, 82, 20, 200]);
    }

    #[test]
    fn past_readdelay_reads_go_in_cscan_order() {
        let mut c = table1();
        for (k, s) in [20, 82, 120, 200].into_iter().enumerate() {
            c.add(0, one_sector(k + 1, s, false, 0));
        }
        assert_eq!(order(&mut c, 150 * MS), vec![120, 200, 20, 82]);
    }

    #[test]
    fn predicted_cache_hits_go_first_and_writes_last_in_cscan() {
        let mut c = Cats::new(CatsParams {
            busdriver_ns: 0,
            ..Default::default()
        });
        c.add(0, op(1, 1000, false, 0, 0)); // 1000..1008 (+64 prefetch)
        c.add(0, op(2, 100_000, false, 0, 0));
        assert_eq!(order(&mut c, 0), vec![1000, 100_000]);
        c.add(MS, op(3, 900_000, true, 0, MS)); // a write near nothing
        c.add(MS, op(4, 100_100, false, 0, MS)); // near the head, not cached
        c.add(MS, op(5, 1040, false, 0, MS)); // far, but inside the prefetch
        c.add(MS, op(6, 50, true, 0, MS));
        assert_eq!(order(&mut c, MS), vec![1040, 100_100, 900_000, 50]);
    }

    #[test]
    fn the_busdriver_waits_for_the_volume_s_next_read() {
        let mut c = Cats::new(CatsParams::default());
        let first = op(1, 1000, false, 0, 0);
        c.add(0, first);
        assert!(matches!(c.dispatch(0), Dispatch::Op(_)));
        c.add(0, op(2, 5_000_000, true, 1, 0)); // other work pending
        c.completed(4 * MS, &first);
        assert_eq!(c.dispatch(4 * MS), Dispatch::WaitUntil(11 * MS));
        c.add(6 * MS, op(3, 1016, false, 0, 6 * MS));
        assert_eq!(order(&mut c, 6 * MS), vec![1016, 5_000_000]);
        // Without a next read the wait ends at 7 ms.
        let mut c = Cats::new(CatsParams::default());
        c.add(0, first);
        assert!(matches!(c.dispatch(0), Dispatch::Op(_)));
        c.add(0, op(2, 5_000_000, true, 1, 0));
        c.completed(4 * MS, &first);
        assert_eq!(order(&mut c, 11 * MS), vec![5_000_000]);
    }

    /// Two processes of one volume: the busdriver waits for the process whose read
    /// completed, though another process of the volume has a read queued (keyed on the
    /// volume, as before I/O contexts, it saw a pending read of "its" process and did
    /// not wait); the engine's own reads are never waited for.
    #[test]
    fn the_busdriver_waits_for_the_process_not_its_volume() {
        use super::super::sorted::testing::read_by;
        let mut c = Cats::new(CatsParams::default());
        let first = read_by(1, 1000, 0, 1, 0);
        c.add(0, first);
        assert!(matches!(c.dispatch(0), Dispatch::Op(_)));
        c.add(0, read_by(2, 5_000_000, 0, 2, 0)); // process 2, far away
        c.completed(4 * MS, &first);
        assert_eq!(c.dispatch(4 * MS), Dispatch::WaitUntil(11 * MS));
        c.add(6 * MS, read_by(3, 1016, 0, 1, 6 * MS));
        assert_eq!(order(&mut c, 6 * MS), vec![1016, 5_000_000]);
        // An engine read (a copy, a cleaner's read) completing sets no wait.
        let mut c = Cats::new(CatsParams::default());
        let engine = QueuedOp {
            context: IoContext::Engine,
            ..first
        };
        c.add(0, engine);
        assert!(matches!(c.dispatch(0), Dispatch::Op(_)));
        c.add(0, read_by(2, 5_000_000, 0, 2, 0));
        c.completed(4 * MS, &engine);
        assert!(matches!(c.dispatch(4 * MS), Dispatch::Op(o) if o.key == 2));
    }

    #[test]
    fn shadow_cache_wraps_long_spans_and_is_fifo() {
        let mut s = ShadowCache::new(2, 221);
        s.record(0, 1000); // keeps 779..1000
        assert!(!s.hit_op(&one_sector(0, 100, false, 0)));
        assert!(s.hit_op(&one_sector(0, 900, false, 0)));
        s.record(5000, 5010);
        s.record(7000, 7010); // evicts the first segment
        assert!(!s.hit_op(&one_sector(0, 900, false, 0)));
        assert!(s.hit_op(&one_sector(0, 5005, false, 0)));
    }

    #[test]
    fn a_table_cap_keeps_the_nearest_reads() {
        let mut c = Cats::new(CatsParams {
            table_cap: 2,
            busdriver_ns: 0,
            cache_segments: 0,
            ..Default::default()
        });
        for (k, s) in [10u64, 1_000_000, 2_000_000, 30].into_iter().enumerate() {
            c.add(0, one_sector(k, s, false, 0));
        }
        // The table holds 10 and 30 (nearest the head at 0); the far ones come later.
        assert_eq!(order(&mut c, MS)[..2], [10, 30]);
    }

    /// tiervisor's `busdriver_think_gate`: a process that thinks 20 ms after each read
    /// (more than the 7 ms delay) is waited for only until its think time is valid (the
    /// third read); one that thinks 1 ms always; without the gate (the paper's rule as
    /// we read it) both always. Per round, whether the busdriver waited.
    #[test]
    fn the_think_gate_skips_the_busdriver_for_processes_that_think_long() {
        use super::super::sorted::testing::read_by;
        let waits = |gate: bool, think_ms: u64| -> Vec<bool> {
            let mut c = Cats::new(CatsParams {
                busdriver_think_gate: gate,
                ..Default::default()
            });
            let mut now = 0;
            (0..6)
                .map(|i| {
                    c.add(now, read_by(i, 1000 + i as u64 * 8, 0, 1, now));
                    let Dispatch::Op(o) = c.dispatch(now) else {
                        panic!("round {i}: the read is dispatched")
                    };
                    // Other work pending (a write: reads go first, so it just waits).
                    c.add(now, op(100 + i, 9_000_000, true, 0, now));
                    now += 4 * MS;
                    c.completed(now, &o);
                    let waited = matches!(c.dispatch(now), Dispatch::WaitUntil(_));
                    now += think_ms * MS;
                    waited
                })
                .collect()
        };
        let (y, n) = (true, false);
        assert_eq!(waits(true, 20), [y, y, n, n, n, n]);
        assert_eq!(waits(true, 1), [y; 6]);
        assert_eq!(waits(false, 20), [y; 6]);
    }
}
