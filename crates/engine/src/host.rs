//! What an event-driven driver keeps about the engine's timers.
//!
//! The engine holds its timers; [`Engine::next_deadline`] names the earliest. A driver
//! with a real clock (the server) waits for it directly. A driver with an event queue (the
//! simulator, DST) must put a wake-up event in its queue, and should not put one per
//! call: [`Wakeups`] remembers the wake-ups queued and not yet fired, and after every
//! engine call says whether a new one is needed. A wake-up that turns out early (its
//! timer was cancelled or moved) only costs a tick that finds nothing due.

use std::collections::BTreeSet;

use crate::engine::Engine;

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
