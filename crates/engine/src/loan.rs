//! Space lent between shards (issue 18): a shard low on free chunks in a pool borrows a
//! run of another shard's free chunks. The engine only keeps the records and its
//! allocator; the driver carries the request and the answer between shards.
//!
//! The steps, each durable (a volume table write, FUA) before the next:
//! 1. The donor takes a run of its own free chunks out of its allocator and records
//!    `Lent [a, a+n) to k` (`Control::Lend`, then `EngineEvent::Lent`).
//! 2. The borrower records `Borrowed [a, a+n) from j` (`Control::Borrow`); only once that
//!    is durable does its allocator grow by the run (`EngineEvent::Borrowed`), so nothing
//!    is written to a borrowed chunk a crash could forget it owns.
//!
//! A crash between 1 and 2 leaves a `Lent` the borrower has no `Borrowed` for: the
//! driver, once every shard is mounted, gives it back (`Control::ReturnLoan`, the record
//! removed, then the chunks freed). Nobody wrote to it: the borrower never owned it.
//! After 2 the chunks are the borrower's for good (space is not given back yet).
//! Writes that find no room while the loan is on its way wait for it (`loan_wait.rs`).
//!
//! A borrowed run gets addresses past the end of the borrower's own slice: one guard
//! chunk (always in use, never mapped to a device) then the run, in the order the
//! records were made. The guard keeps any run the allocator hands out (a journal, a log
//! segment, a thick region), and any merge of adjacent chunks into one device operation,
//! inside one extent, so every device operation maps to one contiguous physical range;
//! `Engine::device_home` tells the driver where that is.

pub(crate) mod state;

use crate::control::ControlError;
use crate::engine::{Engine, EngineState};
use crate::layout::{DATA_START_BYTES, chunks_in};
pub use crate::layout::{LoanKind, LoanRecord};
use crate::types::{EngineEvent, Outputs, PoolId};
pub(crate) use state::Change;

impl Engine {
    /// The loans in the durable volume table.
    pub fn loans(&self) -> &[LoanRecord] {
        self.voltab.loans()
    }

    /// The loan records the volume table should hold: the durable ones with the pending
    /// changes applied, in order (a borrowed run's addresses follow from its place).
    pub(crate) fn loan_records(&self) -> Vec<LoanRecord> {
        let mut r = self.voltab.loans().to_vec();
        for c in &self.loans.pending {
            match *c {
                Change::Add(l) if !r.contains(&l) => r.push(l),
                Change::Remove(l) => r.retain(|x| *x != l),
                Change::Add(_) => {}
            }
        }
        r
    }

    fn own_chunks(&self, pool: usize) -> u64 {
        chunks_in(self.cfg.pools[pool].capacity_bytes, self.cfg.chunk_bytes)
    }

    /// Chunks data may still take on `pool` (free minus the metadata reserve).
    pub fn available_chunks(&self, pool: PoolId) -> u64 {
        self.pools
            .get(pool.0 as usize)
            .map_or(0, |p| p.alloc.available_chunks())
    }

    /// Below this many available chunks a shard asks for space, and a donor keeps twice
    /// as many for itself.
    pub fn low_water_chunks(&self, pool: PoolId) -> u64 {
        self.pools
            .get(pool.0 as usize)
            .map_or(0, |p| (p.alloc.chunks() / 8).max(8))
    }

    /// Where byte `off` of `pool` as this engine addresses it lives: `None` in its own
    /// slice (at `off`), or `Some((donor, offset in the donor's slice))` in a borrowed
    /// run. A device operation never spans two runs (the guard chunks see to that).
    pub fn device_home(&self, pool: PoolId, off: u64) -> Option<(u16, u64)> {
        let p = pool.0 as usize;
        let cb = self.cfg.chunk_bytes;
        let own = self.own_chunks(p);
        if off < DATA_START_BYTES + own * cb {
            return None;
        }
        let c = (off - DATA_START_BYTES) / cb;
        let within = (off - DATA_START_BYTES) % cb;
        let mut at = own;
        for l in self.voltab.loans().iter().filter(|l| l.pool == pool) {
            if l.kind != LoanKind::Borrowed {
                continue;
            }
            let first = at + 1;
            if c >= first && c < first + l.chunks {
                let donor_chunk = l.first_chunk + (c - first);
                return Some((
                    l.peer,
                    crate::layout::chunk_offset(donor_chunk, cb) + within,
                ));
            }
            at = first + l.chunks;
        }
        // Past every run (or a guard): no device operation is ever made there.
        Some((u16::MAX, off))
    }

