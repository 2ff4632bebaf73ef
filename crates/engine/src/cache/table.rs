//! The cache's own state (`CacheTable`): for each cached chunk of a volume, its slow slot
//! and dirty parts, with a CLOCK hand for eviction and a cursor for cleaning. It names no
//! `Engine`: the engine's glue (promotion, eviction, writeback) is `cache/mod.rs`.

use crate::chunkmap::ChunkLoc;
use crate::types::PoolId;

/// Promotion candidates kept per volume (as for `hot`).
pub(super) const MAX_CANDIDATES: usize = 4096;
/// smq, approximated: a chunk is promoted once its decayed access count reaches this,
/// i.e. on the second recent access. smq keeps no per-block hit count; it promotes
/// from a "hotspot" queue of coarse regions whose level rises with hits
/// (Documentation/admin-guide/device-mapper/cache-policies.rst; dm-cache-policy-smq.c).
pub const SMQ_PROMOTE_HITS: u32 = 2;

/// A slow slot in journal records and checkpoints: 0 is a thick volume's home slot,
/// else a `ChunkLoc::At` encoding.
pub fn encode_slot(loc: ChunkLoc) -> u64 {
    match loc {
        ChunkLoc::At(..) => loc.encode(),
        _ => 0,
    }
}

pub fn decode_slot(raw: u64) -> ChunkLoc {
    match raw {
        0 => ChunkLoc::Home,
        r => ChunkLoc::decode(r),
    }
}

/// Bytes a writeback of dirty parts `parts` (a bit per sixty-fourth) of a `chunk_bytes`
/// chunk copies: the same parts `start_cache_clean` copies.
pub(super) fn dirty_bytes(parts: u64, chunk_bytes: u64) -> u64 {
    let part = (chunk_bytes / 64).max(1);
    let n = 64u64.min(chunk_bytes / part);
    let mask = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
    (parts & mask).count_ones() as u64 * part
}

/// One cached chunk in 12 bytes: logical chunk (35 bits: a volume has at most 2^34
/// chunks, 2^50 bytes in chunks of at least 64 KiB), slow slot's physical chunk on the
/// home pool (48 bits, the map's limit; all ones: a thick volume's home slot), dirty and
/// referenced bits, and the dirty *span* of a kept home (`tier_home.rs`): the first and
/// last thirty-second of the chunk written since it was clean (5 bits each; 0 and 31,
/// the whole chunk, otherwise). The span costs no memory: a `hot` volume's promoted
/// chunks cannot afford the `cache` volumes' 24-byte map of sixty-fourths (with the chunk
/// map's 8 bytes a chunk, the monitor's 8 and this entry's 12, issue 17's 32 would not
/// hold), and a demotion copies one extent anyway (one write to the disk, not one per run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Entry([u32; 3]);

const CHUNK_BITS: u32 = 35;
const PCHUNK_BITS: u32 = 48;
const HOME_SLOT: u64 = (1 << PCHUNK_BITS) - 1;
const DIRTY_BIT: u32 = CHUNK_BITS + PCHUNK_BITS;
const REF_BIT: u32 = DIRTY_BIT + 1;
/// The dirty span's first and last thirty-second.
const SPAN_LO: u32 = REF_BIT + 1;
const SPAN_HI: u32 = SPAN_LO + 5;
const WHOLE: (u32, u32) = (0, 31);
const _: () = assert!(SPAN_HI + 5 <= 96, "an entry is 12 bytes");

/// The thirty-seconds spanned by sixty-fourths `parts` (not 0): first and last.
fn span_of(parts: u64) -> (u32, u32) {
    (parts.trailing_zeros() / 2, (63 - parts.leading_zeros()) / 2)
}

/// Span `(lo, hi)` of thirty-seconds as sixty-fourths.
fn span_parts((lo, hi): (u32, u32)) -> u64 {
    if (lo, hi) == WHOLE {
        return u64::MAX;
    }
    ((1u64 << (2 * (hi - lo + 1))) - 1) << (2 * lo)
}

