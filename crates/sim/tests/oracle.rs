//! `placement = "oracle"`: the chunks placed on the fast pool before the run are the
//! most accessed ones of the whole workload, up to the pool's room (issue 17).

use std::collections::BTreeMap;
use std::path::Path;

use tiervisor_engine::{PoolId, VolumeId};
use tiervisor_sim::{RunOptions, Scenario, Simulation};
use tiervisor_workload::WlKind;

const SCENARIO: &str = r#"
seed = 5
[[pool]]
name = "meta"
model = "intel-320-160g"
capacity = "1g"
[[pool]]
name = "hdd"
model = "hitachi-7k1000c"
capacity = "10g"
[[pool]]
name = "ssd"
model = "intel-320-160g"
capacity = "17m"
[[volume]]
name = "v"
pool = "hdd"
size = "256m"
prefill = true
placement = "oracle"
fast_pool = "ssd"
[[vm]]
volume = "v"
[vm.fio]
rw = "randrw"
bs = "4k"
size = "64m"
ios = 4000
random_distribution = "zipf:0.9"
"#;

#[test]
fn the_oracle_places_the_top_k_chunks_by_access_count() {
    let sc = Scenario::parse("oracle.toml", SCENARIO, Path::new(".")).unwrap();
    // The reference: count every request of the generated stream per 1 MiB chunk.
    let (mut w, _) = sc.vms[0].workload.build(256 << 20, sc.seed, 0).unwrap();
    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
    while let Some(r) = w.next(0) {
        if r.kind != WlKind::Flush {
            *counts.entry(r.offset_bytes >> 20).or_default() += 1;
        }
    }
    let mut sim = Simulation::new(sc, &RunOptions::default()).unwrap();
    sim.prepare().unwrap();
    let placed: Vec<u64> = sim.oracle_placed().iter().map(|p| p.1).collect();
    // The SSD's room: 17 MiB less its superblock chunk.
    assert_eq!(placed.len(), 16, "{placed:?}");
    let lowest_placed = placed.iter().map(|c| counts[c]).min().unwrap();
    let highest_left = counts
        .iter()
        .filter(|(c, _)| !placed.contains(c))
        .map(|(_, n)| *n)
        .max()
        .unwrap();
    assert!(
        lowest_placed >= highest_left,
        "placed down to {lowest_placed} accesses, left one with {highest_left}"
    );
    // Ties are broken by chunk number, so the set is exactly the sorted reference's top 16.
    let mut reference: Vec<(u64, u64)> = counts.iter().map(|(c, n)| (*c, *n)).collect();
    reference.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let top: Vec<u64> = reference[..16].iter().map(|x| x.0).collect();
    assert_eq!(placed, top);
    // And the engine maps exactly those on the SSD, every other touched chunk on the HDD.
    for c in 0..64u64 {
        let want = if top.contains(&c) {
            PoolId(2)
        } else {
            PoolId(1)
        };
        assert_eq!(
            sim.engine().chunk_pool(VolumeId(0), c),
            Some(want),
            "chunk {c}"
        );
    }
    // Nothing moves during the run.
    let report = sim.run().unwrap();
    assert_eq!(
        report.volumes["v"].promotions + report.volumes["v"].demotions,
        0
    );
}

#[test]
fn the_oracle_needs_prefill_and_a_fast_pool() {
    let e = Scenario::parse(
        "oracle.toml",
        &SCENARIO.replace("prefill = true\n", ""),
        Path::new("."),
    )
    .unwrap_err();
    assert_eq!(e.line, Some(19), "{e}");
    assert!(e.message.contains("prefill = true"), "{e}");
    let e = Scenario::parse(
        "oracle.toml",
        &SCENARIO.replace("fast_pool = \"ssd\"", "fast_pool = \"hdd\""),
        Path::new("."),
    )
    .unwrap_err();
    assert!(
        e.message.contains("fast_pool other than its own pool"),
        "{e}"
    );
}

/// Two phases with disjoint hot sets of 16 chunks each, every chunk read exactly 300
/// times, on an SSD with room for 16: the static oracle can hold only one phase's set
/// (ties go to the lower chunk numbers: phase A's), so phase B runs on the HDD. The
/// dynamic oracle moves phase B's chunks in as phase A ends, through the engine's tier
/// moves, and must be much faster; every chunk stays mapped once, no request fails.
#[test]
fn the_dynamic_oracle_moves_ahead_of_a_phase_change() {
    let dir = std::env::temp_dir().join(format!("tv-oracle-phases-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Disksim: time device lba sectors type (1 = read); closed loop ignores the times.
    let mut trace = String::new();
    let mut x: u64 = 12345;
    let mut next = |n: u64| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) % n
    };
    for phase in 0..2u64 {
        let mut reqs: Vec<u64> = (0..16).flat_map(|c| [phase * 16 + c; 300]).collect();
        for i in (1..reqs.len()).rev() {
            reqs.swap(i, next(i as u64 + 1) as usize);
        }
        for c in reqs {
            let lba = (c << 20) / 512 + next(256) * 8;
            trace.push_str(&format!("0 0 {lba} 8 1\n"));
        }
    }
    std::fs::write(dir.join("phases.trace"), trace).unwrap();
    let scenario = |placement: &str| {
        SCENARIO
            .replace("oracle\"", &format!("{placement}\""))
            .replace("size = \"256m\"", "size = \"64m\"")
            .split("[[vm]]")
            .next()
            .unwrap()
            .to_string()
            + "[[vm]]\nvolume = \"v\"\ntrace = \"phases.trace\"\nformat = \"disksim\"\nmode = \"closed\"\ndepth = 1\n"
    };
    let run = |placement: &str| {
        let sc = Scenario::parse("phases.toml", &scenario(placement), &dir).unwrap();
        let mut sim = Simulation::new(sc, &RunOptions::default()).unwrap();
        sim.prepare().unwrap();
        let placed: Vec<u64> = sim.oracle_placed().iter().map(|p| p.1).collect();
        assert_eq!(placed, (0..16).collect::<Vec<_>>(), "{placement}");
        sim.run().unwrap()
    };
    let fixed = run("oracle");
    let moving = run("oracle-dynamic");
    assert_eq!(
        moving.sim_time_s,
        run("oracle-dynamic").sim_time_s,
        "deterministic"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    let (f, m) = (&fixed.volumes["v"], &moving.volumes["v"]);
    assert_eq!(
        f.promotions + f.demotions,
        0,
        "the static oracle never moves"
    );
    assert!(
        (14..=20).contains(&m.promotions) && m.demotions == m.promotions,
        "phase B's chunks swapped in once: {} / {}",
        m.promotions,
        m.demotions
    );
    assert_eq!(m.chunks_by_pool["ssd"], 16, "{:?}", m.chunks_by_pool);
    assert_eq!(m.chunks_by_pool["hdd"], 16, "{:?}", m.chunks_by_pool);
    assert_eq!(m.errors + f.errors, 0);
    assert!(
        moving.sim_time_s < 0.6 * fixed.sim_time_s,
        "dynamic {} s against static {} s",
        moving.sim_time_s,
        fixed.sim_time_s
    );
}
