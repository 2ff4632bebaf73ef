//! Format, and the volumes a format or mount creates: their records, reserved chunks,
//! fresh journal headers and a thick volume's zeroed home region. `create.rs` reuses
//! `reserve_volume` for volumes created while the engine runs.

use super::*;

impl Engine {
    pub(super) fn format(&mut self, now: u64, out: &mut Outputs) {
        if let Some(s) = self.startup.as_mut() {
            s.formatting = true;
            s.phase = Phase::Writing;
        }
        // Crash-safe format: other pools get superblocks marked "formatting" now; the
        // metadata pool's superblock, written once everything else is durable, commits the
        // format; then the others are marked complete. An interrupted format is redone.
        self.superblocks = (0..self.pools.len())
            .map(|p| self.superblock_for(p, true))
            .collect();
        if let Err(e) = self.set_reserves() {
            return self.fail(e, out);
        }
        let cfgs = self.cfg.volumes.clone();
        let mut records = Vec::new();
        for (i, vc) in cfgs.iter().enumerate() {
            match self.create_volume(vc, i as u32) {
                Ok(r) => records.push(r),
                Err(e) => return self.fail(e, out),
            }
        }
        self.voltab.set_durable(VolumeTable {
            generation: 1,
            volumes: records,
            loans: Vec::new(),
        });
        let meta = self.cfg.meta_pool;
        for p in 0..self.pools.len() {
            if p != meta.0 as usize {
                let img = self.superblock_for(p, false).encode();
                self.startup_write(
                    now,
                    PoolId(p as u16),
                    SUPERBLOCK_BACKUP_OFFSET,
                    img.clone(),
                    out,
                );
                self.startup_write(now, PoolId(p as u16), SUPERBLOCK_OFFSET, img, out);
            }
        }
        let vt = self.voltab.durable().encode();
        self.startup_write(now, meta, VOLTAB_OFFSETS[0], vt.clone(), out);
        self.startup_write(now, meta, VOLTAB_OFFSETS[1], vt, out);
        for v in 0..self.vols.len() {
            self.write_fresh_headers(now, v, out);
        }
        // `Formatted` is said once these writes are durable (`check_phase_done`), not
        // now: a format waiting for space has not formatted anything yet.
        self.check_phase_done(now, out);
    }

    /// A new volume's journal: header slot 0 valid, slot 1 invalidated. A thick volume's
    /// home region is zeroed: never-written sectors must read as zeros, not as whatever
    /// the device held (timing-only simulation carries no data and skips it).
    fn write_fresh_headers(&mut self, now: u64, v: usize, out: &mut Outputs) {
        self.zero_thick_region(now, v, out);
        self.write_journal_headers(now, v, out);
    }

    /// Zero a thick volume's home region; whether there was one to zero.
    pub(super) fn zero_thick_region(&mut self, now: u64, v: usize, out: &mut Outputs) -> bool {
        let r = &self.vols[v].rec;
        let zeroed = r.provisioning == Provisioning::Thick && self.cfg.track_data;
        if zeroed {
            let cb = self.cfg.chunk_bytes;
            let (pool, off, len) = (
                r.home_pool,
                chunk_offset(r.home_base_chunk, cb),
                self.vols[v].chunks * cb,
            );
            self.startup_op(
                now,
                pool,
                DevKind::WriteZeroes,
                off,
                len,
                None,
                TAG_THICK | v as u32,
                out,
            );
        }
        zeroed
    }

    /// A new volume's journal header pair.
    pub(super) fn write_journal_headers(&mut self, now: u64, v: usize, out: &mut Outputs) {
        let j = &self.vols[v].journal;
        let (pool, off) = (j.pool, j.region_offset);
        let img = j.header.encode();
        self.startup_write(now, pool, off, img, out);
        self.startup_write(
            now,
            pool,
            off + BLOCK_BYTES,
            vec![0u8; BLOCK_BYTES as usize],
            out,
        );
    }

    /// Why start failed when a new thick volume's home region could not be zeroed. At
    /// mount that happens before the volume table records it, so nothing of it is kept;
    /// at format, the format is incomplete and is done again.
    pub(super) fn thick_zeroing_failed(&self, v: usize, e: Errno) -> String {
        let Some(vol) = self.vols.get(v) else {
            return "a metadata write failed".to_string();
        };
        let pool = &self.pools[vol.rec.home_pool.0 as usize].cfg.name;
        let bytes = vol.chunks * self.cfg.chunk_bytes;
        let cause = match e {
            Errno::NoSpc => "no space left on the device or the filesystem under it",
            _ => "the device failed",
        };
        format!(
            "thick volume {} could not be created: allocating its {bytes} bytes on pool \
             {pool} failed ({cause}). Nothing of it was recorded and the other volumes are \
             untouched: free space, make it thin (provisioning = \"thin\"), or remove it \
             from the configuration",
            vol.rec.name
        )
    }

