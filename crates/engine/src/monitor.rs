//! The monitor (seed 000): analyses every request of a volume: kind, size, sequentiality
//! (several interleaved streams), and per chunk the recency and frequency of access as
//! decayed read and write counts, from which a heat score is derived.
//!
//! Per chunk it keeps 8 bytes, so with the 8-byte map entry a mapped GiB costs 16 KiB of
//! RAM at 1 MiB chunks. Counts halve every decay period (applied lazily when a chunk is
//! next touched or scored), so heat is frequency weighted by recency.

use serde::Serialize;

use crate::types::ReqKind;

/// Access statistics of one chunk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkHeat {
    reads: u16,
    writes: u16,
    /// Decay epoch the counts refer to.
    epoch: u16,
    /// Accesses that were part of a sequential stream, and that were not.
    seq: u8,
    rnd: u8,
}

const STREAMS: usize = 8;
/// A request continues a stream if it starts within this many bytes after the stream's end.
const STREAM_GAP_BYTES: u64 = 128 << 10;

#[derive(Clone, Copy, Debug, Default)]
struct Stream {
    /// Where the stream began (its length is `next - start`).
    start: u64,
    next: u64,
    last_use: u64,
    run: u32,
}

/// Request-size histogram buckets: <=512, <=1K, ..., <=1M, larger.
pub const SIZE_BUCKETS: usize = 13;

#[derive(Clone, Debug)]
pub struct Monitor {
    heat: Vec<ChunkHeat>,
    streams: [Stream; STREAMS],
    clock: u64,
    pub sequential_requests: u64,
    pub random_requests: u64,
    pub size_histogram: [u64; SIZE_BUCKETS],
}

/// What the monitor saw of one request, for placement decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed {
    pub sequential: bool,
    /// Bytes of the sequential stream so far, this request included (its own length
    /// when random): what bcache's `sequential_cutoff` is compared with.
    pub stream_bytes: u64,
}

#[inline]
fn decay(x: u16, by: u16) -> u16 {
    if by >= 16 { 0 } else { x >> by }
}

impl ChunkHeat {
    fn age_to(&mut self, epoch: u16) {
        let by = epoch.wrapping_sub(self.epoch);
        if by != 0 {
            self.reads = decay(self.reads, by);
            self.writes = decay(self.writes, by);
            self.seq = decay(self.seq as u16, by) as u8;
            self.rnd = decay(self.rnd as u16, by) as u8;
            self.epoch = epoch;
        }
    }

    /// Heat at `epoch`: decayed reads plus writes (writes count double: both a random
    /// write and the read that usually follows are cheaper on flash), scaled down for
    /// chunks mostly accessed sequentially, which a disk serves well.
    pub fn score(&self, epoch: u16) -> u32 {
        let by = epoch.wrapping_sub(self.epoch);
        let base = decay(self.reads, by) as u32 + 2 * decay(self.writes, by) as u32;
        let (seq, rnd) = (self.seq as u32, self.rnd as u32);
        base * (rnd + 1) / (seq + rnd + 1)
    }
}

impl Monitor {
    pub fn new(chunks: u64) -> Monitor {
        Monitor {
            heat: vec![ChunkHeat::default(); chunks as usize],
            streams: [Stream::default(); STREAMS],
            clock: 0,
            sequential_requests: 0,
            random_requests: 0,
            size_histogram: [0; SIZE_BUCKETS],
        }
    }

    /// Make room for `more` chunks without growing.
    pub fn try_reserve(&mut self, more: usize) -> Result<(), std::collections::TryReserveError> {
        self.heat.try_reserve_exact(more)
    }

    /// Grow to `chunks` chunks (a resized volume); the new ones are cold.
    pub fn grow(&mut self, chunks: u64) {
        if chunks as usize > self.heat.len() {
            self.heat.resize(chunks as usize, ChunkHeat::default());
        }
    }

    /// Shrink to `chunks` chunks (a shrunk volume).
    pub fn truncate(&mut self, chunks: u64) {
        self.heat.truncate(chunks as usize);
        self.heat.shrink_to_fit();
    }

