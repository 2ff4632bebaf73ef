//! The discrete-event loop.
//!
//! Events are ordered by (virtual time, insertion sequence), so ties break the same way
//! every run. Devices are timeline models: when the engine submits an operation, the
//! model says when it completes and that completion becomes an event. A disk that queues
//! commands (NCQ) holds them in a `CommandQueue` instead: it starts one whenever it is
//! free (on arrival at an idle drive, or at the previous command's completion event) and
//! its completion becomes the event. An array of such disks has one queue per member
//! (`ArrayQueue`): each part's completion is an event, and the command completes with
//! its last part.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::time::Instant;

use rand::RngCore;
use rand::SeedableRng;
use slab_lite::Slab;
use tiervisor_engine::host::{self, Wakeups};
use tiervisor_engine::stats::Latency;
use tiervisor_engine::{
    DevKind, DeviceCompletion, Engine, EngineConfig, EngineEvent, EngineState, IoContext, OpId,
    Outputs, ReqKind, StartMode, VmCompletion, VmRequest, VolumeId,
};
use tiervisor_model::array_queue::ArrayQueue;
use tiervisor_model::queue::CommandQueue;
use tiervisor_model::raid::Raid0;
use tiervisor_model::{DevOpKind, DevRequest, DeviceModel, Model};
use tiervisor_workload::{WlKind, Workload};

use crate::report::{DeviceReport, LatReport, Moments, SimReport, VmReport, VolumeReport};
use crate::scenario::Scenario;
use crate::shards::Sharded;

/// A tiny slab (vector + free list) for requests in flight.
mod slab_lite {
    pub struct Slab<T> {
        items: Vec<Option<T>>,
        free: Vec<usize>,
    }
    impl<T> Slab<T> {
        pub fn new() -> Self {
            Slab {
                items: Vec::new(),
                free: Vec::new(),
            }
        }
        pub fn insert(&mut self, t: T) -> usize {
            match self.free.pop() {
                Some(i) => {
                    self.items[i] = Some(t);
                    i
                }
                None => {
                    self.items.push(Some(t));
                    self.items.len() - 1
                }
            }
        }
        pub fn take(&mut self, i: usize) -> Option<T> {
            let t = self.items.get_mut(i)?.take();
            if t.is_some() {
                self.free.push(i);
            }
            t
        }
    }
}

/// Told how far a run has got (the command line draws a progress bar with it; the
/// simulator library itself prints nothing).
pub trait Progress {
    /// Every 65,536 completed VM requests, with the count so far.
    fn advance(&mut self, done_ios: u64);
    /// The run is over.
    fn finish(&mut self);
}

#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Overrides the scenario's seed.
    pub seed: Option<u64>,
    /// Stop the run at this virtual time.
    pub max_sim_ns: Option<u64>,
    /// End the run once every `[[migration]]` has started and finished, with the
    /// workloads still running (migration experiments measure the window only).
    pub stop_after_migrations: bool,
}

const EV_DEV: u8 = 0;
const EV_ARRIVAL: u8 = 1;
const EV_WAKE: u8 = 2;
/// A paced closed-loop request whose not-before time has come (payload: `held` slot).
const EV_HELD: u8 = 3;
/// A closed-loop VM's refill after a request that took no simulated time (payload: VM).
const EV_REFILL: u8 = 4;
/// A scenario's `[[migration]]` starts (payload: its index).
const EV_MIGRATE: u8 = 5;
/// A member drive of an array that queues commands finished its part of a command
/// (payload: the command's `EV_DEV` payload << 6 | the member; arrays have at most 64).
const EV_PART: u8 = 6;
/// The dynamic oracle's tick (`oracle_dynamic.rs`), every `[tiering] interval_s`.
const EV_ORACLE: u8 = 7;

/// What a request answered without device I/O (a read of unwritten space, an error, a
/// flush with nothing to commit) costs its VM before the next one: without it such
/// requests complete at one instant forever and a timed job's clock never advances.
const NO_IO_REQUEST_NS: u64 = 1_000;

struct VmRun {
    name: String,
    volume: VolumeId,
    workload: Box<dyn Workload>,
    depth: u32,
    timed: bool,
    /// Closed loop with not-before times (`Workload::paced`).
    paced: bool,
    outstanding: u32,
    /// Requests `next` has returned (the next one's index).
    returned: u64,
    /// Response time (issue to completion) moments, for the scheduling tables.
    response: Moments,
    next: Option<tiervisor_workload::WlRequest>,
    exhausted: bool,
    /// An `EV_REFILL` is queued for it.
    refill_pending: bool,
    ios: u64,
    read_bytes: u64,
    write_bytes: u64,
    errors: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    latency: Latency,
}

#[derive(Default, Clone, Copy)]
struct DevRun {
    outstanding: u32,
    busy_since: u64,
    busy_ns: u64,
    ops: u64,
    /// Device service time (dispatch to completion) of reads and writes.
    service: Moments,
    sectors: u64,
}

