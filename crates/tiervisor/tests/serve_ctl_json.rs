//! `tiervisor ctl ... --json`: every admin command prints one JSON value on standard
//! output (for scripts), and a refusal still exits 2 with the reason on standard error.

mod support;

use std::process::Command;

use support::*;

/// Run `ctl ARGS --json` and parse its standard output as JSON.
fn ctl_json(d: &TempDir, args: &[&str]) -> serde_json::Value {
    let o = Command::new(bin())
        .arg("ctl")
        .args(args)
        .args(["--json", "--data-dir"])
        .arg(d.path())
        .output()
        .expect("run ctl");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{args:?}: {}{}",
        stdout,
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{args:?}: {e}: {stdout}"))
}

#[test]
fn every_ctl_command_speaks_json() {
    let d = TempDir::new("ctl-json");
    let conf = d.path().join("c.toml");
    std::fs::write(
        &conf,
        one_pool_config("128m", "scheduler = \"mclock\"", "vm1", "weight = 2"),
    )
    .unwrap();
    let s = ServerProc::start(d.path(), &["--config", conf.to_str().unwrap()]);
    let st = ctl_json(&d, &["stat"]);
    assert!(st["engine"]["volumes"].is_array(), "{st}");
    let q = ctl_json(&d, &["qos", "vm1", "--weight", "7"]);
    assert_eq!(q["qos"]["weight"], 7, "{q}");
    let c = ctl_json(&d, &["volume", "create", "new", "--size", "8m", "--wait"]);
    assert_eq!(
        (c["name"].as_str(), c["state"].as_str()),
        (Some("new"), Some("ready")),
        "{c}"
    );
    let l = ctl_json(&d, &["volume", "list"]);
    assert_eq!(l.as_array().map(Vec::len), Some(2), "{l}");
    let m = ctl_json(&d, &["migrate", "status"]);
    assert_eq!(m, serde_json::json!([]), "no migrations yet");
    // A refusal: exit status 2, the reason on standard error, nothing on standard output.
    let o = Command::new(bin())
        .args(["ctl", "qos", "vm1", "--weight", "0", "--json", "--data-dir"])
        .arg(d.path())
        .output()
        .expect("run ctl");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("weight"));
    let bye = ctl_json(&d, &["shutdown"]);
    assert_eq!(bye["ok"], true, "{bye}");
    assert_eq!(s.wait_exit(), Some(0));
}
