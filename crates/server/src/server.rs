//! The real-clock driver. The front (this file) owns the listeners, the admin and metrics
//! sockets, the signals and the pool files; the shards (`shard.rs`) own an engine each,
//! with its I/O backend and the NBD connections to its volumes. With one shard (the
//! default) front and shard share one thread and one event loop (mio), the engine inline,
//! pool I/O through io_uring (or a thread pool), exactly the unsharded server. With N
//! shards each runs on its own thread (`threaded.rs`) and the front hands connections,
//! admin requests and the stop to them. NBD clients connect over TCP or a Unix socket;
//! `tiervisor ctl` talks to the admin socket; Prometheus scrapes the metrics endpoint.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, UnixListener};
use mio::{Events, Interest, Poll, Token};
use slab::Slab;
use tiervisor_engine::{Engine, EngineConfig, EngineState, StartMode};

use crate::admin;
use crate::config::ServerConfig;
use crate::io;
use crate::nbd::conn::Export;
use crate::pools::{PoolFile, open_pool};
use crate::preflight::{self, StartOptions};
use crate::shard::{CLIENT_BASE, Shard, Stream};
use crate::threaded::Threads;

const TOK_TCP: Token = Token(0);
const TOK_UNIX: Token = Token(1);
const TOK_ADMIN: Token = Token(2);
const TOK_METRICS: Token = Token(3);
const TOK_SIGNAL: Token = Token(5);
const TOK_HUP: Token = Token(6);
/// How often the pool files' identity (path still names the open file) is checked.
const POOL_CHECK_EVERY: Duration = Duration::from_secs(2);

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
    /// vhost-user FLUSHes failed to tell a frontend that resumed its rings after an
    /// unclean stop that writes may be lost (docs/ARCHITECTURE.md, vhost-user-blk).
    pub vhost_lost_flush_reports: u64,
    pub io_backend: String,
    pub uptime_s: f64,
    /// One entry per shard (issue 18), so an operator sees an overloaded one.
    pub shards: Vec<ShardFigures>,
}

/// What `ctl stat` and the metrics show per shard.
#[derive(Default, Clone, Debug, serde::Serialize)]
pub struct ShardFigures {
    pub shard: u16,
    /// The volumes the shard owns.
    pub volumes: Vec<String>,
    /// NBD requests it has taken.
    pub requests: u64,
    /// CPU time of its thread (`CLOCK_THREAD_CPUTIME_ID`); with one shard the thread is
    /// also the front's.
    pub cpu_s: f64,
    pub connections_open: u64,
    /// Requests taken and not yet answered.
    pub requests_in_flight: u64,
    /// Device operations handed to its I/O backend and not yet completed.
    pub device_ops_in_flight: u64,
    /// Its budgets in force (`engine::budgets`): write buffer summed over pools, tier
    /// migration bandwidth; and the budget changes the front's broker sent it.
    pub write_buffer_bytes: u64,
    pub tier_bytes_per_s: u64,
    pub budget_commands: u64,
    /// Runs of other shards' chunks it holds borrowed now, and runs it gave back since
    /// start (`engine::loan`, `engine::give_back`).
    pub borrowed_runs: u64,
    pub runs_given_back: u64,
    /// Per pool, its share of the pool's device and the gate holding it there
    /// (`shard_qos = "pool"`, issue 12; engine::device_share).
    pub device_shares: Vec<DeviceShareFigure>,
}

/// One shard's share of one pool's device.
#[derive(Default, Clone, Debug, serde::Serialize)]
pub struct DeviceShareFigure {
    pub pool: String,
    /// 0..=1; the shards' shares of a pool sum to 1 once the broker set them (0: never).
    pub share: f64,
    /// Operations per second the gate lets through; 0: open.
    pub gate_iops: u32,
    /// Times dispatch waited at the gate since start.
    pub gate_waits: u64,
}

/// The shards: one, inline in the front's loop; or several, each on its own thread.
enum Shards {
    One(Box<Shard>),
    Threads(Box<Threads>),
}

