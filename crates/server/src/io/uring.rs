//! io_uring backend: reads into fresh buffers, writes straight from the request's
//! payload, `fsync(DATASYNC)` for flushes, `fallocate` for zeroing and discards.
//! Short reads and writes are resubmitted for the remainder.
//!
//! Buffered writes on filesystems that cannot do them without blocking (ext4) are punted
//! by io_uring to a kernel worker, which costs a thread hop. So when nothing else is in
//! flight, a small write to a regular file is done inline with `pwrite`: a lone writer
//! (queue depth 1) saves the hop; under load the ring keeps writes concurrent.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use bytes::Bytes;
use io_uring::{IoUring, opcode, types};
use slab::Slab;
use tiervisor_engine::{DevKind, DeviceCompletion, DeviceOp, Errno};

use super::direct::{AlignedBuf, PoolFds};
use super::zeroing::{Then, ZeroStep};
use super::{
    Backend, DISCARD_FALLBACK, PUNCH_FALLBACK, drain_eventfd, errno_of, log_punch_refused,
    new_eventfd, punch_unsupported,
};

const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;

struct InFlight {
    op: DeviceOp,
    buf: Vec<u8>,
    /// The descriptor it uses (a direct pool's O_DIRECT one for aligned reads and writes).
    fd: RawFd,
    /// O_DIRECT reads and writes: the aligned buffer read into or written from.
    aligned: Option<AlignedBuf>,
    done: usize,
    /// For WriteZeroes and Punch: the step under way.
    zero_step: ZeroStep,
}

/// Largest write done inline when the ring is idle.
const INLINE_WRITE_MAX_BYTES: u64 = 64 << 10;

pub struct UringBackend {
    ring: IoUring,
    /// Per pool: a regular file (page cache), where small inline writes are cheap.
    inline_ok: Vec<bool>,
    efd: OwnedFd,
    fds: Vec<PoolFds>,
    ops: Slab<InFlight>,
    /// Operations waiting for room in the submission queue.
    backlog: VecDeque<usize>,
    finished: Vec<DeviceCompletion>,
    /// Reused buffer for completion queue entries.
    cqes: Vec<(usize, i32)>,
}

impl UringBackend {
    pub fn new(fds: Vec<PoolFds>) -> std::io::Result<UringBackend> {
        let ring = IoUring::new(1024)?;
        let efd = new_eventfd()?;
        // Only completions that happen asynchronously need to wake the event loop; inline ones
        // are reaped right after submission.
        ring.submitter().register_eventfd_async(efd.as_raw_fd())?;
        // Direct pools have no page cache to write into cheaply.
        let inline_ok = fds
            .iter()
            .map(|f| f.direct.is_none() && is_regular_file(f.buffered))
            .collect();
        Ok(UringBackend {
            ring,
            inline_ok,
            efd,
            fds,
            ops: Slab::with_capacity(1024),
            backlog: VecDeque::new(),
            finished: Vec::new(),
            cqes: Vec::with_capacity(256),
        })
    }

    /// A small buffered write done right away; `None` if it could not be (caller queues it).
    fn write_inline(&mut self, op: &DeviceOp) -> Option<Result<(), Errno>> {
        let fd = self.fds[op.pool.0 as usize].buffered;
        let data = op.payload.as_deref()?;
        let mut done = 0usize;
        while done < data.len() {
            // SAFETY: `data` holds `data.len() - done` bytes at `done`.
            let n = unsafe {
                libc::pwrite(
                    fd,
                    data.as_ptr().add(done).cast(),
                    data.len() - done,
                    (op.offset_bytes + done as u64) as i64,
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO);
                if e == libc::EINTR {
                    continue;
                }
                return Some(Err(errno_of(e)));
            }
            if n == 0 {
                return Some(Err(Errno::NoSpc));
            }
            done += n as usize;
        }
        Some(Ok(()))
    }

