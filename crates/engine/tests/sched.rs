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
