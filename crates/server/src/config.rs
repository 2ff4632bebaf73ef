//! `tiervisor serve` configuration (TOML). Without a file, [`DEFAULT_CONFIG`] is used.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tiervisor_conf::{ConfError, LogToml, SizeVal, Source, Spanned, TieringToml, system};
use tiervisor_engine::{Medium, Placement, Provisioning, SchedSpec};

use crate::io::IoKind;

/// The embedded default configuration: two sparse pool files, two 4 GiB volumes.
pub const DEFAULT_CONFIG: &str = r#"# tiervisor serve: the embedded default configuration.
# Paths are relative to data_dir; every key is documented in docs/CONFIG.md.
data_dir = "./tiervisor-data"
listen = "127.0.0.1:10809"     # NBD over TCP; "" disables it
unix_socket = "nbd.sock"       # NBD over a Unix socket; "" disables it
admin_socket = "admin.sock"    # for `tiervisor ctl`, mode 0600
# metrics = "127.0.0.1:9109"   # Prometheus text endpoint; off unless set
chunk = "1m"
journal = "4m"
io = "uring"                   # or "threads"
metadata_pool = "ssd"

[[pool]]
name = "ssd"
path = "ssd.pool"
size = "2g"
kind = "ssd"

[[pool]]
name = "hdd"
path = "hdd.pool"
size = "8g"
kind = "hdd"

[[volume]]
name = "vm1"
size = "4g"
pool = "hdd"                   # home (capacity) pool
provisioning = "thin"
placement = "hot"              # chunks that prove hot move to fast_pool
fast_pool = "ssd"

