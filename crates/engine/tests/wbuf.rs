//! The host write-back buffer inside the whole engine (crates/engine/src/wbuf): its
//! interplay with the throttle, FUA writes and FLUSHes of other volumes.

mod common;

use common::*;
use tiervisor_engine::wbuf::WriteBufferConfig;
use tiervisor_engine::*;

fn buffered(mut cfg: EngineConfig, pool: usize) -> EngineConfig {
    cfg.pools[pool].write_buffer = Some(WriteBufferConfig {
        size_bytes: 4 * MIB,
        max_age_ns: 1_000_000_000,
    });
    cfg
}

/// Run the engine's timers until request `id` completes.
fn wait_done(r: &mut Rig, id: u64) -> VmCompletion {
    loop {
        if let Some(c) = r.take_done(id) {
            return c;
        }
        let t = r.engine.next_deadline().expect("a timer while waiting");
        r.tick(t.saturating_sub(r.now).max(1));
    }
}

#[test]
fn a_read_served_from_the_buffer_is_not_throttled() {
    // DST seed 1042 (TIERVISOR_DST_WBUF=1, faults 2): a read the buffer answered from RAM
    // had been given a throttle target at dispatch and then passed "before its modelled
    // time", breaking the throttle's invariant; it never reached the device.
    let mut cfg = buffered(config(1 << 20), 0);
    cfg.pools[0].throttle = Some(ThrottleConfig {
        model: "linear".into(),
        half_rotation_ns: 2_000_000,
        max_seek_ns: 0,
        max_seek_sectors: 0,
        cache_segments: 0,
        sectors_per_segment: 1,
        prefetch_sectors: 0,
        cache_hit_ns: 0,
        k: 3.0,
        adapt: false,
    });
    let mut r = Rig::new(cfg);
    let data = pattern(9, 4096);
    let id = r.submit("thick", ReqKind::Write, 8192, Some(&data), 4096);
    assert_eq!(wait_done(&mut r, id).result, Ok(()));
    let id = r.submit("thick", ReqKind::Read, 8192, None, 4096);
    let c = r.take_done(id).expect("answered from RAM at once");
    assert_eq!(c.data.as_deref(), Some(&data[..]));
    assert_eq!(r.engine.check_invariants(), Ok(()));
}

/// A completed FUA write survives a power loss also when a newer write replaced its
/// buffered bytes while its FLUSH waited for an older write-back of the range.
fn fua_write_replaced_while_its_flush_waits(bug: Option<InjectedBug>) -> Vec<u8> {
    let mut cfg = config(1 << 20);
    cfg.pools[0].write_buffer = Some(WriteBufferConfig {
        size_bytes: 64 << 10,
        max_age_ns: 1_000_000,
    });
    let mut r = Rig::with_bug(cfg, bug);
    let (a, c, d) = (pattern(1, 4096), pattern(2, 4096), pattern(3, 4096));
    r.hold = true;
    let id = r.submit("thick", ReqKind::Write, 65536, Some(&a), 4096);
    assert!(r.take_done(id).is_some(), "absorbed");
    // Past its age, A's write-back goes to the device and stays in flight.
    r.tick(2_000_000);
    assert_eq!(r.held.len(), 1, "A's write-back: {:?}", r.held);
    // C (FUA) is buffered over it; its FLUSH cannot write C back until A's lands.
    let vol = r.engine.volume_id("thick").unwrap();
    let mut req = VmRequest::new(900, vol, ReqKind::Write, 65536, 4096);
    req.payload = Some(bytes::Bytes::copy_from_slice(&c));
    req.fua = true;
    let mut out = Outputs::default();
    r.engine.submit(r.now, req, &mut out);
    r.drain(out);
    assert!(r.take_done(900).is_none(), "C waits for its FLUSH");
    // D replaces C's buffered bytes while the FLUSH waits.
    let id = r.submit("thick", ReqKind::Write, 65536, Some(&d), 4096);
    assert!(r.take_done(id).is_some(), "absorbed");
    while r.take_done(900).is_none() {
        assert!(
            r.release_one().is_some(),
            "C completes once its FLUSH is done"
        );
    }
    r.crash_and_mount();
    r.read("thick", 65536, 4096)
}

#[test]
fn a_fua_write_replaced_while_its_flush_waits_survives_power_loss() {
    let (c, d) = (pattern(2, 4096), pattern(3, 4096));
    let got = fua_write_replaced_while_its_flush_waits(None);
    assert!(got == c || got == d, "read back neither C nor D");
    let got = fua_write_replaced_while_its_flush_waits(Some(InjectedBug::WbufReplaceForgets));
    assert_eq!(got, pattern(1, 4096), "the defect loses C and D");
}