impl Entry {
    fn new(chunk: u64, pchunk: u64, dirty: bool) -> Entry {
        debug_assert!(chunk < 1 << CHUNK_BITS && pchunk <= HOME_SLOT);
        let v = chunk as u128 | (pchunk as u128) << CHUNK_BITS | (dirty as u128) << DIRTY_BIT;
        let mut e = Entry::from_u128(v);
        e.set_span(WHOLE);
        e
    }
    fn from_u128(v: u128) -> Entry {
        Entry([v as u32, (v >> 32) as u32, (v >> 64) as u32])
    }
    fn get(self) -> u128 {
        self.0[0] as u128 | (self.0[1] as u128) << 32 | (self.0[2] as u128) << 64
    }
    fn chunk(self) -> u64 {
        (self.get() & ((1 << CHUNK_BITS) - 1)) as u64
    }
    fn pchunk(self) -> u64 {
        ((self.get() >> CHUNK_BITS) as u64) & HOME_SLOT
    }
    fn flag(self, bit: u32) -> bool {
        self.get() >> bit & 1 == 1
    }
    fn set_flag(&mut self, bit: u32, on: bool) {
        let v = self.get() & !(1 << bit) | (on as u128) << bit;
        *self = Entry::from_u128(v);
    }
    fn span(self) -> (u32, u32) {
        let v = self.get();
        ((v >> SPAN_LO) as u32 & 31, (v >> SPAN_HI) as u32 & 31)
    }
    fn set_span(&mut self, (lo, hi): (u32, u32)) {
        let v =
            self.get() & !(0x3ff << SPAN_LO) | (lo as u128) << SPAN_LO | (hi as u128) << SPAN_HI;
        *self = Entry::from_u128(v);
    }
    /// Widen the dirty span to cover sixty-fourths `parts`.
    fn widen_span(&mut self, parts: u64) {
        let ((lo, hi), (a, b)) = (self.span(), span_of(parts));
        self.set_span((lo.min(a), hi.max(b)));
    }
}

/// The side table of cached chunks, sorted by logical chunk; the slow slots are on the
/// volume's home pool.
#[derive(Clone, Debug)]
pub struct CacheTable {
    home_pool: PoolId,
    entries: Vec<Entry>,
    /// CLOCK hand: where the eviction sweep resumes.
    hand: usize,
    /// Where the writeback scan resumes (chunk order, like bcache's writeback).
    clean_at: usize,
    dirty: u64,
    /// Which sixty-fourths of a dirty chunk were written since it was last clean (bit
    /// per part), so a writeback copies only those, as bcache writes back only dirty
    /// extents. A dirty chunk without an entry here is dirty over its entry's span: the
    /// whole chunk (after a mount), or a kept home's written span.
    dirty_parts: std::collections::BTreeMap<u64, u64>,
    /// Dirty evictions in flight (their writebacks): the room they make is coming.
    pub evicting: u32,
    /// Writebacks in flight, evictions' included.
    pub cleaning: u32,
    /// Mount only: chunks a replayed record cached with a slow slot off the home pool.
    /// Such a record is older than a migration that moved the home (which drained the
    /// cache first, `jobs/migrate/cache_drain.rs`), so a later record must end its
    /// caching; one left at the end of replay fails the mount. Empty once mounted.
    pub foreign: std::collections::BTreeSet<u64>,
}