    /// Reserve a new volume's journal (and home region if thick) and add it.
    pub(super) fn create_volume(
        &mut self,
        vc: &VolumeConfig,
        id: u32,
    ) -> Result<VolumeRecord, String> {
        let vol = self.reserve_volume(vc, id)?;
        let rec = vol.rec.clone();
        self.vols.push(vol);
        self.apply_configured_qos(self.vols.len() - 1);
        Ok(rec)
    }

    /// A new volume with on-disk id `id`, its journal (and home region if thick) taken
    /// from the allocators, as the next entry of `vols` (not added).
    pub(crate) fn reserve_volume(&mut self, vc: &VolumeConfig, id: u32) -> Result<Volume, String> {
        let cb = self.cfg.chunk_bytes;
        let chunks = vc.size_bytes.div_ceil(cb);
        let meta = self.cfg.meta_pool;
        let journal_chunks = self.cfg.journal_bytes.div_ceil(cb);
        let jfirst = self.pools[meta.0 as usize]
            .alloc
            .allocate_run(journal_chunks, 0, true)
            .ok_or_else(|| {
                format!(
                    "volume {}: no room for its {} journal chunks on pool {}",
                    vc.name, journal_chunks, self.cfg.pools[meta.0 as usize].name
                )
            })?;
        let home = vc.home_pool;
        let home_base_chunk = match vc.provisioning {
            Provisioning::Thick => match self.pools[home.0 as usize]
                .alloc
                .allocate_run(chunks, 0, false)
            {
                Some(first) => first,
                None => {
                    // Give the journal back: a volume created at run time must not leak it.
                    for c in jfirst..jfirst + journal_chunks {
                        self.pools[meta.0 as usize].alloc.release(c);
                    }
                    return Err(format!(
                        "volume {}: thick provisioning needs {} contiguous free chunks on pool {}",
                        vc.name, chunks, self.cfg.pools[home.0 as usize].name
                    ));
                }
            },
            // Spread thin volumes over the pool so each keeps some locality.
            Provisioning::Thin => {
                let before: u64 = self
                    .vols
                    .iter()
                    .filter(|v| v.rec.home_pool == home)
                    .map(|v| v.chunks)
                    .sum();
                before % self.pools[home.0 as usize].alloc.chunks()
            }
        };
        let rec = VolumeRecord {
            id,
            name: vc.name.clone(),
            size_bytes: vc.size_bytes,
            provisioning: vc.provisioning,
            placement: vc.placement.clone(),
            home_pool: home,
            fast_pool: vc.fast_pool,
            home_base_chunk,
            journal_pool: meta,
            journal_first_chunk: jfirst,
            journal_chunks: journal_chunks as u32,
            migration: None,
            migration_base_chunk: None,
            deleted: false,
        };
        let header = JournalHeader {
            volume_id: id,
            generation: 0,
            mount_generation: 1,
            checkpoint: None,
            checkpoint_seq: 0,
            mount_block_seq: 0,
            replay_block_seq: 0,
            replay_prev_crc: chain_seed(&self.cfg.system_uuid, id),
            stopped_clean: false,
        };
        let initial = if vc.provisioning == Provisioning::Thick {
            ChunkLoc::Home
        } else {
            ChunkLoc::Unmapped
        };
        Ok(self.volume_from(
            rec,
            ChunkMap::new(chunks, initial),
            ExtentMap::new(),
            header,
        ))
    }

    pub(crate) fn volume_from(
        &self,
        rec: VolumeRecord,
        map: ChunkMap,
        overlay: ExtentMap<Overlay>,
        header: JournalHeader,
    ) -> Volume {
        let cb = self.cfg.chunk_bytes;
        let journal = Journal::new(
            rec.journal_pool,
            chunk_offset(rec.journal_first_chunk, cb),
            rec.journal_chunks as u64 * cb,
            header,
        );
        let chunks = rec.size_bytes.div_ceil(cb);
        let log_override = self
            .cfg
            .volumes
            .iter()
            .find(|vc| vc.name == rec.name)
            .and_then(|vc| vc.log);
        let log = crate::log::VolLog::new(
            self.pools.len(),
            log_override,
            crate::log::max_extents_for(rec.size_bytes),
        );
        let cache = crate::cache::CacheTable::new(rec.home_pool);
        let mut v = Volume {
            id: VolumeId(self.vols.len() as u32),
            qos: Default::default(),
            chunks,
            rec,
            map,
            overlay,
            journal,
            activity: Default::default(),
            dirty_pools: 0,
            commit: None,
            flush_waiters: Vec::new(),
            checkpoint_wanted: false,
            stopped_clean_before_mount: false,
            stats: VolumeStats::default(),
            monitor: crate::monitor::Monitor::new(chunks),
            chunks_on: vec![0; self.pools.len()],
            promoting: 0,
            hot_candidates: Default::default(),
            promo: Default::default(),
            scan_cursor: 0,
            log,
            cache,
            writeback: Default::default(),
        };
        v.recount(self.pools.len());
        v
    }
}
