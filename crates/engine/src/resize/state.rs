//! Volume resizes in progress: plain data engine.rs holds, apart from the glue in
//! `resize.rs` that runs them (issue 11's import cycle).

use crate::layout::VolumeRecord;

pub use crate::config::MAX_VOLUME_BYTES;

/// The resize under way, if any (one at a time, like creations).
#[derive(Default)]
pub(crate) struct Resizes {
    pub(crate) current: Option<Resize>,
}

pub(crate) struct Resize {
    pub(crate) volume: usize,
    pub(crate) new_size_bytes: u64,
    pub(crate) shrink: Option<Shrink>,
}

/// A shrink waits for a checkpoint of the smaller map before the table says so.
pub(crate) struct Shrink {
    pub(crate) old_size_bytes: u64,
    /// The volume's checkpoint count once a checkpoint begun after the shrink is durable.
    pub(crate) checkpoints_needed: u64,
    /// That checkpoint is durable: the table is being written with the new size.
    pub(crate) recording: bool,
}

impl Resizes {
    /// The volume being resized and its new size, if any.
    pub(crate) fn in_progress(&self) -> Option<(usize, u64)> {
        self.current.as_ref().map(|r| (r.volume, r.new_size_bytes))
    }

    /// The record the volume table should hold for volume `v`: its new size while a
    /// resize of it is being written.
    pub(crate) fn record_for(&self, v: usize, rec: &VolumeRecord) -> VolumeRecord {
        let mut rec = rec.clone();
        if let Some(r) = &self.current
            && r.volume == v
        {
            rec.size_bytes = match &r.shrink {
                Some(s) if !s.recording => s.old_size_bytes,
                _ => r.new_size_bytes,
            };
        }
        rec
    }
}
