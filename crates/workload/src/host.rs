//! A host profile: what lies between a benchmark's writes and the virtual disk.
//!
//! Seed 002 ran IOzone on a file in a Linux guest (Ubuntu 10.04, 4 GB of RAM) with a 6 GB
//! file: IOzone's writes went into the page cache, and the disk saw the kernel's
//! writeback of it, not IOzone's records. [`PageCache`] models that writeback:
//!
//! - the writer dirties pages until `dirty_bytes` are dirty (the kernel's dirty limit;
//!   the writer, far faster than the disk, is then throttled to the writeback's pace);
//! - the flusher walks the file in ascending offset order from where it stopped, wrapping
//!   at the end (`write_cache_pages` in index order, cyclic), and sends each dirty range
//!   as one request, merged with adjacent dirty ranges up to `max_merge_bytes` (a bio);
//! - `in_flight` requests are outstanding at once (the block queue and the disk's);
//! - a FLUSH (`fsync`) first writes everything dirty back, waits for it, then flushes.
//!
//! `overhead_ns` is the host's cost per request on its way to the disk (a VMM trapping
//! and emulating each disk command, copying its buffer), paid one request at a time: a
//! request leaves the host `overhead_ns` after the previous one did, or after it was
//! made, whichever is later.

use std::collections::BTreeMap;

use crate::{WlKind, WlRequest, Workload};

/// The guest page cache's writeback.
#[derive(Clone, Debug, PartialEq)]
pub struct PageCache {
    pub dirty_bytes: u64,
    pub in_flight: u32,
    pub max_merge_bytes: u64,
}

/// A host profile for one VM.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct HostProfile {
    /// None: requests go straight to the disk (O_DIRECT).
    pub page_cache: Option<PageCache>,
    /// Per request, serialised.
    pub overhead_ns: u64,
}

impl HostProfile {
    pub fn is_direct(&self) -> bool {
        self.page_cache.is_none() && self.overhead_ns == 0
    }
}

/// A workload seen through a [`HostProfile`].
pub struct HostPath<W> {
    inner: W,
    profile: HostProfile,
    /// Dirty ranges: start -> end (disjoint, not touching).
    dirty: BTreeMap<u64, u64>,
    dirty_total: u64,
    cursor: u64,
    /// A request of the inner workload that is not a write, waiting for its turn.
    pending: Option<(WlRequest, u64)>,
    inner_returned: u64,
    inner_done: bool,
    /// Our index -> the inner workload's (None: a writeback write).
    issued: BTreeMap<u64, Option<u64>>,
    next_index: u64,
    writeback_in_flight: u32,
    host_free_ns: u64,
}

impl<W: Workload> HostPath<W> {
    pub fn new(inner: W, profile: HostProfile) -> HostPath<W> {
        HostPath {
            inner,
            profile,
            dirty: BTreeMap::new(),
            dirty_total: 0,
            cursor: 0,
            pending: None,
            inner_returned: 0,
            inner_done: false,
            issued: BTreeMap::new(),
            next_index: 0,
            writeback_in_flight: 0,
            host_free_ns: 0,
        }
    }

    /// Dirty `[s, e)`, merging with what it overlaps or touches.
    fn dirty_insert(&mut self, mut s: u64, mut e: u64) {
        let touching: Vec<(u64, u64)> = self
            .dirty
            .range(..=e)
            .rev()
            .take_while(|&(_, &end)| end >= s)
            .map(|(&a, &b)| (a, b))
            .collect();
        for (a, b) in touching {
            self.dirty.remove(&a);
            self.dirty_total -= b - a;
            s = s.min(a);
            e = e.max(b);
        }
        self.dirty.insert(s, e);
        self.dirty_total += e - s;
    }

    /// The next writeback request: the dirty range at or after the cursor (wrapping),
    /// up to `max` bytes of it.
    fn writeback_next(&mut self, max: u64) -> Option<WlRequest> {
        let (&s, &e) = self
            .dirty
            .range(self.cursor..)
            .next()
            .or_else(|| self.dirty.iter().next())?;
        self.dirty.remove(&s);
        let end = e.min(s + max.max(512));
        if end < e {
            self.dirty.insert(end, e);
        }
        self.dirty_total -= end - s;
        self.cursor = end;
        Some(WlRequest {
            kind: WlKind::Write,
            offset_bytes: s,
            len_bytes: end - s,
            at_ns: None,
            context: None,
        })
    }

    /// Take the inner workload's requests into the cache while there is room.
    fn absorb(&mut self, now_ns: u64, limit: u64) {
        while self.pending.is_none()
            && !self.inner_done
            && self.dirty_total < limit
            && self.inner.ready(now_ns)
        {
            match self.inner.next(now_ns) {
                Some(r) if r.kind == WlKind::Write && r.len_bytes > 0 => {
                    let i = self.inner_returned;
                    self.inner_returned += 1;
                    // Written into the cache: done for the writer.
                    self.inner.completed(i, now_ns);
                    self.dirty_insert(r.offset_bytes, r.offset_bytes + r.len_bytes);
                }
                Some(r) => {
                    self.pending = Some((r, self.inner_returned));
                    self.inner_returned += 1;
                }
                None => self.inner_done = true,
            }
        }
    }

