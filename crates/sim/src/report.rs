//! What a simulation run reports, as JSON (deterministic key order) or a table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use tiervisor_engine::stats::Latency;

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LatReport {
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl From<&Latency> for LatReport {
    fn from(l: &Latency) -> Self {
        let s = l.summary();
        LatReport {
            mean: s.mean_us,
            p50: s.p50_us,
            p99: s.p99_us,
            p999: s.p999_us,
            max: s.max_us,
        }
    }
}

/// Running mean and variance of times, kept in milliseconds (the scheduling tables'
/// unit). Sums in arrival order, so the same run gives the same bits.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Moments {
    n: u64,
    sum_ms: f64,
    sum_sq_ms2: f64,
}

impl Moments {
    #[inline]
    pub fn record(&mut self, ns: u64) {
        let ms = ns as f64 / 1e6;
        self.n += 1;
        self.sum_ms += ms;
        self.sum_sq_ms2 += ms * ms;
    }
    pub fn count(&self) -> u64 {
        self.n
    }
    pub fn mean_ms(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.sum_ms / self.n as f64
        }
    }
    /// Population variance in ms².
    pub fn variance_ms2(&self) -> f64 {
        if self.n == 0 {
            return 0.0;
        }
        let m = self.mean_ms();
        (self.sum_sq_ms2 / self.n as f64 - m * m).max(0.0)
    }
}

/// Mean and variance of a time, in ms and ms².
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct MeanVar {
    pub mean_ms: f64,
    pub variance_ms2: f64,
}

