//! Block-level generators shaped like the applications of seed 001's Figure 9.
//!
//! They imitate what the guest's disk sees, not the applications themselves. Each job runs
//! `threads` loops at once (Filebench's `nthreads`, the benchmark's connections), each
//! with one request outstanding, as the personalities' threads do; what a thread's fsync
//! asks for is a commit of the guest's journal (or InnoDB's redo log), and one journal
//! serves every thread: a commit is a journal write then a FLUSH, one commit runs at a
//! time, and the fsyncs that arrive while one runs share the next (jbd2's and InnoDB's
//! group commit). The guest has 2 GiB of memory (the paper's VMs), so reads of files the
//! benchmark keeps in page cache never reach the disk.
//! - `varmail` (Filebench varmail.f: 16 threads, 1,000 files of 16 KiB mean, appends of up
//!   to 16 KiB): per loop deletefile, createfile, appendfilerand, fsync, closefile,
//!   openfile, readwholefile, appendfilerand, fsync, closefile, openfile, readwholefile,
//!   closefile. The 16 MiB fileset stays in page cache, so the disk sees per loop two
//!   appends (each written out by its fsync, whole 4 KiB blocks) and two fsyncs, and the
//!   journal records the delete, the create and the appends' metadata (3 blocks per
//!   fsync, one descriptor block per commit).
//! - `fileserver` (Filebench fileserver.f: 50 threads, 10,000 files of about 128 KiB):
//!   each loop writes a whole file (128 KiB), appends 16 KiB to another, reads a third
//!   whole; no fsync (only the guest's timer commits, `commit.rs`).
//! - `tpcc` (TPC-C on MySQL/InnoDB, `innodb_flush_log_at_trx_commit = 1`, 16
//!   connections): each transaction reads two random 16 KiB pages, writes back two dirty
//!   16 KiB pages, and commits: 4 KiB of redo log per transaction in the group
//!   (sequential, wrapping in a 96 MiB log), then a FLUSH. The log file is preallocated,
//!   so its fsync needs no file-system journal.
//!
//! Files and pages are drawn uniformly from the job's region; the same seed gives the
//! same requests.

use std::collections::{HashMap, VecDeque};

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;

use crate::r#gen::below;
use crate::{WlKind, WlRequest, Workload};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const BLOCK: u64 = 4 * KIB;
/// A varmail file's slot (files never outgrow it: an append past it starts over).
const VARMAIL_SLOT: u64 = 64 * KIB;
/// The varmail guest journal and the TPC-C redo log, at the end of the region.
const VARMAIL_JOURNAL: u64 = 32 * MIB;
const TPCC_LOG: u64 = 96 * MIB;
/// Largest single journal write (a bigger group is written in one request of this size).
const MAX_JOURNAL_WRITE: u64 = 256 * KIB;

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
    /// Threads by default: Filebench's personalities' `nthreads` (varmail 16, fileserver
    /// 50); for TPC-C the paper gives no connection count, and 16 is assumed.
    pub fn default_threads(self) -> u32 {
        match self {
            AppKind::Varmail => 16,
            AppKind::Fileserver => 50,
            AppKind::Tpcc => 16,
        }
    }
}

/// An application-shaped job on `[offset_bytes, offset_bytes + size_bytes)`.
#[derive(Clone, Debug, PartialEq)]
pub struct AppJob {
    pub kind: AppKind,
    pub offset_bytes: u64,
    pub size_bytes: u64,
    /// Loops run at once, each with one request outstanding.
    pub threads: u32,
    /// Stop after this many loops (transactions), over all threads; None: after
    /// `runtime_ns`.
    pub loops: Option<u64>,
    pub runtime_ns: Option<u64>,
    pub seed: u64,
}

/// One step of a thread's loop.
#[derive(Clone, Copy, Debug)]
enum Step {
    Io(WlRequest),
    /// Wait for a journal commit covering everything before, with this many journal
    /// blocks of its own.
    Commit {
        blocks: u64,
    },
}

#[derive(Default)]
struct Thread {
    steps: VecDeque<Step>,
    /// Waiting for this commit.
    waits_for: Option<u64>,
    /// In the middle of a loop (its steps ran out: the loop is done).
    in_loop: bool,
    stopped: bool,
}

/// The journal every thread's fsync commits through (one commit at a time).
#[derive(Default)]
struct Journal {
    /// The open transaction's number and the blocks and fsyncs waiting in it.
    open: u64,
    open_blocks: u64,
    open_waiters: u32,
    /// The commit being written: its requests not yet returned, and how many of its
    /// requests are outstanding.
    committing: Option<u64>,
    to_issue: VecDeque<WlRequest>,
    outstanding: u32,
    cursor: u64,
}

/// Who a returned request belongs to.
#[derive(Clone, Copy)]
enum Owner {
    Thread(usize),
    Journal,
}

