//! Solid-state drive model: NAND dies behind channels, a host link, a DRAM write
//! buffer with early completion, and a flash translation layer (page-mapped with greedy
//! GC and an optional cached map table, or BAST-style hybrid log blocks).

mod bast;
mod maplog;
mod nand;
mod page_ftl;
mod wbuf;
mod writeback;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use bast::BastFtl;
use maplog::MapPersist;
use nand::Nand;
use page_ftl::PageFtl;
use wbuf::WriteBuffer;

pub use writeback::{FlushMode, FlushStats, FlushTime};

use crate::units::transfer_ns;
use crate::{DevOpKind, DevRequest, DeviceCounters, DeviceKind, DeviceModel};

/// How logical pages map to flash.
#[derive(Clone, Debug, PartialEq)]
pub enum FtlKind {
    /// Page-level mapping. `map_cache_entries` = 0 keeps the whole map in DRAM; otherwise
    /// only that many entries are cached (DFTL) and misses read translation pages.
    Page { map_cache_entries: u64 },
    /// Block-level mapping with `log_blocks` log blocks (BAST).
    Bast { log_blocks: u32 },
}

/// The state the drive starts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// Fresh out of the box: nothing mapped; reads of unwritten pages touch no flash.
    None,
    /// Every logical page written once, in order (steady state for reads).
    Sequential,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SsdParams {
    pub capacity_bytes: u64,
    /// Spare physical capacity as a fraction of the logical capacity.
    pub over_provisioning: f64,
    /// Mapping and programming unit.
    pub page_bytes: u64,
    pub pages_per_block: u64,
    pub channels: u32,
    pub dies_per_channel: u32,
    pub read_ns: u64,
    pub program_ns: u64,
    pub erase_ns: u64,
    pub channel_bytes_per_sec: u64,
    pub interface_bytes_per_sec: u64,
    pub command_overhead_ns: u64,
    /// The controller's command rate: read and write commands it can start per second,
    /// whatever their size (0: no limit). Without it the model's QD32 4 KiB IOPS are set by
    /// the host link and the dies alone and came out 1.3-2.9x the datasheets. The write
    /// limit is the datasheets' *random* figure: a write that continues the previous one
    /// (a sequential stream, which the controller combines into whole programs) is not
    /// held to it; datasheets give sequential writes as MB/s, which the dies, the buffer and
    /// the link set.
    pub controller_read_iops: u32,
    pub controller_write_iops: u32,
    /// DRAM write buffer; writes complete once buffered (0: complete when programmed).
    pub write_buffer_bytes: u64,
    /// The buffer is a write-back cache (an LRU list plus per-tag lists): data stays in
    /// DRAM until evicted or flushed, and rewrites are absorbed. Off: every write is
    /// programmed at once and the buffer only lets it complete early.
    pub write_back: bool,
    /// What a FLUSH writes back (seed 001): everything, or only its tag's data and log.
    pub flush: FlushMode,
    pub ftl: FtlKind,
    /// Garbage collection keeps more than this many free blocks per die.
    pub gc_free_blocks_low: u32,
    pub precondition: Precondition,
}

#[derive(Clone, Debug)]
enum Ftl {
    Page(PageFtl),
    Bast(BastFtl),
}

/// The SSD model. See the module documentation.
#[derive(Clone, Debug)]
pub struct Ssd {
    p: SsdParams,
    nand: Nand,
    ftl: Ftl,
    logical_pages: u64,
    link_free_ns: u64,
    /// When the controller can start its next command (see `controller_read_iops`).
    controller_free_ns: u64,
    /// Where the last write ended: a write starting there continues a sequential stream.
    last_write_end_bytes: u64,
    buffer_pages: usize,
    /// Program completion times of pages still occupying the write buffer.
    buffered: BinaryHeap<Reverse<u64>>,
    last_program_ns: u64,
    host: DeviceCounters,
    /// A FLUSH is a barrier: nothing submitted after it starts before it completes.
    barrier_ns: u64,
    /// Write-back buffer entries (write-back mode only).
    wb: Option<WriteBuffer>,
    /// Dirty translation pages and per-tag logs (page FTL with the map in DRAM).
    map: Option<MapPersist>,
    /// Latest program completion per tag (a tagged FLUSH waits only for its own).
    tag_last_program_ns: BTreeMap<u32, u64>,
    flush_stats: FlushStats,
    /// (tag, latency) of every FLUSH, in completion order: the per-VM medians the mean
    /// in `flush_stats` hides (16 bytes a FLUSH).
    flush_latencies_ns: Vec<(u32, u64)>,
    /// Translation and mapping-log pages programmed so far.
    map_pages_written: u64,
    /// Buffer occupancy samples (time, bytes), one every `sample_every_ns`.
    samples: Vec<(u64, u64)>,
    sample_every_ns: u64,
    next_sample_ns: u64,
}

