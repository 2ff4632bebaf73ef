//! The host write-back buffer of a pool (seed 001 one level up: host-side flush isolation).
//!
//! A pool read and written with O_DIRECT has no host page cache, so the engine keeps its
//! own bounded buffer of VM writes: a write is acknowledged once its bytes are here, reads
//! see them, and a FLUSH with a volume's tag writes back only that volume's entries before
//! the device flush (a FLUSH with the host tag writes back everything). This module is the
//! bookkeeping only (no device operations); `hook.rs` wires it into the engine.
//!
//! Invariants (checked by [`WriteBuffer::check`]):
//! - dirty pieces do not overlap one another, nor do writes in flight (`flights`);
//! - a dirty piece may lie over a write in flight (it is newer), but is not written back
//!   until that write lands, so two device writes to one range are never in flight
//!   together and the newer bytes always land last;
//! - the per-volume and total byte counts match the pieces and write-backs in flight.
//!
//! Each piece keeps the epoch of the operation that wrote it (through a hold), so freed
//! space is not reused while data destined for it is still only in RAM (`reclaim.rs`).

pub(crate) mod hook;
pub(crate) mod local;

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use smallvec::SmallVec;

/// A pool's write-back buffer settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct WriteBufferConfig {
    /// RAM for buffered writes (dirty and being written back), shared by the volumes on
    /// the pool with a fair share each.
    pub size_bytes: u64,
    /// Buffered data older than this is written back in the background.
    pub max_age_ns: u64,
}

impl WriteBufferConfig {
    pub const DEFAULT_SIZE_BYTES: u64 = 256 << 20;
    pub const DEFAULT_MAX_AGE_NS: u64 = 1_000_000_000;
}

/// What a piece holds.
#[derive(Clone, Debug)]
pub(crate) enum Fill {
    Data(Bytes),
    /// Zeros kept allocated (a write-zeroes with NO_HOLE, or of a thick volume).
    Zeros,
    /// Zeros that give the space back (a thin volume's trim or write-zeroes): written back
    /// as a punch, as the same request is when it goes straight to the device.
    Hole,
    /// Timing-only simulation: a length and no bytes.
    Untracked,
}

