//! N engines run as one system (issue 18, step 1): the simulator's and DST's side of
//! `engine::shard`. Each shard is a complete [`Engine`] over its slice of every pool;
//! this router gives the drivers one system to talk to. It translates, in both
//! directions, the only things that cross the seam: a volume's index (system-wide here,
//! per shard inside an engine), a device operation's offset (the slice's base is added)
//! and its id (`local * shards + shard`, so a completion finds its shard). Nothing else
//! is shared: the engines never see each other, only the devices do.
//!
//! Shard 0 starts first and the others only once it is ready: its superblock check
//! refuses a system of another shard count before any other shard could read a slice
//! boundary that moved and, finding no superblock there, format over data.
//!
//! With one shard every call goes straight to the engine, untranslated, so an unsharded
//! run is the run it was before sharding, byte for byte.
//!
//! Space moves between shards (`engine::loan`): the router carries a shard's ask for
//! space, the donor's answer and the borrower's record as the `LoanBroker` says, and
//! sends a device operation on a borrowed chunk to the donor's slice.

use tiervisor_engine::budget_broker::BudgetBroker;
use tiervisor_engine::jobs::migrate::{MigrationParams, MigrationStatus};
use tiervisor_engine::loan_broker::{LoanBroker, PoolRoom};
use tiervisor_engine::shard::ShardPlan;
use tiervisor_engine::{
    Control, ControlError, DeviceCompletion, Engine, EngineConfig, EngineEvent, EngineState,
    InjectedBug, OpId, Outputs, StartMode, Tag, VmRequest, VolumeId,
};

pub struct Sharded {
    plan: ShardPlan,
    /// The system's configuration (each engine gets `plan.shard_config` of it).
    cfg: EngineConfig,
    engines: Vec<Engine>,
    bug: Option<InjectedBug>,
    /// System-wide volume index -> name (configured volumes first, then created ones in
    /// the order they were announced); the shard is `plan.volume_shard`.
    names: Vec<String>,
    /// Per shard: the engine's volume index -> system-wide index.
    to_global: Vec<Vec<u32>>,
    /// System-wide index -> (shard, the engine's index).
    to_local: Vec<(u16, VolumeId)>,
    /// Creations accepted and not yet announced: name and shard.
    creating: Vec<(String, u16)>,
    /// Shards started so far (in order) and how.
    started: u16,
    mode: StartMode,
    /// Every shard has started and become ready since the last reset (the index maps
    /// were rebuilt from the engines' tables then).
    mounted: bool,
    scratch: Outputs,
    /// Per shard: VM requests submitted and device operations issued.
    requests: Vec<u64>,
    device_ops: Vec<u64>,
    /// The loans under way between shards, and the commands it asked for not yet sent
    /// (with the time each is due: `loan_delay_ns` after it was asked for).
    broker: LoanBroker,
    loan_steps: Vec<(u64, u16, Control)>,
    loan_delay_ns: u64,
    /// Writes that waited for a loan in engines thrown away by a reset.
    loan_waits_before: u64,
    /// Give-backs a denial's hint started in engines thrown away by a reset.
    hinted_before: u64,
    /// Borrowed runs seen free behind a used one (`Engine::give_back_stuck`) in engines
    /// thrown away by a reset, with their shard.
    stuck_before: Vec<(u16, tiervisor_engine::loan::LoanRecord)>,
    /// The budgets that span volumes, moved between shards by demand
    /// (`engine::budget_broker`) when the configuration asks for reports; its commands
    /// travel with the loan steps.
    budgets: BudgetBroker,
    /// Budget commands sent, per shard (counted with several shards).
    budget_steps: Vec<u64>,
    /// Device-share commands sent (`Control::SetDeviceShares`), and of them those that
    /// set a gate.
    share_steps: (u64, u64),
}

