//! The job's progress: copy passes, the pause and pivot, and cancel (which copies LR's and
//! SLR's destination data back, or drops the destination copies of the others).

use smallvec::smallvec;

use super::{Copying, MigrationPhase, Progress, Scheme};
use crate::chunkmap::ChunkLoc;
use crate::config::Medium;
use crate::engine::{Engine, EngineState, ReqStage};
use crate::inject::InjectedBug;
use crate::jobs::copy::{Copy, CopyFor};
use crate::journal::Record;
use crate::layout::chunk_offset;
use crate::overlay::Overlay;
use crate::reclaim::Freed;
use crate::types::{Errno, Outputs, PoolId};
use crate::volume::ChunkState;

use super::dirty::Ranges;

impl Engine {
    /// Move every job on as far as it can go now.
    pub(crate) fn migration_step(&mut self, now: u64, out: &mut Outputs) {
        if self.migrations.jobs.is_empty() {
            return;
        }
        let vols: Vec<u32> = self.migrations.jobs.keys().copied().collect();
        for v in vols {
            self.release_delayed(now, v, out);
            self.pump_dups(now, v, out);
            let before = self.migration_phase_of(v);
            // A few transitions can happen in one step; each returns when it must wait.
            for _ in 0..4 {
                if !self.job_step(now, v, out) {
                    break;
                }
            }
            let after = self.migration_phase_of(v);
            if after != before
                && let Some(phase) = after
            {
                out.events.push(crate::types::EngineEvent::MigrationPhase {
                    volume: self.vols[v as usize].rec.name.clone(),
                    phase: phase.name(),
                    paused: phase.pauses_the_volume(),
                });
            }
        }
    }

    /// The phase of volume `v`'s running job, or of its last one once it is over.
    fn migration_phase_of(&self, v: u32) -> Option<MigrationPhase> {
        match self.migrations.jobs.get(&v) {
            Some(job) => Some(job.phase),
            None => self.migrations.finished.get(&v).map(|s| s.phase),
        }
    }

    /// One transition of volume `v`'s job; true if it changed phase (try again).
    fn job_step(&mut self, now: u64, v: u32, out: &mut Outputs) -> bool {
        let Some(job) = self.migrations.jobs.get_mut(&v) else {
            return false;
        };
        if job.cancel_wanted && job.phase != MigrationPhase::Cancelling {
            if matches!(job.phase, MigrationPhase::Committing { .. }) {
                // Past the point of no return: the pivot completes; the error stays.
                job.cancel_wanted = false;
            } else {
                job.phase = MigrationPhase::Cancelling;
                job.cursor = 0;
                self.unpause(now, v, out);
                return true;
            }
        }
        // A volume whose final commit failed at a stop (`Journal::abandon`) records nothing
        // more in this run, so a copy (an LR switch) or a cancel's copy-back could never be
        // recorded, and the next mount resumes the job from what is durable: start no more
        // of them. (An LR job copied the rest of the image for nothing, holding the stop
        // up: DST seed 1009 at `--faults 2`; tests/migration_stop.rs.) The pause's phases
        // go on: requests wait on them.
        if self.vols[v as usize].journal.abandoned()
            && matches!(
                job.phase,
                MigrationPhase::Copying { .. } | MigrationPhase::Cancelling
            )
        {
            return false;
        }
        // An orderly stop freezes a copying job where it is: the operator stopping `serve`
        // expects a prompt stop, and the job resumes at the next mount from what the
        // stop's checkpoint makes durable (`resume.rs`), as after a crash. The copies in
        // flight finish; none starts, and no pivot begins (an unthrottled job copied up to
        // its pivot before the engine stopped; tests/migration_stop.rs). A cancel goes on:
        // it is not recorded, so a frozen one would resume as the migration the operator
        // cancelled; its copy-back is bounded by what the job wrote to the destination.
        // The pause's phases go on too: requests wait on them. (Stopped too: a driver
        // that ticks a stopped engine must not see the job run on.)
        if matches!(self.state, EngineState::Stopping | EngineState::Stopped)
            && matches!(job.phase, MigrationPhase::Copying { .. })
        {
            return false;
        }
        match job.phase {
            MigrationPhase::Copying { pass } => self.copy_step(now, v, pass, out),
            MigrationPhase::Draining => {
                if !self.drained(v) {
                    return false;
                }
                let job = self.migrations.jobs.get_mut(&v).expect("exists");
                job.cursor = 0;
                job.left.restart();
                // A write in flight at the pause may have allocated a chunk on the source
                // in the region already copied (`migration_chunk_allocated`): it is copied
                // now, or the pivot would switch to a destination chunk never filled.
                let left = job.progress.iter().any(|&p| p != Progress::Copied);
                if left || (job.scheme == Scheme::Dbt && job.dirty.any()) {
                    job.phase = MigrationPhase::FinalCopy;
                } else {
                    self.start_pivot(now, v, out);
                }
                true
            }
            MigrationPhase::FinalCopy => {
                // Up to `copy_window_chunks` copies at once (nothing writes while the
                // volume is paused); copies that need nothing copied finish at once. A
                // completion steps again.
                loop {
                    let job = &self.migrations.jobs[&v];
                    if job.cancel_wanted {
                        return true;
                    }
                    if job.copying.len() >= job.params.copy_window_chunks as usize {
                        return false;
                    }
                    let next = match self.next_left_uncopied(v) {
                        Some(c) => Some(c),
                        None => match self.next_dirty(v) {
                            Some(Ok(c)) => Some(c),
                            // Nothing is in flight once drained, but a chunk in
                            // transition waits: its completion steps again.
                            Some(Err(_)) => return false,
                            None => None,
                        },
                    };
                    let Some(c) = next else {
                        if !self.migrations.jobs[&v].copying.is_empty() {
                            return false; // the last completion steps again
                        }
                        self.start_pivot(now, v, out);
                        return true;
                    };
                    self.start_chunk_copy(now, v, c, false, out);
                }
            }
            MigrationPhase::Committing { seq } => {
                if self.vols[v as usize].journal.durable_seq >= seq {
                    if let Some(at) = job.pause_began_ns {
                        job.stats.pivot_durable_ns = now - at;
                    }
                    self.finish_job(now, v, MigrationPhase::Done, out);
                    // The new home pool, for the next mount.
                    self.write_volume_table(now, out);
                    return false;
                }
                // A commit that failed (no space) is retried by the commit timer, not at
                // every step: restarting it at once failed again at the same instant, forever.
                if self.vols[v as usize].commit.is_none() && !self.logs.nospace.commit_backs_off(v)
                {
                    self.start_commit(now, v, out);
                }
                false
            }
            MigrationPhase::Cancelling => self.cancel_step(now, v, out),
            MigrationPhase::Done | MigrationPhase::Cancelled | MigrationPhase::Failed => false,
        }
    }

