//! Which sectors of a segment the overlay still points at, so the cleaner finds a
//! victim's live data without one mapping lookup per piece (those lookups were most of
//! its CPU time).

const SECTOR: u64 = 512;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LiveMap {
    words: Vec<u64>,
    /// Some change was not sector-aligned: the map may mark sectors that are only partly
    /// live, and the cleaner asks the overlay instead.
    pub inexact: bool,
}

impl LiveMap {
    pub fn new(segment_bytes: u64) -> LiveMap {
        LiveMap {
            words: vec![0; (segment_bytes / SECTOR).div_ceil(64) as usize],
            inexact: false,
        }
    }

    fn bit(&self, s: u64) -> bool {
        self.words[(s / 64) as usize] >> (s % 64) & 1 == 1
    }

    /// `[off, off + len)` of the segment became live (every sector it touches).
    pub fn set(&mut self, off: u64, len: u64) {
        self.inexact |= !off.is_multiple_of(SECTOR) || !len.is_multiple_of(SECTOR);
        for s in off / SECTOR..(off + len).div_ceil(SECTOR) {
            self.words[(s / 64) as usize] |= 1 << (s % 64);
        }
    }

    /// `[off, off + len)` died (only the sectors it wholly covers are cleared).
    pub fn clear(&mut self, off: u64, len: u64) {
        self.inexact |= !off.is_multiple_of(SECTOR) || !len.is_multiple_of(SECTOR);
        for s in off.div_ceil(SECTOR)..(off + len) / SECTOR {
            self.words[(s / 64) as usize] &= !(1 << (s % 64));
        }
    }

    /// The live runs within `[off, off + len)`, as (offset, length), clipped to it.
    pub fn runs(&self, off: u64, len: u64) -> Vec<(u64, u64)> {
        let end = off + len;
        let mut out: Vec<(u64, u64)> = Vec::new();
        for s in off / SECTOR..end.div_ceil(SECTOR) {
            if !self.bit(s) {
                continue;
            }
            let (a, b) = ((s * SECTOR).max(off), ((s + 1) * SECTOR).min(end));
            match out.last_mut() {
                Some(r) if r.0 + r.1 == a => r.1 += b - a,
                _ => out.push((a, b - a)),
            }
        }
        out
    }

    /// Whether every sector `other` marks is marked here too.
    pub fn covers(&self, other: &LiveMap) -> bool {
        self.words
            .iter()
            .zip(&other.words)
            .all(|(a, b)| b & !a == 0)
    }

    /// Same sectors marked (the exactness flags aside).
    pub fn same_sectors(&self, other: &LiveMap) -> bool {
        self.words == other.words
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_follow_sets_and_clears_and_unaligned_changes_make_it_inexact() {
        let mut m = LiveMap::new(1 << 20);
        m.set(0, 8192);
        m.set(16384, 4096);
        assert_eq!(m.runs(0, 32768), vec![(0, 8192), (16384, 4096)]);
        m.clear(4096, 1024);
        assert_eq!(m.runs(0, 8192), vec![(0, 4096), (5120, 3072)]);
        assert_eq!(
            m.runs(1000, 2000),
            vec![(1000, 2000)],
            "clipped to the range"
        );
        assert!(!m.inexact);
        // Half a sector dies: the sector stays marked, and the map says it is inexact.
        m.clear(16384, 256);
        assert!(m.inexact);
        assert_eq!(m.runs(16384, 4096), vec![(16384, 4096)]);
        let mut other = LiveMap::new(1 << 20);
        other.set(0, 4096);
        assert!(m.covers(&other));
        assert!(!other.covers(&m));
        assert!(!m.same_sectors(&other));
    }
}
