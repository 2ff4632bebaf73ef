//! `tiervisor serve` fails safe: it refuses before writing, never formats over what might
//! be data, survives repeated signals, and tells the truth at exit.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::raw_nbd::*;
use support::*;

/// A small two-pool configuration whose pools live in the data directory.
const SMALL: &str = r#"
chunk = "1m"
journal = "1m"
[[pool]]
name = "ssd"
path = "ssd.pool"
size = "64m"
kind = "ssd"
[[pool]]
name = "hdd"
path = "hdd.pool"
size = "256m"
kind = "hdd"
[[volume]]
name = "vm1"
size = "32m"
pool = "hdd"
"#;

/// Run `serve` expecting it to refuse within 30 s; returns (exit code, output). Listens
/// on port 0 unless `args` say otherwise.
fn serve_refused(args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(bin());
    cmd.arg("serve");
    if !args.contains(&"--listen") {
        cmd.args(["--listen", "127.0.0.1:0"]);
    }
    let err = std::env::temp_dir().join(format!(
        "tv-refused-{}-{:?}.log",
        std::process::id(),
        std::thread::current().id()
    ));
    let mut child = cmd
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("run serve");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "serve did not refuse (still running after 30 s):\n{}",
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let text = std::fs::read_to_string(&err).unwrap_or_default();
    let _ = std::fs::remove_file(&err);
    assert!(!status.success(), "serve should refuse:\n{text}");
    (status.code(), text)
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().to_string()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Write `data` at `off` of `vol` and flush, through a raw NBD connection.
fn write_flush(addr: &str, vol: &str, off: u64, data: &[u8]) {
    let mut s = handshake(addr, vol);
    send_req(&mut s, MAGIC, 1, 1, off, data.len() as u32, data);
    assert_eq!(read_reply(&mut s), (0, 1), "write");
    send_req(&mut s, MAGIC, 3, 2, 0, 0, &[]);
    assert_eq!(read_reply(&mut s), (0, 2), "flush");
}

#[test]
fn missing_pools_are_refused_and_nothing_is_written() {
    let d = TempDir::new("fs-missing");
    let conf = d.path().join("c.toml");
    std::fs::write(&conf, SMALL).unwrap();
    let data = d.path().join("data");
    let dd = data.to_str().unwrap();
    let c = conf.to_str().unwrap();
    // A configuration file on a fresh directory: nothing is created unless asked.
    let (code, text) = serve_refused(&["--config", c, "--data-dir", dd]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("--format-new") && text.contains("ssd.pool"),
        "{text}"
    );
    assert!(!data.exists(), "a refused start created {}", data.display());
    // Asked: created; then restarted without the flag, it mounts.
    let s = ServerProc::start(&data, &["--config", c]);
    write_flush(&s.addr, "vm1", 4096, b"still here");
    assert_eq!(s.term(), Some(0));
    let s = ServerProc::start_plain(&data, &["--config", c]);
    assert_eq!(s.term(), Some(0));
    // One pool gone: refused, naming it, with or without --format-new.
    let hdd = data.join("hdd.pool");
    let ssd_before = std::fs::read(data.join("ssd.pool")).unwrap();
    std::fs::rename(&hdd, d.path().join("hdd.moved")).unwrap();
    for extra in [&[][..], &["--format-new"][..]] {
        let mut args = vec!["--config", c, "--data-dir", dd];
        args.extend_from_slice(extra);
        let (code, text) = serve_refused(&args);
        assert_eq!(code, Some(2), "{text}");
        assert!(text.contains(&hdd.display().to_string()), "{text}");
        assert!(!hdd.exists(), "a refused start created {}", hdd.display());
    }
    assert_eq!(std::fs::read(data.join("ssd.pool")).unwrap(), ssd_before);
    // Every pool gone but an old pool left beside: --format-new still refuses.
    std::fs::rename(data.join("ssd.pool"), data.join("old-ssd.pool")).unwrap();
    let (_, text) = serve_refused(&["--config", c, "--data-dir", dd, "--format-new"]);
    assert!(
        text.contains("old-ssd.pool") && text.contains("earlier"),
        "{text}"
    );
    assert_eq!(files_in(&data), vec!["old-ssd.pool".to_string()]);
    // And the data was never touched: put the files back, and it is all there.
    std::fs::rename(data.join("old-ssd.pool"), data.join("ssd.pool")).unwrap();
    std::fs::rename(d.path().join("hdd.moved"), &hdd).unwrap();
    let s = ServerProc::start_plain(&data, &["--config", c]);
    let mut n = handshake(&s.addr, "vm1");
    send_req(&mut n, MAGIC, 0, 7, 4096, 10, &[]);
    assert_eq!(read_reply(&mut n), (0, 7));
    let mut got = [0u8; 10];
    std::io::Read::read_exact(&mut n, &mut got).unwrap();
    assert_eq!(&got, b"still here");
    drop(n);
    assert_eq!(s.term(), Some(0));
}

#[test]
fn embedded_default_refuses_a_used_directory_without_its_pools() {
    let d = TempDir::new("fs-default");
    std::fs::write(d.path().join("notes.txt"), "someone's files").unwrap();
    let (code, text) = serve_refused(&["--data-dir", d.path().to_str().unwrap()]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("no pool files found"), "{text}");
    assert_eq!(files_in(d.path()), vec!["notes.txt".to_string()]);
}

#[test]
fn a_port_in_use_is_found_before_any_pool_is_created() {
    let d = TempDir::new("fs-port");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().to_string();
    let data = d.path().join("data");
    let (_, text) = serve_refused(&["--data-dir", data.to_str().unwrap(), "--listen", &port]);
    assert!(text.contains("cannot listen on"), "{text}");
    assert!(
        !data.exists(),
        "pools were created before the port was checked"
    );
    let (_, text) = serve_refused(&[
        "--data-dir",
        data.to_str().unwrap(),
        "--listen",
        "localhost",
    ]);
    assert!(text.contains("HOST:PORT"), "{text}");
    assert!(!data.exists());
}

#[test]
fn a_pool_deleted_while_running_makes_the_exit_fail() {
    let d = TempDir::new("fs-deleted");
    let s = ServerProc::start(d.path(), &[]);
    std::fs::remove_file(d.path().join("hdd.pool")).unwrap();
    s.wait_log("was deleted while the server runs");
    let log = s.log.clone();
    let code = s.term();
    std::thread::sleep(Duration::from_millis(200));
    let log = log.lock().unwrap().clone();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("shutdown was not clean"), "{log}");
    assert!(!log.contains("stopped cleanly"), "{log}");
}

