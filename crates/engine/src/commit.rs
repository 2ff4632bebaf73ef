//! Flush domains: each volume commits on its own.
//!
//! A commit round makes durable everything the volume completed before the round began:
//! 1. take the pending journal records (or a checkpoint of the whole state if the ring
//!    would overflow or one is due) and the FLUSH/FUA requests waiting;
//! 2. flush the pools the volume wrote to (data before the records that point at it);
//! 3. write the record blocks at the ring head, or the checkpoint chain then a new journal
//!    header, all with FUA;
//! 4. complete the waiting requests, release space whose release records are now durable.
//!
//! Requests and records arriving during a round wait for the next one (group commit).
//! A FLUSH on one volume never writes another volume's journal (seed 001's isolation).

use std::mem;

use crate::engine::{Engine, OpSpec, Owner};
use crate::inject::InjectedBug;
use crate::journal::Journal;
use crate::journal::checkpoint::{build_chain, encode_state_with_cache, pieces_needed};
use crate::layout::{BLOCK_BYTES, JournalHeader, chunk_offset};
use crate::reclaim::Freed;
use crate::types::{DevKind, EngineEvent, Errno, IoClass, Outputs, PoolId};
use crate::volume::{Commit, CommitPhase, CommitWork};

impl Engine {
    /// Start a commit round if the volume has waiters or a checkpoint is due.
    pub(crate) fn kick_commit(&mut self, now: u64, v: u32, out: &mut Outputs) {
        let vol = &self.vols[v as usize];
        if vol.commit.is_none() && (!vol.flush_waiters.is_empty() || vol.checkpoint_wanted) {
            self.start_commit(now, v, out);
        }
    }

    pub(crate) fn start_commit(&mut self, now: u64, v: u32, out: &mut Outputs) {
        let vi = v as usize;
        if self.vols[vi].journal.abandoned() {
            // A commit failed while stopping (`Journal::abandon`): nothing more of this
            // volume becomes durable in this run, so FLUSHes and FUA writes that wait
            // for a commit fail, and records made since are lost as in a crash.
            let vol = &mut self.vols[vi];
            vol.journal.pending.clear();
            vol.checkpoint_wanted = false;
            for w in mem::take(&mut vol.flush_waiters) {
                self.finish_req(now, w, Err(Errno::Io), out);
            }
            return;
        }
        // Logged data the records point at goes to the device first.
        self.log_seal_volume(now, v, out);
        let vol = &mut self.vols[vi];
        debug_assert!(vol.commit.is_none());
        let waiters = mem::take(&mut vol.flush_waiters);
        let records = mem::take(&mut vol.journal.pending);
        let last_seq = vol.journal.next_seq - 1;
        let first_seq = last_seq + 1 - records.len() as u64;
        let blocks = Journal::blocks_for(records.len());
        let wants_checkpoint = vol.checkpoint_wanted || !vol.journal.fits(blocks);
        let work = if wants_checkpoint {
            self.checkpoint_work(v, records, blocks, last_seq, out)
        } else if records.is_empty() {
            CommitWork::FlushOnly
        } else {
            let vol = &self.vols[vi];
            let (image, new_crc) = vol.journal.build_blocks(vol.rec.id, first_seq, &records);
            CommitWork::Blocks {
                records,
                image,
                blocks,
                new_crc,
            }
        };
        let vol = &mut self.vols[vi];
        // A round that could neither checkpoint nor fit its blocks fails now, as a round
        // that failed with ENOSPC does (finish_commit): its records go back, its waiters
        // fail, and the volume backs off until the commit timer retries. Before, callers
        // that back off only after a failed round (a write waiting for log space, the
        // migration's commit step) started it again at every event, each time encoding
        // the whole map for a checkpoint that could not be placed.
        let no_room = matches!(&work, CommitWork::Blocks { image, .. } if image.is_empty());
        if no_room {
            vol.commit = Some(Commit {
                phase: CommitPhase::LogWait,
                pending_ops: 0,
                failed: Some(Errno::NoSpc),
                waiters,
                work,
                last_seq,
                flushed_pools: 0,
                log_wait_upto: vol.log.next_id,
                started_ns: now,
            });
            return self.finish_commit(now, v, Err(Errno::NoSpc), out);
        }
        let flushed_pools = mem::take(&mut vol.dirty_pools);
        vol.stats.journal_commits += 1;
        let log_wait_upto = vol.log.next_id;
        vol.commit = Some(Commit {
            phase: CommitPhase::LogWait,
            pending_ops: 0,
            failed: None,
            waiters,
            work,
            last_seq,
            flushed_pools,
            log_wait_upto,
            started_ns: now,
        });
        self.log_commit_check(now, v, out);
    }

