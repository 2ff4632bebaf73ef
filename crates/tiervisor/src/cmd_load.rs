//! `tiervisor load URI SCENARIO`: replay a scenario's VM workloads against real NBD
//! exports (tiervisor's or any other server's), with the metrics `tiervisor sim` reports,
//! so one definition is predicted in simulation and checked for real.
//!
//! Each VM gets its own thread and, by default, one connection; a thread per connection
//! reads the replies. With `--connections process` a VM whose workload names processes
//! (the SURGE-like generator) opens one connection per process: NBD carries no process
//! id, so a server that schedules per connection (tiervisor's cfq, bfq and cats) then
//! sees the workload's processes as a kernel scheduler sees a guest's. Closed loops keep the workload's depth in flight, paced ones hold a request
//! (its slot taken) until its not-before time, timed replays issue at the trace's times
//! whatever is in flight. Service time is send to reply; response time is arrival (the
//! time the workload made the request, a sleeping process's wake-up, or its trace time) to
//! reply, as in the simulator.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clap::Args;
use tiervisor_engine::stats::Latency;
use tiervisor_sim::Scenario;
use tiervisor_sim::report::{Moments, VmReport};
use tiervisor_sim::scenario::VmSpec;
use tiervisor_workload::{WlKind, WlRequest, Workload};

use crate::Failure;
use crate::nbd_client::{self, Cmd, NbdUri};

#[derive(Args)]
pub struct LoadArgs {
    /// The server: nbd://HOST[:PORT][/EXPORT] or nbd+unix:///[EXPORT]?socket=PATH. Without
    /// an export, each VM attaches to the export named after its volume; with one, the
    /// scenario must have one VM (or name it with --vm).
    uri: String,
    /// Scenario file (TOML) whose `[[vm]]` workloads are replayed; pools and devices are
    /// ignored (the server's are measured).
    scenario: PathBuf,
    /// Replay only this VM.
    #[arg(long)]
    vm: Option<String>,
    /// Seed for the generators (overrides the scenario's), as for `tiervisor sim`.
    #[arg(long)]
    seed: Option<u64>,
    /// Stop issuing after this many seconds (what is in flight completes).
    #[arg(long)]
    runtime_s: Option<f64>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    /// `vm`: one connection per VM. `process`: one per process of the workload (opened at
    /// its first request), so per-connection I/O contexts on the server are processes.
    #[arg(long, value_enum, default_value = "vm")]
    connections: Connections,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Connections {
    Vm,
    Process,
}

/// Largest request a handle can describe (and NBD servers commonly accept): 32 MiB.
const MAX_REQUEST_BYTES: u64 = 32 << 20;
const HANDLE_READ: u64 = 1 << 26;
const HANDLE_LEN_MASK: u64 = HANDLE_READ - 1;

/// A handle carries the request's index and, for reads, the data length to expect.
fn handle(index: u64, r: &WlRequest) -> u64 {
    let read = if r.kind == WlKind::Read {
        HANDLE_READ | r.len_bytes
    } else {
        0
    };
    (index << 27) | read
}

struct Vm {
    name: String,
    export: String,
    volume_bytes: u64,
    spec: VmSpec,
    index: usize,
}

pub fn run(a: LoadArgs) -> Result<(), Failure> {
    let uri = NbdUri::parse(&a.uri).map_err(Failure::input)?;
    let sc = Scenario::load(&a.scenario).map_err(|e| Failure::input(e.to_string()))?;
    let seed = a.seed.unwrap_or(sc.seed);
    let vms: Vec<Vm> = sc
        .vms
        .iter()
        .enumerate()
        .filter(|(_, v)| a.vm.as_ref().is_none_or(|n| *n == v.name))
        .map(|(i, v)| Vm {
            name: v.name.clone(),
            export: if uri.export.is_empty() {
                sc.volumes[v.volume].name.clone()
            } else {
                uri.export.clone()
            },
            volume_bytes: sc.volumes[v.volume].size_bytes,
            spec: v.clone(),
            index: i,
        })
        .collect();
    if vms.is_empty() {
        return Err(Failure::input(match &a.vm {
            Some(n) => format!("{}: no vm named {n:?}", sc.source),
            None => format!("{}: no [[vm]] to replay", sc.source),
        }));
    }
    if !uri.export.is_empty() && vms.len() > 1 {
        return Err(Failure::input(format!(
            "{}: {} VMs but the URI names one export; name a VM with --vm, or leave the export out to attach each VM to its volume's export",
            sc.source,
            vms.len()
        )));
    }
    let runtime = a.runtime_s.map(Duration::from_secs_f64);
    let start = Instant::now();
    let threads: Vec<_> = vms
        .into_iter()
        .map(|vm| {
            let uri = uri.clone();
            let per_process = a.connections == Connections::Process;
            std::thread::spawn(move || {
                let name = vm.name.clone();
                run_vm(&uri, vm, seed, start, runtime, per_process)
                    .map_err(|e| format!("vm {name}: {e}"))
            })
        })
        .collect();
    let mut reports = Vec::new();
    for t in threads {
        let r = t
            .join()
            .map_err(|_| Failure::run("a load thread panicked"))?
            .map_err(Failure::run)?;
        reports.push(r);
    }
    print(&reports, a.json, &a.uri);
    if reports.iter().all(|r| r.report.ios == 0) {
        return Err(Failure::run("no request completed"));
    }
    Ok(())
}

/// One VM's replay, as printed.
struct Replayed {
    vm: String,
    report: VmReport,
    connections: u64,
}

/// A reply as a reader thread saw it.
enum Event {
    Reply {
        handle: u64,
        error: u32,
        at: Instant,
    },
    Failed(String),
}

fn run_vm(
    uri: &NbdUri,
    vm: Vm,
    seed: u64,
    start: Instant,
    runtime: Option<Duration>,
    per_process: bool,
) -> Result<Replayed, String> {
    let (ev_tx, ev_rx) = mpsc::channel();
    let mut links = Links::new(uri.clone(), vm.export.clone(), per_process, ev_tx);
    let info = links.open()?;
    if info.size_bytes < vm.volume_bytes {
        return Err(format!(
            "export {:?} has {} bytes; the scenario's volume has {}",
            vm.export, info.size_bytes, vm.volume_bytes
        ));
    }
    let (mut w, _) = vm.spec.build(vm.volume_bytes, seed, vm.index)?;
    let mut run = Run::new(w.depth(), w.paced(), info, start, runtime);
    let result = run.drive(&mut *w, &mut links, &ev_rx);
    let connections = links.conns.len() as u64;
    links.close(ev_rx);
    result?;
    Ok(Replayed {
        vm: vm.name,
        report: run.report(&vm.export, w.app_ops()),
        connections,
    })
}

/// A VM's connections to its export: one, or one per process of its workload.
struct Links {
    uri: NbdUri,
    export: String,
    per_process: bool,
    conns: Vec<nbd_client::Requests>,
    /// Connections with requests pushed and not yet sent.
    unsent: Vec<bool>,
    by_process: HashMap<u32, usize>,
    readers: Vec<std::thread::JoinHandle<()>>,
    events: mpsc::Sender<Event>,
}

impl Links {
    fn new(uri: NbdUri, export: String, per_process: bool, events: mpsc::Sender<Event>) -> Links {
        Links {
            uri,
            export,
            per_process,
            conns: Vec::new(),
            unsent: Vec::new(),
            by_process: HashMap::new(),
            readers: Vec::new(),
            events,
        }
    }

