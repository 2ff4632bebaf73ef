//! The log's state per pool (segments, pieces, open streams), apart from its engine glue
//! in `log/mod.rs`, so engine.rs holds it without the glue (issue 11's import cycle).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use super::vol::BufPiece;

/// Stream of VM writes.
pub(crate) const HOT: usize = 0;
/// Stream of data the cleaner copies forward.
pub(crate) const COLD: usize = 1;

/// One logged piece, as the segment summary keeps it for the cleaner.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Piece {
    pub lba: u64,
    pub seg_off: u32,
    pub len: u32,
}

#[derive(Debug)]
pub(crate) struct Segment {
    pub owner: u32,
    /// Chunks of the group this segment holds (all of them unless rebuilt at mount).
    pub held: u64,
    /// Bytes handed out so far; the next append lands here.
    pub written_bytes: u64,
    /// Bytes the overlay still references.
    pub live_bytes: u64,
    /// A stream appends here.
    pub open: bool,
    pub last_write_ns: u64,
    pub cleaning: bool,
    /// A read failed while cleaning: leave it alone.
    pub clean_failed: bool,
    /// Cleaning could not copy everything (no room): wait for a segment to be freed.
    pub stuck: bool,
    pub summary: Vec<Piece>,
    /// Its live sectors (kept with `live_bytes`).
    pub live: super::livemap::LiveMap,
}

/// Data acknowledged to the VM whose append has not landed yet.
#[derive(Debug)]
pub(crate) struct RamPiece {
    pub len: u64,
    pub data: Option<Bytes>,
}

#[derive(Clone, Debug, Default)]
pub(crate) struct LogStats {
    pub user_writes: u64,
    pub user_bytes: u64,
    pub appends: u64,
    pub append_bytes: u64,
    pub cleaner_read_bytes: u64,
    pub cleaner_bytes: u64,
    pub segments_opened: u64,
    pub segments_cleaned: u64,
    pub segments_freed: u64,
    pub home_fallbacks: u64,
    pub relocations: u64,
    pub cleaner_waits: u64,
}

#[derive(Debug, Default)]
pub(crate) struct PoolLog {
    pub segments: BTreeMap<u64, Segment>,
    pub ram: BTreeMap<u64, RamPiece>,
    pub stats: LogStats,
    pub clean: Option<Clean>,
    pub next_group: u64,
    /// The cleaner's bandwidth budget, and when it waits for it.
    pub clean_bucket: crate::bucket::TokenBucket,
    pub clean_wait_at: Option<u64>,
}

/// The log on every pool: each pool's segment table and the data its appends carry, the
/// appends in flight, the gather timer and what waits for space. Indexes as the pools do.
#[derive(Debug, Default)]
pub(crate) struct Logs {
    pub(crate) pools: Vec<PoolLog>,
    pub(crate) appends: slab::Slab<Append>,
    /// When the gather timer next fires.
    pub(crate) gather_at: Option<u64>,
    /// Appends and commits waiting for space (`nospace.rs`).
    pub(crate) nospace: NoSpace,
}

impl Logs {
    pub(crate) fn new(n_pools: usize) -> Self {
        Logs {
            pools: (0..n_pools).map(|_| PoolLog::default()).collect(),
            ..Default::default()
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.pools.len()
    }

    pub(crate) fn iter(&self) -> std::slice::Iter<'_, PoolLog> {
        self.pools.iter()
    }

    pub(crate) fn iter_mut(&mut self) -> std::slice::IterMut<'_, PoolLog> {
        self.pools.iter_mut()
    }
}

impl std::ops::Index<usize> for Logs {
    type Output = PoolLog;
    fn index(&self, pool: usize) -> &PoolLog {
        &self.pools[pool]
    }
}

impl std::ops::IndexMut<usize> for Logs {
    fn index_mut(&mut self, pool: usize) -> &mut PoolLog {
        &mut self.pools[pool]
    }
}

/// How a piece of a read is served.
#[derive(Clone, Debug)]
pub(crate) enum ReadPart {
    Dev,
    /// From an append not yet on the device (`None` when data is not tracked).
    Ram(Option<Bytes>),
}

/// What became of a write piece offered to the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogOutcome {
    /// Buffered and acknowledged.
    Logged,
    /// Waiting for buffer room; it will be retried.
    Parked,
    /// Not for the log: write it at home.
    Home,
}

/// An append in flight.
#[derive(Debug)]
pub(crate) struct Append {
    pub vol: u32,
    pub pool: u16,
    pub stream: usize,
    pub id: u64,
    pub pieces: Vec<BufPiece>,
    /// Times it was written in place after an error.
    pub retries: u32,
    /// `bitvisor` mode: requests that complete when it lands.
    pub acks: Vec<usize>,
}

/// One segment being cleaned.
#[derive(Debug)]
pub(crate) struct Clean {
    pub group: u64,
    pub owner: u32,
    /// (lba, device offset, length, data read)
    pub pieces: Vec<(u64, u64, u64, Option<Bytes>)>,
    /// Device reads: (device offset, length, first piece, pieces covered).
    pub reads: Vec<(u64, u64, usize, usize)>,
    /// The victim's live bytes when its pieces were listed: if unchanged when the copy
    /// is placed, no VM write or trim touched them meanwhile.
    pub live_bytes: u64,
    pub pending: u32,
    pub failed: bool,
}

#[derive(Debug, Default)]
pub(crate) struct NoSpace {
    pub(crate) parked: Vec<Append>,
    pub(crate) retry_at: Option<u64>,
    /// Volumes whose last commit round failed (cleared when one succeeds).
    pub(crate) failed_commits: BTreeSet<u32>,
    /// Volumes warned that the metadata pool has no room for their checkpoint (cleared
    /// when one of their commits succeeds, so the warning comes once per spell).
    pub(crate) no_room_warned: BTreeSet<u32>,
}

impl NoSpace {
    /// When the parked appends are next tried (for `Engine::next_deadline`).
    pub(crate) fn retry_at(&self) -> Option<u64> {
        self.retry_at
    }

    /// Whether appends to `pool` wait for space.
    pub(crate) fn pool_waits(&self, pool: u16) -> bool {
        self.parked.iter().any(|a| a.pool == pool)
    }

    /// Note how volume `v`'s commit round ended.
    pub(crate) fn commit_ended(&mut self, v: u32, ok: bool) {
        if ok {
            self.failed_commits.remove(&v);
            self.no_room_warned.remove(&v);
        } else {
            self.failed_commits.insert(v);
        }
    }

    /// Volume `v` found no room for a checkpoint: true the first time in a spell.
    pub(crate) fn no_room_began(&mut self, v: u32) -> bool {
        self.no_room_warned.insert(v)
    }

    /// Whether volume `v`'s commits wait for the commit timer (its last one failed).
    pub(crate) fn commit_backs_off(&self, v: u32) -> bool {
        self.failed_commits.contains(&v)
    }
}