impl Sharded {
    /// `shards` engines for `cfg`; `bug` goes to every engine (and `shard-overlap` to the
    /// plan).
    pub fn new(
        cfg: &EngineConfig,
        shards: u16,
        bug: Option<InjectedBug>,
    ) -> Result<Sharded, String> {
        let mut plan = ShardPlan::new(cfg, shards).map_err(|e| e.to_string())?;
        if bug == Some(InjectedBug::ShardOverlap) {
            plan.inject_overlap(cfg.chunk_bytes);
        }
        let n = shards as usize;
        let mut budgets = BudgetBroker::new(&plan, cfg);
        if bug == Some(InjectedBug::BudgetOvercommit) {
            budgets.inject_overcommit();
        }
        if bug == Some(InjectedBug::ShareOvercommit) {
            budgets.inject_share_overcommit();
        }
        let mut s = Sharded {
            budgets,
            budget_steps: vec![0; n],
            share_steps: (0, 0),
            names: cfg.volumes.iter().map(|v| v.name.clone()).collect(),
            plan,
            cfg: cfg.clone(),
            engines: Vec::with_capacity(n),
            bug,
            to_global: vec![Vec::new(); n],
            to_local: Vec::new(),
            creating: Vec::new(),
            started: 0,
            mode: StartMode::Auto,
            mounted: false,
            scratch: Outputs::default(),
            requests: vec![0; n],
            device_ops: vec![0; n],
            broker: LoanBroker::default(),
            loan_steps: Vec::new(),
            loan_delay_ns: 0,
            loan_waits_before: 0,
            hinted_before: 0,
            stuck_before: Vec::new(),
        };
        s.reset()?;
        Ok(s)
    }

    /// Throw the engines away and build new ones (a power loss: the next `start`
    /// mounts). Volumes created so far stay known, on the shard that announced them.
    pub fn reset(&mut self) -> Result<(), String> {
        self.loan_waits_before = self.loan_waits();
        self.hinted_before = self.give_backs_on_hint();
        self.stuck_before = self.stuck_runs();
        self.engines.clear();
        for k in 0..self.plan.shards() {
            let mut e = Engine::new(self.plan.shard_config(&self.cfg, k))
                .map_err(|e| format!("shard {k}: {e}"))?;
            e.inject_bug(self.bug);
            self.engines.push(e);
        }
        self.creating.clear();
        self.broker.reset();
        self.budgets.reset();
        self.loan_steps.clear();
        self.started = 0;
        self.mounted = false;
        self.refresh_volumes();
        Ok(())
    }

    /// Carry each loan step (a shard's ask, the donor's answer, the borrower's record)
    /// `ns` after it was said, as a threaded server's hops between shards take time (0,
    /// the default: at once).
    pub fn set_loan_delay_ns(&mut self, ns: u64) {
        self.loan_delay_ns = ns;
    }

    /// Write pieces that waited for a loan's answer since the start, over every shard
    /// (`Engine::loan_waits`).
    pub fn loan_waits(&self) -> u64 {
        self.loan_waits_before + self.engines.iter().map(|e| e.loan_waits().0).sum::<u64>()
    }

    /// Give-backs started on a hint after another shard's denial
    /// (`Control::GiveBackNow`) since the start, over every shard.
    pub fn give_backs_on_hint(&self) -> u64 {
        self.hinted_before
            + (self.engines.iter())
                .map(|e| e.give_back_hints().1)
                .sum::<u64>()
    }

    /// Every borrowed run seen wholly free behind a used one since the start, each
    /// once, with its shard (`Engine::give_back_stuck`).
    fn stuck_runs(&self) -> Vec<(u16, tiervisor_engine::loan::LoanRecord)> {
        let mut all = self.stuck_before.clone();
        for (k, e) in self.engines.iter().enumerate() {
            for l in e.give_back_stuck() {
                if !all.contains(&(k as u16, *l)) {
                    all.push((k as u16, *l));
                }
            }
        }
        all
    }

    /// Borrowed runs seen wholly free behind a used one, and their chunks: what only a
    /// tombstone record could give back (docs/ARCHITECTURE.md, "More than the last run").
    pub fn give_back_stuck(&self) -> (u64, u64) {
        let all = self.stuck_runs();
        (all.len() as u64, all.iter().map(|(_, l)| l.chunks).sum())
    }

    pub fn shards(&self) -> u16 {
        self.plan.shards()
    }

