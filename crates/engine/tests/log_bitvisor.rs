//! The log's `bitvisor` mode (seed 002's mechanism as the paper built it): each write is
//! redirected as it arrives to the next sequential location and written through, one
//! device write per guest write, acknowledged only when the device completed it; reads
//! follow the mapping, which a crash does not lose; checked against a reference model,
//! with an injected redirect that reuses a live location caught.

mod common;

use common::*;
use tiervisor_engine::*;

fn bitvisor_config() -> EngineConfig {
    let mut cfg = log_config();
    cfg.log.mode = LogMode::Bitvisor;
    cfg
}

#[test]
fn each_write_is_redirected_in_arrival_order_and_acknowledged_once_written() {
    let mut r = Rig::new(bitvisor_config());
    r.hold = true;
    // Scattered 4 KiB writes, several in flight (as a page-cache writeback sends them).
    let offsets = [900u64, 12, 513, 77, 300];
    let ids: Vec<u64> = offsets
        .iter()
        .enumerate()
        .map(|(i, &blk)| {
            let d = pattern(i as u8 + 1, 4096);
            r.submit("thin", ReqKind::Write, blk * 4096, Some(&d), 4096)
        })
        .collect();
    // Nothing acknowledged from RAM: each waits for its own device write.
    for &id in &ids {
        assert!(r.take_done(id).is_none(), "acknowledged before written");
    }
    // One device write per guest write, at consecutive addresses, in arrival order,
    // without waiting for the gather time (the pool's queue may hold some back); each
    // request completes exactly when its own write lands.
    assert!(!r.held.is_empty(), "nothing sent without the gather time");
    let first = r.held[0].offset_bytes;
    for (i, &id) in ids.iter().enumerate() {
        let op = r.release_one().expect("a write per request");
        assert_eq!(
            (op.kind, op.pool, op.len_bytes),
            (DevKind::Write, PoolId(1), 4096)
        );
        assert_eq!(op.offset_bytes, first + i as u64 * 4096, "not sequential");
        assert_eq!(r.take_done(id).map(|c| c.result), Some(Ok(())), "write {i}");
        for &later in &ids[i + 1..] {
            assert!(r.take_done(later).is_none(), "write acknowledged early");
        }
    }
    assert!(
        r.held.is_empty(),
        "more than one device write per guest write"
    );
    r.hold = false;
    for (i, &blk) in offsets.iter().enumerate() {
        assert_eq!(r.read("thin", blk * 4096, 4096), pattern(i as u8 + 1, 4096));
    }
    // The mapping is recovered: after a flush and a crash every write reads back.
    r.flush("thin");
    r.crash_and_mount();
    for (i, &blk) in offsets.iter().enumerate() {
        assert_eq!(r.read("thin", blk * 4096, 4096), pattern(i as u8 + 1, 4096));
    }
    // The gathering log would have sent these five as one append.
    let mut g = Rig::new(log_config());
    g.hold = true;
    for (i, &blk) in offsets.iter().enumerate() {
        let d = pattern(i as u8 + 1, 4096);
        let id = g.submit("thin", ReqKind::Write, blk * 4096, Some(&d), 4096);
        assert!(
            g.take_done(id).is_some(),
            "the gathering log acknowledges from RAM"
        );
    }
    assert!(g.held.is_empty());
}

#[test]
fn a_write_whose_redirected_write_fails_completes_only_where_it_moved() {
    let mut r = Rig::new(bitvisor_config());
    r.hold = true;
    let d = pattern(9, 4096);
    let id = r.submit("thin", ReqKind::Write, 40 * 4096, Some(&d), 4096);
    r.fail_writes = Some(Errno::Io);
    // The retries in place and the relocation fail too: the request waits all along.
    for _ in 0..4 {
        assert_eq!(r.held.len(), 1);
        r.release_one();
        assert!(r.take_done(id).is_none(), "acknowledged a failed write");
    }
    r.fail_writes = None;
    assert_eq!(r.held.len(), 1, "written again elsewhere");
    r.release_one();
    assert_eq!(r.take_done(id).map(|c| c.result), Some(Ok(())));
    r.hold = false;
    assert_eq!(r.read("thin", 40 * 4096, 4096), d);
}

#[test]
fn a_write_whose_redirected_write_finds_no_space_fails_with_enospc_at_once() {
    let mut r = Rig::new(bitvisor_config());
    let old = pattern(4, 4096);
    r.write("thin", 40 * 4096, &old);
    r.flush("thin");
    r.fail_writes = Some(Errno::NoSpc);
    let new = pattern(5, 4096);
    // Write-through: the device write failed for space, so the request fails as a home
    // write does, rather than wait for space that may never return (DST seed 1070: one
    // request waited through a lasting spell, retried for hours of virtual time).
    let w = r.req(
        "thin",
        ReqKind::Write,
        40 * 4096,
        4096,
        Some(bytes::Bytes::copy_from_slice(&new)),
    );
    assert_eq!(w.result, Err(Errno::NoSpc));
    // Still no space: the commit that would make it durable fails too, and keeps failing.
    for _ in 0..3 {
        r.tick(1_000_000_000);
        assert_eq!(
            r.req("thin", ReqKind::Flush, 0, 0, None).result,
            Err(Errno::NoSpc)
        );
    }
    // A failed write's range reads either way; here its data is still parked in RAM.
    let got = r.read("thin", 40 * 4096, 4096);
    assert!(got == old || got == new, "neither the old nor the new data");
    // Space returns: the parked write lands with the next commit, and survives a crash.
    r.fail_writes = None;
    r.flush("thin");
    r.crash_and_mount();
    assert_eq!(r.read("thin", 40 * 4096, 4096), got);
}

/// `common::log_against_reference` in `bitvisor` mode.
fn run_against_reference(seed: u64, bug: Option<InjectedBug>) -> Result<u64, String> {
    log_against_reference(bitvisor_config(), seed, 4000, bug)
}

#[test]
fn random_small_writes_match_a_reference_through_cleaning_and_crashes() {
    for seed in 1..=3u64 {
        let logged = run_against_reference(seed, None).unwrap_or_else(|e| panic!("{e}"));
        assert!(logged > 2000, "{logged} writes logged");
    }
}

#[test]
fn the_reference_catches_a_redirect_that_reuses_a_live_location() {
    let r = run_against_reference(1, Some(InjectedBug::BitvisorReusesLive));
    assert!(r.is_err(), "bug not caught: {r:?}");
}
