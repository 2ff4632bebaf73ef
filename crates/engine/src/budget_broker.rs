//! The driver's side of the budgets that span volumes (issue 18): the simulator's
//! `Sharded` and the threaded server's front run this same broker, as they run the
//! `LoanBroker`. It decides; the driver delivers each `(shard, Control::SetBudgets)` and
//! feeds back the shards' `BudgetDemand` and `BudgetsSet` events (and refusals).
//!
//! **Policy.** Per budget (each pool's write buffer, tier bandwidth, tier moves in
//! flight, the cleaner's bandwidth) a shard is *busy* once a report shows it held back
//! by the budget or pushing more than the floor's worth through it in an interval, and
//! stays busy until a report shows it did nothing with it (an idle interval). Idle
//! shards keep a floor (a quarter of an equal share: enough to show demand and be woken,
//! one move in flight); busy shards split the rest equally. With no shard busy, every
//! shard is back at the equal split `ShardPlan` starts with.
//!
//! **The sum never exceeds the total.** The broker counts for each shard the most it
//! may be using: the budgets it last confirmed (`BudgetsSet`) and every command sent it
//! and not yet confirmed. A shrink is sent at once; the shard confirms it only once what
//! it took away is free (a write buffer drained below its new size, moves finished), and
//! only then may another shard grow into it. A grow is bounded by the room left under
//! that count. So at every instant the shards' budgets in force
//! (`Engine::budgets_in_force`) sum to at most the total, which `Sharded` checks after
//! every step in DST ([`BudgetBroker::check`]).

use crate::budgets::state::{BudgetDemand, ShardBudgets};
use crate::config::EngineConfig;
use crate::control::Control;
use crate::shard::ShardPlan;
use crate::types::EngineEvent;

/// What the driver sends: `(shard, command)`, in order.
pub type Steps = Vec<(u16, Control)>;

/// Per shard and budget: busy or not (the budgets' order: each pool's buffer, then
/// tier bandwidth and moves together, then the cleaner).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Busy {
    write_buffer: Vec<bool>,
    tier: bool,
    clean: bool,
}

pub struct BudgetBroker {
    shards: u16,
    /// What the shards start with (`ShardPlan::shard_config`), kept for `reset`.
    initial: Vec<ShardBudgets>,
    totals: ShardBudgets,
    floors: ShardBudgets,
    /// Per shard: the budgets it last confirmed in force.
    confirmed: Vec<ShardBudgets>,
    /// Per shard: commands sent and not yet confirmed (seq, budgets), in order.
    sent: Vec<Vec<(u64, ShardBudgets)>>,
    busy: Vec<Busy>,
    next_seq: u64,
    /// DST's `budget-overcommit`: busy shards split the whole total (forgetting the
    /// idle shards' floors) and grow without waiting for the others' shrinks.
    overcommit: bool,
    /// Budgets move by demand (`shard_budgets = "demand"`); else the plan's split holds
    /// and reports only feed the device shares.
    moves: bool,
    /// Each shard's share of each pool's device (`share_broker.rs`), from the same
    /// reports.
    shares: crate::share_broker::ShareBroker,
}

impl BudgetBroker {
    /// The broker for `plan`'s shards of `cfg` (the system's configuration).
    pub fn new(plan: &ShardPlan, cfg: &EngineConfig) -> BudgetBroker {
        let n = plan.shards();
        let initial: Vec<ShardBudgets> = (0..n)
            .map(|k| ShardBudgets::of(&plan.shard_config(cfg, k)))
            .collect();
        let totals = totals(cfg, &initial);
        let n64 = u64::from(n.max(1));
        let floor = |t: u64, min: u64| if t == 0 { 0 } else { (t / (4 * n64)).max(min) };
        let floors = ShardBudgets {
            // At least the 64 KiB `ShardPlan` gives a buffer.
            write_buffer_bytes: (totals.write_buffer_bytes.iter())
                .map(|&t| floor(t, 64 << 10))
                .collect(),
            tier_bytes_per_s: floor(totals.tier_bytes_per_s, 1),
            tier_max_moves: 1,
            clean_bytes_per_s: floor(totals.clean_bytes_per_s, 1),
        };
        let pools = cfg.pools.len();
        BudgetBroker {
            shards: n,
            confirmed: initial.clone(),
            sent: vec![Vec::new(); n as usize],
            busy: vec![
                Busy {
                    write_buffer: vec![false; pools],
                    ..Busy::default()
                };
                n as usize
            ],
            initial,
            totals,
            floors,
            next_seq: 1,
            overcommit: false,
            moves: cfg.budget_reports,
            shares: crate::share_broker::ShareBroker::new(cfg, n),
        }
    }