impl Fill {
    /// Bytes `[a, b)` of this fill (offsets relative to its start).
    fn slice(&self, a: u64, b: u64) -> Fill {
        match self {
            Fill::Data(d) => Fill::Data(d.slice(a as usize..b as usize)),
            Fill::Zeros => Fill::Zeros,
            Fill::Hole => Fill::Hole,
            Fill::Untracked => Fill::Untracked,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Piece {
    pub end: u64,
    pub vol: u32,
    pub fill: Fill,
    /// Admission order for FLUSHes: a FLUSH covers the pieces admitted before it. A
    /// piece that replaced older buffered bytes of its volume carries theirs.
    pub seq: u64,
    /// When its bytes were admitted (newer or older than a write in the scheduler).
    pub written: u64,
    pub admitted_ns: u64,
    pub hold: u64,
}

/// A device write in flight on the pool: a write-back of a piece, or a write that went
/// straight to the device over buffered ranges.
#[derive(Clone, Debug)]
pub(crate) struct Flight {
    pub start: u64,
    pub end: u64,
    /// The bytes, for reads while it is in flight: a read may see an unfinished write,
    /// but not the older bytes it replaced in the buffer.
    pub fill: Option<Fill>,
    /// (volume, admission seq) of buffered data this write makes durable once flushed.
    pub covers: SmallVec<[(u32, u64); 1]>,
    /// Write-backs only: the piece's hold (its bytes count against the buffer).
    pub hold: Option<u64>,
    /// Write-backs only: the piece's `written`.
    pub written: u64,
    /// Direct writes only: the buffered bytes this write cut (start, piece), still holding
    /// their holds. If the write fails they are buffered again: a failed write replaced
    /// nothing, and they may be the only copy of data a VM was told is written.
    pub replaced: Vec<(u64, Piece)>,
}

/// The admission of a dirty piece a newer write replaced.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Replaced {
    pub vol: u32,
    pub seq: u64,
    pub admitted_ns: u64,
}

/// Buffered bytes a read takes from RAM: (start, end, fill), in the order to apply them.
pub(crate) type Overlay = Vec<(u64, u64, Fill)>;

/// A FLUSH waiting for the write-backs of what it covers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PendingFlush {
    pub key: usize,
    /// `None`: the host tag, every volume.
    pub vol: Option<u32>,
    /// It covers pieces admitted before this.
    pub barrier: u64,
    /// A write-back it covered failed: complete it with that error (ENOSPC stays
    /// ENOSPC, so a VM pauses instead of seeing a broken disk).
    pub failed: Option<crate::types::Errno>,
    pub arrived_ns: u64,
}

#[derive(Debug, Default)]
pub(crate) struct WriteBuffer {
    pub cfg: Option<WriteBufferConfig>,
    dirty: BTreeMap<u64, Piece>,
    /// (seq, start) of every dirty piece: oldest first.
    by_seq: BTreeSet<(u64, u64)>,
    /// (vol, seq, start) of every dirty piece.
    by_vol: BTreeSet<(u32, u64, u64)>,
    /// Flights by start (they never overlap), and their operation keys.
    flights: BTreeMap<u64, usize>,
    flight_of: BTreeMap<usize, Flight>,
    /// (vol, seq, key) and (seq, key) of what each flight covers.
    flight_cover_vol: BTreeSet<(u32, u64, usize)>,
    flight_cover: BTreeSet<(u64, usize)>,
    /// Bytes held per volume (dirty plus being written back), and in total.
    vol_bytes: BTreeMap<u32, u64>,
    total_bytes: u64,
    /// hold id -> (epoch, pieces and flights referring to it).
    holds: BTreeMap<u64, (u64, u32)>,
    next_hold: u64,
    next_seq: u64,
    pub pending_flushes: Vec<PendingFlush>,
    /// Direct writes dispatched while a write to their range was in flight.
    pub parked: Vec<usize>,
    /// Reads sent to the device with buffered bytes to lay over their data: key ->
    /// (read start, overlay).
    pub patches: BTreeMap<usize, (u64, Overlay)>,
    /// When the age timer fires next.
    pub age_timer_at: Option<u64>,
    /// Background write-backs (high-water, age, make-room) queued or in flight: at most
    /// [`BACKGROUND_WRITEBACK_OPS`].
    pub background_ops: u32,
    /// Past the high-water mark and not yet down to the low one.
    pub draining: bool,
    /// After a write to the pool failed (a full or failing device): no background
    /// write-back before this. Retried at once, the bytes it put back failed again at
    /// once, forever (DST seed 123 during a lasting ENOSPC spell never settled).
    pub retry_at_ns: Option<u64>,
    pub stats: WriteBufferStats,
}

/// Background write-backs a pool keeps queued or in flight at most. A FLUSH's own
/// write-backs are foreground work and go ahead of queued background ones, so they wait
/// for at most this many, not for a whole high-water or age burst of other volumes' data
/// (seed 001's isolation, one level up); enough to keep an SSD busy draining the buffer.
pub const BACKGROUND_WRITEBACK_OPS: u32 = 8;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WriteBufferStats {
    pub absorbed_writes: u64,
    pub absorbed_bytes: u64,
    /// Writes that found no room (or their volume over its share) and went to the device.
    pub direct_writes: u64,
    pub written_back_bytes: u64,
    /// Bytes dropped because a newer write replaced them before write-back.
    pub superseded_bytes: u64,
    /// Bytes written back in the background lane (high-water, age, make-room); the rest
    /// of `written_back_bytes` was written back for FLUSHes.
    pub background_bytes: u64,
    /// FLUSHes on this pool, the device operations queued in its scheduler when each
    /// arrived (summed), and how long they waited for their write-backs before the
    /// device flush (summed and the longest).
    pub flushes: u64,
    pub queued_ahead_of_flushes: u64,
    pub flush_wait_total_ns: u64,
    pub flush_wait_max_ns: u64,
    pub reads_served: u64,
    pub reads_patched: u64,
    pub peak_bytes: u64,
}

impl WriteBuffer {
    pub fn new(cfg: Option<WriteBufferConfig>) -> WriteBuffer {
        WriteBuffer {
            cfg,
            ..Default::default()
        }
    }

