//! `ctl migrate` of a logged volume in `tiervisor serve` (issue 13): a volume on the `hdd`
//! pool file with live log data (small writes over its chunks, two of them only logged)
//! moves to `hdd2`; the job writes the log back home first (docs/MIGRATION.md, "Logged
//! volumes"). Every block reads back its last write after the job and after a restart, no
//! chunk and no live log data is left on `hdd`, and the volume logs again on `hdd2`.

mod support;

use std::process::Command;

use support::raw_nbd::*;
use support::*;

const CONFIG: &str = r#"
chunk = "1m"
metadata_pool = "ssd"

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
log = true

[[pool]]
name = "hdd2"
path = "hdd2.pool"
size = "64m"
kind = "hdd"
log = true

[[volume]]
name = "vm1"
size = "16m"
pool = "hdd"
"#;

const MIB: usize = 1 << 20;
/// Chunks checked: 0-5 written whole, 6 and 7 only by logged writes.
const CHUNKS: usize = 8;

fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_mul(29).wrapping_add((i % 253) as u8))
        .collect()
}

fn stat(d: &TempDir) -> serde_json::Value {
    let out = run(Command::new(bin())
        .args(["ctl", "stat", "--json", "--data-dir"])
        .arg(d.path()));
    serde_json::from_str(&out).unwrap()
}

/// Live log bytes of pool `p` (by its place in the configuration).
fn live_log_bytes(st: &serde_json::Value, p: usize) -> u64 {
    st["engine"]["pools"][p]["log"]["live_bytes"]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn a_logged_volume_moves_through_ctl_migrate() {
    let d = TempDir::new("log-mig");
    let conf = d.path().join("lm.toml");
    std::fs::write(&conf, CONFIG).unwrap();
    let args = ["--config", conf.to_str().unwrap()];
    let s = ServerProc::start(d.path(), &args);
    let mut reference = vec![0u8; CHUNKS * MIB];
    let mut c = handshake(&s.addr, "vm1");
    for i in 0..6 {
        let data = pattern(i as u8 + 1, MIB);
        assert_eq!(write_at(&mut c, (i * MIB) as u64, &data), 0);
        reference[i * MIB..(i + 1) * MIB].copy_from_slice(&data);
    }
    // Small writes all over the eight chunks go to the log.
    for i in 0..48 {
        let off = (i * 173 * 4096) % (CHUNKS * MIB - 4096);
        let data = pattern(60 + i as u8, 4096);
        assert_eq!(write_at(&mut c, off as u64, &data), 0);
        reference[off..off + 4096].copy_from_slice(&data);
    }
    assert_eq!(flush_all(&mut c), 0);
    let st = stat(&d);
    assert!(live_log_bytes(&st, 1) > 0, "logged on hdd: {st}");
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
        "dbt",
        "--wait",
        "--data-dir",
        dir,
    ]));
    assert!(out.contains("done"), "{out}");
    check_export_by_mib(&s.addr, "vm1", &reference, "after the job");
    let st = stat(&d);
    assert_eq!(
        chunks_on_pool(&st["engine"]["volumes"][0], "hdd"),
        0,
        "{st}"
    );
    assert_eq!(live_log_bytes(&st, 1), 0, "hdd's log is drained: {st}");
    // Logged again, on hdd2.
    let mut c = handshake(&s.addr, "vm1");
    let data = pattern(200, 4096);
    assert_eq!(write_at(&mut c, 7 * MIB as u64 + 8192, &data), 0);
    reference[7 * MIB + 8192..7 * MIB + 12288].copy_from_slice(&data);
    assert_eq!(flush_all(&mut c), 0);
    drop(c);
    let st = stat(&d);
    assert!(live_log_bytes(&st, 2) > 0, "logs on hdd2: {st}");
    assert_eq!(s.term(), Some(0));

    let s = ServerProc::start(d.path(), &args);
    check_export_by_mib(&s.addr, "vm1", &reference, "after a restart");
    let st = stat(&d);
    assert_eq!(
        chunks_on_pool(&st["engine"]["volumes"][0], "hdd"),
        0,
        "{st}"
    );
    assert_eq!(s.term(), Some(0));
}
