//! The buffer against a reference: a byte array of what the VMs wrote last, and a device
//! byte array that write-backs land on. A read through the buffer (device bytes overlaid
//! with `read_overlay`) must always equal the reference, and FLUSH readiness must mean
//! that the device holds what the flushed volume wrote before the FLUSH.

use super::*;
use std::collections::BTreeMap;

const SPAN: u64 = 256;

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn apply(buf: &mut [u8], s: u64, e: u64, fill: &Fill) {
    match fill {
        Fill::Data(d) => buf[s as usize..e as usize].copy_from_slice(d),
        Fill::Zeros | Fill::Hole => buf[s as usize..e as usize].fill(0),
        Fill::Untracked => panic!("tests track data"),
    }
}

fn read(b: &WriteBuffer, dev: &[u8], s: u64, e: u64) -> Vec<u8> {
    let mut out = dev.to_vec();
    for (a, z, f) in b.read_overlay(s, e) {
        apply(&mut out, a, z, &f);
    }
    out[s as usize..e as usize].to_vec()
}

fn cfg() -> Option<WriteBufferConfig> {
    Some(WriteBufferConfig {
        size_bytes: 128,
        max_age_ns: 10,
    })
}

#[test]
fn reads_writebacks_and_flushes_match_a_reference() {
    for seed in 1..200u64 {
        let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut b = WriteBuffer::new(cfg());
        let mut latest = vec![0u8; SPAN as usize];
        let mut dev = vec![0u8; SPAN as usize];
        // What each volume wrote, per byte, as of each write: for FLUSH checks.
        let mut owner = vec![u32::MAX; SPAN as usize];
        let mut flights: Vec<usize> = Vec::new();
        // Per byte: the step of the write it holds last, and of what the device holds;
        // each flight's versions; FLUSHes waiting: (vol, barrier, bytes and versions the
        // device must hold at least once the FLUSH is ready).
        let mut ver = vec![0u64; SPAN as usize];
        let mut dev_ver = vec![0u64; SPAN as usize];
        let mut flight_ver: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        let mut flushes: Vec<(u32, u64, BTreeMap<usize, u64>)> = Vec::new();
        let mut next_key = 0usize;
        let mut holds_released = 0usize;
        let mut holds_made = 0usize;
        for step in 0..300u64 {
            let mut rel = Vec::new();
            match r.below(10) {
                0..=4 => {
                    let s = r.below(SPAN - 1);
                    let e = (s + 1 + r.below(24)).min(SPAN);
                    let vol = r.below(3) as u32;
                    let fill = if r.below(5) == 0 {
                        if r.below(2) == 0 {
                            Fill::Zeros
                        } else {
                            Fill::Hole
                        }
                    } else {
                        let byte = (step % 251 + 1) as u8;
                        Fill::Data(Bytes::from(vec![byte; (e - s) as usize]))
                    };
                    if !b.has_room(vol, e - s) {
                        continue;
                    }
                    let h = b.hold(step);
                    holds_made += 1;
                    b.admit(s..e, vol, fill.clone(), step, h, &mut rel, false);
                    apply(&mut latest, s, e, &fill);
                    owner[s as usize..e as usize].fill(vol);
                    ver[s as usize..e as usize].fill(step + 1);
                    // Bytes now another volume's are no longer the FLUSH's concern (the
                    // engine never buffers two volumes' data for one range).
                    for (v, _, need) in &mut flushes {
                        if *v != vol {
                            need.retain(|&i, _| !(s as usize..e as usize).contains(&i));
                        }
                    }
                }
                5..=6 => {
                    let vol = (r.below(4) != 0).then(|| r.below(3) as u32);
                    let barrier = if r.below(2) == 0 || flushes.is_empty() {
                        b.barrier()
                    } else {
                        flushes[r.below(flushes.len() as u64) as usize].1
                    };
                    for s in b.writeback_candidates(vol, barrier) {
                        let (_, f) = b.take_for_writeback(s);
                        flight_ver.insert(next_key, ver[f.start as usize..f.end as usize].to_vec());
                        b.start_flight(next_key, f);
                        flights.push(next_key);
                        next_key += 1;
                    }
                }
                7 if flushes.len() < 4 => {
                    // A FLUSH of one volume arrives: what it wrote so far must land.
                    let v = r.below(3) as u32;
                    let need = (0..SPAN as usize)
                        .filter(|&i| owner[i] == v)
                        .map(|i| (i, ver[i]))
                        .collect();
                    flushes.push((v, b.barrier(), need));
                }
                _ => {
                    if flights.is_empty() {
                        continue;
                    }
                    let i = r.below(flights.len() as u64) as usize;
                    let key = flights.swap_remove(i);
                    let fail = r.below(6) == 0;
                    let f = b
                        .end_flight(key, fail.then_some(step), fail, &mut rel)
                        .unwrap();
                    let fv = flight_ver.remove(&key).unwrap();
                    if !fail {
                        apply(&mut dev, f.start, f.end, f.fill.as_ref().unwrap());
                        dev_ver[f.start as usize..f.end as usize].copy_from_slice(&fv);
                    } else {
                        // The engine fails the FLUSHes a failed write-back covers.
                        flushes.retain(|&(v, barrier, _)| {
                            let pf = PendingFlush {
                                key: 0,
                                vol: Some(v),
                                barrier,
                                failed: None,
                                arrived_ns: 0,
                            };
                            !f.covers
                                .iter()
                                .any(|&(cv, q)| WriteBuffer::covers(&pf, cv, q))
                        });
                    }
                }
            }
            // A FLUSH that is ready finds every byte it covers on the device, as its
            // version or a newer one.
            flushes.retain(|(v, barrier, need)| {
                if !b.flush_ready(Some(*v), *barrier) {
                    return true;
                }
                for (&i, &want) in need {
                    assert!(
                        dev_ver[i] >= want,
                        "seed {seed} step {step}: vol {v} FLUSH ready but byte {i} holds \
                         version {} < {want}",
                        dev_ver[i]
                    );
                }
                false
            });
            holds_released += rel.len();
            b.check()
                .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
            let (s, e) = (r.below(SPAN / 2), SPAN / 2 + r.below(SPAN / 2));
            assert_eq!(
                read(&b, &dev, s, e),
                latest[s as usize..e as usize],
                "seed {seed}"
            );
            // A volume whose FLUSH is ready has all its latest bytes on the device.
            for v in 0..3u32 {
                if b.flush_ready(Some(v), b.barrier()) {
                    for i in 0..SPAN as usize {
                        if owner[i] == v {
                            assert_eq!(dev[i], latest[i], "seed {seed} vol {v} byte {i}");
                        }
                    }
                }
            }
        }
        // Drain: everything written back, every hold released.
        while !b.is_empty() {
            for s in b.writeback_candidates(None, b.barrier()) {
                let (_, f) = b.take_for_writeback(s);
                flight_ver.insert(next_key, Vec::new());
                b.start_flight(next_key, f);
                flights.push(next_key);
                next_key += 1;
            }
            let mut rel = Vec::new();
            for key in flights.drain(..) {
                flight_ver.remove(&key);
                let f = b.end_flight(key, None, false, &mut rel).unwrap();
                apply(&mut dev, f.start, f.end, f.fill.as_ref().unwrap());
            }
            holds_released += rel.len();
        }
        assert_eq!(dev, latest, "seed {seed}");
        assert_eq!(
            holds_released, holds_made,
            "seed {seed}: every hold released once"
        );
        assert!(b.holds.is_empty());
    }
}

