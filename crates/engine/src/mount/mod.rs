//! Bringing pools up: format, or mount with recovery.
//!
//! Mount reads, in phases: every pool's superblock; the volume table (both slots, newest
//! valid wins); each volume's journal region (both header slots and the ring); each
//! volume's checkpoint chain. It then loads the checkpoint, replays the ring from the
//! header's replay point until the block chain breaks (a torn or stale block ends it
//! cleanly), rebuilds the allocators from what is referenced, creates volumes the
//! configuration adds, and writes new journal headers with the next mount generation.
//! Like everything else in the engine it only asks for I/O and reacts to completions.

use bytes::Bytes;

use crate::chunkmap::{ChunkLoc, ChunkMap};
use crate::config::{Placement, Provisioning, VolumeConfig};
use crate::engine::{Engine, EngineState, OpSpec, Owner, StartMode};
use crate::extents::ExtentMap;
use crate::journal::checkpoint::{CkptChunkHeader, decode_state_full};
use crate::journal::{Block, HEADER_SLOTS_BYTES, Journal, Record};
use crate::layout::{
    BLOCK_BYTES, JournalHeader, SUPERBLOCK_BACKUP_OFFSET, SUPERBLOCK_OFFSET, Superblock,
    VOLTAB_OFFSETS, VOLTAB_SLOT_BYTES, VolumeRecord, VolumeTable, chunk_offset,
    decode_superblock_pair, is_other_version,
};
use crate::overlay::Overlay;
use crate::shard::ShardId;
use crate::stats::VolumeStats;
use crate::types::{DevKind, EngineEvent, Errno, IoClass, Outputs, PoolId, VolumeId};
use crate::volume::Volume;
pub(crate) use state::{
    ChainRead, Phase, STARTUP_ATTEMPTS, Startup, StartupOp, TAG_CK, TAG_INDEX, TAG_JR, TAG_SB,
    TAG_THICK, TAG_VT, TAG_WRITE,
};

/// The CRC a fresh journal chain starts from: unique per system and volume, so blocks
/// left by an earlier format of the same device never continue it.
/// The refusal to mount a slice written by another shard layout.
fn shard_mismatch(pool: &str, on_disk: ShardId, configured: ShardId) -> String {
    if on_disk.count != configured.count {
        format!(
            "pool {pool}: formatted for {} shard(s), started with {}; a system keeps the shard count it was formatted with (nothing was written)",
            on_disk.count, configured.count
        )
    } else {
        format!(
            "pool {pool}: this slice belongs to shard {} of {}, not shard {} (nothing was written)",
            on_disk.index, on_disk.count, configured.index
        )
    }
}

fn chain_seed(system_uuid: &[u8; 16], volume_id: u32) -> u32 {
    let mut b = system_uuid.to_vec();
    b.extend_from_slice(&volume_id.to_le_bytes());
    b.extend_from_slice(b"journal");
    crc32c::crc32c(&b)
}

mod provision;
mod recover;
mod space;
pub(crate) mod state;

impl Engine {
    /// Bring the pools up. Completion is reported by `EngineEvent::Ready` or `Failed`.
    pub fn start(&mut self, now: u64, mode: StartMode, out: &mut Outputs) {
        self.last_now_ns = now;
        if self.state != EngineState::New {
            return;
        }
        self.state = EngineState::Starting;
        self.startup = Some(Startup {
            retry: Default::default(),
            phase: Phase::Superblocks,
            outstanding: 0,
            error: None,
            formatting: false,
            mount_only: mode == StartMode::Mount,
            superblocks: vec![None; self.pools.len()],
            voltab: None,
            regions: Vec::new(),
            headers: Vec::new(),
            chains: Vec::new(),
            created: Vec::new(),
            space: Default::default(),
        });
        match mode {
            StartMode::Format => self.format(now, out),
            StartMode::Auto | StartMode::Mount => {
                for p in 0..self.pools.len() {
                    self.startup_read(
                        now,
                        PoolId(p as u16),
                        SUPERBLOCK_OFFSET,
                        2 * BLOCK_BYTES,
                        TAG_SB | p as u32,
                        out,
                    );
                }
            }
        }
    }

