//! Recovery: each volume's checkpoint chain is read and loaded, its journal ring replayed
//! from the header's replay point until the block chain breaks, and the allocators rebuilt
//! from everything the volumes reference.

use super::*;

impl Engine {
    pub(super) fn read_chain_chunk(
        &mut self,
        now: u64,
        v: usize,
        pool: PoolId,
        chunk: u64,
        out: &mut Outputs,
    ) -> Result<(), String> {
        if pool.0 as usize >= self.pools.len()
            || chunk >= self.pools[pool.0 as usize].alloc.chunks()
        {
            return Err(format!(
                "volume {}: checkpoint points outside pool {}",
                self.vols[v].rec.name, pool.0
            ));
        }
        let cb = self.cfg.chunk_bytes;
        self.startup_read(
            now,
            pool,
            chunk_offset(chunk, cb),
            cb,
            TAG_CK | v as u32,
            out,
        );
        Ok(())
    }

    /// One chunk of a checkpoint chain arrived: check it, keep its payload, follow `next`.
    pub(super) fn chain_chunk(
        &mut self,
        now: u64,
        v: usize,
        data: &[u8],
        out: &mut Outputs,
    ) -> Result<(), String> {
        let name = self.vols[v].rec.name.clone();
        let id = self.vols[v].rec.id;
        let s = self.startup.as_mut().ok_or("no startup")?;
        let want_seq = s.headers[v].checkpoint_seq;
        let chain = &mut s.chains[v];
        let (h, payload) = CkptChunkHeader::decode(data)
            .ok_or_else(|| format!("volume {name}: checkpoint chunk {} is corrupt", chain.index))?;
        if h.volume_id != id || h.checkpoint_seq != want_seq || h.index != chain.index {
            return Err(format!(
                "volume {name}: checkpoint chain broken at chunk {}",
                chain.index
            ));
        }
        if let Some(here) = chain.next.take() {
            chain.chunks.push(here);
        }
        chain.payload.extend_from_slice(payload);
        chain.index += 1;
        chain.next = h.next;
        if let Some((pool, chunk)) = h.next {
            if chain.index > 1 << 20 {
                return Err(format!("volume {name}: checkpoint chain does not end"));
            }
            self.read_chain_chunk(now, v, pool, chunk, out)?;
        }
        Ok(())
    }

    pub(super) fn after_checkpoints(&mut self, now: u64, out: &mut Outputs) -> Result<(), String> {
        let mut s = self.startup.take().ok_or("no startup")?;
        for v in 0..self.vols.len() {
            self.rebuild_volume(&mut s, v, out)?;
        }
        self.rebuild_allocators()?;
        self.rebuild_segments()?;
        let created = self.add_configured_volumes(out)?;
        // Volumes created or grown at run time are in the table, not the configuration.
        // Earlier builds created volumes without checking this room: say so
        // rather than refuse to mount what they made.
        if let Err(e) = self.set_reserves() {
            out.events.push(EngineEvent::Warning {
                message: format!(
                    "{e} (volumes created while running took the room); new data is refused \
                     on that pool so checkpoints keep theirs"
                ),
            });
        }
        self.startup = Some(Startup {
            retry: Default::default(),
            phase: Phase::Allocating,
            outstanding: 0,
            error: None,
            formatting: false,
            mount_only: false,
            superblocks: Vec::new(),
            voltab: None,
            regions: Vec::new(),
            headers: Vec::new(),
            chains: Vec::new(),
            created: created.clone(),
            space: Default::default(),
        });
        let mut zeroing = false;
        for &v in &created {
            zeroing |= self.zero_thick_region(now, v, out);
        }
        if zeroing {
            self.check_phase_done(now, out);
            return Ok(());
        }
        self.write_mount_metadata(now, out)
    }