impl Ssd {
    pub fn new(p: SsdParams) -> Ssd {
        let nand = Nand::new(
            p.channels as usize,
            p.dies_per_channel as usize,
            p.page_bytes,
            p.read_ns,
            p.program_ns,
            p.erase_ns,
            p.channel_bytes_per_sec,
        );
        let logical_pages = p.capacity_bytes.div_ceil(p.page_bytes).max(1);
        let implicit = p.precondition == Precondition::Sequential;
        let ftl = match p.ftl {
            FtlKind::Page { map_cache_entries } => Ftl::Page(PageFtl::new(
                &nand,
                logical_pages,
                p.pages_per_block,
                p.over_provisioning,
                implicit,
                map_cache_entries,
                p.gc_free_blocks_low as usize,
            )),
            FtlKind::Bast { log_blocks } => Ftl::Bast(BastFtl::new(
                &nand,
                logical_pages,
                p.pages_per_block,
                log_blocks,
                implicit,
            )),
        };
        let map = match p.ftl {
            FtlKind::Page {
                map_cache_entries: 0,
            } => Some(MapPersist::new(
                logical_pages,
                p.page_bytes,
                p.flush == FlushMode::Tagged,
            )),
            _ => None,
        };
        Ssd {
            buffer_pages: (p.write_buffer_bytes / p.page_bytes) as usize,
            barrier_ns: 0,
            wb: p.write_back.then(WriteBuffer::new),
            map,
            tag_last_program_ns: BTreeMap::new(),
            flush_stats: FlushStats::default(),
            flush_latencies_ns: Vec::new(),
            map_pages_written: 0,
            samples: Vec::new(),
            sample_every_ns: 0,
            next_sample_ns: 0,
            nand,
            ftl,
            logical_pages,
            link_free_ns: 0,
            controller_free_ns: 0,
            last_write_end_bytes: u64::MAX,
            buffered: BinaryHeap::new(),
            last_program_ns: 0,
            host: DeviceCounters::default(),
            p,
        }
    }

    pub fn params(&self) -> &SsdParams {
        &self.p
    }

    /// Bytes sitting in the DRAM write buffer, not yet on flash, at `now_ns`.
    pub fn buffered_bytes(&self, now_ns: u64) -> u64 {
        let waiting = self.wb.as_ref().map_or(0, |w| w.len()) as u64;
        (self.buffered.iter().filter(|r| r.0 > now_ns).count() as u64 + waiting) * self.p.page_bytes
    }

    /// Merge counts of the hybrid FTL: (switch, partial, full).
    pub fn merges(&self) -> (u64, u64, u64) {
        match &self.ftl {
            Ftl::Bast(b) => (b.switch_merges, b.partial_merges, b.full_merges),
            Ftl::Page(_) => (0, 0, 0),
        }
    }

    /// Fraction of flash holding valid data (page-mapped FTL only).
    pub fn utilisation(&self) -> Option<f64> {
        match &self.ftl {
            Ftl::Page(f) => Some(f.utilisation()),
            Ftl::Bast(_) => None,
        }
    }

    /// The time a read or write command arriving at `now_ns` starts, and the controller's
    /// next free time. At one outstanding request the controller is always free again by the
    /// next arrival, so QD1 latencies do not change.
    fn controller_start(&mut self, now_ns: u64, write: bool) -> u64 {
        let iops = if write {
            self.p.controller_write_iops
        } else {
            self.p.controller_read_iops
        };
        if iops == 0 {
            return now_ns;
        }
        let start = now_ns.max(self.controller_free_ns);
        self.controller_free_ns = start + crate::units::NS_PER_S / u64::from(iops);
        start
    }

    /// Unmap logical pages `first..end` (page-mapped FTL only: BAST cannot unmap a page).
    fn unmap(&mut self, first: u64, end: u64) {
        if let Ftl::Page(f) = &mut self.ftl {
            for lpn in first..end {
                f.trim(lpn);
                if let Some(w) = self.wb.as_mut() {
                    w.discard(lpn);
                }
            }
        }
    }