    /// Copy the next chunk, or end the pass.
    fn copy_step(&mut self, now: u64, v: u32, pass: u32, out: &mut Outputs) -> bool {
        // A `cache` volume's cache is cleaned and dropped first (`cache_drain.rs`).
        if !self.cache_drained(now, v, out) {
            return false; // its writebacks' and writes' completions step again
        }
        // A logged volume's log is written back home first (`log_drain.rs`).
        if !self.log_drained(now, v, out) {
            return false; // its write-backs', appends' and writes' completions step again
        }
        if !self.region_durable(v) {
            return false; // the table write's completion steps again
        }
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        job.may_write_dst = true;
        let window = if pass == 1 {
            1
        } else {
            job.params.copy_window_chunks as usize
        };
        loop {
            let job = &self.migrations.jobs[&v];
            if job.cancel_wanted {
                return true;
            }
            if job.copying.len() >= window {
                return false; // a completion steps again
            }
            let next = if pass == 1 {
                self.next_uncopied(v)
            } else {
                self.next_dirty(v)
            };
            match next {
                Some(Ok(c)) => {
                    if !self.start_chunk_copy(now, v, c, true, out) {
                        // Over the rate (the timer steps again) or failed (cancel).
                        return self.migrations.jobs[&v].cancel_wanted;
                    }
                }
                Some(Err(_)) => return false, // only busy chunks left: a completion retries
                None if !self.migrations.jobs[&v].copying.is_empty() => return false,
                None => return self.end_pass(now, v, pass, out),
            }
        }
    }

    /// After a pass: DBT goes round again while the dirty set shrinks; then pause.
    fn end_pass(&mut self, now: u64, v: u32, pass: u32, out: &mut Outputs) -> bool {
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        job.stats.image_copied_ns.get_or_insert(now);
        if job.scheme == Scheme::Dbt {
            let dirty = job.dirty.bytes();
            if dirty > 0 && dirty < job.last_dirty_bytes && pass < job.params.dbt_max_passes {
                job.last_dirty_bytes = dirty;
                job.phase = MigrationPhase::Copying { pass: pass + 1 };
                job.stats.pass = pass + 1;
                job.cursor = 0;
                return true;
            }
        }
        // The destination holds the whole copy unflushed: flush it while the volume still
        // runs, so the pivot's paused commit flushes only what the drain adds.
        if !self.presynced(now, v, out) {
            return false;
        }
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        job.phase = MigrationPhase::Draining;
        job.stats.paused_ns = Some(now);
        job.pause_began_ns = Some(now);
        true
    }

