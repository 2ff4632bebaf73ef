//! Whole-engine consistency checks, run by deterministic simulation testing after steps
//! and after every recovery. Each physical chunk must have exactly one reason to be in use
//! (a volume's map, a thick home region, a journal, a checkpoint, an allocation or commit
//! in flight, a pending free), and the allocators must agree exactly.

use std::collections::BTreeMap;

use crate::chunkmap::ChunkLoc;
use crate::config::Provisioning;
use crate::engine::{Engine, ReqStage};
use crate::reclaim::Freed;
use crate::volume::{ChunkState, CommitWork, Volume};

impl Engine {
    /// Who holds the chunks of each pool, summarised (for debugging and reports).
    pub fn chunk_owners(&self) -> Vec<BTreeMap<String, u64>> {
        let mut out = vec![BTreeMap::new(); self.pools.len()];
        let mut add =
            |p: usize, what: &str, n: u64| *out[p].entry(what.to_string()).or_insert(0) += n;
        for v in &self.vols {
            let r = &v.rec;
            add(
                r.journal_pool.0 as usize,
                "journal",
                r.journal_chunks as u64,
            );
            for &(p, _) in &v.journal.checkpoint_chunks {
                add(p.0 as usize, "checkpoint", 1);
            }
            for &(p, _) in &v.journal.orphan_chunks {
                add(p.0 as usize, "orphan checkpoint", 1);
            }
            if r.provisioning == Provisioning::Thick {
                add(r.home_pool.0 as usize, "thick home", v.chunks);
            }
            for (_, loc) in v.map.iter() {
                if let ChunkLoc::At(p, _) = loc {
                    add(p.0 as usize, "mapped", 1);
                }
            }
            for (p, _, _) in Engine::cache_claims(v) {
                add(p.0 as usize, "slow slot of a cached chunk", 1);
            }
        }
        for f in self.reclaim.pending() {
            let Freed::Chunks { pool, n, .. } = f.what;
            add(pool.0 as usize, "pending free", n);
        }
        out
    }

