//! Per-pool chunk allocator: a bitmap with first-fit search from a hint, contiguous runs
//! for journals and checkpoints, and a reserve that only metadata may use (so a full
//! pool can still write checkpoints and shut down cleanly).

#[derive(Clone, Debug)]
pub struct ChunkAllocator {
    used: Vec<u64>,
    chunks: u64,
    free: u64,
    reserve: u64,
}

impl ChunkAllocator {
    pub fn new(chunks: u64) -> ChunkAllocator {
        ChunkAllocator {
            used: vec![0; chunks.div_ceil(64) as usize],
            chunks,
            free: chunks,
            reserve: 0,
        }
    }

    /// Append `n` free chunks (a run borrowed from another shard, `loan.rs`).
    pub fn grow(&mut self, n: u64) {
        self.chunks += n;
        self.used.resize(self.chunks.div_ceil(64) as usize, 0);
        self.free += n;
    }

    /// Drop the last `n` chunks, all in use (a borrowed run given back with its guard,
    /// `give_back.rs`): they leave the address space.
    pub fn shrink(&mut self, n: u64) {
        assert!(n <= self.chunks, "shrink by {n} of {} chunks", self.chunks);
        for c in self.chunks - n..self.chunks {
            assert!(self.is_used(c), "shrink over free chunk {c}");
            self.used[(c / 64) as usize] &= !(1 << (c % 64));
        }
        self.chunks -= n;
        self.used.truncate(self.chunks.div_ceil(64) as usize);
        self.reserve = self.reserve.min(self.chunks);
    }

    /// The highest run of `n` free chunks below chunk `limit` (its first chunk), without
    /// taking it: a shard lends from the top of its slice, away from where first fit
    /// from low hints puts its own data.
    pub fn free_run_below(&self, n: u64, limit: u64) -> Option<u64> {
        let limit = limit.min(self.chunks);
        if n == 0 || n > limit {
            return None;
        }
        let mut end = limit;
        while end >= n {
            match (end - n..end).rev().find(|&c| self.is_used(c)) {
                None => return Some(end - n),
                Some(busy) => end = busy,
            }
        }
        None
    }

    pub fn set_reserve(&mut self, chunks: u64) {
        self.reserve = chunks.min(self.chunks);
    }

    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    pub fn free_chunks(&self) -> u64 {
        self.free
    }

    /// Chunks data may still take (free minus the metadata reserve).
    pub fn available_chunks(&self) -> u64 {
        self.free.saturating_sub(self.reserve)
    }

    #[inline]
    pub fn is_used(&self, c: u64) -> bool {
        self.used[(c / 64) as usize] >> (c % 64) & 1 == 1
    }

    /// Mark a chunk used (recovery, reservations). Returns false if it already was.
    pub fn mark_used(&mut self, c: u64) -> bool {
        assert!(
            c < self.chunks,
            "chunk {c} beyond pool of {} chunks",
            self.chunks
        );
        if self.is_used(c) {
            return false;
        }
        self.used[(c / 64) as usize] |= 1 << (c % 64);
        self.free -= 1;
        true
    }

    pub fn release(&mut self, c: u64) {
        assert!(self.is_used(c), "double free of chunk {c}");
        self.used[(c / 64) as usize] &= !(1 << (c % 64));
        self.free += 1;
    }

    fn find_free_from(&self, start: u64) -> Option<u64> {
        let words = self.used.len() as u64;
        let mut w = start / 64;
        let mut mask = !0u64 << (start % 64);
        for _ in 0..=words {
            let avail = !self.used[w as usize] & mask;
            if avail != 0 {
                let c = w * 64 + avail.trailing_zeros() as u64;
                if c < self.chunks {
                    return Some(c);
                }
            }
            mask = !0;
            w = (w + 1) % words;
        }
        None
    }

    /// Allocate one chunk, the hint if free, else the next free one after it.
    pub fn allocate(&mut self, hint: u64, metadata: bool) -> Option<u64> {
        let limit = if metadata { 0 } else { self.reserve };
        if self.free <= limit {
            return None;
        }
        let c = self.find_free_from(hint % self.chunks)?;
        self.mark_used(c);
        Some(c)
    }

    /// Whether chunks `[first, first + n)` are all free.
    fn run_free(&self, first: u64, n: u64) -> bool {
        (first..first + n).all(|c| !self.is_used(c))
    }

    /// Groups of `n` chunks, aligned to `n`, that are entirely free and that data may
    /// take (the metadata reserve stays out of reach).
    pub fn free_aligned_groups(&self, n: u64) -> u64 {
        let room = self.available_chunks() / n;
        if room == 0 {
            return 0;
        }
        ((0..self.chunks / n)
            .filter(|g| self.run_free(g * n, n))
            .count() as u64)
            .min(room)
    }