    pub fn plan(&self) -> &ShardPlan {
        &self.plan
    }

    pub fn engines(&self) -> &[Engine] {
        &self.engines
    }

    /// The engine, when there is only one (what needs the whole system in one engine,
    /// such as the simulator's oracle placement).
    pub fn only_engine_mut(&mut self) -> Option<&mut Engine> {
        self.one()
    }

    fn one(&mut self) -> Option<&mut Engine> {
        if self.engines.len() == 1 {
            self.engines.first_mut()
        } else {
            None
        }
    }

    /// Requests submitted and device operations issued per shard (counted only with
    /// several shards: one shard is the engine itself, untouched).
    pub fn counters(&self) -> (&[u64], &[u64]) {
        (&self.requests, &self.device_ops)
    }

    /// Whether the shards report demand and the broker moves their budgets.
    pub fn budget_reports(&self) -> bool {
        self.cfg.budget_reports
    }

    /// Per shard and pool: its device share and gate in force (`Engine::device_shares`).
    pub fn device_shares(&self) -> Vec<Vec<tiervisor_engine::device_share::DeviceShare>> {
        self.engines.iter().map(|e| e.device_shares()).collect()
    }

    /// Whether the shards share each weighted pool's device (`shard_qos`).
    pub fn shard_qos(&self) -> bool {
        self.cfg.shard_qos
    }

    /// Device-share commands the broker sent, and of them those that set a gate.
    pub fn share_steps(&self) -> (u64, u64) {
        self.share_steps
    }

    /// Budget commands the broker sent each shard (`Control::SetBudgets`).
    pub fn budget_steps(&self) -> &[u64] {
        &self.budget_steps
    }

    /// Rebuild the index maps from the names and each engine's own table, registering
    /// volumes an engine holds that the router did not know (a creation a power loss
    /// interrupted after its table write, found at mount).
    fn refresh_volumes(&mut self) {
        for k in 0..self.engines.len() {
            for (name, _) in self.engines[k].volumes() {
                if !self.names.contains(&name) {
                    self.names.push(name);
                    self.plan.add_volume(k as u16);
                }
            }
        }
        let mut next = vec![0u32; self.engines.len()];
        self.to_local.clear();
        for t in &mut self.to_global {
            t.clear();
        }
        for (g, name) in self.names.iter().enumerate() {
            let k = self.plan.volume_shard(g).unwrap_or(0);
            let e = &self.engines[k as usize];
            // Before a mount the engine knows only its configured volumes, in order.
            let local = e.volume_id(name).unwrap_or(VolumeId(next[k as usize]));
            next[k as usize] = next[k as usize].max(local.0 + 1);
            self.to_local.push((k, local));
            let t = &mut self.to_global[k as usize];
            if t.len() <= local.0 as usize {
                t.resize(local.0 as usize + 1, u32::MAX);
            }
            t[local.0 as usize] = g as u32;
        }
    }

    fn global(&self, k: u16, v: VolumeId) -> VolumeId {
        match self.to_global[k as usize].get(v.0 as usize) {
            Some(&g) if g != u32::MAX => VolumeId(g),
            _ => VolumeId(u32::MAX),
        }
    }

    /// The engine serving system-wide volume `v`, and its index there.
    pub fn engine_for(&self, v: VolumeId) -> Option<(&Engine, VolumeId)> {
        if self.engines.len() == 1 {
            return Some((&self.engines[0], v));
        }
        let &(k, local) = self.to_local.get(v.0 as usize)?;
        Some((&self.engines[k as usize], local))
    }

    pub fn engine_for_mut(&mut self, v: VolumeId) -> Option<(&mut Engine, VolumeId)> {
        if self.engines.len() == 1 {
            return Some((&mut self.engines[0], v));
        }
        let &(k, local) = self.to_local.get(v.0 as usize)?;
        Some((&mut self.engines[k as usize], local))
    }

