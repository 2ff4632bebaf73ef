//! A SURGE-like web-server workload (seed 003 section 5, after Barford and Crovella).
//!
//! `processes` processes run ON/OFF loops over a set of files laid out on the disk with
//! fragmentation ([`layout`]). In an ON period a process reads a Pareto(2.43, 1) number
//! of files, each chosen by Zipf popularity, block by block, waiting for each block; then
//! it sleeps Pareto(1.5, 2) ms per block it read (the paper's "milliseconds per block";
//! its Figure 2 with the loop's exact code is not in our copy, so one draw is scaled by
//! the ON period's block count). Two modes:
//! - O_DIRECT: every block is one request to the disk;
//! - page cache: a host LRU cache of 4 KiB pages (`page_cache_bytes`, about 65 MB in the
//!   paper) answers hits at once; a miss reads from the missing page up to `readahead_bytes`
//!   further within the extent, as the kernel's read-ahead does.
//!
//! Each request names its process ([`WlRequest::context`]), so schedulers that serve
//! processes (cfq, bfq, cats) see 50 issuers, as the paper's did, not one VM.
//! The processes wait for their own requests, so the driver reports each completion
//! ([`Workload::completed`]) and honours the not-before times of requests issued after a
//! sleep ([`Workload::paced`]). Everything is drawn from one seeded generator.

pub mod cache;
pub mod dist;
pub mod layout;

use std::collections::{HashMap, VecDeque};

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;

use crate::r#gen::below;
use crate::{WlKind, WlRequest, Workload};
use cache::{PAGE_BYTES, PageCache};
pub use dist::SizeMix;
pub use layout::Layout;

/// Parameters of a SURGE-like run. [`SurgeConfig::paper`] has seed 003's values.
#[derive(Clone, Debug, PartialEq)]
pub struct SurgeConfig {
    pub processes: u32,
    pub files: u64,
    /// The files live in `[0, region_bytes)` of the volume.
    pub region_bytes: u64,
    /// Bytes a process reads per request (O_DIRECT) or per page-cache lookup.
    pub block_bytes: u64,
    /// Files per ON period: Pareto(alpha, k).
    pub files_alpha: f64,
    pub files_k: f64,
    /// Sleep per block read in the ON period: Pareto(alpha, k ms).
    pub sleep_alpha: f64,
    pub sleep_k_ms: f64,
    /// When a process sleeps (the paper's "milliseconds per block" read two ways).
    pub sleep: SleepMode,
    pub sizes: SizeMix,
    /// None: O_DIRECT.
    pub page_cache_bytes: Option<u64>,
    pub readahead_bytes: u64,
    /// Stop after this many disk requests.
    pub requests: u64,
    pub seed: u64,
}

impl SurgeConfig {
    /// Seed 003's workload on a region of `region_bytes`. Block size 8 KiB is our
    /// estimate (the paper does not say): with it the paper's Table 2 throughput over its
    /// mean service time gives the ~16 sectors per request a saturated disk implies.
    pub fn paper(region_bytes: u64) -> SurgeConfig {
        SurgeConfig {
            processes: 50,
            files: 1_000_000,
            region_bytes,
            block_bytes: 8192,
            files_alpha: 2.43,
            files_k: 1.0,
            sleep_alpha: 1.5,
            sleep_k_ms: 2.0,
            sleep: SleepMode::OnPeriod,
            sizes: SizeMix::PAPER,
            page_cache_bytes: None,
            readahead_bytes: 128 * 1024,
            requests: 50_000,
            seed: 1,
        }
    }
}

/// When a SURGE process sleeps. The paper's Figure 2 (its loop) is not in our copy; its
/// text says only that the sleep is "milliseconds per block rather than seconds per file".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SleepMode {
    /// Once per ON period: one Pareto draw times the blocks read in it (the default).
    OnPeriod,
    /// After every block read: one Pareto draw each (the same mean sleep per block, but
    /// a pause between every two reads of a process).
    PerBlock,
}

/// Where one process is.
#[derive(Clone, Copy, Debug, Default)]
struct Proc {
    /// Files still to read in this ON period (including the one being read).
    files_left: u64,
    reading: Option<Cursor>,
    blocks_on: u64,
    /// The process may issue its next request from this time.
    ready_ns: u64,
}

#[derive(Clone, Copy, Debug)]
struct Cursor {
    file: u64,
    extent: usize,
    pos_bytes: u64,
}

/// A running SURGE-like workload.
pub struct SurgeWorkload {
    cfg: SurgeConfig,
    layout: Layout,
    rng: Xoshiro256PlusPlus,
    /// Popularity rank -> file: popular files are scattered over the disk.
    by_rank: Vec<u32>,
    procs: Vec<Proc>,
    free: VecDeque<usize>,
    owner: HashMap<u64, usize>,
    cache: Option<PageCache>,
    returned: u64,
    /// Blocks read from files (cache hits included).
    pub blocks: u64,
}

