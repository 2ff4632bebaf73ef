//! `tiervisor load`: a scenario's workloads replayed against a real NBD export.

mod support;

use std::process::Command;

use support::*;

const FIO: &str = r#"
seed = 7
[[pool]]
name = "ssd"
model = "intel-320-160g"
capacity = "1g"
[[volume]]
name = "vm1"
pool = "ssd"
size = "64m"
[[vm]]
name = "writer"
volume = "vm1"
[vm.fio]
rw = "randwrite"
bs = "4k"
iodepth = 8
ios = 2000
fsync = 16
"#;

/// A command's stdout as JSON (its stderr may carry warnings).
fn json(cmd: &mut Command) -> serde_json::Value {
    let o = cmd.output().expect("run command");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{cmd:?}: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn a_fio_job_runs_against_the_server_with_the_counts_sim_would_make() {
    let d = TempDir::new("load");
    let sc = d.path().join("s.toml");
    std::fs::write(&sc, FIO).unwrap();
    let s = ServerProc::start(&d.path().join("data"), &[]);
    let uri = format!("nbd://{}", s.addr);
    let v = json(Command::new(bin()).args(["load", &uri, sc.to_str().unwrap(), "--json"]));
    let w = &v["vms"]["writer"];
    // 2,000 writes and a FLUSH after every 16th but the last (the job ends at 2,000).
    assert_eq!(w["ios"], 2124, "{v}");
    assert_eq!(w["errors"], 0, "{v}");
    assert_eq!(w["write_bytes"], 2000 * 4096, "{v}");
    assert!(w["lat_us"]["p50"].as_f64().unwrap() > 0.0, "{v}");
    // The server saw them: its counters match what load sent.
    let st = json(
        Command::new(bin())
            .args(["ctl", "stat", "--json", "--data-dir"])
            .arg(d.path().join("data")),
    );
    let vol = st["engine"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "vm1")
        .unwrap_or_else(|| panic!("{st}"));
    assert_eq!(vol["write"]["requests"], 2000, "{vol}");
    assert_eq!(vol["flush"]["requests"], 124, "{vol}");
    // The same definition runs in the simulator with the same request count.
    let sim = json(Command::new(bin()).args(["sim", sc.to_str().unwrap(), "--json"]));
    assert_eq!(sim["vms"]["writer"]["ios"], w["ios"], "sim: {sim}");
    drop(s);
}

/// A threaded `[vm.app]` (varmail's 8 threads sharing journal commits) finishes every
/// loop against the server, whose threads wait on commits in flight (`Workload::ready`),
/// and reports the loops as `app_ops`, as `sim` does.
#[test]
fn a_threaded_app_finishes_its_loops_against_the_server() {
    let d = TempDir::new("load-app");
    let sc = d.path().join("s.toml");
    let text = FIO.replace("size = \"64m\"", "size = \"256m\"").replace(
        "[vm.fio]\nrw = \"randwrite\"\nbs = \"4k\"\niodepth = 8\nios = 2000\nfsync = 16\n",
        "[vm.app]\nkind = \"varmail\"\nthreads = 8\nloops = 40\n",
    );
    assert!(text.contains("[vm.app]"), "{text}");
    std::fs::write(&sc, text).unwrap();
    let s = ServerProc::start(&d.path().join("data"), &[]);
    let uri = format!("nbd://{}", s.addr);
    let v = json(Command::new(bin()).args(["load", &uri, sc.to_str().unwrap(), "--json"]));
    let w = &v["vms"]["writer"];
    assert_eq!(w["app_ops"], 40, "{v}");
    assert_eq!(w["errors"], 0, "{v}");
    let sim = json(Command::new(bin()).args(["sim", sc.to_str().unwrap(), "--json"]));
    assert_eq!(sim["vms"]["writer"]["app_ops"], 40, "sim: {sim}");
    drop(s);
}

#[test]
fn a_timed_trace_is_issued_at_its_times() {
    let d = TempDir::new("load-timed");
    // 20 writes 20 ms apart: a timed replay takes at least 380 ms, a closed one not.
    let trace: String = (0..20)
        .map(|i| format!("0,{},4096,w,{:.3}\n", i * 8, i as f64 * 0.02))
        .collect();
    std::fs::write(d.path().join("t.spc"), trace).unwrap();
    let sc = |mode: &str| {
        let p = d.path().join(format!("{mode}.toml"));
        std::fs::write(
            &p,
            FIO.split("[[vm]]").next().unwrap().to_string()
                + &format!(
                    "[[vm]]\nname = \"t\"\nvolume = \"vm1\"\ntrace = \"t.spc\"\nformat = \"spc\"\nmode = \"{mode}\"\n"
                ),
        )
        .unwrap();
        p
    };
    let s = ServerProc::start(&d.path().join("data"), &[]);
    let uri = format!("nbd://{}", s.addr);
    let timed =
        json(Command::new(bin()).args(["load", &uri, sc("timed").to_str().unwrap(), "--json"]));
    let t = &timed["vms"]["t"];
    assert_eq!(t["ios"], 20, "{timed}");
    assert!(t["exec_time_s"].as_f64().unwrap() >= 0.38, "{timed}");
    let closed =
        json(Command::new(bin()).args(["load", &uri, sc("closed").to_str().unwrap(), "--json"]));
    assert!(
        closed["vms"]["t"]["exec_time_s"].as_f64().unwrap() < 0.3,
        "{closed}"
    );
    drop(s);
}

/// A SURGE-like VM `web` (`processes`, `requests`, 200 files) on FIO's volume, in a
/// scenario in `d`, and a server for it: the server, its URI and the scenario.
fn surge_against_a_server(
    d: &TempDir,
    processes: u32,
    requests: u32,
) -> (ServerProc, String, std::path::PathBuf) {
    let sc = d.path().join("s.toml");
    let text = FIO.split("[[vm]]").next().unwrap().to_string()
        + &format!(
            "[[vm]]\nname = \"web\"\nvolume = \"vm1\"\n[vm.surge]\nprocesses = {processes}\nfiles = 200\nblock = \"8k\"\nrequests = {requests}\n"
        );
    std::fs::write(&sc, text).unwrap();
    let s = ServerProc::start(&d.path().join("data"), &[]);
    let uri = format!("nbd://{}", s.addr);
    (s, uri, sc)
}

/// NBD carries no process id, so the server's I/O context is the connection: with
/// `--connections process` a workload's processes (SURGE's) each get their own, as cfq
/// sees a guest's processes; by default a VM is one connection.
#[test]
fn each_process_gets_its_own_connection_when_asked() {
    let d = TempDir::new("load-procs");
    let (s, uri, sc) = surge_against_a_server(&d, 6, 600);
    let sc = sc.to_str().unwrap();
    let served = || {
        json(
            Command::new(bin())
                .args(["ctl", "stat", "--json", "--data-dir"])
                .arg(d.path().join("data")),
        )["server"]["connections_total"]
            .as_u64()
            .unwrap()
    };
    let one = json(Command::new(bin()).args(["load", &uri, sc, "--json"]));
    assert_eq!(one["vms"]["web"]["connections"], 1, "{one}");
    assert_eq!(one["vms"]["web"]["ios"], 600, "{one}");
    // `ctl stat` itself is not an NBD connection.
    assert_eq!(served(), 1);
    let each =
        json(Command::new(bin()).args(["load", &uri, sc, "--json", "--connections", "process"]));
    let w = &each["vms"]["web"];
    assert_eq!(w["connections"], 6, "{each}");
    assert_eq!(w["ios"], 600, "{each}");
    assert_eq!(w["errors"], 0, "{each}");
    assert_eq!(served(), 7);
    drop(s);
}

/// A paced process's response time starts when it wakes (its request's not-before
/// time), as in the simulator, not when the workload made the request before its sleep:
/// SURGE's OFF sleeps (Pareto, at least 2 ms a block) would otherwise count as waiting.
#[test]
fn a_sleeping_process_s_response_time_starts_when_it_wakes() {
    let d = TempDir::new("load-paced");
    let (s, uri, sc) = surge_against_a_server(&d, 4, 400);
    let v = json(Command::new(bin()).args(["load", &uri, sc.to_str().unwrap(), "--json"]));
    let w = &v["vms"]["web"];
    assert_eq!(w["ios"], 400, "{v}");
    let service_ms = w["lat_us"]["mean"].as_f64().unwrap() / 1e3;
    let response_ms = w["response"]["mean_ms"].as_f64().unwrap();
    // Four processes and an unthrottled page-cached pool: a request waits behind at most
    // three others, so its response is a few services, not a sleep.
    assert!(
        response_ms <= 4.0 * service_ms + 2.0,
        "response {response_ms} ms against service {service_ms} ms: {v}"
    );
    drop(s);
}

#[test]
fn bad_uris_scenarios_and_exports_are_refused_with_the_reason() {
    let d = TempDir::new("load-bad");
    let sc = d.path().join("s.toml");
    std::fs::write(&sc, FIO).unwrap();
    let big = d.path().join("big.toml");
    std::fs::write(&big, FIO.replace("size = \"64m\"", "size = \"900g\"")).unwrap();
    let s = ServerProc::start(&d.path().join("data"), &[]);
    let uri = format!("nbd://{}", s.addr);
    let sc = sc.to_str().unwrap();
    for (args, why) in [
        (vec!["load", "http://x/y", sc], "expected nbd://"),
        (
            vec!["load", &uri, sc, "--vm", "nope"],
            "no vm named \"nope\"",
        ),
        (vec!["load", &format!("{uri}/nope"), sc], "no export named"),
        (
            vec!["load", &uri, big.to_str().unwrap()],
            "the scenario's volume has",
        ),
        (vec!["load", &uri, "/nonexistent.toml"], "nonexistent.toml"),
    ] {
        let (ok, out) = try_run(Command::new(bin()).args(&args));
        assert!(!ok && out.contains(why), "{args:?}: {out}");
    }
    drop(s);
}
