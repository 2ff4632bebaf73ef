//! The request paths: validation, splitting into chunk pieces, reads (stitched from
//! devices, the overlay and zeros), writes in place, first writes that allocate a chunk,
//! and trims.

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;

use crate::chunkmap::ChunkLoc;
use crate::config::Provisioning;
use crate::engine::{Engine, EngineState, OpSpec, Owner, Req, ReqStage, SINGLE};
use crate::inject::InjectedBug;
use crate::journal::Record;
use crate::layout::chunk_offset;
use crate::overlay::Overlay;
use crate::reclaim::Freed;
use crate::types::{DevKind, Errno, IoClass, Outputs, PoolId, ReqKind, VmCompletion, VmRequest};
use crate::volume::{ChunkState, Waiter};

/// Where a piece of a read comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Src {
    Zero,
    Dev(PoolId, u64),
}

impl Engine {
    /// A VM request arrives.
    pub fn submit(&mut self, now: u64, req: VmRequest, out: &mut Outputs) {
        self.submit_inner(now, req, out);
        self.drain_local(now, out);
        self.budget_arm(now);
        self.give_back_arm(now);
        self.budget_settle(out);
    }

    fn submit_inner(&mut self, now: u64, req: VmRequest, out: &mut Outputs) {
        self.last_now_ns = self.last_now_ns.max(now);
        // A migrating volume is paused while its pivot is made durable.
        let req = if self.migrations.is_paused(req.volume.0) {
            match self.migration_park(req) {
                Ok(()) => return,
                Err(r) => r,
            }
        } else {
            req
        };
        if let Err(e) = self.validate(&req) {
            out.completions.push(VmCompletion {
                id: req.id,
                volume: req.volume,
                kind: req.kind,
                result: Err(e),
                data: None,
            });
            return;
        }
        let v = req.volume.0;
        let epoch = self.decay_epoch(now);
        let cb = self.cfg.chunk_bytes;
        let vol = &mut self.vols[v as usize];
        if vol.stats.first_arrival_ns.is_none() {
            vol.stats.first_arrival_ns = Some(now);
        }
        vol.stats.last_arrival_ns = vol.stats.last_arrival_ns.max(now);
        let mut sequential = false;
        if req.kind != ReqKind::Flush {
            let seen = vol
                .monitor
                .observe(epoch, req.kind, req.offset_bytes, req.len_bytes, cb);
            sequential = seen.sequential;
            match vol.rec.placement {
                crate::config::Placement::Hot { .. } => {
                    self.note_hot(v, req.offset_bytes, req.len_bytes, epoch);
                    self.arm_tier_timer(now);
                }
                crate::config::Placement::Cache { .. } => {
                    let (off, len) = (req.offset_bytes, req.len_bytes);
                    self.cache_note(now, v, off, len, seen.stream_bytes, epoch);
                    self.arm_tier_timer(now);
                }
                _ => {}
            }
        }
        let kind = req.kind;
        let key = self.reqs.insert(Req {
            id: req.id,
            vol: v,
            kind,
            offset_bytes: req.offset_bytes,
            len_bytes: req.len_bytes,
            fua: req.fua,
            no_hole: req.no_hole,
            payload: req.payload,
            arrival_ns: now,
            outstanding: 1,
            error: None,
            buf: None,
            single: None,
            stage: ReqStage::Data,
            sequential,
            context: req.context,
        });
        match kind {
            ReqKind::Flush => {
                if self.bug_is(crate::inject::InjectedBug::PivotFlushEarly)
                    && self.migrations.in_pivot_window(v)
                {
                    self.req_end(now, key, Ok(()), out);
                    return;
                }
                self.reqs[key].stage = ReqStage::AwaitCommit;
                self.vols[v as usize].flush_waiters.push(key);
                self.kick_commit(now, v, out);
                return;
            }
            ReqKind::Read => self.start_read(now, key, out),
            ReqKind::Write => self.for_each_piece(now, key, out, Self::write_piece),
            ReqKind::WriteZeroes if req.no_hole => {
                self.for_each_piece(now, key, out, Self::write_piece)
            }
            ReqKind::Trim | ReqKind::WriteZeroes => {
                self.for_each_piece(now, key, out, Self::trim_piece)
            }
        }
        self.req_end(now, key, Ok(()), out);
    }

