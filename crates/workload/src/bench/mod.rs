//! Block-level generators shaped like the benchmarks of seed 004's Table 7 (Dbench,
//! IOzone and a Linux kernel compile), for the migration figures (11-14) and for any
//! scenario (`[vm.bench]`, docs/CONFIG.md).
//!
//! They imitate what the guest's disk sees, not the programs. Each job runs `procs`
//! processes, each with one request outstanding (the programs' system calls are
//! synchronous); a process may think (CPU time) before a request, which the simulator
//! honours as a not-before time ([`Workload::paced`]). What comes from the paper and what
//! is ours:
//!
//! - **`dbench`** (Dbench 4's NetBench-like file-server load, Table 7's `Db_2` and `Db_16`:
//!   `proc` = 2 or 16 clients, "`-R 99999`" = no rate limit, so no think time: from the
//!   paper). Each client owns a directory: an equal share of the region before the shared
//!   journal (the last 1/16 of the region, at most 32 MiB), as files of 1 MiB. Each client
//!   repeats operations drawn with the weights of dbench 4's `client.txt` load as its
//!   summary counts them (ReadX 2906, WriteX 917, NTCreateX 1855, Unlink 375, Flush 130
//!   per 6183; ours, from a typical `dbench` run's operation table, not from the paper). A
//!   ReadX or WriteX is one request of 4 to 64 KiB (4 KiB multiples, uniform; ours) at a
//!   random 4 KiB-aligned place in a random file of the client; a create or unlink dirties
//!   one metadata block and sends nothing; a Flush (the client's fsync) writes the dirtied
//!   metadata and one descriptor block to the journal, then FLUSHes. The guest's page cache
//!   is not modelled (ours): every ReadX reaches the disk, and writes are not delayed.
//!   About 3.2 % of requests are FLUSHes and 24 % of the data requests writes.
//! - **`iozone-write`** and **`iozone-read`** (IOzone's write test, `-i 0`: the file written
//!   sequentially record by record then rewritten; and its read test, `-i 1`: read then
//!   reread; Table 7's `IOZ_W` and `IOZ_R`: from the paper). Each process (IOzone's
//!   throughput mode `-t procs`; default 1, IOzone's) has its own file, an equal share of
//!   the region, and loops over it from its start, one `record` (default 128 KiB, ours:
//!   the paper gives the file sizes, not the record) per request, as with `-I` (O_DIRECT:
//!   one request per record; ours). A write pass ends with a FLUSH (`-e`, the fsync IOzone
//!   times with the writes; ours). The read test's file is the region's data as it is (a
//!   scenario prefills it, as IOzone's read test writes its file first).
//! - **`kernel-compile`** (Linux 2.6.32 built in the VM, Table 7's `KC_10`/`KC_20`, whose
//!   images of 10 and 20 GB are the scenario's volume size: from the paper). The source
//!   tree is the region's first half, the object files its second half. A process (make's
//!   job; default 1, the paper's VM had one vCPU) per compile unit reads a source file
//!   (4 to 32 KiB) and a header (4 to 16 KiB) at random places of the tree, thinks
//!   (compiles) for an exponential time of mean `think` (default 5 ms, ours: a real unit
//!   takes far longer on the CPU, but most of its reads hit the page cache; 5 ms keeps an
//!   HDD busy a good part of the time and an SSD a small part), and writes the object
//!   file (8 to 64 KiB) at the next place of the object area (the allocator's, wrapping).
//!   All sizes ours, in 4 KiB multiples, uniform.
//!
//! Everything is drawn from one seeded generator: the same seed gives the same requests
//! for the same completions.

use std::collections::{HashMap, VecDeque};

use rand::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;