    /// Volume `v` from its checkpoint and the records after it.
    fn rebuild_volume(
        &mut self,
        s: &mut Startup,
        v: usize,
        out: &mut Outputs,
    ) -> Result<(), String> {
        let h = s.headers[v].clone();
        let chain = std::mem::take(&mut s.chains[v]);
        let name = self.vols[v].rec.name.clone();
        let chunks = self.vols[v].chunks;
        let thick = self.vols[v].rec.provisioning == Provisioning::Thick;
        let (map, overlay, cached) = if h.checkpoint.is_some() {
            decode_state_full(&chain.payload, chunks)
                .ok_or_else(|| format!("volume {name}: checkpoint contents are malformed"))?
        } else {
            (
                ChunkMap::new(
                    chunks,
                    if thick {
                        ChunkLoc::Home
                    } else {
                        ChunkLoc::Unmapped
                    },
                ),
                ExtentMap::new(),
                Vec::new(),
            )
        };
        let rec = self.vols[v].rec.clone();
        let mut vol = self.volume_from(rec, map, overlay, h.clone());
        for (c, slot) in cached {
            let (fast, slow) = (vol.map.get(c), crate::cache::decode_slot(slot));
            cache_chunk(self, &mut vol, c, fast, slow)
                .map_err(|e| format!("volume {name}: checkpoint: {e}"))?;
        }
        vol.id = VolumeId(v as u32);
        vol.journal.reach =
            crate::journal::reach::JournalReach::mounted(crate::give_back::volume_reach(&vol));
        vol.journal.checkpoint_chunks = chain.chunks;
        let region = s.regions[v].take().unwrap_or_default();
        self.replay(&mut vol, &region)?;
        if let Some(c) = vol.cache.foreign.first() {
            return Err(format!(
                "volume {name}: cached chunk {c} has its slow slot off the home pool, and no later record ends its caching"
            ));
        }
        vol.recount(self.pools.len());
        // Everything cached is dirty now (clean/dirty is not journaled).
        vol.stats.cache.dirty_at_mount = vol.cache.dirty_count();
        self.vols[v] = vol;
        self.thick_rehome_at_mount(v);
        let mapped = self.vols[v]
            .map
            .iter()
            .filter(|(_, l)| *l != ChunkLoc::Unmapped)
            .count() as u64;
        out.events.push(EngineEvent::Recovered {
            volume: name,
            records_replayed: self.vols[v].journal.replayed,
            checkpoint_seq: h.checkpoint_seq,
            mapped_chunks: mapped,
            cached_dirty_chunks: self.vols[v].stats.cache.dirty_at_mount,
        });
        Ok(())
    }

    /// Volumes the configuration names: resize or re-place the known ones, create the new
    /// ones (not those deleted at run time). Returns the created volumes' indexes.
    fn add_configured_volumes(&mut self, out: &mut Outputs) -> Result<Vec<usize>, String> {
        let known: Vec<String> = self.vols.iter().map(|v| v.rec.name.clone()).collect();
        let mut created = Vec::new();
        for vc in self.cfg.volumes.clone() {
            match known.iter().position(|n| *n == vc.name) {
                Some(i) => {
                    self.configured_size(i, vc.size_bytes, out)?;
                    let rec = &mut self.vols[i].rec;
                    if rec.provisioning != vc.provisioning {
                        out.events.push(EngineEvent::Warning {
                            message: format!(
                                "volume {}: configured {} but created {}; provisioning is \
                                 fixed when a volume is created, so it stays {}",
                                vc.name,
                                vc.provisioning.name(),
                                rec.provisioning.name(),
                                rec.provisioning.name()
                            ),
                        });
                    }
                    rec.placement = vc.placement.clone();
                    rec.fast_pool = vc.fast_pool;
                }
                None if self.deletes.tombstones.iter().any(|t| t.name == vc.name) => {
                    // Deleted with `ctl volume delete`: not created again empty under a
                    // name a VM may still be attached to by mistake.
                    out.events.push(EngineEvent::Warning {
                        message: format!(
                            "volume {} was deleted (ctl volume delete) but the configuration \
                             still names it: not created again; remove it from the \
                             configuration, or create it anew with ctl volume create",
                            vc.name
                        ),
                    });
                }
                None => {
                    let id = self
                        .voltab
                        .volumes()
                        .iter()
                        .map(|r| r.id + 1)
                        .max()
                        .unwrap_or(0)
                        .max(self.vols.len() as u32);
                    self.create_volume(&vc, id)?;
                    created.push(self.vols.len() - 1);
                    out.events.push(EngineEvent::VolumeCreated {
                        volume: vc.name.clone(),
                    });
                }
            }
        }
        Ok(created)
    }

