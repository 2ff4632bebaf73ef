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