    /// Record a request of `[off, off + len)` at decay epoch `epoch`.
    pub fn observe(
        &mut self,
        epoch: u16,
        kind: ReqKind,
        off: u64,
        len: u64,
        chunk_bytes: u64,
    ) -> Observed {
        self.clock += 1;
        let bucket = (len.max(512).next_power_of_two().trailing_zeros() as usize)
            .saturating_sub(9)
            .min(SIZE_BUCKETS - 1);
        self.size_histogram[bucket] += 1;
        // Several interleaved streams: match the closest one, else replace the oldest.
        let end = off + len;
        let mut sequential = false;
        let mut stream_bytes = len;
        match self
            .streams
            .iter_mut()
            .find(|s| s.run > 0 && off >= s.next && off <= s.next + STREAM_GAP_BYTES)
        {
            Some(s) => {
                s.next = end;
                s.run += 1;
                s.last_use = self.clock;
                sequential = true;
                stream_bytes = end - s.start;
            }
            None => {
                let oldest = self
                    .streams
                    .iter_mut()
                    .min_by_key(|s| s.last_use)
                    .expect("streams is non-empty");
                *oldest = Stream {
                    start: off,
                    next: end,
                    last_use: self.clock,
                    run: 1,
                };
            }
        }
        if sequential {
            self.sequential_requests += 1;
        } else {
            self.random_requests += 1;
        }
        if len == 0 || self.heat.is_empty() {
            return Observed {
                sequential,
                stream_bytes,
            };
        }
        let last = ((end - 1) / chunk_bytes).min(self.heat.len() as u64 - 1);
        for c in off / chunk_bytes..=last {
            let h = &mut self.heat[c as usize];
            h.age_to(epoch);
            match kind {
                ReqKind::Read => h.reads = h.reads.saturating_add(1),
                ReqKind::Write | ReqKind::WriteZeroes => h.writes = h.writes.saturating_add(1),
                _ => {}
            }
            let counter = if sequential { &mut h.seq } else { &mut h.rnd };
            if *counter == u8::MAX {
                h.seq /= 2;
                h.rnd /= 2;
            }
            let counter = if sequential { &mut h.seq } else { &mut h.rnd };
            *counter += 1;
        }
        Observed {
            sequential,
            stream_bytes,
        }
    }

    #[inline]
    pub fn score(&self, chunk: u64, epoch: u16) -> u32 {
        self.heat.get(chunk as usize).map_or(0, |h| h.score(epoch))
    }

    /// Decayed reads plus writes at `epoch`, unweighted (smq's notion of a hit).
    #[inline]
    pub fn accesses(&self, chunk: u64, epoch: u16) -> u32 {
        self.heat.get(chunk as usize).map_or(0, |h| {
            let by = epoch.wrapping_sub(h.epoch);
            decay(h.reads, by) as u32 + decay(h.writes, by) as u32
        })
    }

    /// Decayed reads and writes at `epoch` (requests touching the chunk).
    #[inline]
    pub fn reads_writes(&self, chunk: u64, epoch: u16) -> (u16, u16) {
        self.heat.get(chunk as usize).map_or((0, 0), |h| {
            let by = epoch.wrapping_sub(h.epoch);
            (decay(h.reads, by), decay(h.writes, by))
        })
    }

    /// Whole decay periods since the chunk was last accessed (at `epoch`).
    #[inline]
    pub fn idle_epochs(&self, chunk: u64, epoch: u16) -> u16 {
        self.heat
            .get(chunk as usize)
            .map_or(u16::MAX, |h| epoch.wrapping_sub(h.epoch))
    }

    /// Forget a chunk's history (it was trimmed).
    pub fn forget(&mut self, chunk: u64) {
        if let Some(h) = self.heat.get_mut(chunk as usize) {
            *h = ChunkHeat::default();
        }
    }

    pub fn memory_bytes(&self) -> u64 {
        (self.heat.capacity() * std::mem::size_of::<ChunkHeat>()) as u64
    }
}

/// The monitor's view of a volume, for reports.
#[derive(Clone, Debug, Serialize)]
pub struct MonitorReport {
    pub sequential_requests: u64,
    pub random_requests: u64,
    /// Requests by size: "<=4096": n, ...
    pub size_histogram: Vec<(String, u64)>,
    /// The hottest chunks: (chunk, heat, pool).
    pub hottest: Vec<(u64, u32, String)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heat_grows_with_use_and_decays_with_time() {
        let mut m = Monitor::new(4);
        for _ in 0..8 {
            m.observe(0, ReqKind::Read, 1 << 20, 4096, 1 << 20);
        }
        assert_eq!(m.score(1, 0), 8);
        assert_eq!(m.score(1, 1), 4, "halves per epoch");
        assert_eq!(m.score(1, 3), 1);
        assert_eq!(m.score(0, 0), 0);
        m.observe(5, ReqKind::Write, 1 << 20, 4096, 1 << 20);
        assert_eq!(m.score(1, 5), 2);
    }

    #[test]
    fn interleaved_sequential_streams_are_recognised() {
        let mut m = Monitor::new(64);
        // Two sequential streams interleaved, then random reads.
        for i in 0..20u64 {
            m.observe(0, ReqKind::Read, i * 65536, 65536, 1 << 20);
            m.observe(0, ReqKind::Read, (32 << 20) + i * 65536, 65536, 1 << 20);
        }
        assert!(m.sequential_requests >= 36, "{}", m.sequential_requests);
        let seq_before = m.sequential_requests;
        for i in 0..10u64 {
            m.observe(0, ReqKind::Read, ((i * 7919) % 60) << 20, 4096, 1 << 20);
        }
        assert!(m.sequential_requests - seq_before <= 1);
        // Sequential chunks score lower than equally used random ones.
        let mut r = Monitor::new(4);
        for i in 0..16u64 {
            r.observe(0, ReqKind::Read, (i % 2) * (2 << 20) + 100, 512, 1 << 20);
        }
        assert!(r.score(0, 0) > m.score(0, 0) / 2);
    }
}
