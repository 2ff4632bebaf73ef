//! The guest file system's periodic journal commit (ext4's jbd2, `commit=5` by default).
//!
//! A guest that never calls fsync still sends its disk a FLUSH: jbd2 commits the running
//! transaction at most `interval` after it started (the first change after the previous
//! commit), writing journal blocks and then a FLUSH. Seed 001's guests did (its Figure 7:
//! "buffer utilization periodically drops ... every 5 seconds in jbd2"), in Baseline and
//! vFLUSH alike, so `reproduce flush` gives every VM this timer in both arms.
//!
//! [`GuestCommit`] wraps any closed-loop workload: once `interval_ns` has passed since the
//! first write after the last FLUSH, it sends a journal write (8 KiB, sequential in a
//! journal area) and, once that completed, a FLUSH. A FLUSH of the
//! inner workload (an fsync) is a commit too and restarts the timer.

use std::collections::{HashMap, VecDeque};

use crate::{WlKind, WlRequest, Workload};

/// Bytes one timer commit writes to the journal (descriptor, metadata, commit block).
pub const COMMIT_JOURNAL_BYTES: u64 = 8 * 1024;

pub struct GuestCommit<W> {
    inner: W,
    interval_ns: u64,
    journal_base: u64,
    journal_bytes: u64,
    cursor: u64,
    /// When the running transaction must commit (None: nothing written since the last).
    due_ns: Option<u64>,
    injected: VecDeque<WlRequest>,
    /// The injected journal write outstanding (its FLUSH waits for it).
    journal_write: Option<u64>,
    /// Requests returned so far, and the inner workload's count among them.
    returned: u64,
    inner_returned: u64,
    /// Outstanding inner requests: our index -> the inner workload's.
    inner_index: HashMap<u64, u64>,
    commits: u64,
}

impl<W: Workload> GuestCommit<W> {
    /// Commit every `interval_ns`, journalling into `[journal_base, + journal_bytes)`.
    pub fn new(inner: W, interval_ns: u64, journal_base: u64, journal_bytes: u64) -> Self {
        GuestCommit {
            inner,
            interval_ns: interval_ns.max(1),
            journal_base,
            journal_bytes: journal_bytes.max(COMMIT_JOURNAL_BYTES),
            cursor: 0,
            due_ns: None,
            injected: VecDeque::new(),
            journal_write: None,
            returned: 0,
            inner_returned: 0,
            inner_index: HashMap::new(),
            commits: 0,
        }
    }

    /// Timer commits sent so far.
    pub fn commits(&self) -> u64 {
        self.commits
    }
}

impl<W: Workload> GuestCommit<W> {
    /// Queue a commit if one is due: a journal write, then (once it completed) a FLUSH.
    fn queue_commit(&mut self, now_ns: u64) {
        if !self.injected.is_empty()
            || self.journal_write.is_some()
            || self.due_ns.is_none_or(|d| now_ns < d)
        {
            return;
        }
        self.due_ns = None;
        self.commits += 1;
        if self.cursor + COMMIT_JOURNAL_BYTES > self.journal_bytes {
            self.cursor = 0;
        }
        let at = self.journal_base + self.cursor;
        self.cursor += COMMIT_JOURNAL_BYTES;
        let req = |kind, offset_bytes, len_bytes| WlRequest {
            kind,
            offset_bytes,
            len_bytes,
            at_ns: None,
            context: None,
        };
        self.injected
            .push_back(req(WlKind::Write, at, COMMIT_JOURNAL_BYTES));
        self.injected.push_back(req(WlKind::Flush, 0, 0));
    }

    /// Whether an injected request may go now (the FLUSH waits for its journal write).
    fn injected_ready(&self) -> bool {
        !self.injected.is_empty() && self.journal_write.is_none()
    }
}

impl<W: Workload> Workload for GuestCommit<W> {
    fn next(&mut self, now_ns: u64) -> Option<WlRequest> {
        self.queue_commit(now_ns);
        if self.injected_ready()
            && let Some(r) = self.injected.pop_front()
        {
            if r.kind == WlKind::Write {
                self.journal_write = Some(self.returned);
            }
            self.returned += 1;
            return Some(r);
        }
        let r = self.inner.next(now_ns)?;
        match r.kind {
            WlKind::Flush => self.due_ns = None,
            WlKind::Write if self.due_ns.is_none() => {
                self.due_ns = Some(now_ns.saturating_add(self.interval_ns));
            }
            _ => {}
        }
        self.inner_index.insert(self.returned, self.inner_returned);
        self.returned += 1;
        self.inner_returned += 1;
        Some(r)
    }

    fn ready(&self, now_ns: u64) -> bool {
        let due = self.injected.is_empty()
            && self.journal_write.is_none()
            && self.due_ns.is_some_and(|d| now_ns >= d);
        due || self.injected_ready() || self.inner.ready(now_ns)
    }

    fn depth(&self) -> u32 {
        self.inner.depth()
    }

    fn paced(&self) -> bool {
        self.inner.paced()
    }

    fn completed(&mut self, index: u64, now_ns: u64) {
        if self.journal_write == Some(index) {
            self.journal_write = None;
        }
        if let Some(i) = self.inner_index.remove(&index) {
            self.inner.completed(i, now_ns);
        }
    }

    fn app_ops(&self) -> Option<u64> {
        self.inner.app_ops()
    }
}

