//! `hot` placement in `tiervisor serve`: fio hammers a small random region of a volume
//! whose data sits on the HDD pool; tier migration promotes that region to the SSD pool
//! (demoting colder chunks to stay within the volume's SSD budget), `ctl stat` shows it,
//! and every byte still reads back as written, before and after a restart.

mod support;

use std::process::Command;

use support::*;

const MIB: u64 = 1 << 20;

const CONFIG: &str = r#"
chunk = "1m"
journal = "4m"
metadata_pool = "ssd"

[tiering]
interval_ms = 50
promote_min_heat = 4

[[pool]]
name = "ssd"
path = "ssd.pool"
size = "256m"
kind = "ssd"

[[pool]]
name = "hdd"
path = "hdd.pool"
size = "1g"
kind = "hdd"

[[volume]]
name = "vm1"
size = "256m"
pool = "hdd"
placement = "hot"
fast_pool = "ssd"
fast_budget = "8m"
"#;

fn stat(d: &TempDir) -> serde_json::Value {
    let out = run(Command::new(bin())
        .args(["ctl", "stat", "--json", "--data-dir"])
        .arg(d.path()));
    serde_json::from_str(&out).unwrap()
}

fn compare(img: &std::path::Path, uri: &str) {
    let out = run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(img)
        .arg(uri));
    assert!(out.contains("Images are identical"), "{out}");
}

#[test]
fn fio_hot_region_is_promoted_to_ssd_and_data_verifies() {
    if !have("fio") || !have("qemu-img") {
        return;
    }
    let d = TempDir::new("tier");
    let conf = d.path().join("tier.toml");
    std::fs::write(&conf, CONFIG).unwrap();
    let s = ServerProc::start(d.path(), &["--config", conf.to_str().unwrap()]);
    // 64 MiB of data: the first 8 chunks fill the SSD budget, the rest land on the HDD.
    let img = d.path().join("data.raw");
    write_random_image(&img, 64 * MIB as usize);
    run(Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&img)
        .arg(s.uri("vm1")));
    let v = stat(&d);
    let vol = &v["engine"]["volumes"][0];
    assert_eq!(
        vol["chunks_by_pool"][0],
        serde_json::json!(["ssd", 8]),
        "{vol}"
    );
    assert_eq!(vol["promotions"], 0);

    // The hot region: 4 MiB at 40 MiB (chunks 40-43), random 4 KiB reads.
    let out = run(fio(d.path()).args([
        "--name=hot",
        "--ioengine=nbd",
        &format!("--uri={}", s.uri("vm1")),
        "--rw=randread",
        "--bs=4k",
        "--offset=40m",
        "--size=4m",
        "--iodepth=4",
        "--time_based",
        "--runtime=3",
    ]));
    assert!(out.contains("err= 0"), "{out}");
    std::thread::sleep(std::time::Duration::from_millis(500));

    let v = stat(&d);
    let vol = &v["engine"]["volumes"][0];
    assert!(vol["promotions"].as_u64().unwrap() >= 4, "{vol}");
    assert!(vol["demotions"].as_u64().unwrap() >= 4, "{vol}");
    assert_eq!(
        vol["chunks_by_pool"][0],
        serde_json::json!(["ssd", 8]),
        "budget kept: {vol}"
    );
    let hottest = vol["monitor"]["hottest"].as_array().unwrap();
    for c in 40..44u64 {
        let h = hottest
            .iter()
            .find(|h| h[0].as_u64() == Some(c))
            .unwrap_or_else(|| panic!("chunk {c} is not among the hottest: {hottest:?}"));
        assert_eq!(h[2], "ssd", "chunk {c} was promoted: {hottest:?}");
    }
    let table = run(Command::new(bin())
        .args(["ctl", "stat", "--data-dir"])
        .arg(d.path()));
    assert!(
        table.contains("placement hot (fast pool ssd)") && table.contains("(heat "),
        "{table}"
    );
    assert!(table.contains(", ssd)"), "{table}");

    // Nothing lost or stale, across the moves and across a clean restart.
    compare(&img, &s.uri("vm1"));
    assert_eq!(s.term(), Some(0));
    let s = ServerProc::start(d.path(), &["--config", conf.to_str().unwrap()]);
    compare(&img, &s.uri("vm1"));
    let v = stat(&d);
    let vol = &v["engine"]["volumes"][0];
    assert_eq!(
        vol["chunks_by_pool"][0],
        serde_json::json!(["ssd", 8]),
        "{vol}"
    );
}
