//! `tiervisor serve --threads 2` gives borrowed space back (issue 18, `engine::give_back`):
//! vm1, on shard 0, fills 80 MiB of a 128 MiB pool (borrowing from shard 1) and frees all
//! but 20 MiB; shard 0 then gives its free borrowed runs back, and vm2, on shard 1, writes
//! what it could not while shard 0 kept them. Every write reads back after a kill -9.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::raw_nbd::*;
use support::*;

const MIB: u64 = 1 << 20;
/// vm1 fills 80 MiB, then keeps MiB 30..50.
const FILL_MIB: u64 = 80;
const KEPT: std::ops::Range<u64> = 30..50;

fn config(hold_ms: u64) -> String {
    format!(
        r#"
chunk = "1m"
journal = "1m"
give_back_hold_ms = {hold_ms}
[[pool]]
name = "ssd"
path = "ssd.pool"
size = "128m"
kind = "ssd"
[[volume]]
name = "vm1"
size = "110m"
pool = "ssd"
placement = "pinned"
[[volume]]
name = "vm2"
size = "110m"
pool = "ssd"
placement = "pinned"
"#
    )
}

fn pattern(vol: u8, mib: u64) -> Vec<u8> {
    (0..MIB as usize)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add((mib as u8).wrapping_mul(7))
                .wrapping_add(vol.wrapping_mul(101))
        })
        .collect()
}

fn start(d: &TempDir, hold_ms: u64, first: bool) -> ServerProc {
    let conf = d.path().join("c.toml");
    std::fs::write(&conf, config(hold_ms)).unwrap();
    let args = ["--config", conf.to_str().unwrap(), "--threads", "2"];
    if first {
        ServerProc::start(d.path(), &args)
    } else {
        ServerProc::start_plain(d.path(), &args)
    }
}

/// NBD error of a trim of `len` bytes at `off`.
fn trim_at(s: &mut std::net::TcpStream, off: u64, len: u32) -> u32 {
    send_req(s, MAGIC, 4, 14, off, len, &[]);
    let (err, h) = read_reply(s);
    assert_eq!(h, 14);
    err
}

/// Per shard: (borrowed runs held, runs given back), from `ctl stat --json`.
fn runs(d: &TempDir) -> Vec<(u64, u64)> {
    let (ok, out) = try_run(
        Command::new(bin())
            .args(["ctl", "stat", "--json", "--data-dir"])
            .arg(d.path()),
    );
    assert!(ok, "{out}");
    let st: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    (st["server"]["shards"].as_array().unwrap().iter())
        .map(|s| {
            let n = |k: &str| s[k].as_u64().unwrap();
            (n("borrowed_runs"), n("runs_given_back"))
        })
        .collect()
}

