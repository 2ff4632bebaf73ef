//! The segment cleaner: picks a victim segment (greedy or Sprite LFS cost-benefit), reads
//! what is still live in it, and appends that to the owner's cold stream, but only the
//! parts the overlay still points at when the copy is placed (a VM write in between
//! wins). The emptied segment is freed through the owner's journal like any other space.

use bytes::Bytes;

use super::COLD;
use super::state::Clean;
use crate::config::CleanerPolicy;
use crate::engine::{Engine, OpSpec, Owner};
use crate::overlay::Overlay;
use crate::types::{DevKind, Errno, IoClass, Outputs, PoolId};

/// Segments fuller than this are not worth cleaning (moving them frees too little).
const CLEAN_MAX_UTILIZATION: f64 = 0.9;

impl Engine {
    /// Start cleaning if the pool is short of free segments.
    pub(crate) fn clean_maybe(&mut self, now: u64, pool: usize, out: &mut Outputs) {
        if self.logs[pool].clean.is_some() || self.logs[pool].segments.is_empty() {
            return;
        }
        if self.free_segments(pool) < self.cfg.log.clean_below_free_segments {
            self.clean_kick(now, pool, out);
        }
    }

    /// Clean one victim segment of `pool`, if there is one worth cleaning.
    pub(crate) fn clean_kick(&mut self, now: u64, pool: usize, out: &mut Outputs) {
        if self.logs[pool].clean.is_some() || self.state != crate::engine::EngineState::Ready {
            return;
        }
        let Some(g) = self.clean_victim(now, pool) else {
            return;
        };
        if !self.clean_budget(now, pool, g) {
            return;
        }
        let base = self.seg_base(g);
        let pid = PoolId(pool as u16);
        let seg = self.logs[pool].segments.get_mut(&g).expect("victim exists");
        seg.cleaning = true;
        let owner = seg.owner;
        let live_bytes = seg.live_bytes;
        let summary = std::mem::take(&mut seg.summary);
        // What the overlay still points at, in log order: from the live-sector map when
        // it is exact, else from the overlay itself.
        let seg = &self.logs[pool].segments[&g];
        let live_map = (!seg.live.inexact).then_some(&seg.live);
        let ov = &self.vols[owner as usize].overlay;
        let mut pieces = Vec::new();
        let mut kept = Vec::new();
        for p in &summary {
            let dev0 = base + p.seg_off as u64;
            if let Some(m) = live_map {
                let runs = m.runs(p.seg_off as u64, p.len as u64);
                if !runs.is_empty() {
                    kept.push(*p);
                }
                for (o, l) in runs {
                    pieces.push((p.lba + (o - p.seg_off as u64), base + o, l, None));
                }
                continue;
            }
            let mut any = false;
            for (s, e, val) in ov.overlapping(p.lba, p.lba + p.len as u64) {
                let dev = dev0 + (s - p.lba);
                if val
                    == (Overlay::Log {
                        pool: pid,
                        dev_offset: dev,
                    })
                {
                    pieces.push((s, dev, e - s, None));
                    any = true;
                }
            }
            if any {
                kept.push(*p);
            }
        }
        if let Some(seg) = self.logs[pool].segments.get_mut(&g) {
            seg.summary = kept;
        }
        let reads = read_runs(&pieces, self.cfg.log.append_bytes);
        let n = reads.len() as u32;
        let issue: Vec<(u64, u64)> = reads.iter().map(|r| (r.0, r.1)).collect();
        self.logs[pool].clean = Some(Clean {
            group: g,
            owner,
            pieces,
            reads,
            live_bytes,
            pending: n,
            failed: false,
        });
        if n == 0 {
            return self.clean_finish(now, pool, out);
        }
        for (i, (dev, len)) in issue.into_iter().enumerate() {
            self.logs[pool].stats.cleaner_read_bytes += len;
            let reader = Owner::CleanRead {
                pool: pool as u16,
                idx: i as u32,
            };
            let spec = OpSpec::new(reader, pid, DevKind::Read, IoClass::Cleaner);
            self.queue_op(now, spec.at(dev, len).for_volume(owner), out);
        }
    }