    fn validate(&self, req: &VmRequest) -> Result<(), Errno> {
        if self.state != EngineState::Ready {
            return Err(Errno::Shutdown);
        }
        let vol = self.vols.get(req.volume.0 as usize).ok_or(Errno::Inval)?;
        // A deleted volume (a hollow slot) is no volume; one being deleted takes nothing
        // new while it waits for what is in flight.
        if vol.rec.deleted {
            return Err(Errno::Inval);
        }
        if self.deletes.refuses(req.volume.0 as usize) {
            return Err(Errno::Shutdown);
        }
        if req.kind == ReqKind::Flush {
            return Ok(());
        }
        let end = req
            .offset_bytes
            .checked_add(req.len_bytes)
            .ok_or(Errno::Inval)?;
        if end > vol.rec.size_bytes {
            return Err(if req.kind == ReqKind::Read {
                Errno::Inval
            } else {
                Errno::NoSpc
            });
        }
        if matches!(req.kind, ReqKind::Read | ReqKind::Write)
            && req.len_bytes > self.cfg.max_request_bytes
        {
            return Err(Errno::Inval);
        }
        if req.kind == ReqKind::Write {
            match &req.payload {
                Some(p) if p.len() as u64 != req.len_bytes => return Err(Errno::Inval),
                None if self.cfg.track_data => return Err(Errno::Inval),
                _ => {}
            }
        }
        Ok(())
    }

    fn for_each_piece(
        &mut self,
        now: u64,
        key: usize,
        out: &mut Outputs,
        f: fn(&mut Engine, u64, usize, u32, u64, u64, &mut Outputs),
    ) {
        let r = &self.reqs[key];
        let (v, mut pos, end) = (r.vol, r.offset_bytes, r.offset_bytes + r.len_bytes);
        let cb = self.cfg.chunk_bytes;
        while pos < end {
            let piece_end = ((pos / cb + 1) * cb).min(end);
            f(self, now, key, v, pos, piece_end, out);
            pos = piece_end;
        }
    }

    /// Where each byte range of a read comes from: the map's chunk, an overlay entry (log,
    /// moved or zeroed data) or zeros; adjacent ranges of one device run merged.
    #[inline]
    fn read_sources(&self, v: u32, off: u64, len: u64) -> SmallVec<[(u64, u64, Src); 4]> {
        let cb = self.cfg.chunk_bytes;
        let vol = &self.vols[v as usize];
        let mut parts: SmallVec<[(u64, u64, Src); 4]> = SmallVec::new();
        let mut push = |s: u64, e: u64, src: Src| {
            if let Some(last) = parts.last_mut() {
                let merged = match (last.2, src) {
                    (Src::Zero, Src::Zero) => true,
                    (Src::Dev(p, d), Src::Dev(q, d2)) => p == q && d + (last.1 - last.0) == d2,
                    _ => false,
                };
                if merged && last.1 == s {
                    last.1 = e;
                    return;
                }
            }
            parts.push((s, e, src));
        };
        let end = off + len;
        let mut pos = off;
        while pos < end {
            let c = pos / cb;
            let cend = ((c + 1) * cb).min(end);
            let base = vol
                .resolve(vol.map.get(c), c)
                .map(|(p, pc)| (p, chunk_offset(pc, cb) + (pos - c * cb)));
            let at = |x: u64| match base {
                Some((p, d)) => Src::Dev(p, d + (x - pos)),
                None => Src::Zero,
            };
            if vol.overlay.is_empty() {
                push(pos, cend, at(pos));
            } else {
                let mut cur = pos;
                for (s, e, ov) in vol.overlay.overlapping(pos, cend) {
                    if s > cur {
                        push(cur, s, at(cur));
                    }
                    let src = match ov {
                        Overlay::Zero => Src::Zero,
                        // The injected bug reads the source for data already moved.
                        Overlay::Moved { .. } if self.bug_is(InjectedBug::LrReadsSource) => at(s),
                        Overlay::Log { pool, dev_offset } | Overlay::Moved { pool, dev_offset } => {
                            Src::Dev(pool, dev_offset)
                        }
                    };
                    push(s, e, src);
                    cur = e;
                }
                if cur < cend {
                    push(cur, cend, at(cur));
                }
            }
            pos = cend;
        }
        parts
    }