impl From<&Moments> for MeanVar {
    fn from(m: &Moments) -> Self {
        MeanVar {
            mean_ms: m.mean_ms(),
            variance_ms2: m.variance_ms2(),
        }
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VmReport {
    pub volume: String,
    pub ios: u64,
    pub errors: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub iops: f64,
    pub mb_per_s: f64,
    /// From the start of the run to the VM's last completion.
    pub exec_time_s: f64,
    pub lat_us: LatReport,
    /// Issue to completion, as the scheduling tables give it (set by the driver).
    pub response: MeanVar,
    /// Application operations finished (an `[vm.app]`'s loops), and per second of
    /// `exec_time_s` (set by the driver; absent for other workloads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_ops: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub app_ops_per_s: Option<f64>,
}

impl VmReport {
    pub fn new(
        ios: u64,
        read_bytes: u64,
        write_bytes: u64,
        errors: u64,
        exec_time_s: f64,
        lat: &Latency,
        volume: &str,
    ) -> VmReport {
        let per = |x: f64| {
            if exec_time_s > 0.0 {
                x / exec_time_s
            } else {
                0.0
            }
        };
        VmReport {
            volume: volume.to_string(),
            ios,
            errors,
            read_bytes,
            write_bytes,
            iops: per(ios as f64),
            mb_per_s: per((read_bytes + write_bytes) as f64) / 1e6,
            exec_time_s,
            lat_us: lat.into(),
            response: MeanVar::default(),
            app_ops: None,
            app_ops_per_s: None,
        }
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct VolumeReport {
    pub placement: String,
    /// Mapped chunks per pool at the end of the run.
    pub chunks_by_pool: BTreeMap<String, u64>,
    /// RAM of the content mapping table and the monitor for this volume.
    pub map_memory_bytes: u64,
    pub map_bytes_per_chunk: f64,
    pub promotions: u64,
    pub demotions: u64,
    /// Demotions that were a remap to a kept home, without a copy (`[tiering]
    /// keep_home`).
    pub clean_demotions: u64,
    /// Dirty demotions to a kept home that copied only the span written, not the chunk.
    pub span_demotions: u64,
    pub migrated_bytes: u64,
    pub ios: u64,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub errors: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Zeroes the engine wrote around first writes to thin chunks: device writes beyond
    /// `write_bytes`.
    pub zero_fill_bytes: u64,
    pub iops: f64,
    pub mb_per_s: f64,
    pub exec_time_s: f64,
    pub lat_us: LatReport,
}

impl VolumeReport {
    /// A warning when thin provisioning's zero-fill adds more device writes than the
    /// workload made (sparse traces on big chunks): such a run measures the zero-fill.
    pub fn zero_fill_warning(&self, name: &str) -> Option<String> {
        (self.zero_fill_bytes > self.write_bytes).then(|| {
            format!(
                "volume {name}: thin-provisioning zero-fill wrote {} bytes beside the workload's {} ({:.1}x): the first write to each chunk zeroes the rest; provisioning = \"thick\" or prefill = true measures without it",
                self.zero_fill_bytes,
                self.write_bytes,
                self.zero_fill_bytes as f64 / self.write_bytes.max(1) as f64
            )
        })
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DeviceReport {
    pub model: String,
    pub ops: u64,
    pub busy_s: f64,
    pub utilisation: f64,
    pub host_read_bytes: u64,
    pub host_write_bytes: u64,
    pub media_write_bytes: u64,
    pub erases: u64,
    pub gc_page_copies: u64,
    pub waf: f64,
    pub cache_hits: u64,
    pub map_cache_misses: u64,
    /// Dispatch to completion of reads and writes (one at a time at queue depth 1).
    pub service: MeanVar,
    /// Sectors read and written per ms of the run.
    pub sectors_per_ms: f64,
    /// FLUSH costs and write-buffer use (SSDs with a write-back buffer or a DRAM map).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flush: Option<FlushReport>,
    /// Distinct client I/O contexts (a workload's processes, per volume) whose
    /// operations reached the device; 0 (not printed) when no workload names them.
    #[serde(skip_serializing_if = "is_zero")]
    pub client_contexts: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What FLUSH commands cost on a device (seed 001's Figures 2, 6 and 7).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FlushReport {
    /// `all` or `tagged`.
    pub mode: String,
    pub stats: tiervisor_model::FlushStats,
    pub mean_latency_us: f64,
    /// (seconds since the workloads started, fraction of the write buffer in use).
    pub buffer_utilisation: Vec<(f64, f64)>,
    /// FLUSH latency by who asked (the device tag's volume, or the host), the whole run.
    pub by_tag: Vec<TagFlushes>,
}

/// The FLUSHes one tag sent: how many, and their latency's mean and spread.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TagFlushes {
    /// The volume whose tag it is, or `host` (tag 0: the engine's own metadata).
    pub who: String,
    pub flushes: u64,
    pub mean_us: f64,
    pub median_us: f64,
    pub p90_us: f64,
    pub max_us: f64,
}

impl TagFlushes {
    /// Group `(tag, latency ns)` pairs by tag, naming each with `who(tag)`; ordered by tag.
    pub fn by_tag(latencies_ns: &[(u32, u64)], who: impl Fn(u32) -> String) -> Vec<TagFlushes> {
        let mut tags: std::collections::BTreeMap<u32, Vec<u64>> = Default::default();
        for &(tag, ns) in latencies_ns {
            tags.entry(tag).or_default().push(ns);
        }
        tags.into_iter()
            .map(|(tag, mut v)| {
                v.sort_unstable();
                // Nearest rank: the smallest latency at or above that share of FLUSHes.
                let rank = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
                TagFlushes {
                    who: who(tag),
                    flushes: v.len() as u64,
                    mean_us: v.iter().sum::<u64>() as f64 / v.len() as f64 / 1e3,
                    median_us: rank(0.5) as f64 / 1e3,
                    p90_us: rank(0.9) as f64 / 1e3,
                    max_us: rank(1.0) as f64 / 1e3,
                }
            })
            .collect()
    }
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SimReport {
    pub scenario: String,
    pub seed: u64,
    pub sim_time_s: f64,
    /// The only field that differs between identical runs.
    pub wall_time_s: f64,
    pub ios: u64,
    pub vms: BTreeMap<String, VmReport>,
    pub volumes: BTreeMap<String, VolumeReport>,
    pub devices: BTreeMap<String, DeviceReport>,
    /// The log-structured write path, per pool that has one.
    pub logs: BTreeMap<String, tiervisor_engine::LogReport>,
    /// The virtual performance throttle, per pool that has one (seed 003).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub throttles: BTreeMap<String, tiervisor_engine::ThrottleReport>,
    /// Throughput over time (scenarios with `sample_interval_s`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<Sample>,
    /// Live storage migrations the scenario started (`[[migration]]`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub migrations: Vec<MigrationReport>,
    /// Per shard, with `shards` > 1 (empty, and left out, with one).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shards: Vec<ShardReport>,
}

/// One shard's share of the run (issue 18): an overloaded shard shows here.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ShardReport {
    pub shard: u16,
    pub volumes: Vec<String>,
    /// VM requests submitted to the shard, and device operations it issued (formatting
    /// and prefill included).
    pub requests: u64,
    pub device_ops: u64,
    /// Budget commands the broker sent it (`shard_budgets = "demand"`), and the write
    /// buffer (summed over pools) it had at the end.
    pub budget_commands: u64,
    pub write_buffer_bytes: u64,
    /// Times its dispatch waited at a pool's device-share gate (`shard_qos = "pool"`).
    pub gate_waits: u64,
}

/// One live storage migration: seed 004's metrics, times from the workloads' start.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MigrationReport {
    pub volume: String,
    pub scheme: String,
    /// Why `auto` picked the scheme (empty when it was given).
    pub why: String,
    /// The workload as the engine saw it when the job started (`auto`'s input).
    pub profile: tiervisor_engine::jobs::migrate::WorkloadProfile,
    pub from: Vec<String>,
    pub to: String,
    /// done, cancelled, failed, or where it was when the run ended.
    pub phase: String,
    pub error: Option<String>,
    pub started_s: f64,
    pub image_copied_s: Option<f64>,
    pub finished_s: Option<f64>,
    pub migration_time_s: Option<f64>,
    /// From the start until every chunk was copied once.
    pub image_copy_time_s: Option<f64>,
    /// The pivot's pause (requests wait until the switch is made in memory).
    pub downtime_ms: f64,
    /// From the pause until the switch is durable (FLUSH and FUA wait for it).
    pub pivot_durable_ms: f64,
    pub copied_bytes: u64,
    /// Written to the destination twice or needlessly (DBT recopies, duplicates).
    pub redundant_bytes: u64,
    pub mirrored_bytes: u64,
    /// VM bytes written during the migration, and those that reached an SSD pool.
    pub vm_write_bytes: u64,
    pub ssd_write_bytes: u64,
    pub passes: u32,
    pub aio_delays: u64,
    /// DBT's dirty chunks copied whole (`coalesce_runs`).
    pub whole_chunk_copies: u64,
    /// The volume's VM requests per second before the migration started (None when it
    /// started with the workloads) and during it (None when it did not finish).
    pub iops_before: Option<f64>,
    pub iops_during: Option<f64>,
    /// Seed 004's cost for the job's gamma (`MigrationStatus::cost`: None when the volume
    /// had no requests before the job or nothing to copy).
    pub gamma: f64,
    pub lambda_io: Option<f64>,
    pub lambda_migration_time: Option<f64>,
    pub lambda_wear: Option<f64>,
    pub mc: Option<f64>,
}

/// One interval of a run.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Sample {
    /// End of the interval, from the start of the workloads.
    pub t_s: f64,
    /// VM bytes written per second during the interval.
    pub write_mb_per_s: f64,
    /// Bytes the cleaner copied per second during the interval.
    pub cleaner_mb_per_s: f64,
    /// Log write amplification over the interval (appended / VM bytes logged).
    pub log_waf: f64,
    /// Free log segments at the end of the interval (summed over pools).
    pub free_segments: u64,
}

impl SimReport {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Simulated I/Os per wall-clock second.
    pub fn ios_per_wall_s(&self) -> f64 {
        if self.wall_time_s > 0.0 {
            self.ios as f64 / self.wall_time_s
        } else {
            0.0
        }
    }

    pub fn to_table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "scenario {}  seed {}  simulated {:.3} s  wall {:.3} s  {} I/Os ({:.0} simulated I/Os per wall second)",
            self.scenario,
            self.seed,
            self.sim_time_s,
            self.wall_time_s,
            self.ios,
            self.ios_per_wall_s()
        );
        let _ = writeln!(
            s,
            "\n{:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "volume", "ios", "iops", "MB/s", "exec s", "mean us", "p50 us", "p99 us", "max us"
        );
        for (n, v) in &self.volumes {
            let _ = writeln!(
                s,
                "{:<16} {:>10} {:>10.1} {:>10.2} {:>10.3} {:>10.1} {:>10.1} {:>10.1} {:>10.1}",
                n,
                v.ios,
                v.iops,
                v.mb_per_s,
                v.exec_time_s,
                v.lat_us.mean,
                v.lat_us.p50,
                v.lat_us.p99,
                v.lat_us.max
            );
        }
        let _ = writeln!(
            s,
            "\n{:<16} {:<20} {:>10} {:>8} {:>14} {:>14} {:>8} {:>6}",
            "device", "model", "busy s", "util", "host write B", "media write B", "erases", "WAF"
        );
        for (n, d) in &self.devices {
            let _ = writeln!(
                s,
                "{:<16} {:<20} {:>10.3} {:>7.1}% {:>14} {:>14} {:>8} {:>6.2}",
                n,
                d.model,
                d.busy_s,
                d.utilisation * 100.0,
                d.host_write_bytes,
                d.media_write_bytes,
                d.erases,
                d.waf
            );
        }
        for (n, t) in &self.throttles {
            let _ = writeln!(
                s,
                "\nthrottle {n}: {} k {:.2}{}, {} ops, model X mean {:.2} ms, service mean {:.2} ms, added delay {:.3} s, {} late, {} predicted cache hits",
                t.model,
                t.k,
                if t.adapt { " (adapting)" } else { "" },
                t.ops,
                t.model_service_ns as f64 / 1e6 / t.ops.max(1) as f64,
                t.mean_service_ms,
                t.added_delay_ns as f64 / 1e9,
                t.late,
                t.cache_hits
            );
        }
        if !self.shards.is_empty() {
            let _ = writeln!(
                s,
                "\n{:<6} {:>12} {:>12} {:>8} {:>9} {:>10}  volumes",
                "shard", "requests", "device ops", "budgets", "wbuf MiB", "gate waits"
            );
            for r in &self.shards {
                let _ = writeln!(
                    s,
                    "{:<6} {:>12} {:>12} {:>8} {:>9.1} {:>10}  {}",
                    r.shard,
                    r.requests,
                    r.device_ops,
                    r.budget_commands,
                    r.write_buffer_bytes as f64 / (1 << 20) as f64,
                    r.gate_waits,
                    r.volumes.join(" ")
                );
            }
        }
        self.migrations_table(&mut s);
        if !self.logs.is_empty() {
            let _ = writeln!(
                s,
                "\n{:<16} {:>12} {:>12} {:>9} {:>14} {:>12} {:>10} {:>6}",
                "log",
                "VM MiB",
                "appended MiB",
                "appends",
                "cleaner MiB",
                "cleaned segs",
                "fallbacks",
                "WAF"
            );
            for (n, l) in &self.logs {
                let _ = writeln!(
                    s,
                    "{:<16} {:>12.1} {:>12.1} {:>9} {:>14.1} {:>12} {:>10} {:>6.2}",
                    n,
                    l.user_bytes as f64 / 1048576.0,
                    l.append_bytes as f64 / 1048576.0,
                    l.appends,
                    l.cleaner_bytes as f64 / 1048576.0,
                    l.segments_cleaned,
                    l.home_fallbacks,
                    l.write_amplification
                );
            }
        }
        s
    }
}

impl SimReport {
    fn migrations_table(&self, s: &mut String) {
        if self.migrations.is_empty() {
            return;
        }
        let _ = writeln!(
            s,
            "\n{:<16} {:<7} {:<10} {:>8} {:>9} {:>11} {:>10} {:>12} {:>12} {:>12} {:>10} {:>9} {:>9} {:>9} {:>9} {:>6}",
            "migration",
            "scheme",
            "phase",
            "start s",
            "time s",
            "downtime ms",
            "durable ms",
            "copied MiB",
            "redund. MiB",
            "SSD wr MiB",
            "IOPS",
            "l_IO",
            "l_time",
            "l_wear",
            "MC",
            "gamma"
        );
        let opt = |x: Option<f64>| x.map_or("-".into(), |v| format!("{v:.3}"));
        let mib = |b: u64| b as f64 / 1048576.0;
        for m in &self.migrations {
            let _ = writeln!(
                s,
                "{:<16} {:<7} {:<10} {:>8.3} {:>9} {:>11.3} {:>10.3} {:>12.1} {:>12.1} {:>12.1} {:>10} {:>9} {:>9} {:>9} {:>9} {:>6.2}",
                format!("{} -> {}", m.volume, m.to),
                m.scheme,
                m.phase,
                m.started_s,
                m.migration_time_s.map_or("-".into(), |t| format!("{t:.3}")),
                m.downtime_ms,
                m.pivot_durable_ms,
                mib(m.copied_bytes),
                mib(m.redundant_bytes),
                mib(m.ssd_write_bytes),
                m.iops_during.map_or("-".into(), |r| format!("{r:.0}")),
                opt(m.lambda_io),
                opt(m.lambda_migration_time),
                opt(m.lambda_wear),
                opt(m.mc),
                m.gamma,
            );
            if let Some(e) = &m.error {
                let _ = writeln!(s, "  error: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TagFlushes;

    #[test]
    fn flushes_are_grouped_by_tag_with_nearest_rank_percentiles() {
        let ns = |us: u64| us * 1000;
        let mut lat: Vec<(u32, u64)> = (1..=10).map(|us| (2, ns(us))).collect();
        lat.push((0, ns(7)));
        lat.insert(3, (2, ns(100)));
        let t = TagFlushes::by_tag(&lat, |tag| format!("t{tag}"));
        assert_eq!(t.len(), 2);
        assert_eq!(
            (t[0].who.as_str(), t[0].flushes, t[0].median_us),
            ("t0", 1, 7.0)
        );
        // 1..=10 and 100: the 6th of 11 is 6, the 10th is 10, the mean is 155 / 11.
        assert_eq!(
            (t[1].flushes, t[1].median_us, t[1].p90_us, t[1].max_us),
            (11, 6.0, 10.0, 100.0)
        );
        assert!((t[1].mean_us - 155.0 / 11.0).abs() < 1e-9);
    }
}