    /// Queue a startup operation, remembering enough to retry it: a transient device
    /// error should not fail a format or a mount.
    #[allow(clippy::too_many_arguments)]
    fn startup_op(
        &mut self,
        now: u64,
        pool: PoolId,
        kind: DevKind,
        off: u64,
        len: u64,
        payload: Option<Bytes>,
        tag: u32,
        out: &mut Outputs,
    ) {
        let fua = kind == DevKind::Write;
        let spec = OpSpec::new(Owner::Startup { tag }, pool, kind, IoClass::Metadata);
        let spec = spec.at(off, len).fua(fua).payload(payload.clone());
        let key = self.queue_op(now, spec, out);
        if let Some(s) = self.startup.as_mut() {
            s.outstanding += 1;
            s.retry.insert(
                key,
                StartupOp {
                    pool,
                    kind,
                    off,
                    len,
                    payload,
                    tag,
                    attempts: 1,
                },
            );
        }
    }

    /// Queue a startup operation again (a retry); it is still counted as outstanding.
    fn startup_requeue(&mut self, now: u64, op: StartupOp, out: &mut Outputs) {
        let fua = op.kind == DevKind::Write;
        let owner = Owner::Startup { tag: op.tag };
        let spec = OpSpec::new(owner, op.pool, op.kind, IoClass::Metadata);
        let spec = spec.at(op.off, op.len).fua(fua).payload(op.payload.clone());
        let key = self.queue_op(now, spec, out);
        if let Some(s) = self.startup.as_mut() {
            s.retry.insert(key, op);
        }
    }

    /// When a start waiting for space tries again (for `Engine::next_deadline`).
    pub(crate) fn startup_retry_at(&self) -> Option<u64> {
        self.startup.as_ref()?.space.retry_at()
    }

    fn startup_read(
        &mut self,
        now: u64,
        pool: PoolId,
        off: u64,
        len: u64,
        tag: u32,
        out: &mut Outputs,
    ) {
        self.startup_op(now, pool, DevKind::Read, off, len, None, tag, out);
    }

    fn startup_write(
        &mut self,
        now: u64,
        pool: PoolId,
        off: u64,
        data: Vec<u8>,
        out: &mut Outputs,
    ) {
        let len = data.len() as u64;
        self.startup_op(
            now,
            pool,
            DevKind::Write,
            off,
            len,
            Some(data.into()),
            TAG_WRITE,
            out,
        );
    }

    fn superblock_for(&self, p: usize, complete: bool) -> Superblock {
        let pc = &self.cfg.pools[p];
        Superblock {
            system_uuid: self.cfg.system_uuid,
            pool_index: p as u16,
            pool_count: self.pools.len() as u16,
            name: pc.name.clone(),
            medium: pc.medium,
            capacity_bytes: pc.capacity_bytes,
            chunk_bytes: self.cfg.chunk_bytes,
            meta_pool: self.cfg.meta_pool.0,
            complete,
            shard: self.cfg.shard,
        }
    }

    /// Reserve room on the metadata pool for checkpoints that data may never take: for
    /// every volume its current chain, the next one, and one whose header write failed.
    /// A pool too small for journals plus that reserve is refused up front, because
    /// running out of checkpoint room later would stall every flush.
    pub(crate) fn set_reserves(&mut self) -> Result<(), String> {
        let cb = self.cfg.chunk_bytes;
        let (journals, reserve) = self.checkpoint_reserve(&self.reserve_inputs());
        let meta = self.cfg.meta_pool.0 as usize;
        let total = self.pools[meta].alloc.chunks();
        // Set even when it does not fit: data then gets no room rather than the
        // checkpoints' (the caller decides whether the misfit stops the start).
        self.pools[meta].alloc.set_reserve(reserve);
        if journals + reserve > total {
            return Err(format!(
                "the metadata pool {} is too small: its journals and checkpoint reserve need {} bytes, it has {}",
                self.cfg.pools[meta].name,
                crate::layout::DATA_START_BYTES + (journals + reserve) * cb,
                self.cfg.pools[meta].capacity_bytes
            ));
        }
        Ok(())
    }

