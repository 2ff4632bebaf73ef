//! The simulator: a discrete-event loop with a virtual clock that drives the tiervisor
//! engine with device timing models and workloads. Same scenario and seed, same result,
//! byte for byte.

pub mod driver;
pub mod dst;
mod migration_watch;
pub mod oracle;
pub mod oracle_dynamic;
pub mod report;
pub mod reproduce;
pub mod scenario;
pub mod shards;
mod workload_build;

pub use driver::{Progress, RunOptions, Simulation};
pub use report::{MigrationReport, SimReport};
pub use scenario::{Scenario, ScenarioError, WorkloadSpec};
