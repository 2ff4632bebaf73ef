//! A simulated device that holds real bytes, with a volatile write cache and faults.
//!
//! Stable media is a sparse map of 4 KiB pages; pages never written hold recognisable
//! garbage. Completed writes sit in a volatile cache until a FLUSH (or FUA) makes them
//! stable; reads see the cache. On power loss each cached write (and each write still in
//! flight) is dropped, kept, or torn at 512-byte granularity, as the seed decides.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use rand::RngCore;
use rand_xoshiro::Xoshiro256PlusPlus;
use tiervisor_engine::{DevKind, DeviceOp, Errno};

use super::pattern::{SECTOR, garbage};

const PAGE: u64 = 4096;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Faults {
    None = 0,
    /// Power loss, slow operations.
    Crash = 1,
    /// And transient read/write/flush errors.
    Errors = 2,
    /// And latent sector errors.
    Latent = 3,
}

impl Faults {
    pub fn from_level(l: u8) -> Faults {
        match l {
            0 => Faults::None,
            1 => Faults::Crash,
            2 => Faults::Errors,
            _ => Faults::Latent,
        }
    }
}

pub struct DataDevice {
    pub pool: u16,
    capacity: u64,
    stable: BTreeMap<u64, Box<[u8; PAGE as usize]>>,
    /// Completed, unflushed writes in completion order: (offset, bytes; None = zeros,
    /// length, tag code).
    volatile: Vec<(u64, Option<Bytes>, u64, u32)>,
    /// A tag-aware cache (seed 001): a FLUSH with a volume's tag makes only that tag's
    /// writes stable; a newer write replaces the cached older bytes under it.
    pub tagged: bool,
    /// Sectors that fail reads until rewritten.
    latent: BTreeSet<u64>,
    pub injected_errors: u64,
}

pub fn below(rng: &mut Xoshiro256PlusPlus, n: u64) -> u64 {
    ((rng.next_u64() as u128 * n as u128) >> 64) as u64
}

/// An aimed power loss `Some(n)` steps away: true (and disarmed) when it is due.
pub fn count_down(steps: &mut Option<u64>) -> bool {
    match *steps {
        Some(0) => {
            *steps = None;
            true
        }
        Some(n) => {
            *steps = Some(n - 1);
            false
        }
        None => false,
    }
}

impl DataDevice {
    pub fn new(pool: u16, capacity: u64) -> DataDevice {
        DataDevice {
            pool,
            capacity,
            stable: BTreeMap::new(),
            volatile: Vec::new(),
            tagged: false,
            latent: BTreeSet::new(),
            injected_errors: 0,
        }
    }

    /// Mark `n` random sectors (at or after `from` bytes) as latent errors.
    /// `n` unreadable sectors at or past `from`, none in `skip` (byte ranges: the other
    /// shards' superblock areas, which mount must read; a draw there moves past it).
    pub fn add_latent(
        &mut self,
        rng: &mut Xoshiro256PlusPlus,
        n: u64,
        from: u64,
        skip: &[std::ops::Range<u64>],
    ) {
        for _ in 0..n {
            let mut at = from + below(rng, self.capacity - from);
            if let Some(r) = skip.iter().find(|r| r.contains(&at)) {
                at = r.end.min(self.capacity - 1);
            }
            self.latent.insert(at / SECTOR as u64);
        }
    }

    fn page(&mut self, p: u64) -> &mut [u8; PAGE as usize] {
        let pool = self.pool;
        self.stable.entry(p).or_insert_with(|| {
            let mut b = Box::new([0u8; PAGE as usize]);
            for (i, s) in b.chunks_mut(SECTOR).enumerate() {
                garbage(pool, p * (PAGE / SECTOR as u64) + i as u64, s);
            }
            b
        })
    }

    fn stable_write(&mut self, off: u64, data: Option<&[u8]>, len: u64) {
        let mut pos = off;
        let end = off + len;
        while pos < end {
            let p = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let n = ((PAGE - pos % PAGE).min(end - pos)) as usize;
            let dst = &mut self.page(p)[in_page..in_page + n];
            match data {
                Some(d) => dst.copy_from_slice(&d[(pos - off) as usize..(pos - off) as usize + n]),
                None => dst.fill(0),
            }
            pos += n as u64;
        }
    }

