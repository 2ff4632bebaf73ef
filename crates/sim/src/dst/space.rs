//! Running out of space, as a device fault: in a third of the seeds (chosen from a stream
//! of their own, so the other seeds replay as before; `TIERVISOR_DST_NO_SPACE=1` turns
//! them off) device writes fail with ENOSPC,
//! transiently (1 write in 250) and for lasting spells (every write to one pool, for 20
//! to 800 steps) until space "returns". A failed write may have landed a prefix of its
//! sectors, as a short `pwrite` followed by ENOSPC does.
//!
//! During recovery only in half of those seeds (drawn from a stream of their own, so the
//! space faults of the run itself replay as before), and only once the first format is
//! done (a format's thick volumes fail at once when there is no room for them, by
//! design): a mount waits for space and retries from its timer (`mount/space.rs`).
//! Steps do not advance during recovery, so there a spell (the one under way at the
//! power loss, or, one recovery in three, a new one on any pool) lasts 5 to 100 events.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use super::device::below;

pub struct SpaceFaults {
    rng: Xoshiro256PlusPlus,
    pools: u64,
    /// The pool that is full, and the step at which space returns.
    spell: Option<(u16, u64)>,
    /// After `end`: space is back for good.
    ended: bool,
    /// Whether space also runs out while a mount recovers.
    pub during_recovery: bool,
    /// In recovery: events left before the spell under way ends.
    recovery_events_left: u64,
    pub injected: u64,
    pub spells: u64,
}

impl SpaceFaults {
    /// The space faults of `seed`, if it is one of the seeds that run out of space.
    pub fn draw(seed: u64, pools: usize) -> Option<SpaceFaults> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x0E05_5BAC_u64.rotate_left(29));
        let mut rrng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5EC0_7E55_u64.rotate_left(17));
        (below(&mut rng, 3) == 0).then_some(SpaceFaults {
            rng,
            pools: pools as u64,
            spell: None,
            ended: false,
            during_recovery: below(&mut rrng, 2) == 0,
            recovery_events_left: 0,
            injected: 0,
            spells: 0,
        })
    }

    /// Step `step` of the run: a full spell may end or begin.
    pub fn on_step(&mut self, step: u64) {
        if self.ended {
            return;
        }
        if self.spell.is_some_and(|(_, until)| step >= until) {
            self.spell = None;
        }
        if self.spell.is_none() && below(&mut self.rng, 1500) == 0 {
            let pool = below(&mut self.rng, self.pools) as u16;
            self.spell = Some((pool, step + 20 + below(&mut self.rng, 780)));
            self.spells += 1;
        }
    }

    /// A recovery begins: the spell under way, or one recovery in three a new one, lasts
    /// a number of events (steps stand still meanwhile).
    pub fn begin_recovery(&mut self) {
        if self.ended || !self.during_recovery {
            return;
        }
        if self.spell.is_none() && below(&mut self.rng, 3) == 0 {
            let pool = below(&mut self.rng, self.pools) as u16;
            self.spell = Some((pool, 0));
            self.spells += 1;
        }
        self.recovery_events_left = 5 + below(&mut self.rng, 96);
    }

    /// An event of a recovery happened: the spell may end.
    pub fn on_recovery_event(&mut self) {
        if self.recovery_events_left > 0 {
            self.recovery_events_left -= 1;
            if self.recovery_events_left == 0 {
                self.spell = None;
            }
        }
    }

    /// Whether a write to `pool` completing now fails for space.
    pub fn write_fails(&mut self, pool: u16) -> bool {
        if self.ended {
            return false;
        }
        let fails = self.spell.is_some_and(|(p, _)| p == pool) || below(&mut self.rng, 250) == 0;
        self.injected += fails as u64;
        fails
    }

    /// Whether a pool is full now (a lasting spell is under way).
    pub fn in_spell(&self) -> bool {
        self.spell.is_some()
    }

    /// Space returns for good (the run settles and checks that FLUSH succeeds again).
    pub fn end(&mut self) {
        self.ended = true;
        self.spell = None;
    }
}
