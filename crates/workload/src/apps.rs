//! Block-level generators shaped like the applications of seed 001's Figure 9.
//!
//! They imitate what the guest's disk sees, not the applications themselves:
//! - `varmail` (Filebench varmail: a mail server, 1,000 files of about 16 KiB): each
//!   loop creates a file and appends to it, fsyncs, reads another whole file, appends to
//!   it and fsyncs, and reads a third. An fsync is a guest journal write (8 KiB, sequential
//!   in a journal area) then a FLUSH. Per loop: 4 data writes, 2 journal writes, 2 reads,
//!   2 FLUSHes: fsync-heavy.
//! - `fileserver` (Filebench fileserver: 10,000 files of about 128 KiB, 50 threads): each
//!   loop writes a whole file (128 KiB), appends 16 KiB to another, reads a third whole;
//!   no fsync.
//! - `tpcc` (TPC-C on MySQL/InnoDB with `innodb_flush_log_at_trx_commit = 1`): each
//!   transaction reads two random 16 KiB pages, writes back two dirty 16 KiB pages, and
//!   commits: a 4 KiB redo-log write (sequential, wrapping in a 96 MiB log) then a FLUSH.
//!
//! Files and pages are drawn uniformly from the job's region; the same seed gives the
//! same requests.

use std::collections::VecDeque;

use rand::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;

use crate::r#gen::below;
use crate::{WlKind, WlRequest, Workload};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;

/// Which application a job imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AppKind {
    Varmail,
    Fileserver,
    Tpcc,
}

impl AppKind {
    pub fn parse(s: &str) -> Option<AppKind> {
        match s {
            "varmail" => Some(AppKind::Varmail),
            "fileserver" => Some(AppKind::Fileserver),
            "tpcc" | "tpcc-mysql" => Some(AppKind::Tpcc),
            _ => None,
        }
    }
    pub fn names() -> &'static str {
        "varmail, fileserver, tpcc"
    }
    pub fn name(self) -> &'static str {
        match self {
            AppKind::Varmail => "varmail",
            AppKind::Fileserver => "fileserver",
            AppKind::Tpcc => "tpcc",
        }
    }
    /// Smallest region the layout fits in.
    pub fn min_size_bytes(self) -> u64 {
        match self {
            AppKind::Varmail => 128 * MIB,
            AppKind::Fileserver => 64 * MIB,
            AppKind::Tpcc => 256 * MIB,
        }
    }
}

/// An application-shaped job on `[offset_bytes, offset_bytes + size_bytes)`.
#[derive(Clone, Debug, PartialEq)]
pub struct AppJob {
    pub kind: AppKind,
    pub offset_bytes: u64,
    pub size_bytes: u64,
    /// Requests kept outstanding (closed loop).
    pub depth: u32,
    /// Stop after this many loops (transactions); None: after `runtime_ns`.
    pub loops: Option<u64>,
    pub runtime_ns: Option<u64>,
    pub seed: u64,
}

/// A running application job.
pub struct AppWorkload {
    job: AppJob,
    rng: Xoshiro256PlusPlus,
    pending: VecDeque<WlRequest>,
    loops: u64,
    /// Next byte of the guest journal (varmail) or redo log (tpcc), within its area.
    log_cursor: u64,
}

fn req(kind: WlKind, offset_bytes: u64, len_bytes: u64) -> WlRequest {
    WlRequest {
        kind,
        offset_bytes,
        len_bytes,
        at_ns: None,
    }
}

impl AppWorkload {
    pub fn new(job: AppJob) -> AppWorkload {
        AppWorkload {
            rng: Xoshiro256PlusPlus::seed_from_u64(job.seed),
            pending: VecDeque::new(),
            loops: 0,
            log_cursor: 0,
            job,
        }
    }

    /// Loops (transactions) generated so far.
    pub fn loops(&self) -> u64 {
        self.loops
    }

    /// Append a sequential log write of `len` bytes in the log area `[base, base + area)`.
    fn log_write(&mut self, base: u64, area: u64, len: u64) {
        if self.log_cursor + len > area {
            self.log_cursor = 0;
        }
        self.pending
            .push_back(req(WlKind::Write, base + self.log_cursor, len));
        self.log_cursor += len;
    }

    fn varmail(&mut self) {
        // Files in 64 KiB slots; the guest journal in the last 32 MiB of the region.
        let (o, size) = (self.job.offset_bytes, self.job.size_bytes);
        let journal = 32 * MIB;
        let files = ((size - journal) / (64 * KIB)).clamp(1, 1000);
        let file = |rng: &mut Xoshiro256PlusPlus| o + below(rng, files) * 64 * KIB;
        let append = |rng: &mut Xoshiro256PlusPlus| (1 + below(rng, 7)) * 4 * KIB;
        // Create and append, fsync.
        let (f1, a1) = (file(&mut self.rng), append(&mut self.rng));
        self.pending.push_back(req(WlKind::Write, f1, 16 * KIB));
        self.pending
            .push_back(req(WlKind::Write, f1 + 16 * KIB, a1));
        self.log_write(o + size - journal, journal, 8 * KIB);
        self.pending.push_back(req(WlKind::Flush, 0, 0));
        // Read a whole file, append to it, fsync.
        let (f2, a2) = (file(&mut self.rng), append(&mut self.rng));
        self.pending.push_back(req(WlKind::Read, f2, 16 * KIB));
        self.pending
            .push_back(req(WlKind::Write, f2 + 16 * KIB, a2));
        self.pending.push_back(req(WlKind::Write, f2, 4 * KIB));
        self.log_write(o + size - journal, journal, 8 * KIB);
        self.pending.push_back(req(WlKind::Flush, 0, 0));
        // Read a third.
        let f3 = file(&mut self.rng);
        self.pending.push_back(req(WlKind::Read, f3, 16 * KIB));
    }

