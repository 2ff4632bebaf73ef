//! The budgets' state, apart from the engine's glue in `budgets.rs`: what a shard holds
//! and reports, as plain data the event types and the broker can name without the engine
//! (issue 11's import cycle).

/// The divisible budgets of one shard (or, in the broker, their totals).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ShardBudgets {
    /// Per pool: the write buffer's size (0: the pool has none).
    pub write_buffer_bytes: Vec<u64>,
    pub tier_bytes_per_s: u64,
    pub tier_max_moves: u32,
    /// 0: the cleaner is uncapped (and stays so: nothing to divide).
    pub clean_bytes_per_s: u64,
}

impl ShardBudgets {
    /// Componentwise maximum (what a shard may use while a shrink drains).
    pub fn max(&self, o: &ShardBudgets) -> ShardBudgets {
        ShardBudgets {
            write_buffer_bytes: (self.write_buffer_bytes.iter())
                .zip(&o.write_buffer_bytes)
                .map(|(a, b)| *a.max(b))
                .collect(),
            tier_bytes_per_s: self.tier_bytes_per_s.max(o.tier_bytes_per_s),
            tier_max_moves: self.tier_max_moves.max(o.tier_max_moves),
            clean_bytes_per_s: self.clean_bytes_per_s.max(o.clean_bytes_per_s),
        }
    }
}

/// One budget's use in one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Use {
    /// Bytes that went through it: admitted to the buffer, moved between tiers, read by
    /// the cleaner.
    pub bytes: u64,
    /// Work was held back by it.
    pub pressed: bool,
}

impl Use {
    pub(crate) fn active(&self) -> bool {
        self.bytes > 0 || self.pressed
    }
}

/// What a shard used of its budgets since its last report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BudgetDemand {
    pub interval_ns: u64,
    /// Per pool (pools without a buffer report nothing used).
    pub write_buffer: Vec<Use>,
    pub tier: Use,
    pub clean: Use,
    /// Per pool, what its volumes asked of and got from the device (`device_share.rs`;
    /// empty without `EngineConfig::shard_qos`).
    pub pools: Vec<crate::device_share::state::PoolService>,
}

impl BudgetDemand {
    pub fn active(&self) -> bool {
        self.write_buffer.iter().any(Use::active)
            || self.tier.active()
            || self.clean.active()
            || self.pools.iter().any(|p| p.active())
    }
}

/// Monotone counters the reports take differences of.
#[derive(Clone, Debug, Default)]
pub(crate) struct Seen {
    pub(crate) wbuf_bytes: Vec<u64>,
    pub(crate) wbuf_direct: Vec<u64>,
    pub(crate) tier_bytes: u64,
    pub(crate) tier_throttled: u64,
    pub(crate) clean_bytes: u64,
    pub(crate) clean_waits: u64,
}

#[derive(Default)]
pub(crate) struct BudgetMeter {
    pub(crate) timer_at: Option<u64>,
    pub(crate) last_report_ns: u64,
    pub(crate) seen: Seen,
    /// A command applied whose shrink is still draining: its seq and the budgets the
    /// shard may still be using (the larger of the old and the new, componentwise).
    pub(crate) draining: Option<(u64, ShardBudgets)>,
    /// Commands taken since the start (`Engine::budget_commands`).
    pub(crate) taken: u64,
}
