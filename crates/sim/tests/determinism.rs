//! Same scenario and seed: byte-identical JSON apart from wall time.

mod common;

use std::path::Path;

use tiervisor_sim::{RunOptions, Scenario, Simulation};

fn run(text: &str, seed: Option<u64>) -> String {
    let sc = Scenario::parse("det.toml", text, Path::new(".")).unwrap();
    let mut r = Simulation::new(
        sc,
        &RunOptions {
            seed,
            ..Default::default()
        },
    )
    .unwrap()
    .run()
    .unwrap();
    r.wall_time_s = 0.0;
    r.to_json()
}

const FIO_MIX: &str = r#"
[[pool]]
name = "ssd"
model = "intel-x25m-80g"
capacity = "8g"
[[pool]]
name = "hdd"
model = "hitachi-7k1000c"
capacity = "50g"
[[volume]]
name = "a"
pool = "hdd"
size = "4g"
[[volume]]
name = "b"
pool = "ssd"
size = "2g"
provisioning = "thin"
[[vm]]
volume = "a"
[vm.fio]
rw = "randrw"
bs = "8k"
iodepth = 4
ios = 3000
fsync = 16
[[vm]]
volume = "b"
[vm.fio]
rw = "randwrite"
bs = "4k"
iodepth = 8
ios = 5000
"#;

#[test]
fn same_seed_same_bytes_different_seed_differs() {
    let a = run(FIO_MIX, Some(11));
    assert_eq!(a, run(FIO_MIX, Some(11)));
    assert_ne!(a, run(FIO_MIX, Some(12)));
    assert!(a.contains("\"ios\": 8"), "report: {a}");
}

#[test]
fn trace_replay_is_deterministic() {
    let Some(dir) = common::shared_traces() else {
        return;
    };
    let text = format!(
        "[[pool]]\nname=\"hdd\"\nmodel=\"hitachi-7k1000c\"\ncapacity=\"100g\"\n[[volume]]\nname=\"v\"\npool=\"hdd\"\nsize=\"20g\"\n\
         [[vm]]\nvolume=\"v\"\ntrace=\"{}\"\ndevices=[1]\nmode=\"timed\"\nspeed=4.0\n",
        dir.join("wsrch-small.trace.xz").display()
    );
    let a = run(&text, None);
    assert_eq!(a, run(&text, None));
    let v: serde_json::Value = serde_json::from_str(&a).unwrap();
    assert_eq!(v["ios"], 8231);
    for key in ["seed", "sim_time_s", "wall_time_s", "ios"] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    let vol = &v["volumes"]["v"];
    for key in ["ios", "read_bytes", "write_bytes", "iops", "exec_time_s"] {
        assert!(vol.get(key).is_some(), "missing volumes.v.{key}");
    }
    for key in ["mean", "p50", "p99", "p999", "max"] {
        assert!(vol["lat_us"].get(key).is_some(), "missing lat_us.{key}");
    }
    for key in [
        "busy_s",
        "host_write_bytes",
        "media_write_bytes",
        "erases",
        "waf",
    ] {
        assert!(
            v["devices"]["hdd"].get(key).is_some(),
            "missing devices.hdd.{key}"
        );
    }
}

#[test]
fn example_scenarios_run() {
    let dir = common::scenarios_dir();
    let mut ran = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let text = std::fs::read_to_string(&p).unwrap();
            if text.contains("shared/traces") && common::shared_traces().is_none() {
                continue;
            }
            let sc = Scenario::load(&p).unwrap_or_else(|e| panic!("{e}"));
            let r = Simulation::new(sc, &RunOptions::default())
                .unwrap()
                .run()
                .unwrap();
            assert!(r.ios > 0 && r.sim_time_s > 0.0, "{}", p.display());
            ran += 1;
        }
    }
    assert!(ran >= 1);
}

/// `shards = 1` is the unsharded system, byte for byte; several shards run the same
/// workload deterministically, report the same volumes and add a line per shard, and
/// every request and device operation is counted on exactly one shard.
#[test]
fn shards_run_deterministically_and_one_shard_is_the_unsharded_run() {
    let base = run(FIO_MIX, Some(11));
    assert_eq!(base, run(&format!("shards = 1\n{FIO_MIX}"), Some(11)));
    assert!(!base.contains("\"shards\""), "{base}");
    let text = format!("shards = 2\n{FIO_MIX}");
    let a = run(&text, Some(11));
    assert_eq!(a, run(&text, Some(11)));
    let v: serde_json::Value = serde_json::from_str(&a).unwrap();
    let b: serde_json::Value = serde_json::from_str(&base).unwrap();
    assert_eq!(v["ios"], b["ios"]);
    assert_eq!(
        v["volumes"].as_object().unwrap().keys().collect::<Vec<_>>(),
        ["a", "b"]
    );
    let shards = v["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 2);
    assert_eq!(shards[0]["volumes"], serde_json::json!(["a"]));
    assert_eq!(shards[1]["volumes"], serde_json::json!(["b"]));
    let requests: u64 = shards.iter().map(|s| s["requests"].as_u64().unwrap()).sum();
    assert_eq!(requests, v["ios"].as_u64().unwrap());
    let ops: u64 = shards
        .iter()
        .map(|s| s["device_ops"].as_u64().unwrap())
        .sum();
    let dev_ops: u64 = v["devices"]
        .as_object()
        .unwrap()
        .values()
        .map(|d| d["ops"].as_u64().unwrap())
        .sum();
    assert_eq!(ops, dev_ops);
    assert!(shards.iter().all(|s| s["device_ops"].as_u64().unwrap() > 0));
}

#[test]
fn bad_shard_counts_are_refused_clearly() {
    let e = Scenario::parse(
        "det.toml",
        &format!("shards = 0\n{FIO_MIX}"),
        Path::new("."),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("det.toml:1") && e.message.contains("shards"),
        "{e}"
    );
    // 64 MiB in 64 slices of 1 MiB: no room for a shard's superblock area and chunks.
    let small =
        "shards = 64\n[[pool]]\nname = \"ssd\"\nmodel = \"intel-x25m-80g\"\ncapacity = \"64m\"\n";
    let sc = Scenario::parse("det.toml", small, Path::new(".")).unwrap();
    let e = Simulation::new(sc, &RunOptions::default()).err().unwrap();
    assert!(
        e.contains("det.toml") && e.contains("pool ssd") && e.contains("64 shards"),
        "{e}"
    );
}
