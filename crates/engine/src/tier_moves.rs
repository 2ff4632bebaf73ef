//! What tier moves share: `hot` promotions and demotions and `cache` fills, evictions
//! and write-backs all spend one token bucket of bytes per second (`[tiering]
//! bytes_per_s`) and one cap on moves in flight (`max_moves`), so foreground I/O keeps
//! priority whichever policy moves. It also holds the tier tick's timer and the
//! round-robin cursor over volumes. The policies ask it whether a move may start and tell
//! it when one starts and ends; the invariants compare its counts with the chunks that
//! are moving.

use crate::bucket::TokenBucket;
use crate::config::TieringConfig;
use crate::types::PoolId;

#[derive(Debug)]
pub(crate) struct TierMoves {
    /// When the tier tick next runs.
    pub(crate) timer_at: Option<u64>,
    bucket: TokenBucket,
    /// The volume the next tick considers first.
    rr: usize,
    in_flight: u32,
    /// Demotions in flight out of each pool: room that is on its way.
    demoting: Vec<u32>,
    /// Bytes of moves started, and tier ticks that ended with work left for want of
    /// bandwidth or a free move slot (monotone: a shard's demand reports, `budgets.rs`).
    started_bytes: u64,
    throttled: u64,
    /// Clean demotions to a kept home whose remap record is not durable yet: (fast pool
    /// left, volume, record sequence). Few at once (the tick waits for them).
    remaps: Vec<(PoolId, u32, u64)>,
}

impl TierMoves {
    pub(crate) fn new(pools: usize) -> TierMoves {
        TierMoves {
            timer_at: None,
            bucket: TokenBucket::default(),
            rr: 0,
            in_flight: 0,
            demoting: vec![0; pools],
            started_bytes: 0,
            throttled: 0,
            remaps: Vec::new(),
        }
    }

    /// Earn the bandwidth since the last refill (a burst of a quarter second, at least
    /// two chunks).
    pub(crate) fn refill(&mut self, now_ns: u64, t: &TieringConfig, chunk_bytes: u64) {
        let burst = (t.bytes_per_s / 4).max(chunk_bytes * 2);
        self.bucket.refill(now_ns, t.bytes_per_s, burst);
    }

    /// Whether a move of `bytes` may start now: under the cap and within the bucket.
    pub(crate) fn may_start(&self, max_moves: u32, bytes: u64) -> bool {
        self.in_flight < max_moves && self.bucket.tokens() >= bytes
    }

    /// Whether any bandwidth is left now.
    pub(crate) fn has_tokens(&self) -> bool {
        self.bucket.tokens() > 0
    }

    /// The volume (of `n`) to consider next, round robin so none monopolises the budget.
    pub(crate) fn next_volume(&mut self, n: usize) -> usize {
        let v = self.rr % n.max(1);
        self.rr += 1;
        v
    }

    /// A move of `bytes` started; `demotion_from`: the fast pool it leaves, if a demotion.
    pub(crate) fn started(&mut self, bytes: u64, demotion_from: Option<PoolId>) {
        self.in_flight += 1;
        if let Some(p) = demotion_from {
            self.demoting[p.0 as usize] += 1;
        }
        self.bucket.take(bytes);
        self.started_bytes += bytes;
    }

    /// A tier tick ended with work left that the budget did not let start.
    pub(crate) fn note_throttled(&mut self) {
        self.throttled += 1;
    }

    pub(crate) fn started_bytes(&self) -> u64 {
        self.started_bytes
    }

    pub(crate) fn throttled(&self) -> u64 {
        self.throttled
    }

    /// A move ended (done or failed); `demotion_from` as when it started.
    pub(crate) fn ended(&mut self, demotion_from: Option<PoolId>) {
        self.in_flight -= 1;
        if let Some(p) = demotion_from {
            self.demoting[p.0 as usize] -= 1;
        }
    }

    pub(crate) fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// Demotions in flight out of pool `p`.
    pub(crate) fn demoting(&self, p: PoolId) -> u32 {
        self.demoting[p.0 as usize]
    }

    /// A clean demotion remapped a chunk off fast pool `p` by record `seq` of volume `v`.
    pub(crate) fn remapped(&mut self, p: PoolId, v: u32, seq: u64) {
        self.remaps.push((p, v, seq));
    }

    /// Forget the remaps whose record is `durable`.
    pub(crate) fn forget_remaps(&mut self, durable: impl Fn(u32, u64) -> bool) {
        self.remaps.retain(|&(_, v, seq)| !durable(v, seq));
    }

    /// Whether a remap off pool `p` waits for its record.
    pub(crate) fn remapping(&self, p: PoolId) -> bool {
        self.remaps.iter().any(|&(q, _, _)| q == p)
    }

    /// Every pool's demotions in flight (for the invariants).
    pub(crate) fn demoting_by_pool(&self) -> &[u32] {
        &self.demoting
    }
}