    /// Mount: the table's loans shape the allocators before anything else is claimed:
    /// a lent run is in use (the borrower's), a borrowed one extends the pool.
    pub(crate) fn mount_loans(&mut self) -> Result<(), String> {
        for l in self.voltab.loans().to_vec() {
            let p = l.pool.0 as usize;
            if p >= self.pools.len() {
                return Err(format!("loan {l:?} names pool {p}, which does not exist"));
            }
            let name = &self.cfg.pools[p].name;
            match l.kind {
                LoanKind::Lent => {
                    if l.first_chunk + l.chunks > self.own_chunks(p) {
                        return Err(format!(
                            "pool {name}: chunks {}..{} lent to shard {} lie beyond this slice",
                            l.first_chunk,
                            l.first_chunk + l.chunks,
                            l.peer
                        ));
                    }
                    if self.bug_is(crate::inject::InjectedBug::LentKept) {
                        continue;
                    }
                    for c in l.first_chunk..l.first_chunk + l.chunks {
                        if !self.pools[p].alloc.mark_used(c) {
                            return Err(format!("pool {name}: chunk {c} is lent twice"));
                        }
                    }
                }
                LoanKind::Borrowed => self.grow_by(p, l.chunks),
            }
        }
        Ok(())
    }

    /// Append a guard chunk and a borrowed run of `n` chunks to pool `p`'s allocator.
    fn grow_by(&mut self, p: usize, n: u64) {
        let a = &mut self.pools[p].alloc;
        let guard = a.chunks();
        a.grow(1 + n);
        a.mark_used(guard);
    }

    /// The chunks loans hold in this engine's allocators, for the invariant check:
    /// (pool, chunk, why). Lent runs (durable, or being recorded or given back) and the
    /// guards before borrowed runs.
    pub(crate) fn loan_claims(&self) -> Vec<(usize, u64, String)> {
        let mut out = Vec::new();
        let mut lent = self.voltab.loans().to_vec();
        for c in &self.loans.pending {
            if let Change::Add(l) = c
                && !lent.contains(l)
            {
                lent.push(*l);
            }
        }
        let mut at: Vec<u64> = (0..self.pools.len()).map(|p| self.own_chunks(p)).collect();
        for l in &lent {
            let p = l.pool.0 as usize;
            match l.kind {
                LoanKind::Lent => {
                    for c in l.first_chunk..l.first_chunk + l.chunks {
                        out.push((p, c, format!("lent to shard {}", l.peer)));
                    }
                }
                LoanKind::Borrowed if self.voltab.loans().contains(l) => {
                    out.push((
                        p,
                        at[p],
                        format!("guard before chunks borrowed from shard {}", l.peer),
                    ));
                    at[p] += 1 + l.chunks;
                }
                _ => {}
            }
        }
        out
    }

    /// The physical runs of `pool` this shard owns, as (shard, first chunk, chunks) in
    /// the slices' own chunk numbers: its slice less what it lent (durable or being
    /// recorded), plus what it borrowed. Drivers check that no two shards' runs overlap.
    pub fn owned_runs(&self, pool: PoolId) -> Vec<(u16, u64, u64)> {
        let me = self.cfg.shard.index;
        let mut lent: Vec<(u64, u64)> = (self.loan_records().iter())
            .chain(self.voltab.loans().iter())
            .filter(|l| l.pool == pool && l.kind == LoanKind::Lent)
            .map(|l| (l.first_chunk, l.chunks))
            .collect();
        lent.sort_unstable();
        lent.dedup();
        let mut out = Vec::new();
        let mut at = 0;
        for (first, n) in lent {
            if first > at {
                out.push((me, at, first - at));
            }
            at = at.max(first + n);
        }
        let own = self.own_chunks(pool.0 as usize);
        if own > at {
            out.push((me, at, own - at));
        }
        for l in self.voltab.loans() {
            if l.pool == pool && l.kind == LoanKind::Borrowed {
                out.push((l.peer, l.first_chunk, l.chunks));
            }
        }
        out
    }

