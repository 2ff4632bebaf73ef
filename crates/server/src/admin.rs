//! The admin socket (`tiervisor ctl`) and the Prometheus metrics endpoint.
//!
//! Admin protocol: the client sends one line (`stat` or `shutdown`, or the JSON
//! `{"cmd": "stat"}`, `{"cmd": "qos", ...}`, `{"cmd": "migrate", ...}`, `{"cmd": "volume", ...}`), the server
//! answers with one JSON document and closes.

use std::io::{Read, Write};
use std::path::Path;

use mio::net::{TcpStream, UnixStream};
use serde_json::json;
use tiervisor_engine::Engine;

use crate::server::ServerStats;

pub enum ClientStream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    Admin,
    Metrics,
}

/// A short-lived admin or metrics client.
pub struct Client {
    stream: ClientStream,
    pub kind: ClientKind,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    answered: bool,
    closed: bool,
    pub shutdown_requested: bool,
}

pub struct Reply {
    pub body: Vec<u8>,
    pub shutdown: bool,
    /// `ctl volume delete --force`: close the connections to this export.
    pub disconnect: Option<String>,
}

const MAX_REQUEST_BYTES: usize = 16 << 10;

impl Client {
    pub fn new(stream: ClientStream, kind: ClientKind) -> Client {
        Client {
            stream,
            kind,
            inbuf: Vec::new(),
            outbuf: Vec::new(),
            answered: false,
            closed: false,
            shutdown_requested: false,
        }
    }

    pub fn source(&mut self) -> &mut dyn mio::event::Source {
        match &mut self.stream {
            ClientStream::Unix(s) => s,
            ClientStream::Tcp(s) => s,
        }
    }

    fn io(&mut self) -> &mut dyn ReadWrite {
        match &mut self.stream {
            ClientStream::Unix(s) => s,
            ClientStream::Tcp(s) => s,
        }
    }

