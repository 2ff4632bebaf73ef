//! Where the on-disk regions of a pool begin: the constants the configuration and the
//! shard plan check sizes against, as a leaf apart from the formats (issue 11's import
//! cycle).

pub const BLOCK_BYTES: u64 = 4096;
pub const SUPERBLOCK_OFFSET: u64 = 0;
/// A second copy, written when a pool is formatted and never again: it stands in if the
/// primary is torn while a format marks it complete.
pub const SUPERBLOCK_BACKUP_OFFSET: u64 = BLOCK_BYTES;
pub const VOLTAB_SLOT_BYTES: u64 = 64 * 1024;
pub const VOLTAB_OFFSETS: [u64; 2] = [64 * 1024, 128 * 1024];
pub const DATA_START_BYTES: u64 = 1 << 20;
