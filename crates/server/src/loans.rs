//! Space moves between the server's shard threads (issue 18, `engine::loan`): what the
//! simulator's router does, over channels. A shard's loan events go to the front, whose
//! `LoanBroker` answers with commands to the shards; a shard's room in each pool is
//! published in atomics the front reads, so choosing a donor never waits on a shard.
//! A device operation on a borrowed chunk goes to the donor's slice of the pool file.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tiervisor_engine::loan_broker::PoolRoom;
use tiervisor_engine::{Control, DeviceOp, Engine, EngineEvent, PoolId};

/// Every shard's room in every pool: `[shard][pool]` (available, low-water) chunks.
pub(crate) struct RoomBoard {
    pools: usize,
    cells: Vec<AtomicU64>,
}

impl RoomBoard {
    pub(crate) fn new(shards: usize, pools: usize) -> Arc<RoomBoard> {
        Arc::new(RoomBoard {
            pools,
            cells: (0..shards * pools * 2).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    fn at(&self, k: u16, pool: PoolId) -> Option<usize> {
        let p = pool.0 as usize;
        let i = (k as usize * self.pools + p) * 2;
        (p < self.pools && i + 1 < self.cells.len()).then_some(i)
    }

    /// Shard `k`'s engine's room now (relaxed: a donor checks again when asked).
    pub(crate) fn publish(&self, k: u16, e: &Engine) {
        for p in 0..self.pools {
            let pool = PoolId(p as u16);
            if let Some(i) = self.at(k, pool) {
                self.cells[i].store(e.available_chunks(pool), Ordering::Relaxed);
                self.cells[i + 1].store(e.low_water_chunks(pool), Ordering::Relaxed);
            }
        }
    }

    pub(crate) fn room(&self, k: u16, pool: PoolId) -> Option<PoolRoom> {
        let i = self.at(k, pool)?;
        Some(PoolRoom {
            available_chunks: self.cells[i].load(Ordering::Relaxed),
            low_water_chunks: self.cells[i + 1].load(Ordering::Relaxed),
        })
    }
}

/// A shard's side: the loan events its engine said and the commands it refused, both
/// for the front; and where every shard's slice of each pool starts.
#[derive(Default)]
pub(crate) struct ShardLoans {
    pub(crate) events: Vec<EngineEvent>,
    pub(crate) refused: Vec<Control>,
    /// `[pool][shard]`: the slice bases (empty with one shard: nothing is borrowed).
    pub(crate) bases: Vec<Vec<u64>>,
    pub(crate) board: Option<Arc<RoomBoard>>,
}

impl ShardLoans {
    /// Whether `e` is a loan event or a budget report or answer (`engine::budgets`),
    /// kept for the front besides being logged.
    pub(crate) fn keep(&mut self, e: &EngineEvent) {
        if matches!(
            e,
            EngineEvent::SpaceLow { .. }
                | EngineEvent::Lent { .. }
                | EngineEvent::Borrowed { .. }
                | EngineEvent::LoanReturned { .. }
                | EngineEvent::GaveBack { .. }
                | EngineEvent::BudgetDemand { .. }
                | EngineEvent::BudgetsSet { .. }
        ) && !self.bases.is_empty()
        {
            self.events.push(e.clone());
        }
    }

    /// Point an operation of shard `k` at a borrowed chunk's home: the donor's slice.
    /// The backend adds shard k's base to every offset, so the offset given is relative
    /// to it and may be below it; the addition wraps it back (`io::Offset`).
    pub(crate) fn translate(&self, k: u16, e: &Engine, op: &mut DeviceOp) {
        let Some(bases) = self.bases.get(op.pool.0 as usize) else {
            return;
        };
        if let Some((j, off)) = e.device_home(op.pool, op.offset_bytes)
            && let (Some(&bj), Some(&bk)) = (bases.get(j as usize), bases.get(k as usize))
        {
            op.offset_bytes = (off + bj).wrapping_sub(bk);
        }
    }
}