    pub fn enabled(&self) -> bool {
        self.cfg.is_some()
    }

    pub fn is_empty(&self) -> bool {
        self.dirty.is_empty() && self.flight_of.is_empty()
    }

    /// Bytes volume `vol` holds in the buffer (dirty plus being written back).
    pub fn volume_bytes(&self, vol: u32) -> u64 {
        self.vol_bytes.get(&vol).copied().unwrap_or(0)
    }

    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    #[cfg(test)]
    pub fn dirty_len(&self) -> usize {
        self.dirty.len()
    }

    /// The next admission sequence number (a FLUSH arriving now covers everything below).
    pub fn barrier(&self) -> u64 {
        self.next_seq
    }

    /// Whether `len` more bytes of volume `vol` fit: within the buffer and within the
    /// volume's fair share (the buffer divided among the volumes holding data, this one
    /// included).
    pub fn has_room(&self, vol: u32, len: u64) -> bool {
        let Some(cfg) = self.cfg else { return false };
        let mine = self.vol_bytes.get(&vol).copied().unwrap_or(0);
        let active = self.vol_bytes.len() as u64 + u64::from(mine == 0);
        self.total_bytes + len <= cfg.size_bytes && mine + len <= cfg.size_bytes / active
    }

    /// A new hold on `epoch` (released when nothing refers to it).
    pub fn hold(&mut self, epoch: u64) -> u64 {
        let id = self.next_hold;
        self.next_hold += 1;
        self.holds.insert(id, (epoch, 0));
        id
    }

    fn add_ref(&mut self, hold: u64) {
        if let Some(h) = self.holds.get_mut(&hold) {
            h.1 += 1;
        }
    }

    /// Drop one reference; the epoch to leave when it was the last.
    fn drop_ref(&mut self, hold: u64, released: &mut Vec<u64>) {
        if let Some(h) = self.holds.get_mut(&hold) {
            h.1 -= 1;
            if h.1 == 0 {
                released.push(h.0);
                self.holds.remove(&hold);
            }
        }
    }

    fn add_bytes(&mut self, vol: u32, n: u64) {
        *self.vol_bytes.entry(vol).or_insert(0) += n;
        self.total_bytes += n;
        self.stats.peak_bytes = self.stats.peak_bytes.max(self.total_bytes);
    }

    fn sub_bytes(&mut self, vol: u32, n: u64) {
        if let Some(b) = self.vol_bytes.get_mut(&vol) {
            *b -= n;
            if *b == 0 {
                self.vol_bytes.remove(&vol);
            }
        }
        self.total_bytes -= n;
    }

    fn insert_piece(&mut self, start: u64, p: Piece) {
        self.add_bytes(p.vol, p.end - start);
        self.add_ref(p.hold);
        self.by_seq.insert((p.seq, start));
        self.by_vol.insert((p.vol, p.seq, start));
        self.dirty.insert(start, p);
    }

    fn remove_piece(&mut self, start: u64) -> Piece {
        let p = self.dirty.remove(&start).expect("piece exists");
        self.sub_bytes(p.vol, p.end - start);
        self.by_seq.remove(&(p.seq, start));
        self.by_vol.remove(&(p.vol, p.seq, start));
        p
    }

    /// Starts of the dirty pieces overlapping `[s, e)`.
    fn dirty_overlapping(&self, s: u64, e: u64) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .dirty
            .range(..e)
            .rev()
            .take_while(|(_, p)| p.end > s)
            .map(|(&k, _)| k)
            .collect();
        v.reverse();
        v
    }