    /// Open one more connection, with a thread that passes its replies on.
    fn open(&mut self) -> Result<nbd_client::ExportInfo, String> {
        let (tx, mut rx, info) = nbd_client::connect(&self.uri, &self.export)?;
        let events = self.events.clone();
        self.readers.push(std::thread::spawn(move || {
            loop {
                let len_of =
                    |h: u64| (h & HANDLE_READ != 0).then_some((h & HANDLE_LEN_MASK) as u32);
                let e = match rx.next(len_of) {
                    Ok(r) => Event::Reply {
                        handle: r.handle,
                        error: r.error,
                        at: Instant::now(),
                    },
                    Err(e) => Event::Failed(e),
                };
                let failed = matches!(e, Event::Failed(_));
                if events.send(e).is_err() || failed {
                    return;
                }
            }
        }));
        self.conns.push(tx);
        self.unsent.push(false);
        Ok(info)
    }

    /// The connection a request goes out on (opening its process's first).
    fn for_request(&mut self, r: &WlRequest) -> Result<&mut nbd_client::Requests, String> {
        let i = match r.context.filter(|_| self.per_process) {
            None => 0,
            Some(p) => match self.by_process.get(&p) {
                Some(&i) => i,
                // The first connection serves the first process to ask.
                None if self.by_process.is_empty() => {
                    self.by_process.insert(p, 0);
                    0
                }
                None => {
                    self.open()?;
                    let i = self.conns.len() - 1;
                    self.by_process.insert(p, i);
                    i
                }
            },
        };
        self.unsent[i] = true;
        Ok(&mut self.conns[i])
    }