    /// The next chunk of the first pass: Ok(chunk), Err if only busy chunks are left.
    fn next_uncopied(&mut self, v: u32) -> Option<Result<u64, u64>> {
        let late: Vec<u64> = self.migrations.jobs[&v].late.iter().copied().collect();
        for c in late {
            if !self.chunk_busy(v, c) {
                self.migrations
                    .jobs
                    .get_mut(&v)
                    .expect("exists")
                    .late
                    .remove(&c);
                return Some(Ok(c));
            }
        }
        loop {
            let job = self.migrations.jobs.get_mut(&v).expect("exists");
            let c = job.cursor;
            if c >= job.progress.len() as u64 {
                return if job.late.is_empty() {
                    None
                } else {
                    Some(Err(c))
                };
            }
            job.cursor += 1;
            if job.progress[c as usize] != Progress::Uncopied {
                continue;
            }
            let vol = &self.vols[v as usize];
            let to = job.params.to;
            match vol.resolve(vol.map.get(c), c) {
                // Nothing to copy: unmapped, or already on the destination.
                None => job.progress[c as usize] = Progress::Copied,
                Some((p, _)) if p == to => job.progress[c as usize] = Progress::Copied,
                Some(_) => {
                    if self.chunk_busy(v, c) {
                        self.migrations
                            .jobs
                            .get_mut(&v)
                            .expect("exists")
                            .late
                            .insert(c);
                        continue;
                    }
                    return Some(Ok(c));
                }
            }
        }
    }

    /// While paused: a chunk still uncopied (allocated on the source behind the copy by
    /// a write in flight at the pause). Unmapped ones and those on the destination have
    /// nothing to copy. Nothing is in flight once drained, so none is busy. A sweep from
    /// where the last call stopped (`sweep.rs`), not a scan from chunk 0 per copy.
    fn next_left_uncopied(&mut self, v: u32) -> Option<u64> {
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        let vol = &self.vols[v as usize];
        let to = job.params.to;
        let late = &mut job.late;
        job.left.next(&mut job.progress, |c| {
            late.remove(&c);
            matches!(vol.resolve(vol.map.get(c), c), Some((p, _)) if p != to)
        })
    }

    /// DBT: the next chunk with dirty blocks: Ok(chunk), Err if only busy ones are left. A
    /// write marks its blocks dirty when it is routed but may wait in the pool's queue:
    /// copying the blocks before it lands would clear its bits and copy the old data, so a
    /// busy chunk is passed over (`late`) and taken once its writes are done.
    fn next_dirty(&mut self, v: u32) -> Option<Result<u64, u64>> {
        let late: Vec<u64> = self.migrations.jobs[&v].late.iter().copied().collect();
        for c in late {
            if !self.chunk_busy(v, c) && !self.migrations.jobs[&v].copying_chunk(c) {
                let job = self.migrations.jobs.get_mut(&v).expect("exists");
                job.late.remove(&c);
                if job.dirty.is_dirty(c) {
                    return Some(Ok(c));
                }
            }
        }
        loop {
            let job = self.migrations.jobs.get_mut(&v).expect("exists");
            let c = job.cursor;
            if c >= job.dirty.chunks() {
                return if job.late.is_empty() {
                    None
                } else {
                    Some(Err(c))
                };
            }
            job.cursor += 1;
            if !job.dirty.is_dirty(c) || job.copying_chunk(c) {
                // (Written again while its copy is in flight: the new bits wait for the
                // next pass, or the pause's final copy, as when one chunk went at a time.)
                continue;
            }
            if self.chunk_busy(v, c) {
                let job = self.migrations.jobs.get_mut(&v).expect("exists");
                job.late.insert(c);
                continue;
            }
            return Some(Ok(c));
        }
    }

    /// Whether chunk `c` cannot be copied now: writes in flight or a chunk state in
    /// transition. DBT waits for writes too: one routed while the chunk was uncopied (or
    /// before the job) marked nothing dirty, so a copy reading under it would lose it.
    fn chunk_busy(&self, v: u32, c: u64) -> bool {
        self.vols[v as usize]
            .activity
            .get(&c)
            .is_some_and(|a| a.state != ChunkState::Idle || a.writes_in_flight > 0)
    }

