//! mq-deadline: per direction, requests sorted by sector and in a FIFO with a deadline;
//! batches of `fifo_batch` in sector order, reads preferred but writes served after
//! `writes_starved` read batches, and a batch starts at the FIFO head once it expired.
//!
//! Defaults are the kernel's (block/mq-deadline.c: `read_expire = HZ / 2`,
//! `write_expire = 5 * HZ`, `writes_starved = 2`, `fifo_batch = 16`).
//!
//! Merges: a request adjacent to a queued one of the same volume and direction (its end
//! at the other's start: a front merge; or its start at the other's end: a back merge)
//! joins it, up to `max_merge_bytes`. The engine completes each `QueuedOp` on its own, so
//! a merged request is modelled as its members dispatched back to back in sector order,
//! counting once against `fifo_batch` and keeping the oldest member's deadline.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound::{Excluded, Unbounded};

use super::api::{Dispatch, QueuedOp, Registration, Scheduler};
use super::params::Params;

pub(super) const REGISTRATION: Registration = Registration {
    name: "deadline",
    aliases: &["mq-deadline"],
    about: "mq-deadline: sector-sorted batches with read/write FIFO deadlines",
    build: |p| Ok(Box::new(Deadline::new(DeadlineParams::from_params(p)?))),
};

#[derive(Clone, Copy, Debug)]
pub struct DeadlineParams {
    pub read_expire_ns: u64,
    pub write_expire_ns: u64,
    pub fifo_batch: u32,
    pub writes_starved: u32,
    pub front_merges: bool,
    pub max_merge_bytes: u64,
}

impl Default for DeadlineParams {
    fn default() -> Self {
        DeadlineParams {
            read_expire_ns: 500_000_000,
            write_expire_ns: 5_000_000_000,
            fifo_batch: 16,
            writes_starved: 2,
            front_merges: true,
            // BLK_DEF_MAX_SECTORS (2560 sectors): the kernel's default request size cap.
            max_merge_bytes: 1280 << 10,
        }
    }
}

impl DeadlineParams {
    fn from_params(p: &mut Params) -> Result<Self, String> {
        let d = DeadlineParams::default();
        Ok(DeadlineParams {
            read_expire_ns: p.ms_as_ns("read_expire_ms", 500.0, 0.0..=3_600_000.0)?,
            write_expire_ns: p.ms_as_ns("write_expire_ms", 5000.0, 0.0..=3_600_000.0)?,
            fifo_batch: p.u64_in("fifo_batch", d.fifo_batch as u64, 1..=1024)? as u32,
            writes_starved: p.u64_in("writes_starved", d.writes_starved as u64, 0..=1024)? as u32,
            front_merges: p.bool("front_merges", true)?,
            max_merge_bytes: p.u64_in("max_merge_kib", d.max_merge_bytes >> 10, 4..=65536)? << 10,
        })
    }
}

/// One request as the device would see it: one or more adjacent ops.
struct Group {
    start: u64,
    end: u64,
    volume: u32,
    deadline_ns: u64,
    ops: VecDeque<QueuedOp>,
}

/// One direction's queues.
#[derive(Default)]
struct DirQueue {
    groups: BTreeMap<u64, Group>,
    /// (start, id): sector order.
    sort: BTreeMap<(u64, u64), ()>,
    /// (end, id): for back merges.
    ends: BTreeMap<(u64, u64), ()>,
    /// (deadline, id): FIFO order (deadlines grow with arrival).
    fifo: BTreeMap<(u64, u64), ()>,
}

impl DirQueue {
    fn remove(&mut self, id: u64) -> Group {
        let g = self.groups.remove(&id).expect("group exists");
        self.sort.remove(&(g.start, id));
        self.ends.remove(&(g.end, id));
        self.fifo.remove(&(g.deadline_ns, id));
        g
    }

