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
        // Wrapping: an operation on a chunk borrowed from a shard whose slice starts
        // lower comes with an offset relative to this base that is "negative"
        // (`loans::ShardLoans::translate`); the sum is the donor's offset.
        op.offset_bytes = op.offset_bytes.wrapping_add(
            self.base_bytes
                .get(op.pool.0 as usize)
                .copied()
                .unwrap_or(0),
        );
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

#[cfg(test)]
mod tests {
    use super::*;
    use tiervisor_engine::{DevKind, IoClass, OpId, PoolId, Tag};

    /// Records what reaches the device.
    struct Recorder(std::rc::Rc<std::cell::RefCell<Vec<(u16, u64)>>>);

    impl Backend for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }
        fn submit(&mut self, op: DeviceOp) {
            self.0.borrow_mut().push((op.pool.0, op.offset_bytes));
        }
        fn commit(&mut self) {}
        fn reap(&mut self, _: &mut Vec<DeviceCompletion>) {}
        fn wake_fd(&self) -> RawFd {
            -1
        }
        fn clear_wake(&mut self) {}
        fn in_flight(&self) -> usize {
            0
        }
    }

    #[test]
    fn every_operation_lands_at_its_pools_slice_base() {
        let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut b = Offset::new(Box::new(Recorder(seen.clone())), vec![1 << 30, 4 << 20]);
        for (pool, kind, off) in [
            (0, DevKind::Read, 0),
            (1, DevKind::Write, 8192),
            (1, DevKind::Discard, 1 << 20),
            (0, DevKind::Flush, 0),
        ] {
            b.submit(DeviceOp {
                id: OpId(1),
                pool: PoolId(pool),
                kind,
                offset_bytes: off,
                len_bytes: 4096,
                fua: false,
                payload: None,
                class: IoClass::Foreground,
                volume: None,
                context: tiervisor_engine::IoContext::Engine,
                tag: Tag::Host,
            });
        }
        assert_eq!(
            *seen.borrow(),
            [
                (0, 1 << 30),
                (1, (4 << 20) + 8192),
                (1, (4 << 20) + (1 << 20)),
                (0, 1 << 30)
            ]
        );
    }
}
