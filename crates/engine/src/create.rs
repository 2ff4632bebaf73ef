//! Creating a volume while the engine runs (`Control::CreateVolume`, `tiervisor ctl volume
//! create`).
//!
//! Crash safety comes from the order: the volume's journal region (and a thick volume's
//! home region) is taken from the allocators in memory only; its journal header, the
//! empty second header slot and a thick home region's zeros are written; only once those
//! are durable does the volume join `vols` and the volume table get rewritten (FUA, the
//! slot the newest copy is not in). A crash before that table write is durable leaves no
//! trace: the mount rebuilds the allocators from the table, so the reserved chunks are
//! free again. The volume is announced (`EngineEvent::VolumeCreated`) only once the table
//! naming it is durable, so no request can reach a volume a crash could forget.
//!
//! One creation at a time; a failed write gives the chunks back and says why.

pub(crate) mod state;

use bytes::Bytes;

use crate::config::{Provisioning, VolumeConfig};
use crate::control::ControlError;
use crate::devop::{OpSpec, Owner};
use crate::engine::{Engine, EngineState};
use crate::layout::{BLOCK_BYTES, chunk_offset};
use crate::types::{DevKind, EngineEvent, Errno, IoClass, Outputs};
use crate::volume::Volume;
pub(crate) use state::Creation;

impl Engine {
    /// Refusals that need nothing reserved: another create or delete under way, a taken
    /// name, the volume table full.
    fn may_create(&self, vc: &VolumeConfig) -> Result<(), ControlError> {
        if let Some(d) = self.deletes.in_progress() {
            return Err(ControlError::Busy(format!(
                "volume {} is being deleted; try again when it is done",
                self.vols[d].rec.name
            )));
        }
        if let Some(other) = self.creations.in_progress() {
            return Err(ControlError::Busy(format!(
                "volume {other} is being created; try again when it is done"
            )));
        }
        if self
            .vols
            .iter()
            .any(|v| v.rec.name == vc.name && !v.rec.deleted)
        {
            return Err(ControlError::Invalid(format!(
                "a volume named {} exists",
                vc.name
            )));
        }
        // Tombstones keep their entries in the table.
        if self.vols.len() + self.deletes.tombstones.len() >= crate::config::MAX_VOLUMES {
            return Err(ControlError::Invalid(format!(
                "at most {} volumes are supported",
                crate::config::MAX_VOLUMES
            )));
        }
        Ok(())
    }

    /// Start creating a volume; `EngineEvent::VolumeCreated` says when it can be used.
    pub(crate) fn try_create_volume(
        &mut self,
        now: u64,
        vc: VolumeConfig,
        out: &mut Outputs,
    ) -> Result<(), ControlError> {
        if self.state != EngineState::Ready {
            return Err(ControlError::NotReady);
        }
        self.may_create(&vc)?;
        vc.check(self.pools.len()).map_err(ControlError::Invalid)?;
        let id = self
            .vols
            .iter()
            .map(|v| v.rec.id + 1)
            .chain(self.voltab.volumes().iter().map(|r| r.id + 1))
            .max()
            .unwrap_or(0);
        // `volume_from` looks up the configured log override and QoS by name.
        self.cfg.volumes.push(vc.clone());
        let vol = match self.reserve_volume(&vc, id) {
            Ok(v) => v,
            Err(e) => {
                self.cfg.volumes.pop();
                // No room for its journal or thick region: a size or pool to change.
                return Err(ControlError::Invalid(e));
            }
        };
        // Its checkpoints need their reserve on the metadata pool (the configuration's
        // volumes got theirs at mount; this one is in `cfg.volumes` now).
        let (_, reserve) = self.checkpoint_reserve(&self.reserve_inputs());
        let meta = self.cfg.meta_pool.0 as usize;
        let free = self.pools[meta].alloc.free_chunks();
        if free < reserve {
            self.give_back(&vol);
            self.cfg.volumes.pop();
            return Err(ControlError::NoSpace {
                pool: self.cfg.pools[meta].name.clone(),
                free_chunks: free,
                needed_chunks: reserve,
            });
        }
        self.pools[meta].alloc.set_reserve(reserve);
        let mut writes: Vec<(crate::types::PoolId, DevKind, u64, u64, Option<Bytes>)> = vec![
            (
                vol.journal.pool,
                DevKind::Write,
                vol.journal.region_offset,
                BLOCK_BYTES,
                Some(Bytes::from(vol.journal.header.encode())),
            ),
            (
                vol.journal.pool,
                DevKind::Write,
                vol.journal.region_offset + BLOCK_BYTES,
                BLOCK_BYTES,
                Some(Bytes::from(vec![0u8; BLOCK_BYTES as usize])),
            ),
        ];
        // Never-written sectors of a thick volume must read as zeros (timing-only
        // simulation carries no data and skips it), as at mount.
        let mut flush_pool = None;
        if vol.rec.provisioning == Provisioning::Thick && self.cfg.track_data {
            flush_pool = Some(vol.rec.home_pool);
            let cb = self.cfg.chunk_bytes;
            writes.push((
                vol.rec.home_pool,
                DevKind::WriteZeroes,
                chunk_offset(vol.rec.home_base_chunk, cb),
                vol.chunks * cb,
                None,
            ));
        }
        self.creations.current = Some(Creation {
            vc,
            vol: Some(Box::new(vol)),
            outstanding: writes.len() as u32,
            failed: None,
            flush_pool,
        });
        for (pool, kind, off, len, payload) in writes {
            let spec = OpSpec::new(Owner::Create, pool, kind, IoClass::Metadata)
                .at(off, len)
                .fua(kind == DevKind::Write)
                .payload(payload);
            self.queue_op(now, spec, out);
        }
        Ok(())
    }

