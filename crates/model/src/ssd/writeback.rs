//! The write-back buffer's timing and FLUSH handling (seed 001's baseline and vFLUSH).
//!
//! In write-back mode a write completes once its data is in DRAM; the page is programmed
//! when it is evicted (LRU tail, when the buffer is full) or flushed. Its DRAM slot is
//! free again only when that program finishes. A FLUSH programs the buffered pages it
//! covers and what the mapping needs, and nothing submitted after it starts before it
//! completes. `FlushMode::All` covers every page and every dirty translation page;
//! `FlushMode::Tagged` covers the FLUSH's tag and the host tag, and one log page per tag.

use std::cmp::Reverse;

use serde::Serialize;

use super::nand::Work;
use super::wbuf::Victim;
use super::{Ftl, Ssd};
use crate::{DevRequest, HOST_TAG};

/// What a FLUSH writes back.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushMode {
    /// Every buffered page and every dirty mapping page (a conventional drive).
    #[default]
    All,
    /// Only the FLUSH's tag (and host metadata) and that tag's mapping-log page (vFLUSH).
    /// A FLUSH with the host tag still writes everything.
    Tagged,
}

impl FlushMode {
    pub fn parse(s: &str) -> Option<FlushMode> {
        match s {
            "all" => Some(FlushMode::All),
            "tagged" => Some(FlushMode::Tagged),
            _ => None,
        }
    }
}

/// What FLUSH commands cost, split as in seed 001's Figure 2.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct FlushStats {
    pub flushes: u64,
    /// Sum over FLUSHes of (completion - arrival), waiting for an earlier FLUSH included.
    pub latency_ns_total: u64,
    /// Buffered data of the FLUSH's own tag programmed by FLUSHes.
    pub own_data_bytes: u64,
    /// Buffered data of other VMs' tags programmed by FLUSHes.
    pub other_data_bytes: u64,
    /// Host-tag data programmed by FLUSHes.
    pub host_data_bytes: u64,
    /// Translation pages and mapping-log pages programmed by FLUSHes.
    pub map_bytes: u64,
    /// Translation pages written outside FLUSHes (a log area filled during eviction).
    pub map_bytes_outside_flush: u64,
    /// Pages programmed by LRU eviction.
    pub evicted_bytes: u64,
    /// Page writes absorbed by a page already in the buffer.
    pub absorbed_bytes: u64,
    /// Where FLUSH latency goes (sums over FLUSHes; they add up to `latency_ns_total`).
    pub time: FlushTime,
}

/// A FLUSH's latency split by cause, summed over FLUSHes. Each FLUSH's operations are
/// timed twice: on the drive as it is, and on dies and channels that were idle when it
/// started. The idle-drive span is split in the order the work must end (data, then the
/// map write-back of a log area that filled, then the FLUSH's own mapping pages), each
/// part being how much later that work ends than the parts before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FlushTime {
    /// Waiting for an earlier FLUSH to complete (the barrier).
    pub barrier_wait_ns: u64,
    /// The command's own cost (`command_overhead_ns`).
    pub command_ns: u64,
    /// Programming the buffered pages it covers (with the read of a partial page's rest).
    pub data_ns: u64,
    /// Writing every dirty translation page because a log area filled during the FLUSH.
    pub log_fill_ns: u64,
    /// Its own mapping pages: dirty translation pages (`all`) or log pages (`tagged`).
    pub map_ns: u64,
    /// The rest: dies and channels busy with work started before the FLUSH (evictions,
    /// earlier map write-backs, GC) and programs of its pages already under way.
    pub queued_ns: u64,
}

impl FlushTime {
    pub fn total_ns(&self) -> u64 {
        self.barrier_wait_ns
            + self.command_ns
            + self.data_ns
            + self.log_fill_ns
            + self.map_ns
            + self.queued_ns
    }

    /// Split a FLUSH served from `t0` (after its command cost) to `done`, whose work ended
    /// on idle dies at `idle` (data, log fill, map; 0: none of that work).
    fn add_span(&mut self, t0: u64, done: u64, idle: [u64; 3]) {
        let [data, fill, map] = idle.map(|x| x.max(t0));
        self.data_ns += data - t0;
        self.log_fill_ns += fill.saturating_sub(data);
        self.map_ns += map.saturating_sub(data.max(fill));
        self.queued_ns += done.saturating_sub(data.max(fill).max(map));
    }
}

