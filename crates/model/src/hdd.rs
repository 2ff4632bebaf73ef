//! Rotating disk model.
//!
//! Service time = command overhead + seek + rotational latency + media transfer, with:
//! - a two-regime seek curve: `a + b·sqrt(d)` up to a boundary distance, `c + e·d` beyond;
//! - the platter's angular position tracked from time zero, so rotational latency depends
//!   on where the head lands (not a constant half rotation);
//! - zoned recording (outer zones hold more sectors per track, so transfer is faster there);
//! - track skew, so a transfer that crosses tracks pays only the head-switch time;
//! - a segmented on-board read cache with read-ahead that streams in idle time;
//! - an optional volatile write cache, destaged in FIFO order when the mechanism is idle,
//!   drained by FLUSH and bypassed by FUA writes.
//!
//! `submit` serves an operation as it arrives (no on-drive reordering). A drive with
//! command queueing (`queue_depth` above 1: SATA NCQ, SCSI TCQ) is driven through
//! [`crate::queue::CommandQueue`] instead, which holds the queued commands and asks
//! [`Hdd::positioning_ns`] which one the head reaches first.

use std::collections::VecDeque;

use crate::units::{NS_PER_S, SECTOR_BYTES, transfer_ns};
use crate::{DevOpKind, DevRequest, DeviceCounters, DeviceKind, DeviceModel};

/// Parameters of a rotating disk. Times in nanoseconds, rates in bytes per second.
#[derive(Clone, Debug, PartialEq)]
pub struct HddParams {
    /// Bytes the host may address (a partition at the start of the drive if smaller
    /// than `drive_bytes`).
    pub capacity_bytes: u64,
    /// Bytes of the whole drive; sets the geometry (cylinders, zones).
    pub drive_bytes: u64,
    pub rpm: u32,
    /// Recording surfaces (heads).
    pub surfaces: u32,
    /// Recording zones; sectors per track fall linearly from outer to inner zone.
    pub zones: u32,
    pub media_outer_bytes_per_sec: u64,
    pub media_inner_bytes_per_sec: u64,
    pub seek_track_to_track_ns: u64,
    /// Average seek, taken as the seek over a third of the stroke.
    pub seek_avg_ns: u64,
    pub seek_full_ns: u64,
    /// Extra settle time for writes after a seek.
    pub write_settle_ns: u64,
    pub head_switch_ns: u64,
    /// Controller and host overhead per command (also paid by cache hits).
    pub command_overhead_ns: u64,
    /// Link rate for cache hits and for writes into the write cache.
    pub interface_bytes_per_sec: u64,
    /// Read cache size, split into equal segments.
    pub cache_bytes: u64,
    pub cache_segments: u32,
    /// How far past a read miss the drive keeps reading while idle.
    pub readahead_bytes: u64,
    /// Volatile write cache enabled (ATA WCE).
    pub write_cache: bool,
    pub write_cache_bytes: u64,
    /// Most separate (non-contiguous) writes the cache holds; sustained small random
    /// writes then run at the destage rate, as measured on real drives.
    pub write_cache_max_entries: u32,
    /// Commands the drive holds and reorders (SATA NCQ: 32; SCSI TCQ); 0 or 1: none, the
    /// drive serves commands in arrival order.
    pub queue_depth: u32,
    /// A queued command that has waited this long is served next, ahead of nearer ones
    /// (the firmware's aging rule; see `crate::queue`).
    pub queue_age_limit_ns: u64,
}

impl HddParams {
    /// Use the first `capacity_bytes` of the drive (short-stroking a larger drive keeps
    /// its seek curve honest); a capacity beyond the drive grows the drive.
    pub fn with_capacity(mut self, capacity_bytes: u64) -> Self {
        self.capacity_bytes = capacity_bytes;
        self.drive_bytes = self.drive_bytes.max(capacity_bytes);
        self
    }

    pub fn rotation_ns(&self) -> u64 {
        60 * NS_PER_S / self.rpm as u64
    }
}

