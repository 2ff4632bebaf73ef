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
//! A third of the NCQ seeds (drawn on a stream of their own) make the HDD pool an array:
//! RAID 0 over 2 to 4 such drives with a 64 KiB to 512 KiB stripe, each member queueing
//! and reordering its parts on its own (`tiervisor_model::array_queue`), a host command
//! done when its last part is, a FLUSH a barrier on every member (issue 16).
//!
//! An independent check (not the queue's own bookkeeping) holds the queue to the device
//! contract at every completion: a FLUSH completes only once everything issued before it
//! has, and (a single drive) nothing issued after a FLUSH completes before it; an array
//! lets a later command through on a member whose part of the FLUSH is done. The injected defect
//! `ncq-jumps-flush` lets commands overtake a FLUSH; this check catches it.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use tiervisor_engine::{DevKind, DeviceOp};
use tiervisor_model::array_queue::ArrayQueue;
use tiervisor_model::queue::{CommandQueue, QueueStats};
use tiervisor_model::raid::Raid0;
use tiervisor_model::{Model, preset};

use super::device::below;

/// The HDD pool's index in DST's engine configuration.
pub const HDD_POOL: usize = 1;

/// A drive's queue, or an array's member queues.
enum Queueing {
    Drive(CommandQueue, Model),
    Array(ArrayQueue, Raid0),
}

/// An array's shape: member drives and stripe size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayShape {
    pub drives: u32,
    pub stripe_bytes: u64,
}

/// A command the drive (or a member of the array) started: the event to queue. `Whole`
/// completes operation `id`; `Part` completes member `member`'s part of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Started {
    Whole {
        id: u64,
        done_ns: u64,
    },
    Part {
        id: u64,
        member: usize,
        done_ns: u64,
    },
}

impl Started {
    /// The event payload of a part: the operation id and the member (arrays have at most
    /// 64 members; operation ids stay far below 2^58 in a DST run).
    pub fn part_payload(id: u64, member: usize) -> u64 {
        id << 6 | member as u64
    }
}

pub struct NcqDrive {
    queue: Queueing,
    capacity_bytes: u64,
    array: Option<ArrayShape>,
    bug: bool,
    /// Operations issued and not completed, by issue number: whether each is a FLUSH.
    outstanding: BTreeMap<u64, bool>,
    /// Issue number of each operation in flight, by operation id.
    issue_of: BTreeMap<u64, u64>,
    /// Arrays: per member, its parts issued and not completed, by issue number: whether
    /// each is a FLUSH's part. Each member is held to a single drive's contract.
    member_outstanding: Vec<BTreeMap<u64, bool>>,
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