    fn start_read(&mut self, now: u64, key: usize, out: &mut Outputs) {
        let r = &self.reqs[key];
        let (v, off, len) = (r.vol, r.offset_bytes, r.len_bytes);
        if len == 0 {
            return;
        }
        let mut parts = self.read_sources(v, off, len);
        // Log data whose append has not landed is served from RAM.
        let mut ram: SmallVec<[(u64, u64, Option<Bytes>); 2]> = SmallVec::new();
        if self.logs.iter().any(|l| !l.ram.is_empty()) {
            let mut split: SmallVec<[(u64, u64, Src); 4]> = SmallVec::new();
            for &(s, e, src) in &parts {
                let rp = match src {
                    Src::Dev(pool, dev) => self.read_parts(pool, dev, e - s),
                    Src::Zero => None,
                };
                let Some(rp) = rp else {
                    split.push((s, e, src));
                    continue;
                };
                let Src::Dev(pool, dev) = src else {
                    unreachable!("only device parts are split")
                };
                for (ds, de, part) in rp {
                    let ls = s + (ds - dev);
                    match part {
                        crate::log::ReadPart::Dev => {
                            split.push((ls, ls + de - ds, Src::Dev(pool, ds)))
                        }
                        crate::log::ReadPart::Ram(d) => ram.push((ls, ls + de - ds, d)),
                    }
                }
            }
            parts = split;
        }
        let single = ram.is_empty() && parts.len() == 1 && matches!(parts[0].2, Src::Dev(..));
        if self.cfg.track_data && !single {
            let mut buf = BytesMut::zeroed(len as usize);
            for (s, e, d) in &ram {
                if let Some(d) = d {
                    buf[(s - off) as usize..(e - off) as usize].copy_from_slice(d);
                }
            }
            self.reqs[key].buf = Some(buf);
        }
        for (s, e, src) in parts {
            if let Src::Dev(pool, dev) = src {
                self.reqs[key].outstanding += 1;
                let dest = if single { SINGLE } else { (s - off) as usize };
                let owner = Owner::Read { req: key, dest };
                let spec = OpSpec::new(owner, pool, DevKind::Read, IoClass::Foreground);
                self.queue_op(now, spec.at(dev, e - s).for_volume(v), out);
            }
        }
    }

    pub(crate) fn read_done(
        &mut self,
        now: u64,
        req: usize,
        dest: usize,
        result: Result<(), Errno>,
        data: Option<Bytes>,
        out: &mut Outputs,
    ) {
        if result.is_ok()
            && let Some(d) = data
        {
            let r = &mut self.reqs[req];
            if dest == SINGLE {
                r.single = Some(d);
            } else if let Some(buf) = r.buf.as_mut() {
                buf[dest..dest + d.len()].copy_from_slice(&d);
            }
        }
        self.req_end(now, req, result, out);
    }

    /// Park a piece behind a chunk in transition. Returns true if parked.
    fn park_if_busy(&mut self, key: usize, v: u32, c: u64, s: u64, e: u64) -> bool {
        let bug = self.bug_is(InjectedBug::MoveIgnoresWrites);
        let wb_bug = self.bug_is(InjectedBug::CacheWritebackIgnoresWrites);
        if let Some(a) = self.vols[v as usize].activity.get_mut(&c)
            && a.state != ChunkState::Idle
            && !(bug && matches!(a.state, ChunkState::Moving { .. }))
            && !(wb_bug && matches!(a.state, ChunkState::Cleaning { evict: false, .. }))
        {
            a.waiters.push_back(Waiter {
                req: key,
                start: s,
                end: e,
            });
            self.reqs[key].outstanding += 1;
            return true;
        }
        false
    }

