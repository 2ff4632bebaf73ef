//! Several shards, each on its own thread (issue 18, `threads = N` with N > 1).
//!
//! Shard k's thread runs the loop `Server::run` runs for one shard, over its own engine
//! (`ShardPlan::shard_config`: its slice of every pool, its volumes), its own poll and
//! its own I/O backend, whose every device operation lands at the slice's base
//! (`io::Offset`). The front (the caller's thread) keeps the listeners, the NBD handshake,
//! the admin and metrics sockets, the signals and the pool files:
//! - a new connection negotiates with the front against every shard's exports (the
//!   `Directory`); at `NBD_OPT_GO` / `NBD_OPT_EXPORT_NAME` it is deregistered and sent,
//!   with its negotiated state, to the shard owning the export, which registers it and
//!   serves the transmission phase (multi-conn to one volume lands on one shard);
//! - an admin request about one volume goes to its shard, `volume create` to the shard
//!   owning the fewest volumes, `stat`, `list` and the metrics to every shard, merged;
//! - a stop goes to every shard; each drains and stops on its own, and the verdict is
//!   the worst shard's.
//!
//! Nothing else crosses: messages go over channels with a `mio::Waker`. No shard ever
//! waits for another or for the front (its sends never block); only the front waits,
//! for shards' answers to admin requests, so there is no cycle to deadlock on.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, channel};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::{Events, Interest, Poll, Registry, Token, Waker};
use serde_json::{Value, json};
use slab::Slab;
use tiervisor_engine::budget_broker::BudgetBroker;
use tiervisor_engine::loan::LoanRecord;
use tiervisor_engine::loan_broker::LoanBroker;
use tiervisor_engine::shard::ShardPlan;
use tiervisor_engine::{Control, EngineConfig, EngineEvent, StartMode};

use crate::admin::{self, Reply};
use crate::config::ServerConfig;
use crate::io::{self, PoolFds};
use crate::loans::{RoomBoard, ShardLoans};
use crate::nbd::conn::{Closing, Conn, Export, WireRequest};
use crate::server::{STOPPED_DURING_START, mount};
use crate::shard::{CLIENT_BASE, CONN_BASE, Directory, Handed, Shard, Stream};
use crate::space::PoolSpace;

/// A thick volume's region: volume, pool, offset in the pool file, length.
pub(crate) type ThickRegion = (String, usize, u64, u64);

pub(crate) const TOK_WAKE: Token = Token(8);
/// How long the front waits for a shard's answer to an admin request.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

enum ToShard {
    Conn(Box<Handed>),
    /// An admin request; shard 0 reports the pools' space too.
    Admin {
        req: String,
        pool_space: Vec<PoolSpace>,
        reply: Sender<Vec<u8>>,
    },
    Metrics {
        pool_space: Vec<PoolSpace>,
        reply: Sender<String>,
    },
    /// Open the vhost-user sockets of the shard's volumes (once the front listens and
    /// the thick volumes are allocated, as with one shard).
    Vhost {
        dir: std::path::PathBuf,
        reply: Sender<Result<String, String>>,
    },
    /// A step of a loan of space between shards, from the front's `LoanBroker`.
    Loan(Control),
    Stop,
}

enum FromShard {
    Lines(Vec<String>),
    Ready {
        shard: u16,
        waker: Arc<Waker>,
        thick: Vec<ThickRegion>,
        backend: &'static str,
        /// The loans its volume table holds (the front gives back those half made).
        loans: Vec<LoanRecord>,
    },
    /// Loan events the shard's engine said, and loan commands it refused.
    Loan {
        shard: u16,
        events: Vec<EngineEvent>,
        refused: Vec<Control>,
    },
    /// Mounting failed.
    Failed(String),
    /// The shard stopped: the volumes whose final commit failed, or why it failed.
    Exited {
        shard: u16,
        result: Result<Vec<String>, String>,
    },
}

struct Handle {
    tx: Sender<ToShard>,
    waker: Arc<Waker>,
    thread: Option<JoinHandle<()>>,
    exited: Option<Result<Vec<String>, String>>,
}

impl Handle {
    fn send(&self, m: ToShard) -> bool {
        self.tx.send(m).is_ok() && self.waker.wake().is_ok()
    }
}

/// A connection in its handshake, on the front.
struct Handshake {
    stream: Stream,
    conn: Conn,
    peer: String,
}

pub(crate) struct Threads {
    cfg: Arc<ServerConfig>,
    shards: Vec<Handle>,
    rx: Receiver<FromShard>,
    _waker: Arc<Waker>,
    directory: Arc<Directory>,
    registry: Registry,
    handshakes: Slab<Handshake>,
    lines: Vec<String>,
    backend: &'static str,
    /// Volumes whose creation went to a shard: name and shard (until the directory has
    /// them, and after: a second create of the name goes where the first went).
    created_on: Vec<(String, u16)>,
    connections_total: u64,
    protocol_errors: u64,
    stopping: bool,
    /// Loans of space between shards: the broker, and every shard's room in each pool.
    broker: LoanBroker,
    board: Arc<RoomBoard>,
    /// The budgets that span volumes, moved to the shards that use them (the simulator's
    /// broker: `engine::budget_broker`); its commands travel as loan steps do.
    budgets: BudgetBroker,
}

