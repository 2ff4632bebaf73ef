//! Page-mapped FTL with greedy garbage collection and an optional cached map table.
//!
//! Logical pages start either unmapped or laid out sequentially, striped over dies
//! (the "implicit" initial layout, equivalent to a sequential precondition fill without
//! spending memory on it). Writes go to the active block of the next die in turn; when a
//! die runs low on free blocks, greedy GC copies the valid pages of its block with the
//! fewest valid pages and erases it.

use super::nand::Nand;

const NONE: u32 = u32::MAX;
const TRIMMED: u32 = u32::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BlockState {
    Free,
    Active,
    Full,
}

/// The cached mapping table (DFTL style): an LRU of translation pages.
#[derive(Clone, Debug)]
struct MapCache {
    entries_per_tpage: u64,
    capacity: usize,
    len: usize,
    prev: Vec<u32>,
    next: Vec<u32>,
    cached: Vec<bool>,
    dirty: Vec<bool>,
    head: u32,
    tail: u32,
}

impl MapCache {
    fn new(logical_pages: u64, page_bytes: u64, cache_entries: u64) -> MapCache {
        let ept = (page_bytes / 4).max(1);
        let tpages = logical_pages.div_ceil(ept) as usize;
        MapCache {
            entries_per_tpage: ept,
            capacity: (cache_entries / ept).max(1) as usize,
            len: 0,
            prev: vec![NONE; tpages],
            next: vec![NONE; tpages],
            cached: vec![false; tpages],
            dirty: vec![false; tpages],
            head: NONE,
            tail: NONE,
        }
    }

    fn unlink(&mut self, tp: u32) {
        let (p, n) = (self.prev[tp as usize], self.next[tp as usize]);
        if p != NONE {
            self.next[p as usize] = n
        } else {
            self.head = n
        }
        if n != NONE {
            self.prev[n as usize] = p
        } else {
            self.tail = p
        }
    }

    fn push_front(&mut self, tp: u32) {
        self.prev[tp as usize] = NONE;
        self.next[tp as usize] = self.head;
        if self.head != NONE {
            self.prev[self.head as usize] = tp;
        }
        self.head = tp;
        if self.tail == NONE {
            self.tail = tp;
        }
    }

    /// Touch the translation page of `lpn`; returns the time its entry is available.
    fn access(&mut self, nand: &mut Nand, t: u64, lpn: u64, dirty: bool) -> u64 {
        let tp = (lpn / self.entries_per_tpage) as u32;
        let dies = nand.dies as u64;
        if self.cached[tp as usize] {
            self.unlink(tp);
            self.push_front(tp);
            self.dirty[tp as usize] |= dirty;
            return t;
        }
        nand.counters.map_cache_misses += 1;
        let mut ready = t;
        if self.len >= self.capacity {
            let victim = self.tail;
            self.unlink(victim);
            self.cached[victim as usize] = false;
            self.len -= 1;
            if std::mem::take(&mut self.dirty[victim as usize]) {
                ready = nand.program_page(t, (victim as u64 % dies) as usize);
            }
        }
        ready = nand.read_page(ready, (tp as u64 % dies) as usize);
        self.cached[tp as usize] = true;
        self.dirty[tp as usize] = dirty;
        self.len += 1;
        self.push_front(tp);
        ready
    }

    /// Write back every dirty translation page; returns when done.
    fn flush(&mut self, nand: &mut Nand, t: u64) -> u64 {
        let mut done = t;
        let dies = nand.dies as u64;
        let mut tp = self.head;
        while tp != NONE {
            if std::mem::take(&mut self.dirty[tp as usize]) {
                done = done.max(nand.program_page(t, (tp as u64 % dies) as usize));
            }
            tp = self.next[tp as usize];
        }
        done
    }
}

#[derive(Clone, Debug)]
pub(crate) struct PageFtl {
    ppb: u64,
    dies: u64,
    blocks_per_die: u64,
    implicit: bool,
    /// Logical to physical: 0 = initial (implicit layout or unmapped), TRIMMED, or ppn + 1.
    l2p: Vec<u32>,
    /// Physical to logical: 0 = none (or implicit, see `implicit_block`), else lpn + 1.
    p2l: Vec<u32>,
    valid: Vec<u64>,
    block_valid: Vec<u32>,
    block_wp: Vec<u32>,
    block_state: Vec<BlockState>,
    implicit_block: Vec<bool>,
    free: Vec<Vec<u32>>,
    active: Vec<u32>,
    gc_active: Vec<u32>,
    next_die: u64,
    gc_low: usize,
    map_cache: Option<MapCache>,
}

