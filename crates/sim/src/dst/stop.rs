//! Orderly stops and the clean-stop marker (issue 19, engine `stopmark.rs`).
//!
//! A mount must know whether the process before it stopped in order with every
//! acknowledged write durable: a vhost-user frontend resuming its rings after a kill -9
//! is told at its first FLUSH that writes may be lost, and not after an orderly stop.
//! DST checks both directions at every mount it can judge: after a power loss (not one
//! during a mount after an orderly stop, which may or may not have cleared the marker)
//! no volume may read as stopped clean; after an orderly stop every volume whose final
//! commit did not fail must, and every write acknowledged before the stop must read back
//! (the stop's promise: the reference counts them durable). Each run with power losses
//! ends with an orderly stop, a power loss right after it, then a power loss again.
//! `--bug clean-stop-marker-kept` (mount keeps the last stop's marker) must be caught.

use tiervisor_engine::{EngineState, Outputs, ReqKind, VolumeId};

use super::super::device::below;
use super::{Fail, Sim};

/// What the next mount must say of the last stop.
#[derive(Clone, Debug)]
pub(super) enum Marker {
    /// Nothing to check (the first start; a power loss during a mount after a stop).
    Unknown,
    /// A power loss: no volume stopped clean.
    Unclean,
    /// An orderly stop: every live volume but the first list (their final commit
    /// failed) did; those of the second (their marker's checkpoint failed, which may
    /// have landed anyway) may read either way.
    CleanExcept(Vec<String>, Vec<String>),
}

impl Marker {
    /// A power loss now (`recovering`: during a mount).
    pub(super) fn after_crash(&self, recovering: bool) -> Marker {
        match self {
            // A mount never sets the marker: still none clean.
            Marker::Unclean => Marker::Unclean,
            // The interrupted mount may or may not have written its unmarked headers.
            _ if recovering => Marker::Unknown,
            _ => Marker::Unclean,
        }
    }
}

impl Sim {
    /// After a mount reached Ready: the engine's marker against what the last stop was.
    pub(super) fn check_marker(&mut self) -> Result<(), Fail> {
        let expect = std::mem::replace(&mut self.marker, Marker::Unknown);
        let (lost, unmarked) = match expect {
            Marker::Unknown => return Ok(()),
            Marker::Unclean => (None, Vec::new()),
            Marker::CleanExcept(lost, unmarked) => (Some(lost), unmarked),
        };
        for (name, _) in self.engine.volumes() {
            let Some(v) = self.engine.volume_id(&name) else {
                continue;
            };
            if unmarked.contains(&name) {
                continue;
            }
            let want = lost.as_ref().is_some_and(|l| !l.contains(&name));
            if self.engine.stopped_clean_before_mount(v) != want {
                return Err(format!(
                    "volume {name}: the mount says the last stop was {}, but it was {}",
                    if want { "unclean" } else { "clean" },
                    match (&lost, want) {
                        (Some(_), true) => "an orderly stop with its final commit done",
                        (Some(_), false) => "an orderly stop whose final commit failed",
                        (None, _) => "a power loss",
                    }
                ));
            }
        }
        Ok(())
    }

    /// Writes left unflushed, an orderly stop, a power loss right after it (checked at
    /// the mount), then a power loss again (checked at that mount).
    pub(super) fn orderly_stop_then_crash(&mut self) -> Result<(), Fail> {
        for _ in 0..16 {
            let v = below(&mut self.rng, self.refs.len() as u64) as u32;
            if self.deletes.as_ref().is_some_and(|d| d.refuses(v as usize)) {
                continue;
            }
            let sectors = self.serving_sectors(v as usize);
            let n = (1 + below(&mut self.rng, 64)).min(sectors);
            let first = below(&mut self.rng, sectors - n + 1);
            self.submit(v, ReqKind::Write, first, n, false, false)?;
        }
        self.settle()?;
        let mut out = Outputs::default();
        self.engine.begin_shutdown(self.now_ns, &mut out);
        self.pump(&mut out)?;
        let mut guard = 0u64;
        while self.engine.state() != EngineState::Stopped {
            if !self.next_event()? {
                return Err(format!(
                    "an orderly stop stalled with nothing in flight ({:?})",
                    self.engine.state()
                ));
            }
            guard += 1;
            // The stop's final commits and drains run here, between steps.
            if guard.is_multiple_of(64) {
                self.engine.check_invariants()?;
            }
            if guard > 10_000_000 {
                return Err("an orderly stop never ended".into());
            }
        }
        // Every write acknowledged before the stop is durable now, unless the volume's
        // final commit failed (the engine says so, and leaves it unmarked).
        let lost = self.engine.lost_at_stop();
        for (name, _) in self.engine.volumes() {
            if let Some(VolumeId(v)) = self.engine.volume_id(&name)
                && !lost.contains(&name)
                && let Some(r) = self.refs.get_mut(v as usize)
            {
                r.flush_ok(self.clock, u64::MAX);
            }
        }
        self.stats.clean_stops += 1;
        self.marker = Marker::CleanExcept(lost, self.engine.unmarked_at_stop());
        self.power_loss()?;
        self.crash()
    }
}
