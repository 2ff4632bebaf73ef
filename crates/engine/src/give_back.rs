//! Giving borrowed space back between shards (issue 18). A shard that borrowed runs
//! (`loan.rs`) and then freed them keeps them unless it gives them back; another shard
//! that later runs low could be refused while the space sits idle here.
//!
//! Who decides: the borrower, on its own clock. Every hold (`give_back_hold_ns`, armed
//! by VM requests) it looks at the *last* borrowed run of each pool: a borrowed run's
//! engine addresses follow from its place among the records, so only the last can leave
//! without moving the others. It goes back once two looks a hold apart saw it wholly
//! free and the shard would keep `GIVE_BACK_KEEP` times its low-water mark without it
//! (hysteresis: it asks for space below 1x). The steps:
//! 1. *Out of the allocator* (RAM only): every chunk of the run is marked used, so
//!    nothing new is written there. A crash now mounts the run as before: borrowed, free.
//! 2. *Wait for the checkpoints*: a mount reads each volume's checkpoint and the journal
//!    records since it began, and refuses a mapping beyond the pool. While any volume's
//!    reach (`journal/reach.rs`: the highest chunk its durable image and its records
//!    since name) extends into the run, that volume is asked for a checkpoint (its new
//!    image cannot name the run: nothing maps there any more). Polled every
//!    `GIVE_BACK_POLL_NS`.
//! 3. *Record it*: the volume table without the `Borrowed` record (FUA); once durable the
//!    allocator shrinks by the guard and the run and the shard says
//!    `EngineEvent::GaveBack`; the driver sends the donor `Control::ReturnLoan`, which
//!    removes its `Lent` record and frees the run (the path a crash between lend and
//!    borrow already takes). A crash between the two table writes leaves a `Lent`
//!    without its `Borrowed`: `LoanBroker::reconcile` returns it at the next start.
//!
//! Called off (the run back in the allocator) if the shard runs low before step 3 or a
//! new borrow of the pool comes (it would be appended after the run). One give-back at a
//! time per shard.

pub(crate) mod state;

use crate::engine::{Engine, EngineState};
use crate::inject::InjectedBug;
use crate::journal::reach::Reach;
use crate::layout::{LoanKind, LoanRecord};
use crate::loan::Change;
use crate::types::{EngineEvent, Outputs, PoolId};
use crate::volume::Volume;
pub use state::{GIVE_BACK_KEEP, GIVE_BACK_KEEP_ON_HINT, GIVE_BACK_POLL_NS};

/// What a checkpoint of `vol` now would name (its map, its cached chunks' slots, its
/// overlay's data).
pub(crate) fn volume_reach(vol: &Volume) -> Reach {
    let mut r = Reach::default();
    for (_, loc) in vol.map.iter() {
        r.chunk(loc);
    }
    for (_, slow, _) in vol.cache.iter() {
        r.chunk(slow);
    }
    for (s, e, v) in vol.overlay.iter() {
        r.overlay(s, e, v);
    }
    r
}

impl Engine {
    /// Runs given back so far, give-backs called off, and whether one is under way.
    pub fn give_backs(&self) -> (u64, u64, bool) {
        let g = &self.give_backs;
        (g.given, g.cancelled, g.active.is_some())
    }

    /// Hints that another shard was refused space (`Control::GiveBackNow`), and the
    /// give-backs they started.
    pub fn give_back_hints(&self) -> (u64, u64) {
        (self.give_backs.hints, self.give_backs.on_hint)
    }

    fn give_back_enabled(&self) -> bool {
        self.cfg.shard.count > 1 && self.cfg.give_back_hold_ns > 0
    }

    /// A VM request arrived: look at the borrowed runs within a hold.
    pub(crate) fn give_back_arm(&mut self, now: u64) {
        if self.give_backs.timer_at.is_none()
            && self.give_back_enabled()
            && self
                .voltab
                .loans()
                .iter()
                .any(|l| l.kind == LoanKind::Borrowed)
        {
            self.give_backs.timer_at = Some(now + self.cfg.give_back_hold_ns);
        }
    }

    /// Borrowed runs seen wholly free behind a run in use (each once), which only a
    /// tombstone record could give back (docs/ARCHITECTURE.md, "More than the last run").
    pub fn give_back_stuck(&self) -> &[LoanRecord] {
        &self.give_backs.stuck
    }

    /// At a look: note every durable borrowed run of each pool that is wholly free while
    /// a run after it is not (a run in the free tail goes back, one by one).
    fn note_stuck_runs(&mut self) {
        let mut found = Vec::new();
        for p in 0..self.pools.len() {
            let pool = PoolId(p as u16);
            let a = &self.pools[p].alloc;
            let mut at =
                crate::layout::chunks_in(self.cfg.pools[p].capacity_bytes, self.cfg.chunk_bytes);
            let mut free_runs = Vec::new();
            for l in self.voltab.loans().iter() {
                if l.pool != pool || l.kind != LoanKind::Borrowed {
                    continue;
                }
                let run = at + 1..at + 1 + l.chunks;
                at = run.end;
                if run.end > a.chunks() {
                    break;
                }
                if run.clone().all(|c| !a.is_used(c)) {
                    free_runs.push(*l);
                } else {
                    // Every free run before this one is stuck behind it.
                    found.append(&mut free_runs);
                }
            }
        }
        for l in found {
            if !self.give_backs.stuck.contains(&l) {
                self.give_backs.stuck.push(l);
            }
        }
    }