    fn read_into(&mut self, off: u64, out: &mut [u8]) {
        let len = out.len() as u64;
        let mut pos = off;
        while pos < off + len {
            let p = pos / PAGE;
            let in_page = (pos % PAGE) as usize;
            let n = ((PAGE - pos % PAGE).min(off + len - pos)) as usize;
            let src = &self.page(p)[in_page..in_page + n];
            out[(pos - off) as usize..(pos - off) as usize + n].copy_from_slice(src);
            pos += n as u64;
        }
        // The cache holds newer data than the media.
        for (o, d, l, _) in &self.volatile {
            let (s, e) = ((*o).max(off), (o + l).min(off + len));
            if s < e {
                let dst = &mut out[(s - off) as usize..(e - off) as usize];
                match d {
                    Some(d) => dst.copy_from_slice(&d[(s - o) as usize..(e - o) as usize]),
                    None => dst.fill(0),
                }
            }
        }
    }

    fn touches_latent(&self, off: u64, len: u64) -> bool {
        let (a, b) = (off / SECTOR as u64, (off + len).div_ceil(SECTOR as u64));
        self.latent.range(a..b).next().is_some()
    }

    fn clear_latent(&mut self, off: u64, len: u64) {
        let (a, b) = (off / SECTOR as u64, (off + len).div_ceil(SECTOR as u64));
        let hit: Vec<u64> = self.latent.range(a..b).copied().collect();
        for s in hit {
            self.latent.remove(&s);
        }
    }

    /// Carry out `op` as it completes. `fail` injects a transient error: `Errno::Io`, or
    /// `Errno::NoSpc` for a write that finds no space (which writes a prefix at most).
    pub fn complete(
        &mut self,
        op: &DeviceOp,
        fail: Option<Errno>,
        rng: &mut Xoshiro256PlusPlus,
    ) -> (Result<(), Errno>, Option<Bytes>) {
        let (off, len) = (op.offset_bytes, op.len_bytes);
        if off + len > self.capacity {
            return (Err(Errno::Io), None);
        }
        match op.kind {
            DevKind::Read => {
                if fail.is_some() || self.touches_latent(off, len) {
                    self.injected_errors += 1;
                    return (Err(Errno::Io), None);
                }
                let mut b = vec![0u8; len as usize];
                self.read_into(off, &mut b);
                (Ok(()), Some(Bytes::from(b)))
            }
            // A punch and a discard read back as zeros.
            DevKind::Write | DevKind::WriteZeroes | DevKind::Punch | DevKind::Discard => {
                let data = if op.kind == DevKind::Write {
                    op.payload.clone()
                } else {
                    None
                };
                if let Some(e) = fail {
                    // A failed write may have written some of its sectors; one that ran
                    // out of space, a prefix of them (a short write, then ENOSPC).
                    self.injected_errors += 1;
                    let sectors = len.div_ceil(SECTOR as u64);
                    let prefix = if e == Errno::NoSpc {
                        below(rng, sectors + 1)
                    } else {
                        0
                    };
                    for i in 0..sectors {
                        let lands = if e == Errno::NoSpc {
                            i < prefix
                        } else {
                            below(rng, 2) == 0
                        };
                        if lands {
                            let s = off + i * SECTOR as u64;
                            let n = (SECTOR as u64).min(off + len - s);
                            let d = data
                                .as_ref()
                                .map(|d| d.slice((s - off) as usize..(s - off + n) as usize));
                            self.volatile.push((s, d, n, op.tag.code()));
                        }
                    }
                    return (Err(e), None);
                }
                self.clear_latent(off, len);
                if op.fua {
                    // Older cached data for these sectors must not land on top later.
                    self.trim_volatile(off, len);
                    self.stable_write(off, data.as_deref(), len);
                } else {
                    if self.tagged {
                        self.trim_volatile(off, len);
                    }
                    self.volatile.push((off, data, len, op.tag.code()));
                }
                (Ok(()), None)
            }
            DevKind::Flush => {
                if fail.is_some() {
                    self.injected_errors += 1;
                    return (Err(Errno::Io), None);
                }
                let tag = op.tag.code();
                for (o, d, l, t) in std::mem::take(&mut self.volatile) {
                    if !self.tagged || tag == 0 || t == tag {
                        self.stable_write(o, d.as_deref(), l);
                    } else {
                        self.volatile.push((o, d, l, t));
                    }
                }
                (Ok(()), None)
            }
        }
    }

    fn trim_volatile(&mut self, off: u64, len: u64) {
        let end = off + len;
        let mut kept = Vec::with_capacity(self.volatile.len());
        for (o, d, l, t) in std::mem::take(&mut self.volatile) {
            let e = o + l;
            if e <= off || o >= end {
                kept.push((o, d, l, t));
                continue;
            }
            if o < off {
                kept.push((
                    o,
                    d.as_ref().map(|d| d.slice(..(off - o) as usize)),
                    off - o,
                    t,
                ));
            }
            if e > end {
                kept.push((
                    end,
                    d.as_ref().map(|d| d.slice((end - o) as usize..)),
                    e - end,
                    t,
                ));
            }
        }
        self.volatile = kept;
    }