impl FlushStats {
    pub fn mean_latency_ns(&self) -> f64 {
        if self.flushes == 0 {
            0.0
        } else {
            self.latency_ns_total as f64 / self.flushes as f64
        }
    }
    pub fn flushed_bytes(&self) -> u64 {
        self.own_data_bytes + self.other_data_bytes + self.host_data_bytes + self.map_bytes
    }
}

impl Ssd {
    /// Record buffer occupancy every `every_ns` from now on (0: never).
    pub fn set_buffer_sampling(&mut self, every_ns: u64) {
        self.sample_every_ns = every_ns;
        self.next_sample_ns = every_ns;
    }

    /// (time, bytes in the write buffer) samples (see [`Self::set_buffer_sampling`]).
    pub fn buffer_samples(&self) -> &[(u64, u64)] {
        &self.samples
    }

    pub fn flush_stats(&self) -> FlushStats {
        self.flush_stats
    }

    /// (device tag, latency from arrival to completion) of every FLUSH so far, in the
    /// order they were served; the latencies sum to `flush_stats().latency_ns_total`.
    pub fn flush_latencies_ns(&self) -> &[(u32, u64)] {
        &self.flush_latencies_ns
    }

    /// Buffered pages of `tag` waiting in the write-back buffer (tests, reports).
    pub fn buffered_pages_of(&self, tag: u32) -> usize {
        self.wb.as_ref().map_or(0, |w| w.tag_len(tag))
    }

    pub(super) fn sample_until(&mut self, now_ns: u64) {
        if self.sample_every_ns == 0 {
            return;
        }
        while self.next_sample_ns <= now_ns {
            let t = self.next_sample_ns;
            let bytes = self.buffered_bytes(t);
            self.samples.push((t, bytes));
            self.next_sample_ns += self.sample_every_ns;
        }
    }

    /// Program one page for `tag`; returns when it is on flash.
    fn program(&mut self, t: u64, lpn: u64, tag: u32, partial: bool) -> u64 {
        let mut done = match &mut self.ftl {
            Ftl::Page(f) => f.write(&mut self.nand, t, lpn, partial),
            Ftl::Bast(b) => b.write(&mut self.nand, t, lpn, partial),
        };
        self.last_program_ns = self.last_program_ns.max(done);
        let last = self.tag_last_program_ns.entry(tag).or_insert(0);
        *last = (*last).max(done);
        if let Some(m) = self.map.as_mut()
            && m.record(lpn, tag)
        {
            // A log area is full: the map table takes over what the logs said.
            let before = self.map_pages_written;
            let work = self.nand.shadow_work(Work::LogFill);
            done = done.max(self.write_map_pages(done));
            self.nand.shadow_work(work);
            self.flush_stats.map_bytes_outside_flush +=
                (self.map_pages_written - before) * self.p.page_bytes;
        }
        done
    }

    /// Write every dirty translation page from `t`; returns when the last is on flash.
    fn write_map_pages(&mut self, t: u64) -> u64 {
        let Some(m) = self.map.as_mut() else {
            return t;
        };
        let dies = self.nand.dies as u64;
        let mut done = t;
        for tp in m.take_dirty() {
            self.map_pages_written += 1;
            done = done.max(self.nand.program_page(t, (tp as u64 % dies) as usize));
        }
        done
    }

    /// A FLUSH on a drive whose buffer only holds pages already being programmed.
    pub(super) fn drain_flush(&mut self, now_ns: u64) -> u64 {
        let t0 = now_ns + self.p.command_overhead_ns;
        self.nand.shadow_begin(t0);
        // As in `wb_flush`: the mapping pages start only once the data they point at is
        // on flash, here the programs already under way (docs/MODELS.md, recovery).
        let data_done = t0.max(self.last_program_ns);
        self.nand.shadow_map_after(data_done);
        let map_done = match &mut self.ftl {
            Ftl::Page(f) => f.flush(&mut self.nand, data_done),
            Ftl::Bast(_) => data_done,
        };
        let before = self.map_pages_written;
        let maps = self.write_map_pages(data_done);
        self.flush_stats.map_bytes += (self.map_pages_written - before) * self.p.page_bytes;
        let done = data_done.max(map_done).max(maps);
        let idle = self.nand.shadow_end();
        let time = &mut self.flush_stats.time;
        time.command_ns += self.p.command_overhead_ns;
        time.add_span(t0, done, idle);
        done
    }