/// The shard thread's body: mount, report, serve until stopped.
#[allow(clippy::too_many_arguments)]
fn shard_main(
    k: u16,
    cfg: Arc<ServerConfig>,
    engine_cfg: EngineConfig,
    fds: Vec<PoolFds>,
    bases: Vec<u64>,
    mode: StartMode,
    t0: Instant,
    pools_lost: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    directory: Arc<Directory>,
    rx: Receiver<ToShard>,
    tx: Sender<FromShard>,
    front: Arc<Waker>,
    loans: ShardLoans,
) {
    let say = |m: FromShard| {
        let _ = tx.send(m);
        let _ = front.wake();
    };
    let setup = || -> Result<(Poll, Arc<Waker>, Shard), String> {
        let poll = Poll::new().map_err(|e| format!("poll: {e}"))?;
        let waker = Arc::new(Waker::new(poll.registry(), TOK_WAKE).map_err(|e| e.to_string())?);
        let backend = io::open(cfg.io, fds).map_err(|e| format!("cannot set up I/O: {e}"))?;
        let backend = Box::new(io::Offset::new(backend, bases.clone()));
        let registry = poll.registry().try_clone().map_err(|e| e.to_string())?;
        let mut shard = Shard::new(
            k,
            cfg.clone(),
            engine_cfg,
            backend,
            registry,
            t0,
            pools_lost,
            Some(directory),
        )?;
        // Before the mount: a journal or checkpoint may lie in a borrowed chunk.
        shard.loans = loans;
        Ok((poll, waker, shard))
    };
    let (mut poll, waker, mut shard) = match setup() {
        Ok(x) => x,
        Err(e) => return say(FromShard::Failed(format!("shard {k}: {e}"))),
    };
    let mut log = |l: &str| say(FromShard::Lines(vec![format!("shard {k}: {l}")]));
    if let Err(e) = mount(&mut shard, &mut poll, mode, &mut log, &stop) {
        // A stop signal is said as it is: `serve` exits 0 on exactly that error.
        if e == STOPPED_DURING_START {
            return say(FromShard::Failed(e));
        }
        return say(FromShard::Failed(format!("shard {k}: {e}")));
    }
    let thick = shard
        .engine
        .thick_regions()
        .into_iter()
        .map(|(v, p, off, len)| {
            let p = p.0 as usize;
            (v, p, off + bases.get(p).copied().unwrap_or(0), len)
        })
        .collect();
    // Its room is known before anything is served: a shard with no volumes may not
    // make a pass for a second, and the first ask for space must find it.
    if let Some(b) = &shard.loans.board {
        b.publish(k, &shard.engine);
    }
    say(FromShard::Ready {
        shard: k,
        waker,
        thick,
        backend: shard.backend.name(),
        loans: shard.engine.loans().to_vec(),
    });
    let result = serve(k, &mut shard, &mut poll, &rx, &say);
    shard.stop_vhost();
    shard.log_errors_left_out();
    if !shard.lines.is_empty() {
        let lines = shard.lines.drain(..).map(|l| format!("shard {k}: {l}"));
        say(FromShard::Lines(lines.collect()));
    }
    say(FromShard::Exited { shard: k, result });
}

/// A shard thread's loop: `Server::run`'s, for this shard's tokens and messages.
fn serve(
    k: u16,
    shard: &mut Shard,
    poll: &mut Poll,
    rx: &Receiver<ToShard>,
    say: &dyn Fn(FromShard),
) -> Result<Vec<String>, String> {
    let mut events = Events::with_capacity(1024);
    let mut passes_without_poll = 0u32;
    loop {
        let reread = shard.wants_reread();
        if !reread || passes_without_poll >= 3 {
            passes_without_poll = 0;
            let timeout = if reread {
                Duration::ZERO
            } else {
                shard.timeout(Duration::from_secs(1))
            };
            match poll.poll(&mut events, Some(timeout)) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("shard {k}: poll: {e}")),
            }
        } else {
            passes_without_poll += 1;
            events.clear();
        }
        shard.pass_start();
        for ev in events.iter() {
            if ev.token() == TOK_WAKE {
                loop {
                    match rx.try_recv() {
                        Ok(m) => on_message(shard, m),
                        Err(std::sync::mpsc::TryRecvError::Empty) => break,
                        // The front is gone: stop as a signal would.
                        Err(std::sync::mpsc::TryRecvError::Disconnected) => {
                            shard.begin_shutdown();
                            break;
                        }
                    }
                }
            } else {
                shard.on_event(ev);
            }
        }
        shard.pass_end();
        if let Some(b) = &shard.loans.board {
            b.publish(k, &shard.engine);
        }
        let l = &mut shard.loans;
        if !l.events.is_empty() || !l.refused.is_empty() {
            say(FromShard::Loan {
                shard: k,
                events: std::mem::take(&mut l.events),
                refused: std::mem::take(&mut l.refused),
            });
        }
        if !shard.lines.is_empty() {
            let lines = shard.lines.drain(..).map(|l| format!("shard {k}: {l}"));
            say(FromShard::Lines(lines.collect()));
        }
        if let Some(why) = shard.failed() {
            return Err(format!("shard {k}: {why}"));
        }
        if shard.stopped() {
            return Ok(shard.lost_at_stop());
        }
    }
}

