//! systemd socket activation (`sd_listen_fds`, as nbdkit has it): when the service manager
//! passes listening sockets (`LISTEN_PID` = this process, `LISTEN_FDS` = N, descriptors 3 to
//! 3 + N - 1, optional `LISTEN_FDNAMES`), `serve` uses them instead of binding `listen`
//! `metrics` and `unix_socket` itself. A TCP socket named `metrics`
//! (`FileDescriptorName=metrics` in the socket unit) serves Prometheus; any other TCP
//! socket serves NBD; a Unix stream socket serves NBD over Unix (`ListenStream=/path`), and
//! systemd, not `serve`, then owns its path. Only listening stream sockets are taken;
//! anything else is an error naming the descriptor.

use std::net::TcpListener;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixListener;

const FIRST_FD: RawFd = 3;

/// Listening sockets passed by the service manager.
#[derive(Default)]
pub struct Activated {
    pub nbd: Option<TcpListener>,
    pub metrics: Option<TcpListener>,
    pub nbd_unix: Option<UnixListener>,
}

impl Activated {
    pub fn any(&self) -> bool {
        self.nbd.is_some() || self.metrics.is_some() || self.nbd_unix.is_some()
    }
}

/// What a passed descriptor listens on.
#[derive(Debug, PartialEq)]
enum Domain {
    Tcp,
    Unix,
}

/// The sockets passed to this process, if it was socket-activated.
pub fn from_env() -> Result<Activated, String> {
    let pid = std::env::var("LISTEN_PID").ok();
    let fds = std::env::var("LISTEN_FDS").ok();
    let names = std::env::var("LISTEN_FDNAMES").ok();
    take(
        pid.as_deref(),
        fds.as_deref(),
        names.as_deref(),
        std::process::id(),
    )
}

fn take(
    pid: Option<&str>,
    fds: Option<&str>,
    names: Option<&str>,
    me: u32,
) -> Result<Activated, String> {
    let (Some(pid), Some(fds)) = (pid, fds) else {
        return Ok(Activated::default());
    };
    // For another process (a parent that did not clear them): not ours.
    if pid.trim().parse::<u32>().ok() != Some(me) {
        return Ok(Activated::default());
    }
    let n: RawFd = fds
        .trim()
        .parse()
        .map_err(|_| format!("LISTEN_FDS={fds:?}: expected a number of descriptors"))?;
    let names: Vec<&str> = names.map_or(Vec::new(), |n| n.split(':').collect());
    let mut got = Activated::default();
    for i in 0..n.max(0) {
        let fd = FIRST_FD + i;
        let name = names.get(i as usize).copied();
        let twice = || {
            format!(
                "socket-activated descriptor {fd} ({:?}): more than one socket for the same \
                 service; pass one TCP socket for NBD, one named metrics, one Unix socket",
                name.unwrap_or("unnamed")
            )
        };
        let nonblocking = |e: std::io::Error| format!("socket-activated descriptor {fd}: {e}");
        match (listener_domain(fd)?, name) {
            (Domain::Unix, Some("metrics")) => {
                return Err(format!(
                    "socket-activated descriptor {fd}: metrics must be a TCP socket, not a Unix one"
                ));
            }
            (Domain::Unix, _) => {
                // SAFETY: the service manager handed this descriptor to this process for
                // it to own (LISTEN_PID is ours); it is a listening Unix stream socket
                // (checked above) and nothing else in the process uses it.
                let l = unsafe { UnixListener::from_raw_fd(fd) };
                l.set_nonblocking(true).map_err(nonblocking)?;
                if got.nbd_unix.replace(l).is_some() {
                    return Err(twice());
                }
            }
            (Domain::Tcp, name) => {
                // SAFETY: as above, for a listening TCP socket.
                let l = unsafe { TcpListener::from_raw_fd(fd) };
                l.set_nonblocking(true).map_err(nonblocking)?;
                let slot = match name {
                    Some("metrics") => &mut got.metrics,
                    _ => &mut got.nbd,
                };
                if slot.replace(l).is_some() {
                    return Err(twice());
                }
            }
        }
    }
    Ok(got)
}

/// A descriptor must be a TCP (IPv4 or IPv6) or Unix stream socket that listens.
fn listener_domain(fd: RawFd) -> Result<Domain, String> {
    let opt = |level, name| -> Option<libc::c_int> {
        let mut v: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `v`.
        let r = unsafe {
            libc::getsockopt(
                fd,
                level,
                name,
                (&mut v as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        (r == 0).then_some(v)
    };
    let what = match (
        opt(libc::SOL_SOCKET, libc::SO_TYPE),
        opt(libc::SOL_SOCKET, libc::SO_DOMAIN),
        opt(libc::SOL_SOCKET, libc::SO_ACCEPTCONN),
    ) {
        (None, _, _) => "not a socket",
        (Some(t), _, _) if t != libc::SOCK_STREAM => "not a stream socket",
        (_, _, Some(0)) => "not listening",
        (_, Some(d), _) if d == libc::AF_INET || d == libc::AF_INET6 => return Ok(Domain::Tcp),
        (_, Some(libc::AF_UNIX), _) => return Ok(Domain::Unix),
        _ => "neither a TCP nor a Unix socket",
    };
    Err(format!("socket-activated descriptor {fd}: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_variables_or_for_another_process_nothing_is_taken() {
        assert!(!take(None, None, None, 7).unwrap().any());
        assert!(!take(Some("8"), Some("1"), None, 7).unwrap().any());
        assert!(take(Some("7"), Some("many"), None, 7).is_err());
    }
}
