//! Volumes deleted while the engine runs (`Control::DeleteVolume`), drawn in the seeds that
//! create volumes (`create.rs`) and run one shard, on their own stream (so every other draw
//! of those seeds is as before; `TIERVISOR_DST_NO_DELETE=1` leaves deletions out,
//! `TIERVISOR_DST_NO_CREATE=1` too). Only the volume with the highest index is deleted, so
//! every other volume keeps its index across the mount that compacts the tombstone away,
//! and no volume is created between a deletion and the next mount (it would take the index
//! after the hollow slot, then move down). Requests drawn for the volume being deleted are
//! not sent (the engine refuses them); the reference forgets the volume when the engine
//! announces it deleted (`EngineEvent::VolumeDeleted`), and after every recovery the
//! volume must be gone if that was announced, and whole or gone if a crash interrupted it.
//! A third of the deletions get a power loss a few steps after they start, to land in the
//! window where the tombstone is being written.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use super::device::{below, count_down};

pub(super) struct DeleteDraws {
    rng: Xoshiro256PlusPlus,
    /// Asked for and not yet announced: the volume's index and name.
    pending: Option<(usize, String)>,
    /// A deletion was announced since the last mount: no creation until the next.
    announced_since_mount: bool,
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
            announced_since_mount: false,
            crash_in: None,
            deleted: 0,
        })
    }

    /// Now and then, the volume to delete: the last of `volumes` (one always stays).
    pub fn maybe(&mut self, volumes: usize) -> Option<usize> {
        if below(&mut self.rng, 1000) >= 2 || self.pending.is_some() || volumes < 2 {
            return None;
        }
        Some(volumes - 1)
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

    /// Whether volume `v` is being deleted (requests to it are not sent).
    pub fn refuses(&self, v: usize) -> bool {
        self.pending.as_ref().is_some_and(|(p, _)| *p == v)
    }

    /// Whether a deletion was asked for and not yet announced.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Whether a creation now would take an index a mount would move.
    pub fn blocks_creation(&self) -> bool {
        self.announced_since_mount || self.pending.is_some()
    }

    /// The engine announced volume `name` deleted: its index, if it is the one asked for.
    pub fn announced(&mut self, name: &str) -> Option<usize> {
        let (v, _) = self.pending.take_if(|(_, n)| n == name)?;
        self.deleted += 1;
        self.announced_since_mount = true;
        Some(v)
    }

    /// A crash: the deletion under way (if any) may or may not have been recorded.
    pub fn interrupted(&mut self) -> Option<(usize, String)> {
        self.crash_in = None;
        self.pending.take()
    }

    /// Mounted: the hollow slots are gone, creations may go on.
    pub fn mounted(&mut self) {
        self.announced_since_mount = false;
    }
}