    /// Power loss. `in_flight` writes had not completed; they are treated like cached ones.
    pub fn power_loss(&mut self, in_flight: &[&DeviceOp], rng: &mut Xoshiro256PlusPlus) {
        let mut pending: Vec<(u64, Option<Bytes>, u64)> = std::mem::take(&mut self.volatile)
            .into_iter()
            .map(|(o, d, l, _)| (o, d, l))
            .collect();
        for op in in_flight {
            if matches!(
                op.kind,
                DevKind::Write | DevKind::WriteZeroes | DevKind::Punch | DevKind::Discard
            ) {
                let d = if op.kind == DevKind::Write {
                    op.payload.clone()
                } else {
                    None
                };
                pending.push((op.offset_bytes, d, op.len_bytes));
            }
        }
        for (o, d, l) in pending {
            match below(rng, 3) {
                0 => {}                                     // lost
                1 => self.stable_write(o, d.as_deref(), l), // landed
                _ => {
                    // Torn: each sector independently.
                    let mut s = o;
                    while s < o + l {
                        let n = (SECTOR as u64 - s % SECTOR as u64).min(o + l - s);
                        if below(rng, 2) == 0 {
                            let piece = d
                                .as_ref()
                                .map(|d| d.slice((s - o) as usize..(s - o + n) as usize));
                            self.stable_write(s, piece.as_deref(), n);
                        }
                        s += n;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use tiervisor_engine::{IoClass, OpId, PoolId};

    fn op(kind: DevKind, off: u64, len: u64, data: Option<&[u8]>, fua: bool) -> DeviceOp {
        DeviceOp {
            id: OpId(0),
            pool: PoolId(0),
            kind,
            offset_bytes: off,
            len_bytes: len,
            fua,
            payload: data.map(Bytes::copy_from_slice),
            class: IoClass::Foreground,
            volume: None,
            context: tiervisor_engine::IoContext::Engine,
            tag: Default::default(),
        }
    }

    /// Complete an operation that must succeed; returns what it read.
    fn ok(d: &mut DataDevice, o: DeviceOp, rng: &mut Xoshiro256PlusPlus) -> Option<Bytes> {
        let (r, data) = d.complete(&o, None, rng);
        assert!(r.is_ok(), "{o:?}");
        data
    }

    #[test]
    fn cache_flush_and_power_loss() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(1);
        let mut d = DataDevice::new(0, 1 << 20);
        let g = ok(&mut d, op(DevKind::Read, 0, 512, None, false), &mut rng).unwrap();
        assert_eq!(&g[..8], b"GARBAGE!");
        ok(
            &mut d,
            op(DevKind::Write, 0, 4, Some(b"abcd"), false),
            &mut rng,
        );
        assert_eq!(
            &ok(&mut d, op(DevKind::Read, 0, 4, None, false), &mut rng).unwrap()[..],
            b"abcd"
        );
        ok(&mut d, op(DevKind::Flush, 0, 0, None, false), &mut rng);
        ok(
            &mut d,
            op(DevKind::Write, 0, 4, Some(b"wxyz"), false),
            &mut rng,
        );
        d.power_loss(&[], &mut rng);
        let r = ok(&mut d, op(DevKind::Read, 0, 4, None, false), &mut rng).unwrap();
        assert!(&r[..] == b"abcd" || &r[..] == b"wxyz");
        // FUA survives and is not undone by older cached data.
        ok(
            &mut d,
            op(DevKind::Write, 512, 4, Some(b"old!"), false),
            &mut rng,
        );
        ok(
            &mut d,
            op(DevKind::Write, 512, 4, Some(b"new!"), true),
            &mut rng,
        );
        d.power_loss(&[], &mut rng);
        assert_eq!(
            &ok(&mut d, op(DevKind::Read, 512, 4, None, false), &mut rng).unwrap()[..],
            b"new!"
        );
    }

    #[test]
    fn latent_errors_fail_reads_until_rewritten() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(2);
        let mut d = DataDevice::new(0, 1 << 20);
        d.latent.insert(8);
        assert!(
            d.complete(&op(DevKind::Read, 4096, 512, None, false), None, &mut rng)
                .0
                .is_err()
        );
        ok(
            &mut d,
            op(DevKind::Write, 4096, 512, Some(&[1; 512]), false),
            &mut rng,
        );
        ok(&mut d, op(DevKind::Read, 4096, 512, None, false), &mut rng);
    }
}
