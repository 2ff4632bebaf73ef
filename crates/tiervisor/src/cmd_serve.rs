//! `tiervisor serve` and `tiervisor ctl`.

use std::io::Write as _;
use std::path::PathBuf;

use clap::{Args, Subcommand};
use tiervisor_server::config::ServerConfig;
use tiervisor_server::io::IoKind;
use tiervisor_server::{DEFAULT_CONFIG, Server, StartOptions, admin, preflight};

use crate::Failure;

#[derive(Args)]
pub struct ServeArgs {
    /// Configuration file (TOML); without it the embedded default is used.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Data directory (pool files, sockets); overrides the configuration's.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// NBD TCP address, HOST:PORT; overrides the configuration's.
    #[arg(long)]
    listen: Option<String>,
    /// Serve Prometheus metrics on HOST:PORT (off by default).
    #[arg(long)]
    metrics: Option<String>,
    /// NBD over TLS: off, on (clients may upgrade) or require; overrides the
    /// configuration's `tls`.
    #[arg(long, value_name = "MODE")]
    tls: Option<String>,
    /// Directory with server-cert.pem and server-key.pem (and ca-cert.pem for
    /// --tls-verify-peer), as qemu's tls-creds-x509 and nbdkit's --tls-certificates.
    #[arg(long, value_name = "DIR")]
    tls_certificates: Option<PathBuf>,
    /// Require clients to present a certificate signed by ca-cert.pem.
    #[arg(long)]
    tls_verify_peer: bool,
    /// I/O backend: uring (default) or threads.
    #[arg(long)]
    io: Option<String>,
    /// Serve every volume over vhost-user-blk too, on DIR/<volume>.sock; overrides the
    /// configuration's `vhost_user_dir` ("" turns it off).
    #[arg(long, value_name = "DIR")]
    vhost_user_dir: Option<PathBuf>,
    /// Shards (one thread each) to run; overrides the configuration's `threads`. Without
    /// either, existing pools are served with the count they were formatted with, and new
    /// ones are formatted for 1.
    #[arg(long)]
    threads: Option<u64>,
    /// Create and format the pools if none of them exists yet. Without it, pools are
    /// created only for the embedded default configuration on a fresh, empty data
    /// directory; otherwise missing pools are an error (a wrong --data-dir or unmounted
    /// storage must not be served as blank disks).
    #[arg(long)]
    format_new: bool,
    /// Print the embedded default configuration and exit.
    #[arg(long)]
    print_default_config: bool,
}

#[derive(Subcommand)]
pub enum PoolCmd {
    /// Create and format the configured pools, then exit. Refuses if any pool exists.
    Format {
        /// Configuration file (TOML); without it the embedded default is used.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Data directory; overrides the configuration's.
        #[arg(long)]
        data_dir: Option<PathBuf>,
    },
}

/// The configuration `serve` and `pool format` use: a file, or the embedded default.
fn load_config(
    config: &Option<PathBuf>,
    data_dir: &Option<PathBuf>,
) -> Result<ServerConfig, Failure> {
    let mut cfg = match config {
        Some(p) => ServerConfig::load(p).map_err(|e| Failure::input(e.to_string()))?,
        None => ServerConfig::default_config(),
    };
    if let Some(d) = data_dir {
        cfg = cfg.with_data_dir(d);
    }
    Ok(cfg)
}

pub fn pool(cmd: PoolCmd) -> Result<(), Failure> {
    let PoolCmd::Format { config, data_dir } = cmd;
    let mut cfg = load_config(&config, &data_dir)?;
    if let Some(p) = cfg.pools.iter().find(|p| p.path.exists()) {
        return Err(Failure::input(format!(
            "pool {}: {} already exists; `pool format` only creates new pools (remove it first if its data is not wanted)",
            p.name,
            p.path.display()
        )));
    }
    // Format only: no NBD or metrics listeners.
    cfg.listen = None;
    cfg.metrics = None;
    cfg.unix_socket = None;
    cfg.vhost_user_dir = None;
    let opts = StartOptions { format_new: true };
    let mut server = Server::start(cfg, opts, Box::new(log_line)).map_err(Failure::input)?;
    server.stop().map_err(Failure::run)?;
    log_line("pools formatted; start the server with `tiervisor serve`");
    Ok(())
}