[[volume]]
name = "vm2"
size = "4g"
pool = "hdd"
provisioning = "thin"
placement = "hot"
fast_pool = "ssd"
"#;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    data_dir: Option<String>,
    listen: Option<Spanned<String>>,
    unix_socket: Option<String>,
    admin_socket: Option<String>,
    vhost_user_dir: Option<String>,
    metrics: Option<Spanned<String>>,
    /// `NBD_OPT_STARTTLS`: "off" (default), "on" or "require".
    tls: Option<Spanned<String>>,
    tls_certificates: Option<String>,
    tls_verify_peer: Option<bool>,
    /// Refused with an explanation (rustls has no external PSK).
    tls_psk: Option<Spanned<String>>,
    chunk: Option<Spanned<SizeVal>>,
    journal: Option<Spanned<SizeVal>>,
    commit_interval_ms: Option<Spanned<u64>>,
    discard: Option<tiervisor_conf::Switch>,
    inflight_per_connection: Option<Spanned<SizeVal>>,
    inflight_total: Option<Spanned<SizeVal>>,
    io: Option<Spanned<String>>,
    threads: Option<Spanned<u64>>,
    /// How shards share the budgets that span volumes: "demand" (default) or "fixed".
    shard_budgets: Option<Spanned<String>>,
    /// How shards share a pool's device under a weighted scheduler: "pool" (default) or
    /// "local".
    shard_qos: Option<Spanned<String>>,
    /// How long a shard holds a wholly free borrowed run before giving it back (ms; 0
    /// keeps borrowed space).
    give_back_hold_ms: Option<Spanned<u64>>,
    metadata_pool: Option<Spanned<String>>,
    tiering: Option<TieringToml>,
    log: Option<LogToml>,
    #[serde(default, rename = "pool")]
    pools: Vec<RawPool>,
    #[serde(default, rename = "volume")]
    volumes: Vec<RawVolume>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPool {
    name: Spanned<String>,
    path: Spanned<String>,
    size: Option<Spanned<SizeVal>>,
    kind: Spanned<String>,
    queue_depth: Option<Spanned<u32>>,
    scheduler: Option<Spanned<toml::Value>>,
    /// Seed 003's virtual performance throttle.
    throttle: Option<Spanned<toml::Value>>,
    log: Option<tiervisor_conf::Switch>,
    /// The host write-back buffer (`"256m"`; 0 or absent: none).
    write_buffer: Option<Spanned<SizeVal>>,
    /// Read and write the pool with O_DIRECT (no host page cache).
    direct: Option<tiervisor_conf::Switch>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawVolume {
    name: Spanned<String>,
    size: Spanned<SizeVal>,
    pool: Spanned<String>,
    provisioning: Option<Spanned<String>>,
    placement: Option<Spanned<String>>,
    fast_pool: Option<Spanned<String>>,
    fast_percent: Option<Spanned<u8>>,
    fast_budget: Option<Spanned<SizeVal>>,
    /// cache: "smq" (default) or "bcache".
    cache_policy: Option<Spanned<String>>,
    priority: Option<u8>,
    description: Option<String>,
    read_only: Option<bool>,
    /// vhost-user: false offers no FLUSH (the guest writes through) and makes every
    /// write durable before it is answered.
    write_cache: Option<bool>,
    log: Option<tiervisor_conf::Switch>,
    /// QoS for schedulers that share a device by volume (mclock, bfq).
    reservation_iops: Option<Spanned<u32>>,
    limit_iops: Option<Spanned<u32>>,
    weight: Option<Spanned<u32>>,
}

#[derive(Clone, Debug)]
pub struct PoolDef {
    pub name: String,
    pub path: PathBuf,
    /// Required for files; block devices report their own size.
    pub size_bytes: Option<u64>,
    pub medium: Medium,
    pub queue_depth: u32,
    pub scheduler: SchedSpec,
    /// Gather small and random writes into log appends.
    pub log: bool,
    /// Open the pool with O_DIRECT (no host page cache; `io/direct.rs`).
    pub direct: bool,
}

#[derive(Clone, Debug)]
pub struct VolumeDef {
    pub name: String,
    pub size_bytes: u64,
    pub pool: usize,
    pub provisioning: Provisioning,
    pub placement: Placement,
    pub fast_pool: Option<usize>,
    pub description: String,
    /// Served read-only: writes, trims and zeroing fail with EPERM.
    pub read_only: bool,
    /// vhost-user-blk offers a volatile write cache (VIRTIO_BLK_F_FLUSH: writes are
    /// answered before they are durable, a FLUSH makes them so). False: no FLUSH offered,
    /// every write, discard and write-zeroes durable (FUA) before it is answered.
    pub write_cache: bool,
    /// Override the pool's `log`.
    pub log: Option<bool>,
    pub qos: tiervisor_engine::VolumeQos,
}

#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub source: String,
    pub data_dir: PathBuf,
    pub listen: Option<String>,
    pub unix_socket: Option<PathBuf>,
    pub admin_socket: PathBuf,
    /// vhost-user-blk: one socket per volume, `<dir>/<volume>.sock`; off unless set.
    pub vhost_user_dir: Option<PathBuf>,
    pub metrics: Option<String>,
    /// NBD over TLS (`tls.rs`); the rustls configuration is built at start.
    pub tls: crate::tls::TlsSettings,
    pub chunk_bytes: u64,
    pub journal_bytes: u64,
    pub commit_interval_ms: u64,
    /// Request payload bytes one connection may hold (in flight plus queued replies)
    /// before the server stops reading its requests.
    pub inflight_per_connection_bytes: u64,
    /// The same, over all connections.
    pub inflight_total_bytes: u64,
    pub tiering: tiervisor_engine::TieringConfig,
    pub log: tiervisor_engine::LogConfig,
    pub io: IoKind,
    /// Shards the server runs, one thread each (issue 18).
    pub threads: u16,
    /// `threads` was given (in the configuration or by `--threads`). When it was not, a
    /// start of existing pools serves them with the count they were formatted with
    /// (`Server::start`), and a format uses 1.
    pub threads_set: bool,
    pub metadata_pool: usize,
    pub pools: Vec<PoolDef>,
    pub volumes: Vec<VolumeDef>,
    /// What the pools, volumes and engine keys resolve to, exactly as a scenario saying the
    /// same would (crates/conf/src/system.rs); pools of block devices have capacity 0 until
    /// the device is opened. The fields above are views of it.
    pub engine: tiervisor_engine::EngineConfig,
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|x| !x.is_empty())
}

/// Request payload bytes a connection may hold before its requests wait: a little more
/// than one maximal (32 MiB) request.
pub const DEFAULT_INFLIGHT_PER_CONNECTION_BYTES: u64 = 48 << 20;
/// The same over all connections.
pub const DEFAULT_INFLIGHT_TOTAL_BYTES: u64 = 512 << 20;

/// Two spellings of one path (`a/./b`, `a//b`): compared component by component.
fn same_path(a: &Path, b: &Path) -> bool {
    a.components().eq(b.components())
}

