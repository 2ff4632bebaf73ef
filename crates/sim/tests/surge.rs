//! The SURGE-like workload in scenarios: parsing, pacing, determinism and the metrics the
//! scheduling tables use.

use std::path::Path;

use tiervisor_sim::{RunOptions, Scenario, SimReport, Simulation};

fn scenario(extra: &str) -> String {
    format!(
        r#"
seed = 7
[[pool]]
name = "cheetah"
model = "cheetah-15k4"
queue_depth = 1
[[volume]]
name = "www"
pool = "cheetah"
size = "8g"
provisioning = "thick"
[[vm]]
name = "surge"
volume = "www"
[vm.surge]
files = 20000
requests = 3000
{extra}
"#
    )
}

fn run(text: &str) -> SimReport {
    let sc = Scenario::parse("surge.toml", text, Path::new(".")).unwrap();
    let mut r = Simulation::new(sc, &RunOptions::default())
        .unwrap()
        .run()
        .unwrap();
    r.wall_time_s = 0.0;
    r
}

#[test]
fn o_direct_run_is_deterministic_and_saturates_the_disk() {
    let a = run(&scenario(""));
    assert_eq!(a.to_json(), run(&scenario("")).to_json());
    let vm = &a.vms["surge"];
    assert_eq!(vm.ios, 3000);
    let dev = &a.devices["cheetah"];
    // 50 processes keep a 15K rpm disk busy: response far above service.
    assert!(dev.utilisation > 0.9, "utilisation {}", dev.utilisation);
    assert!(vm.response.mean_ms > 10.0 * dev.service.mean_ms);
    assert!(dev.service.mean_ms > 0.2 && dev.service.mean_ms < 10.0);
    assert!(dev.service.variance_ms2 > 0.0 && vm.response.variance_ms2 > 0.0);
    // Sectors per ms agree with the bytes the VM read over the run.
    let from_vm = vm.read_bytes as f64 / 512.0 / (a.sim_time_s * 1e3);
    assert!((dev.sectors_per_ms / from_vm - 1.0).abs() < 0.02);
}

/// Each of the 50 processes is its own I/O context from the workload through the
/// engine to the device: the scheduler serves 50 issuers, not one VM.
#[test]
fn every_process_reaches_the_device_as_its_own_context() {
    for scheduler in ["fifo", "cfq"] {
        let text = scenario("").replace(
            "queue_depth = 1",
            &format!("queue_depth = 1\nscheduler = \"{scheduler}\""),
        );
        let r = run(&text);
        assert_eq!(r.devices["cheetah"].client_contexts, 50, "{scheduler}");
    }
}

#[test]
fn page_cache_sends_fewer_larger_requests() {
    let direct = run(&scenario(""));
    let cached = run(&scenario("page_cache = \"64m\""));
    let per_req = |r: &SimReport| r.vms["surge"].read_bytes / r.vms["surge"].ios;
    assert!(per_req(&cached) > 3 * per_req(&direct));
}

#[test]
fn bad_surge_keys_name_file_and_line() {
    for (extra, want) in [
        (
            "block = \"1000\"",
            "block: expected a positive multiple of 4k",
        ),
        ("processes = 0", "processes: expected a positive number"),
        ("think = 3", "unknown field"),
        (
            "sleep = \"often\"",
            "expected \"on_period\" or \"per_block\"",
        ),
    ] {
        let e = Scenario::parse("surge.toml", &scenario(extra), Path::new("."))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("surge.toml:") && e.contains(want),
            "{extra}: {e}"
        );
    }
}