    /// What to copy of chunk `c` now: the whole chunk (first pass) or DBT's dirty blocks
    /// (clearing them; returned too, to be marked again if the copy must wait), less
    /// ranges whose newest data is on the destination already (`Moved` entries an
    /// interrupted LR or SLR job left, which a DBT job adopts: a dirty block that holds
    /// one must not copy the older source data over it). Dirty blocks that form
    /// `coalesce_runs` runs or more are copied as the whole chunk: one read and one write
    /// instead of one per run. Copying the clean blocks again is safe: the source holds
    /// their newest data as it does the dirty blocks' (DBT writes only to the source, and
    /// a chunk with writes in flight is not copied), so the destination gets what it has.
    fn ranges_to_copy(&mut self, v: u32, c: u64) -> (Ranges, Ranges) {
        let cb = self.cfg.chunk_bytes;
        let bug = self.bug_is(InjectedBug::DbtCoalesceSkipsLastRun);
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        let mut taken = Ranges::new();
        let want: Ranges = if job.progress[c as usize] == Progress::Copied {
            taken = job.dirty.take(c);
            if job.params.coalesces(taken.len()) {
                match taken.last() {
                    // The injected bug: the copy stops where the last run starts.
                    Some(&(last, _)) if bug => smallvec![(0, last)],
                    _ => smallvec![(0, cb)],
                }
            } else {
                taken.clone()
            }
        } else {
            smallvec![(0, cb)]
        };
        let base = c * cb;
        let vol = &self.vols[v as usize];
        let moved: Vec<(u64, u64)> = vol
            .overlay
            .overlapping(base, base + cb)
            .filter(|(_, _, o)| matches!(o, Overlay::Moved { .. }))
            .map(|(s, e, _)| (s.max(base) - base, e.min(base + cb) - base))
            .collect();
        let mut r = Ranges::new();
        for (off, len) in want {
            let mut pos = off;
            for &(s, e) in moved.iter().filter(|&&(s, e)| s < off + len && e > off) {
                if s > pos {
                    r.push((pos, s - pos));
                }
                pos = pos.max(e);
            }
            if pos < off + len {
                r.push((pos, off + len - pos));
            }
        }
        (r, taken)
    }

    /// Start copying chunk `c` (or its dirty blocks) to the destination. `limited`: the
    /// rate cap applies (not while the volume is paused). False if the next chunk must
    /// wait: over the rate (the timer is set), or the job must cancel.
    fn start_chunk_copy(
        &mut self,
        now: u64,
        v: u32,
        c: u64,
        limited: bool,
        out: &mut Outputs,
    ) -> bool {
        let cb = self.cfg.chunk_bytes;
        let (ranges, taken) = self.ranges_to_copy(v, c);
        let bytes: u64 = ranges.iter().map(|r| r.1).sum();
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        if limited && let Err(at) = job.take_rate(now, cb, bytes) {
            // Not now: put the chunk back in line, with the dirty blocks it had (not the
            // whole chunk a coalesced copy would have copied).
            for &(off, len) in &taken {
                job.dirty.mark(c, off, len);
            }
            job.cursor = job.cursor.min(c);
            self.migration_wake_at(at);
            return false;
        }
        let recopy = job.progress[c as usize] == Progress::Copied;
        job.stats.whole_chunk_copies += u64::from(job.params.coalesces(taken.len()));
        if bytes == 0 {
            // Everything of the chunk was written to the destination already.
            let first = job.progress[c as usize] != Progress::Copied;
            job.progress[c as usize] = Progress::Copied;
            if first && job.scheme == Scheme::Lr {
                self.lr_switch(now, v, c);
            }
            return true;
        }
        let Some(dpc) = self.migration_dst_chunk(v, c) else {
            let job = self.migrations.jobs.get_mut(&v).expect("exists");
            job.error
                .get_or_insert("the destination pool is full".into());
            job.cancel_wanted = true;
            return false;
        };
        let vol = &mut self.vols[v as usize];
        let Some((sp, spc)) = vol.resolve(vol.map.get(c), c) else {
            return true;
        };
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        let dst = job.params.to;
        let dbt = job.scheme == Scheme::Dbt;
        if !recopy {
            job.progress[c as usize] = Progress::Copying;
        }
        job.stats.copied_bytes += bytes;
        if recopy {
            job.stats.redundant_bytes += bytes;
            if self.pools[dst.0 as usize].cfg.medium == Medium::Ssd {
                job.stats.ssd_write_bytes += bytes;
            }
        }
        let pieces = self.issue_copy(now, v, c, (sp, spc), (dst, dpc), &ranges, out);
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        job.copying.push(Copying {
            chunk: c,
            pieces,
            failed: false,
            back: false,
        });
        if !dbt {
            // Writes to the chunk wait for the copy (the paper's "being copied" rule).
            self.vols[v as usize].activity.entry(c).or_default().state = ChunkState::Migrating;
        }
        true
    }

