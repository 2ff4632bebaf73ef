//! Identifiers, requests, device operations and the engine's outputs.

use bytes::Bytes;
use serde::Serialize;

/// Index of a volume in the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct VolumeId(pub u32);

/// Index of a pool (one device or file) in the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct PoolId(pub u16);

/// Who issued a request within its volume, as Linux's per-process `io_context`. The
/// schedulers that share a disk between processes (`cfq`, `bfq`, `cats`) key their
/// synchronous queues, slices and anticipation on (volume, context); the volume stays
/// the unit of QoS (weights, reservations, limits). Other schedulers ignore it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IoContext {
    /// The volume's one shared context: a client that names no process (a vhost-user
    /// queue, a test harness).
    #[default]
    Volume,
    /// A process, thread or connection of the client: the simulator's SURGE processes,
    /// one NBD connection in `serve` (NBD carries no process id).
    Client(u32),
    /// The engine's own work for a volume or for the pool: commits, log appends,
    /// write-backs, cleaning, copies, startup I/O. No process waits on it block by
    /// block, so it is never anticipated.
    Engine,
}

/// Identifier of a device operation, chosen by the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpId(pub u64);

/// Errors reported to VM requests; the NBD layer maps them to wire errno values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Errno {
    /// A device failed.
    Io,
    /// Bad offset, length or request.
    Inval,
    /// Write past the end, or no space left in the pools.
    NoSpc,
    /// The volume is read-only or the engine is not accepting writes.
    Perm,
    /// The engine is shutting down or not started.
    Shutdown,
}

impl Errno {
    /// The Linux errno value (NBD uses these on the wire).
    pub fn code(self) -> u32 {
        match self {
            Errno::Perm => 1,
            Errno::Io => 5,
            Errno::Inval => 22,
            Errno::NoSpc => 28,
            Errno::Shutdown => 108,
        }
    }

    /// Of two errors of one operation's parts, the one to report: a device failure
    /// outranks running out of space (which a retry after freeing space can cure).
    pub fn worse(a: Option<Errno>, b: Option<Errno>) -> Option<Errno> {
        match (a, b) {
            (Some(Errno::NoSpc), Some(x)) | (Some(x), _) | (None, Some(x)) => Some(x),
            (None, None) => None,
        }
    }
}

/// What a VM asks of its disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReqKind {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
}

/// A request from a VM (or any client) to one volume.
#[derive(Clone, Debug)]
pub struct VmRequest {
    /// Chosen by the driver; echoed in the completion.
    pub id: u64,
    pub volume: VolumeId,
    pub kind: ReqKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// Force unit access: complete only once durable.
    pub fua: bool,
    /// WRITE_ZEROES must leave the range allocated (NBD_CMD_FLAG_NO_HOLE).
    pub no_hole: bool,
    /// Write data; `None` when the driver does not track data (timing simulation).
    pub payload: Option<Bytes>,
    /// The issuing process or connection ([`IoContext::Volume`] unless the driver
    /// knows one).
    pub context: IoContext,
}

impl VmRequest {
    pub fn new(
        id: u64,
        volume: VolumeId,
        kind: ReqKind,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Self {
        VmRequest {
            id,
            volume,
            kind,
            offset_bytes,
            len_bytes,
            fua: false,
            no_hole: false,
            payload: None,
            context: IoContext::Volume,
        }
    }
}

/// The answer to a [`VmRequest`].
#[derive(Clone, Debug)]
pub struct VmCompletion {
    pub id: u64,
    pub volume: VolumeId,
    pub kind: ReqKind,
    pub result: Result<(), Errno>,
    /// Read data (when the engine tracks data).
    pub data: Option<Bytes>,
}

/// Kind of a device operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DevKind {
    Read,
    Write,
    Flush,
    /// Make the range read as zeros and keep it allocated (`fallocate(ZERO_RANGE)` on
    /// files): a thick volume's promised space, NBD_CMD_FLAG_NO_HOLE.
    WriteZeroes,
    /// Make the range read as zeros and give its space back (`fallocate(PUNCH_HOLE)` on
    /// files; zeros written where the filesystem refuses): a thin volume's trimmed or
    /// zeroed part of a chunk that stays mapped.
    Punch,
    /// Advisory: the range is no longer needed and may read as anything
    /// (`fallocate(PUNCH_HOLE)` on files): space freed once its free is durable.
    Discard,
}

/// Why the engine issues an operation; used for accounting and by schedulers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IoClass {
    /// On behalf of a VM request.
    Foreground,
    /// Superblocks, volume table, journal, checkpoints.
    Metadata,
    /// Background tier migration between pools.
    Migration,
    /// Log segment cleaning.
    Cleaner,
}

/// The flush domain an operation belongs to (seed 001's vTag / hTag).
///
/// Data a volume writes carries that volume's tag; journal records, checkpoints and
/// other metadata shared by the engine carry the host tag. A device FLUSH carries the
/// tag of the flush domain that asked for it; an engine-wide flush (mount, checkpoint of
/// every volume, shutdown) carries the host tag and means "everything".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tag {
    #[default]
    Host,
    Volume(VolumeId),
}

impl Tag {
    /// The tag of an operation of `class` and `kind` working for `volume` (`None`:
    /// engine-wide work).
    pub fn for_op(kind: DevKind, class: IoClass, volume: Option<VolumeId>) -> Tag {
        match volume {
            Some(v) if class != IoClass::Metadata || kind == DevKind::Flush => Tag::Volume(v),
            _ => Tag::Host,
        }
    }

