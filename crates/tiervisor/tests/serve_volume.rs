//! `tiervisor ctl volume create`, `resize`, `delete` and `list` on a running server: a
//! volume made while another is written to is exported once durable, keeps its data across
//! restarts, and a kill -9 at any moment of its creation leaves it whole or absent, the
//! others intact; a grown volume serves its new end and keeps it across a kill -9; a
//! deleted one is gone for good (not even from the configuration), its space back.

mod support;

use std::process::Command;

use support::raw_nbd::*;
use support::*;

const CONFIG: &str = r#"
chunk = "1m"
journal = "1m"
[[pool]]
name = "ssd"
path = "ssd.pool"
# Room for all five thick creations of the kill test (17 chunks each with its journal)
# whatever number of them survive their kill, on one shard's slice too when the serve
# tests run with two (TIERVISOR_TEST_THREADS=2: each shard has half of every pool).
size = "256m"
kind = "ssd"
[[pool]]
name = "hdd"
path = "hdd.pool"
size = "128m"
kind = "hdd"
[[volume]]
name = "vm1"
size = "16m"
pool = "hdd"
placement = "pinned"
"#;

const MIB: u64 = 1 << 20;

fn ctl(d: &TempDir, args: &[&str]) -> (bool, String) {
    try_run(
        Command::new(bin())
            .arg("ctl")
            .args(args)
            .arg("--data-dir")
            .arg(d.path()),
    )
}

fn list(d: &TempDir) -> serde_json::Value {
    let (ok, out) = ctl(d, &["volume", "list", "--json"]);
    assert!(ok, "{out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

fn start(d: &TempDir, first: bool) -> ServerProc {
    let conf = d.path().join("c.toml");
    if first {
        std::fs::write(&conf, CONFIG).unwrap();
        ServerProc::start(d.path(), &["--config", conf.to_str().unwrap()])
    } else {
        ServerProc::start_plain(d.path(), &["--config", conf.to_str().unwrap()])
    }
}

fn write_flush(addr: &str, volume: &str, off: u64, data: &[u8]) {
    let mut c = handshake(addr, volume);
    assert_eq!(write_at(&mut c, off, data), 0, "{volume}");
    assert_eq!(flush_all(&mut c), 0, "{volume}");
}

#[test]
fn a_volume_created_while_serving_is_exported_and_survives_a_restart() {
    let d = TempDir::new("vol-create");
    let s = start(&d, true);
    let a = pattern(256 << 10, 0x11);
    write_flush(&s.addr, "vm1", MIB, &a);
    let (ok, out) = ctl(
        &d,
        &[
            "volume", "create", "new", "--size", "32m", "--pool", "ssd", "--wait",
        ],
    );
    assert!(ok && out.contains("created and exported"), "{out}");
    let (ok, out) = ctl(
        &d,
        &[
            "volume", "create", "fat", "--size", "8m", "--thick", "--wait",
        ],
    );
    assert!(ok, "{out}");
    let v = list(&d);
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["name"].as_str())
        .collect();
    assert_eq!(names, ["vm1", "new", "fat"], "{v}");
    assert!(
        v.as_array().unwrap().iter().all(|x| x["state"] == "ready"),
        "{v}"
    );
    assert_eq!(v[1]["pool"], "ssd");
    assert_eq!(v[2]["provisioning"], "thick");
    let b = pattern(128 << 10, 0x22);
    write_flush(&s.addr, "new", 20 * MIB, &b);
    let mut fat = handshake(&s.addr, "fat");
    assert_eq!(read_at(&mut fat, 0, 8 * MIB as usize), vec![0u8; 8 << 20]);
    drop(fat);
    // Refusals say why and exit non-zero.
    for (args, why) in [
        (&["volume", "create", "new", "--size", "8m"][..], "exists"),
        (
            &["volume", "create", "x", "--size", "1000"][..],
            "multiple of 512",
        ),
        (
            &["volume", "create", "x", "--size", "8m", "--pool", "tape"][..],
            "no pool \"tape\"",
        ),
        (
            &["volume", "create", "x", "--size", "1g", "--thick"][..],
            "contiguous free chunks",
        ),
    ] {
        let (ok, out) = ctl(&d, args);
        assert!(!ok && out.contains(why), "{args:?}: {out}");
    }
    assert_eq!(s.term(), Some(0));
    // Recorded in the pools, not the configuration: served again after a restart.
    let s = start(&d, false);
    let mut c = handshake(&s.addr, "new");
    assert_eq!(read_at(&mut c, 20 * MIB, b.len()), b);
    let mut c = handshake(&s.addr, "vm1");
    assert_eq!(read_at(&mut c, MIB, a.len()), a);
    drop(c);
    assert_eq!(s.term(), Some(0));
}

/// Whether the server refuses NBD_OPT_GO for `export` (no such export).
fn go_refused(addr: &str, export: &str) -> bool {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let mut g = [0u8; 18];
    s.read_exact(&mut g).unwrap();
    s.write_all(&3u32.to_be_bytes()).unwrap();
    let mut data = (export.len() as u32).to_be_bytes().to_vec();
    data.extend_from_slice(export.as_bytes());
    data.extend_from_slice(&0u16.to_be_bytes());
    send_opt(&mut s, 7, &data);
    let (_, kind, _) = read_opt_reply(&mut s);
    kind == (1 << 31) + 6 // NBD_REP_ERR_UNKNOWN
}

fn pool_bytes_on_disk(d: &TempDir, pool: &str) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(d.path().join(pool)).unwrap().blocks() * 512
}

