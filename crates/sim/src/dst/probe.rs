//! The migration-heavy profile: in two thirds of the migrating seeds that do not log (drawn on its
//! own stream, so the other seeds replay as before; `TIERVISOR_DST_NO_PROBE=1` leaves it out)
//! requests crowd the windows where only a scheme's ordering keeps the data right, which
//! random requests hit too rarely for DST to catch a defect there (docs/TESTING.md):
//!
//! - every volume is thin and pinned (each may move), and half the requests go to a
//!   volume whose job runs, half of those to its first chunk (copied first);
//! - a write acknowledged while its volume migrates is at once written again (an AIO
//!   duplicate of the first may still be in flight: `aio-unordered-dups`) or read back;
//! - when the pivot resumes the volume on the switched map, before the switch is durable,
//!   the volume's recent writes are read back (a mirror duplicate the pivot did not wait
//!   for: `mirror-acks-early`) and a write is made and FLUSHed as soon as it completes
//!   (`pivot-flush-early`);
//! - power is lost right after a FLUSH completes in that window, right after the switch
//!   becomes durable (half the time), and now and then right after any FLUSH: every write
//!   a completed FLUSH covered must survive a power loss at once.
//!
//! Follow-ups run before anything else happens (the runner takes them first at its next
//! step), so they land inside those windows, which last about one device operation.

use std::collections::VecDeque;

use rand::SeedableRng;
use rand_xoshiro::Xoshiro256PlusPlus;
use tiervisor_engine::ReqKind;

use super::device::below;

/// Writes remembered per volume, to read back when its pivot resumes it.
const RECENT: usize = 4;

/// What to do next, before any other event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Follow {
    Req {
        vol: u32,
        kind: ReqKind,
        first: u64,
        n: u64,
    },
    Crash,
}

/// Where a volume's job is, as its phase events said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Job {
    /// Copying, draining, final copy or cancelling: the job routes the volume's writes.
    Running,
    /// The pivot resumed the volume on the switched map; the switch is not yet durable.
    Committing,
}

pub(super) struct Probe {
    rng: Xoshiro256PlusPlus,
    /// Power losses may be drawn (fault level 1 and up).
    crashes_on: bool,
    queue: VecDeque<Follow>,
    /// Each volume's running job, if any.
    jobs: Vec<Option<Job>>,
    /// Each volume's last completed writes: (first sector, sectors).
    recent: Vec<VecDeque<(u64, u64)>>,
    /// The pool each volume was last seen on (a job's end or a job with nothing to move),
    /// so the next job goes to the other one: the engine forgets finished jobs at a
    /// power loss.
    lives: Vec<Option<u16>>,
    /// Power losses it asked for.
    pub crashes: u64,
}