    /// The device shares it decided last.
    pub fn shares(&self) -> &crate::share_broker::ShareBroker {
        &self.shares
    }

    /// DST's `share-overcommit` defect (`ShareBroker::inject_overcommit`).
    pub fn inject_share_overcommit(&mut self) {
        self.shares.inject_overcommit();
    }

    /// DST's `budget-overcommit` defect (see the field).
    pub fn inject_overcommit(&mut self) {
        self.overcommit = true;
    }

    /// Every engine was thrown away (a power loss): they start again at the plan's split.
    pub fn reset(&mut self) {
        self.shares.reset();
        self.confirmed = self.initial.clone();
        for s in &mut self.sent {
            s.clear();
        }
        for b in &mut self.busy {
            b.write_buffer.iter_mut().for_each(|x| *x = false);
            b.tier = false;
            b.clean = false;
        }
    }

    /// The totals the shards' budgets never exceed together: the configuration's, or
    /// the plan's split where its minimums (64 KiB of buffer, one move) add up to more.
    pub fn totals(&self) -> &ShardBudgets {
        &self.totals
    }

    /// The most shard `k` may be using: what it confirmed and everything sent since.
    fn held(&self, k: usize) -> ShardBudgets {
        (self.sent[k].iter()).fold(self.confirmed[k].clone(), |h, (_, b)| h.max(b))
    }

    /// The budgets last sent to shard `k` (or confirmed, if none is on its way).
    fn latest(&self, k: usize) -> &ShardBudgets {
        self.sent[k].last().map_or(&self.confirmed[k], |(_, b)| b)
    }

    /// Shard `k` said `e`: the commands to send, and to whom.
    pub fn on_event(&mut self, k: u16, e: &EngineEvent) -> Steps {
        let k = k as usize;
        if k >= self.shards as usize {
            return Vec::new();
        }
        match e {
            EngineEvent::BudgetDemand { demand } => {
                let mut steps = self.shares.on_demand(k, demand);
                if self.moves {
                    self.demand(k, demand);
                    steps.extend(self.round());
                }
                return steps;
            }
            EngineEvent::BudgetsSet { seq } => {
                if let Some(i) = self.sent[k].iter().rposition(|(s, _)| s == seq) {
                    self.confirmed[k] = self.sent[k][i].1.clone();
                    self.sent[k].drain(..=i);
                }
            }
            _ => return Vec::new(),
        }
        self.round()
    }

    /// Shard `k` refused `c` (it never took effect).
    pub fn on_refused(&mut self, k: u16, c: &Control) -> Steps {
        if let Control::SetBudgets { seq, .. } = c
            && let Some(s) = self.sent.get_mut(k as usize)
        {
            s.retain(|(q, _)| q != seq);
            return self.round();
        }
        Vec::new()
    }

    fn demand(&mut self, k: usize, d: &BudgetDemand) {
        let f = &self.floors;
        let b = &mut self.busy[k];
        // Busy from a report that shows pressure or more than the floor's worth; busy
        // until a report shows nothing at all.
        let next = |was: bool, u: &crate::budgets::state::Use, floor_bytes: u64| {
            u.pressed || u.bytes > floor_bytes || (was && u.bytes > 0)
        };
        let per_interval =
            |rate: u64| (rate as u128 * d.interval_ns as u128 / 1_000_000_000) as u64;
        for (p, was) in b.write_buffer.iter_mut().enumerate() {
            let u = d.write_buffer.get(p).copied().unwrap_or_default();
            *was = f.write_buffer_bytes[p] > 0 && next(*was, &u, f.write_buffer_bytes[p]);
        }
        b.tier = next(b.tier, &d.tier, per_interval(f.tier_bytes_per_s));
        b.clean =
            f.clean_bytes_per_s > 0 && next(b.clean, &d.clean, per_interval(f.clean_bytes_per_s));
    }

