//! Live storage migration in `tiervisor serve` (issue 13, seed 004): a client keeps writing
//! a known pattern through NBD while `ctl migrate` moves the volume from the HDD pool file
//! to the SSD pool file. Every block then reads back its last written content, the data
//! lives on the new pool (`ctl stat`), and after a restart the volume is still there with
//! its data. A kill -9 in the middle of the copy loses no flushed write, and the restart
//! resumes the job (recorded in the volume table), which finishes.

mod support;

use std::net::TcpStream;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::raw_nbd::*;
use support::*;

const CONFIG: &str = r#"
chunk = "1m"
journal = "4m"
metadata_pool = "ssd"

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
size = "64m"
pool = "hdd"
"#;

const BLOCK: usize = 4096;
/// Blocks the first fill writes (16 MiB), and those the writer picks from (24 MiB: some
/// land in chunks the volume allocates while it moves).
const FILLED: usize = 4096;
const SPAN: usize = 6144;

const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_FLUSH: u16 = 3;

/// Block `b`'s content at write number `seq`: every byte depends on both.
fn content(b: usize, seq: u32) -> Vec<u8> {
    let mut d = vec![0u8; BLOCK];
    d[..8].copy_from_slice(&(b as u64).to_le_bytes());
    d[8..12].copy_from_slice(&seq.to_le_bytes());
    for (i, x) in d.iter_mut().enumerate().skip(12) {
        *x = (b as u32)
            .wrapping_mul(31)
            .wrapping_add(seq.wrapping_mul(7))
            .wrapping_add(i as u32) as u8;
    }
    d
}

/// One request, answered; panics on an error reply.
fn request(s: &mut TcpStream, cmd: u16, off: u64, len: u32, data: &[u8]) -> Vec<u8> {
    send_req(s, MAGIC, cmd, 1, off, len, data);
    let (err, _) = read_reply(s);
    assert_eq!(err, 0, "NBD error {err} for command {cmd} at {off}");
    let mut out = vec![0u8; if cmd == CMD_READ { len as usize } else { 0 }];
    std::io::Read::read_exact(s, &mut out).unwrap();
    out
}

/// Last written sequence number of each block (None: never written, reads as zeros).
type Reference = Vec<Option<u32>>;

fn fill(addr: &str) -> Reference {
    let mut s = handshake(addr, "vm1");
    let per = (1 << 20) / BLOCK;
    for first in (0..FILLED).step_by(per) {
        let data: Vec<u8> = (first..first + per).flat_map(|b| content(b, 0)).collect();
        request(
            &mut s,
            CMD_WRITE,
            (first * BLOCK) as u64,
            data.len() as u32,
            &data,
        );
    }
    request(&mut s, CMD_FLUSH, 0, 0, &[]);
    let mut r = vec![None; SPAN];
    r[..FILLED].fill(Some(0));
    r
}

/// Every block reads back as `r` says.
fn verify(addr: &str, r: &Reference, when: &str) {
    let mut s = handshake(addr, "vm1");
    let per = (1 << 20) / BLOCK;
    for first in (0..SPAN).step_by(per) {
        let got = request(
            &mut s,
            CMD_READ,
            (first * BLOCK) as u64,
            (per * BLOCK) as u32,
            &[],
        );
        for (i, (last, have)) in r[first..first + per]
            .iter()
            .zip(got.chunks(BLOCK))
            .enumerate()
        {
            let b = first + i;
            let want = last.map_or_else(|| vec![0u8; BLOCK], |seq| content(b, seq));
            assert!(
                have == &want[..],
                "{when}: block {b} does not hold write {last:?} (it starts {:?})",
                &have[..12]
            );
        }
    }
}

/// A client writing random blocks at queue depth 1 (a FLUSH every 32 writes) until told
/// to stop; it returns the reference and the longest write it waited for.
struct Writer {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(Reference, Duration, u64)>,
}

impl Writer {
    fn start(addr: &str, mut r: Reference, seed: u64) -> Writer {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let mut s = handshake(addr, "vm1");
        let thread = std::thread::spawn(move || {
            let mut x = seed | 1;
            let mut longest = Duration::ZERO;
            let mut n = 0u64;
            while !stop2.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let b = (x % SPAN as u64) as usize;
                let seq = r[b].map_or(1, |q| q + 1);
                let t = Instant::now();
                request(
                    &mut s,
                    CMD_WRITE,
                    (b * BLOCK) as u64,
                    BLOCK as u32,
                    &content(b, seq),
                );
                longest = longest.max(t.elapsed());
                r[b] = Some(seq);
                n += 1;
                if n.is_multiple_of(32) {
                    request(&mut s, CMD_FLUSH, 0, 0, &[]);
                }
            }
            request(&mut s, CMD_FLUSH, 0, 0, &[]);
            (r, longest, n)
        });
        Writer { stop, thread }
    }

    fn finish(self) -> (Reference, Duration, u64) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the writer")
    }
}