#[derive(Clone, Copy, Debug)]
struct Zone {
    start_lba: u64,
    end_lba: u64,
    first_cyl: u64,
    sectors_per_track: u64,
}

#[derive(Clone, Copy, Debug)]
struct Location {
    cyl: u64,
    surface: u64,
    sector: u64,
    zone: usize,
}

#[derive(Clone, Copy, Debug, Default)]
struct Segment {
    start_lba: u64,
    end_lba: u64,
    last_use: u64,
}

/// Read-ahead in progress: the mechanism streams from `from_lba` starting at `at_ns`.
#[derive(Clone, Copy, Debug)]
struct ReadAhead {
    segment: usize,
    /// Where the read that started this stream began: the segment holds nothing before it.
    stream_start_lba: u64,
    from_lba: u64,
    at_ns: u64,
    max_end_lba: u64,
    ns_per_sector: f64,
}

/// Seek curve fitted to three points (track-to-track, average at 1/3 stroke, full stroke).
#[derive(Clone, Copy, Debug)]
struct SeekCurve {
    boundary: f64,
    a: f64,
    b: f64,
    c: f64,
    e: f64,
}

impl SeekCurve {
    fn fit(p: &HddParams, cylinders: u64) -> SeekCurve {
        let cmax = cylinders.max(4) as f64;
        let d0 = (cmax / 3.0).max(2.0);
        let t2t = p.seek_track_to_track_ns as f64;
        let avg = (p.seek_avg_ns as f64).max(t2t);
        let full = (p.seek_full_ns as f64).max(avg);
        let b = (avg - t2t) / (d0.sqrt() - 1.0);
        let a = t2t - b;
        let e = (full - avg) / (cmax - d0);
        let c = avg - e * d0;
        SeekCurve {
            boundary: d0,
            a,
            b,
            c,
            e,
        }
    }

    #[inline]
    fn seek_ns(&self, distance: u64) -> u64 {
        if distance == 0 {
            return 0;
        }
        let d = distance as f64;
        let t = if d <= self.boundary {
            self.a + self.b * d.sqrt()
        } else {
            self.c + self.e * d
        };
        t.max(0.0) as u64
    }
}

/// The rotating disk model. See the module documentation.
#[derive(Clone, Debug)]
pub struct Hdd {
    p: HddParams,
    rotation_ns: u64,
    zones: Vec<Zone>,
    cylinders: u64,
    seek: SeekCurve,
    /// Fraction of a rotation each successive track is skewed by.
    skew_frac: f64,
    head_cyl: u64,
    head_surface: u64,
    /// When the mechanism finishes its current media work.
    free_at_ns: u64,
    segments: Vec<Segment>,
    segment_sectors: u64,
    readahead: Option<ReadAhead>,
    dirty: VecDeque<(u64, u64)>,
    dirty_sectors: u64,
    use_clock: u64,
    counters: DeviceCounters,
    /// A FLUSH is a barrier: nothing submitted after it starts before it completes.
    barrier_ns: u64,
}

