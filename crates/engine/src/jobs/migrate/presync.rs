//! Before the pivot pauses the volume, commit rounds of the volume flush the destination
//! (and whatever else the volume dirtied) while requests still flow, so that the pause
//! covers only the last state changes. On a host file the destination holds the copy in
//! its page cache, unsynced; the pivot's commit, with the volume paused, would otherwise
//! write all of it back (100-500 ms for 128 MiB on this machine's pool files). A round
//! flushes what was written before it began; what the VM wrote meanwhile is about as much
//! as the round took, so while rounds take long, another one follows (at most
//! `MAX_ROUNDS`). Only a shortening: the pivot's commit still flushes whatever the drain
//! adds, so a failed or skipped pre-sync costs downtime, never data.

use super::state::PreSync;
use crate::engine::Engine;
use crate::types::Outputs;

/// Pre-sync rounds at most, before the pause.
const MAX_ROUNDS: u32 = 3;
/// A round this short leaves little for the paused commit: pause after it.
const SETTLED_NS: u64 = 10_000_000;

impl Engine {
    /// True once the destination has been flushed ahead of the pause; else starts a round
    /// (a device completion or the commit timer steps the job again).
    pub(crate) fn presynced(&mut self, now: u64, v: u32, out: &mut Outputs) -> bool {
        let Some(job) = self.migrations.jobs.get(&v) else {
            return true;
        };
        let in_flight = self.vols[v as usize].commit.is_some();
        match job.presync {
            PreSync::Done => true,
            PreSync::Started { .. } if in_flight => false,
            PreSync::Started { round, started_ns } => {
                if round < MAX_ROUNDS && now.saturating_sub(started_ns) > SETTLED_NS {
                    self.start_presync_round(now, v, round + 1, out)
                } else {
                    self.set_presync(v, PreSync::Done);
                    true
                }
            }
            // Another round is in flight (it may predate the copy's last writes): after it.
            PreSync::NotYet if in_flight || self.logs.nospace.commit_backs_off(v) => false,
            PreSync::NotYet => self.start_presync_round(now, v, 1, out),
        }
    }

    /// Start pre-sync round `round`; true if there was nothing to wait for.
    fn start_presync_round(&mut self, now: u64, v: u32, round: u32, out: &mut Outputs) -> bool {
        let to = self.migrations.jobs[&v].params.to;
        self.set_presync(
            v,
            PreSync::Started {
                round,
                started_ns: now,
            },
        );
        self.vols[v as usize].dirty_pools |= 1 << to.0;
        self.start_commit(now, v, out);
        if self.vols[v as usize].commit.is_none() {
            // The round ended at once (nothing to write, or it failed): pause now.
            self.set_presync(v, PreSync::Done);
            return true;
        }
        false
    }

    fn set_presync(&mut self, v: u32, state: PreSync) {
        if let Some(job) = self.migrations.jobs.get_mut(&v) {
            job.presync = state;
        }
    }
}
