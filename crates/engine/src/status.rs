//! Block status: what a range of a volume holds, answered from the content mapping table
//! and its overlay without touching a device. NBD's `base:allocation` context asks this so
//! clients (qemu-img convert, nbdcopy) skip holes and zeros instead of reading them.
//!
//! The answer is conservative: a range is reported as zero only when a read of it returns
//! zeros for certain (never written, unmapped by a trim, or zeroed in the overlay). Data
//! written and acknowledged is never reported as a hole or as zeros.

use crate::chunkmap::ChunkLoc;
use crate::engine::Engine;
use crate::inject::InjectedBug;
use crate::overlay::Overlay;
use crate::types::{Errno, VolumeId};

/// One run of a block-status answer; runs follow each other from the queried offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusExtent {
    pub length_bytes: u64,
    /// No storage is allocated for the range (a thin volume's unmapped chunk).
    pub hole: bool,
    /// The range reads as zeros.
    pub zero: bool,
}

impl Engine {
    /// The allocation status of `[offset, offset + len_bytes)` of a volume, as at most
    /// `max_extents` runs (the last run may end before the range does; callers ask again
    /// from where it ends). Adjacent runs always differ in their flags.
    pub fn block_status(
        &self,
        volume: VolumeId,
        offset: u64,
        len_bytes: u64,
        max_extents: usize,
    ) -> Result<Vec<StatusExtent>, Errno> {
        let vol = self.vols.get(volume.0 as usize).ok_or(Errno::Inval)?;
        let end = offset.checked_add(len_bytes).ok_or(Errno::Inval)?;
        if len_bytes == 0 || end > vol.rec.size_bytes || max_extents == 0 {
            return Err(Errno::Inval);
        }
        let cb = self.cfg.chunk_bytes;
        let mut runs = Runs {
            out: Vec::new(),
            max: max_extents,
            full: false,
        };
        let mut pos = offset;
        while pos < end && !runs.full() {
            let c = pos / cb;
            let cend = ((c + 1) * cb).min(end);
            let mapped = vol.map.get(c) != ChunkLoc::Unmapped;
            let base = (!mapped, !mapped);
            let mut cur = pos;
            for (s, e, ov) in vol.overlay.overlapping(pos, cend) {
                if s > cur {
                    runs.push(s - cur, base);
                }
                let flags = match ov {
                    // Zeroed inside an allocated chunk still occupies storage.
                    Overlay::Zero => (!mapped, true),
                    Overlay::Log { .. } if self.bug_is(InjectedBug::StatusMissesLog) => {
                        (!mapped, true)
                    }
                    // Data (on the log, or on a migration's destination).
                    Overlay::Log { .. } | Overlay::Moved { .. } => (false, false),
                };
                runs.push(e - s, flags);
                cur = e;
            }
            if cur < cend {
                runs.push(cend - cur, base);
            }
            pos = cend;
        }
        Ok(runs.out)
    }
}

/// Runs under construction: merges equal neighbours and stops at `max` runs.
struct Runs {
    out: Vec<StatusExtent>,
    max: usize,
    /// A run beyond `max` was refused: the answer ends where the last run ends.
    full: bool,
}

impl Runs {
    fn full(&self) -> bool {
        self.full
    }

    fn push(&mut self, length_bytes: u64, (hole, zero): (bool, bool)) {
        if self.full {
            return;
        }
        if let Some(last) = self.out.last_mut()
            && (last.hole, last.zero) == (hole, zero)
        {
            last.length_bytes += length_bytes;
        } else if self.out.len() < self.max {
            self.out.push(StatusExtent {
                length_bytes,
                hole,
                zero,
            });
        } else {
            self.full = true;
        }
    }
}
