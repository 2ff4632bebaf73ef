//! A shard's side of the budgets that span volumes (issue 18): the pool's write buffer,
//! tier-migration bandwidth and moves in flight, the cleaner's bandwidth. `ShardPlan`
//! starts every shard at the total divided by N; the driver's `BudgetBroker`
//! (`budget_broker.rs`) moves them to the shards that use them. This module is what the
//! engine does for it:
//! - *Report demand.* While the shard is active, every [`REPORT_INTERVAL_NS`] of engine
//!   time it says `EngineEvent::BudgetDemand`: per budget, the bytes that went through it
//!   since the last report and whether work was held back by it (a write sent to the
//!   device for lack of buffer room, a tier tick or a cleaning that waited for
//!   bandwidth). The timer is armed by a VM request and re-armed only after a report
//!   that saw activity, so an idle shard says once that it is idle and then nothing.
//! - *Take new budgets* (`Control::SetBudgets`): in force at once for what comes next.
//!   A budget that shrank below what the shard holds (buffered bytes, moves in flight)
//!   is not dropped: the buffer drains as it does above its high-water mark (writes go
//!   to the device meanwhile) and moves finish. Until then the shard counts the old
//!   budget as still in use ([`Engine::budgets_in_force`]), and only then answers
//!   `EngineEvent::BudgetsSet` (a later command covers an earlier one), so the broker
//!   never hands that room to another shard before it is free.

pub(crate) mod state;

pub(crate) use state::Seen;
pub use state::{BudgetDemand, ShardBudgets, Use};

use crate::config::EngineConfig;
use crate::control::ControlError;
use crate::engine::{Engine, EngineState};
use crate::types::{EngineEvent, Outputs};

/// How often an active shard reports its demand (engine time). Short enough that a
/// shard waking beside a busy one gets its share within a fraction of a second; long
/// enough that reports cost nothing beside the I/O they describe.
pub const REPORT_INTERVAL_NS: u64 = 100_000_000;

impl ShardBudgets {
    /// The budgets `cfg` gives its engine.
    pub fn of(cfg: &EngineConfig) -> ShardBudgets {
        ShardBudgets {
            write_buffer_bytes: (cfg.pools.iter())
                .map(|p| p.write_buffer.map_or(0, |w| w.size_bytes))
                .collect(),
            tier_bytes_per_s: cfg.tiering.bytes_per_s,
            tier_max_moves: cfg.tiering.max_moves,
            clean_bytes_per_s: cfg.log.clean_bytes_per_s,
        }
    }
}

impl Engine {
    fn budget_reporting(&self) -> bool {
        (self.cfg.budget_reports || self.cfg.shard_qos)
            && self.cfg.shard.count > 1
            && self.state == EngineState::Ready
    }

    /// The budgets this shard may be using now: the configured ones, or while a shrink
    /// drains, the larger of those and the ones before it.
    pub fn budgets_in_force(&self) -> ShardBudgets {
        let now = ShardBudgets::of(&self.cfg);
        match &self.budgets.draining {
            Some((_, before)) => now.max(before),
            None => now,
        }
    }

    /// `Control::SetBudgets` commands this engine has taken since it started.
    pub fn budget_commands(&self) -> u64 {
        self.budgets.taken
    }

    /// Bytes the write buffer of `pool` holds now (dirty and being written back).
    pub fn write_buffer_bytes(&self, pool: crate::types::PoolId) -> u64 {
        self.pools
            .get(pool.0 as usize)
            .map_or(0, |p| p.wbuf.total_bytes())
    }

    /// A VM request arrived: report demand within an interval (if not already due).
    pub(crate) fn budget_arm(&mut self, now: u64) {
        if self.budgets.timer_at.is_none() && self.budget_reporting() {
            self.budgets.timer_at = Some(now + REPORT_INTERVAL_NS);
            // The interval measured starts now: nothing went through while idle.
            self.budgets.last_report_ns = now;
        }
    }

    fn budget_counters(&self) -> Seen {
        let wb = |f: fn(&crate::wbuf::WriteBufferStats) -> u64| {
            (self.pools.iter()).map(|p| f(&p.wbuf.stats)).collect()
        };
        Seen {
            wbuf_bytes: wb(|s| s.absorbed_bytes),
            wbuf_direct: wb(|s| s.direct_writes),
            tier_bytes: self.tier.started_bytes(),
            tier_throttled: self.tier.throttled(),
            clean_bytes: self.logs.iter().map(|l| l.stats.cleaner_read_bytes).sum(),
            clean_waits: self.logs.iter().map(|l| l.stats.cleaner_waits).sum(),
        }
    }

