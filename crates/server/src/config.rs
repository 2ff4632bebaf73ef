//! `tiervisor serve` configuration (TOML). Without a file, [`DEFAULT_CONFIG`] is used.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tiervisor_conf::{ConfError, LogToml, SizeVal, Source, Spanned, TieringToml, volume};
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
    metrics: Option<Spanned<String>>,
    chunk: Option<Spanned<SizeVal>>,
    journal: Option<Spanned<SizeVal>>,
    commit_interval_ms: Option<u64>,
    io: Option<Spanned<String>>,
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
    log: Option<tiervisor_conf::Switch>,
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
    priority: Option<u8>,
    description: Option<String>,
    read_only: Option<bool>,
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
    pub metrics: Option<String>,
    pub chunk_bytes: u64,
    pub journal_bytes: u64,
    pub commit_interval_ms: u64,
    pub tiering: tiervisor_engine::TieringConfig,
    pub log: tiervisor_engine::LogConfig,
    pub io: IoKind,
    pub metadata_pool: usize,
    pub pools: Vec<PoolDef>,
    pub volumes: Vec<VolumeDef>,
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|x| !x.is_empty())
}

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
        let chunk_bytes = match &raw.chunk {
            Some(c) => {
                let v = src.size(c, "chunk")?;
                if !v.is_power_of_two() || !(64 << 10..=64 << 20).contains(&v) {
                    return src.err(
                        c.span(),
                        "chunk: expected a power of two between 64k and 64m",
                    );
                }
                v
            }
            None => tiervisor_engine::config::DEFAULT_CHUNK_BYTES,
        };
        let journal_bytes = match &raw.journal {
            Some(j) => {
                let v = src.size(j, "journal")?;
                if v < 64 << 10 || v % 4096 != 0 {
                    return src.err(j.span(), "journal: expected a multiple of 4k, at least 64k");
                }
                v
            }
            None => tiervisor_engine::config::DEFAULT_JOURNAL_BYTES,
        };
        let io = match &raw.io {
            Some(s) => IoKind::parse(s.get_ref()).map_or_else(
                || src.err(s.span(), "io: expected \"uring\" or \"threads\""),
                Ok,
            )?,
            None => IoKind::Uring,
        };
        let mut pools: Vec<PoolDef> = Vec::new();
        for p in &raw.pools {
            let name = p.name.get_ref().clone();
            if name.is_empty() || name.len() > 63 || pools.iter().any(|q| q.name == name) {
                return src.err(
                    p.name.span(),
                    format!("pool name {name:?}: expected a unique name of 1 to 63 bytes"),
                );
            }
            let medium = match p.kind.get_ref().as_str() {
                "ssd" => Medium::Ssd,
                "hdd" => Medium::Hdd,
                o => {
                    return src.err(
                        p.kind.span(),
                        format!("kind {o:?}: expected \"ssd\" or \"hdd\""),
                    );
                }
            };
            let size_bytes = match &p.size {
                Some(s) => {
                    let v = src.size(s, "size")?;
                    if v < 16 << 20 {
                        return src.err(s.span(), "size: expected at least 16m");
                    }
                    Some(v)
                }
                None => None,
            };
            let queue_depth = match &p.queue_depth {
                Some(q) if !(1..=4096).contains(q.get_ref()) => {
                    return src.err(q.span(), "queue_depth: expected 1 to 4096");
                }
                Some(q) => *q.get_ref(),
                None => 64,
            };
            let scheduler = tiervisor_conf::sched::scheduler(&src, p.scheduler.as_ref())?;
            let path = PathBuf::from(p.path.get_ref());
            let path = if path.is_absolute() {
                path
            } else {
                data_dir.join(path)
            };
            if let Some(q) = pools.iter().find(|q| same_path(&q.path, &path)) {
                return src.err(
                    p.path.span(),
                    format!(
                        "path {:?}: pool {} already uses {}; expected a different file or device for each pool",
                        p.path.get_ref(),
                        q.name,
                        q.path.display()
                    ),
                );
            }
            pools.push(PoolDef {
                name,
                path,
                size_bytes,
                medium,
                queue_depth,
                scheduler,
                log: p.log.is_some_and(|s| s.0),
            });
        }
        if pools.is_empty() {
            return Err(ConfError::at(file, 1, "expected at least one [[pool]]"));
        }
        let metadata_pool = match &raw.metadata_pool {
            Some(m) => pools
                .iter()
                .position(|p| p.name == *m.get_ref())
                .map_or_else(
                    || {
                        src.err(
                            m.span(),
                            format!("metadata_pool {:?} is not a defined pool", m.get_ref()),
                        )
                    },
                    Ok,
                )?,
            None => pools
                .iter()
                .position(|p| p.medium == Medium::Ssd)
                .unwrap_or(0),
        };
        let mut volumes: Vec<VolumeDef> = Vec::new();
        for v in &raw.volumes {
            let name = v.name.get_ref().clone();
            let valid =
                !name.is_empty() && name.len() <= 63 && name.bytes().all(|b| b.is_ascii_graphic());
            if !valid || volumes.iter().any(|w| w.name == name) {
                return src.err(v.name.span(), format!("volume name {name:?}: expected a unique name of 1 to 63 printable characters"));
            }
            let size_bytes = src.size(&v.size, "size")?;
            if size_bytes == 0 || size_bytes % 512 != 0 {
                return src.err(
                    v.size.span(),
                    "size: expected a positive multiple of 512 bytes",
                );
            }
            let pool_names: Vec<&str> = pools.iter().map(|p| p.name.as_str()).collect();
            let pool = volume::pool_named(&src, &v.pool, &pool_names)?;
            let provisioning =
                volume::provisioning(&src, v.provisioning.as_ref(), Provisioning::Thin)?;
            let fast_pool =
                volume::fast_pool(&src, v.fast_pool.as_ref(), &pool_names, pool, |i| {
                    pools[i].medium == Medium::Ssd
                })?;
            let placement = volume::placement(
                &src,
                volume::PlacementKeys {
                    placement: v.placement.as_ref(),
                    fast_percent: v.fast_percent.as_ref(),
                    fast_budget: v.fast_budget.as_ref(),
                    priority: v.priority,
                },
            )?;
            if placement != Placement::Pinned && fast_pool.is_none_or(|f| f == pool) {
                return src.err(
                    v.name.span(),
                    format!(
                        "volume {name}: {} placement needs a fast_pool other than its own pool",
                        placement.name()
                    ),
                );
            }
            let qos = tiervisor_conf::sched::qos(
                &src,
                tiervisor_conf::sched::QosKeys {
                    reservation_iops: v.reservation_iops.as_ref(),
                    limit_iops: v.limit_iops.as_ref(),
                    weight: v.weight.as_ref(),
                },
            )?;
            volumes.push(VolumeDef {
                name,
                size_bytes,
                pool,
                provisioning,
                placement,
                fast_pool,
                description: v.description.clone().unwrap_or_default(),
                read_only: v.read_only.unwrap_or(false),
                log: v.log.map(|s| s.0),
                qos,
            });
        }
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
        let metrics = address(&src, raw.metrics, "metrics", "127.0.0.1:9109")?;
        Ok(ServerConfig {
            source: file.to_string(),
            listen,
            unix_socket: rel(raw.unix_socket),
            admin_socket: rel(raw.admin_socket).unwrap_or_else(|| data_dir.join("admin.sock")),
            metrics,
            chunk_bytes,
            journal_bytes,
            commit_interval_ms: raw.commit_interval_ms.unwrap_or(1000),
            tiering: TieringToml::resolve(raw.tiering.as_ref(), &src)?,
            log: LogToml::resolve(raw.log.as_ref(), &src)?,
            io,
            metadata_pool,
            pools,
            volumes,
            data_dir,
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
        self.data_dir = dir.to_path_buf();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
