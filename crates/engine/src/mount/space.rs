//! A format or mount whose metadata writes find no space waits for it.
//!
//! Before, a startup write that failed with ENOSPC was retried at once, three times, and
//! then the whole start failed: a full filesystem under the metadata pool stopped a
//! server from coming up at all, and DST could inject no space faults during recovery.
//! Now such an operation is parked and issued again from the engine's timer (the engine
//! has no clock), first after one commit interval, then at twice the last wait, up to
//! [`MAX_BACKOFF_NS`], for as long as it takes. The start stays in its phase meanwhile,
//! so nothing is served; the first failure of a spell says so in a warning, and the
//! first success after it says that the start goes on.
//!
//! Zeroing a new thick volume's home region is left out: that region is the volume's
//! whole size, and a filesystem without room for it is a configuration to change, which
//! the start reports at once (`thick_zeroing_failed`).

use super::state::{StartupOp, TAG_INDEX, TAG_THICK};
use crate::engine::Engine;
use crate::types::{EngineEvent, Errno, Outputs};

/// The longest wait between two attempts of a start waiting for space.
pub(crate) const MAX_BACKOFF_NS: u64 = 1_000_000_000;

/// Whether a startup operation that failed with `result` waits for space.
pub(super) fn waits_for_space(op: &StartupOp, result: Result<(), Errno>) -> bool {
    result == Err(Errno::NoSpc) && op.tag & !TAG_INDEX != TAG_THICK
}

impl Engine {
    /// Park `op`, which failed for space, until the next retry; warn once per spell.
    pub(super) fn startup_park_nospace(&mut self, now: u64, op: StartupOp, out: &mut Outputs) {
        let interval = self.cfg.commit_interval_ns.max(1);
        let pool = self.cfg.pools[op.pool.0 as usize].name.clone();
        let Some(s) = self.startup.as_mut() else {
            return;
        };
        let w = &mut s.space;
        w.failures += 1;
        w.parked.push(op);
        if w.retry_at.is_none() {
            // Capped at a second whatever the commit interval: an operator who frees
            // space expects the start to notice soon, not after an hour-long interval.
            w.backoff_ns = if w.backoff_ns == 0 {
                interval
            } else {
                w.backoff_ns * 2
            }
            .min(MAX_BACKOFF_NS);
            w.retry_at = Some(now + w.backoff_ns);
        }
        if !w.in_spell {
            w.in_spell = true;
            let what = if s.formatting { "format" } else { "mount" };
            out.events.push(EngineEvent::Warning {
                message: format!(
                    "{what}: no space left on pool {pool} for a metadata write; serving \
                     nothing and retrying (first in {} ms, then less often) until there \
                     is room",
                    w.backoff_ns.div_ceil(1_000_000)
                ),
            });
        }
    }

    /// A startup operation succeeded: if a spell was on, it is over.
    pub(super) fn startup_space_ok(&mut self, out: &mut Outputs) {
        let Some(s) = self.startup.as_mut() else {
            return;
        };
        let w = &mut s.space;
        if w.in_spell && w.parked.is_empty() && w.retry_at.is_none() {
            w.in_spell = false;
            w.backoff_ns = 0;
            let what = if s.formatting { "format" } else { "mount" };
            out.events.push(EngineEvent::Warning {
                message: format!(
                    "{what}: there is room again after {} write(s) failed for space; going on",
                    w.failures
                ),
            });
        }
    }

    /// The retry time came: issue every parked operation again.
    pub(crate) fn startup_space_tick(&mut self, now: u64, out: &mut Outputs) {
        let Some(s) = self.startup.as_mut() else {
            return;
        };
        if s.space.retry_at.is_none_or(|t| t > now) {
            return;
        }
        s.space.retry_at = None;
        for op in std::mem::take(&mut s.space.parked) {
            // Still counted in `outstanding`: the phase waits for it.
            self.startup_requeue(now, op, out);
        }
    }
}