impl Probe {
    /// The seeds that run the profile: two thirds of those that migrate and do not log
    /// (`eligible`; the log seeds stay as they were, as in `create.rs`).
    pub fn draw(seed: u64, eligible: bool, crashes_on: bool) -> Option<Probe> {
        if !eligible || std::env::var_os("TIERVISOR_DST_NO_PROBE").is_some() {
            return None;
        }
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x9b0e_u64.rotate_left(28));
        (below(&mut rng, 3) != 0).then(|| Probe {
            rng,
            crashes_on,
            queue: VecDeque::new(),
            jobs: Vec::new(),
            recent: Vec::new(),
            lives: Vec::new(),
            crashes: 0,
        })
    }

    /// The next follow-up, if any.
    pub fn next(&mut self) -> Option<Follow> {
        let f = self.queue.pop_front();
        if f == Some(Follow::Crash) {
            self.crashes += 1;
        }
        f
    }

    /// Power was lost: the requests it would follow are gone, and so are the jobs until
    /// mount resumes them (which says so with a phase event).
    pub fn crashed(&mut self) {
        self.queue.clear();
        self.jobs.iter_mut().for_each(|j| *j = None);
    }

    /// The volume for a random request: half the time one whose job runs.
    pub fn focus(&mut self, rng_pick: u64) -> Option<u32> {
        let running: Vec<u32> = (0..self.jobs.len() as u32)
            .filter(|&v| self.jobs[v as usize].is_some())
            .collect();
        if running.is_empty() || below(&mut self.rng, 2) == 0 {
            return None;
        }
        Some(running[(rng_pick % running.len() as u64) as usize])
    }

    /// Where a request of `n` sectors to a volume whose job runs goes: half the time in
    /// its first chunk, which the copy passes first, so writes there are mirrored (or
    /// duplicated) for the rest of the job; else at `first`, as drawn.
    pub fn place(&mut self, first: u64, n: u64, sectors: u64, chunk_sectors: u64) -> u64 {
        if below(&mut self.rng, 2) == 0 {
            return first;
        }
        below(&mut self.rng, chunk_sectors.saturating_sub(n) + 1).min(sectors - n)
    }

    fn slot(&mut self, vol: u32) {
        let n = vol as usize + 1;
        if self.jobs.len() < n {
            self.jobs.resize(n, None);
            self.recent.resize(n, VecDeque::new());
            self.lives.resize(n, None);
        }
    }

    /// Volume `vol` was dropped at a mount: the ones after it move down an index.
    pub fn remove_volume(&mut self, vol: usize) {
        if vol < self.jobs.len() {
            self.jobs.remove(vol);
            self.recent.remove(vol);
            self.lives.remove(vol);
        }
    }

    /// The pool volume `vol` was last seen on, if known.
    pub fn lives_on(&self, vol: u32) -> Option<u16> {
        self.lives.get(vol as usize).copied().flatten()
    }

    /// Volume `vol` is on `pool` (a job ended there, or found nothing to move to it).
    pub fn now_on(&mut self, vol: u32, pool: u16) {
        self.slot(vol);
        self.lives[vol as usize] = Some(pool);
    }

    /// A phase event of volume `vol`'s job (`EngineEvent::MigrationPhase`). `live`: not
    /// during recovery, so follow-ups may be queued.
    pub fn phase(&mut self, vol: u32, phase: &str, live: bool) {
        self.slot(vol);
        let was = self.jobs[vol as usize];
        self.jobs[vol as usize] = match phase {
            "committing" => Some(Job::Committing),
            "done" | "cancelled" | "failed" => None,
            _ => Some(Job::Running),
        };
        if !live {
            return;
        }
        if phase == "committing" && was != Some(Job::Committing) {
            // Read back what was written last (served by the switched map now), and
            // write where the VM wrote last, to FLUSH once that completes.
            let recent: Vec<(u64, u64)> = self.recent[vol as usize].iter().copied().collect();
            for &(first, n) in &recent {
                self.queue.push_back(Follow::Req {
                    vol,
                    kind: ReqKind::Read,
                    first,
                    n,
                });
            }
            if let Some(&(first, n)) = recent.last() {
                self.queue.push_back(Follow::Req {
                    vol,
                    kind: ReqKind::Write,
                    first,
                    n,
                });
            }
        }
        if phase == "done" && was == Some(Job::Committing) && below(&mut self.rng, 2) == 0 {
            self.crash();
        }
    }

    fn crash(&mut self) {
        if self.crashes_on && !self.queue.contains(&Follow::Crash) {
            self.queue.push_front(Follow::Crash);
        }
    }

    /// A write (not a trim or zeroing) of `[first, first + n)` completed successfully.
    pub fn write_done(&mut self, vol: u32, first: u64, n: u64) {
        self.slot(vol);
        let r = &mut self.recent[vol as usize];
        if r.len() == RECENT {
            r.pop_front();
        }
        r.push_back((first, n));
        let kind = match self.jobs[vol as usize] {
            None => return,
            // The pivot's window: FLUSH what was just written to the switched map.
            Some(Job::Committing) => ReqKind::Flush,
            Some(Job::Running) => match below(&mut self.rng, 4) {
                0 => ReqKind::Write,
                1 => ReqKind::Read,
                _ => return,
            },
        };
        let (first, n) = if kind == ReqKind::Flush {
            (0, 0)
        } else {
            (first, n)
        };
        self.queue.push_back(Follow::Req {
            vol,
            kind,
            first,
            n,
        });
    }

    /// A FLUSH of `vol` completed successfully: lose power at once in the pivot's window,
    /// and now and then elsewhere.
    pub fn flush_done(&mut self, vol: u32) {
        self.slot(vol);
        let window = self.jobs[vol as usize] == Some(Job::Committing);
        if window || below(&mut self.rng, 32) == 0 {
            self.crash();
        }
    }
}