impl PageFtl {
    pub fn new(
        nand: &Nand,
        logical_pages: u64,
        pages_per_block: u64,
        over_provisioning: f64,
        implicit_fill: bool,
        map_cache_entries: u64,
        gc_low: usize,
    ) -> PageFtl {
        let dies = nand.dies as u64;
        let ppb = pages_per_block;
        let logical_per_die = logical_pages.div_ceil(dies);
        let data_blocks = logical_per_die.div_ceil(ppb);
        let spare = ((data_blocks as f64 * over_provisioning).ceil() as u64).max(gc_low as u64 + 3);
        let blocks_per_die = data_blocks + spare;
        let total_blocks = (blocks_per_die * dies) as usize;
        let phys_pages = total_blocks as u64 * ppb;
        assert!(
            phys_pages < u32::MAX as u64,
            "SSD too large for 32-bit page numbers; use larger pages"
        );
        let mut ftl = PageFtl {
            ppb,
            dies,
            blocks_per_die,
            implicit: implicit_fill,
            l2p: vec![0; logical_pages as usize],
            p2l: vec![0; phys_pages as usize],
            valid: vec![0; phys_pages.div_ceil(64) as usize],
            block_valid: vec![0; total_blocks],
            block_wp: vec![0; total_blocks],
            block_state: vec![BlockState::Free; total_blocks],
            implicit_block: vec![false; total_blocks],
            free: vec![Vec::new(); dies as usize],
            active: vec![NONE; dies as usize],
            gc_active: vec![NONE; dies as usize],
            next_die: 0,
            gc_low,
            map_cache: (map_cache_entries > 0)
                .then(|| MapCache::new(logical_pages, nand.page_bytes, map_cache_entries)),
        };
        for die in 0..dies {
            let mut first_free = 0;
            if implicit_fill {
                // Pages of the implicit layout on this die: lpn = idx * dies + die.
                let pages_here = if die < logical_pages {
                    (logical_pages - die).div_ceil(dies)
                } else {
                    0
                };
                let full_blocks = pages_here.div_ceil(ppb);
                for bl in 0..full_blocks {
                    let b = (die * blocks_per_die + bl) as usize;
                    let n = (pages_here - bl * ppb).min(ppb);
                    ftl.block_state[b] = BlockState::Full;
                    ftl.block_wp[b] = ppb as u32;
                    ftl.block_valid[b] = n as u32;
                    ftl.implicit_block[b] = true;
                    for pg in 0..n {
                        ftl.set_valid(b as u64 * ppb + pg, true);
                    }
                }
                first_free = full_blocks;
            }
            // Free list as a stack that hands out the lowest block first.
            ftl.free[die as usize] = (first_free..blocks_per_die)
                .rev()
                .map(|bl| (die * blocks_per_die + bl) as u32)
                .collect();
        }
        ftl
    }

    #[inline]
    fn set_valid(&mut self, ppn: u64, v: bool) {
        let (w, bit) = ((ppn / 64) as usize, ppn % 64);
        if v {
            self.valid[w] |= 1 << bit
        } else {
            self.valid[w] &= !(1 << bit)
        }
    }

    #[inline]
    fn is_valid(&self, ppn: u64) -> bool {
        self.valid[(ppn / 64) as usize] >> (ppn % 64) & 1 == 1
    }

    #[inline]
    fn implicit_ppn(&self, lpn: u64) -> u64 {
        let die = lpn % self.dies;
        let idx = lpn / self.dies;
        (die * self.blocks_per_die + idx / self.ppb) * self.ppb + idx % self.ppb
    }

    #[inline]
    fn lookup(&self, lpn: u64) -> Option<u64> {
        match self.l2p[lpn as usize] {
            0 if self.implicit => Some(self.implicit_ppn(lpn)),
            0 | TRIMMED => None,
            p => Some(p as u64 - 1),
        }
    }

    #[inline]
    fn die_of_ppn(&self, ppn: u64) -> usize {
        (ppn / self.ppb / self.blocks_per_die) as usize
    }

    fn lpn_of(&self, ppn: u64) -> u64 {
        match self.p2l[ppn as usize] {
            0 => {
                let b = ppn / self.ppb;
                debug_assert!(self.implicit_block[b as usize]);
                let die = b / self.blocks_per_die;
                let bl = b % self.blocks_per_die;
                (bl * self.ppb + ppn % self.ppb) * self.dies + die
            }
            l => l as u64 - 1,
        }
    }

    fn invalidate(&mut self, lpn: u64) {
        if let Some(old) = self.lookup(lpn)
            && self.is_valid(old)
        {
            self.set_valid(old, false);
            self.block_valid[(old / self.ppb) as usize] -= 1;
        }
    }

