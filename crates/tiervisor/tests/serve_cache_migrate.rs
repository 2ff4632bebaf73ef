//! `ctl migrate` of a `cache` volume in `tiervisor serve` (issue 13): a volume on the
//! `hdd` pool file with chunks cached (some dirty) on the `ssd` one moves to `hdd2`; the
//! job drains the cache first (docs/MIGRATION.md, "Cache volumes"). Every block reads back
//! its last write after the job and after a restart, and no chunk is left on `hdd`.

mod support;

use std::process::Command;
use std::time::Duration;

use support::raw_nbd::*;
use support::*;

const CONFIG: &str = r#"
chunk = "1m"
metadata_pool = "ssd"

[tiering]
interval_ms = 20
writeback_percent = 100

[[pool]]
name = "ssd"
path = "ssd.pool"
size = "64m"
kind = "ssd"

[[pool]]
name = "hdd"
path = "hdd.pool"
size = "64m"
kind = "hdd"

[[pool]]
name = "hdd2"
path = "hdd2.pool"
size = "64m"
kind = "hdd"

[[volume]]
name = "vm1"
size = "16m"
pool = "hdd"
placement = "cache"
cache_policy = "bcache"
fast_pool = "ssd"
fast_budget = "4m"
"#;

const MIB: usize = 1 << 20;
/// Chunks written.
const CHUNKS: usize = 8;

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(29).wrapping_add((i % 253) as u8))
        .collect()
}

fn stat_volume(d: &TempDir) -> serde_json::Value {
    let out = run(Command::new(bin())
        .args(["ctl", "stat", "--json", "--data-dir"])
        .arg(d.path()));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["engine"]["volumes"][0].clone()
}

#[test]
fn a_cache_volume_with_dirty_chunks_moves_through_ctl_migrate() {
    let d = TempDir::new("cache-mig");
    let conf = d.path().join("cm.toml");
    std::fs::write(&conf, CONFIG).unwrap();
    let args = ["--config", conf.to_str().unwrap()];
    let s = ServerProc::start(d.path(), &args);
    let mut reference = vec![0u8; CHUNKS * MIB];
    let mut c = handshake(&s.addr, "vm1");
    for i in 0..CHUNKS {
        let data = pattern(i as u8 + 1, MIB);
        assert_eq!(write_at(&mut c, (i * MIB) as u64, &data), 0);
        reference[i * MIB..(i + 1) * MIB].copy_from_slice(&data);
    }
    assert_eq!(flush_all(&mut c), 0);
    // bcache admits on a first access: small reads of chunks 0-3, then writes to them
    // once cached (dirty: writeback_percent 100 keeps them so).
    let mut cached = 0;
    for _ in 0..50 {
        for i in 0..4 {
            read_at(&mut c, (i * MIB + 4096) as u64, 4096);
        }
        std::thread::sleep(Duration::from_millis(40));
        cached = stat_volume(&d)["cache"]["cached_chunks"]
            .as_u64()
            .unwrap_or(0);
        if cached >= 2 {
            break;
        }
    }
    assert!(cached >= 2, "cached chunks: {cached}");
    for i in 0..4 {
        let data = pattern(90 + i as u8, 8192);
        let off = i * MIB + 65536;
        assert_eq!(write_at(&mut c, off as u64, &data), 0);
        reference[off..off + 8192].copy_from_slice(&data);
    }
    assert_eq!(flush_all(&mut c), 0);
    let vol = stat_volume(&d);
    assert!(vol["cache"]["dirty_chunks"].as_u64().unwrap() >= 1, "{vol}");
    drop(c);

    let dir = d.path().to_str().unwrap();
    let out = run(Command::new(bin()).args([
        "ctl",
        "migrate",
        "start",
        "vm1",
        "--to",
        "hdd2",
        "--scheme",
        "lr",
        "--wait",
        "--data-dir",
        dir,
    ]));
    assert!(out.contains("done"), "{out}");
    check_export_by_mib(&s.addr, "vm1", &reference, "after the job");
    let vol = stat_volume(&d);
    assert_eq!(chunks_on_pool(&vol, "hdd"), 0, "{vol}");
    assert!(
        vol["cache"]["writebacks"].as_u64().unwrap() >= 1,
        "the dirty chunks were written back: {vol}"
    );
    // A start to where every home copy is now is refused.
    let (ok, out) = try_run(Command::new(bin()).args([
        "ctl",
        "migrate",
        "start",
        "vm1",
        "--to",
        "hdd2",
        "--data-dir",
        dir,
    ]));
    assert!(!ok && out.contains("already lives on pool hdd2"), "{out}");
    assert_eq!(s.term(), Some(0));

    let s = ServerProc::start(d.path(), &args);
    check_export_by_mib(&s.addr, "vm1", &reference, "after a restart");
    let vol = stat_volume(&d);
    assert_eq!(chunks_on_pool(&vol, "hdd"), 0, "{vol}");
    assert_eq!(s.term(), Some(0));
}