    fn loan_ready(&self, pool: PoolId, peer: u16) -> Result<(), ControlError> {
        if self.state != EngineState::Ready {
            return Err(ControlError::NotReady);
        }
        if pool.0 as usize >= self.pools.len() {
            return Err(ControlError::UnknownPool(pool));
        }
        let s = self.cfg.shard;
        if peer >= s.count || peer == s.index {
            return Err(ControlError::Invalid(format!(
                "shard {peer} cannot lend to or borrow from shard {} of {}",
                s.index, s.count
            )));
        }
        Ok(())
    }

    pub(crate) fn record_loan_change(
        &mut self,
        now: u64,
        c: Change,
        out: &mut Outputs,
    ) -> Result<(), ControlError> {
        let mut t = self.voltab.durable().clone();
        t.volumes = self.table_records();
        t.loans = self.loan_records();
        if let Change::Add(l) = c {
            t.loans.push(l);
        }
        if !t.fits() {
            return Err(ControlError::Busy(
                "the volume table has no room for another loan record".into(),
            ));
        }
        self.loans.pending.push(c);
        self.write_volume_table(now, out);
        Ok(())
    }

    /// Donor side (`Control::Lend`): take a run of up to `chunks` free chunks of its own
    /// slice out of the allocator and record it lent to shard `to`. It keeps twice its
    /// low-water mark for itself; a fragmented slice lends a shorter run.
    pub(crate) fn try_lend(
        &mut self,
        now: u64,
        pool: PoolId,
        to: u16,
        chunks: u64,
        out: &mut Outputs,
    ) -> Result<(), ControlError> {
        self.loan_ready(pool, to)?;
        let p = pool.0 as usize;
        let spare = self
            .available_chunks(pool)
            .saturating_sub(2 * self.low_water_chunks(pool));
        let mut n = chunks.min(spare);
        if n == 0 {
            return Err(ControlError::NoSpace {
                pool: self.cfg.pools[p].name.clone(),
                free_chunks: self.available_chunks(pool),
                needed_chunks: chunks.max(1) + 2 * self.low_water_chunks(pool),
            });
        }
        let own = self.own_chunks(p);
        let first = loop {
            if let Some(f) = self.pools[p].alloc.free_run_below(n, own) {
                break f;
            }
            n /= 2;
            if n == 0 {
                return Err(ControlError::NoContiguousSpace {
                    pool: self.cfg.pools[p].name.clone(),
                    largest_free_run_chunks: 0,
                    needed_chunks: 1,
                });
            }
        };
        let l = LoanRecord {
            kind: LoanKind::Lent,
            pool,
            peer: to,
            first_chunk: first,
            chunks: n,
        };
        for c in first..first + n {
            self.pools[p].alloc.mark_used(c);
        }
        let r = self.record_loan_change(now, Change::Add(l), out);
        if r.is_err() {
            for c in first..first + n {
                self.pools[p].alloc.release(c);
            }
        }
        r
    }

    /// Borrower side (`Control::Borrow`): record the run shard `from` lent; the
    /// allocator grows once that is durable.
    pub(crate) fn try_borrow(
        &mut self,
        now: u64,
        pool: PoolId,
        from: u16,
        first_chunk: u64,
        chunks: u64,
        out: &mut Outputs,
    ) -> Result<(), ControlError> {
        self.loan_ready(pool, from)?;
        let l = LoanRecord {
            kind: LoanKind::Borrowed,
            pool,
            peer: from,
            first_chunk,
            chunks,
        };
        if chunks == 0 || self.loan_records().contains(&l) {
            return Err(ControlError::Invalid(format!("cannot borrow {l:?} again")));
        }
        // A new run goes after the one being given back: that give-back is called off,
        // or, if its record's removal is being written, the borrow is refused (the
        // broker returns the run to its donor and answers the ask; it comes again).
        if !self.give_back_cancel(pool) {
            return Err(ControlError::Busy(format!(
                "a borrowed run of pool {} is being given back",
                pool.0
            )));
        }
        self.record_loan_change(now, Change::Add(l), out)
    }

