//! Debug timing, off unless `TIERVISOR_LOG` enables `tiervisor_server::slow` at debug
//! level: pool flushes over 5 ms and client requests over 20 ms, logged through `tracing`
//! (wall-clock timestamps) so that a client's stall can be set beside what the pools and
//! the migration's pivot were doing at the time (bench/migrate_serve.py reads them).

use std::collections::HashMap;

use tiervisor_engine::{DevKind, DeviceCompletion, DeviceOp, OpId};

const SLOW_FLUSH_NS: u64 = 5_000_000;
const SLOW_REQUEST_NS: u64 = 20_000_000;

pub(crate) struct SlowLog {
    on: bool,
    /// Flushes in flight: pool and submission time (ns since the server started).
    flushes: HashMap<OpId, (u16, u64)>,
}

impl SlowLog {
    pub(crate) fn new() -> SlowLog {
        SlowLog {
            on: tracing::enabled!(target: "tiervisor_server::slow", tracing::Level::DEBUG),
            flushes: HashMap::new(),
        }
    }

    pub(crate) fn submitted(&mut self, now_ns: u64, op: &DeviceOp) {
        if self.on && op.kind == DevKind::Flush {
            self.flushes.insert(op.id, (op.pool.0, now_ns));
        }
    }

    pub(crate) fn completed(&mut self, now_ns: u64, c: &DeviceCompletion) {
        if !self.on {
            return;
        }
        if let Some((pool, at)) = self.flushes.remove(&c.id) {
            let took = now_ns.saturating_sub(at);
            if took >= SLOW_FLUSH_NS {
                tracing::debug!(target: "tiervisor_server::slow",
                    "flush of pool {pool} took {:.1} ms", took as f64 / 1e6);
            }
        }
    }

    pub(crate) fn answered(&self, now_ns: u64, received_ns: u64, cmd: u16, offset: u64) {
        let took = now_ns.saturating_sub(received_ns);
        if self.on && took >= SLOW_REQUEST_NS {
            tracing::debug!(target: "tiervisor_server::slow",
                "request (command {cmd}) at offset {offset} took {:.1} ms", took as f64 / 1e6);
        }
    }
}