    /// Where volume `v` is in `reserve_inputs`: that list leaves out the hollow slots of
    /// volumes deleted since the mount, so a volume after one sits earlier in it than its
    /// index (DST seed 345 panicked growing such a volume once DST deleted any volume).
    pub(crate) fn reserve_position(&self, v: usize) -> usize {
        self.vols[..v.min(self.vols.len())]
            .iter()
            .filter(|x| !x.rec.deleted)
            .count()
    }

    /// (size, logs) of every volume the reserve covers: the mounted ones still live, then
    /// those the configuration adds (a volume created or grown at run time is in the
    /// table, not necessarily in the configuration).
    pub(crate) fn reserve_inputs(&self) -> Vec<(u64, bool, bool)> {
        let any_log = self.cfg.pools.iter().any(|p| p.log);
        // A volume deleted while running keeps a hollow slot until the next start; it
        // will never write a checkpoint again.
        // A `hot` or pinned volume keeping homes (`tier_home.rs`) checkpoints its table
        // like a cache.
        let keep_home = self.cfg.tiering.keep_home;
        let caches = |p: &Placement, fast: Option<crate::types::PoolId>| {
            matches!(p, Placement::Cache { .. })
                || (keep_home
                    && fast.is_some()
                    && matches!(p, Placement::Hot { .. } | Placement::Pinned))
        };
        let mut out: Vec<(u64, bool, bool)> = (self.vols.iter())
            .filter(|v| !v.rec.deleted)
            .map(|v| {
                (
                    v.rec.size_bytes,
                    v.log.enabled.unwrap_or(any_log),
                    caches(&v.rec.placement, v.rec.fast_pool),
                )
            })
            .collect();
        for vc in &self.cfg.volumes {
            if !self.vols.iter().any(|v| v.rec.name == vc.name) {
                out.push((
                    vc.size_bytes,
                    vc.log.unwrap_or(any_log),
                    caches(&vc.placement, vc.fast_pool),
                ));
            }
        }
        out
    }

    /// Chunks of the metadata pool that journals take, and the checkpoint reserve, for
    /// volumes of these (size, logs, caches).
    pub(crate) fn checkpoint_reserve(&self, volumes: &[(u64, bool, bool)]) -> (u64, u64) {
        let cb = self.cfg.chunk_bytes;
        let mut reserve = 4;
        let mut journals = 0;
        for &(size_bytes, logs, caches) in volumes {
            let chunks = size_bytes.div_ceil(cb);
            // A logging volume's checkpoint also carries its overlay, which is bounded.
            let overlay = if logs {
                2 * crate::log::max_extents_for(size_bytes) * 32
            } else {
                0
            };
            // A `cache` volume's also carries its cached chunks, 16 bytes each.
            let cached = if caches { 16 + chunks * 16 } else { 0 };
            reserve += 3 * crate::journal::checkpoint::pieces_needed(
                64 + chunks * 8 + overlay + cached,
                cb,
            );
            journals += self.cfg.journal_bytes.div_ceil(cb);
        }
        (journals, reserve)
    }

