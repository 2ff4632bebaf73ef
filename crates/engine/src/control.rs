//! The engine's control input: admin commands to a running engine, beside requests,
//! device completions and time. Each command says whether it changes durable state; those
//! that do are journaled before they take effect.
//!
//! The enum is open: a job adds its commands here and routes them in
//! `Engine::control` (`control/route.rs`) to its own mechanism (live storage migration: `jobs/migrate`).

mod route;

use crate::config::VolumeConfig;
use crate::jobs::migrate::params::MigrationParams;
use crate::sched::VolumeQos;
use crate::types::{PoolId, VolumeId};

/// An admin command.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Control {
    /// Change a volume's QoS on every pool's scheduler, from the next dispatch on. QoS is
    /// configuration, not durable state: it is not journaled, and the configured QoS
    /// applies again at the next start.
    SetQos { volume: VolumeId, qos: VolumeQos },
    /// Start moving a thin, pinned volume to `params.to` with `params.scheme` (seed 004).
    /// The command itself is not journaled: the job's durable state is the volume's
    /// `Moved` overlay entries (LR, SLR) and, at the pivot, its chunk map and the volume
    /// table; a crash before the pivot leaves the source authoritative, and starting the
    /// same migration again resumes from what the entries hold.
    StartMigration {
        volume: VolumeId,
        params: MigrationParams,
    },
    /// Cancel a running migration: the source stays (or becomes again) authoritative.
    CancelMigration { volume: VolumeId },
    /// Change a running migration's copy rate cap.
    SetMigrationRate {
        volume: VolumeId,
        rate_bytes_per_s: u64,
    },
    /// Create a volume (`create.rs`): its journal header (and a thick volume's zeroed
    /// home region) are written, then the volume table naming it;
    /// `EngineEvent::VolumeCreated` says when it is durable and usable.
    CreateVolume { config: VolumeConfig },
    /// Grow a thin volume (`resize.rs`): the volume table with the new size is written,
    /// then the volume grows; `EngineEvent::VolumeResized` says when it is durable.
    ResizeVolume { volume: VolumeId, size_bytes: u64 },
    /// Delete a volume (`delete.rs`): it stops taking requests (they fail), waits until
    /// nothing of it is in flight, then the volume table with its tombstone is written;
    /// `EngineEvent::VolumeDeleted` says when that is durable and its space given back.
    /// Refused while it migrates, is resized, or another volume is created or deleted.
    DeleteVolume { volume: VolumeId },
    /// Lend shard `to` a run of up to `chunks` free chunks of `pool` (`loan.rs`): they
    /// leave the allocator and the volume table records the loan; `EngineEvent::Lent`
    /// says when that is durable and which run it is. Sent by drivers, not operators.
    Lend { pool: PoolId, to: u16, chunks: u64 },
    /// Take the run shard `from` lent: recorded in the volume table, then added to the
    /// allocator (`EngineEvent::Borrowed`).
    Borrow {
        pool: PoolId,
        from: u16,
        first_chunk: u64,
        chunks: u64,
    },
    /// The answer to this shard's `EngineEvent::SpaceLow` when no loan comes: no shard
    /// has room to spare in `pool` (or the loan failed). Writes waiting for the answer
    /// run again and fail with ENOSPC if they still find no room (`loan_wait.rs`).
    LoanDenied { pool: PoolId },
    /// Take back a run lent to shard `to` that `to` never recorded (a crash between the
    /// two steps): the record goes, then the chunks are free (`EngineEvent::LoanReturned`).
    ReturnLoan {
        pool: PoolId,
        to: u16,
        first_chunk: u64,
        chunks: u64,
    },
    /// A hint from the driver's `LoanBroker`: another shard was refused space in `pool`
    /// (`give_back.rs`). If this shard's last borrowed run of `pool` may go back (wholly
    /// free, the shard keeps its margin), it goes back now, without the rest of the hold;
    /// every step of a give-back stays. Otherwise nothing happens: the engine decides,
    /// and a hint is never refused (short of an unknown pool).
    GiveBackNow { pool: PoolId },
    /// New budgets for this shard from the driver's `BudgetBroker` (`budgets.rs`): in
    /// force at once; `EngineEvent::BudgetsSet { seq }` once any shrink has drained.
    /// Configuration, not durable state: a restart begins at `ShardPlan`'s split.
    SetBudgets {
        seq: u64,
        budgets: crate::budgets::state::ShardBudgets,
    },
    /// This shard's share of each pool's device from the driver's broker
    /// (`share_broker.rs`), one per pool: in force at the next dispatch. Configuration,
    /// not durable state: a restart begins with open gates.
    SetDeviceShares {
        shares: Vec<crate::device_share::state::DeviceShare>,
    },
}

/// Why a command was refused (nothing changed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlError {
    UnknownVolume(VolumeId),
    UnknownPool(PoolId),
    /// The engine is starting or stopping.
    NotReady,
    /// The volume already lives on the pool it is asked to move to.
    SamePool {
        volume: String,
        pool: String,
    },
    AlreadyMigrating {
        volume: String,
    },
    NotMigrating {
        volume: String,
    },
    /// The volume cannot do this (thick, tiered, logged...); the text says why.
    Unsupported(String),
    /// Something in flight prevents it now; the text says what (try again later).
    Busy(String),
    /// The destination has too few free chunks for the volume's data.
    NoSpace {
        pool: String,
        free_chunks: u64,
        needed_chunks: u64,
    },
    /// The destination has no contiguous run of free chunks as long as the volume (a
    /// thick volume's home region); the longest there is is named.
    NoContiguousSpace {
        pool: String,
        largest_free_run_chunks: u64,
        needed_chunks: u64,
    },
    /// The command can no longer take effect (a pivot being made durable, say).
    TooLate(String),
    /// The value is out of range; the text says which and why.
    Invalid(String),
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::UnknownVolume(v) => write!(f, "no volume with index {}", v.0),
            ControlError::UnknownPool(p) => write!(f, "no pool with index {}", p.0),
            ControlError::NotReady => f.write_str("the engine is not ready"),
            ControlError::SamePool { volume, pool } => {
                write!(f, "volume {volume} already lives on pool {pool}")
            }
            ControlError::AlreadyMigrating { volume } => {
                write!(f, "volume {volume} is already migrating")
            }
            ControlError::NotMigrating { volume } => write!(f, "volume {volume} is not migrating"),
            ControlError::NoSpace {
                pool,
                free_chunks,
                needed_chunks,
            } => write!(
                f,
                "pool {pool} has {free_chunks} free chunks; the volume needs {needed_chunks}"
            ),
            ControlError::NoContiguousSpace {
                pool,
                largest_free_run_chunks,
                needed_chunks,
            } => write!(
                f,
                "pool {pool} has no run of {needed_chunks} contiguous free chunks for the volume's home region (the longest is {largest_free_run_chunks})"
            ),
            ControlError::Unsupported(why)
            | ControlError::Busy(why)
            | ControlError::TooLate(why)
            | ControlError::Invalid(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for ControlError {}
