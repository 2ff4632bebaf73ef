//! Thick volumes: the home region moves.
//!
//! A thick volume's chunks are `ChunkLoc::Home`, resolved through the table's home pool
//! and base, and mount claims the whole region from the volume table. So the region's
//! move is a table change, ordered with the journal:
//!
//! 1. At the start, a contiguous run of the volume's size is reserved on the destination
//!    and recorded in the job's table record (`migration_base_chunk`); no copy or write
//!    goes into it before that table is durable (`region_durable`), and mount claims it
//!    from the record while the job is recorded.
//! 2. Chunk `c` copies into slot `base + c` (`migration_dst_chunk`).
//! 3. The pivot's records switch every chunk to `At(to, base + c)` (durable in its
//!    commit). Then the table names the new region as home and clears the job; once that
//!    is durable, records turn the entries back into `Home` (a later tier move must not
//!    free a slot of the region into the allocator) and the old region is freed. Mount
//!    accepts a chunk claimed both by a region and by an `At` entry to its own slot in it
//!    (`own_slot`), and turns such entries into `Home`.
//! 4. A cancel clears the job in the table once its copy back's records are durable
//!    (`cancel_records_seq`), and frees the new region once no table (durable or being
//!    written) records it and the records that dropped references into it are durable
//!    (`defer_free`). A job that cannot resume at mount is cancelled so, or completed if
//!    its pivot was durable (`resume.rs`).

use smallvec::smallvec;

use super::state::HeldRegion;
use crate::chunkmap::ChunkLoc;
use crate::config::Provisioning;
use crate::control::ControlError;
use crate::engine::Engine;
use crate::inject::InjectedBug;
use crate::layout::VolumeRecord;
use crate::reclaim::Freed;
use crate::types::PoolId;

/// A region a finished job still holds until the volume table stops naming it.
/// Whether table record `r` names region `(pool, first)`: as the home region or as a
/// job's new region.
fn names_region(r: &VolumeRecord, pool: PoolId, first: u64) -> bool {
    (r.provisioning == Provisioning::Thick && r.home_pool == pool && r.home_base_chunk == first)
        || (r.migration_base_chunk == Some(first)
            && r.migration.as_ref().is_some_and(|m| m.to == pool))
}

impl Engine {
    /// The new home region of thick volume `v`'s job to `to`: the one its table record
    /// holds (a resumed job; mount claimed it), else a contiguous run reserved now.
    /// `Ok(None)` for a thin volume.
    pub(super) fn thick_region_for_start(
        &mut self,
        v: u32,
        to: PoolId,
    ) -> Result<Option<u64>, ControlError> {
        let vol = &self.vols[v as usize];
        if vol.rec.provisioning != Provisioning::Thick {
            return Ok(None);
        }
        if let (Some(b), Some(m)) = (vol.rec.migration_base_chunk, &vol.rec.migration) {
            if m.to == to {
                return Ok(Some(b));
            }
            return Err(ControlError::Unsupported(format!(
                "volume {} holds a reserved region of an interrupted migration to pool {}; migrate it there first",
                vol.rec.name, self.cfg.pools[m.to.0 as usize].name
            )));
        }
        let n = vol.chunks;
        let alloc = &mut self.pools[to.0 as usize].alloc;
        match alloc.allocate_run(n, 0, false) {
            Some(b) => Ok(Some(b)),
            None => Err(ControlError::NoContiguousSpace {
                pool: self.cfg.pools[to.0 as usize].name.clone(),
                largest_free_run_chunks: alloc.largest_free_run(),
                needed_chunks: n,
            }),
        }
    }

    /// A resumed thick job: chunks already at their slot of the new region (LR's
    /// switches before the crash) are the job's, and a cancel copies them back home.
    pub(super) fn adopt_thick_slots(&self, job: &mut super::Job) {
        let Some(base) = job.thick_base else {
            return;
        };
        let vol = &self.vols[job.vol as usize];
        for c in 0..vol.chunks {
            if vol.map.get(c) == ChunkLoc::At(job.params.to, base + c) {
                job.dst[c as usize] = Some(base + c);
                job.kept_src[c as usize] = Some(ChunkLoc::Home);
            }
        }
    }

