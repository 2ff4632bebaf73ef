//! Growing a thin volume while the engine runs (`Control::ResizeVolume`, `tiervisor ctl
//! volume resize`).
//!
//! The size is durable state of the volume table, so a resize is one table write: the
//! table is written with the new size while the volume keeps serving at its old size
//! (requests past the old end are still refused), and only once that table is durable
//! does the volume grow in memory (its mapping table, monitor and log bound) and
//! `EngineEvent::VolumeResized` announce it. A crash before that leaves the old size, a
//! crash after it the new one, never a volume that accepted writes a crash could put
//! beyond its end. The new chunks are unmapped: they read as zeros and cost nothing until
//! written. A checkpoint written before the growth holds fewer chunks than the table
//! names; mount reads the missing ones as unmapped (`journal::checkpoint::decode_state`).
//!
//! Shrinking is refused: journal records written before it could name chunks past the new
//! end, so it would need a checkpoint first (not done). Thick volumes cannot grow either:
//! their home region is one contiguous run reserved at creation.

use crate::config::Provisioning;
use crate::control::ControlError;
use crate::engine::{Engine, EngineState};
use crate::layout::VolumeRecord;
use crate::types::{EngineEvent, Outputs, VolumeId};

/// The largest size a volume may grow to (1 PiB: 16 GiB of tables at 1 MiB chunks).
pub const MAX_VOLUME_BYTES: u64 = 1 << 50;

/// The resize under way, if any (one at a time, like creations).
#[derive(Default)]
pub(crate) struct Resizes {
    current: Option<Resize>,
}

struct Resize {
    volume: usize,
    new_size_bytes: u64,
}

impl Resizes {
    /// The volume being resized and its new size, if any.
    pub(crate) fn in_progress(&self) -> Option<(usize, u64)> {
        self.current.as_ref().map(|r| (r.volume, r.new_size_bytes))
    }

    /// The record the volume table should hold for volume `v`: its new size while a
    /// resize of it is being written.
    pub(crate) fn record_for(&self, v: usize, rec: &VolumeRecord) -> VolumeRecord {
        let mut rec = rec.clone();
        if let Some(r) = &self.current
            && r.volume == v
        {
            rec.size_bytes = r.new_size_bytes;
        }
        rec
    }
}

impl Engine {
    /// Start growing a thin volume to `size_bytes`; `EngineEvent::VolumeResized` says when
    /// the new size is durable and served.
    pub(crate) fn try_resize_volume(
        &mut self,
        now: u64,
        volume: VolumeId,
        size_bytes: u64,
        out: &mut Outputs,
    ) -> Result<(), ControlError> {
        if self.state != EngineState::Ready {
            return Err(ControlError::NotReady);
        }
        let v = volume.0 as usize;
        let vol = (self.vols.get(v))
            .filter(|vol| !vol.rec.deleted)
            .ok_or(ControlError::UnknownVolume(volume))?;
        let name = vol.rec.name.clone();
        let old = vol.rec.size_bytes;
        if self.deletes.refuses(v) {
            return Err(ControlError::Busy(format!(
                "volume {name} is being deleted"
            )));
        }
        if let Some((other, _)) = self.resizes.in_progress() {
            return Err(ControlError::Busy(format!(
                "volume {} is being resized; try again when it is done",
                self.vols[other].rec.name
            )));
        }
        if size_bytes == 0 || !size_bytes.is_multiple_of(512) {
            return Err(ControlError::Invalid(format!(
                "volume {name}: size {size_bytes} is not a positive multiple of 512 bytes"
            )));
        }
        if size_bytes < old {
            return Err(ControlError::Unsupported(format!(
                "volume {name} is {old} bytes: shrinking is not supported (create a smaller \
                 volume and copy the data)"
            )));
        }
        if size_bytes == old {
            return Err(ControlError::Invalid(format!(
                "volume {name} is already {old} bytes"
            )));
        }
        if vol.rec.provisioning == Provisioning::Thick {
            return Err(ControlError::Unsupported(format!(
                "volume {name} is thick: its home region is one contiguous run reserved at \
                 creation and cannot grow in place"
            )));
        }
        if self.migrations.jobs.contains_key(&volume.0) {
            return Err(ControlError::Busy(format!(
                "volume {name} is migrating; resize it once the migration is done or cancelled"
            )));
        }
        if size_bytes > MAX_VOLUME_BYTES {
            return Err(ControlError::Invalid(format!(
                "volume {name}: {size_bytes} bytes is more than the {MAX_VOLUME_BYTES} a volume \
                 may grow to"
            )));
        }
        // The bigger checkpoint needs its reserve on the metadata pool before anything
        // changes: a volume that could not checkpoint would stall every flush.
        let mut sizes = self.reserve_inputs();
        sizes[v].0 = size_bytes;
        let (_, reserve) = self.checkpoint_reserve(&sizes);
        let meta = self.cfg.meta_pool.0 as usize;
        let free = self.pools[meta].alloc.free_chunks();
        if free < reserve {
            return Err(ControlError::NoSpace {
                pool: self.cfg.pools[meta].name.clone(),
                free_chunks: free,
                needed_chunks: reserve,
            });
        }
        // The RAM for the bigger tables is taken now, so the growth cannot fail later.
        let chunks = size_bytes.div_ceil(self.cfg.chunk_bytes);
        if self.vols[v].reserve_growth(chunks).is_err() {
            return Err(ControlError::Invalid(format!(
                "volume {name}: no memory for the mapping table of {size_bytes} bytes"
            )));
        }
        self.pools[meta].alloc.set_reserve(reserve);
        self.resizes.current = Some(Resize {
            volume: v,
            new_size_bytes: size_bytes,
        });
        self.write_volume_table(now, out);
        if self.bug_is(crate::inject::InjectedBug::ResizeBeforeDurable) {
            self.resizes.current = None;
            self.vols[v].grow(size_bytes, self.cfg.chunk_bytes);
            out.events.push(EngineEvent::VolumeResized {
                volume: name,
                size_bytes,
            });
        }
        Ok(())
    }

    /// A volume table became durable: grow the volume it resized.
    pub(crate) fn resize_table_durable(&mut self, out: &mut Outputs) {
        let Some((v, size_bytes)) = self.resizes.in_progress() else {
            return;
        };
        if self.voltab.volumes.get(v).map(|r| r.size_bytes) != Some(size_bytes) {
            return;
        }
        self.resizes.current = None;
        let cb = self.cfg.chunk_bytes;
        let vol = &mut self.vols[v];
        vol.grow(size_bytes, cb);
        let name = vol.rec.name.clone();
        if let Some(vc) = self.cfg.volumes.iter_mut().find(|c| c.name == name) {
            vc.size_bytes = size_bytes;
        }
        out.events.push(EngineEvent::VolumeResized {
            volume: name,
            size_bytes,
        });
    }
}
