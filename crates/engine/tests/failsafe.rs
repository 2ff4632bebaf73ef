//! Failing safe: blank pools are not formatted unless asked, and a failed final commit
//! makes the stop unclean.

mod common;

use std::collections::VecDeque;

use bytes::Bytes;
use common::*;
use tiervisor_engine::*;

/// Start an engine in `mode` on blank devices; returns its state and the writes it issued.
fn start_blank(mode: StartMode) -> (EngineState, usize) {
    let cfg = config(1 << 20);
    let devs: Vec<Vec<u8>> = cfg
        .pools
        .iter()
        .map(|p| vec![0; p.capacity_bytes as usize])
        .collect();
    let mut e = Engine::new(cfg).unwrap();
    let mut out = Outputs::default();
    e.start(0, mode, &mut out);
    let mut writes = 0;
    let mut q: VecDeque<DeviceOp> = out.ops.drain(..).collect();
    while let Some(op) = q.pop_front() {
        writes += usize::from(op.kind != DevKind::Read && op.kind != DevKind::Flush);
        let data = (op.kind == DevKind::Read).then(|| {
            let dev = &devs[op.pool.0 as usize];
            Bytes::copy_from_slice(
                &dev[op.offset_bytes as usize..(op.offset_bytes + op.len_bytes) as usize],
            )
        });
        let mut o2 = Outputs::default();
        let done = DeviceCompletion {
            id: op.id,
            result: Ok(()),
            data,
        };
        e.device_done(0, done, &mut o2);
        q.extend(o2.ops.drain(..));
    }
    (e.state().clone(), writes)
}

#[test]
fn mount_mode_refuses_blank_pools_and_writes_nothing() {
    let (state, writes) = start_blank(StartMode::Mount);
    match state {
        EngineState::Failed(m) => assert!(m.contains("formatting was not asked for"), "{m}"),
        s => panic!("a blank mount should be refused, state {s:?}"),
    }
    assert_eq!(writes, 0, "a refused mount wrote to a pool");
    // The same pools in Auto mode are formatted: the refusal is the mode's doing.
    let (state, writes) = start_blank(StartMode::Auto);
    assert_eq!(state, EngineState::Ready);
    assert!(writes > 0);
}

#[test]
fn mount_mode_mounts_a_formatted_system() {
    let mut r = Rig::new(config(1 << 20));
    r.write("thin", 0, b"kept");
    r.flush("thin");
    r.engine = Engine::new(r.cfg.clone()).unwrap();
    let mut out = Outputs::default();
    r.engine.start(r.now, StartMode::Mount, &mut out);
    r.drain(out);
    assert_eq!(r.engine.state(), &EngineState::Ready);
    assert_eq!(r.read("thin", 0, 4), b"kept");
}

#[test]
fn a_failed_final_commit_is_reported_as_lost() {
    let mut r = Rig::new(config(1 << 20));
    r.write("thin", 0, b"not yet committed");
    assert!(r.engine.lost_at_stop().is_empty());
    r.hold = true;
    let mut out = Outputs::default();
    r.engine.begin_shutdown(r.now, &mut out);
    r.drain(out);
    // Every device write of the shutdown fails, as on a full or dead disk.
    let mut rounds = 0;
    while let Some(op) = r.held.pop_front() {
        rounds += 1;
        assert!(rounds < 10_000, "shutdown does not end on failing devices");
        let result = if op.kind == DevKind::Read {
            Ok(())
        } else {
            Err(Errno::NoSpc)
        };
        let data = (op.kind == DevKind::Read).then(|| Bytes::from(vec![0; op.len_bytes as usize]));
        let mut out = Outputs::default();
        r.engine.device_done(
            r.now,
            DeviceCompletion {
                id: op.id,
                result,
                data,
            },
            &mut out,
        );
        r.drain(out);
    }
    assert_eq!(r.engine.state(), &EngineState::Stopped);
    assert!(
        r.engine.lost_at_stop().iter().any(|v| v == "thin"),
        "lost: {:?}",
        r.engine.lost_at_stop()
    );
}

#[test]
fn a_pinned_volume_with_a_full_home_pool_gets_enospc_and_never_spills() {
    let mut cfg = config(1 << 20);
    cfg.pools[1].capacity_bytes = 12 * MIB; // the home pool: a few chunks
    cfg.volumes[0].fast_pool = Some(PoolId(0)); // a fast pool it must not use
    let mut r = Rig::new(cfg);
    let chunk = vec![0x5a; MIB as usize];
    let mut refused = None;
    for i in 0..40 {
        let c = r.req(
            "thin",
            ReqKind::Write,
            i * MIB,
            MIB,
            Some(Bytes::copy_from_slice(&chunk)),
        );
        if c.result.is_err() {
            refused = Some((i, c.result));
            break;
        }
    }
    let (at, result) = refused.expect("a full home pool refuses writes");
    assert_eq!(result, Err(Errno::NoSpc), "after {at} chunks");
    let rep = r.engine.report();
    let thin = rep.volumes.iter().find(|v| v.name == "thin").unwrap();
    let on_ssd = thin
        .chunks_by_pool
        .iter()
        .find(|(p, _)| p == "ssd")
        .map_or(0, |(_, n)| *n);
    assert_eq!(on_ssd, 0, "pinned data spilled: {:?}", thin.chunks_by_pool);
    // What was written before the pool filled is intact, and the volume still serves.
    assert_eq!(r.read("thin", 0, MIB), chunk);
    r.flush("thin");
}
