//! `tiervisor serve --threads 2` (issue 18): connections negotiate with the front and are
//! handed to the shard owning their export (multi-conn to one volume lands on one
//! shard, requests pipelined behind NBD_OPT_GO included); every flushed write of every
//! volume survives a kill -9; admin commands reach a volume of shard 1; `ctl stat`
//! shows both shards; and a system serves only with the shard count it was formatted
//! with, which a start that names none takes.

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use support::raw_nbd::*;
use support::*;

const CONFIG: &str = r#"
chunk = "1m"
journal = "1m"
[[pool]]
name = "ssd"
path = "ssd.pool"
size = "256m"
kind = "ssd"
[[pool]]
name = "hdd"
path = "hdd.pool"
size = "256m"
kind = "hdd"
[[volume]]
name = "vm1"
size = "16m"
pool = "hdd"
placement = "pinned"
[[volume]]
name = "vm2"
size = "16m"
pool = "hdd"
placement = "pinned"
[[volume]]
name = "vm3"
size = "16m"
pool = "ssd"
placement = "pinned"
"#;

const MIB: u64 = 1 << 20;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn start(d: &TempDir, threads: &str, first: bool) -> ServerProc {
    let conf = d.path().join("c.toml");
    std::fs::write(&conf, CONFIG).unwrap();
    let args = ["--config", conf.to_str().unwrap(), "--threads", threads];
    if first {
        ServerProc::start(d.path(), &args)
    } else {
        ServerProc::start_plain(d.path(), &args)
    }
}

fn ctl(d: &TempDir, args: &[&str]) -> (bool, String) {
    try_run(
        Command::new(bin())
            .arg("ctl")
            .args(args)
            .arg("--data-dir")
            .arg(d.path()),
    )
}

fn ctl_json(d: &TempDir, args: &[&str]) -> serde_json::Value {
    let (ok, out) = ctl(d, &[args, &["--json"]].concat());
    assert!(ok, "{args:?}: {out}");
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{args:?}: {e}: {out}"))
}

#[test]
fn every_flushed_write_of_every_volume_survives_kill_9_with_two_shards() {
    let d = TempDir::new("shards-kill");
    let s = start(&d, "2", true);
    assert!(
        s.log()
            .contains("2 shard(s): shard 0 owns vm1, vm3; shard 1 owns vm2"),
        "{}",
        s.log()
    );
    // Connections to volumes of both shards, open at once; two to vm2 (multi-conn).
    let mut c1 = handshake(&s.addr, "vm1");
    let mut c2 = handshake(&s.addr, "vm2");
    let mut c2b = handshake(&s.addr, "vm2");
    let mut c3 = handshake(&s.addr, "vm3");
    let (a, b, b2, c) = (
        pattern(256 << 10, 1),
        pattern(256 << 10, 2),
        pattern(128 << 10, 3),
        pattern(256 << 10, 4),
    );
    assert_eq!(write_at(&mut c1, MIB, &a), 0);
    assert_eq!(write_at(&mut c2, 2 * MIB, &b), 0);
    assert_eq!(write_at(&mut c3, 3 * MIB, &c), 0);
    // Multi-conn: a write completed on one connection is covered by a FLUSH on the
    // other, which only holds if both are served by the same engine.
    assert_eq!(write_at(&mut c2b, 5 * MIB, &b2), 0);
    assert_eq!(flush_all(&mut c2), 0);
    assert_eq!(flush_all(&mut c1), 0);
    assert_eq!(flush_all(&mut c3), 0);
    assert_eq!(read_at(&mut c2b, 2 * MIB, b.len()), b);
    // Unflushed writes to every volume while the plug is pulled.
    for (conn, off) in [(&mut c1, 8 * MIB), (&mut c2, 8 * MIB), (&mut c3, 8 * MIB)] {
        assert_eq!(write_at(conn, off, &pattern(64 << 10, 9)), 0);
    }
    s.kill9();
    let s = start(&d, "2", false);
    for v in ["vm1", "vm2", "vm3"] {
        assert!(
            s.log().contains(&format!("recovered volume {v}")),
            "{}",
            s.log()
        );
    }
    let mut c1 = handshake(&s.addr, "vm1");
    let mut c2 = handshake(&s.addr, "vm2");
    let mut c3 = handshake(&s.addr, "vm3");
    assert_eq!(read_at(&mut c1, MIB, a.len()), a, "vm1 (shard 0)");
    assert_eq!(read_at(&mut c2, 2 * MIB, b.len()), b, "vm2 (shard 1)");
    assert_eq!(
        read_at(&mut c2, 5 * MIB, b2.len()),
        b2,
        "vm2, other connection"
    );
    assert_eq!(read_at(&mut c3, 3 * MIB, c.len()), c, "vm3 (shard 0)");
    drop((c1, c2, c3));
    assert_eq!(s.term(), Some(0));
}