    /// Move what shard `k` produced into `out`, translated to the system's view.
    fn collect(&mut self, k: u16, now: u64, out: &mut Outputs) {
        let n = u64::from(self.plan.shards());
        let mut created = false;
        let ops = std::mem::take(&mut self.scratch.ops);
        self.device_ops[k as usize] += ops.len() as u64;
        for mut op in ops {
            // A borrowed chunk lives in its donor's slice.
            let (home, off) = self.engines[k as usize]
                .device_home(op.pool, op.offset_bytes)
                .unwrap_or((k, op.offset_bytes));
            op.offset_bytes = off + self.plan.base_bytes(op.pool.0 as usize, home);
            op.id = OpId(op.id.0 * n + u64::from(k));
            op.volume = op.volume.map(|v| self.global(k, v));
            if let Tag::Volume(v) = op.tag {
                op.tag = Tag::Volume(self.global(k, v));
            }
            out.ops.push(op);
        }
        out.completions.append(&mut self.scratch.completions);
        let shards = self.plan.shards();
        for e in self.scratch.events.drain(..) {
            let room = room_of(&self.engines);
            let due = now + self.loan_delay_ns;
            for (j, c) in self.broker.on_event(k, shards, &e, room) {
                self.loan_steps.push((due, j, c));
            }
            // Budget reports and answers are between the shards and the broker.
            if matches!(
                e,
                EngineEvent::BudgetDemand { .. } | EngineEvent::BudgetsSet { .. }
            ) {
                for (j, c) in self.budgets.on_event(k, &e) {
                    match &c {
                        Control::SetBudgets { .. } => self.budget_steps[j as usize] += 1,
                        Control::SetDeviceShares { shares } => {
                            self.share_steps.0 += 1;
                            self.share_steps.1 += u64::from(shares.iter().any(|s| s.gate_iops > 0));
                        }
                        _ => {}
                    }
                    self.loan_steps.push((due, j, c));
                }
                continue;
            }
            out.events.push(match e {
                EngineEvent::Failed { reason } => EngineEvent::Failed {
                    reason: format!("shard {k}: {reason}"),
                },
                EngineEvent::VolumeCreated { volume } => {
                    if let Some(i) = self.creating.iter().position(|(n, _)| *n == volume) {
                        self.creating.remove(i);
                    }
                    if !self.names.contains(&volume) {
                        self.names.push(volume.clone());
                        self.plan.add_volume(k);
                    }
                    created = true;
                    EngineEvent::VolumeCreated { volume }
                }
                e => e,
            });
        }
        if created {
            self.refresh_volumes();
        }
        self.start_next(now, out);
        self.run_loan_steps(now, out);
    }

    /// Send the loan commands the broker asked for that are due (each may answer with
    /// more), in the order they were asked for.
    fn run_loan_steps(&mut self, now: u64, out: &mut Outputs) {
        while let Some(i) = self.loan_steps.iter().position(|s| s.0 <= now) {
            let (_, j, c) = self.loan_steps.remove(i);
            let r = self.engines[j as usize].control(now, c.clone(), &mut self.scratch);
            if r.is_err() {
                let room = room_of(&self.engines);
                let due = now + self.loan_delay_ns;
                let shards = self.plan.shards();
                let more = match c {
                    Control::SetBudgets { .. } | Control::SetDeviceShares { .. } => {
                        self.budgets.on_refused(j, &c)
                    }
                    _ => self.broker.on_refused(j, shards, &c, room),
                };
                for (j, c) in more {
                    self.loan_steps.push((due, j, c));
                }
            }
            self.collect(j, now, out);
        }
    }

    /// Start the next shard once the one before it is ready.
    fn start_next(&mut self, now: u64, out: &mut Outputs) {
        while self.started > 0
            && (self.started as usize) < self.engines.len()
            && self.engines[self.started as usize - 1].state() == &EngineState::Ready
        {
            let k = self.started;
            self.started += 1;
            self.engines[k as usize].start(now, self.mode, &mut self.scratch);
            self.collect(k, now, out);
        }
        if !self.mounted
            && self.started as usize == self.engines.len()
            && self
                .engines
                .iter()
                .all(|e| e.state() == &EngineState::Ready)
        {
            self.mounted = true;
            self.refresh_volumes();
            let loans: Vec<&[_]> = self.engines.iter().map(|e| e.loans()).collect();
            let due = now + self.loan_delay_ns;
            let back = LoanBroker::reconcile(&loans);
            self.loan_steps
                .extend(back.into_iter().map(|(j, c)| (due, j, c)));
        }
    }