/// A TCP address key: empty means off; otherwise a numeric IP and a port.
fn address(
    src: &Source,
    v: Option<Spanned<String>>,
    key: &str,
    example: &str,
) -> Result<Option<String>, ConfError> {
    let Some(v) = v else { return Ok(None) };
    let text = v.get_ref();
    if text.is_empty() {
        return Ok(None);
    }
    match parse_address(text) {
        Ok(_) => Ok(Some(text.clone())),
        Err(why) => src.err(
            v.span(),
            format!("{key} = {text:?}: {why}, e.g. {example:?}"),
        ),
    }
}

/// Parse `HOST:PORT` with a numeric host, as the listeners need it.
pub fn parse_address(text: &str) -> Result<std::net::SocketAddr, String> {
    text.parse()
        .map_err(|_| "expected HOST:PORT with a numeric IP address (IPv6 in brackets)".to_string())
}

impl ServerConfig {
    pub fn load(path: &Path) -> Result<ServerConfig, ConfError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfError::file(&file, format!("cannot read configuration: {e}")))?;
        Self::parse(&file, &text)
    }

    pub fn default_config() -> ServerConfig {
        Self::parse("<embedded default>", DEFAULT_CONFIG)
            .expect("the embedded default configuration is valid")
    }

    pub fn parse(file: &str, text: &str) -> Result<ServerConfig, ConfError> {
        let src = Source::new(file, text);
        let raw: RawConfig = src.parse()?;
        let data_dir = PathBuf::from(raw.data_dir.unwrap_or_else(|| "./tiervisor-data".into()));
        let io = match &raw.io {
            Some(s) => IoKind::parse(s.get_ref()).map_or_else(
                || src.err(s.span(), "io: expected \"uring\" or \"threads\""),
                Ok,
            )?,
            None => IoKind::Uring,
        };
        let threads = match &raw.threads {
            Some(t) => check_threads(*t.get_ref()).map_err(|m| src.error(t.span(), m))?,
            None => 1,
        };
        // The server's own pool keys: a path and a kind; files need a size, block devices
        // report theirs at start.
        let mut media = Vec::with_capacity(raw.pools.len());
        for p in &raw.pools {
            media.push(match p.kind.get_ref().as_str() {
                "ssd" => Medium::Ssd,
                "hdd" => Medium::Hdd,
                o => {
                    return src.err(
                        p.kind.span(),
                        format!("kind {o:?}: expected \"ssd\" or \"hdd\""),
                    );
                }
            });
        }
        let mut sizes = Vec::with_capacity(raw.pools.len());
        for p in &raw.pools {
            sizes.push(match &p.size {
                Some(s) => Some((src.size(s, "size")?, s.span())),
                None => None,
            });
        }
        // Everything else is the system specification scenarios share.
        let engine = system::resolve(
            &src,
            system::EngineKeys {
                chunk: raw.chunk.as_ref(),
                journal: raw.journal.as_ref(),
                commit_interval_ms: raw.commit_interval_ms.as_ref(),
                metadata_pool: raw.metadata_pool.as_ref(),
                discard: raw.discard,
                tiering: raw.tiering.as_ref(),
                log: raw.log.as_ref(),
                shard_budgets: raw.shard_budgets.as_ref(),
                shard_qos: raw.shard_qos.as_ref(),
                give_back_hold_ms: raw.give_back_hold_ms.as_ref(),
            },
            &raw.pools
                .iter()
                .zip(media)
                .zip(&sizes)
                .map(|((p, medium), size)| system::PoolKeys {
                    name: &p.name,
                    medium,
                    capacity: size.clone(),
                    queue_depth: p.queue_depth.as_ref(),
                    scheduler: p.scheduler.as_ref(),
                    throttle: p.throttle.as_ref(),
                    log: p.log,
                    write_buffer: p.write_buffer.as_ref(),
                })
                .collect::<Vec<_>>(),
            &raw.volumes
                .iter()
                .map(|v| system::VolumeKeys {
                    name: &v.name,
                    size: &v.size,
                    pool: &v.pool,
                    provisioning: v.provisioning.as_ref(),
                    placement: v.placement.as_ref(),
                    fast_pool: v.fast_pool.as_ref(),
                    fast_percent: v.fast_percent.as_ref(),
                    fast_budget: v.fast_budget.as_ref(),
                    priority: v.priority,
                    cache_policy: v.cache_policy.as_ref(),
                    log: v.log,
                    reservation_iops: v.reservation_iops.as_ref(),
                    limit_iops: v.limit_iops.as_ref(),
                    weight: v.weight.as_ref(),
                })
                .collect::<Vec<_>>(),
        )?;
        let pools: Vec<PoolDef> = engine
            .pools
            .iter()
            .zip(&raw.pools)
            .zip(&sizes)
            .map(|((p, raw), size)| {
                let path = PathBuf::from(raw.path.get_ref());
                PoolDef {
                    name: p.name.clone(),
                    path: if path.is_absolute() {
                        path
                    } else {
                        data_dir.join(path)
                    },
                    size_bytes: size.as_ref().map(|(b, _)| *b),
                    medium: p.medium,
                    queue_depth: p.queue_depth,
                    scheduler: p.scheduler.clone(),
                    log: p.log,
                    direct: raw.direct.is_some_and(|d| d.0),
                }
            })
            .collect();
        for (i, (p, raw)) in pools.iter().zip(&raw.pools).enumerate() {
            if let Some(q) = pools[..i].iter().find(|q| same_path(&q.path, &p.path)) {
                return src.err(
                    raw.path.span(),
                    format!(
                        "path {:?}: pool {} already uses {}; expected a different file or device for each pool",
                        raw.path.get_ref(),
                        q.name,
                        q.path.display()
                    ),
                );
            }
        }
        let volumes: Vec<VolumeDef> = engine
            .volumes
            .iter()
            .zip(&raw.volumes)
            .map(|(v, raw)| VolumeDef {
                name: v.name.clone(),
                size_bytes: v.size_bytes,
                pool: v.home_pool.0 as usize,
                provisioning: v.provisioning,
                placement: v.placement.clone(),
                fast_pool: v.fast_pool.map(|f| f.0 as usize),
                description: raw.description.clone().unwrap_or_default(),
                read_only: raw.read_only.unwrap_or(false),
                write_cache: raw.write_cache.unwrap_or(true),
                log: v.log,
                qos: v.qos,
            })
            .collect();
        let rel = |s: Option<String>| {
            non_empty(s).map(|p| {
                if Path::new(&p).is_absolute() {
                    PathBuf::from(p)
                } else {
                    data_dir.join(p)
                }
            })
        };
        let listen = address(&src, raw.listen, "listen", "127.0.0.1:10809")?;
        let inflight = |v: &Option<Spanned<SizeVal>>, key: &str, default: u64| match v {
            Some(v) => {
                let n = src.size(v, key)?;
                if n < 1 << 20 {
                    return src.err(v.span(), format!("{key}: expected at least 1m"));
                }
                Ok(n)
            }
            None => Ok(default),
        };
        let inflight_per_connection_bytes = inflight(
            &raw.inflight_per_connection,
            "inflight_per_connection",
            DEFAULT_INFLIGHT_PER_CONNECTION_BYTES,
        )?;
        let inflight_total_bytes = inflight(
            &raw.inflight_total,
            "inflight_total",
            DEFAULT_INFLIGHT_TOTAL_BYTES,
        )?;
        let metrics = address(&src, raw.metrics, "metrics", "127.0.0.1:9109")?;
        if let Some(psk) = &raw.tls_psk {
            return src.err(
                psk.span(),
                "tls_psk: pre-shared keys are not supported (the TLS library, rustls, has no external-PSK support yet); use X.509 certificates with tls_certificates",
            );
        }
        let tls_mode = match &raw.tls {
            Some(t) => crate::tls::TlsMode::parse(t.get_ref()).map_or_else(
                || {
                    src.err(
                        t.span(),
                        format!(
                            "tls = {:?}: expected \"off\", \"on\" or \"require\"",
                            t.get_ref()
                        ),
                    )
                },
                Ok,
            )?,
            None => crate::tls::TlsMode::Off,
        };
        if tls_mode != crate::tls::TlsMode::Off
            && let Some(t) = &raw.tls
            && non_empty(raw.tls_certificates.clone()).is_none()
        {
            return src.err(
                t.span(),
                "tls is on but tls_certificates is not set: expected a directory holding server-cert.pem and server-key.pem",
            );
        }
        let tls = crate::tls::TlsSettings {
            mode: tls_mode,
            certificates: rel(raw.tls_certificates),
            verify_peer: raw.tls_verify_peer.unwrap_or(false),
            server: None,
        };
        Ok(ServerConfig {
            source: file.to_string(),
            listen,
            unix_socket: rel(raw.unix_socket),
            admin_socket: rel(raw.admin_socket).unwrap_or_else(|| data_dir.join("admin.sock")),
            vhost_user_dir: rel(raw.vhost_user_dir),
            metrics,
            tls,
            chunk_bytes: engine.chunk_bytes,
            journal_bytes: engine.journal_bytes,
            commit_interval_ms: engine.commit_interval_ns / 1_000_000,
            inflight_per_connection_bytes,
            inflight_total_bytes,
            tiering: engine.tiering.clone(),
            log: engine.log.clone(),
            io,
            threads,
            threads_set: raw.threads.is_some(),
            metadata_pool: engine.meta_pool.0 as usize,
            pools,
            volumes,
            data_dir,
            engine,
        })
    }

    /// Point every relative path at a different data directory.
    pub fn with_data_dir(mut self, dir: &Path) -> ServerConfig {
        let old = self.data_dir.clone();
        let move_path = |p: &PathBuf| match p.strip_prefix(&old) {
            Ok(rest) => dir.join(rest),
            Err(_) => p.clone(),
        };
        for p in &mut self.pools {
            p.path = move_path(&p.path);
        }
        self.unix_socket = self.unix_socket.as_ref().map(move_path);
        self.admin_socket = move_path(&self.admin_socket);
        self.vhost_user_dir = self.vhost_user_dir.as_ref().map(move_path);
        self.tls.certificates = self.tls.certificates.as_ref().map(move_path);
        self.data_dir = dir.to_path_buf();
        self
    }
}