fn log_line(s: &str) {
    let mut e = std::io::stderr().lock();
    let _ = writeln!(e, "tiervisor: {s}");
}

pub fn serve(a: ServeArgs) -> Result<(), Failure> {
    if a.print_default_config {
        print!("{DEFAULT_CONFIG}");
        return Ok(());
    }
    let mut cfg = load_config(&a.config, &a.data_dir)?;
    if let Some(l) = a.listen {
        cfg.listen = Some(l).filter(|s| !s.is_empty());
    }
    if let Some(m) = a.metrics {
        cfg.metrics = Some(m).filter(|s| !s.is_empty());
    }
    for (flag, addr) in [("--listen", &cfg.listen), ("--metrics", &cfg.metrics)] {
        if let Some(addr) = addr {
            tiervisor_server::config::parse_address(addr)
                .map_err(|e| Failure::input(format!("{flag} {addr:?}: {e}")))?;
        }
    }
    if let Some(d) = a.vhost_user_dir {
        cfg.vhost_user_dir = Some(d).filter(|d| !d.as_os_str().is_empty());
    }
    if let Some(t) = &a.tls {
        cfg.tls.mode = tiervisor_server::tls::TlsMode::parse(t)
            .ok_or_else(|| Failure::input(format!("--tls {t:?}: expected off, on or require")))?;
    }
    if let Some(d) = a.tls_certificates {
        cfg.tls.certificates = Some(d);
    }
    if a.tls_verify_peer {
        cfg.tls.verify_peer = true;
    }
    if let Some(io) = &a.io {
        cfg.io = IoKind::parse(io)
            .ok_or_else(|| Failure::input(format!("--io {io:?}: expected uring or threads")))?;
    }
    if let Some(n) = a.threads {
        cfg.threads = tiervisor_server::config::check_threads(n)
            .map_err(|e| Failure::input(format!("--{}", e.replacen(" = ", " ", 1))))?;
        cfg.threads_set = true;
    }
    log_line(&format!(
        "configuration {}; data directory {}",
        if a.config.is_some() {
            cfg.source.as_str()
        } else {
            "embedded default"
        },
        cfg.data_dir.display()
    ));
    // The embedded default may create its pools on a fresh data directory: that is the
    // first run the README shows. Anything else must be asked for.
    let opts = StartOptions {
        format_new: a.format_new || (a.config.is_none() && preflight::dir_is_fresh(&cfg.data_dir)),
    };
    let mut server = match Server::start(cfg.clone(), opts, Box::new(log_line)) {
        Ok(s) => s,
        // SIGTERM or SIGINT during a start that waited (for space): what it wrote is
        // crash-safe, and a requested stop is not a failure.
        Err(e) if e == tiervisor_server::server::STOPPED_DURING_START => {
            log_line(&e);
            return Ok(());
        }
        // Configuration mismatches and unreadable metadata are the operator's to fix.
        Err(e) => return Err(Failure::input(e)),
    };
    let vols: Vec<String> = server
        .exports()
        .iter()
        .map(|e| {
            format!(
                "{} ({:.1} GiB)",
                e.name,
                e.size_bytes as f64 / (1u64 << 30) as f64
            )
        })
        .collect();
    log_line(&format!(
        "serving {} volume(s): {} [I/O: {}]",
        vols.len(),
        vols.join(", "),
        server.backend_name()
    ));
    let per_shard = server.volumes_per_shard();
    log_line(&format!(
        "{} shard(s): {}",
        per_shard.len(),
        per_shard
            .iter()
            .enumerate()
            .map(|(k, v)| format!(
                "shard {k} owns {}",
                if v.is_empty() {
                    "no volume".to_string()
                } else {
                    v.join(", ")
                }
            ))
            .collect::<Vec<_>>()
            .join("; ")
    ));
    let first = server
        .exports()
        .first()
        .map(|e| e.name.clone())
        .unwrap_or_default();
    let mut banner = String::new();
    let tls = &cfg.tls;
    if let Some(addr) = server.tcp_addr() {
        use tiervisor_server::tls::TlsMode;
        let dir = (tls.certificates.as_ref()).map_or(String::new(), |d| d.display().to_string());
        if tls.mode != TlsMode::Off {
            let when = if tls.mode == TlsMode::Require {
                "TLS required"
            } else {
                "TLS offered; plaintext accepted too"
            };
            banner += &format!(
                "  NBD over TCP:   nbds://{addr}/<volume> ({when}; certificates in {dir})\n"
            );
            banner += "attach with, for example (DIR holds ca-cert.pem, and the client's certificate where asked):\n";
            banner += &format!("  nbdinfo 'nbds://{addr}/{first}?tls-certificates=DIR'\n");
            let (host, port) = addr
                .to_string()
                .rsplit_once(':')
                .map_or((String::new(), String::new()), |(h, p)| {
                    (h.to_string(), p.to_string())
                });
            banner += &format!(
                "  qemu-io --object tls-creds-x509,id=tls0,dir=DIR,endpoint=client --image-opts driver=nbd,host={host},port={port},export={first},tls-creds=tls0\n"
            );
        } else {
            banner += &format!("  NBD over TCP:   nbd://{addr}/<volume>\n");
            banner += "attach with, for example:\n";
            banner += &format!("  qemu-io -f raw nbd://{addr}/{first}\n");
            banner += &format!("  nbdinfo --list nbd://{addr}\n");
            banner += &format!(
                "  fio --name=job --ioengine=nbd --uri=nbd://{addr}/{first} --rw=randread --bs=4k --size=1g\n"
            );
            banner += &format!(
                "  qemu-system-x86_64 ... -drive file=nbd://{addr}/{first},format=raw,if=virtio\n"
            );
        }
    }
    if let Some(p) = server.unix_path() {
        let scheme = if tls.mode == tiervisor_server::tls::TlsMode::Off {
            "nbd+unix"
        } else {
            "nbds+unix"
        };
        banner += &format!(
            "  NBD over Unix:  {scheme}:///{first}?socket={}\n",
            p.display()
        );
    }
    banner += &format!(
        "  status:         tiervisor ctl stat --data-dir {}\n",
        cfg.data_dir.display()
    );
    banner += "  stop:           Ctrl-C (or SIGTERM): in-flight requests finish, data is flushed, checkpoints written; a third signal exits at once";
    for l in banner.lines() {
        log_line(l);
    }
    server.run().map_err(Failure::run)?;
    log_line("stopped cleanly: all data flushed and checkpoints written");
    Ok(())
}

