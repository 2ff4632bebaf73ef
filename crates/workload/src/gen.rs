//! A fio-like synthetic job.

use rand::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;

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
        FioWorkload {
            rng: Xoshiro256PlusPlus::seed_from_u64(job.seed),
            issued: 0,
            limit,
            cursor: 0,
            writes_since_flush: 0,
            slots,
            job,
        }
    }
}

impl Workload for FioWorkload {
    fn next(&mut self, now_ns: u64) -> Option<WlRequest> {
        let j = &self.job;
        if self.limit.is_some_and(|l| self.issued >= l) || j.runtime_ns.is_some_and(|r| now_ns >= r)
        {
            return None;
        }
        if j.fsync_every > 0 && self.writes_since_flush >= j.fsync_every {
            self.writes_since_flush = 0;
            return Some(WlRequest {
                kind: WlKind::Flush,
                offset_bytes: 0,
                len_bytes: 0,
                at_ns: None,
            });
        }
        let bs = j.bs.max(512);
        let slot = if j.rw.random() {
            below(&mut self.rng, self.slots)
        } else {
            let s = self.cursor % self.slots;
            self.cursor += 1;
            s
        };
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
