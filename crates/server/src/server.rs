//! The real-clock driver: one thread, one event loop (mio), the engine inline, pool I/O
//! through io_uring (or a thread pool). NBD clients connect over TCP or a Unix socket;
//! `tiervisor ctl` talks to the admin socket; Prometheus scrapes the metrics endpoint.

use std::io::{IoSlice, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use tiervisor_engine::{
    DeviceCompletion, Engine, EngineConfig, EngineEvent, EngineState, Medium, Outputs, StartMode,
    VmRequest,
};

use crate::admin;
use crate::budget::Budget;
use crate::config::ServerConfig;
use crate::io::{self, Backend};
use crate::nbd::conn::{Closing, Conn, Export, WireRequest};
use crate::pools::{PoolFile, open_pool};
use crate::preflight::{self, StartOptions};
use crate::slowlog::SlowLog;

const TOK_TCP: Token = Token(0);
const TOK_UNIX: Token = Token(1);
const TOK_ADMIN: Token = Token(2);
const TOK_METRICS: Token = Token(3);
const TOK_IO: Token = Token(4);
const TOK_SIGNAL: Token = Token(5);
const TOK_HUP: Token = Token(6);
/// In-process requests (vhost-user-blk queue workers) are waiting.
const TOK_LOCAL: Token = Token(7);
/// How often the pool files' identity (path still names the open file) is checked.
const POOL_CHECK_EVERY: Duration = Duration::from_secs(2);
const CONN_BASE: usize = 16;
const CLIENT_BASE: usize = 1 << 30;
/// Requests a connection may have in flight before we stop reading from it.
const MAX_IN_FLIGHT: u32 = 1024;
/// Output a connection may have queued before we stop reading from it.
const MAX_QUEUED_OUT: usize = 256 << 20;

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn fd(&self) -> RawFd {
        match self {
            Stream::Tcp(s) => s.as_raw_fd(),
            Stream::Unix(s) => s.as_raw_fd(),
        }
    }
    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
        }
    }
    fn write_vectored(&mut self, b: &[IoSlice<'_>]) -> std::io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write_vectored(b),
            Stream::Unix(s) => s.write_vectored(b),
        }
    }
}

struct ConnSlot {
    stream: Stream,
    conn: Conn,
    generation: u64,
    peer: String,
    read_paused: bool,
    counted_export: Option<usize>,
}

/// A reply route: which connection and request a VM completion belongs to.
struct Route {
    conn: usize,
    generation: u64,
    handle: u64,
    cmd: u16,
    offset: u64,
    /// Payload bytes the request holds (see `nbd::conn::payload_cost`).
    cost: u64,
    /// When it arrived (ns since the server started), for `slowlog`.
    received_ns: u64,
}

/// Counters the server keeps beside the engine's.
#[derive(Default, Clone, serde::Serialize)]
pub struct ServerStats {
    pub connections_open: u64,
    pub connections_total: u64,
    pub connections_per_export: Vec<(String, u64)>,
    /// Per open connection: (connection number, peer, export, request payload bytes
    /// held: requests read but not answered, and replies not yet sent).
    pub inflight_per_connection: Vec<(usize, String, String, u64)>,
    /// Each file pool's possible growth against its filesystem's free space.
    pub pool_space: Vec<crate::space::PoolSpace>,
    pub protocol_errors: u64,
    pub requests: u64,
    pub io_backend: String,
    pub uptime_s: f64,
}

pub struct Server {
    cfg: ServerConfig,
    engine: Engine,
    backend: Box<dyn Backend>,
    poll: Poll,
    pools: Vec<PoolFile>,
    /// When the pool files are next checked, and the problems found so far (each once).
    pool_check_at: Instant,
    pool_problems: Vec<String>,
    tcp: Option<TcpListener>,
    unix: Option<UnixListener>,
    admin: Option<UnixListener>,
    metrics: Option<TcpListener>,
    conns: Slab<ConnSlot>,
    clients: Slab<admin::Client>,
    routes: Slab<Route>,
    exports: Vec<Export>,
    out: Outputs,
    comps: Vec<DeviceCompletion>,
    wire: Vec<WireRequest>,
    dirty: Vec<usize>,
    /// Connections whose last read got data: read again on the next pass.
    reread: Vec<usize>,
    t0: Instant,
    generation: u64,
    signal_rx: mio::net::UnixStream,
    hup_rx: mio::net::UnixStream,
    _signal_ids: Vec<signal_hook::SigId>,
    signals: u32,
    stopping: bool,
    stats: ServerStats,
    per_export: Vec<u64>,
    budget: Budget,
    log: Box<dyn FnMut(&str)>,
    /// Device errors and failed commits, logged through `tracing`, rate-limited.
    error_log: crate::ratelimit::RateLimit,
    slow: SlowLog,
    /// In-process requests (vhost-user-blk) and their sockets; `None` unless configured.
    local: Option<crate::local::LocalSource>,
    vhost: Option<crate::vhost::VhostUser>,
}

fn random_uuid() -> [u8; 16] {
    let mut u = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut u);
    }
    // A fallback that still differs between runs, should /dev/urandom be missing.
    if u == [0; 16] {
        let n = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(1);
        u = (n ^ (std::process::id() as u128) << 64).to_le_bytes();
    }
    u
}