    /// Copy `ranges` of chunk `c` between two physical chunks in buffer-sized pieces.
    #[allow(clippy::too_many_arguments)]
    fn issue_copy(
        &mut self,
        now: u64,
        v: u32,
        c: u64,
        from: (PoolId, u64),
        to: (PoolId, u64),
        ranges: &Ranges,
        out: &mut Outputs,
    ) -> u32 {
        let cb = self.cfg.chunk_bytes;
        let buf = self.migrations.jobs[&v].params.buffer_bytes;
        let mut pieces = 0;
        for &(off, len) in ranges {
            let mut o = off;
            while o < off + len {
                let n = buf.min(off + len - o);
                self.start_copy(
                    now,
                    CopyFor::Migration { vol: v, chunk: c },
                    (from.0, chunk_offset(from.1, cb) + o),
                    (to.0, chunk_offset(to.1, cb) + o),
                    n,
                    out,
                );
                pieces += 1;
                o += n;
            }
        }
        pieces
    }

    /// One piece of a chunk copy finished.
    pub(crate) fn migration_copy_done(
        &mut self,
        now: u64,
        v: u32,
        c: u64,
        _copy: &Copy,
        result: Result<(), Errno>,
        out: &mut Outputs,
    ) {
        let Some(job) = self.migrations.jobs.get_mut(&v) else {
            return;
        };
        let Some(i) = job.copying.iter().position(|cp| cp.chunk == c) else {
            return;
        };
        let cp = &mut job.copying[i];
        cp.pieces -= 1;
        cp.failed |= result.is_err();
        if cp.pieces > 0 {
            return;
        }
        let cp = job.copying.swap_remove(i);
        if cp.failed && cp.back {
            // The destination data must still go back: try again after the commit
            // interval (the period of every retry of what failed for space), not at once.
            let at = now + self.cfg.commit_interval_ns.max(1);
            job.copy_back_retry_at_ns = Some(at);
            self.migration_wake_at(at);
        }
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        if cp.failed {
            job.error
                .get_or_insert(format!("copying chunk {c} failed (I/O error)"));
            job.cancel_wanted = true;
            if job.progress[c as usize] == Progress::Copying {
                job.mark_uncopied(c);
            }
        } else if cp.back {
            self.copied_back(now, v, c);
        } else {
            if job.progress[c as usize] == Progress::Copying {
                job.progress[c as usize] = Progress::Copied;
                job.stats.chunks_copied += 1;
            }
            if job.scheme == Scheme::Lr {
                self.lr_switch(now, v, c);
            }
        }
        if let Some(a) = self.vols[v as usize].activity.get_mut(&c)
            && a.state == ChunkState::Migrating
        {
            a.state = ChunkState::Idle;
        }
        self.wake_waiters(now, v, c, out);
        self.migration_step(now, out);
    }

    /// LR: a copied chunk is served by the destination from now on; its `Moved` entries
    /// are folded into the map switch. The source stays allocated until the job ends.
    fn lr_switch(&mut self, now: u64, v: u32, c: u64) {
        let cb = self.cfg.chunk_bytes;
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        let Some(dpc) = job.dst[c as usize] else {
            return;
        };
        let to = job.params.to;
        job.kept_src[c as usize] = Some(self.vols[v as usize].map.get(c));
        self.switch_chunk(v, c, ChunkLoc::At(to, dpc), false);
        self.clear_moved(v, c * cb, (c + 1) * cb);
        self.arm_commit_timer(now);
    }

    /// Remove `Moved` entries in `[start, end)` (journaled). Returns the last record.
    fn clear_moved(&mut self, v: u32, start: u64, end: u64) -> Option<u64> {
        let vol = &mut self.vols[v as usize];
        let moved: Vec<(u64, u64)> = vol
            .overlay
            .overlapping(start, end)
            .filter(|(_, _, o)| matches!(o, Overlay::Moved { .. }))
            .map(|(s, e, _)| (s.max(start), e.min(end)))
            .collect();
        let mut last = None;
        for (s, e) in moved {
            vol.overlay.remove(s, e);
            last = Some(
                vol.journal
                    .append(Record::OverlayClear { start: s, end: e }),
            );
        }
        last
    }

    /// Whether a paused volume has nothing in flight that the pivot must wait for.
    pub(super) fn drained(&self, v: u32) -> bool {
        let job = &self.migrations.jobs[&v];
        let dups_done = self.bug_is(InjectedBug::MirrorAcksEarly)
            || (job.dups_in_flight == 0 && job.dup_queue.is_empty());
        job.copying.is_empty()
            && dups_done
            && job.delayed.is_empty()
            && !self
                .reqs
                .iter()
                .any(|(_, r)| r.vol == v && r.stage == ReqStage::Data)
    }

