//! The startup state machine's state (operations in flight and to retry, what it has
//! read so far), apart from its engine glue in `mount/*.rs`, so engine.rs holds it without
//! the glue (issue 11's import cycle).

use bytes::Bytes;

use crate::layout::JournalHeader;
use crate::types::{DevKind, PoolId};

pub(crate) const TAG_WRITE: u32 = 0;
pub(crate) const TAG_SB: u32 = 1 << 24;
pub(crate) const TAG_VT: u32 = 2 << 24;
pub(crate) const TAG_JR: u32 = 3 << 24;
pub(crate) const TAG_CK: u32 = 4 << 24;
/// Zeroing (and so allocating) a new thick volume's home region; the index is the volume's.
pub(crate) const TAG_THICK: u32 = 5 << 24;
pub(crate) const TAG_INDEX: u32 = (1 << 24) - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Mount: new thick volumes' home regions are zeroed (so allocated) before the volume
    /// table records them, so a region that cannot be allocated leaves nothing behind.
    Allocating,
    Writing,
    /// Metadata written; flushing every pool so it is durable before we say ready.
    Flushing,
    /// Format: the metadata pool's superblock, written last, completes the format.
    CommitMeta,
    /// Format: the other pools' superblocks marked complete.
    CommitOthers,
    Superblocks,
    VolumeTable,
    Journals,
    Checkpoints,
}

#[derive(Default)]
pub(crate) struct ChainRead {
    pub(crate) next: Option<(PoolId, u64)>,
    pub(crate) index: u32,
    pub(crate) payload: Vec<u8>,
    pub(crate) chunks: Vec<(PoolId, u64)>,
}

/// A startup operation, kept so it can be retried.
pub(crate) struct StartupOp {
    pub(crate) pool: PoolId,
    pub(crate) kind: DevKind,
    pub(crate) off: u64,
    pub(crate) len: u64,
    pub(crate) payload: Option<Bytes>,
    pub(crate) tag: u32,
    pub(crate) attempts: u32,
}

/// Attempts per startup operation before the format or mount fails.
pub(crate) const STARTUP_ATTEMPTS: u32 = 4;

pub(crate) struct Startup {
    pub(crate) retry: std::collections::BTreeMap<usize, StartupOp>,
    pub(crate) phase: Phase,
    pub(crate) outstanding: u32,
    pub(crate) error: Option<String>,
    pub(crate) formatting: bool,
    /// Started with [`StartMode::Mount`]: blank pools are refused, not formatted.
    pub(crate) mount_only: bool,
    pub(crate) superblocks: Vec<Option<Bytes>>,
    pub(crate) voltab: Option<Bytes>,
    pub(crate) regions: Vec<Option<Bytes>>,
    pub(crate) headers: Vec<JournalHeader>,
    pub(crate) chains: Vec<ChainRead>,
    /// Mount: the volumes the configuration adds (indexes into `vols`).
    pub(crate) created: Vec<usize>,
    /// Operations that failed for space, waiting for the next attempt (`space.rs`).
    pub(crate) space: SpaceWait,
}

#[derive(Default)]
pub(crate) struct SpaceWait {
    pub(crate) parked: Vec<StartupOp>,
    pub(crate) retry_at: Option<u64>,
    pub(crate) backoff_ns: u64,
    /// A spell is on: warned, and not yet over (an operation of it succeeded).
    pub(crate) in_spell: bool,
    /// Attempts that failed for space, over the whole start.
    pub(crate) failures: u64,
}

impl SpaceWait {
    pub(crate) fn retry_at(&self) -> Option<u64> {
        self.retry_at
    }
}
