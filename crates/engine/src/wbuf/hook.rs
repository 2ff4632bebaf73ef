//! The write-back buffer in the engine's path to the devices.
//!
//! - `queue_op`: a VM data write (`Owner::Write`) to a buffered pool with room is
//!   absorbed: its bytes go to the buffer and the operation completes locally (after the
//!   current entry point, see [`Engine::drain_local`]); it keeps its epoch until written
//!   back. A FLUSH waits until what it covers (its volume's pieces, or all for the host
//!   tag) has been written back, then goes to the device.
//! - `emit`: a read takes buffered bytes over the device's (or is served from RAM alone);
//!   any other write parks while a write to its range is in flight, and replaces the
//!   buffered bytes under it.
//! - write-backs are writes with the volume's tag. Those a FLUSH issues are foreground
//!   work; those issued past the high-water mark (3/4 of the buffer, down to 1/2), by age
//!   or to make room go to the pool's background lane, at most
//!   [`BACKGROUND_WRITEBACK_OPS`] at a time, so a FLUSH of one volume does not queue
//!   behind a burst of another volume's write-backs.

use bytes::{Bytes, BytesMut};

use super::local::{EmitAction, Local};
use super::{BACKGROUND_WRITEBACK_OPS, Fill, Flight, PendingFlush, WriteBuffer};
use crate::devop::{OpSpec, Owner};
use crate::engine::Engine;
use crate::types::{DevKind, DeviceCompletion, Errno, IoClass, OpId, Outputs, PoolId};

impl Engine {
    fn wbuf(&mut self, pool: usize) -> &mut WriteBuffer {
        &mut self.pools[pool].wbuf
    }

    /// Complete what the buffer answered locally. Called at the end of every entry point
    /// that may queue operations, so completions never re-enter the code that queued them.
    pub(crate) fn drain_local(&mut self, now: u64, out: &mut Outputs) {
        while let Some(l) = self.local.0.pop_front() {
            match l {
                Local::Absorbed(key) => {
                    let op = self.ops.remove(key);
                    self.op_finished(now, key, op, Ok(()), None, out);
                }
                Local::Served { key, result, data } => {
                    let c = DeviceCompletion {
                        id: OpId(key as u64),
                        result,
                        data,
                    };
                    self.finish_device_op(now, c, out);
                }
            }
        }
    }

    /// `queue_op`'s part: true when the buffer took the operation (created as `key`).
    pub(crate) fn wbuf_queue(&mut self, now: u64, key: usize, out: &mut Outputs) -> bool {
        let pool = self.ops[key].pool as usize;
        if !self.pools[pool].wbuf.enabled() {
            return false;
        }
        self.ops[key].wbuf_seq = self.pools[pool].wbuf.barrier();
        let op = &self.ops[key];
        if op.kind == DevKind::Flush {
            let f = PendingFlush {
                key,
                vol: op.volume.map(|v| v.0),
                barrier: self.pools[pool].wbuf.barrier(),
                failed: None,
                arrived_ns: now,
            };
            let queued = self.pools[pool].sched.len() as u64;
            let b = self.wbuf(pool);
            b.stats.flushes += 1;
            b.stats.queued_ahead_of_flushes += queued;
            b.pending_flushes.push(f);
            self.wbuf_kick_flushes(now, pool, out);
            return true;
        }
        let absorbable = matches!(
            op.kind,
            DevKind::Write | DevKind::WriteZeroes | DevKind::Punch
        ) && matches!(op.owner, Owner::Write { .. })
            && !op.fua;
        let Some(vol) = op.volume.map(|v| v.0).filter(|_| absorbable) else {
            return false;
        };
        let (s, e) = (op.offset_bytes, op.offset_bytes + op.len_bytes);
        if !self.pools[pool].wbuf.has_room(vol, e - s) {
            self.wbuf(pool).stats.direct_writes += 1;
            // Make room: this volume's oldest data goes first.
            let size = self.pools[pool].wbuf.cfg.map_or(0, |c| c.size_bytes);
            let starts =
                (self.pools[pool].wbuf).oldest_of_volume(vol, BACKGROUND_WRITEBACK_OPS as usize);
            self.wbuf_issue_upto(now, pool, starts, size / 8, true, out);
            return false;
        }
        let fill = match (op.kind, &op.payload) {
            (DevKind::WriteZeroes, _) => Fill::Zeros,
            // A buffered punch is written back as a punch: a thin volume's trim gives its
            // space back also on a buffered pool.
            (DevKind::Punch, _) => Fill::Hole,
            (_, Some(d)) => Fill::Data(d.clone()),
            (_, None) => Fill::Untracked,
        };
        let epoch = op.epoch;
        let mut released = Vec::new();
        let fresh_seq = self.bug_is(crate::inject::InjectedBug::WbufReplaceForgets);
        let b = self.wbuf(pool);
        let hold = b.hold(epoch);
        b.admit(s..e, vol, fill, now, hold, &mut released, fresh_seq);
        self.leave_epochs(&released);
        self.local.0.push_back(Local::Absorbed(key));
        self.wbuf_background(now, pool, out);
        self.wbuf_arm_age(now, pool);
        true
    }