    pub fn start(&mut self, now: u64, mode: StartMode, out: &mut Outputs) {
        if let Some(e) = self.one() {
            return e.start(now, mode, out);
        }
        self.mode = mode;
        self.started = 1;
        self.engines[0].start(now, mode, &mut self.scratch);
        self.collect(0, now, out);
    }

    pub fn submit(&mut self, now: u64, mut req: VmRequest, out: &mut Outputs) {
        if let Some(e) = self.one() {
            return e.submit(now, req, out);
        }
        // An unknown volume goes to shard 0 under an index no engine has: refused there.
        let (k, local) = self
            .to_local
            .get(req.volume.0 as usize)
            .copied()
            .unwrap_or((0, VolumeId(u32::MAX)));
        req.volume = local;
        self.requests[k as usize] += 1;
        self.engines[k as usize].submit(now, req, &mut self.scratch);
        self.collect(k, now, out);
    }

    pub fn device_done(&mut self, now: u64, mut c: DeviceCompletion, out: &mut Outputs) {
        if let Some(e) = self.one() {
            return e.device_done(now, c, out);
        }
        let n = u64::from(self.plan.shards());
        let k = (c.id.0 % n) as u16;
        c.id = OpId(c.id.0 / n);
        self.engines[k as usize].device_done(now, c, &mut self.scratch);
        self.collect(k, now, out);
    }

    /// The earliest of the shards' deadlines and the loan steps'.
    pub fn next_deadline(&self) -> Option<u64> {
        let steps = self.loan_steps.iter().map(|s| s.0);
        (self.engines.iter().filter_map(|e| e.next_deadline()))
            .chain(steps)
            .min()
    }

    /// Tick every shard whose deadline has come.
    pub fn tick(&mut self, now: u64, out: &mut Outputs) {
        if let Some(e) = self.one() {
            return e.tick(now, out);
        }
        for k in 0..self.plan.shards() {
            if self.engines[k as usize]
                .next_deadline()
                .is_some_and(|t| t <= now)
            {
                self.engines[k as usize].tick(now, &mut self.scratch);
                self.collect(k, now, out);
            }
        }
        self.run_loan_steps(now, out);
    }

    /// An orderly stop of every shard (`Engine::begin_shutdown`).
    pub fn begin_shutdown(&mut self, now: u64, out: &mut Outputs) {
        if let Some(e) = self.one() {
            return e.begin_shutdown(now, out);
        }
        for k in 0..self.plan.shards() {
            self.engines[k as usize].begin_shutdown(now, &mut self.scratch);
            self.collect(k, now, out);
        }
    }

    /// Whether the process before this mount stopped system-wide volume `v` in order
    /// (`Engine::stopped_clean_before_mount`).
    pub fn stopped_clean_before_mount(&self, v: VolumeId) -> bool {
        self.engine_for(v)
            .is_some_and(|(e, local)| e.stopped_clean_before_mount(local))
    }

    /// Volumes whose final commit failed while stopping, over every shard.
    pub fn lost_at_stop(&self) -> Vec<String> {
        (self.engines.iter())
            .flat_map(|e| e.lost_at_stop().iter().cloned())
            .collect()
    }

    /// Volumes whose clean-stop marker failed while stopping, over every shard.
    pub fn unmarked_at_stop(&self) -> Vec<String> {
        (self.engines.iter())
            .flat_map(|e| e.unmarked_at_stop().iter().cloned())
            .collect()
    }

