//! A running job is recorded in its volume's entry of the volume table (written when it
//! starts and when it ends, like the home pool after a pivot), so that after a crash the
//! mount starts it again with the same scheme and parameters. What it resumes from is
//! what is durable: LR's and SLR's `Moved` entries and switched chunks (adopted, never
//! copied over), and the map, which names the source for every other chunk: DBT's,
//! mirror's and AIO's copies are referenced by nothing durable before the pivot, so their
//! copy starts over. A table without the entry (older tables: the bytes are zero) means no
//! job; a job whose start was not yet durable at the crash is not resumed. A job that
//! cannot start again is dropped (a thin volume's) or, for a thick volume, which holds a
//! reserved region, ended at mount (`end_unresumable_thick_job`).

use super::{
    CopyPriority, DEFAULT_COPY_WINDOW_CHUNKS, MAX_COPY_WINDOW_CHUNKS, MigrationParams, Scheme,
    SchemeChoice,
};
use crate::codec::{Dec, Enc};
use crate::engine::Engine;
use crate::types::{EngineEvent, Outputs, PoolId, VolumeId};

/// Encode a volume's recorded job: a tag byte (0: none; 1: a job; 2: a thick volume's
/// job, followed after the parameters by the first chunk of the new home region it
/// reserved), then the copy priority (0 background, 1 equal) and the copy window in chunks
/// (a byte). Tags 0 and 1 are what tables written before thick migration hold; the
/// priority and window bytes are the entry's zero padding in tables written before them,
/// and so read as background and, for the window, as the default (what those jobs ran
/// with).
pub(crate) fn encode_job(e: &mut Enc, job: Option<&MigrationParams>, base_chunk: Option<u64>) {
    let Some(p) = job else {
        e.u8(0);
        return;
    };
    let scheme = match p.scheme {
        SchemeChoice::Fixed(s) => Scheme::ALL.iter().position(|&x| x == s).unwrap_or(0) as u8,
        SchemeChoice::Auto => u8::MAX,
    };
    e.u8(if base_chunk.is_some() { 2 } else { 1 })
        .u16(p.to.0)
        .u8(scheme);
    e.u64(p.rate_bytes_per_s)
        .u64(p.granularity_bytes)
        .u64(p.buffer_bytes)
        .u32(p.dbt_max_passes)
        .u32(p.aio_threshold)
        .u64(p.aio_delay_ns)
        .u64(p.gamma.to_bits());
    if let Some(b) = base_chunk {
        e.u64(b);
    }
    e.u8(match p.copy_priority {
        CopyPriority::Background => 0,
        CopyPriority::Equal => 1,
    });
    // Validated at the start to 1..=MAX_COPY_WINDOW_CHUNKS, which fits a byte.
    e.u8(u8::try_from(p.copy_window_chunks).unwrap_or(u8::MAX));
}

/// A decoded job record: the job's parameters, and a thick volume's new region.
type Decoded = (Option<MigrationParams>, Option<u64>);

/// Decode what `encode_job` wrote: `None` if the bytes are not a job record.
pub(crate) fn decode_job(d: &mut Dec) -> Option<Decoded> {
    let thick = match d.u8()? {
        0 => return Some((None, None)),
        1 => false,
        2 => true,
        _ => return None,
    };
    let to = PoolId(d.u16()?);
    let scheme = match d.u8()? {
        u8::MAX => SchemeChoice::Auto,
        i => SchemeChoice::Fixed(*Scheme::ALL.get(i as usize)?),
    };
    let mut params = MigrationParams {
        to,
        scheme,
        rate_bytes_per_s: d.u64()?,
        granularity_bytes: d.u64()?,
        buffer_bytes: d.u64()?,
        dbt_max_passes: d.u32()?,
        aio_threshold: d.u32()?,
        aio_delay_ns: d.u64()?,
        gamma: f64::from_bits(d.u64()?),
        copy_priority: CopyPriority::Background,
        copy_window_chunks: DEFAULT_COPY_WINDOW_CHUNKS,
    };
    let base = if thick { Some(d.u64()?) } else { None };
    params.copy_priority = match d.u8()? {
        0 => CopyPriority::Background,
        1 => CopyPriority::Equal,
        _ => return None,
    };
    params.copy_window_chunks = match d.u8()? {
        0 => DEFAULT_COPY_WINDOW_CHUNKS,
        w => u32::from(w).min(MAX_COPY_WINDOW_CHUNKS),
    };
    Some((Some(params), base))
}