    pub fn read(&mut self, nand: &mut Nand, t: u64, lpn: u64) -> u64 {
        let t = match self.map_cache.as_mut() {
            Some(mc) => mc.access(nand, t, lpn, false),
            None => t,
        };
        match self.lookup(lpn) {
            Some(ppn) => nand.read_page(t, self.die_of_ppn(ppn)),
            None => t,
        }
    }

    pub fn is_mapped(&self, lpn: u64) -> bool {
        self.lookup(lpn).is_some()
    }

    pub fn trim(&mut self, lpn: u64) {
        self.invalidate(lpn);
        self.l2p[lpn as usize] = TRIMMED;
    }

    /// Take the next page of the die's active (or GC) block, opening a free block if needed.
    fn alloc_page(&mut self, die: usize, gc: bool) -> u64 {
        let slot = if gc {
            self.gc_active[die]
        } else {
            self.active[die]
        };
        let b = if slot == NONE || self.block_wp[slot as usize] as u64 == self.ppb {
            if slot != NONE {
                self.block_state[slot as usize] = BlockState::Full;
            }
            let nb = self.free[die]
                .pop()
                .expect("SSD model: die out of free blocks (GC could not keep up)");
            self.block_state[nb as usize] = BlockState::Active;
            self.block_wp[nb as usize] = 0;
            self.block_valid[nb as usize] = 0;
            self.implicit_block[nb as usize] = false;
            if gc {
                self.gc_active[die] = nb
            } else {
                self.active[die] = nb
            }
            nb
        } else {
            slot
        };
        let ppn = b as u64 * self.ppb + self.block_wp[b as usize] as u64;
        self.block_wp[b as usize] += 1;
        ppn
    }

    fn map(&mut self, lpn: u64, ppn: u64) {
        self.l2p[lpn as usize] = (ppn + 1) as u32;
        self.p2l[ppn as usize] = (lpn + 1) as u32;
        self.set_valid(ppn, true);
        self.block_valid[(ppn / self.ppb) as usize] += 1;
    }

    /// Greedy GC on one die until it has more than `gc_low` free blocks.
    fn gc(&mut self, nand: &mut Nand, t: u64, die: usize) {
        while self.free[die].len() <= self.gc_low {
            let base = die as u64 * self.blocks_per_die;
            let mut victim = NONE;
            let mut best = u32::MAX;
            for b in base..base + self.blocks_per_die {
                if self.block_state[b as usize] == BlockState::Full
                    && self.block_valid[b as usize] < best
                {
                    best = self.block_valid[b as usize];
                    victim = b as u32;
                }
            }
            if victim == NONE || best as u64 >= self.ppb {
                return; // nothing reclaimable; the allocation will report exhaustion
            }
            let mut copies = 0;
            let first = victim as u64 * self.ppb;
            for ppn in first..first + self.ppb {
                if self.is_valid(ppn) {
                    let lpn = self.lpn_of(ppn);
                    self.set_valid(ppn, false);
                    self.block_valid[victim as usize] -= 1;
                    let dst = self.alloc_page(die, true);
                    self.map(lpn, dst);
                    copies += 1;
                }
            }
            nand.die_work(t, die, copies, 1);
            let v = victim as usize;
            self.block_state[v] = BlockState::Free;
            self.block_wp[v] = 0;
            self.implicit_block[v] = false;
            for ppn in first..first + self.ppb {
                self.p2l[ppn as usize] = 0;
            }
            self.free[die].push(victim);
        }
    }

    /// Write one logical page whose data is available at `t`; returns when it is programmed.
    pub fn write(&mut self, nand: &mut Nand, t: u64, lpn: u64, partial: bool) -> u64 {
        let mut t = match self.map_cache.as_mut() {
            Some(mc) => mc.access(nand, t, lpn, true),
            None => t,
        };
        if partial && self.lookup(lpn).is_some() {
            t = self.read(nand, t, lpn); // read-modify-write of the rest of the page
        }
        self.invalidate(lpn);
        let die = (self.next_die % self.dies) as usize;
        self.next_die += 1;
        let ppn = self.alloc_page(die, false);
        self.map(lpn, ppn);
        let done = nand.program_page(t, die);
        if self.free[die].len() <= self.gc_low {
            self.gc(nand, done, die);
        }
        done
    }

    pub fn flush(&mut self, nand: &mut Nand, t: u64) -> u64 {
        match self.map_cache.as_mut() {
            Some(mc) => mc.flush(nand, t),
            None => t,
        }
    }

    /// Fraction of physical pages holding valid data (for tests and reports).
    pub fn utilisation(&self) -> f64 {
        let valid: u64 = self.block_valid.iter().map(|&v| v as u64).sum();
        valid as f64 / (self.block_valid.len() as u64 * self.ppb) as f64
    }
}