fn on_message(shard: &mut Shard, m: ToShard) {
    match m {
        ToShard::Conn(h) => shard.adopt(*h),
        ToShard::Admin {
            req,
            pool_space,
            reply,
        } => {
            let mut stats = shard.server_stats();
            if shard.index == 0 {
                stats.pool_space = pool_space;
            }
            let now = shard.now();
            let r = admin::admin_reply(&req, &mut shard.engine, now, &mut shard.out, &stats);
            if let Some(name) = &r.disconnect {
                shard.disconnect_export(name);
            }
            let _ = reply.send(r.body);
        }
        ToShard::Metrics { pool_space, reply } => {
            let mut stats = shard.server_stats();
            if shard.index == 0 {
                stats.pool_space = pool_space;
            }
            let _ = reply.send(admin::metrics_text(&shard.engine, &stats));
        }
        ToShard::Vhost { dir, reply } => {
            let _ = reply.send(shard.start_vhost(&dir));
        }
        ToShard::Loan(c) => {
            let now = shard.now();
            if shard
                .engine
                .control(now, c.clone(), &mut shard.out)
                .is_err()
            {
                shard.loans.refused.push(c);
            }
        }
        ToShard::Stop => shard.begin_shutdown(),
    }
}

impl Threads {
    /// Start `cfg.threads` shards, one after the other: shard 0 first, and each only once
    /// the one before is ready (shard 0's superblock refuses another shard count before
    /// any other shard reads a slice boundary that moved). Returns the thick volumes'
    /// regions, in pool offsets.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start(
        cfg: Arc<ServerConfig>,
        engine_cfg: &EngineConfig,
        fds: Vec<PoolFds>,
        mode: StartMode,
        t0: Instant,
        pools_lost: Arc<AtomicBool>,
        stop: Arc<AtomicBool>,
        poll: &Poll,
        log: &mut dyn FnMut(&str),
    ) -> Result<(Threads, Vec<ThickRegion>), String> {
        let n = cfg.threads;
        let plan = ShardPlan::new(engine_cfg, n).map_err(|e| format!("configuration: {e}"))?;
        let front = Arc::new(Waker::new(poll.registry(), TOK_WAKE).map_err(|e| e.to_string())?);
        let (ftx, frx) = channel();
        let directory = Arc::new(Directory::default());
        let mut t = Threads {
            cfg: cfg.clone(),
            shards: Vec::new(),
            rx: frx,
            _waker: front.clone(),
            directory: directory.clone(),
            registry: poll.registry().try_clone().map_err(|e| e.to_string())?,
            handshakes: Slab::new(),
            lines: Vec::new(),
            backend: "",
            created_on: Vec::new(),
            connections_total: 0,
            protocol_errors: 0,
            stopping: false,
            broker: LoanBroker::default(),
            board: RoomBoard::new(n as usize, engine_cfg.pools.len()),
            budgets: BudgetBroker::new(&plan, engine_cfg),
        };
        let all_bases: Vec<Vec<u64>> = (0..engine_cfg.pools.len())
            .map(|p| (0..n).map(|k| plan.base_bytes(p, k)).collect())
            .collect();
        let mut loans = Vec::new();
        let mut thick = Vec::new();
        for k in 0..n {
            let kcfg = plan.shard_config(engine_cfg, k);
            let bases: Vec<u64> = (0..engine_cfg.pools.len())
                .map(|p| plan.base_bytes(p, k))
                .collect();
            let (tx, rx) = channel();
            let args = (
                cfg.clone(),
                fds.clone(),
                pools_lost.clone(),
                stop.clone(),
                directory.clone(),
                ftx.clone(),
                front.clone(),
                ShardLoans {
                    bases: if n > 1 { all_bases.clone() } else { Vec::new() },
                    board: (n > 1).then(|| t.board.clone()),
                    ..Default::default()
                },
            );
            let thread = std::thread::Builder::new()
                .name(format!("tv-shard-{k}"))
                .spawn(move || {
                    let (cfg, fds, lost, stop, dir, ftx, front, loans) = args;
                    shard_main(
                        k, cfg, kcfg, fds, bases, mode, t0, lost, stop, dir, rx, ftx, front, loans,
                    );
                })
                .map_err(|e| format!("cannot start shard {k}'s thread: {e}"));
            let thread = match thread {
                Ok(th) => th,
                Err(e) => {
                    t.abandon();
                    return Err(e);
                }
            };
            // Wait for this shard to be mounted (its lines are logged meanwhile).
            let ready = loop {
                let finished = thread.is_finished();
                match t.rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(FromShard::Lines(ls)) => ls.iter().for_each(|l| log(l)),
                    Ok(FromShard::Ready {
                        shard,
                        waker,
                        thick: th,
                        backend,
                        loans: l,
                    }) if shard == k => {
                        thick.extend(th);
                        t.backend = backend;
                        loans.push(l);
                        break Ok(waker);
                    }
                    Ok(FromShard::Failed(e)) => break Err(e),
                    // Nothing is served before every shard is up, so no shard is low on
                    // space yet (and one that is asks again).
                    Ok(_) => {}
                    // Its thread ended (a panic) before it said anything more.
                    Err(RecvTimeoutError::Timeout) if finished => {
                        break Err(format!("shard {k}'s thread ended while mounting"));
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        break Err(format!("shard {k} ended while mounting"));
                    }
                }
            };
            match ready {
                Ok(waker) => t.shards.push(Handle {
                    tx,
                    waker,
                    thread: Some(thread),
                    exited: None,
                }),
                Err(e) => {
                    let _ = thread.join();
                    t.abandon();
                    return Err(e);
                }
            }
        }
        // Runs a crash left lent but not borrowed go back to their donors.
        let held: Vec<&[LoanRecord]> = loans.iter().map(|l| &l[..]).collect();
        for (k, c) in LoanBroker::reconcile(&held) {
            t.send_loan(k, c);
        }
        Ok((t, thick))
    }

    fn send_loan(&mut self, k: u16, c: Control) {
        if let Some(h) = self.shards.get(k as usize) {
            h.send(ToShard::Loan(c));
        }
    }

    /// A shard's loan events and refusals through the broker, and its answers out.
    fn on_loan(&mut self, k: u16, events: Vec<EngineEvent>, refused: Vec<Control>) {
        let n = self.shards.len() as u16;
        let mut steps = Vec::new();
        for e in &events {
            let board = &self.board;
            steps.extend(self.broker.on_event(k, n, e, |j, p| board.room(j, p)));
            steps.extend(self.budgets.on_event(k, e));
        }
        for c in &refused {
            let board = &self.board;
            match c {
                Control::SetBudgets { .. } | Control::SetDeviceShares { .. } => {
                    steps.extend(self.budgets.on_refused(k, c))
                }
                _ => steps.extend(self.broker.on_refused(k, n, c, |j, p| board.room(j, p))),
            }
        }
        for (j, c) in steps {
            self.send_loan(j, c);
        }
    }

    /// Every shard opens its volumes' vhost-user sockets in `dir`; the lines to log.
    pub(crate) fn start_vhost(&self, dir: &std::path::Path) -> Result<Vec<String>, String> {
        let mut lines = Vec::new();
        for (k, h) in self.shards.iter().enumerate() {
            let (tx, rx) = channel();
            if !h.send(ToShard::Vhost {
                dir: dir.to_path_buf(),
                reply: tx,
            }) {
                return Err(format!("shard {k} is not running"));
            }
            match rx.recv_timeout(ANSWER_TIMEOUT) {
                Ok(Ok(line)) => lines.push(format!("shard {k}: {line}")),
                Ok(Err(e)) => return Err(format!("shard {k}: {e}")),
                Err(_) => return Err(format!("shard {k} did not open its vhost-user sockets")),
            }
        }
        Ok(lines)
    }

    /// Start failed: stop the shards already mounted (they have served nothing).
    fn abandon(&mut self) {
        self.begin_shutdown();
        let _ = self.join();
    }

    /// Every volume, configured ones first (in configuration order), then created ones.
    fn union(&self) -> Vec<(Export, u16)> {
        let mut v = self.directory.snapshot();
        let rank = |name: &str| {
            self.cfg
                .volumes
                .iter()
                .position(|c| c.name == name)
                .unwrap_or(usize::MAX)
        };
        v.sort_by_key(|(e, _)| rank(&e.name));
        v
    }

    pub(crate) fn exports(&self) -> Vec<Export> {
        self.union().into_iter().map(|(e, _)| e).collect()
    }

    pub(crate) fn volumes_per_shard(&self) -> Vec<Vec<String>> {
        let mut per = vec![Vec::new(); self.shards.len()];
        for (e, k) in self.union() {
            if let Some(p) = per.get_mut(k as usize) {
                p.push(e.name);
            }
        }
        per
    }

    pub(crate) fn backend_name(&self) -> &'static str {
        self.backend
    }

    fn owner(&self, name: &str) -> Option<u16> {
        let dir = self.directory.snapshot();
        dir.iter()
            .find(|(e, _)| e.name == name)
            .map(|(_, k)| *k)
            .or_else(|| {
                self.created_on
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, k)| *k)
            })
    }

    /// A new NBD connection: the front runs its handshake.
    pub(crate) fn accept(&mut self, stream: Stream, peer: String) {
        let entry = self.handshakes.vacant_entry();
        let key = entry.key();
        let mut conn = Conn::new();
        conn.handoff = true;
        conn.tls_mode = self.cfg.tls.mode;
        let mut h = Handshake { stream, conn, peer };
        if self
            .registry
            .register(
                h.stream.source(),
                Token(CONN_BASE + key),
                Interest::READABLE | Interest::WRITABLE,
            )
            .is_err()
        {
            return;
        }
        entry.insert(h);
        self.connections_total += 1;
        self.service(key);
    }

    /// An event for a connection in its handshake (messages from shards are read by
    /// `take_lines`).
    pub(crate) fn on_event(&mut self, ev: &mio::event::Event) {
        if let Token(t) = ev.token()
            && (CONN_BASE..CLIENT_BASE).contains(&t)
        {
            self.service(t - CONN_BASE);
        }
    }

    /// Read what came, answer the options, write; hand over at transmission.
    fn service(&mut self, key: usize) {
        let union = self.union();
        let exports: Vec<Export> = union.iter().map(|(e, _)| e.clone()).collect();
        let Some(h) = self.handshakes.get_mut(key) else {
            return;
        };
        loop {
            match h.stream.read_into(&mut h.conn.inbuf, 4096) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    h.conn.closing = Some(Closing::Abort(format!("read error: {e}")));
                    break;
                }
                Ok(0) => {
                    h.conn.closing = Some(Closing::Abort("peer closed the connection".into()));
                    break;
                }
                Ok(_) => {}
            }
        }
        let mut wire: Vec<WireRequest> = Vec::new();
        h.conn.process(&exports, &mut wire);
        if matches!(h.conn.closing, Some(Closing::Abort(_))) {
            self.protocol_errors += 1;
        }
        if let Err(e) = h.stream.flush_pending()
            && e.kind() != std::io::ErrorKind::WouldBlock
        {
            h.conn.closing = Some(Closing::Abort(format!("write error: {e}")));
        }
        while !h.conn.out.is_empty() {
            let mut slices = [std::io::IoSlice::new(&[]); 64];
            let n = h
                .conn
                .out
                .iter()
                .zip(slices.iter_mut())
                .map(|(b, sl)| *sl = std::io::IoSlice::new(b))
                .count();
            match h.stream.write_vectored(&slices[..n]) {
                Ok(0) => break,
                Ok(n) => h.conn.consumed(n),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    h.conn.closing = Some(Closing::Abort(format!("write error: {e}")));
                    break;
                }
            }
        }
        if crate::stream::start_tls_if_asked(&mut h.stream, &mut h.conn, &self.cfg.tls) {
            // The client's ClientHello may be in the socket already: no event would say so.
            return self.service(key);
        }
        if h.conn.finished() || matches!(h.conn.closing, Some(Closing::Abort(_))) {
            let mut h = self.handshakes.remove(key);
            let _ = self.registry.deregister(h.stream.source());
            if let Some(Closing::Abort(why)) = &h.conn.closing
                && !why.starts_with("peer closed")
            {
                self.lines
                    .push(format!("closed connection from {}: {why}", h.peer));
            }
            return;
        }
        if h.conn.in_transmission() {
            let owner = h.conn.export().and_then(|i| union.get(i)).cloned();
            let mut h = self.handshakes.remove(key);
            let Some((e, k)) = owner else {
                // The export chosen is gone from the list it was chosen from: cannot be,
                // as volumes are never removed; close rather than serve the wrong one.
                let _ = self.registry.deregister(h.stream.source());
                self.lines.push(format!(
                    "closed connection from {}: its export has no shard",
                    h.peer
                ));
                return;
            };
            let _ = self.registry.deregister(h.stream.source());
            let handed = Handed {
                stream: h.stream,
                conn: h.conn,
                peer: h.peer,
                export_name: e.name,
            };
            if let Some(s) = self.shards.get(k as usize) {
                s.send(ToShard::Conn(Box::new(handed)));
            }
        }
    }

    /// Lines the shards logged (and messages they sent) since the last call.
    pub(crate) fn take_lines(&mut self) -> Vec<String> {
        // Threads that ended before the channel is read, and said nothing about it
        // there, ended in a panic.
        let finished: Vec<bool> = self
            .shards
            .iter()
            .map(|h| h.thread.as_ref().is_some_and(|t| t.is_finished()))
            .collect();
        while let Ok(m) = self.rx.try_recv() {
            match m {
                FromShard::Lines(ls) => self.lines.extend(ls),
                FromShard::Exited { shard, result } => {
                    if let Some(h) = self.shards.get_mut(shard as usize) {
                        h.exited = Some(result);
                    }
                }
                FromShard::Loan {
                    shard,
                    events,
                    refused,
                } => self.on_loan(shard, events, refused),
                FromShard::Ready { .. } | FromShard::Failed(_) => {}
            }
        }
        for (k, (h, ended)) in self.shards.iter_mut().zip(finished).enumerate() {
            if ended && h.exited.is_none() {
                h.exited = Some(Err(format!("shard {k}'s thread ended unexpectedly")));
            }
        }
        std::mem::take(&mut self.lines)
    }

    /// The first shard that failed, and why.
    pub(crate) fn failed(&self) -> Option<String> {
        self.shards.iter().find_map(|h| match &h.exited {
            Some(Err(e)) => Some(e.clone()),
            _ => None,
        })
    }

    pub(crate) fn begin_shutdown(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        for h in &self.shards {
            h.send(ToShard::Stop);
        }
        // Connections still negotiating will never be served.
        for (_, mut h) in std::mem::take(&mut self.handshakes) {
            let _ = self.registry.deregister(h.stream.source());
        }
    }

    pub(crate) fn all_exited(&self) -> bool {
        self.shards.iter().all(|h| h.exited.is_some())
    }

    pub(crate) fn running(&self) -> usize {
        self.shards.iter().filter(|h| h.exited.is_none()).count()
    }

    /// Wait for every shard thread; the volumes whose final commit failed, or the
    /// failures (the worst shard's verdict).
    pub(crate) fn join(&mut self) -> Result<Vec<String>, String> {
        for h in &mut self.shards {
            if let Some(th) = h.thread.take() {
                let _ = th.join();
            }
        }
        let _ = self.take_lines();
        let mut lost = Vec::new();
        let mut why = Vec::new();
        for (k, h) in self.shards.iter().enumerate() {
            match &h.exited {
                Some(Ok(l)) => lost.extend(l.iter().cloned()),
                Some(Err(e)) => why.push(e.clone()),
                None => why.push(format!("shard {k} ended without stopping")),
            }
        }
        if why.is_empty() {
            Ok(lost)
        } else {
            Err(why.join("; "))
        }
    }

    /// Send `req` to shard `k` and wait for its answer.
    fn ask(&self, k: u16, req: &str, pool_space: &[PoolSpace]) -> Value {
        let (tx, rx) = channel();
        let sent = self.shards.get(k as usize).is_some_and(|h| {
            h.send(ToShard::Admin {
                req: req.to_string(),
                pool_space: pool_space.to_vec(),
                reply: tx,
            })
        });
        if !sent {
            return json!({ "error": format!("shard {k} is not running") });
        }
        match rx.recv_timeout(ANSWER_TIMEOUT) {
            Ok(body) => serde_json::from_slice(&body)
                .unwrap_or_else(|e| json!({ "error": format!("shard {k}: bad answer: {e}") })),
            Err(RecvTimeoutError::Timeout) => {
                json!({ "error": format!("shard {k} did not answer within {ANSWER_TIMEOUT:?}") })
            }
            Err(RecvTimeoutError::Disconnected) => {
                json!({ "error": format!("shard {k} stopped before answering") })
            }
        }
    }

    fn ask_all(&self, req: &str, pool_space: &[PoolSpace]) -> Vec<Value> {
        (0..self.shards.len() as u16)
            .map(|k| self.ask(k, req, pool_space))
            .collect()
    }

    /// Answer an admin request: route it to the shard it concerns, or ask every shard and
    /// merge the answers.
    pub(crate) fn admin(&mut self, req: &str, pool_space: Vec<PoolSpace>) -> Reply {
        let line = req.trim();
        let parsed = serde_json::from_str::<Value>(line).ok();
        let cmd = parsed
            .as_ref()
            .and_then(|v| v.get("cmd").and_then(|c| c.as_str()).map(str::to_string))
            .unwrap_or_else(|| line.to_string());
        let field = |k: &str| {
            parsed
                .as_ref()
                .and_then(|v| v.get(k))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let (v, shutdown) = match cmd.as_str() {
            "shutdown" => (json!({"ok": true, "message": "shutting down"}), true),
            "stat" => {
                let parts = self.ask_all(line, &pool_space);
                (self.merge_stat(parts), false)
            }
            "volume" if field("action").as_deref() == Some("create") => {
                let name = field("name").unwrap_or_default();
                let k = self.owner(&name).unwrap_or_else(|| self.least_loaded());
                let v = self.ask(k, line, &pool_space);
                if v.get("ok").is_some() && !self.created_on.iter().any(|(n, _)| *n == name) {
                    self.created_on.push((name, k));
                }
                (v, false)
            }
            _ => match field("volume").or_else(|| field("name")) {
                // About one volume: its shard answers (shard 0 for a name nobody has,
                // which says so in today's words).
                Some(name) => (
                    self.ask(self.owner(&name).unwrap_or(0), line, &pool_space),
                    false,
                ),
                None => {
                    let mut v = merge_lists(self.ask_all(line, &pool_space));
                    self.order_volumes(&mut v);
                    (v, false)
                }
            },
        };
        let mut body = serde_json::to_vec(&v).unwrap_or_default();
        body.push(b'\n');
        Reply {
            body,
            shutdown,
            disconnect: None,
        }
    }

    /// A merged `volume list` in the order one engine would give: configured volumes in
    /// configuration order, then those created in an earlier run (in their shards'
    /// order), then those created since this start, in the order they were asked for.
    fn order_volumes(&self, v: &mut Value) {
        let Some(list) = v.get_mut("volumes").and_then(Value::as_array_mut) else {
            return;
        };
        let rank = |x: &Value| {
            let name = x["name"].as_str().unwrap_or("");
            let configured = self.cfg.volumes.iter().position(|c| c.name == name);
            let created = self.created_on.iter().position(|(n, _)| n == name);
            match (configured, created) {
                (Some(i), _) => (0, i),
                (None, Some(i)) => (2, i),
                (None, None) => (1, 0),
            }
        };
        list.sort_by_key(rank);
    }

    /// The shard a new volume goes to: the one owning the fewest (the lowest index among
    /// equals), as `ShardPlan::least_loaded` decides in the simulator.
    fn least_loaded(&self) -> u16 {
        let mut n = vec![0usize; self.shards.len()];
        for (_, k) in self.directory.snapshot() {
            if let Some(c) = n.get_mut(k as usize) {
                *c += 1;
            }
        }
        let dir = self.directory.snapshot();
        for (name, k) in &self.created_on {
            if !dir.iter().any(|(e, _)| &e.name == name)
                && let Some(c) = n.get_mut(*k as usize)
            {
                *c += 1;
            }
        }
        (0..n.len() as u16)
            .min_by_key(|&k| (n[k as usize], k))
            .unwrap_or(0)
    }

    /// Every shard's `stat`, as one: volumes and migrations listed, each pool's slices
    /// summed (capacities, counts, bytes; latency percentiles: the worst shard's), the
    /// server's counters summed, one `shards` entry per shard.
    fn merge_stat(&self, parts: Vec<Value>) -> Value {
        if let Some(e) = parts.iter().find(|p| p.get("error").is_some()) {
            return e.clone();
        }
        let mut it = parts.into_iter();
        let Some(mut acc) = it.next() else {
            return json!({ "error": "no shard answered" });
        };
        for p in it {
            merge_into("", &mut acc, p);
        }
        let server = &mut acc["server"];
        if let Some(n) = server["connections_total"].as_u64() {
            server["connections_total"] = json!(n + self.connections_total);
        }
        if let Some(n) = server["connections_open"].as_u64() {
            server["connections_open"] = json!(n + self.handshakes.len() as u64);
        }
        if let Some(n) = server["protocol_errors"].as_u64() {
            server["protocol_errors"] = json!(n + self.protocol_errors);
        }
        acc
    }

    /// The metrics of every shard, as one exposition: each sample gets a `shard` label.
    pub(crate) fn metrics(&mut self, pool_space: Vec<PoolSpace>) -> Reply {
        let mut texts = Vec::new();
        for (k, h) in self.shards.iter().enumerate() {
            let (tx, rx) = channel();
            let ok = h.send(ToShard::Metrics {
                pool_space: pool_space.clone(),
                reply: tx,
            });
            if ok && let Ok(t) = rx.recv_timeout(ANSWER_TIMEOUT) {
                texts.push((k, t));
            }
        }
        admin::metrics_http(merge_metrics(&texts))
    }
}