#[test]
fn a_tagged_flush_leaves_other_volumes_buffered() {
    let mut b = WriteBuffer::new(cfg());
    let mut rel = Vec::new();
    let h = b.hold(0);
    b.admit(0..8, 0, Fill::Zeros, 0, h, &mut rel, false);
    let h = b.hold(0);
    b.admit(16..24, 1, Fill::Zeros, 0, h, &mut rel, false);
    let barrier = b.barrier();
    assert!(!b.flush_ready(Some(0), barrier));
    let c = b.writeback_candidates(Some(0), barrier);
    assert_eq!(c, vec![0]);
    let (_, f) = b.take_for_writeback(0);
    b.start_flight(7, f);
    assert!(
        !b.flush_ready(Some(0), barrier),
        "waits for its write-back to land"
    );
    b.end_flight(7, None, false, &mut rel);
    assert!(b.flush_ready(Some(0), barrier));
    assert!(
        !b.flush_ready(None, barrier),
        "volume 1's data is still buffered"
    );
    assert_eq!(b.dirty_len(), 1);
    // A write after the FLUSH arrived is not waited for.
    let h = b.hold(0);
    b.admit(0..8, 0, Fill::Zeros, 0, h, &mut rel, false);
    assert!(b.flush_ready(Some(0), barrier));
}

#[test]
fn fair_share_limits_one_volume() {
    let mut b = WriteBuffer::new(cfg());
    let mut rel = Vec::new();
    assert!(b.has_room(0, 128));
    let h = b.hold(0);
    b.admit(0..64, 0, Fill::Zeros, 0, h, &mut rel, false);
    // Volume 1 arriving makes two active volumes: 64 each.
    assert!(b.has_room(1, 64));
    assert!(!b.has_room(1, 65));
    let h = b.hold(0);
    b.admit(64..128, 1, Fill::Zeros, 0, h, &mut rel, false);
    assert!(!b.has_room(0, 1));
    assert!(!b.has_room(2, 1), "the buffer is full");
}

