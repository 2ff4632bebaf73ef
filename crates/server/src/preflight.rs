//! Checks made before anything is written to disk: the TCP ports are bound, socket paths
//! fit, every pool is either present or (with permission) absent as a whole, and nothing
//! that looks like an earlier tiervisor data set is about to be formatted over.

use std::io::Read as _;
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use tiervisor_engine::StartMode;

use crate::config::{ServerConfig, parse_address};

/// What the operator allowed at start.
#[derive(Clone, Copy, Debug, Default)]
pub struct StartOptions {
    /// Create and format the pools if none of them exists yet (`--format-new`, `tiervisor
    /// pool format`, or the embedded default on a fresh data directory).
    pub format_new: bool,
}

/// The TCP listeners, bound before any pool file is touched so that a bad address or a
/// port in use is found first.
#[derive(Default)]
pub struct Bound {
    pub nbd: Option<TcpListener>,
    pub metrics: Option<TcpListener>,
    /// A Unix socket systemd passed for NBD; `unix_socket` is bound later otherwise.
    pub nbd_unix: Option<std::os::unix::net::UnixListener>,
}

pub fn bind_tcp(cfg: &ServerConfig) -> Result<Bound, String> {
    let bind = |addr: &Option<String>, what: &str| -> Result<Option<TcpListener>, String> {
        let Some(addr) = addr else { return Ok(None) };
        let sa = parse_address(addr).map_err(|e| format!("{what} address {addr:?}: {e}"))?;
        let l = TcpListener::bind(sa).map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::AddrInUse {
                " (another server is using the port: stop it or choose another with --listen)"
            } else {
                ""
            };
            format!("cannot listen on {sa} for {what}: {e}{hint}")
        })?;
        l.set_nonblocking(true)
            .map_err(|e| format!("{what} listener: {e}"))?;
        Ok(Some(l))
    };
    // Sockets systemd passed take the place of the configured addresses.
    let activated = crate::activation::from_env()?;
    Ok(Bound {
        nbd: match activated.nbd {
            Some(l) => Some(l),
            None => bind(&cfg.listen, "NBD")?,
        },
        metrics: match activated.metrics {
            Some(l) => Some(l),
            None => bind(&cfg.metrics, "metrics")?,
        },
        nbd_unix: activated.nbd_unix,
    })
}

/// Unix socket paths must fit `sockaddr_un`; checked before pools are created.
pub fn check_socket_paths(cfg: &ServerConfig) -> Result<(), String> {
    let nbd = cfg.unix_socket.iter().map(|p| (p, "NBD socket"));
    let vhost: Vec<_> = cfg
        .vhost_user_dir
        .iter()
        .flat_map(|d| {
            cfg.volumes
                .iter()
                .map(|v| crate::vhost::socket_path(d, &v.name))
        })
        .collect();
    let vhost = vhost.iter().map(|p| (p, "vhost-user socket"));
    for (p, what) in nbd
        .chain([(&cfg.admin_socket, "admin socket")])
        .chain(vhost)
    {
        if p.as_os_str().len() >= 108 {
            return Err(format!(
                "{what} path {} is too long for a Unix socket (expected at most 107 bytes; use a shorter data directory)",
                p.display()
            ));
        }
    }
    Ok(())
}

/// Whether a data directory is fresh: absent, or present and empty.
pub fn dir_is_fresh(dir: &Path) -> bool {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_none(),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Decide how the engine starts, or refuse. Writes nothing.
pub fn plan(cfg: &ServerConfig, opts: StartOptions) -> Result<StartMode, String> {
    check_distinct_files(cfg)?;
    let missing: Vec<&PathBuf> = cfg
        .pools
        .iter()
        .map(|p| &p.path)
        .filter(|p| std::fs::symlink_metadata(p).is_err())
        .collect();
    let list = |ps: &[&PathBuf]| {
        ps.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if missing.is_empty() {
        // A system to mount; blank pools are formatted only when that was asked for.
        return Ok(if opts.format_new {
            StartMode::Auto
        } else {
            StartMode::Mount
        });
    }
    if missing.len() < cfg.pools.len() {
        let present: Vec<&PathBuf> = cfg
            .pools
            .iter()
            .map(|p| &p.path)
            .filter(|p| !missing.contains(p))
            .collect();
        return Err(format!(
            "pool file(s) missing: {}; the other pool(s) exist ({}), so this looks like an existing system that lost a pool or a configuration with a wrong path. Nothing was created: restore the missing file(s) or correct `path` in the configuration",
            list(&missing),
            list(&present)
        ));
    }
    if !opts.format_new {
        return Err(format!(
            "no pool files found (missing: {}). If this is a new installation, start with --format-new (or run `tiervisor pool format`) to create them; otherwise the data directory is wrong or its storage is not mounted. Nothing was created",
            list(&missing)
        ));
    }
    let mut dirs: Vec<PathBuf> = vec![cfg.data_dir.clone()];
    for p in &cfg.pools {
        if let Some(d) = p.path.parent().filter(|d| !dirs.iter().any(|x| x == d)) {
            dirs.push(d.to_path_buf());
        }
    }
    for d in &dirs {
        if let Some(old) = old_pool_in(d) {
            return Err(format!(
                "{} looks like a pool of an earlier tiervisor data set (it has a tiervisor superblock), but the configuration names other pool files ({}); refusing to format beside it. Nothing was created: correct the configuration or move the old files away",
                old.display(),
                list(&missing)
            ));
        }
    }
    Ok(StartMode::Auto)
}

/// Two pool names for one file (a symlink, a hard link, a second path to a device) would
/// have one pool overwrite the other; the configuration check catches only equal spellings.
fn check_distinct_files(cfg: &ServerConfig) -> Result<(), String> {
    let mut seen: Vec<((u64, u64), &str)> = Vec::new();
    for p in &cfg.pools {
        let Ok(m) = std::fs::metadata(&p.path) else {
            continue;
        };
        let id = if m.file_type().is_file() {
            (m.dev(), m.ino())
        } else {
            (u64::MAX, m.rdev())
        };
        if let Some((_, other)) = seen.iter().find(|(i, _)| *i == id) {
            return Err(format!(
                "pools {other} and {} are the same file or device ({}); expected a different one for each pool",
                p.name,
                p.path.display()
            ));
        }
        seen.push((id, &p.name));
    }
    Ok(())
}

/// The first regular file in `dir` that starts with a tiervisor superblock.
fn old_pool_in(dir: &Path) -> Option<PathBuf> {
    let entries = std::fs::read_dir(dir).ok()?;
    let mut names: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
    names.sort();
    names.into_iter().find(|p| {
        let Ok(mut f) = std::fs::File::open(p) else {
            return false;
        };
        if !f.metadata().is_ok_and(|m| m.is_file()) {
            return false;
        }
        let mut head = vec![0u8; 8192];
        let mut got = 0;
        while got < head.len() {
            match f.read(&mut head[got..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n,
            }
        }
        tiervisor_engine::layout::looks_like_pool(&head[..got])
    })
}
