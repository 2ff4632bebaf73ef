//! Requests waiting for a loan of space, and when to ask again: plain data engine.rs holds,
//! apart from the glue in `loan_wait.rs` (issue 11's import cycle).

use crate::volume::Waiter;

/// After a denial (or an unanswered ask), how long a shard waits before asking again:
/// writes meanwhile fail with ENOSPC at once, as without shards.
pub const ASK_AGAIN_NS: u64 = 50_000_000;

/// How long a write may wait for the answer to an ask. A loan is two FUA table writes
/// and a few thread hops (milliseconds); this only bounds a lost answer, well inside a
/// guest's I/O timeout (30 s for Linux SCSI disks).
pub const ANSWER_WAIT_NS: u64 = 5_000_000_000;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Ask {
    #[default]
    Idle,
    /// `SpaceLow` was said at this time; no answer yet.
    Asked { at_ns: u64 },
    /// Denied (or unanswered) at this time.
    Denied { at_ns: u64 },
}

/// Per pool: this shard's ask for space and the write pieces waiting for its answer.
#[derive(Default)]
pub(crate) struct LoanWaits {
    pub(crate) asks: Vec<Ask>,
    /// (pool, volume, piece), in the order they came.
    pub(crate) parked: Vec<(u16, u32, Waiter)>,
    /// Write pieces that waited for a loan (each wait counted), for `Engine::loan_waits`.
    pub(crate) waited: u64,
    /// Answers that came while a piece's volume was paused for its pivot (the pause
    /// waits for the piece), for `Engine::loan_answers_in_pauses`.
    pub(crate) in_pauses: u64,
}

impl LoanWaits {
    pub(crate) fn ask(&mut self, p: usize) -> &mut Ask {
        if self.asks.len() <= p {
            self.asks.resize(p + 1, Ask::Idle);
        }
        &mut self.asks[p]
    }

    /// When a waiting piece's ask times out (for `Engine::next_deadline`).
    pub(crate) fn deadline(&self) -> Option<u64> {
        (self.asks.iter().enumerate())
            .filter(|(p, _)| self.parked.iter().any(|w| w.0 as usize == *p))
            .filter_map(|(_, a)| match a {
                Ask::Asked { at_ns } => Some(at_ns + ANSWER_WAIT_NS),
                _ => None,
            })
            .min()
    }
}
