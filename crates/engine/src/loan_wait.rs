//! Writes that wait for a loan of space (issue 18). A shard asks the driver for space at
//! its low-water mark (`EngineEvent::SpaceLow`); one filling faster than a loan's round
//! trip (two volume table writes, and the driver's hops between shards) would fail a
//! write with ENOSPC meanwhile. Instead, a write piece whose chunk finds no room while
//! this shard's ask for that pool is unanswered waits here, exactly as a piece waits
//! behind a busy chunk (`volume::Waiter`, the request's outstanding count), and runs
//! again when the answer comes:
//! - the loan landed (`EngineEvent::Borrowed`): the pieces run in the order they came,
//!   on the grown allocator (one that still finds no room asks again and waits again);
//! - the driver said no shard has room to spare (`Control::LoanDenied`): they run again
//!   and fail with ENOSPC unless space was freed meanwhile, and this shard does not ask
//!   again for `ASK_AGAIN_NS`;
//! - no answer in `ANSWER_WAIT_NS` (a driver that lost it), or the engine stops: as a
//!   denial. Space may never come, so nothing waits on it without end.
//!
//! Every ask gets one answer: the driver's `LoanBroker` answers each `SpaceLow` with a
//! loan or a denial (an ask while another shard's loan of that pool is under way waits
//! in the broker for its turn). All of it is decided in engine time, so a run replays.

pub(crate) mod state;

use crate::engine::{Engine, EngineState};
use crate::inject::InjectedBug;
use crate::types::{EngineEvent, Outputs, PoolId};
use crate::volume::Waiter;
pub(crate) use state::Ask;
pub use state::{ANSWER_WAIT_NS, ASK_AGAIN_NS};

impl Engine {
    /// Write pieces that waited for a loan's answer so far, and those waiting now.
    pub fn loan_waits(&self) -> (u64, usize) {
        (self.loan_waits.waited, self.loan_waits.parked.len())
    }

    /// Write pieces whose loan's answer came while their volume was paused for its pivot
    /// (the case `loan-answer-no-step` needs; DST counts them).
    pub fn loan_answers_in_pauses(&self) -> u64 {
        self.loan_waits.in_pauses
    }

    /// After a data allocation on `pool`: ask the driver for space when this shard runs
    /// low (`EngineEvent::SpaceLow`): not while an ask is unanswered, nor within
    /// `ASK_AGAIN_NS` of a denial.
    pub(crate) fn loan_space_check(&mut self, now: u64, pool: PoolId, out: &mut Outputs) {
        if self.cfg.shard.count < 2 || self.state != EngineState::Ready {
            return;
        }
        if self.available_chunks(pool) < self.low_water_chunks(pool) {
            // Space is needed here after all: a run on its way back stays.
            self.give_back_cancel(pool);
        }
        let available = self.available_chunks(pool);
        if available >= self.low_water_chunks(pool) {
            return;
        }
        let ask = self.loan_waits.ask(pool.0 as usize);
        match *ask {
            Ask::Asked { at_ns } if now < at_ns + ANSWER_WAIT_NS => return,
            Ask::Denied { at_ns } if now < at_ns + ASK_AGAIN_NS => return,
            _ => {}
        }
        *ask = Ask::Asked { at_ns: now };
        out.events.push(EngineEvent::SpaceLow {
            pool,
            available_chunks: available,
        });
    }

    /// A run this shard lent came back (`EngineEvent::LoanReturned`: given back by its
    /// borrower, often on the hint a denial of this very shard sent): space came, so a
    /// denial's wait to ask again ends. When low again this shard asks at once, and the
    /// broker's hint may get it the borrower's next free run.
    pub(crate) fn loan_space_returned(&mut self, pool: PoolId) {
        if let Some(a) = self.loan_waits.asks.get_mut(pool.0 as usize)
            && matches!(a, Ask::Denied { .. })
        {
            *a = Ask::Idle;
        }
    }

