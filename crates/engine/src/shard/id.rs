//! A shard's identity, which the configuration and the on-disk formats name, as a leaf
//! apart from the shard plan (issue 11's import cycle).

/// Which shard an engine is, of how many. `count == 1` is an unsharded system.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShardId {
    pub index: u16,
    pub count: u16,
}

impl Default for ShardId {
    fn default() -> Self {
        ShardId { index: 0, count: 1 }
    }
}

/// Most shards a system may have (a slice per shard per pool, each with its own
/// superblock and, on the metadata pool, its own volume table and journals).
pub const MAX_SHARDS: u16 = 64;
