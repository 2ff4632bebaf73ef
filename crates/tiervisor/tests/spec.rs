//! One system specification: a scenario and a server configuration that describe the same
//! pools, volumes and engine keys build the same engine configuration (issue 11 item 3).
//! Only what is the driver's own may differ: the simulator carries no data, and each
//! driver picks the system's UUID.

use std::path::Path;

use tiervisor_engine::EngineConfig;
use tiervisor_server::config::ServerConfig;
use tiervisor_sim::Scenario;

/// The shared part, as both files write it.
const SHARED_ENGINE: &str = r#"
chunk = "256k"
journal = "1m"
commit_interval_ms = 250
metadata_pool = "fast"
[tiering]
max_moves = 2
"#;

const SHARED_VOLUMES: &str = r#"
[[volume]]
name = "db"
pool = "slow"
size = "1g"
placement = "hot"
fast_budget = "128m"
reservation_iops = 100
[[volume]]
name = "logs"
pool = "fast"
size = "256m"
provisioning = "thick"
"#;

fn scenario(engine: &str, volumes: &str) -> EngineConfig {
    let text = format!(
        "{engine}\n[[pool]]\nname = \"fast\"\nmodel = \"intel-x25m-80g\"\ncapacity = \"4g\"\n\
         write_buffer = \"256m\"\ndirect = true\n\
         [[pool]]\nname = \"slow\"\nmodel = \"hitachi-7k1000c\"\ncapacity = \"16g\"\nscheduler = \"deadline\"\n\
         {volumes}"
    );
    let sc = Scenario::parse("same.scenario.toml", &text, Path::new("."))
        .unwrap_or_else(|e| panic!("{e}"));
    tiervisor_sim::driver::engine_config(&sc, 1)
}

fn server(engine: &str, volumes: &str) -> EngineConfig {
    let text = format!(
        "{engine}\n[[pool]]\nname = \"fast\"\npath = \"fast.pool\"\nkind = \"ssd\"\nsize = \"4g\"\n\
         write_buffer = \"256m\"\ndirect = true\n\
         [[pool]]\nname = \"slow\"\npath = \"slow.pool\"\nkind = \"hdd\"\nsize = \"16g\"\nscheduler = \"deadline\"\n\
         {volumes}"
    );
    ServerConfig::parse("same.server.toml", &text)
        .unwrap_or_else(|e| panic!("{e}"))
        .engine
}

/// The driver's own choices, set alike so the rest can be compared whole.
fn shared_part(mut e: EngineConfig) -> EngineConfig {
    e.system_uuid = [0; 16];
    e.track_data = true;
    e
}

#[test]
fn a_scenario_and_a_server_config_saying_the_same_build_the_same_engine() {
    let sim = scenario(SHARED_ENGINE, SHARED_VOLUMES);
    assert!(!sim.track_data, "the simulator runs timing only");
    let sim = shared_part(sim);
    let srv = shared_part(server(SHARED_ENGINE, SHARED_VOLUMES));
    assert_eq!(sim, srv);
    // The defaults the two drivers used to disagree on are now one.
    assert!(sim.discard_freed, "discards are on in both");
    assert_eq!(
        sim.pools.iter().map(|p| p.queue_depth).collect::<Vec<_>>(),
        vec![32, 1],
        "queue depth by medium in both"
    );
    // The host write buffer is the engine's in both (`direct` is the server's own).
    assert_eq!(
        sim.pools
            .iter()
            .map(|p| p.write_buffer.map(|w| w.size_bytes))
            .collect::<Vec<_>>(),
        vec![Some(256 << 20), None]
    );
    // Without any engine keys, too.
    let bare = "[[volume]]\nname = \"v\"\npool = \"slow\"\nsize = \"1g\"\n";
    assert_eq!(
        shared_part(scenario("", bare)),
        shared_part(server("", bare))
    );
}

#[test]
fn both_drivers_reject_the_same_things_at_the_same_line() {
    for (bad, what) in [
        (
            "[[volume]]\nname = \"has space\"\npool = \"slow\"\nsize = \"1g\"\n",
            "volume name",
        ),
        (
            "[[volume]]\nname = \"v\"\npool = \"slow\"\nsize = \"1g\"\n[[volume]]\nname = \"v\"\npool = \"slow\"\nsize = \"1g\"\n",
            "defined twice",
        ),
        (
            "[[volume]]\nname = \"v\"\npool = \"slow\"\nsize = \"1g\"\nplacement = \"hot\"\nfast_pool = \"slow\"\n",
            "fast_pool",
        ),
    ] {
        let sc = Scenario::parse(
            "s.toml",
            &format!("[[pool]]\nname = \"slow\"\nmodel = \"hitachi-7k1000c\"\n# a server names a path here\ncapacity = \"16g\"\n{bad}"),
            Path::new("."),
        )
        .expect_err(bad);
        let sv = ServerConfig::parse(
            "s.toml",
            &format!(
                "[[pool]]\nname = \"slow\"\npath = \"p\"\nkind = \"hdd\"\nsize = \"16g\"\n{bad}"
            ),
        )
        .expect_err(bad);
        assert_eq!((sc.line, &sc.message), (sv.line, &sv.message), "{bad}");
        assert!(sc.message.contains(what), "{sc}");
    }
    // The same write buffer rules.
    let sc = Scenario::parse(
        "s.toml",
        "[[pool]]\nname = \"p\"\nmodel = \"intel-x25m-80g\"\n# path\nwrite_buffer = \"100k\"\n",
        Path::new("."),
    )
    .unwrap_err();
    let sv = ServerConfig::parse(
        "s.toml",
        "[[pool]]\nname = \"p\"\npath = \"p\"\nkind = \"ssd\"\nwrite_buffer = \"100k\"\nsize = \"1g\"\n",
    )
    .unwrap_err();
    assert_eq!((sc.line, &sc.message), (sv.line, &sv.message));
    assert!(sc.message.contains("at least 1m"), "{sc}");
    // The same minimum pool size.
    let small = "[[pool]]\nname = \"p\"\nmodel = \"hitachi-7k1000c\"\n# path\ncapacity = \"8m\"\n";
    let sc = Scenario::parse("s.toml", small, Path::new(".")).unwrap_err();
    let sv = ServerConfig::parse(
        "s.toml",
        "[[pool]]\nname = \"p\"\npath = \"p\"\nkind = \"hdd\"\nsize = \"8m\"\n",
    )
    .unwrap_err();
    assert_eq!((sc.line, &sc.message), (sv.line, &sv.message));
}