use crate::r#gen::below;
use crate::{WlKind, WlRequest, Workload};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const BLOCK: u64 = 4 * KIB;
/// A dbench client's file.
const DBENCH_FILE: u64 = MIB;
/// The dbench journal: the region's last sixteenth, at most this.
const DBENCH_JOURNAL_MAX: u64 = 32 * MIB;
/// Largest journal write (a bigger fsync writes its first blocks, as jbd2 splits them).
const MAX_JOURNAL_WRITE: u64 = 256 * KIB;
/// dbench 4's operation weights (ReadX, WriteX, NTCreateX, Unlink, Flush).
pub const DBENCH_WEIGHTS: [u64; 5] = [2906, 917, 1855, 375, 130];

/// Which benchmark a job imitates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BenchKind {
    Dbench,
    IozoneWrite,
    IozoneRead,
    KernelCompile,
}

impl BenchKind {
    pub fn parse(s: &str) -> Option<BenchKind> {
        Some(match s {
            "dbench" => BenchKind::Dbench,
            "iozone-write" => BenchKind::IozoneWrite,
            "iozone-read" => BenchKind::IozoneRead,
            "kernel-compile" => BenchKind::KernelCompile,
            _ => return None,
        })
    }
    pub fn names() -> &'static str {
        "dbench, iozone-write, iozone-read, kernel-compile"
    }
    pub fn name(self) -> &'static str {
        match self {
            BenchKind::Dbench => "dbench",
            BenchKind::IozoneWrite => "iozone-write",
            BenchKind::IozoneRead => "iozone-read",
            BenchKind::KernelCompile => "kernel-compile",
        }
    }
    /// Processes by default: dbench's 1 client, IOzone's one process, make's one job.
    pub fn default_procs(self) -> u32 {
        1
    }
    /// Smallest region: a dbench client's directory holds its largest request (its
    /// files are 1 MiB, or the directory when smaller) beside the journal's sixteenth; a
    /// kernel compile's halves hold its largest read and write.
    pub fn min_size_bytes(self, procs: u32, record_bytes: u64) -> u64 {
        match self {
            BenchKind::Dbench => (procs as u64 * 64 * KIB) * 17 / 16 + 64 * KIB,
            BenchKind::IozoneWrite | BenchKind::IozoneRead => procs as u64 * record_bytes,
            BenchKind::KernelCompile => 128 * KIB,
        }
    }
}

/// A benchmark-shaped job on `[offset_bytes, offset_bytes + size_bytes)`.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchJob {
    pub kind: BenchKind,
    pub offset_bytes: u64,
    pub size_bytes: u64,
    /// dbench clients, IOzone processes, make jobs; one request outstanding each.
    pub procs: u32,
    /// IOzone's record (bytes per request); a multiple of 512.
    pub record_bytes: u64,
    /// Kernel compile: mean CPU time per compile unit.
    pub think_ns: u64,
    /// Stop after this many operations (dbench ops, IOzone records, compile units) over
    /// all processes, or after `runtime_ns`; at least one of them is set.
    pub ops: Option<u64>,
    pub runtime_ns: Option<u64>,
    pub seed: u64,
}

impl BenchJob {
    /// A job with the defaults of `kind` on `[0, size_bytes)`, running `runtime_ns`.
    pub fn new(kind: BenchKind, size_bytes: u64, runtime_ns: u64) -> BenchJob {
        BenchJob {
            kind,
            offset_bytes: 0,
            size_bytes,
            procs: kind.default_procs(),
            record_bytes: 128 * KIB,
            think_ns: 5_000_000,
            ops: None,
            runtime_ns: Some(runtime_ns),
            seed: 1,
        }
    }
}

/// One process.
#[derive(Default)]
struct Proc {
    /// Requests of the current operation still to issue, the first with a think time
    /// before it.
    steps: VecDeque<(u64, WlRequest)>,
    /// Not before this (simulated ns): the end of its last request plus its think time.
    ready_ns: u64,
    /// Waiting for its request (or holding its slot through a think time).
    busy: bool,
    /// IOzone: the next record's place in the file.
    cursor: u64,
    /// dbench: metadata blocks dirtied since the last fsync.
    dirty_meta: u64,
}

