//! Live storage migration of a volume to another pool (seed 004): DBT, IO Mirroring, LR,
//! SLR, AIO, and `auto` (the paper's Mix, by predicted migration cost).
//!
//! The job copies the volume chunk by chunk through the shared copy primitive
//! (`jobs/copy.rs`) and routes the volume's requests by the scheme's rules
//! (`route.rs`). Where the newest data of a range sits on the destination before the
//! pivot (LR and SLR writes), the volume's overlay says so with an `Overlay::Moved` entry,
//! journaled like every overlay change: that entry *is* the paper's bitmap, made durable
//! by the volume's own commits, so a crash never loses a flushed write to the destination
//! and reads go by it. DBT, mirroring and AIO keep the source authoritative until the
//! pivot; their destination chunks are referenced by nothing durable, so a crash rolls
//! them back and mount's allocator rebuild reclaims the copies.
//!
//! The pivot pauses the volume (new requests wait in the job), lets requests in flight
//! finish, copies DBT's last dirty blocks, switches every chunk map entry to the
//! destination and clears the `Moved` entries in one commit, and resumes as soon as the
//! switch is made in memory; a FLUSH or FUA write waits for that commit to be durable.
//! The pause is measured (`downtime_ns`), and the time until the switch is durable
//! (`pivot_durable_ns`).

mod cache_drain;
mod cost;
mod dirty;
mod log_drain;
pub(crate) mod params;
mod pass;
mod presync;
mod profile;
mod progress;
mod resume;
mod route;
pub(crate) mod state;
mod sweep;
mod thick;

use std::collections::{BTreeMap, BTreeSet, VecDeque};

pub use cost::{AUTO_SCHEMES, CostInputs, MigrationCost, predict_cost, predict_cost_for};
pub use params::{
    CopyPriority, DEFAULT_COALESCE_RUNS, DEFAULT_COPY_WINDOW_CHUNKS, MAX_COALESCE_RUNS,
    MAX_COPY_WINDOW_CHUNKS, MigrationParams, Scheme, SchemeChoice, default_coalesce_runs,
};
pub use profile::WorkloadProfile;

pub(crate) use state::{Copying, Job, Progress, moved_chunks};
pub use state::{MigrationPhase, MigrationStats, MigrationStatus};

use crate::bucket::TokenBucket;
use crate::chunkmap::ChunkLoc;
use crate::control::ControlError;
use crate::engine::Engine;
use crate::types::{Outputs, PoolId, VmRequest, VolumeId};

impl MigrationStatus {
    /// Seed 004's equations (1)-(4) for this job and its gamma, from what it measured:
    /// lambda_IO compares the volume's request rate during the job with its average from
    /// its first request to the job's start (a steady workload's rate without migration);
    /// lambda_migration_time divides the time so far by the image's copy alone at the
    /// rate cap; lambda_wear is SSD-bound bytes per VM byte written. None when the volume
    /// had no requests before the job, or nothing to copy.
    pub fn cost(&self) -> Option<MigrationCost> {
        let st = &self.stats;
        if st.vm_requests_before == 0 || st.vm_active_before_ns == 0 || st.image_bytes == 0 {
            return None;
        }
        let per_s = |n: u64, ns: u64| n as f64 * 1e9 / ns.max(1) as f64;
        let image_copy_time_ns =
            (st.image_bytes as f64 * 1e9 / self.rate_bytes_per_s.max(1) as f64) as u64;
        Some(MigrationCost::measured(
            &CostInputs {
                migration_time_ns: st.elapsed_ns,
                image_copy_time_ns,
                best_io: per_s(st.vm_requests_before, st.vm_active_before_ns),
                io_during: per_s(st.vm_requests_during, st.elapsed_ns),
                workload_write_bytes: st.vm_write_bytes,
                ssd_write_bytes: st.ssd_write_bytes,
            },
            self.gamma,
        ))
    }
}

