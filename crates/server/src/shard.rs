//! One shard of the server (issue 18): an engine over its slice of every pool, its own
//! I/O backend, the NBD connections to its volumes with their reply routes, and its
//! counters. The loop that drives it (`Server::run` with one shard, a shard thread with
//! more, see `threaded.rs`) hands it the events of its tokens and calls `pass_start` and
//! `pass_end` around them; nothing here polls, listens or handles signals.

use std::io::IoSlice;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};
use slab::Slab;
use tiervisor_engine::host;
use tiervisor_engine::{
    DeviceCompletion, Engine, EngineConfig, EngineEvent, EngineState, Medium, Outputs, VmRequest,
};

use crate::budget::Budget;
use crate::config::ServerConfig;
use crate::io::Backend;
use crate::nbd::conn::{Closing, Conn, Export, WireRequest};
use crate::server::{ServerStats, ShardFigures};
use crate::slowlog::SlowLog;
pub(crate) use crate::stream::Stream;

pub(crate) const TOK_IO: Token = Token(4);
/// In-process requests (vhost-user-blk queue workers) are waiting.
pub(crate) const TOK_LOCAL: Token = Token(7);
pub(crate) const CONN_BASE: usize = 16;
pub(crate) const CLIENT_BASE: usize = 1 << 30;
/// Requests a connection may have in flight before we stop reading from it.
const MAX_IN_FLIGHT: u32 = 1024;
/// Output a connection may have queued before we stop reading from it.
const MAX_QUEUED_OUT: usize = 256 << 20;

/// A connection that finished its handshake elsewhere (the front, with several shards)
/// and is given to the shard owning its export, with everything it negotiated.
pub(crate) struct Handed {
    pub stream: Stream,
    pub conn: Conn,
    pub peer: String,
    pub export_name: String,
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
            q.offset,
            engine.block_status(q.volume, q.offset, q.length, max),
        );
    }
}

/// Export name -> owning shard, for every shard: the front's handshake offers the union
/// and hands each connection to the owner. Shards write their own entries (a volume
/// created or resized); the front only reads.
#[derive(Default)]
pub(crate) struct Directory {
    pub entries: std::sync::RwLock<Vec<(Export, u16)>>,
}

impl Directory {
    pub(crate) fn upsert(&self, e: &Export, shard: u16) {
        let Ok(mut v) = self.entries.write() else {
            return;
        };
        match v.iter_mut().find(|(x, _)| x.name == e.name) {
            Some(slot) => *slot = (e.clone(), shard),
            None => v.push((e.clone(), shard)),
        }
    }
    pub(crate) fn snapshot(&self) -> Vec<(Export, u16)> {
        self.entries.read().map(|v| v.clone()).unwrap_or_default()
    }
}

/// This thread's CPU time so far, in seconds.
pub(crate) fn thread_cpu_s() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec we own; the result is checked.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

pub struct Shard {
    pub(crate) index: u16,
    cfg: Arc<ServerConfig>,
    pub(crate) engine: Engine,
    pub(crate) backend: Box<dyn Backend>,
    registry: Registry,
    conns: Slab<ConnSlot>,
    routes: Slab<Route>,
    pub(crate) exports: Vec<Export>,
    pub(crate) out: Outputs,
    /// Engine events delivered and not yet turned into lines (`take_event_lines`).
    events: Vec<EngineEvent>,
    comps: Vec<DeviceCompletion>,
    wire: Vec<WireRequest>,
    dirty: Vec<usize>,
    /// Connections whose last read got data: read again on the next pass.
    reread: Vec<usize>,
    t0: Instant,
    generation: u64,
    stats: ServerStats,
    per_export: Vec<u64>,
    budget: Budget,
    stopping: bool,
    /// Device errors and failed commits, logged through `tracing`, rate-limited.
    error_log: crate::ratelimit::RateLimit,
    slow: SlowLog,
    /// Lines for the operator, taken by the loop's owner.
    pub(crate) lines: Vec<String>,
    /// Set by the front once a pool file was lost while running.
    pools_lost: Arc<AtomicBool>,
    /// With several shards: the export directory this shard keeps its entries in.
    directory: Option<Arc<Directory>>,
    /// In-process requests (vhost-user-blk) and the sockets of this shard's volumes;
    /// `None` unless configured.
    local: Option<crate::local::LocalSource>,
    vhost: Option<crate::vhost::VhostUser>,
    /// Space borrowed from and lent to other shards (`loans.rs`); idle with one shard.
    pub(crate) loans: crate::loans::ShardLoans,
}

