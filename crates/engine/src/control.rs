//! The engine's control input: admin commands to a running engine, beside requests,
//! device completions and time. Each command says whether it changes durable state; those
//! that do are journaled before they take effect.
//!
//! The enum is open: a job (live storage migration, say) adds its start and cancel
//! commands here and handles them in [`Engine::control`].

use crate::engine::Engine;
use crate::sched::VolumeQos;
use crate::types::{Outputs, VolumeId};

/// An admin command.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Control {
    /// Change a volume's QoS on every pool's scheduler, from the next dispatch on. QoS is
    /// configuration, not durable state: it is not journaled, and the configured QoS
    /// applies again at the next start.
    SetQos { volume: VolumeId, qos: VolumeQos },
}

/// Why a command was refused (nothing changed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlError {
    UnknownVolume(VolumeId),
    /// The value is out of range; the text says which and why.
    Invalid(String),
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::UnknownVolume(v) => write!(f, "no volume with index {}", v.0),
            ControlError::Invalid(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ControlError {}

impl Engine {
    /// Carry out an admin command at `now`; anything it needs done is appended to `out`.
    pub fn control(
        &mut self,
        _now: u64,
        c: Control,
        _out: &mut Outputs,
    ) -> Result<(), ControlError> {
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
        }
    }
}