impl Engine {
    /// Start migrating volume `v` to `params.to`. Errors say why not (nothing changes).
    /// Admin commands come through [`Engine::control`], which reports the refusal typed.
    pub fn start_migration(
        &mut self,
        now: u64,
        v: VolumeId,
        params: MigrationParams,
        out: &mut Outputs,
    ) -> Result<MigrationStatus, String> {
        self.try_start_migration(now, v, params, out)
            .map_err(|e| e.to_string())
    }

    pub(crate) fn try_start_migration(
        &mut self,
        now: u64,
        v: VolumeId,
        params: MigrationParams,
        out: &mut Outputs,
    ) -> Result<MigrationStatus, ControlError> {
        // The job's per-chunk state is sized on the volume as it is now (DST seed 6846:
        // a job started while a resize was being written indexed past its arrays once
        // the volume grew).
        if self.resizes.in_progress().map(|(r, _)| r) == Some(v.0 as usize) {
            return Err(ControlError::Busy(
                "the volume is being resized; migrate it once that is done".into(),
            ));
        }
        if (self.vols.get(v.0 as usize)).is_some_and(|vol| vol.rec.deleted) {
            return Err(ControlError::UnknownVolume(v));
        }
        if self.deletes.refuses(v.0 as usize) {
            return Err(ControlError::Busy("the volume is being deleted".into()));
        }
        let profile = self.workload_profile(now, v.0, params.to);
        let (scheme, why) = self.check_migration(v, &params, &profile)?;
        let mut params = params;
        if params.coalesce_runs.is_none() {
            let dst = self.pools[params.to.0 as usize].cfg.medium;
            params.coalesce_runs = Some(default_coalesce_runs(dst));
        }
        let vi = v.0;
        let params_to = params.to;
        // A `hot` volume's kept homes are dropped: the job moves a plain volume
        // (`tier_home.rs`).
        self.drop_kept_homes(vi as usize);
        let mut job = self.new_job(now, vi, params, scheme, why);
        job.profile = profile;
        if self.nothing_to_move(vi, params_to) {
            // A thick volume resumed after its pivot's records were durable: the table
            // write naming the new region is what is left (`finish_job`).
            job.thick_base = self.vols[vi as usize].rec.migration_base_chunk;
            return Ok(self.rehome_only(now, job, out));
        }
        job.thick_base = self.thick_region_for_start(vi, params_to)?;
        // A `cache` volume's LR writes wait for its cache to be drained (`cache_drain.rs`).
        let cache = matches!(
            self.vols[vi as usize].rec.placement,
            crate::config::Placement::Cache { .. }
        );
        // So do a logged volume's, for its log to be written back home (`log_drain.rs`).
        job.may_write_dst = job.thick_base.is_none() && !cache && !self.vol_has_log_data(vi);
        // Destination data an interrupted LR or SLR job left (its `Moved` entries).
        self.adopt_moved(&mut job);
        self.adopt_thick_slots(&mut job);
        let rate = job.params.rate_bytes_per_s;
        job.bucket
            .fill(now, (rate / 4).max(2 * self.cfg.chunk_bytes));
        self.migrations.finished.remove(&vi);
        let recorded = MigrationParams {
            scheme: SchemeChoice::Fixed(scheme),
            ..job.params.clone()
        };
        let base = job.thick_base;
        self.migrations.jobs.insert(vi, job);
        self.record_job(now, vi, Some(recorded), base, out);
        self.migration_step(now, out);
        Ok(self.migration_status(v).expect("just started"))
    }

