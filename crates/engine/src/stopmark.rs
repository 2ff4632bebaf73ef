//! The clean-stop marker: whether the process that last ran a volume stopped in order.
//!
//! A frontend that survives a restart (QEMU reconnecting to vhost-user, issue 19) may hold
//! acknowledged writes the killed process never made durable; the new process must know
//! whether that can be, to report the loss instead of answering the next FLUSH as if the
//! data were there. Nothing else in the mount tells it: the journal after a crash can look
//! exactly like the journal after a stop (no records past the last checkpoint).
//!
//! So an orderly stop, once every acknowledged write is durable and nothing is left to
//! commit (idle, buffers flushed), checkpoints each volume once more with
//! `JournalHeader::stopped_clean` set; every mount writes its new header without it
//! (mount already writes one per volume: the marker costs no extra write at start and one
//! checkpoint per volume at stop). A crash at any point leaves either the mount's header
//! (not clean) or, while the marker is being written, the stop's first checkpoint (not
//! clean): the marker can only be wrong in the cautious direction.

pub(crate) mod state;

use crate::engine::Engine;
use crate::types::{Outputs, VolumeId};

impl Engine {
    /// Stopping and idle with buffers flushed: checkpoint every volume whose data is all
    /// durable with the marker set, once. True if a checkpoint was started (the stop
    /// completes when they are done).
    pub(crate) fn mark_clean_stop(&mut self, now: u64, out: &mut Outputs) -> bool {
        if self.clean_stop.marking {
            return false;
        }
        self.clean_stop.marking = true;
        for v in 0..self.vols.len() {
            let vol = &mut self.vols[v];
            // A volume whose final commit failed lost writes: it stays unclean.
            if vol.rec.deleted || self.clean_stop.lost.contains(&vol.rec.name) {
                continue;
            }
            vol.checkpoint_wanted = true;
            self.kick_commit(now, v as u32, out);
        }
        !self.is_idle()
    }

    /// Whether the process that ran volume `v` before this mount stopped in order, with
    /// every write it acknowledged durable (a volume this mount or this run created
    /// counts as clean). False after a crash, a kill -9, or a failed final commit.
    /// Volumes whose clean-stop marker could not be written at the last orderly stop
    /// (their data is durable; the next mount may or may not see them as stopped clean).
    pub fn unmarked_at_stop(&self) -> &[String] {
        &self.clean_stop.unmarked
    }

    pub fn stopped_clean_before_mount(&self, v: VolumeId) -> bool {
        self.vols
            .get(v.0 as usize)
            .is_some_and(|vol| vol.stopped_clean_before_mount)
    }
}
