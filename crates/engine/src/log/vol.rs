//! A volume's side of the log (`VolLog`: its streams, buffers and appends in flight),
//! held by its `Volume`. It names no `Engine`.

use std::collections::{BTreeSet, VecDeque};

use crate::volume::waiter::Waiter;
use bytes::Bytes;

#[derive(Clone, Debug)]
pub(crate) struct BufPiece {
    pub lba: u64,
    pub dev: u64,
    pub len: u64,
    pub data: Option<Bytes>,
}

#[derive(Debug, Default)]
pub(crate) struct Stream {
    /// Group of the open segment.
    pub seg: Option<u64>,
    pub buf: Vec<BufPiece>,
    pub buf_bytes: u64,
    /// When the first write in `buf` arrived.
    pub buf_since_ns: u64,
    pub in_flight: u32,
    /// `bitvisor` mode: requests acknowledged only when the buffer's append lands.
    pub acks: Vec<usize>,
}

/// A volume's side of the log.
#[derive(Debug, Default)]
pub(crate) struct VolLog {
    /// The volume's configured `log`, overriding its pools'.
    pub enabled: Option<bool>,
    /// Two per pool: `pool * 2 + HOT` and `pool * 2 + COLD`.
    pub streams: Vec<Stream>,
    /// Appends in flight, by id (a commit waits for those issued before it).
    pub in_flight: BTreeSet<u64>,
    pub next_id: u64,
    /// Write pieces waiting for buffer room (already counted in their request).
    pub parked: VecDeque<Waiter>,
    /// Most overlay extents this volume may have (its checkpoint reserve is sized on it).
    pub max_extents: u64,
}

impl VolLog {
    pub fn new(pools: usize, enabled: Option<bool>, max_extents: u64) -> VolLog {
        VolLog {
            enabled,
            streams: (0..pools * 2).map(|_| Stream::default()).collect(),
            max_extents,
            ..Default::default()
        }
    }
}

/// Overlay extents a logging volume may hold: two per 4 KiB (4 KiB random writes over
/// the whole volume need one each). Its checkpoint reserve is sized on twice this.
pub(crate) fn max_extents_for(size_bytes: u64) -> u64 {
    size_bytes.div_ceil(2048).max(64)
}