/// vm1 fills and frees; then the shards' runs once shard 0 has given back what it will
/// (or after 5 s without a change).
fn fill_and_free(s: &ServerProc, d: &TempDir) -> Vec<(u64, u64)> {
    let mut c = handshake(&s.addr, "vm1");
    for mib in 0..FILL_MIB {
        let e = write_at(&mut c, mib * MIB, &pattern(1, mib));
        assert_eq!(e, 0, "vm1's write of MiB {mib}: error {e}: {}", s.log());
    }
    assert_eq!(flush_all(&mut c), 0);
    assert!(runs(d)[0].0 >= 1, "vm1 borrowed nothing: {}", s.log());
    for r in [0..KEPT.start, KEPT.end..FILL_MIB] {
        let e = trim_at(&mut c, r.start * MIB, ((r.end - r.start) * MIB) as u32);
        assert_eq!(e, 0, "trim of MiB {r:?}: {}", s.log());
    }
    assert_eq!(flush_all(&mut c), 0);
    let mut last = runs(d);
    let mut since = Instant::now();
    while since.elapsed() < Duration::from_secs(5) && last[0].0 > 0 {
        std::thread::sleep(Duration::from_millis(100));
        let now = runs(d);
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    last
}

/// How far vm2 writes (MiB by MiB, each flushed) before a write fails, up to `most`.
fn vm2_writes(s: &ServerProc, most: u64) -> u64 {
    let mut c = handshake(&s.addr, "vm2");
    for mib in 0..most {
        if write_at(&mut c, mib * MIB, &pattern(2, mib)) != 0 {
            return mib;
        }
        assert_eq!(flush_all(&mut c), 0);
    }
    most
}

fn check(s: &ServerProc, vol: &str, v: u8, mibs: impl Iterator<Item = u64>) {
    let mut c = handshake(&s.addr, vol);
    for mib in mibs {
        assert!(
            read_at(&mut c, mib * MIB, MIB as usize) == pattern(v, mib),
            "{vol} MiB {mib}"
        );
    }
}

/// What vm2 writes: more than it gets while shard 0 keeps its free borrowed runs (59 MiB
/// when written), less than it gets once they are back (73).
const VM2_MIB: u64 = 66;

/// The gap: with `give_back_hold_ms = 0` (borrowed space kept) shard 0 holds its three
/// borrowed runs free, and vm2 gets ENOSPC before `VM2_MIB`.
#[test]
fn without_give_back_the_other_shard_runs_out_of_space() {
    let d = TempDir::new("shards-keep");
    let s = start(&d, 0, true);
    let r = fill_and_free(&s, &d);
    assert!(r[0].0 >= 1 && r[0].1 == 0, "{r:?}");
    let n = vm2_writes(&s, VM2_MIB);
    assert!(n < VM2_MIB, "vm2 wrote {n} MiB: {}", s.log());
    assert_eq!(s.term(), Some(0));
}

/// Shard 0 gives every run it borrowed back (the front carries each `GaveBack` to the
/// donor as a `ReturnLoan`), vm2 writes `VM2_MIB`, and all of it and vm1's kept MiB read
/// back, after a kill -9 too.
#[test]
fn freed_borrowed_space_goes_back_and_survives_kill_9() {
    let d = TempDir::new("shards-give-back");
    let s = start(&d, 200, true);
    let r = fill_and_free(&s, &d);
    assert!(r[0].0 == 0 && r[0].1 >= 1, "{r:?}: {}", s.log());
    assert!(s.log().contains("gave back chunks"), "{}", s.log());
    assert!(s.log().contains("took back chunks"), "{}", s.log());
    let n = vm2_writes(&s, VM2_MIB);
    assert_eq!(n, VM2_MIB, "vm2's write of MiB {n} failed: {}", s.log());
    let (ok, out) = try_run(
        Command::new(bin())
            .args(["ctl", "stat", "--data-dir"])
            .arg(d.path()),
    );
    assert!(ok && out.contains(" given back"), "{out}");
    check(&s, "vm1", 1, KEPT);
    check(&s, "vm2", 2, 0..VM2_MIB);
    s.kill9();
    let s = start(&d, 200, false);
    check(&s, "vm1", 1, KEPT);
    check(&s, "vm2", 2, 0..VM2_MIB);
    assert_eq!(s.term(), Some(0));
}

/// A hold no test outlives: the timer gives nothing back.
const HOLD_LONG_MS: u64 = 600_000;

/// vm1 fills and frees, and nothing is given back yet (the hold is long).
fn fill_and_free_held(s: &ServerProc, d: &TempDir) {
    let mut c = handshake(&s.addr, "vm1");
    for mib in 0..FILL_MIB {
        let e = write_at(&mut c, mib * MIB, &pattern(1, mib));
        assert_eq!(e, 0, "vm1's write of MiB {mib}: error {e}: {}", s.log());
    }
    for r in [0..KEPT.start, KEPT.end..FILL_MIB] {
        let e = trim_at(&mut c, r.start * MIB, ((r.end - r.start) * MIB) as u32);
        assert_eq!(e, 0, "trim of MiB {r:?}: {}", s.log());
    }
    assert_eq!(flush_all(&mut c), 0);
    let r = runs(d);
    assert!(r[0].0 >= 1 && r[0].1 == 0, "{r:?}: {}", s.log());
}

/// A shard refused space while another holds a wholly free borrowed run: the front's
/// broker hints the holder (`Control::GiveBackNow`), which gives it back at once, not
/// after its hold (10 minutes here). vm2 writes `VM2_MIB`, writing a refused MiB again
/// every millisecond; no write waits a second (without the hint it would wait for the
/// hold), and everything reads back after a kill -9.
#[test]
fn a_refused_shard_gets_free_borrowed_space_at_once() {
    let d = TempDir::new("shards-give-back-now");
    let s = start(&d, HOLD_LONG_MS, true);
    fill_and_free_held(&s, &d);
    let mut c = handshake(&s.addr, "vm2");
    let (mut refusals, mut longest) = (0, Duration::ZERO);
    for mib in 0..VM2_MIB {
        let t = Instant::now();
        while write_at(&mut c, mib * MIB, &pattern(2, mib)) != 0 {
            refusals += 1;
            assert!(
                t.elapsed() < Duration::from_secs(1),
                "vm2's MiB {mib}: no space within 1 s: {}",
                s.log()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(flush_all(&mut c), 0);
        longest = longest.max(t.elapsed());
    }
    let r = runs(&d);
    eprintln!("{refusals} refusals, longest write {longest:?}; runs {r:?}");
    assert!(r[0].1 >= 1, "{r:?}: {}", s.log());
    assert!(s.log().contains("gave back chunks"), "{}", s.log());
    check(&s, "vm1", 1, KEPT);
    check(&s, "vm2", 2, 0..VM2_MIB);
    s.kill9();
    let s = start(&d, HOLD_LONG_MS, false);
    check(&s, "vm1", 1, KEPT);
    check(&s, "vm2", 2, 0..VM2_MIB);
    assert_eq!(s.term(), Some(0));
}

/// After a restart shard 0 gives its free borrowed runs back though none of its volumes
/// gets a request: the mount arms the look.
#[test]
fn after_a_restart_free_borrowed_runs_go_back_without_requests() {
    let d = TempDir::new("shards-give-back-restart");
    let s = start(&d, HOLD_LONG_MS, true);
    fill_and_free_held(&s, &d);
    s.kill9();
    let s = start(&d, 100, false);
    let t = Instant::now();
    let mut r = runs(&d);
    while r[0].0 > 0 && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(100));
        r = runs(&d);
    }
    assert!(r[0].0 == 0 && r[0].1 >= 1, "{r:?}: {}", s.log());
    let n = vm2_writes(&s, VM2_MIB);
    assert_eq!(n, VM2_MIB, "vm2's write of MiB {n} failed: {}", s.log());
    check(&s, "vm1", 1, KEPT);
    assert_eq!(s.term(), Some(0));
}
