//! The SURGE generator driven by a toy disk: one request at a time, 1 ms each, in order.

use super::*;

fn small(seed: u64, cache: Option<u64>) -> SurgeConfig {
    SurgeConfig {
        files: 5_000,
        region_bytes: 1 << 34,
        requests: 4_000,
        page_cache_bytes: cache,
        seed,
        ..SurgeConfig::paper(1 << 34)
    }
}

/// Run to the end; returns (request, issue time) in issue order.
fn drive(w: &mut SurgeWorkload) -> Vec<(WlRequest, u64)> {
    let mut out = Vec::new();
    let mut now = 0u64;
    // Pending: (not before, index, request).
    let mut pending: Vec<(u64, u64, WlRequest)> = Vec::new();
    let mut index = 0u64;
    loop {
        while pending.len() < w.depth() as usize {
            match w.next(now) {
                Some(r) => {
                    pending.push((r.at_ns.unwrap_or(now), index, r));
                    index += 1;
                }
                None => break,
            }
        }
        if pending.is_empty() {
            return out;
        }
        // Serve the earliest ready request (index breaks ties).
        let i = (0..pending.len())
            .min_by_key(|&i| (pending[i].0.max(now), pending[i].1))
            .unwrap();
        let (at, idx, r) = pending.swap_remove(i);
        now = now.max(at);
        out.push((r, now));
        now += 1_000_000;
        w.completed(idx, now);
    }
}

#[test]
fn same_seed_same_requests_other_seed_others() {
    let run = |seed| {
        drive(&mut SurgeWorkload::new(small(seed, None)).unwrap())
            .into_iter()
            .map(|(r, t)| (r.offset_bytes, r.len_bytes, t))
            .collect::<Vec<_>>()
    };
    let a = run(3);
    assert_eq!(a.len(), 4_000);
    assert_eq!(a, run(3));
    assert_ne!(a, run(4));
}

#[test]
fn o_direct_reads_blocks_of_files_inside_the_region() {
    let mut w = SurgeWorkload::new(small(1, None)).unwrap();
    let used = w.layout().used_bytes;
    let reqs = drive(&mut w);
    for (r, _) in &reqs {
        assert_eq!(r.kind, WlKind::Read);
        assert!(r.len_bytes > 0 && r.len_bytes <= 8192 && r.len_bytes % 4096 == 0);
        assert!(r.offset_bytes + r.len_bytes <= used);
    }
    // Blocks of a file follow each other: many requests start where another ended.
    let ends: std::collections::HashSet<u64> = reqs
        .iter()
        .map(|(r, _)| r.offset_bytes + r.len_bytes)
        .collect();
    let follow = reqs
        .iter()
        .filter(|(r, _)| ends.contains(&r.offset_bytes))
        .count();
    assert!(
        follow * 3 > reqs.len(),
        "{follow} of {} follow another",
        reqs.len()
    );
    assert_eq!(w.blocks, 4_000);
}

#[test]
fn processes_sleep_between_on_periods() {
    // 50 processes against a 1 ms disk: the disk is the bottleneck, yet processes
    // returning from a sleep make requests wait for their not-before time.
    let mut w = SurgeWorkload::new(small(2, None)).unwrap();
    let reqs = drive(&mut w);
    let span_ms = reqs.last().unwrap().1 / 1_000_000;
    // Mean sleep is 6 ms per block (Pareto(1.5, 2) mean 6): with 50 processes the toy
    // disk still idles at times, so the run outlasts 1 ms per request.
    assert!(span_ms > 4_000, "run took {span_ms} ms for 4000 requests");
}

#[test]
fn page_cache_absorbs_repeats_and_reads_ahead() {
    let mut direct = SurgeWorkload::new(small(5, None)).unwrap();
    let d = drive(&mut direct);
    let mut cached = SurgeWorkload::new(small(5, Some(64 << 20))).unwrap();
    let c = drive(&mut cached);
    let (hits, misses) = cached.cache_hits_misses().unwrap();
    assert_eq!(misses, 4_000);
    assert!(hits > misses, "hits {hits} misses {misses}");
    let mean =
        |v: &[(WlRequest, u64)]| v.iter().map(|(r, _)| r.len_bytes).sum::<u64>() / v.len() as u64;
    assert!(
        mean(&c) > 2 * mean(&d),
        "cached {} direct {}",
        mean(&c),
        mean(&d)
    );
    assert!(c.iter().all(|(r, _)| r.len_bytes <= 128 * 1024 + 8192));
}

#[test]
fn popular_files_are_read_most() {
    let mut w = SurgeWorkload::new(small(9, None)).unwrap();
    let top = w.by_rank[0] as u64;
    let top_ext = w.layout().extents(top).to_vec();
    let reqs = drive(&mut w);
    let in_top = reqs
        .iter()
        .filter(|(r, _)| {
            top_ext
                .iter()
                .any(|&(o, l)| r.offset_bytes >= o && r.offset_bytes < o + l)
        })
        .count() as f64;
    // P(rank 0) = ln 2 / ln 5001 = 8.1 % of file choices; its share of requests depends
    // on its size, but it is far above a uniform 1 / 5000.
    assert!(
        in_top / reqs.len() as f64 > 0.01,
        "{in_top} requests to the top file"
    );
}

#[test]
fn bad_parameters_are_errors() {
    assert!(
        SurgeWorkload::new(SurgeConfig {
            processes: 0,
            ..small(1, None)
        })
        .is_err()
    );
    assert!(
        SurgeWorkload::new(SurgeConfig {
            region_bytes: 1 << 20,
            ..small(1, None)
        })
        .is_err()
    );
}

/// `SleepMode::PerBlock`: a process pauses at least the Pareto scale (2 ms) after every
/// block, so its reads are never back to back; by default (`OnPeriod`) it reads an ON
/// period's blocks back to back and pauses once.
#[test]
fn per_block_sleeps_pause_between_every_two_reads() {
    // Per process, the shortest gap between two of its reads' issue times (the toy disk
    // serves each in 1 ms).
    let min_gap_ms = |sleep: SleepMode| -> u64 {
        // One process, so no read waits behind another's.
        let mut w = SurgeWorkload::new(SurgeConfig {
            sleep,
            processes: 1,
            ..small(6, None)
        })
        .unwrap();
        let mut last: HashMap<u32, u64> = HashMap::new();
        let mut min = u64::MAX;
        for (r, t) in drive(&mut w) {
            let p = r.context.expect("surge names its processes");
            if let Some(prev) = last.insert(p, t) {
                min = min.min(t - prev);
            }
        }
        min / 1_000_000
    };
    assert!(min_gap_ms(SleepMode::PerBlock) >= 3);
    assert_eq!(min_gap_ms(SleepMode::OnPeriod), 1);
}