    /// The report timer: say what went through each budget since the last report; keep
    /// reporting only while something did.
    pub(crate) fn budget_tick(&mut self, now: u64, out: &mut Outputs) {
        if self.budgets.timer_at.is_none_or(|t| t > now) {
            return;
        }
        self.budgets.timer_at = None;
        if !self.budget_reporting() {
            return;
        }
        let c = self.budget_counters();
        let s = &self.budgets.seen;
        let d = |a: u64, b: Option<&u64>| a.saturating_sub(b.copied().unwrap_or(0));
        let mut demand = BudgetDemand {
            interval_ns: now.saturating_sub(self.budgets.last_report_ns).max(1),
            write_buffer: (0..self.pools.len())
                .map(|p| Use {
                    bytes: d(c.wbuf_bytes[p], s.wbuf_bytes.get(p)),
                    pressed: d(c.wbuf_direct[p], s.wbuf_direct.get(p)) > 0,
                })
                .collect(),
            tier: Use {
                bytes: c.tier_bytes - s.tier_bytes,
                pressed: c.tier_throttled > s.tier_throttled,
            },
            clean: Use {
                bytes: c.clean_bytes - s.clean_bytes,
                pressed: c.clean_waits > s.clean_waits,
            },
            pools: Vec::new(),
        };
        if self.cfg.shard_qos {
            demand.pools = self.pool_service();
        }
        self.budgets.seen = c;
        self.budgets.last_report_ns = now;
        if demand.active() {
            self.budgets.timer_at = Some(now + REPORT_INTERVAL_NS);
        }
        out.events.push(EngineEvent::BudgetDemand { demand });
    }

    /// `Control::SetBudgets`: the driver's broker gives this shard new budgets.
    pub(crate) fn set_budgets(
        &mut self,
        now: u64,
        seq: u64,
        b: ShardBudgets,
        out: &mut Outputs,
    ) -> Result<(), ControlError> {
        let old = ShardBudgets::of(&self.cfg);
        let bad = |what: String| Err(ControlError::Invalid(what));
        if b.write_buffer_bytes.len() != self.pools.len() {
            return bad(format!(
                "budgets for {} pools; this shard has {}",
                b.write_buffer_bytes.len(),
                self.pools.len()
            ));
        }
        for (p, (&new, &was)) in b
            .write_buffer_bytes
            .iter()
            .zip(&old.write_buffer_bytes)
            .enumerate()
        {
            if (new == 0) != (was == 0) {
                return bad(format!(
                    "pool {}: a write buffer of {new} bytes where it has {was}",
                    self.cfg.pools[p].name
                ));
            }
        }
        if b.tier_bytes_per_s == 0 || b.tier_max_moves == 0 {
            return bad("tier bandwidth and moves must be at least 1".into());
        }
        if (b.clean_bytes_per_s == 0) != (old.clean_bytes_per_s == 0) {
            return bad("the cleaner's cap cannot be turned on or off by a budget".into());
        }
        for (p, &size) in b.write_buffer_bytes.iter().enumerate() {
            if let Some(w) = self.cfg.pools[p].write_buffer.as_mut() {
                w.size_bytes = size;
            }
            if let Some(w) = self.pools[p].wbuf.cfg.as_mut() {
                w.size_bytes = size;
            }
        }
        self.cfg.tiering.bytes_per_s = b.tier_bytes_per_s;
        self.cfg.tiering.max_moves = b.tier_max_moves;
        self.cfg.log.clean_bytes_per_s = b.clean_bytes_per_s;
        // What the shard may still use until a shrink drains: the old budgets, and any
        // earlier command's still draining.
        let using = match self.budgets.draining.take() {
            Some((_, before)) => old.max(&before),
            None => old,
        };
        self.budgets.draining = Some((seq, using));
        self.budgets.taken += 1;
        // A smaller buffer starts draining now (its high-water mark is crossed); more
        // bandwidth or moves is spent at the next tier tick.
        if self.state == EngineState::Ready {
            for p in 0..self.pools.len() {
                self.wbuf_background(now, p, out);
            }
        }
        self.arm_tier_timer(now);
        self.budget_settle(out);
        Ok(())
    }

    /// At the end of every entry point: once nothing exceeds the budgets set last (the
    /// buffers drained below their sizes, moves in flight within the cap), the shrink is
    /// over and the broker is told.
    pub(crate) fn budget_settle(&mut self, out: &mut Outputs) {
        let Some((seq, _)) = self.budgets.draining else {
            return;
        };
        let buffers_fit = self
            .pools
            .iter()
            .all(|p| (p.wbuf.cfg).is_none_or(|c| p.wbuf.total_bytes() <= c.size_bytes));
        if buffers_fit && self.tier.in_flight() <= self.cfg.tiering.max_moves {
            self.budgets.draining = None;
            out.events.push(EngineEvent::BudgetsSet { seq });
        }
    }
}
