//! Volumes with log data (seed 002's log-structured writes, issue 13): the job first
//! writes the volume's live log data back into its home chunks, then migrates the plain
//! volume like a pinned one; after the pivot the volume logs again, on its new pool.
//!
//! Why drain rather than move the log along: a logged volume's data is its chunk map plus
//! `Overlay::Log` ranges into log segments on the pool (a logged write to an unmapped
//! chunk leaves the chunk unmapped), and every scheme copies device ranges of a chunk's
//! mapped location. None reads through `Log` ranges, so a copy would carry stale home
//! data under them, and the pivot would switch the map while the `Log` entries still
//! point into segments on the source pool. Draining first makes the volume plain, which
//! every scheme migrates as it is.
//!
//! 1. *No new log data* for the job's life: `log_target` gives no pool to a migrating
//!    volume (its writes go home), the cleaner leaves its segments alone (it would copy
//!    live pieces forward into a new segment), and the drain seals the volume's buffered
//!    appends and waits for every append in flight and any cleaning of its segments.
//!    Then its open segments are closed (a closed one is freed once nothing is live).
//! 2. *Write-back*, one chunk at a time at the job's rate: the chunk's writes wait
//!    (`ChunkState::LogDrain`), each live `Log` range of it is copied into the home chunk
//!    (an unmapped chunk is allocated on the home pool and the rest of it zero-filled, as
//!    a first write does), and when every write has landed the range's overlay entry is
//!    cleared with an `OverlayClear` record, only where it still points at the copied
//!    log location (the cleaner's live check; no write can replace it meanwhile, as the
//!    chunk's writes wait, but the check costs nothing and keeps a stale copy from ever
//!    hiding newer data). The clear is a record like a home write's: the commit that
//!    makes it durable flushes the home pool first, so a power loss finds either the
//!    `Log` entry (the segment is not freed before the clear is durable) or the data at
//!    home. A segment left with nothing live is freed through the owner's journal
//!    (`free_segment`), as the cleaner's victims are.
//! 3. *Copy* once the drain's records are durable (`drain_durable`); LR sends no write to
//!    the destination before.
//! 4. *After the pivot* the job is over and `log_target` logs the volume's writes again
//!    where `log_enabled` says (the chunk's pool, now the destination).
//!
//! Crash: the job is recorded in the volume table, so mount starts it again and the
//! drain resumes with what is left in the overlay (the segments are rebuilt from it).
//! Cancel: a chunk being drained finishes its write-back (the volume stays valid with
//! or without the `Log` entries it still has), and the volume logs again.

use super::state::{DrainChunk, LogPiece};
use crate::chunkmap::ChunkLoc;
use crate::engine::{Engine, OpSpec, Owner};
use crate::extents::ExtentValue;
use crate::inject::InjectedBug;
use crate::journal::Record;
use crate::layout::chunk_offset;
use crate::overlay::Overlay;
use crate::types::{DevKind, Errno, IoClass, Outputs, PoolId};
use crate::volume::{ChunkState, Volume};

/// The live `Log` ranges of chunk `c` of `vol`, clipped to the chunk.
fn log_pieces(vol: &Volume, c: u64, cb: u64) -> Vec<LogPiece> {
    let (cs, ce) = (c * cb, (c + 1) * cb);
    vol.overlay
        .overlapping(cs, ce)
        .filter_map(|(s, e, o)| match o {
            Overlay::Log { pool, dev_offset } => {
                let (s2, e2) = (s.max(cs), e.min(ce));
                Some((s2, e2, pool, dev_offset + (s2 - s)))
            }
            _ => None,
        })
        .collect()
}

/// Chunks of `vol` with live log data, in order.
pub(super) fn logged_chunks(vol: &Volume, cb: u64) -> std::collections::BTreeSet<u64> {
    let mut out = std::collections::BTreeSet::new();
    for (s, e, o) in vol.overlay.iter() {
        if matches!(o, Overlay::Log { .. }) {
            out.extend(s / cb..=(e - 1) / cb);
        }
    }
    out
}

/// Chunks of `vol` with live log data and no home chunk: the drain allocates one for
/// each on the home pool, and the copy one more on the destination.
pub(super) fn logged_unmapped(vol: &Volume, cb: u64) -> u64 {
    logged_chunks(vol, cb)
        .into_iter()
        .filter(|&c| vol.map.get(c) == ChunkLoc::Unmapped)
        .count() as u64
}

