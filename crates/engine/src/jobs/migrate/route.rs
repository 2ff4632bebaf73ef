//! Request routing while a volume migrates, by scheme (seed 004, section 5):
//!
//! | scheme | uncopied chunk | chunk being copied | copied chunk |
//! |---|---|---|---|
//! | dbt | source | source, marks dirty | source, marks dirty |
//! | mirror | source | waits | source and destination, completes when both do |
//! | lr | destination (`Moved`) | waits | destination (map switched) |
//! | slr | source | waits | writes to the destination (`Moved`), reads by it |
//! | aio | source | waits | source (completes) and a duplicate to the destination |
//!
//! Reads follow the map and the overlay, so a `Moved` range reads from the destination.

use bytes::Bytes;

use super::state::Dup;
use super::{MigrationPhase, Progress, Scheme};
use crate::chunkmap::ChunkLoc;
use crate::config::Medium;
use crate::engine::{Engine, OpSpec, Owner, SINGLE};
use crate::inject::InjectedBug;
use crate::journal::Record;
use crate::layout::chunk_offset;
use crate::overlay::Overlay;
use crate::types::{DevKind, Errno, IoClass, Outputs, PoolId};
use crate::volume::Waiter;

impl Engine {
    /// Route write piece `[s, e)` of request `key` if the migration takes it; false sends
    /// it down the ordinary path (to the chunk's mapped location).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn migration_write_piece(
        &mut self,
        now: u64,
        key: usize,
        v: u32,
        s: u64,
        e: u64,
        kind: DevKind,
        payload: &Option<Bytes>,
        out: &mut Outputs,
    ) -> bool {
        let cb = self.cfg.chunk_bytes;
        let c = s / cb;
        let dbt_bug = self.bug_is(InjectedBug::DbtMissesDirty);
        let slr_bug = self.bug_is(InjectedBug::SlrWritesSource);
        let Some(job) = self.migrations.jobs.get_mut(&v) else {
            return false;
        };
        let vol = &self.vols[v as usize];
        let Some((pool, _)) = vol.resolve(vol.map.get(c), c) else {
            return false; // unmapped: the allocation path places it (`migration_place`)
        };
        let dst = job.params.to;
        let prog = job.progress[c as usize];
        let cancelling = job.phase == MigrationPhase::Cancelling || job.cancel_wanted;
        job.stats.vm_write_bytes += e - s;
        if matches!(job.phase, MigrationPhase::Committing { .. }) {
            // Pivoted: `start_pivot` took the destination copies (`dst`) and switched
            // every chunk it had copied to them, so the map sends the piece where it
            // belongs (a chunk allocated since is where the volume's placement put it,
            // `check_pivoted`). Nothing here may index `dst` any more: a chunk off the
            // destination (under `tier-moves-while-migrating`, DST seed 95 with NCQ)
            // panicked here.
            self.count_ssd_write(v, pool, e - s);
            return false;
        }
        let to_dst = match job.scheme {
            Scheme::Dbt => {
                // A chunk already on the destination is not copied, so not dirtied.
                if prog != Progress::Uncopied && pool != dst && !dbt_bug {
                    job.dirty.mark(c, s - c * cb, e - s);
                }
                false
            }
            Scheme::Mirror | Scheme::Aio => {
                if !cancelling && prog == Progress::Copied && pool != dst {
                    if job.scheme == Scheme::Aio && self.aio_delay(now, key, v, s, e) {
                        return true;
                    }
                    self.mirror_dup(now, key, v, c, s, e, kind, payload.clone(), out);
                }
                false
            }
            // Not into a thick volume's new region before its record is durable.
            Scheme::Lr => {
                !cancelling && pool != dst && prog == Progress::Uncopied && job.may_write_dst
            }
            Scheme::Slr => !cancelling && pool != dst && prog == Progress::Copied && !slr_bug,
        };
        let target = if to_dst {
            self.migration_dst_chunk(v, c).map(|pc| (dst, pc))
        } else {
            None
        };
        let Some((dpool, dpc)) = target else {
            self.count_ssd_write(v, pool, e - s);
            return false;
        };
        self.count_ssd_write(v, dpool, e - s);
        let a = self.vols[v as usize].activity.entry(c).or_default();
        a.writes_in_flight += 1;
        a.dst_writes_in_flight += 1;
        // Home writes queued up to now are older than this one (see its completion).
        let home_seq = a.home_seq;
        self.reqs[key].outstanding += 1;
        let dev = chunk_offset(dpc, cb) + (s - c * cb);
        let owner = Owner::MigWrite {
            req: key,
            chunk: c,
            start: s,
            end: e,
            home_seq,
        };
        let spec = OpSpec::new(owner, dpool, kind, IoClass::Foreground);
        self.queue_op(
            now,
            spec.at(dev, e - s).payload(payload.clone()).for_volume(v),
            out,
        );
        true
    }

    fn count_ssd_write(&mut self, v: u32, pool: PoolId, n: u64) {
        let ssd = self.pools[pool.0 as usize].cfg.medium == Medium::Ssd;
        if let Some(j) = self.migrations.jobs.get_mut(&v)
            && ssd
        {
            j.stats.ssd_write_bytes += n;
        }
    }

    /// The destination chunk of logical chunk `c`, allocated on first need.
    pub(crate) fn migration_dst_chunk(&mut self, v: u32, c: u64) -> Option<u64> {
        let job = self.migrations.jobs.get_mut(&v)?;
        if let Some(pc) = job.dst[c as usize] {
            return Some(pc);
        }
        if let Some(base) = job.thick_base {
            // A thick volume's chunk has its slot in the new region.
            job.dst[c as usize] = Some(base + c);
            return Some(base + c);
        }
        let pc = self.pools[job.params.to.0 as usize]
            .alloc
            .allocate(c, false)?;
        job.dst[c as usize] = Some(pc);
        Some(pc)
    }

    /// Mirror or AIO: the copy of a write for the destination. Mirror's holds the request
    /// (it completes when both writes do); AIO's is detached and ordered per chunk.
    #[allow(clippy::too_many_arguments)]
    fn mirror_dup(
        &mut self,
        now: u64,
        key: usize,
        v: u32,
        c: u64,
        s: u64,
        e: u64,
        kind: DevKind,
        payload: Option<Bytes>,
        out: &mut Outputs,
    ) {
        let cb = self.cfg.chunk_bytes;
        let Some(job) = self.migrations.jobs.get_mut(&v) else {
            return;
        };
        let Some(dpc) = job.dst[c as usize] else {
            return;
        };
        let dst = job.params.to;
        let dev = chunk_offset(dpc, cb) + (s - c * cb);
        job.stats.mirrored_bytes += e - s;
        job.stats.redundant_bytes += e - s;
        let holds = job.scheme == Scheme::Mirror && !self.bug_is(InjectedBug::MirrorAcksEarly);
        self.count_ssd_write(v, dst, e - s);
        if holds {
            self.reqs[key].outstanding += 1;
            self.issue_dup(now, v, c, key, dst, dev, e - s, kind, payload, out);
            return;
        }
        let job = self.migrations.jobs.get_mut(&v).expect("checked");
        let src_faster = self.pools[dst.0 as usize].cfg.medium == Medium::Hdd;
        let not_before_ns = if !src_faster && job.dups_in_flight > job.params.aio_threshold {
            job.stats.aio_delays += 1;
            now + job.params.aio_delay_ns
        } else {
            0
        };
        job.dup_queue.push_back(Dup {
            chunk: c,
            dev,
            len: e - s,
            kind,
            payload,
            not_before_ns,
        });
        self.pump_dups(now, v, out);
    }

    /// AIO with the source the faster pool: while too many duplicates are unfinished,
    /// the write waits `aio_delay_ns` before going on. True if it was held back.
    fn aio_delay(&mut self, now: u64, key: usize, v: u32, s: u64, e: u64) -> bool {
        if self.migrations.bypass_delay {
            return false;
        }
        let Some(job) = self.migrations.jobs.get_mut(&v) else {
            return false;
        };
        let dst_slow = self.pools[job.params.to.0 as usize].cfg.medium == Medium::Hdd;
        if !dst_slow || job.unfinished_dups() <= job.params.aio_threshold as usize {
            return false;
        }
        job.stats.vm_write_bytes -= e - s; // counted again when it goes on
        job.stats.aio_delays += 1;
        let at = now + job.params.aio_delay_ns;
        job.delayed.push_back((
            at,
            Waiter {
                req: key,
                start: s,
                end: e,
            },
        ));
        self.reqs[key].outstanding += 1;
        self.migration_wake_at(at);
        true
    }

    /// Issue queued AIO duplicates whose chunk has none in flight and whose time came.
    pub(crate) fn pump_dups(&mut self, now: u64, v: u32, out: &mut Outputs) {
        let ordered = !self.bug_is(InjectedBug::AioUnorderedDups);
        let Some(job) = self.migrations.jobs.get_mut(&v) else {
            return;
        };
        let dst = job.params.to;
        let mut i = 0;
        let mut wake = None;
        let mut go = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        while i < job.dup_queue.len() {
            let d = &job.dup_queue[i];
            // Only the oldest waiting duplicate of a chunk may go (order per chunk).
            if ordered && (job.dup_busy.contains(&d.chunk) || !seen.insert(d.chunk)) {
                i += 1;
                continue;
            }
            if d.not_before_ns > now {
                wake = Some(wake.map_or(d.not_before_ns, |w: u64| w.min(d.not_before_ns)));
                i += 1;
                continue;
            }
            let d = job.dup_queue.remove(i).expect("in range");
            job.dup_busy.insert(d.chunk);
            go.push(d);
        }
        for d in go {
            self.issue_dup(
                now, v, d.chunk, SINGLE, dst, d.dev, d.len, d.kind, d.payload, out,
            );
        }
        if let Some(w) = wake {
            self.migration_wake_at(w);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn issue_dup(
        &mut self,
        now: u64,
        v: u32,
        c: u64,
        req: usize,
        dst: PoolId,
        dev: u64,
        len: u64,
        kind: DevKind,
        payload: Option<Bytes>,
        out: &mut Outputs,
    ) {
        if let Some(job) = self.migrations.jobs.get_mut(&v) {
            job.dups_in_flight += 1;
        }
        let owner = Owner::MigDup {
            vol: v,
            chunk: c,
            req,
        };
        let spec = OpSpec::new(owner, dst, kind, IoClass::Foreground);
        self.queue_op(now, spec.at(dev, len).payload(payload).for_volume(v), out);
    }

    /// A duplicate landed. An error fails the job (the source is authoritative), never
    /// the VM's write.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn migration_dup_done(
        &mut self,
        now: u64,
        v: u32,
        c: u64,
        req: usize,
        pool: u16,
        result: Result<(), Errno>,
        out: &mut Outputs,
    ) {
        if let Some(job) = self.migrations.jobs.get_mut(&v) {
            job.dups_in_flight -= 1;
            if req == SINGLE {
                job.dup_busy.remove(&c);
            }
            if let Err(e) = result {
                job.error
                    .get_or_insert(format!("a mirrored write to the destination failed: {e:?}"));
                job.cancel_wanted = true;
            }
        }
        if result.is_ok() {
            self.vols[v as usize].dirty_pools |= 1 << pool;
        }
        if req != SINGLE {
            self.req_end(now, req, Ok(()), out);
        }
        self.pump_dups(now, v, out);
    }

    /// An LR or SLR write reached the destination: the range's newest data is there now.
    /// `range` is the piece's `(start, end, home_seq)`: the chunk's last home write
    /// queued before it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn migration_dst_write_done(
        &mut self,
        now: u64,
        req: usize,
        v: u32,
        pool: u16,
        dev: u64,
        c: u64,
        range: (u64, u64, u64),
        result: Result<(), Errno>,
        out: &mut Outputs,
    ) {
        let (start, end, home_seq) = range;
        let bug = self.bug_is(InjectedBug::StaleWriteClearsMoved);
        let hides_bug = self.bug_is(InjectedBug::StaleDstWriteHidesHome);
        let vol = &mut self.vols[v as usize];
        // Where home writes queued after this one already wrote, the home has newer data
        // than this write: the range stays there. (After a cancel sends writes home, DST
        // seed 13127: this write's entry hid a newer home write, and the destination,
        // written in place, held a write older than that one, which landed after this
        // write but completed first.)
        let mut ranges = vec![(start, end)];
        if let Some(a) = vol.activity.get_mut(&c) {
            if !hides_bug {
                ranges = a.not_newer_at_home(start, end, home_seq);
            }
            a.writes_in_flight -= 1;
            a.dst_writes_in_flight -= 1;
            if a.writes_in_flight == 0 {
                a.forget_orders();
            } else if a.dst_writes_in_flight == 0 {
                a.newer_at_home.clear();
            }
            // Older writes may still be on their way to the source (queued before the
            // job, or while the chunk's new region was not yet open to it): their
            // completion must not clear the `Moved` entry this write adds below, or the
            // range reads the source's older data again and the chunk's copy takes it
            // to the destination (DST seed 5548: a trim undone by a write the buffer
            // acknowledged before the trim was submitted).
            if result.is_ok() && !bug {
                for &(s, e) in &ranges {
                    a.protect_from_home_writes(home_seq, s, e);
                }
            }
            if a.is_quiet() {
                vol.activity.remove(&c);
            }
        }
        if result.is_err() {
            // The destination failed: the job fails and the piece goes to the source
            // (the job no longer routes), so the VM does not see the destination's error.
            if let Some(job) = self.migrations.jobs.get_mut(&v) {
                job.error
                    .get_or_insert(format!("a write to the destination failed: {:?}", result));
                job.cancel_wanted = true;
            }
            let w = Waiter { req, start, end };
            self.resume_write_piece(now, w, v, out);
            self.wake_waiters(now, v, c, out);
            return;
        }
        for (s, e) in ranges {
            let value = Overlay::Moved {
                pool: PoolId(pool),
                dev_offset: dev + (s - start),
            };
            vol.overlay.insert(s, e, value);
            vol.journal.append(Record::Overlay {
                start: s,
                end: e,
                value,
            });
        }
        vol.dirty_pools |= 1 << pool;
        self.arm_commit_timer(now);
        self.req_end(now, req, result, out);
        self.wake_waiters(now, v, c, out);
    }

    /// Where a chunk first written during a migration goes: LR puts every write on the
    /// destination, and so does SLR in the copied region; the others keep the source
    /// authoritative (the chunk is copied like any other).
    pub(crate) fn migration_place(&self, v: u32, c: u64) -> Option<PoolId> {
        let job = self.migrations.jobs.get(&v)?;
        if job.phase == MigrationPhase::Cancelling || job.cancel_wanted {
            return None;
        }
        match job.scheme {
            Scheme::Lr => Some(job.params.to),
            Scheme::Slr if job.progress[c as usize] == Progress::Copied => Some(job.params.to),
            _ => None,
        }
    }

    /// A chunk was allocated while its volume migrates: if it landed off the destination
    /// in the region already copied, it must be copied again.
    pub(crate) fn migration_chunk_allocated(&mut self, v: u32, c: u64) {
        let vol = &self.vols[v as usize];
        let loc = vol.resolve(vol.map.get(c), c);
        let on = loc.map(|(p, _)| p);
        let Some(job) = self.migrations.jobs.get_mut(&v) else {
            return;
        };
        // After the pivot the volume's placement decides (`check_pivoted`).
        if matches!(job.phase, MigrationPhase::Committing { .. }) {
            if let Some((p, pc)) = loc {
                job.placed_after_pivot.insert(c, ChunkLoc::At(p, pc));
            }
            return;
        }
        if on != Some(job.params.to) && job.progress[c as usize] == Progress::Copied {
            job.mark_uncopied(c);
            job.late.insert(c);
        }
    }

    /// Release AIO writes whose delay is over.
    pub(crate) fn release_delayed(&mut self, now: u64, v: u32, out: &mut Outputs) {
        loop {
            let Some(job) = self.migrations.jobs.get_mut(&v) else {
                return;
            };
            match job.delayed.front() {
                // Still too many duplicates unfinished: wait another delay, so the backlog
                // the pivot must drain with the volume paused stays near the threshold
                // (one delay per write let it grow without bound into a slower pool).
                Some(&(at, w))
                    if at <= now && job.unfinished_dups() > job.params.aio_threshold as usize =>
                {
                    job.delayed.pop_front();
                    let again = now + job.params.aio_delay_ns;
                    job.stats.aio_delays += 1;
                    job.delayed.push_back((again, w));
                    self.migration_wake_at(again);
                    return;
                }
                Some(&(at, w)) if at <= now => {
                    job.delayed.pop_front();
                    self.migrations.bypass_delay = true;
                    self.resume_write_piece(now, w, v, out);
                    self.migrations.bypass_delay = false;
                }
                Some(&(at, _)) => {
                    self.migration_wake_at(at);
                    return;
                }
                None => return,
            }
        }
    }
}
