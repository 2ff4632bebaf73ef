//! The tiervisor engine.
//!
//! A deterministic, single-threaded state machine that decides where every byte of every
//! volume lives and how every request is served. It performs no I/O, reads no clock and
//! starts no threads: a driver feeds it requests, device completions and the time, and
//! carries out the device operations it asks for. Two drivers exist: the simulator
//! (virtual clock, device models) and the server (NBD, real files, real clock).

mod alloc;
mod bucket;
pub mod budget_broker;
pub mod budgets;
pub mod cache;
pub mod cache_writeback;
pub mod chunkmap;
mod codec;
mod commit;
pub mod config;
mod control;
mod create;
mod delete;
pub mod device_share;
mod devop;
mod engine;
pub mod extents;
mod give_back;
pub mod host;
pub mod inject;
mod invariants;
mod io;
pub mod jobs;
pub mod journal;
pub mod layout;
pub mod loan;
pub mod loan_broker;
pub mod loan_wait;
mod log;
pub mod monitor;
mod mount;
pub mod overlay;
pub mod promo;
mod reclaim;
mod report;
mod resize;
pub mod sched;
pub mod shard;
pub mod share_broker;
pub mod stats;
pub mod status;
mod stopmark;
pub mod throttle;
mod tier_directed;
mod tier_home;
mod tier_moves;
mod tiering;
pub mod types;
mod voltab;
mod volume;
pub mod wbuf;

pub use config::{
    CachePolicy, CleanerPolicy, ConfigError, EngineConfig, LogConfig, LogMode, Medium, Placement,
    PoolConfig, Provisioning, TieringConfig, VolumeConfig,
};
pub use control::{Control, ControlError};
pub use engine::{Engine, EngineState, StartMode};
pub use inject::InjectedBug;
pub use report::{CacheReport, EngineReport, KindReport, LogReport, PoolReport, VolumeReport};
pub use sched::{SchedSpec, VolumeQos};
pub use status::StatusExtent;
pub use throttle::{ThrottleConfig, ThrottleReport};
pub use types::*;
