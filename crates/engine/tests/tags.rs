//! Flush-domain tags (seed 001's vTag/hTag) on the operations the engine issues.

mod common;

use common::*;
use tiervisor_engine::*;

#[test]
fn data_and_flushes_carry_the_volumes_tag_and_journal_writes_the_host_tag() {
    let mut r = Rig::new(config(1 << 20));
    let thin = r.engine.volume_id("thin").unwrap();
    r.hold = true;
    // A first write to a thin volume allocates a chunk, so the flush commits a record.
    let w = r.submit("thin", ReqKind::Write, 0, Some(&pattern(1, 4096)), 4096);
    let mut seen = Vec::new();
    while let Some(op) = r.release_one() {
        seen.push(op);
    }
    // A flush covers writes completed before it.
    let f = r.submit("thin", ReqKind::Flush, 0, None, 0);
    while let Some(op) = r.release_one() {
        seen.push(op);
    }
    assert_eq!(r.take_done(w).map(|c| c.result), Some(Ok(())));
    assert_eq!(r.take_done(f).map(|c| c.result), Some(Ok(())));
    let count = |pred: &dyn Fn(&DeviceOp) -> bool| seen.iter().filter(|o| pred(o)).count();
    let data = |o: &DeviceOp| o.class == IoClass::Foreground && o.kind != DevKind::Read;
    let flush = |o: &DeviceOp| o.kind == DevKind::Flush;
    let meta = |o: &DeviceOp| o.class == IoClass::Metadata && o.kind == DevKind::Write;
    assert!(
        count(&data) > 0 && count(&flush) > 0 && count(&meta) > 0,
        "{:?}",
        seen.iter()
            .map(|o| (o.kind, o.class, o.fua, o.tag))
            .collect::<Vec<_>>()
    );
    for o in &seen {
        let want = if data(o) || flush(o) {
            Tag::Volume(thin)
        } else {
            Tag::Host
        };
        assert_eq!(o.tag, want, "{:?}", (o.kind, o.class, o.fua, o.tag));
    }
    assert_eq!(Tag::Host.code(), 0);
    assert_eq!(Tag::Volume(thin).code(), thin.0 + 1);
}

#[test]
fn an_engine_wide_flush_carries_the_host_tag() {
    assert_eq!(
        Tag::for_op(DevKind::Flush, IoClass::Metadata, None),
        Tag::Host
    );
    assert_eq!(
        Tag::for_op(DevKind::Flush, IoClass::Metadata, Some(VolumeId(3))),
        Tag::Volume(VolumeId(3))
    );
    assert_eq!(
        Tag::for_op(DevKind::Write, IoClass::Metadata, Some(VolumeId(3))),
        Tag::Host
    );
}