/// A client that sends its first request in the same packet as NBD_OPT_GO: the front
/// must not parse the request (it would run it on the wrong engine), and the shard
/// must find it in the buffer it was handed.
#[test]
fn a_request_pipelined_behind_nbd_opt_go_is_served_by_the_owning_shard() {
    let d = TempDir::new("shards-pipe");
    let s = start(&d, "2", true);
    let data = pattern(4096, 7);
    {
        let mut c = handshake(&s.addr, "vm2");
        assert_eq!(write_at(&mut c, 4096, &data), 0);
        assert_eq!(flush_all(&mut c), 0);
    }
    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut g = [0u8; 18];
    c.read_exact(&mut g).unwrap();
    let mut msg = 3u32.to_be_bytes().to_vec(); // fixed newstyle, no zeroes
    // NBD_OPT_GO for vm2, no info requests.
    let mut go = (3u32).to_be_bytes().to_vec();
    go.extend_from_slice(b"vm2");
    go.extend_from_slice(&0u16.to_be_bytes());
    msg.extend_from_slice(&0x49484156454F5054u64.to_be_bytes());
    msg.extend_from_slice(&7u32.to_be_bytes());
    msg.extend_from_slice(&(go.len() as u32).to_be_bytes());
    msg.extend_from_slice(&go);
    // NBD_CMD_READ of 4 KiB at 4096, handle 77.
    msg.extend_from_slice(&0x25609513u32.to_be_bytes());
    msg.extend_from_slice(&0u16.to_be_bytes());
    msg.extend_from_slice(&0u16.to_be_bytes());
    msg.extend_from_slice(&77u64.to_be_bytes());
    msg.extend_from_slice(&4096u64.to_be_bytes());
    msg.extend_from_slice(&4096u32.to_be_bytes());
    c.write_all(&msg).unwrap();
    loop {
        let (_, kind, _) = read_opt_reply(&mut c);
        if kind == 1 {
            break;
        }
        assert_eq!(kind, 3, "expected NBD_REP_INFO or ACK");
    }
    assert_eq!(read_reply(&mut c), (0, 77));
    let mut got = vec![0u8; 4096];
    c.read_exact(&mut got).unwrap();
    assert_eq!(got, data);
    drop(c);
    assert_eq!(s.term(), Some(0));
}