    fn write_piece(&mut self, now: u64, key: usize, v: u32, s: u64, e: u64, out: &mut Outputs) {
        let cb = self.cfg.chunk_bytes;
        let c = s / cb;
        if self.park_if_busy(key, v, c, s, e) {
            return;
        }
        let r = &self.reqs[key];
        let zero = matches!(r.kind, ReqKind::WriteZeroes | ReqKind::Trim);
        let payload = if zero {
            None
        } else {
            r.payload
                .as_ref()
                .map(|p| p.slice((s - r.offset_bytes) as usize..(e - r.offset_bytes) as usize))
        };
        let kind = if zero {
            DevKind::WriteZeroes
        } else {
            DevKind::Write
        };
        if self.migrations.jobs.contains_key(&v)
            && self.migration_write_piece(now, key, v, s, e, kind, &payload, out)
        {
            return;
        }
        if !zero && let Some(pool) = self.log_target(key, v, c, s, e) {
            match self.log_write_piece(now, key, v, s, e, pool, payload.clone(), out) {
                crate::log::LogOutcome::Logged | crate::log::LogOutcome::Parked => return,
                crate::log::LogOutcome::Home => {}
            }
        }
        let kind = if zero && self.may_punch(key, v) {
            DevKind::Punch
        } else {
            kind
        };
        self.cache_wrote(now, v, c, s, e);
        let vol = &mut self.vols[v as usize];
        match vol.resolve(vol.map.get(c), c) {
            Some((pool, pc)) => {
                let a = vol.activity.entry(c).or_default();
                a.writes_in_flight += 1;
                a.home_seq += 1;
                let seq = a.home_seq;
                self.reqs[key].outstanding += 1;
                let dev = chunk_offset(pc, cb) + (s - c * cb);
                let owner = Owner::Write {
                    req: key,
                    vol: v,
                    chunk: c,
                    start: s,
                    end: e,
                    seq,
                };
                let spec = OpSpec::new(owner, pool, kind, IoClass::Foreground);
                let spec = spec.at(dev, e - s).payload(payload).for_volume(v);
                self.queue_op(now, spec, out);
            }
            None => self.allocate_chunk(now, key, v, c, s, e, kind, payload, out),
        }
    }

    /// Whether zeroing for request `key` may give the range's space back (a hole in a file
    /// pool) rather than keep it allocated: a trim, or a write-zeroes without NO_HOLE, of a
    /// thin volume (a thick volume's space is a promise kept even where it reads as zeros).
    /// Crash safety is that of a write of zeros in place: the chunk stays mapped where it
    /// is, so the punched range holds the trimmed part of the same chunk in the old state
    /// and the new, and a crash before the next FLUSH finds old data or zeros there, both
    /// of which a trim not yet flushed allows. A whole chunk freed by a trim is not
    /// punched here but discarded once its unmap is durable (`Engine::release_frees`).
    fn may_punch(&self, key: usize, v: u32) -> bool {
        let r = &self.reqs[key];
        let zeroing = r.kind == ReqKind::Trim || (r.kind == ReqKind::WriteZeroes && !r.no_hole);
        zeroing && self.vols[v as usize].rec.provisioning == Provisioning::Thin
    }