impl Engine {
    /// Whether volume `v` has log state a job must drain before copying: live `Log`
    /// ranges, buffered appends, appends in flight.
    pub(super) fn vol_has_log_data(&self, v: u32) -> bool {
        let vol = &self.vols[v as usize];
        !vol.log.in_flight.is_empty()
            || vol.log.streams.iter().any(|s| !s.buf.is_empty())
            || vol
                .overlay
                .iter()
                .any(|(_, _, o)| matches!(o, Overlay::Log { .. }))
    }

    /// Whether volume `v` has no log data left and the records that drained it are
    /// durable. Otherwise do what can be done now (seal, close segments, start the next
    /// chunk's write-back); the completions it waits for step the job again.
    pub(super) fn log_drained(&mut self, now: u64, v: u32, out: &mut Outputs) -> bool {
        let job = &self.migrations.jobs[&v];
        if let Some(seq) = job.log_drain_seq {
            return self.drain_durable(now, v, seq, out);
        }
        if self
            .migrations
            .log_drains
            .range((v, 0)..=(v, u64::MAX))
            .next()
            .is_some()
        {
            return false; // one chunk at a time; its completion steps again
        }
        // Nothing new is buffered for a migrating volume: what is goes out now.
        self.log_seal_volume(now, v, out);
        if !self.vols[v as usize].log.in_flight.is_empty()
            || self
                .logs
                .iter()
                .any(|l| l.clean.as_ref().is_some_and(|c| c.owner == v))
        {
            return false; // an append's or the cleaner's completion steps again
        }
        self.log_close_streams(v);
        let cb = self.cfg.chunk_bytes;
        let vol = &self.vols[v as usize];
        let chunks = logged_chunks(vol, cb);
        let busy = |c: u64| {
            vol.activity
                .get(&c)
                .is_some_and(|a| a.state != ChunkState::Idle || a.writes_in_flight > 0)
        };
        let Some(c) = chunks.iter().copied().find(|&c| !busy(c)) else {
            if !chunks.is_empty() {
                return false; // a write's completion steps again
            }
            let seq = vol.journal.next_seq - 1;
            let job = self.migrations.jobs.get_mut(&v).expect("a job drains");
            // Nothing was drained: no record to wait for.
            let seq = if job.log_drained { seq } else { 0 };
            job.log_drain_seq = Some(seq);
            return self.drain_durable(now, v, seq, out);
        };
        let bytes: u64 = log_pieces(vol, c, cb).iter().map(|p| p.1 - p.0).sum();
        let job = self.migrations.jobs.get_mut(&v).expect("a job drains");
        if let Err(at) = job.take_rate(now, cb, bytes) {
            self.migration_wake_at(at);
            return false;
        }
        self.start_log_drain(now, v, c, out);
        false
    }

    /// Close volume `v`'s open log segments (no stream appends for it until the job is
    /// over); one with nothing live is freed.
    fn log_close_streams(&mut self, v: u32) {
        for si in 0..self.vols[v as usize].log.streams.len() {
            let Some(g) = self.vols[v as usize].log.streams[si].seg.take() else {
                continue;
            };
            let pool = si / 2;
            if let Some(seg) = self.logs[pool].segments.get_mut(&g) {
                seg.open = false;
                if seg.live_bytes == 0 {
                    self.free_segment(PoolId(pool as u16), g);
                }
            }
        }
    }

    /// Write chunk `c`'s live log ranges back into its home chunk (allocated on the home
    /// pool if unmapped); its writes wait until that is done.
    fn start_log_drain(&mut self, now: u64, v: u32, c: u64, out: &mut Outputs) {
        let cb = self.cfg.chunk_bytes;
        let vol = &self.vols[v as usize];
        let pieces = log_pieces(vol, c, cb);
        let (home, allocated) = match vol.resolve(vol.map.get(c), c) {
            Some(at) => (at, false),
            None => {
                let pool = vol.rec.home_pool;
                let hint = vol.rec.home_base_chunk + c;
                match self.pools[pool.0 as usize].alloc.allocate(hint, false) {
                    Some(pc) => ((pool, pc), true),
                    None => {
                        let name = self.cfg.pools[pool.0 as usize].name.clone();
                        let job = self.migrations.jobs.get_mut(&v).expect("a job drains");
                        job.error.get_or_insert(format!(
                            "no space on pool {name} to write chunk {c}'s log data back"
                        ));
                        job.cancel_wanted = true;
                        // Nothing in flight may step the job: the timer does.
                        self.migration_wake_at(now);
                        return;
                    }
                }
            }
        };
        let base = chunk_offset(home.1, cb);
        // The rest of a fresh chunk must read as zeros, whatever the device held before.
        let mut zeros = Vec::new();
        if allocated {
            let mut at = c * cb;
            for &(s, e, _, _) in &pieces {
                if s > at {
                    zeros.push((at, s));
                }
                at = e;
            }
            if at < (c + 1) * cb {
                zeros.push((at, (c + 1) * cb));
            }
        }
        // The injected bug clears the overlay without writing anything back.
        let drop_live = self.bug_is(InjectedBug::LogMigrateDropsLive);
        let pending = if drop_live {
            0
        } else {
            (pieces.len() + zeros.len()) as u32
        };
        self.vols[v as usize].activity.entry(c).or_default().state = ChunkState::LogDrain;
        self.migrations.log_drains.insert(
            (v, c),
            DrainChunk {
                pieces: pieces.clone(),
                pending,
                failed: None,
                home,
                allocated: allocated && !drop_live,
            },
        );
        if drop_live {
            if allocated {
                self.pools[home.0.0 as usize].alloc.release(home.1);
            }
            return self.log_drain_finish(now, v, c, out);
        }
        let cs = c * cb;
        for (s, e, pool, dev) in pieces {
            let to = (home.0, base + (s - cs));
            let for_ = crate::jobs::copy::CopyFor::LogDrain { vol: v, chunk: c };
            self.start_copy(now, for_, (pool, dev), to, e - s, out);
        }
        for (s, e) in zeros {
            let owner = Owner::LogDrain { vol: v, chunk: c };
            let spec = OpSpec::new(owner, home.0, DevKind::WriteZeroes, IoClass::Migration);
            self.queue_op(now, spec.at(base + (s - cs), e - s).for_volume(v), out);
        }
    }

