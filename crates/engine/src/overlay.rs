//! Sub-chunk overrides of a volume's content mapping: ranges that read as zeros, and
//! (with the log-structured write path) ranges whose newest data lives in a log segment.

use crate::extents::ExtentValue;
use crate::types::PoolId;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overlay {
    /// Reads as zeros (trimmed, or written with zeros).
    Zero,
    /// The data is at `dev_offset` on `pool`.
    Log { pool: PoolId, dev_offset: u64 },
    /// A live migration wrote the range's newest data to its destination, at `dev_offset`
    /// of `pool` (the paper's bitmap; `jobs/migrate`).
    Moved { pool: PoolId, dev_offset: u64 },
}

impl ExtentValue for Overlay {
    #[inline]
    fn advance(self, by: u64) -> Self {
        match self {
            Overlay::Zero => Overlay::Zero,
            Overlay::Log { pool, dev_offset } => Overlay::Log {
                pool,
                dev_offset: dev_offset + by,
            },
            Overlay::Moved { pool, dev_offset } => Overlay::Moved {
                pool,
                dev_offset: dev_offset + by,
            },
        }
    }
}