    /// A checkpoint round's work, or, with no room for its chain on the metadata pool, a
    /// blocks round without an image (which fails for space).
    fn checkpoint_work(
        &mut self,
        v: u32,
        records: Vec<crate::journal::Record>,
        blocks: u64,
        last_seq: u64,
        out: &mut Outputs,
    ) -> CommitWork {
        let cb = self.cfg.chunk_bytes;
        let meta = self.cfg.meta_pool;
        let vol = &self.vols[v as usize];
        let payload = encode_state_with_cache(&vol.map, &vol.overlay, vol.cache.raw());
        let n = pieces_needed(payload.len() as u64, cb);
        let (hint, id) = (vol.rec.journal_first_chunk, vol.rec.id);
        let alloc = &mut self.pools[meta.0 as usize].alloc;
        let mut chunks = Vec::with_capacity(n as usize);
        for _ in 0..n {
            match alloc.allocate(hint, true) {
                Some(c) => chunks.push((meta, c)),
                None => break,
            }
        }
        if chunks.len() as u64 == n {
            let images = build_chain(id, last_seq, &payload, cb, &chunks);
            let vol = &mut self.vols[v as usize];
            let image = crate::give_back::volume_reach(vol);
            vol.journal.reach.round_began(last_seq, image);
            CommitWork::Checkpoint {
                records,
                images,
                chunks,
                header: None,
            }
        } else {
            for &(_, c) in &chunks {
                alloc.release(c);
            }
            // Once per spell (until a commit of the volume succeeds), not per attempt.
            if self.logs.nospace.no_room_began(v) {
                out.events.push(EngineEvent::Warning {
                    message: format!(
                        "volume {}: no room on the metadata pool for a checkpoint",
                        self.vols[v as usize].rec.name
                    ),
                });
            }
            CommitWork::Blocks {
                records,
                image: Vec::new(),
                blocks,
                new_crc: 0,
            }
        }
    }

    /// Flush the pools the round's data went to.
    pub(crate) fn commit_data_flush(&mut self, now: u64, v: u32, out: &mut Outputs) {
        let vi = v as usize;
        let Some(c) = self.vols[vi].commit.as_mut() else {
            return;
        };
        c.phase = CommitPhase::DataFlush;
        if let Some(err) = c.failed {
            return self.finish_commit(now, v, Err(err), out);
        }
        let flushed_pools = c.flushed_pools;
        let mut n = 0;
        for p in 0..self.pools.len() {
            if flushed_pools >> p & 1 == 1 {
                n += 1;
                let owner = Owner::Commit { vol: v };
                let spec = OpSpec::new(owner, PoolId(p as u16), DevKind::Flush, IoClass::Metadata);
                self.queue_op(now, spec.for_volume(v), out);
            }
        }
        if let Some(c) = self.vols[vi].commit.as_mut() {
            c.pending_ops = n;
        }
        if n == 0 {
            self.advance_commit(now, v, out);
        }
    }

    pub(crate) fn commit_io_done(
        &mut self,
        now: u64,
        v: u32,
        result: Result<(), Errno>,
        out: &mut Outputs,
    ) {
        let Some(c) = self.vols[v as usize].commit.as_mut() else {
            return;
        };
        c.pending_ops -= 1;
        c.failed = Errno::worse(c.failed, result.err());
        if c.pending_ops == 0 {
            self.advance_commit(now, v, out);
        }
    }

    fn commit_write(
        &mut self,
        now: u64,
        v: u32,
        pool: PoolId,
        offset: u64,
        payload: Vec<u8>,
        out: &mut Outputs,
    ) {
        let len = payload.len() as u64;
        let spec = OpSpec::new(
            Owner::Commit { vol: v },
            pool,
            DevKind::Write,
            IoClass::Metadata,
        );
        let spec = spec.at(offset, len).fua(true).payload(Some(payload.into()));
        self.queue_op(now, spec.for_volume(v), out);
    }

    fn advance_commit(&mut self, now: u64, v: u32, out: &mut Outputs) {
        let Some(c) = self.vols[v as usize].commit.as_ref() else {
            return;
        };
        if let Some(err) = c.failed {
            return self.finish_commit(now, v, Err(err), out);
        }
        match c.phase {
            CommitPhase::LogWait => unreachable!("log waits end in commit_data_flush"),
            CommitPhase::DataFlush => self.commit_after_data_flush(now, v, out),
            CommitPhase::Write => self.commit_after_write(now, v, out),
            CommitPhase::Header => self.commit_after_header(now, v, out),
        }
    }