/// A running benchmark job.
pub struct BenchWorkload {
    job: BenchJob,
    rng: Xoshiro256PlusPlus,
    procs: Vec<Proc>,
    /// Processes ready to issue, in the order they became so.
    free: VecDeque<usize>,
    owner: HashMap<u64, usize>,
    returned: u64,
    ops: u64,
    /// Shared cursors: the dbench journal's, the kernel compile's object allocator.
    journal_cursor: u64,
    object_cursor: u64,
}

fn req(kind: WlKind, offset_bytes: u64, len_bytes: u64) -> WlRequest {
    WlRequest {
        kind,
        offset_bytes,
        len_bytes,
        at_ns: None,
        context: None,
    }
}

impl BenchWorkload {
    pub fn new(job: BenchJob) -> BenchWorkload {
        let n = job.procs.max(1) as usize;
        BenchWorkload {
            rng: Xoshiro256PlusPlus::seed_from_u64(job.seed),
            procs: (0..n).map(|_| Proc::default()).collect(),
            free: (0..n).collect(),
            owner: HashMap::new(),
            returned: 0,
            ops: 0,
            journal_cursor: 0,
            object_cursor: 0,
            job,
        }
    }

    /// Operations started so far (dbench ops, IOzone records, compile units).
    pub fn ops(&self) -> u64 {
        self.ops
    }

    fn may_start(&self, now_ns: u64) -> bool {
        let j = &self.job;
        !(j.ops.is_some_and(|n| self.ops >= n)
            || j.runtime_ns.is_some_and(|r| now_ns >= r)
            || (j.ops.is_none() && j.runtime_ns.is_none()))
    }

    /// `lo..=hi` bytes in 4 KiB multiples, uniform.
    fn blocks(&mut self, lo: u64, hi: u64) -> u64 {
        (lo / BLOCK + below(&mut self.rng, hi / BLOCK - lo / BLOCK + 1)) * BLOCK
    }

    /// A 4 KiB-aligned place for `len` bytes in `[base, base + span)`.
    fn place(&mut self, base: u64, span: u64, len: u64) -> u64 {
        base + below(&mut self.rng, (span.saturating_sub(len) / BLOCK) + 1) * BLOCK
    }