    /// A job of volume `vi` in its first pass, copying nothing yet.
    pub(super) fn new_job(
        &self,
        now: u64,
        vi: u32,
        params: MigrationParams,
        scheme: Scheme,
        why: String,
    ) -> Job {
        let vol = &self.vols[vi as usize];
        let chunks = vol.chunks;
        // A `cache` volume's cached chunks are copied from their slow slots once the
        // cache is drained (`cache_drain.rs`): the fast pool is not a source.
        let cache_pool = match vol.rec.placement {
            crate::config::Placement::Cache { .. } => vol.rec.fast_pool,
            _ => None,
        };
        let mut on: Vec<bool> = vol.chunks_on.iter().map(|&n| n > 0).collect();
        if cache_pool.is_some() {
            on.iter_mut().for_each(|o| *o = false);
            for c in 0..chunks {
                if let Some((p, _)) = cache_drain::home_copy(vol, c) {
                    on[p.0 as usize] = true;
                }
            }
        }
        let mut from: Vec<PoolId> = (0..self.pools.len())
            .filter(|&p| on[p] && p != params.to.0 as usize)
            .map(|p| PoolId(p as u16))
            .collect();
        // A cancel's copy back allocates on the first (`cancel_step`): a `cache` volume's
        // home, not its fast pool.
        if let Some(i) = from.iter().position(|&p| p == vol.rec.home_pool)
            && cache_pool.is_some()
        {
            from.swap(0, i);
        }
        // Logged chunks with no home chunk get one on the home pool (`log_drain.rs`).
        let logged_unmapped = log_drain::logged_unmapped(vol, self.cfg.chunk_bytes);
        let home = vol.rec.home_pool;
        if logged_unmapped > 0 && home != params.to && !from.contains(&home) {
            from.push(home);
        }
        if from.is_empty() {
            from.push(vol.rec.home_pool);
        }
        let image_bytes = self.chunks_to_copy(vi, params.to) * self.cfg.chunk_bytes;
        let vm_requests_before = vol.stats.requests();
        let vm_active_before_ns = vol
            .stats
            .first_arrival_ns
            .map_or(0, |t| now.saturating_sub(t));
        Job {
            vol: vi,
            scheme,
            why,
            profile: WorkloadProfile::uniform(0.5),
            phase: MigrationPhase::Copying { pass: 1 },
            from,
            progress: vec![Progress::Uncopied; chunks as usize],
            dst: vec![None; chunks as usize],
            thick_base: None,
            may_write_dst: false,
            kept_src: vec![None; chunks as usize],
            dirty: dirty::DirtyMap::new(chunks, self.cfg.chunk_bytes, params.granularity_bytes),
            cursor: 0,
            late: BTreeSet::new(),
            left: sweep::LeftSweep::default(),
            copying: Vec::new(),
            bucket: TokenBucket::default(),
            parked: VecDeque::new(),
            dups_in_flight: 0,
            dup_busy: BTreeSet::new(),
            dup_queue: VecDeque::new(),
            delayed: VecDeque::new(),
            last_dirty_bytes: u64::MAX,
            cancel_wanted: false,
            cancel_records_seq: None,
            cache_drain_seq: None,
            log_drain_seq: None,
            log_drained: false,
            copy_back_retry_at_ns: None,
            resumed_before_durable: false,
            pause_began_ns: None,
            placed_after_pivot: BTreeMap::new(),
            presync: state::PreSync::NotYet,
            error: None,
            stats: MigrationStats {
                started_ns: now,
                pass: 1,
                image_bytes,
                vm_requests_before,
                vm_active_before_ns,
                ..Default::default()
            },
            params,
        }
    }

    /// Chunks a job of volume `vi` to `to` copies, each needing one chunk there: every
    /// chunk whose home copy is on another pool (a cached chunk's is its slow slot), and
    /// every logged chunk with no home chunk when the home pool is not `to` (the drain
    /// gives it one on the home pool first).
    fn chunks_to_copy(&self, vi: u32, to: PoolId) -> u64 {
        let vol = &self.vols[vi as usize];
        let elsewhere = (0..vol.chunks)
            .filter(|&c| cache_drain::home_copy(vol, c).is_some_and(|(p, _)| p != to))
            .count() as u64;
        let logged = if vol.rec.home_pool != to {
            log_drain::logged_unmapped(vol, self.cfg.chunk_bytes)
        } else {
            0
        };
        elsewhere + logged
    }

