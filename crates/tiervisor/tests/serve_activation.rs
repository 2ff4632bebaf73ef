//! systemd socket activation: `serve` takes the listening socket passed as descriptor 3
//! (LISTEN_PID, LISTEN_FDS) instead of binding `listen`, and clients reach the volumes
//! through it.

mod support;

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use support::raw_nbd::*;
use support::*;

#[test]
fn a_socket_passed_by_systemd_serves_the_volumes() {
    let d = TempDir::new("activation");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let fd = listener.as_raw_fd();
    // As systemd does: the socket as descriptor 3, LISTEN_PID the server's own pid (the
    // shell's, which exec keeps), and `listen` pointing elsewhere, which must be ignored.
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\" \"$@\"")
        .arg(bin())
        .args(["serve", "--data-dir"])
        .arg(d.path())
        .args(["--listen", "127.0.0.1:1"])
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
    drop(listener);
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = String::new();
    while !log.contains("NBD over TCP") {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => log += &(l + "\n"),
            Err(_) => {
                let _ = child.kill();
                panic!("server did not start:\n{log}");
            }
        }
    }
    assert!(log.contains(&format!("nbd://{addr}/")), "{log}");
    let mut c = handshake(&addr.to_string(), "vm1");
    assert_eq!(write_at(&mut c, 0, &[7u8; 4096]), 0);
    assert_eq!(flush_all(&mut c), 0);
    assert_eq!(read_at(&mut c, 0, 4096), vec![7u8; 4096]);
    drop(c);
    // SAFETY: a plain signal to the child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(child.wait().unwrap().code(), Some(0));
}
