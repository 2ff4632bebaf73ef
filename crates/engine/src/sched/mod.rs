//! Per-device request schedulers, shaped like the kernel's elevator operations:
//! `add` a request, `dispatch` the next one, learn that one `completed`.

mod fifo;

pub use fifo::Fifo;

use serde::Serialize;

use crate::types::IoClass;

/// A queued device operation as a scheduler sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueuedOp {
    /// Engine-internal handle; schedulers only carry it.
    pub key: usize,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub is_write: bool,
    pub class: IoClass,
    /// Volume index, or u32::MAX for engine-wide work.
    pub volume: u32,
    pub arrival_ns: u64,
}

/// What a scheduler wants the device to do next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dispatch {
    Op(QueuedOp),
    /// Nothing to do.
    Idle,
    /// Keep the device idle until this time, then ask again (e.g. anticipation).
    WaitUntil(u64),
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
}

/// The schedulers that exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SchedulerKind {
    Fifo,
}

impl SchedulerKind {
    pub fn parse(s: &str) -> Option<SchedulerKind> {
        match s {
            "fifo" | "noop" | "none" => Some(SchedulerKind::Fifo),
            _ => None,
        }
    }
    pub fn names() -> &'static [&'static str] {
        &["fifo"]
    }
    pub fn build(self) -> Box<dyn Scheduler> {
        match self {
            SchedulerKind::Fifo => Box::new(Fifo::default()),
        }
    }
}