    /// Every shard's target from the busy flags.
    fn targets(&self) -> Vec<ShardBudgets> {
        let n = self.shards as usize;
        let mut t = vec![ShardBudgets::default(); n];
        let over = self.overcommit;
        let split = |total: u64, floor: u64, busy: &dyn Fn(usize) -> bool| -> Vec<u64> {
            let nb = (0..n).filter(|&k| busy(k)).count() as u64;
            if nb == 0 || total == 0 {
                return vec![total / n as u64; n];
            }
            let idle = n as u64 - nb;
            let rest = if over { total } else { total - floor * idle };
            (0..n)
                .map(|k| if busy(k) { rest / nb } else { floor })
                .collect()
        };
        for p in 0..self.totals.write_buffer_bytes.len() {
            let s = split(
                self.totals.write_buffer_bytes[p],
                self.floors.write_buffer_bytes[p],
                &|k| self.busy[k].write_buffer[p],
            );
            for (k, v) in s.into_iter().enumerate() {
                t[k].write_buffer_bytes.push(v);
            }
        }
        let tier = |k: usize| self.busy[k].tier;
        let clean = |k: usize| self.busy[k].clean;
        let bw = split(
            self.totals.tier_bytes_per_s,
            self.floors.tier_bytes_per_s,
            &tier,
        );
        let mv = split(u64::from(self.totals.tier_max_moves), 1, &tier);
        let cl = split(
            self.totals.clean_bytes_per_s,
            self.floors.clean_bytes_per_s,
            &clean,
        );
        for k in 0..n {
            t[k].tier_bytes_per_s = bw[k].max(1);
            t[k].tier_max_moves = (mv[k] as u32).max(1);
            t[k].clean_bytes_per_s = cl[k];
        }
        t
    }