    /// Whether volume `v`'s job may write into its destination: always for a thin
    /// volume; for a thick one, once the table recording its new region is durable (a
    /// crash before that mounts a table that does not claim it).
    pub(crate) fn region_durable(&self, v: u32) -> bool {
        let Some(job) = self.migrations.jobs.get(&v) else {
            return true;
        };
        let Some(base) = job.thick_base else {
            return true;
        };
        self.voltab
            .volumes()
            .get(v as usize)
            .is_some_and(|r| names_region(r, job.params.to, base))
    }

    /// Whether `(pool, pc)` is the slot of logical chunk `c` in a region of thick volume
    /// `v`: its home region, or the new one its job (running or recorded) reserved.
    pub(crate) fn own_slot(&self, v: u32, c: u64, pool: PoolId, pc: u64) -> bool {
        let vol = &self.vols[v as usize];
        let r = &vol.rec;
        if r.provisioning != Provisioning::Thick {
            return false;
        }
        let job = self.migrations.jobs.get(&v);
        let base = job
            .and_then(|j| j.thick_base.map(|b| (j.params.to, b)))
            .or_else(|| {
                r.migration
                    .as_ref()
                    .zip(r.migration_base_chunk)
                    .map(|(m, b)| (m.to, b))
            });
        (pool == r.home_pool && pc == r.home_base_chunk + c)
            || base.is_some_and(|(p, b)| p == pool && pc == b + c)
    }

    /// Whether `(pool, pc)` lies in a region thick volume `v` holds (home, its job's new
    /// region, or one held until a table write): such a slot is never freed alone.
    pub(crate) fn in_thick_region(&self, v: u32, pool: PoolId, pc: u64) -> bool {
        let vol = &self.vols[v as usize];
        if vol.rec.provisioning != Provisioning::Thick {
            return false;
        }
        let n = vol.chunks;
        let within = |p: PoolId, b: u64| p == pool && (b..b + n).contains(&pc);
        let r = &vol.rec;
        within(r.home_pool, r.home_base_chunk)
            || self
                .migrations
                .jobs
                .get(&v)
                .and_then(|j| j.thick_base.map(|b| (j.params.to, b)))
                .is_some_and(|(p, b)| within(p, b))
            || (r.migration.as_ref())
                .zip(r.migration_base_chunk)
                .is_some_and(|(m, b)| within(m.to, b))
            || (self.migrations.thick.held.iter()).any(|h| {
                h.vol == v && h.pool == pool && (h.first..h.first + h.chunks).contains(&pc)
            })
    }

    /// A thick volume's job ends (`finish_job`). Done: the new region becomes the home in
    /// the record the next table write carries, the old one is held until that table is
    /// durable. Cancelled or failed: the new region is held until no table records it.
    pub(super) fn thick_job_over(&mut self, v: u32, to: PoolId, base: u64, done: bool) {
        let vol = &mut self.vols[v as usize];
        let chunks = vol.chunks;
        let held = if done {
            let old = (vol.rec.home_pool, vol.rec.home_base_chunk);
            vol.rec.home_pool = to;
            vol.rec.home_base_chunk = base;
            self.migrations.thick.rehoming.insert(v);
            HeldRegion {
                vol: v,
                pool: old.0,
                first: old.1,
                chunks,
                what: "old home region",
            }
        } else {
            HeldRegion {
                vol: v,
                pool: to,
                first: base,
                chunks,
                what: "region of a cancelled migration",
            }
        };
        self.migrations.thick.held.push(held);
    }

