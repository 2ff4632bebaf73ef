//! Which device operation zeroes a trimmed or zeroed part of a chunk: a thin volume's
//! gives its space back (`DevKind::Punch`), a thick volume's and a NO_HOLE write-zeroes
//! keep it allocated (`DevKind::WriteZeroes`); all read back as zeros.

mod common;

use common::*;
use tiervisor_engine::*;

/// Submit `kind` of `[off, off + len)` to `vol` with device operations held, and return
/// the kinds of the data operations it queued (then let everything complete).
fn zeroing_ops(
    r: &mut Rig,
    vol: &str,
    kind: ReqKind,
    no_hole: bool,
    off: u64,
    len: u64,
) -> Vec<DevKind> {
    r.hold = true;
    let v = r.engine.volume_id(vol).unwrap();
    let id = r.next_id;
    r.next_id += 1;
    let mut q = VmRequest::new(id, v, kind, off, len);
    q.no_hole = no_hole;
    let mut out = Outputs::default();
    r.engine.submit(r.now, q, &mut out);
    r.drain(out);
    let kinds = held_foreground_kinds(r);
    r.hold = false;
    while r.release_one().is_some() {}
    assert_eq!(r.take_done(id).map(|c| c.result), Some(Ok(())));
    kinds
}

#[test]
fn thin_trims_punch_and_thick_or_no_hole_zeroing_keeps_space() {
    let mut r = Rig::new(config(MIB));
    let data = pattern(3, MIB as usize);
    for vol in ["thin", "thick"] {
        r.write(vol, 0, &data);
        r.write(vol, MIB, &data);
    }
    r.flush("thin");
    r.flush("thick");
    let part = (64 << 10, 128 << 10);
    assert_eq!(
        zeroing_ops(&mut r, "thin", ReqKind::Trim, false, part.0, part.1),
        [DevKind::Punch]
    );
    assert_eq!(
        zeroing_ops(
            &mut r,
            "thin",
            ReqKind::WriteZeroes,
            false,
            MIB + part.0,
            part.1
        ),
        [DevKind::Punch]
    );
    assert_eq!(
        zeroing_ops(
            &mut r,
            "thin",
            ReqKind::WriteZeroes,
            true,
            MIB + (512 << 10),
            part.1
        ),
        [DevKind::WriteZeroes]
    );
    assert_eq!(
        zeroing_ops(&mut r, "thick", ReqKind::Trim, false, part.0, part.1),
        [DevKind::WriteZeroes]
    );
    for vol in ["thin", "thick"] {
        let got = r.read(vol, 0, MIB);
        let (a, b) = (part.0 as usize, (part.0 + part.1) as usize);
        assert!(got[..a] == data[..a], "{vol}: before the trim");
        assert!(got[a..b].iter().all(|&x| x == 0), "{vol}: trimmed");
        let bad = (b..got.len()).find(|&i| got[i] != data[i]);
        assert!(
            bad.is_none(),
            "{vol}: after the trim, at {bad:?}: {:?}",
            bad.map(|i| (got[i], data[i]))
        );
    }
}

#[test]
fn a_thin_volumes_trim_absorbed_by_the_write_buffer_is_written_back_as_a_punch() {
    // Issue 15: trims give space back. On a buffered pool a thin volume's partial trim
    // (and write-zeroes without NO_HOLE) is absorbed like a write; its write-back was a
    // write of zeros, which keeps the space allocated. It is a punch now, as the same
    // trim is on an unbuffered pool; a NO_HOLE write-zeroes stays a write of zeros.
    let mut cfg = config(MIB);
    for p in &mut cfg.pools {
        p.write_buffer = Some(tiervisor_engine::wbuf::WriteBufferConfig {
            size_bytes: 4 * MIB,
            max_age_ns: 10_000_000_000,
        });
    }
    let mut r = Rig::new(cfg);
    let data = pattern(3, MIB as usize);
    r.write("thin", 0, &data);
    r.flush("thin");
    let (a, b) = (64 << 10, 192 << 10);
    let write_backs = |r: &mut Rig, kind: ReqKind, no_hole: bool, off: u64, len: u64| {
        let v = r.engine.volume_id("thin").unwrap();
        let id = r.next_id;
        r.next_id += 1;
        let mut q = VmRequest::new(id, v, kind, off, len);
        q.no_hole = no_hole;
        let mut out = Outputs::default();
        r.engine.submit(r.now, q, &mut out);
        r.drain(out);
        assert_eq!(r.take_done(id).map(|c| c.result), Some(Ok(())), "absorbed");
        r.hold = true;
        let flush = r.submit("thin", ReqKind::Flush, 0, None, 0);
        let kinds = held_foreground_kinds(r);
        r.hold = false;
        while r.release_one().is_some() {}
        assert_eq!(r.take_done(flush).map(|c| c.result), Some(Ok(())));
        kinds
    };
    assert_eq!(
        write_backs(&mut r, ReqKind::Trim, false, a, b - a),
        [DevKind::Punch]
    );
    assert_eq!(
        write_backs(&mut r, ReqKind::WriteZeroes, false, 256 << 10, 4096),
        [DevKind::Punch]
    );
    assert_eq!(
        write_backs(&mut r, ReqKind::WriteZeroes, true, 512 << 10, 4096),
        [DevKind::WriteZeroes]
    );
    let got = r.read("thin", 0, MIB);
    let zeroed = [
        (a, b),
        (256 << 10, (256 << 10) + 4096),
        (512 << 10, (512 << 10) + 4096),
    ];
    for (i, (&g, &d)) in got.iter().zip(&data).enumerate() {
        let z = zeroed.iter().any(|&(s, e)| (s..e).contains(&(i as u64)));
        assert_eq!(g, if z { 0 } else { d }, "byte {i}");
    }
}

/// The kinds of the foreground device operations held now.
fn held_foreground_kinds(r: &Rig) -> Vec<DevKind> {
    (r.held.iter())
        .filter(|op| op.class == IoClass::Foreground)
        .map(|op| op.kind)
        .collect()
}
