//! The log-structured write path in `tiervisor serve`: fio's 4 KiB random writes with
//! crc32c verification go through a pool with `log = true`; `ctl stat` shows the log at
//! work; the data verifies again after a kill -9 and restart (everything was flushed by
//! fio's final fsync).

mod support;

use std::path::Path;
use std::process::Command;

use support::*;

const CONFIG: &str = r#"
chunk = "1m"
journal = "4m"
metadata_pool = "ssd"

[log]
segment = "4m"
cleaner = "cost-benefit"

[[pool]]
name = "ssd"
path = "ssd.pool"
size = "512m"
kind = "ssd"
log = true

[[volume]]
name = "vm1"
size = "128m"
pool = "ssd"
provisioning = "thin"
"#;

fn fio_randwrite(dir: &Path, uri: &str, verify_only: bool) -> String {
    let mut args = vec![
        "--name=log".to_string(),
        "--ioengine=nbd".into(),
        format!("--uri={uri}"),
        "--rw=randwrite".into(),
        "--bs=4k".into(),
        "--size=96m".into(),
        "--iodepth=8".into(),
        "--verify=crc32c".into(),
        "--do_verify=1".into(),
        "--end_fsync=1".into(),
    ];
    if verify_only {
        args.push("--verify_only".into());
    }
    run(fio(dir).args(&args))
}

#[test]
fn fio_random_writes_through_the_log_verify_across_a_crash() {
    if !have("fio") {
        return;
    }
    let d = TempDir::new("log");
    let conf = d.path().join("log.toml");
    std::fs::write(&conf, CONFIG).unwrap();
    let s = ServerProc::start(d.path(), &["--config", conf.to_str().unwrap()]);
    let out = fio_randwrite(d.path(), &s.uri("vm1"), false);
    assert!(out.contains("err= 0"), "{out}");
    let st: serde_json::Value = serde_json::from_str(&run(Command::new(bin())
        .args(["ctl", "stat", "--json", "--data-dir"])
        .arg(d.path())))
    .unwrap();
    let log = &st["engine"]["pools"][0]["log"];
    // 96 MiB of 4 KiB writes, all taken by the log, gathered into far fewer appends.
    assert!(log["user_writes"].as_u64().unwrap() >= 24_000, "{log}");
    assert!(
        log["appends"].as_u64().unwrap() < log["user_writes"].as_u64().unwrap(),
        "{log}"
    );
    assert_eq!(log["home_fallbacks"], 0, "{log}");
    let table = run(Command::new(bin())
        .args(["ctl", "stat", "--data-dir"])
        .arg(d.path()));
    assert!(
        table.contains("log ssd") && table.contains("write amplification"),
        "{table}"
    );
    // Crash: the segment table is rebuilt from the journal; fio verifies every block.
    s.kill9();
    let s = ServerProc::start(d.path(), &["--config", conf.to_str().unwrap()]);
    let out = fio_randwrite(d.path(), &s.uri("vm1"), true);
    assert!(out.contains("err= 0"), "{out}");
    assert!(
        out.contains("READ: bw=") && out.contains("io=96.0MiB"),
        "verified nothing: {out}"
    );
    assert_eq!(s.term(), Some(0));
}
