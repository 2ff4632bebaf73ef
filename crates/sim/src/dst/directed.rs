//! Directed tier moves (issue 17): in the tiered seeds, half the pinned volumes get a fast
//! pool, and now and then DST asks the engine to move one of their chunks to the fast
//! pool or back home through `Engine::move_chunk`, the entry point the dynamic oracle
//! (`crates/sim/src/oracle_dynamic.rs`) drives. The moves go through the same copy, map
//! switch and journal record as `hot`'s (or, with `[tiering] keep_home`, the kept-home
//! fill and remap, `engine/src/tier_home.rs`), amid writes, trims, crashes and faults.
//! Drawn on their own stream, so seeds without such a volume replay as before.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use super::device::below;

pub(super) struct DirectedDraws {
    rng: Xoshiro256PlusPlus,
    /// Moves the engine started.
    pub started: u64,
}

/// Whether a pinned volume of a tiered seed gets a fast pool (its own stream per seed).
pub(super) fn pinned_gets_fast_pool(rng: &mut Xoshiro256PlusPlus) -> bool {
    below(rng, 2) == 0
}

/// The stream `pinned_gets_fast_pool` draws from.
pub(super) fn config_rng(seed: u64) -> Xoshiro256PlusPlus {
    Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xd1ec_u64.rotate_left(44))
}

impl DirectedDraws {
    /// The seeds with a pinned volume that has a fast pool.
    pub fn draw(seed: u64, directed: bool) -> Option<DirectedDraws> {
        directed.then(|| DirectedDraws {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xd1ec7_u64.rotate_left(20)),
            started: 0,
        })
    }

    /// One step in 40: a move of (volume, chunk, to the fast pool) among `volumes`
    /// (index, chunks).
    pub fn pick(&mut self, volumes: &[(u32, u64)]) -> Option<(u32, u64, bool)> {
        if volumes.is_empty() || below(&mut self.rng, 40) != 0 {
            return None;
        }
        let (v, chunks) = volumes[below(&mut self.rng, volumes.len() as u64) as usize];
        let c = below(&mut self.rng, chunks.max(1));
        Some((v, c, below(&mut self.rng, 2) == 0))
    }
}
