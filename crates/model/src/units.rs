//! Units and conversions shared by the models.

pub const SECTOR_BYTES: u64 = 512;
pub const KIB: u64 = 1024;
pub const MIB: u64 = 1024 * KIB;
pub const GIB: u64 = 1024 * MIB;
pub const NS_PER_US: u64 = 1_000;
pub const NS_PER_MS: u64 = 1_000_000;
pub const NS_PER_S: u64 = 1_000_000_000;

/// Time to move `bytes` at `bytes_per_sec`, rounded up to a whole nanosecond.
#[inline]
pub fn transfer_ns(bytes: u64, bytes_per_sec: u64) -> u64 {
    if bytes_per_sec == 0 {
        return 0;
    }
    let num = bytes as u128 * NS_PER_S as u128;
    num.div_ceil(bytes_per_sec as u128) as u64
}