    /// Switch every chunk to the destination and drop the `Moved` entries in one set of
    /// records, start the commit that makes them durable, and resume the volume on the
    /// switched map (`resume_before_durable`).
    fn start_pivot(&mut self, now: u64, v: u32, out: &mut Outputs) {
        let cb = self.cfg.chunk_bytes;
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        let to = job.params.to;
        let dst = std::mem::take(&mut job.dst);
        let kept = std::mem::take(&mut job.kept_src);
        let mut frees = Vec::new();
        for (c, d) in dst.iter().enumerate() {
            let c = c as u64;
            let Some(dpc) = *d else { continue };
            let vol = &self.vols[v as usize];
            match vol.resolve(vol.map.get(c), c) {
                Some((p, pc)) if p == to => {
                    if let Some(ChunkLoc::At(p, pc)) = kept[c as usize] {
                        frees.push((p, pc));
                    }
                    // A copy of a chunk that was on the destination already is no one's.
                    if pc != dpc && !self.in_thick_region(v, to, dpc) {
                        frees.push((to, dpc));
                    }
                }
                Some(_) => {
                    self.switch_chunk(v, c, ChunkLoc::At(to, dpc), true);
                }
                None if !self.in_thick_region(v, to, dpc) => frees.push((to, dpc)),
                None => {}
            }
        }
        let size = self.vols[v as usize].rec.size_bytes;
        self.clear_moved(v, 0, size.div_ceil(cb) * cb);
        let vol = &mut self.vols[v as usize];
        let seq = vol.journal.next_seq - 1;
        for (p, pc) in frees {
            self.defer_free(
                Freed::Chunks {
                    pool: p,
                    first: pc,
                    n: 1,
                },
                smallvec![(v, seq)],
            );
        }
        // New chunks of the volume go to its new pool from now on. A thick volume's home
        // changes with its region once the switch is durable (`thick_job_over`): a table
        // written meanwhile must still name the old one, which the map may still use.
        if self.vols[v as usize].rec.provisioning == crate::config::Provisioning::Thin {
            self.vols[v as usize].rec.home_pool = to;
        }
        self.pivot_flushes_only(v, to);
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        job.phase = MigrationPhase::Committing { seq };
        if self.vols[v as usize].commit.is_none()
            && self.vols[v as usize].journal.durable_seq < seq
            && !self.logs.nospace.commit_backs_off(v)
        {
            self.start_commit(now, v, out);
        }
        self.resume_before_durable(now, v, out);
    }

    /// The pivot's records are made (they need not be durable yet): let the volume's
    /// requests go on, rather than wait for the commit (a destination flush and a journal
    /// write: 1-15 ms on pool files), or without bound if that commit fails for space (DST
    /// seed 1058). This is as safe as any change of the map not yet durable: requests are
    /// served by the switched map (every chunk on the destination, whose copy is
    /// complete); a FLUSH or an FUA write waits in the commit round after the pivot's
    /// (rounds of a volume are serial), so it completes only once the switch is durable;
    /// until then a power loss mounts the source map, whose chunks stay allocated and hold
    /// every write flushed before the pause. Only writes made since and not yet flushed can
    /// be lost, as always. Test `a_power_loss_at_each_step_of_the_pivot_keeps_every_flushed_write`
    /// issues writes and FLUSHes in this window; injected bug `pivot-flush-early`.
    fn resume_before_durable(&mut self, now: u64, v: u32, out: &mut Outputs) {
        let Some(job) = self.migrations.jobs.get_mut(&v) else {
            return;
        };
        if job.resumed_before_durable {
            return;
        }
        job.resumed_before_durable = true;
        self.unpause(now, v, out);
    }

    /// The pivot's commit flushes only the destination, not what the VM wrote to the
    /// source since the last pre-sync round (one fdatasync of the source pool file less
    /// in the pause). Crash safety: once the records switching every chunk are durable,
    /// nothing the volume maps is on the source, so its unflushed writes are no one's
    /// data; every write the VM wrote before the pause is on the destination too (copied,
    /// mirrored, or written there) and this commit flushes the destination before its
    /// journal write. Until the records are durable a power loss mounts the source map,
    /// whose chunks stay allocated (freed only after the switch is durable) and hold every
    /// write a completed FLUSH made durable; what is lost is only unflushed, as a FLUSH
    /// waiting in the pause completes with this commit, after the destination's flush.
    /// Test `a_power_loss_at_each_step_of_the_pivot_keeps_every_flushed_write`. Should a
    /// mapped chunk remain off the destination (none should), every pool is flushed.
    fn pivot_flushes_only(&mut self, v: u32, to: PoolId) {
        let vol = &mut self.vols[v as usize];
        let off_dst =
            (0..vol.chunks).any(|c| vol.resolve(vol.map.get(c), c).is_some_and(|(p, _)| p != to));
        if !off_dst {
            vol.dirty_pools &= 1 << to.0;
        }
    }