    /// The data is durable: write the round's journal blocks or checkpoint image.
    fn commit_after_data_flush(&mut self, now: u64, v: u32, out: &mut Outputs) {
        let vi = v as usize;
        if self.bug_is(InjectedBug::AckFlushBeforeJournal) {
            let waiters = self.vols[vi]
                .commit
                .as_mut()
                .map(|c| std::mem::take(&mut c.waiters))
                .unwrap_or_default();
            for w in waiters {
                self.finish_req(now, w, Ok(()), out);
            }
        }
        let vol = &mut self.vols[vi];
        let Some(c) = vol.commit.as_mut() else { return };
        c.phase = CommitPhase::Write;
        let mut writes: Vec<(PoolId, u64, Vec<u8>)> = Vec::new();
        match &mut c.work {
            CommitWork::FlushOnly => return self.finish_commit(now, v, Ok(()), out),
            CommitWork::Blocks { image, blocks, .. } => {
                // One write at the ring head, split where the ring wraps.
                let j = &vol.journal;
                let slot = j.head % j.ring_blocks;
                let first = (*blocks).min(j.ring_blocks - slot) as usize * BLOCK_BYTES as usize;
                let img = mem::take(image);
                if first < img.len() {
                    writes.push((j.pool, j.ring_offset(), img[first..].to_vec()));
                }
                writes.insert(
                    0,
                    (
                        j.pool,
                        j.block_offset(j.head),
                        img[..first.min(img.len())].to_vec(),
                    ),
                );
            }
            CommitWork::Checkpoint { images, chunks, .. } => {
                for (img, &(p, ch)) in mem::take(images).into_iter().zip(chunks.iter()) {
                    writes.push((p, chunk_offset(ch, self.cfg.chunk_bytes), img));
                }
                // Earlier header writes to the next slot failed and may have
                // landed, naming their chains: make the slot name the durable
                // checkpoint again (a copy of the header as last written), so
                // those chains can go before this round's header is written to
                // it. Without this, every failed header write kept one more chain
                // claimed, and repeated failures used up the metadata pool's
                // reserve, which holds one such chain.
                let j = &vol.journal;
                if !j.orphan_chunks.is_empty() {
                    writes.push((j.pool, j.next_header_offset(), j.header.encode()));
                }
            }
        }
        c.pending_ops = writes.len() as u32;
        for (p, off, img) in writes {
            self.commit_write(now, v, p, off, img, out);
        }
    }

    /// The blocks are written (the round is done), or the checkpoint image is (its header
    /// goes next).
    fn commit_after_write(&mut self, now: u64, v: u32, out: &mut Outputs) {
        let vi = v as usize;
        let marking_clean_stop = self.clean_stop.marking();
        let vol = &mut self.vols[vi];
        let Some(c) = vol.commit.as_mut() else { return };
        match &mut c.work {
            CommitWork::FlushOnly => {
                unreachable!("flush-only rounds finish after the data flush")
            }
            CommitWork::Blocks {
                blocks, new_crc, ..
            } => {
                vol.journal.head += *blocks;
                vol.journal.last_crc = *new_crc;
                vol.journal.durable_seq = c.last_seq;
                vol.stats.journal_blocks += *blocks;
                self.finish_commit(now, v, Ok(()), out);
            }
            CommitWork::Checkpoint { chunks, header, .. } => {
                // The slot no longer names an orphan chain: orphans only come
                // from a failed round, so any here were here when this round's
                // writes were issued, and among them was the slot's copy of the
                // durable header, which succeeded with the rest.
                let orphans = mem::take(&mut vol.journal.orphan_chunks);
                let j = &vol.journal;
                let h = JournalHeader {
                    volume_id: vol.rec.id,
                    generation: j.header.generation + 1,
                    mount_generation: j.header.mount_generation,
                    checkpoint: chunks.first().copied(),
                    checkpoint_seq: c.last_seq,
                    mount_block_seq: j.header.mount_block_seq,
                    replay_block_seq: j.head,
                    replay_prev_crc: j.last_crc,
                    stopped_clean: marking_clean_stop,
                };
                let (pool, off) = (j.pool, j.next_header_offset());
                let img = h.encode();
                *header = Some(h);
                c.phase = CommitPhase::Header;
                c.pending_ops = 1;
                for (p, ch) in orphans {
                    self.defer_free(
                        Freed::Chunks {
                            pool: p,
                            first: ch,
                            n: 1,
                        },
                        smallvec::SmallVec::new(),
                    );
                }
                self.commit_write(now, v, pool, off, img, out);
            }
        }
    }