    /// Refuse what the job cannot do, and resolve `auto`.
    fn check_migration(
        &self,
        v: VolumeId,
        p: &MigrationParams,
        profile: &WorkloadProfile,
    ) -> Result<(Scheme, String), ControlError> {
        let vol = self
            .vols
            .get(v.0 as usize)
            .ok_or(ControlError::UnknownVolume(v))?;
        let name = &vol.rec.name;
        let unsupported = |why: String| Err(ControlError::Unsupported(why));
        if self.state != crate::engine::EngineState::Ready {
            return Err(ControlError::NotReady);
        }
        if self.migrations.jobs.contains_key(&v.0) {
            return Err(ControlError::AlreadyMigrating {
                volume: name.clone(),
            });
        }
        let pool = self
            .pools
            .get(p.to.0 as usize)
            .ok_or(ControlError::UnknownPool(p.to))?;
        let cb = self.cfg.chunk_bytes;
        let thick = vol.rec.provisioning == crate::config::Provisioning::Thick;
        // Its chunks point at the new region with `At` entries until the table naming it
        // is durable (`thick.rs`); a job meanwhile would copy them to yet another one.
        if self.migrations.thick.rehoming.contains(&v.0) {
            return Err(ControlError::Busy(format!(
                "volume {name}'s last migration is recording its new home region; try again"
            )));
        }
        if thick && p.to == vol.rec.home_pool {
            return Err(ControlError::SamePool {
                volume: name.clone(),
                pool: pool.cfg.name.clone(),
            });
        }
        // A tiered volume's destination becomes its home pool, which cannot be its fast
        // pool (the configuration refuses that too): tiering would have nowhere to demote.
        if vol.rec.placement != crate::config::Placement::Pinned
            && let Some(fast) = vol.rec.fast_pool
            && fast == p.to
        {
            return unsupported(format!(
                "pool {} is volume {name}'s fast pool; a tiered volume moves to another pool (its new home), and tiering promotes its hot chunks to the fast pool again",
                pool.cfg.name
            ));
        }
        // A `cache` volume's fills in flight do not refuse it: its drain waits for them
        // and evicts what they filled (`cache_drain.rs`).
        let cache = matches!(vol.rec.placement, crate::config::Placement::Cache { .. });
        if !cache
            && vol.activity.values().any(|a| {
                matches!(
                    a.state,
                    crate::volume::ChunkState::Moving { .. }
                        | crate::volume::ChunkState::Cleaning { .. }
                )
            })
        {
            return Err(ControlError::Busy(format!(
                "volume {name} has tier moves in flight; try again"
            )));
        }
        p.validate(cb).map_err(ControlError::Invalid)?;
        if thick
            && vol.rec.migration_base_chunk.is_none()
            && let Some(other) = self.moved_pool(v.0)
        {
            return unsupported(format!(
                "volume {name} holds data of an interrupted migration to pool {} outside a recorded home region",
                self.cfg.pools[other.0 as usize].name
            ));
        }
        if let Some(other) = self.moved_pool(v.0)
            && other != p.to
        {
            return unsupported(format!(
                "volume {name} holds data of an interrupted migration to pool {}; migrate it there first",
                self.cfg.pools[other.0 as usize].name
            ));
        }
        let needed = self.chunks_to_copy(v.0, p.to);
        // A thick volume needs a contiguous run instead (`thick_region_for_start`).
        if !thick && pool.alloc.available_chunks() < needed {
            return Err(ControlError::NoSpace {
                pool: pool.cfg.name.clone(),
                free_chunks: pool.alloc.available_chunks(),
                needed_chunks: needed,
            });
        }
        match p.scheme {
            SchemeChoice::Fixed(s) => Ok((s, String::new())),
            SchemeChoice::Auto => Ok(self.choose_scheme(v.0, p, profile)),
        }
    }

