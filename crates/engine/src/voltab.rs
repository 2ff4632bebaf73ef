//! The volume table writer. Whatever changes the volumes' durable records while the engine
//! runs asks it to write the table again: a migration's pivot (the volume's new home pool)
//! or job record, a volume created (`create.rs`), grown (`resize.rs`) or deleted
//! (`delete.rs`). It writes the
//! slot the newest copy is not in, with the next generation, FUA, one write at a time so a
//! torn write can never take both copies; `VolTab`'s durable copy becomes the written table only once it is durable, and
//! `volume_table_durable` tells those waiting for it.

pub(crate) mod state;

use crate::devop::{OpSpec, Owner};
use crate::engine::Engine;
use crate::layout::VOLTAB_OFFSETS;

use crate::types::{DevKind, Errno, IoClass, Outputs};

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