impl Hdd {
    pub fn new(p: HddParams) -> Hdd {
        assert!(
            p.rpm > 0 && p.surfaces > 0 && p.zones > 0,
            "HDD geometry must be positive"
        );
        let rotation_ns = p.rotation_ns();
        let spt = |rate: u64| {
            ((rate as u128 * rotation_ns as u128) / (NS_PER_S as u128 * SECTOR_BYTES as u128))
                .max(1) as u64
        };
        let spt_outer = spt(p.media_outer_bytes_per_sec);
        let spt_inner = spt(p.media_inner_bytes_per_sec).min(spt_outer);
        let z = p.zones as u64;
        let spt_of = |i: u64| {
            if z == 1 {
                spt_outer
            } else {
                spt_outer - (spt_outer - spt_inner) * i / (z - 1)
            }
        };
        let sum_spt: u64 = (0..z).map(spt_of).sum();
        let drive_sectors = p.drive_bytes.max(p.capacity_bytes).div_ceil(SECTOR_BYTES);
        let cyl_per_zone = (drive_sectors * z)
            .div_ceil(p.surfaces as u64 * sum_spt)
            .div_ceil(z)
            .max(1);
        let mut zones = Vec::with_capacity(z as usize);
        let mut lba = 0;
        for i in 0..z {
            let s = spt_of(i);
            let sectors = cyl_per_zone * p.surfaces as u64 * s;
            zones.push(Zone {
                start_lba: lba,
                end_lba: lba + sectors,
                first_cyl: i * cyl_per_zone,
                sectors_per_track: s,
            });
            lba += sectors;
        }
        let cylinders = cyl_per_zone * z;
        let seek = SeekCurve::fit(&p, cylinders);
        let segment_sectors =
            (p.cache_bytes / p.cache_segments.max(1) as u64 / SECTOR_BYTES).max(1);
        let segments = vec![Segment::default(); p.cache_segments as usize];
        Hdd {
            skew_frac: p.head_switch_ns as f64 / rotation_ns as f64,
            rotation_ns,
            zones,
            cylinders,
            seek,
            head_cyl: 0,
            head_surface: 0,
            free_at_ns: 0,
            segments,
            segment_sectors,
            readahead: None,
            dirty: VecDeque::new(),
            dirty_sectors: 0,
            use_clock: 0,
            counters: DeviceCounters::default(),
            barrier_ns: 0,
            p,
        }
    }

    pub fn params(&self) -> &HddParams {
        &self.p
    }

    pub fn cylinders(&self) -> u64 {
        self.cylinders
    }

    /// Seek time for a move of `distance` cylinders (for tests and documentation).
    pub fn seek_ns(&self, distance: u64) -> u64 {
        self.seek.seek_ns(distance)
    }

    /// Media transfer rate of the zone holding `offset_bytes`.
    pub fn media_rate_at(&self, offset_bytes: u64) -> u64 {
        let z = &self.zones[self.zone_of(offset_bytes / SECTOR_BYTES)];
        z.sectors_per_track * SECTOR_BYTES * NS_PER_S / self.rotation_ns
    }

    /// Bytes waiting in the volatile write cache.
    pub fn dirty_bytes(&self) -> u64 {
        self.dirty_sectors * SECTOR_BYTES
    }

    #[inline]
    fn zone_of(&self, lba: u64) -> usize {
        let lba = lba % self.zones.last().map_or(1, |z| z.end_lba);
        match self.zones.binary_search_by(|z| {
            if lba < z.start_lba {
                std::cmp::Ordering::Greater
            } else if lba >= z.end_lba {
                std::cmp::Ordering::Less
            } else {
                std::cmp::Ordering::Equal
            }
        }) {
            Ok(i) => i,
            Err(i) => i.min(self.zones.len() - 1),
        }
    }

    #[inline]
    fn locate(&self, lba: u64) -> Location {
        let zone = self.zone_of(lba);
        let z = &self.zones[zone];
        let rel = lba.saturating_sub(z.start_lba);
        let track = rel / z.sectors_per_track;
        let surfaces = self.p.surfaces as u64;
        Location {
            cyl: z.first_cyl + track / surfaces,
            surface: track % surfaces,
            sector: rel % z.sectors_per_track,
            zone,
        }
    }

    /// Seek, rotate and transfer `sectors` starting at `lba`, beginning at `start_ns`.
    /// Seek (with write settle) and rotational wait, in ns, for the head to reach `loc`
    /// when it starts moving at `start_ns` from where it is now.
    #[inline]
    fn seek_and_rotation_ns(&self, start_ns: u64, loc: &Location, write: bool) -> (u64, u64) {
        let mut seek_ns = if loc.cyl != self.head_cyl {
            self.seek.seek_ns(loc.cyl.abs_diff(self.head_cyl))
        } else if loc.surface != self.head_surface {
            self.p.head_switch_ns
        } else {
            0
        };
        if write && seek_ns > 0 {
            seek_ns += self.p.write_settle_ns;
        }
        let on_track_ns = start_ns + seek_ns;
        let spt = self.zones[loc.zone].sectors_per_track;
        let track_index = loc.cyl * self.p.surfaces as u64 + loc.surface;
        let target = (loc.sector as f64 / spt as f64 + track_index as f64 * self.skew_frac).fract();
        let angle = (on_track_ns % self.rotation_ns) as f64 / self.rotation_ns as f64;
        let mut wait = target - angle;
        if wait < 0.0 {
            wait += 1.0;
        }
        (seek_ns, (wait * self.rotation_ns as f64) as u64)
    }