    /// Apply the ring's valid block chain to a freshly loaded volume.
    fn replay(&self, vol: &mut Volume, region: &[u8]) -> Result<(), String> {
        let j = &vol.journal;
        let h = j.header.clone();
        let ring_blocks = j.ring_blocks;
        let mut seq = h.replay_block_seq;
        let mut prev = h.replay_prev_crc;
        let mut next_rec = h.checkpoint_seq + 1;
        let mut replayed = 0;
        for _ in 0..ring_blocks {
            let pos = (HEADER_SLOTS_BYTES + (seq % ring_blocks) * BLOCK_BYTES) as usize;
            let Some(buf) = region.get(pos..pos + BLOCK_BYTES as usize) else {
                break;
            };
            let Some(b) = Block::decode(buf) else { break };
            // Blocks past the last mount's replay end belong to that mount's generation;
            // before it, to earlier ones (that mount replayed them).
            let gen_ok = if seq >= h.mount_block_seq {
                b.mount_generation == h.mount_generation
            } else {
                b.mount_generation < h.mount_generation
            };
            if b.volume_id != vol.rec.id
                || !gen_ok
                || b.block_seq != seq
                || b.prev_crc != prev
                || b.first_record_seq != next_rec
            {
                break;
            }
            for r in &b.records {
                vol.journal.reach.note(r);
                apply_record(vol, self, r).map_err(|e| {
                    format!("volume {}: journal record {next_rec}: {e}", vol.rec.name)
                })?;
                next_rec += 1;
                replayed += 1;
            }
            prev = Block::crc_of(buf);
            seq += 1;
        }
        let j = &mut vol.journal;
        j.head = seq;
        j.tail = h.replay_block_seq;
        j.last_crc = prev;
        j.next_seq = next_rec;
        j.durable_seq = next_rec - 1;
        j.replayed = replayed;
        if j.used_blocks() * 2 > j.ring_blocks {
            vol.checkpoint_wanted = true;
        }
        Ok(())
    }