/// `threads = N` / `--threads N`: the shards `serve` runs (issue 18), each a thread with
/// its own engine over its slice of every pool (`threaded.rs`). The default stays 1.
pub fn check_threads(n: u64) -> Result<u16, String> {
    let max = tiervisor_engine::shard::MAX_SHARDS;
    match n {
        n if n == 0 || n > u64::from(max) => Err(format!("threads = {n}: expected 1..={max}")),
        n => Ok(n as u16),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_is_one_by_default_and_out_of_range_is_refused() {
        assert_eq!(ServerConfig::default_config().threads, 1);
        let with =
            |n: &str| DEFAULT_CONFIG.replacen("io = \"uring\"", &format!("threads = {n}"), 1);
        assert_eq!(
            ServerConfig::parse("c.toml", &with("1")).unwrap().threads,
            1
        );
        let e = ServerConfig::parse("c.toml", &with("0")).unwrap_err();
        assert_eq!(e.line, Some(10), "{e}");
        assert!(e.message.contains("expected 1..=64"), "{e}");
        assert_eq!(
            ServerConfig::parse("c.toml", &with("4")).unwrap().threads,
            4
        );
        let e = ServerConfig::parse("c.toml", &with("65")).unwrap_err();
        assert!(e.to_string().starts_with("c.toml:10"), "{e}");
        assert!(ServerConfig::parse("c.toml", &with("-1")).is_err());
    }

    /// The give-back hold: 1 s by default, 0 keeps borrowed space, past an hour refused
    /// with its line.
    #[test]
    fn give_back_hold_is_read_and_checked() {
        let with = |t: &str| DEFAULT_CONFIG.replacen("io = \"uring\"", t, 1);
        let hold = |t: &str| {
            let c = ServerConfig::parse("c.toml", &with(t)).unwrap();
            c.engine.give_back_hold_ns
        };
        assert_eq!(hold(""), 1_000_000_000);
        assert_eq!(hold("give_back_hold_ms = 0"), 0);
        assert_eq!(hold("give_back_hold_ms = 250"), 250_000_000);
        let e = ServerConfig::parse("c.toml", &with("give_back_hold_ms = 3600001")).unwrap_err();
        assert_eq!(e.line, Some(10), "{e}");
        assert!(e.message.contains("give_back_hold_ms: expected 0"), "{e}");
    }

    #[test]
    fn default_config_is_what_the_issue_asks() {
        let c = ServerConfig::default_config();
        assert_eq!(c.listen.as_deref(), Some("127.0.0.1:10809"));
        assert_eq!(c.pools.len(), 2);
        assert_eq!(
            (c.pools[0].name.as_str(), c.pools[0].size_bytes),
            ("ssd", Some(2 << 30))
        );
        assert_eq!(
            (c.pools[1].name.as_str(), c.pools[1].size_bytes),
            ("hdd", Some(8 << 30))
        );
        assert_eq!(
            c.volumes
                .iter()
                .map(|v| (v.name.as_str(), v.size_bytes))
                .collect::<Vec<_>>(),
            vec![("vm1", 4 << 30), ("vm2", 4 << 30)]
        );
        assert!(c.unix_socket.unwrap().starts_with("./tiervisor-data"));
        assert!(c.metrics.is_none());
        let moved = ServerConfig::default_config().with_data_dir(Path::new("/tmp/x"));
        assert_eq!(moved.pools[0].path, Path::new("/tmp/x/ssd.pool"));
        assert_eq!(moved.admin_socket, Path::new("/tmp/x/admin.sock"));
        assert!(moved.vhost_user_dir.is_none());
    }

    #[test]
    fn vhost_user_dir_is_relative_to_the_data_directory() {
        let text = DEFAULT_CONFIG.replacen(
            "admin_socket = ",
            "vhost_user_dir = \"vhost\"\nadmin_socket = ",
            1,
        );
        let c = ServerConfig::parse("c.toml", &text).unwrap();
        assert_eq!(
            c.vhost_user_dir.as_deref(),
            Some(Path::new("./tiervisor-data/vhost"))
        );
        let moved = c.with_data_dir(Path::new("/tmp/x"));
        assert_eq!(
            moved.vhost_user_dir.as_deref(),
            Some(Path::new("/tmp/x/vhost"))
        );
    }

    #[test]
    fn errors_name_file_and_line() {
        let bad = DEFAULT_CONFIG.replace("kind = \"hdd\"", "kind = \"tape\"");
        let e = ServerConfig::parse("c.toml", &bad).unwrap_err();
        assert_eq!(e.line, Some(23));
        assert!(e.message.contains("tape"), "{e}");
        let e =
            ServerConfig::parse("c.toml", &format!("{DEFAULT_CONFIG}\nbogus = 1\n")).unwrap_err();
        assert!(e.to_string().starts_with("c.toml:"), "{e}");
        let e = ServerConfig::parse(
            "c.toml",
            &DEFAULT_CONFIG.replacen("pool = \"hdd\"", "pool = \"floppy\"", 1),
        )
        .unwrap_err();
        assert!(e.message.contains("floppy"), "{e}");
    }

    #[test]
    fn direct_and_write_buffer_are_per_pool() {
        let text = DEFAULT_CONFIG.replacen(
            "kind = \"ssd\"\n",
            "kind = \"ssd\"\ndirect = true\nwrite_buffer = \"64m\"\n",
            1,
        );
        let c = ServerConfig::parse("c.toml", &text).unwrap();
        assert!(c.pools[0].direct && !c.pools[1].direct);
        let wb: Vec<_> = c.engine.pools.iter().map(|p| p.write_buffer).collect();
        assert_eq!(wb[0].map(|w| w.size_bytes), Some(64 << 20));
        assert_eq!(wb[1], None);
        let off = text.replace("\"64m\"", "0");
        let c = ServerConfig::parse("c.toml", &off).unwrap();
        assert_eq!(c.engine.pools[0].write_buffer, None, "0 turns it off");
        let e = ServerConfig::parse("c.toml", &text.replace("direct = true", "direct = 3"))
            .unwrap_err();
        assert!(e.to_string().starts_with("c.toml:"), "{e}");
    }

    #[test]
    fn bad_addresses_and_shared_pool_paths_are_config_errors() {
        let bad = DEFAULT_CONFIG.replace("127.0.0.1:10809", "localhost:nbd");
        let e = ServerConfig::parse("c.toml", &bad).unwrap_err();
        assert_eq!(e.line, Some(4), "{e}");
        assert!(e.message.contains("HOST:PORT"), "{e}");
        let bad = DEFAULT_CONFIG.replace("# metrics = \"127.0.0.1:9109\"", "metrics = \"9109\"");
        let e = ServerConfig::parse("c.toml", &bad).unwrap_err();
        assert!(e.message.starts_with("metrics"), "{e}");
        let bad = DEFAULT_CONFIG.replace("path = \"hdd.pool\"", "path = \"./ssd.pool\"");
        let e = ServerConfig::parse("c.toml", &bad).unwrap_err();
        assert_eq!(e.line, Some(21), "{e}");
        assert!(e.message.contains("pool ssd already uses"), "{e}");
    }
}
