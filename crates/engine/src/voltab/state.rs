//! The volume table's in-memory copy and its write in flight: plain data engine.rs holds,
//! apart from the glue in `voltab.rs` that writes it (issue 11's import cycle).

use crate::layout::{LoanRecord, VolumeRecord, VolumeTable};

/// The volume table: its durable copy and the write of the next one. Only `volume_table_written`
/// replaces the durable copy (besides the mount, which reads or formats it).
#[derive(Default)]
pub(crate) struct VolTab {
    /// The newest copy on the metadata pool.
    pub(crate) durable: VolumeTable,
    /// The table being written (made the durable one once the write completes).
    pub(crate) in_flight: Option<VolumeTable>,
    /// The records changed again while a write was in flight: write once more.
    pub(crate) again: bool,
    /// The last write failed: the commit timer writes it again. Not at once: a full or
    /// failing device fails it again at the same instant, forever (DST seed 37 grew to
    /// 24 GiB that way).
    pub(crate) retry: bool,
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
    pub(crate) fn defer_if_writing(&mut self) -> bool {
        let writing = self.in_flight.is_some();
        if writing {
            self.again = true;
        }
        writing
    }

    /// The next table to write (none in flight), if `volumes` and `loans` differ from the
    /// durable copy.
    pub(crate) fn begin_write(
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
    pub(crate) fn written(&mut self, ok: bool) -> Option<bool> {
        let table = self.in_flight.take()?;
        if ok {
            self.durable = table;
        } else {
            self.retry = true;
        }
        Some(ok)
    }
}