fn ctl(d: &TempDir, args: &[&str]) -> String {
    run(Command::new(bin())
        .arg("ctl")
        .args(args)
        .arg("--data-dir")
        .arg(d.path()))
}

fn status(d: &TempDir) -> serde_json::Value {
    let out = ctl(d, &["migrate", "status", "vm1", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v[0].clone()
}

/// Poll `ctl migrate status` until the job is over (at most 60 s); its last status.
fn wait_over(d: &TempDir) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = status(d);
        if m["running"] == false {
            return m;
        }
        assert!(Instant::now() < deadline, "still running after 60 s: {m}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// (ssd, hdd) chunks of vm1, from `ctl stat`.
fn chunks(d: &TempDir) -> (u64, u64) {
    let v: serde_json::Value =
        serde_json::from_str(&ctl(d, &["stat", "--json"])).expect("stat JSON");
    let by_pool = &v["engine"]["volumes"][0]["chunks_by_pool"];
    let n = |pool: &str| {
        by_pool
            .as_array()
            .into_iter()
            .flatten()
            .find(|p| p[0] == pool)
            .and_then(|p| p[1].as_u64())
            .unwrap_or(0)
    };
    (n("ssd"), n("hdd"))
}

fn start_server(d: &TempDir) -> ServerProc {
    let conf = d.path().join("mig.toml");
    std::fs::write(&conf, CONFIG).unwrap();
    ServerProc::start(d.path(), &["--config", conf.to_str().unwrap()])
}

/// Move vm1 from the HDD pool to the SSD pool with `scheme` while a client writes.
fn migrates_under_writes(scheme: &str) {
    let d = TempDir::new(&format!("mig-{scheme}"));
    let s = start_server(&d);
    let r = fill(&s.addr);
    assert_eq!(chunks(&d), (0, 16));
    let w = Writer::start(&s.addr, r, 0x5eed ^ scheme.len() as u64);
    std::thread::sleep(Duration::from_millis(200));
    let started = ctl(
        &d,
        &[
            "migrate",
            "start",
            "vm1",
            "--to",
            "ssd",
            "--scheme",
            scheme,
            "--rate-mb-s",
            "10",
        ],
    );
    assert!(started.contains(&format!("with {scheme}")), "{started}");
    let m = status(&d);
    assert_eq!(m["phase"], "copying", "{m}");
    let m = wait_over(&d);
    let (r, longest, writes) = w.finish();
    assert_eq!(m["phase"], "done", "{m}");
    assert_eq!(m["scheme"], scheme, "{m}");
    eprintln!(
        "{scheme}: {writes} writes during the job; longest write {:.1} ms; pivot downtime {} ms; {}",
        longest.as_secs_f64() * 1e3,
        m["downtime_ms"],
        ctl(&d, &["migrate", "status", "vm1"]).trim()
    );
    verify(&s.addr, &r, "after the pivot");
    let (ssd, hdd) = chunks(&d);
    assert!(
        hdd == 0 && ssd >= 16,
        "vm1 lives on the SSD: ssd={ssd} hdd={hdd}"
    );

    assert_eq!(s.term(), Some(0));
    let s = start_server(&d);
    verify(&s.addr, &r, "after a restart");
    // New chunks go to the new home pool.
    let mut c = handshake(&s.addr, "vm1");
    request(&mut c, CMD_WRITE, 40 << 20, BLOCK as u32, &content(0, 9));
    request(&mut c, CMD_FLUSH, 0, 0, &[]);
    let (ssd2, hdd2) = chunks(&d);
    assert_eq!((ssd2, hdd2), (ssd + 1, 0), "after a restart");
    assert_eq!(s.term(), Some(0));
}

#[test]
fn dbt_moves_a_volume_under_writes_and_it_stays_moved() {
    migrates_under_writes("dbt");
}

#[test]
fn mirror_moves_a_volume_under_writes_and_it_stays_moved() {
    migrates_under_writes("mirror");
}

#[test]
fn aio_moves_a_volume_under_writes_and_it_stays_moved() {
    migrates_under_writes("aio");
}

#[test]
fn slr_moves_a_volume_under_writes_and_it_stays_moved() {
    migrates_under_writes("slr");
}

/// kill -9 in the middle of a copy: after the restart every flushed write reads back and
/// the job, recorded in the volume table, runs again with its scheme (LR adopts the data it
/// wrote to the destination before the pivot; mirror's copy starts over) and finishes.
fn kill9_during_a_copy_resumes_at_restart(scheme: &str) {
    let d = TempDir::new(&format!("mig-kill-{scheme}"));
    let s = start_server(&d);
    let r = fill(&s.addr);
    let w = Writer::start(&s.addr, r, 0x4b11);
    std::thread::sleep(Duration::from_millis(100));
    ctl(
        &d,
        &[
            "migrate",
            "start",
            "vm1",
            "--to",
            "ssd",
            "--scheme",
            scheme,
            "--rate-mb-s",
            "2",
        ],
    );
    // Kill once the copy has begun. Not after a fixed time: under LR the writer's own
    // writes complete chunks too, and a fast writer had finished the job within 1.3 s
    // (24 chunks copied, 40 written), so a fixed 1.5 s found it done.
    let t0 = Instant::now();
    while status(&d)["chunks_copied"].as_u64().unwrap_or(0) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the copy never began"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The writer's last act is a FLUSH: everything it wrote is durable.
    let (r, _, _) = w.finish();
    let m = status(&d);
    assert_eq!(m["phase"], "copying", "killed mid-copy: {m}");
    assert!(m["chunks_copied"].as_u64().unwrap() < 64, "{m}");
    s.kill9();

    let s = start_server(&d);
    verify(&s.addr, &r, &format!("{scheme}: after kill -9 mid-copy"));
    // Resumed with its scheme: still running, or (the copy rate's first burst can move what
    // is left within milliseconds) already done. A job not resumed has no status here.
    let m = status(&d);
    assert_eq!(
        m["scheme"],
        serde_json::json!(scheme),
        "resumed at the restart: {m}"
    );
    assert!(
        m["running"].as_bool() == Some(true) || m["phase"] == "done",
        "resumed at the restart: {m}"
    );
    // Speed up the rest. The job may finish between the status above and this (CI saw
    // "volume vm1 is not migrating" here on 5c49195): that refusal is fine, the status
    // below must then say done.
    let (ok, out) = try_run(
        Command::new(bin())
            .args(["ctl", "migrate", "set-rate", "vm1", "200", "--data-dir"])
            .arg(d.path()),
    );
    assert!(ok || out.contains("is not migrating"), "{out}");
    let m = wait_over(&d);
    assert_eq!(m["phase"], "done", "{m}");
    verify(&s.addr, &r, &format!("{scheme}: after the resumed job"));
    assert_eq!(chunks(&d).1, 0, "vm1 left the HDD");
    assert_eq!(s.term(), Some(0));
}

#[test]
fn kill9_during_an_lr_copy_keeps_every_flushed_write_and_the_job_resumes() {
    kill9_during_a_copy_resumes_at_restart("lr");
}

#[test]
fn kill9_during_a_mirror_copy_keeps_every_flushed_write_and_the_job_resumes() {
    kill9_during_a_copy_resumes_at_restart("mirror");
}

/// Refusals reach the operator with the reason and a non-zero exit status.
#[test]
fn ctl_migrate_refusals_exit_non_zero_with_the_reason() {
    let d = TempDir::new("mig-refuse");
    let s = start_server(&d);
    let dir = d.path().to_str().unwrap();
    for (args, why) in [
        (
            vec!["start", "vm1", "--to", "tape"],
            "no pool \"tape\"; the pools are ssd, hdd",
        ),
        (
            vec!["start", "vm1", "--to", "hdd"],
            "volume vm1 already lives on pool hdd",
        ),
        (
            vec!["start", "vm1", "--to", "ssd", "--scheme", "fast"],
            "unknown migration scheme",
        ),
        (vec!["start", "vm2", "--to", "ssd"], "no volume \"vm2\""),
        (vec!["cancel", "vm1"], "volume vm1 is not migrating"),
        (vec!["set-rate", "vm1", "5"], "volume vm1 is not migrating"),
        (
            vec!["start", "vm1", "--to", "ssd", "--granularity", "12q"],
            "--granularity 12q",
        ),
    ] {
        let (ok, out) = try_run(
            Command::new(bin())
                .args(["ctl", "migrate"])
                .args(&args)
                .args(["--data-dir", dir]),
        );
        assert!(!ok && out.contains(why), "{args:?}: {out}");
    }
    assert_eq!(s.term(), Some(0));
}