pub struct Server {
    cfg: ServerConfig,
    poll: Poll,
    pools: Vec<PoolFile>,
    /// When the pool files are next checked, and the problems found so far (each once).
    pool_check_at: Instant,
    pool_problems: Vec<String>,
    pools_lost: Arc<AtomicBool>,
    tcp: Option<TcpListener>,
    unix: Option<UnixListener>,
    admin: Option<UnixListener>,
    metrics: Option<TcpListener>,
    clients: Slab<admin::Client>,
    shards: Shards,
    t0: Instant,
    signal_rx: mio::net::UnixStream,
    hup_rx: mio::net::UnixStream,
    _signal_ids: Vec<signal_hook::SigId>,
    signals: u32,
    stopping: bool,
    log: Box<dyn FnMut(&str)>,
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

pub(crate) fn engine_config(cfg: &ServerConfig, sizes: &[u64]) -> EngineConfig {
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

fn bind_unix(path: &std::path::Path) -> Result<UnixListener, String> {
    if path.exists() {
        // A stale socket from an earlier run; the pool locks already ensure we are alone.
        let _ = std::fs::remove_file(path);
    }
    UnixListener::bind(path).map_err(|e| format!("cannot listen on {}: {e}", path.display()))
}

/// `Server::start`'s error when a stop signal ended the start (a mount waiting for space):
/// a requested stop, not a failure, so `serve` exits 0 on it.
pub const STOPPED_DURING_START: &str =
    "stopped by a signal before the start finished; nothing was served";

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

/// The shard count the metadata pool was formatted with (shard 0's superblock, at its
/// offset 0, or the backup copy), if it reads as one this build serves. Anything else
/// (unreadable, another format) is left to the mount, which says what is wrong.
fn formatted_shards(cfg: &ServerConfig) -> Option<u16> {
    use std::io::Read as _;
    let path = &cfg.pools.get(cfg.metadata_pool)?.path;
    let mut head = vec![0u8; 2 * tiervisor_engine::layout::BLOCK_BYTES as usize];
    std::fs::File::open(path).ok()?.read_exact(&mut head).ok()?;
    let sb = tiervisor_engine::layout::decode_superblock_pair(&head).ok()?;
    crate::config::check_threads(u64::from(sb.shard.count)).ok()
}

/// The signal handlers of a start, taken back if it fails (a failed start leaves the
/// process's signals as they were).
struct SignalGuard(Vec<signal_hook::SigId>);

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for id in self.0.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

/// The signal pipes: SIGINT and SIGTERM on the first, SIGHUP on the second; and a flag
/// SIGINT and SIGTERM set, which a start waiting for space checks (a shard thread mounting
/// has no pipe of its own to poll).
#[allow(clippy::type_complexity)]
fn signal_pipes(
    poll: &Poll,
) -> Result<
    (
        mio::net::UnixStream,
        mio::net::UnixStream,
        Vec<signal_hook::SigId>,
        Arc<AtomicBool>,
    ),
    String,
> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut ids = Vec::new();
    // Registered before the pipes, so the flag is set by the time a pipe wakes the poll.
    for s in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        ids.push(
            signal_hook::flag::register(s, stop.clone())
                .map_err(|e| format!("signal handler: {e}"))?,
        );
    }
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
    Ok((signal_rx, hup_rx, ids, stop))
}