    /// An admin's start to the pool the volume already lives on (home, every chunk) is a
    /// mistake to report. A start to the pool every chunk is on while the home pool is
    /// another (an empty volume; what an LR job cancelled after the VM wrote every chunk
    /// leaves) is not: the operator asks that new chunks go there, and the job records the
    /// new home without copying or pausing (`rehome_only`). `start_migration` itself runs
    /// a start to the same pool too (recording nothing new), as DST and a restarted
    /// scenario may ask for it.
    pub(crate) fn refuse_same_pool(&self, v: VolumeId, to: PoolId) -> Result<(), ControlError> {
        let vol = self
            .vols
            .get(v.0 as usize)
            .ok_or(ControlError::UnknownVolume(v))?;
        let pool = self
            .cfg
            .pools
            .get(to.0 as usize)
            .ok_or(ControlError::UnknownPool(to))?;
        // A `cache` volume's cached chunks are copies of chunks on its home pool.
        let elsewhere = match vol.rec.placement {
            crate::config::Placement::Cache { .. } => (0..vol.chunks)
                .any(|c| cache_drain::home_copy(vol, c).is_some_and(|(p, _)| p != to)),
            _ => (0..self.pools.len()).any(|q| q != to.0 as usize && vol.chunks_on[q] > 0),
        };
        if vol.rec.home_pool == to && !elsewhere && self.moved_pool(v.0).is_none() {
            return Err(ControlError::SamePool {
                volume: vol.rec.name.clone(),
                pool: pool.name.clone(),
            });
        }
        Ok(())
    }

    /// Whether volume `v` has nothing off pool `to` and nothing that could put something
    /// there: every mapped chunk on `to`, no `Moved` entries (a job must adopt and clear
    /// them), and no chunk in transition (an allocation in flight may land on the old
    /// home pool; a move may be under way).
    fn nothing_to_move(&self, v: u32, to: PoolId) -> bool {
        let vol = &self.vols[v as usize];
        (0..self.pools.len()).all(|p| p == to.0 as usize || vol.chunks_on[p] == 0)
            && self.moved_pool(v).is_none()
            && vol
                .activity
                .values()
                .all(|a| a.state == crate::volume::ChunkState::Idle)
    }

    /// A job with nothing to copy: the volume's home pool becomes `to` (where its new
    /// chunks go) in the same volume table write that records the job as over, and the job
    /// is done at once. No pause: nothing is switched, so nothing in flight needs to drain
    /// (such a job used to pause the volume through the pivot's drain, 2.7 s in one DST
    /// trace, to switch nothing).
    fn rehome_only(&mut self, now: u64, job: Job, out: &mut Outputs) -> MigrationStatus {
        let vi = job.vol;
        let to = job.params.to;
        self.migrations.finished.remove(&vi);
        self.migrations.jobs.insert(vi, job);
        if self.vols[vi as usize].rec.provisioning == crate::config::Provisioning::Thin {
            // A thick volume's home moves with its region (`thick_job_over`).
            self.vols[vi as usize].rec.home_pool = to;
        }
        self.finish_job(now, vi, MigrationPhase::Done, out);
        out.events.push(crate::types::EngineEvent::MigrationPhase {
            volume: self.vols[vi as usize].rec.name.clone(),
            phase: MigrationPhase::Done.name(),
            paused: false,
        });
        self.migrations.finished[&vi].clone()
    }

    /// Cancel volume `v`'s migration: the source stays (or becomes again) authoritative.
    pub fn cancel_migration(
        &mut self,
        now: u64,
        v: VolumeId,
        out: &mut Outputs,
    ) -> Result<(), String> {
        self.try_cancel_migration(now, v, out)
            .map_err(|e| e.to_string())
    }