    /// Try to merge `op` into an adjacent group; true if it did.
    fn merge(&mut self, op: QueuedOp, max_bytes: u64) -> bool {
        let (start, end) = (op.offset_bytes, op.offset_bytes + op.len_bytes);
        let fits = |g: &Group| g.volume == op.volume && g.end - g.start + op.len_bytes <= max_bytes;
        // Front merge: the new op ends where a group starts.
        let front = self
            .sort
            .range((end, 0)..=(end, u64::MAX))
            .map(|(&(_, id), _)| id)
            .find(|id| fits(&self.groups[id]));
        if let Some(id) = front {
            let g = self.groups.get_mut(&id).expect("indexed");
            self.sort.remove(&(g.start, id));
            g.start = start;
            g.ops.push_front(op);
            self.sort.insert((start, id), ());
            return true;
        }
        let back = self
            .ends
            .range((start, 0)..=(start, u64::MAX))
            .map(|(&(_, id), _)| id)
            .find(|id| fits(&self.groups[id]));
        if let Some(id) = back {
            let g = self.groups.get_mut(&id).expect("indexed");
            self.ends.remove(&(g.end, id));
            g.end = end;
            g.ops.push_back(op);
            self.ends.insert((end, id), ());
            return true;
        }
        false
    }
}

pub struct Deadline {
    p: DeadlineParams,
    dirs: [DirQueue; 2],
    next_id: u64,
    /// Where the current batch continues: direction and the (start, id) last dispatched.
    cursor: Option<(usize, (u64, u64))>,
    batching: u32,
    starved: u32,
    /// Members of the dispatched group still to hand out.
    draining: VecDeque<QueuedOp>,
    len: usize,
}

const READ: usize = 0;
const WRITE: usize = 1;

impl Deadline {
    pub fn new(p: DeadlineParams) -> Self {
        Deadline {
            p,
            dirs: Default::default(),
            next_id: 0,
            cursor: None,
            batching: 0,
            starved: 0,
            draining: VecDeque::new(),
            len: 0,
        }
    }

    fn expired(&self, dir: usize, now: u64) -> bool {
        self.dirs[dir]
            .fifo
            .keys()
            .next()
            .is_some_and(|&(d, _)| d <= now)
    }

    /// The group after the cursor in its direction, if the batch may continue there.
    fn next_in_batch(&self) -> Option<(usize, u64)> {
        let (dir, key) = self.cursor?;
        let (&(_, id), _) = self.dirs[dir]
            .sort
            .range((Excluded(key), Unbounded))
            .next()?;
        Some((dir, id))
    }

    /// The group to dispatch, as the kernel's `__dd_dispatch_request` chooses it.
    fn choose(&mut self, now: u64) -> Option<(usize, u64)> {
        let next = self.next_in_batch();
        if let Some(n) = next
            && self.batching < self.p.fifo_batch
        {
            return Some(n);
        }
        let reads = !self.dirs[READ].fifo.is_empty();
        let writes = !self.dirs[WRITE].fifo.is_empty();
        let dir = if reads {
            let starve_out = writes && self.starved >= self.p.writes_starved;
            if writes {
                self.starved += 1;
            }
            if starve_out { WRITE } else { READ }
        } else if writes {
            WRITE
        } else {
            return None;
        };
        if dir == WRITE {
            self.starved = 0;
        }
        self.batching = 0;
        let continue_at = next.filter(|&(d, _)| d == dir);
        let id = match continue_at {
            Some((_, id)) if !self.expired(dir, now) => id,
            _ => self.dirs[dir].fifo.keys().next().expect("non-empty").1,
        };
        Some((dir, id))
    }
}

