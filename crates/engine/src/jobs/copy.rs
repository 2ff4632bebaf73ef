//! The copy primitive: read `len` bytes at a source location, write them at a destination,
//! as background I/O, then tell the job that asked for it.
//!
//! A copy knows nothing of chunk states or maps; whoever starts one keeps writes away from
//! the range (or tracks them) for as long as it needs the copy to be exact.

pub(crate) mod state;

use bytes::Bytes;

use crate::engine::{Engine, OpSpec, Owner};
use crate::types::{DevKind, Errno, IoClass, Outputs, PoolId};
pub(crate) use state::{Copy, CopyFor};

impl Engine {
    /// Start copying `len_bytes` from `src` to `dst` (pool, device offset).
    pub(crate) fn start_copy(
        &mut self,
        now: u64,
        for_: CopyFor,
        src: (PoolId, u64),
        dst: (PoolId, u64),
        len_bytes: u64,
        out: &mut Outputs,
    ) {
        let vol = for_.vol();
        let slot = self.copies.insert(Copy {
            for_,
            dst,
            len_bytes,
            writing: false,
        });
        let spec = OpSpec::new(
            Owner::Copy { slot },
            src.0,
            DevKind::Read,
            IoClass::Migration,
        );
        self.queue_op(now, spec.at(src.1, len_bytes).for_volume(vol), out);
    }

    /// A read or write of copy `slot` finished.
    pub(crate) fn copy_io_done(
        &mut self,
        now: u64,
        slot: usize,
        result: Result<(), Errno>,
        data: Option<Bytes>,
        out: &mut Outputs,
    ) {
        let Some(c) = self.copies.get_mut(slot) else {
            return;
        };
        if result.is_ok() && !c.writing {
            c.writing = true;
            let (dst, len, for_) = (c.dst, c.len_bytes, c.for_);
            let vol = for_.vol();
            let spec = OpSpec::new(
                Owner::Copy { slot },
                dst.0,
                DevKind::Write,
                IoClass::Migration,
            );
            self.queue_op(now, spec.at(dst.1, len).payload(data).for_volume(vol), out);
            return;
        }
        let c = self.copies.remove(slot);
        match c.for_ {
            CopyFor::TierMove { vol, chunk } => self.move_done(now, vol, chunk, result, out),
            CopyFor::Migration { vol, chunk } => {
                self.migration_copy_done(now, vol, chunk, &c, result, out)
            }
            CopyFor::CacheFill { vol, chunk } => {
                self.cache_copy_done(now, vol, chunk, true, result, out)
            }
            CopyFor::CacheClean { vol, chunk } => {
                self.cache_copy_done(now, vol, chunk, false, result, out)
            }
            CopyFor::LogDrain { vol, chunk } => {
                self.log_drain_part_done(now, vol, chunk, result, out)
            }
        }
    }
}
