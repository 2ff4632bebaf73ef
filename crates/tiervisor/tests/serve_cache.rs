//! `cache` placement in `tiervisor serve`: fio touches a small hot set of a volume whose
//! data sits on the HDD pool, repeatedly; the smq-like policy fills those chunks into the
//! SSD pool (keeping their HDD slots), `ctl stat` (text and JSON) and the metrics show the
//! cache, every 4 KiB block reads back with an intact fio header, and after a restart the
//! data is still there and every cached chunk is counted dirty (clean/dirty is not
//! journaled).

mod support;

use std::process::Command;

use support::*;

const CONFIG: &str = r#"
chunk = "1m"
metadata_pool = "ssd"

[tiering]
interval_ms = 50

[[pool]]
name = "ssd"
path = "ssd.pool"
size = "128m"
kind = "ssd"

[[pool]]
name = "hdd"
path = "hdd.pool"
size = "256m"
kind = "hdd"

[[volume]]
name = "vm1"
size = "64m"
pool = "hdd"
placement = "cache"
cache_policy = "smq"
fast_pool = "ssd"
fast_budget = "8m"
"#;

fn stat(d: &TempDir) -> serde_json::Value {
    let out = run(Command::new(bin())
        .args(["ctl", "stat", "--json", "--data-dir"])
        .arg(d.path()));
    serde_json::from_str(&out).unwrap()
}

fn ssd_chunks(vol: &serde_json::Value) -> u64 {
    let row = &vol["chunks_by_pool"][0];
    assert_eq!(row[0], "ssd", "{vol}");
    row[1].as_u64().unwrap()
}

#[test]
fn fio_hot_set_is_cached_on_ssd_and_survives_a_restart_dirty() {
    if !have("fio") {
        return;
    }
    let d = TempDir::new("cache");
    let conf = d.path().join("cache.toml");
    std::fs::write(&conf, CONFIG).unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let metrics_addr = format!("127.0.0.1:{port}");
    let args = [
        "--config",
        conf.to_str().unwrap(),
        "--metrics",
        &metrics_addr,
    ];
    let s = ServerProc::start(d.path(), &args);
    let uri = format!("--uri={}", s.uri("vm1"));
    let base = ["--name=c", "--ioengine=nbd", &uri];
    // Every block holds data with a verify header per 4 KiB; one write per chunk, so
    // no chunk has the second access smq promotes on.
    let out = run(fio(d.path()).args(base).args([
        "--size=64m",
        "--rw=write",
        "--bs=1m",
        "--iodepth=4",
        "--verify=crc32c",
        "--verify_interval=4k",
        "--do_verify=0",
    ]));
    assert!(out.contains("err= 0"), "{out}");
    let v = stat(&d);
    let vol = &v["engine"]["volumes"][0];
    assert_eq!(vol["cache"]["fills"], 0, "{vol}");
    assert_eq!(vol["cache"]["cached_chunks"], 0, "{vol}");
    assert_eq!(ssd_chunks(vol), 0, "{vol}");

    // The hot set: 4 MiB at 40 MiB (chunks 40-43), random 4 KiB reads and writes.
    let out = run(fio(d.path()).args(base).args([
        "--offset=40m",
        "--size=4m",
        "--rw=randrw",
        "--rwmixread=70",
        "--bs=4k",
        "--iodepth=4",
        "--norandommap",
        "--randrepeat=1",
        "--verify=crc32c",
        "--do_verify=0",
        "--time_based",
        "--runtime=2",
    ]));
    assert!(out.contains("err= 0"), "{out}");
    // smq writes dirty chunks back once the volume has been idle for a second (dm-cache's
    // idle rule, `cache_writeback.rs`): wait for it, up to 20 s on a loaded machine.
    let mut v = stat(&d);
    for _ in 0..80 {
        if v["engine"]["volumes"][0]["cache"]["dirty_chunks"] == 0 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
        v = stat(&d);
    }
    let vol = &v["engine"]["volumes"][0];
    let c = &vol["cache"];
    eprintln!("cache after the hot set: {c}");
    assert_eq!(c["policy"], "smq", "{c}");
    assert_eq!(c["budget_chunks"], 8, "{c}");
    assert!(
        c["fills"].as_u64().unwrap() >= 4,
        "the hot set was filled: {c}"
    );
    let cached = c["cached_chunks"].as_u64().unwrap();
    assert!((4..=8).contains(&cached), "{c}");
    assert_eq!(
        ssd_chunks(vol),
        cached,
        "cached chunks map to the SSD: {vol}"
    );
    // Writes after the fills dirtied the cache; idle, it was all written back.
    assert_eq!(c["dirty_chunks"], 0, "{c}");
    assert_eq!(c["dirty_bytes"], 0, "{c}");
    assert!(c["writebacks"].as_u64().unwrap() >= 1, "{c}");
    assert!(c["writeback_bytes"].as_u64().unwrap() >= 4096, "{c}");
    assert_eq!(c["dirty_at_mount"], 0, "{c}");
    let hottest = vol["monitor"]["hottest"].as_array().unwrap();
    for h in &hottest[..4] {
        let chunk = h[0].as_u64().unwrap();
        assert!((40..44).contains(&chunk), "{hottest:?}");
        assert_eq!(h[2], "ssd", "hot chunk {chunk} is cached: {hottest:?}");
    }
    let table = run(Command::new(bin())
        .args(["ctl", "stat", "--data-dir"])
        .arg(d.path()));
    assert!(
        table.contains(&format!("cache (smq): {cached} of 8 chunks cached")),
        "{table}"
    );
    let metrics = {
        use std::io::{Read, Write};
        let mut m = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        m.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut body = String::new();
        m.read_to_string(&mut body).unwrap();
        unshard_metrics(&body)
    };
    assert!(
        metrics.contains(&format!(
            "tiervisor_cache_fills_total{{volume=\"vm1\"}} {}",
            c["fills"]
        )),
        "{metrics}"
    );
    assert!(
        metrics.contains("tiervisor_cache_evictions_total{volume=\"vm1\",kind=\"clean\"}"),
        "{metrics}"
    );

    // Every block, cached or not, reads back with its header and crc32c.
    let verify = [
        "--size=64m",
        "--rw=read",
        "--bs=64k",
        "--iodepth=4",
        "--verify=crc32c",
        "--verify_interval=4k",
    ];
    let out = run(fio(d.path()).args(base).args(verify));
    assert!(
        out.contains("err= 0") && out.contains("io=64.0MiB"),
        "{out}"
    );

    // A clean shutdown, a restart: the data is there, and mount counts every cached
    // chunk as dirty (it will be written back before it can be evicted).
    // Fills in flight may still finish during the stop, so the count that must be dirty
    // is what the mount found cached, not what stat showed before the stop.
    assert_eq!(s.term(), Some(0));
    let s = ServerProc::start(d.path(), &args);
    let v = stat(&d);
    let vol = &v["engine"]["volumes"][0];
    let cached = vol["cache"]["cached_chunks"].as_u64().unwrap();
    assert!(cached > 0, "{vol}");
    assert_eq!(vol["cache"]["dirty_at_mount"], cached, "{vol}");
    assert!(
        s.log()
            .contains(&format!("{cached} cached chunk(s) counted dirty")),
        "{}",
        s.log()
    );
    let uri = format!("--uri={}", s.uri("vm1"));
    let out = run(fio(d.path())
        .args(["--name=c", "--ioengine=nbd", &uri])
        .args(verify));
    assert!(
        out.contains("err= 0") && out.contains("io=64.0MiB"),
        "{out}"
    );
    assert_eq!(s.term(), Some(0));
}
