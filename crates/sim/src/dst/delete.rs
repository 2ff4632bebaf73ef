//! Volumes deleted while the engine runs (`Control::DeleteVolume`), drawn in the seeds that
//! create volumes (`create.rs`) and run one shard, on their own stream (so every other draw
//! of those seeds is as before; `TIERVISOR_DST_NO_DELETE=1` leaves deletions out,
//! `TIERVISOR_DST_NO_CREATE=1` too). Half the deletions take the volume with the highest
//! index, the other half any live one (drawn on a second stream), configured or created at
//! run time, so the volumes after it move down an index at the next mount, which compacts
//! the tombstone away (the runner finds a volume's configuration by name, and data written
//! to it carries a tag that stays with it, not its index). Until that mount its index stays
//! a hollow slot, in the engine and in the runner (its reference is kept and no request,
//! resize or verification is sent to it); at the mount the runner drops the hollow slots
//! from every per-volume table as the engine does, and checks that no deleted name came
//! back. No volume is created between a deletion and the next mount. Requests drawn for
//! the volume being deleted are not sent (the engine refuses them); the reference forgets
//! the volume at the mount after the engine announced it deleted
//! (`EngineEvent::VolumeDeleted`), and after every recovery the volume must be gone if
//! that was announced, and whole or gone if a crash interrupted it. A third of the
//! deletions get a power loss a few steps after they start, to land in the window where
//! the tombstone is being written.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use super::device::{below, count_down};

pub(super) struct DeleteDraws {
    rng: Xoshiro256PlusPlus,
    /// Asked for and not yet announced: the volume's index and name.
    pending: Option<(usize, String)>,
    /// Deleted volumes announced since the last mount (index, name): hollow slots until
    /// the next mount compacts them away; no creation until then.
    hollow: Vec<(usize, String)>,
    /// Which volume to delete, when there is a choice: its own stream, so the seeds
    /// that never have two created volumes draw exactly as before it existed.
    pick: Xoshiro256PlusPlus,
    /// Steps until a power loss aimed at the deletion's window (its tombstone in flight,
    /// its space being given back), drawn for a third of the deletions.
    crash_in: Option<u64>,
    pub deleted: u64,
}

impl DeleteDraws {
    /// The seeds that delete volumes: those that create them, with one shard.
    pub fn draw(seed: u64, creating: bool, shards: u16) -> Option<DeleteDraws> {
        let on = std::env::var_os("TIERVISOR_DST_NO_DELETE").is_none();
        (creating && shards == 1 && on).then(|| DeleteDraws {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xde1e_u64.rotate_left(29)),
            pending: None,
            hollow: Vec::new(),
            pick: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xd31e_u64.rotate_left(17)),
            crash_in: None,
            deleted: 0,
        })
    }

    /// Now and then, the volume to delete, of `volumes` slots (hollow ones included):
    /// the last live one, or half the time any live one. One always stays.
    pub fn maybe(&mut self, volumes: usize) -> Option<usize> {
        let live: Vec<usize> = (0..volumes).filter(|v| !self.is_hollow(*v)).collect();
        if below(&mut self.rng, 1000) >= 2 || self.pending.is_some() || live.len() < 2 {
            return None;
        }
        if below(&mut self.pick, 2) == 0 {
            return Some(live[below(&mut self.pick, live.len() as u64) as usize]);
        }
        live.last().copied()
    }

    fn is_hollow(&self, v: usize) -> bool {
        self.hollow.iter().any(|(h, _)| *h == v)
    }

    /// The engine took the command.
    pub fn started(&mut self, v: usize, name: String) {
        self.pending = Some((v, name));
        if below(&mut self.rng, 3) == 0 {
            self.crash_in = Some(below(&mut self.rng, 12));
        }
    }

    /// Whether the power should fail now (a step of the run passed).
    pub fn crash_now(&mut self) -> bool {
        count_down(&mut self.crash_in)
    }

    /// Whether volume `v` is being deleted or is a hollow slot (nothing is sent to it).
    pub fn refuses(&self, v: usize) -> bool {
        self.pending.as_ref().is_some_and(|(p, _)| *p == v) || self.is_hollow(v)
    }

    /// Whether a deletion was asked for and not yet announced.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Whether a creation now would take an index a mount would move.
    pub fn blocks_creation(&self) -> bool {
        !self.hollow.is_empty() || self.pending.is_some()
    }

    /// The engine announced volume `name` deleted: its index, if it is the one asked for.
    pub fn announced(&mut self, name: &str) -> Option<usize> {
        let (v, _) = self.pending.take_if(|(_, n)| n == name)?;
        self.deleted += 1;
        self.hollow.push((v, name.to_string()));
        Some(v)
    }

    /// A crash: the deletion under way (if any) may or may not have been recorded.
    pub fn interrupted(&mut self) -> Option<(usize, String)> {
        self.crash_in = None;
        self.pending.take()
    }

    /// Mounted: the hollow slots are gone (returned, to be dropped from the reference),
    /// creations may go on.
    pub fn mounted(&mut self) -> Vec<(usize, String)> {
        std::mem::take(&mut self.hollow)
    }
}
