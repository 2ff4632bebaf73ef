//! Hybrid log-block FTL in the BAST style (Kim et al., 2002), as in early SSDs such as
//! the MTRON: data blocks are mapped whole; each logical block that receives an update
//! gets one log block, written in page order; when log blocks run out or fill up they
//! are merged back. A log block written sequentially from page 0 is *switched* in
//! (one erase); a sequential prefix is *partially merged*; anything else needs a *full
//! merge* that copies every valid page into a fresh block and erases two. Small random
//! writes spread over many logical blocks therefore cost a full merge each, which is why
//! such drives are so slow at them and why log-structured writing helps them most.

use super::nand::Nand;

const NONE: u32 = u32::MAX;
const NO_PAGE: u16 = u16::MAX;

#[derive(Clone, Debug)]
struct LogSlot {
    lbn: u32,
    block: u32,
    next: u16,
    sequential: bool,
    last_use: u64,
    /// Page offset in the logical block -> page index in the log block.
    map: Vec<u16>,
}

#[derive(Clone, Debug)]
pub(crate) struct BastFtl {
    ppb: u64,
    dies: u64,
    words_per_block: usize,
    data_block: Vec<u32>,
    /// Next programmable page of each data block (pages must be programmed in order).
    data_wp: Vec<u16>,
    /// Which page offsets of each data block hold data.
    data_written: Vec<u64>,
    slot_of: Vec<u32>,
    slots: Vec<LogSlot>,
    free_slots: Vec<u32>,
    free: Vec<Vec<u32>>,
    use_clock: u64,
    pub switch_merges: u64,
    pub partial_merges: u64,
    pub full_merges: u64,
}

impl BastFtl {
    pub fn new(
        nand: &Nand,
        logical_pages: u64,
        pages_per_block: u64,
        log_blocks: u32,
        implicit_fill: bool,
    ) -> BastFtl {
        assert!(
            pages_per_block < NO_PAGE as u64,
            "pages per block too large for BAST"
        );
        let dies = nand.dies as u64;
        let ppb = pages_per_block;
        let lbns = logical_pages.div_ceil(ppb);
        let data_per_die = lbns.div_ceil(dies);
        // Data blocks, log blocks (all of them may belong to logical blocks of one die),
        // merge targets and a little slack on every die.
        let blocks_per_die = data_per_die + log_blocks as u64 + 4;
        let words_per_block = ppb.div_ceil(64) as usize;
        let mut data_block = vec![NONE; lbns as usize];
        let mut data_written = vec![0u64; lbns as usize * words_per_block];
        let mut data_wp = vec![0u16; lbns as usize];
        let mut used_per_die = vec![0u64; dies as usize];
        if implicit_fill {
            for lbn in 0..lbns {
                let die = lbn % dies;
                data_block[lbn as usize] =
                    (die * blocks_per_die + used_per_die[die as usize]) as u32;
                used_per_die[die as usize] += 1;
                let pages = (logical_pages - lbn * ppb).min(ppb);
                for off in 0..pages {
                    data_written[lbn as usize * words_per_block + (off / 64) as usize] |=
                        1 << (off % 64);
                }
                data_wp[lbn as usize] = ppb as u16;
            }
        }
        let free = (0..dies)
            .map(|d| {
                (used_per_die[d as usize]..blocks_per_die)
                    .rev()
                    .map(|b| (d * blocks_per_die + b) as u32)
                    .collect()
            })
            .collect();
        BastFtl {
            ppb,
            dies,
            words_per_block,
            data_block,
            data_wp,
            data_written,
            slot_of: vec![NONE; lbns as usize],
            slots: (0..log_blocks)
                .map(|_| LogSlot {
                    lbn: NONE,
                    block: NONE,
                    next: 0,
                    sequential: true,
                    last_use: 0,
                    map: vec![NO_PAGE; ppb as usize],
                })
                .collect(),
            free_slots: (0..log_blocks).rev().collect(),
            free,
            use_clock: 0,
            switch_merges: 0,
            partial_merges: 0,
            full_merges: 0,
        }
    }

    #[inline]
    fn die_of_lbn(&self, lbn: u64) -> usize {
        (lbn % self.dies) as usize
    }

    #[inline]
    fn written(&self, lbn: u64, off: u64) -> bool {
        self.data_written[lbn as usize * self.words_per_block + (off / 64) as usize] >> (off % 64)
            & 1
            == 1
    }

    fn set_written(&mut self, lbn: u64, off: u64) {
        self.data_written[lbn as usize * self.words_per_block + (off / 64) as usize] |=
            1 << (off % 64);
    }

