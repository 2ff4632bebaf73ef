//! A fio-like synthetic job.

use rand::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;

use crate::skew::{Distribution, ZipfSampler, pareto_rank};
use crate::{WlKind, WlRequest, Workload};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FioRw {
    Read,
    Write,
    RandRead,
    RandWrite,
    RandRw,
    /// Sequential mixed read/write.
    Rw,
}

impl FioRw {
    pub fn parse(s: &str) -> Option<FioRw> {
        Some(match s {
            "read" => FioRw::Read,
            "write" => FioRw::Write,
            "randread" => FioRw::RandRead,
            "randwrite" => FioRw::RandWrite,
            "randrw" => FioRw::RandRw,
            "rw" | "readwrite" => FioRw::Rw,
            _ => return None,
        })
    }
    pub fn names() -> &'static str {
        "read, write, randread, randwrite, randrw, rw"
    }
    fn random(self) -> bool {
        matches!(self, FioRw::RandRead | FioRw::RandWrite | FioRw::RandRw)
    }
}

/// Parameters of a fio-like job, with fio's meanings.
#[derive(Clone, Debug, PartialEq)]
pub struct FioJob {
    pub rw: FioRw,
    pub bs: u64,
    pub iodepth: u32,
    /// Region the job works in: `[offset_bytes, offset_bytes + size_bytes)`.
    pub offset_bytes: u64,
    pub size_bytes: u64,
    /// Percentage of reads for mixed jobs.
    pub rwmixread: u32,
    /// Issue a flush after every this many writes (0: never).
    pub fsync_every: u32,
    /// Stop after this many I/Os (flushes not counted); None: one pass over the region,
    /// unless a run time is set.
    pub ios: Option<u64>,
    pub runtime_ns: Option<u64>,
    pub seed: u64,
    /// Random jobs touch every block once per pass before any block twice (fio's
    /// random map); off: blocks are drawn independently.
    pub random_map: bool,
    /// Issue one flush after the last I/O (fio's `end_fsync`), so a run's time includes
    /// making its writes durable.
    pub end_fsync: bool,
    /// fio's `random_distribution` (see `skew.rs`): uniform, zoned (hot and cold
    /// regions), zipf or pareto. A skewed one turns the random map off, as in fio.
    pub distribution: Distribution,
}

/// A pseudo-random permutation of `0..n` (n >= 1): an invertible mix of `bits`-bit
/// integers, walked until it lands below `n` (cycle walking keeps it a permutation).
#[derive(Clone, Debug)]
pub(crate) struct Permutation {
    n: u64,
    bits: u32,
    key: u64,
}

impl Permutation {
    pub(crate) fn new(n: u64, key: u64) -> Permutation {
        let bits = (64 - (n.max(2) - 1).leading_zeros()).max(2);
        Permutation { n, bits, key }
    }

    fn mix(&self, mut x: u64) -> u64 {
        let mask = if self.bits == 64 {
            u64::MAX
        } else {
            (1 << self.bits) - 1
        };
        let half = self.bits.div_ceil(2);
        for round in 0..4u64 {
            // Each step is a bijection on `bits`-bit values.
            x = (x ^ (self.key.rotate_left(round as u32 * 16) & mask)) & mask;
            x = x.wrapping_mul(0x9E37_79B9_7F4A_7C15 | 1) & mask;
            x ^= x >> half;
        }
        x
    }

    pub(crate) fn get(&self, i: u64) -> u64 {
        let mut x = self.mix(i);
        while x >= self.n {
            x = self.mix(x);
        }
        x
    }
}

/// A uniform integer in `0..n` (multiply-shift; stable across library versions).
pub fn below(rng: &mut impl RngCore, n: u64) -> u64 {
    ((rng.next_u64() as u128 * n as u128) >> 64) as u64
}

