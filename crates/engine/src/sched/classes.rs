//! Foreground and background classes in front of a pool's scheduler.
//!
//! Background work (tier migration, unhurried cleaning) must not delay VM I/O, yet must
//! not starve either. [`Classes`] holds it in its own queue: it reaches the device when
//! the scheduler has nothing to dispatch, or once it has waited `max_wait_ns`; aged
//! background work then takes turns with the scheduler's, one dispatch each, so neither
//! class starves the other (a backlog that stays aged used to go first every time: DST
//! seed 8476, a foreground read held 36 s behind an LR job's copies). A QoS
//! scheduler that shares the device between classes itself (mClock, BFQ) says so with
//! [`Scheduler::schedules_background`] and then receives background work directly.

use std::collections::VecDeque;

use super::api::{Dispatch, QueuedOp, Scheduler, VolumeQos};

/// Background operations never wait longer than this for an idle device.
pub const BACKGROUND_MAX_WAIT_NS: u64 = 100_000_000;

/// Which class an operation is queued in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lane {
    Foreground,
    /// Dispatched when the device would otherwise idle, or after the maximum wait.
    Background,
}

/// A pool's scheduler plus its background queue.
pub struct Classes {
    foreground: Box<dyn Scheduler>,
    background: VecDeque<QueuedOp>,
    max_wait_ns: u64,
    /// The last dispatch was aged background work: the scheduler's work goes next.
    aged_went_last: bool,
}

impl Classes {
    pub fn new(foreground: Box<dyn Scheduler>, max_wait_ns: u64) -> Classes {
        Classes {
            foreground,
            background: VecDeque::new(),
            max_wait_ns,
            aged_went_last: false,
        }
    }

    /// Whether an operation of `lane` is held here rather than given to the scheduler.
    fn held(&self, lane: Lane) -> bool {
        lane == Lane::Background && !self.foreground.schedules_background()
    }

    pub fn add(&mut self, now_ns: u64, op: QueuedOp, lane: Lane) {
        if self.held(lane) {
            self.background.push_back(op);
        } else {
            self.foreground.add(now_ns, op);
        }
    }

    /// The next operation for the device: background work that has waited too long
    /// (unless the last dispatch was such work and the scheduler has some of its own),
    /// else the scheduler's choice, else background work if the scheduler is idle.
    pub fn dispatch(&mut self, now_ns: u64) -> Dispatch {
        let aged = self
            .background
            .front()
            .is_some_and(|b| now_ns >= b.arrival_ns + self.max_wait_ns);
        if aged && !self.aged_went_last {
            return self.dispatch_background(true);
        }
        match self.foreground.dispatch(now_ns) {
            Dispatch::Op(o) => {
                self.aged_went_last = false;
                Dispatch::Op(o)
            }
            Dispatch::Idle => self.dispatch_background(aged),
            // The scheduler idles on purpose (anticipation, a limit): aged background
            // work does not wait for that, as before turns were taken.
            Dispatch::WaitUntil(_) if aged => self.dispatch_background(true),
            d => d,
        }
    }

    fn dispatch_background(&mut self, aged: bool) -> Dispatch {
        self.aged_went_last = aged;
        self.background
            .pop_front()
            .map_or(Dispatch::Idle, Dispatch::Op)
    }

    /// An operation dispatched from `lane` completed.
    pub fn completed(&mut self, now_ns: u64, op: &QueuedOp, lane: Lane) {
        if !self.held(lane) {
            self.foreground.completed(now_ns, op);
        }
    }

    pub fn set_volume_qos(&mut self, volume: u32, qos: VolumeQos) {
        self.foreground.set_volume_qos(volume, qos);
    }

    pub fn inject_bug(&mut self, bug: crate::inject::InjectedBug) {
        self.foreground.inject_bug(bug);
    }