    /// After recovery, everything referenced is in use and everything else is free.
    fn rebuild_allocators(&mut self) -> Result<(), String> {
        let mut claims: Vec<(PoolId, u64, String)> = Vec::new();
        for (vi, v) in self.vols.iter().enumerate() {
            let r = &v.rec;
            for c in 0..r.journal_chunks as u64 {
                claims.push((
                    r.journal_pool,
                    r.journal_first_chunk + c,
                    format!("journal of {}", r.name),
                ));
            }
            for &(p, c) in &v.journal.checkpoint_chunks {
                claims.push((p, c, format!("checkpoint of {}", r.name)));
            }
            if r.provisioning == Provisioning::Thick {
                for c in 0..v.chunks {
                    claims.push((
                        r.home_pool,
                        r.home_base_chunk + c,
                        format!("home region of {}", r.name),
                    ));
                }
                // The new home region of its recorded migration (`jobs/migrate/thick.rs`).
                if let (Some(m), Some(b)) = (&r.migration, r.migration_base_chunk) {
                    for c in 0..v.chunks {
                        claims.push((
                            m.to,
                            b + c,
                            format!("new home region of {}'s migration", r.name),
                        ));
                    }
                }
            }
            for (c, loc) in v.map.iter() {
                // A chunk at its own slot of a region is claimed with the region.
                if let ChunkLoc::At(p, pc) = loc
                    && !self.own_slot(vi as u32, c, p, pc)
                {
                    claims.push((p, pc, format!("chunk {c} of {}", r.name)));
                }
            }
            // The slow slots of cached chunks (`cache.rs`).
            for (p, pc, c) in Engine::cache_claims(v) {
                claims.push((
                    p,
                    pc,
                    format!("slow slot of cached chunk {c} of {}", r.name),
                ));
            }
            // Destination chunks an interrupted migration wrote newest data into.
            for (p, pc) in crate::jobs::migrate::moved_chunks(v, self.cfg.chunk_bytes) {
                if self.in_thick_region(vi as u32, p, pc) {
                    continue;
                }
                claims.push((p, pc, format!("migration destination of {}", r.name)));
            }
        }
        claims.extend(self.log_claims()?);
        for (p, c, what) in claims {
            let pool = self
                .pools
                .get_mut(p.0 as usize)
                .ok_or_else(|| format!("{what} names pool {} which does not exist", p.0))?;
            if c >= pool.alloc.chunks() {
                return Err(format!(
                    "{what} lies beyond the end of pool {}",
                    self.cfg.pools[p.0 as usize].name
                ));
            }
            if !pool.alloc.mark_used(c) {
                return Err(format!(
                    "{what}: physical chunk {c} of pool {} is claimed twice",
                    self.cfg.pools[p.0 as usize].name
                ));
            }
        }
        Ok(())
    }
}

/// Whether `loc` names a chunk that exists.
fn check_loc(e: &Engine, loc: ChunkLoc) -> Result<(), String> {
    if let ChunkLoc::At(p, pc) = loc
        && (p.0 as usize >= e.pools.len() || pc >= e.pools[p.0 as usize].alloc.chunks())
    {
        return Err(format!(
            "maps to pool {} chunk {pc}, which does not exist",
            p.0
        ));
    }
    Ok(())
}

/// A cached chunk read from disk: its fast copy on the volume's fast pool, its slow slot
/// the home slot of a thick volume or a chunk of the home pool of a thin one.
fn check_cached(
    e: &Engine,
    vol: &Volume,
    c: u64,
    fast: ChunkLoc,
    slow: ChunkLoc,
) -> Result<(), String> {
    if c >= vol.map.len() {
        return Err(format!("cached chunk {c} beyond the volume"));
    }
    check_loc(e, fast)?;
    check_loc(e, slow)?;
    let thick = vol.rec.provisioning == Provisioning::Thick;
    let fast_ok = matches!(fast, ChunkLoc::At(p, _) if Some(p) == vol.rec.fast_pool);
    let slow_ok = match slow {
        ChunkLoc::Home => thick,
        ChunkLoc::At(p, _) => !thick && p == vol.rec.home_pool,
        ChunkLoc::Unmapped => false,
    };
    if !fast_ok || !slow_ok || !vol.cache.fits(c, slow) {
        return Err(format!(
            "cached chunk {c} at {fast:?} with slow slot {slow:?} does not fit the volume's pools"
        ));
    }
    Ok(())
}