    /// How long after `now_ns` the drive could start transferring `req`'s data: 0 for a
    /// command it answers from its caches (a read hit, a write into the write cache),
    /// else the wait for the mechanism plus the seek and rotation from the head's present
    /// position. Changes nothing: a command queue ranks its commands by it (shortest
    /// positioning time first, as NCQ firmware does).
    pub fn positioning_ns(&self, now_ns: u64, req: &DevRequest) -> u64 {
        let lba = req.offset_bytes / SECTOR_BYTES;
        let sectors = req.len_bytes.div_ceil(SECTOR_BYTES).max(1);
        let end = lba + sectors;
        let write = match req.kind {
            DevOpKind::Read => {
                let cached = self
                    .segments
                    .iter()
                    .any(|s| s.start_lba <= lba && end <= s.end_lba && s.end_lba > s.start_lba)
                    || self.dirty.iter().any(|&(d, n)| d <= lba && end <= d + n);
                if cached {
                    return 0;
                }
                false
            }
            DevOpKind::Write | DevOpKind::WriteZeroes => {
                if self.p.write_cache
                    && !req.fua
                    && sectors <= self.p.write_cache_bytes / SECTOR_BYTES
                {
                    return 0;
                }
                true
            }
            DevOpKind::Flush | DevOpKind::Trim => return 0,
        };
        let start_ns = now_ns.max(self.free_at_ns) + self.p.command_overhead_ns;
        let (seek_ns, rot_ns) = self.seek_and_rotation_ns(start_ns, &self.locate(lba), write);
        start_ns - now_ns + seek_ns + rot_ns
    }

    fn media_access(&mut self, start_ns: u64, lba: u64, sectors: u64, write: bool) -> u64 {
        let loc = self.locate(lba);
        let (seek_ns, rot_ns) = self.seek_and_rotation_ns(start_ns, &loc, write);
        let on_track_ns = start_ns + seek_ns;
        let surfaces = self.p.surfaces as u64;
        let mut zone = &self.zones[loc.zone];
        let mut spt = zone.sectors_per_track;
        // Transfer track by track; skew makes each track switch cost only the switch time.
        let mut remaining = sectors.max(1);
        let mut sector = loc.sector;
        let mut cyl = loc.cyl;
        let mut surface = loc.surface;
        let mut lba_cursor = lba;
        let mut xfer_ns: u64 = 0;
        loop {
            let take = remaining.min(spt - sector);
            xfer_ns += take * self.rotation_ns / spt;
            remaining -= take;
            lba_cursor += take;
            if remaining == 0 {
                break;
            }
            xfer_ns += self.p.head_switch_ns;
            sector = 0;
            surface += 1;
            if surface == surfaces {
                surface = 0;
                cyl += 1;
            }
            if lba_cursor >= zone.end_lba && loc.zone + 1 < self.zones.len() {
                let zi = self.zone_of(lba_cursor);
                zone = &self.zones[zi];
                spt = zone.sectors_per_track;
            }
        }
        self.head_cyl = cyl.min(self.cylinders.saturating_sub(1));
        self.head_surface = surface;
        on_track_ns + rot_ns + xfer_ns
    }

    fn ns_per_sector_at(&self, lba: u64) -> f64 {
        let z = &self.zones[self.zone_of(lba)];
        // Amortise head switches over a track when streaming.
        (self.rotation_ns + self.p.head_switch_ns) as f64 / z.sectors_per_track as f64
    }