pub struct Simulation {
    /// The engine is started and the volumes prefilled (`prepare`).
    prepared: bool,
    oracle_placed: Vec<(usize, u64)>,
    /// `placement = "oracle-dynamic"` volumes' mover, built by `prefill`.
    dyn_oracle: Option<crate::oracle_dynamic::DynamicOracle>,
    scenario: Scenario,
    seed: u64,
    /// One engine per shard (`shards.rs`); one shard is the engine itself.
    engine: Sharded,
    models: Vec<Model>,
    /// Per pool, the drive's command queue if it reorders (NCQ; `tiervisor_model::queue`).
    queues: Vec<Option<CommandQueue>>,
    /// Per pool, the member drives' command queues if it is an array of drives that
    /// reorder (`tiervisor_model::array_queue`).
    arrays: Vec<Option<ArrayQueue>>,
    heap: BinaryHeap<Reverse<(u64, u64, u8, u64)>>,
    seq: u64,
    now: u64,
    t0: u64,
    out: Outputs,
    refill: Vec<usize>,
    vms: Vec<VmRun>,
    devs: Vec<DevRun>,
    /// Per pool, the (volume, process) I/O contexts whose operations reached the device:
    /// the scheduler saw the workload's processes (`DeviceReport::client_contexts`).
    dev_clients: Vec<BTreeSet<(u32, u32)>>,
    /// VM, issue time and the request's index in its workload.
    inflight: Slab<(u32, u64, u64)>,
    /// Paced requests waiting for their not-before time: VM, index, request.
    held: Slab<(usize, u64, tiervisor_workload::WlRequest)>,
    /// Wake-up times already in the event heap.
    /// Wake-ups queued for the engine's timers (it holds them; see `next_deadline`).
    wakeups: Wakeups,
    /// The batch of VM completions being handed back (swapped with `out`'s).
    completions: Vec<VmCompletion>,
    failure: Option<String>,
    total_expected: Option<u64>,
    done_ios: u64,
    progress: Option<Box<dyn Progress>>,
    max_sim_ns: u64,
    stop_after_migrations: bool,
    timeline: Vec<crate::report::Sample>,
    next_sample_ns: u64,
    /// Counters at the last sample: VM bytes written, log VM bytes, appended, cleaned.
    last_sample: [u64; 4],
    /// Completion rates around live storage migrations.
    watch: crate::migration_watch::MigrationWatch,
}

/// What the device models need of an operation: its pool, the request, the payload the
/// completion event carries (operation id and pool) and the (volume, process) it names.
#[inline]
fn dev_submission(op: &tiervisor_engine::DeviceOp) -> (usize, DevRequest, u64, Option<(u32, u32)>) {
    let p = op.pool.0 as usize;
    let client = match (op.context, op.volume) {
        (IoContext::Client(c), Some(v)) => Some((v.0, c)),
        _ => None,
    };
    (p, dev_request(op), op.id.0 << 8 | p as u64, client)
}

/// Map engine device operations onto model operations.
#[inline]
pub(crate) fn dev_request(op: &tiervisor_engine::DeviceOp) -> DevRequest {
    let (kind, offset_bytes, len_bytes, fua) = (op.kind, op.offset_bytes, op.len_bytes, op.fua);
    let kind = match kind {
        DevKind::Read => DevOpKind::Read,
        DevKind::Write => DevOpKind::Write,
        // A punched range must read back as zeros too: an SSD deallocates it, a disk
        // writes the zeros (the models keep no file allocation of their own).
        DevKind::WriteZeroes | DevKind::Punch => DevOpKind::WriteZeroes,
        DevKind::Flush => DevOpKind::Flush,
        DevKind::Discard => DevOpKind::Trim,
    };
    DevRequest {
        kind,
        offset_bytes,
        len_bytes,
        fua,
        tag: op.tag.code(),
    }
}

/// The engine configuration a scenario describes.
pub fn engine_config(sc: &Scenario, seed: u64) -> EngineConfig {
    let mut uuid = [0u8; 16];
    rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x7469_6572).fill_bytes(&mut uuid);
    EngineConfig {
        system_uuid: uuid,
        // Timing only: requests carry no data in the simulator.
        track_data: false,
        ..sc.engine.clone()
    }
}

