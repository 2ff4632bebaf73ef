//! Kyber: requests wait per domain (reads, writes) in arrival order; each domain may
//! have at most `depth` requests on the device, and every 100 ms the depths are scaled
//! from latency histograms so reads keep `read_lat_ms` and writes `write_lat_ms`.
//!
//! As in the kernel's block/kyber-iosched.c: latencies go in 8 buckets of a quarter
//! target each (`KYBER_LATENCY_SHIFT = 2`, 4 "good" buckets); a domain's percentile is
//! read once it has 500 samples or 1 s passed since its first; the device is congested
//! when some domain's p90 of I/O latency (dispatch to completion) is past its target;
//! then every domain with a p99 of total latency (arrival to completion) is resized to
//! `depth * (p99 bucket + 1) / 4`, and without congestion only domains past their target
//! grow that way; depths stay within 1 and the initial `kyber_depth` (read 256, write
//! 128). Dispatch batches per domain (`kyber_batch_size`: read 16, write 8) round robin.
//! Defaults `read_lat_nsec = 2 ms`, `write_lat_nsec = 10 ms`. The kernel's discard and
//! "other" domains do not arise here (flushes bypass the scheduler), and its timer is run
//! at the first completion or dispatch after it is due.

use std::collections::{BTreeMap, VecDeque};

use super::api::{Dispatch, QueuedOp, Registration, Scheduler};
use super::params::Params;

pub(super) const REGISTRATION: Registration = Registration {
    name: "kyber",
    aliases: &[],
    about: "Kyber: per-domain depths scaled to read/write latency targets",
    build: |p| Ok(Box::new(Kyber::new(KyberParams::from_params(p)?))),
};

#[derive(Clone, Copy, Debug)]
pub struct KyberParams {
    pub read_lat_ns: u64,
    pub write_lat_ns: u64,
}

impl Default for KyberParams {
    fn default() -> Self {
        KyberParams {
            read_lat_ns: 2_000_000,
            write_lat_ns: 10_000_000,
        }
    }
}

impl KyberParams {
    fn from_params(p: &mut Params) -> Result<Self, String> {
        Ok(KyberParams {
            read_lat_ns: p.ms_as_ns("read_lat_ms", 2.0, 0.001..=10_000.0)?,
            write_lat_ns: p.ms_as_ns("write_lat_ms", 10.0, 0.001..=10_000.0)?,
        })
    }
}

const DOMAINS: usize = 2;
const MAX_DEPTH: [u32; DOMAINS] = [256, 128];
const BATCH: [u32; DOMAINS] = [16, 8];
const BUCKETS: usize = 8;
const GOOD_BUCKETS: usize = 4;
const TIMER_NS: u64 = 100_000_000;
const IO: usize = 0;
const TOTAL: usize = 1;

/// One domain's latency histograms (I/O and total) and the kernel's percentile timeout.
#[derive(Default)]
struct Histo {
    buckets: [[u64; BUCKETS]; 2],
    /// When a percentile may be taken with fewer than 500 samples.
    timeout_ns: [Option<u64>; 2],
}

impl Histo {
    fn add(&mut self, kind: usize, target_ns: u64, latency_ns: u64) {
        let divisor = (target_ns >> 2).max(1);
        let b = if latency_ns == 0 {
            0
        } else {
            ((latency_ns - 1) / divisor).min(BUCKETS as u64 - 1) as usize
        };
        self.buckets[kind][b] += 1;
    }

    /// The kernel's `calculate_percentile`: a bucket index, or None while too few samples.
    fn percentile(&mut self, kind: usize, pct: u64, now_ns: u64) -> Option<usize> {
        let samples: u64 = self.buckets[kind].iter().sum();
        if samples == 0 {
            return None;
        }
        let timeout = *self.timeout_ns[kind].get_or_insert(now_ns + 1_000_000_000);
        if samples < 500 && now_ns < timeout {
            return None;
        }
        self.timeout_ns[kind] = None;
        let mut left = (samples * pct).div_ceil(100);
        let mut bucket = BUCKETS - 1;
        for (i, n) in self.buckets[kind][..BUCKETS - 1].iter().enumerate() {
            if *n >= left {
                bucket = i;
                break;
            }
            left -= n;
        }
        self.buckets[kind] = [0; BUCKETS];
        Some(bucket)
    }
}

pub struct Kyber {
    targets_ns: [u64; DOMAINS],
    queues: [VecDeque<QueuedOp>; DOMAINS],
    depth: [u32; DOMAINS],
    in_flight: [u32; DOMAINS],
    cur: usize,
    batching: u32,
    histo: [Histo; DOMAINS],
    /// The p99 bucket remembered for the next congestion (`domain_p99`).
    last_p99: [Option<usize>; DOMAINS],
    timer_at: Option<u64>,
    dispatched_at: BTreeMap<usize, u64>,
}

fn domain(op: &QueuedOp) -> usize {
    usize::from(op.is_write)
}

impl Kyber {
    pub fn new(p: KyberParams) -> Self {
        Kyber {
            targets_ns: [p.read_lat_ns, p.write_lat_ns],
            queues: Default::default(),
            depth: MAX_DEPTH,
            in_flight: [0; DOMAINS],
            cur: 0,
            batching: 0,
            histo: Default::default(),
            last_p99: [None; DOMAINS],
            timer_at: None,
            dispatched_at: BTreeMap::new(),
        }
    }

    /// The domains' current depths (read, write).
    pub fn depths(&self) -> [u32; DOMAINS] {
        self.depth
    }

