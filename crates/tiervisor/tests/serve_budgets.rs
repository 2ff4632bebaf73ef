//! `tiervisor serve --threads 2` moves the budgets that span volumes to the shard that
//! uses them (issue 18, `engine::budget_broker`, run by the front as the simulator runs
//! it): a volume on shard 0 writing beside an idle shard 1 gets 14 of the pool's 16 MiB
//! write buffer (shard 1 keeps its 2 MiB floor), both go back to 8 MiB once it stops, and
//! every write reads back, after a kill -9 too. With `shard_budgets = "fixed"` both stay
//! at 8 MiB.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::raw_nbd::*;
use support::*;

const MIB: u64 = 1 << 20;

fn config(budgets: &str) -> String {
    format!(
        r#"
chunk = "1m"
journal = "1m"
shard_budgets = "{budgets}"
[[pool]]
name = "ssd"
path = "ssd.pool"
size = "256m"
kind = "ssd"
write_buffer = "16m"
[[volume]]
name = "vm1"
size = "64m"
pool = "ssd"
placement = "pinned"
[[volume]]
name = "vm2"
size = "16m"
pool = "ssd"
placement = "pinned"
"#
    )
}

fn pattern(mib: u64) -> Vec<u8> {
    (0..MIB as usize)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(mib as u8))
        .collect()
}

fn start(d: &TempDir, budgets: &str, first: bool) -> ServerProc {
    let conf = d.path().join("c.toml");
    std::fs::write(&conf, config(budgets)).unwrap();
    let args = ["--config", conf.to_str().unwrap(), "--threads", "2"];
    if first {
        ServerProc::start(d.path(), &args)
    } else {
        ServerProc::start_plain(d.path(), &args)
    }
}

/// Every shard's write buffer budget in force (`ctl stat`), in MiB.
fn buffers(d: &TempDir) -> Vec<u64> {
    let (ok, out) = try_run(
        Command::new(bin())
            .args(["ctl", "stat", "--json", "--data-dir"])
            .arg(d.path()),
    );
    assert!(ok, "{out}");
    let st: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    (st["server"]["shards"].as_array().unwrap().iter())
        .map(|s| s["write_buffer_bytes"].as_u64().unwrap() / MIB)
        .collect()
}

/// Write vm1 MiB by MiB (round and round its 64 MiB) until `until` holds or `limit`
/// passes; the MiB written and the buffers last seen.
fn write_until(
    s: &ServerProc,
    d: &TempDir,
    limit: Duration,
    until: impl Fn(&[u64]) -> bool,
) -> (u64, Vec<u64>) {
    let mut c = handshake(&s.addr, "vm1");
    let t = Instant::now();
    let mut mib = 0;
    loop {
        let e = write_at(&mut c, (mib % 64) * MIB, &pattern(mib % 64));
        assert_eq!(e, 0, "write of MiB {mib}: {}", s.log());
        mib += 1;
        if mib % 8 == 0 {
            let b = buffers(d);
            if until(&b) || t.elapsed() > limit {
                assert_eq!(flush_all(&mut c), 0);
                return (mib, b);
            }
        }
    }
}

fn wait_for(d: &TempDir, want: &[u64]) -> Vec<u64> {
    let t = Instant::now();
    loop {
        let b = buffers(d);
        if b == want || t.elapsed() > Duration::from_secs(10) {
            return b;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_busy_shard_gets_most_of_the_buffer_and_gives_it_back_when_idle() {
    let d = TempDir::new("shards-budgets");
    let s = start(&d, "demand", true);
    assert!(
        s.log().contains("shard 0 owns vm1; shard 1 owns vm2"),
        "{}",
        s.log()
    );
    assert_eq!(buffers(&d), vec![8, 8]);
    let (written, b) = write_until(&s, &d, Duration::from_secs(20), |b| b == [14, 2]);
    assert_eq!(b, vec![14, 2], "after {written} MiB: {}", s.log());
    // Idle again: an interval with nothing written and both are back at an equal split.
    assert_eq!(wait_for(&d, &[8, 8]), vec![8, 8]);
    let mut c = handshake(&s.addr, "vm1");
    for mib in 0..written.min(64) {
        assert_eq!(
            read_at(&mut c, mib * MIB, MIB as usize),
            pattern(mib),
            "MiB {mib}"
        );
    }
    drop(c);
    s.kill9();
    let s = start(&d, "demand", false);
    let mut c = handshake(&s.addr, "vm1");
    for mib in 0..written.min(64) {
        assert_eq!(
            read_at(&mut c, mib * MIB, MIB as usize),
            pattern(mib),
            "MiB {mib} after kill -9"
        );
    }
    drop(c);
    assert_eq!(s.term(), Some(0));
}

#[test]
fn fixed_budgets_stay_at_an_equal_split() {
    let d = TempDir::new("shards-budgets-fixed");
    let s = start(&d, "fixed", true);
    // Several times as long as the broker takes to move the buffer (a few 100 ms).
    let (_, b) = write_until(&s, &d, Duration::from_secs(2), |_| false);
    assert_eq!(b, vec![8, 8]);
    assert_eq!(s.term(), Some(0));
}