    fn choose(&mut self, now_ns: u64) -> Option<(WlRequest, Option<u64>)> {
        let Some(pc) = self.profile.page_cache.clone() else {
            if self.inner_done || !self.inner.ready(now_ns) {
                return None;
            }
            let r = self.inner.next(now_ns);
            let i = self.inner_returned;
            self.inner_returned += 1;
            if r.is_none() {
                self.inner_done = true;
            }
            return r.map(|r| (r, Some(i)));
        };
        self.absorb(now_ns, pc.dirty_bytes);
        match self.pending {
            // Reads pass the cache (a benchmark's reads of its own dirty data are not
            // modelled).
            Some((r, i)) if r.kind == WlKind::Read => {
                self.pending = None;
                Some((r, Some(i)))
            }
            // A FLUSH writes everything back first, then waits for it.
            Some((r, i)) => {
                if let Some(w) = self.writeback_next(pc.max_merge_bytes) {
                    return Some((w, None));
                }
                if self.writeback_in_flight > 0 {
                    return None;
                }
                self.pending = None;
                Some((r, Some(i)))
            }
            None => self.writeback_next(pc.max_merge_bytes).map(|w| (w, None)),
        }
    }
}

impl<W: Workload> Workload for HostPath<W> {
    fn next(&mut self, now_ns: u64) -> Option<WlRequest> {
        let (mut r, inner) = self.choose(now_ns)?;
        if inner.is_none() {
            self.writeback_in_flight += 1;
        }
        self.issued.insert(self.next_index, inner);
        self.next_index += 1;
        if self.profile.overhead_ns > 0 {
            let at =
                self.host_free_ns.max(r.at_ns.unwrap_or(0)).max(now_ns) + self.profile.overhead_ns;
            self.host_free_ns = at;
            r.at_ns = Some(at);
        }
        Some(r)
    }

    fn depth(&self) -> u32 {
        match &self.profile.page_cache {
            Some(pc) => pc.in_flight.max(1),
            None => self.inner.depth(),
        }
    }

    fn paced(&self) -> bool {
        self.profile.overhead_ns > 0 || self.inner.paced()
    }

    fn completed(&mut self, index: u64, now_ns: u64) {
        match self.issued.remove(&index) {
            Some(Some(i)) => self.inner.completed(i, now_ns),
            Some(None) => self.writeback_in_flight -= 1,
            None => {}
        }
    }

    fn ready(&self, now_ns: u64) -> bool {
        match &self.profile.page_cache {
            // Waiting for the writeback before a FLUSH, with nothing left to write.
            Some(_) => {
                !(self.pending.is_some_and(|(r, _)| r.kind == WlKind::Flush)
                    && self.dirty.is_empty()
                    && self.writeback_in_flight > 0)
            }
            None => self.inner.ready(now_ns),
        }
    }

    fn app_ops(&self) -> Option<u64> {
        self.inner.app_ops()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{FioJob, FioRw, FioWorkload};

    fn job() -> FioJob {
        FioJob {
            rw: FioRw::RandWrite,
            bs: 4096,
            iodepth: 1,
            offset_bytes: 0,
            size_bytes: 4 << 20,
            rwmixread: 0,
            fsync_every: 0,
            ios: None,
            runtime_ns: None,
            seed: 3,
            random_map: true,
            end_fsync: true,
            distribution: crate::Distribution::Uniform,
        }
    }

    fn run(profile: HostProfile) -> Vec<WlRequest> {
        let mut w = HostPath::new(FioWorkload::new(job()), profile);
        let mut out = Vec::new();
        let mut outstanding: Vec<u64> = Vec::new();
        let mut idx = 0;
        let mut now = 0;
        loop {
            while (outstanding.len() as u32) < w.depth() && w.ready(now) {
                match w.next(now) {
                    Some(r) => {
                        out.push(r);
                        outstanding.push(idx);
                        idx += 1;
                    }
                    None => break,
                }
            }
            if outstanding.is_empty() {
                return out;
            }
            now += 1000;
            let i = outstanding.remove(0);
            w.completed(i, now);
        }
    }

    #[test]
    fn writeback_sweeps_sorted_merges_and_flushes_last() {
        let pc = PageCache {
            dirty_bytes: 1 << 20,
            in_flight: 4,
            max_merge_bytes: 64 << 10,
        };
        let reqs = run(HostProfile {
            page_cache: Some(pc),
            overhead_ns: 0,
        });
        let writes: Vec<&WlRequest> = reqs.iter().filter(|r| r.kind == WlKind::Write).collect();
        // Every byte of the file written exactly once.
        let mut covered: Vec<(u64, u64)> = writes
            .iter()
            .map(|r| (r.offset_bytes, r.offset_bytes + r.len_bytes))
            .collect();
        covered.sort_unstable();
        let mut pos = 0;
        for (s, e) in covered {
            assert_eq!(s, pos, "gap or overlap");
            pos = e;
        }
        assert_eq!(pos, 4 << 20);
        // Merged (fewer requests than records), none larger than a bio.
        assert!(writes.len() < 1024, "{} writes", writes.len());
        assert!(writes.iter().all(|r| r.len_bytes <= 64 << 10));
        // Ascending between wraps: the offsets go down only a few times.
        let descents = writes
            .windows(2)
            .filter(|w| w[1].offset_bytes < w[0].offset_bytes)
            .count();
        assert!(
            descents < writes.len() / 8,
            "{descents} of {}",
            writes.len()
        );
        assert_eq!(reqs.last().map(|r| r.kind), Some(WlKind::Flush));
    }

    #[test]
    fn the_host_overhead_spaces_requests_one_at_a_time() {
        let mut w = HostPath::new(
            FioWorkload::new(job()),
            HostProfile {
                page_cache: None,
                overhead_ns: 150_000,
            },
        );
        assert!(w.paced());
        let a = w.next(0).unwrap().at_ns.unwrap();
        let b = w.next(0).unwrap().at_ns.unwrap();
        assert_eq!((a, b), (150_000, 300_000));
        let c = w.next(1_000_000).unwrap().at_ns.unwrap();
        assert_eq!(c, 1_150_000);
    }
}
