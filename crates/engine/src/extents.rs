//! An extent map: non-overlapping `[start, end)` ranges of a volume, each with a value;
//! inserting over existing ranges overwrites (splitting them). It holds the sub-chunk
//! detail of the content mapping table (zeroed ranges, log-structured data), only where
//! there is any.

use std::collections::BTreeMap;

/// A value that can describe part of its extent: `advance(by)` is the value for the
/// same extent with its first `by` bytes cut off.
pub trait ExtentValue: Copy + Eq + std::fmt::Debug {
    fn advance(self, by: u64) -> Self;
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExtentMap<V: ExtentValue> {
    /// start -> (end, value)
    map: BTreeMap<u64, (u64, V)>,
}

impl<V: ExtentValue> ExtentMap<V> {
    pub fn new() -> Self {
        ExtentMap {
            map: BTreeMap::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Remove everything in `[start, end)`, trimming extents that straddle the edges.
    /// Returns the removed pieces (clipped to the range).
    pub fn remove(&mut self, start: u64, end: u64) -> Vec<(u64, u64, V)> {
        let mut removed = Vec::new();
        if start >= end || self.map.is_empty() {
            return removed;
        }
        // An extent starting before `start` may reach into the range.
        if let Some((&s, &(e, v))) = self.map.range(..start).next_back()
            && e > start
        {
            self.map.insert(s, (start, v));
            removed.push((start, e.min(end), v.advance(start - s)));
            if e > end {
                self.map.insert(end, (e, v.advance(end - s)));
                return removed;
            }
        }
        let inside: Vec<u64> = self.map.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            let (e, v) = self.map.remove(&s).expect("key just listed");
            removed.push((s, e.min(end), v));
            if e > end {
                self.map.insert(end, (e, v.advance(end - s)));
            }
        }
        removed
    }

    /// Map `[start, end)` to `v`, overwriting. Returns what was overwritten. Adjacent
    /// extents that continue each other (same value, shifted) are merged into one.
    pub fn insert(&mut self, start: u64, end: u64, v: V) -> Vec<(u64, u64, V)> {
        let removed = self.remove(start, end);
        if start >= end {
            return removed;
        }
        let (mut s, mut e, mut val) = (start, end, v);
        if let Some((&ls, &(le, lv))) = self.map.range(..start).next_back()
            && le == start
            && lv.advance(start - ls) == v
        {
            self.map.remove(&ls);
            s = ls;
            val = lv;
        }
        if let Some(&(re, rv)) = self.map.get(&end)
            && v.advance(end - start) == rv
        {
            self.map.remove(&end);
            e = re;
        }
        self.map.insert(s, (e, val));
        removed
    }

    /// The pieces of extents overlapping `[start, end)`, clipped, in order.
    pub fn overlapping(&self, start: u64, end: u64) -> impl Iterator<Item = (u64, u64, V)> + '_ {
        let first = self
            .map
            .range(..start)
            .next_back()
            .filter(|(_, (e, _))| *e > start)
            .map(|(&s, &(e, v))| (s, e, v));
        first
            .into_iter()
            .chain(self.map.range(start..end).map(|(&s, &(e, v))| (s, e, v)))
            .map(move |(s, e, v)| {
                let cs = s.max(start);
                (cs, e.min(end), v.advance(cs - s))
            })
    }

    /// Whether anything overlaps `[start, end)`.
    pub fn any_overlap(&self, start: u64, end: u64) -> bool {
        self.overlapping(start, end).next().is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (u64, u64, V)> + '_ {
        self.map.iter().map(|(&s, &(e, v))| (s, e, v))
    }

    /// Approximate bytes of RAM used (B-tree nodes hold ~11 entries of key+value).
    pub fn memory_bytes(&self) -> u64 {
        (self.map.len() as u64) * (8 + std::mem::size_of::<(u64, V)>() as u64) * 3 / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A value that records its offset, so splitting is checked too.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    struct Tag(u32, u64);
    impl ExtentValue for Tag {
        fn advance(self, by: u64) -> Self {
            Tag(self.0, self.1 + by)
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64, u32),
        Remove(u64, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..200, 1u64..60, 1u32..1000).prop_map(|(s, l, t)| Op::Insert(s, s + l, t)),
            (0u64..200, 1u64..60).prop_map(|(s, l)| Op::Remove(s, s + l)),
        ]
    }

    proptest! {
        /// Checked against a per-unit reference array after every operation.
        #[test]
        fn matches_reference_model(ops in proptest::collection::vec(op(), 1..60)) {
            let mut m: ExtentMap<Tag> = ExtentMap::new();
            let mut r: Vec<Option<(u32, u64)>> = vec![None; 300];
            for o in ops {
                match o {
                    Op::Insert(s, e, t) => {
                        m.insert(s, e, Tag(t, s * 1000));
                        for x in s..e { r[x as usize] = Some((t, s * 1000 + (x - s))); }
                    }
                    Op::Remove(s, e) => {
                        m.remove(s, e);
                        for x in s..e { r[x as usize] = None; }
                    }
                }
                let mut seen = vec![None; 300];
                let mut last_end = 0;
                for (s, e, Tag(t, off)) in m.iter() {
                    prop_assert!(s < e && s >= last_end, "extents overlap or are empty");
                    last_end = e;
                    for x in s..e { seen[x as usize] = Some((t, off + (x - s))); }
                }
                prop_assert_eq!(&seen, &r);
                // Range queries agree too.
                let q: Vec<_> = m.overlapping(50, 120).collect();
                let mut covered = vec![None; 300];
                for (s, e, Tag(t, off)) in q {
                    prop_assert!(s >= 50 && e <= 120);
                    for x in s..e { covered[x as usize] = Some((t, off + (x - s))); }
                }
                for x in 50..120 { prop_assert_eq!(covered[x], r[x]); }
            }
        }
    }

    #[test]
    fn adjacent_continuing_extents_merge() {
        let mut m: ExtentMap<Tag> = ExtentMap::new();
        m.insert(0, 10, Tag(1, 0));
        m.insert(20, 30, Tag(1, 20));
        m.insert(10, 20, Tag(1, 10));
        assert_eq!(m.iter().collect::<Vec<_>>(), vec![(0, 30, Tag(1, 0))]);
        m.insert(30, 40, Tag(2, 0));
        assert_eq!(m.len(), 2);
    }

    #[test]
    fn remove_splits_a_straddling_extent() {
        let mut m: ExtentMap<Tag> = ExtentMap::new();
        m.insert(0, 100, Tag(1, 0));
        let removed = m.remove(40, 60);
        assert_eq!(removed, vec![(40, 60, Tag(1, 40))]);
        assert_eq!(
            m.iter().collect::<Vec<_>>(),
            vec![(0, 40, Tag(1, 0)), (60, 100, Tag(1, 60))]
        );
    }
}