/// A running application job.
pub struct AppWorkload {
    job: AppJob,
    rng: Xoshiro256PlusPlus,
    threads: Vec<Thread>,
    /// Threads with a request to issue, in the order they became ready.
    ready: VecDeque<usize>,
    journal: Journal,
    owners: HashMap<u64, Owner>,
    returned: u64,
    loops: u64,
    loops_done: u64,
    /// Bytes in each varmail file (its slot holds up to `VARMAIL_SLOT`).
    file_len: Vec<u64>,
    commits: u64,
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

impl AppWorkload {
    pub fn new(job: AppJob) -> AppWorkload {
        let files = match job.kind {
            AppKind::Varmail => {
                ((job.size_bytes - VARMAIL_JOURNAL) / VARMAIL_SLOT).clamp(1, 1000) as usize
            }
            _ => 0,
        };
        let n = job.threads.max(1) as usize;
        let mut w = AppWorkload {
            rng: Xoshiro256PlusPlus::seed_from_u64(job.seed),
            threads: (0..n).map(|_| Thread::default()).collect(),
            ready: VecDeque::new(),
            journal: Journal::default(),
            owners: HashMap::new(),
            returned: 0,
            loops: 0,
            loops_done: 0,
            // Filebench preallocates the fileset (16 KiB mean per file).
            file_len: vec![16 * KIB; files],
            commits: 0,
            job,
        };
        for t in 0..n {
            w.advance(t, 0);
        }
        w
    }

    /// Loops (transactions) started so far.
    pub fn loops(&self) -> u64 {
        self.loops
    }

    /// Loops (transactions) finished so far: every step done, fsyncs committed.
    pub fn loops_done(&self) -> u64 {
        self.loops_done
    }

    /// Journal commits (FLUSHes) started so far.
    pub fn commits(&self) -> u64 {
        self.commits
    }

    /// Whether a new loop may start at `now_ns`.
    fn may_start(&self, now_ns: u64) -> bool {
        let j = &self.job;
        !(j.loops.is_some_and(|n| self.loops >= n)
            || j.runtime_ns.is_some_and(|r| now_ns >= r)
            || (j.loops.is_none() && j.runtime_ns.is_none()))
    }

    /// Move thread `t` on to its next request: start loops, join commits. It ends ready
    /// (a request to issue), waiting for a commit, or stopped.
    fn advance(&mut self, t: usize, now_ns: u64) {
        loop {
            let step = self.threads[t].steps.pop_front();
            match step {
                Some(Step::Io(_)) => {
                    // Put it back: `next` takes it.
                    if let Some(s) = step {
                        self.threads[t].steps.push_front(s);
                    }
                    self.ready.push_back(t);
                    return;
                }
                Some(Step::Commit { blocks }) => {
                    let j = &mut self.journal;
                    j.open_blocks += blocks;
                    j.open_waiters += 1;
                    self.threads[t].waits_for = Some(j.open);
                    self.start_commit();
                    return;
                }
                None if std::mem::take(&mut self.threads[t].in_loop) => {
                    self.loops_done += 1;
                }
                None if self.may_start(now_ns) => {
                    self.loops += 1;
                    self.threads[t].in_loop = true;
                    let steps = self.one_loop();
                    self.threads[t].steps = steps;
                }
                None => {
                    self.threads[t].stopped = true;
                    return;
                }
            }
        }
    }

    /// If no commit is being written and the open transaction has waiters, commit it.
    fn start_commit(&mut self) {
        let j = &mut self.journal;
        if j.committing.is_some() || j.open_waiters == 0 {
            return;
        }
        let (base, area) = match self.job.kind {
            AppKind::Tpcc => (
                self.job.offset_bytes + self.job.size_bytes - TPCC_LOG,
                TPCC_LOG,
            ),
            _ => (
                self.job.offset_bytes + self.job.size_bytes - VARMAIL_JOURNAL,
                VARMAIL_JOURNAL,
            ),
        };
        let len = (j.open_blocks * BLOCK).clamp(BLOCK, MAX_JOURNAL_WRITE);
        if j.cursor + len > area {
            j.cursor = 0;
        }
        j.to_issue
            .push_back(req(WlKind::Write, base + j.cursor, len));
        j.to_issue.push_back(req(WlKind::Flush, 0, 0));
        j.cursor += len;
        j.committing = Some(j.open);
        j.open += 1;
        j.open_blocks = 0;
        j.open_waiters = 0;
        self.commits += 1;
    }