    /// The requests of process `p`'s next operation, each with its think time.
    fn operation(&mut self, p: usize) -> VecDeque<(u64, WlRequest)> {
        // Whole 4 KiB blocks: every request stays aligned whatever the region's size.
        let (o, size) = (self.job.offset_bytes, self.job.size_bytes / BLOCK * BLOCK);
        let n = self.procs.len() as u64;
        let mut s = VecDeque::new();
        match self.job.kind {
            BenchKind::Dbench => {
                let journal = (size / 16).clamp(BLOCK, DBENCH_JOURNAL_MAX) / BLOCK * BLOCK;
                let area = (size - journal) / n / BLOCK * BLOCK;
                let files = (area / DBENCH_FILE).max(1);
                let total: u64 = DBENCH_WEIGHTS.iter().sum();
                // Creates and unlinks only dirty metadata: draw until a request comes.
                loop {
                    let mut x = below(&mut self.rng, total);
                    let op = DBENCH_WEIGHTS
                        .iter()
                        .position(|w| {
                            let hit = x < *w;
                            x = x.saturating_sub(*w);
                            hit
                        })
                        .unwrap_or(0);
                    match op {
                        0 | 1 => {
                            let len = self.blocks(4 * KIB, 64 * KIB);
                            let file =
                                o + p as u64 * area + below(&mut self.rng, files) * DBENCH_FILE;
                            let at = self.place(file, DBENCH_FILE.min(area), len);
                            let kind = if op == 0 { WlKind::Read } else { WlKind::Write };
                            s.push_back((0, req(kind, at, len)));
                            return s;
                        }
                        2 | 3 => self.procs[p].dirty_meta += 1,
                        _ => {
                            let blocks = std::mem::take(&mut self.procs[p].dirty_meta) + 1;
                            let len = (blocks * BLOCK).min(MAX_JOURNAL_WRITE).min(journal);
                            if self.journal_cursor + len > journal {
                                self.journal_cursor = 0;
                            }
                            let at = o + size - journal + self.journal_cursor;
                            self.journal_cursor += len;
                            s.push_back((0, req(WlKind::Write, at, len)));
                            s.push_back((0, req(WlKind::Flush, 0, 0)));
                            return s;
                        }
                    }
                }
            }
            BenchKind::IozoneWrite | BenchKind::IozoneRead => {
                let file = self.job.size_bytes / n / 512 * 512;
                let rec = self.job.record_bytes.min(file);
                let base = o + p as u64 * file;
                let pr = &mut self.procs[p];
                let len = rec.min(file - pr.cursor);
                let write = self.job.kind == BenchKind::IozoneWrite;
                let kind = if write { WlKind::Write } else { WlKind::Read };
                s.push_back((0, req(kind, base + pr.cursor, len)));
                pr.cursor += len;
                if pr.cursor >= file {
                    // The pass is over: a write pass's fsync, then the next pass.
                    pr.cursor = 0;
                    if write {
                        s.push_back((0, req(WlKind::Flush, 0, 0)));
                    }
                }
            }
            BenchKind::KernelCompile => {
                let half = size / 2 / BLOCK * BLOCK;
                // The region holds at least 128 KiB: each half fits every size below.
                let src = self.blocks(4 * KIB, 32 * KIB);
                let at = self.place(o, half, src);
                s.push_back((0, req(WlKind::Read, at, src)));
                let hdr = self.blocks(4 * KIB, 16 * KIB);
                let at = self.place(o, half, hdr);
                s.push_back((0, req(WlKind::Read, at, hdr)));
                // Exponential compile time: -mean ln(u), u in (0, 1].
                let u = ((self.rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
                let think = (-(self.job.think_ns as f64) * u.ln()) as u64;
                let obj = self.blocks(8 * KIB, 64 * KIB);
                if self.object_cursor + obj > half {
                    self.object_cursor = 0;
                }
                let at = o + half + self.object_cursor;
                self.object_cursor += obj;
                s.push_back((think, req(WlKind::Write, at, obj)));
            }
        }
        s
    }
}

impl Workload for BenchWorkload {
    fn next(&mut self, now_ns: u64) -> Option<WlRequest> {
        loop {
            let p = self.free.pop_front()?;
            if self.procs[p].steps.is_empty() {
                if !self.may_start(now_ns) {
                    // This process is done (it is not free again); others may still
                    // have steps (`ready` says whether to wait for them).
                    continue;
                }
                self.ops += 1;
                let s = self.operation(p);
                self.procs[p].steps = s;
            }
            let pr = &mut self.procs[p];
            let Some((think, mut r)) = pr.steps.pop_front() else {
                continue;
            };
            let at = pr.ready_ns.max(now_ns) + think;
            r.at_ns = Some(at);
            pr.busy = true;
            self.owner.insert(self.returned, p);
            self.returned += 1;
            return Some(r);
        }
    }

    fn depth(&self) -> u32 {
        self.procs.len() as u32
    }

    fn paced(&self) -> bool {
        true
    }

    fn completed(&mut self, index: u64, now_ns: u64) {
        if let Some(p) = self.owner.remove(&index) {
            let pr = &mut self.procs[p];
            pr.busy = false;
            pr.ready_ns = now_ns;
            self.free.push_back(p);
        }
    }

    fn ready(&self, now_ns: u64) -> bool {
        // A free process with steps left, or one that may start an operation; with none
        // busy, `next` issues or says the job is over. Otherwise the answer comes with
        // the next completion (a busy process may still have steps: a fsync's FLUSH).
        let free_steps = self.free.iter().any(|&p| !self.procs[p].steps.is_empty());
        free_steps
            || (!self.free.is_empty() && self.may_start(now_ns))
            || self.procs.iter().all(|p| !p.busy)
    }

    fn app_ops(&self) -> Option<u64> {
        Some(self.ops)
    }
}

#[cfg(test)]
mod tests;