    fn sqe(&self, key: usize) -> io_uring::squeue::Entry {
        let f = &self.ops[key];
        let fd = types::Fd(f.fd);
        let off = f.op.offset_bytes + f.done as u64;
        let rest = (f.op.len_bytes as usize - f.done) as u32;
        let e = match f.op.kind {
            DevKind::Read => {
                let p = f.aligned.as_ref().map_or(f.buf.as_ptr(), |a| a.as_ptr());
                opcode::Read::new(fd, p.wrapping_add(f.done) as *mut u8, rest)
                    .offset(off)
                    .build()
            }
            DevKind::Write => {
                let p = match (&f.aligned, &f.op.payload) {
                    (Some(a), _) => a.as_ptr(),
                    (None, Some(b)) => b.as_ptr(),
                    (None, None) => std::ptr::null(),
                };
                let w = opcode::Write::new(fd, p.wrapping_add(f.done), rest).offset(off);
                if f.op.fua {
                    w.rw_flags(libc::RWF_DSYNC).build()
                } else {
                    w.build()
                }
            }
            DevKind::Flush => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            DevKind::WriteZeroes | DevKind::Punch => match f.zero_step.mode() {
                Some(mode) => opcode::Fallocate::new(fd, f.op.len_bytes)
                    .offset(f.op.offset_bytes)
                    .mode(mode)
                    .build(),
                None => opcode::Write::new(fd, f.buf.as_ptr().wrapping_add(f.done), rest)
                    .offset(off)
                    .build(),
            },
            DevKind::Discard => opcode::Fallocate::new(fd, f.op.len_bytes)
                .offset(f.op.offset_bytes)
                .mode(FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE)
                .build(),
        };
        e.user_data(key as u64)
    }

    fn push(&mut self, key: usize) {
        let e = self.sqe(key);
        // SAFETY: the buffers the entry points at live in `self.ops[key]` (read buffer or
        // the payload's heap data) and are not moved or freed until its completion.
        let pushed = unsafe { self.ring.submission().push(&e).is_ok() };
        if !pushed {
            self.backlog.push_back(key);
        }
    }

    fn complete(&mut self, key: usize, result: Result<(), Errno>) {
        let mut f = self.ops.remove(key);
        let data = if f.op.kind == DevKind::Read
            && result.is_ok()
            && let Some(a) = f.aligned.take()
        {
            Some(a.into_bytes())
        } else if f.op.kind == DevKind::Read && result.is_ok() {
            // SAFETY: the kernel filled `done == len` bytes of the buffer's capacity.
            unsafe { f.buf.set_len(f.op.len_bytes as usize) };
            Some(Bytes::from(f.buf))
        } else {
            None
        };
        self.finished.push(DeviceCompletion {
            id: f.op.id,
            result,
            data,
        });
        f.op.payload = None;
    }

    fn handle_cqe(&mut self, key: usize, res: i32) {
        let Some(f) = self.ops.get_mut(key) else {
            return;
        };
        let len = f.op.len_bytes as usize;
        match f.op.kind {
            DevKind::Read | DevKind::Write => {
                if res < 0 {
                    if -res == libc::EINTR || -res == libc::EAGAIN {
                        return self.push(key);
                    }
                    return self.complete(key, Err(errno_of(-res)));
                }
                if res == 0 && f.done < len {
                    if f.op.kind == DevKind::Read {
                        // End of file: the rest reads as zeros.
                        let start = f.done;
                        if let Some(a) = &mut f.aligned {
                            a.as_mut_slice()[start..].fill(0);
                        } else {
                            // SAFETY: writing zeros into the buffer's spare capacity.
                            unsafe {
                                std::ptr::write_bytes(f.buf.as_mut_ptr().add(start), 0, len - start)
                            };
                        }
                        f.done = len;
                    } else {
                        return self.complete(key, Err(Errno::NoSpc));
                    }
                }
                f.done += res as usize;
                if f.done < len {
                    return self.push(key);
                }
                self.complete(key, Ok(()))
            }
            DevKind::WriteZeroes | DevKind::Punch => {
                if f.zero_step == ZeroStep::WriteZeros {
                    if res < 0 {
                        return self.complete(key, Err(errno_of(-res)));
                    }
                    f.done += res as usize;
                    return if f.done < len {
                        self.push(key)
                    } else {
                        self.complete(key, Ok(()))
                    };
                }
                let code = if res < 0 { -res } else { 0 };
                match f.zero_step.then(f.op.kind, code) {
                    Then::Done => self.complete(key, Ok(())),
                    Then::Fail(code) => self.complete(key, Err(errno_of(code))),
                    Then::Next(next) => {
                        if next == ZeroStep::WriteZeros {
                            if f.op.kind == DevKind::Punch {
                                log_punch_refused(f.op.pool.0, code, PUNCH_FALLBACK);
                            }
                            f.buf = vec![0u8; len];
                            f.done = 0;
                        }
                        f.zero_step = next;
                        self.push(key)
                    }
                }
            }
            DevKind::Flush => {
                self.complete(key, if res < 0 { Err(errno_of(-res)) } else { Ok(()) })
            }
            // Advisory: a failed discard changes nothing but the space given back.
            DevKind::Discard => {
                if res < 0 && punch_unsupported(-res) {
                    log_punch_refused(f.op.pool.0, -res, DISCARD_FALLBACK);
                }
                self.complete(key, Ok(()))
            }
        }
    }
}