    /// Send each shard what moves it toward its target: shrinks at once, grows only into
    /// room no other shard may still be using.
    fn round(&mut self) -> Steps {
        let targets = self.targets();
        let n = self.shards as usize;
        let mut held: Vec<ShardBudgets> = (0..n).map(|k| self.held(k)).collect();
        let mut steps = Vec::new();
        for (k, want) in targets.iter().enumerate() {
            let mut next = want.clone();
            let room = |h: &[ShardBudgets], f: &dyn Fn(&ShardBudgets) -> u64, total: u64| {
                total.saturating_sub(h.iter().map(f).sum::<u64>())
            };
            let grow = |want: u64, held: u64, room: u64| {
                if want <= held || self.overcommit {
                    want
                } else {
                    held + (want - held).min(room)
                }
            };
            for p in 0..next.write_buffer_bytes.len() {
                let r = room(
                    &held,
                    &|b| b.write_buffer_bytes[p],
                    self.totals.write_buffer_bytes[p],
                );
                next.write_buffer_bytes[p] =
                    grow(want.write_buffer_bytes[p], held[k].write_buffer_bytes[p], r);
            }
            let r = room(&held, &|b| b.tier_bytes_per_s, self.totals.tier_bytes_per_s);
            next.tier_bytes_per_s = grow(want.tier_bytes_per_s, held[k].tier_bytes_per_s, r);
            let r = room(
                &held,
                &|b| u64::from(b.tier_max_moves),
                self.totals.tier_max_moves.into(),
            );
            next.tier_max_moves =
                grow(want.tier_max_moves.into(), held[k].tier_max_moves.into(), r) as u32;
            let r = room(
                &held,
                &|b| b.clean_bytes_per_s,
                self.totals.clean_bytes_per_s,
            );
            next.clean_bytes_per_s = grow(want.clean_bytes_per_s, held[k].clean_bytes_per_s, r);
            if next == *self.latest(k) {
                continue;
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            held[k] = held[k].max(&next);
            self.sent[k].push((seq, next.clone()));
            steps.push((k as u16, Control::SetBudgets { seq, budgets: next }));
        }
        steps
    }

    /// The cross-shard invariant: the budgets in force (`Engine::budgets_in_force`, one
    /// per shard) sum to at most `totals` for every budget.
    pub fn check(totals: &ShardBudgets, in_force: &[ShardBudgets]) -> Result<(), String> {
        let over = |what: String, sum: u64, total: u64| {
            Err(format!(
                "the shards' {what} budgets sum to {sum}, over the total {total}: {:?}",
                in_force
            ))
        };
        for (p, &t) in totals.write_buffer_bytes.iter().enumerate() {
            let sum: u64 = in_force.iter().map(|b| b.write_buffer_bytes[p]).sum();
            if sum > t {
                return over(format!("pool {p} write buffer"), sum, t);
            }
        }
        let sum: u64 = in_force.iter().map(|b| b.tier_bytes_per_s).sum();
        if sum > totals.tier_bytes_per_s {
            return over("tier bandwidth".into(), sum, totals.tier_bytes_per_s);
        }
        let sum: u64 = in_force.iter().map(|b| u64::from(b.tier_max_moves)).sum();
        if sum > u64::from(totals.tier_max_moves) {
            return over("tier moves".into(), sum, totals.tier_max_moves.into());
        }
        let sum: u64 = in_force.iter().map(|b| b.clean_bytes_per_s).sum();
        if sum > totals.clean_bytes_per_s {
            return over("cleaner bandwidth".into(), sum, totals.clean_bytes_per_s);
        }
        Ok(())
    }
}

/// The configured totals, or the plan's split where its minimums add up to more.
fn totals(cfg: &EngineConfig, initial: &[ShardBudgets]) -> ShardBudgets {
    let of = ShardBudgets::of(cfg);
    let sum = |f: &dyn Fn(&ShardBudgets) -> u64| initial.iter().map(f).sum::<u64>();
    ShardBudgets {
        write_buffer_bytes: (0..of.write_buffer_bytes.len())
            .map(|p| of.write_buffer_bytes[p].max(sum(&|b| b.write_buffer_bytes[p])))
            .collect(),
        tier_bytes_per_s: of.tier_bytes_per_s.max(sum(&|b| b.tier_bytes_per_s)),
        tier_max_moves: (u64::from(of.tier_max_moves).max(sum(&|b| b.tier_max_moves.into())))
            as u32,
        clean_bytes_per_s: of.clean_bytes_per_s.max(sum(&|b| b.clean_bytes_per_s)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budgets::state::Use;
    use crate::config::{Medium, PoolConfig, Provisioning, VolumeConfig};
    use crate::sched::SchedSpec;
    use crate::types::PoolId;
    use crate::wbuf::WriteBufferConfig;

    const MIB: u64 = 1 << 20;

    fn cfg() -> EngineConfig {
        EngineConfig {
            pools: vec![PoolConfig {
                name: "p".into(),
                medium: Medium::Ssd,
                capacity_bytes: 1 << 30,
                queue_depth: 4,
                scheduler: SchedSpec::default(),
                log: false,
                throttle: None,
                write_buffer: Some(WriteBufferConfig {
                    size_bytes: 64 * MIB,
                    max_age_ns: 1_000_000_000,
                }),
            }],
            volumes: (0..2)
                .map(|i| VolumeConfig {
                    name: format!("v{i}"),
                    size_bytes: 8 * MIB,
                    home_pool: PoolId(0),
                    fast_pool: None,
                    provisioning: Provisioning::Thin,
                    placement: crate::config::Placement::Pinned,
                    log: None,
                    qos: Default::default(),
                })
                .collect(),
            budget_reports: true,
            ..EngineConfig::default()
        }
    }

    fn writes(bytes: u64, pressed: bool) -> EngineEvent {
        EngineEvent::BudgetDemand {
            demand: BudgetDemand {
                interval_ns: 100_000_000,
                write_buffer: vec![Use { bytes, pressed }],
                ..Default::default()
            },
        }
    }

    fn wbuf(steps: &Steps) -> Vec<(u16, u64, u64)> {
        steps
            .iter()
            .map(|(k, c)| match c {
                Control::SetBudgets { seq, budgets } => (*k, *seq, budgets.write_buffer_bytes[0]),
                c => panic!("{c:?}"),
            })
            .collect()
    }

    /// Apply `steps` as shards would: each takes its budgets at once; a shrink is
    /// confirmed only when `drained` says so (else left for later).
    fn in_force(b: &BudgetBroker, held: &[ShardBudgets]) {
        BudgetBroker::check(b.totals(), held).unwrap();
    }

    #[test]
    fn a_busy_shard_gets_all_but_the_idle_ones_floor_once_they_have_shrunk() {
        let c = cfg();
        let plan = ShardPlan::new(&c, 2).unwrap();
        let mut b = BudgetBroker::new(&plan, &c);
        assert_eq!(b.totals().write_buffer_bytes, vec![64 * MIB]);
        // A report of light use (under the 8 MiB floor, not held back) changes nothing.
        assert_eq!(b.on_event(0, &writes(MIB, false)), vec![]);
        // Held back: shard 0 is busy. Shard 1 (never reported: idle) shrinks to the
        // floor, a quarter of an equal share; shard 0 may not grow until that is done.
        let s = b.on_event(0, &writes(MIB, true));
        assert_eq!(wbuf(&s), vec![(1, 1, 8 * MIB)]);
        // Tier and cleaner budgets were not used by anyone: unchanged.
        let Control::SetBudgets { budgets, .. } = &s[0].1 else {
            unreachable!()
        };
        assert_eq!(budgets.tier_bytes_per_s, c.tiering.bytes_per_s / 2);
        // Shard 1 confirms: shard 0 grows into the room.
        let s = b.on_event(1, &EngineEvent::BudgetsSet { seq: 1 });
        assert_eq!(wbuf(&s), vec![(0, 2, 56 * MIB)]);
        // Nothing more to do until something changes.
        assert_eq!(b.on_event(0, &EngineEvent::BudgetsSet { seq: 2 }), vec![]);
        assert_eq!(b.on_event(0, &writes(3 * MIB, false)), vec![], "still busy");
        // Shard 1 wakes: both busy, 32 MiB each. Shard 0 shrinks first; shard 1 grows
        // only once shard 0 confirms (its buffer drained below 32 MiB).
        let s = b.on_event(1, &writes(9 * MIB, false));
        assert_eq!(wbuf(&s), vec![(0, 3, 32 * MIB)]);
        assert_eq!(b.on_event(1, &writes(9 * MIB, true)), vec![]);
        let s = b.on_event(0, &EngineEvent::BudgetsSet { seq: 3 });
        assert_eq!(wbuf(&s), vec![(1, 4, 32 * MIB)]);
        // Shard 0 goes quiet (a report with nothing): it keeps the floor, shard 1 the rest.
        let s = b.on_event(0, &writes(0, false));
        assert_eq!(wbuf(&s), vec![(0, 5, 8 * MIB)]);
        // Once shard 0 confirms, shard 1 grows again (the grow to 32 MiB not confirmed
        // yet is counted as held: 8 + 32 + 24 = 64).
        let s = b.on_event(0, &EngineEvent::BudgetsSet { seq: 5 });
        assert_eq!(wbuf(&s), vec![(1, 6, 56 * MIB)]);
        assert_eq!(b.on_event(1, &EngineEvent::BudgetsSet { seq: 4 }), vec![]);
        // A refused command never took effect: the broker forgets it and tries again.
        let s = b.on_refused(1, &s[0].1);
        assert_eq!(wbuf(&s), vec![(1, 7, 56 * MIB)]);
    }

    #[test]
    fn the_budgets_held_never_sum_past_the_total_and_the_defect_does() {
        let c = cfg();
        let plan = ShardPlan::new(&c, 3).unwrap();
        for over in [false, true] {
            let mut b = BudgetBroker::new(&plan, &c);
            if over {
                b.inject_overcommit();
            }
            // Track what each shard may use: every budget sent until confirmed.
            let mut held: Vec<ShardBudgets> = (0..3)
                .map(|k| ShardBudgets::of(&plan.shard_config(&c, k)))
                .collect();
            let mut worst = Ok(());
            let mut pending = Vec::new();
            for (k, e) in [(0u16, writes(MIB, true)), (2, writes(MIB, true))] {
                pending.extend(b.on_event(k, &e));
                while let Some((j, cmd)) = pending.pop() {
                    let Control::SetBudgets { seq, budgets } = cmd else {
                        unreachable!()
                    };
                    held[j as usize] = held[j as usize].max(&budgets);
                    if worst.is_ok() {
                        worst = BudgetBroker::check(b.totals(), &held);
                    }
                    held[j as usize] = budgets;
                    pending.extend(b.on_event(j, &EngineEvent::BudgetsSet { seq }));
                }
            }
            if over {
                let e = worst.unwrap_err();
                assert!(e.contains("write buffer budgets sum to"), "{e}");
            } else {
                worst.unwrap();
                in_force(&b, &held);
                let w: Vec<u64> = held.iter().map(|h| h.write_buffer_bytes[0]).collect();
                // 64 MiB over three shards: the idle one keeps 64/12 MiB.
                let floor = 64 * MIB / 12;
                assert_eq!(
                    w,
                    vec![(64 * MIB - floor) / 2, floor, (64 * MIB - floor) / 2]
                );
            }
        }
    }
}