    /// A write command's data, through the write-back buffer or straight to flash.
    fn data_write(&mut self, now_ns: u64, req: &DevRequest) -> u64 {
        self.host.host_write_bytes += req.len_bytes;
        if self.wb.is_some() {
            self.wb_write(now_ns, req)
        } else {
            self.write(now_ns, req)
        }
    }

    /// Zero a range: its whole pages are deallocated (they read back as zeros without
    /// touching flash, as after a TRIM with deterministic zeroes) and only the partial
    /// pages at either end are written. Without this the engine's zero-fill of thin chunks
    /// counted as a full data write, so a sparse trace wrote 10.6x its own bytes to the
    /// SSD. BAST cannot unmap single pages, so there the zeros are written.
    fn write_zeroes(&mut self, now_ns: u64, req: &DevRequest) -> u64 {
        let pb = self.p.page_bytes;
        let (start, end) = (req.offset_bytes, req.offset_bytes + req.len_bytes);
        let (whole_from, whole_to) = (start.div_ceil(pb) * pb, end / pb * pb);
        if matches!(self.ftl, Ftl::Bast(_)) || whole_from >= whole_to {
            return self.data_write(now_ns, req);
        }
        self.unmap(whole_from / pb, (whole_to / pb).min(self.logical_pages));
        let mut done = now_ns + self.p.command_overhead_ns;
        for (offset_bytes, len_bytes) in [(start, whole_from - start), (whole_to, end - whole_to)] {
            if len_bytes > 0 {
                let part = DevRequest {
                    kind: DevOpKind::Write,
                    offset_bytes,
                    len_bytes,
                    ..*req
                };
                done = done.max(self.data_write(now_ns, &part));
            }
        }
        done
    }

    #[inline]
    fn page_range(&self, req: &DevRequest) -> (u64, u64) {
        let first = req.offset_bytes / self.p.page_bytes;
        let end = (req.offset_bytes + req.len_bytes.max(1)).div_ceil(self.p.page_bytes);
        (
            first.min(self.logical_pages - 1),
            end.min(self.logical_pages).max(first + 1),
        )
    }

    fn read(&mut self, now_ns: u64, req: &DevRequest) -> u64 {
        let t0 = now_ns + self.p.command_overhead_ns;
        let (first, end) = self.page_range(req);
        let (mut first_ready, mut last_ready) = (u64::MAX, t0);
        for lpn in first..end {
            let ready = match &mut self.ftl {
                Ftl::Page(f) => f.read(&mut self.nand, t0, lpn),
                Ftl::Bast(b) => b.read(&mut self.nand, t0, lpn),
            };
            first_ready = first_ready.min(ready);
            last_ready = last_ready.max(ready);
        }
        // The link streams pages as they arrive: it cannot start before the first is
        // ready nor finish before the last is ready and sent.
        let rate = self.p.interface_bytes_per_sec;
        let start = first_ready.max(self.link_free_ns);
        let done = (start + transfer_ns(req.len_bytes, rate))
            .max(last_ready + transfer_ns(req.len_bytes.min(self.p.page_bytes), rate));
        self.link_free_ns = done;
        done
    }

    fn write(&mut self, now_ns: u64, req: &DevRequest) -> u64 {
        let start = (now_ns + self.p.command_overhead_ns).max(self.link_free_ns);
        let received = start + transfer_ns(req.len_bytes, self.p.interface_bytes_per_sec);
        self.link_free_ns = received;
        let (first, end) = self.page_range(req);
        let pb = self.p.page_bytes;
        let mut programmed = received;
        for lpn in first..end {
            let covered_from = req.offset_bytes.max(lpn * pb);
            let covered_to = (req.offset_bytes + req.len_bytes).min((lpn + 1) * pb);
            let partial = covered_to.saturating_sub(covered_from) < pb;
            let done = match &mut self.ftl {
                Ftl::Page(f) => f.write(&mut self.nand, received, lpn, partial),
                Ftl::Bast(b) => b.write(&mut self.nand, received, lpn, partial),
            };
            programmed = programmed.max(done);
            self.last_program_ns = self.last_program_ns.max(done);
            if let Some(m) = self.map.as_mut() {
                m.record(lpn, req.tag);
            }
            if self.buffer_pages > 0 {
                self.buffered.push(Reverse(done));
            }
        }
        if self.buffer_pages == 0 || req.fua {
            return programmed;
        }
        // Early completion once the data fits in the buffer: wait for the oldest
        // programs to finish if it does not.
        while let Some(&Reverse(t)) = self.buffered.peek() {
            if t <= received {
                self.buffered.pop();
            } else {
                break;
            }
        }
        let mut ready = received;
        while self.buffered.len() > self.buffer_pages {
            if let Some(Reverse(t)) = self.buffered.pop() {
                ready = ready.max(t);
            }
        }
        ready
    }
}