    /// A write piece of request `key` found no chunk on `pool`: wait for the answer to
    /// this shard's ask, if one is out. Returns true if parked.
    pub(crate) fn loan_wait_park(
        &mut self,
        key: usize,
        v: u32,
        pool: PoolId,
        start: u64,
        end: u64,
    ) -> bool {
        let p = pool.0 as usize;
        let asked = matches!(self.loan_waits.asks.get(p), Some(Ask::Asked { .. }));
        if !asked || self.state != EngineState::Ready {
            return false;
        }
        let w = Waiter {
            req: key,
            start,
            end,
        };
        self.loan_waits.parked.push((pool.0, v, w));
        self.loan_waits.waited += 1;
        self.reqs[key].outstanding += 1;
        true
    }

    /// The answer to this shard's ask for space in `pool` came (`granted`: a run was
    /// borrowed; else denied, unanswered in time, or the engine stops): the pieces
    /// waiting for it run again, in order.
    pub(crate) fn loan_answered(
        &mut self,
        now: u64,
        pool: PoolId,
        granted: bool,
        out: &mut Outputs,
    ) {
        let p = pool.0 as usize;
        *self.loan_waits.ask(p) = if granted {
            Ask::Idle
        } else {
            Ask::Denied { at_ns: now }
        };
        let (now_due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.loan_waits.parked)
            .into_iter()
            .partition(|w| w.0 == pool.0);
        self.loan_waits.parked = later;
        for (_, v, w) in now_due {
            if self
                .migrations
                .jobs
                .get(&v)
                .is_some_and(|j| j.phase == crate::jobs::migrate::MigrationPhase::Draining)
            {
                self.loan_waits.in_pauses += 1;
            }
            if granted && self.bug_is(InjectedBug::LoanWaitDrops) {
                // The injected defect forgets the piece: its request completes as if it
                // were written.
                self.req_end(now, w.req, Ok(()), out);
                continue;
            }
            self.resume_write_piece(now, w, v, out);
        }
        // A piece that failed here (denied, no room) ended its request outside a device
        // completion, after which the engine steps what waits for requests to end: a job
        // pausing its volume for the pivot, a deletion quiescing its volume. The answer
        // may come in an admin command with no timer left to step them (DST seed 1032
        // with `copy_priority = equal`, at 652341a: a mirror job `Draining` forever
        // behind a write denied its loan, a FLUSH parked behind the pause;
        // tests/migration_wakeups.rs).
        if !self.bug_is(InjectedBug::LoanAnswerNoStep) {
            self.migration_step(now, out);
            self.delete_step(now, out);
        }
    }

    /// `Control::LoanDenied`: no shard has room to spare in `pool` (or the loan failed).
    pub(crate) fn loan_denied(
        &mut self,
        now: u64,
        pool: PoolId,
        out: &mut Outputs,
    ) -> Result<(), crate::control::ControlError> {
        if pool.0 as usize >= self.pools.len() {
            return Err(crate::control::ControlError::UnknownPool(pool));
        }
        self.loan_answered(now, pool, false, out);
        Ok(())
    }

    /// Asks unanswered for `ANSWER_WAIT_NS` while pieces wait: taken as denied.
    pub(crate) fn loan_wait_tick(&mut self, now: u64, out: &mut Outputs) {
        if self.loan_waits.deadline().is_none_or(|t| t > now) {
            return;
        }
        for p in 0..self.loan_waits.asks.len() {
            if let Ask::Asked { at_ns } = self.loan_waits.asks[p]
                && at_ns + ANSWER_WAIT_NS <= now
                && self.loan_waits.parked.iter().any(|w| w.0 as usize == p)
            {
                self.loan_answered(now, PoolId(p as u16), false, out);
            }
        }
    }

    /// The engine stops: nothing waits for a loan any more (a stopping shard takes none).
    pub(crate) fn loan_wait_stop(&mut self, now: u64, out: &mut Outputs) {
        while let Some(&(p, _, _)) = self.loan_waits.parked.first() {
            self.loan_answered(now, PoolId(p), false, out);
        }
    }
}
