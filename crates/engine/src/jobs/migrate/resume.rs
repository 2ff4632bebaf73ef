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

use super::{MigrationParams, Scheme, SchemeChoice};
use crate::engine::Engine;
use crate::types::{EngineEvent, Outputs, VolumeId};

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