#[test]
fn a_deleted_volume_is_gone_for_good_and_gives_its_space_back() {
    let d = TempDir::new("vol-delete");
    let mut s = start(&d, true);
    let a = pattern(256 << 10, 0x66);
    write_flush(&s.addr, "vm1", 0, &a);
    let (ok, out) = ctl(
        &d,
        &[
            "volume", "create", "gone", "--size", "32m", "--pool", "hdd", "--wait",
        ],
    );
    assert!(ok, "{out}");
    for c in 0..8 {
        write_flush(&s.addr, "gone", c * MIB, &pattern(MIB as usize, c as u8));
    }
    let full = pool_bytes_on_disk(&d, "hdd.pool");
    // A client attached: refused unless forced.
    let attached = handshake(&s.addr, "gone");
    let (ok, out) = ctl(&d, &["volume", "delete", "gone"]);
    assert!(!ok && out.contains("client connection"), "{out}");
    let (ok, out) = ctl(&d, &["volume", "delete", "nope"]);
    assert!(!ok && out.contains("no volume \"nope\""), "{out}");
    let (ok, out) = ctl(
        &d,
        &["volume", "delete", "gone", "--force", "--wait", "--json"],
    );
    assert!(ok, "{out}");
    assert!(out.contains("\"deleted\""), "{out}");
    drop(attached);
    let v = list(&d);
    assert_eq!(v.as_array().map(Vec::len), Some(1), "{v}");
    assert!(go_refused(&s.addr, "gone"));
    // Gone from `ctl stat` too, before any restart.
    let (ok, out) = ctl(&d, &["stat", "--json"]);
    let stat: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let names: Vec<&str> = (stat["engine"]["volumes"].as_array().into_iter().flatten())
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert!(
        ok && !names.is_empty() && !names.contains(&"gone"),
        "{names:?}"
    );
    // The freed chunks are punched out of the pool file (discards are on by default),
    // by discards issued as the deletion completes: give them a moment to land.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut after = pool_bytes_on_disk(&d, "hdd.pool");
    while after + 7 * MIB > full && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        after = pool_bytes_on_disk(&d, "hdd.pool");
    }
    assert!(after + 7 * MIB <= full, "{full} -> {after} bytes on disk");
    // The name is free again: a new, empty volume.
    let (ok, out) = ctl(
        &d,
        &[
            "volume", "create", "gone", "--size", "8m", "--pool", "hdd", "--wait",
        ],
    );
    assert!(ok, "{out}");
    let mut c = handshake(&s.addr, "gone");
    assert_eq!(read_at(&mut c, 0, MIB as usize), vec![0u8; MIB as usize]);
    drop(c);
    // A configured volume: deleted, then not created again at the next start.
    let (ok, out) = ctl(&d, &["volume", "delete", "vm1", "--wait"]);
    assert!(ok, "{out}");
    s.kill9();
    s = start(&d, false);
    assert!(go_refused(&s.addr, "vm1"));
    assert!(
        s.log().contains("vm1 was deleted"),
        "the start warns: {}",
        s.log()
    );
    let v = list(&d);
    let names: Vec<&str> = (v.as_array().unwrap().iter())
        .filter_map(|x| x["name"].as_str())
        .collect();
    assert_eq!(names, ["gone"], "{v}");
    let mut c = handshake(&s.addr, "gone");
    assert_eq!(read_at(&mut c, 0, MIB as usize), vec![0u8; MIB as usize]);
    drop(c);
    assert_eq!(s.term(), Some(0));
}