impl Simulation {
    pub fn new(scenario: Scenario, opts: &RunOptions) -> Result<Simulation, String> {
        let seed = opts.seed.unwrap_or(scenario.seed);
        let cfg = engine_config(&scenario, seed);
        if scenario.shards > 1 && scenario.volumes.iter().any(|v| v.oracle) {
            return Err(format!(
                "{}: oracle placement needs shards = 1 (it ranks chunks across every volume of a pool)",
                scenario.source
            ));
        }
        let engine = Sharded::new(&cfg, scenario.shards, None)
            .map_err(|e| format!("{}: {e}", scenario.source))?;
        let models = scenario
            .pools
            .iter()
            .map(|p| {
                let mut m = match p.array {
                    None => Model::from_preset(&p.preset, Some(p.capacity_bytes)),
                    Some((drives, stripe_bytes)) => {
                        // Every address of the pool lies on a member: round up.
                        let member_bytes = p
                            .capacity_bytes
                            .div_ceil(u64::from(drives))
                            .div_ceil(stripe_bytes)
                            * stripe_bytes;
                        let members = (0..drives)
                            .map(|_| Model::from_preset(&p.preset, Some(member_bytes)))
                            .collect();
                        let array = Raid0::new(members, stripe_bytes)
                            .map_err(|e| format!("{}: pool {}: {e}", scenario.source, p.name))?;
                        Model::Raid0(Box::new(array))
                    }
                };
                if let Model::Ssd(s) = &mut m
                    && s.params().write_back
                {
                    s.set_buffer_sampling(scenario.sample_interval_ns);
                }
                Ok(m)
            })
            .collect::<Result<Vec<_>, String>>()?;
        let queues = models.iter().map(CommandQueue::for_model).collect();
        let arrays = models.iter().map(ArrayQueue::for_model).collect();
        let mut vms = Vec::new();
        let mut total = Some(0u64);
        for (i, vm) in scenario.vms.iter().enumerate() {
            let vol_bytes = scenario.volumes[vm.volume].size_bytes;
            let (workload, n) = vm
                .build(vol_bytes, seed, i)
                .map_err(|e| format!("{}: vm {}: {e}", scenario.source, vm.name))?;
            total = total.zip(n).map(|(a, b)| a + b);
            let depth = workload.depth();
            vms.push(VmRun {
                name: vm.name.clone(),
                volume: VolumeId(vm.volume as u32),
                timed: depth == u32::MAX,
                paced: workload.paced(),
                returned: 0,
                response: Moments::default(),
                depth,
                workload,
                outstanding: 0,
                next: None,
                exhausted: false,
                refill_pending: false,
                ios: 0,
                read_bytes: 0,
                write_bytes: 0,
                errors: 0,
                first_ns: None,
                last_ns: 0,
                latency: Latency::default(),
            });
        }
        let npools = scenario.pools.len();
        let scenario_has_none = scenario.migrations.is_empty();
        let watch = crate::migration_watch::MigrationWatch::new(
            scenario.volumes.len(),
            !scenario.migrations.is_empty(),
        );
        Ok(Simulation {
            prepared: false,
            oracle_placed: Vec::new(),
            dyn_oracle: None,
            watch,
            scenario,
            seed,
            engine,
            models,
            queues,
            arrays,
            heap: BinaryHeap::with_capacity(4096),
            seq: 0,
            now: 0,
            t0: 0,
            out: Outputs::default(),
            refill: Vec::new(),
            vms,
            devs: vec![DevRun::default(); npools],
            dev_clients: vec![BTreeSet::new(); npools],
            inflight: Slab::new(),
            held: Slab::new(),
            wakeups: Wakeups::default(),
            completions: Vec::new(),
            failure: None,
            total_expected: total,
            done_ios: 0,
            progress: None,
            max_sim_ns: opts.max_sim_ns.unwrap_or(u64::MAX),
            stop_after_migrations: opts.stop_after_migrations && !scenario_has_none,
            timeline: Vec::new(),
            next_sample_ns: 0,
            last_sample: [0; 4],
        })
    }

