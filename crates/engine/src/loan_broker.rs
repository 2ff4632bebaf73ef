//! What a driver does with the shards' loan events (`loan.rs`), kept here so the
//! simulator and the threaded server carry the same requests the same way. It decides;
//! the driver delivers each `(shard, Control)` to that shard's engine and feeds back the
//! events and refusals.
//!
//! One loan per pool is under way at a time: a shard low on space (`SpaceLow`) gets a
//! run from the shard with the most chunks available in that pool; the donor's `Lent`
//! becomes the borrower's `Borrow`; a borrow refused (the borrower stopping) is given
//! back to the donor. Every ask gets one answer, because writes may wait for it
//! (`loan_wait.rs`): the loan, or `Control::LoanDenied` when no shard has room to spare
//! or the loan failed; an ask while another shard's loan of the pool is under way waits
//! here for its turn. No shard waits for another: each step is a command that returns
//! at once, and its answer is an event the driver carries on.

use crate::control::Control;
use crate::loan::{LoanKind, LoanRecord};
use crate::types::{EngineEvent, PoolId};

/// A shard's view of one pool, for choosing a donor: chunks data may take, and its
/// low-water mark (`Engine::available_chunks`, `Engine::low_water_chunks`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolRoom {
    pub available_chunks: u64,
    pub low_water_chunks: u64,
}

#[derive(Default)]
pub struct LoanBroker {
    /// Per pool: the loan under way (donor, borrower).
    in_flight: Vec<Option<(u16, u16)>>,
    /// Per pool: shards that asked while another's loan was under way, in order; each
    /// gets its turn when that loan ends.
    waiting: Vec<Vec<u16>>,
    /// Per pool: shards denied space while the others were hinted to give back
    /// (`Control::GiveBackNow`); when a run comes back to its donor, each still low gets
    /// a loan offered without asking again.
    hinted: Vec<Vec<u16>>,
}

/// What the driver sends: `(shard, command)`, in order.
pub type Steps = Vec<(u16, Control)>;

impl LoanBroker {
    /// Forget loans under way (every engine was thrown away: a power loss).
    pub fn reset(&mut self) {
        self.in_flight.clear();
        self.waiting.clear();
        self.hinted.clear();
    }

    /// The loan of `pool` under way: (donor, borrower).
    fn current(&self, pool: PoolId) -> Option<(u16, u16)> {
        self.in_flight.get(pool.0 as usize).copied().flatten()
    }

    fn slot(&mut self, pool: PoolId) -> &mut Option<(u16, u16)> {
        let p = pool.0 as usize;
        if self.in_flight.len() <= p {
            self.in_flight.resize(p + 1, None);
            self.waiting.resize(p + 1, Vec::new());
            self.hinted.resize(p + 1, Vec::new());
        }
        &mut self.in_flight[p]
    }

    /// Shard `k` asks for space in `pool` and no loan of it is under way: a loan from
    /// the shard with the most to spare, or a denial when none has any.
    fn start(
        &mut self,
        k: u16,
        shards: u16,
        pool: PoolId,
        room: &impl Fn(u16, PoolId) -> Option<PoolRoom>,
        steps: &mut Steps,
    ) {
        match self.offer(k, shards, pool, room) {
            Some(lend) => steps.push(lend),
            None => self.deny(k, shards, pool, room, steps),
        }
    }

    /// Shard `k` gets no space in `pool` now: the denial, and a hint to every other
    /// shard up to take commands to give back a wholly free borrowed run at once
    /// (`Control::GiveBackNow`; each engine decides). A shard's room counts its free
    /// borrowed chunks, which it cannot lend: without the hint they would stay where
    /// they are for the rest of the holder's hold. Once such a run is back with its
    /// donor (`EngineEvent::LoanReturned`), `k` is offered a loan if still low.
    fn deny(
        &mut self,
        k: u16,
        shards: u16,
        pool: PoolId,
        room: &impl Fn(u16, PoolId) -> Option<PoolRoom>,
        steps: &mut Steps,
    ) {
        steps.push((k, Control::LoanDenied { pool }));
        self.slot(pool);
        let hinted = &mut self.hinted[pool.0 as usize];
        if !hinted.contains(&k) {
            hinted.push(k);
        }
        for j in (0..shards).filter(|&j| j != k && room(j, pool).is_some()) {
            steps.push((j, Control::GiveBackNow { pool }));
        }
    }

