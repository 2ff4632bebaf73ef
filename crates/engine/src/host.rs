//! What every driver of the engine shares: where its outputs go ([`Driver`], handed over
//! by [`deliver`] in one order), and, for drivers with an event queue, the wake-ups
//! queued for the engine's timers ([`Wakeups`]).
//!
//! The four drivers (the simulator, DST, the server's shards and the engine's test rig)
//! differ only in what a device is (a timing model, a checker's reordering queue,
//! io_uring, a byte vector) and in how a device's completion comes back (a later event,
//! a reaped completion, at once), so each keeps its own loop around `deliver`.
//!
//! The engine holds its timers; [`Engine::next_deadline`] names the earliest. A driver
//! with a real clock (the server) waits for it directly. A driver with an event queue (the
//! simulator, DST) must put a wake-up event in its queue, and should not put one per
//! call: [`Wakeups`] remembers the wake-ups queued and not yet fired, and after every
//! engine call says whether a new one is needed. A wake-up that turns out early (its
//! timer was cancelled or moved) only costs a tick that finds nothing due.

use std::collections::BTreeSet;

use crate::engine::Engine;
use crate::types::{DeviceOp, EngineEvent, Outputs, VmCompletion};

/// Where a driver sends the engine's outputs. Each method may stop the delivery (DST
/// stops at the first failed check); what is left undelivered is dropped, as a crash
/// would drop it.
pub trait Driver {
    /// Why a delivery stopped early (`std::convert::Infallible` when it never does).
    type Stop;
    /// Carry out (or queue) an operation on a pool's device.
    fn device_op(&mut self, op: DeviceOp) -> Result<(), Self::Stop>;
    /// Every operation of this batch is handed over, and nothing has yet called the
    /// engine again: an event-queue driver queues its wake-up here (see [`Wakeups`]).
    fn ops_delivered(&mut self) -> Result<(), Self::Stop> {
        Ok(())
    }
    /// A lifecycle event: a volume mounted, a migration's phase, a failure.
    fn event(&mut self, e: EngineEvent) -> Result<(), Self::Stop>;
    /// A VM request's answer.
    fn completed(&mut self, c: VmCompletion) -> Result<(), Self::Stop>;
}

/// Hand `out` to `d`: device operations first (a device may start on them before the
/// engine is called again), then events (a failure is seen before the answers it
/// explains), then VM completions (which may make the driver call the engine again).
/// `out` is empty afterwards, also when `d` stopped the delivery.
pub fn deliver<D: Driver + ?Sized>(out: &mut Outputs, d: &mut D) -> Result<(), D::Stop> {
    let r = deliver_in_order(out, d);
    out.clear();
    r
}

fn deliver_in_order<D: Driver + ?Sized>(out: &mut Outputs, d: &mut D) -> Result<(), D::Stop> {
    for op in out.ops.drain(..) {
        d.device_op(op)?;
    }
    d.ops_delivered()?;
    for e in out.events.drain(..) {
        d.event(e)?;
    }
    for c in out.completions.drain(..) {
        d.completed(c)?;
    }
    Ok(())
}

#[derive(Debug, Default)]
pub struct Wakeups {
    /// Times of wake-up events queued and not yet fired.
    queued_ns: BTreeSet<u64>,
}

impl Wakeups {
    /// Call after every engine call: the time (never before `now_ns`) to queue a wake-up
    /// event at, when none queued fires at or before the engine's deadline.
    pub fn to_queue(&mut self, engine: &Engine, now_ns: u64) -> Option<u64> {
        self.to_queue_at(engine.next_deadline(), now_ns)
    }

    /// The same for a driver of several engines (shards): `deadline` is the earliest of
    /// their `next_deadline`s.
    pub fn to_queue_at(&mut self, deadline: Option<u64>, now_ns: u64) -> Option<u64> {
        let at = deadline?.max(now_ns);
        if self.queued_ns.first().is_some_and(|&q| q <= at) {
            return None;
        }
        self.queued_ns.insert(at);
        Some(at)
    }

    /// A queued wake-up fired: the driver now calls `Engine::tick(at_ns)`.
    pub fn fired(&mut self, at_ns: u64) {
        self.queued_ns.remove(&at_ns);
    }

    /// The driver dropped its queue (a simulated power loss).
    pub fn clear(&mut self) {
        self.queued_ns.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{DevKind, Errno, IoClass, IoContext, OpId, PoolId, ReqKind, Tag, VolumeId};

    /// Records what it is handed, in order; stops at the event named `stop_at`.
    #[derive(Default)]
    struct Log {
        seen: Vec<String>,
        stop_at: Option<&'static str>,
    }

    impl Driver for Log {
        type Stop = String;
        fn device_op(&mut self, op: DeviceOp) -> Result<(), String> {
            self.seen.push(format!("op {}", op.id.0));
            Ok(())
        }
        fn ops_delivered(&mut self) -> Result<(), String> {
            self.seen.push("timers".into());
            Ok(())
        }
        fn event(&mut self, e: EngineEvent) -> Result<(), String> {
            let EngineEvent::Warning { message } = e else {
                return Err("unexpected event".into());
            };
            self.seen.push(format!("event {message}"));
            match self.stop_at {
                Some(m) if m == message => Err(message),
                _ => Ok(()),
            }
        }
        fn completed(&mut self, c: VmCompletion) -> Result<(), String> {
            self.seen.push(format!("done {}", c.id));
            Ok(())
        }
    }

    fn outputs() -> Outputs {
        let op = |id| DeviceOp {
            id: OpId(id),
            pool: PoolId(0),
            kind: DevKind::Flush,
            offset_bytes: 0,
            len_bytes: 0,
            fua: false,
            payload: None,
            class: IoClass::Foreground,
            volume: None,
            context: IoContext::default(),
            tag: Tag::Host,
        };
        let event = |m: &str| EngineEvent::Warning { message: m.into() };
        let done = |id| VmCompletion {
            id,
            volume: VolumeId(0),
            kind: ReqKind::Flush,
            result: Err(Errno::Io),
            data: None,
        };
        Outputs {
            completions: vec![done(7), done(8)],
            ops: vec![op(1), op(2)],
            events: vec![event("a"), event("b")],
        }
    }

    #[test]
    fn outputs_are_handed_over_ops_then_timers_then_events_then_answers() {
        let (mut out, mut d) = (outputs(), Log::default());
        assert_eq!(deliver(&mut out, &mut d), Ok(()));
        let want = [
            "op 1", "op 2", "timers", "event a", "event b", "done 7", "done 8",
        ];
        assert_eq!(d.seen, want);
        assert!(out.is_empty());
    }

    #[test]
    fn a_stopped_delivery_hands_over_nothing_more_and_leaves_nothing_behind() {
        let (mut out, mut d) = (outputs(), Log::default());
        d.stop_at = Some("a");
        assert_eq!(deliver(&mut out, &mut d), Err("a".to_string()));
        assert_eq!(d.seen, ["op 1", "op 2", "timers", "event a"]);
        assert!(out.is_empty(), "{out:?}");
    }
}
