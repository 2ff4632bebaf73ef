//! Per-volume QoS in `serve` (issue 12 item 4): a volume with `limit_iops` on an mClock
//! pool is held to its limit through NBD, and `ctl qos` changes it on the running server.

mod support;

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use support::raw_nbd::*;
use support::*;

const NBD_CMD_WRITE: u16 = 1;

/// Completed 4 KiB writes per second over `secs`, `depth` in flight, cycling over 64 KiB.
fn write_iops(s: &mut TcpStream, depth: usize, secs: f64) -> f64 {
    let data = vec![0x5au8; 4096];
    let mut handle = 0u64;
    let send = |s: &mut TcpStream, h: u64| {
        send_req(s, MAGIC, NBD_CMD_WRITE, h, (h % 16) * 4096, 4096, &data)
    };
    for _ in 0..depth {
        send(s, handle);
        handle += 1;
    }
    // Warm up: the first completions may ride on idle credit.
    for _ in 0..depth {
        assert_eq!(read_reply(s).0, 0);
        send(s, handle);
        handle += 1;
    }
    let t0 = Instant::now();
    let mut done = 0u64;
    while t0.elapsed().as_secs_f64() < secs {
        assert_eq!(read_reply(s).0, 0);
        done += 1;
        send(s, handle);
        handle += 1;
    }
    let rate = done as f64 / t0.elapsed().as_secs_f64();
    for _ in 0..depth {
        assert_eq!(read_reply(s).0, 0);
    }
    rate
}

/// Completed 4 KiB writes per second between `from` and `to`, `depth` in flight until
/// `to`, scattered over `span_blocks` blocks (random writes to a seek-modelled pool).
/// Connections measured together share `from` and `to`: with a warm-up or an end of
/// their own, the slower one would run alone at the end and count the whole pool.
fn write_rate_between(
    s: &mut TcpStream,
    depth: usize,
    span_blocks: u64,
    from: Instant,
    to: Instant,
) -> f64 {
    let data = vec![0x5au8; 4096];
    let send = |s: &mut TcpStream, h: u64| {
        let block = h.wrapping_mul(0x9e37_79b9_7f4a_7c15) % span_blocks;
        send_req(s, MAGIC, NBD_CMD_WRITE, h, block * 4096, 4096, &data)
    };
    for h in 0..depth as u64 {
        send(s, h);
    }
    let (mut next, mut in_flight, mut done) = (depth as u64, depth, 0u64);
    while in_flight > 0 {
        assert_eq!(read_reply(s).0, 0);
        in_flight -= 1;
        let now = Instant::now();
        done += u64::from(now >= from && now < to);
        if now < to {
            send(s, next);
            next += 1;
            in_flight += 1;
        }
    }
    done as f64 / (to - from).as_secs_f64()
}

/// A system of one HDD pool `disk` of `pool_size` under mClock at queue depth 1 (plus
/// `pool_keys`), with top-level keys `top` and two 32 MiB thick volumes (name, keys).
fn mclock_disk_config(
    top: &str,
    pool_size: &str,
    pool_keys: &str,
    vols: [(&str, &str); 2],
) -> String {
    let mut c = format!(
        "chunk = \"1m\"\njournal = \"4m\"\n{top}\n[[pool]]\nname = \"disk\"\npath = \"disk.pool\"\nsize = \"{pool_size}\"\nkind = \"hdd\"\nqueue_depth = 1\nscheduler = \"mclock\"\n{pool_keys}\n"
    );
    for (name, keys) in vols {
        c += &format!(
            "[[volume]]\nname = \"{name}\"\nsize = \"32m\"\npool = \"disk\"\nprovisioning = \"thick\"\n{keys}\n"
        );
    }
    c
}

/// The share of its limit a limited volume must at least reach: below it, the limit
/// acted as a lower one (a limit of 200 enforced as 100 fails; 400 reads apart from 200).
const LIMIT_FLOOR: f64 = 0.75;

#[test]
fn a_limited_volume_is_held_to_its_limit_and_ctl_qos_changes_it() {
    let d = TempDir::new("qos");
    let conf = d.path().join("qos.toml");
    std::fs::write(
        &conf,
        one_pool_config("128m", "scheduler = \"mclock\"", "lim", "limit_iops = 200"),
    )
    .unwrap();
    let srv = ServerProc::start(d.path(), &["--config", conf.to_str().unwrap()]);
    let mut s = handshake(&srv.addr, "lim");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // The limit is the ceiling (10 % over fails: an unlimited page-cached pool does
    // thousands). The floor only shows the limit was not turned into a lower one: a
    // server starved of CPU (a full suite beside other builds, load 15) measured 173.
    let iops = write_iops(&mut s, 8, 3.0);
    assert!(
        (LIMIT_FLOOR * 200.0..=220.0).contains(&iops),
        "limit 200 IOPS, measured {iops:.0}"
    );
    let out = run(Command::new(bin())
        .args(["ctl", "qos", "lim", "--limit-iops", "400", "--data-dir"])
        .arg(d.path()));
    assert!(out.contains("limit 400 IOPS"), "{out}");
    let iops = write_iops(&mut s, 8, 3.0);
    assert!(
        (LIMIT_FLOOR * 400.0..=440.0).contains(&iops),
        "limit 400 IOPS, measured {iops:.0}"
    );
    let st = run(Command::new(bin())
        .args(["ctl", "stat", "--data-dir"])
        .arg(d.path()));
    assert!(st.contains("QoS: reservation none, limit 400 IOPS"), "{st}");
    // A bad value is refused with the reason, and nothing changes.
    let (ok, out) = try_run(
        Command::new(bin())
            .args(["ctl", "qos", "lim", "--weight", "0", "--data-dir"])
            .arg(d.path()),
    );
    assert!(!ok && out.contains("weight 0"), "{out}");
    drop(s);
    srv.term();
}