/// A running job.
pub struct FioWorkload {
    job: FioJob,
    rng: Xoshiro256PlusPlus,
    issued: u64,
    limit: Option<u64>,
    cursor: u64,
    writes_since_flush: u32,
    slots: u64,
    perm: Option<Permutation>,
    /// Zipf and pareto: where rank `r` lives (fio hashes ranks for the same reason: so
    /// the hot blocks are spread over the region, not all at its start).
    scatter: Option<Permutation>,
    zipf: Option<ZipfSampler>,
    end_fsync_sent: bool,
}

impl FioWorkload {
    pub fn new(job: FioJob) -> FioWorkload {
        let bs = job.bs.max(512);
        let slots = (job.size_bytes / bs).max(1);
        let limit = match (job.ios, job.runtime_ns) {
            (Some(n), _) => Some(n),
            (None, Some(_)) => None,
            (None, None) => Some(slots),
        };
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(job.seed);
        let skewed = job.distribution.skewed();
        let perm = (job.random_map && job.rw.random() && !skewed)
            .then(|| Permutation::new(slots, rng.next_u64()));
        let scatter = matches!(
            job.distribution,
            Distribution::Zipf { .. } | Distribution::Pareto { .. }
        )
        .then(|| Permutation::new(slots, rng.next_u64()));
        let zipf = match job.distribution {
            Distribution::Zipf { theta } => Some(ZipfSampler::new(slots, theta)),
            _ => None,
        };
        FioWorkload {
            perm,
            scatter,
            zipf,
            end_fsync_sent: false,
            rng,
            issued: 0,
            limit,
            cursor: 0,
            writes_since_flush: 0,
            slots,
            job,
        }
    }
}

impl FioWorkload {
    /// The block of the next random I/O, by the job's distribution.
    fn random_slot(&mut self) -> u64 {
        let n = self.slots;
        let rank = match self.job.distribution {
            Distribution::Uniform => return below(&mut self.rng, n),
            Distribution::Zoned { io_pct, region_pct } => {
                let hot = (n * region_pct as u64 / 100).clamp(1, n);
                return if below(&mut self.rng, 100) < io_pct as u64 || hot == n {
                    below(&mut self.rng, hot)
                } else {
                    hot + below(&mut self.rng, n - hot)
                };
            }
            Distribution::Zipf { .. } => match &self.zipf {
                Some(z) => z.sample(&mut self.rng) - 1,
                None => unreachable!("a zipf job has a sampler"),
            },
            Distribution::Pareto { h } => pareto_rank(&mut self.rng, n, h),
        };
        match &self.scatter {
            Some(p) => p.get(rank),
            None => rank,
        }
    }
}

impl Workload for FioWorkload {
    fn next(&mut self, now_ns: u64) -> Option<WlRequest> {
        let j = &self.job;
        if self.limit.is_some_and(|l| self.issued >= l) || j.runtime_ns.is_some_and(|r| now_ns >= r)
        {
            if j.end_fsync && !self.end_fsync_sent {
                self.end_fsync_sent = true;
                return Some(WlRequest {
                    kind: WlKind::Flush,
                    offset_bytes: 0,
                    len_bytes: 0,
                    at_ns: None,
                    context: None,
                });
            }
            return None;
        }
        if j.fsync_every > 0 && self.writes_since_flush >= j.fsync_every {
            self.writes_since_flush = 0;
            return Some(WlRequest {
                kind: WlKind::Flush,
                offset_bytes: 0,
                len_bytes: 0,
                at_ns: None,
                context: None,
            });
        }
        let bs = j.bs.max(512);
        let slot = if let Some(p) = &self.perm {
            p.get(self.issued % self.slots)
        } else if j.rw.random() {
            self.random_slot()
        } else {
            let s = self.cursor % self.slots;
            self.cursor += 1;
            s
        };
        let j = &self.job;
        let read = match j.rw {
            FioRw::Read | FioRw::RandRead => true,
            FioRw::Write | FioRw::RandWrite => false,
            FioRw::RandRw | FioRw::Rw => below(&mut self.rng, 100) < j.rwmixread as u64,
        };
        self.issued += 1;
        if !read {
            self.writes_since_flush += 1;
        }
        Some(WlRequest {
            kind: if read { WlKind::Read } else { WlKind::Write },
            offset_bytes: j.offset_bytes + slot * bs,
            len_bytes: bs,
            at_ns: None,
            context: None,
        })
    }

