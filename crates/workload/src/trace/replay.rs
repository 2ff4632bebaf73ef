//! Replaying a trace as one VM's workload.

use std::sync::Arc;

use super::{Trace, TraceOp};
use crate::{WlKind, WlRequest, Workload};

/// How a trace is replayed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReplayMode {
    /// At the recorded arrival times, divided by `speed`.
    Timed { speed: f64 },
    /// Ignore times; keep `depth` requests outstanding.
    Closed { depth: u32 },
    /// Ignore times; one request every `1 / iops` seconds, whatever completes.
    Rate { iops: f64 },
}

/// One VM's view of a trace: the records of some devices, fitted to its volume.
pub struct TraceWorkload {
    trace: Arc<Trace>,
    /// Indices of this VM's records.
    picks: Vec<u32>,
    mode: ReplayMode,
    repeat: u32,
    volume_bytes: u64,
    pos: usize,
    pass: u32,
}

impl TraceWorkload {
    /// `devices` empty means all devices. Offsets beyond the volume wrap around it.
    pub fn new(
        trace: Arc<Trace>,
        devices: &[u32],
        mode: ReplayMode,
        repeat: u32,
        volume_bytes: u64,
    ) -> TraceWorkload {
        let picks = trace
            .records
            .iter()
            .enumerate()
            .filter(|(_, r)| devices.is_empty() || devices.contains(&r.device))
            .map(|(i, _)| i as u32)
            .collect();
        TraceWorkload {
            trace,
            picks,
            mode,
            repeat: repeat.max(1),
            volume_bytes,
            pos: 0,
            pass: 0,
        }
    }

    /// Requests this workload will issue.
    pub fn len(&self) -> u64 {
        self.picks.len() as u64 * self.repeat as u64
    }

    pub fn is_empty(&self) -> bool {
        self.picks.is_empty()
    }
}

impl Workload for TraceWorkload {
    fn next(&mut self, _now_ns: u64) -> Option<WlRequest> {
        if self.pos == self.picks.len() {
            self.pass += 1;
            self.pos = 0;
        }
        if self.pass >= self.repeat || self.picks.is_empty() {
            return None;
        }
        let r = self.trace.records[self.picks[self.pos] as usize];
        self.pos += 1;
        let len = r.len_bytes.min(self.volume_bytes);
        // Fit the request inside the volume, sector aligned.
        let room = self.volume_bytes - len;
        let offset_bytes = if r.offset_bytes <= room {
            r.offset_bytes
        } else {
            (r.offset_bytes % (room + 1)) & !511
        };
        let at_ns = match self.mode {
            ReplayMode::Timed { speed } => {
                // Each pass follows the previous one after the trace's span plus a gap.
                let span = self.trace.span_ns() + 1_000_000;
                let t = r.arrival_ns + self.pass as u64 * span;
                Some((t as f64 / speed.max(1e-9)) as u64)
            }
            ReplayMode::Rate { iops } => {
                let index = self.pass as u64 * self.picks.len() as u64 + self.pos as u64 - 1;
                Some((index as f64 * 1e9 / iops.max(1e-9)) as u64)
            }
            ReplayMode::Closed { .. } => None,
        };
        let kind = if r.op == TraceOp::Read {
            WlKind::Read
        } else {
            WlKind::Write
        };
        Some(WlRequest {
            kind,
            offset_bytes,
            len_bytes: len,
            at_ns,
            context: None,
        })
    }

    fn depth(&self) -> u32 {
        match self.mode {
            ReplayMode::Closed { depth } => depth.max(1),
            ReplayMode::Timed { .. } | ReplayMode::Rate { .. } => u32::MAX,
        }
    }
}