    /// Operations queued in either class.
    pub fn len(&self) -> usize {
        self.foreground.len() + self.background.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Operations queued in the scheduler (not counting held background work).
    pub fn scheduler_len(&self) -> usize {
        self.foreground.len()
    }

    pub fn scheduler_name(&self) -> &'static str {
        self.foreground.name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::Fifo;
    use crate::types::IoClass;

    fn op(key: usize, arrival_ns: u64) -> QueuedOp {
        QueuedOp {
            key,
            offset_bytes: 0,
            len_bytes: 4096,
            is_write: false,
            class: IoClass::Foreground,
            volume: 0,
            context: crate::types::IoContext::Volume,
            arrival_ns,
        }
    }

    fn next(c: &mut Classes, now: u64) -> Option<usize> {
        match c.dispatch(now) {
            Dispatch::Op(o) => Some(o.key),
            _ => None,
        }
    }

    #[test]
    fn background_waits_for_idle_device_or_max_wait() {
        let mut c = Classes::new(Box::new(Fifo::default()), 100);
        c.add(0, op(1, 0), Lane::Background);
        c.add(0, op(2, 0), Lane::Foreground);
        c.add(0, op(3, 0), Lane::Foreground);
        assert_eq!(c.len(), 3);
        // Foreground first while background has waited less than the maximum.
        assert_eq!(next(&mut c, 50), Some(2));
        // At the maximum wait, background goes ahead of queued foreground work.
        assert_eq!(next(&mut c, 100), Some(1));
        assert_eq!(next(&mut c, 100), Some(3));
        c.add(200, op(4, 200), Lane::Background);
        // An idle scheduler lets background work through at once.
        assert_eq!(next(&mut c, 200), Some(4));
        assert_eq!(next(&mut c, 200), None);
        assert!(c.is_empty());
    }

    /// DST seed 8476: a slow FIFO pool with a steady backlog of background work older
    /// than the maximum wait (an LR job's copies) dispatched nothing but that backlog
    /// for 36 s while a foreground read waited at the head of the scheduler. Aged
    /// background work now takes turns with the scheduler's own work instead.
    #[test]
    fn aged_background_work_takes_turns_with_foreground_work() {
        let mut c = Classes::new(Box::new(Fifo::default()), 100);
        for k in 0..50 {
            c.add(0, op(100 + k, 0), Lane::Background);
        }
        c.add(10, op(1, 10), Lane::Foreground);
        c.add(10, op(2, 10), Lane::Foreground);
        let order: Vec<usize> = (0..6).filter_map(|_| next(&mut c, 1_000)).collect();
        assert_eq!(order, [100, 1, 101, 2, 102, 103]);
        // Background work keeps arriving and ageing: foreground work still gets every
        // other dispatch.
        c.add(2_000, op(3, 2_000), Lane::Foreground);
        c.add(2_000, op(4, 2_000), Lane::Foreground);
        assert_eq!(next(&mut c, 2_000), Some(3));
        assert_eq!(next(&mut c, 2_000), Some(104));
        assert_eq!(next(&mut c, 2_000), Some(4));
    }

    /// A scheduler that takes background work itself.
    #[derive(Default)]
    struct ClassAware(Fifo);
    impl Scheduler for ClassAware {
        fn name(&self) -> &'static str {
            "class-aware"
        }
        fn add(&mut self, now_ns: u64, op: QueuedOp) {
            self.0.add(now_ns, op)
        }
        fn dispatch(&mut self, now_ns: u64) -> Dispatch {
            self.0.dispatch(now_ns)
        }
        fn completed(&mut self, _now_ns: u64, _op: &QueuedOp) {}
        fn len(&self) -> usize {
            self.0.len()
        }
        fn schedules_background(&self) -> bool {
            true
        }
    }

    #[test]
    fn a_class_aware_scheduler_receives_background_work() {
        let mut c = Classes::new(Box::new(ClassAware::default()), 100);
        c.add(0, op(1, 0), Lane::Background);
        c.add(0, op(2, 0), Lane::Foreground);
        // In arrival order: the scheduler, not the wrapper, decides.
        assert_eq!(next(&mut c, 0), Some(1));
        assert_eq!(next(&mut c, 0), Some(2));
    }
}
