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

/// Space freed and not yet reusable, and the epochs that say when in-flight I/O has
/// drained: the engine asks it, and queues the discards it hands out.
///
/// Invariant: a pending free is in exactly one state: waiting (its epoch), being
/// discarded (`DISCARDING`, counted in `discarding`), or gone (its chunks back in the
/// allocator, which the engine does when `take` or `discard_done` hands it out).
#[derive(Debug, Default)]
pub(crate) struct Reclaim {
    epochs: Epochs,
    frees: slab::Slab<PendingFree>,
    /// Frees whose discard is in flight.
    discarding: usize,
}

/// The epoch of a free whose discard is in flight (no longer waiting for one).
const DISCARDING: u64 = u64::MAX;

impl Reclaim {
    pub(crate) fn new() -> Reclaim {
        Reclaim {
            epochs: Epochs::new(),
            frees: slab::Slab::new(),
            discarding: 0,
        }
    }

    /// A device operation starts; returns its epoch.
    #[inline]
    pub(crate) fn enter(&mut self) -> u64 {
        self.epochs.enter()
    }

    /// A device operation of epoch `e` finished.
    #[inline]
    pub(crate) fn leave(&mut self, e: u64) {
        self.epochs.leave(e)
    }

    /// `what` becomes free once `needs` are durable and the I/O in flight now has drained.
    pub(crate) fn defer(&mut self, what: Freed, needs: SmallVec<[(u32, u64); 1]>) {
        let epoch = self.epochs.close();
        self.frees.insert(PendingFree {
            what,
            needs,
            epoch,
            discarded_early: false,
        });
    }

    /// Whether nothing is waiting (discards in flight do not count).
    pub(crate) fn is_empty(&self) -> bool {
        self.frees.is_empty()
    }

    /// Every pending free, discards in flight included.
    pub(crate) fn pending(&self) -> impl Iterator<Item = &PendingFree> {
        self.frees.iter().map(|(_, f)| f)
    }

    /// Whether a discard is in flight (space that is about to come back).
    pub(crate) fn discarding(&self) -> bool {
        self.discarding > 0
    }

    /// The frees whose I/O has drained and whose records `durable` says are durable.
    pub(crate) fn ready(&self, durable: impl Fn(u32, u64) -> bool) -> Vec<usize> {
        self.frees
            .iter()
            .filter(|(_, f)| {
                f.epoch != DISCARDING
                    && self.epochs.drained(f.epoch)
                    && f.needs.iter().all(|&(v, s)| durable(v, s))
            })
            .map(|(k, _)| k)
            .collect()
    }

    /// The injected `punch-before-free-durable`: frees whose I/O has drained, durable or
    /// not, not yet discarded.
    pub(crate) fn drained_not_discarded(&self) -> Vec<usize> {
        self.frees
            .iter()
            .filter(|(_, f)| {
                !f.discarded_early && f.epoch != DISCARDING && self.epochs.drained(f.epoch)
            })
            .map(|(k, _)| k)
            .collect()
    }

    /// Free `k` is being discarded; its chunks come back at `discard_done(k)`.
    pub(crate) fn start_discard(&mut self, k: usize) -> Freed {
        self.frees[k].epoch = DISCARDING;
        self.discarding += 1;
        self.frees[k].what
    }

    /// The injected bug's early discard of free `k` (it stays pending).
    pub(crate) fn start_early_discard(&mut self, k: usize) -> Freed {
        self.frees[k].discarded_early = true;
        self.discarding += 1;
        self.frees[k].what
    }

    /// Free `k` is done with: its chunks go back to the allocator.
    pub(crate) fn take(&mut self, k: usize) -> Freed {
        self.frees.remove(k).what
    }

    /// A discard ended (even a failed one: discard is advisory); the chunks of free `k`
    /// go back, if it was not an early discard (`usize::MAX`).
    pub(crate) fn discard_done(&mut self, k: usize) -> Option<Freed> {
        self.discarding -= 1;
        self.frees.try_remove(k).map(|f| f.what)
    }
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

    #[test]
    fn a_free_is_ready_once_durable_and_drained_and_discarding_hides_it() {
        let mut r = Reclaim::new();
        let op = r.enter();
        let what = Freed::Chunks {
            pool: PoolId(0),
            first: 4,
            n: 2,
        };
        r.defer(what, SmallVec::from_slice(&[(1, 7)]));
        assert!(r.ready(|_, _| true).is_empty(), "I/O still in flight");
        r.leave(op);
        assert!(r.ready(|_, s| s >= 8).is_empty(), "record not durable");
        let ready = r.ready(|_, s| s <= 7);
        assert_eq!(ready.len(), 1);
        assert_eq!(r.start_discard(ready[0]), what);
        assert!(r.discarding() && !r.is_empty());
        assert!(
            r.ready(|_, _| true).is_empty(),
            "a discard in flight is not ready"
        );
        assert_eq!(r.discard_done(ready[0]), Some(what));
        assert!(!r.discarding() && r.is_empty());
    }
}
