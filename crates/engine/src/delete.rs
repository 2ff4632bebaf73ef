//! Deleting a volume while the engine runs (`Control::DeleteVolume`, `tiervisor ctl volume
//! delete`).
//!
//! Crash safety comes from the order, as for creation and growth: nothing is given back
//! until the volume table that says the volume is gone is durable. The volume first stops
//! taking requests and waits until nothing of it is in flight (requests, device
//! operations, a commit, buffered writes, log appends, frees waiting on its journal);
//! then the table is written with a *tombstone* in its entry (`VolumeRecord::deleted`: no
//! size, no journal, owning nothing); once that is durable its chunks (mapped, thick home
//! region, journal, checkpoint chains, log segments) go to the pending frees, which hand
//! them back once any operation still in flight on them has drained, and the volume's slot
//! becomes hollow. A crash before the tombstone is durable mounts the volume whole; after,
//! mount rebuilds the allocators from the live volumes only, so the chunks are free.
//!
//! Tombstones stay in the table while they serve a purpose (`tombstones_to_keep`): volume
//! ids are never reused (a journal block left in a freed region must not chain onto a
//! later volume's journal that had the same id), so the one with the highest id stays;
//! and a volume the configuration still names is not created again empty at the next
//! start (a VM attached to it by mistake would see an empty disk; the start warns
//! instead). The others are dropped at mount, so the table does not fill with them.
//! While the engine runs, the deleted volume keeps its index as a hollow slot (size 0,
//! refusing every request), so the indexes drivers hold stay valid; mount leaves tombstones
//! out of the volumes, so indexes after a restart are compact.

pub(crate) mod state;

use smallvec::SmallVec;

use crate::chunkmap::{ChunkLoc, ChunkMap};
use crate::config::Provisioning;
use crate::control::ControlError;
use crate::engine::{Engine, EngineState};
use crate::extents::ExtentMap;
use crate::layout::JournalHeader;
use crate::reclaim::Freed;
use crate::types::{EngineEvent, Outputs, PoolId, VolumeId};
pub(crate) use state::{Deletion, Phase, tombstone, tombstones_to_keep};

impl Engine {
    /// Start deleting a volume; `EngineEvent::VolumeDeleted` says when it is gone for good
    /// (durably, and its space given back).
    pub(crate) fn try_delete_volume(
        &mut self,
        now: u64,
        volume: VolumeId,
        out: &mut Outputs,
    ) -> Result<(), ControlError> {
        if self.state != EngineState::Ready {
            return Err(ControlError::NotReady);
        }
        let v = volume.0 as usize;
        let vol = self
            .vols
            .get(v)
            .filter(|vol| !vol.rec.deleted)
            .ok_or(ControlError::UnknownVolume(volume))?;
        let name = vol.rec.name.clone();
        if let Some(other) = self.deletes.in_progress() {
            return Err(ControlError::Busy(format!(
                "volume {} is being deleted; try again when it is done",
                self.vols[other].rec.name
            )));
        }
        if self.creations.in_progress().is_some() {
            return Err(ControlError::Busy(
                "a volume is being created; try again when it is done".into(),
            ));
        }
        if self.resizes.in_progress().is_some_and(|(r, _)| r == v) {
            return Err(ControlError::Busy(format!(
                "volume {name} is being resized; try again when it is done"
            )));
        }
        if self.migrations.jobs.contains_key(&volume.0) {
            return Err(ControlError::Busy(format!(
                "volume {name} is migrating; cancel the migration (ctl migrate cancel {name}) \
                 or wait for it to finish"
            )));
        }
        // A thick volume's chunks point at its new region until the table naming it is
        // durable (`jobs/migrate/thick.rs`): freeing both would free them twice.
        if self.migrations.thick.rehoming.contains(&volume.0) {
            return Err(ControlError::Busy(format!(
                "volume {name}'s migration is recording its new home region; try again"
            )));
        }
        self.deletes.current = Some(Deletion {
            volume: v,
            phase: Phase::Quiescing,
        });
        self.delete_step(now, out);
        Ok(())
    }

    /// Move the deletion on when what it waits for is done (after every completion).
    pub(crate) fn delete_step(&mut self, now: u64, out: &mut Outputs) {
        let Some(d) = &self.deletes.current else {
            return;
        };
        let (v, phase) = (d.volume, d.phase);
        match phase {
            Phase::Quiescing if self.volume_quiet(v as u32) => {
                self.set_delete_phase(Phase::Recording);
                self.write_volume_table(now, out);
                if self.bug_is(crate::inject::InjectedBug::DeleteBeforeDurable) {
                    self.set_delete_phase(Phase::Releasing);
                    self.delete_step(now, out);
                }
            }
            Phase::Releasing if self.volume_quiet(v as u32) => {
                self.deletes.current = None;
                let name = self.vols[v].rec.name.clone();
                self.release_deleted(v);
                // Nothing may complete after this to hand the frees back: try now.
                self.release_frees(now, out);
                // The checkpoint reserve shrinks with the volume gone.
                let _ = self.set_reserves();
                out.events.push(EngineEvent::VolumeDeleted { volume: name });
            }
            _ => {}
        }
    }

    fn set_delete_phase(&mut self, phase: Phase) {
        if let Some(d) = &mut self.deletes.current {
            d.phase = phase;
        }
    }