/// The completion of a cancellation request rather than of an operation.
const CANCEL_USER_DATA: u64 = u64::MAX;

impl UringBackend {
    /// Return only once the kernel holds no operation of ours, asking it to cancel what is
    /// still running: their buffers (read targets, write payloads) live in `self.ops` and
    /// must not be freed while the kernel may still use them. Operations never handed to
    /// the kernel (the backlog) are simply dropped. If the ring itself fails, the buffers
    /// are leaked rather than freed under the kernel.
    fn cancel_and_wait(&mut self) {
        for key in self.backlog.drain(..) {
            self.ops.try_remove(key);
        }
        // Entries already in the submission queue go to the kernel now, so each one has a
        // completion to wait for.
        let _ = self.ring.submit();
        let mut cancel_sent = false;
        while !self.ops.is_empty() {
            if !cancel_sent {
                let keys: Vec<usize> = self.ops.iter().map(|(k, _)| k).collect();
                for key in keys {
                    let e = opcode::AsyncCancel::new(key as u64)
                        .build()
                        .user_data(CANCEL_USER_DATA);
                    // SAFETY: a cancellation points at no buffer.
                    while unsafe { self.ring.submission().push(&e).is_err() } {
                        let _ = self.ring.submit();
                    }
                }
                cancel_sent = true;
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => {}
                Err(e) => {
                    tracing::error!(
                        "io_uring failed while waiting for {} operations to finish: {e}; \
                         leaking their buffers",
                        self.ops.len()
                    );
                    std::mem::forget(std::mem::take(&mut self.ops));
                    return;
                }
            }
            let done: Vec<u64> = self.ring.completion().map(|c| c.user_data()).collect();
            for key in done.into_iter().filter(|&k| k != CANCEL_USER_DATA) {
                // Completed or cancelled: either way the kernel is done with its buffers.
                self.ops.try_remove(key as usize);
            }
        }
    }
}

impl Drop for UringBackend {
    fn drop(&mut self) {
        self.cancel_and_wait();
    }
}

fn is_regular_file(fd: RawFd) -> bool {
    // SAFETY: fstat fills the struct on success; it is only read then.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    unsafe { libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFREG }
}

impl Backend for UringBackend {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn submit(&mut self, op: DeviceOp) {
        let lone_small_write = op.kind == DevKind::Write
            && !op.fua
            && op.len_bytes <= INLINE_WRITE_MAX_BYTES
            && self.ops.is_empty()
            && self.inline_ok[op.pool.0 as usize];
        if lone_small_write && let Some(result) = self.write_inline(&op) {
            self.finished.push(DeviceCompletion {
                id: op.id,
                result,
                data: None,
            });
            return;
        }
        let pool = self.fds[op.pool.0 as usize];
        let direct = pool.direct_for(&op);
        let aligned = direct.map(|_| match (&op.kind, &op.payload) {
            (DevKind::Write, Some(d)) => AlignedBuf::copy_of(d),
            _ => AlignedBuf::zeroed(op.len_bytes as usize),
        });
        let buf = if op.kind == DevKind::Read && aligned.is_none() {
            Vec::with_capacity(op.len_bytes as usize)
        } else {
            Vec::new()
        };
        let zero_step = ZeroStep::first(op.kind);
        let key = self.ops.insert(InFlight {
            op,
            buf,
            fd: direct.unwrap_or(pool.buffered),
            aligned,
            done: 0,
            zero_step,
        });
        if self.backlog.is_empty() {
            self.push(key);
        } else {
            self.backlog.push_back(key);
        }
    }