    /// The checkpoint's header is written: the ring restarts after it, and the old
    /// checkpoint's chunks can go.
    fn commit_after_header(&mut self, now: u64, v: u32, out: &mut Outputs) {
        let vi = v as usize;
        let vol = &mut self.vols[vi];
        let Some(c) = vol.commit.as_mut() else { return };
        let CommitWork::Checkpoint { chunks, header, .. } = &mut c.work else {
            unreachable!("only checkpoints write headers")
        };
        let Some(h) = header.take() else { return };
        vol.journal.header = h;
        vol.journal.reach.checkpointed(c.last_seq);
        vol.journal.tail = vol.journal.head;
        vol.journal.durable_seq = c.last_seq;
        vol.checkpoint_wanted = false;
        vol.stats.checkpoints += 1;
        let mut old = mem::replace(&mut vol.journal.checkpoint_chunks, mem::take(chunks));
        // The slot just written no longer names chains of earlier failed attempts.
        old.append(&mut vol.journal.orphan_chunks);
        for (pool, ch) in old {
            self.defer_free(
                Freed::Chunks {
                    pool,
                    first: ch,
                    n: 1,
                },
                smallvec::SmallVec::new(),
            );
        }
        self.finish_commit(now, v, Ok(()), out);
    }

    fn finish_commit(&mut self, now: u64, v: u32, result: Result<(), Errno>, out: &mut Outputs) {
        let vi = v as usize;
        let Some(c) = self.vols[vi].commit.take() else {
            return;
        };
        self.logs.nospace.commit_ended(v, result.is_ok());
        let took_ns = now.saturating_sub(c.started_ns);
        self.vols[vi].stats.commit_latency.record(took_ns);
        if let Err(errno) = result {
            let vol = &mut self.vols[vi];
            vol.stats.commit_failures += 1;
            out.events.push(EngineEvent::CommitFailed {
                volume: vol.rec.name.clone(),
                errno,
            });
            // Retry later: the records go back in front, the data pools count as dirty.
            vol.dirty_pools |= c.flushed_pools;
            let (records, fresh, header_tried) = match c.work {
                CommitWork::FlushOnly => (Vec::new(), Vec::new(), false),
                CommitWork::Blocks { records, .. } => (records, Vec::new(), false),
                CommitWork::Checkpoint {
                    records,
                    chunks,
                    header,
                    ..
                } => (records, chunks, header.is_some()),
            };
            let mut rs = records;
            rs.append(&mut vol.journal.pending);
            vol.journal.pending = rs;
            if header_tried {
                // A failed write may still have landed: the header slot may now point at
                // this chain. Keep it until a later header write to that slot succeeds.
                vol.journal.orphan_chunks.extend(fresh);
            } else {
                for (pool, ch) in fresh {
                    // No header was written for it; no read targets it.
                    self.pools[pool.0 as usize].alloc.release(ch);
                }
            }
        }
        for w in c.waiters {
            self.finish_req(now, w, result, out);
        }
        let stopping = self.state == crate::engine::EngineState::Stopping;
        let vol = &mut self.vols[vi];
        if result.is_err() && stopping && self.clean_stop.marking() {
            // The clean-stop marker's checkpoint failed: everything acknowledged was
            // durable before it began, so nothing is lost, but the marker may or may not
            // be on the device (a failed write can land): not a loss, and not a promise
            // (DST seed 650 with tight shards saw such a write land).
            vol.checkpoint_wanted = false;
            vol.journal.abandon();
            if !self.clean_stop.unmarked.contains(&vol.rec.name) {
                self.clean_stop.unmarked.push(vol.rec.name.clone());
            }
            out.events.push(EngineEvent::Warning {
                message: format!(
                    "volume {}: the clean-stop marker could not be written (its data is \
                     durable); the next start may treat the stop as unclean",
                    vol.rec.name
                ),
            });
        } else if result.is_err() && stopping {
            // Shutting down on a failing device: what could not be committed is lost,
            // exactly as if the host had crashed.
            vol.checkpoint_wanted = false;
            vol.journal.abandon();
            if !self.clean_stop.lost.contains(&vol.rec.name) {
                self.clean_stop.lost.push(vol.rec.name.clone());
            }
            out.events.push(EngineEvent::Warning {
                message: format!("volume {}: final commit failed", vol.rec.name),
            });
        }
        if result.is_ok() && vol.journal.used_blocks() * 2 > vol.journal.ring_blocks {
            vol.checkpoint_wanted = true;
        }
        // After a failed round the commit timer retries (log/nospace.rs): starting the next
        // round at once for the FLUSHes that queued behind it failed again at the same
        // instant, forever, under a lasting ENOSPC (DST seed 37 with space faults).
        let again = result.is_ok() && (!vol.flush_waiters.is_empty() || vol.checkpoint_wanted);
        if again {
            self.start_commit(now, v, out);
        }
        if result.is_ok() {
            self.shrink_checkpointed(now, v, out);
        }
        self.arm_commit_timer(now);
        self.release_frees(now, out);
        self.maybe_stopped(out);
    }
}
