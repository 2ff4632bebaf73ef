//! What the simulator measures around live storage migrations (`[[migration]]`): VM
//! completions per volume over time, so a report can give the I/O rate during each
//! migration's window (seed 004's lambda_IO) beside the rate before it started.

use tiervisor_engine::PoolId;
use tiervisor_engine::jobs::migrate::MigrationStatus;

use crate::report::MigrationReport;

/// Width of a completion-count bucket.
const BUCKET_NS: u64 = 10_000_000;

#[derive(Default)]
pub(crate) struct MigrationWatch {
    /// Per volume: VM requests completed in each bucket since the workloads started.
    /// Empty when the scenario starts no migration (nothing is kept then).
    per_bucket: Vec<Vec<u32>>,
}

impl MigrationWatch {
    pub fn new(volumes: usize, enabled: bool) -> Self {
        MigrationWatch {
            per_bucket: if enabled {
                vec![Vec::new(); volumes]
            } else {
                Vec::new()
            },
        }
    }

    /// A VM request of volume `vol` completed `since_start_ns` after the workloads began.
    #[inline]
    pub fn completed(&mut self, vol: usize, since_start_ns: u64) {
        let Some(b) = self.per_bucket.get_mut(vol) else {
            return;
        };
        let i = (since_start_ns / BUCKET_NS) as usize;
        if b.len() <= i {
            b.resize(i + 1, 0);
        }
        b[i] += 1;
    }

    /// Completions per second of volume `vol` between two times since the start, counted
    /// in whole buckets (the window is widened to bucket edges).
    pub fn rate(&self, vol: usize, from_ns: u64, to_ns: u64) -> Option<f64> {
        let b = self.per_bucket.get(vol)?;
        let (lo, hi) = (
            (from_ns / BUCKET_NS) as usize,
            to_ns.div_ceil(BUCKET_NS) as usize,
        );
        if hi <= lo {
            return None;
        }
        let n: u64 = (lo..hi).map(|i| *b.get(i).unwrap_or(&0) as u64).sum();
        Some(n as f64 / ((hi - lo) as u64 * BUCKET_NS) as f64 * 1e9)
    }

    /// The report of one migration; times are relative to `t0`, the workloads' start.
    pub fn report(
        &self,
        s: &MigrationStatus,
        vol: usize,
        t0: u64,
        pool_name: impl Fn(PoolId) -> String,
    ) -> MigrationReport {
        let st = &s.stats;
        let rel = |t: u64| t.saturating_sub(t0);
        let secs = |ns: u64| ns as f64 / 1e9;
        let start = rel(st.started_ns);
        let end = st.finished_ns.map(rel);
        let cost = s.cost();
        MigrationReport {
            volume: s.volume.clone(),
            scheme: s.scheme.name().to_string(),
            why: s.why.clone(),
            profile: s.profile,
            from: s.from.iter().map(|&p| pool_name(p)).collect(),
            to: pool_name(s.to),
            phase: s.phase.name().to_string(),
            error: s.error.clone(),
            started_s: secs(start),
            image_copied_s: st.image_copied_ns.map(|t| secs(rel(t))),
            finished_s: end.map(secs),
            migration_time_s: end.map(|e| secs(e - start)),
            image_copy_time_s: st.image_copied_ns.map(|t| secs(rel(t) - start)),
            downtime_ms: st.downtime_ns as f64 / 1e6,
            pivot_durable_ms: st.pivot_durable_ns as f64 / 1e6,
            copied_bytes: st.copied_bytes,
            redundant_bytes: st.redundant_bytes,
            mirrored_bytes: st.mirrored_bytes,
            vm_write_bytes: st.vm_write_bytes,
            ssd_write_bytes: st.ssd_write_bytes,
            passes: st.pass,
            aio_delays: st.aio_delays,
            whole_chunk_copies: st.whole_chunk_copies,
            iops_before: self.rate(vol, 0, start),
            iops_during: end.and_then(|e| self.rate(vol, start, e)),
            gamma: s.gamma,
            lambda_io: cost.map(|c| c.lambda_io),
            lambda_migration_time: cost.map(|c| c.lambda_migration_time),
            lambda_wear: cost.map(|c| c.lambda_wear),
            mc: cost.map(|c| c.mc),
        }
    }
}