impl CacheTable {
    pub fn new(home_pool: PoolId) -> CacheTable {
        CacheTable {
            home_pool,
            entries: Vec::new(),
            hand: 0,
            clean_at: 0,
            dirty: 0,
            dirty_parts: Default::default(),
            evicting: 0,
            cleaning: 0,
            foreign: Default::default(),
        }
    }
    /// The volume's home pool moved (a migration's pivot): slow slots are on `pool` from
    /// now on. Only an empty table moves (the job drained it).
    pub fn rehome(&mut self, pool: PoolId) {
        debug_assert!(self.entries.is_empty(), "a cache moves home only empty");
        if self.entries.is_empty() {
            self.home_pool = pool;
        }
    }
    fn find(&self, c: u64) -> Result<usize, usize> {
        self.entries.binary_search_by_key(&c, |e| e.chunk())
    }
    fn slot_of(&self, e: Entry) -> ChunkLoc {
        match e.pchunk() {
            HOME_SLOT => ChunkLoc::Home,
            pc => ChunkLoc::At(self.home_pool, pc),
        }
    }
    pub fn len(&self) -> u64 {
        self.entries.len() as u64
    }
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    pub fn dirty_count(&self) -> u64 {
        self.dirty
    }
    /// The slow slot of a cached chunk.
    pub fn slow_slot(&self, c: u64) -> Option<ChunkLoc> {
        self.find(c).ok().map(|i| self.slot_of(self.entries[i]))
    }
    pub fn is_dirty(&self, c: u64) -> bool {
        self.find(c).is_ok_and(|i| self.entries[i].flag(DIRTY_BIT))
    }
    /// Whether `slow` can be a slow slot here: the home slot, or a chunk of the home pool.
    pub fn fits(&self, c: u64, slow: ChunkLoc) -> bool {
        c < 1 << CHUNK_BITS
            && match slow {
                ChunkLoc::Home => true,
                ChunkLoc::At(p, pc) => p == self.home_pool && pc < HOME_SLOT,
                ChunkLoc::Unmapped => false,
            }
    }
    /// Cache chunk `c` with slow slot `slow` (replacing any entry); `slow` must
    /// [`fit`](Self::fits).
    pub fn insert(&mut self, c: u64, slow: ChunkLoc, dirty: bool) {
        debug_assert!(self.fits(c, slow));
        let pc = match slow {
            ChunkLoc::At(_, pc) => pc,
            _ => HOME_SLOT,
        };
        let e = Entry::new(c, pc, dirty);
        self.dirty_parts.remove(&c);
        self.foreign.remove(&c);
        match self.find(c) {
            Ok(i) => {
                self.dirty -= self.entries[i].flag(DIRTY_BIT) as u64;
                self.entries[i] = e;
            }
            Err(i) => {
                // Grow by an eighth, not double, to stay near 12 bytes per entry.
                if self.entries.len() == self.entries.capacity() {
                    self.entries.reserve_exact(self.entries.len() / 8 + 8);
                }
                self.entries.insert(i, e);
                if i < self.hand {
                    self.hand += 1;
                }
                if i < self.clean_at {
                    self.clean_at += 1;
                }
            }
        }
        self.dirty += dirty as u64;
    }
    /// Stop caching chunk `c`; returns its slow slot.
    pub fn remove(&mut self, c: u64) -> Option<ChunkLoc> {
        self.foreign.remove(&c);
        let i = self.find(c).ok()?;
        let e = self.entries.remove(i);
        self.dirty -= e.flag(DIRTY_BIT) as u64;
        self.dirty_parts.remove(&c);
        if i < self.hand {
            self.hand -= 1;
        }
        if i < self.clean_at {
            self.clean_at -= 1;
        }
        Some(self.slot_of(e))
    }
    /// An access: the CLOCK sweep passes over the chunk once before evicting it.
    pub fn touch(&mut self, c: u64) {
        if let Ok(i) = self.find(c) {
            self.entries[i].set_flag(REF_BIT, true);
        }
    }
    /// Chunk `c` is dirty throughout (`true`) or clean.
    pub fn set_dirty(&mut self, c: u64, dirty: bool) {
        self.dirty_parts.remove(&c);
        if let Ok(i) = self.find(c) {
            self.entries[i].set_span(WHOLE);
            let was = self.entries[i].flag(DIRTY_BIT);
            if was != dirty {
                self.entries[i].set_flag(DIRTY_BIT, dirty);
                if dirty {
                    self.dirty += 1;
                } else {
                    self.dirty -= 1;
                }
            }
        }
    }
    /// Parts `parts` (a bit per sixty-fourth) of cached chunk `c` were written.
    pub fn mark_dirty(&mut self, c: u64, parts: u64) {
        let Ok(i) = self.find(c) else { return };
        if !self.entries[i].flag(DIRTY_BIT) {
            self.entries[i].set_flag(DIRTY_BIT, true);
            self.dirty += 1;
            self.dirty_parts.insert(c, parts);
        } else if let Some(p) = self.dirty_parts.get_mut(&c) {
            *p |= parts;
        } else {
            self.entries[i].widen_span(parts);
        }
    }
    /// As [`mark_dirty`](Self::mark_dirty), for a kept home (`tier_home.rs`): only the span
    /// from the first to the last thirty-second written is kept, inside the entry.
    pub fn mark_dirty_span(&mut self, c: u64, parts: u64) {
        let Ok(i) = self.find(c) else { return };
        if parts == 0 {
            return;
        }
        if !self.entries[i].flag(DIRTY_BIT) {
            self.entries[i].set_flag(DIRTY_BIT, true);
            self.dirty += 1;
            self.entries[i].set_span(span_of(parts));
        } else if let Some(p) = self.dirty_parts.get_mut(&c) {
            *p |= parts;
        } else {
            self.entries[i].widen_span(parts);
        }
    }
    /// The dirty parts of chunk `c`: all when dirty throughout, none when clean.
    pub fn dirty_parts(&self, c: u64) -> u64 {
        let Ok(i) = self.find(c) else { return 0 };
        let e = self.entries[i];
        if !e.flag(DIRTY_BIT) {
            return 0;
        }
        (self.dirty_parts.get(&c).copied()).unwrap_or_else(|| span_parts(e.span()))
    }
    /// Bytes a writeback of chunk `c` copies now (its dirty parts).
    pub fn dirty_bytes_of(&self, c: u64, chunk_bytes: u64) -> u64 {
        dirty_bytes(self.dirty_parts(c), chunk_bytes)
    }
    /// Dirty bytes of the whole cache (bcache's measure: dirty data, not dirty chunks).
    pub fn dirty_bytes(&self, chunk_bytes: u64) -> u64 {
        let partial: u64 = self
            .dirty_parts
            .values()
            .map(|&p| dirty_bytes(p, chunk_bytes))
            .sum();
        // Dirty over a span (the whole chunk unless a kept home's).
        let spans: u64 = (self.entries.iter())
            .filter(|e| e.flag(DIRTY_BIT) && !self.dirty_parts.contains_key(&e.chunk()))
            .map(|e| dirty_bytes(span_parts(e.span()), chunk_bytes))
            .sum();
        partial + spans
    }
    /// (chunk, slow slot, dirty) in chunk order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, ChunkLoc, bool)> + '_ {
        self.entries
            .iter()
            .map(|&e| (e.chunk(), self.slot_of(e), e.flag(DIRTY_BIT)))
    }
    /// CLOCK (second chance), the recency approximation both policies evict by: sweep
    /// from the hand, clearing reference bits, until an unreferenced chunk not `busy`.
    pub fn victim(&mut self, busy: impl Fn(u64) -> bool) -> Option<u64> {
        let n = self.entries.len();
        for _ in 0..2 * n {
            if self.hand >= n {
                self.hand = 0;
            }
            let e = self.entries[self.hand];
            self.hand += 1;
            if e.flag(REF_BIT) {
                self.entries[self.hand - 1].set_flag(REF_BIT, false);
            } else if !busy(e.chunk()) {
                return Some(e.chunk());
            }
        }
        None
    }
    /// The next dirty chunk not `busy`, in chunk order from where the last scan ended.
    pub fn next_dirty(&mut self, busy: impl Fn(u64) -> bool) -> Option<u64> {
        let n = self.entries.len();
        for _ in 0..n {
            if self.clean_at >= n {
                self.clean_at = 0;
            }
            let e = self.entries[self.clean_at];
            self.clean_at += 1;
            if e.flag(DIRTY_BIT) && !busy(e.chunk()) {
                return Some(e.chunk());
            }
        }
        None
    }
    /// Bytes of RAM the table uses.
    pub fn memory_bytes(&self) -> u64 {
        // The dirty parts: a B-tree of 16-byte entries, counted at 24 with its nodes.
        (self.entries.capacity() * std::mem::size_of::<Entry>()) as u64
            + self.dirty_parts.len() as u64 * 24
    }
    /// Entries for a checkpoint: (chunk, [`encode_slot`] of the slow slot).
    pub fn raw(&self) -> impl ExactSizeIterator<Item = (u64, u64)> + '_ {
        self.entries
            .iter()
            .map(|&e| (e.chunk(), encode_slot(self.slot_of(e))))
    }
}