    fn fileserver(&mut self) {
        let (o, size) = (self.job.offset_bytes, self.job.size_bytes);
        let files = (size / (256 * KIB)).clamp(1, 10_000);
        let file = |rng: &mut Xoshiro256PlusPlus| o + below(rng, files) * 256 * KIB;
        let f1 = file(&mut self.rng);
        self.pending.push_back(req(WlKind::Write, f1, 128 * KIB));
        let f2 = file(&mut self.rng);
        self.pending
            .push_back(req(WlKind::Write, f2 + 128 * KIB, 16 * KIB));
        let f3 = file(&mut self.rng);
        self.pending.push_back(req(WlKind::Read, f3, 128 * KIB));
    }

    fn tpcc(&mut self) {
        // Tablespace pages, then a 96 MiB redo log at the end of the region.
        let (o, size) = (self.job.offset_bytes, self.job.size_bytes);
        let log = 96 * MIB;
        let pages = ((size - log) / (16 * KIB)).max(1);
        for kind in [WlKind::Read, WlKind::Read, WlKind::Write, WlKind::Write] {
            let p = below(&mut self.rng, pages);
            self.pending
                .push_back(req(kind, o + p * 16 * KIB, 16 * KIB));
        }
        self.log_write(o + size - log, log, 4 * KIB);
        self.pending.push_back(req(WlKind::Flush, 0, 0));
    }
}

impl Workload for AppWorkload {
    fn next(&mut self, now_ns: u64) -> Option<WlRequest> {
        if self.pending.is_empty() {
            let j = &self.job;
            let done = j.loops.is_some_and(|n| self.loops >= n)
                || j.runtime_ns.is_some_and(|r| now_ns >= r)
                || (j.loops.is_none() && j.runtime_ns.is_none());
            if done {
                return None;
            }
            self.loops += 1;
            match j.kind {
                AppKind::Varmail => self.varmail(),
                AppKind::Fileserver => self.fileserver(),
                AppKind::Tpcc => self.tpcc(),
            }
            // Decorrelate the streams of VMs that share a seed offset.
            let _ = self.rng.next_u32();
        }
        self.pending.pop_front()
    }

    fn depth(&self) -> u32 {
        self.job.depth.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(kind: AppKind, loops: u64, seed: u64) -> Vec<WlRequest> {
        let mut w = AppWorkload::new(AppJob {
            kind,
            offset_bytes: 0,
            size_bytes: 1 << 30,
            depth: 1,
            loops: Some(loops),
            runtime_ns: None,
            seed,
        });
        std::iter::from_fn(|| w.next(0)).collect()
    }

    fn count(r: &[WlRequest], k: WlKind) -> usize {
        r.iter().filter(|x| x.kind == k).count()
    }

    #[test]
    fn each_application_has_its_shape() {
        let v = run(AppKind::Varmail, 100, 1);
        assert_eq!(
            (
                count(&v, WlKind::Write),
                count(&v, WlKind::Read),
                count(&v, WlKind::Flush)
            ),
            (600, 200, 200)
        );
        let f = run(AppKind::Fileserver, 100, 1);
        assert_eq!(count(&f, WlKind::Flush), 0, "fileserver never syncs");
        assert!(f.iter().any(|r| r.len_bytes == 128 * KIB));
        let t = run(AppKind::Tpcc, 100, 1);
        assert_eq!(count(&t, WlKind::Flush), 100, "one commit per transaction");
        let pages = t.iter().filter(|r| r.len_bytes == 16 * KIB).count();
        assert_eq!(pages, 400);
        for r in v.iter().chain(&f).chain(&t) {
            assert!(r.offset_bytes + r.len_bytes <= 1 << 30, "{r:?}");
        }
        // The redo log is written sequentially.
        let redo: Vec<u64> = t
            .iter()
            .filter(|r| r.len_bytes == 4 * KIB)
            .map(|r| r.offset_bytes)
            .collect();
        assert!(redo.windows(2).all(|w| w[1] == w[0] + 4 * KIB));
    }

    #[test]
    fn same_seed_same_requests() {
        assert_eq!(run(AppKind::Varmail, 50, 3), run(AppKind::Varmail, 50, 3));
        assert_ne!(run(AppKind::Varmail, 50, 3), run(AppKind::Varmail, 50, 4));
    }
}
