//! Running out of space: a write or commit that fails for space reports ENOSPC (not EIO),
//! is not done, and the volume works again once space returns.

mod common;

use bytes::Bytes;
use common::*;
use tiervisor_engine::*;

#[test]
fn writes_and_commits_that_fail_for_space_report_enospc_and_recover() {
    let mut r = Rig::new(config(1 << 20));
    let (a, c, d) = (pattern(1, 4096), pattern(2, 4096), pattern(3, 8192));
    r.write("thin", 0, &a);
    r.flush("thin");
    // Allocated, its map record not yet committed.
    r.write("thin", 4 * MIB, &c);
    r.fail_writes = Some(Errno::NoSpc);
    let w = r.req(
        "thin",
        ReqKind::Write,
        8 * MIB,
        d.len() as u64,
        Some(Bytes::copy_from_slice(&d)),
    );
    assert_eq!(w.result, Err(Errno::NoSpc), "a new chunk without space");
    let f = r.req("thin", ReqKind::Flush, 0, 0, None);
    assert_eq!(f.result, Err(Errno::NoSpc), "a commit without space");
    // The write that failed is not done: it reads as it was (never written: zeros).
    assert_eq!(r.read("thin", 8 * MIB, d.len() as u64), vec![0; d.len()]);
    // A device failure outranks lack of space (Errno::worse).
    r.fail_writes = Some(Errno::Io);
    assert_eq!(
        r.req("thin", ReqKind::Flush, 0, 0, None).result,
        Err(Errno::Io)
    );
    // Space returns: the commit is retried and succeeds, new writes succeed.
    r.fail_writes = None;
    r.flush("thin");
    r.write("thin", 8 * MIB, &d);
    r.flush("thin");
    r.crash_and_mount();
    assert_eq!(r.read("thin", 0, 4096), a);
    assert_eq!(r.read("thin", 4 * MIB, 4096), c);
    assert_eq!(r.read("thin", 8 * MIB, d.len() as u64), d);
}

#[test]
fn worse_prefers_a_device_error_to_enospc() {
    use Errno::*;
    assert_eq!(Errno::worse(None, None), None);
    assert_eq!(Errno::worse(Some(NoSpc), None), Some(NoSpc));
    assert_eq!(Errno::worse(None, Some(NoSpc)), Some(NoSpc));
    assert_eq!(Errno::worse(Some(NoSpc), Some(Io)), Some(Io));
    assert_eq!(Errno::worse(Some(Io), Some(NoSpc)), Some(Io));
}

/// A lasting ENOSPC under the log: appends that failed for space wait for it, but the
/// writes behind them must not wait without end. Before the fix, once the appends in
/// flight had parked, later write pieces queued for buffer room that never came: their
/// requests never completed. Now they go home and end (here in ENOSPC); the writes that
/// were acknowledged from RAM land once space returns.
#[test]
fn writes_behind_appends_waiting_for_space_end_instead_of_waiting_forever() {
    let mut cfg = config(1 << 20);
    for p in &mut cfg.pools {
        p.log = true;
    }
    cfg.log = LogConfig {
        segment_bytes: 2 * MIB,
        append_bytes: 64 << 10,
        ..LogConfig::default()
    };
    let mut r = Rig::new(cfg);
    r.fail_writes = Some(Errno::NoSpc);
    let mut acked = Vec::new();
    let mut nospc = 0;
    for i in 0..96u64 {
        // Scattered 4 KiB writes (logged, not a sequential run).
        let off = (i * 37 % 96) * 64 * 1024;
        let d = pattern(i as u8, 4096);
        let id = r.submit("thin", ReqKind::Write, off, Some(&d), 4096);
        let c = r
            .take_done(id)
            .unwrap_or_else(|| panic!("write {i} still waits while space never returns"));
        match c.result {
            Ok(()) => acked.push((off, d)),
            Err(Errno::NoSpc) => nospc += 1,
            Err(e) => panic!("write {i}: {e:?}, not ENOSPC"),
        }
    }
    assert!(
        acked.len() >= 16,
        "{} writes logged before the log filled",
        acked.len()
    );
    assert!(nospc > 0, "no write ended in ENOSPC");
    assert_eq!(
        r.req("thin", ReqKind::Flush, 0, 0, None).result,
        Err(Errno::NoSpc)
    );
    // Space returns: the parked appends land at the next retry, FLUSH succeeds, and
    // every acknowledged write survives a crash.
    r.fail_writes = None;
    r.tick(2 * r.cfg.commit_interval_ns);
    r.flush("thin");
    r.crash_and_mount();
    for (off, d) in &acked {
        assert_eq!(&r.read("thin", *off, 4096), d, "write at {off}");
    }
    r.engine
        .check_invariants()
        .unwrap_or_else(|e| panic!("{e}"));
}