#[test]
fn admin_reaches_volumes_of_shard_1_and_stat_shows_both_shards() {
    let d = TempDir::new("shards-admin");
    let s = start(&d, "2", true);
    // Shard 0 owns vm1 and vm3, shard 1 vm2: a new volume goes to shard 1.
    let (ok, out) = ctl(
        &d,
        &[
            "volume", "create", "new", "--size", "8m", "--pool", "ssd", "--wait",
        ],
    );
    assert!(ok && out.contains("created and exported"), "{out}");
    let (ok, out) = ctl(&d, &["volume", "create", "new", "--size", "8m"]);
    assert!(!ok && out.contains("exists"), "{out}");
    let x = pattern(64 << 10, 5);
    {
        let mut c = handshake(&s.addr, "new");
        assert_eq!(write_at(&mut c, 7 * MIB, &x), 0);
        assert_eq!(flush_all(&mut c), 0);
    }
    let (ok, out) = ctl(&d, &["volume", "resize", "new", "--size", "16m", "--wait"]);
    assert!(ok, "{out}");
    let list = ctl_json(&d, &["volume", "list"]);
    let new = list
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "new")
        .unwrap_or_else(|| panic!("{list}"));
    assert_eq!(new["size_bytes"], 16 * MIB, "{list}");
    assert_eq!(list.as_array().unwrap().len(), 4, "{list}");
    {
        let mut c = handshake(&s.addr, "new");
        assert_eq!(read_at(&mut c, 7 * MIB, x.len()), x);
        assert_eq!(write_at(&mut c, 15 * MIB, &x), 0, "the grown end");
    }
    // Migrate vm2 (shard 1) from the HDD to the SSD.
    let y = pattern(512 << 10, 6);
    {
        let mut c = handshake(&s.addr, "vm2");
        assert_eq!(write_at(&mut c, 0, &y), 0);
        assert_eq!(flush_all(&mut c), 0);
    }
    let (ok, out) = ctl(&d, &["migrate", "start", "vm2", "--to", "ssd"]);
    assert!(ok, "{out}");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = ctl_json(&d, &["migrate", "status", "vm2"]);
        if st[0]["running"] == false {
            assert_eq!(st[0]["phase"], "done", "{st}");
            break;
        }
        assert!(Instant::now() < deadline, "still running: {st}");
        std::thread::sleep(Duration::from_millis(50));
    }
    {
        let mut c = handshake(&s.addr, "vm2");
        assert_eq!(read_at(&mut c, 0, y.len()), y, "vm2 after its migration");
    }
    let st = ctl_json(&d, &["stat"]);
    let shards = st["server"]["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 2, "{st}");
    assert_eq!(shards[0]["volumes"], serde_json::json!(["vm1", "vm3"]));
    assert_eq!(shards[1]["volumes"], serde_json::json!(["vm2", "new"]));
    assert!(shards[1]["requests"].as_u64().unwrap() > 0, "{st}");
    assert!(shards[1]["cpu_s"].as_f64().unwrap() > 0.0, "{st}");
    let vols = st["engine"]["volumes"].as_array().unwrap();
    assert_eq!(vols.len(), 4, "{st}");
    let ssd = &st["engine"]["pools"][0];
    assert_eq!(ssd["name"], "ssd");
    assert_eq!(
        ssd["capacity_bytes"],
        256 * MIB,
        "the slices sum to the pool: {st}"
    );
    let (ok, text) = ctl(&d, &["stat"]);
    assert!(ok && text.contains("shard 1"), "{text}");
    assert_eq!(s.term(), Some(0));
}

#[test]
fn a_system_serves_only_with_the_shard_count_it_was_formatted_with() {
    let d = TempDir::new("shards-count");
    let s = start(&d, "2", true);
    assert_eq!(s.term(), Some(0));
    let conf = d.path().join("c.toml");
    for n in ["1", "3"] {
        let (ok, out) = try_run(
            Command::new(bin())
                .args([
                    "serve",
                    "--listen",
                    "127.0.0.1:0",
                    "--threads",
                    n,
                    "--config",
                ])
                .arg(&conf)
                .arg("--data-dir")
                .arg(d.path()),
        );
        assert!(!ok, "--threads {n} served a system of 2 shards: {out}");
        assert!(
            out.contains(&format!("formatted for 2 shard(s), started with {n}")),
            "{out}"
        );
    }
    // Nothing was written: it still serves with 2.
    let s = start(&d, "2", false);
    assert_eq!(s.term(), Some(0));
    // Without a count it serves with the one the pools were formatted with (it was
    // refused as 1 before), and says so.
    let s = ServerProc::start_as_given(d.path(), &["--config", conf.to_str().unwrap()]);
    let log = s.log();
    assert!(
        log.contains("the pools were formatted for 2 shard(s): serving with 2")
            && log.contains("2 shard(s): shard 0 owns"),
        "{log}"
    );
    let mut c = handshake(&s.addr, "vm2");
    assert_eq!(write_at(&mut c, 0, &pattern(4096, 9)), 0);
    assert_eq!(read_at(&mut c, 0, 4096), pattern(4096, 9));
    drop(c);
    assert_eq!(s.term(), Some(0));
}