/// The host file system's own periodic journal commit (seed 001's hTag requests).
///
/// The paper's VM images are files on the host's ext4: every guest write through QEMU
/// updates an image file's modification time, so the host's jbd2 has a running
/// transaction at all times and commits it every `interval` (its `commit=5` default),
/// writing journal blocks (the images' inode-table block, descriptor, commit block: 8 KiB)
/// and then a FLUSH, both as host requests (section III-A: "*hTag* is used for host I/O
/// requests such as journaling I/O requests"; section V-A averages the FLUSHes "triggered
/// by VM1, VM2, and the host"). A paced closed loop of depth 1: at `interval`,
/// `2 * interval`, ... until `runtime`, a journal write, then its FLUSH once it completed.
pub struct HostJournal {
    interval_ns: u64,
    runtime_ns: u64,
    journal_bytes: u64,
    cursor: u64,
    /// The next commit (1-based); its FLUSH follows its write.
    next_commit: u64,
    flush_due: bool,
}

impl HostJournal {
    /// Commit every `interval_ns` for `runtime_ns`, into `[0, journal_bytes)`.
    pub fn new(interval_ns: u64, runtime_ns: u64, journal_bytes: u64) -> HostJournal {
        HostJournal {
            interval_ns: interval_ns.max(1),
            runtime_ns,
            journal_bytes: journal_bytes.max(COMMIT_JOURNAL_BYTES),
            cursor: 0,
            next_commit: 1,
            flush_due: false,
        }
    }
}

impl Workload for HostJournal {
    fn next(&mut self, _now_ns: u64) -> Option<WlRequest> {
        if std::mem::take(&mut self.flush_due) {
            return Some(WlRequest {
                kind: WlKind::Flush,
                offset_bytes: 0,
                len_bytes: 0,
                at_ns: None,
                context: None,
            });
        }
        let at = self.next_commit.checked_mul(self.interval_ns)?;
        if at > self.runtime_ns {
            return None;
        }
        self.next_commit += 1;
        if self.cursor + COMMIT_JOURNAL_BYTES > self.journal_bytes {
            self.cursor = 0;
        }
        let offset_bytes = self.cursor;
        self.cursor += COMMIT_JOURNAL_BYTES;
        self.flush_due = true;
        Some(WlRequest {
            kind: WlKind::Write,
            offset_bytes,
            len_bytes: COMMIT_JOURNAL_BYTES,
            at_ns: Some(at),
            context: None,
        })
    }

    fn depth(&self) -> u32 {
        1
    }

    fn paced(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FioJob, FioRw, FioWorkload};

    #[test]
    fn the_host_commits_its_journal_every_interval_until_the_run_ends() {
        let mut w = HostJournal::new(5_000_000_000, 20_000_000_000, 16 << 10);
        let mut reqs = Vec::new();
        while let Some(r) = w.next(0) {
            reqs.push(r);
        }
        // Commits at 5, 10, 15 and 20 s: a journal write (not before its time), then a
        // FLUSH as soon as it completed; the journal wraps after two commits.
        assert_eq!(reqs.len(), 8, "{reqs:?}");
        for (k, pair) in reqs.chunks(2).enumerate() {
            assert_eq!(pair[0].kind, WlKind::Write);
            assert_eq!(pair[0].at_ns, Some((k as u64 + 1) * 5_000_000_000));
            assert_eq!(pair[0].offset_bytes, (k as u64 % 2) * COMMIT_JOURNAL_BYTES);
            assert_eq!((pair[1].kind, pair[1].at_ns), (WlKind::Flush, None));
        }
        assert!(w.paced() && w.depth() == 1);
    }

    fn fio(fsync_every: u32) -> FioWorkload {
        FioWorkload::new(FioJob {
            distribution: crate::Distribution::Uniform,
            rw: FioRw::RandWrite,
            bs: 4096,
            iodepth: 1,
            offset_bytes: 0,
            size_bytes: 1 << 30,
            rwmixread: 0,
            fsync_every,
            ios: None,
            runtime_ns: Some(20_000_000_000),
            seed: 1,
            random_map: false,
            end_fsync: false,
        })
    }

    /// Requests over 20 s at one request per millisecond.
    fn drive<W: Workload>(w: &mut W) -> Vec<(u64, WlRequest)> {
        let mut out = Vec::new();
        let mut t = 0;
        while let Some(r) = w.next(t) {
            w.completed(out.len() as u64, t);
            out.push((t, r));
            t += 1_000_000;
        }
        out
    }

    #[test]
    fn a_guest_that_never_syncs_commits_every_interval() {
        let mut w = GuestCommit::new(fio(0), 5_000_000_000, 1 << 30, 32 << 20);
        let reqs = drive(&mut w);
        let flushes: Vec<u64> = reqs
            .iter()
            .filter(|(_, r)| r.kind == WlKind::Flush)
            .map(|(t, _)| *t)
            .collect();
        // The first transaction starts at 0 and commits at 5 s (journal write, then the
        // FLUSH 1 ms later); the next starts with the write after that FLUSH.
        assert_eq!(flushes.len(), 3, "{flushes:?}");
        assert_eq!(flushes[0], 5_001_000_000);
        assert!(flushes.windows(2).all(|p| p[1] - p[0] == 5_002_000_000));
        assert_eq!(w.commits(), 3);
        // Each commit writes its journal block just before its FLUSH.
        for (i, (_, r)) in reqs.iter().enumerate() {
            if r.kind == WlKind::Flush {
                let (_, j) = reqs[i - 1];
                assert_eq!((j.kind, j.len_bytes), (WlKind::Write, COMMIT_JOURNAL_BYTES));
                assert!(j.offset_bytes >= 1 << 30);
            }
        }
    }

    #[test]
    fn fsyncs_restart_the_timer() {
        // A FLUSH every 4 writes commits long before 5 s: the timer never fires.
        let mut w = GuestCommit::new(fio(4), 5_000_000_000, 1 << 30, 32 << 20);
        drive(&mut w);
        assert_eq!(w.commits(), 0);
    }
}