    fn send(&mut self) -> Result<(), String> {
        for (c, unsent) in self.conns.iter_mut().zip(&mut self.unsent) {
            if std::mem::take(unsent) {
                c.send()?;
            }
        }
        Ok(())
    }

    /// Disconnect every connection and wait for their readers.
    fn close(self, events: mpsc::Receiver<Event>) {
        for c in self.conns {
            c.disconnect();
        }
        drop(events);
        for r in self.readers {
            let _ = r.join();
        }
    }
}

/// One VM's replay: what is held, in flight and measured.
struct Run {
    depth: u32,
    timed: bool,
    paced: bool,
    can_flush: bool,
    read_only: bool,
    start: Instant,
    stop_at: Option<Instant>,
    /// Requests made but not sent, by (not-before time, index).
    held: BTreeMap<(u64, u64), (WlRequest, u64)>,
    /// In flight by index: (arrival ns, sent ns, the request).
    in_flight: HashMap<u64, (u64, u64, WlRequest)>,
    made: u64,
    exhausted: bool,
    payload: Vec<u8>,
    ios: u64,
    errors: u64,
    read_bytes: u64,
    write_bytes: u64,
    last_ns: u64,
    service: Latency,
    response: Moments,
}

impl Run {
    fn new(
        depth: u32,
        paced: bool,
        info: nbd_client::ExportInfo,
        start: Instant,
        runtime: Option<Duration>,
    ) -> Run {
        Run {
            depth,
            timed: depth == u32::MAX,
            paced,
            can_flush: info.can_flush,
            read_only: info.read_only,
            start,
            stop_at: runtime.map(|d| start + d),
            held: BTreeMap::new(),
            in_flight: HashMap::new(),
            made: 0,
            exhausted: false,
            payload: Vec::new(),
            ios: 0,
            errors: 0,
            read_bytes: 0,
            write_bytes: 0,
            last_ns: 0,
            service: Latency::default(),
            response: Moments::default(),
        }
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Ask the workload for requests while it may have more outstanding.
    fn fill(&mut self, w: &mut dyn Workload) -> Result<(), String> {
        loop {
            let now = self.now_ns();
            if self.exhausted || self.stop_at.is_some_and(|t| Instant::now() >= t) {
                self.exhausted = true;
                return Ok(());
            }
            let room = if self.timed {
                // Timed: read ahead to the first request still in the future.
                self.held
                    .last_key_value()
                    .is_none_or(|((t, _), _)| *t <= now)
            } else {
                self.in_flight.len() + self.held.len() < self.depth as usize
            };
            if !room || !w.ready(now) {
                return Ok(());
            }
            let Some(r) = w.next(now) else {
                self.exhausted = true;
                return Ok(());
            };
            if r.len_bytes > MAX_REQUEST_BYTES {
                return Err(format!(
                    "request {} asks {} bytes; at most {MAX_REQUEST_BYTES} per request",
                    self.made, r.len_bytes
                ));
            }
            let not_before = if self.timed || self.paced {
                r.at_ns.unwrap_or(now)
            } else {
                0
            };
            // Arrival: a trace's time; a paced process's wake-up (a sleeping process has
            // not asked yet, as in the simulator, which issues it then); otherwise when
            // the workload made the request.
            let arrival = if self.timed {
                not_before
            } else if self.paced {
                not_before.max(now)
            } else {
                now
            };
            self.held.insert((not_before, self.made), (r, arrival));
            self.made += 1;
        }
    }

    /// Send every held request that is due.
    fn issue(&mut self, w: &mut dyn Workload, links: &mut Links) -> Result<(), String> {
        let now = self.now_ns();
        let mut sent = false;
        while let Some(entry) = self.held.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let ((_, index), (r, arrival)) = entry.remove_entry();
            let cmd = match r.kind {
                WlKind::Read => Cmd::Read,
                WlKind::Write => Cmd::Write,
                WlKind::Flush if self.can_flush => Cmd::Flush,
                // A server without FLUSH: nothing to ask, counted as done (and told to the
                // workload, whose process may be waiting for it).
                WlKind::Flush => {
                    self.ios += 1;
                    w.completed(index, now);
                    continue;
                }
            };
            if cmd == Cmd::Write && self.read_only {
                return Err("the export is read-only and the workload writes".into());
            }
            if cmd == Cmd::Write && self.payload.len() < r.len_bytes as usize {
                self.payload = (0..r.len_bytes).map(|i| (i % 251) as u8).collect();
            }
            links.for_request(&r)?.push(
                cmd,
                handle(index, &r),
                r.offset_bytes,
                r.len_bytes as u32,
                &self.payload,
            )?;
            self.in_flight
                .insert(index, (arrival.min(now), self.now_ns(), r));
            sent = true;
        }
        if sent {
            links.send()?;
        }
        Ok(())
    }