/// Merge one shard's `stat` JSON into the accumulated one (see `merge_stat`).
fn merge_into(key: &str, acc: &mut Value, v: Value) {
    match (acc, v) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, bv) in b {
                match a.get_mut(&k) {
                    Some(av) => merge_into(&k, av, bv),
                    None => {
                        a.insert(k, bv);
                    }
                }
            }
        }
        (Value::Array(a), Value::Array(b)) if key == "pools" => {
            // The same pools in the same order on every shard: sum the slices.
            for (av, bv) in a.iter_mut().zip(b) {
                merge_into("", av, bv);
            }
        }
        (Value::Array(a), Value::Array(b)) => a.extend(b),
        (a @ Value::Number(_), Value::Number(b)) => {
            // Settings every slice shares; figures that do not add up (percentiles,
            // means, maxima, ratios: the worst shard's); everything else is a count or
            // an amount, summed.
            let same = [
                "k",
                "queue_depth",
                "chunk_bytes",
                "segment_bytes",
                "uptime_s",
                "reservation_iops",
                "limit_iops",
                "weight",
            ];
            let percentile =
                key.len() > 1 && key.starts_with('p') && key.as_bytes()[1].is_ascii_digit();
            let worst = percentile
                || key.ends_with("_us")
                || key.ends_with("_ms")
                || key.ends_with("_ms2")
                || key.contains("max")
                || key.contains("peak")
                || key.starts_with("mean")
                || key.starts_with("var")
                || key.contains("amplification")
                || key.contains("ratio");
            let x = a.as_f64().unwrap_or(0.0);
            let y = b.as_f64().unwrap_or(0.0);
            if same.contains(&key) || worst {
                if y > x {
                    *a = Value::Number(b);
                }
            } else if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
                *a = json!(x + y);
            } else {
                *a = json!(x + y);
            }
        }
        (a @ Value::Null, b) => *a = b,
        (Value::String(a), Value::String(b)) if key == "state" && *a != b => {
            *a = format!("{a}/{b}");
        }
        _ => {}
    }
}

