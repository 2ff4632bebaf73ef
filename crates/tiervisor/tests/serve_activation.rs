//! systemd socket activation: `serve` takes the listening socket passed as descriptor 3
//! (LISTEN_PID, LISTEN_FDS) instead of binding `listen` (TCP) or `unix_socket` (Unix), and
//! clients reach the volumes through it.

mod support;

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::raw_nbd::*;
use support::*;

/// Start `serve` as systemd would: `fd` as descriptor 3, LISTEN_PID the server's own pid
/// (the shell's, which exec keeps), LISTEN_FDS=1. Returns once the banner says `ready`.
fn spawn_activated(fd: i32, d: &TempDir, extra: &[&str], ready: &str) -> std::process::Child {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\" \"$@\"")
        .arg(bin())
        .args(["serve", "--data-dir"])
        .arg(d.path())
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: dup2 and fcntl are async-signal-safe; they only put the listener at
    // descriptor 3 without close-on-exec, in the child before exec.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 onto itself keeps close-on-exec: clear it there instead.
            let ok = if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0) >= 0
            } else {
                libc::dup2(fd, 3) >= 0
            };
            if !ok {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = String::new();
    while !log.contains(ready) {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => log += &(l + "\n"),
            Err(_) => {
                let _ = child.kill();
                panic!("server did not start (waiting for {ready:?}):\n{log}");
            }
        }
    }
    child
}

fn term(mut child: std::process::Child) {
    // SAFETY: a plain signal to the child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn a_socket_passed_by_systemd_serves_the_volumes() {
    let d = TempDir::new("activation");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // `listen` points elsewhere, which must be ignored.
    let child = spawn_activated(
        listener.as_raw_fd(),
        &d,
        &["--listen", "127.0.0.1:1"],
        &format!("nbd://{addr}/"),
    );
    drop(listener);
    let mut c = handshake(&addr.to_string(), "vm1");
    assert_eq!(write_at(&mut c, 0, &[7u8; 4096]), 0);
    assert_eq!(flush_all(&mut c), 0);
    assert_eq!(read_at(&mut c, 0, 4096), vec![7u8; 4096]);
    drop(c);
    term(child);
}

/// A Unix socket (`ListenStream=/run/tiervisor/nbd.sock`) serves NBD over Unix; the
/// configured `unix_socket` is neither bound nor, at exit, removed: systemd owns the path.
#[test]
fn a_unix_socket_passed_by_systemd_serves_nbd_and_stays() {
    if !have("qemu-io") {
        return;
    }
    let d = TempDir::new("activation-unix");
    // The configured `unix_socket` (the default, nbd.sock in the data directory) is the
    // path systemd listens on, as a unit would set both.
    let path = d.path().join("nbd.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let child = spawn_activated(
        listener.as_raw_fd(),
        &d,
        &["--format-new"],
        &format!("socket={}", path.display()),
    );
    drop(listener);
    let uri = format!("nbd+unix:///vm1?socket={}", path.display());
    run(Command::new("qemu-io")
        .args(["-f", "raw", "-c", "write -P 0x3c 0 64k", "-c", "flush"])
        .arg(&uri));
    let out = run(Command::new("qemu-io")
        .args(["-f", "raw", "-c", "read -P 0x3c 0 64k"])
        .arg(&uri));
    assert!(!out.contains("Pattern verification failed"), "{out}");
    term(child);
    assert!(path.exists(), "the server removed systemd's socket");
}