    /// The device-level steps of one loop of the job's application.
    fn one_loop(&mut self) -> VecDeque<Step> {
        let (o, size) = (self.job.offset_bytes, self.job.size_bytes);
        let rng = &mut self.rng;
        let mut s = VecDeque::new();
        match self.job.kind {
            AppKind::Varmail => {
                let files = self.file_len.len() as u64;
                // appendfilerand: 1 to 16 KiB, written out as whole blocks.
                let append = |rng: &mut Xoshiro256PlusPlus, f: usize, lens: &mut [u64]| {
                    let bytes = 1 + below(rng, 16 * KIB);
                    if lens[f] + bytes > VARMAIL_SLOT {
                        lens[f] = 0;
                    }
                    let first = lens[f] / BLOCK * BLOCK;
                    lens[f] += bytes;
                    let end = lens[f].div_ceil(BLOCK) * BLOCK;
                    req(
                        WlKind::Write,
                        o + f as u64 * VARMAIL_SLOT + first,
                        end - first,
                    )
                };
                // deletefile + createfile: a slot starts over as a new, empty file.
                let f1 = below(rng, files) as usize;
                self.file_len[f1] = 0;
                s.push_back(Step::Io(append(rng, f1, &mut self.file_len)));
                // The commit journals the delete, the create and the append: inode
                // table, bitmaps and directory blocks.
                s.push_back(Step::Commit { blocks: 4 });
                // openfile, readwholefile (page cache), appendfilerand, fsync.
                let f2 = below(rng, files) as usize;
                s.push_back(Step::Io(append(rng, f2, &mut self.file_len)));
                s.push_back(Step::Commit { blocks: 2 });
                // openfile, readwholefile, closefile: page cache only.
            }
            AppKind::Fileserver => {
                let files = (size / (256 * KIB)).clamp(1, 10_000);
                let mut file = || o + below(rng, files) * 256 * KIB;
                let (f1, f2, f3) = (file(), file(), file());
                s.push_back(Step::Io(req(WlKind::Write, f1, 128 * KIB)));
                s.push_back(Step::Io(req(WlKind::Write, f2 + 128 * KIB, 16 * KIB)));
                s.push_back(Step::Io(req(WlKind::Read, f3, 128 * KIB)));
            }
            AppKind::Tpcc => {
                let pages = ((size - TPCC_LOG) / (16 * KIB)).max(1);
                for kind in [WlKind::Read, WlKind::Read, WlKind::Write, WlKind::Write] {
                    let p = below(rng, pages);
                    s.push_back(Step::Io(req(kind, o + p * 16 * KIB, 16 * KIB)));
                }
                s.push_back(Step::Commit { blocks: 1 });
            }
        }
        s
    }

    /// Whether everything has finished: no thread can run again and no commit is left.
    fn finished(&self) -> bool {
        self.threads.iter().all(|t| t.stopped)
            && self.journal.committing.is_none()
            && self.journal.open_waiters == 0
    }
}

impl Workload for AppWorkload {
    fn next(&mut self, _now_ns: u64) -> Option<WlRequest> {
        let j = &mut self.journal;
        // A commit's FLUSH waits for its journal write.
        if let Some(r) = j.to_issue.front().copied()
            && (r.kind == WlKind::Write || j.outstanding == 0)
        {
            j.to_issue.pop_front();
            j.outstanding += 1;
            self.owners.insert(self.returned, Owner::Journal);
            self.returned += 1;
            return Some(r);
        }
        let t = self.ready.pop_front()?;
        let th = &mut self.threads[t];
        let Some(Step::Io(r)) = th.steps.pop_front() else {
            unreachable!("a ready thread's next step is a request");
        };
        self.owners.insert(self.returned, Owner::Thread(t));
        self.returned += 1;
        Some(r)
    }

    fn ready(&self, _now_ns: u64) -> bool {
        let j = &self.journal;
        let journal = j
            .to_issue
            .front()
            .is_some_and(|r| r.kind == WlKind::Write || j.outstanding == 0);
        journal || !self.ready.is_empty() || self.finished()
    }

    fn depth(&self) -> u32 {
        // Every thread, and the journal's writer.
        self.job.threads.max(1) + 1
    }

    fn completed(&mut self, index: u64, now_ns: u64) {
        match self.owners.remove(&index) {
            Some(Owner::Thread(t)) => {
                self.advance(t, now_ns);
            }
            Some(Owner::Journal) => {
                let j = &mut self.journal;
                j.outstanding -= 1;
                if j.outstanding > 0 || !j.to_issue.is_empty() {
                    return;
                }
                // The commit's FLUSH is done: its waiters go on.
                let Some(done) = j.committing.take() else {
                    return;
                };
                for t in 0..self.threads.len() {
                    if self.threads[t].waits_for.is_some_and(|c| c <= done) {
                        self.threads[t].waits_for = None;
                        self.advance(t, now_ns);
                    }
                }
                self.start_commit();
            }
            None => {}
        }
    }

    fn app_ops(&self) -> Option<u64> {
        Some(self.loops_done)
    }
}

#[cfg(test)]
mod tests;
