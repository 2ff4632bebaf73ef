//! Volume creations in progress: plain data engine.rs holds, apart from the glue in
//! `create.rs` that runs them (issue 11's import cycle).

use crate::config::{Provisioning, VolumeConfig};
use crate::types::Errno;
use crate::volume::Volume;

/// A volume being created.
pub(crate) struct Creation {
    pub(crate) vc: VolumeConfig,
    /// Built, with its chunks reserved, and not yet in `vols`.
    pub(crate) vol: Option<Box<Volume>>,
    /// Its header and zeroing writes still in flight.
    pub(crate) outstanding: u32,
    pub(crate) failed: Option<Errno>,
    /// A thick home region's zeros are made durable (a FLUSH of its pool) before the
    /// table names the volume: fallocate is not FUA, and a region whose zeroing a crash
    /// lost would show the chunks' earlier contents.
    pub(crate) flush_pool: Option<crate::types::PoolId>,
}

/// The creation under way, if any.
#[derive(Default)]
pub(crate) struct Creations {
    pub(crate) current: Option<Creation>,
    /// Added to `vols` and waiting for the volume table that names it to be durable.
    pub(crate) recording: Option<String>,
}

impl Creations {
    /// The name of the volume being created, if any.
    pub(crate) fn in_progress(&self) -> Option<&str> {
        self.current
            .as_ref()
            .map(|c| c.vc.name.as_str())
            .or(self.recording.as_deref())
    }

    /// Chunks reserved for the volume being written: (pool, first chunk, chunks, what).
    pub(crate) fn reserved(&self) -> Vec<(usize, u64, u64, String)> {
        let Some(v) = self.current.as_ref().and_then(|c| c.vol.as_deref()) else {
            return Vec::new();
        };
        let r = &v.rec;
        let mut out = vec![(
            r.journal_pool.0 as usize,
            r.journal_first_chunk,
            r.journal_chunks as u64,
            format!("journal of {} being created", r.name),
        )];
        if r.provisioning == Provisioning::Thick {
            out.push((
                r.home_pool.0 as usize,
                r.home_base_chunk,
                v.chunks,
                format!("home region of {} being created", r.name),
            ));
        }
        out
    }
}
