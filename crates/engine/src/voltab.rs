//! The volume table writer. Whatever changes the volumes' durable records while the engine
//! runs asks it to write the table again: a migration's pivot (the volume's new home pool)
//! or job record, a volume created (`create.rs`), grown (`resize.rs`) or deleted
//! (`delete.rs`). It writes the
//! slot the newest copy is not in, with the next generation, FUA, one write at a time so a
//! torn write can never take both copies; `Engine::voltab` becomes the written table only once it is durable, and
//! `volume_table_durable` tells those waiting for it.

use crate::devop::{OpSpec, Owner};
use crate::engine::Engine;
use crate::layout::{VOLTAB_OFFSETS, VolumeTable};
use crate::types::{DevKind, Errno, IoClass, Outputs};

/// The volume table writer's state.
#[derive(Default)]
pub(crate) struct TableWriter {
    /// The table being written (made the engine's once it is durable).
    in_flight: Option<VolumeTable>,
    /// The records changed again while a write was in flight: write once more.
    again: bool,
    /// The last write failed: the commit timer writes it again. Not at once: a full or
    /// failing device fails it again at the same instant, forever (DST seed 37 grew to
    /// 24 GiB that way).
    retry: bool,
}

impl TableWriter {
    /// A failed write waits for the commit timer to be written again.
    pub(crate) fn retry_due(&self) -> bool {
        self.retry
    }

    /// The records of the table being written, if a write is in flight.
    pub(crate) fn in_flight_records(&self) -> &[crate::layout::VolumeRecord] {
        self.in_flight.as_ref().map_or(&[], |t| &t.volumes[..])
    }

    /// Record `i` of the table being written, if a write is in flight.
    pub(crate) fn in_flight_record(&self, i: usize) -> Option<&crate::layout::VolumeRecord> {
        self.in_flight.as_ref()?.volumes.get(i)
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
        let tw = &mut self.voltab_writer;
        if tw.in_flight.is_some() {
            tw.again = true;
            return;
        }
        tw.again = false;
        tw.retry = false;
        let volumes = self.table_records();
        let loans = self.loan_records();
        if volumes == self.voltab.volumes && loans == self.voltab.loans {
            return;
        }
        let table = VolumeTable {
            generation: self.voltab.generation + 1,
            volumes,
            loans,
        };
        let off = VOLTAB_OFFSETS[(table.generation % 2) as usize];
        let img = table.encode();
        let len = img.len() as u64;
        self.voltab_writer.in_flight = Some(table);
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
        let tw = &mut self.voltab_writer;
        let Some(table) = tw.in_flight.take() else {
            return;
        };
        if result.is_ok() {
            self.voltab = table;
            self.volume_table_durable(out);
            self.resize_table_durable(out);
            self.delete_table_durable(now, out);
            // A thick volume's regions wait for the table (`jobs/migrate/thick.rs`), and
            // a job's first copy for its recorded region.
            self.thick_table_durable(now);
            self.cache_table_durable();
            let borrowed = self.loan_table_durable(out);
            self.migration_step(now, out);
            if self.voltab_writer.again {
                self.write_volume_table(now, out);
            }
            // Last: the writes that waited for a loan run on the grown allocator.
            for pool in borrowed {
                self.loan_answered(now, pool, true, out);
            }
        } else {
            tw.retry = true;
            self.arm_commit_timer(now);
        }
    }
}