    /// Where read-ahead has got to by `t_ns`.
    fn readahead_pos(ra: &ReadAhead, t_ns: u64) -> u64 {
        if t_ns <= ra.at_ns {
            return ra.from_lba;
        }
        let done = ((t_ns - ra.at_ns) as f64 / ra.ns_per_sector) as u64;
        (ra.from_lba + done).min(ra.max_end_lba)
    }

    /// Stop read-ahead at `t_ns`: the segment keeps what was read, the head stays there.
    fn stop_readahead(&mut self, t_ns: u64) {
        if let Some(ra) = self.readahead.take() {
            let pos = Self::readahead_pos(&ra, t_ns);
            let seg = &mut self.segments[ra.segment];
            seg.end_lba = pos;
            if seg.start_lba > pos {
                // Hits slid the window towards where the stream was heading, past what it had
                // read: keep the last segment's worth of what was really read.
                seg.start_lba = ra
                    .stream_start_lba
                    .max(pos.saturating_sub(self.segment_sectors));
            } else if pos - seg.start_lba > self.segment_sectors {
                seg.start_lba = pos - self.segment_sectors;
            }
            if pos > ra.from_lba {
                let loc = self.locate(pos - 1);
                self.head_cyl = loc.cyl;
                self.head_surface = loc.surface;
            }
        }
    }

    /// Destage dirty data while the mechanism is idle before `now_ns`.
    fn idle_work(&mut self, now_ns: u64) {
        while self.free_at_ns < now_ns {
            let Some((lba, sectors)) = self.dirty.pop_front() else {
                break;
            };
            self.stop_readahead(self.free_at_ns);
            self.dirty_sectors -= sectors;
            self.free_at_ns = self.media_access(self.free_at_ns, lba, sectors, true);
        }
    }

    fn destage_all(&mut self, from_ns: u64) -> u64 {
        let mut t = from_ns.max(self.free_at_ns);
        while let Some((lba, sectors)) = self.dirty.pop_front() {
            self.dirty_sectors -= sectors;
            t = self.media_access(t, lba, sectors, true);
        }
        self.free_at_ns = t;
        t
    }

    fn invalidate(&mut self, lba: u64, sectors: u64) {
        let end = lba + sectors;
        if let Some(ra) = self.readahead {
            let seg = self.segments[ra.segment];
            if lba < ra.max_end_lba.max(seg.end_lba) && end > seg.start_lba {
                self.readahead = None;
                self.segments[ra.segment] = Segment::default();
            }
        }
        for s in &mut self.segments {
            if lba < s.end_lba && end > s.start_lba {
                *s = Segment::default();
            }
        }
    }

