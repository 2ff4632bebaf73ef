//! What `auto` sees of a volume's workload when a job starts (`WorkloadProfile`, from the
//! volume's counters and the monitor's per-chunk heat): the write share, the share of its
//! time the VM waits on I/O (Little's law), its write rate, and where its reads and
//! writes fall against the copy's order.

mod common;

use common::*;
use tiervisor_engine::jobs::migrate::Scheme;
use tiervisor_engine::*;

const SSD: PoolId = PoolId(0);
const VOL: &str = "thin";

#[test]
fn the_profile_is_what_the_volume_did_before_the_job() {
    let mut r = Rig::new(config(1 << 20));
    let t0 = r.now;
    // Six chunks written whole (one write each, at once), then chunk 0 read 30 times.
    let _ = fill_ref(&mut r, VOL, 6, 0..6);
    for i in 0..30 {
        let _ = r.read(VOL, i * 4096, 4096);
    }
    // One read that takes 10 ms, then 10 ms of nothing: the VM waited on I/O half of
    // the 20 ms observed.
    r.hold = true;
    let id = r.submit(VOL, ReqKind::Read, 1 << 20, None, 4096);
    r.tick(10_000_000);
    while r.take_done(id).is_none() {
        r.release_one().expect("the read");
    }
    r.hold = false;
    r.tick(10_000_000);
    let observed_s = (r.now - t0) as f64 / 1e9; // 20 ms and the rig's own steps
    assert!((0.02..0.021).contains(&observed_s), "{observed_s}");
    start_job(&mut r, VOL, job_params(Scheme::Lr, SSD)).unwrap();
    let v = r.engine.volume_id(VOL).unwrap();
    let p = r.engine.migration_status(v).unwrap().profile;
    let mib = (1u64 << 20) as f64;
    let want_w = 6.0 * mib / (6.0 * mib + 31.0 * 4096.0);
    assert!((p.write_share - want_w).abs() < 1e-9, "{p:?}");
    assert!((p.busy_share - 0.5).abs() < 0.01, "{p:?}");
    let iops = p.write_iops.expect("writes seen");
    assert!((iops - 6.0 / observed_s).abs() < 3.0, "{p:?}");
    // Chunk c of 6 is copied for 1 - (c + 0.5) / 6 of the copy: every chunk written once
    // gives 0.5; 30 reads of chunk 0 and one of chunk 1, (30 x 11/12 + 9/12) / 31.
    assert!((p.copied_write_share - 0.5).abs() < 1e-9, "{p:?}");
    let want_r = (30.0 * 11.0 / 12.0 + 9.0 / 12.0) / 31.0;
    assert!((p.copied_read_share - want_r).abs() < 1e-9, "{p:?}");
}