    /// Check every invariant; `Err` describes the first violation.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (i, p) in self.pools.iter().enumerate() {
            p.wbuf
                .check()
                .map_err(|e| format!("pool {i} write buffer: {e}"))?;
        }
        let mut claims = Claims::new(self.pools.len());
        self.check_reach()?;
        for (pool, c, who) in self
            .loan_claims()
            .into_iter()
            .chain(self.give_back_claims())
        {
            claims.claim(pool, c, who)?;
        }
        for (pool, first, n, who) in self.creations.reserved() {
            for c in first..first + n {
                claims.claim(pool, c, who.clone())?;
            }
        }
        for v in &self.vols {
            self.claim_volume(v, &mut claims)?;
            check_cache(v)?;
            self.check_pivoted(v.id.0)?;
            check_journal(v)?;
            self.check_volume_counts(v)?;
        }
        self.check_tier_moves()?;
        self.check_pauses_stepped()?;
        for f in self.reclaim.pending() {
            let Freed::Chunks { pool, first, n } = f.what;
            for c in first..first + n {
                claims.claim(pool.0 as usize, c, "a pending free".to_string())?;
            }
        }
        for (p, c, who) in self.check_log()? {
            claims.claim(p, c, who)?;
        }
        for v in &self.vols {
            if v.overlay.len() as u64 > 2 * v.log.max_extents {
                return Err(format!(
                    "volume {}: {} overlay extents, more than its bound {}",
                    v.rec.name,
                    v.overlay.len(),
                    v.log.max_extents
                ));
            }
        }
        // What a crash now would mount: every region the volume table (durable or being
        // written) names for a thick volume, home or a job's new one, is held.
        self.check_table_regions(&claims.owner)?;
        self.check_allocators(&claims.owner)?;
        self.check_requests()
    }

    /// Claim every chunk volume `v` holds: journal, checkpoints, thick home, map, chunks
    /// being allocated or moved, cache slow slots, a migration's, a checkpoint being written.
    fn claim_volume(&self, v: &Volume, claims: &mut Claims) -> Result<(), String> {
        let r = &v.rec;
        for c in 0..r.journal_chunks as u64 {
            claims.claim(
                r.journal_pool.0 as usize,
                r.journal_first_chunk + c,
                format!("journal of {}", r.name),
            )?;
        }
        for &(p, c) in &v.journal.checkpoint_chunks {
            claims.claim(p.0 as usize, c, format!("checkpoint of {}", r.name))?;
        }
        for &(p, c) in &v.journal.orphan_chunks {
            claims.claim(
                p.0 as usize,
                c,
                format!("checkpoint of {} whose header write failed", r.name),
            )?;
        }
        if r.provisioning == Provisioning::Thick {
            for c in 0..v.chunks {
                claims.claim(
                    r.home_pool.0 as usize,
                    r.home_base_chunk + c,
                    format!("home chunk {c} of {}", r.name),
                )?;
            }
        }
        for (c, loc) in v.map.iter() {
            // A thick volume's chunk at its own slot of a region (a migration's) is
            // claimed with the region.
            if let ChunkLoc::At(p, pc) = loc
                && !self.own_slot(v.id.0, c, p, pc)
            {
                claims.claim(p.0 as usize, pc, format!("chunk {c} of {}", r.name))?;
            }
        }
        for (c, a) in &v.activity {
            match a.state {
                ChunkState::Allocating {
                    loc: ChunkLoc::At(p, pc),
                    ..
                } => {
                    claims.claim(
                        p.0 as usize,
                        pc,
                        format!("chunk {c} of {} being allocated", r.name),
                    )?;
                }
                ChunkState::Moving {
                    dst: ChunkLoc::At(p, pc),
                    ..
                } => {
                    claims.claim(
                        p.0 as usize,
                        pc,
                        format!("chunk {c} of {} being moved", r.name),
                    )?;
                }
                _ => {}
            }
        }
        // A cached chunk owns two slots: its fast copy (the map) and its slow slot.
        for (p, pc, c) in Engine::cache_claims(v) {
            claims.claim(
                p.0 as usize,
                pc,
                format!("slow slot of cached chunk {c} of {}", r.name),
            )?;
        }
        for (p, pc, what) in self.migration_claims(v.id.0) {
            claims.claim(p.0 as usize, pc, format!("{what} of {}", r.name))?;
        }
        if let Some(cm) = &v.commit
            && let CommitWork::Checkpoint { chunks, .. } = &cm.work
        {
            for &(p, c) in chunks {
                claims.claim(
                    p.0 as usize,
                    c,
                    format!("checkpoint of {} being written", r.name),
                )?;
            }
        }
        Ok(())
    }

    /// Per pool, the chunks each volume resolves to match its counters, and its map covers
    /// the volume.
    fn check_volume_counts(&self, v: &Volume) -> Result<(), String> {
        let r = &v.rec;
        let mut counts = vec![0u64; self.pools.len()];
        for c in 0..v.chunks {
            if let Some((p, _)) = v.resolve(v.map.get(c), c) {
                counts[p.0 as usize] += 1;
            }
        }
        if counts != v.chunks_on {
            return Err(format!(
                "volume {}: chunks per pool {:?} but counted {:?}",
                r.name, v.chunks_on, counts
            ));
        }
        if v.map.len() != v.chunks {
            return Err(format!(
                "volume {}: map has {} entries for {} chunks",
                r.name,
                v.map.len(),
                v.chunks
            ));
        }
        Ok(())
    }

    /// Tier moves in flight agree with the counters that ration them.
    fn check_tier_moves(&self) -> Result<(), String> {
        let mut moves = 0u32;
        let mut demoting = vec![0u32; self.pools.len()];
        for v in &self.vols {
            let r = &v.rec;
            let mut promoting = 0;
            for (&c, a) in &v.activity {
                if let ChunkState::Cleaning { .. } = a.state {
                    moves += 1;
                }
                if let ChunkState::Moving { dst, .. } = a.state {
                    moves += 1;
                    match v.resolve(dst, c) {
                        Some((p, _)) if p == r.home_pool => {
                            if let Some((src, _)) = v.resolve(v.map.get(c), c) {
                                demoting[src.0 as usize] += 1;
                            }
                        }
                        _ => promoting += 1,
                    }
                }
            }
            if promoting != v.promoting {
                return Err(format!(
                    "volume {}: {promoting} promotions in flight but {} counted",
                    r.name, v.promoting
                ));
            }
        }
        if moves != self.tier.in_flight() || demoting != self.tier.demoting_by_pool() {
            return Err(format!(
                "{moves} moves in flight ({demoting:?} demotions) but {} counted ({:?})",
                self.tier.in_flight(),
                self.tier.demoting_by_pool()
            ));
        }
        Ok(())
    }

    /// Each pool's allocator has exactly the chunks claimed in use.
    fn check_allocators(&self, owner: &[BTreeMap<u64, String>]) -> Result<(), String> {
        for (p, pool) in self.pools.iter().enumerate() {
            let used = pool.alloc.chunks() - pool.alloc.free_chunks();
            if used != owner[p].len() as u64 {
                let leaked: Vec<u64> = (0..pool.alloc.chunks())
                    .filter(|&c| pool.alloc.is_used(c) && !owner[p].contains_key(&c))
                    .take(5)
                    .collect();
                return Err(format!(
                    "pool {}: allocator has {used} chunks in use, {} are accounted for (unaccounted: {leaked:?})",
                    pool.cfg.name,
                    owner[p].len()
                ));
            }
            if let Some((c, who)) = owner[p].iter().find(|(c, _)| !pool.alloc.is_used(**c)) {
                return Err(format!(
                    "pool {}: chunk {c} is {who} but the allocator has it free",
                    pool.cfg.name
                ));
            }
        }
        Ok(())
    }

    /// No request is stuck: one waiting for a commit is in a round, one in its data stage
    /// has work outstanding; throttles agree with what is in flight.
    fn check_requests(&self) -> Result<(), String> {
        for (k, r) in self.reqs.iter() {
            let vol = &self.vols[r.vol as usize];
            let waiting = vol.flush_waiters.contains(&k)
                || vol.commit.as_ref().is_some_and(|c| c.waiters.contains(&k));
            match r.stage {
                ReqStage::AwaitCommit if !waiting => {
                    return Err(format!(
                        "request {k} waits for a commit of {} but is in no round",
                        vol.rec.name
                    ));
                }
                ReqStage::Data if r.outstanding == 0 => {
                    return Err(format!(
                        "request {k} has no outstanding work but was not completed"
                    ));
                }
                _ => {}
            }
        }
        for p in &self.pools {
            if let Some(t) = &p.throttle {
                t.check(p.in_flight)
                    .map_err(|e| format!("pool {} throttle: {e}", p.cfg.name))?;
            }
        }
        Ok(())
    }
}

