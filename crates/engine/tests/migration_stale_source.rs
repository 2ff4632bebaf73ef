//! LR's destination writes against older writes still in flight to the source (DST seed
//! 5548, stop 38's soak). A write (or trim) that LR sends to the destination while an
//! older write of the same range is still on its way to the source marks the range
//! `Moved` when it lands; the older source write, completing after it, must not clear
//! that entry. It did (`write_done` clears the overlay of its range), so the range read
//! from the source again, and the source held data older than the destination write:
//! a write the buffer took over the older one, acknowledged before the trim was even
//! submitted and written back after it. The chunk's copy then brought that data to the
//! destination, and the pivot made it the volume's.

mod common;

use common::*;
use tiervisor_engine::jobs::migrate::{MigrationPhase, Scheme};
use tiervisor_engine::wbuf::WriteBufferConfig;
use tiervisor_engine::*;

const SSD: PoolId = PoolId(0);
const HDD: PoolId = PoolId(1);
const KIB: u64 = 1024;
/// The range the old source write and the destination write cover.
const SPAN: u64 = 128 * KIB;
/// The buffered write inside it, acknowledged before the destination write starts.
const SMALL: std::ops::Range<u64> = 4 * KIB..8 * KIB;

/// What the engine's volume reads back where each 512-byte sector of `[0, SPAN)` may
/// hold: `w` (the old source write, which overlapped the destination write, so either
/// may win) or `d` (the destination write). `SMALL`'s buffered write `x` completed before
/// `d` was submitted, so it may not.
fn check_outcome(got: &[u8], w: &[u8], d: &[u8], x: &[u8], what: &str) -> Result<(), String> {
    for s in 0..(SPAN / 512) as usize {
        let r = s * 512..(s + 1) * 512;
        let sector = &got[r.clone()];
        let in_x = (SMALL.start as usize..SMALL.end as usize).contains(&r.start);
        if in_x && sector == &x[r.start - SMALL.start as usize..][..512] {
            return Err(format!(
                "{what}: sector {s} returned the buffered write acknowledged before the \
                 destination write was submitted"
            ));
        }
        if sector != &w[r.clone()] && sector != &d[r.clone()] {
            return Err(format!(
                "{what}: sector {s} holds neither the old source write nor the destination write"
            ));
        }
    }
    Ok(())
}

/// The volumes the order is tried on: the thin one, from the HDD to the SSD, and the
/// thick one (as in the seed), from the SSD to the HDD, where LR writes into the new
/// home region only once its record is durable.
const VOLUMES: [(&str, PoolId, PoolId); 2] = [("thin", HDD, SSD), ("thick", SSD, HDD)];

/// The DST seed's order of events on volume `vol` (from pool `src` to `dst`), with `kind`
/// (a trim or a write) as the destination write, on an engine with `bug`: the first wrong
/// read, if any.
fn stale_source_write_against(
    (vol, src, dst): (&str, PoolId, PoolId),
    kind: ReqKind,
    bug: Option<InjectedBug>,
) -> Result<(), String> {
    let mut cfg = config(1 << 20);
    // A 64 KiB buffer on the source: the 128 KiB write goes straight to the device, the
    // 4 KiB one is absorbed (as in the seed, where write 1233 was over its volume's share).
    cfg.pools[src.0 as usize].write_buffer = Some(WriteBufferConfig {
        size_bytes: 64 * KIB,
        max_age_ns: 1_000_000_000,
    });
    let mut r = Rig::with_bug(cfg, bug);
    r.write(vol, 0, &pattern(1, MIB as usize));
    r.flush(vol);

    // W: a write of the span, held on its way to the source.
    r.hold = true;
    let w = pattern(2, SPAN as usize);
    let w_id = r.submit(vol, ReqKind::Write, 0, Some(&w), SPAN);
    assert_eq!(r.held.len(), 1, "one device write: {:?}", r.held);
    let w_op = r.held.pop_back().expect("held");
    assert_eq!((w_op.pool, w_op.kind), (src, DevKind::Write));

    // X: a small write inside it, taken by the buffer and acknowledged at once (written
    // back only after W lands, the buffer's rule for a range with a write in flight).
    let x = pattern(3, (SMALL.end - SMALL.start) as usize);
    let x_id = r.submit(vol, ReqKind::Write, SMALL.start, Some(&x), x.len() as u64);
    assert_eq!(r.take_done(x_id).map(|c| c.result), Some(Ok(())));

    // An LR job to `dst`; the chunk is busy (W), so it is not copied yet. What the start
    // writes lands (a thick volume's new region is then open to LR's writes).
    let v = r.engine.volume_id(vol).unwrap();
    let mut out = Outputs::default();
    r.engine
        .start_migration(r.now, v, job_params(Scheme::Lr, dst), &mut out)
        .unwrap();
    r.drain(out);
    while r.release_one().is_some() {}

    // D: submitted after X completed, routed to the destination, completes before W.
    let d = match kind {
        ReqKind::Trim => vec![0u8; SPAN as usize],
        _ => pattern(4, SPAN as usize),
    };
    let payload = (kind == ReqKind::Write).then_some(&d[..]);
    let d_id = r.submit(vol, kind, 0, payload, SPAN);
    let mut d_ops = Vec::new();
    while r.take_done(d_id).is_none() {
        d_ops.push(r.release_one().expect("the destination write is stuck"));
    }
    assert!(
        d_ops
            .iter()
            .any(|op| op.pool == dst && op.len_bytes == SPAN && op.class == IoClass::Foreground),
        "{vol}: {kind:?} went to the destination: {d_ops:?}"
    );

    // W lands and completes; everything else runs to the end of the job.
    r.held.push_back(w_op);
    r.hold = false;
    while r.release_one().is_some() {}
    assert_eq!(r.take_done(w_id).map(|c| c.result), Some(Ok(())));
    let got = r.read(vol, 0, SPAN);
    check_outcome(&got, &w, &d, &x, &format!("{vol}: {kind:?} during the job"))?;
    finish_job(&mut r, vol);
    assert_eq!(job_phase(&r, vol), Some(MigrationPhase::Done));
    r.engine.check_invariants().unwrap();
    let got = r.read(vol, 0, SPAN);
    check_outcome(
        &got,
        &w,
        &d,
        &x,
        &format!("{vol}: {kind:?} after the pivot"),
    )?;
    r.flush(vol);
    r.crash_and_mount();
    let got = r.read(vol, 0, SPAN);
    check_outcome(
        &got,
        &w,
        &d,
        &x,
        &format!("{vol}: {kind:?} after a restart"),
    )
}

#[test]
fn an_older_source_write_does_not_undo_an_lr_trim_that_landed_before_it() {
    for v in VOLUMES {
        stale_source_write_against(v, ReqKind::Trim, None).unwrap();
    }
}

#[test]
fn an_older_source_write_does_not_undo_an_lr_write_that_landed_before_it() {
    for v in VOLUMES {
        stale_source_write_against(v, ReqKind::Write, None).unwrap();
    }
}

/// `stale-write-clears-moved` puts the defect back: the buffered write reads back.
#[test]
fn the_stale_source_test_catches_its_injected_bug() {
    for v in VOLUMES {
        for kind in [ReqKind::Trim, ReqKind::Write] {
            let bug = Some(InjectedBug::StaleWriteClearsMoved);
            let e = stale_source_write_against(v, kind, bug).expect_err("caught");
            assert!(e.contains("acknowledged before"), "{v:?} {kind:?}: {e}");
        }
    }
}