    /// A loan to shard `k` from the shard with the most to spare, if one has any; the
    /// loan is then under way.
    fn offer(
        &mut self,
        k: u16,
        shards: u16,
        pool: PoolId,
        room: &impl Fn(u16, PoolId) -> Option<PoolRoom>,
    ) -> Option<(u16, Control)> {
        // The shard with the most to spare lends half of what it can spare, and not
        // less than a low-water mark's worth (each loan costs a table record and a
        // guard chunk).
        let best = (0..shards)
            .filter(|&j| j != k)
            .filter_map(|j| {
                let r = room(j, pool)?;
                let spare = r.available_chunks.saturating_sub(2 * r.low_water_chunks);
                Some((j, spare, r.low_water_chunks))
            })
            .max_by_key(|&(j, spare, _)| (spare, std::cmp::Reverse(j)));
        let (donor, spare, low) = best.filter(|b| b.1 > 0)?;
        *self.slot(pool) = Some((donor, k));
        let chunks = spare.div_ceil(2).max(spare.min(low));
        Some((
            donor,
            Control::Lend {
                pool,
                to: k,
                chunks,
            },
        ))
    }

    /// A run came back to its donor outside a loan under way, given back by shard
    /// `giver` (or a run a crash left half lent): each shard denied since its hint that
    /// is still below its low-water mark is offered a loan (one at a time, as ever). One
    /// still low with nothing to lend it (the run went back to that very shard, and was
    /// not enough) stays hinted, and `giver` is hinted again: its borrowed run before
    /// this one is the last now. Each hint gives back a run or nothing, so this ends.
    fn offer_hinted(
        &mut self,
        shards: u16,
        pool: PoolId,
        giver: u16,
        room: &impl Fn(u16, PoolId) -> Option<PoolRoom>,
        steps: &mut Steps,
    ) {
        self.slot(pool);
        let p = pool.0 as usize;
        let mut still = Vec::new();
        for k in std::mem::take(&mut self.hinted[p]) {
            let low = room(k, pool).is_some_and(|r| r.available_chunks < r.low_water_chunks);
            if !low {
                continue;
            }
            if self.in_flight[p].is_none()
                && let Some(lend) = self.offer(k, shards, pool, room)
            {
                steps.push(lend);
                continue;
            }
            still.push(k);
        }
        if !still.is_empty() && giver < shards && room(giver, pool).is_some() {
            steps.push((giver, Control::GiveBackNow { pool }));
        }
        self.hinted[p] = still;
    }

    /// The loan of `pool` ended: the next shard waiting gets its turn (those a denial
    /// answers at once are passed over until one gets a loan under way).
    fn next(
        &mut self,
        shards: u16,
        pool: PoolId,
        room: &impl Fn(u16, PoolId) -> Option<PoolRoom>,
        steps: &mut Steps,
    ) {
        *self.slot(pool) = None;
        let p = pool.0 as usize;
        while self.in_flight[p].is_none() && !self.waiting[p].is_empty() {
            let k = self.waiting[p].remove(0);
            self.start(k, shards, pool, room, steps);
        }
    }

    /// Shard `k` said `e`; `room(j, pool)` is shard j's room in the pool (`None` if it
    /// cannot take commands now). Returns the commands to send, and to which shards.
    /// Every `SpaceLow` gets one answer: a loan (`Borrowed` at the asker) or a
    /// `Control::LoanDenied`.
    pub fn on_event(
        &mut self,
        k: u16,
        shards: u16,
        e: &EngineEvent,
        room: impl Fn(u16, PoolId) -> Option<PoolRoom>,
    ) -> Steps {
        let mut steps = Vec::new();
        match *e {
            EngineEvent::SpaceLow { pool, .. } => match *self.slot(pool) {
                // This shard's loan is on its way: its answer answers this ask too.
                Some((_, b)) if b == k => {}
                Some(_) => {
                    let w = &mut self.waiting[pool.0 as usize];
                    if !w.contains(&k) {
                        w.push(k);
                    }
                }
                None => self.start(k, shards, pool, &room, &mut steps),
            },
            EngineEvent::Lent {
                pool,
                to,
                first_chunk,
                chunks,
            } => steps.push((
                to,
                Control::Borrow {
                    pool,
                    from: k,
                    first_chunk,
                    chunks,
                },
            )),
            // A run given back (`give_back.rs`): its donor takes it back, as a run the
            // borrower never recorded. Not a loan under way: nothing waits for it.
            EngineEvent::GaveBack {
                pool,
                to,
                first_chunk,
                chunks,
            } => steps.push((
                to,
                Control::ReturnLoan {
                    pool,
                    to: k,
                    first_chunk,
                    chunks,
                },
            )),
            EngineEvent::Borrowed { pool, from, .. } if self.current(pool) == Some((from, k)) => {
                self.next(shards, pool, &room, &mut steps)
            }
            EngineEvent::LoanReturned { pool, to, .. } if self.current(pool) == Some((k, to)) => {
                self.next(shards, pool, &room, &mut steps)
            }
            EngineEvent::LoanReturned { pool, to, .. } => {
                self.offer_hinted(shards, pool, to, &room, &mut steps)
            }
            _ => {}
        }
        steps
    }

