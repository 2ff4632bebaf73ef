//! A running job is recorded in its volume's entry of the volume table (written when it
//! starts and when it ends, like the home pool after a pivot), so that after a crash the
//! mount starts it again with the same scheme and parameters. What it resumes from is
//! what is durable: LR's and SLR's `Moved` entries and switched chunks (adopted, never
//! copied over), and the map, which names the source for every other chunk: DBT's,
//! mirror's and AIO's copies are referenced by nothing durable before the pivot, so their
//! copy starts over. A table without the entry (older tables: the bytes are zero) means no
//! job; a job whose start was not yet durable at the crash is not resumed.

use super::{MigrationParams, Scheme, SchemeChoice};
use crate::codec::{Dec, Enc};
use crate::engine::Engine;
use crate::types::{EngineEvent, Outputs, PoolId, VolumeId};

/// Encode a volume's recorded job (a zero byte when there is none).
pub(crate) fn encode_job(e: &mut Enc, job: Option<&MigrationParams>) {
    let Some(p) = job else {
        e.u8(0);
        return;
    };
    let scheme = match p.scheme {
        SchemeChoice::Fixed(s) => Scheme::ALL.iter().position(|&x| x == s).unwrap_or(0) as u8,
        SchemeChoice::Auto => u8::MAX,
    };
    e.u8(1).u16(p.to.0).u8(scheme);
    e.u64(p.rate_bytes_per_s)
        .u64(p.granularity_bytes)
        .u64(p.buffer_bytes)
        .u32(p.dbt_max_passes)
        .u32(p.aio_threshold)
        .u64(p.aio_delay_ns)
        .u64(p.gamma.to_bits());
}

/// Decode what `encode_job` wrote: `None` if the bytes are not a job record.
pub(crate) fn decode_job(d: &mut Dec) -> Option<Option<MigrationParams>> {
    match d.u8()? {
        0 => return Some(None),
        1 => {}
        _ => return None,
    }
    let to = PoolId(d.u16()?);
    let scheme = match d.u8()? {
        u8::MAX => SchemeChoice::Auto,
        i => SchemeChoice::Fixed(*Scheme::ALL.get(i as usize)?),
    };
    Some(Some(MigrationParams {
        to,
        scheme,
        rate_bytes_per_s: d.u64()?,
        granularity_bytes: d.u64()?,
        buffer_bytes: d.u64()?,
        dbt_max_passes: d.u32()?,
        aio_threshold: d.u32()?,
        aio_delay_ns: d.u64()?,
        gamma: f64::from_bits(d.u64()?),
    }))
}

impl Engine {
    /// Record (or clear) volume `v`'s job in the volume table.
    pub(crate) fn record_job(
        &mut self,
        now: u64,
        v: u32,
        job: Option<MigrationParams>,
        out: &mut Outputs,
    ) {
        self.vols[v as usize].rec.migration = job;
        self.write_volume_table(now, out);
    }

    /// At mount: start again every job the volume table records.
    pub(crate) fn resume_migrations(&mut self, now: u64, out: &mut Outputs) {
        for v in 0..self.vols.len() as u32 {
            let Some(params) = self.vols[v as usize].rec.migration.clone() else {
                continue;
            };
            let name = self.vols[v as usize].rec.name.clone();
            match self.try_start_migration(now, VolumeId(v), params, out) {
                Ok(_) => out.events.push(EngineEvent::Warning {
                    message: format!("volume {name}: resumed its migration after a restart"),
                }),
                Err(e) => {
                    out.events.push(EngineEvent::Warning {
                        message: format!(
                            "volume {name}: its migration cannot resume ({e}); the volume stays where its map says"
                        ),
                    });
                    self.record_job(now, v, None, out);
                }
            }
        }
    }
}