    /// Whether an NCQ seed's HDD pool is an array, and its shape: a third of them, on a
    /// stream of its own (so `draw` and every other draw stay as they were);
    /// `TIERVISOR_DST_NO_ARRAY=1` leaves them single drives.
    pub fn draw_array(seed: u64) -> Option<ArrayShape> {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0xa44a_u64.rotate_left(36));
        let on = std::env::var_os("TIERVISOR_DST_NO_ARRAY").is_none() && below(&mut rng, 3) == 0;
        on.then(|| ArrayShape {
            drives: 2 + below(&mut rng, 3) as u32,
            stripe_bytes: 64 << (10 + below(&mut rng, 4)),
        })
    }

    pub fn new(
        capacity_bytes: u64,
        array: Option<ArrayShape>,
        bug: bool,
    ) -> Result<NcqDrive, String> {
        let p = preset("hitachi-7k1000c").ok_or("the hitachi-7k1000c preset is missing")?;
        let queue = match array {
            None => {
                let model = Model::from_preset(&p, Some(capacity_bytes));
                let mut q = CommandQueue::for_model(&model).ok_or("hitachi-7k1000c has no NCQ")?;
                if bug {
                    q.inject_barrier_bug();
                }
                Queueing::Drive(q, model)
            }
            Some(a) => {
                // Each member holds its share of the pool, rounded up to a stripe.
                let per = capacity_bytes
                    .div_ceil(u64::from(a.drives))
                    .next_multiple_of(a.stripe_bytes);
                let members = (0..a.drives)
                    .map(|_| Model::from_preset(&p, Some(per)))
                    .collect();
                let raid = Raid0::new(members, a.stripe_bytes)?;
                let mut q = ArrayQueue::for_model(&Model::Raid0(Box::new(raid.clone())))
                    .ok_or("hitachi-7k1000c has no NCQ")?;
                if bug {
                    q.inject_barrier_bug();
                }
                Queueing::Array(q, raid)
            }
        };
        Ok(NcqDrive {
            queue,
            capacity_bytes,
            array,
            bug,
            outstanding: BTreeMap::new(),
            issue_of: BTreeMap::new(),
            member_outstanding: vec![BTreeMap::new(); array.map_or(0, |a| a.drives as usize)],
            next_issue: 0,
            served_before: QueueStats::default(),
        })
    }

    /// Operation `op` reaches the drive (or the array) at `now_ns`: what it starts.
    pub fn issue(&mut self, now_ns: u64, op: &DeviceOp) -> Vec<Started> {
        let id = op.id.0;
        self.outstanding
            .insert(self.next_issue, op.kind == DevKind::Flush);
        self.issue_of.insert(id, self.next_issue);
        self.next_issue += 1;
        let req = crate::driver::dev_request(op);
        match &mut self.queue {
            Queueing::Drive(q, _) => q.push(now_ns, id, req),
            Queueing::Array(q, raid) => {
                for (m, _) in raid.parts(&req) {
                    self.member_outstanding[m]
                        .insert(self.next_issue - 1, op.kind == DevKind::Flush);
                }
                q.push(now_ns, id, req, raid)
            }
        }
        self.start_all(now_ns)
    }

    /// Start every idle drive (or member) that holds a command.
    fn start_all(&mut self, now_ns: u64) -> Vec<Started> {
        match &mut self.queue {
            Queueing::Drive(q, model) => (q.start_next(now_ns, model))
                .map(|(c, done_ns)| Started::Whole { id: c.id, done_ns })
                .into_iter()
                .collect(),
            Queueing::Array(q, raid) => (0..q.members())
                .filter_map(|m| {
                    let (id, done_ns) = q.start_next(now_ns, m, raid)?;
                    Some(Started::Part {
                        id,
                        member: m,
                        done_ns,
                    })
                })
                .collect(),
        }
    }

    /// Member `member`'s part of operation `id` completes at `now_ns`: check the
    /// member's barrier, then whether the operation is now done (its last part), and what
    /// the member starts next.
    pub fn part_done(
        &mut self,
        now_ns: u64,
        id: u64,
        member: usize,
    ) -> Result<(bool, Vec<Started>), String> {
        let n = *self.issue_of.get(&id).ok_or_else(|| {
            format!("array: a part of operation {id} completed but it was never issued")
        })?;
        let mine = self.member_outstanding.get_mut(member).ok_or_else(|| {
            format!("array: operation {id} completed at member {member}, which it lacks")
        })?;
        let flush = mine
            .remove(&n)
            .ok_or_else(|| format!("array: operation {id} completed twice at member {member}"))?;
        barrier(mine, n, id, flush, &format!("array member {member}"))?;
        let Queueing::Array(q, _) = &mut self.queue else {
            return Ok((false, Vec::new()));
        };
        let whole = q.finished(member, id).is_some();
        Ok((whole, self.start_all(now_ns)))
    }

    /// Operation `id` completes at `now_ns` (for an array: its last part did): check the
    /// barrier, then start what a single drive serves next.
    pub fn complete(&mut self, now_ns: u64, id: u64) -> Result<Vec<Started>, String> {
        let what = if self.array.is_some() { "array" } else { "NCQ" };
        let Some(n) = self.issue_of.remove(&id) else {
            return Err(format!(
                "{what}: operation {id} completed but was never issued"
            ));
        };
        let flush = self.outstanding.remove(&n).unwrap_or(false);
        if self.array.is_none() {
            barrier(&self.outstanding, n, id, flush, what)?;
        } else if let Some((&before, _)) = self.outstanding.range(..n).next().filter(|_| flush) {
            // An array promises the FLUSH's side only: a member whose part of it is done
            // goes on with later commands while another member still flushes (md's
            // behaviour), so a later write may complete first, and the engine must not
            // count on it; each member keeps a drive's contract (`part_done`).
            return Err(format!(
                "{what}: a FLUSH (issue {n}) completed before an operation issued ahead of it (issue {before})"
            ));
        }
        match &mut self.queue {
            Queueing::Drive(q, _) => {
                q.finished();
                Ok(self.start_all(now_ns))
            }
            // The members started their next parts as each part finished.
            Queueing::Array(..) => Ok(Vec::new()),
        }
    }

    /// The array's shape, in array seeds.
    pub fn array(&self) -> Option<ArrayShape> {
        self.array
    }

    /// Power loss: the drive forgets its queue (the data device decides what landed).
    pub fn power_loss(&mut self) -> Result<(), String> {
        let s = self.stats();
        *self = NcqDrive::new(self.capacity_bytes, self.array, self.bug)?;
        self.served_before = s;
        Ok(())
    }

    /// Counters over every life of the drive.
    pub fn stats(&self) -> QueueStats {
        let now = match &self.queue {
            Queueing::Drive(q, _) => q.stats(),
            Queueing::Array(q, _) => q.stats(),
        };
        let (a, b) = (self.served_before, now);
        QueueStats {
            served: a.served + b.served,
            reordered: a.reordered + b.reordered,
            aged: a.aged + b.aged,
            max_wait_ns: a.max_wait_ns.max(b.max_wait_ns),
        }
    }
}

/// A drive's FLUSH contract at the completion of command `id` (issue number `n`), against
/// the commands still `outstanding` there: a FLUSH completes only once everything issued
/// before it has, and nothing issued after a FLUSH completes before it.
fn barrier(
    outstanding: &BTreeMap<u64, bool>,
    n: u64,
    id: u64,
    flush: bool,
    what: &str,
) -> Result<(), String> {
    if flush {
        if let Some((&before, _)) = outstanding.range(..n).next() {
            return Err(format!(
                "{what}: a FLUSH (issue {n}) completed before an operation issued ahead of it (issue {before})"
            ));
        }
    } else if let Some((&f, _)) = outstanding.range(..n).find(|(_, f)| **f) {
        return Err(format!(
            "{what}: operation {id} (issue {n}) completed before a FLUSH issued ahead of it (issue {f})"
        ));
    }
    Ok(())
}