    /// Let requests of a paused volume go again.
    fn unpause(&mut self, now: u64, v: u32, out: &mut Outputs) {
        let Some(job) = self.migrations.jobs.get_mut(&v) else {
            return;
        };
        if let Some(at) = job.stats.paused_ns.take() {
            job.stats.downtime_ns += now - at;
        }
        let parked = std::mem::take(&mut job.parked);
        for r in parked {
            self.submit(now, r, out);
        }
    }

    /// The job is over: keep its status, resume the volume.
    pub(super) fn finish_job(
        &mut self,
        now: u64,
        v: u32,
        phase: MigrationPhase,
        out: &mut Outputs,
    ) {
        let Some(mut job) = self.migrations.jobs.remove(&v) else {
            return;
        };
        job.phase = phase;
        job.stats.finished_ns = Some(now);
        if let Some(base) = job.thick_base {
            self.thick_job_over(v, job.params.to, base, phase == MigrationPhase::Done);
        }
        if phase == MigrationPhase::Done {
            self.cache_rehome(v);
        }
        self.record_job(now, v, None, None, out);
        self.thick_table_durable(now);
        if let Some(at) = job.stats.paused_ns.take() {
            job.stats.downtime_ns += now - at;
        }
        let parked = std::mem::take(&mut job.parked);
        let st = self.status_of(&job);
        self.migrations.finished.insert(v, st);
        for r in parked {
            self.submit(now, r, out);
        }
    }

    /// Cancel: LR's switched chunks and LR/SLR `Moved` ranges are copied back to the
    /// source one chunk at a time (writes to it wait); destination chunks are then freed.
    fn cancel_step(&mut self, now: u64, v: u32, out: &mut Outputs) -> bool {
        let cb = self.cfg.chunk_bytes;
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        if job.copy_back_retry_at_ns.is_some_and(|t| now < t) {
            return false; // the timer steps again
        }
        job.copy_back_retry_at_ns = None;
        if !job.copying.is_empty()
            || job.dups_in_flight > 0
            || !job.dup_queue.is_empty()
            || !job.delayed.is_empty()
        {
            return false;
        }
        let to = job.params.to;
        let home = job.from.first().copied().unwrap_or(to);
        while let Some(job) = self.migrations.jobs.get_mut(&v)
            && job.cursor < job.progress.len() as u64
        {
            let c = job.cursor;
            let vol = &self.vols[v as usize];
            let on_dst = vol.resolve(vol.map.get(c), c).is_some_and(|(p, _)| p == to);
            let switched = on_dst && job.kept_src[c as usize].is_some();
            let moved = vol
                .overlay
                .overlapping(c * cb, (c + 1) * cb)
                .any(|(_, _, o)| matches!(o, Overlay::Moved { .. }));
            // A write in flight may still add a `Moved` entry (or needs the chunk).
            if self.chunk_busy(v, c) {
                return false; // a completion retries
            }
            let job = self.migrations.jobs.get_mut(&v).expect("exists");
            if !switched && !moved {
                job.cursor += 1;
                // Nothing of the chunk's newest data is on its destination copy.
                // (After the records that dropped any entry into it are durable.)
                // (A thick volume's slots go with the whole region, `thick_job_over`.)
                if let Some(dpc) = job.dst[c as usize].take()
                    && !on_dst
                    && job.thick_base.is_none()
                {
                    let seq = self.vols[v as usize].journal.next_seq - 1;
                    self.defer_free(
                        Freed::Chunks {
                            pool: to,
                            first: dpc,
                            n: 1,
                        },
                        smallvec![(v, seq)],
                    );
                }
                continue;
            }
            self.start_copy_back(now, v, c, switched, home, out);
            return false;
        }
        // Writes that were in flight to the destination when the cancel began may have
        // added `Moved` entries behind the cursor: sweep again until none is left.
        let size = self.vols[v as usize].rec.size_bytes;
        let any_moved = self.vols[v as usize]
            .overlay
            .overlapping(0, size)
            .any(|(_, _, o)| matches!(o, Overlay::Moved { .. }));
        let writing = self.vols[v as usize]
            .activity
            .values()
            .any(|a| a.writes_in_flight > 0);
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        if any_moved || (writing && matches!(job.scheme, Scheme::Lr | Scheme::Slr)) {
            job.cursor = 0;
            return any_moved;
        }
        if job.thick_base.is_some() {
            let journal = &self.vols[v as usize].journal;
            let (next, durable) = (journal.next_seq - 1, journal.durable_seq);
            let job = self.migrations.jobs.get_mut(&v).expect("exists");
            let seq = *job.cancel_records_seq.get_or_insert(next);
            if durable < seq {
                if self.vols[v as usize].commit.is_none() && !self.logs.nospace.commit_backs_off(v)
                {
                    self.start_commit(now, v, out);
                }
                return false; // the commit's completion steps again
            }
        }
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        let failed = job.error.is_some();
        let phase = if failed {
            MigrationPhase::Failed
        } else {
            MigrationPhase::Cancelled
        };
        self.finish_job(now, v, phase, out);
        false
    }