    #[inline]
    fn push(&mut self, t: u64, kind: u8, payload: u64) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, kind, payload)));
    }

    /// Device service time (host dispatch to completion) and sectors of reads and writes,
    /// counted from the workloads' start (not formatting or prefill).
    #[inline]
    fn count_service(&mut self, p: usize, req: &DevRequest, dispatched_ns: u64, done_ns: u64) {
        if self.t0 > 0 && matches!(req.kind, DevOpKind::Read | DevOpKind::Write) {
            let d = &mut self.devs[p];
            d.service.record(done_ns - dispatched_ns);
            d.sectors += req.len_bytes.div_ceil(512);
        }
    }

    /// If pool `p`'s drive queues commands and is idle, start the one it picks.
    fn start_queued(&mut self, p: usize) {
        let Some(q) = self.queues[p].as_mut() else {
            return;
        };
        if let Some((c, done)) = q.start_next(self.now, &mut self.models[p]) {
            self.count_service(p, &c.req, c.arrived_ns, done);
            self.push(done, EV_DEV, c.id);
        }
    }

    /// A command for pool `p`, an array whose drives queue: its parts join their
    /// members' queues, and each idle member starts the part it picks.
    fn push_to_array(&mut self, p: usize, payload: u64, req: DevRequest) {
        let (Some(q), Model::Raid0(a)) = (self.arrays[p].as_mut(), &mut self.models[p]) else {
            return;
        };
        q.push(self.now, payload, req, a);
        for m in 0..q.members() {
            self.start_member(p, m);
        }
    }

    /// If member `m` of pool `p`'s array is idle, start the part it picks.
    fn start_member(&mut self, p: usize, m: usize) {
        let (Some(q), Model::Raid0(a)) = (self.arrays[p].as_mut(), &mut self.models[p]) else {
            return;
        };
        if let Some((payload, done)) = q.start_next(self.now, m, a) {
            self.push(done, EV_PART, payload << 6 | m as u64);
        }
    }

    /// Carry out everything the engine asked for, feeding completions back to VMs.
    /// The run loop routes by hand, in `host::deliver`'s order and through the same
    /// steps as its `host::Driver` methods, but reads the operations in place: lending
    /// `out` to `deliver`, which moves each operation out, cost 12 % of the simulator's
    /// speed (`bench/sim_speed.py`, BENCHMARKS "Simulator speed", stop 37).
    fn pump(&mut self) {
        use host::Driver as _;
        loop {
            for i in 0..self.out.ops.len() {
                let op = &self.out.ops[i];
                let (p, req, payload, client) = dev_submission(op);
                self.submit_dev(p, req, payload, client);
            }
            self.out.ops.clear();
            let Ok(()) = self.ops_delivered();
            // Lent and given back, so that the vector keeps its capacity.
            let mut events = std::mem::take(&mut self.out.events);
            for e in events.drain(..) {
                let Ok(()) = self.event(e);
            }
            self.out.events = events;
            std::mem::swap(&mut self.completions, &mut self.out.completions);
            for i in 0..self.completions.len() {
                let c = &self.completions[i];
                let (id, ok) = (c.id, c.result.is_ok());
                self.complete(id, ok);
            }
            self.completions.clear();
            if self.refill.is_empty() {
                return;
            }
            while let Some(vm) = self.refill.pop() {
                self.fill(vm);
            }
        }
    }

    /// Start a device request on pool `p` (`dev_submission`'s parts).
    #[inline]
    fn submit_dev(&mut self, p: usize, req: DevRequest, payload: u64, client: Option<(u32, u32)>) {
        if let Some(vc) = client {
            self.dev_clients[p].insert(vc);
        }
        let d = &mut self.devs[p];
        if d.outstanding == 0 {
            d.busy_since = self.now;
        }
        d.outstanding += 1;
        d.ops += 1;
        if self.arrays[p].is_some() {
            // Each member drive queues its part (counted when the last is done).
            self.push_to_array(p, payload, req);
        } else if let Some(q) = self.queues[p].as_mut() {
            // The drive queues it and picks what to serve when it is free.
            q.push(self.now, payload, req);
            self.start_queued(p);
        } else {
            let done = self.models[p].submit(self.now, &req).max(self.now);
            self.count_service(p, &req, self.now, done);
            self.push(done, EV_DEV, payload);
        }
    }

    fn complete(&mut self, id: u64, ok: bool) {
        let Some((vm, issued, index)) = self.inflight.take(id as usize) else {
            return;
        };
        let v = &mut self.vms[vm as usize];
        v.outstanding -= 1;
        v.latency.record(self.now - issued);
        v.response.record(self.now - issued);
        v.workload.completed(index, self.now - self.t0);
        v.last_ns = v.last_ns.max(self.now);
        v.errors += !ok as u64;
        let vol = v.volume.0 as usize;
        self.watch.completed(vol, self.now - self.t0);
        self.done_ios += 1;
        if let Some(p) = &mut self.progress
            && self.done_ios.is_multiple_of(65_536)
        {
            p.advance(self.done_ios);
        }
        if !v.timed && !v.exhausted {
            if self.now == issued {
                // One refill for every slot freed at this instant.
                if !v.refill_pending {
                    v.refill_pending = true;
                    self.push(self.now + NO_IO_REQUEST_NS, EV_REFILL, vm as u64);
                }
            } else {
                self.refill.push(vm as usize);
            }
        }
    }

    fn issue(&mut self, vm: usize, index: u64, r: tiervisor_workload::WlRequest) {
        let v = &mut self.vms[vm];
        v.outstanding += 1;
        v.ios += 1;
        v.first_ns.get_or_insert(self.now);
        let kind = match r.kind {
            WlKind::Read => {
                v.read_bytes += r.len_bytes;
                ReqKind::Read
            }
            WlKind::Write => {
                v.write_bytes += r.len_bytes;
                ReqKind::Write
            }
            WlKind::Flush => ReqKind::Flush,
        };
        let volume = v.volume;
        let id = self.inflight.insert((vm as u32, self.now, index)) as u64;
        let mut req = VmRequest::new(id, volume, kind, r.offset_bytes, r.len_bytes);
        req.context = r.context.map_or(IoContext::Volume, IoContext::Client);
        self.engine.submit(self.now, req, &mut self.out);
    }

    /// Closed loop: keep the VM's depth of requests outstanding.
    fn fill(&mut self, vm: usize) {
        while self.vms[vm].outstanding < self.vms[vm].depth && !self.vms[vm].exhausted {
            let v = &mut self.vms[vm];
            // Its processes all wait for requests in flight: asked again when one ends.
            if !v.workload.ready(self.now - self.t0) {
                break;
            }
            match v.workload.next(self.now - self.t0) {
                Some(r) => {
                    let index = v.returned;
                    v.returned += 1;
                    let at = self.t0 + r.at_ns.unwrap_or(0);
                    if v.paced && at > self.now {
                        // The slot stays taken while the process sleeps.
                        v.outstanding += 1;
                        let slot = self.held.insert((vm, index, r)) as u64;
                        self.push(at, EV_HELD, slot);
                    } else {
                        self.issue(vm, index, r);
                    }
                }
                None => v.exhausted = true,
            }
        }
    }

    /// Timed replay: schedule the VM's next arrival.
    fn schedule_arrival(&mut self, vm: usize) {
        match self.vms[vm].workload.next(self.now - self.t0) {
            Some(r) => {
                let at = self.t0 + r.at_ns.unwrap_or(0);
                self.vms[vm].next = Some(r);
                self.vms[vm].returned += 1;
                self.push(at.max(self.now), EV_ARRIVAL, vm as u64);
            }
            None => self.vms[vm].exhausted = true,
        }
    }

    /// Close every sampling interval that ends at or before `t`.
    fn sample_until(&mut self, t: u64) {
        let every = self.scenario.sample_interval_ns;
        if every == 0 || self.t0 == 0 {
            return;
        }
        while self.next_sample_ns <= t {
            let written: u64 = self.vms.iter().map(|v| v.write_bytes).sum();
            let (mut user, mut appended, mut cleaned, mut free) = (0, 0, 0, 0);
            let pools = self.engine.engines().iter().flat_map(|e| e.report().pools);
            for p in pools {
                if let Some(l) = p.log {
                    user += l.user_bytes;
                    appended += l.append_bytes;
                    cleaned += l.cleaner_bytes;
                    free += l.free_segments;
                }
            }
            let [w0, u0, a0, c0] = self.last_sample;
            let secs = every as f64 / 1e9;
            self.timeline.push(crate::report::Sample {
                t_s: (self.next_sample_ns - self.t0) as f64 / 1e9,
                write_mb_per_s: (written - w0) as f64 / secs / 1e6,
                cleaner_mb_per_s: (cleaned - c0) as f64 / secs / 1e6,
                log_waf: if user > u0 {
                    (appended - a0) as f64 / (user - u0) as f64
                } else {
                    0.0
                },
                free_segments: free,
            });
            self.last_sample = [written, user, appended, cleaned];
            self.next_sample_ns += every;
        }
    }

    /// Device operation `payload` (op id << 8 | pool) has completed at `t`.
    fn device_done(&mut self, t: u64, payload: u64) {
        let p = (payload & 0xFF) as usize;
        let d = &mut self.devs[p];
        d.outstanding -= 1;
        if d.outstanding == 0 {
            d.busy_ns += t - d.busy_since;
        }
        let c = DeviceCompletion {
            id: OpId(payload >> 8),
            result: Ok(()),
            data: None,
        };
        self.engine.device_done(t, c, &mut self.out);
    }

    fn step(&mut self, t: u64, kind: u8, payload: u64) {
        self.sample_until(t);
        self.now = t;
        match kind {
            EV_DEV => {
                let p = (payload & 0xFF) as usize;
                if let Some(q) = self.queues[p].as_mut() {
                    q.finished();
                    self.start_queued(p);
                }
                self.device_done(t, payload);
            }
            EV_PART => {
                let (m, op) = ((payload & 63) as usize, payload >> 6);
                let p = (op & 0xFF) as usize;
                let whole = self.arrays[p].as_mut().and_then(|q| q.finished(m, op));
                self.start_member(p, m);
                if let Some((arrived_ns, req)) = whole {
                    self.count_service(p, &req, arrived_ns, t);
                    self.device_done(t, op);
                }
            }
            EV_ARRIVAL => {
                let vm = payload as usize;
                if let Some(r) = self.vms[vm].next.take() {
                    let index = self.vms[vm].returned - 1;
                    self.issue(vm, index, r);
                }
                self.schedule_arrival(vm);
            }
            EV_REFILL => {
                self.vms[payload as usize].refill_pending = false;
                self.fill(payload as usize);
            }
            EV_MIGRATE => self.start_migration(payload as usize),
            EV_ORACLE => self.oracle_tick(),
            EV_HELD => {
                if let Some((vm, index, r)) = self.held.take(payload as usize) {
                    self.vms[vm].outstanding -= 1;
                    self.issue(vm, index, r);
                }
            }
            _ => {
                self.wakeups.fired(t);
                self.engine.tick(t, &mut self.out);
            }
        }
        self.pump();
    }

    fn run_until_idle(&mut self) {
        let mut steps = 0u64;
        while let Some(Reverse((t, _, kind, payload))) = self.heap.pop() {
            if t > self.max_sim_ns || self.failure.is_some() {
                break;
            }
            steps += 1;
            // Checked now and then: a finished migration's end is known to within a few
            // thousand events, and its window is measured from its own timestamps.
            if self.stop_after_migrations
                && steps.is_multiple_of(1024)
                && self.t0 > 0
                && self.migrations_all_done()
            {
                break;
            }
            // Once every workload is done, background timers (tier migration, commits)
            // no longer keep the run going; operations already in flight still finish.
            if kind == EV_WAKE && self.workloads_done() && !self.migrating() {
                self.wakeups.fired(t);
                continue;
            }
            self.step(t, kind, payload);
        }
    }

    /// The dynamic oracle looks ahead of every VM and starts the moves that pay; the next
    /// tick is queued while any workload runs.
    fn oracle_tick(&mut self) {
        if self.workloads_done() {
            return;
        }
        let (Some(o), Some(engine)) = (self.dyn_oracle.as_mut(), self.engine.only_engine_mut())
        else {
            return;
        };
        let returned: Vec<u64> = self.vms.iter().map(|v| v.returned).collect();
        if let Err(e) = o.tick(self.now, &returned, engine, &mut self.out) {
            self.failure = Some(format!("oracle-dynamic: {e}"));
            return;
        }
        if !self.workloads_done() {
            let every = self.scenario.engine.tiering.interval_ns.max(1);
            self.push(self.now + every, EV_ORACLE, 0);
        }
    }

    /// Start the scenario's `i`th migration; a refusal ends the run with its reason.
    fn start_migration(&mut self, i: usize) {
        let m = &self.scenario.migrations[i];
        let volume = VolumeId(m.volume as u32);
        if let Err(e) =
            self.engine
                .start_migration(self.now, volume, m.params.clone(), &mut self.out)
        {
            let name = &self.scenario.volumes[m.volume].name;
            self.failure = Some(format!("migration {} of volume {name}: {e}", i + 1));
        }
    }

    /// A migration the scenario started is still running (its timers keep the run going
    /// after the workloads end, so a migration without a workload finishes).
    fn migrating(&self) -> bool {
        !self.scenario.migrations.is_empty()
            && self.engine.migrations().iter().any(|m| !m.phase.is_over())
    }

    /// Every scenario migration has started and none still runs.
    fn migrations_all_done(&self) -> bool {
        let all = self.engine.migrations();
        all.len() >= self.scenario.migrations.len() && !all.iter().any(|m| !m.phase.is_over())
    }

    fn workloads_done(&self) -> bool {
        self.t0 > 0
            && self
                .vms
                .iter()
                .all(|v| v.exhausted && v.outstanding == 0 && v.next.is_none())
    }

    /// Run the scenario to the end and report.
    /// VM requests the run will complete, when the workloads say (traces and bounded jobs).
    pub fn total_ios(&self) -> Option<u64> {
        self.total_expected
    }

    /// Report progress to `p` while running.
    pub fn with_progress(mut self, p: Box<dyn Progress>) -> Simulation {
        self.progress = Some(p);
        self
    }

    /// Start the engine and prefill the volumes (the oracle's placement first); `run`
    /// does it if not done. Tests call it to look at the placement before the run.
    pub fn prepare(&mut self) -> Result<(), String> {
        if self.prepared {
            return Ok(());
        }
        self.prepared = true;
        self.engine.start(0, StartMode::Format, &mut self.out);
        self.pump();
        self.run_until_idle();
        if let Some(f) = &self.failure {
            return Err(format!("engine failed to start: {f}"));
        }
        if self.engine.state() != EngineState::Ready {
            return Err(format!(
                "engine did not become ready: {:?}",
                self.engine.state()
            ));
        }
        self.prefill()
    }

    /// The engine (shard 0's with several), for tests that inspect placement.
    pub fn engine(&self) -> &Engine {
        &self.engine.engines()[0]
    }

    /// The chunks the oracle placed on fast pools, `(volume, chunk)`, most accessed first.
    pub fn oracle_placed(&self) -> &[(usize, u64)] {
        &self.oracle_placed
    }

    /// Moves the dynamic oracle has started so far (0 without one).
    pub fn oracle_moves_started(&self) -> u64 {
        self.dyn_oracle.as_ref().map_or(0, |o| o.moves_started)
    }

    pub fn run(mut self) -> Result<SimReport, String> {
        let wall = Instant::now();
        self.prepare()?;
        self.t0 = self.now;
        self.next_sample_ns = self.t0 + self.scenario.sample_interval_ns;
        for i in 0..self.scenario.migrations.len() {
            let at = self.t0 + self.scenario.migrations[i].at_ns;
            self.push(at, EV_MIGRATE, i as u64);
        }
        if self.dyn_oracle.is_some() {
            let every = self.scenario.engine.tiering.interval_ns.max(1);
            self.push(self.t0 + every, EV_ORACLE, 0);
        }
        for vm in 0..self.vms.len() {
            if self.vms[vm].timed {
                self.schedule_arrival(vm);
            } else {
                self.fill(vm);
            }
        }
        self.pump();
        self.run_until_idle();
        if let Some(mut p) = self.progress.take() {
            p.finish();
        }
        if let Some(f) = &self.failure {
            return Err(format!("engine failed: {f}"));
        }
        Ok(self.report(wall.elapsed().as_secs_f64()))
    }

    /// Map the chunks the workloads will touch on `prefill` volumes, as if the disks had
    /// been written before the run (placed by each volume's policy, no I/O).
    fn prefill(&mut self) -> Result<(), String> {
        // Oracle volumes are refused with several shards (`new`).
        if let Some(engine) = self.engine.only_engine_mut() {
            self.oracle_placed = crate::oracle::place(engine, &self.scenario, self.seed)?;
            self.dyn_oracle = crate::oracle_dynamic::DynamicOracle::new(&self.scenario, self.seed)?;
        }
        for (vi, spec) in self.scenario.volumes.iter().enumerate() {
            if !spec.prefill {
                continue;
            }
            let touched = self.scenario.touched_chunks(vi);
            let (engine, local) = self
                .engine
                .engine_for_mut(VolumeId(vi as u32))
                .ok_or_else(|| format!("prefill of volume {}: no shard holds it", spec.name))?;
            engine
                .provision(local, touched)
                .map_err(|e| format!("prefill of volume {}: {e}", spec.name))?;
        }
        Ok(())
    }

    fn report(&self, wall_s: f64) -> SimReport {
        let t0 = self.t0;
        let end = self
            .vms
            .iter()
            .map(|v| v.last_ns)
            .max()
            .unwrap_or(t0)
            .max(t0);
        let secs = |ns: u64| ns as f64 / 1e9;
        let mut vms = BTreeMap::new();
        for v in &self.vms {
            let exec = secs(v.last_ns.saturating_sub(t0));
            vms.insert(
                v.name.clone(),
                VmReport::new(
                    v.ios,
                    v.read_bytes,
                    v.write_bytes,
                    v.errors,
                    exec,
                    &v.latency,
                    &self.scenario.volumes[v.volume.0 as usize].name,
                ),
            );
            if let Some(r) = vms.get_mut(&v.name) {
                r.response = (&v.response).into();
                r.app_ops = v.workload.app_ops();
                r.app_ops_per_s = r
                    .app_ops
                    .map(|n| if exec > 0.0 { n as f64 / exec } else { 0.0 });
            }
        }
        let mut volumes = BTreeMap::new();
        for (i, spec) in self.scenario.volumes.iter().enumerate() {
            let Some((engine, local)) = self.engine.engine_for(VolumeId(i as u32)) else {
                continue;
            };
            let Some(st) = engine.volume_stats(local) else {
                continue;
            };
            let last = self
                .vms
                .iter()
                .filter(|v| v.volume.0 as usize == i)
                .map(|v| v.last_ns)
                .max()
                .unwrap_or(t0);
            let exec = secs(last.saturating_sub(t0));
            let er = engine.volume_report(local);
            let ios = st.read.requests
                + st.write.requests
                + st.flush.requests
                + st.trim.requests
                + st.write_zeroes.requests;
            volumes.insert(
                spec.name.clone(),
                VolumeReport {
                    placement: spec.placement.name().to_string(),
                    chunks_by_pool: er
                        .as_ref()
                        .map(|r| r.chunks_by_pool.iter().cloned().collect())
                        .unwrap_or_default(),
                    map_memory_bytes: er.as_ref().map_or(0, |r| r.map_memory_bytes),
                    map_bytes_per_chunk: er.as_ref().map_or(0.0, |r| r.map_bytes_per_chunk),
                    promotions: st.promotions,
                    demotions: st.demotions,
                    clean_demotions: st.clean_demotions,
                    span_demotions: st.span_demotions,
                    migrated_bytes: st.migrated_bytes,
                    ios,
                    reads: st.read.requests,
                    writes: st.write.requests,
                    flushes: st.flush.requests,
                    errors: st.read.errors + st.write.errors + st.flush.errors,
                    read_bytes: st.read.bytes,
                    write_bytes: st.write.bytes,
                    zero_fill_bytes: st.zero_fill_bytes,
                    iops: if exec > 0.0 { ios as f64 / exec } else { 0.0 },
                    mb_per_s: if exec > 0.0 {
                        (st.read.bytes + st.write.bytes) as f64 / exec / 1e6
                    } else {
                        0.0
                    },
                    exec_time_s: exec,
                    lat_us: LatReport::from(&st.all),
                },
            );
        }
        let mut devices = BTreeMap::new();
        for (p, spec) in self.scenario.pools.iter().enumerate() {
            let c = self.models[p].counters();
            let d = self.devs[p];
            let busy = d.busy_ns
                + if d.outstanding > 0 {
                    end.saturating_sub(d.busy_since)
                } else {
                    0
                };
            devices.insert(
                spec.name.clone(),
                DeviceReport {
                    model: spec.preset.name().to_string(),
                    ops: d.ops,
                    busy_s: secs(busy),
                    utilisation: if end > t0 {
                        busy as f64 / (end - t0) as f64
                    } else {
                        0.0
                    },
                    host_read_bytes: c.host_read_bytes,
                    host_write_bytes: c.host_write_bytes,
                    media_write_bytes: c.media_write_bytes,
                    erases: c.erases,
                    gc_page_copies: c.gc_page_copies,
                    waf: c.waf(),
                    cache_hits: c.cache_hits,
                    map_cache_misses: c.map_cache_misses,
                    service: (&d.service).into(),
                    sectors_per_ms: if end > t0 {
                        d.sectors as f64 / ((end - t0) as f64 / 1e6)
                    } else {
                        0.0
                    },
                    flush: self.flush_report(p),
                    client_contexts: self.dev_clients[p].len() as u64,
                },
            );
        }
        let ios = self.vms.iter().map(|v| v.ios).sum();
        // Per pool; with several shards, per shard's slice of it.
        let sharded = self.engine.shards() > 1;
        let pools: Vec<_> = (self.engine.engines().iter().enumerate())
            .flat_map(|(k, e)| {
                e.report().pools.into_iter().map(move |mut p| {
                    if sharded {
                        p.name = format!("{} (shard {k})", p.name);
                    }
                    p
                })
            })
            .collect();
        let throttles = pools
            .iter()
            .filter_map(|p| Some((p.name.clone(), p.throttle.clone()?)))
            .collect();
        let logs = pools
            .into_iter()
            .filter_map(|p| Some((p.name, p.log?)))
            .collect();
        let migrations = self
            .engine
            .migrations()
            .iter()
            .filter_map(|m| {
                let vol = self
                    .scenario
                    .volumes
                    .iter()
                    .position(|v| v.name == m.volume)?;
                Some(self.watch.report(m, vol, t0, |p| {
                    self.scenario.pools[p.0 as usize].name.clone()
                }))
            })
            .collect();
        SimReport {
            shards: self.shard_reports(),
            migrations,
            logs,
            throttles,
            timeline: self.timeline.clone(),
            scenario: self.scenario.source.clone(),
            seed: self.seed,
            sim_time_s: secs(end - t0),
            wall_time_s: wall_s,
            ios,
            vms,
            volumes,
            devices,
        }
    }

    /// Per-shard lines (none with one shard, so its report is as before sharding).
    fn shard_reports(&self) -> Vec<crate::report::ShardReport> {
        if self.engine.shards() == 1 {
            return Vec::new();
        }
        let (requests, ops) = self.engine.counters();
        (0..self.engine.shards())
            .map(|k| crate::report::ShardReport {
                shard: k,
                volumes: (self.scenario.volumes.iter().enumerate())
                    .filter(|(i, _)| self.engine.plan().volume_shard(*i) == Some(k))
                    .map(|(_, v)| v.name.clone())
                    .collect(),
                requests: requests[k as usize],
                device_ops: ops[k as usize],
                budget_commands: self.engine.budget_steps()[k as usize],
                write_buffer_bytes: (self.engine.engines()[k as usize].budgets_in_force())
                    .write_buffer_bytes
                    .iter()
                    .sum(),
                gate_waits: (self.engine.engines()[k as usize].device_gate_waits())
                    .iter()
                    .sum(),
            })
            .collect()
    }

    /// FLUSH costs and buffer use of SSD `p` (None for HDDs and drives without a DRAM
    /// map or write-back buffer, where a FLUSH writes nothing of its own).
    fn flush_report(&self, p: usize) -> Option<crate::report::FlushReport> {
        let Model::Ssd(s) = &self.models[p] else {
            return None;
        };
        let params = s.params();
        let stats = s.flush_stats();
        if !params.write_back && stats.map_bytes == 0 {
            return None;
        }
        let cap = params.write_buffer_bytes.max(1) as f64;
        let buffer_utilisation = s
            .buffer_samples()
            .iter()
            .filter(|&&(t, _)| t >= self.t0)
            .map(|&(t, b)| ((t - self.t0) as f64 / 1e9, b as f64 / cap))
            .collect();
        Some(crate::report::FlushReport {
            mode: serde_json::to_value(params.flush)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default(),
            stats,
            mean_latency_us: stats.mean_latency_ns() / 1e3,
            buffer_utilisation,
            by_tag: crate::report::TagFlushes::by_tag(s.flush_latencies_ns(), |tag| {
                // Tag 0 is the host's; a volume's tag is its index + 1 (`Tag::code`).
                match tag.checked_sub(1) {
                    None => "host".to_string(),
                    Some(v) => (self.scenario.volumes.get(v as usize))
                        .map_or_else(|| format!("tag {tag}"), |v| v.name.clone()),
                }
            }),
        })
    }

    /// Requests the run will issue, if known in advance.
    pub fn total_expected(&self) -> Option<u64> {
        self.total_expected
    }
}

/// The simulator's devices are timing models: an operation's completion is an event.
impl host::Driver for Simulation {
    type Stop = std::convert::Infallible;

    fn device_op(&mut self, op: tiervisor_engine::DeviceOp) -> Result<(), Self::Stop> {
        let (p, req, payload, client) = dev_submission(&op);
        self.submit_dev(p, req, payload, client);
        Ok(())
    }

    fn ops_delivered(&mut self) -> Result<(), Self::Stop> {
        if let Some(t) = (self.wakeups).to_queue_at(self.engine.next_deadline(), self.now) {
            self.push(t, EV_WAKE, 0);
        }
        Ok(())
    }

    fn event(&mut self, e: EngineEvent) -> Result<(), Self::Stop> {
        if let EngineEvent::Failed { reason } = e {
            self.failure = Some(reason);
        }
        Ok(())
    }

    fn completed(&mut self, c: VmCompletion) -> Result<(), Self::Stop> {
        self.complete(c.id, c.result.is_ok());
        Ok(())
    }
}
