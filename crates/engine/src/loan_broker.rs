//! What a driver does with the shards' loan events (`loan.rs`), kept here so the
//! simulator and the threaded server carry the same requests the same way. It decides;
//! the driver delivers each `(shard, Control)` to that shard's engine and feeds back the
//! events and refusals.
//!
//! One loan per pool is under way at a time: a shard low on space (`SpaceLow`) gets a
//! run from the shard with the most chunks available in that pool; the donor's `Lent`
//! becomes the borrower's `Borrow`; a borrow refused (the borrower stopping) is given
//! back to the donor. No shard waits for another: each step is a command that returns
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
}

impl LoanBroker {
    /// Forget loans under way (every engine was thrown away: a power loss).
    pub fn reset(&mut self) {
        self.in_flight.clear();
    }

    fn slot(&mut self, pool: PoolId) -> &mut Option<(u16, u16)> {
        let p = pool.0 as usize;
        if self.in_flight.len() <= p {
            self.in_flight.resize(p + 1, None);
        }
        &mut self.in_flight[p]
    }

    /// Shard `k` said `e`; `room(j, pool)` is shard j's room in the pool (`None` if it
    /// cannot take commands now). Returns the command to send, and to which shard.
    pub fn on_event(
        &mut self,
        k: u16,
        shards: u16,
        e: &EngineEvent,
        room: impl Fn(u16, PoolId) -> Option<PoolRoom>,
    ) -> Option<(u16, Control)> {
        match *e {
            EngineEvent::SpaceLow { pool, .. } => {
                if self.slot(pool).is_some() {
                    return None;
                }
                // The shard with the most to spare lends half of what it can spare, and
                // not less than a low-water mark's worth (each loan costs a table
                // record and a guard chunk).
                let (donor, spare, low) = (0..shards)
                    .filter(|&j| j != k)
                    .filter_map(|j| {
                        let r = room(j, pool)?;
                        let spare = r.available_chunks.saturating_sub(2 * r.low_water_chunks);
                        Some((j, spare, r.low_water_chunks))
                    })
                    .max_by_key(|&(j, spare, _)| (spare, std::cmp::Reverse(j)))?;
                if spare == 0 {
                    return None;
                }
                *self.slot(pool) = Some((donor, k));
                Some((
                    donor,
                    Control::Lend {
                        pool,
                        to: k,
                        chunks: spare.div_ceil(2).max(spare.min(low)),
                    },
                ))
            }
            EngineEvent::Lent {
                pool,
                to,
                first_chunk,
                chunks,
            } => Some((
                to,
                Control::Borrow {
                    pool,
                    from: k,
                    first_chunk,
                    chunks,
                },
            )),
            EngineEvent::Borrowed { pool, .. } | EngineEvent::LoanReturned { pool, .. } => {
                *self.slot(pool) = None;
                None
            }
            _ => None,
        }
    }

    /// Shard `k` refused `c`, which this broker asked for: what to do instead. A refused
    /// lend ends the loan (the borrower asks again later); a refused borrow gives the
    /// run back to its donor; a refused return is left for the next mount.
    pub fn on_refused(&mut self, k: u16, c: &Control) -> Option<(u16, Control)> {
        match *c {
            Control::Lend { pool, .. } => {
                *self.slot(pool) = None;
                None
            }
            Control::Borrow {
                pool,
                from,
                first_chunk,
                chunks,
            } => Some((
                from,
                Control::ReturnLoan {
                    pool,
                    to: k,
                    first_chunk,
                    chunks,
                },
            )),
            Control::ReturnLoan { pool, .. } => {
                *self.slot(pool) = None;
                None
            }
            _ => None,
        }
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

    #[test]
    fn a_low_shard_borrows_from_the_roomiest_and_one_loan_runs_at_a_time() {
        let mut b = LoanBroker::default();
        let room = |j: u16, _| {
            Some(PoolRoom {
                available_chunks: [10, 100, 300][j as usize],
                low_water_chunks: 8,
            })
        };
        let low = EngineEvent::SpaceLow {
            pool: PoolId(0),
            available_chunks: 3,
        };
        let (donor, c) = b.on_event(0, 3, &low, room).unwrap();
        assert_eq!(donor, 2);
        assert_eq!(
            c,
            Control::Lend {
                pool: PoolId(0),
                to: 0,
                chunks: 142
            }
        );
        // A second ask while one is under way waits.
        assert_eq!(b.on_event(1, 3, &low, room), None);
        let lent_ev = EngineEvent::Lent {
            pool: PoolId(0),
            to: 0,
            first_chunk: 150,
            chunks: 142,
        };
        let (to, borrow) = b.on_event(2, 3, &lent_ev, room).unwrap();
        assert_eq!(to, 0);
        // The borrower refused (stopping): the run goes back to the donor.
        let (back, ret) = b.on_refused(0, &borrow).unwrap();
        assert_eq!(back, 2);
        assert!(matches!(
            ret,
            Control::ReturnLoan {
                to: 0,
                first_chunk: 150,
                chunks: 142,
                ..
            }
        ));
        let done = EngineEvent::LoanReturned {
            pool: PoolId(0),
            to: 0,
            first_chunk: 150,
            chunks: 142,
        };
        assert_eq!(b.on_event(2, 3, &done, room), None);
        assert!(b.on_event(1, 3, &low, room).is_some());
    }

    #[test]
    fn no_donor_with_room_means_no_loan() {
        let mut b = LoanBroker::default();
        let room = |_, _| {
            Some(PoolRoom {
                available_chunks: 16,
                low_water_chunks: 8,
            })
        };
        let low = EngineEvent::SpaceLow {
            pool: PoolId(0),
            available_chunks: 3,
        };
        assert_eq!(b.on_event(0, 2, &low, room), None);
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