    fn leave_epochs(&mut self, released: &[u64]) {
        for &e in released {
            self.reclaim.leave(e);
        }
    }

    /// `emit`'s part, for an operation the scheduler dispatched (already counted in flight).
    pub(crate) fn wbuf_emit(&mut self, now: u64, key: usize) -> EmitAction {
        let op = &self.ops[key];
        let pool = op.pool as usize;
        if !self.pools[pool].wbuf.enabled() {
            return EmitAction::Device;
        }
        let (s, e) = (op.offset_bytes, op.offset_bytes + op.len_bytes);
        match op.kind {
            DevKind::Read => {
                let overlay = self.pools[pool].wbuf.read_overlay(s, e);
                if overlay.is_empty() {
                    return EmitAction::Device;
                }
                if covers_all(&overlay, s, e) {
                    let data = self.cfg.track_data.then(|| {
                        let mut buf = BytesMut::zeroed((e - s) as usize);
                        patch(&mut buf, s, &overlay);
                        buf.freeze()
                    });
                    self.wbuf(pool).stats.reads_served += 1;
                    let served = Local::Served {
                        key,
                        result: Ok(()),
                        data,
                    };
                    self.local.0.push_back(served);
                    return EmitAction::Held;
                }
                let b = self.wbuf(pool);
                b.stats.reads_patched += 1;
                b.patches.insert(key, (s, overlay));
                EmitAction::Device
            }
            DevKind::Write | DevKind::WriteZeroes | DevKind::Punch | DevKind::Discard => {
                if matches!(op.owner, Owner::WriteBack { .. }) || op.class == IoClass::Metadata {
                    return EmitAction::Device;
                }
                if self.pools[pool].wbuf.flight_overlaps(s, e) {
                    // It leaves the device and the scheduler while it waits: the write it
                    // waits for may still be queued behind it, and a slot it kept (the
                    // pool's queue depth, or its scheduler queue's share of the device,
                    // CFQ's quantum) could be the one that write needs (DST seed 3338:
                    // eight parked writes held their CFQ queue's quantum of 8, forever).
                    let (queued, lane) = (op.queued, op.lane);
                    self.emit_undone(key);
                    self.pools[pool].sched.completed(now, &queued, lane);
                    self.wbuf(pool).parked.push(key);
                    return EmitAction::Held;
                }
                let fill = match (op.kind, &op.payload) {
                    (DevKind::WriteZeroes, _) => Some(Fill::Zeros),
                    (DevKind::Punch, _) => Some(Fill::Hole),
                    (DevKind::Write, Some(d)) => Some(Fill::Data(d.clone())),
                    (DevKind::Write, None) => Some(Fill::Untracked),
                    _ => None,
                };
                let mut released = Vec::new();
                let mut replaced = Vec::new();
                let before = op.wbuf_seq;
                let b = self.wbuf(pool);
                let covers = (b
                    .cut(s, e, before, &mut released, Some(&mut replaced))
                    .iter())
                .map(|r| (r.vol, r.seq))
                .collect();
                self.leave_epochs(&released);
                let f = Flight {
                    start: s,
                    end: e,
                    fill,
                    covers,
                    hold: None,
                    written: 0,
                    replaced,
                };
                self.wbuf(pool).start_flight(key, f);
                EmitAction::Device
            }
            DevKind::Flush => EmitAction::Device,
        }
    }

