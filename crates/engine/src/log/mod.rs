//! The log-structured write path (seed 002): small and random writes are gathered per
//! volume and appended to the open segment of a per-pool log as one sequential device
//! write; the overlay of the content mapping table redirects reads to them; a cleaner
//! reclaims segments whose data was overwritten.
//!
//! - Writes are acknowledged once buffered (the paper's early completion). Until their
//!   append lands, reads of that data are served from RAM. A commit seals the buffers
//!   and waits for the appends before it flushes the pools and writes the records that
//!   point at them, so a completed FLUSH covers logged writes like any other.
//! - `mode = "bitvisor"` (seed 002's mechanism as the paper built it): each write piece
//!   is placed at the stream's next sequential location and sent at once as its own
//!   append; its request completes only when that append does (write-through, nothing
//!   gathered, nothing acknowledged from RAM). Mapping, commits, recovery and the
//!   cleaner are the same as the gathering log's.
//! - Segments are aligned groups of chunks taken from the pool allocator; each belongs to
//!   one volume (so freeing one follows that volume's journal, and no volume ever reads
//!   another's log). The segment table lives in RAM and is rebuilt at mount from the
//!   overlays.
//! - Each volume has two streams per pool: `HOT` for VM writes and `COLD` for what the
//!   cleaner copies (data that survived a segment's lifetime is likely to live long), so
//!   cleaned data does not mix with fresh data.

pub(crate) mod append;
mod cleaner;
mod livemap;
pub(crate) mod nospace;
mod recover;
pub(crate) mod state;
pub(crate) mod vol;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::engine::Engine;
use crate::layout::{DATA_START_BYTES, chunk_offset};
use crate::overlay::Overlay;
use crate::reclaim::Freed;
use crate::types::PoolId;

pub(crate) use state::{COLD, HOT, LogOutcome, Piece, RamPiece, ReadPart, Segment};
pub(crate) use vol::*;

impl Engine {
    pub(crate) fn seg_chunks(&self) -> u64 {
        self.cfg.log.segment_bytes / self.cfg.chunk_bytes
    }

    pub(crate) fn seg_base(&self, group: u64) -> u64 {
        chunk_offset(group * self.seg_chunks(), self.cfg.chunk_bytes)
    }

    /// The segment group a device offset falls in.
    pub(crate) fn group_of(&self, dev: u64) -> u64 {
        (dev - DATA_START_BYTES) / self.cfg.log.segment_bytes
    }

    /// Whether volume `v` logs its writes on `pool`.
    pub(crate) fn log_enabled(&self, v: u32, pool: PoolId) -> bool {
        self.vols[v as usize]
            .log
            .enabled
            .unwrap_or(self.pools[pool.0 as usize].cfg.log)
    }

    pub(crate) fn log_report(&self, pool: usize) -> Option<crate::report::LogReport> {
        let logs_here =
            self.pools[pool].cfg.log || self.vols.iter().any(|v| v.log.enabled == Some(true));
        let pl = &self.logs[pool];
        if !logs_here && pl.segments.is_empty() && pl.stats.appends == 0 {
            return None;
        }
        let s = &pl.stats;
        let ram: u64 = pl.ram.values().map(|r| r.len).sum();
        Some(crate::report::LogReport {
            segment_bytes: self.cfg.log.segment_bytes,
            segments: pl.segments.len() as u64,
            free_segments: self.free_segments(pool),
            live_bytes: pl.segments.values().map(|s| s.live_bytes).sum(),
            user_writes: s.user_writes,
            user_bytes: s.user_bytes,
            appends: s.appends,
            append_bytes: s.append_bytes,
            cleaner_read_bytes: s.cleaner_read_bytes,
            cleaner_bytes: s.cleaner_bytes,
            segments_cleaned: s.segments_cleaned,
            segments_freed: s.segments_freed,
            home_fallbacks: s.home_fallbacks,
            relocations: s.relocations,
            cleaner_waits: s.cleaner_waits,
            write_amplification: if s.user_bytes == 0 {
                0.0
            } else {
                s.append_bytes as f64 / s.user_bytes as f64
            },
            buffered_bytes: ram,
        })
    }

    /// The cleaner competes with VM I/O (instead of waiting for idle time) once the
    /// pool is down to its reserve.
    pub(crate) fn cleaner_urgent(&self, pool: usize) -> bool {
        let l = &self.cfg.log;
        self.free_segments(pool) < (l.clean_below_free_segments / 2).max(l.reserve_segments + 2)
    }