    /// The complete request, once it has arrived.
    pub fn read_request(&mut self) -> Option<String> {
        if self.answered || self.closed {
            return None;
        }
        let mut b = [0u8; 4096];
        loop {
            match self.io().read(&mut b) {
                Ok(0) => {
                    self.closed = true;
                    break;
                }
                Ok(n) => {
                    self.inbuf.extend_from_slice(&b[..n]);
                    if self.inbuf.len() > MAX_REQUEST_BYTES {
                        self.closed = true;
                        return None;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let end: &[u8] = if self.kind == ClientKind::Metrics {
            b"\r\n\r\n"
        } else {
            b"\n"
        };
        let complete = self.inbuf.windows(end.len()).any(|w| w == end)
            || (self.closed && !self.inbuf.is_empty());
        complete.then(|| String::from_utf8_lossy(&self.inbuf).into_owned())
    }

    pub fn respond(&mut self, body: Vec<u8>) {
        self.outbuf = body;
        self.answered = true;
    }

    pub fn write_some(&mut self) {
        while !self.outbuf.is_empty() {
            let buf = std::mem::take(&mut self.outbuf);
            match self.io().write(&buf) {
                Ok(n) => self.outbuf = buf[n..].to_vec(),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    self.outbuf = buf;
                    return;
                }
                Err(_) => {
                    self.closed = true;
                    return;
                }
            }
        }
    }

    pub fn done(&self) -> bool {
        (self.answered && self.outbuf.is_empty()) || (self.closed && !self.answered)
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// Everything `ctl stat` shows, as JSON.
pub fn stat_json(engine: &Engine, now: u64, server: &ServerStats) -> serde_json::Value {
    json!({
        "engine": engine.report(),
        "server": server,
        "migrations": crate::admin_migrate::migrations_json(engine, now),
    })
}

/// Answer one admin request. Commands that change the engine (`qos`) go through
/// `Engine::control` at `now`; what it needs done is appended to `out` for the server's loop.
pub fn admin_reply(
    req: &str,
    engine: &mut Engine,
    now: u64,
    out: &mut tiervisor_engine::Outputs,
    server: &ServerStats,
) -> Reply {
    let line = req.trim();
    let parsed = serde_json::from_str::<serde_json::Value>(line).ok();
    let cmd = parsed
        .as_ref()
        .and_then(|v| v.get("cmd").and_then(|c| c.as_str()).map(str::to_string))
        .unwrap_or_else(|| line.to_string());
    let (v, shutdown) = match cmd.as_str() {
        "stat" => (stat_json(engine, now, server), false),
        "shutdown" => (json!({"ok": true, "message": "shutting down"}), true),
        "qos" => (
            set_qos(parsed.as_ref(), engine, now, out).unwrap_or_else(|e| json!({ "error": e })),
            false,
        ),
        "migrate" => (
            crate::admin_migrate::migrate(parsed.as_ref(), engine, now, out)
                .unwrap_or_else(|e| json!({ "error": e })),
            false,
        ),
        "volume" => (
            crate::admin_volume::volume(parsed.as_ref(), engine, now, out, server)
                .unwrap_or_else(|e| json!({ "error": e })),
            false,
        ),
        other => (
            json!({"error": format!("unknown command {other:?}; expected stat, qos, migrate, volume or shutdown")}),
            false,
        ),
    };
    let disconnect = (v["disconnect"].as_bool() == Some(true))
        .then(|| v["volume"].as_str().map(str::to_string))
        .flatten();
    let mut body = serde_json::to_vec(&v).unwrap_or_default();
    body.push(b'\n');
    Reply {
        body,
        shutdown,
        disconnect,
    }
}

/// `{"cmd": "qos", "volume": NAME, "limit_iops": N, "reservation_iops": N, "weight": W}`:
/// the keys given replace the volume's current QoS, the others stay.
fn set_qos(
    req: Option<&serde_json::Value>,
    engine: &mut Engine,
    now: u64,
    out: &mut tiervisor_engine::Outputs,
) -> Result<serde_json::Value, String> {
    let req = req.ok_or("qos: expected a JSON request {\"cmd\": \"qos\", \"volume\": ...}")?;
    let name = req["volume"]
        .as_str()
        .ok_or("qos: expected \"volume\": a volume name")?;
    let id = engine
        .volume_id(name)
        .ok_or_else(|| format!("qos: no volume {name:?}"))?;
    let mut qos = engine
        .report()
        .volumes
        .iter()
        .find(|v| v.name == name)
        .map(|v| v.qos)
        .unwrap_or_default();
    let num = |k: &str| -> Result<Option<u32>, String> {
        match &req[k] {
            serde_json::Value::Null => Ok(None),
            v => v
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| format!("qos: {k} = {v}: expected a whole number")),
        }
    };
    if let Some(n) = num("limit_iops")? {
        qos.limit_iops = n;
    }
    if let Some(n) = num("reservation_iops")? {
        qos.reservation_iops = n;
    }
    if let Some(n) = num("weight")? {
        qos.weight = n;
    }
    engine
        .control(
            now,
            tiervisor_engine::Control::SetQos { volume: id, qos },
            out,
        )
        .map_err(|e| format!("qos: {name}: {e}"))?;
    Ok(json!({ "ok": true, "volume": name, "qos": qos }))
}

/// Prometheus text exposition of the same counters.
pub fn metrics_text(engine: &Engine, server: &ServerStats) -> String {
    use std::fmt::Write as _;
    let r = engine.report();
    let mut s = String::new();
    let mut family = |name: &str, help: &str, kind: &str, rows: Vec<(String, f64)>| {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in rows {
            if labels.is_empty() {
                let _ = writeln!(s, "{name} {v}");
            } else {
                let _ = writeln!(s, "{name}{{{labels}}} {v}");
            }
        }
    };
    let vol = |f: &dyn Fn(&tiervisor_engine::VolumeReport) -> Vec<(String, f64)>| {
        r.volumes.iter().flat_map(f).collect::<Vec<_>>()
    };
    family(
        "tiervisor_volume_requests_total",
        "Requests completed per volume and kind.",
        "counter",
        vol(&|v| {
            [
                ("read", &v.read),
                ("write", &v.write),
                ("flush", &v.flush),
                ("trim", &v.trim),
                ("write_zeroes", &v.write_zeroes),
            ]
            .iter()
            .map(|(k, s)| {
                (
                    format!("volume=\"{}\",kind=\"{k}\"", label(&v.name)),
                    s.requests as f64,
                )
            })
            .collect()
        }),
    );
    family(
        "tiervisor_volume_bytes_total",
        "Bytes read and written per volume.",
        "counter",
        vol(&|v| {
            vec![
                (
                    format!("volume=\"{}\",kind=\"read\"", label(&v.name)),
                    v.read.bytes as f64,
                ),
                (
                    format!("volume=\"{}\",kind=\"write\"", label(&v.name)),
                    v.write.bytes as f64,
                ),
            ]
        }),
    );
    family(
        "tiervisor_volume_errors_total",
        "Requests that failed, per volume.",
        "counter",
        vol(&|v| {
            vec![(
                format!("volume=\"{}\"", label(&v.name)),
                (v.read.errors
                    + v.write.errors
                    + v.flush.errors
                    + v.trim.errors
                    + v.write_zeroes.errors) as f64,
            )]
        }),
    );
    family(
        "tiervisor_volume_latency_seconds",
        "Request latency quantiles per volume.",
        "gauge",
        vol(&|v| {
            [
                ("0.5", v.latency.p50_us),
                ("0.99", v.latency.p99_us),
                ("0.999", v.latency.p999_us),
            ]
            .iter()
            .map(|(q, us)| {
                (
                    format!("volume=\"{}\",quantile=\"{q}\"", label(&v.name)),
                    us / 1e6,
                )
            })
            .collect()
        }),
    );
    family(
        "tiervisor_volume_chunks",
        "Mapped chunks of each volume per pool.",
        "gauge",
        vol(&|v| {
            v.chunks_by_pool
                .iter()
                .map(|(p, n)| {
                    (
                        format!("volume=\"{}\",pool=\"{}\"", label(&v.name), label(p)),
                        *n as f64,
                    )
                })
                .collect()
        }),
    );
    family(
        "tiervisor_pool_used_bytes",
        "Bytes allocated in each pool.",
        "gauge",
        r.pools
            .iter()
            .map(|p| (format!("pool=\"{}\"", label(&p.name)), p.used_bytes as f64))
            .collect(),
    );
    family(
        "tiervisor_pool_capacity_bytes",
        "Capacity of each pool.",
        "gauge",
        r.pools
            .iter()
            .map(|p| {
                (
                    format!("pool=\"{}\"", label(&p.name)),
                    p.capacity_bytes as f64,
                )
            })
            .collect(),
    );
    family(
        "tiervisor_pool_io_bytes_total",
        "Device bytes per pool, direction and class.",
        "counter",
        r.pools
            .iter()
            .flat_map(|p| {
                [
                    ("foreground", p.io.foreground),
                    ("metadata", p.io.metadata),
                    ("migration", p.io.migration),
                    ("cleaner", p.io.cleaner),
                ]
                .into_iter()
                .flat_map(|(c, k)| {
                    [
                        (
                            format!("pool=\"{}\",dir=\"read\",class=\"{c}\"", label(&p.name)),
                            k.read_bytes as f64,
                        ),
                        (
                            format!("pool=\"{}\",dir=\"write\",class=\"{c}\"", label(&p.name)),
                            k.write_bytes as f64,
                        ),
                    ]
                })
                .collect::<Vec<_>>()
            })
            .collect(),
    );
    // Flush and commit latency: histograms (cumulative buckets, sum, count).
    for (name, help, pick) in [
        (
            "tiervisor_volume_flush_latency_seconds",
            "FLUSH request latency per volume.",
            (|v: &tiervisor_engine::VolumeReport| &v.flush_histogram)
                as fn(
                    &tiervisor_engine::VolumeReport,
                ) -> &tiervisor_engine::stats::LatencyHistogram,
        ),
        (
            "tiervisor_volume_commit_latency_seconds",
            "Journal commit round latency per volume (data flush, records, checkpoint).",
            |v: &tiervisor_engine::VolumeReport| &v.commit_histogram,
        ),
    ] {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} histogram");
        for v in &r.volumes {
            let h = pick(v);
            let l = label(&v.name);
            for (le, n) in h.le_seconds.iter().zip(&h.counts) {
                let _ = writeln!(s, "{name}_bucket{{volume=\"{l}\",le=\"{le}\"}} {n}");
            }
            let _ = writeln!(s, "{name}_bucket{{volume=\"{l}\",le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(s, "{name}_sum{{volume=\"{l}\"}} {}", h.sum_seconds);
            let _ = writeln!(s, "{name}_count{{volume=\"{l}\"}} {}", h.count);
        }
    }
    let mut family = |name: &str, help: &str, kind: &str, rows: Vec<(String, f64)>| {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, v) in rows {
            if labels.is_empty() {
                let _ = writeln!(s, "{name} {v}");
            } else {
                let _ = writeln!(s, "{name}{{{labels}}} {v}");
            }
        }
    };
    let per_vol = |f: &dyn Fn(&tiervisor_engine::VolumeReport) -> f64| {
        r.volumes
            .iter()
            .map(|v| (format!("volume=\"{}\"", label(&v.name)), f(v)))
            .collect::<Vec<_>>()
    };
    family(
        "tiervisor_volume_journal_used_bytes",
        "Journal ring bytes holding records a checkpoint does not cover yet.",
        "gauge",
        per_vol(&|v| v.journal_used_bytes as f64),
    );
    family(
        "tiervisor_volume_journal_ring_bytes",
        "Size of each volume's journal ring.",
        "gauge",
        per_vol(&|v| v.journal_ring_bytes as f64),
    );
    family(
        "tiervisor_volume_journal_commits_total",
        "Journal commit rounds that succeeded.",
        "counter",
        per_vol(&|v| v.journal_commits as f64),
    );
    family(
        "tiervisor_volume_commit_failures_total",
        "Journal commit rounds that failed (their records are retried).",
        "counter",
        per_vol(&|v| v.commit_failures as f64),
    );
    family(
        "tiervisor_volume_checkpoints_total",
        "Checkpoints written per volume.",
        "counter",
        per_vol(&|v| v.checkpoints as f64),
    );
    // `cache` placement: each cache volume's cache.
    let per_cache = |f: &dyn Fn(&tiervisor_engine::CacheReport) -> Vec<(&'static str, f64)>| {
        r.volumes
            .iter()
            .filter_map(|v| Some((&v.name, v.cache.as_ref()?)))
            .flat_map(|(n, c)| {
                f(c).into_iter()
                    .map(move |(extra, x)| (format!("volume=\"{}\"{extra}", label(n)), x))
            })
            .collect::<Vec<_>>()
    };
    family(
        "tiervisor_cache_chunks",
        "Chunks a cache volume holds on its fast pool, clean and dirty (not yet written back).",
        "gauge",
        per_cache(&|c| {
            vec![
                (
                    ",state=\"clean\"",
                    (c.cached_chunks - c.dirty_chunks) as f64,
                ),
                (",state=\"dirty\"", c.dirty_chunks as f64),
            ]
        }),
    );
    family(
        "tiervisor_cache_fills_total",
        "Chunks copied from the slow pool into a cache volume's cache.",
        "counter",
        per_cache(&|c| vec![("", c.counts.fills as f64)]),
    );
    family(
        "tiervisor_cache_evictions_total",
        "Chunks evicted from a cache volume's cache: clean ones (no I/O) and dirty ones (written back first).",
        "counter",
        per_cache(&|c| {
            vec![
                (",kind=\"clean\"", c.counts.evictions_clean as f64),
                (",kind=\"dirty\"", c.counts.evictions_dirty as f64),
            ]
        }),
    );
    family(
        "tiervisor_cache_writebacks_total",
        "Writebacks of dirty cached chunks completed (background cleaning and evictions).",
        "counter",
        per_cache(&|c| vec![("", c.counts.writebacks as f64)]),
    );
    family(
        "tiervisor_cache_writeback_bytes_total",
        "Bytes the writebacks copied from the fast pool to the slow pool.",
        "counter",
        per_cache(&|c| vec![("", c.counts.writeback_bytes as f64)]),
    );
    family(
        "tiervisor_cache_dirty_at_mount_chunks",
        "Chunks cached when the volume was mounted, all counted dirty (clean/dirty is not journaled).",
        "gauge",
        per_cache(&|c| vec![("", c.counts.dirty_at_mount as f64)]),
    );
    let per_pool = |f: &dyn Fn(&tiervisor_engine::PoolReport) -> f64| {
        r.pools
            .iter()
            .map(|p| (format!("pool=\"{}\"", label(&p.name)), f(p)))
            .collect::<Vec<_>>()
    };
    family(
        "tiervisor_pool_errors_total",
        "Device operations on each pool that failed.",
        "counter",
        per_pool(&|p| p.io.errors as f64),
    );
    family(
        "tiervisor_pool_nospace_errors_total",
        "Pool writes that failed for want of space (ENOSPC, EDQUOT).",
        "counter",
        per_pool(&|p| p.io.nospace_errors as f64),
    );
    // The virtual performance throttle (seed 003), on the pools that have one.
    let per_throttle = |f: &dyn Fn(&tiervisor_engine::ThrottleReport) -> f64| {
        r.pools
            .iter()
            .filter_map(|p| Some((&p.name, p.throttle.as_ref()?)))
            .map(|(n, t)| (format!("pool=\"{}\"", label(n)), f(t)))
            .collect::<Vec<_>>()
    };
    family(
        "tiervisor_throttle_k",
        "The throttle's scale factor k: completions are held until k times the model's service time.",
        "gauge",
        per_throttle(&|t| t.k),
    );
    family(
        "tiervisor_throttle_ops_total",
        "Device operations the throttle gave a target completion time.",
        "counter",
        per_throttle(&|t| t.ops as f64),
    );
    family(
        "tiervisor_throttle_late_total",
        "Completions that arrived after their target (k too small for the device).",
        "counter",
        per_throttle(&|t| t.late as f64),
    );
    family(
        "tiervisor_throttle_added_delay_seconds_total",
        "Time completions were held past their real completion.",
        "counter",
        per_throttle(&|t| t.added_delay_ns as f64 / 1e9),
    );
    family(
        "tiervisor_throttle_held",
        "Completions held by the throttle now.",
        "gauge",
        per_throttle(&|t| t.held_now as f64),
    );
    let logs: Vec<(&str, &tiervisor_engine::LogReport)> = r
        .pools
        .iter()
        .filter_map(|p| Some((p.name.as_str(), p.log.as_ref()?)))
        .collect();
    let per_log = |f: &dyn Fn(&tiervisor_engine::LogReport) -> f64| {
        logs.iter()
            .map(|(p, l)| (format!("pool=\"{}\"", label(p)), f(l)))
            .collect::<Vec<_>>()
    };
    family(
        "tiervisor_log_free_segments",
        "Free log segments per pool (the cleaner starts below its threshold).",
        "gauge",
        per_log(&|l| l.free_segments as f64),
    );
    family(
        "tiervisor_log_segments_cleaned_total",
        "Log segments the cleaner emptied.",
        "counter",
        per_log(&|l| l.segments_cleaned as f64),
    );
    family(
        "tiervisor_log_cleaner_bytes_total",
        "Bytes the cleaner copied forward.",
        "counter",
        per_log(&|l| l.cleaner_bytes as f64),
    );
    // Live storage migration: each volume's running or last job.
    let migrations = engine.migrations();
    let per_job = |f: &dyn Fn(&tiervisor_engine::jobs::migrate::MigrationStatus) -> f64| {
        migrations
            .iter()
            .map(|m| (format!("volume=\"{}\"", label(&m.volume)), f(m)))
            .collect::<Vec<_>>()
    };
    family(
        "tiervisor_migration_copied_bytes_total",
        "Bytes a volume's live migration copied to its destination (recopies included).",
        "counter",
        per_job(&|m| m.stats.copied_bytes as f64),
    );
    family(
        "tiervisor_migration_redundant_bytes_total",
        "Bytes written to the destination twice or needlessly (DBT recopies, mirrored duplicates).",
        "counter",
        per_job(&|m| m.stats.redundant_bytes as f64),
    );
    family(
        "tiervisor_migration_dirty_bytes",
        "Bytes DBT still has to recopy.",
        "gauge",
        per_job(&|m| m.stats.dirty_bytes as f64),
    );
    family(
        "tiervisor_migration_copied_ratio",
        "Share of the volume's chunks copied once (0 to 1).",
        "gauge",
        per_job(&|m| m.percent_copied() / 100.0),
    );
    family(
        "tiervisor_migration_rate_bytes_per_second",
        "The migration's copy rate cap.",
        "gauge",
        per_job(&|m| m.rate_bytes_per_s as f64),
    );
    family(
        "tiervisor_migration_downtime_seconds",
        "How long the last pivot paused the volume.",
        "gauge",
        per_job(&|m| m.stats.downtime_ns as f64 / 1e9),
    );
    family(
        "tiervisor_migration_pivot_durable_seconds",
        "From the last pivot's pause until its switch was durable (FLUSH and FUA wait for it; other requests run from the end of the pause).",
        "gauge",
        per_job(&|m| m.stats.pivot_durable_ns as f64 / 1e9),
    );
    family(
        "tiervisor_migration_phase",
        "1 for the phase each volume's migration is in (copying, draining, final-copy, committing, cancelling, done, cancelled, failed).",
        "gauge",
        migrations
            .iter()
            .map(|m| {
                (
                    format!(
                        "volume=\"{}\",scheme=\"{}\",to=\"{}\",phase=\"{}\"",
                        label(&m.volume),
                        m.scheme.name(),
                        label(
                            engine
                                .config()
                                .pools
                                .get(m.to.0 as usize)
                                .map_or("?", |p| p.name.as_str())
                        ),
                        m.phase.name()
                    ),
                    1.0,
                )
            })
            .collect(),
    );
    family(
        "tiervisor_connections",
        "Open NBD connections per export.",
        "gauge",
        server
            .connections_per_export
            .iter()
            .map(|(e, n)| (format!("export=\"{}\"", label(e)), *n as f64))
            .collect(),
    );
    family(
        "tiervisor_connection_inflight_bytes",
        "Request payload bytes each open connection holds (read, not yet answered or sent).",
        "gauge",
        server
            .inflight_per_connection
            .iter()
            .map(|(k, peer, e, n)| {
                (
                    format!(
                        "conn=\"{k}\",peer=\"{}\",export=\"{}\"",
                        label(peer),
                        label(e)
                    ),
                    *n as f64,
                )
            })
            .collect(),
    );
    let space = |f: &dyn Fn(&crate::space::PoolSpace) -> f64| {
        server
            .pool_space
            .iter()
            .map(|p| (format!("pool=\"{}\"", label(&p.pool)), f(p)))
            .collect::<Vec<_>>()
    };
    family(
        "tiervisor_pool_space_low",
        "1 if the file pools on this pool's filesystem may grow past its free space.",
        "gauge",
        space(&|p| f64::from(u8::from(p.low))),
    );
    family(
        "tiervisor_pool_growth_bytes",
        "How much more the pool's sparse file may take from its filesystem.",
        "gauge",
        space(&|p| p.growth_bytes as f64),
    );
    family(
        "tiervisor_pool_fs_free_bytes",
        "Free bytes of the filesystem under the pool's file.",
        "gauge",
        space(&|p| p.fs_free_bytes as f64),
    );
    let shard = |f: &dyn Fn(&crate::server::ShardFigures) -> f64| {
        server
            .shards
            .iter()
            .map(|s| (format!("shard=\"{}\"", s.shard), f(s)))
            .collect::<Vec<_>>()
    };
    family(
        "tiervisor_shard_requests_total",
        "NBD requests taken per shard (issue 18: one engine and thread per shard).",
        "counter",
        shard(&|s| s.requests as f64),
    );
    family(
        "tiervisor_shard_cpu_seconds_total",
        "CPU time of each shard's thread (with one shard, also the front's).",
        "counter",
        shard(&|s| s.cpu_s),
    );
    family(
        "tiervisor_shard_requests_in_flight",
        "Requests each shard has taken and not yet answered.",
        "gauge",
        shard(&|s| s.requests_in_flight as f64),
    );
    family(
        "tiervisor_shard_device_ops_in_flight",
        "Device operations each shard's I/O backend has not yet completed.",
        "gauge",
        shard(&|s| s.device_ops_in_flight as f64),
    );
    family(
        "tiervisor_shard_write_buffer_bytes",
        "Each shard's write buffer budget in force, over its pools (moved by demand).",
        "gauge",
        shard(&|s| s.write_buffer_bytes as f64),
    );
    family(
        "tiervisor_shard_budget_changes_total",
        "Budget changes the front's broker sent each shard (issue 18).",
        "counter",
        shard(&|s| s.budget_commands as f64),
    );
    family(
        "tiervisor_shard_borrowed_runs",
        "Runs of other shards' chunks each shard holds borrowed (issue 18).",
        "gauge",
        shard(&|s| s.borrowed_runs as f64),
    );
    family(
        "tiervisor_shard_runs_given_back_total",
        "Borrowed runs each shard gave back to the shard that lent them, since start.",
        "counter",
        shard(&|s| s.runs_given_back as f64),
    );
    let share = |f: &dyn Fn(&crate::server::DeviceShareFigure) -> f64| {
        (server.shards.iter())
            .flat_map(|s| {
                (s.device_shares.iter())
                    .map(move |d| (format!("shard=\"{}\",pool=\"{}\"", s.shard, d.pool), f(d)))
            })
            .collect::<Vec<_>>()
    };
    family(
        "tiervisor_shard_device_share",
        "Each shard's share of each pool's device (issue 12; 0 until the broker sets it).",
        "gauge",
        share(&|d| d.share),
    );
    family(
        "tiervisor_shard_device_gate_iops",
        "Operations per second each shard's gate lets through to a pool (0: open).",
        "gauge",
        share(&|d| f64::from(d.gate_iops)),
    );
    family(
        "tiervisor_shard_device_gate_waits_total",
        "Times a shard's dispatch to a pool waited at its device-share gate.",
        "counter",
        share(&|d| d.gate_waits as f64),
    );
    family(
        "tiervisor_protocol_errors_total",
        "Connections closed for protocol violations.",
        "counter",
        vec![(String::new(), server.protocol_errors as f64)],
    );
    family(
        "tiervisor_vhost_lost_flush_reports_total",
        "vhost-user FLUSHes failed to report writes an unclean stop may have lost.",
        "counter",
        vec![(String::new(), server.vhost_lost_flush_reports as f64)],
    );
    s
}

/// A label value in the Prometheus text format: backslash, double quote and line feed are
/// escaped, so a volume named `a"b` cannot break the scrape.
fn label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

pub fn metrics_reply(engine: &Engine, server: &ServerStats) -> Reply {
    metrics_http(metrics_text(engine, server))
}

/// The HTTP answer carrying a metrics exposition.
pub fn metrics_http(body: String) -> Reply {
    let mut out = format!("HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    Reply {
        body: out,
        shutdown: false,
        disconnect: None,
    }
}

/// The `ctl` side: send one command to the admin socket and return the answer.
pub fn request(socket: &Path, cmd: &str) -> Result<String, String> {
    let mut s = std::os::unix::net::UnixStream::connect(socket).map_err(|e| {
        format!(
            "cannot connect to {} ({e}); is `tiervisor serve` running with this data directory?",
            socket.display()
        )
    })?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    s.write_all(format!("{cmd}\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out)
        .map_err(|e| format!("reading the answer: {e}"))?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use tiervisor_engine::host;
    use tiervisor_engine::{
        DevKind, DeviceCompletion, DeviceOp, EngineConfig, EngineEvent, EngineState, Medium,
        Outputs, Placement, PoolConfig, PoolId, Provisioning, SchedSpec, StartMode, VmCompletion,
        VolumeConfig, VolumeQos,
    };

    /// Format and mount `engine` on zeroed in-memory pools, completing I/O in order.
    fn mount_in_memory(engine: &mut Engine, pool_bytes: &[u64]) -> MemPools {
        let mut mem = MemPools {
            devs: pool_bytes.iter().map(|&b| vec![0; b as usize]).collect(),
            ..MemPools::default()
        };
        let mut out = Outputs::default();
        engine.start(0, StartMode::Auto, &mut out);
        mem.run(engine, &mut out);
        assert_eq!(engine.state(), &EngineState::Ready, "{:?}", mem.events);
        mem
    }

    /// Pools in RAM behind the engine's one host interface (`host::Driver`, as the
    /// server's shards and the engine's test rig): every device operation completes at
    /// once, in the order the engine handed it over. Timers are not run: these tests
    /// look at what a command answers, not at what happens later.
    #[derive(Default)]
    struct MemPools {
        devs: Vec<Vec<u8>>,
        queued: std::collections::VecDeque<DeviceOp>,
        events: Vec<EngineEvent>,
        completions: Vec<VmCompletion>,
        now_ns: u64,
    }

    impl host::Driver for MemPools {
        type Stop = std::convert::Infallible;
        fn device_op(&mut self, op: DeviceOp) -> Result<(), Self::Stop> {
            self.queued.push_back(op);
            Ok(())
        }
        fn event(&mut self, e: EngineEvent) -> Result<(), Self::Stop> {
            self.events.push(e);
            Ok(())
        }
        fn completed(&mut self, c: VmCompletion) -> Result<(), Self::Stop> {
            self.completions.push(c);
            Ok(())
        }
    }

    impl MemPools {
        /// Deliver `out`, then complete every operation queued and those they lead to.
        fn run(&mut self, engine: &mut Engine, out: &mut Outputs) {
            loop {
                let Ok(()) = host::deliver(out, self);
                let Some(op) = self.queued.pop_front() else {
                    return;
                };
                self.now_ns += 1000;
                let dev = &mut self.devs[op.pool.0 as usize];
                let (o, l) = (op.offset_bytes as usize, op.len_bytes as usize);
                let mut data = None;
                match op.kind {
                    DevKind::Read => data = Some(Bytes::copy_from_slice(&dev[o..o + l])),
                    DevKind::Write => {
                        dev[o..o + l].copy_from_slice(op.payload.as_ref().expect("a payload"))
                    }
                    DevKind::WriteZeroes | DevKind::Punch | DevKind::Discard => {
                        dev[o..o + l].fill(0)
                    }
                    DevKind::Flush => {}
                }
                let done = DeviceCompletion {
                    id: op.id,
                    result: Ok(()),
                    data,
                };
                engine.device_done(self.now_ns, done, out);
            }
        }
    }

    /// Checks one exposition line against the text format's grammar for label sets:
    /// `name{k="v",...} value`, where a value escapes only `\\`, `\"` and `\n`.
    fn well_formed(line: &str) -> Result<(), String> {
        let Some(open) = line.find('{') else {
            return match line.split_once(' ') {
                Some((_, v)) if v.parse::<f64>().is_ok() => Ok(()),
                _ => Err(format!("no value in {line:?}")),
            };
        };
        let mut chars = line[open + 1..].chars();
        loop {
            let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("bad label name {key:?} in {line:?}"));
            }
            if chars.next() != Some('"') {
                return Err(format!("unquoted value in {line:?}"));
            }
            loop {
                match chars.next() {
                    Some('\\') => match chars.next() {
                        Some('\\' | '"' | 'n') => {}
                        c => return Err(format!("bad escape {c:?} in {line:?}")),
                    },
                    Some('"') => break,
                    Some('\n') | None => return Err(format!("unterminated value in {line:?}")),
                    Some(_) => {}
                }
            }
            match chars.next() {
                Some(',') => continue,
                Some('}') => break,
                c => return Err(format!("unexpected {c:?} after a value in {line:?}")),
            }
        }
        let rest: String = chars.collect();
        match rest.strip_prefix(' ') {
            Some(v) if v.parse::<f64>().is_ok() => Ok(()),
            _ => Err(format!("no value after labels in {line:?}")),
        }
    }

    #[test]
    fn label_values_are_escaped_per_the_text_format() {
        let pool = |name: &str, medium| PoolConfig {
            name: name.into(),
            medium,
            capacity_bytes: 64 << 20,
            queue_depth: 8,
            scheduler: SchedSpec::named("fifo"),
            log: false,
            throttle: None,
            write_buffer: None,
        };
        let weird = "we\"ird\\vol\nname{}";
        let mut engine = Engine::new(EngineConfig {
            pools: vec![pool("ssd", Medium::Ssd), pool("h\"d\\d", Medium::Hdd)],
            volumes: vec![VolumeConfig {
                name: weird.into(),
                size_bytes: 16 << 20,
                home_pool: PoolId(1),
                fast_pool: None,
                provisioning: Provisioning::Thin,
                placement: Placement::Pinned,
                log: None,
                qos: VolumeQos::default(),
            }],
            ..EngineConfig::default()
        })
        .expect("a valid engine configuration");
        let _ = mount_in_memory(&mut engine, &[64 << 20, 64 << 20]);
        let server = ServerStats {
            connections_per_export: vec![("ex\"port".into(), 1)],
            inflight_per_connection: vec![(3, "127.0.0.1:5".into(), "ex\"port".into(), 4096)],
            pool_space: vec![crate::space::PoolSpace {
                pool: "hdd".into(),
                low: true,
                growth_bytes: 7,
                ..Default::default()
            }],
            ..ServerStats::default()
        };
        let text = metrics_text(&engine, &server);
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            well_formed(line).unwrap_or_else(|e| panic!("{e}\n{text}"));
        }
        assert!(
            text.contains(r#"volume="we\"ird\\vol\nname{}""#),
            "the name is escaped, not dropped:\n{text}"
        );
        assert!(text.contains(r#"export="ex\"port""#), "{text}");
        assert!(text.contains("tiervisor_protocol_errors_total 0"), "{text}");
        assert!(
            text.contains(r#"tiervisor_pool_space_low{pool="hdd"} 1"#),
            "{text}"
        );
        assert!(
            text.contains(r#"tiervisor_pool_growth_bytes{pool="hdd"} 7"#),
            "{text}"
        );
    }

    /// `migrate` over the admin socket: each refusal names its reason and starts nothing;
    /// a start shows in status, `stat` and the metrics; set-rate and cancel reach the job.
    #[test]
    fn migrate_starts_reports_and_refuses_with_reasons() {
        let pool = |name: &str, medium| PoolConfig {
            name: name.into(),
            medium,
            capacity_bytes: 64 << 20,
            queue_depth: 8,
            scheduler: SchedSpec::named("fifo"),
            log: false,
            throttle: None,
            write_buffer: None,
        };
        let vol = |name: &str, provisioning| VolumeConfig {
            name: name.into(),
            size_bytes: 8 << 20,
            home_pool: PoolId(1),
            fast_pool: None,
            provisioning,
            placement: Placement::Pinned,
            log: None,
            qos: VolumeQos::default(),
        };
        let mut engine = Engine::new(EngineConfig {
            pools: vec![pool("ssd", Medium::Ssd), pool("hdd", Medium::Hdd)],
            volumes: vec![
                vol("thin", Provisioning::Thin),
                vol("thick", Provisioning::Thick),
            ],
            ..EngineConfig::default()
        })
        .expect("a valid engine configuration");
        let mut mem = mount_in_memory(&mut engine, &[64 << 20, 64 << 20]);
        let mut out = tiervisor_engine::Outputs::default();
        let thin = engine.volume_id("thin").unwrap();
        let mut w =
            tiervisor_engine::VmRequest::new(1, thin, tiervisor_engine::ReqKind::Write, 0, 4 << 20);
        w.payload = Some(Bytes::from(vec![7u8; 4 << 20]));
        engine.submit(0, w, &mut out);
        mem.run(&mut engine, &mut out);
        assert_eq!(mem.completions.len(), 1, "{:?}", mem.completions);
        let server = ServerStats::default();
        // Device operations the job asks for stay pending: the job stays in its copy.
        let mut out = tiervisor_engine::Outputs::default();
        let mut ask = |engine: &mut Engine, req: &str| -> serde_json::Value {
            let r = admin_reply(req, engine, 1_000_000, &mut out, &server);
            serde_json::from_slice(&r.body).expect("JSON")
        };
        for (req, why) in [
            (
                r#"{"cmd": "migrate", "action": "start", "volume": "thin", "to": "tape"}"#,
                "no pool \"tape\"; the pools are ssd, hdd",
            ),
            (
                r#"{"cmd": "migrate", "action": "start", "volume": "thin", "to": "hdd"}"#,
                "already lives on pool hdd",
            ),
            (
                // A thick volume moves its home region, but not to the pool it is on.
                r#"{"cmd": "migrate", "action": "start", "volume": "thick", "to": "hdd"}"#,
                "volume thick already lives on pool hdd",
            ),
            (
                r#"{"cmd": "migrate", "action": "start", "volume": "nope", "to": "ssd"}"#,
                "no volume \"nope\"",
            ),
            (
                r#"{"cmd": "migrate", "action": "start", "volume": "thin", "to": "ssd", "scheme": "fast"}"#,
                "unknown migration scheme",
            ),
            (
                r#"{"cmd": "migrate", "action": "start", "volume": "thin", "to": "ssd", "rate_mb_s": -1}"#,
                "expected a positive number",
            ),
            (
                r#"{"cmd": "migrate", "action": "start", "volume": "thin", "to": "ssd", "granularity_bytes": 3000}"#,
                "granularity 3000 bytes",
            ),
            (
                r#"{"cmd": "migrate", "action": "start", "volume": "thin", "to": "ssd", "copy_priority": "first"}"#,
                "unknown copy priority \"first\"; expected background or equal",
            ),
            (
                r#"{"cmd": "migrate", "action": "start", "volume": "thin", "to": "ssd", "copy_window_chunks": 0}"#,
                "copy_window_chunks = 0: expected 1 to 64",
            ),
            (
                r#"{"cmd": "migrate", "action": "start", "volume": "thin", "to": "ssd", "copy_window_chunks": 65}"#,
                "copy_window_chunks = 65: expected 1 to 64",
            ),
            (
                r#"{"cmd": "migrate", "action": "start", "volume": "thin", "to": "ssd", "coalesce_runs": 65537}"#,
                "coalesce_runs = 65537: expected 0 (never) to 65536",
            ),
            (
                r#"{"cmd": "migrate", "action": "start", "volume": "thin", "to": "ssd", "coalesce_runs": -2}"#,
                "coalesce_runs = -2: expected a whole number",
            ),
            (
                r#"{"cmd": "migrate", "action": "cancel", "volume": "thin"}"#,
                "volume thin is not migrating",
            ),
            (
                r#"{"cmd": "migrate", "action": "status", "volume": "thin"}"#,
                "has not migrated",
            ),
            (
                r#"{"cmd": "migrate", "action": "pause", "volume": "thin"}"#,
                "unknown action",
            ),
        ] {
            let v = ask(&mut engine, req);
            let e = v["error"].as_str().unwrap_or_default();
            assert!(e.contains(why), "{req}: {v}");
        }
        assert!(engine.migrations().is_empty(), "nothing started");

        let v = ask(
            &mut engine,
            r#"{"cmd": "migrate", "action": "start", "volume": "thin", "to": "ssd", "scheme": "lr", "rate_mb_s": 5, "copy_priority": "equal", "copy_window_chunks": 4, "coalesce_runs": 9}"#,
        );
        assert_eq!(v["migration"]["scheme"], "lr", "{v}");
        assert_eq!(v["migration"]["phase"], "copying", "{v}");
        assert_eq!(v["migration"]["rate_bytes_per_s"], 5_000_000, "{v}");
        assert_eq!(v["migration"]["copy_priority"], "equal", "{v}");
        assert_eq!(v["migration"]["copy_window_chunks"], 4, "{v}");
        assert_eq!(v["migration"]["coalesce_runs"], 9, "{v}");
        let line = crate::admin_migrate::status_line(&v["migration"]);
        assert!(line.contains("copy priority equal"), "{line}");
        assert!(!line.contains("window"), "LR has no window: {line}");
        assert!(
            !line.contains("whole"),
            "LR has no whole-chunk copies: {line}"
        );
        let v = ask(
            &mut engine,
            r#"{"cmd": "migrate", "action": "start", "volume": "thin", "to": "ssd"}"#,
        );
        assert!(
            v["error"]
                .as_str()
                .unwrap_or_default()
                .contains("already migrating"),
            "{v}"
        );
        let v = ask(
            &mut engine,
            r#"{"cmd": "migrate", "action": "set-rate", "volume": "thin", "rate_mb_s": 7.5}"#,
        );
        assert_eq!(v["migration"]["rate_bytes_per_s"], 7_500_000, "{v}");
        let st = ask(&mut engine, "stat");
        assert_eq!(st["migrations"][0]["volume"], "thin", "{st}");
        assert_eq!(st["migrations"][0]["running"], true, "{st}");
        let text = metrics_text(&engine, &server);
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            well_formed(line).unwrap_or_else(|e| panic!("{e}\n{text}"));
        }
        assert!(
            text.contains(
                r#"tiervisor_migration_phase{volume="thin",scheme="lr",to="ssd",phase="copying"} 1"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"tiervisor_migration_rate_bytes_per_second{volume="thin"} 7500000"#),
            "{text}"
        );
        let v = ask(
            &mut engine,
            r#"{"cmd": "migrate", "action": "cancel", "volume": "thin"}"#,
        );
        assert_eq!(v["ok"], true, "{v}");
        let phase = engine.migrations()[0].phase.name();
        assert!(["cancelling", "cancelled"].contains(&phase), "{phase}");
    }

    #[test]
    fn qos_changes_a_running_volume_and_refuses_bad_values() {
        let pool = PoolConfig {
            name: "ssd".into(),
            medium: Medium::Ssd,
            capacity_bytes: 64 << 20,
            queue_depth: 8,
            scheduler: SchedSpec::named("mclock"),
            log: false,
            throttle: None,
            write_buffer: None,
        };
        let mut engine = Engine::new(EngineConfig {
            pools: vec![pool],
            volumes: vec![VolumeConfig {
                name: "db".into(),
                size_bytes: 16 << 20,
                home_pool: PoolId(0),
                fast_pool: None,
                provisioning: Provisioning::Thin,
                placement: Placement::Pinned,
                log: None,
                qos: VolumeQos {
                    reservation_iops: 0,
                    limit_iops: 0,
                    weight: 100,
                },
            }],
            ..EngineConfig::default()
        })
        .expect("a valid engine configuration");
        let _ = mount_in_memory(&mut engine, &[64 << 20]);
        let server = ServerStats::default();
        let mut out = tiervisor_engine::Outputs::default();
        let mut ask = |engine: &mut Engine, req: &str| -> serde_json::Value {
            let r = admin_reply(req, engine, 0, &mut out, &server);
            serde_json::from_slice(&r.body).expect("JSON")
        };
        let v = ask(
            &mut engine,
            r#"{"cmd": "qos", "volume": "db", "limit_iops": 2000, "reservation_iops": 100}"#,
        );
        assert_eq!(v["ok"], true, "{v}");
        let q = engine.report().volumes[0].qos;
        assert_eq!(
            (q.reservation_iops, q.limit_iops, q.weight),
            (100, 2000, 100)
        );
        // Only the keys given change; stat shows it.
        ask(
            &mut engine,
            r#"{"cmd": "qos", "volume": "db", "weight": 7}"#,
        );
        let st = ask(&mut engine, "stat");
        assert_eq!(st["engine"]["volumes"][0]["qos"]["weight"], 7, "{st}");
        assert_eq!(
            st["engine"]["volumes"][0]["qos"]["limit_iops"], 2000,
            "{st}"
        );
        // Refused, nothing changed.
        for (req, why) in [
            (r#"{"cmd": "qos", "volume": "db", "weight": 0}"#, "weight 0"),
            (
                r#"{"cmd": "qos", "volume": "db", "reservation_iops": 5000}"#,
                "exceeds the limit",
            ),
            (
                r#"{"cmd": "qos", "volume": "nope", "weight": 5}"#,
                "no volume \"nope\"",
            ),
            (
                r#"{"cmd": "qos", "volume": "db", "weight": -3}"#,
                "expected a whole number",
            ),
            ("qos", "expected a JSON request"),
            (r#"{"cmd": "qos"}"#, "expected \"volume\""),
        ] {
            let v = ask(&mut engine, req);
            let e = v["error"].as_str().unwrap_or_default();
            assert!(e.contains(why), "{req}: {v}");
        }
        let q = engine.report().volumes[0].qos;
        assert_eq!((q.reservation_iops, q.limit_iops, q.weight), (100, 2000, 7));
    }
}