    /// Shard `k` refused `c`, which this broker asked for: what to do instead. A refused
    /// lend ends the loan and denies the borrower; a refused borrow gives the run back
    /// to its donor (and denies the borrower); a refused return is left for the next
    /// mount.
    pub fn on_refused(
        &mut self,
        k: u16,
        shards: u16,
        c: &Control,
        room: impl Fn(u16, PoolId) -> Option<PoolRoom>,
    ) -> Steps {
        let mut steps = Vec::new();
        match *c {
            Control::Lend { pool, to, .. } if self.current(pool) == Some((k, to)) => {
                // The donor had no run of its own to spare (its room counted free
                // borrowed chunks, or its slice is fragmented): as no donor at all.
                *self.slot(pool) = None;
                self.deny(to, shards, pool, &room, &mut steps);
                self.next(shards, pool, &room, &mut steps);
            }
            Control::Borrow {
                pool,
                from,
                first_chunk,
                chunks,
            } => {
                steps.push((
                    from,
                    Control::ReturnLoan {
                        pool,
                        to: k,
                        first_chunk,
                        chunks,
                    },
                ));
                steps.push((k, Control::LoanDenied { pool }));
            }
            Control::ReturnLoan { pool, to, .. } if self.current(pool) == Some((k, to)) => {
                self.next(shards, pool, &room, &mut steps)
            }
            _ => {}
        }
        steps
    }

    /// Once every shard is mounted: each run a shard recorded lent whose borrower has no
    /// record of it (a crash between the two steps) goes back to the donor. The borrower
    /// never owned it, so nothing was written there.
    pub fn reconcile(loans: &[&[LoanRecord]]) -> Vec<(u16, Control)> {
        let mut out = Vec::new();
        for (j, ls) in loans.iter().enumerate() {
            for l in ls.iter().filter(|l| l.kind == LoanKind::Lent) {
                let held = loans
                    .get(l.peer as usize)
                    .is_some_and(|b| b.contains(&l.mirror(j as u16)));
                if !held {
                    out.push((
                        j as u16,
                        Control::ReturnLoan {
                            pool: l.pool,
                            to: l.peer,
                            first_chunk: l.first_chunk,
                            chunks: l.chunks,
                        },
                    ));
                }
            }
        }
        out
    }