    /// Free segment groups of a pool.
    pub(crate) fn free_segments(&self, pool: usize) -> u64 {
        self.pools[pool]
            .alloc
            .free_aligned_groups(self.seg_chunks())
    }

    /// Split `[dev, dev + len)` of `pool` into what RAM holds and what the device holds.
    pub(crate) fn read_parts(
        &self,
        pool: PoolId,
        dev: u64,
        len: u64,
    ) -> Option<SmallVec<[(u64, u64, ReadPart); 4]>> {
        let ram = &self.logs[pool.0 as usize].ram;
        if ram.is_empty() {
            return None;
        }
        let end = dev + len;
        let mut hits: SmallVec<[(u64, u64, Option<Bytes>); 4]> = SmallVec::new();
        for (&d, p) in ram.range(..end).rev() {
            if d + p.len <= dev {
                break;
            }
            let s = d.max(dev);
            let e = (d + p.len).min(end);
            let data = p
                .data
                .as_ref()
                .map(|b| b.slice((s - d) as usize..(e - d) as usize));
            hits.push((s, e, data));
        }
        if hits.is_empty() {
            return None;
        }
        hits.reverse();
        let mut parts = SmallVec::new();
        let mut cur = dev;
        for (s, e, data) in hits {
            if s > cur {
                parts.push((cur, s, ReadPart::Dev));
            }
            parts.push((s, e, ReadPart::Ram(data)));
            cur = e;
        }
        if cur < end {
            parts.push((cur, end, ReadPart::Dev));
        }
        Some(parts)
    }

    /// Map `[start, end)` of volume `v` in the overlay, journal it, and drop the
    /// references the new value replaces.
    pub(crate) fn overlay_set(&mut self, v: u32, start: u64, end: u64, value: Overlay) {
        let vol = &mut self.vols[v as usize];
        let removed = vol.overlay.insert(start, end, value);
        let seq = vol
            .journal
            .append(crate::journal::Record::Overlay { start, end, value });
        self.unref_removed(v, &removed);
        // Logged data over an interrupted migration's `Moved` range (a job dropped at
        // mount, or cancelled, leaves them; the volume logs again after) frees the
        // destination chunk once nothing points into it (DST seed 103 leaked one).
        self.migration_unref_moved(v, &removed, seq);
    }

    /// Log data that left the overlay: the segments holding it lose live bytes.
    pub(crate) fn unref_removed(&mut self, v: u32, removed: &[(u64, u64, Overlay)]) {
        for &(s, e, val) in removed {
            if let Overlay::Log { pool, dev_offset } = val {
                self.log_unref(v, pool, dev_offset, e - s);
            }
        }
    }

    fn log_unref(&mut self, v: u32, pool: PoolId, dev: u64, len: u64) {
        let sb = self.cfg.log.segment_bytes;
        let mut pos = dev;
        let end = dev + len;
        while pos < end {
            let g = self.group_of(pos);
            let seg_end = self.seg_base(g) + sb;
            let n = end.min(seg_end) - pos;
            let pl = &mut self.logs[pool.0 as usize];
            let dead = match pl.segments.get_mut(&g) {
                Some(seg) => {
                    debug_assert_eq!(seg.owner, v, "log data of another volume");
                    seg.live_bytes -= n.min(seg.live_bytes);
                    seg.live.clear(pos - (seg_end - sb), n);
                    seg.live_bytes == 0 && !seg.open
                }
                None => false,
            };
            if dead {
                self.free_segment(pool, g);
            }
            pos += n;
        }
    }

    /// Give a dead segment's chunks back once the records that emptied it are durable
    /// and no operation on it is in flight.
    pub(crate) fn free_segment(&mut self, pool: PoolId, g: u64) {
        let n = self.seg_chunks();
        let Some(seg) = self.logs[pool.0 as usize].segments.remove(&g) else {
            return;
        };
        let pl = &mut self.logs[pool.0 as usize];
        pl.stats.segments_freed += 1;
        for s in pl.segments.values_mut() {
            s.stuck = false;
        }
        let owner = seg.owner;
        let seq = self.vols[owner as usize].journal.next_seq - 1;
        let mut c = 0;
        while c < n {
            if seg.held >> c & 1 == 0 {
                c += 1;
                continue;
            }
            let first = c;
            while c < n && seg.held >> c & 1 == 1 {
                c += 1;
            }
            self.defer_free(
                Freed::Chunks {
                    pool,
                    first: g * n + first,
                    n: c - first,
                },
                smallvec::smallvec![(owner, seq)],
            );
        }
    }
}