#[test]
fn a_write_replacing_flushed_data_is_waited_for() {
    // DST seed 1042: a FLUSH waited for a piece that could not be written back yet (an
    // older write to its range was in flight); a newer write replaced the piece, took a
    // fresh admission number past the FLUSH's barrier, and the FLUSH completed with
    // neither the piece's bytes nor the newer ones on the device.
    for fresh_seq in [false, true] {
        let mut b = WriteBuffer::new(cfg());
        let mut rel = Vec::new();
        let h = b.hold(0);
        b.admit(0..8, 0, Fill::Zeros, 5, h, &mut rel, fresh_seq);
        let barrier = b.barrier();
        let h = b.hold(0);
        b.admit(0..12, 0, Fill::Zeros, 9, h, &mut rel, fresh_seq);
        let waits = !b.flush_ready(Some(0), barrier);
        assert_eq!(waits, !fresh_seq, "fresh_seq {fresh_seq}");
        if !fresh_seq {
            // The newer piece is written back for it, and counts as dirty since the
            // older one was admitted.
            assert_eq!(b.writeback_candidates(Some(0), barrier), vec![0]);
            assert_eq!(b.oldest_admitted_ns(), Some(5));
        }
    }
}

#[test]
fn a_write_queued_before_newer_buffered_data_does_not_replace_it() {
    // DST seed 84: a direct write waited in the scheduler while a newer write of the
    // same sectors was buffered; dispatched, it cut the newer piece, and when it then
    // failed the sectors read the data from before both.
    let mut b = WriteBuffer::new(cfg());
    let mut rel = Vec::new();
    let h = b.hold(0);
    b.admit(0..8, 0, Fill::Zeros, 0, h, &mut rel, false);
    let queued_at = b.barrier();
    let h = b.hold(0);
    b.admit(
        16..24,
        0,
        Fill::Data(Bytes::from(vec![7u8; 8])),
        0,
        h,
        &mut rel,
        false,
    );
    // The direct write of [0, 24) is dispatched now: it replaces only the older piece.
    let cut = b.cut(0, 24, queued_at, &mut rel, None);
    assert_eq!(cut.len(), 1);
    assert_eq!(b.dirty_len(), 1, "the newer piece stays");
    assert_eq!(b.read_overlay(16, 24).len(), 1);
    b.check().unwrap();
}

#[test]
fn a_failed_direct_write_puts_back_what_it_cut() {
    // DST seed 1042 at fault level 1 (space faults): a direct write cut a buffered piece
    // and failed with ENOSPC; the piece's bytes were gone from RAM and never reached the
    // device. They are buffered again, under their old admission (a FLUSH waits for
    // them), except where newer bytes were absorbed meanwhile.
    for failed in [false, true] {
        let mut b = WriteBuffer::new(cfg());
        let mut rel = Vec::new();
        let old = Fill::Data(Bytes::from(vec![1u8; 16]));
        let h = b.hold(3);
        b.admit(0..16, 0, old, 0, h, &mut rel, false);
        let barrier = b.barrier();
        let mut replaced = Vec::new();
        let covers = b.cut(0, 32, b.barrier(), &mut rel, Some(&mut replaced));
        assert!(
            rel.is_empty(),
            "the cut bytes keep their hold while in flight"
        );
        let f = Flight {
            start: 0,
            end: 32,
            fill: Some(Fill::Data(Bytes::from(vec![2u8; 32]))),
            covers: covers.iter().map(|r| (r.vol, r.seq)).collect(),
            hold: None,
            written: 0,
            replaced,
        };
        b.start_flight(9, f);
        // Newer bytes over part of the range, absorbed while the write is in flight.
        let h = b.hold(4);
        b.admit(
            8..12,
            0,
            Fill::Data(Bytes::from(vec![3u8; 4])),
            1,
            h,
            &mut rel,
            false,
        );
        assert!(!b.flush_ready(Some(0), barrier), "waits for the write");
        b.end_flight(9, None, failed, &mut rel);
        b.check().unwrap();
        // The device holds zeros (the failed write) or its bytes (not modelled here).
        let dev = vec![0u8; SPAN as usize];
        let got = read(&b, &dev, 0, 16);
        let was = if failed { 1u8 } else { 0 };
        let want = [vec![was; 8], vec![3; 4], vec![was; 4]].concat();
        assert_eq!(got, want, "failed {failed}");
        assert_eq!(
            b.flush_ready(Some(0), barrier),
            !failed,
            "a FLUSH waits for the restored bytes"
        );
        assert_eq!(rel.is_empty(), failed, "the restored bytes keep their hold");
    }
}