    /// The system's state: failed if a shard failed, ready once every shard is.
    pub fn state(&self) -> EngineState {
        if let Some(e) = self.engines.first().filter(|_| self.engines.len() == 1) {
            return e.state().clone();
        }
        for (k, e) in self.engines.iter().enumerate() {
            if let EngineState::Failed(r) = e.state() {
                return EngineState::Failed(format!("shard {k}: {r}"));
            }
        }
        let all = |s: EngineState| self.engines.iter().all(|e| *e.state() == s);
        if self.started == 0 {
            EngineState::New
        } else if all(EngineState::Ready) {
            EngineState::Ready
        } else if all(EngineState::Stopped) {
            EngineState::Stopped
        } else if self
            .engines
            .iter()
            .any(|e| matches!(e.state(), EngineState::Stopping | EngineState::Stopped))
        {
            EngineState::Stopping
        } else {
            EngineState::Starting
        }
    }

    /// Route an admin command: a new volume goes to the shard owning the fewest
    /// (counting creations under way), any other to the volume's shard.
    pub fn control(&mut self, now: u64, c: Control, out: &mut Outputs) -> Result<(), ControlError> {
        if let Some(e) = self.one() {
            return e.control(now, c, out);
        }
        let (k, c) = match c {
            Control::CreateVolume { config } => {
                let mut load = self.plan.volumes_per_shard();
                for (_, k) in &self.creating {
                    load[*k as usize] += 1;
                }
                let k = (0..self.plan.shards())
                    .min_by_key(|&k| (load[k as usize], k))
                    .unwrap_or(0);
                let name = config.name.clone();
                if self.names.contains(&name) || self.creating.iter().any(|(n, _)| *n == name) {
                    return Err(ControlError::Invalid(format!(
                        "a volume named {name} exists"
                    )));
                }
                let r = self.engines[k as usize].control(
                    now,
                    Control::CreateVolume { config },
                    &mut self.scratch,
                );
                if r.is_ok() {
                    self.creating.push((name, k));
                }
                self.collect(k, now, out);
                return r;
            }
            Control::SetQos { volume, qos } => {
                let (k, volume) = self.route(volume)?;
                (k, Control::SetQos { volume, qos })
            }
            Control::StartMigration { volume, params } => {
                let (k, volume) = self.route(volume)?;
                (k, Control::StartMigration { volume, params })
            }
            Control::CancelMigration { volume } => {
                let (k, volume) = self.route(volume)?;
                (k, Control::CancelMigration { volume })
            }
            Control::ResizeVolume { volume, size_bytes } => {
                let (k, volume) = self.route(volume)?;
                (k, Control::ResizeVolume { volume, size_bytes })
            }
            Control::SetMigrationRate {
                volume,
                rate_bytes_per_s,
            } => {
                let (k, volume) = self.route(volume)?;
                (
                    k,
                    Control::SetMigrationRate {
                        volume,
                        rate_bytes_per_s,
                    },
                )
            }
            other => {
                return Err(ControlError::Unsupported(format!(
                    "{other:?} is not routed to shards yet"
                )));
            }
        };
        let r = self.engines[k as usize].control(now, c, &mut self.scratch);
        self.collect(k, now, out);
        r
    }

    fn route(&self, v: VolumeId) -> Result<(u16, VolumeId), ControlError> {
        self.to_local
            .get(v.0 as usize)
            .copied()
            .ok_or(ControlError::UnknownVolume(v))
    }

    /// Run `f` on volume `v`'s shard with the engine's index for it.
    fn on_volume<T>(
        &mut self,
        v: VolumeId,
        now: u64,
        out: &mut Outputs,
        f: impl FnOnce(&mut Engine, VolumeId, &mut Outputs) -> Result<T, String>,
    ) -> Result<T, String> {
        if let Some(e) = self.one() {
            return f(e, v, out);
        }
        let (k, local) = self.route(v).map_err(|e| e.to_string())?;
        let r = f(&mut self.engines[k as usize], local, &mut self.scratch);
        self.collect(k, now, out);
        r
    }

    pub fn start_migration(
        &mut self,
        now: u64,
        v: VolumeId,
        p: MigrationParams,
        out: &mut Outputs,
    ) -> Result<MigrationStatus, String> {
        self.on_volume(v, now, out, |e, v, o| e.start_migration(now, v, p, o))
    }