    /// Remove `[s, e)` from the dirty pieces admitted before `before` (a newer write
    /// replaces them; newer pieces stay over it). Returns the admission of each affected
    /// piece, and pushes released epochs; with `keep`, the removed parts go there with
    /// their holds instead (a device write that may fail, see [`Flight::replaced`]).
    pub fn cut(
        &mut self,
        s: u64,
        e: u64,
        before: u64,
        released: &mut Vec<u64>,
        mut keep: Option<&mut Vec<(u64, Piece)>>,
    ) -> SmallVec<[Replaced; 1]> {
        let mut covers = SmallVec::new();
        for ps in self.dirty_overlapping(s, e) {
            if self.dirty[&ps].written >= before {
                continue;
            }
            let p = self.remove_piece(ps);
            if ps < s {
                let left = Piece {
                    end: s,
                    fill: p.fill.slice(0, s - ps),
                    ..p.clone()
                };
                self.insert_piece(ps, left);
            }
            if p.end > e {
                let right = Piece {
                    fill: p.fill.slice(e - ps, p.end - ps),
                    ..p.clone()
                };
                self.insert_piece(e, right);
            }
            self.stats.superseded_bytes += p.end.min(e) - ps.max(s);
            covers.push(Replaced {
                vol: p.vol,
                seq: p.seq,
                admitted_ns: p.admitted_ns,
            });
            match keep.as_deref_mut() {
                Some(kept) => {
                    let (a, b) = (ps.max(s), p.end.min(e));
                    let mid = Piece {
                        end: b,
                        fill: p.fill.slice(a - ps, b - ps),
                        ..p
                    };
                    kept.push((a, mid));
                }
                None => self.drop_ref(p.hold, released),
            }
        }
        covers
    }

    /// Buffer a write of `range` by `vol` at `now`, holding `hold`. `fresh_seq` is the
    /// injected defect `wbuf-replace-forgets`: the new piece does not inherit the
    /// admission of the pieces it replaces.
    #[allow(clippy::too_many_arguments)]
    pub fn admit(
        &mut self,
        range: std::ops::Range<u64>,
        vol: u32,
        fill: Fill,
        now: u64,
        hold: u64,
        released: &mut Vec<u64>,
        fresh_seq: bool,
    ) {
        let (s, e) = (range.start, range.end);
        let mut replaced = self.cut(s, e, u64::MAX, released, None);
        if fresh_seq {
            replaced.clear();
        }
        // A FLUSH that arrived after a piece this write replaces must still wait for
        // these bytes (the replaced ones are gone), so the new piece takes the oldest
        // replaced piece's admission of its volume: seq (which FLUSH barriers compare)
        // and time (the range has been dirty since then, for the age write-back).
        let (seq, admitted_ns) = replaced
            .iter()
            .filter(|r| r.vol == vol)
            .map(|r| (r.seq, r.admitted_ns))
            .min()
            .unwrap_or((self.next_seq, now));
        self.next_seq += 1;
        let p = Piece {
            end: e,
            vol,
            fill,
            seq,
            written: self.next_seq - 1,
            admitted_ns,
            hold,
        };
        self.insert_piece(s, p);
        self.stats.absorbed_writes += 1;
        self.stats.absorbed_bytes += e - s;
    }

    /// Whether a write in flight overlaps `[s, e)`.
    pub fn flight_overlaps(&self, s: u64, e: u64) -> bool {
        self.flights
            .range(..e)
            .next_back()
            .is_some_and(|(_, k)| self.flight_of[k].end > s)
    }

    /// Record device write `key` of `[f.start, f.end)` as in flight.
    pub fn start_flight(&mut self, key: usize, f: Flight) {
        debug_assert!(!self.flight_overlaps(f.start, f.end));
        for &(v, seq) in &f.covers {
            self.flight_cover_vol.insert((v, seq, key));
            self.flight_cover.insert((seq, key));
        }
        if f.hold.is_some()
            && let Some((v, _)) = f.covers.first()
        {
            self.add_bytes(*v, f.end - f.start);
        }
        self.flights.insert(f.start, key);
        self.flight_of.insert(key, f);
    }

    /// Device write `key` finished; a failed write-back (`redirty_at`: now) is put back
    /// where no newer write replaced it, and so are the bytes a failed direct write cut
    /// (`failed`). Returns the flight.
    pub fn end_flight(
        &mut self,
        key: usize,
        redirty_at: Option<u64>,
        failed: bool,
        released: &mut Vec<u64>,
    ) -> Option<Flight> {
        let mut f = self.flight_of.remove(&key)?;
        self.flights.remove(&f.start);
        for &(v, seq) in &f.covers {
            self.flight_cover_vol.remove(&(v, seq, key));
            self.flight_cover.remove(&(seq, key));
        }
        if f.hold.is_some()
            && let Some((v, _)) = f.covers.first()
        {
            self.sub_bytes(*v, f.end - f.start);
        }
        if let Some(now) = redirty_at {
            self.redirty(&f, now);
        }
        if let Some(h) = f.hold {
            self.drop_ref(h, released);
        }
        for (start, p) in std::mem::take(&mut f.replaced) {
            let hold = p.hold;
            if failed {
                // Admission, age and `written` as before the cut: FLUSHes that covered
                // these bytes wait for them again, and writes queued after them still
                // replace them.
                for (a, b) in self.gaps(start, p.end) {
                    let part = Piece {
                        end: b,
                        fill: p.fill.slice(a - start, b - start),
                        ..p.clone()
                    };
                    self.insert_piece(a, part);
                }
            }
            self.drop_ref(hold, released);
        }
        Some(f)
    }