impl DeviceModel for Ssd {
    fn submit(&mut self, now_ns: u64, req: &DevRequest) -> u64 {
        self.sample_until(now_ns);
        // Requests that arrive while a FLUSH runs wait for it (seed 001, section II-A).
        let arrived_ns = now_ns;
        let now_ns = now_ns.max(self.barrier_ns);
        let write_back = self.wb.is_some();
        match req.kind {
            DevOpKind::Read => {
                self.host.host_read_bytes += req.len_bytes;
                let now_ns = self.controller_start(now_ns, false);
                if write_back {
                    self.wb_read(now_ns, req)
                } else {
                    self.read(now_ns, req)
                }
            }
            DevOpKind::Write => {
                let sequential = req.offset_bytes == self.last_write_end_bytes;
                self.last_write_end_bytes = req.offset_bytes + req.len_bytes;
                let now_ns = if sequential {
                    now_ns
                } else {
                    self.controller_start(now_ns, true)
                };
                self.data_write(now_ns, req)
            }
            DevOpKind::WriteZeroes => {
                let now_ns = self.controller_start(now_ns, true);
                self.write_zeroes(now_ns, req)
            }
            DevOpKind::Flush => {
                self.flush_stats.time.barrier_wait_ns += now_ns - arrived_ns;
                let done = if write_back {
                    self.wb_flush(now_ns, req.tag)
                } else {
                    self.drain_flush(now_ns)
                };
                self.barrier_ns = done;
                self.flush_stats.flushes += 1;
                self.flush_stats.latency_ns_total += done - arrived_ns;
                self.flush_latencies_ns.push((req.tag, done - arrived_ns));
                done
            }
            DevOpKind::Trim => {
                // Only whole pages can be unmapped.
                let pb = self.p.page_bytes;
                let first = req.offset_bytes.div_ceil(pb);
                let end = ((req.offset_bytes + req.len_bytes) / pb).min(self.logical_pages);
                self.unmap(first, end);
                now_ns + self.p.command_overhead_ns
            }
        }
    }

    fn capacity_bytes(&self) -> u64 {
        self.p.capacity_bytes
    }

    fn kind(&self) -> DeviceKind {
        DeviceKind::Ssd
    }

    fn counters(&self) -> DeviceCounters {
        let n = &self.nand.counters;
        DeviceCounters {
            host_read_bytes: self.host.host_read_bytes,
            host_write_bytes: self.host.host_write_bytes,
            media_write_bytes: n.media_write_bytes,
            media_read_bytes: n.media_read_bytes,
            erases: n.erases,
            gc_page_copies: n.gc_page_copies,
            cache_hits: self.host.cache_hits,
            map_cache_misses: n.map_cache_misses,
        }
    }
}

