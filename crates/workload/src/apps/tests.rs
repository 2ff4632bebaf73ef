use super::*;

/// A closed loop on a device that takes 1 ms per read or write and 3 ms per FLUSH
/// (`closed_loop::run`): (issue time, request) for every request, and the workload.
fn drive(
    kind: AppKind,
    threads: u32,
    loops: u64,
    seed: u64,
) -> (Vec<(u64, WlRequest)>, AppWorkload) {
    let mut w = AppWorkload::new(AppJob {
        kind,
        offset_bytes: 0,
        size_bytes: 1 << 30,
        threads,
        loops: Some(loops),
        runtime_ns: None,
        seed,
    });
    // Its requests name no not-before time, so each is issued when a slot frees.
    let (out, _) = crate::closed_loop::run(&mut w);
    (out, w)
}

fn count(r: &[(u64, WlRequest)], k: WlKind) -> usize {
    r.iter().filter(|x| x.1.kind == k).count()
}

#[test]
fn each_application_has_its_shape() {
    // One thread: every fsync is its own commit (a journal write, then a FLUSH).
    let (v, w) = drive(AppKind::Varmail, 1, 100, 1);
    assert_eq!(
        (
            count(&v, WlKind::Write),
            count(&v, WlKind::Read),
            count(&v, WlKind::Flush)
        ),
        (400, 0, 200),
        "two appends and two commits per loop; reads hit the page cache"
    );
    assert_eq!((w.loops_done(), w.app_ops()), (100, Some(100)));
    for r in &v {
        if r.1.kind == WlKind::Write {
            assert!(
                r.1.offset_bytes % BLOCK == 0 && r.1.len_bytes % BLOCK == 0,
                "{r:?}"
            );
            assert!((BLOCK..=5 * BLOCK).contains(&r.1.len_bytes), "{r:?}");
        }
    }
    let (f, _) = drive(AppKind::Fileserver, 1, 100, 1);
    assert_eq!(count(&f, WlKind::Flush), 0, "fileserver never syncs");
    assert!(f.iter().any(|r| r.1.len_bytes == 128 * KIB));
    let (t, _) = drive(AppKind::Tpcc, 1, 100, 1);
    assert_eq!(count(&t, WlKind::Flush), 100, "one commit per transaction");
    let pages = t.iter().filter(|r| r.1.len_bytes == 16 * KIB).count();
    assert_eq!(pages, 400);
    for r in v.iter().chain(&f).chain(&t) {
        assert!(r.1.offset_bytes + r.1.len_bytes <= 1 << 30, "{r:?}");
    }
    // The redo log is written sequentially.
    let redo: Vec<u64> = t
        .iter()
        .filter(|r| r.1.len_bytes == 4 * KIB)
        .map(|r| r.1.offset_bytes)
        .collect();
    assert!(redo.windows(2).all(|w| w[1] == w[0] + 4 * KIB));
}

/// With one thread, an fsync's FLUSH comes after its append completed and before the
/// thread's next request: a commit's journal write waits for the data, the FLUSH for the
/// journal write.
#[test]
fn a_commit_follows_the_data_it_covers() {
    let (v, _) = drive(AppKind::Varmail, 1, 20, 2);
    // Per fsync: append, journal write, FLUSH, each issued when the previous completed.
    for c in v.chunks(3) {
        let kinds: Vec<WlKind> = c.iter().map(|r| r.1.kind).collect();
        assert_eq!(kinds, [WlKind::Write, WlKind::Write, WlKind::Flush]);
        assert!(
            c[1].0 >= c[0].0 + 1_000_000 && c[2].0 >= c[1].0 + 1_000_000,
            "{c:?}"
        );
        assert!(
            c[1].1.offset_bytes >= (1 << 30) - VARMAIL_JOURNAL,
            "journal area"
        );
    }
}

/// Sixteen threads fsyncing at once share commits (group commit): fewer FLUSHes than
/// fsyncs, never two commits at once, and every loop finishes.
#[test]
fn concurrent_fsyncs_share_a_commit() {
    let (v, w) = drive(AppKind::Varmail, 16, 400, 3);
    let flushes = count(&v, WlKind::Flush);
    assert!(flushes < 400, "{flushes} FLUSHes for 800 fsyncs");
    assert_eq!(flushes as u64, w.commits());
    assert_eq!(w.loops_done(), 400);
    // One commit at a time: FLUSHes are at least a FLUSH's time apart.
    let at: Vec<u64> = v
        .iter()
        .filter(|r| r.1.kind == WlKind::Flush)
        .map(|r| r.0)
        .collect();
    assert!(at.windows(2).all(|p| p[1] >= p[0] + 3_000_000), "{at:?}");
    // Requests from many threads overlap.
    let (t, tw) = drive(AppKind::Tpcc, 16, 400, 3);
    assert!(count(&t, WlKind::Flush) < 400);
    assert_eq!(tw.loops_done(), 400);
}

#[test]
fn same_seed_same_requests() {
    let reqs = |seed| drive(AppKind::Varmail, 16, 50, seed).0;
    assert_eq!(reqs(3), reqs(3));
    assert_ne!(reqs(3), reqs(4));
}