    /// The one-number form devices see: 0 for the host, volume index + 1 otherwise (the
    /// paper's prototype also reserves the all-zero tag for the host).
    pub fn code(self) -> u32 {
        match self {
            Tag::Host => 0,
            Tag::Volume(v) => v.0.saturating_add(1),
        }
    }
}

/// An operation the driver must perform on a pool's device.
#[derive(Clone, Debug)]
pub struct DeviceOp {
    pub id: OpId,
    pub pool: PoolId,
    pub kind: DevKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub fua: bool,
    /// Data to write (writes always carry it when the engine tracks data, and metadata
    /// writes always carry it).
    pub payload: Option<Bytes>,
    pub class: IoClass,
    /// The volume the operation works for, if any (schedulers may use it).
    pub volume: Option<VolumeId>,
    /// Who it is done for within the volume: the request's issuer, or the engine.
    pub context: IoContext,
    /// Flush domain: what the operation's data belongs to, or which domain a FLUSH
    /// makes durable.
    pub tag: Tag,
}

/// The driver's report that a device operation finished.
#[derive(Clone, Debug)]
pub struct DeviceCompletion {
    pub id: OpId,
    pub result: Result<(), Errno>,
    /// Data read (reads only; `None` in timing simulation).
    pub data: Option<Bytes>,
}

/// Something worth logging.
#[derive(Clone, Debug, PartialEq)]
pub enum EngineEvent {
    Formatted {
        pools: usize,
        volumes: usize,
    },
    Recovered {
        volume: String,
        records_replayed: u64,
        checkpoint_seq: u64,
        mapped_chunks: u64,
        /// `cache` placement: chunks cached on the fast pool, all dirty after a mount.
        cached_dirty_chunks: u64,
    },
    VolumeCreated {
        volume: String,
    },
    /// A volume grew (`Control::ResizeVolume`, or a bigger configured size at mount); the
    /// new size is durable.
    VolumeResized {
        volume: String,
        size_bytes: u64,
    },
    /// A volume was deleted (`Control::DeleteVolume`): its tombstone is durable and its
    /// space is given back; requests to it fail from now on.
    VolumeDeleted {
        volume: String,
    },
    Ready,
    Stopped,
    Failed {
        reason: String,
    },
    Warning {
        message: String,
    },
    /// A device operation failed (drivers log it, rate-limited: a failing disk must not
    /// flood the log).
    DeviceError {
        pool: String,
        /// The volume it served, if any (journal and engine-wide work have none).
        volume: Option<String>,
        kind: DevKind,
        offset_bytes: u64,
        len_bytes: u64,
        errno: Errno,
    },
    /// A commit round failed: its FLUSH/FUA waiters got `errno`, its records stay
    /// pending for the next round.
    CommitFailed {
        volume: String,
        errno: Errno,
    },
    /// A migration job changed phase (`MigrationPhase::name`); `paused` while the volume's
    /// requests wait for the pivot. Drivers log it (the server with a wall-clock time, so a
    /// client's stall can be set against the pause).
    MigrationPhase {
        volume: String,
        phase: &'static str,
        paused: bool,
    },
    /// This shard runs low on chunks data may take in `pool` (`loan.rs`): the driver asks
    /// the shard with the most to lend some (`Control::Lend`).
    SpaceLow {
        pool: PoolId,
        available_chunks: u64,
    },
    /// A run of this shard's chunks is durably recorded lent to shard `to` and out of its
    /// allocator: the driver hands it to `to` (`Control::Borrow`).
    Lent {
        pool: PoolId,
        to: u16,
        first_chunk: u64,
        chunks: u64,
    },
    /// A run of shard `from`'s chunks is durably this shard's and in its allocator.
    Borrowed {
        pool: PoolId,
        from: u16,
        first_chunk: u64,
        chunks: u64,
    },
    /// A run borrowed from shard `to` is durably given back (`give_back.rs`): out of this
    /// shard's records and allocator; the driver returns it to `to` (`Control::ReturnLoan`).
    GaveBack {
        pool: PoolId,
        to: u16,
        first_chunk: u64,
        chunks: u64,
    },
    /// A run lent to shard `to`, which never recorded it, is this shard's again.
    LoanReturned {
        pool: PoolId,
        to: u16,
        first_chunk: u64,
        chunks: u64,
    },
    /// What this shard used of its budgets since its last report (`budgets.rs`), for the
    /// driver's `BudgetBroker`; said only with `EngineConfig::budget_reports`.
    BudgetDemand {
        demand: crate::budgets::state::BudgetDemand,
    },
    /// `Control::SetBudgets { seq }` (and every one before it) is in force and whatever
    /// it took away is free: the broker may give it to another shard.
    BudgetsSet {
        seq: u64,
    },
}

/// Everything one engine call asks the driver to do.
#[derive(Debug, Default)]
pub struct Outputs {
    pub completions: Vec<VmCompletion>,
    pub ops: Vec<DeviceOp>,
    pub events: Vec<EngineEvent>,
}

impl Outputs {
    pub fn clear(&mut self) {
        self.completions.clear();
        self.ops.clear();
        self.events.clear();
    }
    pub fn is_empty(&self) -> bool {
        self.completions.is_empty() && self.ops.is_empty() && self.events.is_empty()
    }
}