    /// The pool whose log takes this write piece, if it goes to a log: small writes
    /// (or random ones that fit an append), sector-aligned, on a pool logging for this
    /// volume (the chunk's pool, or where a new chunk would go).
    fn log_target(&self, key: usize, v: u32, c: u64, s: u64, e: u64) -> Option<PoolId> {
        let r = &self.reqs[key];
        let l = &self.cfg.log;
        let small = r.len_bytes <= l.threshold_bytes;
        let random_fits = !r.sequential && r.len_bytes <= l.append_bytes;
        if !(small || random_fits) || !s.is_multiple_of(512) || !e.is_multiple_of(512) {
            return None;
        }
        let vol = &self.vols[v as usize];
        // A cache's chunks are written where the map says and written back whole; the
        // log's overlay would sit beside both copies (not supported together).
        if matches!(vol.rec.placement, crate::config::Placement::Cache { .. }) {
            return None;
        }
        // A migrating volume's log is drained and stays empty until the job is over
        // (`jobs/migrate/log_drain.rs`); it logs again, on its new pool, after.
        if self.migrations.jobs.contains_key(&v) {
            return None;
        }
        let pool = match vol.resolve(vol.map.get(c), c) {
            Some((p, _)) => p,
            None => self.place_new_chunk(v, c).0,
        };
        self.log_enabled(v, pool).then_some(pool)
    }

    /// Re-run a write piece that waited (behind a chunk or for log buffer room).
    pub(crate) fn resume_write_piece(&mut self, now: u64, w: Waiter, v: u32, out: &mut Outputs) {
        let r = &self.reqs[w.req];
        let f = match r.kind {
            ReqKind::Write => Self::write_piece,
            ReqKind::WriteZeroes if r.no_hole => Self::write_piece,
            _ => Self::trim_piece,
        };
        f(self, now, w.req, v, w.start, w.end, out);
        self.req_end(now, w.req, Ok(()), out);
    }