impl Ssd {
    /// Whether a logical byte offset currently maps to flash (for tests).
    pub fn is_mapped(&self, offset_bytes: u64) -> bool {
        let lpn = offset_bytes / self.p.page_bytes;
        match &self.ftl {
            Ftl::Page(f) => f.is_mapped(lpn),
            Ftl::Bast(b) => b.is_mapped(lpn),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{GIB, KIB, MIB, NS_PER_US};

    fn small(ftl: FtlKind, precondition: Precondition) -> SsdParams {
        SsdParams {
            capacity_bytes: 64 * MIB,
            over_provisioning: 0.10,
            page_bytes: 4 * KIB,
            pages_per_block: 64,
            channels: 2,
            dies_per_channel: 2,
            read_ns: 50 * NS_PER_US,
            program_ns: 500 * NS_PER_US,
            erase_ns: 2_000 * NS_PER_US,
            channel_bytes_per_sec: 200_000_000,
            interface_bytes_per_sec: 300_000_000,
            command_overhead_ns: 20 * NS_PER_US,
            controller_read_iops: 0,
            controller_write_iops: 0,
            write_buffer_bytes: 256 * KIB,
            write_back: false,
            flush: FlushMode::All,
            ftl,
            gc_free_blocks_low: 2,
            precondition,
        }
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Random 4 KiB overwrites confined to the first `fill` fraction of the drive.
    fn waf_at_fill(fill: f64) -> f64 {
        let mut s = Ssd::new(small(
            FtlKind::Page {
                map_cache_entries: 0,
            },
            Precondition::None,
        ));
        let pages = (64 * MIB / (4 * KIB)) as f64 * fill;
        let pages = pages as u64;
        let mut t = 0;
        for p in 0..pages {
            t = s.submit(t, &DevRequest::write(p * 4 * KIB, 4 * KIB));
        }
        let before = s.counters();
        let mut rng = Rng(0x1234_5678);
        for _ in 0..pages * 6 {
            t = s.submit(t, &DevRequest::write(rng.next(pages) * 4 * KIB, 4 * KIB));
        }
        let after = s.counters();
        (after.media_write_bytes - before.media_write_bytes) as f64
            / (after.host_write_bytes - before.host_write_bytes) as f64
    }

    #[test]
    fn gc_write_amplification_grows_as_the_drive_fills() {
        let (w50, w80, w95) = (waf_at_fill(0.5), waf_at_fill(0.8), waf_at_fill(0.95));
        assert!(
            w50 >= 1.0 && w50 < w80 && w80 < w95,
            "waf 50% {w50:.2}, 80% {w80:.2}, 95% {w95:.2}"
        );
        assert!(
            w95 > 2.0,
            "a nearly full drive must amplify writes: {w95:.2}"
        );
    }

    #[test]
    fn flush_empties_the_write_buffer_when_the_programs_finish() {
        let mut s = Ssd::new(small(
            FtlKind::Page {
                map_cache_entries: 0,
            },
            Precondition::Sequential,
        ));
        let done = s.submit(0, &DevRequest::write(0, 128 * KIB));
        assert!(
            s.buffered_bytes(done) > 0,
            "writes should complete early from DRAM"
        );
        let before = s.buffered_bytes(done);
        let f = s.submit(done, &DevRequest::flush());
        assert!(f > done + 400 * NS_PER_US, "flush must wait for programs");
        // Submitting the flush frees nothing: space returns as programs finish.
        assert_eq!(s.buffered_bytes(done), before);
        assert!(s.buffered_bytes(done + 600 * NS_PER_US) < before);
        assert_eq!(s.buffered_bytes(f), 0);
    }

    #[test]
    fn hybrid_ftl_makes_small_random_writes_costly() {
        let bast = FtlKind::Bast { log_blocks: 4 };
        let mut seq = Ssd::new(small(bast.clone(), Precondition::Sequential));
        let mut rnd = Ssd::new(small(bast, Precondition::Sequential));
        let (mut ts, mut tr) = (0, 0);
        let mut rng = Rng(99);
        for i in 0..512u64 {
            ts = seq.submit(ts, &DevRequest::write(i * 4 * KIB, 4 * KIB));
            tr = rnd.submit(
                tr,
                &DevRequest::write(rng.next(16 * 1024) * 4 * KIB, 4 * KIB),
            );
        }
        assert!(tr > 10 * ts, "random {tr} ns vs sequential {ts} ns");
        let (sw, _, full) = rnd.merges();
        assert!(full > 100, "random writes should force full merges: {full}");
        assert!(seq.merges().0 > 0 && sw == 0);
        assert!(rnd.counters().waf() > 5.0);
    }

    /// Every log block may serve logical blocks of one die (this once ran a die out of
    /// free blocks and panicked).
    #[test]
    fn hybrid_ftl_survives_all_log_blocks_on_one_die() {
        let mut s = Ssd::new(small(
            FtlKind::Bast { log_blocks: 16 },
            Precondition::Sequential,
        ));
        let dies = 4;
        let block_bytes = 64 * 4 * KIB;
        let lbns = 64 * MIB / block_bytes;
        let mut rng = Rng(5);
        let mut t = 0;
        for _ in 0..5000 {
            let lbn = rng.next(lbns / dies) * dies;
            let off = lbn * block_bytes + rng.next(64) * 4 * KIB;
            t = s.submit(t, &DevRequest::write(off, 4 * KIB));
        }
        assert!(s.merges().2 > 100, "full merges: {:?}", s.merges());
    }

    #[test]
    fn map_cache_misses_cost_flash_reads() {
        let mut cached = small(
            FtlKind::Page {
                map_cache_entries: 2048,
            },
            Precondition::Sequential,
        );
        cached.capacity_bytes = GIB;
        let mut full = cached.clone();
        full.ftl = FtlKind::Page {
            map_cache_entries: 0,
        };
        let (mut a, mut b) = (Ssd::new(cached), Ssd::new(full));
        let (mut ta, mut tb) = (0, 0);
        let mut rng = Rng(7);
        for _ in 0..2000 {
            let off = rng.next(GIB / (4 * KIB)) * 4 * KIB;
            ta = a.submit(ta, &DevRequest::read(off, 4 * KIB));
            tb = b.submit(tb, &DevRequest::read(off, 4 * KIB));
        }
        assert!(a.counters().map_cache_misses > 1500);
        assert_eq!(b.counters().map_cache_misses, 0);
        assert!(ta > tb + 2000 * 40 * NS_PER_US);
    }

    #[test]
    fn trim_unmaps_and_unmapped_reads_skip_flash() {
        let mut s = Ssd::new(small(
            FtlKind::Page {
                map_cache_entries: 0,
            },
            Precondition::Sequential,
        ));
        assert!(s.is_mapped(0));
        s.submit(
            0,
            &DevRequest {
                kind: DevOpKind::Trim,
                offset_bytes: 0,
                len_bytes: 64 * KIB,
                fua: false,
                tag: crate::HOST_TAG,
            },
        );
        assert!(!s.is_mapped(0) && !s.is_mapped(60 * KIB) && s.is_mapped(64 * KIB));
        let t = s.submit(1_000_000, &DevRequest::read(0, 4 * KIB)) - 1_000_000;
        let u = s.submit(2_000_000, &DevRequest::read(64 * KIB, 4 * KIB)) - 2_000_000;
        assert!(t < u, "unmapped read {t} ns should beat mapped read {u} ns");
    }

    #[test]
    fn write_zeroes_deallocates_whole_pages_and_writes_only_the_ends() {
        for write_back in [false, true] {
            let p = SsdParams {
                write_back,
                ..small(
                    FtlKind::Page {
                        map_cache_entries: 0,
                    },
                    Precondition::Sequential,
                )
            };
            let mut s = Ssd::new(p.clone());
            let before = s.counters();
            // 1 KiB into page 0 up to 1 KiB into page 16: pages 1..16 whole.
            let zero = DevRequest {
                kind: DevOpKind::WriteZeroes,
                offset_bytes: KIB,
                len_bytes: 64 * KIB,
                fua: false,
                tag: crate::HOST_TAG,
            };
            let t_zero = s.submit(0, &zero);
            let c = s.counters();
            assert_eq!(c.host_write_bytes - before.host_write_bytes, 4 * KIB);
            assert!(
                s.is_mapped(0) && s.is_mapped(64 * KIB),
                "partial pages kept"
            );
            assert!((4..64).step_by(4).all(|k| !s.is_mapped(k * KIB)));
            // Writing the same range costs more: every page crosses the link and is programmed.
            let mut w = Ssd::new(p);
            let t_write = w.submit(0, &DevRequest::write(KIB, 64 * KIB));
            assert!(t_zero < t_write, "{write_back}: {t_zero} vs {t_write}");
            assert_eq!(w.counters().host_write_bytes, 64 * KIB);
        }
        // BAST cannot unmap a page: the zeros are written.
        let mut b = Ssd::new(small(
            FtlKind::Bast { log_blocks: 4 },
            Precondition::Sequential,
        ));
        let zero = DevRequest {
            kind: DevOpKind::WriteZeroes,
            ..DevRequest::write(0, 64 * KIB)
        };
        b.submit(0, &zero);
        assert_eq!(b.counters().host_write_bytes, 64 * KIB);
        assert!(b.is_mapped(0));
    }

    #[test]
    fn dies_work_in_parallel() {
        let mut s = Ssd::new(small(
            FtlKind::Page {
                map_cache_entries: 0,
            },
            Precondition::Sequential,
        ));
        let one = s.submit(0, &DevRequest::read(0, 4 * KIB));
        let four = s.submit(10_000_000, &DevRequest::read(4 * 4 * KIB, 16 * KIB)) - 10_000_000;
        assert!(
            four < 2 * one,
            "4 pages on 4 dies: {four} ns vs one page {one} ns"
        );
    }
}