    pub(crate) fn try_cancel_migration(
        &mut self,
        now: u64,
        v: VolumeId,
        out: &mut Outputs,
    ) -> Result<(), ControlError> {
        let job = self.running_job(v)?;
        match job.phase {
            MigrationPhase::Committing { .. } => {
                return Err(ControlError::TooLate(
                    "the pivot is being made durable; too late to cancel".into(),
                ));
            }
            MigrationPhase::Cancelling => return Ok(()),
            _ => {}
        }
        job.cancel_wanted = true;
        self.migration_step(now, out);
        Ok(())
    }

    /// Change a running job's copy rate.
    pub fn set_migration_rate(
        &mut self,
        now: u64,
        v: VolumeId,
        rate_bytes_per_s: u64,
        out: &mut Outputs,
    ) -> Result<(), String> {
        self.try_set_migration_rate(now, v, rate_bytes_per_s, out)
            .map_err(|e| e.to_string())
    }

    pub(crate) fn try_set_migration_rate(
        &mut self,
        now: u64,
        v: VolumeId,
        rate_bytes_per_s: u64,
        out: &mut Outputs,
    ) -> Result<(), ControlError> {
        if rate_bytes_per_s == 0 {
            return Err(ControlError::Invalid("rate must be positive".into()));
        }
        let cb = self.cfg.chunk_bytes;
        let job = self.running_job(v)?;
        job.bucket.refill(now, job.params.rate_bytes_per_s, cb * 2);
        job.params.rate_bytes_per_s = rate_bytes_per_s;
        self.migration_step(now, out);
        Ok(())
    }

    /// Volume `v`'s running job, or why there is none.
    fn running_job(&mut self, v: VolumeId) -> Result<&mut Job, ControlError> {
        let Some(vol) = self.vols.get(v.0 as usize) else {
            return Err(ControlError::UnknownVolume(v));
        };
        let volume = vol.rec.name.clone();
        self.migrations
            .jobs
            .get_mut(&v.0)
            .ok_or(ControlError::NotMigrating { volume })
    }

    /// A job's status (running, or the last finished one of the volume).
    pub fn migration_status(&self, v: VolumeId) -> Option<MigrationStatus> {
        if let Some(j) = self.migrations.jobs.get(&v.0) {
            return Some(self.status_of(j));
        }
        self.migrations.finished.get(&v.0).cloned()
    }

    /// Every volume's running or last migration.
    pub fn migrations(&self) -> Vec<MigrationStatus> {
        let mut all: Vec<MigrationStatus> = self.migrations.finished.values().cloned().collect();
        all.extend(self.migrations.jobs.values().map(|j| self.status_of(j)));
        all.sort_by(|a, b| a.volume.cmp(&b.volume));
        all
    }

    fn status_of(&self, j: &Job) -> MigrationStatus {
        MigrationStatus {
            volume: self.vols[j.vol as usize].rec.name.clone(),
            from: j.from.clone(),
            to: j.params.to,
            scheme: j.scheme,
            why: j.why.clone(),
            profile: j.profile,
            phase: j.phase,
            chunks: j.progress.len() as u64,
            chunks_done: j
                .progress
                .iter()
                .filter(|&&p| p == Progress::Copied)
                .count() as u64,
            gamma: j.params.gamma,
            error: j.error.clone(),
            rate_bytes_per_s: j.params.rate_bytes_per_s,
            copy_priority: j.params.copy_priority,
            copy_window_chunks: j.params.copy_window_chunks,
            coalesce_runs: j.params.coalesce_runs.unwrap_or(0),
            stats: MigrationStats {
                dirty_bytes: j.dirty.bytes(),
                vm_requests_during: self.vols[j.vol as usize]
                    .stats
                    .requests()
                    .saturating_sub(j.stats.vm_requests_before),
                elapsed_ns: j.stats.finished_ns.unwrap_or(self.last_now_ns)
                    - j.stats.started_ns.min(self.last_now_ns),
                ..j.stats.clone()
            },
        }
    }