    /// The cross-shard invariant: every borrowed run is recorded lent by its donor, and
    /// no physical chunk is owned by two shards. `runs[k]` is shard k's
    /// `Engine::owned_runs(pool)`.
    pub fn check(
        pool: PoolId,
        loans: &[&[LoanRecord]],
        runs: &[Vec<(u16, u64, u64)>],
    ) -> Result<(), String> {
        for (k, ls) in loans.iter().enumerate() {
            for l in ls
                .iter()
                .filter(|l| l.pool == pool && l.kind == LoanKind::Borrowed)
            {
                let lent = loans
                    .get(l.peer as usize)
                    .is_some_and(|d| d.contains(&l.mirror(k as u16)));
                if !lent {
                    return Err(format!(
                        "shard {k} holds chunks {}..{} of shard {}'s slice of pool {}, which shard {} has no record of lending",
                        l.first_chunk,
                        l.first_chunk + l.chunks,
                        l.peer,
                        pool.0,
                        l.peer
                    ));
                }
            }
        }
        let mut all: Vec<(u16, u64, u64, usize)> = (runs.iter().enumerate())
            .flat_map(|(k, r)| r.iter().map(move |&(s, f, n)| (s, f, n, k)))
            .filter(|r| r.2 > 0)
            .collect();
        all.sort_unstable();
        for w in all.windows(2) {
            let (a, b) = (w[0], w[1]);
            if a.0 == b.0 && a.1 + a.2 > b.1 {
                return Err(format!(
                    "pool {}: chunk {} of shard {}'s slice is owned by shard {} and by shard {}",
                    pool.0, b.1, a.0, a.3, b.3
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lent(peer: u16, first: u64, n: u64) -> LoanRecord {
        LoanRecord {
            kind: LoanKind::Lent,
            pool: PoolId(0),
            peer,
            first_chunk: first,
            chunks: n,
        }
    }

    fn low() -> EngineEvent {
        EngineEvent::SpaceLow {
            pool: PoolId(0),
            available_chunks: 3,
        }
    }

    #[test]
    fn a_low_shard_borrows_from_the_roomiest_and_one_loan_runs_at_a_time() {
        let mut b = LoanBroker::default();
        let room = |j: u16, _| {
            Some(PoolRoom {
                available_chunks: [10, 100, 300][j as usize],
                low_water_chunks: 8,
            })
        };
        let steps = b.on_event(0, 3, &low(), room);
        assert_eq!(
            steps,
            vec![(
                2,
                Control::Lend {
                    pool: PoolId(0),
                    to: 0,
                    chunks: 142
                }
            )]
        );
        // A second ask while one is under way waits for its turn; the asker's own ask
        // again is answered by its loan.
        assert_eq!(b.on_event(1, 3, &low(), room), vec![]);
        assert_eq!(b.on_event(0, 3, &low(), room), vec![]);
        let lent_ev = EngineEvent::Lent {
            pool: PoolId(0),
            to: 0,
            first_chunk: 150,
            chunks: 142,
        };
        let steps = b.on_event(2, 3, &lent_ev, room);
        assert_eq!(steps.len(), 1);
        let (to, borrow) = steps[0].clone();
        assert_eq!(to, 0);
        // The borrower refused (stopping, or no room for the record): the run goes back
        // to the donor, and the borrower's ask is answered.
        let steps = b.on_refused(0, 3, &borrow, room);
        assert_eq!(steps.len(), 2);
        assert!(matches!(
            steps[0],
            (
                2,
                Control::ReturnLoan {
                    to: 0,
                    first_chunk: 150,
                    chunks: 142,
                    ..
                }
            )
        ));
        assert_eq!(steps[1], (0, Control::LoanDenied { pool: PoolId(0) }));
        let done = EngineEvent::LoanReturned {
            pool: PoolId(0),
            to: 0,
            first_chunk: 150,
            chunks: 142,
        };
        // The loan is over: shard 1, which waited, gets its turn.
        let steps = b.on_event(2, 3, &done, room);
        assert!(
            matches!(steps[..], [(2, Control::Lend { to: 1, .. })]),
            "{steps:?}"
        );
        let got = EngineEvent::Borrowed {
            pool: PoolId(0),
            from: 2,
            first_chunk: 10,
            chunks: 142,
        };
        // A Borrowed that is not the loan under way changes nothing.
        assert_eq!(b.on_event(0, 3, &got, room), vec![]);
        assert_eq!(b.on_event(0, 3, &low(), room), vec![]);
        // Shard 1's loan lands; shard 0, waiting, gets the next.
        let steps = b.on_event(1, 3, &got, room);
        assert!(
            matches!(steps[..], [(2, Control::Lend { to: 0, .. })]),
            "{steps:?}"
        );
    }

    #[test]
    fn no_donor_with_room_means_a_denial() {
        let mut b = LoanBroker::default();
        let room = |_, _| {
            Some(PoolRoom {
                available_chunks: 16,
                low_water_chunks: 8,
            })
        };
        // The denial, and a hint to the other shard to give back a free borrowed run.
        assert_eq!(
            b.on_event(0, 2, &low(), room),
            vec![
                (0, Control::LoanDenied { pool: PoolId(0) }),
                (1, Control::GiveBackNow { pool: PoolId(0) })
            ]
        );
        // Nothing is under way after a denial: the next ask is answered too.
        assert_eq!(b.on_event(1, 2, &low(), room).len(), 2);
    }

    /// A denied shard is offered a loan as soon as a run given back on the hint is back
    /// with its donor, if it is still low; once only.
    #[test]
    fn a_run_given_back_on_a_hint_is_offered_to_the_denied_shard() {
        let mut b = LoanBroker::default();
        let avail = std::cell::Cell::new([3u64, 16, 16]);
        let room = |j: u16, _| {
            Some(PoolRoom {
                available_chunks: avail.get()[j as usize],
                low_water_chunks: 8,
            })
        };
        let steps = b.on_event(0, 3, &low(), room);
        assert_eq!(
            steps,
            vec![
                (0, Control::LoanDenied { pool: PoolId(0) }),
                (1, Control::GiveBackNow { pool: PoolId(0) }),
                (2, Control::GiveBackNow { pool: PoolId(0) })
            ]
        );
        // Shard 1 gives back a run borrowed from shard 2; shard 2 takes it back.
        let gave = EngineEvent::GaveBack {
            pool: PoolId(0),
            to: 2,
            first_chunk: 40,
            chunks: 30,
        };
        let steps = b.on_event(1, 3, &gave, room);
        assert!(
            matches!(steps[..], [(2, Control::ReturnLoan { to: 1, .. })]),
            "{steps:?}"
        );
        avail.set([3, 16, 46]);
        let back = EngineEvent::LoanReturned {
            pool: PoolId(0),
            to: 1,
            first_chunk: 40,
            chunks: 30,
        };
        let steps = b.on_event(2, 3, &back, room);
        assert_eq!(
            steps,
            vec![(
                2,
                Control::Lend {
                    pool: PoolId(0),
                    to: 0,
                    chunks: 15
                }
            )]
        );
        // Offered once: another run back later offers nothing unasked.
        assert_eq!(b.on_event(2, 3, &back, room), vec![]);
        // A denied shard no longer low is offered nothing.
        let mut b = LoanBroker::default();
        avail.set([3, 16, 16]);
        b.on_event(0, 3, &low(), room);
        avail.set([30, 16, 46]);
        assert_eq!(b.on_event(2, 3, &back, room), vec![]);
    }

    #[test]
    fn a_refused_lend_denies_the_borrower_and_serves_the_next() {
        let mut b = LoanBroker::default();
        let room = |j: u16, _| {
            Some(PoolRoom {
                available_chunks: [0, 0, 300][j as usize],
                low_water_chunks: 8,
            })
        };
        let steps = b.on_event(0, 3, &low(), room);
        assert_eq!(b.on_event(1, 3, &low(), room), vec![]);
        let steps = b.on_refused(2, 3, &steps[0].1, room);
        assert_eq!(steps[0], (0, Control::LoanDenied { pool: PoolId(0) }));
        assert!(
            matches!(
                steps[1..],
                [
                    (1, Control::GiveBackNow { .. }),
                    (2, Control::GiveBackNow { .. }),
                    (2, Control::Lend { to: 1, .. })
                ]
            ),
            "{steps:?}"
        );
    }

    #[test]
    fn reconcile_returns_runs_the_borrower_never_recorded() {
        let d: Vec<LoanRecord> = vec![lent(1, 10, 5), lent(1, 40, 5)];
        // Shard 1 recorded the first run (shard 0's record seen from shard 1).
        let k = vec![lent(1, 10, 5).mirror(0)];
        let back = LoanBroker::reconcile(&[&d, &k]);
        assert_eq!(
            back,
            vec![(
                0,
                Control::ReturnLoan {
                    pool: PoolId(0),
                    to: 1,
                    first_chunk: 40,
                    chunks: 5
                }
            )]
        );
    }

    #[test]
    fn the_check_finds_double_owned_chunks_and_unrecorded_borrows() {
        let d = vec![lent(1, 10, 5)];
        let k = vec![LoanRecord {
            kind: LoanKind::Borrowed,
            peer: 0,
            ..lent(0, 10, 5)
        }];
        let ok = [vec![(0, 0, 10), (0, 15, 5)], vec![(1, 0, 20), (0, 10, 5)]];
        LoanBroker::check(PoolId(0), &[&d, &k], &ok).unwrap();
        let overlap = [vec![(0, 0, 11), (0, 15, 5)], vec![(1, 0, 20), (0, 10, 5)]];
        let e = LoanBroker::check(PoolId(0), &[&d, &k], &overlap).unwrap_err();
        assert!(e.contains("chunk 10 of shard 0's slice"), "{e}");
        let e = LoanBroker::check(PoolId(0), &[&[], &k], &ok).unwrap_err();
        assert!(e.contains("no record of lending"), "{e}");
    }
}