    /// A directed tier move of chunk `c` of volume `v` (`Engine::move_chunk`).
    pub fn move_chunk(
        &mut self,
        now: u64,
        v: VolumeId,
        c: u64,
        to: tiervisor_engine::PoolId,
        out: &mut Outputs,
    ) -> Result<bool, String> {
        self.on_volume(v, now, out, |e, v, o| e.move_chunk(now, v, c, to, o))
    }

    pub fn cancel_migration(
        &mut self,
        now: u64,
        v: VolumeId,
        out: &mut Outputs,
    ) -> Result<(), String> {
        self.on_volume(v, now, out, |e, v, o| e.cancel_migration(now, v, o))
    }

    pub fn set_migration_rate(
        &mut self,
        now: u64,
        v: VolumeId,
        rate: u64,
        out: &mut Outputs,
    ) -> Result<(), String> {
        self.on_volume(v, now, out, |e, v, o| e.set_migration_rate(now, v, rate, o))
    }

    /// Every shard's migrations (they name their volume).
    pub fn migrations(&self) -> Vec<MigrationStatus> {
        self.engines.iter().flat_map(|e| e.migrations()).collect()
    }

    /// The system-wide index of volume `name`.
    pub fn volume_id(&self, name: &str) -> Option<VolumeId> {
        if let Some(e) = self.engines.first().filter(|_| self.engines.len() == 1) {
            return e.volume_id(name);
        }
        let g = self.names.iter().position(|n| n == name)?;
        let (k, local) = self.to_local[g];
        self.engines[k as usize]
            .volume_id(name)
            .filter(|&l| l == local)
            .map(|_| VolumeId(g as u32))
    }

    /// (name, size) of every volume the shards hold, in system-wide order.
    pub fn volumes(&self) -> Vec<(String, u64)> {
        if let Some(e) = self.engines.first().filter(|_| self.engines.len() == 1) {
            return e.volumes();
        }
        let all: Vec<(String, u64)> = self.engines.iter().flat_map(|e| e.volumes()).collect();
        let size = |n: &str| all.iter().find(|(m, _)| m == n).map(|&(_, s)| s);
        self.names
            .iter()
            .filter_map(|n| Some((n.clone(), size(n)?)))
            .collect()
    }

    pub fn check_invariants(&self) -> Result<(), String> {
        let one = self.engines.len() == 1;
        for (k, e) in self.engines.iter().enumerate() {
            e.check_invariants()
                .map_err(|m| if one { m } else { format!("shard {k}: {m}") })?;
        }
        // Across shards, once all are mounted (before, a shard's loans are unread): no
        // chunk is owned twice, and every borrowed run was lent.
        if !one && self.mounted {
            let loans: Vec<&[_]> = self.engines.iter().map(|e| e.loans()).collect();
            for p in 0..self.cfg.pools.len() {
                let pool = tiervisor_engine::PoolId(p as u16);
                let runs: Vec<_> = self.engines.iter().map(|e| e.owned_runs(pool)).collect();
                LoanBroker::check(pool, &loans, &runs)?;
            }
        }
        // The budgets in force sum to at most the totals, whether the broker moves them
        // or the plan's fixed split holds.
        if !one {
            let in_force: Vec<_> = self.engines.iter().map(|e| e.budgets_in_force()).collect();
            BudgetBroker::check(self.budgets.totals(), &in_force)?;
            // Each pool's device shares, as the broker decided them last, are the whole
            // device, with exactly one gate open where any is set.
            self.budgets.shares().check()?;
        }
        Ok(())
    }

    /// Every shard's `Engine::check_pauses_stepped` (cheap: DST runs it after every call).
    pub fn check_pauses_stepped(&self) -> Result<(), String> {
        let one = self.engines.len() == 1;
        for (k, e) in self.engines.iter().enumerate() {
            e.check_pauses_stepped()
                .map_err(|m| if one { m } else { format!("shard {k}: {m}") })?;
        }
        Ok(())
    }

    pub fn sched_wait_max_ns(&self) -> u64 {
        self.engines
            .iter()
            .map(|e| e.sched_wait_max_ns())
            .max()
            .unwrap_or(0)
    }
}

