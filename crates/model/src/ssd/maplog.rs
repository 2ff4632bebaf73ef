//! What a FLUSH must persist of the mapping table when the whole table lives in DRAM.
//!
//! Every program of a logical page changes its translation page in DRAM, which is then
//! dirty until written back. A conventional drive writes every dirty translation page on
//! FLUSH (`flush = "all"`). A tag-aware drive (`flush = "tagged"`, seed 001's tag-based
//! map table logging) also appends (LPN, new PPN) to the log area of the page's tag, one
//! flash page per tag, and a tagged FLUSH writes only that log page. When any log area
//! fills, the dirty translation pages are written and every log area restarts.
//!
//! Recovery (documented in docs/MODELS.md): the map table on flash plus each tag's last
//! persisted log page, replayed entry by entry, gives the mapping of every page whose
//! FLUSH completed. A log page is one flash page, so it is programmed atomically.

use std::collections::BTreeMap;

#[derive(Clone, Copy, Debug, Default)]
struct LogArea {
    /// Entries recorded since the log areas last restarted.
    recorded: u32,
    /// Entries of them already on flash.
    persisted: u32,
}

#[derive(Clone, Debug)]
pub(crate) struct MapPersist {
    entries_per_tpage: u64,
    dirty: Vec<bool>,
    dirty_list: Vec<u32>,
    tagged: bool,
    log_capacity: u32,
    logs: BTreeMap<u32, LogArea>,
}

impl MapPersist {
    /// `tagged`: keep per-tag log areas of `page_bytes` each (8-byte entries).
    pub fn new(logical_pages: u64, page_bytes: u64, tagged: bool) -> MapPersist {
        let ept = (page_bytes / 4).max(1);
        MapPersist {
            entries_per_tpage: ept,
            dirty: vec![false; logical_pages.div_ceil(ept) as usize],
            dirty_list: Vec::new(),
            tagged,
            log_capacity: (page_bytes / 8).max(1) as u32,
            logs: BTreeMap::new(),
        }
    }

    /// Translation page of `lpn`.
    pub fn tpage(&self, lpn: u64) -> u32 {
        (lpn / self.entries_per_tpage) as u32
    }

    /// `lpn` was programmed for `tag`. Returns true when that tag's log area is now full,
    /// so the dirty translation pages must be written (see [`Self::take_dirty`]).
    pub fn record(&mut self, lpn: u64, tag: u32) -> bool {
        let tp = self.tpage(lpn);
        if !std::mem::replace(&mut self.dirty[tp as usize], true) {
            self.dirty_list.push(tp);
        }
        if !self.tagged {
            return false;
        }
        let log = self.logs.entry(tag).or_default();
        log.recorded += 1;
        log.recorded >= self.log_capacity
    }

    /// Every dirty translation page, now clean; every log area restarts (the map on
    /// flash holds what they said).
    pub fn take_dirty(&mut self) -> Vec<u32> {
        for &tp in &self.dirty_list {
            self.dirty[tp as usize] = false;
        }
        self.logs.clear();
        std::mem::take(&mut self.dirty_list)
    }

    /// Mark `lpn`'s translation page clean if it was dirty (it is about to be written on
    /// its own); returns it.
    pub fn clean_page_of(&mut self, lpn: u64) -> Option<u32> {
        let tp = self.tpage(lpn);
        if !std::mem::replace(&mut self.dirty[tp as usize], false) {
            return None;
        }
        if let Some(i) = self.dirty_list.iter().position(|&d| d == tp) {
            self.dirty_list.swap_remove(i);
        }
        Some(tp)
    }

    /// Whether `tag`'s log area holds entries not yet on flash; marks them persisted (the
    /// caller writes the log page).
    pub fn take_log(&mut self, tag: u32) -> bool {
        match self.logs.get_mut(&tag) {
            Some(l) if l.recorded > l.persisted => {
                l.persisted = l.recorded;
                true
            }
            _ => false,
        }
    }

    #[cfg(test)]
    pub fn dirty_pages(&self) -> usize {
        self.dirty_list.len()
    }

    pub fn tagged(&self) -> bool {
        self.tagged
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_log_area_asks_for_the_map_and_restarts_every_log() {
        // 8 KiB pages: 2048 entries per translation page, 1024 per log area.
        let mut m = MapPersist::new(1 << 22, 8192, true);
        for i in 0..1023u64 {
            assert!(!m.record(i * 2048, 1), "entry {i} should fit");
        }
        assert!(!m.record(7, 2));
        assert!(
            m.take_log(2) && !m.take_log(2),
            "a log is written once per change"
        );
        assert!(m.record(1023 * 2048, 1), "the 1024th entry fills the area");
        assert_eq!(m.dirty_pages(), 1024);
        let pages = m.take_dirty();
        assert_eq!(pages.len(), 1024);
        assert_eq!(m.dirty_pages(), 0);
        assert!(!m.take_log(1), "the logs restarted with the map write-back");
        assert!(!m.record(0, 1));
        assert_eq!(m.clean_page_of(5), Some(0));
        assert_eq!(m.dirty_pages(), 0);
    }
}