    /// Copy chunk `c`'s destination data back to the source: the whole chunk if LR
    /// switched it, else its `Moved` ranges.
    fn start_copy_back(
        &mut self,
        now: u64,
        v: u32,
        c: u64,
        switched: bool,
        home: PoolId,
        out: &mut Outputs,
    ) {
        let cb = self.cfg.chunk_bytes;
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        let vol = &self.vols[v as usize];
        let (from, target, ranges) = if switched {
            let Some((dp, dpc)) = vol.resolve(vol.map.get(c), c) else {
                return;
            };
            let target = match job.kept_src[c as usize] {
                Some(ChunkLoc::At(p, pc)) => (p, pc),
                // A thick volume's chunk goes back to its home slot.
                Some(ChunkLoc::Home) => match vol.resolve(ChunkLoc::Home, c) {
                    Some(t) => t,
                    None => return,
                },
                _ => match self.pools[home.0 as usize].alloc.allocate(c, false) {
                    Some(pc) => {
                        job.kept_src[c as usize] = Some(ChunkLoc::At(home, pc));
                        (home, pc)
                    }
                    None => {
                        job.error
                            .get_or_insert("cancel: the source pool is full".into());
                        job.cursor += 1;
                        return;
                    }
                },
            };
            let mut r = Ranges::new();
            r.push((0, cb));
            ((dp, dpc), target, r)
        } else {
            let Some(target) = vol.resolve(vol.map.get(c), c) else {
                return;
            };
            let mut r = Ranges::new();
            let mut from = None;
            for (s, e, o) in vol.overlay.overlapping(c * cb, (c + 1) * cb) {
                if let Overlay::Moved { pool, dev_offset } = o {
                    let s2 = s.max(c * cb);
                    let e2 = e.min((c + 1) * cb);
                    let dev = dev_offset + (s2 - s);
                    from = Some((pool, (dev - crate::layout::DATA_START_BYTES) / cb));
                    r.push((s2 - c * cb, e2 - s2));
                }
            }
            let Some(from) = from else { return };
            (from, target, r)
        };
        let pieces = self.issue_copy(now, v, c, from, target, &ranges, out);
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        job.copying.push(Copying {
            chunk: c,
            pieces,
            failed: false,
            back: true,
        });
        self.vols[v as usize].activity.entry(c).or_default().state = ChunkState::Migrating;
    }

    /// A chunk's destination data is back on the source: point there and free the copy.
    fn copied_back(&mut self, now: u64, v: u32, c: u64) {
        let cb = self.cfg.chunk_bytes;
        let job = self.migrations.jobs.get_mut(&v).expect("exists");
        let to = job.params.to;
        let vol = &self.vols[v as usize];
        let on_dst = vol.resolve(vol.map.get(c), c).is_some_and(|(p, _)| p == to);
        if on_dst && let Some(src) = job.kept_src[c as usize].take() {
            job.dst[c as usize] = None;
            // Frees the destination chunk once the switch back is durable.
            self.switch_chunk(v, c, src, true);
        } else {
            // The copied-back data must be flushed before the clear is durable.
            let vol = &mut self.vols[v as usize];
            if let Some((p, _)) = vol.resolve(vol.map.get(c), c) {
                vol.dirty_pools |= 1 << p.0;
            }
            let seq = self.clear_moved(v, c * cb, (c + 1) * cb);
            let job = self.migrations.jobs.get_mut(&v).expect("exists");
            if let (Some(dpc), Some(seq)) = (job.dst[c as usize].take(), seq)
                && job.thick_base.is_none()
            {
                self.defer_free(
                    Freed::Chunks {
                        pool: to,
                        first: dpc,
                        n: 1,
                    },
                    smallvec![(v, seq)],
                );
            }
        }
        self.arm_commit_timer(now);
    }
}
