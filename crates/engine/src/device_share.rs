//! A shard's side of QoS across shards (issue 12): each pool's device share.
//!
//! A volume lives on one shard, so its pool's scheduler orders it only against the
//! volumes of that shard, and the device serves the shards as they dispatch. With
//! `EngineConfig::shard_qos` each shard instead
//! - *reports*, with its budget demand (`budgets.rs`), per pool: the sum of the weights
//!   and of the reservations of its volumes that queued work in the interval while its
//!   scheduler held a backlog (work waiting for the device: the shard wants more than it
//!   gets), and the operations the device completed for it;
//! - *takes* a share of the device per pool from the driver's broker
//!   (`share_broker.rs`, `Control::SetDeviceShares`), with the rate its gate lets
//!   through: a token bucket in front of the scheduler, consulted by `Engine::pump` like
//!   a limit (the pool waits until the next token), in operations per second. A rate of
//!   0 is an open gate: the broker leaves the shard with the largest share open, and
//!   every shard when fewer than two have a backlog, so the device never idles on a share.
//!
//! Everything here is decided in engine time, so a run replays byte for byte.

pub mod state;

pub use state::{DeviceShare, PoolService};

impl crate::engine::Engine {
    /// Each pool's device share and gate in force on this shard.
    pub fn device_shares(&self) -> Vec<DeviceShare> {
        self.pools.iter().map(|p| p.share.share()).collect()
    }

    /// Times dispatch stopped at a pool's gate since start, per pool.
    pub fn device_gate_waits(&self) -> Vec<u64> {
        self.pools.iter().map(|p| p.share.gate_waits).collect()
    }

    /// Per pool, the service since the last report (the meters restart).
    pub(crate) fn pool_service(&mut self) -> Vec<PoolService> {
        let vols = &self.vols;
        let qos = |v: u32| {
            vols.get(v as usize)
                .filter(|vol| !vol.rec.deleted)
                .map(|vol| (vol.qos.weight, vol.qos.reservation_iops))
        };
        self.pools.iter_mut().map(|p| p.share.report(qos)).collect()
    }

    /// `Control::SetDeviceShares`: the driver's broker gives this shard its share of
    /// each pool's device. A gate that opened or widened lets waiting work go at once.
    pub(crate) fn set_device_shares(
        &mut self,
        now: u64,
        shares: Vec<DeviceShare>,
        out: &mut crate::types::Outputs,
    ) -> Result<(), crate::control::ControlError> {
        if shares.len() != self.pools.len() {
            return Err(crate::control::ControlError::Invalid(format!(
                "device shares for {} pools; this shard has {}",
                shares.len(),
                self.pools.len()
            )));
        }
        if let Some(s) = shares.iter().find(|s| s.share_ppm > 1_000_000) {
            return Err(crate::control::ControlError::Invalid(format!(
                "a device share of {} ppm, over the whole device",
                s.share_ppm
            )));
        }
        for (p, s) in shares.into_iter().enumerate() {
            if self.pools[p].share.share() == s {
                continue;
            }
            self.pools[p].share.set(now, s);
            // The pool may be waiting on the old gate (or a scheduler's own wait, which
            // it asks for again).
            self.pools[p].wait_until = None;
            if self.state == crate::engine::EngineState::Ready {
                self.pump(now, p, out);
            }
        }
        Ok(())
    }
}
