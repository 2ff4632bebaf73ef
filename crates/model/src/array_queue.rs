//! Command queueing in the drives of an array (RAID 0, `raid.rs`).
//!
//! An array controller (or md) splits a host command into one command per member drive
//! it touches and sends each to its drive. Drives that queue (SATA NCQ, SCSI TCQ) then
//! reorder what they hold exactly as a single drive does, each on its own: so an
//! [`ArrayQueue`] is one [`CommandQueue`] per member, plus the host commands still open
//! (parts not yet done). A host command completes when its last part does. A FLUSH goes
//! to every member and is a barrier in each member's queue; a member serves what arrived
//! after it once its own part of the FLUSH is done, as md lets later writes go on to a
//! member whose flush has finished. What the host is promised is kept: a FLUSH completes
//! only once every part that arrived before it, on every member, is done.
//!
//! Every member is idle-or-busy on its own; the host asks each member for its next
//! command when that member is free ([`ArrayQueue::start_next`]), as the simulator does
//! at the member's previous completion.

use std::collections::BTreeMap;

use crate::queue::{CommandQueue, QueueStats};
use crate::raid::Raid0;
use crate::{DevRequest, Model};

/// A host command with parts still queued or in service at some member.
#[derive(Clone, Copy, Debug)]
struct Open {
    parts_left: usize,
    arrived_ns: u64,
    req: DevRequest,
}

/// The command queues of an array's member drives. See the module documentation.
#[derive(Clone, Debug)]
pub struct ArrayQueue {
    members: Vec<CommandQueue>,
    open: BTreeMap<u64, Open>,
}

impl ArrayQueue {
    /// The queues an array has: Some when its member drives queue (their preset's
    /// `queue_depth` above 1; the members of an array are identical), None otherwise.
    pub fn for_model(m: &Model) -> Option<ArrayQueue> {
        let Model::Raid0(a) = m else {
            return None;
        };
        let members = a
            .members()
            .iter()
            .map(CommandQueue::for_model)
            .collect::<Option<Vec<_>>>()?;
        Some(ArrayQueue {
            members,
            open: BTreeMap::new(),
        })
    }

    pub fn members(&self) -> usize {
        self.members.len()
    }

    /// Deliberate defect (tests must catch it): every member's FLUSH is no barrier.
    pub fn inject_barrier_bug(&mut self) {
        for q in &mut self.members {
            q.inject_barrier_bug();
        }
    }

    /// Host command `id` arrives at `now_ns`: its parts join their members' queues.
    /// Start each member that is idle afterwards with [`ArrayQueue::start_next`].
    pub fn push(&mut self, now_ns: u64, id: u64, req: DevRequest, array: &Raid0) {
        let parts = array.parts(&req);
        self.open.insert(
            id,
            Open {
                parts_left: parts.len(),
                arrived_ns: now_ns,
                req,
            },
        );
        for (m, sub) in parts {
            self.members[m].push(now_ns, id, sub);
        }
    }

    /// If member `m` is idle and holds a command, start the one it picks: (the host
    /// command's id, the part's completion time).
    pub fn start_next(&mut self, now_ns: u64, m: usize, array: &mut Raid0) -> Option<(u64, u64)> {
        self.members[m]
            .start_next(now_ns, array.member_mut(m))
            .map(|(c, done)| (c.id, done))
    }

    /// Member `m`'s part of host command `id` has completed. Returns the host command's
    /// arrival time and request once its last part has.
    pub fn finished(&mut self, m: usize, id: u64) -> Option<(u64, DevRequest)> {
        self.members[m].finished();
        let open = self.open.get_mut(&id)?;
        open.parts_left = open.parts_left.saturating_sub(1);
        if open.parts_left > 0 {
            return None;
        }
        let done = self.open.remove(&id)?;
        Some((done.arrived_ns, done.req))
    }