impl Scheduler for Deadline {
    fn name(&self) -> &'static str {
        "deadline"
    }

    fn add(&mut self, now_ns: u64, op: QueuedOp) {
        self.len += 1;
        let dir = if op.is_write { WRITE } else { READ };
        let q = &mut self.dirs[dir];
        if self.p.front_merges && q.merge(op, self.p.max_merge_bytes) {
            return;
        }
        let id = self.next_id;
        self.next_id += 1;
        let expire = if op.is_write {
            self.p.write_expire_ns
        } else {
            self.p.read_expire_ns
        };
        let g = Group {
            start: op.offset_bytes,
            end: op.offset_bytes + op.len_bytes,
            volume: op.volume,
            deadline_ns: now_ns.max(op.arrival_ns) + expire,
            ops: VecDeque::from([op]),
        };
        q.sort.insert((g.start, id), ());
        q.ends.insert((g.end, id), ());
        q.fifo.insert((g.deadline_ns, id), ());
        q.groups.insert(id, g);
    }

    fn dispatch(&mut self, now_ns: u64) -> Dispatch {
        if self.draining.is_empty() {
            let Some((dir, id)) = self.choose(now_ns) else {
                return Dispatch::Idle;
            };
            let g = self.dirs[dir].remove(id);
            self.batching += 1;
            self.cursor = Some((dir, (g.start, id)));
            self.draining = g.ops;
        }
        match self.draining.pop_front() {
            Some(op) => {
                self.len -= 1;
                Dispatch::Op(op)
            }
            None => Dispatch::Idle,
        }
    }

    fn completed(&mut self, _now_ns: u64, _op: &QueuedOp) {}

    fn len(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::super::sorted::testing::{drain, op};
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn writes_starved_counts_read_batches() {
        let mut d = Deadline::new(DeadlineParams::default());
        // Sector-ascending arrival: each batch runs a full fifo_batch in sector order.
        for i in 0..100u64 {
            d.add(0, op(i as usize, 1000 + i * 100, false, 0, 0));
            d.add(0, op(1000 + i as usize, 900_000 + i * 100, true, 0, 0));
        }
        let order = drain(&mut d, 0);
        let first: Vec<bool> = order.iter().take(48).map(|o| o.is_write).collect();
        assert!(
            first[..32].iter().all(|w| !w),
            "two read batches of 16 first"
        );
        assert!(
            first[32..48].iter().all(|w| *w),
            "then one write batch of 16"
        );
        // Sector order inside a batch.
        assert!(
            order[..16]
                .windows(2)
                .all(|w| w[0].offset_bytes < w[1].offset_bytes)
        );
    }

    #[test]
    fn an_expired_read_jumps_the_sweep() {
        let mut d = Deadline::new(DeadlineParams::default());
        for i in 0..16u64 {
            d.add(0, op(i as usize, 1000 + i * 100, false, 0, 0));
        }
        assert_eq!(drain_n(&mut d, 0, 16).len(), 16); // cursor now at sector 2500
        d.add(MS, op(500, 10, false, 0, MS)); // behind the head: deadline 501 ms
        for i in 0..40u64 {
            d.add(MS, op(100 + i as usize, 3000 + i * 100, false, 0, MS));
        }
        // Not yet expired: the next batch continues the sweep from the cursor.
        let b = drain_n(&mut d, 2 * MS, 16);
        assert!(b.iter().all(|o| o.key != 500));
        assert_eq!(b[0].key, 100);
        // Past 500 ms the next batch starts at the FIFO head, ahead of the sweep.
        let c = drain_n(&mut d, 600 * MS, 1);
        assert_eq!(c[0].key, 500);
    }

    #[test]
    fn an_expired_write_is_served_in_its_batch() {
        let p = DeadlineParams {
            writes_starved: 1000,
            ..Default::default()
        };
        let mut d = Deadline::new(p);
        d.add(0, op(1, 50, true, 0, 0));
        d.add(0, op(2, 60, true, 0, 0));
        for i in 0..64u64 {
            d.add(0, op(100 + i as usize, 1000 + i * 100, false, 0, 0));
        }
        // writes_starved is huge, so reads win every choice...
        assert!(drain_n(&mut d, 0, 32).iter().all(|o| !o.is_write));
        // ...until the reads run out; then writes (their deadline does not override
        // read preference in mq-deadline: expiry only picks where a batch starts).
        let rest = drain_n(&mut d, 6_000 * MS, 40);
        assert_eq!(rest.len(), 34);
        assert!(rest[..32].iter().all(|o| !o.is_write));
        assert_eq!((rest[32].key, rest[33].key), (1, 2));
    }

    fn drain_n(s: &mut Deadline, now: u64, n: usize) -> Vec<QueuedOp> {
        (0..n)
            .map_while(|_| match s.dispatch(now) {
                Dispatch::Op(o) => Some(o),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn adjacent_requests_of_one_volume_go_back_to_back() {
        let mut d = Deadline::new(DeadlineParams::default());
        d.add(0, op(1, 800, false, 0, 0)); // sectors 800..808
        d.add(0, op(2, 10, false, 0, 0)); // unrelated, lower
        d.add(0, op(3, 792, false, 0, 0)); // front merge: ends at 800
        d.add(0, op(4, 808, false, 0, 0)); // back merge: starts at 808
        d.add(0, op(5, 816, false, 1, 0)); // adjacent but another volume: no merge
        assert_eq!(d.len(), 5);
        // The merged group is the FIFO head (key 1's deadline): 3, 1, 4 back to back.
        let order: Vec<usize> = drain(&mut d, 0).iter().map(|o| o.key).collect();
        assert_eq!(&order[..3], &[3, 1, 4]);
        assert_eq!(order.len(), 5);
        assert!(d.is_empty());
    }
}