impl SurgeWorkload {
    pub fn new(cfg: SurgeConfig) -> Result<SurgeWorkload, String> {
        if cfg.processes == 0 || cfg.files == 0 || cfg.block_bytes == 0 {
            return Err("processes, files and block must be positive".into());
        }
        if cfg.files > u32::MAX as u64 {
            return Err(format!("at most {} files", u32::MAX));
        }
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(cfg.seed);
        let layout = Layout::build(&mut rng, cfg.files, cfg.region_bytes, &cfg.sizes)?;
        let mut by_rank: Vec<u32> = (0..cfg.files as u32).collect();
        for i in (1..by_rank.len()).rev() {
            let j = below(&mut rng, i as u64 + 1) as usize;
            by_rank.swap(i, j);
        }
        Ok(SurgeWorkload {
            procs: vec![Proc::default(); cfg.processes as usize],
            free: (0..cfg.processes as usize).collect(),
            owner: HashMap::new(),
            cache: cfg.page_cache_bytes.map(PageCache::new),
            layout,
            rng,
            by_rank,
            returned: 0,
            blocks: 0,
            cfg,
        })
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Page-cache hits and misses (block lookups), if the mode has a cache.
    pub fn cache_hits_misses(&self) -> Option<(u64, u64)> {
        self.cache.as_ref().map(|c| (c.hits, c.misses))
    }

    /// The next block of process `p`'s loop; sleeps and cache hits advance it without a
    /// request. None if no disk request comes within a bound of steps (a file set the
    /// cache holds whole).
    fn advance(&mut self, p: usize) -> Option<WlRequest> {
        for _ in 0..10_000_000u64 {
            let mut pr = self.procs[p];
            if self.cfg.sleep == SleepMode::PerBlock && pr.blocks_on > 0 {
                let ms = dist::pareto(&mut self.rng, self.cfg.sleep_alpha, self.cfg.sleep_k_ms);
                pr.ready_ns += (ms * 1e6) as u64;
                pr.blocks_on = 0;
            }
            if pr.reading.is_none() && pr.files_left == 0 {
                if pr.blocks_on > 0 {
                    let per_block_ms =
                        dist::pareto(&mut self.rng, self.cfg.sleep_alpha, self.cfg.sleep_k_ms);
                    pr.ready_ns += (per_block_ms * 1e6 * pr.blocks_on as f64) as u64;
                    pr.blocks_on = 0;
                }
                let n = dist::pareto(&mut self.rng, self.cfg.files_alpha, self.cfg.files_k);
                pr.files_left = (n as u64).max(1);
            }
            let mut cur = match pr.reading {
                Some(c) => c,
                None => {
                    let rank = dist::zipf_rank(&mut self.rng, self.cfg.files);
                    Cursor {
                        file: self.by_rank[rank as usize] as u64,
                        extent: 0,
                        pos_bytes: 0,
                    }
                }
            };
            let extents = self.layout.extents(cur.file);
            let (ext_off, ext_len) = extents[cur.extent];
            let start = ext_off + cur.pos_bytes;
            let take = self.cfg.block_bytes.min(ext_len - cur.pos_bytes);
            cur.pos_bytes += take;
            if cur.pos_bytes == ext_len {
                cur.extent += 1;
                cur.pos_bytes = 0;
            }
            pr.reading = if cur.extent == extents.len() {
                pr.files_left -= 1;
                None
            } else {
                Some(cur)
            };
            pr.blocks_on += 1;
            self.procs[p] = pr;
            self.blocks += 1;
            let Some(cache) = self.cache.as_mut() else {
                return Some(read(p, start, take, pr.ready_ns));
            };
            let first = start / PAGE_BYTES;
            let last = (start + take - 1) / PAGE_BYTES;
            let Some(miss) = (first..=last).find(|&pg| !cache.touch(pg)) else {
                cache.hits += 1;
                continue;
            };
            cache.misses += 1;
            let from = miss * PAGE_BYTES;
            let end = (from + self.cfg.readahead_bytes)
                .min(ext_off + ext_len)
                .max(start + take);
            for pg in miss..end.div_ceil(PAGE_BYTES) {
                cache.insert(pg);
            }
            return Some(read(p, from, end - from, pr.ready_ns));
        }
        None
    }
}

/// A read by process `process`, not before `at_ns`.
fn read(process: usize, offset_bytes: u64, len_bytes: u64, at_ns: u64) -> WlRequest {
    WlRequest {
        kind: WlKind::Read,
        offset_bytes,
        len_bytes,
        at_ns: Some(at_ns),
        context: Some(process as u32),
    }
}

impl Workload for SurgeWorkload {
    fn next(&mut self, now_ns: u64) -> Option<WlRequest> {
        if self.returned >= self.cfg.requests {
            return None;
        }
        let p = self.free.pop_front()?;
        self.procs[p].ready_ns = self.procs[p].ready_ns.max(now_ns);
        let r = self.advance(p)?;
        self.owner.insert(self.returned, p);
        self.returned += 1;
        Some(r)
    }

    fn depth(&self) -> u32 {
        self.cfg.processes
    }

    fn paced(&self) -> bool {
        true
    }

    fn completed(&mut self, index: u64, now_ns: u64) {
        if let Some(p) = self.owner.remove(&index) {
            self.procs[p].ready_ns = now_ns;
            self.free.push_back(p);
        }
    }
}

#[cfg(test)]
mod tests;