    /// Pool and allocation hint for a new chunk: `split` puts its share on the fast pool;
    /// `pinned` and `hot` start on the home pool (`hot` promotes what proves hot).
    fn place_new_chunk(&self, v: u32, c: u64) -> (PoolId, u64) {
        let vol = &self.vols[v as usize];
        let home = (vol.rec.home_pool, vol.rec.home_base_chunk + c);
        if let Some(p) = self.migration_place(v, c) {
            return (p, c);
        }
        match (&vol.rec.placement, vol.rec.fast_pool) {
            (crate::config::Placement::Split { fast_percent }, Some(f))
                if crate::tiering::split_selects(vol.rec.id, c, *fast_percent) =>
            {
                (f, c)
            }
            // New data starts on the fast pool while it (and the budget) has room.
            (crate::config::Placement::Hot { .. }, Some(f))
                if self.hot_places_new_on_fast(v as usize, f) =>
            {
                (f, c)
            }
            _ => home,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn allocate_chunk(
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
        let (pool, hint) = self.place_new_chunk(v, c);
        // When the chosen pool is full, the volume's other pool takes the chunk, except
        // for `pinned`: its data stays on the home pool, and a full home pool is ENOSPC.
        let other = {
            let r = &self.vols[v as usize].rec;
            // A cache caches the home pool: new data lives there.
            if matches!(
                r.placement,
                crate::config::Placement::Pinned | crate::config::Placement::Cache { .. }
            ) {
                None
            } else if pool == r.home_pool {
                r.fast_pool
            } else {
                Some(r.home_pool)
            }
        };
        let pick = self.pools[pool.0 as usize]
            .alloc
            .allocate(hint, false)
            .map(|pc| (pool, pc))
            .or_else(|| {
                let o = other?;
                self.pools[o.0 as usize]
                    .alloc
                    .allocate(hint, false)
                    .map(|pc| (o, pc))
            });
        // A shard running low asks the driver for space before it runs out; one out of
        // space waits for the answer (`loan_wait.rs`).
        self.loan_space_check(now, pool, out);
        let Some((pool, pc)) = pick else {
            if self.loan_wait_park(key, v, pool, s, e) {
                return;
            }
            let r = &mut self.reqs[key];
            if r.error.is_none() {
                r.error = Some(Errno::NoSpc);
            }
            return;
        };
        let cstart = c * cb;
        let base = chunk_offset(pc, cb);
        let before = s - cstart;
        let after = cstart + cb - e;
        let zero_fill = !self.bug_is(InjectedBug::NoZeroFill);
        let (before, after) = if zero_fill { (before, after) } else { (0, 0) };
        let pending = 1 + (before > 0) as u32 + (after > 0) as u32;
        let vol = &mut self.vols[v as usize];
        vol.stats.chunks_allocated += 1;
        vol.stats.zero_fill_bytes += before + after;
        vol.activity.entry(c).or_default().state = ChunkState::Allocating {
            pending,
            loc: ChunkLoc::At(pool, pc),
            start: s,
            end: e,
            failed: None,
            req: key,
        };
        self.reqs[key].outstanding += 1;
        let ctx = self.reqs[key].context;
        let owner = Owner::Alloc { vol: v, chunk: c };
        // The rest of a fresh chunk must read as zeros, whatever the device held before.
        let spec = OpSpec::new(owner, pool, kind, IoClass::Foreground).for_volume(v);
        let spec = spec.at(base + (s - cstart), e - s).payload(payload);
        self.queue_op(now, spec.context(ctx), out);
        let zeroes = || {
            OpSpec::new(owner, pool, DevKind::WriteZeroes, IoClass::Foreground)
                .for_volume(v)
                .context(ctx)
        };
        if before > 0 {
            self.queue_op(now, zeroes().at(base, before), out);
        }
        if after > 0 {
            self.queue_op(now, zeroes().at(base + cb - after, after), out);
        }
    }

    pub(crate) fn alloc_part_done(
        &mut self,
        now: u64,
        v: u32,
        c: u64,
        result: Result<(), Errno>,
        out: &mut Outputs,
    ) {
        let vol = &mut self.vols[v as usize];
        let Some(a) = vol.activity.get_mut(&c) else {
            return;
        };
        let ChunkState::Allocating {
            pending,
            loc,
            start,
            end,
            failed,
            req,
        } = &mut a.state
        else {
            return;
        };
        *pending -= 1;
        *failed = Errno::worse(*failed, result.err());
        if *pending > 0 {
            return;
        }
        let (loc, start, end, failed, req) = (*loc, *start, *end, *failed, *req);
        a.state = ChunkState::Idle;
        let ChunkLoc::At(pool, pc) = loc else {
            unreachable!("allocation targets a concrete chunk")
        };
        if let Some(mut err) = failed {
            if self.bug_is(InjectedBug::NoSpaceAsEio) {
                err = Errno::Io;
            }
            // Nothing references the chunk: give it straight back. A write that failed
            // for space reports ENOSPC (a VM pauses and retries), not a broken disk.
            self.pools[pool.0 as usize].alloc.release(pc);
            self.req_end(now, req, Err(err), out);
        } else {
            vol.set_loc(c, loc);
            vol.journal.append(Record::Map {
                chunk: c,
                entry: loc.encode(),
            });
            vol.dirty_pools |= 1 << pool.0;
            self.clear_overlay(v, start, end);
            self.migration_chunk_allocated(v, c);
            self.arm_commit_timer(now);
            self.req_end(now, req, Ok(()), out);
        }
        self.wake_waiters(now, v, c, out);
    }

    /// Re-run pieces parked behind chunk `c`.
    pub(crate) fn wake_waiters(&mut self, now: u64, v: u32, c: u64, out: &mut Outputs) {
        loop {
            let vol = &mut self.vols[v as usize];
            let Some(a) = vol.activity.get_mut(&c) else {
                return;
            };
            if a.state != ChunkState::Idle {
                return;
            }
            let Some(w) = a.waiters.pop_front() else {
                if a.is_quiet() {
                    vol.activity.remove(&c);
                }
                return;
            };
            self.resume_write_piece(now, w, v, out);
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write_done(
        &mut self,
        now: u64,
        req: usize,
        v: u32,
        pool: u16,
        chunk: u64,
        range: (u64, u64, u64),
        result: Result<(), Errno>,
        out: &mut Outputs,
    ) {
        let (start, end, seq) = range;
        let vol = &mut self.vols[v as usize];
        // The overlay is cleared only where no newer data went elsewhere (logged, or
        // written to a migration's destination) after this write was queued: its
        // completion may be reported long after it landed, and the newer entries must
        // not be dropped with the older ones.
        let mut gaps = vec![(start, end)];
        if let Some(a) = vol.activity.get_mut(&chunk) {
            gaps = a.unprotected(start, end, seq);
            a.writes_in_flight -= 1;
            if a.writes_in_flight == 0 {
                a.forget_orders();
            } else if result.is_ok() {
                a.wrote_at_home(seq, start, end);
            }
            if a.is_quiet() {
                vol.activity.remove(&chunk);
            }
        }
        if result.is_ok() {
            vol.dirty_pools |= 1 << pool;
            let mut cleared = false;
            for (s, e) in gaps {
                cleared |= self.clear_overlay(v, s, e);
            }
            if cleared {
                self.arm_commit_timer(now);
            }
        }
        self.req_end(now, req, result, out);
    }

    /// New data at home supersedes overlay entries for the range. Returns true if any.
    pub(crate) fn clear_overlay(&mut self, v: u32, start: u64, end: u64) -> bool {
        let vol = &mut self.vols[v as usize];
        if !vol.overlay.any_overlap(start, end) {
            return false;
        }
        let removed = vol.overlay.remove(start, end);
        let seq = vol.journal.append(Record::OverlayClear { start, end });
        self.unref_removed(v, &removed);
        self.migration_unref_moved(v, &removed, seq);
        true
    }

    fn trim_piece(&mut self, now: u64, key: usize, v: u32, s: u64, e: u64, out: &mut Outputs) {
        let cb = self.cfg.chunk_bytes;
        let c = s / cb;
        if self.park_if_busy(key, v, c, s, e) {
            return;
        }
        if self.bug_is(InjectedBug::TrimKeepsData) {
            return;
        }
        // While the volume migrates, a trim zeroes in place (routed like a write): an
        // unmap would leave the destination copy to be switched in at the pivot.
        if self.migrations.jobs.contains_key(&v) {
            let unmapped = self.vols[v as usize].map.get(c) == ChunkLoc::Unmapped;
            if !unmapped {
                return self.write_piece(now, key, v, s, e, out);
            }
        }
        let vol = &mut self.vols[v as usize];
        let whole = s == c * cb && (e == (c + 1) * cb || e == vol.rec.size_bytes);
        // A write still in flight to the chunk would land after the unmap and be lost,
        // though acknowledged later than the trim: zero in place behind it instead.
        let quiet = vol.activity.get(&c).is_none_or(|a| a.writes_in_flight == 0);
        let thin = vol.rec.provisioning == Provisioning::Thin && quiet;
        match vol.map.get(c) {
            // A whole chunk of a thin volume: unmap it (metadata only).
            ChunkLoc::At(pool, pc) if whole && thin => {
                vol.set_loc(c, ChunkLoc::Unmapped);
                let seq = vol.journal.append(Record::Map {
                    chunk: c,
                    entry: ChunkLoc::Unmapped.encode(),
                });
                self.clear_overlay(v, s, e);
                self.cache_unmapped(v, c, seq);
                let needs = smallvec::smallvec![(v, seq)];
                self.defer_free(
                    Freed::Chunks {
                        pool,
                        first: pc,
                        n: 1,
                    },
                    needs,
                );
            }
            // Never written: it already reads as zeros.
            ChunkLoc::Unmapped => {
                self.clear_overlay(v, s, e);
            }
            // Part of a chunk, or a thick volume's home: zero it on the device. (Keeping
            // zero ranges in the map instead would let checkpoints grow without bound.)
            _ => return self.write_piece(now, key, v, s, e, out),
        }
        self.arm_commit_timer(now);
    }
}