    /// Whether the bandwidth cap lets victim `g` be cleaned now; if not, a wake-up is
    /// asked for when it will. Uncapped while free segments are short.
    fn clean_budget(&mut self, now: u64, pool: usize, g: u64) -> bool {
        let rate = self.cfg.log.clean_bytes_per_s;
        if rate == 0 || self.cleaner_urgent(pool) {
            return true;
        }
        let sb = self.cfg.log.segment_bytes;
        let pl = &mut self.logs[pool];
        // Read it, then write it again.
        let cost = 2 * pl.segments.get(&g).map_or(0, |s| s.live_bytes);
        pl.clean_bucket.refill(now, rate, (rate / 4).max(2 * sb));
        if pl.clean_bucket.tokens() >= cost {
            pl.clean_bucket.take(cost);
            return true;
        }
        let at = pl.clean_bucket.ready_at(cost, rate);
        if pl.clean_wait_at.is_none_or(|t| t > at) {
            pl.clean_wait_at = Some(at);
        }
        pl.stats.cleaner_waits += 1;
        false
    }

    /// The cap's wait is over: clean if still needed.
    pub(crate) fn clean_wait_tick(&mut self, now: u64, out: &mut Outputs) {
        for p in 0..self.logs.len() {
            if self.logs[p].clean_wait_at.is_some_and(|t| t <= now) {
                self.logs[p].clean_wait_at = None;
                self.clean_maybe(now, p, out);
            }
        }
    }

    /// The closed segment whose cleaning pays most, per the configured policy.
    fn clean_victim(&self, now: u64, pool: usize) -> Option<u64> {
        let sb = self.cfg.log.segment_bytes as f64;
        let policy = self.cfg.log.cleaner;
        let pl = &self.logs[pool];
        let mut best: Option<(f64, u64)> = None;
        for (&g, s) in &pl.segments {
            // A migrating volume's log is being written back home, not forward
            // (`jobs/migrate/log_drain.rs`).
            if s.open
                || self.migrations.jobs.contains_key(&s.owner)
                || s.cleaning
                || s.clean_failed
                || s.stuck
                || s.live_bytes as f64 > CLEAN_MAX_UTILIZATION * sb
            {
                continue;
            }
            // Data of an append still in flight is not on the device yet.
            let base = self.seg_base(g);
            if pl
                .ram
                .range(..base + self.cfg.log.segment_bytes)
                .next_back()
                .is_some_and(|(&d, r)| d + r.len > base)
            {
                continue;
            }
            let u = s.live_bytes as f64 / sb;
            let score = match policy {
                CleanerPolicy::Greedy => 1.0 - u,
                CleanerPolicy::CostBenefit => {
                    let age = (now.saturating_sub(s.last_write_ns) as f64 / 1e6) + 1.0;
                    (1.0 - u) * age / (1.0 + u)
                }
            };
            // Strictly better only: ties go to the lowest group, deterministically.
            if best.is_none_or(|(b, _)| score > b) {
                best = Some((score, g));
            }
        }
        best.map(|(_, g)| g)
    }

    pub(crate) fn clean_read_done(
        &mut self,
        now: u64,
        pool: usize,
        idx: usize,
        result: Result<(), Errno>,
        data: Option<Bytes>,
        out: &mut Outputs,
    ) {
        let Some(c) = self.logs[pool].clean.as_mut() else {
            return;
        };
        c.pending -= 1;
        let (dev0, len, first, count) = c.reads[idx];
        // A short read is a failed one (no driver should return one).
        let failed = result.is_err() || data.as_ref().is_some_and(|d| (d.len() as u64) < len);
        c.failed |= failed;
        for p in &mut c.pieces[first..first + count] {
            if failed {
                p.2 = 0;
            } else {
                let at = (p.1 - dev0) as usize;
                p.3 = data.as_ref().map(|d| d.slice(at..at + p.2 as usize));
            }
        }
        if c.pending == 0 {
            self.clean_finish(now, pool, out);
        }
    }

