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

use super::{Backend, drain_eventfd, errno_of, new_eventfd};

const FALLOC_FL_KEEP_SIZE: i32 = 0x01;
const FALLOC_FL_PUNCH_HOLE: i32 = 0x02;
const FALLOC_FL_ZERO_RANGE: i32 = 0x10;

struct InFlight {
    op: DeviceOp,
    buf: Vec<u8>,
    done: usize,
    /// For WriteZeroes: 0 = zero range, 1 = punch hole, 2 = write zeros.
    zero_step: u8,
}

/// Largest write done inline when the ring is idle.
const INLINE_WRITE_MAX_BYTES: u64 = 64 << 10;

pub struct UringBackend {
    ring: IoUring,
    /// Per pool: a regular file (page cache), where small inline writes are cheap.
    inline_ok: Vec<bool>,
    efd: OwnedFd,
    fds: Vec<RawFd>,
    ops: Slab<InFlight>,
    /// Operations waiting for room in the submission queue.
    backlog: VecDeque<usize>,
    finished: Vec<DeviceCompletion>,
    /// Reused buffer for completion queue entries.
    cqes: Vec<(usize, i32)>,
}

impl UringBackend {
    pub fn new(fds: Vec<RawFd>) -> std::io::Result<UringBackend> {
        let ring = IoUring::new(1024)?;
        let efd = new_eventfd()?;
        // Only completions that happen asynchronously need to wake the event loop; inline ones
        // are reaped right after submission.
        ring.submitter().register_eventfd_async(efd.as_raw_fd())?;
        let inline_ok = fds.iter().map(|&fd| is_regular_file(fd)).collect();
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
        let fd = self.fds[op.pool.0 as usize];
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
        let fd = types::Fd(self.fds[f.op.pool.0 as usize]);
        let off = f.op.offset_bytes + f.done as u64;
        let rest = (f.op.len_bytes as usize - f.done) as u32;
        let e = match f.op.kind {
            DevKind::Read => {
                opcode::Read::new(fd, f.buf.as_ptr().wrapping_add(f.done) as *mut u8, rest)
                    .offset(off)
                    .build()
            }
            DevKind::Write => {
                let p =
                    f.op.payload
                        .as_ref()
                        .map_or(std::ptr::null(), |b| b.as_ptr());
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
            DevKind::WriteZeroes if f.zero_step == 2 => {
                opcode::Write::new(fd, f.buf.as_ptr().wrapping_add(f.done), rest)
                    .offset(off)
                    .build()
            }
            DevKind::WriteZeroes => {
                let mode = if f.zero_step == 0 {
                    FALLOC_FL_ZERO_RANGE
                } else {
                    FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
                };
                opcode::Fallocate::new(fd, f.op.len_bytes)
                    .offset(f.op.offset_bytes)
                    .mode(mode)
                    .build()
            }
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
        let data = if f.op.kind == DevKind::Read && result.is_ok() {
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
                        // SAFETY: writing zeros into the buffer's spare capacity.
                        unsafe {
                            std::ptr::write_bytes(f.buf.as_mut_ptr().add(start), 0, len - start)
                        };
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
            DevKind::WriteZeroes => {
                if f.zero_step == 2 {
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
                if res >= 0 {
                    return self.complete(key, Ok(()));
                }
                if -res == libc::EOPNOTSUPP || -res == libc::EINVAL || -res == libc::ENODEV {
                    // Fall back: punch a hole, then write zeros.
                    f.zero_step += 1;
                    if f.zero_step == 2 {
                        f.buf = vec![0u8; len];
                        f.done = 0;
                    }
                    return self.push(key);
                }
                self.complete(key, Err(errno_of(-res)))
            }
            DevKind::Flush => {
                self.complete(key, if res < 0 { Err(errno_of(-res)) } else { Ok(()) })
            }
            // Advisory: a failed discard changes nothing.
            DevKind::Discard => self.complete(key, Ok(())),
        }
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
        let buf = if op.kind == DevKind::Read {
            Vec::with_capacity(op.len_bytes as usize)
        } else {
            Vec::new()
        };
        let key = self.ops.insert(InFlight {
            op,
            buf,
            done: 0,
            zero_step: 0,
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
