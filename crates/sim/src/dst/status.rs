//! Block status under DST: whatever `Engine::block_status` reports as zero (or as a hole)
//! must be something a read issued at the same moment may return as zeros.

use tiervisor_engine::{Engine, VolumeId};

use super::reference::RefDisk;

const SECTOR: u64 = 512;

/// Check the engine's answer for sectors `[first, first + n)` of a volume at time `t`.
/// `vol` is the volume's index in `engine` (its shard's), `disk.vol` the system's.
pub fn check(
    engine: &Engine,
    vol: VolumeId,
    disk: &RefDisk,
    first: u64,
    n: u64,
    t: u64,
) -> Result<(), String> {
    let runs = engine
        .block_status(vol, first * SECTOR, n * SECTOR, usize::MAX)
        .map_err(|e| format!("block status of sectors {first}+{n} failed: {e:?}"))?;
    let mut s = first;
    for r in runs {
        if r.length_bytes == 0 || r.length_bytes % SECTOR != 0 {
            return Err(format!("block status run of {} bytes", r.length_bytes));
        }
        let end = s + r.length_bytes / SECTOR;
        if (r.zero || r.hole)
            && let Some(bad) = (s..end).find(|&x| !disk.may_read_zero(x, t))
        {
            return Err(format!(
                "volume {} sector {bad}: block status reports {} but it holds data",
                disk.vol,
                if r.hole { "a hole" } else { "zeros" }
            ));
        }
        s = end;
    }
    if s != first + n {
        return Err(format!(
            "block status covered sectors {first}..{s}, asked {first}..{}",
            first + n
        ));
    }
    Ok(())
}