    pub(crate) fn startup_io_done(
        &mut self,
        now: u64,
        key: usize,
        tag: u32,
        result: Result<(), Errno>,
        data: Option<Bytes>,
        out: &mut Outputs,
    ) {
        let Some(s) = self.startup.as_mut() else {
            return;
        };
        // A retried or parked operation stays in `outstanding`: its phase waits for it.
        if let Some(op) = s.retry.remove(&key) {
            if space::waits_for_space(&op, result) {
                return self.startup_park_nospace(now, op, out);
            }
            if result.is_err() && op.attempts < STARTUP_ATTEMPTS {
                let op = StartupOp {
                    attempts: op.attempts + 1,
                    ..op
                };
                return self.startup_requeue(now, op, out);
            }
        }
        if result.is_ok() {
            self.startup_space_ok(out);
        }
        let Some(s) = self.startup.as_mut() else {
            return;
        };
        s.outstanding -= 1;
        let idx = (tag & TAG_INDEX) as usize;
        if let Err(e) = result
            && s.error.is_none()
        {
            let why = match tag & !TAG_INDEX {
                TAG_WRITE => "a metadata write failed".to_string(),
                TAG_THICK => self.thick_zeroing_failed(idx, e),
                _ => "a metadata read failed".to_string(),
            };
            if let Some(s) = self.startup.as_mut() {
                s.error = Some(why);
            }
        }
        let Some(s) = self.startup.as_mut() else {
            return;
        };
        if result.is_ok() {
            match tag & !TAG_INDEX {
                TAG_SB => s.superblocks[idx] = data,
                TAG_VT => s.voltab = data,
                TAG_JR => s.regions[idx] = data,
                TAG_CK => {
                    if let Some(d) = data
                        && let Err(e) = self.chain_chunk(now, idx, &d, out)
                        && let Some(s) = self.startup.as_mut()
                    {
                        s.error.get_or_insert(e);
                    }
                }
                _ => {}
            }
        }
        self.check_phase_done(now, out);
    }

    fn check_phase_done(&mut self, now: u64, out: &mut Outputs) {
        let Some(s) = self.startup.as_ref() else {
            return;
        };
        if s.outstanding > 0 {
            return;
        }
        if let Some(e) = s.error.clone() {
            self.startup = None;
            return self.fail(e, out);
        }
        let step = match s.phase {
            Phase::Writing => {
                if let Some(s) = self.startup.as_mut() {
                    s.phase = Phase::Flushing;
                }
                for p in 0..self.pools.len() {
                    self.startup_op(
                        now,
                        PoolId(p as u16),
                        DevKind::Flush,
                        0,
                        0,
                        None,
                        TAG_WRITE,
                        out,
                    );
                }
                Ok(())
            }
            Phase::Flushing if s.formatting => {
                let meta = self.cfg.meta_pool;
                if let Some(s) = self.startup.as_mut() {
                    s.phase = Phase::CommitMeta;
                }
                let img = self.superblock_for(meta.0 as usize, true).encode();
                self.startup_write(now, meta, SUPERBLOCK_OFFSET, img, out);
                Ok(())
            }
            Phase::CommitMeta => {
                if let Some(s) = self.startup.as_mut() {
                    s.phase = Phase::CommitOthers;
                }
                for p in 0..self.pools.len() {
                    if p != self.cfg.meta_pool.0 as usize {
                        let img = self.superblock_for(p, true).encode();
                        self.startup_write(now, PoolId(p as u16), SUPERBLOCK_OFFSET, img, out);
                    }
                }
                self.check_phase_done(now, out);
                Ok(())
            }
            Phase::Flushing | Phase::CommitOthers => {
                if s.formatting {
                    out.events.push(EngineEvent::Formatted {
                        pools: self.pools.len(),
                        volumes: self.vols.len(),
                    });
                }
                self.startup = None;
                self.state = EngineState::Ready;
                out.events.push(EngineEvent::Ready);
                self.arm_tier_timer(now);
                // A restart with borrowed runs looks at them a hold from now, not only
                // once a VM request comes (which may be never on this shard).
                self.give_back_arm(now);
                self.resume_migrations(now, out);
                Ok(())
            }
            Phase::Allocating => self.write_mount_metadata(now, out),
            Phase::Superblocks => self.after_superblocks(now, out),
            Phase::VolumeTable => self.after_volume_table(now, out),
            Phase::Journals => self.after_journals(now, out),
            Phase::Checkpoints => self.after_checkpoints(now, out),
        };
        if let Err(e) = step {
            self.startup = None;
            self.fail(e, out);
        }
    }