impl Shard {
    /// Shard `index` over `backend`, its engine not started; its I/O token is registered.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        index: u16,
        cfg: Arc<ServerConfig>,
        engine_cfg: EngineConfig,
        backend: Box<dyn Backend>,
        registry: Registry,
        t0: Instant,
        pools_lost: Arc<AtomicBool>,
        directory: Option<Arc<Directory>>,
    ) -> Result<Shard, String> {
        let engine = Engine::new(engine_cfg).map_err(|e| format!("configuration: {e}"))?;
        let io_fd = backend.wake_fd();
        registry
            .register(&mut SourceFd(&io_fd), TOK_IO, Interest::READABLE)
            .map_err(|e| e.to_string())?;
        let stats = ServerStats {
            io_backend: backend.name().to_string(),
            ..Default::default()
        };
        // The memory budget for requests in flight is the server's: each shard takes
        // its share of the total.
        let shards = cfg.threads.max(1) as u64;
        let budget = Budget::new(
            cfg.inflight_per_connection_bytes,
            (cfg.inflight_total_bytes / shards).max(cfg.inflight_per_connection_bytes),
        );
        Ok(Shard {
            index,
            cfg,
            engine,
            backend,
            registry,
            conns: Slab::new(),
            routes: Slab::with_capacity(4096),
            exports: Vec::new(),
            out: Outputs::default(),
            events: Vec::new(),
            comps: Vec::new(),
            wire: Vec::new(),
            dirty: Vec::new(),
            reread: Vec::new(),
            t0,
            generation: 0,
            stats,
            per_export: Vec::new(),
            budget,
            stopping: false,
            error_log: crate::ratelimit::RateLimit::new(20, Duration::from_secs(10)),
            slow: SlowLog::new(),
            lines: Vec::new(),
            pools_lost,
            directory,
            local: None,
            vhost: None,
            loans: Default::default(),
        })
    }

    /// Serve this shard's volumes over vhost-user-blk in `dir`; the line to log.
    pub(crate) fn start_vhost(&mut self, dir: &std::path::Path) -> Result<String, String> {
        let (source, submit) = crate::local::LocalSource::new(&self.registry, TOK_LOCAL)
            .map_err(|e| format!("vhost-user: {e}"))?;
        let mut v = crate::vhost::VhostUser::new(dir, submit)?;
        for e in &self.exports {
            let opts = crate::vhost::DeviceOptions {
                unclean_start: !self.engine.stopped_clean_before_mount(e.volume),
                write_cache: self.write_cache(&e.name),
            };
            v.add(e, opts)?;
        }
        self.local = Some(source);
        self.vhost = Some(v);
        Ok(format!(
            "vhost-user-blk: {} volume(s) on {}/<volume>.sock",
            self.exports.len(),
            dir.display()
        ))
    }

    /// Disconnect the vhost-user frontends and remove their sockets.
    pub(crate) fn stop_vhost(&mut self) {
        if let Some(mut v) = self.vhost.take() {
            v.stop();
        }
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
        if let Some(v) = &self.vhost {
            self.lines.extend(v.take_lines());
        }
    }

    pub(crate) fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    /// Mounted: export every volume the engine has (and enter them in the directory).
    pub(crate) fn export_all(&mut self) {
        self.exports = self
            .engine
            .volumes()
            .into_iter()
            .enumerate()
            .map(|(i, (name, size))| self.export_for(name, i, size))
            .collect();
        self.per_export = vec![0; self.exports.len()];
        if let Some(d) = &self.directory {
            for e in &self.exports {
                d.upsert(e, self.index);
            }
        }
    }

    /// Run the engine's timers that are due and carry out what it asks.
    pub(crate) fn tick_and_drive(&mut self) {
        let now = self.now();
        if self.engine.next_deadline().is_some_and(|w| w <= now) {
            // One tick runs everything due; later timers stay with the engine.
            self.engine.tick(now, &mut self.out);
        }
        self.drive();
        self.take_event_lines();
    }

    /// How long the loop may sleep: until the engine's next timer, at most `cap`.
    pub(crate) fn timeout(&self, cap: Duration) -> Duration {
        self.engine.next_deadline().map_or(cap, |w| {
            Duration::from_nanos(w.saturating_sub(self.now())).min(cap)
        })
    }

    pub(crate) fn wants_reread(&self) -> bool {
        !self.reread.is_empty()
    }

    /// Start of a pass: read again the connections whose last read got data.
    pub(crate) fn pass_start(&mut self) {
        let mut reread = std::mem::take(&mut self.reread);
        reread.sort_unstable();
        reread.dedup();
        for key in reread.drain(..) {
            self.read_conn(key);
        }
        self.reread.append(&mut reread);
    }

    /// An event for one of this shard's tokens (its I/O or a connection).
    pub(crate) fn on_event(&mut self, ev: &mio::event::Event) {
        match ev.token() {
            TOK_IO => self.backend.clear_wake(),
            TOK_LOCAL => self.take_local(),
            Token(t) if (CONN_BASE..CLIENT_BASE).contains(&t) => {
                let key = t - CONN_BASE;
                if ev.is_readable() || ev.is_read_closed() {
                    self.read_conn(key);
                }
                if ev.is_writable() {
                    self.dirty.push(key);
                }
            }
            _ => {}
        }
    }

    /// End of a pass: timers, the engine's outputs, replies written.
    pub(crate) fn pass_end(&mut self) {
        self.tick_and_drive();
        // One guest signal per vhost-user queue answered in this pass.
        if let Some(l) = &mut self.local {
            l.end_pass();
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
    }

    /// Finish what is in flight, flush, write checkpoints, stop.
    pub(crate) fn begin_shutdown(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        let now = self.now();
        self.engine.begin_shutdown(now, &mut self.out);
    }

    /// Shut down and every reply written.
    pub(crate) fn stopped(&self) -> bool {
        self.stopping
            && self.engine.state() == &EngineState::Stopped
            && self.conns.iter().all(|(_, c)| c.conn.out.is_empty())
    }

    pub(crate) fn failed(&self) -> Option<String> {
        match self.engine.state() {
            EngineState::Failed(r) => Some(format!("engine failed: {r}")),
            _ => None,
        }
    }

    pub(crate) fn routes_in_flight(&self) -> usize {
        self.routes.len()
    }

    /// The finished shutdown's problems (volumes whose final commit failed).
    pub(crate) fn lost_at_stop(&self) -> Vec<String> {
        self.engine.lost_at_stop().to_vec()
    }

    /// Whether volume `name`'s vhost-user device offers a write cache (its `write_cache`;
    /// a volume the configuration does not name has one).
    fn write_cache(&self, name: &str) -> bool {
        (self.cfg.volumes.iter())
            .find(|v| v.name == name)
            .is_none_or(|v| v.write_cache)
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
            deleted: false,
        }
    }

    /// A volume created while serving (`ctl volume create`) is exported once the engine
    /// says it is durable.
    fn export_created(&mut self, name: &str) {
        // While mounting, every volume is exported once the mount is done.
        if self.engine.state() != &EngineState::Ready
            || (self.exports.iter()).any(|e| e.name == name && !e.deleted)
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
        if let Some(d) = &self.directory {
            d.upsert(&e, self.index);
        }
        // Created by this run: no earlier process acknowledged writes to it.
        let opts = crate::vhost::DeviceOptions {
            unclean_start: false,
            write_cache: self.write_cache(name),
        };
        if let Some(v) = &mut self.vhost
            && let Err(why) = v.add(&e, opts)
        {
            self.lines
                .push(format!("volume {name}: no vhost-user socket: {why}"));
        }
        self.exports.push(e);
        self.per_export.push(0);
    }

    fn take_event_lines(&mut self) {
        // Events `drive` delivered, then any a later engine call left in `out`.
        let mut events = std::mem::take(&mut self.events);
        events.append(&mut self.out.events);
        if events.is_empty() {
            return;
        }
        let pools_lost = self.pools_lost.load(Ordering::Relaxed);
        for e in events {
            self.loans.keep(&e);
            let line = match e {
                EngineEvent::Formatted { pools, volumes } => {
                    format!("formatted {pools} pool(s) with {volumes} volume(s)")
                }
                EngineEvent::Recovered {
                    volume,
                    records_replayed,
                    checkpoint_seq,
                    mapped_chunks,
                    cached_dirty_chunks,
                } => format!(
                    "recovered volume {volume}: checkpoint at record {checkpoint_seq}, replayed {records_replayed} journal record(s), {mapped_chunks} chunk(s) mapped{}",
                    if cached_dirty_chunks > 0 {
                        format!(
                            ", {cached_dirty_chunks} cached chunk(s) counted dirty (clean/dirty is not journaled: each is written back before it can be evicted)"
                        )
                    } else {
                        String::new()
                    }
                ),
                EngineEvent::VolumeCreated { volume } => {
                    self.export_created(&volume);
                    format!("created volume {volume}")
                }
                EngineEvent::VolumeResized { volume, size_bytes } => {
                    // New connections see the new size; those already open keep the size
                    // they negotiated (NBD has no standard resize notice) and may now
                    // address the whole of it.
                    if let Some(e) =
                        (self.exports.iter_mut()).find(|e| e.name == volume && !e.deleted)
                    {
                        e.size_bytes = size_bytes;
                        if let Some(d) = &self.directory {
                            d.upsert(e, self.index);
                        }
                    }
                    if let Some(v) = &self.vhost {
                        v.resized(&volume, size_bytes);
                    }
                    format!("volume {volume} is now {size_bytes} bytes")
                }
                EngineEvent::VolumeDeleted { volume } => {
                    // Its slot stays (connections count exports by index); it is no longer
                    // listed, negotiated or handed to.
                    if let Some(e) =
                        (self.exports.iter_mut()).find(|e| e.name == volume && !e.deleted)
                    {
                        e.deleted = true;
                        if let Some(d) = &self.directory {
                            d.upsert(e, self.index);
                        }
                    }
                    if let Some(v) = &mut self.vhost {
                        v.remove(&volume);
                    }
                    format!("deleted volume {volume}")
                }
                EngineEvent::Ready => "ready".into(),
                EngineEvent::Stopped if pools_lost => {
                    "stopped, but a pool file was lost while running (see the errors above)".into()
                }
                EngineEvent::Stopped if self.engine.lost_at_stop().is_empty() => {
                    "stopped: all data flushed and checkpoints written".into()
                }
                EngineEvent::Stopped => format!(
                    "stopped, but the final commit failed for volume(s) {}: their writes since the last successful FLUSH are lost",
                    self.engine.lost_at_stop().join(", ")
                ),
                EngineEvent::Failed { reason } => format!("engine failed: {reason}"),
                EngineEvent::Warning { message } => format!("warning: {message}"),
                EngineEvent::MigrationPhase {
                    volume,
                    phase,
                    paused,
                } => {
                    let state = if paused { "paused" } else { "running" };
                    tracing::info!("migration of {volume}: {phase} (volume {state})");
                    continue;
                }
                e @ (EngineEvent::DeviceError { .. } | EngineEvent::CommitFailed { .. }) => {
                    self.log_error_event(e);
                    continue;
                }
                // Carried to the front, which asks another shard for space (`loans.rs`).
                EngineEvent::SpaceLow {
                    pool,
                    available_chunks,
                } => {
                    tracing::debug!(
                        "shard {}: {available_chunks} chunk(s) left in pool {}",
                        self.index,
                        pool.0
                    );
                    continue;
                }
                EngineEvent::Lent {
                    pool,
                    to,
                    first_chunk,
                    chunks,
                } => format!(
                    "lent chunks {first_chunk}..{} of pool {} to shard {to}",
                    first_chunk + chunks,
                    pool.0
                ),
                EngineEvent::Borrowed {
                    pool,
                    from,
                    first_chunk,
                    chunks,
                } => format!(
                    "borrowed chunks {first_chunk}..{} of pool {} from shard {from}",
                    first_chunk + chunks,
                    pool.0
                ),
                // Carried to the front's budget broker (`threaded.rs`); not logged.
                EngineEvent::BudgetDemand { .. } | EngineEvent::BudgetsSet { .. } => continue,
                EngineEvent::LoanReturned {
                    pool,
                    to,
                    first_chunk,
                    chunks,
                } => format!(
                    "took back chunks {first_chunk}..{} of pool {} that shard {to} never recorded",
                    first_chunk + chunks,
                    pool.0
                ),
                EngineEvent::GaveBack {
                    pool,
                    to,
                    first_chunk,
                    chunks,
                } => format!(
                    "gave back chunks {first_chunk}..{} of pool {} to shard {to} (free since borrowed)",
                    first_chunk + chunks,
                    pool.0
                ),
            };
            self.lines.push(line);
        }
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

    /// Say how many device errors and failed commits the rate limit left out.
    pub(crate) fn log_errors_left_out(&self) {
        if self.error_log.pending() > 0 {
            tracing::error!(
                left_out = self.error_log.pending(),
                "device errors and failed commits not logged since the last one shown"
            );
        }
    }

    /// Carry out the engine's outputs and feed back completions until nothing moves.
    pub(crate) fn drive(&mut self) {
        loop {
            let now = self.now();
            // Delivery never calls the engine, so the outputs can be lent out.
            let mut out = std::mem::take(&mut self.out);
            let Ok(()) = host::deliver(&mut out, &mut Delivery { shard: self, now });
            self.out = out;
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

    /// A new connection (accepted by this shard's loop), in its handshake.
    pub(crate) fn accept(&mut self, stream: Stream, peer: String) {
        let mut conn = Conn::new();
        conn.tls_mode = self.cfg.tls.mode;
        self.insert(stream, conn, peer, true);
    }

    /// A connection whose handshake the front ran, for one of this shard's exports.
    pub(crate) fn adopt(&mut self, h: Handed) {
        let Some(i) = (self.exports.iter()).position(|e| e.name == h.export_name && !e.deleted)
        else {
            // The directory named this shard, so this cannot happen; close rather than
            // serve another volume.
            self.lines.push(format!(
                "closed connection from {}: export {} is not on shard {}",
                h.peer, h.export_name, self.index
            ));
            return;
        };
        let mut conn = h.conn;
        conn.set_export(i);
        conn.handoff = false;
        if let Some(key) = self.insert(h.stream, conn, h.peer, false) {
            // Requests the client sent right after its NBD_OPT_GO are already buffered.
            self.parse_and_submit(key);
        }
    }

    fn insert(&mut self, stream: Stream, conn: Conn, peer: String, new: bool) -> Option<usize> {
        self.generation += 1;
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        let held = conn.held_bytes();
        let mut slot = ConnSlot {
            stream,
            conn,
            generation: self.generation,
            peer,
            read_paused: false,
            counted_export: None,
        };
        self.registry
            .register(
                slot.stream.source(),
                Token(CONN_BASE + key),
                Interest::READABLE | Interest::WRITABLE,
            )
            .ok()?;
        entry.insert(slot);
        if new {
            self.stats.connections_total += 1;
        }
        self.stats.connections_open += 1;
        self.budget.adjust(0, held);
        self.dirty.push(key);
        Some(key)
    }

    /// Read once from the socket, parse, hand requests to the engine. If the read got
    /// data, the connection is read again on the next pass of the loop (after this batch
    /// is submitted and answered), so requests that arrive meanwhile are batched.
    fn read_conn(&mut self, key: usize) {
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
        match slot.stream.read_into(&mut slot.conn.inbuf, want) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
            Err(e) => {
                slot.conn.closing = Some(Closing::Abort(format!("read error: {e}")));
                self.dirty.push(key);
                return;
            }
            Ok(0) => {
                slot.conn.closing = Some(Closing::Abort("peer closed the connection".into()));
                self.dirty.push(key);
                return;
            }
            Ok(_) => {}
        }
        self.parse_and_submit(key);
        self.dirty.push(key);
        self.reread.push(key);
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
                // NBD carries no process id: the connection is the I/O context (what
                // cfq, bfq and cats serve as a process; one client per connection).
                r.context = tiervisor_engine::IoContext::Client(key as u32);
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
        if let Err(e) = slot.stream.flush_pending()
            && e.kind() != std::io::ErrorKind::WouldBlock
        {
            slot.conn.closing = Some(Closing::Abort(format!("write error: {e}")));
        }
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
        if crate::stream::start_tls_if_asked(&mut slot.stream, &mut slot.conn, &self.cfg.tls) {
            // The client's first TLS records may be in the socket already.
            self.reread.push(key);
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

    /// Close every connection to export `name` (`ctl volume delete --force`).
    pub(crate) fn disconnect_export(&mut self, name: &str) {
        let keys: Vec<usize> = (self.conns.iter())
            .filter(|(_, c)| {
                (c.counted_export.and_then(|e| self.exports.get(e))).is_some_and(|e| e.name == name)
            })
            .map(|(k, _)| k)
            .collect();
        for k in keys {
            self.lines.push(format!(
                "closing a connection to {name}: the volume is being deleted"
            ));
            self.close_conn(k);
        }
    }

    fn close_conn(&mut self, key: usize) {
        let mut slot = self.conns.remove(key);
        self.budget.adjust(slot.conn.held_bytes(), 0);
        let _ = self.registry.deregister(slot.stream.source());
        self.stats.connections_open -= 1;
        if let Some(e) = slot.counted_export {
            self.per_export[e] -= 1;
        }
        if let Some(Closing::Abort(why)) = &slot.conn.closing
            && !why.starts_with("peer closed")
        {
            self.lines
                .push(format!("closed connection from {}: {why}", slot.peer));
        }
    }

    /// This shard's counters (the front adds what only it knows: pool space, uptime).
    /// Call on the shard's own thread: the CPU time is the calling thread's.
    pub(crate) fn server_stats(&self) -> ServerStats {
        let mut s = self.stats.clone();
        s.uptime_s = self.t0.elapsed().as_secs_f64();
        s.vhost_lost_flush_reports = self.vhost.as_ref().map_or(0, |v| v.lost_flush_reports());
        // A VM attached over vhost-user counts as a connection to its volume.
        let vhost = |name: &str| self.vhost.as_ref().map_or(0, |v| v.connected(name));
        s.connections_per_export = self
            .exports
            .iter()
            .zip(self.per_export.iter().copied())
            .map(|(e, n)| (e.name.clone(), n + vhost(&e.name)))
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
        let budgets = self.engine.budgets_in_force();
        s.shards = vec![ShardFigures {
            shard: self.index,
            volumes: self.exports.iter().map(|e| e.name.clone()).collect(),
            requests: self.stats.requests,
            cpu_s: thread_cpu_s(),
            connections_open: self.stats.connections_open,
            requests_in_flight: (self.routes.len()
                + self.local.as_ref().map_or(0, |l| l.in_flight()))
                as u64,
            device_ops_in_flight: self.backend.in_flight() as u64,
            write_buffer_bytes: budgets.write_buffer_bytes.iter().sum(),
            tier_bytes_per_s: budgets.tier_bytes_per_s,
            budget_commands: self.engine.budget_commands(),
            borrowed_runs: (self.engine.loans().iter())
                .filter(|l| l.kind == tiervisor_engine::loan::LoanKind::Borrowed)
                .count() as u64,
            runs_given_back: self.engine.give_backs().0,
            device_shares: (self.engine.config().pools.iter())
                .zip(self.engine.device_shares())
                .zip(self.engine.device_gate_waits())
                .map(|((p, d), waits)| crate::server::DeviceShareFigure {
                    pool: p.name.clone(),
                    share: f64::from(d.share_ppm) / 1e6,
                    gate_iops: d.gate_iops,
                    gate_waits: waits,
                })
                .collect(),
        }];
        s
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

/// A shard's devices are its pool files behind the I/O backend; answers go to the
/// connections (or the in-process vhost queues) that asked.
struct Delivery<'a> {
    shard: &'a mut Shard,
    /// When this round of delivery started (the slow-request log's clock).
    now: u64,
}

impl host::Driver for Delivery<'_> {
    type Stop = std::convert::Infallible;

    fn device_op(&mut self, mut op: tiervisor_engine::DeviceOp) -> Result<(), Self::Stop> {
        let s = &mut *self.shard;
        s.loans.translate(s.index, &s.engine, &mut op);
        s.slow.submitted(self.now, &op);
        s.backend.submit(op);
        Ok(())
    }

    fn event(&mut self, e: EngineEvent) -> Result<(), Self::Stop> {
        self.shard.events.push(e);
        Ok(())
    }

    fn completed(&mut self, c: tiervisor_engine::VmCompletion) -> Result<(), Self::Stop> {
        self.shard.route_completion(self.now, c);
        Ok(())
    }
}
