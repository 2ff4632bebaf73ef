//! `Engine::control`: each admin command to the subsystem that owns it. Apart from the
//! command types in `control.rs`, which every subsystem names (issue 11's import cycle).

use super::{Control, ControlError};
use crate::engine::Engine;
use crate::types::Outputs;

impl Engine {
    /// Carry out an admin command at `now`; anything it needs done is appended to `out`.
    pub fn control(&mut self, now: u64, c: Control, out: &mut Outputs) -> Result<(), ControlError> {
        match c {
            Control::SetQos { volume, qos } => {
                if self.volume_size(volume).is_none() {
                    return Err(ControlError::UnknownVolume(volume));
                }
                if !(1..=1000).contains(&qos.weight) {
                    return Err(ControlError::Invalid(format!(
                        "weight {} is outside 1..=1000",
                        qos.weight
                    )));
                }
                if qos.limit_iops != 0 && qos.reservation_iops > qos.limit_iops {
                    return Err(ControlError::Invalid(format!(
                        "reservation {} IOPS exceeds the limit {} IOPS",
                        qos.reservation_iops, qos.limit_iops
                    )));
                }
                self.set_volume_qos(volume, qos);
                Ok(())
            }
            Control::StartMigration { volume, params } => {
                self.refuse_same_pool(volume, params.to)?;
                self.try_start_migration(now, volume, params, out)
                    .map(|_| ())
            }
            Control::CancelMigration { volume } => self.try_cancel_migration(now, volume, out),
            Control::SetMigrationRate {
                volume,
                rate_bytes_per_s,
            } => self.try_set_migration_rate(now, volume, rate_bytes_per_s, out),
            Control::CreateVolume { config } => self.try_create_volume(now, config, out),
            Control::ResizeVolume { volume, size_bytes } => {
                self.try_resize_volume(now, volume, size_bytes, out)
            }
            Control::DeleteVolume { volume } => self.try_delete_volume(now, volume, out),
            Control::Lend { pool, to, chunks } => self.try_lend(now, pool, to, chunks, out),
            Control::Borrow {
                pool,
                from,
                first_chunk,
                chunks,
            } => self.try_borrow(now, pool, from, first_chunk, chunks, out),
            Control::ReturnLoan {
                pool,
                to,
                first_chunk,
                chunks,
            } => self.try_return_loan(now, pool, to, first_chunk, chunks, out),
            Control::LoanDenied { pool } => self.loan_denied(now, pool, out),
            Control::GiveBackNow { pool } => self.give_back_now(now, pool, out),
            Control::SetBudgets { seq, budgets } => self.set_budgets(now, seq, budgets, out),
            Control::SetDeviceShares { shares } => self.set_device_shares(now, shares, out),
        }
    }
}