#[test]
fn a_second_sigterm_does_not_abort_the_shutdown_and_sighup_is_ignored() {
    let d = TempDir::new("fs-signals");
    let s = ServerProc::start(d.path(), &[]);
    s.signal(1); // SIGHUP
    s.wait_log("SIGHUP ignored");
    write_flush(&s.addr, "vm1", 0, b"served after SIGHUP");
    // Two SIGTERMs at once, as `timeout` and a process group would send.
    s.signal(15);
    s.signal(15);
    let log = s.log.clone();
    let code = s.wait_exit();
    std::thread::sleep(Duration::from_millis(200));
    let log = log.lock().unwrap().clone();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("stopped cleanly"), "{log}");
}

#[test]
fn a_failed_final_commit_exits_non_zero() {
    let d = TempDir::new("fs-final");
    let Some(fs) = SmallFs::mount(&d.path().join("mnt"), "48m") else {
        return;
    };
    let conf = d.path().join("c.toml");
    std::fs::write(&conf, SMALL).unwrap();
    let s = ServerProc::start(&fs.0, &["--config", conf.to_str().unwrap()]);
    // Written (allocated on the tmpfs) but not flushed: the final commit must record it.
    let mut n = handshake(&s.addr, "vm1");
    send_req(&mut n, MAGIC, 1, 1, 0, 8192, &[7u8; 8192]);
    assert_eq!(read_reply(&mut n), (0, 1));
    fill(&fs.0);
    let log = s.log.clone();
    let code = s.term();
    std::thread::sleep(Duration::from_millis(200));
    let log = log.lock().unwrap().clone();
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("final commit failed"), "{log}");
    // Nothing claims the whole stop was clean (with several shards, a shard that had
    // nothing to lose says so on its own line, `shard k: stopped: ...`).
    assert!(
        !log.contains("tiervisor: stopped: all data flushed"),
        "{log}"
    );
    assert!(!log.contains("stopped cleanly"), "{log}");
    drop(n);
}

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[test]
fn a_client_that_never_reads_its_replies_cannot_grow_the_server() {
    const MIB: u64 = 1 << 20;
    let cap = 48 * MIB; // the default per-connection cap
    let d = TempDir::new("fs-rss");
    let s = ServerProc::start(d.path(), &[]);
    // Real data to read, so replies are buffers the server fills (not lazy zero pages).
    let data = vec![0xa5u8; 32 * MIB as usize];
    let mut w = handshake(&s.addr, "vm1");
    send_req(&mut w, MAGIC, 1, 1, 0, data.len() as u32, &data);
    assert_eq!(read_reply(&mut w), (0, 1));
    drop(data);
    // 24 reads of 32 MiB pipelined (768 MiB of replies), and no reply ever read.
    let mut greedy = handshake(&s.addr, "vm1");
    for h in 0..24 {
        send_req(&mut greedy, MAGIC, 0, 100 + h, 0, 32 * MIB as u32, &[]);
    }
    let pid = s.child.id();
    let mut peak = 0;
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(100));
        peak = peak.max(rss_bytes(pid));
    }
    assert!(
        peak < cap + 64 * MIB,
        "server RSS peaked at {} MiB with a cap of {} MiB",
        peak / MIB,
        cap / MIB
    );
    // Another client is still served meanwhile.
    send_req(&mut w, MAGIC, 0, 2, 0, 4096, &[]);
    assert_eq!(read_reply(&mut w), (0, 2));
    let mut got = vec![0u8; 4096];
    std::io::Read::read_exact(&mut w, &mut got).unwrap();
    assert!(got.iter().all(|&b| b == 0xa5));
    eprintln!("server RSS peak {} MiB (cap {} MiB)", peak / MIB, cap / MIB);
    drop(greedy);
    drop(w);
    assert_eq!(s.term(), Some(0));
}

