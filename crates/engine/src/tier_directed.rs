//! Tier moves a driver asks for, chunk by chunk: the simulator's dynamic oracle
//! (`placement = "oracle-dynamic"` in scenarios, issue 17) knows the workload in advance
//! and decides what moves; the engine carries the moves out exactly as it does `hot`'s
//! (the same copy, map switch and journal record, the same `[tiering]` token bucket and
//! cap on moves in flight), so the oracle pays what any policy pays for its moves.
//!
//! Only pinned volumes with a fast pool take directed moves: a `hot` or `cache` volume's
//! policy owns its chunks' placement and its own counts of them.

use crate::config::Placement;
use crate::engine::{Engine, EngineState};
use crate::types::{Outputs, PoolId, VolumeId};

impl Engine {
    /// Whether a chunk move may start now under the `[tiering]` budget (the token bucket
    /// of `bytes_per_s`, refilled to `now`, and `max_moves` in flight).
    pub fn tier_move_allowed(&mut self, now: u64) -> bool {
        self.refill_tier_bucket(now);
        self.tier
            .may_start(self.cfg.tiering.max_moves, self.cfg.chunk_bytes)
    }

    /// Start moving chunk `c` of pinned volume `v` to pool `to` (its home or its fast
    /// pool) through the tier-migration path. `Ok(false)`: not now (over the budget, the
    /// chunk busy or already moving, already on `to`, unmapped, or no free chunk on
    /// `to`). `Err`: the request makes no sense (no such volume or chunk, a pool that is
    /// neither the volume's home nor its fast pool, or a volume whose placement policy
    /// moves its chunks itself).
    pub fn move_chunk(
        &mut self,
        now: u64,
        v: VolumeId,
        c: u64,
        to: PoolId,
        out: &mut Outputs,
    ) -> Result<bool, String> {
        let vi = v.0 as usize;
        let vol = (self.vols.get(vi))
            .filter(|vol| !vol.rec.deleted)
            .ok_or("no such volume")?;
        if vol.rec.placement != Placement::Pinned {
            return Err(format!(
                "volume {}: its {} placement moves its chunks itself",
                vol.rec.name,
                vol.rec.placement.name()
            ));
        }
        let Some(fast) = vol.rec.fast_pool else {
            return Err(format!("volume {}: no fast pool", vol.rec.name));
        };
        if to != fast && to != vol.rec.home_pool {
            return Err(format!(
                "volume {}: pool {} is neither its home nor its fast pool",
                vol.rec.name, to.0
            ));
        }
        if c >= vol.chunks {
            return Err(format!(
                "volume {}: chunk {c} is past its end ({} chunks)",
                vol.rec.name, vol.chunks
            ));
        }
        if self.state != EngineState::Ready || !self.tier_move_allowed(now) {
            return Ok(false);
        }
        Ok(self.start_move(now, vi, c, to, out))
    }
}