/// Bring one shard's engine up (mount, or format) on `poll`, logging its lines; the
/// engine's timers run meanwhile (a throttled pool holds the format's writes).
pub(crate) fn mount(
    shard: &mut Shard,
    poll: &mut Poll,
    mode: StartMode,
    log: &mut dyn FnMut(&str),
    stop: &AtomicBool,
) -> Result<(), String> {
    let now = shard.now();
    shard.engine.start(now, mode, &mut shard.out);
    let mut events = Events::with_capacity(64);
    loop {
        shard.tick_and_drive();
        for line in shard.lines.drain(..) {
            log(&line);
        }
        match shard.engine.state().clone() {
            EngineState::Ready => break,
            EngineState::Failed(r) => return Err(r),
            _ => {}
        }
        let timeout = shard.timeout(Duration::from_millis(100));
        match poll.poll(&mut events, Some(timeout)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("poll: {e}")),
        }
        // A mount may wait for space without end (`mount/space.rs` in the engine): a stop
        // signal meanwhile ends the start (what it wrote is crash-safe), rather than being
        // lost. One with nothing to wait for is over before anyone can send it. A shard
        // thread sees the signal within a poll timeout, through the flag.
        if stop.load(Ordering::Relaxed) || events.iter().any(|e| e.token() == TOK_SIGNAL) {
            return Err(STOPPED_DURING_START.into());
        }
        shard.backend.clear_wake();
    }
    shard.export_all();
    Ok(())
}

