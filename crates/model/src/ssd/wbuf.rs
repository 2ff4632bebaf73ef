//! The DRAM write buffer of a write-back SSD (seed 001's tag-based write buffer).
//!
//! Entries are logical pages. Two intrusive lists run through them: one LRU list of every
//! entry (eviction takes its tail when the buffer is full) and one list per tag, so a
//! tagged FLUSH finds its entries without scanning the others. Overwrites of a buffered
//! page are absorbed (the entry moves to the head of the LRU list and to its new tag's list).
//! Invariant: every entry is on the LRU list and on exactly its tag's list, and the index
//! maps its page to it (`check`).

use std::collections::{BTreeMap, HashMap};

const NIL: u32 = u32::MAX;

#[derive(Clone, Copy, Debug)]
struct Entry {
    lpn: u64,
    tag: u32,
    /// The writes so far did not cover the whole page (a program must merge the rest).
    partial: bool,
    lru: (u32, u32),
    by_tag: (u32, u32),
}

#[derive(Clone, Copy, Debug, Default)]
struct Ends {
    head: u32,
    tail: u32,
    len: usize,
}

impl Ends {
    fn empty() -> Ends {
        Ends {
            head: NIL,
            tail: NIL,
            len: 0,
        }
    }
}

/// A buffered page leaving the buffer to be programmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Victim {
    pub lpn: u64,
    pub tag: u32,
    pub partial: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct WriteBuffer {
    entries: Vec<Entry>,
    free: Vec<u32>,
    /// Lookup only; never iterated, so its order cannot leak into results.
    index: HashMap<u64, u32>,
    lru: Ends,
    tags: BTreeMap<u32, Ends>,
}

/// Which of an entry's two lists an operation works on.
#[derive(Clone, Copy)]
enum List {
    Lru,
    Tag,
}

impl WriteBuffer {
    pub fn new() -> WriteBuffer {
        WriteBuffer {
            entries: Vec::new(),
            free: Vec::new(),
            index: HashMap::new(),
            lru: Ends::empty(),
            tags: BTreeMap::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.lru.len
    }

    pub fn contains(&self, lpn: u64) -> bool {
        self.index.contains_key(&lpn)
    }

    /// Entries of `tag` in the buffer.
    pub fn tag_len(&self, tag: u32) -> usize {
        self.tags.get(&tag).map_or(0, |e| e.len)
    }

    fn links(&mut self, i: u32, l: List) -> &mut (u32, u32) {
        let e = &mut self.entries[i as usize];
        match l {
            List::Lru => &mut e.lru,
            List::Tag => &mut e.by_tag,
        }
    }

    fn ends(&mut self, l: List, tag: u32) -> &mut Ends {
        match l {
            List::Lru => &mut self.lru,
            List::Tag => self.tags.entry(tag).or_insert_with(Ends::empty),
        }
    }

    fn unlink(&mut self, i: u32, l: List) {
        let tag = self.entries[i as usize].tag;
        let (p, n) = *self.links(i, l);
        if p != NIL {
            self.links(p, l).1 = n;
        } else {
            self.ends(l, tag).head = n;
        }
        if n != NIL {
            self.links(n, l).0 = p;
        } else {
            self.ends(l, tag).tail = p;
        }
        let ends = self.ends(l, tag);
        ends.len -= 1;
        if let List::Tag = l
            && ends.len == 0
        {
            self.tags.remove(&tag);
        }
    }

    fn push_front(&mut self, i: u32, l: List) {
        let tag = self.entries[i as usize].tag;
        let head = self.ends(l, tag).head;
        *self.links(i, l) = (NIL, head);
        if head != NIL {
            self.links(head, l).0 = i;
        }
        let ends = self.ends(l, tag);
        ends.head = i;
        if ends.tail == NIL {
            ends.tail = i;
        }
        ends.len += 1;
    }

    /// Buffer a write of `lpn` for `tag`. Returns true when the page was already buffered
    /// (the write is absorbed: no flash program for the older data).
    pub fn insert(&mut self, lpn: u64, tag: u32, partial: bool) -> bool {
        if let Some(&i) = self.index.get(&lpn) {
            self.unlink(i, List::Lru);
            self.unlink(i, List::Tag);
            let e = &mut self.entries[i as usize];
            e.tag = tag;
            e.partial &= partial;
            self.push_front(i, List::Lru);
            self.push_front(i, List::Tag);
            return true;
        }
        let e = Entry {
            lpn,
            tag,
            partial,
            lru: (NIL, NIL),
            by_tag: (NIL, NIL),
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.entries[i as usize] = e;
                i
            }
            None => {
                self.entries.push(e);
                (self.entries.len() - 1) as u32
            }
        };
        self.index.insert(lpn, i);
        self.push_front(i, List::Lru);
        self.push_front(i, List::Tag);
        false
    }