    /// Allocate an aligned group of `n` chunks (first fit from group `hint`). Returns the
    /// group number.
    pub fn allocate_aligned(&mut self, n: u64, hint: u64) -> Option<u64> {
        let groups = self.chunks / n;
        if groups == 0 || self.free < n + self.reserve {
            return None;
        }
        let g = (0..groups)
            .map(|i| (hint + i) % groups)
            .find(|g| self.run_free(g * n, n))?;
        for c in g * n..g * n + n {
            self.mark_used(c);
        }
        Some(g)
    }

    /// The longest run of free chunks (for a refusal that names it).
    pub fn largest_free_run(&self) -> u64 {
        let (mut best, mut run) = (0, 0);
        for c in 0..self.chunks {
            if self.is_used(c) {
                run = 0;
            } else {
                run += 1;
                best = best.max(run);
            }
        }
        best
    }

    /// Allocate `n` contiguous chunks (first fit from `hint`).
    pub fn allocate_run(&mut self, n: u64, hint: u64, metadata: bool) -> Option<u64> {
        let limit = if metadata { 0 } else { self.reserve };
        if n == 0 || self.free < n + limit || n > self.chunks {
            return None;
        }
        let mut start = hint % self.chunks;
        let mut scanned = 0;
        while scanned <= self.chunks {
            let first = self.find_free_from(start)?;
            if first + n > self.chunks {
                scanned += self.chunks - start;
                start = 0;
                continue;
            }
            match (first..first + n).find(|&c| self.is_used(c)) {
                None => {
                    for c in first..first + n {
                        self.mark_used(c);
                    }
                    return Some(first);
                }
                Some(busy) => {
                    scanned += busy + 1 - start.min(busy + 1);
                    start = busy + 1;
                    if start >= self.chunks {
                        start = 0;
                    }
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_near_hint_and_wraps() {
        let mut a = ChunkAllocator::new(130);
        assert_eq!(a.allocate(128, false), Some(128));
        assert_eq!(a.allocate(128, false), Some(129));
        assert_eq!(a.allocate(128, false), Some(0));
        a.release(129);
        assert_eq!(a.allocate(129, false), Some(129));
        assert_eq!(a.free_chunks(), 127);
    }

    #[test]
    fn grows_and_finds_the_highest_free_run_below_a_limit() {
        let mut a = ChunkAllocator::new(10);
        a.mark_used(8);
        a.mark_used(4);
        assert_eq!(a.free_run_below(3, 10), Some(5));
        assert_eq!(a.free_run_below(4, 10), Some(0));
        assert_eq!(a.free_run_below(5, 10), None);
        assert_eq!(a.free_run_below(2, 5), Some(2));
        a.grow(70);
        assert_eq!((a.chunks(), a.free_chunks()), (80, 78));
        // The limit keeps the search out of the grown part.
        assert_eq!(a.free_run_below(5, 10), None);
        assert_eq!(a.free_run_below(70, 80), Some(10));
        assert!(a.mark_used(79));
    }

    /// A run given back leaves the end of the address space; a later one grows there
    /// afresh (free); shrinking over a free chunk is a bug, not a silent loss.
    #[test]
    fn shrinks_by_a_used_tail_and_grows_again() {
        let mut a = ChunkAllocator::new(60);
        a.grow(10);
        for c in 60..70 {
            a.mark_used(c);
        }
        let free = a.free_chunks();
        a.shrink(10);
        assert_eq!((a.chunks(), a.free_chunks()), (60, free));
        a.grow(6);
        assert_eq!((a.chunks(), a.free_chunks()), (66, free + 6));
        assert!((60..66).all(|c| !a.is_used(c)));
        let r = std::panic::catch_unwind(move || a.shrink(2));
        assert!(r.is_err(), "shrank over free chunks");
    }

    #[test]
    fn aligned_groups_skip_partly_used_ones() {
        let mut a = ChunkAllocator::new(17);
        a.mark_used(5);
        assert_eq!(a.free_aligned_groups(4), 3);
        assert_eq!(a.allocate_aligned(4, 1), Some(2));
        assert_eq!(a.allocate_aligned(4, 1), Some(3));
        assert_eq!(a.allocate_aligned(4, 1), Some(0));
        assert_eq!(a.allocate_aligned(4, 1), None);
        assert_eq!(a.free_chunks(), 17 - 13);
    }

    #[test]
    fn runs_skip_used_chunks_and_reserve_is_kept_for_metadata() {
        let mut a = ChunkAllocator::new(100);
        a.mark_used(5);
        assert_eq!(a.allocate_run(10, 0, false), Some(6));
        assert_eq!(a.allocate_run(90, 0, false), None);
        assert_eq!(a.largest_free_run(), 84);
        a.set_reserve(10);
        while a.allocate(0, false).is_some() {}
        assert_eq!(a.free_chunks(), 10);
        assert!(a.allocate(0, true).is_some());
        assert_eq!(a.free_chunks(), 9);
    }
}