    /// `device_done`'s part: a write in flight ended, or a patched read came back.
    pub(crate) fn wbuf_done(
        &mut self,
        now: u64,
        key: usize,
        op: &crate::devop::Op,
        result: Result<(), Errno>,
        data: &mut Option<Bytes>,
        out: &mut Outputs,
    ) {
        let pool = op.pool as usize;
        let writeback = matches!(op.owner, Owner::WriteBack { .. });
        let background = matches!(op.owner, Owner::WriteBack { background: true });
        if !self.pools[pool].wbuf.enabled() {
            return;
        }
        if let Some((s, overlay)) = self.wbuf(pool).patches.remove(&key) {
            if let (Ok(()), Some(d)) = (result, data.as_ref()) {
                let mut buf = BytesMut::from(&d[..]);
                patch(&mut buf, s, &overlay);
                *data = Some(buf.freeze());
            }
            return;
        }
        let failed = writeback && result.is_err();
        let mut released = Vec::new();
        let Some(f) =
            self.wbuf(pool)
                .end_flight(key, failed.then_some(now), result.is_err(), &mut released)
        else {
            return;
        };
        self.leave_epochs(&released);
        let b = self.wbuf(pool);
        if failed {
            for pf in &mut b.pending_flushes {
                if f.covers.iter().any(|&(v, q)| WriteBuffer::covers(pf, v, q)) {
                    pf.failed = Errno::worse(pf.failed, result.err());
                }
            }
        } else if writeback {
            b.stats.written_back_bytes += f.end - f.start;
            if background {
                b.stats.background_bytes += f.end - f.start;
            }
        }
        if background {
            b.background_ops -= 1;
        }
        self.wbuf_unpark(now, pool);
        self.wbuf_kick_flushes(now, pool, out);
        if background && result.is_ok() {
            // Keep draining: the next background write-back takes the free place.
            self.wbuf_background(now, pool, out);
        }
        if result.is_err() {
            // Failed write-backs and the bytes a failed direct write cut are dirty again;
            // the background lane waits before it tries the device again.
            let b = self.wbuf(pool);
            let retry_in = b.cfg.map_or(0, |c| c.max_age_ns / 4 + 1);
            b.retry_at_ns = Some(now + retry_in);
            self.wbuf_arm_age(now, pool);
        }
    }

    /// Give parked writes back to the scheduler, which dispatches them again (the pump
    /// that follows every device completion); one whose range is still busy parks again.
    fn wbuf_unpark(&mut self, now: u64, pool: usize) {
        let parked = std::mem::take(&mut self.wbuf(pool).parked);
        for key in parked {
            let (queued, lane) = (self.ops[key].queued, self.ops[key].lane);
            let p = &mut self.pools[pool];
            p.sched.add(now, queued, lane);
            if lane == crate::sched::Lane::Foreground {
                p.wait_until = None;
            }
        }
    }