    pub(super) fn wb_read(&mut self, now_ns: u64, req: &DevRequest) -> u64 {
        let (first, end) = self.page_range(req);
        let all_buffered = self
            .wb
            .as_ref()
            .is_some_and(|w| (first..end).all(|l| w.contains(l)));
        if !all_buffered {
            return self.read(now_ns, req);
        }
        // Served from DRAM.
        self.host.cache_hits += 1;
        let start = (now_ns + self.p.command_overhead_ns).max(self.link_free_ns);
        let done = start + crate::units::transfer_ns(req.len_bytes, self.p.interface_bytes_per_sec);
        self.link_free_ns = done;
        done
    }

    pub(super) fn wb_write(&mut self, now_ns: u64, req: &DevRequest) -> u64 {
        let start = (now_ns + self.p.command_overhead_ns).max(self.link_free_ns);
        let received =
            start + crate::units::transfer_ns(req.len_bytes, self.p.interface_bytes_per_sec);
        self.link_free_ns = received;
        let (first, end) = self.page_range(req);
        let pb = self.p.page_bytes;
        let mut ready = received;
        let reserve = self.destage_reserve();
        while self.buffered.peek().is_some_and(|r| r.0 <= received) {
            self.buffered.pop();
        }
        for lpn in first..end {
            let covered_from = req.offset_bytes.max(lpn * pb);
            let covered_to = (req.offset_bytes + req.len_bytes).min((lpn + 1) * pb);
            let partial = covered_to.saturating_sub(covered_from) < pb;
            let Some(wb) = self.wb.as_mut() else {
                break;
            };
            if req.fua || self.buffer_pages == 0 {
                // Straight to flash, with the mapping it needs to be found again.
                wb.discard(lpn);
                let done = self.program(received, lpn, req.tag, partial);
                ready = ready.max(self.persist_mapping_of(done, lpn, req.tag));
                continue;
            }
            if wb.insert(lpn, req.tag, partial) {
                self.flush_stats.absorbed_bytes += pb;
                continue;
            }
            // Destage ahead: once fewer than `destage_reserve` slots are free, start
            // programming the LRU tail, so a write finds a slot freed by an earlier
            // program instead of waiting for its own eviction's (a full buffer evicting
            // only on demand made every QD1 write wait a whole program).
            if wb.len() + self.buffered.len() > self.buffer_pages - reserve
                && let Some(v) = wb.evict_lru()
            {
                let done = self.program(received, v.lpn, v.tag, v.partial);
                self.flush_stats.evicted_bytes += pb;
                self.buffered.push(Reverse(done));
            }
            // Full (programs cannot keep up): wait for the earliest slot.
            let dirty = self.wb.as_ref().map_or(0, |w| w.len());
            if dirty + self.buffered.len() > self.buffer_pages
                && let Some(Reverse(t)) = self.buffered.pop()
            {
                ready = ready.max(t);
            }
        }
        ready
    }

    /// Free slots the drive keeps by programming the LRU tail early: one per die (so
    /// every die can be programming while a burst of that many new pages still finds
    /// room), and none in buffers under 16 pages per die's share.
    fn destage_reserve(&self) -> usize {
        self.nand.dies.min(self.buffer_pages / 16)
    }

    /// After a write-through of `lpn`, make its mapping durable: its translation page
    /// (`all`) or its tag's log page (`tagged`).
    fn persist_mapping_of(&mut self, t: u64, lpn: u64, tag: u32) -> u64 {
        let dies = self.nand.dies as u64;
        let Some(m) = self.map.as_mut() else {
            return t;
        };
        let page = if m.tagged() {
            m.take_log(tag).then_some(tag as u64)
        } else {
            m.clean_page_of(lpn).map(u64::from)
        };
        match page {
            Some(p) => {
                self.map_pages_written += 1;
                self.nand.program_page(t, (p % dies) as usize)
            }
            None => t,
        }
    }

