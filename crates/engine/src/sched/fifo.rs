//! First in, first out: the device sees requests in arrival order.

use std::collections::VecDeque;

use super::api::{Dispatch, QueuedOp, Registration, Scheduler};

pub(super) const REGISTRATION: Registration = Registration {
    name: "fifo",
    aliases: &["noop", "none"],
    about: "arrival order (the kernel's none/noop)",
    build: |_| Ok(Box::new(Fifo::default())),
};

#[derive(Default)]
pub struct Fifo {
    queue: VecDeque<QueuedOp>,
}

impl Scheduler for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn add(&mut self, _now_ns: u64, op: QueuedOp) {
        self.queue.push_back(op);
    }
    fn dispatch(&mut self, _now_ns: u64) -> Dispatch {
        self.queue.pop_front().map_or(Dispatch::Idle, Dispatch::Op)
    }
    fn completed(&mut self, _now_ns: u64, _op: &QueuedOp) {}
    fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::IoClass;

    #[test]
    fn serves_in_arrival_order() {
        let mut f = Fifo::default();
        for key in [3, 1, 2] {
            f.add(
                0,
                QueuedOp {
                    key,
                    offset_bytes: key as u64 * 100,
                    len_bytes: 1,
                    is_write: false,
                    class: IoClass::Foreground,
                    volume: 0,
                    context: crate::types::IoContext::Volume,
                    arrival_ns: 0,
                },
            );
        }
        let order: Vec<usize> = std::iter::from_fn(|| match f.dispatch(0) {
            Dispatch::Op(o) => Some(o.key),
            _ => None,
        })
        .collect();
        assert_eq!(order, vec![3, 1, 2]);
        assert!(f.is_empty());
    }
}