    /// Write back what pending FLUSHes cover; send (or fail) those whose data has landed.
    pub(crate) fn wbuf_kick_flushes(&mut self, now: u64, pool: usize, out: &mut Outputs) {
        let pending = self.pools[pool].wbuf.pending_flushes.clone();
        for f in &pending {
            let starts = self.pools[pool].wbuf.writeback_candidates(f.vol, f.barrier);
            self.wbuf_issue_upto(now, pool, starts, u64::MAX, false, out);
        }
        let early = self.bug_is(crate::inject::InjectedBug::WbufFlushEarly);
        let b = self.wbuf(pool);
        let (ready, waiting): (Vec<PendingFlush>, Vec<PendingFlush>) = b
            .pending_flushes
            .iter()
            .partition(|f| f.failed.is_some() || early || b.flush_ready(f.vol, f.barrier));
        b.pending_flushes = waiting;
        for f in &ready {
            let waited = now - f.arrived_ns;
            b.stats.flush_wait_total_ns += waited;
            b.stats.flush_wait_max_ns = b.stats.flush_wait_max_ns.max(waited);
        }
        for f in ready {
            if let Some(errno) = f.failed {
                self.emit_counted(f.key);
                let served = Local::Served {
                    key: f.key,
                    result: Err(errno),
                    data: None,
                };
                self.local.0.push_back(served);
            } else {
                self.emit(now, f.key, out);
            }
        }
    }

    /// Write back the dirty pieces at `starts`, up to `max_bytes` (and, in the
    /// background lane, up to the bound on background write-backs).
    fn wbuf_issue_upto(
        &mut self,
        now: u64,
        pool: usize,
        starts: Vec<u64>,
        max_bytes: u64,
        background: bool,
        out: &mut Outputs,
    ) {
        let b = &self.pools[pool].wbuf;
        if background && b.retry_at_ns.is_some_and(|t| now < t) {
            return;
        }
        let mut n = 0;
        for s in starts {
            let full =
                background && self.pools[pool].wbuf.background_ops >= BACKGROUND_WRITEBACK_OPS;
            if n >= max_bytes || full {
                break;
            }
            if !self.pools[pool].wbuf.can_write_back(s) || self.parked_over(pool, s) {
                continue;
            }
            let (p, f) = self.wbuf(pool).take_for_writeback(s);
            n += p.end - s;
            let (kind, payload) = match &p.fill {
                Fill::Data(d) => (DevKind::Write, Some(d.clone())),
                Fill::Zeros => (DevKind::WriteZeroes, None),
                Fill::Hole => (DevKind::Punch, None),
                Fill::Untracked => (DevKind::Write, None),
            };
            if background {
                self.wbuf(pool).background_ops += 1;
            }
            let spec = OpSpec::new(
                Owner::WriteBack { background },
                PoolId(pool as u16),
                kind,
                IoClass::Foreground,
            )
            .at(s, p.end - s)
            .payload(payload)
            .for_volume(p.vol);
            // Recorded before the scheduler may dispatch it, so nothing overlapping is
            // sent meanwhile; its key is the slab slot `queue_op` will use.
            let key = self.ops.vacant_key();
            self.wbuf(pool).start_flight(key, f);
            let got = self.queue_op(now, spec, out);
            debug_assert_eq!(got, key);
        }
    }

    /// Whether a write parked on this pool covers part of the dirty piece at `start`. Such
    /// a write replaces those bytes once the write-back in flight under it lands; writing
    /// them back again meanwhile would take the range from it again, and on a device that
    /// fails every write (a full pool) the retries took it for ever: DST seed 6120, a VM
    /// write parked for 2,400 s of virtual time behind its own range's write-backs.
    fn parked_over(&self, pool: usize, start: u64) -> bool {
        let Some(end) = self.pools[pool].wbuf.piece_end(start) else {
            return false;
        };
        self.pools[pool].wbuf.parked.iter().any(|&k| {
            let o = &self.ops[k];
            o.offset_bytes < end && start < o.offset_bytes + o.len_bytes
        })
    }