    /// The last borrowed run of pool `p` and the engine chunk of its guard, if the
    /// allocator ends with it and no change of the pool's borrowed runs is being recorded.
    fn last_borrowed(&self, p: usize) -> Option<(LoanRecord, u64)> {
        let pool = PoolId(p as u16);
        let busy = self.loans.pending.iter().any(|c| {
            let (Change::Add(l) | Change::Remove(l)) = c;
            l.pool == pool && l.kind == LoanKind::Borrowed
        });
        let l = *(self.voltab.loans().iter())
            .rev()
            .find(|l| l.pool == pool && l.kind == LoanKind::Borrowed)?;
        let a = &self.pools.get(p)?.alloc;
        let guard = a.chunks().checked_sub(l.chunks + 1)?;
        (!busy && a.is_used(guard)).then_some((l, guard))
    }

    /// The last borrowed run of pool `p` if it may go back now: wholly free, and the
    /// shard keeps `keep` low-water marks without it.
    fn give_back_candidate(&self, p: usize, keep: u64) -> Option<(LoanRecord, u64)> {
        let (l, guard) = self.last_borrowed(p)?;
        let a = &self.pools[p].alloc;
        if (guard + 1..a.chunks()).any(|c| a.is_used(c)) {
            return None;
        }
        let left = a.available_chunks().saturating_sub(l.chunks);
        let low = ((a.chunks() - 1 - l.chunks) / 8).max(8);
        let asked = matches!(
            self.loan_waits.asks.get(p),
            Some(crate::loan_wait::Ask::Asked { .. })
        );
        (left >= keep * low && !asked).then_some((l, guard))
    }

    /// The give-back timer: look at the borrowed runs, or move the one under way on.
    pub(crate) fn give_back_tick(&mut self, now: u64, out: &mut Outputs) {
        if self.give_backs.timer_at.is_none_or(|t| t > now) {
            return;
        }
        self.give_backs.timer_at = None;
        if self.state != EngineState::Ready || !self.give_back_enabled() {
            return;
        }
        if self.give_backs.active.is_some() {
            return self.give_back_progress(now, out);
        }
        self.note_stuck_runs();
        let mut again = false;
        for p in 0..self.pools.len() {
            let c = self.give_back_candidate(p, GIVE_BACK_KEEP);
            if self.give_backs.seen.len() <= p {
                self.give_backs.seen.resize(p + 1, None);
            }
            match c {
                Some((l, guard)) if self.give_backs.seen[p] == Some(l) => {
                    self.give_backs.seen[p] = None;
                    return self.give_back_start(now, p, l, guard, out);
                }
                Some((l, _)) => {
                    self.give_backs.seen[p] = Some(l);
                    again = true;
                }
                None => self.give_backs.seen[p] = None,
            }
        }
        if again {
            self.give_backs.timer_at = Some(now + self.cfg.give_back_hold_ns);
        }
    }

    /// `Control::GiveBackNow`: another shard was refused space in `pool`. The last
    /// borrowed run of `pool` goes back now if it may go back at all (wholly free, the
    /// shard keeps its own low-water mark, `GIVE_BACK_KEEP_ON_HINT`, and is not asking
    /// itself), skipping the rest of the hold: the hold only guards against giving back
    /// what this shard is about to use, and the space is wanted now. The steps are those
    /// of the timer's give-back (reach, the FUA record). One give-back at a time: one under
    /// way is left to finish.
    pub(crate) fn give_back_now(
        &mut self,
        now: u64,
        pool: PoolId,
        out: &mut Outputs,
    ) -> Result<(), crate::control::ControlError> {
        let p = pool.0 as usize;
        if p >= self.pools.len() {
            return Err(crate::control::ControlError::UnknownPool(pool));
        }
        self.give_backs.hints += 1;
        if self.state != EngineState::Ready
            || !self.give_back_enabled()
            || self.give_backs.active.is_some()
        {
            return Ok(());
        }
        let c = if self.bug_is(InjectedBug::GiveBackNowUsed) {
            // The injected defect takes the hint for the check: the last run goes back
            // whether or not anything still lives in it.
            self.last_borrowed(p)
        } else {
            self.give_back_candidate(p, GIVE_BACK_KEEP_ON_HINT)
        };
        if let Some((l, guard)) = c {
            if let Some(s) = self.give_backs.seen.get_mut(p) {
                *s = None;
            }
            self.give_backs.on_hint += 1;
            self.give_back_start(now, p, l, guard, out);
        }
        Ok(())
    }

