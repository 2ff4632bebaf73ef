//! `tiervisor serve` checked with clients we did not write: qemu-io, qemu-img, fio, nbdinfo.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use std::os::unix::process::CommandExt;

use support::raw_nbd::*;
use support::*;

#[test]
fn qemu_io_patterns_on_both_volumes() {
    if !have("qemu-io") {
        return;
    }
    let d = TempDir::new("qio");
    let s = ServerProc::start(d.path(), &[]);
    // (offset, length, pattern): aligned, unaligned, crossing chunks, tiny, large.
    let cases: [(u64, u64, u8); 6] = [
        (0, 4096, 0x11),
        (8191, 1, 0x22),
        (1048576 - 700, 3000, 0x33),
        (5 << 20, 3 << 20, 0x44),
        (4294967296 - 8192, 8192, 0x55),
        (123_456_789, 65536, 0x66),
    ];
    for (vol, salt) in [("vm1", 0u8), ("vm2", 0x80u8)] {
        let mut cmd = Command::new("qemu-io");
        cmd.args(["-f", "raw"]);
        for (off, len, p) in cases {
            cmd.arg("-c")
                .arg(format!("write -P {} {off} {len}", p ^ salt));
        }
        cmd.arg(s.uri(vol));
        run(&mut cmd);
    }
    for (vol, salt) in [("vm1", 0u8), ("vm2", 0x80u8)] {
        let mut cmd = Command::new("qemu-io");
        cmd.args(["-f", "raw"]);
        for (off, len, p) in cases {
            cmd.arg("-c")
                .arg(format!("read -P {} {off} {len}", p ^ salt));
        }
        // Never written: zeros.
        cmd.arg("-c").arg("read -P 0 200000000 1048576");
        cmd.arg(s.uri(vol));
        let out = run(&mut cmd);
        assert!(!out.contains("verification failed"), "{out}");
    }
    // A wrong pattern is detected (the check can fail).
    let (ok, out) = try_run(
        Command::new("qemu-io")
            .args(["-f", "raw", "-c", "read -P 0x99 0 4096"])
            .arg(s.uri("vm1")),
    );
    assert!(!ok && out.contains("verification failed"));
}

#[test]
fn qemu_img_convert_then_compare() {
    if !have("qemu-img") {
        return;
    }
    let d = TempDir::new("qimg");
    let s = ServerProc::start(d.path(), &[]);
    let img = d.path().join("random.raw");
    write_random_image(&img, 256 << 20);
    run(Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&img)
        .arg(s.uri("vm2")));
    let out = run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&img)
        .arg(s.uri("vm2")));
    assert!(out.contains("Images are identical"), "{out}");
    // And the comparison notices a difference.
    run(Command::new("qemu-io")
        .args(["-f", "raw", "-c", "write -P 7 1000000 512"])
        .arg(s.uri("vm2")));
    let (ok, out) = try_run(
        Command::new("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&img)
            .arg(s.uri("vm2")),
    );
    assert!(!ok && out.contains("Content mismatch"), "{out}");
}

#[test]
fn fio_several_connections_verify_and_mixed_io() {
    if !have("fio") {
        return;
    }
    let d = TempDir::new("fio");
    let s = ServerProc::start(d.path(), &[]);
    let out = run(fio(d.path()).args([
        "--name=verify",
        "--ioengine=nbd",
        &format!("--uri={}", s.uri("vm1")),
        "--rw=randwrite",
        "--bs=4k",
        "--size=32m",
        "--numjobs=4",
        "--offset_increment=32m",
        "--iodepth=16",
        "--verify=crc32c",
        "--verify_fatal=1",
        "--group_reporting",
    ]));
    assert!(out.contains("err= 0"), "{out}");
    let out = run(fio(d.path()).args([
        "--name=mixed",
        "--ioengine=nbd",
        &format!("--uri={}", s.uri("vm2")),
        "--rw=randrw",
        "--rwmixread=70",
        "--bs=16k",
        "--size=64m",
        "--numjobs=2",
        "--iodepth=8",
        "--io_size=32m",
        "--group_reporting",
    ]));
    assert!(out.contains("err= 0"), "{out}");
}

