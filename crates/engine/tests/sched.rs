//! Schedulers inside the engine: an idling scheduler sees the request it waits for at once.

mod common;

use common::*;
use tiervisor_engine::*;

#[test]
fn an_arrival_ends_the_schedulers_idle_wait() {
    let mut cfg = config(256 << 10);
    cfg.pools[0].scheduler = SchedSpec::named("cfq");
    let mut rig = Rig::new(cfg);
    // A read of the thick volume (on the cfq pool) completes; its sync queue is empty,
    // so cfq keeps the disk idle for 8 ms waiting for that volume's next read.
    rig.read("thick", 0, 4096);
    rig.hold = true;
    rig.now += 1_000_000;
    rig.submit("thick", ReqKind::Read, 8192, None, 4096);
    assert_eq!(
        rig.held.len(),
        1,
        "the awaited read reaches the device at once, not when the 8 ms wait ends"
    );
}

#[test]
fn every_scheduler_mounts_and_returns_what_was_written() {
    for name in sched::names() {
        let mut cfg = config(256 << 10);
        for p in &mut cfg.pools {
            p.scheduler = SchedSpec::named(name);
        }
        let mut rig = Rig::new(cfg);
        for (i, vol) in ["thin", "thick"].into_iter().enumerate() {
            let data = pattern(i as u8 + 1, 256 << 10);
            rig.write(vol, 4096, &data);
            rig.tick(20_000_000); // any idle wait runs out
            assert_eq!(
                rig.read(vol, 4096, data.len() as u64),
                data,
                "{name}: {vol}"
            );
        }
        rig.crash_and_mount();
        let data = pattern(2, 256 << 10);
        assert_eq!(
            rig.read("thick", 4096, data.len() as u64),
            data,
            "{name} after mount"
        );
    }
}

/// A request's I/O context reaches every device operation done for it (a read, a write
/// in place, a new chunk's data and zero-fill writes), and the engine's own work (the
/// commit a FLUSH starts) carries the engine's.
#[test]
fn a_request_s_context_reaches_its_device_operations() {
    let mut rig = Rig::new(config(256 << 10));
    rig.hold = true;
    let submit = |rig: &mut Rig, vol: &str, kind: ReqKind, off: u64, len: u64, process: u32| {
        let v = rig.engine.volume_id(vol).unwrap();
        let mut r = VmRequest::new(rig.next_id, v, kind, off, len);
        rig.next_id += 1;
        if kind == ReqKind::Write {
            r.payload = Some(bytes::Bytes::from(pattern(3, len as usize)));
        }
        r.context = IoContext::Client(process);
        let mut out = Outputs::default();
        rig.engine.submit(rig.now, r, &mut out);
        rig.drain(out);
    };
    let drained = |rig: &mut Rig| {
        let mut ops = Vec::new();
        while let Some(op) = rig.release_one() {
            ops.push(op);
        }
        ops
    };
    // A thin volume's first write allocates: data plus zero-fill around it.
    submit(&mut rig, "thin", ReqKind::Write, 8192, 4096, 7);
    let ops = drained(&mut rig);
    let data: Vec<_> = ops.iter().filter(|o| o.volume.is_some()).collect();
    assert!(data.len() >= 2, "data and zero fill: {ops:?}");
    assert!(
        data.iter().all(|o| o.context == IoContext::Client(7)),
        "{data:?}"
    );
    submit(&mut rig, "thick", ReqKind::Write, 0, 4096, 8);
    submit(&mut rig, "thick", ReqKind::Read, 65536, 4096, 9);
    let ops = drained(&mut rig);
    let contexts: Vec<_> = ops.iter().map(|o| (o.kind, o.context)).collect();
    assert!(
        contexts.contains(&(DevKind::Write, IoContext::Client(8))),
        "{contexts:?}"
    );
    assert!(
        contexts.contains(&(DevKind::Read, IoContext::Client(9))),
        "{contexts:?}"
    );
    // A FLUSH's commit writes journal records for the volume: the engine's work.
    let v = rig.engine.volume_id("thin").unwrap();
    let mut out = Outputs::default();
    let mut f = VmRequest::new(rig.next_id, v, ReqKind::Flush, 0, 0);
    f.context = IoContext::Client(7);
    rig.engine.submit(rig.now, f, &mut out);
    rig.drain(out);
    let ops = drained(&mut rig);
    let writes: Vec<_> = ops.iter().filter(|o| o.kind != DevKind::Flush).collect();
    assert!(!writes.is_empty());
    assert!(
        writes.iter().all(|o| o.context == IoContext::Engine),
        "{writes:?}"
    );
}