    fn after_superblocks(&mut self, now: u64, out: &mut Outputs) -> Result<(), String> {
        let s = self.startup.as_mut().ok_or("no startup")?;
        let mount_only = s.mount_only;
        let bufs = std::mem::take(&mut s.superblocks);
        let decoded: Vec<Result<Superblock, String>> = bufs
            .iter()
            .map(|b| decode_superblock_pair(b.as_deref().unwrap_or(&[])))
            .collect();
        let names = |pred: &dyn Fn(&Result<Superblock, String>) -> bool| -> Vec<String> {
            decoded
                .iter()
                .enumerate()
                .filter(|(_, d)| pred(d))
                .map(|(i, _)| self.cfg.pools[i].name.clone())
                .collect()
        };
        let is_blank =
            |d: &Result<Superblock, String>| matches!(d, Err(e) if e.contains("bad magic"));
        let meta = self.cfg.meta_pool.0 as usize;
        // Never format over a system another version wrote (an upgrade or a downgrade).
        if let Some((i, Err(e))) = decoded
            .iter()
            .enumerate()
            .find(|(_, d)| matches!(d, Err(e) if is_other_version(e)))
        {
            return Err(format!(
                "pool {}: {e}: it holds a tiervisor system of another format version; refusing to format over it (use the tiervisor release that wrote it)",
                self.cfg.pools[i].name
            ));
        }
        // The metadata pool's superblock is written last by a format and never again:
        // if it is missing or torn, the format never finished, and is redone unless some
        // other pool holds a completed system.
        if !matches!(&decoded[meta], Ok(sb) if sb.complete) {
            let holding = names(&|d| matches!(d, Ok(sb) if sb.complete));
            if holding.is_empty() && mount_only && decoded.iter().all(is_blank) {
                return Err(format!(
                    "no pool holds a tiervisor system (pools {} are blank) and formatting was not asked for",
                    names(&is_blank).join(", ")
                ));
            }
            if holding.is_empty() {
                self.format(now, out);
                return Ok(());
            }
            let why = match &decoded[meta] {
                Err(e) => e.clone(),
                Ok(_) => "superblock of an unfinished format".into(),
            };
            return Err(format!(
                "the metadata pool {} has no usable superblock ({why}) but pool(s) {} hold a formatted system: refusing to format over existing data",
                self.cfg.pools[meta].name,
                holding.join(", ")
            ));
        }
        let blank = names(&is_blank);
        if !blank.is_empty() {
            return Err(format!(
                "pool(s) {} have no tiervisor superblock but the metadata pool {} does: a pool is missing or was overwritten",
                blank.join(", "),
                self.cfg.pools[meta].name
            ));
        }
        let mut sbs = Vec::new();
        for (i, d) in decoded.into_iter().enumerate() {
            let sb = d.map_err(|e| format!("pool {}: {e}", self.cfg.pools[i].name))?;
            check_superblock(&self.cfg, i, &sb, sbs.first())?;
            sbs.push(sb);
        }
        self.cfg.system_uuid = sbs[0].system_uuid;
        self.superblocks = sbs;
        self.set_reserves()?;
        let s = self.startup.as_mut().ok_or("no startup")?;
        s.phase = Phase::VolumeTable;
        self.startup_read(
            now,
            self.cfg.meta_pool,
            VOLTAB_OFFSETS[0],
            2 * VOLTAB_SLOT_BYTES,
            TAG_VT,
            out,
        );
        Ok(())
    }