    fn read(&mut self, now_ns: u64, lba: u64, sectors: u64, len_bytes: u64) -> u64 {
        self.idle_work(now_ns);
        self.use_clock += 1;
        let end = lba + sectors;
        let iface_ns =
            self.p.command_overhead_ns + transfer_ns(len_bytes, self.p.interface_bytes_per_sec);
        // Read-ahead stream: a hit if already read, else wait for the stream to get there.
        if let Some(mut ra) = self.readahead {
            let seg_start = self.segments[ra.segment].start_lba;
            if lba >= seg_start && lba <= ra.max_end_lba && self.free_at_ns <= now_ns {
                let start = now_ns;
                let pos = Self::readahead_pos(&ra, start);
                self.counters.cache_hits += (end <= pos) as u64;
                let reach_ns = if end <= pos {
                    0
                } else {
                    ra.at_ns + ((end - ra.from_lba) as f64 * ra.ns_per_sector) as u64
                };
                let ra_sectors = self.p.readahead_bytes / SECTOR_BYTES;
                ra.max_end_lba = ra.max_end_lba.max(end + ra_sectors);
                let seg = &mut self.segments[ra.segment];
                seg.last_use = self.use_clock;
                if ra.max_end_lba - seg.start_lba > self.segment_sectors {
                    seg.start_lba = ra.max_end_lba - self.segment_sectors;
                }
                self.readahead = Some(ra);
                return (start + iface_ns).max(reach_ns + self.p.command_overhead_ns);
            }
        }
        let active = self.readahead.map(|r| r.segment);
        for (i, s) in self.segments.iter_mut().enumerate() {
            if Some(i) != active
                && s.start_lba <= lba
                && end <= s.end_lba
                && s.end_lba > s.start_lba
            {
                s.last_use = self.use_clock;
                self.counters.cache_hits += 1;
                return now_ns + iface_ns;
            }
        }
        if self.dirty.iter().any(|&(d, n)| d <= lba && end <= d + n) {
            self.counters.cache_hits += 1;
            return now_ns + iface_ns;
        }
        // Miss: the mechanism reads from the media.
        let start = now_ns.max(self.free_at_ns);
        self.stop_readahead(start);
        let done = self.media_access(start + self.p.command_overhead_ns, lba, sectors, false);
        self.free_at_ns = done;
        if self.segments.is_empty() {
            return done;
        }
        let victim = (0..self.segments.len())
            .min_by_key(|&i| self.segments[i].last_use)
            .unwrap_or(0);
        let ra_sectors = (self.p.readahead_bytes / SECTOR_BYTES)
            .min(self.segment_sectors.saturating_sub(sectors));
        self.segments[victim] = Segment {
            start_lba: lba,
            end_lba: end,
            last_use: self.use_clock,
        };
        if ra_sectors > 0 {
            self.readahead = Some(ReadAhead {
                segment: victim,
                stream_start_lba: lba,
                from_lba: end,
                at_ns: done,
                max_end_lba: end + ra_sectors,
                ns_per_sector: self.ns_per_sector_at(end),
            });
        }
        done
    }

    fn write(&mut self, now_ns: u64, lba: u64, sectors: u64, len_bytes: u64, fua: bool) -> u64 {
        self.idle_work(now_ns);
        self.invalidate(lba, sectors);
        let cap = self.p.write_cache_bytes / SECTOR_BYTES;
        if self.p.write_cache && !fua && sectors <= cap {
            // Make room by destaging, oldest first; the write waits for that.
            let mut ready = now_ns;
            let merges = matches!(self.dirty.back(), Some(&(d, n)) if d + n == lba);
            let max_entries = self.p.write_cache_max_entries.max(1) as usize;
            while self.dirty_sectors + sectors > cap || (!merges && self.dirty.len() >= max_entries)
            {
                let Some((d, n)) = self.dirty.pop_front() else {
                    break;
                };
                self.dirty_sectors -= n;
                self.stop_readahead(self.free_at_ns.max(now_ns));
                self.free_at_ns = self.media_access(self.free_at_ns.max(now_ns), d, n, true);
                ready = self.free_at_ns;
            }
            match self.dirty.back_mut() {
                Some((d, n)) if *d + *n == lba => *n += sectors,
                _ => self.dirty.push_back((lba, sectors)),
            }
            self.dirty_sectors += sectors;
            return ready
                + self.p.command_overhead_ns
                + transfer_ns(len_bytes, self.p.interface_bytes_per_sec);
        }
        let start = now_ns.max(self.free_at_ns);
        self.stop_readahead(start);
        let done = self.media_access(start + self.p.command_overhead_ns, lba, sectors, true);
        self.free_at_ns = done;
        done
    }
}

