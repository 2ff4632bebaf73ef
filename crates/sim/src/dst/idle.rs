//! Quiet spells (issue 17): in the seeds with a `cache` volume, now and then no request
//! is submitted for a while of virtual time, so a cache's idle cleaning (smq writes
//! everything back after 1 s without a request, bcache after 30 s:
//! `crates/engine/src/cache_writeback.rs`) runs amid the rest: its writebacks are still in
//! flight when requests resume, crashes and device errors land on them. Drawn on their own
//! stream, so seeds without a `cache` volume replay as before; `TIERVISOR_DST_NO_IDLE=1`
//! leaves them out.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use super::device::below;

pub(super) struct IdleDraws {
    rng: Xoshiro256PlusPlus,
    pub spells: u64,
}

impl IdleDraws {
    /// The seeds with a `cache` volume.
    pub fn draw(seed: u64, caching: bool) -> Option<IdleDraws> {
        let on = std::env::var_os("TIERVISOR_DST_NO_IDLE").is_none();
        (caching && on).then(|| IdleDraws {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x1d1e_u64.rotate_left(29)),
            spells: 0,
        })
    }

    /// One step in 500: a quiet spell, its length in ns: past smq's idle second (most
    /// spells) or past bcache's 30 s.
    pub fn spell_ns(&mut self) -> Option<u64> {
        if below(&mut self.rng, 500) != 0 {
            return None;
        }
        self.spells += 1;
        Some(if below(&mut self.rng, 4) == 0 {
            31_000_000_000
        } else {
            1_000_000_000 + below(&mut self.rng, 1_000_000_000)
        })
    }
}