/// Who holds each chunk of each pool; a second claim on a chunk is the error.
struct Claims {
    owner: Vec<BTreeMap<u64, String>>,
}

impl Claims {
    fn new(pools: usize) -> Self {
        Claims {
            owner: vec![BTreeMap::new(); pools],
        }
    }

    fn claim(&mut self, pool: usize, c: u64, who: String) -> Result<(), String> {
        if pool >= self.owner.len() {
            return Err(format!("{who} names pool {pool}, which does not exist"));
        }
        if let Some(prev) = self.owner[pool].insert(c, who.clone()) {
            return Err(format!("pool {pool} chunk {c} is both {prev} and {who}"));
        }
        Ok(())
    }
}

/// A cached chunk's fast copy is on the fast pool and its slow slot where the volume's
/// provisioning puts it; the dirty count matches.
fn check_cache(v: &Volume) -> Result<(), String> {
    let r = &v.rec;
    let mut dirty = 0;
    for (c, slow, d) in v.cache.iter() {
        dirty += d as u64;
        let on_fast =
            c < v.chunks && matches!(v.map.get(c), ChunkLoc::At(p, _) if Some(p) == r.fast_pool);
        let slow_ok = match slow {
            ChunkLoc::Home => r.provisioning == Provisioning::Thick,
            ChunkLoc::At(p, _) => p == r.home_pool && r.provisioning == Provisioning::Thin,
            ChunkLoc::Unmapped => false,
        };
        if !on_fast || !slow_ok {
            return Err(format!(
                "volume {}: cached chunk {c} mapped at {:?} with slow slot {slow:?}",
                r.name,
                v.map.get(c.min(v.chunks.saturating_sub(1)))
            ));
        }
    }
    if dirty != v.cache.dirty_count() {
        return Err(format!(
            "volume {}: {dirty} dirty cached chunks but {} counted",
            r.name,
            v.cache.dirty_count()
        ));
    }
    Ok(())
}

/// Journal sequence numbers: durable, then in flight, then pending, with no gaps; the
/// ring is not overfull.
fn check_journal(v: &Volume) -> Result<(), String> {
    let r = &v.rec;
    // Journal sequence numbers: durable, then in flight, then pending, with no gaps.
    let in_flight = match v.commit.as_ref().map(|c| &c.work) {
        Some(CommitWork::Blocks { records, .. }) | Some(CommitWork::Checkpoint { records, .. }) => {
            records.len() as u64
        }
        _ => 0,
    };
    let expect = v.journal.durable_seq + in_flight + v.journal.pending.len() as u64 + 1;
    // An abandoned journal (a failed final commit at a stop) drops the records made
    // since, as a crash would: the gap is expected, and nothing is written past it.
    let gap_ok = v.journal.abandoned() && v.journal.next_seq > expect;
    if v.journal.next_seq != expect && !gap_ok {
        return Err(format!(
            "volume {}: next record {} but durable {} + in flight {} + pending {}",
            r.name,
            v.journal.next_seq,
            v.journal.durable_seq,
            in_flight,
            v.journal.pending.len()
        ));
    }
    if v.journal.used_blocks() > v.journal.ring_blocks {
        return Err(format!("volume {}: journal ring overfull", r.name));
    }
    Ok(())
}