#[test]
fn a_sigterm_while_the_pools_are_being_formatted_still_stops_the_server() {
    use std::io::BufRead;
    let d = TempDir::new("fs-sigterm-start");
    let conf = d.path().join("slow.toml");
    // A pool throttled hard (k = 50), so that formatting takes long enough to signal into.
    let slow = one_pool_config(
        "64m",
        "throttle = { model = \"cheetah-15k4\", k = 50 }",
        "vm1",
        "",
    );
    std::fs::write(&conf, slow).unwrap();
    let mut child = Command::new(bin())
        .arg("serve")
        .arg("--data-dir")
        .arg(d.path())
        .args(["--listen", "127.0.0.1:0", "--format-new", "--config"])
        .arg(&conf)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut log = String::new();
    // Signal once the pool file exists: the format's throttled writes are under way.
    for line in rx.iter() {
        log.push_str(&line);
        log.push('\n');
        if line.contains("created pool") {
            break;
        }
    }
    run(Command::new("kill").args(["-TERM", &child.id().to_string()]));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            log.extend(rx.try_iter().map(|l| l + "\n"));
            panic!("SIGTERM during start-up was lost: the server kept running\n{log}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(100));
    log.extend(rx.try_iter().map(|l| l + "\n"));
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("stopped"), "{log}");
}
