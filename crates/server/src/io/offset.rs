//! A shard's view of the pools (issue 18): every device operation of shard k lands at its
//! offset plus the base of shard k's slice of that pool, as the simulator's router does.
//! Completions carry the operation's id only, so nothing comes back translated.

use std::os::fd::RawFd;

use tiervisor_engine::{DeviceCompletion, DeviceOp};

use super::Backend;

pub struct Offset {
    inner: Box<dyn Backend>,
    /// Per pool: where this shard's slice starts in the pool file.
    base_bytes: Vec<u64>,
}

impl Offset {
    pub fn new(inner: Box<dyn Backend>, base_bytes: Vec<u64>) -> Offset {
        Offset { inner, base_bytes }
    }
}

impl Backend for Offset {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn submit(&mut self, mut op: DeviceOp) {
        op.offset_bytes += self
            .base_bytes
            .get(op.pool.0 as usize)
            .copied()
            .unwrap_or(0);
        self.inner.submit(op);
    }
    fn commit(&mut self) {
        self.inner.commit();
    }
    fn reap(&mut self, out: &mut Vec<DeviceCompletion>) {
        self.inner.reap(out);
    }
    fn wake_fd(&self) -> RawFd {
        self.inner.wake_fd()
    }
    fn clear_wake(&mut self) {
        self.inner.clear_wake();
    }
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
}