    /// A volume table write is durable (or a region was just held): chunks of a volume
    /// whose new home is durable go back to `Home`, and regions no table names any more
    /// are freed once the volume's records so far are durable and nothing reads them.
    pub(crate) fn thick_table_durable(&mut self, now: u64) {
        let rehoming: Vec<u32> = self.migrations.thick.rehoming.iter().copied().collect();
        for v in rehoming {
            let vol = &self.vols[v as usize];
            let (pool, base) = (vol.rec.home_pool, vol.rec.home_base_chunk);
            let durable = (self.voltab.volumes().get(v as usize))
                .is_some_and(|r| r.home_pool == pool && r.home_base_chunk == base);
            if !durable {
                continue;
            }
            self.migrations.thick.rehoming.remove(&v);
            for c in 0..vol.chunks {
                if self.vols[v as usize].map.get(c) == ChunkLoc::At(pool, base + c) {
                    self.switch_chunk(v, c, ChunkLoc::Home, false);
                }
            }
            self.arm_commit_timer(now);
        }
        let early = self.bug_is(InjectedBug::ThickOldRegionFreedEarly);
        let held = std::mem::take(&mut self.migrations.thick.held);
        for h in held {
            let named = (self.voltab.volumes().get(h.vol as usize))
                .is_some_and(|r| names_region(r, h.pool, h.first))
                || self
                    .voltab
                    .in_flight_record(h.vol as usize)
                    .is_some_and(|r| names_region(r, h.pool, h.first));
            let what = Freed::Chunks {
                pool: h.pool,
                first: h.first,
                n: h.chunks,
            };
            if early {
                // The injected bug: straight back to the allocator, table or not.
                self.release_chunks(what);
                continue;
            }
            if named {
                self.migrations.thick.held.push(h);
                continue;
            }
            let seq = self.vols[h.vol as usize].journal.next_seq - 1;
            self.defer_free(what, smallvec![(h.vol, seq)]);
        }
    }

    /// Regions volume `v` holds for the invariant checker: its running job's new region,
    /// and regions held until a table write.
    pub(super) fn thick_claims(&self, v: u32, out: &mut Vec<(PoolId, u64, &'static str)>) {
        let n = self.vols[v as usize].chunks;
        if let Some(j) = self.migrations.jobs.get(&v)
            && let Some(b) = j.thick_base
        {
            for pc in b..b + n {
                out.push((j.params.to, pc, "new home region of a migration"));
            }
        }
        for h in self.migrations.thick.held.iter().filter(|h| h.vol == v) {
            for pc in h.first..h.first + h.chunks {
                out.push((h.pool, pc, h.what));
            }
        }
    }

    /// Invariant: every region the volume table (durable, or being written) names for a
    /// thick volume, as its home or as its job's new region, is held by someone (`owner`,
    /// the checker's claims per pool): a crash now would mount that table and claim it.
    pub(crate) fn check_table_regions(
        &self,
        owner: &[std::collections::BTreeMap<u64, String>],
    ) -> Result<(), String> {
        let records = (self.voltab.volumes().iter()).chain(self.voltab.in_flight_records());
        for r in records.filter(|r| !r.deleted && r.provisioning == Provisioning::Thick) {
            let n = r.size_bytes.div_ceil(self.cfg.chunk_bytes);
            let job = (r.migration.as_ref()).zip(r.migration_base_chunk);
            let regions = std::iter::once((r.home_pool, r.home_base_chunk))
                .chain(job.map(|(m, b)| (m.to, b)));
            for (pool, first) in regions {
                let held = owner.get(pool.0 as usize);
                if let Some(c) =
                    (first..first + n).find(|c| !held.is_some_and(|o| o.contains_key(c)))
                {
                    return Err(format!(
                        "volume {}: the volume table names a region on pool {} from chunk {first}, but its chunk {c} is free",
                        r.name, pool.0
                    ));
                }
            }
        }
        Ok(())
    }

    /// Mount: a thick volume's chunks that point at their own slot of the home region
    /// with `At` entries (the table naming it became durable before the records turning
    /// them back did) are `Home` again, in memory (a checkpoint records it).
    pub(crate) fn thick_rehome_at_mount(&mut self, v: usize) {
        let vol = &mut self.vols[v];
        if vol.rec.provisioning != Provisioning::Thick {
            return;
        }
        let (pool, base) = (vol.rec.home_pool, vol.rec.home_base_chunk);
        for c in 0..vol.chunks {
            if vol.map.get(c) == ChunkLoc::At(pool, base + c) {
                vol.set_loc(c, ChunkLoc::Home);
            }
        }
    }
}
