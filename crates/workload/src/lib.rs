//! Workloads for the simulator: block traces and synthetic generators.
//!
//! Traces are parsed once into memory ([`Trace`]); a [`Workload`] hands requests to the
//! simulator one at a time, either with arrival times (timed replay) or as fast as the
//! system completes them (closed loop).

pub mod error;
pub mod r#gen;
pub mod trace;

pub use error::WorkloadError;
pub use r#gen::{FioJob, FioRw, FioWorkload};
pub use trace::{ReplayMode, Trace, TraceFormat, TraceInfo, TraceOp, TraceRecord, TraceWorkload};

/// What a workload asks of its volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WlKind {
    Read,
    Write,
    Flush,
}

/// One request from a workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WlRequest {
    pub kind: WlKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// When the request arrives (timed replay); `None`: as soon as a slot is free.
    pub at_ns: Option<u64>,
}

/// A source of requests for one VM.
pub trait Workload {
    /// The next request, or `None` when the workload is finished. `now_ns` is the
    /// simulated time, for workloads that stop after a run time.
    fn next(&mut self, now_ns: u64) -> Option<WlRequest>;
    /// Requests the simulator keeps outstanding (closed loop); timed replay ignores it.
    fn depth(&self) -> u32;
}
