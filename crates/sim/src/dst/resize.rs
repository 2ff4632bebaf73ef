//! Volumes grown while the engine runs (`Control::ResizeVolume`), drawn in the seeds that
//! create volumes (`create.rs`), on their own stream (so those seeds' creations draw as
//! before, and the seeds that do not create replay as before; `TIERVISOR_DST_NO_RESIZE=1`
//! leaves resizes out, `TIERVISOR_DST_NO_CREATE=1` both). The runner grows the reference disk only when the engine announces
//! the new size (`EngineEvent::VolumeResized`), checks after every recovery that each
//! volume has the size announced before the crash (or, for a resize the crash
//! interrupted, the old size or the new one), and reads the grown end like the rest.
//! Refusals (thick volumes, a migrating volume, one resize at a time, no checkpoint room)
//! are part of the test.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use super::device::below;

pub(super) struct ResizeDraws {
    rng: Xoshiro256PlusPlus,
    /// Asked for and not yet announced: (volume index, old size, new size), in bytes.
    pending: Option<(usize, u64, u64)>,
    pub resized: u64,
}

impl ResizeDraws {
    /// The seeds that grow volumes: those that create them.
    pub fn draw(seed: u64, creating: bool) -> Option<ResizeDraws> {
        let on = std::env::var_os("TIERVISOR_DST_NO_RESIZE").is_none();
        (creating && on).then(|| ResizeDraws {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5e5e_u64.rotate_left(37)),
            pending: None,
            resized: 0,
        })
    }

    /// Now and then, a volume to grow (of `sizes`, in bytes) and its new size: 128 KiB
    /// to 2 MiB more.
    pub fn maybe(&mut self, sizes: &[u64]) -> Option<(usize, u64)> {
        if below(&mut self.rng, 1000) >= 2 || self.pending.is_some() || sizes.is_empty() {
            return None;
        }
        let v = below(&mut self.rng, sizes.len() as u64) as usize;
        Some((v, sizes[v] + (1 + below(&mut self.rng, 16)) * (128 << 10)))
    }

    /// The engine took the command.
    pub fn started(&mut self, v: usize, old: u64, new: u64) {
        self.pending = Some((v, old, new));
    }

    /// The engine announced that volume `v` is `size` bytes: whether it is the resize
    /// asked for.
    pub fn announced(&mut self, v: usize, size: u64) -> bool {
        if self
            .pending
            .take_if(|&mut (pv, _, new)| pv == v && new == size)
            .is_none()
        {
            return false;
        }
        self.resized += 1;
        true
    }

    /// A crash: the resize under way (if any) may or may not have been recorded.
    pub fn interrupted(&mut self) -> Option<(usize, u64, u64)> {
        self.pending.take()
    }
}