#[derive(Subcommand)]
pub enum CtlCmd {
    /// Per-volume and per-pool counters, latencies and placement.
    Stat {
        #[command(flatten)]
        target: Target,
    },
    /// Change a running volume's QoS (mClock/BFQ): the options given replace the current
    /// values, from the next dispatch on. Not durable: the configuration applies again at
    /// the next start.
    Qos {
        /// The volume (export) name.
        volume: String,
        /// At most this many IOPS (0: no limit).
        #[arg(long)]
        limit_iops: Option<u32>,
        /// At least this many IOPS under contention (0: none).
        #[arg(long)]
        reservation_iops: Option<u32>,
        /// Share of what is left, 1..1000.
        #[arg(long)]
        weight: Option<u32>,
        #[command(flatten)]
        target: Target,
    },
    /// Live storage migration of a volume to another pool: start, status, set-rate,
    /// cancel.
    Migrate {
        #[command(subcommand)]
        cmd: crate::cmd_ctl_migrate::MigrateCmd,
    },
    /// Create volumes while the server runs, and list them.
    Volume {
        #[command(subcommand)]
        cmd: crate::cmd_ctl_volume::VolumeCmd,
    },
    /// Ask the server to shut down cleanly.
    Shutdown {
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Args)]
pub struct Target {
    /// The server's data directory (its admin socket is admin.sock inside).
    #[arg(long, default_value = "./tiervisor-data")]
    data_dir: PathBuf,
    /// The admin socket, if not in the data directory.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Print the server's answer as one JSON object (or array) instead of text. Refusals
    /// still go to standard error, with exit status 2.
    #[arg(long)]
    pub(crate) json: bool,
}