#[test]
fn a_volume_grown_while_serving_keeps_its_new_size_across_a_kill() {
    let d = TempDir::new("vol-resize");
    let mut s = start(&d, true);
    let a = pattern(64 << 10, 0x44);
    write_flush(&s.addr, "vm1", 0, &a);
    // A connection opened before the growth.
    let mut before = handshake(&s.addr, "vm1");
    // Refusals say why, exit non-zero and change nothing.
    for (args, why) in [
        (
            &["volume", "resize", "vm1", "--size", "32k"][..],
            "data lies past the new end",
        ),
        (&["volume", "resize", "vm1", "--size", "16m"][..], "already"),
        (
            &["volume", "resize", "nope", "--size", "32m"][..],
            "no volume \"nope\"",
        ),
        (
            &["volume", "resize", "vm1", "--size", "1000"][..],
            "multiple of 512",
        ),
    ] {
        let (ok, out) = ctl(&d, args);
        assert!(!ok && out.contains(why), "{args:?}: {out}");
    }
    let (ok, out) = ctl(
        &d,
        &[
            "volume", "resize", "vm1", "--size", "48m", "--wait", "--json",
        ],
    );
    assert!(ok, "{out}");
    let entry: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(entry["size_bytes"], 48 * MIB, "{entry}");
    assert_eq!(entry["state"], "ready", "{entry}");
    let b = pattern(128 << 10, 0x55);
    write_flush(&s.addr, "vm1", 40 * MIB, &b);
    // The older connection may address the new end too.
    assert_eq!(read_at(&mut before, 40 * MIB, b.len()), b);
    drop(before);
    s.kill9();
    // The configuration file still says 16m: the bigger size stays, with a warning.
    s = start(&d, false);
    let v = list(&d);
    assert_eq!(v[0]["size_bytes"], 48 * MIB, "{v}");
    let mut c = handshake(&s.addr, "vm1");
    assert_eq!(read_at(&mut c, 0, a.len()), a);
    assert_eq!(read_at(&mut c, 40 * MIB, b.len()), b);
    assert_eq!(read_at(&mut c, 47 * MIB, 4096), vec![0u8; 4096]);
    drop(c);
    // Shrunk back to just past its data (chunks 41.. were never written): served at once,
    // kept across a kill, and the configuration's smaller size changes nothing.
    let (ok, out) = ctl(
        &d,
        &[
            "volume", "resize", "vm1", "--size", "41m", "--wait", "--json",
        ],
    );
    assert!(ok, "{out}");
    assert!(out.contains(&(41 * MIB).to_string()), "{out}");
    s.kill9();
    s = start(&d, false);
    let v = list(&d);
    assert_eq!(v[0]["size_bytes"], 41 * MIB, "{v}");
    let mut c = handshake(&s.addr, "vm1");
    assert_eq!(read_at(&mut c, 40 * MIB, b.len()), b);
    drop(c);
    assert_eq!(s.term(), Some(0));
}

#[test]
fn a_kill_during_a_creation_leaves_the_volume_whole_or_absent() {
    let d = TempDir::new("vol-kill");
    let mut s = start(&d, true);
    let a = pattern(64 << 10, 0x33);
    write_flush(&s.addr, "vm1", 0, &a);
    let mut seen_whole = 0;
    for (i, delay_ms) in [0u64, 1, 2, 5, 10].into_iter().enumerate() {
        let name = format!("v{i}");
        let (ok, out) = ctl(&d, &["volume", "create", &name, "--size", "16m", "--thick"]);
        assert!(ok, "{out}");
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        s.kill9();
        s = start(&d, false);
        let mut c = handshake(&s.addr, "vm1");
        assert_eq!(
            read_at(&mut c, 0, a.len()),
            a,
            "after killing the creation of {name}"
        );
        drop(c);
        let v = list(&d);
        match v
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == name.as_str())
        {
            Some(x) => {
                assert_eq!(x["state"], "ready", "{v}");
                seen_whole += 1;
                let b = pattern(4096, i as u8);
                write_flush(&s.addr, &name, 4 * MIB, &b);
                let mut c = handshake(&s.addr, &name);
                assert_eq!(read_at(&mut c, 0, 4096), vec![0u8; 4096], "{name}: zeroed");
                assert_eq!(read_at(&mut c, 4 * MIB, 4096), b, "{name}");
            }
            None => {
                // Absent, and its name can be used again.
                let (ok, out) = ctl(&d, &["volume", "create", &name, "--size", "16m", "--wait"]);
                assert!(ok, "{out}");
            }
        }
    }
    eprintln!("{seen_whole} of 5 creations were whole after kill -9");
    assert_eq!(s.term(), Some(0));
}
