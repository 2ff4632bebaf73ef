//! After a pivot the volume's home pool (where its new chunks go) is the destination. The
//! volume table records it, so a restart mounts the volume there: the table is written
//! again (the slot the newest copy is not in, with the next generation, FUA), one write at
//! a time so a torn write can never take both copies.

use crate::devop::{OpSpec, Owner};
use crate::engine::Engine;
use crate::layout::{VOLTAB_OFFSETS, VolumeTable};
use crate::types::{DevKind, Errno, IoClass, Outputs};

/// The volume table writer's state.
#[derive(Default)]
pub(crate) struct TableWrite {
    /// The table being written (made the engine's once it is durable).
    pub in_flight: Option<VolumeTable>,
    /// The records changed again while a write was in flight: write once more.
    pub again: bool,
    /// The last write failed: the commit timer writes it again. Not at once: a full or
    /// failing device fails it again at the same instant, forever (DST seed 37 grew to
    /// 24 GiB that way).
    pub retry: bool,
}

impl Engine {
    /// Write the volume table if the volumes' records differ from its durable copy.
    pub(crate) fn write_volume_table(&mut self, now: u64, out: &mut Outputs) {
        let tw = &mut self.migrations.table;
        if tw.in_flight.is_some() {
            tw.again = true;
            return;
        }
        tw.again = false;
        tw.retry = false;
        let volumes: Vec<_> = self.vols.iter().map(|v| v.rec.clone()).collect();
        if volumes == self.voltab.volumes {
            return;
        }
        let table = VolumeTable {
            generation: self.voltab.generation + 1,
            volumes,
        };
        let off = VOLTAB_OFFSETS[(table.generation % 2) as usize];
        let img = table.encode();
        let len = img.len() as u64;
        tw.in_flight = Some(table);
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
        let tw = &mut self.migrations.table;
        let Some(table) = tw.in_flight.take() else {
            return;
        };
        if result.is_ok() {
            self.voltab = table;
            self.volume_table_durable(out);
        } else {
            tw.retry = true;
            self.arm_commit_timer(now);
            return;
        }
        if self.migrations.table.again {
            self.write_volume_table(now, out);
        }
    }
}