    fn alloc_block(&mut self, die: usize) -> u32 {
        self.free[die]
            .pop()
            .expect("BAST model: die out of free blocks")
    }

    pub fn is_mapped(&self, lpn: u64) -> bool {
        let (lbn, off) = (lpn / self.ppb, lpn % self.ppb);
        let slot = self.slot_of[lbn as usize];
        (slot != NONE && self.slots[slot as usize].map[off as usize] != NO_PAGE)
            || self.written(lbn, off)
    }

    pub fn read(&mut self, nand: &mut Nand, t: u64, lpn: u64) -> u64 {
        if self.is_mapped(lpn) {
            nand.read_page(t, self.die_of_lbn(lpn / self.ppb))
        } else {
            t
        }
    }

    /// Merge a log block back into its data block; returns when the die is done.
    fn merge(&mut self, nand: &mut Nand, t: u64, slot_idx: u32) -> u64 {
        let slot = self.slots[slot_idx as usize].clone();
        let lbn = slot.lbn as u64;
        let die = self.die_of_lbn(lbn);
        let ppb = self.ppb;
        let old = self.data_block[lbn as usize];
        let done;
        if slot.sequential && slot.next as u64 == ppb {
            self.switch_merges += 1;
            done = nand.die_work(t, die, 0, (old != NONE) as u64);
            self.data_block[lbn as usize] = slot.block;
        } else if slot.sequential {
            // Copy the tail from the data block behind the in-order prefix, then switch.
            self.partial_merges += 1;
            let copies = (slot.next as u64..ppb)
                .filter(|&off| self.written(lbn, off))
                .count() as u64;
            done = nand.die_work(t, die, copies, (old != NONE) as u64);
            self.data_block[lbn as usize] = slot.block;
        } else {
            self.full_merges += 1;
            let copies = (0..ppb)
                .filter(|&off| slot.map[off as usize] != NO_PAGE || self.written(lbn, off))
                .count() as u64;
            let nb = self.alloc_block(die);
            done = nand.die_work(t, die, copies, 1 + (old != NONE) as u64);
            self.free[die].push(slot.block);
            self.data_block[lbn as usize] = nb;
        }
        if old != NONE {
            self.free[die].push(old);
        }
        for off in 0..ppb {
            if slot.map[off as usize] != NO_PAGE {
                self.set_written(lbn, off);
            }
        }
        self.data_wp[lbn as usize] = ppb as u16;
        let s = &mut self.slots[slot_idx as usize];
        s.lbn = NONE;
        s.block = NONE;
        s.next = 0;
        s.sequential = true;
        s.map.fill(NO_PAGE);
        self.slot_of[lbn as usize] = NONE;
        self.free_slots.push(slot_idx);
        done
    }

    pub fn write(&mut self, nand: &mut Nand, t: u64, lpn: u64, partial: bool) -> u64 {
        let (lbn, off) = (lpn / self.ppb, lpn % self.ppb);
        let die = self.die_of_lbn(lbn);
        let mut t = t;
        if partial && self.is_mapped(lpn) {
            t = nand.read_page(t, die);
        }
        self.use_clock += 1;
        // First write of a page past the data block's write pointer goes in place.
        let slot_idx = self.slot_of[lbn as usize];
        if slot_idx == NONE && off >= self.data_wp[lbn as usize] as u64 {
            if self.data_block[lbn as usize] == NONE {
                self.data_block[lbn as usize] = self.alloc_block(die);
            }
            self.data_wp[lbn as usize] = off as u16 + 1;
            self.set_written(lbn, off);
            return nand.program_page(t, die);
        }
        let slot_idx = if slot_idx != NONE {
            slot_idx
        } else {
            let s = match self.free_slots.pop() {
                Some(s) => s,
                None => {
                    let victim = (0..self.slots.len() as u32)
                        .min_by_key(|&i| self.slots[i as usize].last_use)
                        .unwrap_or(0);
                    t = self.merge(nand, t, victim);
                    self.free_slots.pop().unwrap_or(victim)
                }
            };
            let block = self.alloc_block(die);
            let slot = &mut self.slots[s as usize];
            slot.lbn = lbn as u32;
            slot.block = block;
            self.slot_of[lbn as usize] = s;
            s
        };
        let slot = &mut self.slots[slot_idx as usize];
        slot.last_use = self.use_clock;
        slot.sequential &= slot.next as u64 == off;
        slot.map[off as usize] = slot.next;
        slot.next += 1;
        let full = slot.next as u64 == self.ppb;
        let done = nand.program_page(t, die);
        if full {
            return self.merge(nand, done, slot_idx);
        }
        done
    }
}