    /// Copy what is still live forward, then let the victim go.
    fn clean_finish(&mut self, now: u64, pool: usize, out: &mut Outputs) {
        let Some(c) = self.logs[pool].clean.take() else {
            return;
        };
        let pid = PoolId(pool as u16);
        let v = c.owner;
        let si = pool * 2 + COLD;
        let mut copied = 0;
        // Live bytes only fall while a segment is closed, so equal means untouched.
        let untouched = self.logs[pool]
            .segments
            .get(&c.group)
            .is_some_and(|s| s.live_bytes == c.live_bytes);
        for (lba, dev, len, data) in c.pieces {
            if len == 0 || self.state != crate::engine::EngineState::Ready {
                continue;
            }
            // Only what still points here: a VM write since the read wins.
            let live: Vec<(u64, u64)> = if untouched {
                vec![(lba, lba + len)]
            } else {
                self.vols[v as usize]
                    .overlay
                    .overlapping(lba, lba + len)
                    .filter(|&(s, _, val)| {
                        val == Overlay::Log {
                            pool: pid,
                            dev_offset: dev + (s - lba),
                        }
                    })
                    .map(|(s, e, _)| (s, e))
                    .collect()
            };
            for (s, e) in live {
                if !self.log_ensure_segment(now, v, si, e - s, true, out) {
                    break;
                }
                let d = data
                    .as_ref()
                    .map(|d| d.slice((s - lba) as usize..(e - lba) as usize));
                copied += e - s;
                self.log_place(now, v, si, s, e, d);
                if self.vols[v as usize].log.streams[si].buf_bytes >= self.cfg.log.append_bytes {
                    self.log_seal(now, v, si, out);
                }
            }
        }
        self.log_seal(now, v, si, out);
        let pl = &mut self.logs[pool];
        pl.stats.cleaner_bytes += copied;
        pl.stats.segments_cleaned += 1;
        let mut progress = copied > 0;
        match pl.segments.get_mut(&c.group) {
            Some(seg) => {
                seg.cleaning = false;
                seg.clean_failed |= c.failed;
                // No room to copy into: try it again once some segment is freed.
                seg.stuck = seg.live_bytes > 0 && !seg.clean_failed;
            }
            None => progress = true,
        }
        self.arm_commit_timer(now);
        if progress {
            self.clean_maybe(now, pool, out);
        }
    }
}

/// Group pieces (in device order) into reads: a piece that starts where the current read
/// ends joins it while the read stays within `max_read_bytes`. (Reading across dead gaps
/// as well measured slower on the SSD models: the dead bytes cost more than the saved
/// operations.)
fn read_runs(
    pieces: &[(u64, u64, u64, Option<Bytes>)],
    max_read_bytes: u64,
) -> Vec<(u64, u64, usize, usize)> {
    let mut runs: Vec<(u64, u64, usize, usize)> = Vec::new();
    for (i, &(_, dev, len, _)) in pieces.iter().enumerate() {
        if let Some(r) = runs.last_mut() {
            let end = r.0 + r.1;
            if dev == end && dev + len - r.0 <= max_read_bytes {
                r.1 = dev + len - r.0;
                r.3 += 1;
                continue;
            }
        }
        runs.push((dev, len, i, 1));
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(dev: u64, len: u64) -> (u64, u64, u64, Option<Bytes>) {
        (0, dev, len, None)
    }

    #[test]
    fn adjacent_pieces_share_a_read_others_do_not() {
        let pieces = [
            piece(0, 4096),
            piece(4096, 4096),        // adjacent
            piece(8192 + 4096, 4096), // a dead gap before it
            piece(1 << 20, 4096),
            piece((1 << 20) + 4096, 4096),
            piece((1 << 20) + 8192, 1 << 20), // would make the read too long
        ];
        let runs = read_runs(&pieces, 1 << 20);
        assert_eq!(
            runs,
            vec![
                (0, 8192, 0, 2),
                (8192 + 4096, 4096, 2, 1),
                (1 << 20, 8192, 3, 2),
                ((1 << 20) + 8192, 1 << 20, 5, 1),
            ]
        );
        assert!(read_runs(&[], 1 << 20).is_empty());
    }
}