    /// Step 1: the run leaves the allocator.
    fn give_back_start(
        &mut self,
        now: u64,
        p: usize,
        l: LoanRecord,
        guard: u64,
        out: &mut Outputs,
    ) {
        let a = &mut self.pools[p].alloc;
        for c in guard + 1..guard + 1 + l.chunks {
            a.mark_used(c);
        }
        self.give_backs.active = Some(state::Active {
            rec: l,
            guard,
            recording: false,
        });
        self.give_back_progress(now, out);
    }

    /// Step 2, then 3: ask for the checkpoints still needed; once none is, record it.
    fn give_back_progress(&mut self, now: u64, out: &mut Outputs) {
        let Some(a) = self.give_backs.active else {
            return;
        };
        if a.recording || self.state != EngineState::Ready {
            return;
        }
        let cb = self.cfg.chunk_bytes;
        let mut waiting = false;
        if !self.bug_is(InjectedBug::GiveBackEarly) {
            for v in 0..self.vols.len() {
                let vol = &mut self.vols[v];
                if vol.journal.reach.total().chunk_end(a.rec.pool, cb) <= a.guard + 1 {
                    continue;
                }
                waiting = true;
                vol.checkpoint_wanted = true;
                self.kick_commit(now, v as u32, out);
            }
        }
        if waiting {
            self.give_backs.timer_at = Some(now + GIVE_BACK_POLL_NS);
            return;
        }
        match self.record_loan_change(now, Change::Remove(a.rec), out) {
            Ok(()) => {
                if let Some(x) = self.give_backs.active.as_mut() {
                    x.recording = true;
                }
            }
            Err(_) => {
                self.give_back_cancel(a.rec.pool);
            }
        }
    }

    /// Call off the give-back of `pool` not yet being recorded: the run is back in the
    /// allocator. Returns false if one is being recorded (it cannot be called off).
    pub(crate) fn give_back_cancel(&mut self, pool: PoolId) -> bool {
        let Some(a) = self.give_backs.active else {
            return true;
        };
        if a.rec.pool != pool {
            return true;
        }
        if a.recording {
            return false;
        }
        let al = &mut self.pools[pool.0 as usize].alloc;
        for c in a.guard + 1..a.guard + 1 + a.rec.chunks {
            al.release(c);
        }
        self.give_backs.active = None;
        self.give_backs.cancelled += 1;
        true
    }

    /// Step 3 is durable: the run leaves the address space; the driver returns it to
    /// its donor.
    pub(crate) fn give_back_durable(&mut self, l: LoanRecord, out: &mut Outputs) {
        let Some(a) = self.give_backs.active.filter(|a| a.rec == l && a.recording) else {
            return;
        };
        self.pools[l.pool.0 as usize].alloc.shrink(1 + l.chunks);
        self.give_backs.active = None;
        self.give_backs.given += 1;
        // The run before it is the last now: look at it a hold later.
        self.give_backs.timer_at = Some(self.last_now_ns + self.cfg.give_back_hold_ns);
        debug_assert_eq!(self.pools[l.pool.0 as usize].alloc.chunks(), a.guard);
        out.events.push(EngineEvent::GaveBack {
            pool: l.pool,
            to: l.peer,
            first_chunk: l.first_chunk,
            chunks: l.chunks,
        });
    }

    /// The chunks a give-back holds out of the allocator, for the invariant check.
    pub(crate) fn give_back_claims(&self) -> Vec<(usize, u64, String)> {
        let Some(a) = self.give_backs.active else {
            return Vec::new();
        };
        (a.guard + 1..a.guard + 1 + a.rec.chunks)
            .map(|c| {
                let why = format!("being given back to shard {}", a.rec.peer);
                (a.rec.pool.0 as usize, c, why)
            })
            .collect()
    }

    /// The invariant: no volume's on-disk metadata (its durable checkpoint, the records
    /// since it began) names a chunk beyond its pool, nor one of a run whose give-back
    /// is being recorded: a mount would refuse it.
    pub(crate) fn check_reach(&self) -> Result<(), String> {
        let cb = self.cfg.chunk_bytes;
        let recording = self.give_backs.active.filter(|a| a.recording);
        for vol in &self.vols {
            let r = vol.journal.reach.total();
            for (p, pool) in self.pools.iter().enumerate() {
                let pid = PoolId(p as u16);
                let mut end = pool.alloc.chunks();
                if let Some(a) = recording.filter(|a| a.rec.pool == pid) {
                    end = a.guard + 1;
                }
                let reach = r.chunk_end(pid, cb);
                if reach > end {
                    return Err(format!(
                        "volume {}: its checkpoint or journal names chunk {} of pool {}, \
                         beyond the {} chunks a mount would find",
                        vol.rec.name,
                        reach - 1,
                        self.cfg.pools[p].name,
                        end
                    ));
                }
            }
        }
        Ok(())
    }
}