    pub(super) fn wb_flush(&mut self, now_ns: u64, tag: u32) -> u64 {
        let t0 = now_ns + self.p.command_overhead_ns;
        let everything = self.p.flush == super::FlushMode::All || tag == HOST_TAG;
        let Some(wb) = self.wb.as_mut() else {
            return t0;
        };
        self.nand.shadow_begin(t0);
        let victims: Vec<Victim> = if everything {
            wb.drain_all()
        } else {
            let mut v = wb.drain_tag(tag);
            v.extend(wb.drain_tag(HOST_TAG));
            v
        };
        // Programs already under way (evictions) must finish too.
        let mut done = if everything {
            t0.max(self.last_program_ns)
        } else {
            let last = |t| self.tag_last_program_ns.get(&t).copied().unwrap_or(0);
            t0.max(last(tag)).max(last(HOST_TAG))
        };
        let pb = self.p.page_bytes;
        let maps_before = self.map_pages_written;
        let outside_before = self.flush_stats.map_bytes_outside_flush;
        for v in victims {
            let d = self.program(t0, v.lpn, v.tag, v.partial);
            self.buffered.push(Reverse(d));
            done = done.max(d);
            let s = &mut self.flush_stats;
            match v.tag {
                HOST_TAG => s.host_data_bytes += pb,
                t if t == tag => s.own_data_bytes += pb,
                _ => s.other_data_bytes += pb,
            }
        }
        // The mapping pages go to flash only once the data they point at is there: a map
        // or log page naming a page not yet programmed would, after a power loss during
        // the FLUSH, map it to neither its old nor its new contents (docs/MODELS.md,
        // recovery). So they start when its data programs, and any of its tags' programs
        // already under way, have finished.
        let data_done = done;
        self.nand.shadow_map_after(data_done);
        if everything {
            done = done.max(self.write_map_pages(data_done));
        } else {
            let dies = self.nand.dies as u64;
            for t in [tag, HOST_TAG] {
                if self.map.as_mut().is_some_and(|m| m.take_log(t)) {
                    self.map_pages_written += 1;
                    let die = (t as u64 % dies) as usize;
                    done = done.max(self.nand.program_page(data_done, die));
                }
            }
        }
        // Map pages written because a log filled during this FLUSH count as the FLUSH's.
        self.flush_stats.map_bytes_outside_flush = outside_before;
        self.flush_stats.map_bytes += (self.map_pages_written - maps_before) * pb;
        let idle = self.nand.shadow_end();
        let time = &mut self.flush_stats.time;
        time.command_ns += self.p.command_overhead_ns;
        time.add_span(t0, done, idle);
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ssd::{FtlKind, Precondition, SsdParams};
    use crate::units::{KIB, MIB, NS_PER_US};
    use crate::{DeviceModel, HOST_TAG};

    fn params(flush: FlushMode, write_back: bool) -> SsdParams {
        SsdParams {
            capacity_bytes: 256 * MIB,
            over_provisioning: 0.10,
            page_bytes: 8 * KIB,
            pages_per_block: 64,
            channels: 2,
            dies_per_channel: 2,
            read_ns: 50 * NS_PER_US,
            program_ns: 1_000 * NS_PER_US,
            erase_ns: 2_000 * NS_PER_US,
            channel_bytes_per_sec: 200_000_000,
            interface_bytes_per_sec: 300_000_000,
            command_overhead_ns: 20 * NS_PER_US,
            controller_read_iops: 0,
            controller_write_iops: 0,
            write_buffer_bytes: 2 * MIB,
            write_back,
            flush,
            ftl: FtlKind::Page {
                map_cache_entries: 0,
            },
            gc_free_blocks_low: 2,
            precondition: Precondition::Sequential,
        }
    }

    /// Two VMs (tags 1 and 2) write 8 KiB pages, 16 MiB apart (different map pages).
    fn two_vms(s: &mut Ssd, pages: u64) -> u64 {
        let mut t = 0;
        for i in 0..pages {
            for tag in [1u32, 2] {
                let off = (tag as u64 * 64 * MIB) + i * 16 * MIB % (64 * MIB) + i * 8 * KIB;
                t = s.submit(t, &DevRequest::write(off, 8 * KIB).tagged(tag));
            }
        }
        t
    }

    #[test]
    fn a_flush_delays_requests_submitted_after_it() {
        let mut s = Ssd::new(params(FlushMode::All, true));
        let t = two_vms(&mut s, 8);
        let f = s.submit(t, &DevRequest::flush().tagged(2));
        assert!(f > t + 1_000 * NS_PER_US, "the flush must program 16 pages");
        // Both would be served by DRAM in microseconds without the barrier.
        let w = s.submit(t, &DevRequest::write(0, 8 * KIB).tagged(1));
        assert!(
            w > f,
            "a write after the flush finished at {w}, flush at {f}"
        );
        let r = s.submit(t, &DevRequest::read(0, 4 * KIB));
        assert!(
            r > f,
            "a read after the flush finished at {r}, flush at {f}"
        );
    }

    #[test]
    fn buffer_space_returns_when_the_programs_finish() {
        let mut s = Ssd::new(params(FlushMode::All, true));
        let t = two_vms(&mut s, 8);
        assert_eq!(s.buffered_bytes(t), 16 * 8 * KIB);
        let f = s.submit(t, &DevRequest::flush().tagged(2));
        // Submitting the flush frees nothing; its programs free the space as they finish.
        assert_eq!(s.buffered_bytes(t), 16 * 8 * KIB);
        let full = 16 * 8 * KIB;
        let partly = (t..f)
            .step_by(50_000)
            .any(|x| (1..full).contains(&s.buffered_bytes(x)));
        assert!(partly, "space should return page by page before {f}");
        assert_eq!(s.buffered_bytes(f), 0);
    }

    #[test]
    fn a_full_buffer_evicts_its_oldest_page_and_waits_for_the_slot() {
        let mut p = params(FlushMode::All, true);
        p.write_buffer_bytes = 4 * 8 * KIB;
        let mut s = Ssd::new(p);
        let mut t = 0;
        let mut lat = Vec::new();
        for i in 0..12u64 {
            let d = s.submit(t, &DevRequest::write(i * 8 * KIB, 8 * KIB).tagged(1));
            lat.push(d - t);
            t = d;
        }
        assert!(lat[..4].iter().all(|&l| l < 100 * NS_PER_US), "{lat:?}");
        assert!(lat[4..].iter().any(|&l| l > 500 * NS_PER_US), "{lat:?}");
        assert!(s.buffered_bytes(t) <= 4 * 8 * KIB);
        assert_eq!(s.flush_stats().evicted_bytes, 8 * 8 * KIB);
        // Rewrites of buffered pages cost no program.
        let d = s.submit(t, &DevRequest::write(11 * 8 * KIB, 8 * KIB).tagged(1));
        assert!(d - t < 100 * NS_PER_US);
        assert_eq!(s.flush_stats().absorbed_bytes, 8 * KIB);
    }

    #[test]
    fn qd1_writes_into_a_full_buffer_complete_from_dram_when_programs_keep_up() {
        // 2 MiB of 8 KiB pages: 256 slots, 4 dies, so 4 are kept free.
        let mut s = Ssd::new(params(FlushMode::All, true));
        let mut t = 0;
        for i in 0..256u64 {
            t = s.submit(t, &DevRequest::write(i * 8 * KIB, 8 * KIB).tagged(1));
        }
        // New pages at QD1, 3 ms apart: far below what 4 dies programming 1 ms pages
        // sustain, so none should wait for a program (before the destage reserve, each
        // waited for its own eviction's, over 1 ms).
        let mut worst = 0;
        for i in 256..512u64 {
            t += 3_000 * NS_PER_US;
            let d = s.submit(t, &DevRequest::write(i * 8 * KIB, 8 * KIB).tagged(1));
            worst = worst.max(d - t);
        }
        assert!(worst < 100 * NS_PER_US, "worst QD1 write {worst} ns");
        assert!(s.flush_stats().evicted_bytes >= 256 * 8 * KIB);
        assert!(s.buffered_bytes(t) <= 2 * MIB);
    }

    #[test]
    fn a_tagged_flush_leaves_other_tags_in_the_buffer_and_writes_one_log_page() {
        let mut all = Ssd::new(params(FlushMode::All, true));
        let mut tagged = Ssd::new(params(FlushMode::Tagged, true));
        let ta = two_vms(&mut all, 8);
        let tt = two_vms(&mut tagged, 8);
        let fa = all.submit(ta, &DevRequest::flush().tagged(2)) - ta;
        let ft = tagged.submit(tt, &DevRequest::flush().tagged(2)) - tt;
        assert_eq!(tagged.buffered_pages_of(1), 8, "VM1's pages stay buffered");
        assert_eq!(tagged.buffered_pages_of(2), 0);
        assert_eq!(all.buffered_pages_of(1), 0);
        let (a, t) = (all.flush_stats(), tagged.flush_stats());
        assert_eq!((a.own_data_bytes, a.other_data_bytes), (64 * KIB, 64 * KIB));
        assert_eq!((t.own_data_bytes, t.other_data_bytes), (64 * KIB, 0));
        assert_eq!(t.map_bytes, 8 * KIB, "one log page");
        assert!(
            a.map_bytes >= 8 * 8 * KIB,
            "every dirty map page: {}",
            a.map_bytes
        );
        assert!(ft < fa, "tagged {ft} ns, all {fa} ns");
        // The host tag's flush still writes everything.
        tagged.submit(tt + ft, &DevRequest::flush().tagged(HOST_TAG));
        assert_eq!(tagged.buffered_pages_of(1), 0);
    }

    /// BENCHMARKS.md (seed 001, why VM1's 5 s commit takes 720 ms): 2,013 buffered pages of
    /// one tag flushed on an idle `openssd-jasmine`, as 4 KiB writes into 8 KiB pages
    /// (each program reads the page's old copy first) and as whole pages. Prints both
    /// (`cargo test -p tiervisor-model read_modify_write -- --nocapture`).
    #[test]
    fn a_flush_of_read_modify_write_pages_is_several_times_one_of_whole_pages() {
        let Some(crate::presets::Preset::Ssd {
            params: jasmine, ..
        }) = crate::presets::preset("openssd-jasmine")
        else {
            panic!("openssd-jasmine is an SSD preset");
        };
        let pages = 2_013u64;
        let flush_ms = |write_bytes: u64| {
            let mut p = jasmine.clone();
            p.flush = FlushMode::Tagged;
            let mut s = Ssd::new(p);
            let mut t = 0;
            for i in 0..pages {
                // Spread over 64 MiB in no order: one page each.
                let page = (i * 7_919) % 8_192;
                t = s.submit(t, &DevRequest::write(page * 8 * KIB, write_bytes).tagged(1));
            }
            let idle = t + 1_000_000 * NS_PER_US;
            let f = s.submit(idle, &DevRequest::flush().tagged(1));
            (f - idle) as f64 / 1e6
        };
        let (partial_ms, whole_ms) = (flush_ms(4 * KIB), flush_ms(8 * KIB));
        println!("{pages} pages: 4 KiB writes {partial_ms:.0} ms, whole pages {whole_ms:.0} ms");
        assert!(
            partial_ms > 3.0 * whole_ms,
            "read-modify-write {partial_ms:.0} ms against whole pages {whole_ms:.0} ms"
        );
    }

    #[test]
    fn a_flush_latency_splits_into_its_causes() {
        for mode in [FlushMode::All, FlushMode::Tagged] {
            let mut s = Ssd::new(params(mode, true));
            let t = two_vms(&mut s, 8);
            // A second FLUSH arrives while the first runs: it waits at the barrier.
            let f1 = s.submit(t, &DevRequest::flush().tagged(2));
            let f2 = s.submit(t, &DevRequest::flush().tagged(1));
            let st = s.flush_stats();
            let time = st.time;
            assert_eq!(time.total_ns(), st.latency_ns_total, "{mode:?}: {time:?}");
            assert_eq!(time.barrier_wait_ns, f1 - t, "{mode:?}");
            assert_eq!(time.command_ns, 2 * 20 * NS_PER_US);
            assert!(time.data_ns >= 2 * 1_000 * NS_PER_US, "{mode:?}: {time:?}");
            assert!(f2 >= f1);
        }
    }

    #[test]
    fn a_tagged_flush_behind_busy_dies_counts_the_wait_as_queued() {
        let mut s = Ssd::new(params(FlushMode::Tagged, true));
        // VM1 fills the buffer past the destage mark: its pages program on every die.
        let mut t = 0;
        for i in 0..300u64 {
            t = s.submit(t, &DevRequest::write(i * 8 * KIB, 8 * KIB).tagged(1));
        }
        let w = s.submit(t, &DevRequest::write(200 * MIB, 8 * KIB).tagged(2));
        let f = s.submit(w, &DevRequest::flush().tagged(2));
        let time = s.flush_stats().time;
        assert_eq!(time.total_ns(), f - w);
        assert!(
            time.queued_ns > 0,
            "VM1's evictions hold the die VM2's page goes to: {time:?}"
        );
        assert_eq!(time.log_fill_ns, 0);
    }

    #[test]
    fn a_flushes_mapping_pages_are_programmed_after_its_data() {
        for mode in [FlushMode::All, FlushMode::Tagged] {
            let mut s = Ssd::new(params(mode, true));
            let w = s.submit(0, &DevRequest::write(0, 8 * KIB).tagged(2));
            let f = s.submit(w, &DevRequest::flush().tagged(2));
            // One whole page, then its translation page (all) or its tag's log page
            // (tagged): two programs one after the other, not side by side on two dies.
            assert!(
                f - w >= 2 * 1_000 * NS_PER_US,
                "{mode:?}: FLUSH took {} ns",
                f - w
            );
            let time = s.flush_stats().time;
            assert!(time.map_ns >= 1_000 * NS_PER_US, "{mode:?}: {time:?}");
            assert_eq!(time.queued_ns, 0, "{mode:?}: idle dies, nothing queued");
        }
    }

    #[test]
    fn a_full_log_area_writes_the_dirty_map_pages() {
        let mut p = params(FlushMode::Tagged, true);
        // A tiny buffer: VM1's evictions fill its log area (1,024 entries of 8 KiB pages).
        p.write_buffer_bytes = 8 * 8 * KIB;
        let mut s = Ssd::new(p);
        let mut t = 0;
        for i in 0..1100u64 {
            t = s.submit(t, &DevRequest::write(i * 8 * KIB, 8 * KIB).tagged(1));
        }
        let st = s.flush_stats();
        assert!(st.map_bytes_outside_flush > 0, "{st:?}");
        assert_eq!(st.map_bytes, 0, "no FLUSH yet");
    }

    #[test]
    fn a_drive_without_write_back_programs_mapping_pages_after_the_data_under_way() {
        let mut s = Ssd::new(params(FlushMode::All, false));
        // The write completes once in DRAM; its program (1 ms) is still under way. Its
        // translation page (2,048 entries of 4 bytes per 8 KiB page: number 2) is on
        // another die than the first program, so only the order can serialise them.
        let w = s.submit(0, &DevRequest::write(2 * 2048 * 8 * KIB, 8 * KIB));
        let f = s.submit(w, &DevRequest::flush());
        // The page, then its translation page: two programs in a row, not side by side.
        assert!(
            f - w >= 2 * 1_000 * NS_PER_US - 100 * NS_PER_US,
            "FLUSH took {} ns",
            f - w
        );
        assert!(s.flush_stats().map_bytes >= 8 * KIB);
    }

    #[test]
    fn a_drive_without_write_back_writes_dirty_map_pages_on_flush() {
        let mut s = Ssd::new(params(FlushMode::All, false));
        let t = two_vms(&mut s, 4);
        s.submit(t, &DevRequest::flush());
        assert!(s.flush_stats().map_bytes >= 4 * 8 * KIB);
        let t2 = s.submit(t, &DevRequest::flush());
        assert!(t2 > t);
        assert_eq!(s.flush_stats().flushes, 2);
    }
}