/// A reservation where it is what protects a volume (issue 12): one mClock pool that
/// can do only about 150 IOPS (a page-cached file behind the throttle's linear model at
/// k = 1, queue depth 1, so the scheduler decides every dispatch), shared by `res`
/// (weight 1, 60 IOPS reserved) and `hog` (weight 9), each with 8 writes in flight. By
/// weight alone `res` would get a tenth of the pool; with the reservation it gets 60.
/// One shard (`--threads 1`): QoS is per shard, and two volumes on two shards would not
/// share a scheduler (docs/ARCHITECTURE.md, "Sharding").
#[test]
fn a_reservation_holds_against_a_heavier_volume_and_only_with_it() {
    let d = TempDir::new("qos-res");
    let conf = d.path().join("res.toml");
    std::fs::write(
        &conf,
        mclock_disk_config(
            "",
            "96m",
            "throttle = { model = \"linear\", k = 1, adapt = false }\n",
            [
                ("res", "weight = 1\nreservation_iops = 60"),
                ("hog", "weight = 9"),
            ],
        ),
    )
    .unwrap();
    let srv = ServerProc::start(
        d.path(),
        &["--threads", "1", "--config", conf.to_str().unwrap()],
    );
    // Both volumes write at once for 4 s; the last 3 are counted.
    let both = || {
        let from = Instant::now() + Duration::from_secs(1);
        let to = from + Duration::from_secs(3);
        std::thread::scope(|t| {
            let run = |name: &'static str| {
                let addr = srv.addr.clone();
                t.spawn(move || {
                    let mut s = handshake(&addr, name);
                    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    write_rate_between(&mut s, 8, 32 * 256, from, to)
                })
            };
            let (res, hog) = (run("res"), run("hog"));
            (res.join().unwrap(), hog.join().unwrap())
        })
    };
    let (res, hog) = both();
    eprintln!("with the reservation: res {res:.1} IOPS, hog {hog:.1}");
    assert!(
        res >= 54.0,
        "res reserved 60 IOPS got {res:.1} (hog {hog:.1})"
    );
    run(Command::new(bin())
        .args(["ctl", "qos", "res", "--reservation-iops", "0", "--data-dir"])
        .arg(d.path()));
    let (res_alone, hog_alone) = both();
    eprintln!("without: res {res_alone:.1} IOPS, hog {hog_alone:.1}");
    // The control: by weight alone res gets about a tenth, so the reservation was what
    // gave it 60.
    assert!(
        res_alone < 0.5 * res && res_alone < 0.25 * (res_alone + hog_alone),
        "without its reservation res got {res_alone:.1} (hog {hog_alone:.1}), with it {res:.1}"
    );
    srv.term();
}

/// The throttle (seed 003) through NBD: a fast file served like the modelled disk slowed
/// by k, with its k and held time in `ctl stat` and Prometheus.
#[test]
fn a_throttled_pool_serves_at_the_model_speed_and_reports_k() {
    let d = TempDir::new("throttle");
    let conf = d.path().join("throttle.toml");
    std::fs::write(
        &conf,
        one_pool_config(
            "128m",
            "throttle = { model = \"cheetah-15k4\", k = 2.0 }",
            "slow",
            "",
        ),
    )
    .unwrap();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let srv = ServerProc::start(
        d.path(),
        &[
            "--config",
            conf.to_str().unwrap(),
            "--metrics",
            &format!("127.0.0.1:{port}"),
        ],
    );
    let mut s = handshake(&srv.addr, "slow");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    // Cheetah 15K.4: X is at least R/2 = 4.25 ms, so at k = 2 one write at a time gets
    // under 118 IOPS; the file alone does thousands.
    let iops = write_iops(&mut s, 1, 1.0);
    assert!(
        (20.0..=118.0).contains(&iops),
        "throttled at k = 2 on a 4.25-9.5 ms model, measured {iops:.0} IOPS"
    );
    let st = run(Command::new(bin())
        .args(["ctl", "stat", "--data-dir"])
        .arg(d.path()));
    let line = st
        .lines()
        .find(|l| l.starts_with("throttle ssd"))
        .unwrap_or_else(|| panic!("no throttle line in\n{st}"));
    assert!(line.contains("model cheetah-15k4, k 2.00;"), "{line}");
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    use std::io::{Read, Write};
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    c.read_to_string(&mut body).unwrap();
    // With several shards (TIERVISOR_TEST_THREADS) each throttles its slice: one line each.
    let body = unshard_metrics(&body);
    assert!(
        body.contains("tiervisor_throttle_k{pool=\"ssd\"} 2\n"),
        "{body}"
    );
    let ops: f64 = body
        .lines()
        .filter_map(|l| l.strip_prefix("tiervisor_throttle_ops_total{pool=\"ssd\"} "))
        .filter_map(|v| v.parse::<f64>().ok())
        .sum();
    assert!(ops >= iops, "{ops} throttled ops, {iops:.0} IOPS for 1 s");
    drop(s);
    srv.term();
}