    /// The parts of `[s, e)` no dirty piece covers (newer bytes a write absorbed while a
    /// device write of the range was in flight stay over it).
    fn gaps(&self, s: u64, e: u64) -> Vec<(u64, u64)> {
        let mut at = s;
        let mut gaps = Vec::new();
        for ps in self.dirty_overlapping(s, e) {
            if ps > at {
                gaps.push((at, ps));
            }
            at = at.max(self.dirty[&ps].end);
        }
        if at < e {
            gaps.push((at, e));
        }
        gaps
    }

    /// Whether a dirty piece starts at `start` with no write in flight under it: the
    /// candidates of a write-back round can be cut or covered by a write the scheduler
    /// dispatches while the round queues its write-backs.
    /// The end of the dirty piece at `start`, if there is one.
    pub fn piece_end(&self, start: u64) -> Option<u64> {
        self.dirty.get(&start).map(|p| p.end)
    }

    pub fn can_write_back(&self, start: u64) -> bool {
        self.dirty
            .get(&start)
            .is_some_and(|p| !self.flight_overlaps(start, p.end))
    }

    /// Take dirty piece at `start` for write-back as operation `key`.
    pub fn take_for_writeback(&mut self, start: u64) -> (Piece, Flight) {
        let p = self.remove_piece(start);
        let f = Flight {
            start,
            end: p.end,
            fill: Some(p.fill.clone()),
            covers: smallvec::smallvec![(p.vol, p.seq)],
            hold: Some(p.hold),
            written: p.written,
            replaced: Vec::new(),
        };
        // The piece's reference to its hold passes to the flight.
        (p, f)
    }

    /// Put back the parts of a failed write-back that no newer write replaced.
    fn redirty(&mut self, f: &Flight, now: u64) {
        let (Some(fill), Some(&(vol, seq)), Some(hold)) = (&f.fill, f.covers.first(), f.hold)
        else {
            return;
        };
        for (a, b) in self.gaps(f.start, f.end) {
            let p = Piece {
                end: b,
                vol,
                fill: fill.slice(a - f.start, b - f.start),
                seq,
                written: f.written,
                admitted_ns: now,
                hold,
            };
            self.insert_piece(a, p);
        }
    }

    /// Dirty pieces of `vol` (`None`: all) admitted before `barrier` that can be written
    /// back now (no write in flight over them), oldest first.
    pub fn writeback_candidates(&self, vol: Option<u32>, barrier: u64) -> Vec<u64> {
        let it: Box<dyn Iterator<Item = u64>> = match vol {
            Some(v) => Box::new(
                self.by_vol
                    .range((v, 0, 0)..(v, barrier, 0))
                    .map(|&(_, _, s)| s),
            ),
            None => Box::new(self.by_seq.range(..(barrier, 0)).map(|&(_, s)| s)),
        };
        it.filter(|&s| !self.flight_overlaps(s, self.dirty[&s].end))
            .collect()
    }

    /// The oldest dirty pieces admitted at or before `cutoff_ns` (age write-back), or all
    /// pieces oldest first up to `bytes` (high-water write-back), without the ones under
    /// a write in flight; at most `max_pieces` (the background write-backs have a bound,
    /// and a buffer of small pieces is long).
    pub fn oldest(&self, cutoff_ns: Option<u64>, bytes: u64, max_pieces: usize) -> Vec<u64> {
        let mut v = Vec::new();
        let mut n = 0;
        for &(_, s) in &self.by_seq {
            let p = &self.dirty[&s];
            if cutoff_ns.is_some_and(|c| p.admitted_ns > c)
                || (cutoff_ns.is_none() && n >= bytes)
                || v.len() >= max_pieces
            {
                break;
            }
            if !self.flight_overlaps(s, p.end) {
                n += p.end - s;
                v.push(s);
            }
        }
        v
    }

