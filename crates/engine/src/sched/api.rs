//! What a scheduler is to the engine: the operations it orders, its answer, a volume's
//! QoS, the trait and its registry entry. A leaf the schedulers, the registry and the
//! spec name without naming each other (issue 11's import cycle).

use super::params::Params;
use crate::inject::InjectedBug;
use crate::types::{IoClass, IoContext};

/// A queued device operation as a scheduler sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuedOp {
    /// Engine-internal handle; schedulers only carry it.
    pub key: usize,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub is_write: bool,
    pub class: IoClass,
    /// Volume index, or [`NO_VOLUME`] for engine-wide work.
    pub volume: u32,
    /// The issuing process or connection within the volume, or the engine's own work.
    pub context: IoContext,
    pub arrival_ns: u64,
}

/// `QueuedOp::volume` of engine-wide work (startup I/O, discards of freed space).
pub const NO_VOLUME: u32 = u32::MAX;

/// What a scheduler wants the device to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dispatch {
    Op(QueuedOp),
    /// Nothing to do.
    Idle,
    /// Keep the device idle until this time, then ask again (e.g. anticipation).
    WaitUntil(u64),
}

/// A volume's quality-of-service settings, for schedulers that honour them (mClock,
/// BFQ). Zero means "not set" for reservation and limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct VolumeQos {
    /// IOPS the volume is guaranteed while it has requests queued.
    pub reservation_iops: u32,
    /// IOPS the volume never exceeds (0: no limit).
    pub limit_iops: u32,
    /// Share of the remaining capacity, 1..=1000.
    pub weight: u32,
}

impl Default for VolumeQos {
    fn default() -> Self {
        VolumeQos {
            reservation_iops: 0,
            limit_iops: 0,
            weight: 100,
        }
    }
}

pub trait Scheduler: Send {
    fn name(&self) -> &'static str;
    fn add(&mut self, now_ns: u64, op: QueuedOp);
    fn dispatch(&mut self, now_ns: u64) -> Dispatch;
    fn completed(&mut self, now_ns: u64, op: &QueuedOp);
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A volume's QoS changed (or was set at start). Schedulers without per-volume
    /// shares ignore it.
    fn set_volume_qos(&mut self, _volume: u32, _qos: VolumeQos) {}
    /// Whether it shares the device between foreground and background work itself
    /// (tier migration, unhurried cleaning). If not, `Classes` (`classes.rs`) holds
    /// background work until the scheduler is idle or the work has waited
    /// `BACKGROUND_MAX_WAIT_NS`.
    fn schedules_background(&self) -> bool {
        false
    }
    /// Take an injected defect (DST and tests only: reached through
    /// `Engine::inject_bug`, which exists only with the `inject-bugs` feature).
    fn inject_bug(&mut self, _bug: InjectedBug) {}
}

/// One entry of the scheduler registry.
pub struct Registration {
    pub name: &'static str,
    /// Other names accepted for it (the kernel's, say).
    pub aliases: &'static [&'static str],
    /// One line for `--help` and error messages.
    pub about: &'static str,
    /// Build from parameters; every key the scheduler knows is taken from `params`, and
    /// keys left over are reported as unknown by the caller.
    pub build: fn(&mut Params) -> Result<Box<dyn Scheduler>, String>,
}
