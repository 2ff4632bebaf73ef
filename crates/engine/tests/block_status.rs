//! `Engine::block_status` against a reference of what was written, trimmed and zeroed:
//! a range reported as zeros must read as zeros, chunks never written are holes, and the
//! answer survives a crash (it comes from the recovered mapping table).

mod common;

use common::*;
use tiervisor_engine::*;

fn status(r: &Rig, vol: &str, off: u64, len: u64) -> Vec<StatusExtent> {
    let v = r.engine.volume_id(vol).unwrap();
    r.engine.block_status(v, off, len, usize::MAX).unwrap()
}

/// (start, end, hole, zero) runs, for readable assertions.
fn runs(r: &Rig, vol: &str, off: u64, len: u64) -> Vec<(u64, u64, bool, bool)> {
    let mut pos = off;
    status(r, vol, off, len)
        .into_iter()
        .map(|e| {
            pos += e.length_bytes;
            (pos - e.length_bytes, pos, e.hole, e.zero)
        })
        .collect()
}

#[test]
fn a_fresh_thin_volume_is_one_hole_and_a_write_makes_exactly_its_chunk_data() {
    let mut r = Rig::new(config(1 << 20));
    let size = 40 * MIB;
    assert_eq!(runs(&r, "thin", 0, size), vec![(0, size, true, true)]);
    r.write("thin", 4 * MIB, &pattern(1, MIB as usize));
    assert_eq!(
        runs(&r, "thin", 0, size),
        vec![
            (0, 4 * MIB, true, true),
            (4 * MIB, 5 * MIB, false, false),
            (5 * MIB, size, true, true)
        ]
    );
    // A query starting inside a run reports from the queried offset.
    assert_eq!(
        runs(&r, "thin", 4 * MIB + 512, MIB),
        vec![
            (4 * MIB + 512, 5 * MIB, false, false),
            (5 * MIB, 5 * MIB + 512, true, true)
        ]
    );
    // Trimming the whole chunk makes it a hole again; after a crash too.
    assert_eq!(
        r.req("thin", ReqKind::Trim, 4 * MIB, MIB, None).result,
        Ok(())
    );
    assert_eq!(runs(&r, "thin", 0, size), vec![(0, size, true, true)]);
    r.write("thin", 7 * MIB + 100, &pattern(2, 10));
    r.flush("thin");
    r.crash_and_mount();
    assert_eq!(
        runs(&r, "thin", 0, size),
        vec![
            (0, 7 * MIB, true, true),
            (7 * MIB, 8 * MIB, false, false),
            (8 * MIB, size, true, true)
        ]
    );
    // A thick volume is allocated everywhere.
    assert_eq!(
        runs(&r, "thick", 0, 20 * MIB),
        vec![(0, 20 * MIB, false, false)]
    );
}

#[test]
fn bad_queries_are_refused_and_the_extent_cap_is_kept() {
    let mut r = Rig::new(config(1 << 20));
    let v = r.engine.volume_id("thin").unwrap();
    let e = &r.engine;
    assert_eq!(e.block_status(v, 0, 0, 8), Err(Errno::Inval));
    assert_eq!(
        e.block_status(v, 40 * MIB - 512, 1024, 8),
        Err(Errno::Inval)
    );
    assert_eq!(e.block_status(v, u64::MAX, 2, 8), Err(Errno::Inval));
    assert_eq!(e.block_status(VolumeId(9), 0, 512, 8), Err(Errno::Inval));
    for c in [1, 3, 5] {
        r.write("thin", c * MIB, &pattern(3, 4096));
    }
    // Seven runs over 0..7 MiB; a cap of two answers the first two, whole.
    let two = r.engine.block_status(v, 0, 7 * MIB, 2).unwrap();
    assert_eq!(two.len(), 2);
    assert_eq!(two[0].length_bytes + two[1].length_bytes, 2 * MIB);
    assert_eq!(r.engine.block_status(v, 0, 7 * MIB, 99).unwrap().len(), 7);
}