impl DeviceModel for Hdd {
    fn submit(&mut self, now_ns: u64, req: &DevRequest) -> u64 {
        let now_ns = now_ns.max(self.barrier_ns);
        let lba = req.offset_bytes / SECTOR_BYTES;
        let sectors = req.len_bytes.div_ceil(SECTOR_BYTES).max(1);
        match req.kind {
            DevOpKind::Read => {
                self.counters.host_read_bytes += req.len_bytes;
                self.read(now_ns, lba, sectors, req.len_bytes)
            }
            // A disk has nothing to deallocate: it writes the zeros.
            DevOpKind::Write | DevOpKind::WriteZeroes => {
                self.counters.host_write_bytes += req.len_bytes;
                self.counters.media_write_bytes += req.len_bytes;
                self.write(now_ns, lba, sectors, req.len_bytes, req.fua)
            }
            DevOpKind::Flush => {
                self.idle_work(now_ns);
                let start = now_ns.max(self.free_at_ns);
                if !self.dirty.is_empty() {
                    self.stop_readahead(start);
                }
                self.barrier_ns = self.destage_all(start) + self.p.command_overhead_ns;
                self.barrier_ns
            }
            DevOpKind::Trim => now_ns + self.p.command_overhead_ns,
        }
    }

    fn capacity_bytes(&self) -> u64 {
        self.p.capacity_bytes
    }

    fn kind(&self) -> DeviceKind {
        DeviceKind::Hdd
    }

    fn counters(&self) -> DeviceCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presets::preset;
    use crate::units::{KIB, MIB, NS_PER_MS};

    fn hdd() -> Hdd {
        match preset("hitachi-7k1000c").unwrap() {
            crate::Preset::Hdd { params, .. } => Hdd::new(params.clone()),
            _ => unreachable!(),
        }
    }

    #[test]
    fn seek_grows_with_distance_and_matches_spec_points() {
        let h = hdd();
        let c = h.cylinders();
        let mut last = 0;
        for d in [1, 10, 100, 1000, c / 10, c / 3, c / 2, c - 1] {
            let s = h.seek_ns(d);
            assert!(s > last, "seek({d}) = {s} not above {last}");
            last = s;
        }
        let p = h.params();
        assert!(h.seek_ns(1).abs_diff(p.seek_track_to_track_ns) < 10_000);
        assert!(h.seek_ns(c / 3).abs_diff(p.seek_avg_ns) < 100_000);
        assert!(h.seek_ns(c).abs_diff(p.seek_full_ns) < 100_000);
    }

    #[test]
    fn rotational_latency_depends_on_angle() {
        // Two reads of the same track, started at different times, wait differently.
        let mut a = hdd();
        let mut b = hdd();
        let rot = a.rotation_ns;
        let t1 = a.submit(0, &DevRequest::read(0, 4096));
        let t2 = b.submit(rot / 2, &DevRequest::read(0, 4096)) - rot / 2;
        assert_ne!(t1, t2);
        assert!(t1 < rot + NS_PER_MS && t2 < rot + NS_PER_MS);
    }

    #[test]
    fn outer_zone_transfers_faster_than_inner() {
        let h = hdd();
        assert!(h.media_rate_at(0) > h.media_rate_at(h.capacity_bytes() - MIB));
    }

    /// A hit near the end of a read-ahead stream slides the segment's window past what the
    /// stream has read; stopping the stream then must not underflow (issue 11: debug builds
    /// panicked, release builds wrapped) nor claim sectors the stream never read.
    #[test]
    fn stopping_readahead_after_the_window_slid_ahead_keeps_only_what_was_read() {
        let mut h = hdd();
        let first = h.submit(0, &DevRequest::read(0, 4 * KIB));
        let ra = h.readahead.expect("a miss starts a read-ahead stream");
        // At once, before the stream has read anything more, keep asking for the sectors at
        // its end: each hit pushes the window further ahead.
        for _ in 0..64 {
            let max_end_lba = h.readahead.expect("hits keep the stream").max_end_lba;
            if h.segments[ra.segment].start_lba > Hdd::readahead_pos(&ra, first) {
                break;
            }
            h.submit(
                first,
                &DevRequest::read((max_end_lba - 8) * SECTOR_BYTES, 4 * KIB),
            );
        }
        assert!(
            h.segments[ra.segment].start_lba > Hdd::readahead_pos(&ra, first),
            "the test needs the window to have slid past the stream"
        );
        // A far miss stops the stream.
        h.submit(first, &DevRequest::read(h.capacity_bytes() / 2, 4 * KIB));
        let seg = h.segments[ra.segment];
        assert!(seg.start_lba <= seg.end_lba, "{seg:?}");
        assert!(seg.end_lba - seg.start_lba <= h.segment_sectors, "{seg:?}");
        assert!(seg.start_lba >= ra.stream_start_lba, "{seg:?}");
    }