    /// One of the creation's writes finished.
    pub(crate) fn create_write_done(
        &mut self,
        now: u64,
        result: Result<(), Errno>,
        out: &mut Outputs,
    ) {
        let Some(c) = self.creations.current.as_mut() else {
            return;
        };
        c.outstanding -= 1;
        if let Err(e) = result {
            c.failed.get_or_insert(e);
        }
        if c.outstanding > 0 {
            return;
        }
        if c.failed.is_none()
            && let Some(pool) = c.flush_pool.take()
        {
            c.outstanding = 1;
            let spec = OpSpec::new(Owner::Create, pool, DevKind::Flush, IoClass::Metadata);
            self.queue_op(now, spec, out);
            return;
        }
        let Some(c) = self.creations.current.take() else {
            return;
        };
        let Some(vol) = c.vol else {
            return;
        };
        let failed = c
            .failed
            .or((self.state != EngineState::Ready).then_some(Errno::Shutdown));
        if let Some(e) = failed {
            self.give_back(&vol);
            self.cfg.volumes.retain(|v| v.name != c.vc.name);
            // Its checkpoint reserve goes back too (only the size check can fail, and
            // it passed with the volume counted).
            let _ = self.set_reserves();
            let why = match e {
                Errno::NoSpc => "no space left on the device or the filesystem under it",
                Errno::Shutdown => "the engine is stopping",
                _ => "a device write failed",
            };
            out.events.push(EngineEvent::Warning {
                message: format!(
                    "volume {} could not be created ({why}); nothing of it was kept",
                    c.vc.name
                ),
            });
            return;
        }
        self.vols.push(*vol);
        self.apply_configured_qos(self.vols.len() - 1);
        if self.bug_is(crate::inject::InjectedBug::CreateSkipsTable) {
            out.events
                .push(EngineEvent::VolumeCreated { volume: c.vc.name });
            return;
        }
        self.creations.recording = Some(c.vc.name);
        self.write_volume_table(now, out);
    }

    /// The reserved chunks of a creation that failed go back to the allocators.
    fn give_back(&mut self, vol: &Volume) {
        let r = &vol.rec;
        let journal = &mut self.pools[r.journal_pool.0 as usize].alloc;
        for c in 0..r.journal_chunks as u64 {
            journal.release(r.journal_first_chunk + c);
        }
        if r.provisioning == Provisioning::Thick {
            let home = &mut self.pools[r.home_pool.0 as usize].alloc;
            for c in 0..vol.chunks {
                home.release(r.home_base_chunk + c);
            }
        }
    }

    /// A volume table became durable: a volume it now names is created.
    pub(crate) fn volume_table_durable(&mut self, out: &mut Outputs) {
        let recorded =
            self.creations.recording.as_ref().is_some_and(|n| {
                (self.voltab.volumes().iter()).any(|r| &r.name == n && !r.deleted)
            });
        if recorded && let Some(volume) = self.creations.recording.take() {
            out.events.push(EngineEvent::VolumeCreated { volume });
        }
    }
}