    /// A volume table became durable: if it holds the tombstone being written, give the
    /// volume's space back (now, or once what started meanwhile is done).
    pub(crate) fn delete_table_durable(&mut self, now: u64, out: &mut Outputs) {
        let Some(d) = &self.deletes.current else {
            return;
        };
        if d.phase != Phase::Recording
            || !self
                .voltab
                .volumes()
                .get(d.volume)
                .is_some_and(|r| r.deleted)
        {
            return;
        }
        self.set_delete_phase(Phase::Releasing);
        self.delete_step(now, out);
    }

    /// No deletion waits for its volume to be quiet (`Quiescing`, `Releasing`) while it
    /// is: whatever ended the last of what it waited for (a device completion, a loan's
    /// answer in an admin command) steps it before the call returns, as nothing else may
    /// ever step it. Part of `Engine::check_pauses_stepped`, which DST runs after every
    /// call (`loan-answer-no-step` skips this step as well as the jobs').
    pub(crate) fn check_deletion_stepped(&self) -> Result<(), String> {
        let Some(d) = &self.deletes.current else {
            return Ok(());
        };
        if matches!(d.phase, Phase::Quiescing | Phase::Releasing)
            && self.volume_quiet(d.volume as u32)
        {
            return Err(format!(
                "volume {}: its deletion waits ({:?}) for the volume to be quiet, which it \
                 is, and was not stepped on",
                self.vols[d.volume].rec.name, d.phase
            ));
        }
        Ok(())
    }

    /// Nothing of volume `v` is in flight or waiting: no request, device operation,
    /// commit, buffered write, log append or free waiting on its journal.
    fn volume_quiet(&self, v: u32) -> bool {
        let vol = &self.vols[v as usize];
        vol.activity.is_empty()
            && vol.commit.is_none()
            && vol.flush_waiters.is_empty()
            && vol.promoting == 0
            && vol.log.in_flight.is_empty()
            && vol.log.parked.is_empty()
            && vol
                .log
                .streams
                .iter()
                .all(|s| s.buf.is_empty() && s.in_flight == 0)
            && !self.reqs.iter().any(|(_, r)| r.vol == v)
            && !self.ops.iter().any(|(_, o)| o.volume == Some(VolumeId(v)))
            && self.pools.iter().all(|p| p.wbuf.volume_bytes(v) == 0)
            && !self.frees_wait_on(v)
            && self
                .logs
                .iter()
                .all(|l| l.segments.values().all(|s| s.owner != v || !s.cleaning))
    }

    /// The tombstone is durable: every chunk the volume held goes to the pending frees
    /// (nothing durable references them any more), and its slot becomes hollow.
    fn release_deleted(&mut self, v: usize) {
        let vol = &self.vols[v];
        let rec = vol.rec.clone();
        let mut frees: Vec<(PoolId, u64, u64)> = Vec::new();
        for (_, loc) in vol.map.iter() {
            if let ChunkLoc::At(p, pc) = loc {
                frees.push((p, pc, 1));
            }
        }
        for (p, pc, _) in Engine::cache_claims(vol) {
            frees.push((p, pc, 1));
        }
        // Destination chunks a migration that could not resume left the newest data of
        // some ranges in (`Moved` overlays; the mount claims them for the volume). Those
        // in its own thick region go with the region below.
        for (p, pc) in crate::jobs::migrate::moved_chunks(vol, self.cfg.chunk_bytes) {
            if !self.in_thick_region(v as u32, p, pc) {
                frees.push((p, pc, 1));
            }
        }
        if rec.provisioning == Provisioning::Thick {
            frees.push((rec.home_pool, rec.home_base_chunk, vol.chunks));
        }
        frees.push((
            rec.journal_pool,
            rec.journal_first_chunk,
            rec.journal_chunks as u64,
        ));
        for &(p, c) in vol
            .journal
            .checkpoint_chunks
            .iter()
            .chain(&vol.journal.orphan_chunks)
        {
            frees.push((p, c, 1));
        }
        // The volume's log segments hold only its data (a segment has one owner).
        let seg_chunks = self.seg_chunks();
        for (p, log) in self.logs.iter_mut().enumerate() {
            let mine: Vec<u64> = (log.segments.iter())
                .filter(|(_, s)| s.owner == v as u32)
                .map(|(&g, _)| g)
                .collect();
            for g in mine {
                let Some(seg) = log.segments.remove(&g) else {
                    continue;
                };
                for c in (0..seg_chunks).filter(|c| seg.held >> c & 1 == 1) {
                    frees.push((PoolId(p as u16), g * seg_chunks + c, 1));
                }
            }
        }
        let mut hollow = self.volume_from(
            crate::delete::tombstone(&rec),
            ChunkMap::new(0, ChunkLoc::Unmapped),
            ExtentMap::new(),
            JournalHeader::default(),
        );
        hollow.id = VolumeId(v as u32);
        hollow.qos = self.vols[v].qos;
        self.vols[v] = hollow;
        if self.bug_is(crate::inject::InjectedBug::DeleteCompactsAtOnce) {
            self.vols.remove(v);
            for (i, vol) in self.vols.iter_mut().enumerate().skip(v) {
                vol.id = VolumeId(i as u32);
            }
        }
        for (pool, first, n) in frees.into_iter().filter(|f| f.2 > 0) {
            self.defer_free(Freed::Chunks { pool, first, n }, SmallVec::new());
        }
    }
}