impl Engine {
    /// Record (or clear) volume `v`'s job in the volume table, with a thick volume's new
    /// home region (its first chunk on the destination).
    pub(crate) fn record_job(
        &mut self,
        now: u64,
        v: u32,
        job: Option<MigrationParams>,
        base_chunk: Option<u64>,
        out: &mut Outputs,
    ) {
        let rec = &mut self.vols[v as usize].rec;
        rec.migration_base_chunk = job.as_ref().and(base_chunk);
        rec.migration = job;
        self.write_volume_table(now, out);
    }

    /// At mount: start again every job the volume table records.
    pub(crate) fn resume_migrations(&mut self, now: u64, out: &mut Outputs) {
        for v in 0..self.vols.len() as u32 {
            let Some(params) = self.vols[v as usize].rec.migration.clone() else {
                continue;
            };
            let name = self.vols[v as usize].rec.name.clone();
            match self.try_start_migration(now, VolumeId(v), params.clone(), out) {
                Ok(_) => out.events.push(EngineEvent::Warning {
                    message: format!("volume {name}: resumed its migration after a restart"),
                }),
                Err(e) if self.vols[v as usize].rec.migration_base_chunk.is_some() => {
                    self.end_unresumable_thick_job(now, v, params, &e.to_string(), out);
                }
                Err(e) => {
                    out.events.push(EngineEvent::Warning {
                        message: format!(
                            "volume {name}: its migration cannot resume ({e}); the volume stays where its map says"
                        ),
                    });
                    self.record_job(now, v, None, None, out);
                }
            }
        }
    }
}

