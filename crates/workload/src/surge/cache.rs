//! A host page cache: 4 KiB pages of the disk, least recently used evicted first. The
//! map is only looked up, never iterated, so its order cannot reach the output.

use std::collections::{BTreeMap, HashMap};

pub const PAGE_BYTES: u64 = 4096;

#[derive(Clone, Debug)]
pub struct PageCache {
    capacity_pages: usize,
    stamp_of: HashMap<u64, u64>,
    by_stamp: BTreeMap<u64, u64>,
    clock: u64,
    pub hits: u64,
    pub misses: u64,
}

impl PageCache {
    pub fn new(capacity_bytes: u64) -> PageCache {
        PageCache {
            capacity_pages: (capacity_bytes / PAGE_BYTES).max(1) as usize,
            stamp_of: HashMap::new(),
            by_stamp: BTreeMap::new(),
            clock: 0,
            hits: 0,
            misses: 0,
        }
    }

    /// Whether page `page` is cached; a hit makes it the most recently used.
    pub fn touch(&mut self, page: u64) -> bool {
        match self.stamp_of.get_mut(&page) {
            Some(s) => {
                self.by_stamp.remove(s);
                self.clock += 1;
                *s = self.clock;
                self.by_stamp.insert(self.clock, page);
                true
            }
            None => false,
        }
    }

    /// Cache `page` (read from disk), evicting the least recently used page if full.
    pub fn insert(&mut self, page: u64) {
        if self.touch(page) {
            return;
        }
        if self.stamp_of.len() >= self.capacity_pages
            && let Some((_, old)) = self.by_stamp.pop_first()
        {
            self.stamp_of.remove(&old);
        }
        self.clock += 1;
        self.stamp_of.insert(page, self.clock);
        self.by_stamp.insert(self.clock, page);
    }

    pub fn len_pages(&self) -> usize {
        self.stamp_of.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used_page() {
        let mut c = PageCache::new(3 * PAGE_BYTES);
        for p in [1, 2, 3] {
            c.insert(p);
        }
        assert!(c.touch(1)); // 2 is now the oldest
        c.insert(4);
        assert_eq!(c.len_pages(), 3);
        assert!(!c.touch(2));
        assert!(c.touch(1) && c.touch(3) && c.touch(4));
    }
}