    /// Park a request of a paused volume; it is submitted again when the pivot is done.
    pub(crate) fn migration_park(&mut self, req: VmRequest) -> Result<(), VmRequest> {
        if !self.migrations.is_paused(req.volume.0) {
            return Err(req);
        }
        match self.migrations.jobs.get_mut(&req.volume.0) {
            Some(j) => {
                j.parked.push_back(req);
                Ok(())
            }
            None => Err(req),
        }
    }

    /// Arm the job timer for `at` (one wake-up asked at a time, the soonest).
    pub(crate) fn migration_wake_at(&mut self, at: u64) {
        if self.migrations.timer_at.is_none_or(|t| at < t) {
            self.migrations.timer_at = Some(at);
        }
    }

    /// Time passed: due delayed writes and rate-limited copies go on.
    /// No job is left paused for its pivot (`Draining`) with nothing in flight that the
    /// pause waits for: whatever ends the last of it (a device completion, a tick, a
    /// loan's answer in an admin command) steps the jobs before the call returns, as
    /// nothing else may ever step them. Checked after every call by DST, where a missed
    /// step is otherwise only a delay until the next event (`loan-answer-no-step`). Nor is
    /// a deletion left waiting for its volume to be quiet while it is
    /// (`check_deletion_stepped`).
    pub fn check_pauses_stepped(&self) -> Result<(), String> {
        for (&v, job) in &self.migrations.jobs {
            if job.phase == MigrationPhase::Draining && self.drained(v) {
                return Err(format!(
                    "volume {}: its migration job is paused for the pivot with nothing \
                     left in flight, and was not stepped on",
                    self.vols[v as usize].rec.name
                ));
            }
        }
        self.check_deletion_stepped()
    }

    pub(crate) fn migration_tick(&mut self, now: u64, out: &mut Outputs) {
        if self.migrations.timer_at.is_some_and(|t| t <= now) {
            self.migrations.timer_at = None;
        }
        self.migration_step(now, out);
    }
}