impl Engine {
    /// At mount: thick volume `v`'s recorded job cannot start again (`why`: the log
    /// enabled on the volume since, its destination now its fast pool). Its new
    /// region must not stay reserved with no job to finish or cancel it, so:
    ///
    /// - if its pivot was durable (every chunk already in the new region, nothing
    ///   `Moved`), the job completes: only the table write naming the new home was left,
    ///   and copying the whole volume back would undo a move that is done;
    /// - otherwise it is cancelled as `ctl migrate cancel` would: LR's switched chunks and
    ///   LR/SLR `Moved` ranges in the region are copied back to their home slots, and the
    ///   region is freed once the table write clearing the record is durable (a power loss
    ///   before that mounts the record again and cancels again). The refusals are about
    ///   copying into the destination; a cancel only copies back home, which they allow.
    fn end_unresumable_thick_job(
        &mut self,
        now: u64,
        v: u32,
        params: MigrationParams,
        why: &str,
        out: &mut Outputs,
    ) {
        let name = self.vols[v as usize].rec.name.clone();
        let pool = self.cfg.pools[params.to.0 as usize].name.clone();
        // Tables record the scheme `auto` chose; `Lr` is the safest guess at an `auto`
        // an older table might hold (its cancel sweeps for late destination writes).
        let scheme = match params.scheme {
            SchemeChoice::Fixed(s) => s,
            SchemeChoice::Auto => Scheme::Lr,
        };
        let to = params.to;
        let mut job = self.new_job(now, v, params, scheme, format!("cannot resume: {why}"));
        job.thick_base = self.vols[v as usize].rec.migration_base_chunk;
        if self.nothing_to_move(v, to) {
            out.events.push(EngineEvent::Warning {
                message: format!(
                    "volume {name}: its migration to pool {pool} cannot resume ({why}), but its pivot was durable: pool {pool} is its home now"
                ),
            });
            self.rehome_only(now, job, out);
            return;
        }
        out.events.push(EngineEvent::Warning {
            message: format!(
                "volume {name}: its migration to pool {pool} cannot resume ({why}); cancelled: the volume stays in its home region, and the region reserved on pool {pool} is freed"
            ),
        });
        self.adopt_moved(&mut job);
        self.adopt_thick_slots(&mut job);
        let rate = job.params.rate_bytes_per_s;
        job.bucket
            .fill(now, (rate / 4).max(2 * self.cfg.chunk_bytes));
        job.cancel_wanted = true;
        self.migrations.finished.remove(&v);
        self.migrations.jobs.insert(v, job);
        self.migration_step(now, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What tables written before thick migration hold: tag 1 and the parameters.
    fn old_format(p: &MigrationParams) -> Vec<u8> {
        let mut e = Enc::with_capacity(64);
        e.u8(1).u16(p.to.0).u8(2);
        e.u64(p.rate_bytes_per_s)
            .u64(p.granularity_bytes)
            .u64(p.buffer_bytes)
            .u32(p.dbt_max_passes)
            .u32(p.aio_threshold)
            .u64(p.aio_delay_ns)
            .u64(p.gamma.to_bits());
        e.pad_to(80);
        e.seal(84)
    }

    #[test]
    fn an_old_job_record_decodes_and_a_thin_job_is_written_as_before() {
        let p = MigrationParams {
            scheme: SchemeChoice::Fixed(Scheme::Lr),
            ..MigrationParams::new(PoolId(3))
        };
        let old = old_format(&p);
        let (params, base) = decode_job(&mut Dec::new(&old)).unwrap();
        assert_eq!((params, base), (Some(p.clone()), None));
        let mut e = Enc::with_capacity(64);
        encode_job(&mut e, Some(&p), None);
        e.pad_to(80);
        let b = e.seal(84);
        // The old encoding, then the priority byte (0: background) and the window byte.
        assert_eq!(
            b[..52],
            old[..52],
            "a thin volume's job keeps the old encoding"
        );
        assert_eq!(b[52..54], [0, 16]);
        // A thick volume's job is tagged 2 and carries its new region.
        let mut e = Enc::with_capacity(64);
        encode_job(&mut e, Some(&p), Some(77));
        let b = e.seal(84);
        assert_eq!(b[0], 2);
        assert_eq!(decode_job(&mut Dec::new(&b)).unwrap(), (Some(p), Some(77)));
        let mut bad = b.clone();
        bad[0] = 3;
        assert!(decode_job(&mut Dec::new(&bad)).is_none());
    }

    /// `p`'s job record with `base` in a sealed 84-byte slot, checked to decode to itself.
    fn sealed_round_trip(p: &MigrationParams, base: Option<u64>) -> Vec<u8> {
        let mut e = Enc::with_capacity(64);
        encode_job(&mut e, Some(p), base);
        e.pad_to(80);
        let b = e.seal(84);
        assert_eq!(
            decode_job(&mut Dec::new(&b)).unwrap(),
            (Some(p.clone()), base)
        );
        b
    }

    /// The copy priority rides in the byte after the job (zero padding in older tables,
    /// so they read as background), for thin and thick jobs alike.
    #[test]
    fn the_copy_priority_is_recorded_after_the_job() {
        for base in [None, Some(77)] {
            let p = MigrationParams {
                scheme: SchemeChoice::Fixed(Scheme::Dbt),
                copy_priority: CopyPriority::Equal,
                ..MigrationParams::new(PoolId(1))
            };
            let b = sealed_round_trip(&p, base);
            // An unknown priority is not a job record.
            let at = if base.is_some() { 60 } else { 52 };
            let mut bad = b.clone();
            bad[at] = 2;
            assert!(decode_job(&mut Dec::new(&bad)).is_none(), "{base:?}");
        }
    }

    /// The copy window rides in the byte after the priority; zero (older tables) reads as
    /// the default.
    #[test]
    fn the_copy_window_is_recorded_after_the_priority() {
        for base in [None, Some(77)] {
            let p = MigrationParams {
                scheme: SchemeChoice::Fixed(Scheme::Dbt),
                copy_window_chunks: 3,
                ..MigrationParams::new(PoolId(1))
            };
            let b = sealed_round_trip(&p, base);
            let at = if base.is_some() { 61 } else { 53 };
            assert_eq!(b[at], 3);
            let mut old = b.clone();
            old[at] = 0;
            let (q, _) = decode_job(&mut Dec::new(&old)).unwrap();
            assert_eq!(
                q.map(|q| q.copy_window_chunks),
                Some(DEFAULT_COPY_WINDOW_CHUNKS)
            );
        }
    }
}
