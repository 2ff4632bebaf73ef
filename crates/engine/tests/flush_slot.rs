//! `EngineConfig::flush_takes_queue_slot`: whether a pool flush in flight holds one of
//! the pool's `queue_depth` slots (a simulated drive's cache flush) or lets reads and
//! writes go on beside it (`serve`, where a flush is an fdatasync of the pool file).

mod common;

use common::*;
use tiervisor_engine::*;

/// With a flush of the HDD pool (depth 1) in flight, does a new write reach the device?
fn write_passes_a_flush_in_flight(flush_takes_queue_slot: bool) -> bool {
    let mut cfg = config(1 << 20);
    cfg.pools[1].queue_depth = 1;
    cfg.flush_takes_queue_slot = flush_takes_queue_slot;
    let mut r = Rig::new(cfg);
    r.write("thin", 0, &pattern(1, 4096));
    r.hold = true;
    let f = r.submit("thin", ReqKind::Flush, 0, None, 0);
    // Run the commit until its flush of the HDD pool is the next operation, and hold it.
    while let Some(op) = r.held.front() {
        if op.kind == DevKind::Flush && op.pool == PoolId(1) {
            break;
        }
        r.release_one();
    }
    assert!(r.held.front().is_some(), "the commit flushed no HDD pool");
    let w = r.submit("thin", ReqKind::Write, 4096, Some(&pattern(2, 4096)), 4096);
    let passed = r
        .held
        .iter()
        .any(|op| op.kind == DevKind::Write && op.pool == PoolId(1));
    while r.release_one().is_some() {}
    r.hold = false;
    assert_eq!(r.take_done(f).map(|c| c.result), Some(Ok(())));
    assert_eq!(r.take_done(w).map(|c| c.result), Some(Ok(())));
    assert_eq!(r.read("thin", 4096, 4096), pattern(2, 4096));
    passed
}

#[test]
fn a_pool_files_flush_does_not_hold_the_pools_only_queue_slot() {
    assert!(write_passes_a_flush_in_flight(false));
}

#[test]
fn a_simulated_drives_flush_holds_its_queue_slot() {
    assert!(!write_passes_a_flush_in_flight(true));
}
