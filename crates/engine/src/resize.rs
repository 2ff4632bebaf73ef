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
//! Shrinking is allowed only where nothing is cut: every chunk holding a byte at or past
//! the new end must be unmapped (trimmed), with nothing in flight or buffered there. The
//! volume shrinks in memory at once (requests past the new end are refused from then
//! on), then a checkpoint of the smaller map is written, and only once it is durable does
//! the table take the new size: journal records from before the shrink may name the cut
//! chunks, and no mount may replay them against the smaller table. Until then the table
//! keeps the old size (`Resizes::record_for`), so a crash leaves the old size (with the
//! tail unmapped, or as the unflushed trims left it) or the new one. Thick volumes cannot
//! grow or shrink: their home region is one contiguous run reserved at creation.

pub(crate) mod state;

use crate::config::Provisioning;
use crate::control::ControlError;
use crate::engine::{Engine, EngineState};
use crate::types::{EngineEvent, Outputs, VolumeId};
pub use state::MAX_VOLUME_BYTES;
pub(crate) use state::{Resize, Shrink};

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
        if size_bytes == old {
            return Err(ControlError::Invalid(format!(
                "volume {name} is already {old} bytes"
            )));
        }
        if vol.rec.provisioning == Provisioning::Thick {
            return Err(ControlError::Unsupported(format!(
                "volume {name} is thick: its home region is one contiguous run reserved at \
                 creation and cannot grow or shrink in place"
            )));
        }
        if self.migrations.jobs.contains_key(&volume.0) {
            return Err(ControlError::Busy(format!(
                "volume {name} is migrating; resize it once the migration is done or cancelled"
            )));
        }
        if size_bytes < old {
            return self.try_shrink_volume(now, v, size_bytes, out);
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
        let Some(entry) = sizes.get_mut(self.reserve_position(v)) else {
            return Err(ControlError::UnknownVolume(volume));
        };
        entry.0 = size_bytes;
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
            shrink: None,
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

    /// Shrink thin volume `v` to `size_bytes` if nothing at or past the new end is mapped,
    /// in flight or buffered (see the module comment for the order of what is durable).
    fn try_shrink_volume(
        &mut self,
        now: u64,
        v: usize,
        size_bytes: u64,
        out: &mut Outputs,
    ) -> Result<(), ControlError> {
        let cb = self.cfg.chunk_bytes;
        let vol = &self.vols[v];
        let name = vol.rec.name.clone();
        let old = vol.rec.size_bytes;
        let logs = (0..self.pools.len())
            .any(|p| self.log_enabled(v as u32, crate::types::PoolId(p as u16)));
        if logs {
            return Err(ControlError::Unsupported(format!(
                "volume {name} uses the log-structured write path, whose data past the new end \
                 may lie in log segments: shrinking it is not supported"
            )));
        }
        // The first chunk holding a byte at or past the new end.
        let first = size_bytes / cb;
        let mapped_last = (0..vol.chunks)
            .rev()
            .find(|&c| vol.map.get(c) != crate::chunkmap::ChunkLoc::Unmapped);
        let overlay_end = vol.overlay.iter().map(|(_, e, _)| e).max().unwrap_or(0);
        let written_end = mapped_last
            .map_or(0, |c| ((c + 1) * cb).min(old))
            .max(overlay_end);
        if written_end > first * cb {
            return Err(ControlError::Invalid(format!(
                "volume {name}: data lies past the new end ({size_bytes} bytes): written \
                 chunks end at byte {written_end}; trim from byte {} to the end first (e.g. \
                 blkdiscard -o {} in the guest), or shrink to at least {written_end} bytes",
                first * cb,
                first * cb
            )));
        }
        let tail = first * cb;
        let busy = vol.activity.keys().any(|&c| c >= first)
            || (self.reqs.iter())
                .any(|(_, r)| r.vol == v as u32 && r.offset_bytes + r.len_bytes > tail)
            || self.pools.iter().any(|p| p.wbuf.volume_bytes(v as u32) > 0);
        if busy {
            return Err(ControlError::Busy(format!(
                "volume {name} has requests in flight or writes buffered; FLUSH it (sync in the \
                 guest) and try again"
            )));
        }
        let checkpoint_in_flight = matches!(
            &vol.commit,
            Some(c) if matches!(c.work, crate::volume::CommitWork::Checkpoint { .. })
        );
        let checkpoints_needed = vol.stats.checkpoints + 1 + u64::from(checkpoint_in_flight);
        let vol = &mut self.vols[v];
        vol.shrink(size_bytes, cb);
        vol.checkpoint_wanted = true;
        let table_first = self.bug_is(crate::inject::InjectedBug::ShrinkTableFirst);
        self.resizes.current = Some(Resize {
            volume: v,
            new_size_bytes: size_bytes,
            shrink: Some(Shrink {
                old_size_bytes: old,
                checkpoints_needed,
                recording: table_first,
            }),
        });
        if table_first {
            self.write_volume_table(now, out);
        }
        self.kick_commit(now, v as u32, out);
        Ok(())
    }

    /// A commit round of volume `v` ended: once a checkpoint of a shrunk volume's smaller
    /// map is durable, the table may say the new size.
    pub(crate) fn shrink_checkpointed(&mut self, now: u64, v: u32, out: &mut Outputs) {
        let checkpoints = self.vols[v as usize].stats.checkpoints;
        let Some(r) = self.resizes.current.as_mut() else {
            return;
        };
        match r.shrink.as_mut() {
            Some(s) if r.volume == v as usize && !s.recording => {
                if checkpoints < s.checkpoints_needed {
                    return;
                }
                s.recording = true;
            }
            _ => return,
        }
        self.write_volume_table(now, out);
    }

    /// A volume table became durable: grow the volume it resized (a shrunk one is
    /// already small in memory; now the table says so too).
    pub(crate) fn resize_table_durable(&mut self, out: &mut Outputs) {
        let Some((v, size_bytes)) = self.resizes.in_progress() else {
            return;
        };
        if self.voltab.volumes().get(v).map(|r| r.size_bytes) != Some(size_bytes) {
            return;
        }
        self.resizes.current = None;
        let cb = self.cfg.chunk_bytes;
        let vol = &mut self.vols[v];
        vol.grow(size_bytes, cb);
        // A shrunk volume's checkpoints need less room.
        let (_, reserve) = self.checkpoint_reserve(&self.reserve_inputs());
        let meta = self.cfg.meta_pool.0 as usize;
        self.pools[meta].alloc.set_reserve(reserve);
        let vol = &mut self.vols[v];
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