/// Answers of several shards to a request about no one volume (`volume list`,
/// `migrate status`): their lists joined; the first error, if any.
fn merge_lists(parts: Vec<Value>) -> Value {
    if let Some(e) = parts.iter().find(|p| p.get("error").is_some()) {
        return e.clone();
    }
    let mut it = parts.into_iter();
    let Some(mut acc) = it.next() else {
        return json!({ "error": "no shard answered" });
    };
    for p in it {
        if let (Value::Object(a), Value::Object(b)) = (&mut acc, p) {
            for (k, bv) in b {
                if let (Some(Value::Array(av)), Value::Array(bv)) = (a.get_mut(&k), bv) {
                    av.extend(bv);
                }
            }
        }
    }
    acc
}

/// Prometheus text of every shard, as one: each family once (its HELP and TYPE from the
/// first shard that has it), its samples from every shard with `shard="k"` added (the
/// per-shard families already carry it).
fn merge_metrics(texts: &[(usize, String)]) -> String {
    let mut families: Vec<(String, Vec<String>, Vec<String>)> = Vec::new();
    for (k, text) in texts {
        let mut current: Option<usize> = None;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# ") {
                let name = rest.split_whitespace().nth(1).unwrap_or("").to_string();
                let i = match families.iter().position(|f| f.0 == name) {
                    Some(i) => i,
                    None => {
                        families.push((name, Vec::new(), Vec::new()));
                        families.len() - 1
                    }
                };
                if families[i].1.len() < 2 && !families[i].1.iter().any(|h| h == line) {
                    families[i].1.push(line.to_string());
                }
                current = Some(i);
                continue;
            }
            let Some(i) = current else { continue };
            let sample = if line.contains("shard=\"") {
                line.to_string()
            } else if let Some(b) = line.find('{') {
                format!("{}{{shard=\"{k}\",{}", &line[..b], &line[b + 1..])
            } else if let Some(sp) = line.find(' ') {
                format!("{}{{shard=\"{k}\"}}{}", &line[..sp], &line[sp..])
            } else {
                continue;
            };
            families[i].2.push(sample);
        }
    }
    let mut out = String::new();
    for (_, head, samples) in families {
        for l in head.iter().chain(&samples) {
            out.push_str(l);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_of_two_shards_merge_into_one_family_each_with_shard_labels() {
        let a = "# HELP m_total Things.\n# TYPE m_total counter\nm_total{volume=\"a\"} 1\n# HELP up Up.\n# TYPE up gauge\nup 1\n";
        let b = "# HELP m_total Things.\n# TYPE m_total counter\nm_total{volume=\"b\"} 2\n# HELP up Up.\n# TYPE up gauge\nup 1\n";
        let m = merge_metrics(&[(0, a.to_string()), (1, b.to_string())]);
        assert_eq!(
            m,
            "# HELP m_total Things.\n# TYPE m_total counter\nm_total{shard=\"0\",volume=\"a\"} 1\nm_total{shard=\"1\",volume=\"b\"} 2\n# HELP up Up.\n# TYPE up gauge\nup{shard=\"0\"} 1\nup{shard=\"1\"} 1\n"
        );
    }

    #[test]
    fn stat_merge_lists_volumes_and_sums_pool_slices() {
        let a = json!({"engine": {"state": "Ready", "volumes": [{"name": "a"}],
            "pools": [{"name": "ssd", "capacity_bytes": 10, "queue_depth": 32, "p99_us": 5.0}]},
            "server": {"requests": 3, "shards": [{"shard": 0}]}, "migrations": []});
        let b = json!({"engine": {"state": "Ready", "volumes": [{"name": "b"}],
            "pools": [{"name": "ssd", "capacity_bytes": 12, "queue_depth": 32, "p99_us": 7.0}]},
            "server": {"requests": 4, "shards": [{"shard": 1}]}, "migrations": []});
        let mut acc = a;
        merge_into("", &mut acc, b);
        assert_eq!(acc["engine"]["volumes"].as_array().unwrap().len(), 2);
        assert_eq!(acc["engine"]["pools"][0]["capacity_bytes"], 22);
        assert_eq!(acc["engine"]["pools"][0]["queue_depth"], 32);
        assert_eq!(acc["engine"]["pools"][0]["p99_us"], 7.0);
        assert_eq!(acc["engine"]["pools"][0]["name"], "ssd");
        assert_eq!(acc["engine"]["state"], "Ready");
        assert_eq!(acc["server"]["requests"], 7);
        assert_eq!(acc["server"]["shards"].as_array().unwrap().len(), 2);
    }
}
