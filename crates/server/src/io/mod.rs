//! Carrying out the engine's device operations on pool files or block devices.
//!
//! Two backends: io_uring (one ring, completions signalled on an eventfd the event loop
//! polls) and a small thread pool doing positional reads and writes (for kernels or
//! sandboxes without io_uring). Both report completions through `reap`.

pub mod direct;
mod offset;
mod threads;
mod uring;
mod zeroing;

use std::os::fd::RawFd;

use tiervisor_engine::{DeviceCompletion, DeviceOp, Errno};

pub use direct::PoolFds;
pub use offset::Offset;
pub use threads::ThreadBackend;
pub use uring::UringBackend;

pub trait Backend {
    fn name(&self) -> &'static str;
    /// Queue an operation (it may not reach the kernel until `commit`).
    fn submit(&mut self, op: DeviceOp);
    /// Hand queued operations to the kernel or the workers.
    fn commit(&mut self);
    /// Move finished operations to `out`.
    fn reap(&mut self, out: &mut Vec<DeviceCompletion>);
    /// Becomes readable when completions may be waiting.
    fn wake_fd(&self) -> RawFd;
    /// Clear the readiness of `wake_fd`.
    fn clear_wake(&mut self);
    fn in_flight(&self) -> usize;
}

/// Which backend to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    Uring,
    Threads,
}

impl IoKind {
    pub fn parse(s: &str) -> Option<IoKind> {
        match s {
            "uring" | "io_uring" | "io-uring" => Some(IoKind::Uring),
            "threads" => Some(IoKind::Threads),
            _ => None,
        }
    }
}

/// Build a backend over the pools' file descriptors; io_uring falls back to threads.
pub fn open(kind: IoKind, fds: Vec<PoolFds>) -> std::io::Result<Box<dyn Backend>> {
    if kind == IoKind::Uring {
        match UringBackend::new(fds.clone()) {
            Ok(b) => return Ok(Box::new(b)),
            Err(e) => tracing::warn!("io_uring unavailable ({e}); using the thread pool"),
        }
    }
    Ok(Box::new(ThreadBackend::new(fds, 4)?))
}

/// Whether an error from `fallocate(PUNCH_HOLE)` means the filesystem or device cannot
/// punch holes at all (rather than that this one failed, e.g. for space).
pub(crate) fn punch_unsupported(code: i32) -> bool {
    matches!(
        code,
        libc::EOPNOTSUPP | libc::EINVAL | libc::ENODEV | libc::ENOSYS | libc::ENOTTY
    )
}

/// Say, once per pool (the refusal repeats on every trim and the fallback works), that
/// the filesystem under pool index `pool` refuses to punch holes and what is done instead.
pub(crate) fn log_punch_refused(pool: u16, code: i32, instead: &str) {
    static SAID: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    let first = SAID.lock().map(|mut s| s.insert(pool)).unwrap_or(false);
    if first {
        let e = std::io::Error::from_raw_os_error(code);
        tracing::warn!(
            pool_index = pool,
            "the filesystem under pool #{pool} (in configuration order) refuses to punch \
             holes ({e}); {instead} (said once per pool)"
        );
    }
}

/// What a refused punch does instead: trims still read back zeros.
pub(crate) const PUNCH_FALLBACK: &str =
    "trimmed parts of chunks are written with zeros instead, which keeps their space allocated";
/// What a refused discard does instead.
pub(crate) const DISCARD_FALLBACK: &str =
    "freed chunks keep their space in the file until they are written again";

/// Map an OS error to what the engine reports.
pub(crate) fn errno_of(code: i32) -> Errno {
    match code {
        libc::ENOSPC | libc::EDQUOT | libc::EFBIG => Errno::NoSpc,
        libc::EINVAL => Errno::Inval,
        libc::EPERM | libc::EROFS | libc::EACCES => Errno::Perm,
        _ => Errno::Io,
    }
}

pub(crate) fn new_eventfd() -> std::io::Result<std::os::fd::OwnedFd> {
    // SAFETY: eventfd has no memory-safety preconditions; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
}

pub(crate) fn drain_eventfd(fd: RawFd) {
    let mut v = 0u64;
    // SAFETY: reading 8 bytes into a u64 on the stack; errors (EAGAIN) are ignored.
    unsafe {
        libc::read(fd, (&mut v as *mut u64).cast(), 8);
    }
}

pub(crate) fn poke_eventfd(fd: RawFd) {
    let v = 1u64;
    // SAFETY: writing 8 bytes from a u64 on the stack.
    unsafe {
        libc::write(fd, (&v as *const u64).cast(), 8);
    }
}