    fn commit(&mut self) {
        loop {
            // Entering the kernel with nothing to submit would be a wasted syscall.
            if !self.ring.submission().is_empty()
                && let Err(e) = self.ring.submit()
                && e.raw_os_error() != Some(libc::EBUSY)
                && e.raw_os_error() != Some(libc::EINTR)
            {
                tracing::error!("io_uring submit failed: {e}");
            }
            let mut progressed = false;
            while let Some(&key) = self.backlog.front() {
                let e = self.sqe(key);
                // SAFETY: as in `push`.
                if unsafe { self.ring.submission().push(&e).is_err() } {
                    break;
                }
                self.backlog.pop_front();
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
    }

    fn reap(&mut self, out: &mut Vec<DeviceCompletion>) {
        loop {
            let mut cqes = std::mem::take(&mut self.cqes);
            cqes.extend(
                self.ring
                    .completion()
                    .map(|c| (c.user_data() as usize, c.result())),
            );
            if cqes.is_empty() {
                self.cqes = cqes;
                break;
            }
            for &(key, res) in &cqes {
                self.handle_cqe(key, res);
            }
            cqes.clear();
            self.cqes = cqes;
            // Resubmissions (short I/O, fallbacks) go out at once.
            if !self.ring.submission().is_empty() || !self.backlog.is_empty() {
                self.commit();
            }
        }
        out.append(&mut self.finished);
    }

    fn wake_fd(&self) -> RawFd {
        self.efd.as_raw_fd()
    }

    fn clear_wake(&mut self) {
        drain_eventfd(self.efd.as_raw_fd());
    }

    fn in_flight(&self) -> usize {
        self.ops.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiervisor_engine::{IoClass, OpId, PoolId, Tag};

    fn read_op(len_bytes: u64) -> DeviceOp {
        DeviceOp {
            id: OpId(1),
            pool: PoolId(0),
            kind: DevKind::Read,
            offset_bytes: 0,
            len_bytes,
            fua: false,
            payload: None,
            class: IoClass::Foreground,
            volume: None,
            context: tiervisor_engine::IoContext::Engine,
            tag: Tag::Host,
        }
    }

    /// Issue 11: dropping the backend with I/O in flight freed buffers the kernel could
    /// still write into. A read from an empty pipe stays in flight until cancelled; after
    /// the drop, data written to the pipe is still there: no read took it (into freed memory).
    #[test]
    fn drop_cancels_and_waits_for_io_in_flight() {
        let mut fds = [0; 2];
        // SAFETY: pipe(2) fills the two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        let (rd, wr) = (fds[0], fds[1]);
        let Ok(mut b) = UringBackend::new(vec![PoolFds::buffered(rd)]) else {
            eprintln!("SKIP drop_cancels_and_waits_for_io_in_flight: no io_uring here");
            return;
        };
        b.submit(read_op(4096));
        b.commit();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut out = Vec::new();
        b.reap(&mut out);
        assert!(
            out.is_empty() && b.in_flight() == 1,
            "the read must be waiting"
        );
        b.cancel_and_wait();
        assert_eq!(b.in_flight(), 0);
        drop(b);
        let msg = b"still here";
        // SAFETY: plain write(2) and read(2) on our own pipe.
        unsafe {
            assert_eq!(
                libc::write(wr, msg.as_ptr().cast(), msg.len()),
                msg.len() as isize
            );
            let mut got = [0u8; 16];
            let n = libc::read(rd, got.as_mut_ptr().cast(), got.len());
            assert_eq!(
                &got[..n.max(0) as usize],
                msg,
                "a cancelled read consumed the data"
            );
            libc::close(rd);
            libc::close(wr);
        }
    }
}
