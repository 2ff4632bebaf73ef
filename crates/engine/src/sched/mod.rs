//! Per-device request schedulers, shaped like the kernel's elevator operations:
//! `add` a request, `dispatch` the next one, learn that one `completed`.
//!
//! A scheduler is chosen per pool by a [`SchedSpec`]: a name plus parameters, parsed once
//! by the configuration layer and built here through the [`SCHEDULERS`] registry. Adding a
//! scheduler is one new module plus one line in that table.

mod bfq;
mod cats;
mod cats_table;
mod cfq;
mod classes;
mod deadline;
mod fifo;
mod flowq;
mod kyber;
mod mclock;
mod sorted;
mod spec;

pub(crate) mod api;
mod params;
mod registry;

pub use api::{Dispatch, NO_VOLUME, QueuedOp, Registration, Scheduler, VolumeQos};
pub use bfq::{Bfq, BfqParams};
pub(crate) use cats::ShadowCache;
pub use cats::{Cats, CatsParams};
pub use cfq::{Cfq, CfqParams};
pub use classes::{BACKGROUND_MAX_WAIT_NS, Classes, Lane};
pub use deadline::{Deadline, DeadlineParams};
pub use fifo::Fifo;
pub use kyber::{Kyber, KyberParams};
pub use mclock::MClock;
pub use params::{ParamValue, Params, SpecError};
pub use registry::{SCHEDULERS, lookup, names};
pub use spec::SchedSpec;
