//! The volume table writer. Whatever changes the volumes' durable records while the engine
//! runs asks it to write the table again: a migration's pivot (the volume's new home pool)
//! or job record, a volume created (`create.rs`), grown (`resize.rs`) or deleted
//! (`delete.rs`). It writes the
//! slot the newest copy is not in, with the next generation, FUA, one write at a time so a
//! torn write can never take both copies; `VolTab`'s durable copy becomes the written table only once it is durable, and
//! `volume_table_durable` tells those waiting for it.

use crate::devop::{OpSpec, Owner};
use crate::engine::Engine;
use crate::layout::{LoanRecord, VOLTAB_OFFSETS, VolumeRecord, VolumeTable};

use crate::types::{DevKind, Errno, IoClass, Outputs};

/// The volume table: its durable copy and the write of the next one. Only `volume_table_written`
/// replaces the durable copy (besides the mount, which reads or formats it).
#[derive(Default)]
pub(crate) struct VolTab {
    /// The newest copy on the metadata pool.
    durable: VolumeTable,
    /// The table being written (made the durable one once the write completes).
    in_flight: Option<VolumeTable>,
    /// The records changed again while a write was in flight: write once more.
    again: bool,
    /// The last write failed: the commit timer writes it again. Not at once: a full or
    /// failing device fails it again at the same instant, forever (DST seed 37 grew to
    /// 24 GiB that way).
    retry: bool,
}

impl VolTab {
    pub(crate) fn durable(&self) -> &VolumeTable {
        &self.durable
    }

    /// The durable volume records (indexes match the engine's volumes).
    pub(crate) fn volumes(&self) -> &[VolumeRecord] {
        &self.durable.volumes
    }

    /// The durable loan records (`loan.rs`).
    pub(crate) fn loans(&self) -> &[LoanRecord] {
        &self.durable.loans
    }

    /// The table the mount read or formatted is the durable one.
    pub(crate) fn set_durable(&mut self, table: VolumeTable) {
        self.durable = table;
    }

    #[cfg(test)]
    pub(crate) fn set_loans_for_test(&mut self, loans: Vec<LoanRecord>) {
        self.durable.loans = loans;
    }

    /// A failed write waits for the commit timer to be written again.
    pub(crate) fn retry_due(&self) -> bool {
        self.retry
    }

    /// The records of the table being written, if a write is in flight.
    pub(crate) fn in_flight_records(&self) -> &[VolumeRecord] {
        self.in_flight.as_ref().map_or(&[], |t| &t.volumes[..])
    }

    /// Record `i` of the table being written, if a write is in flight.
    pub(crate) fn in_flight_record(&self, i: usize) -> Option<&VolumeRecord> {
        self.in_flight.as_ref()?.volumes.get(i)
    }

    /// Whether a write is in flight; if so, the table is written once more when it ends.
    fn defer_if_writing(&mut self) -> bool {
        let writing = self.in_flight.is_some();
        if writing {
            self.again = true;
        }
        writing
    }

    /// The next table to write (none in flight), if `volumes` and `loans` differ from the
    /// durable copy.
    fn begin_write(
        &mut self,
        volumes: Vec<VolumeRecord>,
        loans: Vec<LoanRecord>,
    ) -> Option<&VolumeTable> {
        self.again = false;
        self.retry = false;
        if volumes == self.durable.volumes && loans == self.durable.loans {
            return None;
        }
        let table = VolumeTable {
            generation: self.durable.generation + 1,
            volumes,
            loans,
        };
        Some(self.in_flight.insert(table))
    }

    /// The write ended: `Some(true)` if it made a new durable table, `Some(false)` if it
    /// failed (retried by the commit timer), `None` if none was in flight.
    fn written(&mut self, ok: bool) -> Option<bool> {
        let table = self.in_flight.take()?;
        if ok {
            self.durable = table;
        } else {
            self.retry = true;
        }
        Some(ok)
    }
}

impl Engine {
    /// The records the volume table should hold: every volume's (as a resize or deletion
    /// being written wants it), then the tombstones of volumes deleted before the mount.
    /// The table's indexes match `vols`' for the volumes, so resizes and deletions find
    /// their entries by index.
    pub(crate) fn table_records(&self) -> Vec<crate::layout::VolumeRecord> {
        (self.vols.iter().enumerate())
            .map(|(i, v)| {
                self.deletes
                    .record_for(i, self.resizes.record_for(i, &v.rec))
            })
            .chain(self.deletes.tombstones.iter().cloned())
            .collect()
    }

    /// Write the volume table if the volumes' records differ from its durable copy.
    pub(crate) fn write_volume_table(&mut self, now: u64, out: &mut Outputs) {
        // The records are gathered only when they can be written now.
        if self.voltab.defer_if_writing() {
            return;
        }
        let (volumes, loans) = (self.table_records(), self.loan_records());
        let Some(table) = self.voltab.begin_write(volumes, loans) else {
            return;
        };
        let off = VOLTAB_OFFSETS[(table.generation % 2) as usize];
        let img = table.encode();
        let len = img.len() as u64;
        let spec = OpSpec::new(
            Owner::VolTab,
            self.cfg.meta_pool,
            DevKind::Write,
            IoClass::Metadata,
        );
        self.queue_op(
            now,
            spec.at(off, len).payload(Some(img.into())).fua(true),
            out,
        );
    }

    /// The table write finished: the table is the durable one, or (a failed write) it is
    /// written again; the slot it went to held only the older copy.
    pub(crate) fn volume_table_written(
        &mut self,
        now: u64,
        result: Result<(), Errno>,
        out: &mut Outputs,
    ) {
        let written = self.voltab.written(result.is_ok());
        if written == Some(true) {
            self.volume_table_durable(out);
            self.resize_table_durable(out);
            self.delete_table_durable(now, out);
            // A thick volume's regions wait for the table (`jobs/migrate/thick.rs`), and
            // a job's first copy for its recorded region.
            self.thick_table_durable(now);
            self.cache_table_durable();
            let borrowed = self.loan_table_durable(out);
            self.migration_step(now, out);
            if self.voltab.again {
                self.write_volume_table(now, out);
            }
            // Last: the writes that waited for a loan run on the grown allocator.
            for pool in borrowed {
                self.loan_answered(now, pool, true, out);
            }
        } else if written == Some(false) {
            self.arm_commit_timer(now);
        }
    }
}
