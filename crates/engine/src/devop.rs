//! Device operations as the engine tracks them: who waits for each ([`Owner`]), what the
//! engine asked for ([`OpSpec`]) and what it keeps while the operation is queued or in
//! flight ([`Op`]).

use bytes::Bytes;

use crate::sched::{Lane, NO_VOLUME, QueuedOp};
use crate::types::{DevKind, IoClass, IoContext, PoolId, VolumeId};

/// Who is waiting for a device operation.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Owner {
    /// Part of a read; `dest` is the offset in the request's buffer, or `SINGLE` when the
    /// device data is the whole reply.
    Read {
        req: usize,
        dest: usize,
    },
    /// An in-place write of `[start, end)` of chunk `chunk` of volume `vol`.
    Write {
        req: usize,
        vol: u32,
        chunk: u64,
        start: u64,
        end: u64,
        /// The chunk's home-write sequence number when it was queued (see
        /// `Activity::newer_elsewhere`).
        seq: u64,
    },
    /// One of the writes that allocate a chunk.
    Alloc {
        vol: u32,
        chunk: u64,
    },
    Commit {
        vol: u32,
    },
    Startup {
        tag: u32,
    },
    Discard {
        free: usize,
    },
    /// A read or write of a copy between pools (`jobs/copy.rs`).
    Copy {
        slot: usize,
    },
    /// A migrating volume's write to the destination (LR, SLR): on completion the range
    /// is marked `Moved`.
    MigWrite {
        req: usize,
        chunk: u64,
        start: u64,
        end: u64,
        /// The chunk's last home write queued before it (`Activity::newer_elsewhere`).
        home_seq: u64,
    },
    /// A mirrored (or AIO) duplicate of a write; `req` is `SINGLE` when detached.
    MigDup {
        vol: u32,
        chunk: u64,
        req: usize,
    },
    /// A zero-fill of a chunk a migration's log drain allocated
    /// (`jobs/migrate/log_drain.rs`).
    LogDrain {
        vol: u32,
        chunk: u64,
    },
    /// A log append (details in `Engine::appends`).
    Append {
        slot: usize,
    },
    /// A write-back from the pool's write buffer (`wbuf`), or the FLUSH that empties it
    /// at shutdown. `background`: a high-water, age or make-room write-back, queued in
    /// the background lane so a FLUSH's own write-backs do not wait behind it.
    WriteBack {
        background: bool,
    },
    /// A read of live data from a segment being cleaned.
    CleanRead {
        pool: u16,
        idx: u32,
    },
    /// A rewrite of the volume table (a new home pool after a migration's pivot).
    VolTab,
    /// A header or zeroing write of a volume being created at run time (`create.rs`).
    Create,
}

impl Owner {
    /// The VM request it is part of, if any: its I/O context is the request's.
    fn request(&self) -> Option<usize> {
        match *self {
            Owner::Read { req, .. } | Owner::Write { req, .. } | Owner::MigWrite { req, .. } => {
                Some(req)
            }
            Owner::MigDup { req, .. } if req != SINGLE => Some(req),
            _ => None,
        }
    }
}

/// `Owner::Read::dest` when the device data is the whole reply.
pub(crate) const SINGLE: usize = usize::MAX;

/// A device operation the engine wants queued. Built with [`OpSpec::new`] and the
/// builder methods, so a call site names what it sets (no bare `false` for FUA, no
/// sentinel for "no volume").
pub(crate) struct OpSpec {
    pub owner: Owner,
    pub pool: PoolId,
    pub kind: DevKind,
    pub class: IoClass,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// Force unit access: durable when it completes.
    pub fua: bool,
    pub payload: Option<Bytes>,
    /// The volume it serves (schedulers share the device by it); `None` for engine-wide
    /// work such as startup I/O and discards of freed space.
    pub volume: Option<VolumeId>,
    /// Who it is done for within the volume; `None`: found by [`OpSpec::resolve_context`]
    /// from the owner (the request's context, else the engine's).
    pub context: Option<IoContext>,
}

impl OpSpec {
    /// An operation of no length at offset 0, without FUA, payload or volume.
    pub fn new(owner: Owner, pool: PoolId, kind: DevKind, class: IoClass) -> OpSpec {
        OpSpec {
            owner,
            pool,
            kind,
            class,
            offset_bytes: 0,
            len_bytes: 0,
            fua: false,
            payload: None,
            volume: None,
            context: None,
        }
    }

    /// The device range `[offset_bytes, offset_bytes + len_bytes)`.
    pub fn at(mut self, offset_bytes: u64, len_bytes: u64) -> OpSpec {
        self.offset_bytes = offset_bytes;
        self.len_bytes = len_bytes;
        self
    }

    pub fn payload(mut self, payload: Option<Bytes>) -> OpSpec {
        self.payload = payload;
        self
    }

    pub fn fua(mut self, fua: bool) -> OpSpec {
        self.fua = fua;
        self
    }

    /// Done for the request whose context is `c` (an owner that does not name the
    /// request, such as a chunk allocation's writes).
    pub fn context(mut self, c: IoContext) -> OpSpec {
        self.context = Some(c);
        self
    }

    /// Fill in the context if the call site did not: the context of the VM request the
    /// owner names (`context_of` looks it up), else [`IoContext::Engine`].
    pub fn resolve_context(mut self, context_of: impl Fn(usize) -> Option<IoContext>) -> OpSpec {
        if self.context.is_none() {
            let c = self.owner.request().and_then(context_of);
            self.context = Some(c.unwrap_or(IoContext::Engine));
        }
        self
    }

    /// Done on behalf of volume index `v`.
    pub fn for_volume(mut self, v: u32) -> OpSpec {
        self.volume = Some(VolumeId(v));
        self
    }
}

/// A device operation queued or in flight.
pub(crate) struct Op {
    pub owner: Owner,
    pub pool: u16,
    pub kind: DevKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    pub fua: bool,
    pub payload: Option<Bytes>,
    pub class: IoClass,
    pub volume: Option<VolumeId>,
    pub context: IoContext,
    pub epoch: u64,
    pub queued: QueuedOp,
    /// The class it was queued in (a flush is never queued: foreground).
    pub lane: Lane,
    /// On a throttled pool: when it was dispatched and when its completion may pass.
    pub throttle: Option<(u64, u64)>,
    /// On a buffered pool: the buffer's admission number when it was queued. A write
    /// dispatched later replaces only buffered data admitted before this (data admitted
    /// while it waited in the scheduler is newer than its bytes).
    pub wbuf_seq: u64,
}

impl Op {
    /// The operation for `spec`, under scheduler key `key`, arriving at `now`.
    pub fn new(key: usize, now: u64, spec: OpSpec) -> Op {
        let queued = QueuedOp {
            key,
            offset_bytes: spec.offset_bytes,
            len_bytes: spec.len_bytes,
            is_write: spec.kind != DevKind::Read,
            class: spec.class,
            volume: spec.volume.map_or(NO_VOLUME, |v| v.0),
            context: spec.context.unwrap_or(IoContext::Engine),
            arrival_ns: now,
        };
        Op {
            owner: spec.owner,
            pool: spec.pool.0,
            kind: spec.kind,
            offset_bytes: spec.offset_bytes,
            len_bytes: spec.len_bytes,
            fua: spec.fua,
            payload: spec.payload,
            class: spec.class,
            volume: spec.volume,
            context: queued.context,
            epoch: 0,
            queued,
            lane: Lane::Foreground,
            throttle: None,
            wbuf_seq: 0,
        }
    }
}