    fn depth(&self) -> u32 {
        self.job.iodepth.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(rw: FioRw) -> FioJob {
        FioJob {
            rw,
            bs: 4096,
            iodepth: 4,
            offset_bytes: 1 << 20,
            size_bytes: 1 << 20,
            rwmixread: 70,
            fsync_every: 0,
            ios: Some(1000),
            runtime_ns: None,
            seed: 42,
            random_map: false,
            end_fsync: false,
            distribution: Distribution::Uniform,
        }
    }

    #[test]
    fn zoned_distribution_sends_most_io_to_the_hot_zone() {
        let mut w = FioWorkload::new(FioJob {
            size_bytes: 1000 * 4096,
            ios: Some(20_000),
            distribution: Distribution::Zoned {
                io_pct: 80,
                region_pct: 20,
            },
            ..job(FioRw::RandWrite)
        });
        let hot = std::iter::from_fn(|| w.next(0))
            .filter(|r| r.offset_bytes < (1 << 20) + 200 * 4096)
            .count();
        assert!(
            (15_500..16_500).contains(&hot),
            "{hot} of 20000 in the hot 20 %"
        );
    }

    /// The share of `draws` accesses that the hottest tenth of `blocks` blocks received.
    fn hottest_tenth_share(distribution: Distribution, blocks: u64, draws: u64, seed: u64) -> f64 {
        let mut w = FioWorkload::new(FioJob {
            size_bytes: blocks * 4096,
            ios: Some(draws),
            random_map: true,
            seed,
            distribution,
            ..job(FioRw::RandRead)
        });
        let mut counts = vec![0u64; blocks as usize];
        while let Some(r) = w.next(0) {
            counts[((r.offset_bytes - (1 << 20)) / 4096) as usize] += 1;
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        counts[..blocks as usize / 10].iter().sum::<u64>() as f64 / draws as f64
    }

    #[test]
    fn zipf_and_pareto_give_the_hottest_tenth_its_predicted_share() {
        let blocks = 10_000u64;
        for theta in [0.8, 1.0, 1.2] {
            let h = |n: u64| (1..=n).map(|k| (k as f64).powf(-theta)).sum::<f64>();
            let want = h(blocks / 10) / h(blocks);
            let got = hottest_tenth_share(Distribution::Zipf { theta }, blocks, 400_000, 5);
            assert!(
                (got - want).abs() < 0.02,
                "zipf:{theta}: {got:.3}, law {want:.3}"
            );
        }
        for hp in [0.2, 0.4] {
            // P(⌊(n − 1) u^p⌋ < n / 10) = (n / 10 / (n − 1))^(1 / p).
            let p = f64::ln(hp) / f64::ln(1.0 - hp);
            let want = ((blocks / 10) as f64 / (blocks - 1) as f64).powf(1.0 / p);
            let got = hottest_tenth_share(Distribution::Pareto { h: hp }, blocks, 400_000, 5);
            assert!(
                (got - want).abs() < 0.02,
                "pareto:{hp}: {got:.3}, law {want:.3}"
            );
        }
        // Deterministic by seed, different across seeds, spread over the region.
        let z = Distribution::Zipf { theta: 1.2 };
        assert_eq!(
            hottest_tenth_share(z, 1000, 5000, 1),
            hottest_tenth_share(z, 1000, 5000, 1)
        );
        let run = |seed| {
            let mut w = FioWorkload::new(FioJob {
                size_bytes: 1000 * 4096,
                seed,
                distribution: z,
                ..job(FioRw::RandRead)
            });
            std::iter::from_fn(|| w.next(0)).collect::<Vec<_>>()
        };
        assert_ne!(run(1), run(2));
        let first_tenth = run(1)
            .iter()
            .filter(|r| r.offset_bytes < (1 << 20) + 100 * 4096)
            .count();
        assert!(
            first_tenth < 400,
            "{first_tenth} of 1000 in the first tenth: not scattered"
        );
    }

    #[test]
    fn random_map_touches_every_block_once_per_pass_then_flushes() {
        for (size, seed) in [(1u64 << 20, 1), (4096 * 1000, 7), (4096 * 3, 3), (4096, 9)] {
            let slots = size / 4096;
            let mut w = FioWorkload::new(FioJob {
                size_bytes: size,
                ios: None,
                seed,
                random_map: true,
                end_fsync: true,
                ..job(FioRw::RandWrite)
            });
            let reqs: Vec<WlRequest> = std::iter::from_fn(|| w.next(0)).collect();
            assert_eq!(reqs.len() as u64, slots + 1);
            assert_eq!(reqs.last().map(|r| r.kind), Some(WlKind::Flush));
            let mut seen: Vec<u64> = reqs[..slots as usize]
                .iter()
                .map(|r| (r.offset_bytes - (1 << 20)) / 4096)
                .collect();
            let in_order = seen.windows(2).filter(|p| p[1] == p[0] + 1).count();
            seen.sort_unstable();
            assert_eq!(seen, (0..slots).collect::<Vec<_>>(), "size {size}");
            // Shuffled, not a walk.
            assert!(
                slots < 100 || in_order < slots as usize / 10,
                "{in_order} in order"
            );
        }
    }

    #[test]
    fn sequential_job_walks_the_region_and_wraps() {
        let mut w = FioWorkload::new(FioJob {
            ios: Some(300),
            ..job(FioRw::Write)
        });
        let offs: Vec<u64> = std::iter::from_fn(|| w.next(0))
            .map(|r| r.offset_bytes)
            .collect();
        assert_eq!(offs.len(), 300);
        assert_eq!(offs[0], 1 << 20);
        assert_eq!(offs[1], (1 << 20) + 4096);
        assert_eq!(offs[256], 1 << 20);
    }

    #[test]
    fn random_mix_respects_region_ratio_and_seed() {
        let run = |seed| {
            let mut w = FioWorkload::new(FioJob {
                seed,
                ..job(FioRw::RandRw)
            });
            std::iter::from_fn(|| w.next(0)).collect::<Vec<_>>()
        };
        let a = run(1);
        assert_eq!(a, run(1));
        assert_ne!(a, run(2));
        assert!(a.iter().all(|r| r.offset_bytes >= 1 << 20
            && r.offset_bytes + 4096 <= 2 << 20
            && r.offset_bytes % 4096 == 0));
        let reads = a.iter().filter(|r| r.kind == WlKind::Read).count();
        assert!((600..800).contains(&reads), "reads {reads}");
    }

    #[test]
    fn fsync_every_n_writes_and_runtime_stop() {
        let mut w = FioWorkload::new(FioJob {
            fsync_every: 3,
            ios: Some(9),
            ..job(FioRw::RandWrite)
        });
        let kinds: Vec<WlKind> = std::iter::from_fn(|| w.next(0)).map(|r| r.kind).collect();
        assert_eq!(kinds.iter().filter(|k| **k == WlKind::Flush).count(), 2);
        assert_eq!(kinds[3], WlKind::Flush);
        let mut t = FioWorkload::new(FioJob {
            ios: None,
            runtime_ns: Some(100),
            ..job(FioRw::Read)
        });
        assert!(t.next(99).is_some());
        assert!(t.next(100).is_none());
    }
}