    /// Donor side (`Control::ReturnLoan`): the borrower never recorded the run (a crash
    /// between the two steps): remove the record, then free the chunks.
    pub(crate) fn try_return_loan(
        &mut self,
        now: u64,
        pool: PoolId,
        to: u16,
        first_chunk: u64,
        chunks: u64,
        out: &mut Outputs,
    ) -> Result<(), ControlError> {
        self.loan_ready(pool, to)?;
        let l = LoanRecord {
            kind: LoanKind::Lent,
            pool,
            peer: to,
            first_chunk,
            chunks,
        };
        if !self.voltab.loans().contains(&l) || self.loans.pending.contains(&Change::Remove(l)) {
            return Err(ControlError::Invalid(format!(
                "no durable loan {l:?} to take back"
            )));
        }
        self.record_loan_change(now, Change::Remove(l), out)
    }

    /// The volume table was written: every pending change it holds takes effect.
    /// Returns the pools this shard borrowed in (their waiting writes run again).
    pub(crate) fn loan_table_durable(&mut self, out: &mut Outputs) -> Vec<PoolId> {
        let mut borrowed = Vec::new();
        let pending = std::mem::take(&mut self.loans.pending);
        for c in pending {
            match c {
                Change::Add(l) if self.voltab.loans().contains(&l) => {
                    let p = l.pool.0 as usize;
                    match l.kind {
                        LoanKind::Lent => {
                            if self.bug_is(crate::inject::InjectedBug::LentKept) {
                                for c in l.first_chunk..l.first_chunk + l.chunks {
                                    self.pools[p].alloc.release(c);
                                }
                            }
                            out.events.push(EngineEvent::Lent {
                                pool: l.pool,
                                to: l.peer,
                                first_chunk: l.first_chunk,
                                chunks: l.chunks,
                            })
                        }
                        LoanKind::Borrowed => {
                            self.grow_by(p, l.chunks);
                            borrowed.push(l.pool);
                            out.events.push(EngineEvent::Borrowed {
                                pool: l.pool,
                                from: l.peer,
                                first_chunk: l.first_chunk,
                                chunks: l.chunks,
                            })
                        }
                    }
                }
                Change::Remove(l)
                    if l.kind == LoanKind::Borrowed && !self.voltab.loans().contains(&l) =>
                {
                    self.give_back_durable(l, out)
                }
                Change::Remove(l) if !self.voltab.loans().contains(&l) => {
                    let p = l.pool.0 as usize;
                    if !self.bug_is(crate::inject::InjectedBug::LentKept) {
                        for c in l.first_chunk..l.first_chunk + l.chunks {
                            self.pools[p].alloc.release(c);
                        }
                    }
                    self.loan_space_returned(l.pool);
                    out.events.push(EngineEvent::LoanReturned {
                        pool: l.pool,
                        to: l.peer,
                        first_chunk: l.first_chunk,
                        chunks: l.chunks,
                    });
                }
                c => self.loans.pending.push(c),
            }
        }
        borrowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Dec, Enc};
    use crate::config::{EngineConfig, Medium, PoolConfig};
    use crate::layout::chunk_offset;
    use crate::sched::SchedSpec;
    use crate::shard::ShardId;

    /// Shard 1 of 2 over a 64 MiB slice (63 chunks of 1 MiB).
    fn engine() -> Engine {
        let cfg = EngineConfig {
            shard: ShardId { index: 1, count: 2 },
            pools: vec![PoolConfig {
                name: "ssd".into(),
                medium: Medium::Ssd,
                capacity_bytes: 64 << 20,
                queue_depth: 4,
                scheduler: SchedSpec::default(),
                log: false,
                throttle: None,
                write_buffer: None,
            }],
            volumes: Vec::new(),
            ..EngineConfig::default()
        };
        Engine::new(cfg).unwrap()
    }