    /// Counters summed over the members (the longest wait of any).
    pub fn stats(&self) -> QueueStats {
        self.members
            .iter()
            .map(CommandQueue::stats)
            .fold(QueueStats::default(), |a, b| QueueStats {
                served: a.served + b.served,
                reordered: a.reordered + b.reordered,
                aged: a.aged + b.aged,
                max_wait_ns: a.max_wait_ns.max(b.max_wait_ns),
            })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::units::{KIB, MIB};
    use crate::{DeviceModel, preset};

    fn array(drives: usize, name: &str) -> Raid0 {
        let p = preset(name).unwrap_or_else(|| panic!("{name}"));
        let members = (0..drives)
            .map(|_| Model::from_preset(&p, Some(100 * 1024 * MIB)))
            .collect();
        Raid0::new(members, 64 * KIB).unwrap_or_else(|e| panic!("{e}"))
    }

    /// What [`run`] saw: reads per second, host commands in completion order, and each
    /// member's commands in the order it started them.
    struct Run {
        iops: f64,
        completed: Vec<u64>,
        started: Vec<Vec<u64>>,
    }

    /// Keep `qd` random 4 KiB reads outstanding on an array of `drives` hitachi-7k1000c
    /// for `n` completions, every `flush_every`-th command a FLUSH (0: none), each member
    /// served by its queue of `depth` commands (1 serves in arrival order).
    fn run(drives: usize, depth: u32, qd: u64, n: u64, flush_every: u64, bug: bool) -> Run {
        let mut a = array(drives, "hitachi-7k1000c");
        let mut q = ArrayQueue {
            members: (0..drives)
                .map(|_| CommandQueue::new(depth, crate::queue::AGE_LIMIT_NS))
                .collect(),
            open: BTreeMap::new(),
        };
        if bug {
            q.inject_barrier_bug();
        }
        let cap = a.members()[0].capacity_bytes() * drives as u64;
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next_req = |id: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if flush_every > 0 && id % flush_every == flush_every - 1 {
                DevRequest::flush()
            } else {
                DevRequest::read(x % (cap / (4 * KIB)) * 4 * KIB, 4 * KIB)
            }
        };
        // Part completions to come: (time, member, host id), earliest first.
        let mut events = BTreeSet::new();
        let mut r = Run {
            iops: 0.0,
            completed: Vec::new(),
            started: vec![Vec::new(); drives],
        };
        let start_idle =
            |q: &mut ArrayQueue, a: &mut Raid0, ev: &mut BTreeSet<_>, r: &mut Run, t| {
                for m in 0..drives {
                    if let Some((h, done)) = q.start_next(t, m, a) {
                        ev.insert((done, m, h));
                        r.started[m].push(h);
                    }
                }
            };
        let (mut t, mut id) = (0u64, 0u64);
        for _ in 0..qd {
            q.push(t, id, next_req(id), &a);
            id += 1;
        }
        start_idle(&mut q, &mut a, &mut events, &mut r, t);
        while (r.completed.len() as u64) < n {
            let (done, m, h) = events.pop_first().expect("something in service");
            t = done;
            if q.finished(m, h).is_some() {
                r.completed.push(h);
                q.push(t, id, next_req(id), &a);
                id += 1;
            }
            start_idle(&mut q, &mut a, &mut events, &mut r, t);
        }
        r.iops = n as f64 / (t as f64 / 1e9);
        r
    }

    #[test]
    fn arrays_queue_where_their_drives_do() {
        let hitachi = Model::Raid0(Box::new(array(2, "hitachi-7k1000c")));
        assert_eq!(
            ArrayQueue::for_model(&hitachi).map(|q| q.members()),
            Some(2)
        );
        let cheetah = Model::Raid0(Box::new(array(2, "cheetah-15k4")));
        assert!(ArrayQueue::for_model(&cheetah).is_none());
        let p = preset("hitachi-7k1000c").unwrap_or_else(|| panic!("preset"));
        assert!(ArrayQueue::for_model(&Model::from_preset(&p, None)).is_none());
    }

    /// Fails without the members' reordering: with queues of depth 1 every member serves
    /// its parts in arrival order.
    #[test]
    fn member_drives_reorder_random_reads() {
        let ncq = run(4, 32, 64, 8_000, 0, false).iops;
        let fifo = run(4, 1, 64, 8_000, 0, false).iops;
        assert!(
            ncq > 1.5 * fifo,
            "4 drives, 64 outstanding: NCQ {ncq} vs arrival order {fifo} IOPS"
        );
    }

    /// Each member serves its part of a FLUSH after every part that arrived before it and
    /// before every part that arrived after it, so the host's FLUSH completes after every
    /// older command; with the barrier ignored, later parts overtake it.
    #[test]
    fn a_flush_is_a_barrier_on_every_member() {
        let is_flush = |id: u64| id % 16 == 15;
        let barrier_held = |r: &Run| {
            r.started.iter().all(|order| {
                order
                    .iter()
                    .enumerate()
                    .filter(|(_, id)| is_flush(**id))
                    .all(|(i, &f)| {
                        order[..i].iter().all(|&b| b < f) && order[i + 1..].iter().all(|&a| a > f)
                    })
            })
        };
        let r = run(3, 32, 48, 3_000, 16, false);
        assert!(barrier_held(&r), "a member served across its FLUSH");
        for (i, &f) in r
            .completed
            .iter()
            .enumerate()
            .filter(|(_, id)| is_flush(**id))
        {
            let done = &r.completed[..i];
            assert!(
                (0..f).all(|b| done.contains(&b)),
                "FLUSH {f} before an older command"
            );
        }
        assert!(!barrier_held(&run(3, 32, 48, 3_000, 16, true)));
    }

    #[test]
    fn same_arrivals_same_order() {
        let (a, b) = (
            run(3, 32, 48, 1_000, 16, false),
            run(3, 32, 48, 1_000, 16, false),
        );
        assert_eq!(
            (a.iops.to_bits(), a.completed),
            (b.iops.to_bits(), b.completed)
        );
    }
}