impl Engine {
    /// Chunks a volume's job holds beyond its map (for the invariant that every chunk has
    /// exactly one owner): destination copies, and LR's kept sources.
    pub(crate) fn migration_claims(&self, v: u32) -> Vec<(PoolId, u64, &'static str)> {
        let vol = &self.vols[v as usize];
        let mut out: Vec<(PoolId, u64, &'static str)> = Vec::new();
        let mut seen = BTreeSet::new();
        self.thick_claims(v, &mut out);
        if let Some(job) = self.migrations.jobs.get(&v) {
            for (c, d) in job.dst.iter().enumerate() {
                if job.thick_base.is_some() {
                    break; // the slots are in the new region, claimed whole
                }
                let Some(pc) = *d else { continue };
                let loc = crate::chunkmap::ChunkLoc::At(job.params.to, pc);
                // No dedupe here: two logical chunks copied to one destination chunk is
                // exactly the double claim the check must see.
                if vol.map.get(c as u64) != loc {
                    seen.insert((job.params.to, pc));
                    out.push((job.params.to, pc, "migration destination"));
                }
            }
            for k in job.kept_src.iter().flatten() {
                if let crate::chunkmap::ChunkLoc::At(p, pc) = *k {
                    out.push((p, pc, "migration source kept for cancel"));
                }
            }
        }
        for (p, pc) in self.log_drain_claims(v) {
            out.push((p, pc, "migration log drain"));
        }
        for (p, pc) in moved_chunks(vol, self.cfg.chunk_bytes) {
            if !self.in_thick_region(v, p, pc) && seen.insert((p, pc)) {
                out.push((p, pc, "migration destination"));
            }
        }
        out
    }
}

impl Engine {
    /// Once a job has pivoted (its switch records are made, `Committing`), every mapped
    /// chunk of its volume is on the destination, except a chunk first allocated since,
    /// which is where its allocation put it. `start_pivot` switched every chunk; tier
    /// moves stay frozen while the job exists (`tiers_frozen`). But the pivot lets the
    /// volume run before its records are durable, and a write to an unmapped chunk then
    /// allocates by the volume's placement, as it will once the job is over: a `split`
    /// volume's fast share, or a `hot` volume's new data while its budget has room, goes
    /// to the fast pool, which may be the job's source (DST seed 6120: a write parked in
    /// the pause, released by the pivot, allocated chunks 7 and 8 on the SSD). That is
    /// safe: the allocation is an ordinary `Map` record after the pivot's (a power loss
    /// before they are durable loses both, with the write, which no FLUSH covered), its
    /// pool is marked dirty for the next FLUSH, and the pivot's frees named only chunks
    /// it switched. A chunk found off the destination anywhere else is a violation: write
    /// routing relies on it (a pivoted job routes nothing: `migration_write_piece`). The
    /// injected `tier-moves-while-migrating` breaks it (DST seed 95 with NCQ: a
    /// promotion finished after the pivot and took a switched chunk back to the fast
    /// pool).
    pub(crate) fn check_pivoted(&self, v: u32) -> Result<(), String> {
        let Some(job) = self.migrations.jobs.get(&v) else {
            return Ok(());
        };
        if !matches!(job.phase, MigrationPhase::Committing { .. }) {
            return Ok(());
        }
        let vol = &self.vols[v as usize];
        let to = job.params.to;
        for c in 0..vol.chunks {
            if let Some((p, pc)) = vol.resolve(vol.map.get(c), c)
                && p != to
                && job.placed_after_pivot.get(&c) != Some(&ChunkLoc::At(p, pc))
            {
                return Err(format!(
                    "volume {}: its migration has pivoted to pool {} but chunk {c} is mapped at pool {} chunk {pc}",
                    vol.rec.name, to.0, p.0
                ));
            }
        }
        Ok(())
    }
}

impl Engine {
    /// `Moved` entries were removed by newer data (record `seq`): a destination chunk no
    /// job holds and no entry points into any more is freed once that is durable.
    pub(crate) fn migration_unref_moved(
        &mut self,
        v: u32,
        removed: &[(u64, u64, crate::overlay::Overlay)],
        seq: u64,
    ) {
        let cb = self.cfg.chunk_bytes;
        let mut gone = BTreeSet::new();
        for &(s, e, o) in removed {
            if let crate::overlay::Overlay::Moved { pool, dev_offset } = o {
                let first = (dev_offset - crate::layout::DATA_START_BYTES) / cb;
                let last = (dev_offset + (e - s) - 1 - crate::layout::DATA_START_BYTES) / cb;
                for pc in first..=last {
                    gone.insert((pool, pc));
                }
            }
        }
        if gone.is_empty() {
            return;
        }
        let vol = &self.vols[v as usize];
        let still = moved_chunks(vol, cb);
        let held: BTreeSet<(PoolId, u64)> = match self.migrations.jobs.get(&v) {
            Some(j) => j
                .dst
                .iter()
                .flatten()
                .map(|&pc| (j.params.to, pc))
                .collect(),
            None => BTreeSet::new(),
        };
        let mapped = |p: PoolId, pc: u64| {
            vol.map
                .iter()
                .any(|(_, l)| l == crate::chunkmap::ChunkLoc::At(p, pc))
        };
        let free: Vec<(PoolId, u64)> = gone
            .into_iter()
            .filter(|&(p, pc)| {
                !still.contains(&(p, pc))
                    && !held.contains(&(p, pc))
                    && !mapped(p, pc)
                    && !self.in_thick_region(v, p, pc)
            })
            .collect();
        for (pool, pc) in free {
            self.defer_free(
                crate::reclaim::Freed::Chunks {
                    pool,
                    first: pc,
                    n: 1,
                },
                smallvec::smallvec![(v, seq)],
            );
        }
    }
}