    fn after_volume_table(&mut self, now: u64, out: &mut Outputs) -> Result<(), String> {
        let s = self.startup.as_mut().ok_or("no startup")?;
        let buf = s
            .voltab
            .take()
            .ok_or("volume table read returned no data")?;
        let slot = VOLTAB_SLOT_BYTES as usize;
        let a = buf.get(..slot).and_then(VolumeTable::decode);
        let b = buf.get(slot..2 * slot).and_then(VolumeTable::decode);
        let table = match (a, b) {
            (Some(a), Some(b)) => {
                if a.generation >= b.generation {
                    a
                } else {
                    b
                }
            }
            (Some(t), None) | (None, Some(t)) => t,
            (None, None) => {
                return Err(
                    "the volume table is unreadable (both copies fail their checksum)".into(),
                );
            }
        };
        let cb = self.cfg.chunk_bytes;
        // Deleted volumes (`delete.rs`) own nothing and get no index: their tombstones are
        // kept aside and written after the volumes, as `table_records` orders them.
        let (tombstones, live): (Vec<_>, Vec<_>) =
            table.volumes.iter().cloned().partition(|r| r.deleted);
        let tombstones = crate::delete::tombstones_to_keep(tombstones, &live, &self.cfg.volumes);
        for (i, r) in live.into_iter().enumerate() {
            let chunks = r.size_bytes.div_ceil(cb);
            let map = ChunkMap::new(chunks, ChunkLoc::Unmapped);
            let header = JournalHeader::default();
            let v = self.volume_from(r, map, ExtentMap::new(), header);
            self.vols.push(v);
            debug_assert_eq!(self.vols.len(), i + 1);
            self.apply_configured_qos(i);
        }
        self.deletes.tombstones = tombstones;
        let volumes = self.table_records();
        self.voltab.set_durable(VolumeTable {
            generation: table.generation,
            volumes,
            loans: table.loans,
        });
        self.mount_loans()?;
        let n = self.vols.len();
        let s = self.startup.as_mut().ok_or("no startup")?;
        s.phase = Phase::Journals;
        s.regions = vec![None; n];
        s.chains = (0..n).map(|_| ChainRead::default()).collect();
        for v in 0..n {
            let r = &self.vols[v].rec;
            let (pool, off, len) = (
                r.journal_pool,
                chunk_offset(r.journal_first_chunk, cb),
                r.journal_chunks as u64 * cb,
            );
            self.startup_read(now, pool, off, len, TAG_JR | v as u32, out);
        }
        if n == 0 {
            return self.after_journals(now, out);
        }
        Ok(())
    }

    fn after_journals(&mut self, now: u64, out: &mut Outputs) -> Result<(), String> {
        let n = self.vols.len();
        let mut headers = Vec::with_capacity(n);
        for v in 0..n {
            let s = self.startup.as_ref().ok_or("no startup")?;
            let region = s.regions[v]
                .as_ref()
                .ok_or("journal region read returned no data")?;
            let name = &self.vols[v].rec.name;
            let id = self.vols[v].rec.id;
            let slot = |i: usize| {
                region
                    .get(i * BLOCK_BYTES as usize..)
                    .and_then(JournalHeader::decode)
                    .filter(|h| h.volume_id == id)
            };
            let h = match (slot(0), slot(1)) {
                (Some(a), Some(b)) => {
                    if a.generation >= b.generation {
                        a
                    } else {
                        b
                    }
                }
                (Some(h), None) | (None, Some(h)) => h,
                (None, None) => {
                    return Err(format!(
                        "volume {name}: journal header unreadable (both copies fail their checksum)"
                    ));
                }
            };
            headers.push(h);
        }
        let s = self.startup.as_mut().ok_or("no startup")?;
        s.phase = Phase::Checkpoints;
        s.headers = headers.clone();
        for (v, h) in headers.iter().enumerate() {
            if let Some((pool, chunk)) = h.checkpoint {
                if let Some(s) = self.startup.as_mut() {
                    s.chains[v].next = Some((pool, chunk));
                }
                self.read_chain_chunk(now, v, pool, chunk, out)?;
            }
        }
        self.check_phase_done(now, out);
        Ok(())
    }

