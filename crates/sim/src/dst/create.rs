//! Volumes created while the engine runs (`Control::CreateVolume`), drawn in half the
//! seeds that do not use the log-structured write path and a quarter of those that also
//! migrate, on their own stream (so the other seeds replay as before; `TIERVISOR_DST_NO_CREATE=1` leaves
//! them out). Log seeds stay as they were because the cleaner's bandwidth cap shows in
//! only a couple of them, which any change of workload moves; a volume created on a log
//! pool is checked by `crates/engine/tests/create.rs` instead. In migrating seeds a job
//! may start on a volume whose first writes are still allocating its chunks (DST seed 91
//! found an LR pivot that switched to a chunk never copied; docs/TESTING.md). The runner
//! checks that an announced
//! volume (`EngineEvent::VolumeCreated`) survives every later crash and reads as zeros
//! until written, and that a creation a crash interrupted leaves the volume whole (and
//! zeroed) or absent.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use tiervisor_engine::{Placement, PoolId, Provisioning, VolumeConfig};

use super::device::below;

/// At most this many volumes in all, so a seed keeps its workload spread.
const MAX_VOLUMES: usize = 6;

pub(super) struct CreateDraws {
    rng: Xoshiro256PlusPlus,
    /// Asked for and not yet announced: (name, size in bytes).
    pending: Option<(String, u64)>,
    next: u32,
    pub created: u64,
}

impl CreateDraws {
    /// The seeds that create volumes (`logged`: the seed's system uses the log;
    /// `migrating`: it runs migrations, where a quarter of the seeds create, not half, to
    /// keep the CI step's time: every volume is read end to end after each recovery).
    pub fn draw(seed: u64, logged: bool, migrating: bool) -> Option<CreateDraws> {
        if logged || std::env::var_os("TIERVISOR_DST_NO_CREATE").is_some() {
            return None;
        }
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xc4ea_u64.rotate_left(44));
        let share = if migrating { 4 } else { 2 };
        (below(&mut rng, share) == 0).then_some(CreateDraws {
            rng,
            pending: None,
            next: 0,
            created: 0,
        })
    }

    /// Now and then, a volume to create: a few hundred KiB to a few MiB, thin or thick,
    /// on either pool.
    pub fn maybe(&mut self, volumes: usize, pools: usize) -> Option<VolumeConfig> {
        if below(&mut self.rng, 1000) >= 3 || self.pending.is_some() || volumes >= MAX_VOLUMES {
            return None;
        }
        let name = format!("new{}", self.next);
        self.next += 1;
        Some(VolumeConfig {
            name,
            size_bytes: (1 + below(&mut self.rng, 32)) * (128 << 10),
            home_pool: PoolId(below(&mut self.rng, pools as u64) as u16),
            fast_pool: None,
            provisioning: if below(&mut self.rng, 2) == 0 {
                Provisioning::Thick
            } else {
                Provisioning::Thin
            },
            placement: Placement::Pinned,
            log: None,
            qos: Default::default(),
        })
    }

    /// Whether a creation was asked for and not yet announced.
    pub fn pending(&self) -> bool {
        self.pending.is_some()
    }

    /// The engine took the command.
    pub fn started(&mut self, vc: &VolumeConfig) {
        self.pending = Some((vc.name.clone(), vc.size_bytes));
    }

    /// The engine announced `name`: its size, if it is the one asked for.
    pub fn announced(&mut self, name: &str) -> Option<u64> {
        let (n, size) = self.pending.take_if(|(n, _)| n == name)?;
        debug_assert_eq!(n, name);
        self.created += 1;
        Some(size)
    }

    /// A crash: the creation under way (if any) may or may not have been recorded.
    pub fn interrupted(&mut self) -> Option<(String, u64)> {
        self.pending.take()
    }
}