impl Server {
    /// Check everything that can be checked, then open the pools and bring the engine up
    /// (mount, or format where `opts` allows it). `log` receives the lines an operator
    /// should see.
    pub fn start(
        mut cfg: ServerConfig,
        opts: StartOptions,
        mut log: Box<dyn FnMut(&str)>,
    ) -> Result<Server, String> {
        // Signals are caught before any pool file is created: a SIGTERM from then on stops
        // the start cleanly (serve_failsafe's SIGTERM during the format, sent once "created
        // pool" is printed, killed the process under load when the handlers came later).
        let mut poll = Poll::new().map_err(|e| format!("poll: {e}"))?;
        let (signal_rx, hup_rx, ids, stop) = signal_pipes(&poll)?;
        let mut handlers = SignalGuard(ids);
        // Certificates are read before anything is bound or created.
        cfg.tls.load()?;
        let (bound, mode, pools) = open_checked(&cfg, opts)?;
        if !cfg.threads_set
            && pools.iter().all(|p| !p.created)
            && let Some(n) = formatted_shards(&cfg)
            && n != cfg.threads
        {
            log(&format!(
                "the pools were formatted for {n} shard(s): serving with {n} (`threads` in the configuration or --threads chooses; another count is refused)"
            ));
            cfg.threads = n;
        }
        let sizes: Vec<u64> = pools.iter().map(|p| p.size_bytes).collect();
        let engine_cfg = engine_config(&cfg, &sizes);
        Engine::new(engine_cfg.clone()).map_err(|e| format!("configuration: {e}"))?;
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
        let t0 = Instant::now();
        let pools_lost = Arc::new(AtomicBool::new(false));
        let shared_cfg = Arc::new(cfg.clone());
        let fds: Vec<io::PoolFds> = pools.iter().map(PoolFile::fds).collect();
        let (shards, thick) = if cfg.threads <= 1 {
            let backend = io::open(cfg.io, fds).map_err(|e| format!("cannot set up I/O: {e}"))?;
            let registry = poll.registry().try_clone().map_err(|e| e.to_string())?;
            let mut shard = Shard::new(
                0,
                shared_cfg,
                engine_cfg,
                backend,
                registry,
                t0,
                pools_lost.clone(),
                None,
            )?;
            mount(&mut shard, &mut poll, mode, &mut *log, &stop)?;
            let thick: Vec<(String, usize, u64, u64)> = shard
                .engine
                .thick_regions()
                .into_iter()
                .map(|(v, p, off, len)| (v, p.0 as usize, off, len))
                .collect();
            (Shards::One(Box::new(shard)), thick)
        } else {
            let (t, thick) = Threads::start(
                shared_cfg,
                &engine_cfg,
                fds,
                mode,
                t0,
                pools_lost.clone(),
                stop,
                &poll,
                &mut *log,
            )?;
            (Shards::Threads(Box::new(t)), thick)
        };
        for line in crate::space::ensure_thick_allocated(&pools, &thick)? {
            log(&line);
        }
        let mut s = Server {
            cfg,
            poll,
            pools,
            pool_check_at: Instant::now() + POOL_CHECK_EVERY,
            pool_problems: Vec::new(),
            pools_lost,
            tcp: None,
            unix: None,
            admin: None,
            metrics: None,
            clients: Slab::new(),
            shards,
            t0,
            signal_rx,
            hup_rx,
            _signal_ids: std::mem::take(&mut handlers.0),
            signals: 0,
            stopping: false,
            log,
        };
        s.listen(bound)?;
        // With several shards each serves its own volumes' sockets (`threaded.rs`).
        if let Some(dir) = s.cfg.vhost_user_dir.clone() {
            let lines = match &mut s.shards {
                Shards::One(shard) => vec![shard.start_vhost(&dir)?],
                Shards::Threads(t) => t.start_vhost(&dir)?,
            };
            for l in lines {
                (s.log)(&l);
            }
        }
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

    /// Local address of the TCP listener (tests bind to port 0).
    pub fn tcp_addr(&self) -> Option<std::net::SocketAddr> {
        self.tcp.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The path of the NBD Unix socket served (configured or passed by systemd).
    pub fn unix_path(&self) -> Option<std::path::PathBuf> {
        let addr = self.unix.as_ref()?.local_addr().ok()?;
        addr.as_pathname().map(std::path::Path::to_path_buf)
    }

    /// Every volume served, configured ones first.
    pub fn exports(&self) -> Vec<Export> {
        match &self.shards {
            Shards::One(s) => s.exports.clone(),
            Shards::Threads(t) => t.exports(),
        }
    }

    /// Per shard: the names of the volumes it owns.
    pub fn volumes_per_shard(&self) -> Vec<Vec<String>> {
        match &self.shards {
            Shards::One(s) => vec![s.exports.iter().map(|e| e.name.clone()).collect()],
            Shards::Threads(t) => t.volumes_per_shard(),
        }
    }

    pub fn backend_name(&self) -> &'static str {
        match &self.shards {
            Shards::One(s) => s.backend.name(),
            Shards::Threads(t) => t.backend_name(),
        }
    }

    fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// The front's share of the counters: pool space and uptime.
    fn front_stats(&self) -> ServerStats {
        ServerStats {
            uptime_s: self.t0.elapsed().as_secs_f64(),
            pool_space: crate::space::survey(&self.pools),
            ..Default::default()
        }
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
        match &mut self.shards {
            Shards::One(s) => s.begin_shutdown(),
            Shards::Threads(t) => t.begin_shutdown(),
        }
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
        let lost = loop {
            let reread = match &self.shards {
                Shards::One(s) => s.wants_reread(),
                Shards::Threads(_) => false,
            };
            // While connections have data to re-read, most passes skip epoll: sockets are
            // read directly and io_uring completions sit in shared memory. Every fourth
            // pass still polls, for new connections and the other sockets.
            if !reread || passes_without_poll >= 3 {
                passes_without_poll = 0;
                let timeout = if !reread {
                    let check = self.pool_check_at.saturating_duration_since(Instant::now());
                    // The engine holds its timers; it is asked, not told (`next_deadline`).
                    Some(match &self.shards {
                        Shards::One(s) => s.timeout(check),
                        Shards::Threads(_) => check,
                    })
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
            if let Shards::One(s) = &mut self.shards {
                s.pass_start();
            }
            for ev in events.iter() {
                match ev.token() {
                    TOK_TCP | TOK_UNIX => self.accept(ev.token()),
                    TOK_ADMIN | TOK_METRICS => self.accept_client(ev.token()),
                    TOK_SIGNAL => self.on_stop_signal()?,
                    TOK_HUP => self.on_hangup(),
                    Token(t) if t >= CLIENT_BASE => self.client_event(t - CLIENT_BASE),
                    _ => match &mut self.shards {
                        Shards::One(s) => s.on_event(ev),
                        Shards::Threads(t) => t.on_event(ev),
                    },
                }
            }
            self.watch_pools(false);
            let done = match &mut self.shards {
                Shards::One(s) => {
                    s.pass_end();
                    for l in s.lines.drain(..) {
                        (self.log)(&l);
                    }
                    if let Some(why) = s.failed() {
                        return Err(why);
                    }
                    (self.stopping && s.stopped()).then(|| s.lost_at_stop())
                }
                Shards::Threads(t) => {
                    for l in t.take_lines() {
                        (self.log)(&l);
                    }
                    if let Some(why) = t.failed() {
                        // One shard failed: the others stop cleanly, then the failure
                        // is the verdict.
                        t.begin_shutdown();
                        let _ = t.join();
                        return Err(why);
                    }
                    if self.stopping && t.all_exited() {
                        Some(t.join()?)
                    } else {
                        None
                    }
                }
            };
            if let Some(lost) = done {
                break lost;
            }
        };
        if let Shards::One(s) = &mut self.shards {
            s.log_errors_left_out();
            s.stop_vhost();
        }
        let _ = std::fs::remove_file(&self.cfg.admin_socket);
        if let Some(p) = &self.cfg.unix_socket {
            let _ = std::fs::remove_file(p);
        }
        self.watch_pools(true);
        self.stop_verdict(&lost)
    }

    /// A new NBD connection: to the one shard, or to the front's handshakes.
    fn accept(&mut self, tok: Token) {
        loop {
            let (stream, peer) = match tok {
                TOK_TCP => match self.tcp.as_ref().map(|l| l.accept()) {
                    Some(Ok((s, a))) => {
                        let _ = s.set_nodelay(true);
                        (Stream::tcp(s), a.to_string())
                    }
                    _ => return,
                },
                _ => match self.unix.as_ref().map(|l| l.accept()) {
                    Some(Ok((s, _))) => (Stream::unix(s), "unix".to_string()),
                    _ => return,
                },
            };
            match &mut self.shards {
                Shards::One(s) => s.accept(stream, peer),
                Shards::Threads(t) => t.accept(stream, peer),
            }
        }
    }

    /// The truth about a finished shutdown: clean only if every final commit landed and
    /// every pool file is still the one we wrote.
    fn stop_verdict(&self, lost: &[String]) -> Result<(), String> {
        let mut why = Vec::new();
        if !lost.is_empty() {
            why.push(format!(
                "the final commit failed for volume(s) {}",
                lost.join(", ")
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
                self.pools_lost.store(true, Ordering::Relaxed);
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
            _ => {
                let (unanswered, state) = match &self.shards {
                    Shards::One(s) => (
                        s.routes_in_flight().to_string(),
                        format!("engine {:?}", s.engine.state()),
                    ),
                    Shards::Threads(t) => (
                        "some".to_string(),
                        format!("{} shard(s) still running", t.running()),
                    ),
                };
                Err(format!(
                    "third signal: exiting before the shutdown finished: {unanswered} request(s) unanswered, {state}; writes not yet covered by an acknowledged FLUSH may be lost (recovery replays what was committed)"
                ))
            }
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
            let kind = c.kind;
            let now = self.now();
            let front = self.front_stats();
            let reply = match (&mut self.shards, kind) {
                (Shards::One(s), kind) => {
                    let mut stats = s.server_stats();
                    stats.uptime_s = front.uptime_s;
                    stats.pool_space = front.pool_space;
                    if kind == admin::ClientKind::Admin {
                        let r = admin::admin_reply(&req, &mut s.engine, now, &mut s.out, &stats);
                        if let Some(name) = &r.disconnect {
                            s.disconnect_export(name);
                        }
                        r
                    } else {
                        admin::metrics_reply(&s.engine, &stats)
                    }
                }
                (Shards::Threads(t), admin::ClientKind::Admin) => t.admin(&req, front.pool_space),
                (Shards::Threads(t), admin::ClientKind::Metrics) => t.metrics(front.pool_space),
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
