//! Workloads for the simulator: block traces and synthetic generators.
//!
//! Traces are parsed once into memory ([`Trace`]); a [`Workload`] hands requests to the
//! simulator one at a time, either with arrival times (timed replay) or as fast as the
//! system completes them (closed loop).

pub mod apps;
pub mod bench;
#[cfg(test)]
mod closed_loop;
pub mod commit;
pub mod error;
pub mod r#gen;
pub mod host;
pub mod skew;
pub mod spc;
pub mod surge;
pub mod trace;

pub use apps::{AppJob, AppKind, AppWorkload};
pub use bench::{BenchJob, BenchKind, BenchWorkload};
pub use commit::{GuestCommit, HostJournal};
pub use error::WorkloadError;
pub use r#gen::{FioJob, FioRw, FioWorkload};
pub use host::{HostPath, HostProfile, PageCache};
pub use skew::Distribution;
pub use spc::{SpcJob, SpcKind, SpcWorkload};
pub use surge::{SleepMode, SurgeConfig, SurgeWorkload};
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
    /// The process of the workload that issues it (the engine's I/O context, which
    /// cfq, bfq and cats key their queues on); `None`: the VM names no process.
    pub context: Option<u32>,
}

/// A source of requests for one VM.
pub trait Workload {
    /// The next request, or `None` when the workload is finished. `now_ns` is the
    /// simulated time, for workloads that stop after a run time.
    fn next(&mut self, now_ns: u64) -> Option<WlRequest>;
    /// Requests the simulator keeps outstanding (closed loop); timed replay ignores it.
    fn depth(&self) -> u32;
    /// A closed loop whose requests carry a not-before time in `at_ns` (a process that
    /// sleeps between requests): the driver holds such a request, its slot taken, until
    /// then. Other closed loops issue at once whatever `at_ns` says.
    fn paced(&self) -> bool {
        false
    }
    /// The request `index` (0-based, in the order `next` returned them) completed at
    /// `now_ns`. Workloads whose processes wait for their own requests need it.
    fn completed(&mut self, _index: u64, _now_ns: u64) {}
    /// Whether `next` has a request now. A closed loop whose processes all wait (for a
    /// commit another request is writing) says no, and is asked again after the next
    /// completion; `next` returning None still means the workload is finished.
    fn ready(&self, _now_ns: u64) -> bool {
        true
    }
    /// Application operations finished so far (loops, transactions), for workloads that
    /// have them: requests per operation may differ between runs (group commits).
    fn app_ops(&self) -> Option<u64> {
        None
    }
}

/// A boxed workload is one (so wrappers such as [`GuestCommit`] take any of them).
impl<W: Workload + ?Sized> Workload for Box<W> {
    fn next(&mut self, now_ns: u64) -> Option<WlRequest> {
        (**self).next(now_ns)
    }
    fn depth(&self) -> u32 {
        (**self).depth()
    }
    fn paced(&self) -> bool {
        (**self).paced()
    }
    fn completed(&mut self, index: u64, now_ns: u64) {
        (**self).completed(index, now_ns)
    }
    fn ready(&self, now_ns: u64) -> bool {
        (**self).ready(now_ns)
    }
    fn app_ops(&self) -> Option<u64> {
        (**self).app_ops()
    }
}