fn engine_config(cfg: &ServerConfig, sizes: &[u64]) -> EngineConfig {
    let mut e = cfg.engine.clone();
    e.system_uuid = random_uuid();
    // A flush is an fdatasync here: reads and writes go on beside it.
    e.flush_takes_queue_slot = false;
    // Block devices report their size only once opened.
    for (p, &size_bytes) in e.pools.iter_mut().zip(sizes) {
        p.capacity_bytes = size_bytes;
    }
    e
}

/// Answer the block-status queries a connection parsed, from the mapping table.
fn answer_status_queries(engine: &Engine, conn: &mut Conn) {
    for q in std::mem::take(&mut conn.status_queries) {
        let max = if q.req_one {
            1
        } else {
            crate::nbd::meta::MAX_STATUS_EXTENTS
        };
        conn.status_reply(
            q.handle,
            engine.block_status(q.volume, q.offset, q.length, max),
        );
    }
}

fn bind_unix(path: &std::path::Path) -> Result<UnixListener, String> {
    if path.exists() {
        // A stale socket from an earlier run; the pool locks already ensure we are alone.
        let _ = std::fs::remove_file(path);
    }
    UnixListener::bind(path).map_err(|e| format!("cannot listen on {}: {e}", path.display()))
}

/// Everything that can be refused is refused before the first write: socket paths, TCP
/// ports, which pools exist, and (when pools are to be created) the engine configuration
/// with the configured sizes. Only then is the data directory made and are pools opened.
fn open_checked(
    cfg: &ServerConfig,
    opts: StartOptions,
) -> Result<(preflight::Bound, StartMode, Vec<PoolFile>), String> {
    // The engine's own checks, with the configured sizes (a block device without a
    // configured size is checked once it is open).
    let sizes: Option<Vec<u64>> = cfg.pools.iter().map(|d| d.size_bytes).collect();
    if let Some(sizes) = sizes {
        Engine::new(engine_config(cfg, &sizes)).map_err(|e| format!("configuration: {e}"))?;
    }
    preflight::check_socket_paths(cfg)?;
    let bound = preflight::bind_tcp(cfg)?;
    let mode = preflight::plan(cfg, opts)?;
    crate::space::check_thick(cfg)?;
    std::fs::create_dir_all(&cfg.data_dir).map_err(|e| {
        format!(
            "cannot create data directory {}: {e}",
            cfg.data_dir.display()
        )
    })?;
    let pools = cfg.pools.iter().map(open_pool).collect::<Result<_, _>>()?;
    Ok((bound, mode, pools))
}