    /// Up to `max_pieces` of volume `vol`'s dirty pieces that can be written back now,
    /// oldest first (to make room for its writes).
    pub fn oldest_of_volume(&self, vol: u32, max_pieces: usize) -> Vec<u64> {
        self.by_vol
            .range((vol, 0, 0)..(vol, u64::MAX, 0))
            .map(|&(_, _, s)| s)
            .filter(|&s| !self.flight_overlaps(s, self.dirty[&s].end))
            .take(max_pieces)
            .collect()
    }

    /// When the oldest dirty piece was admitted.
    pub fn oldest_admitted_ns(&self) -> Option<u64> {
        self.by_seq
            .first()
            .map(|&(_, s)| self.dirty[&s].admitted_ns)
    }

    /// Whether everything a FLUSH of `vol` with `barrier` covers has been written back.
    pub fn flush_ready(&self, vol: Option<u32>, barrier: u64) -> bool {
        match vol {
            Some(v) => {
                self.by_vol
                    .range((v, 0, 0)..(v, barrier, 0))
                    .next()
                    .is_none()
                    && self
                        .flight_cover_vol
                        .range((v, 0, 0)..(v, barrier, 0))
                        .next()
                        .is_none()
            }
            None => {
                self.by_seq.range(..(barrier, 0)).next().is_none()
                    && self.flight_cover.range(..(barrier, 0)).next().is_none()
            }
        }
    }

    /// Whether a failed write-back covering (vol, seq) concerns a FLUSH.
    pub fn covers(f: &PendingFlush, vol: u32, seq: u64) -> bool {
        seq < f.barrier && f.vol.is_none_or(|v| v == vol)
    }

    /// What a read of `[s, e)` must take from RAM, in the order to apply it (writes in
    /// flight first, then dirty pieces, which are newer): (start, end, fill).
    pub fn read_overlay(&self, s: u64, e: u64) -> Overlay {
        let mut v = Vec::new();
        let fl: Vec<&Flight> = self
            .flights
            .range(..e)
            .rev()
            .map(|(_, k)| &self.flight_of[k])
            .take_while(|f| f.end > s)
            .collect();
        for f in fl.into_iter().rev() {
            if let Some(fill) = &f.fill {
                let (a, b) = (f.start.max(s), f.end.min(e));
                v.push((a, b, fill.slice(a - f.start, b - f.start)));
            }
        }
        for ps in self.dirty_overlapping(s, e) {
            let p = &self.dirty[&ps];
            let (a, b) = (ps.max(s), p.end.min(e));
            v.push((a, b, p.fill.slice(a - ps, b - ps)));
        }
        v
    }

    /// Check the invariants (tests and DST).
    pub fn check(&self) -> Result<(), String> {
        let mut prev = 0;
        let mut sum: BTreeMap<u32, u64> = BTreeMap::new();
        for (&s, p) in &self.dirty {
            if s < prev || p.end <= s {
                return Err(format!("dirty piece [{s}, {}) overlaps or is empty", p.end));
            }
            if let Fill::Data(d) = &p.fill
                && d.len() as u64 != p.end - s
            {
                return Err(format!("piece at {s} holds {} bytes", d.len()));
            }
            prev = p.end;
            *sum.entry(p.vol).or_insert(0) += p.end - s;
        }
        let mut prev = 0;
        for (&s, k) in &self.flights {
            let f = &self.flight_of[k];
            if s < prev || f.start != s {
                return Err(format!("writes in flight overlap at {s}"));
            }
            prev = f.end;
            if f.hold.is_some()
                && let Some((v, _)) = f.covers.first()
            {
                *sum.entry(*v).or_insert(0) += f.end - f.start;
            }
        }
        if sum != self.vol_bytes || sum.values().sum::<u64>() != self.total_bytes {
            return Err(format!(
                "byte counts {:?} / {} do not match pieces {sum:?}",
                self.vol_bytes, self.total_bytes
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