    fn complete(
        &mut self,
        w: &mut dyn Workload,
        handle: u64,
        error: u32,
        at: Instant,
    ) -> Result<(), String> {
        let index = handle >> 27;
        let (arrival, sent, r) = self
            .in_flight
            .remove(&index)
            .ok_or_else(|| format!("a reply for handle {handle:#x}, which is not in flight"))?;
        let done = at.duration_since(self.start).as_nanos() as u64;
        self.service.record(done.saturating_sub(sent));
        self.response.record(done.saturating_sub(arrival));
        self.last_ns = self.last_ns.max(done);
        self.ios += 1;
        if error != 0 {
            self.errors += 1;
        } else {
            match r.kind {
                WlKind::Read => self.read_bytes += r.len_bytes,
                WlKind::Write => self.write_bytes += r.len_bytes,
                WlKind::Flush => {}
            }
        }
        w.completed(index, done);
        Ok(())
    }

    fn drive(
        &mut self,
        w: &mut dyn Workload,
        links: &mut Links,
        rx: &mpsc::Receiver<Event>,
    ) -> Result<(), String> {
        loop {
            self.fill(w)?;
            self.issue(w, links)?;
            if self.exhausted && self.held.is_empty() && self.in_flight.is_empty() {
                return Ok(());
            }
            let now = self.now_ns();
            let wait =
                self.held
                    .first_key_value()
                    .map_or(Duration::from_millis(100), |((t, _), _)| {
                        Duration::from_nanos(t.saturating_sub(now)).min(Duration::from_millis(100))
                    });
            let first = if self.in_flight.is_empty() {
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                }
                None
            } else {
                match rx.recv_timeout(wait) {
                    Ok(e) => Some(e),
                    Err(mpsc::RecvTimeoutError::Timeout) => None,
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        return Err("the connection closed".into());
                    }
                }
            };
            for e in first
                .into_iter()
                .chain(std::iter::from_fn(|| rx.try_recv().ok()))
            {
                match e {
                    Event::Reply { handle, error, at } => self.complete(w, handle, error, at)?,
                    Event::Failed(e) => return Err(e),
                }
            }
        }
    }

    /// `app_ops`: the workload's application operations finished (`[vm.app]` loops).
    fn report(&self, export: &str, app_ops: Option<u64>) -> VmReport {
        let mut r = VmReport::new(
            self.ios,
            self.read_bytes,
            self.write_bytes,
            self.errors,
            self.last_ns as f64 / 1e9,
            &self.service,
            export,
        );
        r.response = (&self.response).into();
        r.app_ops = app_ops;
        r.app_ops_per_s = app_ops.map(|n| {
            if r.exec_time_s > 0.0 {
                n as f64 / r.exec_time_s
            } else {
                0.0
            }
        });
        r
    }
}

fn print(reports: &[Replayed], json: bool, uri: &str) {
    if json {
        let vms: serde_json::Map<String, serde_json::Value> = reports
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(&r.report).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("connections".into(), r.connections.into());
                }
                (r.vm.clone(), v)
            })
            .collect();
        println!("{}", serde_json::json!({ "uri": uri, "vms": vms }));
        return;
    }
    println!(
        "{:<10} {:<10} {:>5} {:>9} {:>7} {:>9} {:>8} {:>11} {:>9} {:>9} {:>9} {:>10} {:>10}",
        "vm",
        "export",
        "conns",
        "ios",
        "errors",
        "IOPS",
        "MB/s",
        "sectors/ms",
        "mean us",
        "p50 us",
        "p99 us",
        "resp ms",
        "resp var"
    );
    for Replayed {
        vm: n,
        report: r,
        connections,
    } in reports
    {
        let sectors_per_ms = if r.exec_time_s > 0.0 {
            (r.read_bytes + r.write_bytes) as f64 / 512.0 / (r.exec_time_s * 1e3)
        } else {
            0.0
        };
        println!(
            "{:<10} {:<10} {:>5} {:>9} {:>7} {:>9.0} {:>8.1} {:>11.2} {:>9.1} {:>9.1} {:>9.1} {:>10.3} {:>10.3}",
            n,
            r.volume,
            connections,
            r.ios,
            r.errors,
            r.iops,
            r.mb_per_s,
            sectors_per_ms,
            r.lat_us.mean,
            r.lat_us.p50,
            r.lat_us.p99,
            r.response.mean_ms,
            r.response.variance_ms2
        );
    }
}
