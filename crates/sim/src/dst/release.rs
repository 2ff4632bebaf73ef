//! Space freed in bulk (issue 18's give-back): in the tight sharded seeds, now and then a
//! volume trims its whole address space, as a VM that deletes most of its files, so a
//! shard that borrowed space holds wholly free borrowed runs and gives them back
//! (`engine::give_back`) while requests, crashes and faults go on. Drawn on their own
//! stream, so other seeds replay as before; `TIERVISOR_DST_NO_RELEASE=1` leaves them out.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use super::device::below;

pub(super) struct ReleaseDraws {
    rng: Xoshiro256PlusPlus,
    pub releases: u64,
}

impl ReleaseDraws {
    /// The tight sharded seeds.
    pub fn draw(seed: u64, tight: bool) -> Option<ReleaseDraws> {
        let on = std::env::var_os("TIERVISOR_DST_NO_RELEASE").is_none();
        (tight && on).then(|| ReleaseDraws {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x2e1e_u64.rotate_left(33)),
            releases: 0,
        })
    }

    /// One step in 300: the volume (of `volumes`) to trim whole.
    pub fn volume(&mut self, volumes: usize) -> Option<usize> {
        if volumes == 0 || below(&mut self.rng, 300) != 0 {
            return None;
        }
        self.releases += 1;
        Some(below(&mut self.rng, volumes as u64) as usize)
    }
}