    /// The kernel's `kyber_timer_fn`.
    fn timer(&mut self, now_ns: u64) {
        let bad = (0..DOMAINS).any(|d| {
            self.histo[d]
                .percentile(IO, 90, now_ns)
                .is_some_and(|b| b >= GOOD_BUCKETS)
        });
        for (d, max_depth) in MAX_DEPTH.into_iter().enumerate() {
            let mut p99 = self.histo[d].percentile(TOTAL, 99, now_ns);
            if bad {
                p99 = p99.or(self.last_p99[d]);
                self.last_p99[d] = None;
            } else if p99.is_some() {
                self.last_p99[d] = p99;
            }
            let Some(p99) = p99 else { continue };
            if bad || p99 >= GOOD_BUCKETS {
                let depth = (self.depth[d] as u64 * (p99 as u64 + 1)) >> 2;
                self.depth[d] = (depth as u32).clamp(1, max_depth);
            }
        }
    }

    fn run_timer_if_due(&mut self, now_ns: u64) {
        if self.timer_at.is_some_and(|t| now_ns >= t) {
            self.timer_at = None;
            self.timer(now_ns);
        }
    }

    fn take(&mut self, d: usize, now_ns: u64) -> Option<QueuedOp> {
        if self.in_flight[d] >= self.depth[d] {
            return None;
        }
        let op = self.queues[d].pop_front()?;
        self.in_flight[d] += 1;
        self.batching += 1;
        self.dispatched_at.insert(op.key, now_ns);
        Some(op)
    }
}

impl Scheduler for Kyber {
    fn name(&self) -> &'static str {
        "kyber"
    }

    fn add(&mut self, _now_ns: u64, op: QueuedOp) {
        self.queues[domain(&op)].push_back(op);
    }

    fn dispatch(&mut self, now_ns: u64) -> Dispatch {
        self.run_timer_if_due(now_ns);
        if self.batching < BATCH[self.cur]
            && let Some(op) = self.take(self.cur, now_ns)
        {
            return Dispatch::Op(op);
        }
        self.batching = 0;
        for _ in 0..DOMAINS {
            self.cur = (self.cur + 1) % DOMAINS;
            if let Some(op) = self.take(self.cur, now_ns) {
                return Dispatch::Op(op);
            }
        }
        // Out of tokens or requests: a completion asks again.
        Dispatch::Idle
    }

    fn completed(&mut self, now_ns: u64, op: &QueuedOp) {
        let d = domain(op);
        self.in_flight[d] = self.in_flight[d].saturating_sub(1);
        let target = self.targets_ns[d];
        if let Some(at) = self.dispatched_at.remove(&op.key) {
            self.histo[d].add(IO, target, now_ns.saturating_sub(at));
        }
        self.histo[d].add(TOTAL, target, now_ns.saturating_sub(op.arrival_ns));
        self.run_timer_if_due(now_ns);
        self.timer_at.get_or_insert(now_ns + TIMER_NS);
    }

    fn len(&self) -> usize {
        self.queues.iter().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::super::sorted::testing::op;
    use super::*;

    const MS: u64 = 1_000_000;

    /// A device running `parallel` requests at once, each taking `base` plus `per_queued`
    /// for every other request on it (so depth costs latency), fed from `k`.
    fn flood(k: &mut Kyber, secs: u64) -> Vec<u64> {
        let mut now = 0;
        let mut key = 0;
        let mut on_device: Vec<(u64, QueuedOp)> = Vec::new();
        let mut read_lat = Vec::new();
        let mut next_read = 0;
        while now < secs * 1_000 * MS {
            // Writes always queued (a flood); one read every 1 ms.
            while k.queues[1].len() < 64 {
                key += 1;
                k.add(now, op(key, key as u64 * 8, true, 1, now));
            }
            if now >= next_read {
                key += 1;
                k.add(now, op(key, key as u64 * 8, false, 0, now));
                next_read += MS;
            }
            while on_device.len() < 64 {
                match k.dispatch(now) {
                    Dispatch::Op(o) => {
                        let cost = 100_000 + 50_000 * on_device.len() as u64;
                        on_device.push((now + cost, o));
                    }
                    _ => break,
                }
            }
            now += 100_000;
            on_device.retain(|(done, o)| {
                if *done <= now {
                    if !o.is_write {
                        read_lat.push(now - o.arrival_ns);
                    }
                    k.completed(now, o);
                    false
                } else {
                    true
                }
            });
        }
        read_lat
    }

    #[test]
    fn write_depth_shrinks_until_reads_meet_their_target() {
        let mut k = Kyber::new(KyberParams::default());
        let lat = flood(&mut k, 5);
        assert!(
            k.depths()[1] < 32,
            "write depth throttled: {:?}",
            k.depths()
        );
        let last: Vec<u64> = lat[lat.len() - 1000..].to_vec();
        let mut sorted = last.clone();
        sorted.sort_unstable();
        let p90 = sorted[900];
        assert!(p90 <= 2 * MS, "read p90 {p90} ns over the 2 ms target");
    }

    #[test]
    fn percentiles_wait_for_500_samples_or_a_second() {
        let mut h = Histo::default();
        for _ in 0..499 {
            h.add(TOTAL, 4 * MS, MS);
        }
        assert_eq!(h.percentile(TOTAL, 99, 0), None);
        h.add(TOTAL, 4 * MS, 9 * MS); // bucket 7 (capped)
        // 500 samples: p99 is the 5th largest: bucket 0 (latency 1 ms = quarter target).
        assert_eq!(h.percentile(TOTAL, 99, 0), Some(0));
        h.add(TOTAL, 4 * MS, 3 * MS);
        assert_eq!(h.percentile(TOTAL, 99, 10), None);
        assert_eq!(h.percentile(TOTAL, 99, 10 + 1_000 * MS), Some(2));
    }
}
