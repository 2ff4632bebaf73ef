//! Deferred reuse of freed space.
//!
//! A freed location may be reused only when (1) the journal records that stopped
//! referencing it are durable, so no crash can bring the old reference back, and (2) every
//! device operation that was in flight when it was freed has finished, so no read still
//! under way can return the next owner's data, and no queued write can land on it. (2) is
//! tracked with epochs: operations count against the epoch current when they were
//! created (queued, not dispatched); freeing closes the epoch.

use std::collections::VecDeque;

use smallvec::SmallVec;

use crate::types::PoolId;

#[derive(Clone, Debug, Default)]
pub struct Epochs {
    base: u64,
    counts: VecDeque<u32>,
}

impl Epochs {
    pub fn new() -> Epochs {
        Epochs {
            base: 0,
            counts: VecDeque::from([0]),
        }
    }
    /// An operation starts; returns its epoch.
    #[inline]
    pub fn enter(&mut self) -> u64 {
        *self.counts.back_mut().expect("epoch deque never empty") += 1;
        self.base + self.counts.len() as u64 - 1
    }
    /// An operation of epoch `e` finished.
    #[inline]
    pub fn leave(&mut self, e: u64) {
        let i = (e - self.base) as usize;
        self.counts[i] -= 1;
        while self.counts.len() > 1 && self.counts[0] == 0 {
            self.counts.pop_front();
            self.base += 1;
        }
    }
    /// Close the current epoch; returns it. Space freed now is safe once it has drained.
    pub fn close(&mut self) -> u64 {
        self.counts.push_back(0);
        self.base + self.counts.len() as u64 - 2
    }
    /// Whether every operation of epochs up to `e` has finished.
    pub fn drained(&self, e: u64) -> bool {
        e < self.base
            || self
                .counts
                .iter()
                .take((e - self.base + 1) as usize)
                .all(|&c| c == 0)
    }
}

/// What is being freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freed {
    /// `n` contiguous chunks.
    Chunks { pool: PoolId, first: u64, n: u64 },
}

#[derive(Clone, Debug)]
pub struct PendingFree {
    pub what: Freed,
    /// (volume index, record sequence) that must be durable first.
    pub needs: SmallVec<[(u32, u64); 1]>,
    pub epoch: u64,
    /// Discarded before `needs` were durable (only by the injected bug
    /// `punch-before-free-durable`, which DST must catch).
    pub discarded_early: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_drains_only_after_its_operations() {
        let mut e = Epochs::new();
        let a = e.enter();
        let b = e.enter();
        let closed = e.close();
        let c = e.enter();
        assert!(!e.drained(closed));
        e.leave(a);
        assert!(!e.drained(closed));
        e.leave(b);
        assert!(e.drained(closed));
        let closed2 = e.close();
        assert!(!e.drained(closed2));
        e.leave(c);
        assert!(e.drained(closed2));
    }
}
