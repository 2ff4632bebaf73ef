//! Volumes grown and shrunk while the engine runs (`Control::ResizeVolume`), drawn in the
//! seeds that create volumes (`create.rs`), on their own stream (so those seeds' creations
//! draw as before, and the seeds that do not create replay as before;
//! `TIERVISOR_DST_NO_RESIZE=1` leaves resizes out, `TIERVISOR_DST_NO_CREATE=1` both). The
//! runner resizes the reference disk only when the engine announces the new size
//! (`EngineEvent::VolumeResized`), checks after every recovery that each volume has the
//! size announced before the crash (or, for a resize the crash interrupted, the old size
//! or the new one), and reads the grown end like the rest. A third of the draws shrink: the
//! runner trims the tail (one or two chunks) and then asks, now and then, until the engine
//! takes the shrink or refuses it for good (other requests may write the tail again
//! meanwhile); while a shrink is under way, requests stay below its new end. Refusals
//! (thick volumes, a migrating volume, one resize at a time, no checkpoint room, data or
//! requests in the tail) are part of the test.

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use super::device::{below, count_down};

pub(super) struct ResizeDraws {
    rng: Xoshiro256PlusPlus,
    /// Asked for and not yet announced: (volume index, old size, new size), in bytes.
    pending: Option<(usize, u64, u64)>,
    /// A shrink whose tail was trimmed, not yet taken: (volume, new size, refusals).
    shrink_wanted: Option<(usize, u64, u32)>,
    pub resized: u64,
    pub shrunk: u64,
    /// Steps until a power loss aimed at a shrink's window (its checkpoint, then its table
    /// write), drawn for half the shrinks taken.
    crash_in: Option<u64>,
}

/// What the runner should do.
pub(super) enum Draw {
    /// Ask for volume `v` to become this many bytes.
    Resize(usize, u64),
    /// Trim volume `v` from the first byte to the second (the tail a shrink will cut).
    Trim(usize, u64, u64),
}

/// Shrink requests refused as busy before the shrink is given up.
const SHRINK_TRIES: u32 = 64;

impl ResizeDraws {
    /// Volumes were dropped at a mount: `to` gives each index its new one (`None`: the
    /// volume is gone, and so is what was asked of it).
    pub fn remap(&mut self, to: impl Fn(usize) -> Option<usize>) {
        self.pending = self.pending.and_then(|(v, a, b)| Some((to(v)?, a, b)));
        self.shrink_wanted = self
            .shrink_wanted
            .and_then(|(v, a, b)| Some((to(v)?, a, b)));
    }

    /// The seeds that grow volumes: those that create them.
    pub fn draw(seed: u64, creating: bool) -> Option<ResizeDraws> {
        let on = std::env::var_os("TIERVISOR_DST_NO_RESIZE").is_none();
        (creating && on).then(|| ResizeDraws {
            rng: Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x5e5e_u64.rotate_left(37)),
            pending: None,
            shrink_wanted: None,
            resized: 0,
            shrunk: 0,
            crash_in: None,
        })
    }

    /// Now and then, a volume to grow (of `sizes`, in bytes) by 128 KiB to 2 MiB, or to
    /// shrink by one or two chunks of `chunk_bytes` (first its tail is trimmed). Only
    /// volumes `created` at run time shrink: a configured volume's configured size grows it
    /// back at the next mount, as documented.
    pub fn maybe(&mut self, sizes: &[u64], chunk_bytes: u64, created: &[bool]) -> Option<Draw> {
        if self.pending.is_some() {
            return None;
        }
        if let Some((v, new, _)) = self.shrink_wanted {
            if v >= sizes.len() {
                self.shrink_wanted = None;
                return None;
            }
            return (below(&mut self.rng, 8) == 0).then_some(Draw::Resize(v, new));
        }
        if below(&mut self.rng, 1000) >= 2 || sizes.is_empty() {
            return None;
        }
        let v = below(&mut self.rng, sizes.len() as u64) as usize;
        if below(&mut self.rng, 3) == 0
            && created.get(v) == Some(&true)
            && sizes[v] >= 4 * chunk_bytes
        {
            let cut = (1 + below(&mut self.rng, 2)) * chunk_bytes;
            let new = (sizes[v] - cut) / chunk_bytes * chunk_bytes;
            self.shrink_wanted = Some((v, new, 0));
            return Some(Draw::Trim(v, new, sizes[v]));
        }
        Some(Draw::Resize(
            v,
            sizes[v] + (1 + below(&mut self.rng, 16)) * (128 << 10),
        ))
    }

    /// The engine answered a request to resize to `new`: taken, busy (ask again later),
    /// or refused for good.
    pub fn answered(&mut self, v: usize, old: u64, new: u64, taken: bool, busy: bool) {
        if taken {
            self.pending = Some((v, old, new));
            self.shrink_wanted = None;
            if new < old && below(&mut self.rng, 2) == 0 {
                self.crash_in = Some(below(&mut self.rng, 8));
            }
            return;
        }
        if let Some((sv, _, tries)) = self.shrink_wanted.as_mut()
            && *sv == v
        {
            *tries += 1;
            if !busy || *tries >= SHRINK_TRIES {
                self.shrink_wanted = None;
            }
        }
    }

    /// Whether the power should fail now (a step of the run passed).
    pub fn crash_now(&mut self) -> bool {
        count_down(&mut self.crash_in)
    }

    /// The size requests to volume `v` must stay within: a shrink under way serves its
    /// new size already, before it is announced.
    pub fn serving_bytes(&self, v: usize, size: u64) -> u64 {
        match self.pending {
            Some((pv, _, new)) if pv == v => size.min(new),
            _ => size,
        }
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

    /// A shrink was announced (counted apart from growths).
    pub fn count_shrink(&mut self) {
        self.shrunk += 1;
    }

    /// A crash: the resize under way (if any) may or may not have been recorded.
    pub fn interrupted(&mut self) -> Option<(usize, u64, u64)> {
        self.pending.take()
    }
}
