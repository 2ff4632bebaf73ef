//! What `auto` knows of a volume's workload when its job starts: the volume's counters
//! and the monitor's per-chunk heat, nothing else (no clock but the engine's, no guess of
//! the guest). Seed 004's Mix picks by the VM's I/O characteristics; the first model
//! (`cost.rs`) saw only the write share, and on Table 7's benchmarks it picked a scheme
//! dearer than the best at 121 of 352 points: it took every VM as one that keeps its
//! disks busy (no think time) and spreads its accesses over the image (half of them on
//! the copied region), which a kernel compile (think time, a small tree copied early) and
//! dbench (each client in its own small area) are not (BENCHMARKS.md, "auto on the
//! benchmarks").

use serde::Serialize;

use crate::engine::Engine;
use crate::types::PoolId;

/// The workload as observed from the volume's first request to the job's start.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct WorkloadProfile {
    /// Bytes written over bytes read and written (0.5 before any request).
    pub write_share: f64,
    /// The VM's mean requests in flight (Little's law: the sum of its requests'
    /// latencies over the time observed), at most 1: the share of its time the VM waits
    /// on I/O, exact for a VM with one request outstanding (a kernel compile's think time
    /// makes it small); 1 for one that always has a request in flight.
    pub busy_share: f64,
    /// Writes completed per second (None before any): whether the duplicates AIO queues
    /// on a slower destination pile up.
    pub write_iops: Option<f64>,
    /// The share of reads, and of writes, that fall on chunks the copy has passed,
    /// averaged over the copy: the copy goes up the chunks it must copy at one pace, so a
    /// chunk at position p (of 1) is copied for 1 - p of it. From the monitor's decayed
    /// per-chunk counts; 0.5 for accesses spread evenly (the first model's "half the
    /// image is copied on average").
    pub copied_read_share: f64,
    pub copied_write_share: f64,
}

impl WorkloadProfile {
    /// A VM that always has a request in flight, spreads its accesses evenly and writes
    /// `write_share` of its bytes as fast as it can: the first model's assumptions.
    pub fn uniform(write_share: f64) -> Self {
        WorkloadProfile {
            write_share,
            busy_share: 1.0,
            write_iops: None,
            copied_read_share: 0.5,
            copied_write_share: 0.5,
        }
    }
}

impl Engine {
    /// Volume `v`'s workload at `now`, for a job to `to`.
    pub(crate) fn workload_profile(&self, now: u64, v: u32, to: PoolId) -> WorkloadProfile {
        let vol = &self.vols[v as usize];
        let st = &vol.stats;
        let (rb, wb) = (st.read.bytes, st.write.bytes);
        let mut p = WorkloadProfile::uniform(if rb + wb == 0 {
            0.5
        } else {
            wb as f64 / (rb + wb) as f64
        });
        let observed_ns = st.first_arrival_ns.map_or(0, |t| now.saturating_sub(t));
        if observed_ns > 0 && st.all.count() > 0 {
            let in_flight = st.all.mean_ns() * st.all.count() as f64 / observed_ns as f64;
            p.busy_share = in_flight.clamp(0.0, 1.0);
            p.write_iops = Some(st.write.requests as f64 * 1e9 / observed_ns as f64);
        }
        // Where the accesses fall against the copy's order: chunks to copy are those
        // mapped off the destination, in index order; an access to one not to copy
        // (unmapped, or already there) counts at the copy's position when it passes it.
        let epoch = self.decay_epoch(now);
        let to_copy = |c: u64| matches!(vol.resolve(vol.map.get(c), c), Some((q, _)) if q != to);
        let total = (0..vol.chunks).filter(|&c| to_copy(c)).count() as f64;
        if total > 0.0 {
            let (mut before, mut r, mut w, mut rc, mut wc) = (0.0, 0.0, 0.0, 0.0, 0.0);
            for c in 0..vol.chunks {
                let copying = to_copy(c);
                let pos = (before + if copying { 0.5 } else { 0.0 }) / total;
                let (reads, writes) = vol.monitor.reads_writes(c, epoch);
                let (reads, writes) = (f64::from(reads), f64::from(writes));
                r += reads;
                w += writes;
                rc += reads * (1.0 - pos);
                wc += writes * (1.0 - pos);
                before += f64::from(u8::from(copying));
            }
            if r > 0.0 {
                p.copied_read_share = rc / r;
            }
            if w > 0.0 {
                p.copied_write_share = wc / w;
            }
        }
        p
    }
}