impl Target {
    pub(crate) fn socket(&self) -> PathBuf {
        self.socket
            .clone()
            .unwrap_or_else(|| self.data_dir.join("admin.sock"))
    }
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

pub fn ctl(cmd: CtlCmd) -> Result<(), Failure> {
    match cmd {
        CtlCmd::Migrate { cmd } => crate::cmd_ctl_migrate::run(cmd),
        CtlCmd::Volume { cmd } => crate::cmd_ctl_volume::run(cmd),
        CtlCmd::Shutdown { target } => {
            let r = admin::request(&target.socket(), "shutdown").map_err(Failure::run)?;
            if target.json {
                print!("{r}");
                return Ok(());
            }
            let v: serde_json::Value = serde_json::from_str(&r)
                .map_err(|e| Failure::run(format!("bad answer from the server: {e}")))?;
            println!("{}", v["message"].as_str().unwrap_or("shutting down"));
            Ok(())
        }
        CtlCmd::Qos {
            volume,
            limit_iops,
            reservation_iops,
            weight,
            target,
        } => {
            let req = serde_json::json!({
                "cmd": "qos",
                "volume": volume,
                "limit_iops": limit_iops,
                "reservation_iops": reservation_iops,
                "weight": weight,
            });
            let r = admin::request(&target.socket(), &req.to_string()).map_err(Failure::run)?;
            let v: serde_json::Value = serde_json::from_str(&r)
                .map_err(|e| Failure::run(format!("bad answer from the server: {e}")))?;
            if let Some(e) = v["error"].as_str() {
                return Err(Failure::input(e.to_string()));
            }
            let q = &v["qos"];
            if target.json {
                println!("{v}");
                return Ok(());
            }
            println!(
                "{volume}: reservation {} IOPS, limit {} IOPS, weight {}",
                q["reservation_iops"], q["limit_iops"], q["weight"]
            );
            Ok(())
        }
        CtlCmd::Stat { target } => {
            let r = admin::request(&target.socket(), "stat").map_err(Failure::run)?;
            if target.json {
                print!("{r}");
                return Ok(());
            }
            let v: serde_json::Value = serde_json::from_str(&r)
                .map_err(|e| Failure::run(format!("bad answer from the server: {e}")))?;
            let up = v["server"]["uptime_s"].as_f64().unwrap_or(0.0).max(1e-9);
            let conns: std::collections::BTreeMap<String, u64> =
                v["server"]["connections_per_export"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|x| Some((x[0].as_str()?.to_string(), x[1].as_u64()?)))
                            .collect()
                    })
                    .unwrap_or_default();
            println!(
                "state {}  uptime {:.0} s  I/O {}  connections {} open, {} total",
                v["engine"]["state"].as_str().unwrap_or("?"),
                up,
                v["server"]["io_backend"].as_str().unwrap_or("?"),
                v["server"]["connections_open"],
                v["server"]["connections_total"]
            );
            println!(
                "\n{:<10} {:>5} {:>9} {:>9} {:>7} {:>7} {:>10} {:>10} {:>9} {:>9}  chunks by pool",
                "volume",
                "conns",
                "reads",
                "writes",
                "flushes",
                "trims",
                "read MiB",
                "write MiB",
                "p50 us",
                "p99 us"
            );
            for vol in v["engine"]["volumes"].as_array().into_iter().flatten() {
                let name = vol["name"].as_str().unwrap_or("?");
                let n = |k: &str| vol[k]["requests"].as_u64().unwrap_or(0);
                let chunks: Vec<String> = vol["chunks_by_pool"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| format!("{}={}", p[0].as_str().unwrap_or("?"), p[1]))
                    .collect();
                println!(
                    "{:<10} {:>5} {:>9} {:>9} {:>7} {:>7} {:>10.1} {:>10.1} {:>9.1} {:>9.1}  {}",
                    name,
                    conns.get(name).copied().unwrap_or(0),
                    n("read"),
                    n("write"),
                    n("flush"),
                    n("trim") + n("write_zeroes"),
                    vol["read"]["bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
                    vol["write"]["bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
                    vol["latency"]["p50_us"].as_f64().unwrap_or(0.0),
                    vol["latency"]["p99_us"].as_f64().unwrap_or(0.0),
                    chunks.join(" ")
                );
                let f = &vol["flush"]["latency"];
                println!(
                    "{:<10} IOPS since start {:.0}; flush p50 {:.1} us p99 {:.1} us; journal {} commits, {} checkpoints; map {} bytes RAM",
                    "",
                    (n("read") + n("write")) as f64 / up,
                    f["p50_us"].as_f64().unwrap_or(0.0),
                    f["p99_us"].as_f64().unwrap_or(0.0),
                    vol["journal_commits"].as_u64().unwrap_or(0),
                    vol["checkpoints"].as_u64().unwrap_or(0),
                    vol["map_memory_bytes"].as_u64().unwrap_or(0)
                );
                let q = &vol["qos"];
                let setting = |k: &str| match q[k].as_u64() {
                    Some(0) | None => "none".to_string(),
                    Some(n) => format!("{n} IOPS"),
                };
                println!(
                    "{:<10} QoS: reservation {}, limit {}, weight {}; measured {:.0} IOPS since start",
                    "",
                    setting("reservation_iops"),
                    setting("limit_iops"),
                    q["weight"],
                    (n("read") + n("write")) as f64 / up
                );
                let hottest: Vec<String> = vol["monitor"]["hottest"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|h| {
                        format!(
                            "chunk {} (heat {}, {})",
                            h[0],
                            h[1],
                            h[2].as_str().unwrap_or("?")
                        )
                    })
                    .collect();
                println!(
                    "{:<10} placement {}{}: {} promotions, {} demotions, {:.0} MiB migrated; hottest: {}",
                    "",
                    vol["placement"].as_str().unwrap_or("?"),
                    vol["fast_pool"]
                        .as_str()
                        .map_or(String::new(), |f| format!(" (fast pool {f})")),
                    vol["promotions"].as_u64().unwrap_or(0),
                    vol["demotions"].as_u64().unwrap_or(0),
                    vol["migrated_bytes"].as_f64().unwrap_or(0.0) / 1048576.0,
                    if hottest.is_empty() {
                        "-".to_string()
                    } else {
                        hottest.join(", ")
                    }
                );
                let c = &vol["cache"];
                if !c.is_null() {
                    let n = |k: &str| c[k].as_u64().unwrap_or(0);
                    println!(
                        "{:<10} cache ({}): {} of {} chunks cached, {} dirty; {} fills, {} clean + {} dirty evictions, {} writebacks ({:.1} MiB); {} counted dirty at mount",
                        "",
                        c["policy"].as_str().unwrap_or("?"),
                        n("cached_chunks"),
                        n("budget_chunks"),
                        n("dirty_chunks"),
                        n("fills"),
                        n("evictions_clean"),
                        n("evictions_dirty"),
                        n("writebacks"),
                        n("writeback_bytes") as f64 / 1048576.0,
                        n("dirty_at_mount")
                    );
                }
            }
            println!(
                "\n{:<8} {:<4} {:>9} {:>9} {:>12} {:>12} {:>8} {:>7}",
                "pool", "kind", "GiB", "used GiB", "read MiB", "write MiB", "flushes", "errors"
            );
            for p in v["engine"]["pools"].as_array().into_iter().flatten() {
                let io = &p["io"];
                let sum = |k: &str| {
                    ["foreground", "metadata", "migration", "cleaner"]
                        .iter()
                        .map(|c| io[c][k].as_u64().unwrap_or(0))
                        .sum::<u64>()
                };
                println!(
                    "{:<8} {:<4} {:>9.2} {:>9.3} {:>12.1} {:>12.1} {:>8} {:>7}",
                    p["name"].as_str().unwrap_or("?"),
                    p["medium"].as_str().unwrap_or("?"),
                    gib(p["capacity_bytes"].as_u64().unwrap_or(0)),
                    gib(p["used_bytes"].as_u64().unwrap_or(0)),
                    sum("read_bytes") as f64 / 1048576.0,
                    sum("write_bytes") as f64 / 1048576.0,
                    io["flushes"].as_u64().unwrap_or(0),
                    io["errors"].as_u64().unwrap_or(0)
                );
            }
            for p in v["engine"]["pools"].as_array().into_iter().flatten() {
                let l = &p["log"];
                if l.is_null() {
                    continue;
                }
                let n = |k: &str| l[k].as_u64().unwrap_or(0);
                println!(
                    "log {:<8} {} segments ({} free), {:.1} MiB live; {} writes, {:.1} MiB taken in {} appends; cleaner: {} segments, {:.1} MiB copied, {} waits for its cap; {} to home; write amplification {:.2}",
                    p["name"].as_str().unwrap_or("?"),
                    n("segments"),
                    n("free_segments"),
                    n("live_bytes") as f64 / 1048576.0,
                    n("user_writes"),
                    n("user_bytes") as f64 / 1048576.0,
                    n("appends"),
                    n("segments_cleaned"),
                    n("cleaner_bytes") as f64 / 1048576.0,
                    n("cleaner_waits"),
                    n("home_fallbacks"),
                    l["write_amplification"].as_f64().unwrap_or(0.0)
                );
            }
            print_throttles(&v);
            print_shards(&v);
            let running: Vec<&serde_json::Value> = v["migrations"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|m| m["running"] == true)
                .collect();
            if !running.is_empty() {
                println!();
            }
            for m in running {
                println!(
                    "migration {}",
                    tiervisor_server::admin_migrate::status_line(m)
                );
            }
            Ok(())
        }
    }
}

/// One `ctl stat` line per shard (issue 18): its volumes, requests, its thread's CPU
/// time and what it has in flight, so an overloaded shard shows.
fn print_shards(v: &serde_json::Value) {
    let shards: Vec<&serde_json::Value> = v["server"]["shards"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    if !shards.is_empty() {
        println!();
    }
    for s in shards {
        let n = |k: &str| s[k].as_u64().unwrap_or(0);
        let cpu_s = s["cpu_s"].as_f64().unwrap_or(0.0);
        let vols: Vec<&str> = s["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|x| x.as_str())
            .collect();
        println!(
            "shard {}  volumes {}; {} requests, CPU {:.2} s ({:.1} us/request); {} connections, {} requests and {} device ops in flight; write buffer {:.1} MiB, tier {:.1} MiB/s ({} budget changes); {} borrowed run(s) held, {} given back",
            n("shard"),
            if vols.is_empty() {
                "-".to_string()
            } else {
                vols.join(", ")
            },
            n("requests"),
            cpu_s,
            cpu_s * 1e6 / n("requests").max(1) as f64,
            n("connections_open"),
            n("requests_in_flight"),
            n("device_ops_in_flight"),
            n("write_buffer_bytes") as f64 / (1 << 20) as f64,
            n("tier_bytes_per_s") as f64 / (1 << 20) as f64,
            n("budget_commands"),
            n("borrowed_runs"),
            n("runs_given_back"),
        );
        // Each pool's device share, once the broker set one (issue 12).
        for d in s["device_shares"].as_array().into_iter().flatten() {
            let share = d["share"].as_f64().unwrap_or(0.0);
            if share == 0.0 {
                continue;
            }
            let gate = d["gate_iops"].as_u64().unwrap_or(0);
            println!(
                "  device share {:<8} {:.3}, gate {}; {} waits at the gate",
                d["pool"].as_str().unwrap_or("?"),
                share,
                if gate == 0 {
                    "open".to_string()
                } else {
                    format!("{gate} IOPS")
                },
                d["gate_waits"].as_u64().unwrap_or(0),
            );
        }
    }
}

/// One `ctl stat` line per throttled pool: the throttle's k, and what holding cost.
fn print_throttles(v: &serde_json::Value) {
    for p in v["engine"]["pools"].as_array().into_iter().flatten() {
        let t = &p["throttle"];
        if t.is_null() {
            continue;
        }
        let n = |k: &str| t[k].as_u64().unwrap_or(0);
        println!(
            "throttle {:<8} model {}, k {:.2}{}; {} ops, {} late, {} held now; added {:.1} ms in all; mean service {:.2} ms",
            p["name"].as_str().unwrap_or("?"),
            t["model"].as_str().unwrap_or("?"),
            t["k"].as_f64().unwrap_or(0.0),
            if t["adapt"].as_bool() == Some(true) {
                " (adapting)"
            } else {
                ""
            },
            n("ops"),
            n("late"),
            n("held_now"),
            n("added_delay_ns") as f64 / 1e6,
            t["mean_service_ms"].as_f64().unwrap_or(0.0)
        );
    }
}
