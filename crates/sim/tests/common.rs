//! Helpers shared by the simulator's integration tests.
#![allow(dead_code)] // each test binary uses a different subset

use std::path::PathBuf;

/// `../shared/traces` next to the repository, if present.
pub fn shared_traces() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = root.join("../shared/traces");
    if p.join("wsrch-small.trace.xz").exists() {
        Some(p)
    } else {
        skip("../shared/traces not found next to the repository (README: traces)");
        None
    }
}

pub fn scenarios_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

/// Print `SKIP <test>: <why>` on the process's stderr, which the test harness does not
/// capture, so a skipped test shows in the output of a passing run. Traces under ../shared
/// may be absent everywhere, CI included, so this never fails a test.
pub fn skip(why: &str) {
    use std::io::Write as _;
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("<test>");
    let _ = writeln!(std::io::stderr(), "SKIP {test}: {why}");
}

/// Serve `op` on `disk` and make its successful completion.
pub fn complete_on_disk(
    disk: &mut [u8],
    op: &tiervisor_engine::DeviceOp,
) -> tiervisor_engine::DeviceCompletion {
    tiervisor_engine::DeviceCompletion {
        id: op.id,
        result: Ok(()),
        data: serve_on_disk(disk, op),
    }
}

/// Serve device operation `op` on `disk` (one byte array for every pool, as the tests'
/// rigs keep it): the data a read returns, or `None`.
pub fn serve_on_disk(disk: &mut [u8], op: &tiervisor_engine::DeviceOp) -> Option<bytes::Bytes> {
    use tiervisor_engine::DevKind;
    let (o, n) = (op.offset_bytes as usize, op.len_bytes as usize);
    assert!(o + n <= disk.len(), "{op:?} beyond the pool");
    match op.kind {
        DevKind::Read => return Some(bytes::Bytes::copy_from_slice(&disk[o..o + n])),
        DevKind::Write => match &op.payload {
            Some(p) => disk[o..o + n].copy_from_slice(p),
            None => disk[o..o + n].fill(0),
        },
        DevKind::WriteZeroes | DevKind::Punch => disk[o..o + n].fill(0),
        DevKind::Flush | DevKind::Discard => {}
    }
    None
}
