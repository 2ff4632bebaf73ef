//! Log appends that failed for want of space wait for it where they are, and are tried
//! again every commit interval. Moving them to another position (what an append that
//! failed with EIO does) only burns free segments while the filesystem under the pool is
//! full, and once none is left it stopped the whole engine. A parked append still counts
//! as in flight: its data stays readable from RAM, the cleaner leaves its segment alone,
//! and no commit makes records durable that point at it; a commit waiting for it tries
//! it again at once and fails with ENOSPC if it fails again, and is retried like any
//! failed commit.
//!
//! Space may never return, so nothing waits on it without end: while a pool holds
//! parked appends, new write pieces for its log go home (where they complete or fail
//! with ENOSPC) instead of queueing behind them; and a volume whose last commit failed
//! backs off: its commits are retried by the commit timer only, and segments freed by
//! that volume's records do not count as space on its way. Before this, a write waiting
//! for such segments started the commit again at once, which failed again at once: an
//! endless loop at one instant (DST seed 53 with `TIERVISOR_DST_SPACE=1`, 24 GiB).

use std::mem;

use super::state::Append;
use crate::engine::{Engine, EngineState};
use crate::types::Outputs;

impl Engine {
    /// Keep `a`, which failed with ENOSPC, for a retry after the commit interval.
    pub(crate) fn append_park_nospace(&mut self, now: u64, a: Append) {
        self.logs.nospace.parked.push(a);
        if self.logs.nospace.retry_at.is_none() {
            self.logs.nospace.retry_at = Some(now + self.cfg.commit_interval_ns);
        }
    }

    /// A commit of volume `v` waits for its appends issued before `upto`: those waiting
    /// for space are tried again now rather than at the next retry, so a FLUSH after
    /// space returned succeeds, and one while it has not fails (the append fails again
    /// and fails the round) instead of waiting for the retry.
    pub(crate) fn append_retry_for_commit(
        &mut self,
        now: u64,
        v: u32,
        upto: u64,
        out: &mut Outputs,
    ) {
        if !self
            .logs
            .nospace
            .parked
            .iter()
            .any(|a| a.vol == v && a.id < upto)
        {
            return;
        }
        let (now_due, later): (Vec<Append>, Vec<Append>) = mem::take(&mut self.logs.nospace.parked)
            .into_iter()
            .partition(|a| a.vol == v && a.id < upto);
        self.logs.nospace.parked = later;
        for a in now_due {
            self.append_issue(now, 0, a, out);
        }
    }

    /// The retry time came: issue every parked append again.
    pub(crate) fn append_nospace_tick(&mut self, now: u64, out: &mut Outputs) {
        if self.logs.nospace.retry_at.is_none_or(|t| t > now) {
            return;
        }
        self.logs.nospace.retry_at = None;
        if !matches!(self.state, EngineState::Ready | EngineState::Stopping) {
            return;
        }
        for a in mem::take(&mut self.logs.nospace.parked) {
            self.append_issue(now, 0, a, out);
        }
    }
}