/// What each shard has to spare in a pool, for the loan broker (a shard not ready yet has
/// nothing to say).
fn room_of(engines: &[Engine]) -> impl Fn(u16, tiervisor_engine::PoolId) -> Option<PoolRoom> + '_ {
    move |j, pool| {
        let e = &engines[j as usize];
        (e.state() == &EngineState::Ready).then(|| PoolRoom {
            available_chunks: e.available_chunks(pool),
            low_water_chunks: e.low_water_chunks(pool),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiervisor_engine::{
        Medium, Placement, PoolConfig, PoolId, Provisioning, ReqKind, SchedSpec, VolumeConfig,
    };

    fn config() -> EngineConfig {
        let pool = |name: &str, medium| PoolConfig {
            name: name.into(),
            medium,
            capacity_bytes: (256 << 20) + 12345,
            queue_depth: 4,
            scheduler: SchedSpec::default(),
            log: false,
            throttle: None,
            write_buffer: None,
        };
        EngineConfig {
            track_data: false,
            pools: vec![pool("ssd", Medium::Ssd), pool("hdd", Medium::Hdd)],
            volumes: (0..3)
                .map(|i| VolumeConfig {
                    name: format!("v{i}"),
                    size_bytes: 16 << 20,
                    home_pool: PoolId(i as u16 % 2),
                    fast_pool: None,
                    provisioning: if i == 1 {
                        Provisioning::Thick
                    } else {
                        Provisioning::Thin
                    },
                    placement: Placement::Pinned,
                    log: None,
                    qos: Default::default(),
                })
                .collect(),
            ..EngineConfig::default()
        }
    }

    /// Complete every operation at once; check each lies in its shard's slices.
    fn drain(s: &mut Sharded, out: &mut Outputs, ops_by_shard: &mut [u64]) {
        let n = u64::from(s.shards());
        while let Some(op) = out.ops.pop() {
            let k = (op.id.0 % n) as u16;
            let slice = s.plan().slice(op.pool.0 as usize, k);
            assert!(
                op.offset_bytes >= slice.base_bytes
                    && op.offset_bytes + op.len_bytes <= slice.end_bytes(),
                "shard {k} op {op:?} outside {slice:?}"
            );
            if let Some(v) = op.volume {
                assert_eq!(s.plan().volume_shard(v.0 as usize), Some(k), "{op:?}");
            }
            ops_by_shard[k as usize] += 1;
            let c = DeviceCompletion {
                id: op.id,
                result: Ok(()),
                data: None,
            };
            s.device_done(0, c, out);
        }
    }

    #[test]
    fn every_operation_stays_in_its_shards_slice_and_shards_start_in_order() {
        let cfg = config();
        let mut s = Sharded::new(&cfg, 2, None).unwrap();
        let mut out = Outputs::default();
        s.start(0, StartMode::Format, &mut out);
        // Only shard 0 starts; shard 1 waits until it is ready.
        assert!(out.ops.iter().all(|o| o.id.0 % 2 == 0));
        assert_eq!(s.state(), EngineState::Starting);
        let mut ops = [0u64; 2];
        drain(&mut s, &mut out, &mut ops);
        assert_eq!(s.state(), EngineState::Ready, "{:?}", out.events);
        assert!(ops[0] > 0 && ops[1] > 0, "{ops:?}");
        for (g, name) in ["v0", "v1", "v2"].iter().enumerate() {
            assert_eq!(s.volume_id(name), Some(VolumeId(g as u32)));
        }
        for v in 0..3u32 {
            for c in 0..4u64 {
                let req = VmRequest::new(
                    u64::from(v) * 10 + c,
                    VolumeId(v),
                    ReqKind::Write,
                    c << 20,
                    64 << 10,
                );
                s.submit(0, req, &mut out);
            }
            s.submit(
                0,
                VmRequest::new(99, VolumeId(v), ReqKind::Flush, 0, 0),
                &mut out,
            );
            drain(&mut s, &mut out, &mut ops);
        }
        assert_eq!(out.completions.len(), 15);
        assert!(out.completions.iter().all(|c| c.result.is_ok()));
        assert_eq!(s.counters().0, &[10, 5]);
        s.check_invariants().unwrap();
    }
}
