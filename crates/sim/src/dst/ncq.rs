//! NCQ seeds: in half of all seeds (drawn on a stream of their own, so the others replay
//! as before) the HDD pool's drive queues commands. Its operations are then not finished
//! after a random latency: a `CommandQueue` in front of the hitachi-7k1000c timing model
//! (the pool's capacity, short-stroked) serves them one at a time in the
//! order its firmware rule picks (shortest positioning time first, aging, FLUSH as a
//! barrier), and the engine gets more of them in flight (a deeper pool queue) so the
//! drive has something to reorder. The data device behind it is unchanged: completed
//! writes sit in its volatile cache until a FLUSH, and a power loss drops, keeps or tears
//! every unflushed or unfinished write, queued ones included.
//!
//! An independent check (not the queue's own bookkeeping) holds the queue to the device
//! contract at every completion: nothing issued after a FLUSH completes before it, and a
//! FLUSH completes only once everything issued before it has. The injected defect
//! `ncq-jumps-flush` lets commands overtake a FLUSH; this check catches it.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use tiervisor_engine::{DevKind, DeviceOp};
use tiervisor_model::queue::{CommandQueue, QueueStats};
use tiervisor_model::{Model, preset};

use super::device::below;

/// The HDD pool's index in DST's engine configuration.
pub const HDD_POOL: usize = 1;

pub struct NcqDrive {
    queue: CommandQueue,
    model: Model,
    capacity_bytes: u64,
    bug: bool,
    /// Operations issued and not completed, by issue number: whether each is a FLUSH.
    outstanding: BTreeMap<u64, bool>,
    /// Issue number of each operation in flight, by operation id.
    issue_of: BTreeMap<u64, u64>,
    next_issue: u64,
    /// Counters of the queues of earlier lives (before power losses).
    served_before: QueueStats,
}

impl NcqDrive {
    /// Whether seed `seed` queues at the HDD pool (half of all seeds; none with
    /// `TIERVISOR_DST_NO_NCQ=1`), and the engine's queue depth for it there. Migrating
    /// seeds queue too since the engine fixes they found (seed 95: a pivoted job indexed
    /// the copies it had handed over, under `tier-moves-while-migrating`, a panic; seed
    /// 100: a tier move committed after a failed final commit,
    /// `Journal::abandon`). Out-of-space seeds queue too since the run stopped waiting for
    /// appends that retry for space while a pool is full at the end (seed 1259 never
    /// settled before: runner.rs `settle`).
    pub fn draw(seed: u64) -> Option<u32> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x9c0_u64.rotate_left(28));
        let on = std::env::var_os("TIERVISOR_DST_NO_NCQ").is_none() && below(&mut rng, 2) == 0;
        on.then(|| 4 + below(&mut rng, 29) as u32)
    }

    pub fn new(capacity_bytes: u64, bug: bool) -> Result<NcqDrive, String> {
        let p = preset("hitachi-7k1000c").ok_or("the hitachi-7k1000c preset is missing")?;
        let model = Model::from_preset(&p, Some(capacity_bytes));
        let mut queue = CommandQueue::for_model(&model).ok_or("hitachi-7k1000c has no NCQ")?;
        if bug {
            queue.inject_barrier_bug();
        }
        Ok(NcqDrive {
            queue,
            model,
            capacity_bytes,
            bug,
            outstanding: BTreeMap::new(),
            issue_of: BTreeMap::new(),
            next_issue: 0,
            served_before: QueueStats::default(),
        })
    }

    /// Operation `op` reaches the drive at `now_ns`; if the drive was idle it starts
    /// one: (its id, its completion time).
    pub fn issue(&mut self, now_ns: u64, op: &DeviceOp) -> Option<(u64, u64)> {
        let id = op.id.0;
        self.outstanding
            .insert(self.next_issue, op.kind == DevKind::Flush);
        self.issue_of.insert(id, self.next_issue);
        self.next_issue += 1;
        self.queue.push(now_ns, id, crate::driver::dev_request(op));
        self.start(now_ns)
    }

    fn start(&mut self, now_ns: u64) -> Option<(u64, u64)> {
        self.queue
            .start_next(now_ns, &mut self.model)
            .map(|(c, done)| (c.id, done))
    }

    /// Operation `id` completes at `now_ns`: check the barrier, then start the next one.
    pub fn complete(&mut self, now_ns: u64, id: u64) -> Result<Option<(u64, u64)>, String> {
        let Some(n) = self.issue_of.remove(&id) else {
            return Err(format!(
                "NCQ: operation {id} completed but was never issued"
            ));
        };
        let flush = self.outstanding.remove(&n).unwrap_or(false);
        if flush {
            if let Some((&before, _)) = self.outstanding.range(..n).next() {
                return Err(format!(
                    "NCQ: a FLUSH (issue {n}) completed before an operation issued ahead of it (issue {before})"
                ));
            }
        } else if let Some((&f, _)) = self.outstanding.range(..n).find(|(_, f)| **f) {
            return Err(format!(
                "NCQ: operation {id} (issue {n}) completed before a FLUSH issued ahead of it (issue {f})"
            ));
        }
        self.queue.finished();
        Ok(self.start(now_ns))
    }

    /// Power loss: the drive forgets its queue (the data device decides what landed).
    pub fn power_loss(&mut self) -> Result<(), String> {
        let s = self.stats();
        *self = NcqDrive::new(self.capacity_bytes, self.bug)?;
        self.served_before = s;
        Ok(())
    }

    /// Counters over every life of the drive.
    pub fn stats(&self) -> QueueStats {
        let (a, b) = (self.served_before, self.queue.stats());
        QueueStats {
            served: a.served + b.served,
            reordered: a.reordered + b.reordered,
            aged: a.aged + b.aged,
            max_wait_ns: a.max_wait_ns.max(b.max_wait_ns),
        }
    }
}
