//! Volume deletions in progress and the tombstone rules: plain data engine.rs holds, apart
//! from the glue in `delete.rs` that runs them (issue 11's import cycle).

use crate::config::{Placement, Provisioning};
use crate::layout::VolumeRecord;

/// The deletion under way (one at a time) and the tombstones the table keeps.
#[derive(Default)]
pub(crate) struct Deletes {
    pub(crate) current: Option<Deletion>,
    /// Tombstones read at mount (volumes deleted before it): written with every table.
    pub(crate) tombstones: Vec<VolumeRecord>,
}

pub(crate) struct Deletion {
    pub(crate) volume: usize,
    pub(crate) phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Phase {
    /// Requests are refused; waiting for what is in flight to finish.
    Quiescing,
    /// The table with the tombstone is being written.
    Recording,
    /// The tombstone is durable; waiting for anything started meanwhile (a commit) to
    /// finish before the chunks are given back.
    Releasing,
}

impl Deletes {
    /// The volume being deleted, if any.
    pub(crate) fn in_progress(&self) -> Option<usize> {
        self.current.as_ref().map(|d| d.volume)
    }

    /// Whether requests to volume `v` are refused because it is being deleted.
    pub(crate) fn refuses(&self, v: usize) -> bool {
        self.in_progress() == Some(v)
    }

    /// The record the volume table should hold for volume `v`: its tombstone once the
    /// deletion is being recorded.
    pub(crate) fn record_for(&self, v: usize, rec: VolumeRecord) -> VolumeRecord {
        match &self.current {
            Some(d) if d.volume == v && d.phase != Phase::Quiescing => tombstone(&rec),
            _ => rec,
        }
    }
}

/// The tombstones a mount keeps. One is needed only while the configuration names its
/// volume and no live volume has that name again (it stops the volume being created anew,
/// empty, at start); the one with the highest id is kept too, so new volumes' ids (the
/// highest in the table plus one) never repeat a deleted volume's, whose journal blocks
/// may still lie in freed chunks. The others leave the table at its next write, so
/// creating and deleting volumes cannot fill the table for good.
pub(crate) fn tombstones_to_keep(
    tombstones: Vec<VolumeRecord>,
    live: &[VolumeRecord],
    configured: &[crate::config::VolumeConfig],
) -> Vec<VolumeRecord> {
    let top_id = (tombstones.iter().chain(live)).map(|r| r.id).max();
    tombstones
        .into_iter()
        .filter(|t| {
            let guards_name = configured.iter().any(|c| c.name == t.name)
                && !live.iter().any(|r| r.name == t.name);
            guards_name || Some(t.id) == top_id
        })
        .collect()
}

/// What the table keeps of a deleted volume: its id and name, nothing it owned.
pub(crate) fn tombstone(rec: &VolumeRecord) -> VolumeRecord {
    VolumeRecord {
        id: rec.id,
        name: rec.name.clone(),
        size_bytes: 0,
        provisioning: Provisioning::Thin,
        placement: Placement::Pinned,
        home_pool: rec.home_pool,
        fast_pool: None,
        home_base_chunk: 0,
        journal_pool: rec.journal_pool,
        journal_first_chunk: 0,
        journal_chunks: 0,
        migration: None,
        migration_base_chunk: None,
        deleted: true,
    }
}