    /// A copy or zero-fill of chunk `c`'s write-back finished.
    pub(crate) fn log_drain_part_done(
        &mut self,
        now: u64,
        v: u32,
        c: u64,
        result: Result<(), Errno>,
        out: &mut Outputs,
    ) {
        let Some(d) = self.migrations.log_drains.get_mut(&(v, c)) else {
            return;
        };
        d.pending -= 1;
        d.failed = Errno::worse(d.failed, result.err());
        if d.pending == 0 {
            self.log_drain_finish(now, v, c, out);
        }
    }

    /// Chunk `c`'s write-back is over: map an allocated chunk, clear the ranges that still
    /// point where they were copied from, and let the chunk's writes go on.
    fn log_drain_finish(&mut self, now: u64, v: u32, c: u64, out: &mut Outputs) {
        let d = self
            .migrations
            .log_drains
            .remove(&(v, c))
            .expect("a drain finishes");
        let vol = &mut self.vols[v as usize];
        if let Some(a) = vol.activity.get_mut(&c)
            && a.state == ChunkState::LogDrain
        {
            a.state = ChunkState::Idle;
        }
        if let Some(err) = d.failed {
            // Nothing references a fresh chunk yet: give it straight back. The `Log`
            // entries stay; a cancel leaves the volume logged.
            if d.allocated {
                self.pools[d.home.0.0 as usize].alloc.release(d.home.1);
            }
            if let Some(job) = self.migrations.jobs.get_mut(&v) {
                job.error.get_or_insert(format!(
                    "writing chunk {c}'s log data back failed ({err:?})"
                ));
                job.cancel_wanted = true;
            }
        } else {
            if d.allocated {
                let loc = ChunkLoc::At(d.home.0, d.home.1);
                vol.set_loc(c, loc);
                vol.journal.append(Record::Map {
                    chunk: c,
                    entry: loc.encode(),
                });
                self.migration_chunk_allocated(v, c);
            }
            self.vols[v as usize].dirty_pools |= 1 << d.home.0.0;
            for (s, e, pool, dev) in d.pieces {
                let same: Vec<(u64, u64)> = self.vols[v as usize]
                    .overlay
                    .overlapping(s, e)
                    .filter_map(|(s2, e2, o)| {
                        let (a, b) = (s2.max(s), e2.min(e));
                        (o.advance(a - s2)
                            == Overlay::Log {
                                pool,
                                dev_offset: dev + (a - s),
                            })
                        .then_some((a, b))
                    })
                    .collect();
                for (a, b) in same {
                    self.clear_overlay(v, a, b);
                }
            }
            if let Some(job) = self.migrations.jobs.get_mut(&v) {
                job.log_drained = true;
            }
            self.arm_commit_timer(now);
        }
        self.wake_waiters(now, v, c, out);
    }

    /// The home chunk a write-back in flight allocated (for the invariant that every
    /// chunk has exactly one owner).
    pub(super) fn log_drain_claims(&self, v: u32) -> Vec<(PoolId, u64)> {
        self.migrations
            .log_drains
            .range((v, 0)..=(v, u64::MAX))
            .filter(|(_, d)| d.allocated)
            .map(|(_, d)| d.home)
            .collect()
    }
}