    /// Background write-back, within its bound: past 3/4 full, the oldest data until
    /// the buffer is down to 1/2; otherwise data past its age.
    pub(crate) fn wbuf_background(&mut self, now: u64, pool: usize, out: &mut Outputs) {
        let b = &mut self.pools[pool].wbuf;
        let Some(cfg) = b.cfg else { return };
        if b.total_bytes() * 4 > cfg.size_bytes * 3 {
            b.draining = true;
        } else if b.total_bytes() * 2 <= cfg.size_bytes {
            b.draining = false;
        }
        let room = BACKGROUND_WRITEBACK_OPS.saturating_sub(b.background_ops) as usize;
        if room == 0 {
            return;
        }
        let (starts, max_bytes) = if b.draining {
            let excess = b.total_bytes() - cfg.size_bytes / 2;
            (b.oldest(None, excess, room), excess)
        } else if b
            .oldest_admitted_ns()
            .is_some_and(|t| t.saturating_add(cfg.max_age_ns) <= now)
        {
            let cutoff = now.saturating_sub(cfg.max_age_ns);
            (b.oldest(Some(cutoff), 0, room), u64::MAX)
        } else {
            return;
        };
        self.wbuf_issue_upto(now, pool, starts, max_bytes, true, out);
    }

    /// Arm the age timer (one of the deadlines `Engine::next_deadline` reports).
    fn wbuf_arm_age(&mut self, now: u64, pool: usize) {
        let b = &self.pools[pool].wbuf;
        let (Some(cfg), Some(oldest)) = (b.cfg, b.oldest_admitted_ns()) else {
            return;
        };
        if b.age_timer_at.is_some() {
            return;
        }
        // Pieces under a write in flight are retried a little later, not in a spin.
        let at = (oldest + cfg.max_age_ns).max(now + cfg.max_age_ns / 4 + 1);
        self.wbuf(pool).age_timer_at = Some(at);
    }

    /// `tick`'s part: write back data past its age.
    pub(crate) fn wbuf_tick(&mut self, now: u64, out: &mut Outputs) {
        for pool in 0..self.pools.len() {
            if self.pools[pool].wbuf.age_timer_at.is_none_or(|t| t > now) {
                continue;
            }
            self.wbuf(pool).age_timer_at = None;
            self.wbuf_background(now, pool, out);
            self.wbuf_arm_age(now, pool);
        }
    }

    /// At shutdown, once idle: a host-tag FLUSH on every pool still holding data, so
    /// nothing buffered is lost by a clean stop. True if one was started.
    pub(crate) fn wbuf_flush_at_stop(&mut self, now: u64, out: &mut Outputs) -> bool {
        let mut started = false;
        for pool in 0..self.pools.len() {
            if !self.pools[pool].wbuf.is_empty() {
                let spec = OpSpec::new(
                    Owner::WriteBack { background: false },
                    PoolId(pool as u16),
                    DevKind::Flush,
                    IoClass::Metadata,
                );
                self.queue_op(now, spec, out);
                started = true;
            }
        }
        started
    }
}

fn covers_all(overlay: &[(u64, u64, Fill)], s: u64, e: u64) -> bool {
    let mut spans: Vec<(u64, u64)> = overlay.iter().map(|&(a, b, _)| (a, b)).collect();
    spans.sort_unstable();
    let mut at = s;
    for (a, b) in spans {
        if a > at {
            return false;
        }
        at = at.max(b);
    }
    at >= e
}

/// Lay the overlay (absolute offsets, in order) over `buf`, which starts at `s`.
fn patch(buf: &mut BytesMut, s: u64, overlay: &[(u64, u64, Fill)]) {
    for (a, b, f) in overlay {
        let r = (a - s) as usize..(b - s) as usize;
        match f {
            Fill::Data(d) => buf[r].copy_from_slice(d),
            Fill::Zeros | Fill::Hole => buf[r].fill(0),
            Fill::Untracked => {}
        }
    }
}