/// What the cache holds of one chunk, for tests and reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachedChunk {
    /// The slow slot kept while the chunk is cached (pool, physical chunk).
    pub slow: (PoolId, u64),
    pub dirty: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_keeps_order_flags_and_counts() {
        let mut t = CacheTable::new(PoolId(1));
        t.insert(5, ChunkLoc::At(PoolId(1), 9), false);
        t.insert(2, ChunkLoc::Home, true);
        t.insert(7, ChunkLoc::At(PoolId(1), 3), false);
        assert!(!t.fits(8, ChunkLoc::At(PoolId(0), 3)), "not the home pool");
        assert_eq!(t.dirty_count(), 1);
        assert_eq!(t.slow_slot(2), Some(ChunkLoc::Home));
        assert_eq!(t.slow_slot(5), Some(ChunkLoc::At(PoolId(1), 9)));
        t.set_dirty(5, true);
        assert!(t.is_dirty(5));
        assert_eq!(t.dirty_count(), 2);
        // CLOCK: referenced chunks get a second chance.
        t.touch(2);
        assert_eq!(t.victim(|_| false), Some(5));
        assert_eq!(t.victim(|_| false), Some(7));
        assert_eq!(
            t.victim(|_| false),
            Some(2),
            "its bit was cleared by the sweep"
        );
        assert_eq!(t.next_dirty(|_| false), Some(2));
        assert_eq!(t.next_dirty(|_| false), Some(5));
        // Dirty parts: a clean chunk written in parts 1 and 3 is dirty there only; one
        // dirty throughout (as at mount) stays so.
        t.mark_dirty(7, 0b10);
        t.mark_dirty(7, 0b1000);
        assert_eq!(t.dirty_parts(7), 0b1010);
        assert_eq!(t.dirty_parts(2), u64::MAX);
        t.mark_dirty(2, 1);
        assert_eq!(t.dirty_parts(2), u64::MAX);
        t.set_dirty(7, false);
        assert_eq!(t.dirty_parts(7), 0);
        assert_eq!(t.remove(2), Some(ChunkLoc::Home));
        assert_eq!(t.dirty_count(), 1);
        assert_eq!(t.len(), 2);
        assert_eq!(t.memory_bytes() / t.entries.capacity() as u64, 12);
        let big = (1u64 << 35) - 1;
        t.insert(big, ChunkLoc::At(PoolId(1), (1 << 48) - 2), true);
        assert_eq!(
            t.slow_slot(big),
            Some(ChunkLoc::At(PoolId(1), (1 << 48) - 2))
        );
        assert!(t.is_dirty(big));
    }

    #[test]
    fn a_kept_home_is_dirty_over_the_span_written_and_no_bigger_for_it() {
        let mut t = CacheTable::new(PoolId(1));
        t.insert(4, ChunkLoc::At(PoolId(1), 9), false);
        t.insert(6, ChunkLoc::At(PoolId(1), 8), true);
        // Sixty-fourths 5 and 20: thirty-seconds 2 to 10, i.e. sixty-fourths 4 to 21.
        t.mark_dirty_span(4, 1 << 5);
        t.mark_dirty_span(4, 1 << 20);
        assert_eq!(t.dirty_parts(4), ((1u64 << 18) - 1) << 4);
        assert_eq!(t.dirty_bytes_of(4, 1 << 20), 18 << 14);
        assert_eq!(t.dirty_count(), 2);
        // The last sixty-fourth: thirty-second 31, the span reaches the end.
        t.mark_dirty_span(4, 1 << 63);
        assert_eq!(t.dirty_parts(4), u64::MAX << 4);
        // Dirty throughout (as at mount) stays so; clean again, nothing.
        t.mark_dirty_span(6, 1);
        assert_eq!(t.dirty_parts(6), u64::MAX);
        assert_eq!(t.dirty_bytes(1 << 20), (60 << 14) + (1 << 20));
        t.set_dirty(4, false);
        assert_eq!(t.dirty_parts(4), 0);
        t.mark_dirty_span(4, 1 << 62);
        assert_eq!(t.dirty_parts(4), 0b11 << 62, "a new span, not the old one");
        assert_eq!(
            t.slow_slot(4),
            Some(ChunkLoc::At(PoolId(1), 9)),
            "the span is apart"
        );
        assert_eq!(t.memory_bytes() / t.entries.capacity() as u64, 12);
    }
}