#[test]
fn nbdinfo_lists_both_exports_with_sizes() {
    if !have("nbdinfo") {
        return;
    }
    let d = TempDir::new("info");
    let s = ServerProc::start(d.path(), &[]);
    let out = run(Command::new("nbdinfo")
        .args(["--list", "--json"])
        .arg(format!("nbd://{}", s.addr)));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ex = v["exports"].as_array().unwrap();
    let names: Vec<(&str, u64)> = ex
        .iter()
        .map(|e| {
            (
                e["export-name"].as_str().unwrap(),
                e["export-size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(names, vec![("vm1", 4 << 30), ("vm2", 4 << 30)]);
    assert!(
        ex.iter()
            .all(|e| e["can_multi_conn"] == true && e["can_flush"] == true && e["can_fua"] == true)
    );
}

/// Write and flush, keep writing (unflushed), kill -9 at a different moment each round,
/// restart, verify every flushed block. Each round also checks what earlier rounds wrote.
#[test]
fn flushed_writes_survive_kill_9_at_several_points() {
    if !have("fio") {
        return;
    }
    let d = TempDir::new("crash");
    let fio_write = |uri: &str, offset: &str, seed: u32, extra: &[&str]| {
        let mut c = fio(d.path());
        c.args([
            "--name=c",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randwrite",
            "--bs=8k",
            "--size=16m",
            "--iodepth=8",
            "--verify=crc32c",
        ])
        .arg(format!("--offset={offset}"))
        .arg(format!("--randseed={seed}"))
        .args(extra);
        c
    };
    for (round, kill_after_ms) in [(0u32, 30u64), (1, 150), (2, 400), (3, 900)] {
        let s = ServerProc::start(d.path(), &[]);
        if round > 0 {
            assert!(s.log().contains("recovered volume vm1"), "{}", s.log());
        }
        // Everything flushed in earlier rounds is intact.
        for r in 0..round {
            let out = run(&mut fio_write(
                &s.uri("vm1"),
                &format!("{}m", 64 * r),
                100 + r,
                &["--verify_only", "--verify_fatal=1"],
            ));
            assert!(
                out.contains("err= 0"),
                "round {round}: data of round {r} lost:\n{out}"
            );
        }
        // This round's data, flushed at the end (fio's end_fsync issues NBD FLUSH).
        let out = run(&mut fio_write(
            &s.uri("vm1"),
            &format!("{}m", 64 * round),
            100 + round,
            &["--do_verify=0", "--end_fsync=1"],
        ));
        assert!(out.contains("err= 0"), "{out}");
        // Unflushed traffic on both volumes while we pull the plug.
        // fio forks its jobs: give it a process group of its own and kill the group.
        let mut noise = fio_write(
            &s.uri("vm2"),
            "0",
            7,
            &["--do_verify=0", "--time_based", "--runtime=10", "--thread"],
        )
        .process_group(0)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
        std::thread::sleep(Duration::from_millis(kill_after_ms));
        s.kill9();
        kill_group(noise.id());
        let _ = noise.wait();
    }
    let s = ServerProc::start(d.path(), &[]);
    for r in 0..4 {
        let out = run(&mut fio_write(
            &s.uri("vm1"),
            &format!("{}m", 64 * r),
            100 + r,
            &["--verify_only", "--verify_fatal=1"],
        ));
        assert!(out.contains("err= 0"), "final check, round {r}:\n{out}");
    }
}

#[test]
fn bad_input_closes_only_that_connection() {
    let d = TempDir::new("bad");
    let s = ServerProc::start(d.path(), &[]);
    let mut good = handshake(&s.addr, "vm2");
    let mut bad = handshake(&s.addr, "vm1");
    // Unknown export during GO: an error, not a disconnect.
    {
        let mut t = TcpStream::connect(&s.addr).unwrap();
        let mut g = [0u8; 18];
        t.read_exact(&mut g).unwrap();
        t.write_all(&3u32.to_be_bytes()).unwrap();
        let mut data = 4u32.to_be_bytes().to_vec();
        data.extend_from_slice(b"nope");
        data.extend_from_slice(&0u16.to_be_bytes());
        send_opt(&mut t, 7, &data);
        assert_eq!(
            read_opt_reply(&mut t).1,
            (1 << 31) + 6,
            "NBD_REP_ERR_UNKNOWN"
        );
    }
    let size = 4u64 << 30;
    send_req(&mut bad, MAGIC, 0, 1, size - 512, 1024, &[]); // read past the end
    assert_eq!(read_reply(&mut bad), (22, 1));
    send_req(&mut bad, MAGIC, 1, 2, size, 512, &[0u8; 512]); // write past the end
    assert_eq!(read_reply(&mut bad), (28, 2));
    send_req(&mut bad, MAGIC, 0, 3, 0, 64 << 20, &[]); // 64 MiB read
    let (err, h) = read_reply(&mut bad);
    assert!(h == 3 && (err == 22 || err == 75), "error {err}");
    send_req(&mut bad, MAGIC, 42, 4, 0, 0, &[]); // unknown command
    assert_eq!(read_reply(&mut bad), (22, 4));
    send_req(&mut bad, MAGIC, 0, 5, 0, 512, &[]); // still fine
    assert_eq!(read_reply(&mut bad), (0, 5));
    let mut sink = [0u8; 512];
    bad.read_exact(&mut sink).unwrap();
    // Bad magic: the server hangs up on this connection...
    send_req(&mut bad, 0xdead_beef, 0, 6, 0, 512, &[]);
    let mut b = [0u8; 1];
    assert!(
        matches!(bad.read(&mut b), Ok(0) | Err(_)),
        "connection should be closed"
    );
    // ...and only this one.
    let payload: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    send_req(&mut good, MAGIC, 1, 10, 8192, 4096, &payload);
    assert_eq!(read_reply(&mut good), (0, 10));
    send_req(&mut good, MAGIC, 0, 11, 8192, 4096, &[]);
    assert_eq!(read_reply(&mut good), (0, 11));
    let mut back = vec![0u8; 4096];
    good.read_exact(&mut back).unwrap();
    assert_eq!(back, payload);
    // Garbage instead of a handshake closes that connection too.
    let mut g = TcpStream::connect(&s.addr).unwrap();
    let mut greet = [0u8; 18];
    g.read_exact(&mut greet).unwrap();
    g.write_all(&[0xff; 64]).unwrap();
    g.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert!(matches!(g.read(&mut b), Ok(0) | Err(_)));
    // The line may follow the close by a moment: with several shards it is logged by the
    // front, after the shard that closed the connection sends it over.
    s.wait_log("bad request magic");
}

#[test]
fn ctl_stat_metrics_and_clean_restart() {
    if !have("qemu-io") {
        return;
    }
    let d = TempDir::new("ctl");
    let s = ServerProc::start(d.path(), &["--metrics", "127.0.0.1:0"]);
    run(Command::new("qemu-io")
        .args([
            "-f",
            "raw",
            "-c",
            "write -P 5 0 3M",
            "-c",
            "flush",
            "-c",
            "read -P 5 0 3M",
        ])
        .arg(s.uri("vm1")));
    let out = run(Command::new(bin())
        .args(["ctl", "stat", "--json", "--data-dir"])
        .arg(d.path()));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let vm1 = &v["engine"]["volumes"][0];
    assert_eq!(vm1["name"], "vm1");
    assert!(
        vm1["write"]["requests"].as_u64().unwrap() >= 1
            && vm1["flush"]["requests"].as_u64().unwrap() >= 1
    );
    assert_eq!(vm1["write"]["bytes"], 3 << 20);
    let mapped: u64 = vm1["chunks_by_pool"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p[1].as_u64().unwrap())
        .sum();
    assert!(mapped >= 3, "{vm1}");
    let table = run(Command::new(bin())
        .args(["ctl", "stat", "--data-dir"])
        .arg(d.path()));
    assert!(table.contains("vm1") && table.contains("hdd"), "{table}");
    let sdata = s.term();
    assert_eq!(sdata, Some(0));
    // A clean stop leaves nothing to replay.
    let s = ServerProc::start(d.path(), &[]);
    assert!(
        s.log()
            .contains("recovered volume vm1: checkpoint at record"),
        "{}",
        s.log()
    );
    assert!(
        s.log().contains("replayed 0 journal record(s)"),
        "{}",
        s.log()
    );
    run(Command::new("qemu-io")
        .args(["-f", "raw", "-c", "read -P 5 0 3M"])
        .arg(s.uri("vm1")));
}

#[test]
fn prometheus_endpoint_serves_counters() {
    let d = TempDir::new("prom");
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let s = ServerProc::start(d.path(), &["--metrics", &format!("127.0.0.1:{port}")]);
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    c.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    // With several shards (TIERVISOR_TEST_THREADS) every sample carries its shard.
    let unsharded = unshard_metrics(&body);
    assert!(
        unsharded.contains("tiervisor_volume_requests_total{volume=\"vm1\",kind=\"read\"} 0"),
        "{body}"
    );
    // Each shard reports its slice of the pool; the slices sum to the pool.
    let hdd: u64 = unsharded
        .lines()
        .filter_map(|l| l.strip_prefix("tiervisor_pool_capacity_bytes{pool=\"hdd\"} "))
        .map(|v| v.parse::<u64>().unwrap())
        .sum();
    assert_eq!(hdd, 8589934592, "{body}");
    drop(s);
}

#[test]
fn thread_pool_backend_serves_too() {
    if !have("qemu-io") {
        return;
    }
    let d = TempDir::new("threads");
    let s = ServerProc::start(d.path(), &["--io", "threads"]);
    assert!(s.log().contains("[I/O: threads]"), "{}", s.log());
    run(Command::new("qemu-io")
        .args([
            "-f",
            "raw",
            "-c",
            "write -P 9 12345 100000",
            "-c",
            "read -P 9 12345 100000",
            "-c",
            "read -P 0 0 12345",
        ])
        .arg(s.uri("vm2")));
}

#[test]
fn bad_config_exits_2_with_file_and_line() {
    let d = TempDir::new("conf");
    let p = d.path().join("c.toml");
    // Start `serve` on `text`; it must exit 2. Returns what it printed.
    let refused = |text: &str| {
        std::fs::write(&p, text).unwrap();
        let o = Command::new(bin())
            .args(["serve", "--config"])
            .arg(&p)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = refused(
        "data_dir = \"x\"\n[[pool]]\nname = \"a\"\npath = \"a.pool\"\nsize = \"1g\"\nkind = \"tape\"\n",
    );
    assert!(e.contains("c.toml:6:") && e.contains("tape"), "{e}");

    // Well-formed but refused by the engine: exit 2, the reason, no pool file left.
    let data = d.path().join("data");
    let e = refused(&format!(
        "data_dir = \"{}\"\n[log]\ngather_us = 5000000\n[[pool]]\nname = \"a\"\npath = \"a.pool\"\nsize = \"256m\"\nkind = \"ssd\"\nlog = \"on\"\n",
        data.display()
    ));
    assert!(e.contains("gather_us"), "{e}");
    assert!(
        !data.join("a.pool").exists(),
        "a refused start left a pool file"
    );
}

/// Every timer the engine asks for fires, not only the soonest: a small logged write
/// arms both the log's gather timer (soon) and the commit timer (later); with no further
/// traffic and no flush, the background commit must still happen.
#[test]
fn background_commit_runs_on_an_idle_server() {
    let d = TempDir::new("idle");
    let conf = d.path().join("log.toml");
    std::fs::write(
        &conf,
        "[[pool]]\nname = \"ssd\"\npath = \"ssd.pool\"\nsize = \"256m\"\nkind = \"ssd\"\nlog = true\n\
         [[volume]]\nname = \"vm1\"\nsize = \"64m\"\npool = \"ssd\"\n",
    )
    .unwrap();
    let s = ServerProc::start(d.path(), &["--config", conf.to_str().unwrap()]);
    let mut c = handshake(&s.addr, "vm1");
    send_req(&mut c, MAGIC, 1, 7, 8192, 4096, &[0x5a; 4096]); // NBD_CMD_WRITE
    assert_eq!(read_reply(&mut c), (0, 7));
    let commits = || -> u64 {
        let st: serde_json::Value = serde_json::from_str(&run(Command::new(bin())
            .args(["ctl", "stat", "--json", "--data-dir"])
            .arg(d.path())))
        .unwrap();
        st["engine"]["volumes"][0]["journal_commits"]
            .as_u64()
            .expect("journal_commits")
    };
    let t0 = std::time::Instant::now();
    while commits() == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "no background commit 5 s after an unflushed write (the commit timer's wake-up was lost)"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(c);
    assert_eq!(s.term(), Some(0));
}