    fn remove(&mut self, i: u32) -> Victim {
        self.unlink(i, List::Lru);
        self.unlink(i, List::Tag);
        let e = self.entries[i as usize];
        self.index.remove(&e.lpn);
        self.free.push(i);
        Victim {
            lpn: e.lpn,
            tag: e.tag,
            partial: e.partial,
        }
    }

    /// Drop `lpn` if buffered (a write-through of newer data supersedes it).
    pub fn discard(&mut self, lpn: u64) -> bool {
        match self.index.get(&lpn) {
            Some(&i) => {
                self.remove(i);
                true
            }
            None => false,
        }
    }

    /// Take the least recently written entry.
    pub fn evict_lru(&mut self) -> Option<Victim> {
        let t = self.lru.tail;
        (t != NIL).then(|| self.remove(t))
    }

    /// Take every entry of `tag`, oldest first.
    pub fn drain_tag(&mut self, tag: u32) -> Vec<Victim> {
        let mut out = Vec::with_capacity(self.tag_len(tag));
        while let Some(t) = self.tags.get(&tag).map(|e| e.tail) {
            out.push(self.remove(t));
        }
        out
    }

    /// Take every entry, oldest first.
    pub fn drain_all(&mut self) -> Vec<Victim> {
        let mut out = Vec::with_capacity(self.len());
        while let Some(v) = self.evict_lru() {
            out.push(v);
        }
        out
    }

    /// Check the lists against each other (tests).
    #[cfg(test)]
    pub fn check(&self) -> Result<(), String> {
        let mut n = 0;
        let mut i = self.lru.head;
        while i != NIL {
            let e = &self.entries[i as usize];
            if self.index.get(&e.lpn) != Some(&i) {
                return Err(format!("page {} on the LRU list but not indexed", e.lpn));
            }
            n += 1;
            i = e.lru.1;
        }
        let per_tag: usize = self.tags.values().map(|e| e.len).sum();
        if n != self.lru.len || n != self.index.len() || n != per_tag {
            return Err(format!(
                "{n} on the LRU list, {} counted, {} indexed, {per_tag} on tag lists",
                self.lru.len,
                self.index.len()
            ));
        }
        for (&tag, ends) in &self.tags {
            let (mut i, mut k) = (ends.head, 0);
            while i != NIL {
                let e = &self.entries[i as usize];
                if e.tag != tag {
                    return Err(format!(
                        "page {} of tag {} on tag {tag}'s list",
                        e.lpn, e.tag
                    ));
                }
                k += 1;
                i = e.by_tag.1;
            }
            if k != ends.len {
                return Err(format!("tag {tag}: {k} linked, {} counted", ends.len));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tagged_drain_leaves_other_tags_and_keeps_lru_order() {
        let mut b = WriteBuffer::new();
        for lpn in 0..10 {
            assert!(!b.insert(lpn, 1 + (lpn % 2) as u32, false));
        }
        // Rewriting page 0 absorbs it and makes it the most recent.
        assert!(b.insert(0, 1, false));
        b.check().unwrap();
        let odd: Vec<u64> = b.drain_tag(2).iter().map(|v| v.lpn).collect();
        assert_eq!(odd, vec![1, 3, 5, 7, 9]);
        b.check().unwrap();
        assert_eq!((b.len(), b.tag_len(1), b.tag_len(2)), (5, 5, 0));
        assert_eq!(b.evict_lru().map(|v| v.lpn), Some(2));
        assert!(b.insert(4, 3, true), "a rewrite may change the tag");
        b.check().unwrap();
        assert_eq!((b.tag_len(1), b.tag_len(3)), (3, 1));
        let rest: Vec<u64> = b.drain_all().iter().map(|v| v.lpn).collect();
        assert_eq!(rest, vec![6, 8, 0, 4]);
        assert_eq!(b.len(), 0);
        b.check().unwrap();
    }
}
