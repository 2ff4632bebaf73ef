//! Logged writes: buffering, appends, their completion and failure, and what commits
//! wait for.

use std::mem;

use bytes::{Bytes, BytesMut};

use super::state::{Append, LogOutcome};
use super::{BufPiece, COLD, HOT, RamPiece, Segment};
use crate::config::LogMode;
use crate::engine::{Engine, OpSpec, Owner};
use crate::inject::InjectedBug;
use crate::overlay::Overlay;
use crate::types::{DevKind, Errno, IoClass, Outputs, PoolId};
use crate::volume::{CommitPhase, Waiter};

/// A failed append is first written again where it is (write errors are usually
/// transient and leave the mapping valid); after this many it moves.
const APPEND_RETRIES: u32 = 3;

impl Engine {
    /// Offer `[s, e)` of write request `key` to the log of `pool`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn log_write_piece(
        &mut self,
        now: u64,
        key: usize,
        v: u32,
        s: u64,
        e: u64,
        pool: PoolId,
        data: Option<Bytes>,
        out: &mut Outputs,
    ) -> LogOutcome {
        let len = e - s;
        let si = pool.0 as usize * 2 + HOT;
        let max_in_flight = self.cfg.log.appends_in_flight;
        let append_bytes = self.cfg.log.append_bytes;
        // Appends that wait for space would hold this piece without end: it goes home.
        if self.logs.nospace.pool_waits(pool.0) {
            self.logs[pool.0 as usize].stats.home_fallbacks += 1;
            return LogOutcome::Home;
        }
        let vol = &mut self.vols[v as usize];
        if vol.overlay.len() as u64 + 64 > vol.log.max_extents {
            self.logs[pool.0 as usize].stats.home_fallbacks += 1;
            return LogOutcome::Home;
        }
        let st = &vol.log.streams[si];
        let full = st.buf_bytes + len > append_bytes;
        if !vol.log.parked.is_empty() || (full && st.in_flight >= max_in_flight) {
            vol.log.parked.push_back(Waiter {
                req: key,
                start: s,
                end: e,
            });
            self.reqs[key].outstanding += 1;
            return LogOutcome::Parked;
        }
        if full {
            self.log_seal(now, v, si, out);
        }
        if !self.log_ensure_segment(now, v, si, len, false, out) {
            // Space is on its way (freed segments wait for a commit, or the cleaner is
            // at work): wait for it rather than scatter the write at home.
            if self.log_space_coming(now, pool.0 as usize, out) {
                self.vols[v as usize].log.parked.push_back(Waiter {
                    req: key,
                    start: s,
                    end: e,
                });
                self.reqs[key].outstanding += 1;
                return LogOutcome::Parked;
            }
            self.logs[pool.0 as usize].stats.home_fallbacks += 1;
            return LogOutcome::Home;
        }
        let stats = &mut self.logs[pool.0 as usize].stats;
        stats.user_writes += 1;
        stats.user_bytes += len;
        self.log_place(now, v, si, s, e, data);
        if self.cfg.log.mode == LogMode::Bitvisor {
            // Write-through: the request waits for this piece's own device write.
            self.reqs[key].outstanding += 1;
            self.vols[v as usize].log.streams[si].acks.push(key);
        }
        // Home writes in flight to the chunk are older than this: keep it from them.
        let cb = self.cfg.chunk_bytes;
        if let Some(a) = self.vols[v as usize].activity.get_mut(&(s / cb)) {
            a.protect_from_home_writes(a.home_seq, s, e);
        }
        self.log_maybe_seal(now, v, si, out);
        self.arm_commit_timer(now);
        LogOutcome::Logged
    }

    /// Make sure stream `si` has an open segment with `len` bytes of room. `reserve`:
    /// the write may take the segments kept for the cleaner and for retries.
    pub(crate) fn log_ensure_segment(
        &mut self,
        now: u64,
        v: u32,
        si: usize,
        len: u64,
        reserve: bool,
        out: &mut Outputs,
    ) -> bool {
        let pool = si / 2;
        let sb = self.cfg.log.segment_bytes;
        if let Some(g) = self.vols[v as usize].log.streams[si].seg {
            let written = self.logs[pool].segments.get(&g).map(|s| s.written_bytes);
            if written.is_some_and(|w| w + len <= sb) {
                return true;
            }
            // The buffer never spans segments: send it before moving on.
            self.log_seal(now, v, si, out);
            self.vols[v as usize].log.streams[si].seg = None;
            if let Some(seg) = self.logs[pool].segments.get_mut(&g) {
                seg.open = false;
                if seg.live_bytes == 0 {
                    self.free_segment(PoolId(pool as u16), g);
                }
            }
        }
        let n = self.seg_chunks();
        let need = if reserve {
            1
        } else {
            self.cfg.log.reserve_segments + 1
        };
        let free = self.free_segments(pool);
        if free < need {
            self.clean_kick(now, pool, out);
            return false;
        }
        let hint = self.logs[pool].next_group;
        let Some(g) = self.pools[pool].alloc.allocate_aligned(n, hint) else {
            return false;
        };
        let pl = &mut self.logs[pool];
        pl.next_group = g + 1;
        pl.stats.segments_opened += 1;
        pl.segments.insert(
            g,
            Segment {
                owner: v,
                held: if n == 64 { u64::MAX } else { (1 << n) - 1 },
                written_bytes: 0,
                live_bytes: 0,
                open: true,
                last_write_ns: now,
                cleaning: false,
                clean_failed: false,
                stuck: false,
                summary: Vec::new(),
                live: super::livemap::LiveMap::new(sb),
            },
        );
        self.vols[v as usize].log.streams[si].seg = Some(g);
        if free - 1 < self.cfg.log.clean_below_free_segments {
            self.clean_kick(now, pool, out);
        }
        true
    }

    /// Put `[s, e)` (already checked to fit) into stream `si`'s buffer and point the
    /// overlay at its log position.
    pub(crate) fn log_place(
        &mut self,
        now: u64,
        v: u32,
        si: usize,
        s: u64,
        e: u64,
        data: Option<Bytes>,
    ) {
        let pool = si / 2;
        let len = e - s;
        let st = &self.vols[v as usize].log.streams[si];
        let g = st.seg.expect("log_place needs an open segment");
        let base = self.seg_base(g);
        let reuse_bug = self.cfg.log.mode == LogMode::Bitvisor
            && si % 2 == HOT
            && self.bug_is(InjectedBug::BitvisorReusesLive);
        let pl = &mut self.logs[pool];
        let seg = pl.segments.get_mut(&g).expect("open segment exists");
        // The injected defect redirects to the previous write's location, still live.
        let reuse = reuse_bug && seg.written_bytes >= len;
        let seg_off = if reuse {
            seg.written_bytes - len
        } else {
            seg.written_bytes
        };
        let dev = base + seg_off;
        seg.summary.push(super::Piece {
            lba: s,
            seg_off: seg_off as u32,
            len: len as u32,
        });
        seg.live.set(seg_off, len);
        if !reuse {
            seg.written_bytes += len;
        }
        seg.live_bytes += len;
        seg.last_write_ns = now;
        pl.ram.insert(
            dev,
            RamPiece {
                len,
                data: data.clone(),
            },
        );
        let st = &mut self.vols[v as usize].log.streams[si];
        debug_assert!(st.buf.last().is_none_or(|p| p.dev + p.len == dev));
        if st.buf.is_empty() {
            st.buf_since_ns = now;
        }
        st.buf.push(BufPiece {
            lba: s,
            dev,
            len,
            data,
        });
        st.buf_bytes += len;
        self.overlay_set(
            v,
            s,
            e,
            Overlay::Log {
                pool: PoolId(pool as u16),
                dev_offset: dev,
            },
        );
    }

    /// Send the buffer when it is full, or when the stream is idle and the buffer has
    /// gathered long enough (and the stream has room for another append in flight).
    /// In `bitvisor` mode VM writes are sent at once, whatever is in flight.
    pub(crate) fn log_maybe_seal(&mut self, now: u64, v: u32, si: usize, out: &mut Outputs) {
        let st = &self.vols[v as usize].log.streams[si];
        if self.cfg.log.mode == LogMode::Bitvisor && si % 2 == HOT {
            return self.log_seal(now, v, si, out);
        }
        if st.buf.is_empty() || st.in_flight >= self.cfg.log.appends_in_flight {
            return;
        }
        let due = st.buf_since_ns.saturating_add(self.cfg.log.gather_ns);
        if st.buf_bytes >= self.cfg.log.append_bytes || (st.in_flight == 0 && now >= due) {
            self.log_seal(now, v, si, out);
        } else if st.in_flight == 0 {
            // A busy stream is looked at again when its append completes.
            self.arm_gather_timer(due);
        }
    }

    fn arm_gather_timer(&mut self, at: u64) {
        if self.logs.gather_at.is_none_or(|t| t > at) {
            self.logs.gather_at = Some(at);
        }
    }

    /// The gather timer fired: append every buffer that has waited long enough.
    pub(crate) fn log_gather_tick(&mut self, now: u64, out: &mut Outputs) {
        self.logs.gather_at = None;
        for v in 0..self.vols.len() {
            for si in 0..self.vols[v].log.streams.len() {
                self.log_maybe_seal(now, v as u32, si, out);
            }
        }
    }

    /// Send stream `si`'s buffer as one sequential write.
    pub(crate) fn log_seal(&mut self, now: u64, v: u32, si: usize, out: &mut Outputs) {
        let pool = si / 2;
        let vol = &mut self.vols[v as usize];
        let st = &mut vol.log.streams[si];
        if st.buf.is_empty() {
            return;
        }
        let pieces = std::mem::take(&mut st.buf);
        let bytes = std::mem::take(&mut st.buf_bytes);
        let acks = std::mem::take(&mut st.acks);
        st.in_flight += 1;
        let id = vol.log.next_id;
        vol.log.next_id += 1;
        vol.log.in_flight.insert(id);
        vol.dirty_pools |= 1 << pool;
        let stats = &mut self.logs[pool].stats;
        stats.appends += 1;
        stats.append_bytes += bytes;
        let a = Append {
            vol: v,
            pool: pool as u16,
            stream: si,
            id,
            pieces,
            retries: 0,
            acks,
        };
        self.append_issue(now, 0, a, out);
    }

    /// Queue an append's write (again, in place, after an error).
    pub(crate) fn append_issue(
        &mut self,
        now: u64,
        retries: u32,
        mut a: Append,
        out: &mut Outputs,
    ) {
        a.retries = retries;
        let payload = self.cfg.track_data.then(|| {
            let mut b = BytesMut::new();
            for p in &a.pieces {
                match &p.data {
                    Some(d) => b.extend_from_slice(d),
                    None => b.resize(b.len() + p.len as usize, 0),
                }
            }
            b.freeze()
        });
        let (v, si, pool) = (a.vol, a.stream, a.pool as usize);
        let dev = a.pieces[0].dev;
        let bytes: u64 = a.pieces.iter().map(|p| p.len).sum();
        let slot = self.logs.appends.insert(a);
        let class = if si % 2 == COLD {
            IoClass::Cleaner
        } else {
            IoClass::Foreground
        };
        let spec = OpSpec::new(
            Owner::Append { slot },
            PoolId(pool as u16),
            DevKind::Write,
            class,
        );
        let spec = spec.at(dev, bytes).payload(payload).for_volume(v);
        self.queue_op(now, spec, out);
    }

    /// Seal every buffer of a volume (a commit is starting).
    pub(crate) fn log_seal_volume(&mut self, now: u64, v: u32, out: &mut Outputs) {
        for si in 0..self.vols[v as usize].log.streams.len() {
            self.log_seal(now, v, si, out);
        }
    }

    pub(crate) fn append_done(
        &mut self,
        now: u64,
        slot: usize,
        result: Result<(), Errno>,
        out: &mut Outputs,
    ) {
        let Some(mut a) = self.logs.appends.try_remove(slot) else {
            return;
        };
        let (v, pool, si) = (a.vol, a.pool as usize, a.stream);
        if result == Err(Errno::NoSpc) {
            // `bitvisor` mode: the write-through requests fail with ENOSPC now, as a home
            // write does, rather than wait for space that may never return (seed 1070:
            // one request waited for ever through a lasting spell). Their data stays
            // parked and readable, as a failed write's may.
            for key in mem::take(&mut a.acks) {
                self.req_end(now, key, Err(Errno::NoSpc), out);
            }
            // Wait for space where it is (log/nospace.rs); fail the commit waiting for it.
            if let Some(c) = self.vols[v as usize].commit.as_mut()
                && c.phase == CommitPhase::LogWait
                && a.id < c.log_wait_upto
            {
                c.failed = Errno::worse(c.failed, Some(Errno::NoSpc));
            }
            self.append_park_nospace(now, a);
            return self.log_commit_check(now, v, out);
        }
        if result.is_err() && a.retries < APPEND_RETRIES {
            return self.append_issue(now, a.retries + 1, a, out);
        }
        let vol = &mut self.vols[v as usize];
        vol.log.in_flight.remove(&a.id);
        vol.log.streams[si].in_flight -= 1;
        let mut acks = Vec::new();
        if result.is_ok() {
            acks = a.acks.clone();
        }
        if let Err(e) = result {
            // A round waiting for this append must not make records durable that point
            // at data which is not there: it fails, and the data is appended again.
            if let Some(c) = vol.commit.as_mut()
                && c.phase == CommitPhase::LogWait
                && a.id < c.log_wait_upto
            {
                c.failed = Errno::worse(c.failed, Some(e));
            }
            self.log_relocate(now, &a, out);
        }
        let ram = &mut self.logs[pool].ram;
        for p in &a.pieces {
            ram.remove(&p.dev);
        }
        // `bitvisor` mode: the writes it carried are on the device now.
        for key in acks {
            self.req_end(now, key, Ok(()), out);
        }
        self.log_maybe_seal(now, v, si, out);
        self.log_resume_parked(now, v, out);
        self.log_commit_check(now, v, out);
        if let Some(g) = self.vols[v as usize].log.streams[si].seg
            && !self.logs[pool].segments.contains_key(&g)
        {
            self.vols[v as usize].log.streams[si].seg = None;
        }
        // Counting free segments scans the pool. In `bitvisor` mode every 4 KiB write is
        // an append (a 1 GiB IOzone run on a 16 GiB MTRON pool took 6.2 s of CPU with the
        // count after each, 1.1 s without), and an append landing in a still-open segment
        // makes no new victim: look only when its segment is closed (opening one looks too).
        let seg_open = self.logs[pool]
            .segments
            .get(&self.group_of(a.pieces[0].dev))
            .is_some_and(|s| s.open);
        if self.cfg.log.mode == LogMode::Gather || !seg_open {
            self.clean_maybe(now, pool, out);
        }
    }

    /// Append again what a failed append carried and the overlay still points at.
    fn log_relocate(&mut self, now: u64, a: &Append, out: &mut Outputs) {
        let (v, pool) = (a.vol, PoolId(a.pool));
        for p in &a.pieces {
            let live: Vec<(u64, u64)> = self.vols[v as usize]
                .overlay
                .overlapping(p.lba, p.lba + p.len)
                .filter(|&(s, _, val)| {
                    val == Overlay::Log {
                        pool,
                        dev_offset: p.dev + (s - p.lba),
                    }
                })
                .map(|(s, e, _)| (s, e))
                .collect();
            for (s, e) in live {
                if !self.log_ensure_segment(now, v, a.stream, e - s, true, out) {
                    for &key in &a.acks {
                        self.req_end(now, key, Err(Errno::Io), out);
                    }
                    let name = self.vols[v as usize].rec.name.clone();
                    return self.fail(
                        format!(
                            "volume {name}: an append failed and the log of pool {} has no room to write it again",
                            self.cfg.pools[pool.0 as usize].name
                        ),
                        out,
                    );
                }
                let data = p
                    .data
                    .as_ref()
                    .map(|d| d.slice((s - p.lba) as usize..(e - p.lba) as usize));
                self.logs[pool.0 as usize].stats.relocations += 1;
                self.log_place(now, v, a.stream, s, e, data);
            }
        }
        // `bitvisor` mode: its requests complete when the data lands where it moved to
        // (at once if newer writes replaced all of it).
        let st = &mut self.vols[v as usize].log.streams[a.stream];
        if st.buf.is_empty() {
            for &key in &a.acks {
                self.req_end(now, key, Ok(()), out);
            }
        } else {
            st.acks.extend_from_slice(&a.acks);
        }
        self.log_maybe_seal(now, v, a.stream, out);
    }

    /// Whether segments of `pool` will be freed without new writes: frees waiting for
    /// a commit (which this starts) or drain, or a segment being cleaned.
    fn log_space_coming(&mut self, now: u64, pool: usize, out: &mut Outputs) -> bool {
        if self.logs[pool].clean.is_some() {
            return true;
        }
        let mut waiting: Vec<u32> = Vec::new();
        let mut any = false;
        for f in self.reclaim.pending() {
            let crate::reclaim::Freed::Chunks { pool: p, .. } = f.what;
            if p.0 as usize != pool {
                continue;
            }
            // Space freed by the records of a volume whose commit just failed is not on
            // its way: the timer retries that commit (log/nospace.rs).
            let blocked = f.needs.iter().any(|&(v, seq)| {
                self.logs.nospace.commit_backs_off(v)
                    && self.vols[v as usize].journal.durable_seq < seq
            });
            if !blocked {
                any = true;
                waiting.extend(f.needs.iter().map(|&(v, _)| v));
            }
        }
        waiting.sort_unstable();
        waiting.dedup();
        for v in waiting {
            let vol = &self.vols[v as usize];
            if vol.commit.is_none()
                && vol.journal.has_pending()
                && !self.logs.nospace.commit_backs_off(v)
            {
                self.start_commit(now, v, out);
            }
        }
        any || self.reclaim.discarding()
    }

    /// Resume parked log writes of every volume (space or buffer room appeared).
    pub(crate) fn log_resume_all(&mut self, now: u64, out: &mut Outputs) {
        for v in 0..self.vols.len() {
            if !self.vols[v].log.parked.is_empty() {
                self.log_resume_parked(now, v as u32, out);
            }
        }
    }

    /// Retry write pieces that waited for buffer room, in arrival order.
    pub(crate) fn log_resume_parked(&mut self, now: u64, v: u32, out: &mut Outputs) {
        let parked = std::mem::take(&mut self.vols[v as usize].log.parked);
        for w in parked {
            self.resume_write_piece(now, w, v, out);
        }
    }

    /// A commit waiting for appends goes on once those issued before it have landed.
    pub(crate) fn log_commit_check(&mut self, now: u64, v: u32, out: &mut Outputs) {
        let Some(c) = self.vols[v as usize].commit.as_ref() else {
            return;
        };
        if c.phase != CommitPhase::LogWait {
            return;
        }
        if c.failed.is_none() {
            let upto = c.log_wait_upto;
            self.append_retry_for_commit(now, v, upto, out);
        }
        let bug = self.bug_is(InjectedBug::CommitSkipsLogWait);
        let vol = &self.vols[v as usize];
        let Some(c) = vol.commit.as_ref() else { return };
        if c.phase != CommitPhase::LogWait {
            return;
        }
        // A failed round ends now (nothing of it becomes durable) rather than waiting.
        if !bug
            && c.failed.is_none()
            && vol
                .log
                .in_flight
                .first()
                .is_some_and(|&id| id < c.log_wait_upto)
        {
            return;
        }
        self.commit_data_flush(now, v, out);
    }
}