impl Server {
    /// Check everything that can be checked, then open the pools and bring the engine up
    /// (mount, or format where `opts` allows it). `log` receives the lines an operator
    /// should see.
    pub fn start(
        cfg: ServerConfig,
        opts: StartOptions,
        mut log: Box<dyn FnMut(&str)>,
    ) -> Result<Server, String> {
        let (bound, mode, pools) = open_checked(&cfg, opts)?;
        let sizes: Vec<u64> = pools.iter().map(|p| p.size_bytes).collect();
        let engine =
            Engine::new(engine_config(&cfg, &sizes)).map_err(|e| format!("configuration: {e}"))?;
        for p in &pools {
            if p.created {
                log(&format!(
                    "created pool {} ({} bytes, sparse)",
                    p.name, p.size_bytes
                ));
            }
        }
        for (p, def) in pools.iter().zip(&cfg.pools) {
            let buffer = cfg.engine.pools.iter().find(|c| c.name == def.name);
            let buffer = buffer.and_then(|c| c.write_buffer).map(|w| w.size_bytes);
            if p.direct.is_some() || buffer.is_some() {
                log(&format!(
                    "pool {}: {}, write buffer {}",
                    p.name,
                    if p.direct.is_some() {
                        "O_DIRECT"
                    } else {
                        "page cache"
                    },
                    buffer.map_or("off".to_string(), |b| format!("{b} bytes"))
                ));
            }
        }
        for s in crate::space::survey(&pools).iter().filter(|s| s.low) {
            log(&format!("warning: {}", crate::space::warning(s)));
        }
        let fds = pools.iter().map(PoolFile::fds).collect();
        let backend = io::open(cfg.io, fds).map_err(|e| format!("cannot set up I/O: {e}"))?;
        let poll = Poll::new().map_err(|e| format!("poll: {e}"))?;
        let (sig_tx, sig_rx) =
            std::os::unix::net::UnixStream::pair().map_err(|e| format!("signal pipe: {e}"))?;
        sig_rx
            .set_nonblocking(true)
            .map_err(|e| format!("signal pipe: {e}"))?;
        let (hup_tx, hup_rx) =
            std::os::unix::net::UnixStream::pair().map_err(|e| format!("signal pipe: {e}"))?;
        hup_rx
            .set_nonblocking(true)
            .map_err(|e| format!("signal pipe: {e}"))?;
        let mut ids = Vec::new();
        for (s, tx) in [
            (signal_hook::consts::SIGINT, &sig_tx),
            (signal_hook::consts::SIGTERM, &sig_tx),
            (signal_hook::consts::SIGHUP, &hup_tx),
        ] {
            let tx = tx.try_clone().map_err(|e| format!("signal pipe: {e}"))?;
            ids.push(
                signal_hook::low_level::pipe::register(s, tx)
                    .map_err(|e| format!("signal handler: {e}"))?,
            );
        }
        let mut signal_rx = mio::net::UnixStream::from_std(sig_rx);
        poll.registry()
            .register(&mut signal_rx, TOK_SIGNAL, Interest::READABLE)
            .map_err(|e| e.to_string())?;
        let mut hup_rx = mio::net::UnixStream::from_std(hup_rx);
        poll.registry()
            .register(&mut hup_rx, TOK_HUP, Interest::READABLE)
            .map_err(|e| e.to_string())?;
        let io_fd = backend.wake_fd();
        poll.registry()
            .register(&mut SourceFd(&io_fd), TOK_IO, Interest::READABLE)
            .map_err(|e| e.to_string())?;
        let stats = ServerStats {
            io_backend: backend.name().to_string(),
            ..Default::default()
        };
        let cfg_inflight = (cfg.inflight_per_connection_bytes, cfg.inflight_total_bytes);
        let mut s = Server {
            cfg,
            engine,
            backend,
            poll,
            pools,
            pool_check_at: Instant::now() + POOL_CHECK_EVERY,
            pool_problems: Vec::new(),
            tcp: None,
            unix: None,
            admin: None,
            metrics: None,
            conns: Slab::new(),
            clients: Slab::new(),
            routes: Slab::with_capacity(4096),
            exports: Vec::new(),
            out: Outputs::default(),
            comps: Vec::new(),
            wire: Vec::new(),
            dirty: Vec::new(),
            reread: Vec::new(),
            t0: Instant::now(),
            generation: 0,
            signal_rx,
            hup_rx,
            _signal_ids: ids,
            signals: 0,
            stopping: false,
            stats,
            per_export: Vec::new(),
            budget: Budget::new(cfg_inflight.0, cfg_inflight.1),
            log: Box::new(|_| {}),
            error_log: crate::ratelimit::RateLimit::new(20, Duration::from_secs(10)),
            slow: SlowLog::new(),
            local: None,
            vhost: None,
        };
        s.engine.start(s.now(), mode, &mut s.out);
        let mut events = Events::with_capacity(64);
        loop {
            // Mounting and formatting have timers too (a throttled pool holds the format's
            // writes until their targets): run those due, and wake for the next.
            let now = s.now();
            if s.engine.next_deadline().is_some_and(|w| w <= now) {
                s.engine.tick(now, &mut s.out);
            }
            s.drive();
            for line in s.take_event_lines() {
                log(&line);
            }
            match s.engine.state().clone() {
                EngineState::Ready => break,
                EngineState::Failed(r) => return Err(r),
                _ => {}
            }
            let check = Duration::from_millis(100);
            let timeout = s.engine.next_deadline().map_or(check, |w| {
                Duration::from_nanos(w.saturating_sub(s.now())).min(check)
            });
            match s.poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("poll: {e}")),
            }
            s.backend.clear_wake();
        }
        let thick: Vec<(String, usize, u64, u64)> = s
            .engine
            .thick_regions()
            .into_iter()
            .map(|(v, p, off, len)| (v, p.0 as usize, off, len))
            .collect();
        for line in crate::space::ensure_thick_allocated(&s.pools, &thick)? {
            log(&line);
        }
        s.exports = s
            .engine
            .volumes()
            .into_iter()
            .enumerate()
            .map(|(i, (name, size))| s.export_for(name, i, size))
            .collect();
        s.per_export = vec![0; s.exports.len()];
        s.listen(bound)?;
        s.start_vhost(&mut log)?;
        s.log = log;
        Ok(s)
    }

    /// Register the TCP listeners bound before the pools were opened; bind the Unix
    /// sockets (after the pool locks, which make removing a stale socket safe).
    fn listen(&mut self, bound: preflight::Bound) -> Result<(), String> {
        let reg = self.poll.registry();
        if let Some(l) = bound.nbd {
            let mut l = TcpListener::from_std(l);
            reg.register(&mut l, TOK_TCP, Interest::READABLE)
                .map_err(|e| e.to_string())?;
            self.tcp = Some(l);
        }
        if let Some(l) = bound.nbd_unix {
            // systemd owns this socket's path: not ours to bind, nor to remove at exit.
            self.cfg.unix_socket = None;
            let mut l = UnixListener::from_std(l);
            reg.register(&mut l, TOK_UNIX, Interest::READABLE)
                .map_err(|e| e.to_string())?;
            self.unix = Some(l);
        } else if let Some(p) = &self.cfg.unix_socket {
            let mut l = bind_unix(p)?;
            reg.register(&mut l, TOK_UNIX, Interest::READABLE)
                .map_err(|e| e.to_string())?;
            self.unix = Some(l);
        }
        let mut a = bind_unix(&self.cfg.admin_socket)?;
        std::fs::set_permissions(
            &self.cfg.admin_socket,
            std::fs::Permissions::from_mode(0o600),
        )
        .map_err(|e| format!("admin socket permissions: {e}"))?;
        reg.register(&mut a, TOK_ADMIN, Interest::READABLE)
            .map_err(|e| e.to_string())?;
        self.admin = Some(a);
        if let Some(l) = bound.metrics {
            let mut l = TcpListener::from_std(l);
            reg.register(&mut l, TOK_METRICS, Interest::READABLE)
                .map_err(|e| e.to_string())?;
            self.metrics = Some(l);
        }
        Ok(())
    }

    /// Serve every volume over vhost-user-blk, if `vhost_user_dir` is set.
    fn start_vhost(&mut self, log: &mut dyn FnMut(&str)) -> Result<(), String> {
        let Some(dir) = self.cfg.vhost_user_dir.clone() else {
            return Ok(());
        };
        let (source, submit) = crate::local::LocalSource::new(self.poll.registry(), TOK_LOCAL)
            .map_err(|e| format!("vhost-user: {e}"))?;
        let mut v = crate::vhost::VhostUser::new(&dir, submit)?;
        for e in &self.exports {
            v.add(e)?;
        }
        log(&format!(
            "vhost-user-blk: {} volume(s) on {}/<volume>.sock",
            self.exports.len(),
            dir.display()
        ));
        self.local = Some(source);
        self.vhost = Some(v);
        Ok(())
    }

    /// Hand the engine the in-process requests waiting (within the budget).
    fn take_local(&mut self) {
        let Some(l) = &mut self.local else { return };
        let mut reqs = Vec::new();
        l.take(&mut self.budget, &mut reqs);
        let now = self.now();
        self.stats.requests += reqs.len() as u64;
        for r in reqs {
            self.engine.submit(now, r, &mut self.out);
        }
    }

    /// Local address of the TCP listener (tests bind to port 0).
    pub fn tcp_addr(&self) -> Option<std::net::SocketAddr> {
        self.tcp.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The path of the NBD Unix socket served (configured or passed by systemd).
    pub fn unix_path(&self) -> Option<std::path::PathBuf> {
        let addr = self.unix.as_ref()?.local_addr().ok()?;
        addr.as_pathname().map(std::path::Path::to_path_buf)
    }

    pub fn exports(&self) -> &[Export] {
        &self.exports
    }

    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// The NBD export of volume `name` (engine index `i`, `size` bytes); a volume the
    /// configuration does not name (created by `ctl volume create`) gets the defaults.
    fn export_for(&self, name: String, i: usize, size: u64) -> Export {
        let def = self.cfg.volumes.iter().find(|v| v.name == name);
        let vol = tiervisor_engine::VolumeId(i as u32);
        let pool = def.map(|d| d.pool).or_else(|| {
            let home = self.engine.volume_home_pool(vol)?;
            Some(home.0 as usize)
        });
        Export {
            description: def
                .map(|d| d.description.clone())
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| format!("tiervisor volume {name}")),
            name,
            volume: vol,
            size_bytes: size,
            rotational: pool.is_some_and(|p| self.cfg.pools[p].medium == Medium::Hdd),
            read_only: def.is_some_and(|d| d.read_only),
        }
    }

    /// A volume created while serving (`ctl volume create`) is exported once the engine
    /// says it is durable.
    fn export_created(&mut self, name: &str) {
        // While mounting, every volume is exported once the mount is done.
        if self.engine.state() != &EngineState::Ready || self.exports.iter().any(|e| e.name == name)
        {
            return;
        }
        let Some(vol) = self.engine.volume_id(name) else {
            return;
        };
        let Some(size) = self.engine.volume_size(vol) else {
            return;
        };
        let e = self.export_for(name.to_string(), vol.0 as usize, size);
        if let Some(v) = &mut self.vhost
            && let Err(why) = v.add(&e)
        {
            (self.log)(&format!("volume {name}: no vhost-user socket: {why}"));
        }
        self.exports.push(e);
        self.per_export.push(0);
    }

    fn take_event_lines(&mut self) -> Vec<String> {
        let events: Vec<EngineEvent> = self.out.events.drain(..).collect();
        events
            .into_iter()
            .filter_map(|e| Some(match e {
                EngineEvent::Formatted { pools, volumes } => format!("formatted {pools} pool(s) with {volumes} volume(s)"),
                EngineEvent::Recovered { volume, records_replayed, checkpoint_seq, mapped_chunks } => format!(
                    "recovered volume {volume}: checkpoint at record {checkpoint_seq}, replayed {records_replayed} journal record(s), {mapped_chunks} chunk(s) mapped"
                ),
                EngineEvent::VolumeCreated { volume } => {
                    self.export_created(&volume);
                    format!("created volume {volume}")
                }
                EngineEvent::VolumeResized { volume, size_bytes } => {
                    // New connections see the new size; those already open keep the size
                    // they negotiated (NBD has no standard resize notice) and may now
                    // address the whole of it.
                    if let Some(e) = self.exports.iter_mut().find(|e| e.name == volume) {
                        e.size_bytes = size_bytes;
                    }
                    if let Some(v) = &self.vhost {
                        v.resized(&volume, size_bytes);
                    }
                    format!("volume {volume} is now {size_bytes} bytes")
                }
                EngineEvent::Ready => "ready".into(),
                EngineEvent::Stopped if !self.pool_problems.is_empty() => "stopped, but a pool file was lost while running (see the errors above)".into(),
                EngineEvent::Stopped if self.engine.lost_at_stop().is_empty() => "stopped: all data flushed and checkpoints written".into(),
                EngineEvent::Stopped => format!(
                    "stopped, but the final commit failed for volume(s) {}: their writes since the last successful FLUSH are lost",
                    self.engine.lost_at_stop().join(", ")
                ),
                EngineEvent::Failed { reason } => format!("engine failed: {reason}"),
                EngineEvent::Warning { message } => format!("warning: {message}"),
                EngineEvent::MigrationPhase { volume, phase, paused } => {
                    let state = if paused { "paused" } else { "running" };
                    tracing::info!("migration of {volume}: {phase} (volume {state})");
                    return None;
                }
                e @ (EngineEvent::DeviceError { .. } | EngineEvent::CommitFailed { .. }) => {
                    self.log_error_event(e);
                    return None;
                }
            }))
            .collect()
    }

    /// A device error or failed commit, through `tracing` (rate-limited).
    fn log_error_event(&mut self, e: EngineEvent) {
        let Some(left_out) = self.error_log.check(Instant::now()) else {
            return;
        };
        if left_out > 0 {
            tracing::error!(
                left_out,
                "{left_out} more device error(s) and failed commit(s) were not logged (at most 20 lines per 10 s; ctl stat counts them all)"
            );
        }
        match e {
            EngineEvent::DeviceError {
                pool,
                volume,
                kind,
                offset_bytes,
                len_bytes,
                errno,
            } => {
                let volume = volume.as_deref().unwrap_or("-");
                tracing::error!(
                    pool = pool.as_str(),
                    volume,
                    op = ?kind,
                    offset = offset_bytes,
                    len = len_bytes,
                    errno = errno_name(errno),
                    "pool I/O error"
                );
            }
            EngineEvent::CommitFailed { volume, errno } => {
                tracing::error!(
                    volume = volume.as_str(),
                    errno = errno_name(errno),
                    "commit failed; its records are retried at the next FLUSH or background commit"
                );
            }
            _ => {}
        }
    }

    /// Carry out the engine's outputs and feed back completions until nothing moves.
    fn drive(&mut self) {
        loop {
            let now = self.now();
            for op in self.out.ops.drain(..) {
                self.slow.submitted(now, &op);
                self.backend.submit(op);
            }
            let comps = std::mem::take(&mut self.out.completions);
            for c in comps {
                self.route_completion(now, c);
            }
            self.backend.commit();
            self.backend.reap(&mut self.comps);
            if self.comps.is_empty() {
                break;
            }
            for c in std::mem::take(&mut self.comps) {
                self.slow.completed(now, &c);
                self.engine.device_done(now, c, &mut self.out);
            }
        }
    }

    fn route_completion(&mut self, now: u64, c: tiervisor_engine::VmCompletion) {
        if crate::local::LocalSource::owns(c.id) {
            if let Some(l) = &mut self.local {
                l.complete(c, &mut self.budget);
            }
            return;
        }
        let Some(r) = self.routes.try_remove(c.id as usize) else {
            return;
        };
        self.slow.answered(now, r.received_ns, r.cmd, r.offset);
        let Some(slot) = self.conns.get_mut(r.conn) else {
            return;
        };
        if slot.generation != r.generation {
            return; // the connection closed; nobody to answer
        }
        let before = slot.conn.held_bytes();
        slot.conn
            .reply_costed(r.cost, r.handle, r.cmd, r.offset, c.result, c.data);
        self.budget.adjust(before, slot.conn.held_bytes());
        self.dirty.push(r.conn);
    }

    fn accept(&mut self, tok: Token) {
        loop {
            let (stream, peer) = match tok {
                TOK_TCP => match self.tcp.as_ref().map(|l| l.accept()) {
                    Some(Ok((s, a))) => {
                        let _ = s.set_nodelay(true);
                        (Stream::Tcp(s), a.to_string())
                    }
                    _ => return,
                },
                _ => match self.unix.as_ref().map(|l| l.accept()) {
                    Some(Ok((s, _))) => (Stream::Unix(s), "unix".to_string()),
                    _ => return,
                },
            };
            self.generation += 1;
            let entry = self.conns.vacant_entry();
            let key = entry.key();
            let mut slot = ConnSlot {
                stream,
                conn: Conn::new(),
                generation: self.generation,
                peer,
                read_paused: false,
                counted_export: None,
            };
            if self
                .poll
                .registry()
                .register(
                    slot.stream.source(),
                    Token(CONN_BASE + key),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .is_err()
            {
                continue;
            }
            entry.insert(slot);
            self.stats.connections_total += 1;
            self.stats.connections_open += 1;
            self.dirty.push(key);
        }
    }

    /// Read once from the socket, parse, hand requests to the engine. If the read got
    /// data, the connection is read again on the next pass of the loop (after this batch
    /// is submitted and answered), so requests that arrive meanwhile are batched.
    fn read_conn(&mut self, key: usize) {
        loop {
            let Some(slot) = self.conns.get_mut(key) else {
                return;
            };
            if slot.conn.closing.is_some() {
                return;
            }
            slot.conn.budget_bytes = self.budget.limit_for_conn();
            if slot.conn.over_budget {
                // Requests already buffered go first; read more only once they are taken.
                self.parse_and_submit(key);
                let Some(slot) = self.conns.get_mut(key) else {
                    return;
                };
                if slot.conn.over_budget {
                    slot.read_paused = true;
                    return;
                }
            }
            let Some(slot) = self.conns.get_mut(key) else {
                return;
            };
            if slot.conn.in_flight >= MAX_IN_FLIGHT || slot.conn.out_bytes >= MAX_QUEUED_OUT {
                slot.read_paused = true;
                return;
            }
            slot.read_paused = false;
            let want = slot.conn.want_bytes();
            let buf = &mut slot.conn.inbuf;
            buf.reserve(want);
            let spare = buf.capacity() - buf.len();
            let fd = slot.stream.fd();
            // SAFETY: reading into the buffer's spare capacity, then extending its length by
            // exactly the number of bytes the kernel wrote.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().add(buf.len()).cast(), spare) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    std::io::ErrorKind::WouldBlock => return,
                    std::io::ErrorKind::Interrupted => continue,
                    _ => {
                        slot.conn.closing = Some(Closing::Abort(format!("read error: {e}")));
                        self.dirty.push(key);
                        return;
                    }
                }
            }
            if n == 0 {
                slot.conn.closing = Some(Closing::Abort("peer closed the connection".into()));
                self.dirty.push(key);
                return;
            }
            // SAFETY: see above.
            unsafe { buf.set_len(buf.len() + n as usize) };
            self.parse_and_submit(key);
            self.dirty.push(key);
            self.reread.push(key);
            return;
        }
    }

    /// Parse what the connection has buffered (within its budget) and hand the requests
    /// to the engine.
    fn parse_and_submit(&mut self, key: usize) {
        let Some(slot) = self.conns.get_mut(key) else {
            return;
        };
        let held_before = slot.conn.held_bytes();
        {
            let mut wire = std::mem::take(&mut self.wire);
            slot.conn.process(&self.exports, &mut wire);
            answer_status_queries(&self.engine, &mut slot.conn);
            if slot.counted_export.is_none()
                && let Some(e) = slot.conn.export().filter(|_| slot.conn.in_transmission())
            {
                slot.counted_export = Some(e);
                self.per_export[e] += 1;
            }
            if matches!(slot.conn.closing, Some(Closing::Abort(_))) {
                self.stats.protocol_errors += 1;
            }
            let generation = slot.generation;
            let now = self.now();
            for w in wire.drain(..) {
                self.stats.requests += 1;
                let id = self.routes.insert(Route {
                    conn: key,
                    generation,
                    handle: w.handle,
                    cmd: w.cmd,
                    offset: w.offset,
                    cost: crate::nbd::conn::payload_cost(w.cmd, w.length),
                    received_ns: now,
                }) as u64;
                let mut r = VmRequest::new(id, w.volume, w.kind, w.offset, w.length);
                r.fua = w.fua;
                r.no_hole = w.no_hole;
                r.payload = w.payload;
                self.engine.submit(now, r, &mut self.out);
            }
            self.wire = wire;
        }
        if let Some(slot) = self.conns.get(key) {
            self.budget.adjust(held_before, slot.conn.held_bytes());
        }
    }

    /// Write queued output; close the connection if it is done.
    fn flush_conn(&mut self, key: usize) {
        let Some(slot) = self.conns.get_mut(key) else {
            return;
        };
        while !slot.conn.out.is_empty() {
            let mut slices = [IoSlice::new(&[]); 64];
            let n = slot
                .conn
                .out
                .iter()
                .zip(slices.iter_mut())
                .map(|(b, sl)| *sl = IoSlice::new(b))
                .count();
            match slot.stream.write_vectored(&slices[..n]) {
                Ok(0) => break,
                Ok(n) => {
                    let before = slot.conn.held_bytes();
                    slot.conn.consumed(n);
                    self.budget.adjust(before, slot.conn.held_bytes());
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    slot.conn.closing = Some(Closing::Abort(format!("write error: {e}")));
                    break;
                }
            }
        }
        if slot.conn.finished() {
            self.close_conn(key);
        } else if slot.read_paused
            && slot.conn.in_flight < MAX_IN_FLIGHT / 2
            && slot.conn.out_bytes < MAX_QUEUED_OUT / 2
            && slot.conn.held_bytes() < self.budget.per_conn_bytes
        {
            self.read_conn(key);
        }
    }

    fn close_conn(&mut self, key: usize) {
        let mut slot = self.conns.remove(key);
        self.budget.adjust(slot.conn.held_bytes(), 0);
        let _ = self.poll.registry().deregister(slot.stream.source());
        self.stats.connections_open -= 1;
        if let Some(e) = slot.counted_export {
            self.per_export[e] -= 1;
        }
        if let Some(Closing::Abort(why)) = &slot.conn.closing
            && !why.starts_with("peer closed")
        {
            (self.log)(&format!("closed connection from {}: {why}", slot.peer));
        }
    }

    pub fn server_stats(&self) -> ServerStats {
        let mut s = self.stats.clone();
        s.uptime_s = self.t0.elapsed().as_secs_f64();
        s.pool_space = crate::space::survey(&self.pools);
        s.connections_per_export = self
            .exports
            .iter()
            .map(|e| e.name.clone())
            .zip(self.per_export.iter().copied())
            .collect();
        s.inflight_per_connection = self
            .conns
            .iter()
            .map(|(k, c)| {
                let export = c
                    .counted_export
                    .and_then(|e| self.exports.get(e))
                    .map_or(String::new(), |e| e.name.clone());
                (k, c.peer.clone(), export, c.conn.held_bytes())
            })
            .collect();
        s
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    fn begin_stop(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        (self.log)("shutting down: finishing in-flight requests, flushing, writing checkpoints");
        self.watch_pools(true);
        // Stop taking new NBD connections; admin and metrics stay up.
        if let Some(mut l) = self.tcp.take() {
            let _ = self.poll.registry().deregister(&mut l);
        }
        if let Some(mut l) = self.unix.take() {
            let _ = self.poll.registry().deregister(&mut l);
        }
        let now = self.now();
        self.engine.begin_shutdown(now, &mut self.out);
    }

    /// Shut down now (as an admin `shutdown` would) and wait for the clean stop.
    pub fn stop(&mut self) -> Result<(), String> {
        self.begin_stop();
        self.run()
    }

    /// Serve until a signal (or an admin `shutdown`) and a clean stop.
    pub fn run(&mut self) -> Result<(), String> {
        let mut events = Events::with_capacity(1024);
        let mut passes_without_poll = 0u32;
        // A signal that came while the pools were mounting was seen (edge-triggered) by
        // the start loop, which does not handle it: read the pipes once, or it is lost.
        self.on_stop_signal()?;
        self.on_hangup();
        loop {
            // While connections have data to re-read, most passes skip epoll: sockets are
            // read directly and io_uring completions sit in shared memory. Every fourth
            // pass still polls, for new connections and the other sockets.
            if self.reread.is_empty() || passes_without_poll >= 3 {
                passes_without_poll = 0;
                let timeout = if self.reread.is_empty() {
                    let check = self.pool_check_at.saturating_duration_since(Instant::now());
                    // The engine holds its timers; it is asked, not told (`next_deadline`).
                    Some(self.engine.next_deadline().map_or(check, |w| {
                        Duration::from_nanos(w.saturating_sub(self.now())).min(check)
                    }))
                } else {
                    Some(Duration::ZERO)
                };
                match self.poll.poll(&mut events, timeout) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("poll: {e}")),
                }
            } else {
                passes_without_poll += 1;
                events.clear();
            }
            let mut reread = std::mem::take(&mut self.reread);
            reread.sort_unstable();
            reread.dedup();
            for key in reread.drain(..) {
                self.read_conn(key);
            }
            self.reread.append(&mut reread);
            for ev in events.iter() {
                match ev.token() {
                    TOK_TCP | TOK_UNIX => self.accept(ev.token()),
                    TOK_ADMIN | TOK_METRICS => self.accept_client(ev.token()),
                    TOK_IO => self.backend.clear_wake(),
                    TOK_SIGNAL => self.on_stop_signal()?,
                    TOK_HUP => self.on_hangup(),
                    TOK_LOCAL => self.take_local(),
                    Token(t) if t >= CLIENT_BASE => self.client_event(t - CLIENT_BASE),
                    Token(t) => {
                        let key = t - CONN_BASE;
                        if ev.is_readable() || ev.is_read_closed() {
                            self.read_conn(key);
                        }
                        if ev.is_writable() {
                            self.dirty.push(key);
                        }
                    }
                }
            }
            self.watch_pools(false);
            let now = self.now();
            if self.engine.next_deadline().is_some_and(|w| w <= now) {
                // One tick runs everything due; later timers stay with the engine.
                self.engine.tick(now, &mut self.out);
            }
            self.drive();
            let lines = self.take_event_lines();
            for l in lines {
                (self.log)(&l);
            }
            let mut dirty = std::mem::take(&mut self.dirty);
            dirty.sort_unstable();
            dirty.dedup();
            for key in dirty.drain(..) {
                self.flush_conn(key);
            }
            self.dirty = dirty;
            if self.budget.take_total_freed() {
                let paused = self.conns.iter().filter(|(_, c)| c.read_paused);
                self.reread.extend(paused.map(|(k, _)| k));
            }
            if self.stopping
                && self.engine.state() == &EngineState::Stopped
                && self.conns.iter().all(|(_, c)| c.conn.out.is_empty())
            {
                break;
            }
            if let EngineState::Failed(r) = self.engine.state() {
                return Err(format!("engine failed: {r}"));
            }
        }
        if self.error_log.pending() > 0 {
            tracing::error!(
                left_out = self.error_log.pending(),
                "device errors and failed commits not logged since the last one shown"
            );
        }
        if let Some(mut v) = self.vhost.take() {
            v.stop();
        }
        let _ = std::fs::remove_file(&self.cfg.admin_socket);
        if let Some(p) = &self.cfg.unix_socket {
            let _ = std::fs::remove_file(p);
        }
        self.watch_pools(true);
        self.stop_verdict()
    }

    /// The truth about a finished shutdown: clean only if every final commit landed and
    /// every pool file is still the one we wrote.
    fn stop_verdict(&self) -> Result<(), String> {
        let mut why = Vec::new();
        if !self.engine.lost_at_stop().is_empty() {
            why.push(format!(
                "the final commit failed for volume(s) {}",
                self.engine.lost_at_stop().join(", ")
            ));
        }
        why.extend(self.pool_problems.iter().cloned());
        if why.is_empty() {
            Ok(())
        } else {
            Err(format!("shutdown was not clean: {}", why.join("; ")))
        }
    }

    /// Check (every few seconds, or now if `force`) that each pool's path still names
    /// the file we opened; log each problem once.
    fn watch_pools(&mut self, force: bool) {
        if !force && Instant::now() < self.pool_check_at {
            return;
        }
        self.pool_check_at = Instant::now() + POOL_CHECK_EVERY;
        let found: Vec<String> = self
            .pools
            .iter()
            .filter_map(|p| p.identity_problem())
            .collect();
        for f in found {
            if !self.pool_problems.contains(&f) {
                (self.log)(&format!("error: {f}"));
                self.pool_problems.push(f);
            }
        }
    }

    /// SIGTERM or SIGINT: the first starts a clean shutdown; a second is only noted (a
    /// supervisor's `timeout` signals the whole group, and the shutdown is already on its
    /// way); a third exits at once, saying what was left unfinished.
    fn on_stop_signal(&mut self) -> Result<(), String> {
        let mut b = [0u8; 64];
        let before = self.signals;
        while matches!(self.signal_rx.read(&mut b), Ok(n) if n > 0) {
            self.signals += 1;
        }
        if self.signals == before {
            return Ok(());
        }
        if !self.stopping {
            self.begin_stop();
        }
        match self.signals {
            0 | 1 => Ok(()),
            2 => {
                (self.log)(
                    "shutdown already in progress; a third SIGTERM/SIGINT exits at once without finishing it",
                );
                Ok(())
            }
            _ => Err(format!(
                "third signal: exiting before the shutdown finished: {} request(s) unanswered, engine {:?}; writes not yet covered by an acknowledged FLUSH may be lost (recovery replays what was committed)",
                self.routes.len(),
                self.engine.state()
            )),
        }
    }

    /// SIGHUP: nothing can be reloaded live yet, so say so rather than die.
    fn on_hangup(&mut self) {
        let mut b = [0u8; 64];
        let mut got = false;
        while matches!(self.hup_rx.read(&mut b), Ok(n) if n > 0) {
            got = true;
        }
        if got {
            (self.log)(
                "SIGHUP ignored: configuration reload is not supported; restart the server to apply changes",
            );
        }
    }

    fn accept_client(&mut self, tok: Token) {
        loop {
            let stream = match tok {
                TOK_ADMIN => match self.admin.as_ref().map(|l| l.accept()) {
                    Some(Ok((s, _))) => admin::ClientStream::Unix(s),
                    _ => return,
                },
                _ => match self.metrics.as_ref().map(|l| l.accept()) {
                    Some(Ok((s, _))) => admin::ClientStream::Tcp(s),
                    _ => return,
                },
            };
            let kind = if tok == TOK_ADMIN {
                admin::ClientKind::Admin
            } else {
                admin::ClientKind::Metrics
            };
            let entry = self.clients.vacant_entry();
            let key = entry.key();
            let mut c = admin::Client::new(stream, kind);
            if self
                .poll
                .registry()
                .register(
                    c.source(),
                    Token(CLIENT_BASE + key),
                    Interest::READABLE | Interest::WRITABLE,
                )
                .is_ok()
            {
                entry.insert(c);
            }
        }
    }

    fn client_event(&mut self, key: usize) {
        let Some(c) = self.clients.get_mut(key) else {
            return;
        };
        if let Some(req) = c.read_request() {
            let reply = match c.kind {
                admin::ClientKind::Admin => {
                    let stats = self.server_stats();
                    let now = self.now();
                    admin::admin_reply(&req, &mut self.engine, now, &mut self.out, &stats)
                }
                admin::ClientKind::Metrics => {
                    admin::metrics_reply(&self.engine, &self.server_stats())
                }
            };
            if let Some(c) = self.clients.get_mut(key) {
                if reply.shutdown {
                    c.shutdown_requested = true;
                }
                c.respond(reply.body);
            }
        }
        let Some(c) = self.clients.get_mut(key) else {
            return;
        };
        c.write_some();
        if c.done() {
            let mut c = self.clients.remove(key);
            let _ = self.poll.registry().deregister(c.source());
            if c.shutdown_requested {
                self.begin_stop();
            }
        }
    }
}

/// The errno name an operator greps for.
fn errno_name(e: tiervisor_engine::Errno) -> &'static str {
    use tiervisor_engine::Errno;
    match e {
        Errno::Io => "EIO",
        Errno::Inval => "EINVAL",
        Errno::NoSpc => "ENOSPC",
        Errno::Perm => "EPERM",
        Errno::Shutdown => "ESHUTDOWN",
    }
}