/// A cached chunk from a checkpoint or a `Cache` record: mapped to its fast copy, and
/// dirty (clean/dirty is not journaled: everything cached is dirty at mount). A thin
/// volume's slow slot on another pool than the table's home is from before a migration
/// moved the home (it drained the cache first, `jobs/migrate/cache_drain.rs`): a later
/// record must end its caching (`CacheTable::foreign`, checked after replay).
fn cache_chunk(
    e: &Engine,
    vol: &mut Volume,
    c: u64,
    fast: ChunkLoc,
    slow: ChunkLoc,
) -> Result<(), String> {
    let thick = vol.rec.provisioning == Provisioning::Thick;
    if let ChunkLoc::At(p, _) = slow
        && !thick
        && p != vol.rec.home_pool
        && Some(p) != vol.rec.fast_pool
        && c < vol.map.len()
    {
        check_loc(e, fast)?;
        check_loc(e, slow)?;
        if !matches!(fast, ChunkLoc::At(f, _) if Some(f) == vol.rec.fast_pool) {
            return Err(format!(
                "cached chunk {c} at {fast:?} is not on the fast pool"
            ));
        }
        vol.map.set(c, fast);
        vol.cache.remove(c);
        vol.cache.foreign.insert(c);
        return Ok(());
    }
    check_cached(e, vol, c, fast, slow)?;
    vol.map.set(c, fast);
    vol.cache.insert(c, slow, true);
    Ok(())
}

/// Apply one record, checking it against the volume and the pools.
fn apply_record(vol: &mut Volume, e: &Engine, r: &Record) -> Result<(), String> {
    let size = vol.rec.size_bytes;
    match *r {
        Record::Map { chunk, entry } => {
            if chunk >= vol.map.len() {
                return Err(format!("chunk {chunk} beyond the volume"));
            }
            let loc = ChunkLoc::decode(entry);
            check_loc(e, loc)?;
            vol.map.set(chunk, loc);
            // A new mapping of a cached chunk ends its caching (eviction, trim).
            vol.cache.remove(chunk);
        }
        Record::Cache { chunk, fast, slow } => {
            let (fast, slow) = (ChunkLoc::decode(fast), crate::cache::decode_slot(slow));
            cache_chunk(e, vol, chunk, fast, slow)?;
        }
        Record::Overlay { start, end, value } => {
            if end > size {
                return Err("overlay beyond the volume".into());
            }
            vol.overlay.insert(start, end, value);
        }
        Record::OverlayClear { start, end } => {
            vol.overlay.remove(start, end);
        }
    }
    Ok(())
}

impl Engine {
    /// Mount: a configured volume whose size differs from the table's. A thin volume grows
    /// to a bigger configured size (the mount's table write records it; a crash before
    /// that leaves the old size). A smaller configured size is what an online resize
    /// leaves behind in an unedited file: the table's size stays, with a warning.
    fn configured_size(
        &mut self,
        v: usize,
        configured: u64,
        out: &mut Outputs,
    ) -> Result<(), String> {
        let vol = &mut self.vols[v];
        let on_disk = vol.rec.size_bytes;
        let name = vol.rec.name.clone();
        if configured == on_disk {
            return Ok(());
        }
        if configured < on_disk {
            out.events.push(EngineEvent::Warning {
                message: format!(
                    "volume {name}: {on_disk} bytes on disk (grown at run time) but {configured} \
                     configured; it stays {on_disk} bytes (a smaller configured size does not \
                     shrink it; ctl volume resize does): set size to {on_disk} in the \
                     configuration"
                ),
            });
            return Ok(());
        }
        if vol.rec.provisioning == crate::config::Provisioning::Thick {
            return Err(format!(
                "volume {name}: {on_disk} bytes on disk but {configured} configured; a thick \
                 volume cannot grow (its home region is one contiguous run)"
            ));
        }
        if configured > crate::resize::MAX_VOLUME_BYTES {
            return Err(format!(
                "volume {name}: {configured} bytes configured, more than the {} a volume may \
                 grow to",
                crate::resize::MAX_VOLUME_BYTES
            ));
        }
        let chunks = configured.div_ceil(self.cfg.chunk_bytes);
        vol.reserve_growth(chunks).map_err(|_| {
            format!("volume {name}: no memory for the mapping table of {configured} bytes")
        })?;
        vol.grow(configured, self.cfg.chunk_bytes);
        out.events.push(EngineEvent::VolumeResized {
            volume: name,
            size_bytes: configured,
        });
        Ok(())
    }
}