    fn rec(kind: LoanKind, peer: u16, first: u64, n: u64) -> LoanRecord {
        LoanRecord {
            kind,
            pool: PoolId(0),
            peer,
            first_chunk: first,
            chunks: n,
        }
    }

    /// Mount shapes the allocator from the records: lent chunks in use, each borrowed run
    /// appended after a guard; `device_home` maps a borrowed chunk to its donor's.
    #[test]
    fn mounted_loans_shape_the_allocator_and_the_address_map() {
        let mut e = engine();
        let cb = e.cfg.chunk_bytes;
        let own = e.pools[0].alloc.chunks();
        e.voltab.set_loans_for_test(vec![
            rec(LoanKind::Borrowed, 0, 100, 4),
            rec(LoanKind::Lent, 0, 10, 3),
            rec(LoanKind::Borrowed, 0, 7, 2),
        ]);
        e.mount_loans().unwrap();
        let a = &e.pools[0].alloc;
        assert_eq!(a.chunks(), own + 1 + 4 + 1 + 2);
        // Used: the three lent chunks and the two guards.
        assert_eq!(a.chunks() - a.free_chunks(), 5);
        assert!(a.is_used(own) && a.is_used(own + 5) && a.is_used(11));
        // Own chunks stay where they are.
        assert_eq!(e.device_home(PoolId(0), chunk_offset(3, cb) + 5), None);
        // The first borrowed run: chunks own+1..own+5 are the donor's 100..104.
        assert_eq!(
            e.device_home(PoolId(0), chunk_offset(own + 2, cb) + 4096),
            Some((0, chunk_offset(101, cb) + 4096))
        );
        // The second, after its guard.
        assert_eq!(
            e.device_home(PoolId(0), chunk_offset(own + 7, cb)),
            Some((0, chunk_offset(8, cb)))
        );
        // The claims the invariant check sees are exactly what the allocator holds.
        let claims = e.loan_claims();
        assert_eq!(claims.len(), 5);
        assert!(claims.iter().all(|&(p, c, _)| p == 0 && a.is_used(c)));
        // What shard 1 owns: its slice less the lent run, plus the borrowed runs.
        assert_eq!(
            e.owned_runs(PoolId(0)),
            vec![(1, 0, 10), (1, 13, own - 13), (0, 100, 4), (0, 7, 2)]
        );
    }

    #[test]
    fn a_bad_loan_record_fails_the_mount_with_a_reason() {
        let mut e = engine();
        e.voltab
            .set_loans_for_test(vec![rec(LoanKind::Lent, 0, 60, 10)]);
        let m = e.mount_loans().unwrap_err();
        assert!(m.contains("beyond this slice"), "{m}");
        let mut e = engine();
        e.voltab.set_loans_for_test(vec![
            rec(LoanKind::Lent, 0, 1, 3),
            rec(LoanKind::Lent, 0, 3, 1),
        ]);
        assert!(e.mount_loans().unwrap_err().contains("lent twice"));
        let mut e = engine();
        e.voltab.set_loans_for_test(vec![LoanRecord {
            pool: PoolId(3),
            ..rec(LoanKind::Borrowed, 0, 1, 3)
        }]);
        assert!(e.mount_loans().unwrap_err().contains("does not exist"));
    }

    #[test]
    fn records_encode_and_refuse_nonsense() {
        let r = rec(LoanKind::Borrowed, 3, 77, 9);
        let mut enc = Enc::with_capacity(32);
        r.encode(&mut enc);
        assert_eq!(LoanRecord::decode(&mut Dec::new(&enc.buf)), Some(r));
        assert_eq!(r.mirror(5), rec(LoanKind::Lent, 5, 77, 9));
        for bad in [
            rec(LoanKind::Lent, 0, 1, 0),
            rec(LoanKind::Lent, 0, u64::MAX, 2),
        ] {
            let mut enc = Enc::with_capacity(32);
            bad.encode(&mut enc);
            assert_eq!(LoanRecord::decode(&mut Dec::new(&enc.buf)), None);
        }
        let mut enc = Enc::with_capacity(32);
        r.encode(&mut enc);
        enc.buf[0] = 9;
        assert_eq!(LoanRecord::decode(&mut Dec::new(&enc.buf)), None);
    }
}
