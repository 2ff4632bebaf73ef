use super::*;

/// A closed loop on a device that takes 1 ms per read or write and 3 ms per FLUSH
/// (`closed_loop::run`): (issue time, request) for every request, the workload and the
/// time the last request ended.
fn drive(job: BenchJob) -> (Vec<(u64, WlRequest)>, BenchWorkload, u64) {
    let mut w = BenchWorkload::new(job);
    let (out, end) = crate::closed_loop::run(&mut w);
    (out, w, end)
}

fn job(kind: BenchKind, procs: u32, ops: u64) -> BenchJob {
    BenchJob {
        procs,
        ops: Some(ops),
        runtime_ns: None,
        ..BenchJob::new(kind, 256 * MIB, 0)
    }
}

fn count(r: &[(u64, WlRequest)], k: WlKind) -> usize {
    r.iter().filter(|x| x.1.kind == k).count()
}

#[test]
fn dbench_has_netbenchs_fsync_share_and_mix() {
    let (v, w, _) = drive(job(BenchKind::Dbench, 2, 20_000));
    assert_eq!(w.ops(), 20_000);
    let journal = 16 * MIB;
    let flushes = count(&v, WlKind::Flush) as f64;
    let share = flushes / v.len() as f64;
    // 130 fsyncs per 3,953 data ops and fsyncs, each fsync two requests: 3.2 %.
    assert!((0.028..0.037).contains(&share), "FLUSH share {share}");
    let data: Vec<&WlRequest> = v
        .iter()
        .map(|x| &x.1)
        .filter(|r| r.kind != WlKind::Flush && r.offset_bytes < 256 * MIB - journal)
        .collect();
    let writes = data.iter().filter(|r| r.kind == WlKind::Write).count() as f64;
    let ws = writes / data.len() as f64;
    assert!((0.21..0.27).contains(&ws), "write share {ws}");
    for r in &data {
        assert!(
            r.offset_bytes % BLOCK == 0 && (4 * KIB..=64 * KIB).contains(&r.len_bytes),
            "{r:?}"
        );
    }
    // Every FLUSH follows its client's journal write, in the journal.
    for (i, x) in v.iter().enumerate() {
        if x.1.kind == WlKind::Flush {
            let before = v[..i]
                .iter()
                .rev()
                .find(|y| y.1.kind == WlKind::Write && y.1.offset_bytes >= 256 * MIB - journal);
            assert!(before.is_some(), "FLUSH {i} without a journal write");
        }
    }
    // Each client keeps to its directory: two halves of the data area, both used.
    let area = (256 * MIB - journal) / 2;
    let low = data
        .iter()
        .filter(|r| r.offset_bytes + r.len_bytes <= area)
        .count();
    let high = data.iter().filter(|r| r.offset_bytes >= area).count();
    assert_eq!(low + high, data.len(), "a request crosses clients' areas");
    assert!(
        low > data.len() / 3 && high > data.len() / 3,
        "{low} {high}"
    );
}

#[test]
fn iozone_writes_and_reads_its_files_sequentially() {
    for (kind, op) in [
        (BenchKind::IozoneWrite, WlKind::Write),
        (BenchKind::IozoneRead, WlKind::Read),
    ] {
        let j = BenchJob {
            record_bytes: 128 * KIB,
            size_bytes: 4 * MIB,
            ..job(kind, 1, 100)
        };
        let (v, _, _) = drive(j);
        let data: Vec<&WlRequest> = v
            .iter()
            .map(|x| &x.1)
            .filter(|r| r.kind != WlKind::Flush)
            .collect();
        assert_eq!(data.len(), 100);
        assert!(
            data.iter()
                .all(|r| r.kind == op && r.len_bytes == 128 * KIB)
        );
        // 32 records a pass: each starts where the last ended, or the file over.
        let mut seq = 0;
        for p in data.windows(2) {
            if p[1].offset_bytes == p[0].offset_bytes + p[0].len_bytes {
                seq += 1;
            } else {
                assert_eq!(p[1].offset_bytes, 0, "{:?}", p[1]);
            }
        }
        assert_eq!(seq, 99 - 3, "three passes restart at the file's start");
        let fsyncs = if op == WlKind::Write { 3 } else { 0 };
        assert_eq!(count(&v, WlKind::Flush), fsyncs, "one fsync per write pass");
    }
    // Two processes: two files, each read in order.
    let (v, _, _) = drive(BenchJob {
        size_bytes: 4 * MIB,
        ..job(BenchKind::IozoneRead, 2, 32)
    });
    for base in [0, 2 * MIB] {
        let mine: Vec<u64> = v
            .iter()
            .map(|x| x.1.offset_bytes)
            .filter(|o| (base..base + 2 * MIB).contains(o))
            .collect();
        assert_eq!(mine.len(), 16, "one pass each");
        assert!(
            mine.windows(2).all(|p| p[1] == p[0] + 128 * KIB),
            "{mine:?}"
        );
    }
}

#[test]
fn a_kernel_compile_reads_sources_thinks_and_writes_objects() {
    let units = 2_000;
    let (v, w, end) = drive(job(BenchKind::KernelCompile, 1, units));
    assert_eq!(w.ops(), units);
    assert_eq!(count(&v, WlKind::Read), 2 * units as usize);
    assert_eq!(count(&v, WlKind::Write), units as usize);
    assert_eq!(count(&v, WlKind::Flush), 0);
    let half = 128 * MIB;
    let mut cursor = half;
    for (_, r) in &v {
        match r.kind {
            WlKind::Read => assert!(r.offset_bytes + r.len_bytes <= half, "{r:?}"),
            _ => {
                // Objects are allocated one after the other.
                assert_eq!(r.offset_bytes, cursor, "{r:?}");
                assert!((8 * KIB..=64 * KIB).contains(&r.len_bytes));
                cursor += r.len_bytes;
            }
        }
    }
    // Three 1 ms requests and a 5 ms mean think per unit, one process: 8 ms a unit.
    let per_unit_ms = end as f64 / units as f64 / 1e6;
    assert!((7.5..8.5).contains(&per_unit_ms), "{per_unit_ms} ms a unit");
    // Two jobs overlap their think times.
    let (_, _, end2) = drive(job(BenchKind::KernelCompile, 2, units));
    assert!(end2 * 10 < end * 6, "{end2} against {end}");
}

#[test]
fn the_same_seed_gives_the_same_requests_and_a_runtime_stops_the_job() {
    for kind in [
        BenchKind::Dbench,
        BenchKind::IozoneWrite,
        BenchKind::KernelCompile,
    ] {
        let a = drive(job(kind, 3, 500)).0;
        assert_eq!(a, drive(job(kind, 3, 500)).0);
        let other = BenchJob {
            seed: 2,
            ..job(kind, 3, 500)
        };
        if kind != BenchKind::IozoneWrite {
            assert_ne!(a, drive(other).0, "{kind:?}");
        }
        let timed = BenchJob {
            ops: None,
            runtime_ns: Some(200_000_000),
            ..job(kind, 3, 0)
        };
        let (v, _, end) = drive(timed);
        assert!(
            !v.is_empty() && end < 300_000_000,
            "{kind:?} ended at {end}"
        );
        assert!(v.iter().all(|x| x.0 < 200_000_000 + 70_000_000));
    }
}
