//! Chunk copies in flight and what each is for: plain data engine.rs holds, apart from the
//! copy primitive's glue in `copy.rs` (issue 11's import cycle).

use crate::types::PoolId;

/// Who a copy works for; its completion is handed back there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyFor {
    /// A tier move of chunk `chunk` of volume `vol` (see `tiering.rs`).
    TierMove {
        vol: u32,
        chunk: u64,
    },
    /// A piece of the live storage migration of volume `vol`'s chunk `chunk`.
    Migration {
        vol: u32,
        chunk: u64,
    },
    /// `cache` placement: a fill (slow -> fast) or a writeback (fast -> slow) of a chunk.
    CacheFill {
        vol: u32,
        chunk: u64,
    },
    CacheClean {
        vol: u32,
        chunk: u64,
    },
    /// A live migration's write-back of a logged range into its home chunk.
    LogDrain {
        vol: u32,
        chunk: u64,
    },
}

impl CopyFor {
    pub(crate) fn vol(self) -> u32 {
        match self {
            CopyFor::TierMove { vol, .. }
            | CopyFor::Migration { vol, .. }
            | CopyFor::CacheFill { vol, .. }
            | CopyFor::CacheClean { vol, .. }
            | CopyFor::LogDrain { vol, .. } => vol,
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Copy {
    pub for_: CopyFor,
    pub dst: (PoolId, u64),
    pub len_bytes: u64,
    /// The read is done and the write is in flight.
    pub writing: bool,
}