/// Check one answer against the reference: runs tile the range, neighbours differ, a zero
/// run reads as zeros, and a chunk no write ever touched is a hole.
fn check(r: &Rig, vol: &str, model: &[u8], touched: &[bool], what: &str) {
    let size = model.len() as u64;
    let mut pos = 0u64;
    let mut prev: Option<(bool, bool)> = None;
    for e in status(r, vol, 0, size) {
        let (s, end) = (pos as usize, (pos + e.length_bytes) as usize);
        assert!(e.length_bytes > 0, "{what}: empty run");
        assert_ne!(prev, Some((e.hole, e.zero)), "{what}: unmerged runs at {s}");
        prev = Some((e.hole, e.zero));
        if (e.zero || e.hole)
            && let Some(i) = model[s..end].iter().position(|&b| b != 0)
        {
            panic!(
                "{what}: run {s}..{end} reported zero, but byte {} is data",
                s + i
            );
        }
        pos += e.length_bytes;
    }
    assert_eq!(pos, size, "{what}: runs do not cover the volume");
    let mut pos = 0u64;
    for e in status(r, vol, 0, size) {
        let first = pos / MIB;
        let last = (pos + e.length_bytes - 1) / MIB;
        if !e.hole {
            // Allocated runs start and end on chunks someone wrote (or trimmed/zeroed
            // in part, which may keep a chunk allocated).
            assert!(
                (first..=last).any(|c| touched[c as usize]),
                "{what}: untouched chunks {first}..={last} reported allocated"
            );
        }
        pos += e.length_bytes;
    }
    for (c, &t) in touched.iter().enumerate() {
        if !t {
            let st = status(r, vol, c as u64 * MIB, MIB);
            assert_eq!(st.len(), 1, "{what}: untouched chunk {c}");
            assert!(st[0].hole && st[0].zero, "{what}: untouched chunk {c}");
        }
    }
}

fn random_ops_match_the_reference(cfg: EngineConfig, what: &str) {
    for seed in 1..=2u64 {
        let mut r = Rig::new(cfg.clone());
        let mut rng = Lcg(seed);
        let size = 40 * MIB as usize;
        let mut model = vec![0u8; size];
        let mut touched = vec![false; size / MIB as usize];
        for step in 0..300 {
            let max_sectors = if rng.next(4) == 0 { 4096 } else { 16 };
            let sectors = 1 + rng.next(max_sectors) as usize;
            // Stay in the first 24 MiB so some chunks stay untouched.
            let off = rng.next((24 * MIB as usize / 512 - sectors) as u64) as usize * 512;
            let len = sectors * 512;
            let (o, l) = (off as u64, len as u64);
            match rng.next(10) {
                0..=5 => {
                    let d = pattern(step as u8 | 1, len);
                    r.write("thin", o, &d);
                    model[off..off + len].copy_from_slice(&d);
                    for c in o / MIB..=(o + l - 1) / MIB {
                        touched[c as usize] = true;
                    }
                }
                6 | 7 => {
                    let kind = if rng.next(2) == 0 {
                        ReqKind::Trim
                    } else {
                        ReqKind::WriteZeroes
                    };
                    assert_eq!(r.req("thin", kind, o, l, None).result, Ok(()));
                    model[off..off + len].fill(0);
                }
                8 => r.flush("thin"),
                _ if rng.next(3) > 0 => r.flush("thin"),
                _ => {
                    r.flush("thin");
                    r.crash_and_mount();
                }
            }
            // A whole-volume check is costly (the model is scanned): every 25 steps.
            if step % 25 == 24 {
                check(
                    &r,
                    "thin",
                    &model,
                    &touched,
                    &format!("{what} seed {seed} step {step}"),
                );
            }
        }
        assert_eq!(r.read("thin", 0, size as u64), model, "{what} seed {seed}");
    }
}

#[test]
fn random_writes_trims_and_zeroes_match_the_reference() {
    random_ops_match_the_reference(config(1 << 20), "home");
}

#[test]
fn logged_writes_are_data_before_and_after_they_land() {
    let cfg = log_config();
    random_ops_match_the_reference(cfg, "log");
}
