//! Thread-pool backend: workers perform positional I/O and post completions.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tiervisor_engine::{DevKind, DeviceCompletion, DeviceOp, Errno};

use super::direct::{AlignedBuf, PoolFds};
use super::zeroing::{Then, ZeroStep};
use super::{
    Backend, DISCARD_FALLBACK, PUNCH_FALLBACK, drain_eventfd, errno_of, log_punch_refused,
    new_eventfd, poke_eventfd, punch_unsupported,
};

pub struct ThreadBackend {
    tx: Option<Sender<DeviceOp>>,
    done: Arc<Mutex<Vec<DeviceCompletion>>>,
    efd: Arc<OwnedFd>,
    in_flight: usize,
    workers: Vec<std::thread::JoinHandle<()>>,
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn check(r: isize) -> Result<usize, Errno> {
    if r < 0 {
        Err(errno_of(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        ))
    } else {
        Ok(r as usize)
    }
}

/// Carry out `op` on a pool: aligned reads and writes of a direct pool through its
/// O_DIRECT descriptor with an aligned buffer, everything else through the ordinary one.
fn perform(fds: PoolFds, op: &DeviceOp) -> Result<Option<Bytes>, Errno> {
    let Some(dfd) = fds.direct_for(op) else {
        return perform_on(fds.buffered, op);
    };
    let len = op.len_bytes as usize;
    let off = op.offset_bytes as i64;
    if op.kind == DevKind::Read {
        let mut buf = AlignedBuf::zeroed(len);
        // SAFETY: the buffer has `len` bytes.
        let n = check(unsafe { libc::pread(dfd, buf.as_mut_ptr().cast(), len, off) })?;
        if n < len {
            // A short direct read (end of file): the rest the ordinary way, or zeros.
            let rest = perform_on(fds.buffered, &sub_op(op, n))?;
            if let Some(r) = rest {
                buf.as_mut_slice()[n..].copy_from_slice(&r);
            }
        }
        return Ok(Some(buf.into_bytes()));
    }
    let data = AlignedBuf::copy_of(op.payload.as_deref().unwrap_or(&[]));
    let flags = if op.fua { libc::RWF_DSYNC } else { 0 };
    let iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: one iovec over `data`, which has `len` bytes.
    let n = check(unsafe { libc::pwritev2(dfd, &iov, 1, off, flags) })?;
    if n < len {
        let payload = op.payload.as_ref().map(|p| p.slice(n..));
        let rest = DeviceOp {
            payload,
            ..sub_op(op, n)
        };
        return perform_on(fds.buffered, &rest);
    }
    Ok(None)
}

/// The part of `op` after its first `done` bytes.
fn sub_op(op: &DeviceOp, done: usize) -> DeviceOp {
    DeviceOp {
        offset_bytes: op.offset_bytes + done as u64,
        len_bytes: op.len_bytes - done as u64,
        ..op.clone()
    }
}

fn perform_on(fd: RawFd, op: &DeviceOp) -> Result<Option<Bytes>, Errno> {
    let len = op.len_bytes as usize;
    let off = op.offset_bytes as i64;
    match op.kind {
        DevKind::Read => {
            let mut buf = vec![0u8; len];
            let mut done = 0;
            while done < len {
                // SAFETY: the buffer has `len - done` bytes at `done`.
                let n = check(unsafe {
                    libc::pread(
                        fd,
                        buf.as_mut_ptr().add(done).cast(),
                        len - done,
                        off + done as i64,
                    )
                })?;
                if n == 0 {
                    break; // end of file reads as zeros
                }
                done += n;
            }
            Ok(Some(Bytes::from(buf)))
        }
        DevKind::Write => {
            let data = op.payload.as_deref().unwrap_or(&[]);
            let mut done = 0;
            while done < data.len() {
                // SAFETY: `data` has `len - done` bytes at `done`.
                let n = check(unsafe {
                    libc::pwrite(
                        fd,
                        data.as_ptr().add(done).cast(),
                        data.len() - done,
                        off + done as i64,
                    )
                })?;
                if n == 0 {
                    return Err(Errno::NoSpc);
                }
                done += n;
            }
            if op.fua {
                // SAFETY: plain syscall on an open descriptor.
                check(unsafe { libc::fdatasync(fd) } as isize)?;
            }
            Ok(None)
        }
        // SAFETY: plain syscall on an open descriptor.
        DevKind::Flush => check(unsafe { libc::fdatasync(fd) } as isize).map(|_| None),
        DevKind::WriteZeroes | DevKind::Punch => {
            let mut step = ZeroStep::first(op.kind);
            while let Some(mode) = step.mode() {
                // SAFETY: plain syscall on an open descriptor.
                let r = unsafe { libc::fallocate(fd, mode, off, len as i64) };
                let code = if r == 0 { 0 } else { last_errno() };
                match step.then(op.kind, code) {
                    Then::Done => return Ok(None),
                    Then::Fail(code) => return Err(errno_of(code)),
                    Then::Next(next) => {
                        if next == ZeroStep::WriteZeros && op.kind == DevKind::Punch {
                            log_punch_refused(op.pool.0, code, PUNCH_FALLBACK);
                        }
                        step = next;
                    }
                }
            }
            let zeros = DeviceOp {
                kind: DevKind::Write,
                payload: Some(Bytes::from(vec![0u8; len])),
                fua: false,
                ..op.clone()
            };
            perform_on(fd, &zeros)
        }
        DevKind::Discard => {
            // SAFETY: plain syscall; advisory, so a failure only loses the space back.
            let p = unsafe {
                libc::fallocate(
                    fd,
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    off,
                    len as i64,
                )
            };
            if p != 0 && punch_unsupported(last_errno()) {
                log_punch_refused(op.pool.0, last_errno(), DISCARD_FALLBACK);
            }
            Ok(None)
        }
    }
}

impl ThreadBackend {
    pub fn new(fds: Vec<PoolFds>, workers: usize) -> std::io::Result<ThreadBackend> {
        let (tx, rx): (Sender<DeviceOp>, Receiver<DeviceOp>) = channel();
        let rx = Arc::new(Mutex::new(rx));
        let done = Arc::new(Mutex::new(Vec::new()));
        let efd = Arc::new(new_eventfd()?);
        let fds = Arc::new(fds);
        let handles = (0..workers)
            .map(|i| {
                let (rx, done, efd, fds) = (rx.clone(), done.clone(), efd.clone(), fds.clone());
                std::thread::Builder::new()
                    .name(format!("tiervisor-io-{i}"))
                    .spawn(move || {
                        loop {
                            let op = match rx.lock() {
                                Ok(r) => match r.recv() {
                                    Ok(op) => op,
                                    Err(_) => return,
                                },
                                Err(_) => return,
                            };
                            let fd = fds[op.pool.0 as usize];
                            let result = perform(fd, &op);
                            let c = match result {
                                Ok(data) => DeviceCompletion {
                                    id: op.id,
                                    result: Ok(()),
                                    data,
                                },
                                Err(e) => DeviceCompletion {
                                    id: op.id,
                                    result: Err(e),
                                    data: None,
                                },
                            };
                            if let Ok(mut d) = done.lock() {
                                d.push(c);
                            }
                            poke_eventfd(efd.as_raw_fd());
                        }
                    })
                    .expect("spawn I/O worker")
            })
            .collect();
        Ok(ThreadBackend {
            tx: Some(tx),
            done,
            efd,
            in_flight: 0,
            workers: handles,
        })
    }
}

impl Drop for ThreadBackend {
    fn drop(&mut self) {
        self.tx = None;
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
    }
}

impl Backend for ThreadBackend {
    fn name(&self) -> &'static str {
        "threads"
    }
    fn submit(&mut self, op: DeviceOp) {
        self.in_flight += 1;
        if let Some(tx) = &self.tx {
            let id = op.id;
            if tx.send(op).is_err()
                && let Ok(mut d) = self.done.lock()
            {
                d.push(DeviceCompletion {
                    id,
                    result: Err(Errno::Io),
                    data: None,
                });
            }
        }
    }
    fn commit(&mut self) {}
    fn reap(&mut self, out: &mut Vec<DeviceCompletion>) {
        if let Ok(mut d) = self.done.lock() {
            self.in_flight -= d.len();
            out.append(&mut d);
        }
    }
    fn wake_fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }
    fn clear_wake(&mut self) {
        drain_eventfd(self.efd.as_raw_fd());
    }
    fn in_flight(&self) -> usize {
        self.in_flight
    }
}