/// QoS across shards (issue 12): `light` (weight 1) on shard 0 and `heavy` (weight 9) on
/// shard 1 of one mClock pool at queue depth 1, each with 8 writes in flight. With
/// `shard_qos = "pool"` (the default) the front's broker gives shard 0 a tenth of the
/// pool's device and gates it there, so `heavy` completes several times what `light`
/// does (1:8.8 and 1:10.9 measured), and `ctl stat` and Prometheus show each shard's
/// share; with `"local"` no share or gate is set.
#[test]
fn weights_hold_across_two_shards_and_ctl_stat_shows_the_shares() {
    for qos in ["pool", "local"] {
        let d = TempDir::new("qos-shards");
        let conf = d.path().join("shards.toml");
        std::fs::write(
            &conf,
            mclock_disk_config(
                &format!("shard_qos = \"{qos}\"\n"),
                "192m",
                "",
                [("light", "weight = 1"), ("heavy", "weight = 9")],
            ),
        )
        .unwrap();
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let srv = ServerProc::start(
            d.path(),
            &[
                "--threads",
                "2",
                "--config",
                conf.to_str().unwrap(),
                "--metrics",
                &format!("127.0.0.1:{port}"),
            ],
        );
        assert!(
            srv.log().contains("shard 0 owns light; shard 1 owns heavy"),
            "{}",
            srv.log()
        );
        let from = Instant::now() + Duration::from_secs(1);
        let to = from + Duration::from_secs(3);
        let (light, heavy, stat, metrics) = std::thread::scope(|t| {
            let run = |name: &'static str| {
                let addr = srv.addr.clone();
                t.spawn(move || {
                    let mut s = handshake(&addr, name);
                    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    write_rate_between(&mut s, 8, 32 * 256, from, to)
                })
            };
            let (light, heavy) = (run("light"), run("heavy"));
            // Mid-run: the shares in force.
            std::thread::sleep(from + Duration::from_millis(1500) - Instant::now());
            let stat = run_json_stat(d.path());
            let metrics = scrape(port);
            (light.join().unwrap(), heavy.join().unwrap(), stat, metrics)
        });
        eprintln!("shard_qos {qos}: light {light:.0} IOPS, heavy {heavy:.0}");
        let shares: Vec<(f64, u64)> = (stat["server"]["shards"].as_array().unwrap().iter())
            .map(|s| {
                let d = &s["device_shares"][0];
                (
                    d["share"].as_f64().unwrap(),
                    d["gate_iops"].as_u64().unwrap(),
                )
            })
            .collect();
        if qos == "pool" {
            assert!(
                heavy > 4.0 * light,
                "light {light:.0} IOPS, heavy {heavy:.0}"
            );
            assert!(
                (0.05..=0.2).contains(&shares[0].0) && shares[0].1 > 0,
                "light's shard: {shares:?}"
            );
            assert!(
                (shares[0].0 + shares[1].0 - 1.0).abs() < 1e-6 && shares[1].1 == 0,
                "{shares:?}"
            );
            assert!(
                metrics.contains("tiervisor_shard_device_share{shard=\"0\",pool=\"disk\"} 0.")
                    && metrics.contains(
                        "tiervisor_shard_device_gate_iops{shard=\"1\",pool=\"disk\"} 0\n"
                    ),
                "{metrics}"
            );
            let text = run(Command::new(bin())
                .args(["ctl", "stat", "--data-dir"])
                .arg(d.path()));
            assert!(text.contains("device share disk"), "{text}");
        } else {
            // No shares, no gates: each shard runs as fast as its thread gets a CPU
            // (52,414 and 49,586 IOPS in one run, 16,979 and 123,231 in another: whichever
            // thread the kernel favours on two shared cores), so no ratio is asserted.
            assert_eq!(shares, vec![(0.0, 0), (0.0, 0)]);
        }
        srv.term();
    }
}

fn run_json_stat(dir: &std::path::Path) -> serde_json::Value {
    let out = run(Command::new(bin())
        .args(["ctl", "stat", "--json", "--data-dir"])
        .arg(dir));
    serde_json::from_str(out.trim()).unwrap()
}

fn scrape(port: u16) -> String {
    use std::io::{Read, Write};
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    c.read_to_string(&mut body).unwrap();
    body
}