    #[test]
    fn sequential_reads_hit_readahead() {
        let mut h = hdd();
        let mut t = 0;
        let first = h.submit(t, &DevRequest::read(0, 4 * KIB));
        t = first;
        let mut worst = 0;
        for i in 1..64u64 {
            let done = h.submit(t + 50_000, &DevRequest::read(i * 4 * KIB, 4 * KIB));
            worst = worst.max(done - (t + 50_000));
            t = done;
        }
        assert!(
            h.counters().cache_hits >= 32,
            "hits {}",
            h.counters().cache_hits
        );
        assert!(worst < NS_PER_MS, "sequential 4K read took {worst} ns");
        // A random read far away is a miss costing a seek and rotation.
        let far = h.submit(t, &DevRequest::read(h.capacity_bytes() / 2, 4 * KIB)) - t;
        assert!(far > 2 * NS_PER_MS, "random read took only {far} ns");
    }

    #[test]
    fn write_cache_absorbs_writes_and_flush_drains_them() {
        let mut h = hdd();
        let far = h.capacity_bytes() / 3;
        let w = h.submit(0, &DevRequest::write(far, 4 * KIB));
        assert!(
            w < h.params().command_overhead_ns + NS_PER_MS / 10,
            "cached write took {w} ns"
        );
        assert!(h.dirty_bytes() > 0);
        let f = h.submit(w, &DevRequest::flush());
        assert_eq!(h.dirty_bytes(), 0);
        assert!(
            f - w > NS_PER_MS,
            "flush of a far write must seek: {} ns",
            f - w
        );
        // FUA bypasses the cache.
        let t = f;
        let fua = DevRequest {
            fua: true,
            ..DevRequest::write(0, 4 * KIB)
        };
        assert!(h.submit(t, &fua) - t > NS_PER_MS);
        assert_eq!(h.dirty_bytes(), 0);
    }

    #[test]
    fn a_flush_delays_requests_submitted_after_it() {
        let mut h = hdd();
        let far = h.capacity_bytes() / 3;
        let w = h.submit(0, &DevRequest::write(far, 64 * KIB));
        // Warm the cache with a read of sector 0, then flush and read it again at once:
        // the hit would take microseconds, but it must wait for the flush.
        let r0 = h.submit(w, &DevRequest::read(0, 4 * KIB));
        let w2 = h.submit(r0, &DevRequest::write(far + 64 * KIB, 64 * KIB));
        let f = h.submit(w2, &DevRequest::flush());
        let hit = h.submit(w2, &DevRequest::read(0, 4 * KIB));
        assert!(f > w2 + NS_PER_MS, "the flush must write the far data");
        assert!(
            hit >= f,
            "a read after the flush finished at {hit}, flush at {f}"
        );
    }

    #[test]
    fn idle_time_destages_dirty_data() {
        let mut h = hdd();
        let w = h.submit(0, &DevRequest::write(MIB, 64 * KIB));
        // After a long idle period the flush has nothing left to do.
        let later = w + 100 * NS_PER_MS;
        h.submit(later, &DevRequest::read(0, 512));
        assert_eq!(h.dirty_bytes(), 0);
    }

    #[test]
    fn same_inputs_same_times() {
        let run = || {
            let mut h = hdd();
            let mut t = 0;
            let mut out = Vec::new();
            for i in 0..200u64 {
                let off = (i * 7919 * 4096) % (h.capacity_bytes() - 8192);
                let req = if i % 3 == 0 {
                    DevRequest::write(off, 8192)
                } else {
                    DevRequest::read(off, 8192)
                };
                t = h.submit(t, &req);
                out.push(t);
            }
            out
        };
        assert_eq!(run(), run());
    }
}