    /// Mount: record the volumes the configuration adds and start a new mount generation
    /// in every journal.
    fn write_mount_metadata(&mut self, now: u64, out: &mut Outputs) -> Result<(), String> {
        let s = self.startup.as_mut().ok_or("no startup")?;
        s.phase = Phase::Writing;
        let created = std::mem::take(&mut s.created);
        let table = VolumeTable {
            generation: self.voltab.durable().generation + 1,
            volumes: self.table_records(),
            loans: self.voltab.loans().to_vec(),
        };
        if table.volumes != self.voltab.volumes() {
            let off = VOLTAB_OFFSETS[(table.generation % 2) as usize];
            let img = table.encode();
            self.voltab.set_durable(table);
            self.startup_write(now, self.cfg.meta_pool, off, img, out);
        }
        let keep_marker = self.bug_is(crate::inject::InjectedBug::CleanStopMarkerKept);
        for v in 0..self.vols.len() {
            if created.contains(&v) {
                // No earlier process served it: nothing it acknowledged can be missing.
                self.vols[v].stopped_clean_before_mount = true;
                self.write_journal_headers(now, v, out);
                continue;
            }
            let vol = &mut self.vols[v];
            vol.stopped_clean_before_mount = vol.journal.header.stopped_clean;
            // New mount generation: blocks written from now on never chain onto stale ones.
            let j = &mut vol.journal;
            let mut h = j.header.clone();
            h.generation += 1;
            h.mount_generation += 1;
            h.mount_block_seq = j.head;
            // This run may crash: until its own stop marks it, the volume is not clean.
            h.stopped_clean &= keep_marker;
            let off = j.next_header_offset();
            let pool = j.pool;
            j.header = h.clone();
            self.startup_write(now, pool, off, h.encode(), out);
        }
        self.check_phase_done(now, out);
        Ok(())
    }
}

/// A decoded superblock of pool `i` against the configuration and the first pool's.
fn check_superblock(
    cfg: &crate::EngineConfig,
    i: usize,
    sb: &Superblock,
    first: Option<&Superblock>,
) -> Result<(), String> {
    let pc = &cfg.pools[i];
    if sb.name != pc.name
        || sb.pool_index as usize != i
        || sb.pool_count as usize != cfg.pools.len()
    {
        return Err(format!(
            "pool {}: superblock says it is pool {:?} ({} of {}); the configuration lists pools in a different order or set",
            pc.name, sb.name, sb.pool_index, sb.pool_count
        ));
    }
    // Before geometry: a slice of another shard count has another capacity too,
    // and the count is what the operator must be told about.
    if sb.shard != cfg.shard {
        return Err(shard_mismatch(&pc.name, sb.shard, cfg.shard));
    }
    if sb.chunk_bytes != cfg.chunk_bytes {
        return Err(format!(
            "pool {}: formatted with {} byte chunks, configured {}",
            pc.name, sb.chunk_bytes, cfg.chunk_bytes
        ));
    }
    if sb.capacity_bytes != pc.capacity_bytes {
        return Err(format!(
            "pool {}: formatted with {} bytes, configured {}; resizing is not supported",
            pc.name, sb.capacity_bytes, pc.capacity_bytes
        ));
    }
    if sb.meta_pool != cfg.meta_pool.0 {
        return Err(format!("pool {}: metadata pool mismatch", pc.name));
    }
    if let Some(first) = first
        && first.system_uuid != sb.system_uuid
    {
        return Err(format!(
            "pool {} belongs to a different tiervisor system than pool {}",
            pc.name, cfg.pools[0].name
        ));
    }
    Ok(())
}
