//! Device timing models for tiervisor.
//!
//! Every model is a *timeline* model: [`DeviceModel::submit`] is called when an
//! operation reaches the device and returns the virtual time at which it completes.
//! Models keep the state that decides service time (head position, platter angle,
//! on-board caches, flash translation layer, per-die busy times) and advance it
//! lazily, so they need no events of their own. They never read a clock and hold
//! no randomness, so the same sequence of submissions gives the same times.

pub mod array_queue;
pub mod calibrate;
pub mod hdd;
pub mod presets;
pub mod queue;
pub mod raid;
pub mod seekline;
pub mod ssd;
mod units;

pub use hdd::{Hdd, HddParams};
pub use presets::{Preset, preset, preset_names, presets};
pub use ssd::{FlushMode, FlushStats, FlushTime, FtlKind, Precondition, Ssd, SsdParams};
pub use units::{GIB, KIB, MIB, NS_PER_MS, NS_PER_S, NS_PER_US, SECTOR_BYTES, transfer_ns};

use serde::Serialize;

/// What a device is asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DevOpKind {
    Read,
    Write,
    /// Make every completed write durable (drain volatile caches).
    Flush,
    /// The host no longer needs this range (ATA TRIM / SCSI UNMAP).
    Trim,
    /// The range must read back as zeros (NVMe Write Zeroes with deallocate, SCSI WRITE
    /// SAME with UNMAP). An SSD deallocates the whole pages; a disk writes the zeros.
    WriteZeroes,
}

/// One operation as the device sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevRequest {
    pub kind: DevOpKind,
    pub offset_bytes: u64,
    pub len_bytes: u64,
    /// Force unit access: the write is on stable media when it completes.
    pub fua: bool,
    /// Flush domain (seed 001's vTag/hTag): who the data belongs to, or which domain a
    /// FLUSH makes durable. [`HOST_TAG`] is shared host metadata; a FLUSH with it
    /// drains everything. Devices without tag support ignore it.
    pub tag: u32,
}

/// The tag of host (engine-wide) data and of a FLUSH that covers every domain.
pub const HOST_TAG: u32 = 0;

impl DevRequest {
    pub fn read(offset_bytes: u64, len_bytes: u64) -> Self {
        DevRequest {
            kind: DevOpKind::Read,
            offset_bytes,
            len_bytes,
            fua: false,
            tag: HOST_TAG,
        }
    }
    pub fn write(offset_bytes: u64, len_bytes: u64) -> Self {
        DevRequest {
            kind: DevOpKind::Write,
            offset_bytes,
            len_bytes,
            fua: false,
            tag: HOST_TAG,
        }
    }
    /// The same request in flush domain `tag`.
    pub fn tagged(self, tag: u32) -> Self {
        DevRequest { tag, ..self }
    }
    pub fn flush() -> Self {
        DevRequest {
            kind: DevOpKind::Flush,
            offset_bytes: 0,
            len_bytes: 0,
            fua: false,
            tag: HOST_TAG,
        }
    }
}

/// Whether a device is rotating or solid-state; placement policies use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    Hdd,
    Ssd,
}

/// Counters every model keeps. Media counters only move on SSDs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DeviceCounters {
    pub host_read_bytes: u64,
    pub host_write_bytes: u64,
    /// Bytes programmed to flash (host data, GC copies, merges, map pages).
    pub media_write_bytes: u64,
    pub media_read_bytes: u64,
    pub erases: u64,
    /// Valid pages copied by garbage collection or merges.
    pub gc_page_copies: u64,
    pub cache_hits: u64,
    pub map_cache_misses: u64,
}

impl DeviceCounters {
    /// Write amplification: media bytes written per host byte written.
    pub fn waf(&self) -> f64 {
        if self.host_write_bytes == 0 {
            0.0
        } else {
            self.media_write_bytes as f64 / self.host_write_bytes as f64
        }
    }
}

/// A device timing model.
pub trait DeviceModel {
    /// Serve `req`, which reaches the device at `now_ns`; returns its completion time.
    /// Calls must come in non-decreasing `now_ns` order.
    fn submit(&mut self, now_ns: u64, req: &DevRequest) -> u64;
    fn capacity_bytes(&self) -> u64;
    fn kind(&self) -> DeviceKind;
    fn counters(&self) -> DeviceCounters;
}

/// Either model, dispatched without a virtual call on the simulator's hot path.
#[derive(Clone, Debug)]
pub enum Model {
    Hdd(Box<Hdd>),
    Ssd(Box<Ssd>),
    /// A striped array of either.
    Raid0(Box<raid::Raid0>),
}

impl Model {
    /// Build the model a preset describes, with the given capacity (None: the preset's).
    pub fn from_preset(p: &Preset, capacity_bytes: Option<u64>) -> Model {
        match p {
            Preset::Hdd { params, .. } => {
                let mut params = params.clone();
                if let Some(c) = capacity_bytes {
                    params = params.with_capacity(c);
                }
                Model::Hdd(Box::new(Hdd::new(params)))
            }
            Preset::Ssd { params, .. } => {
                let mut params = params.clone();
                if let Some(c) = capacity_bytes {
                    params.capacity_bytes = c;
                }
                Model::Ssd(Box::new(Ssd::new(params)))
            }
        }
    }
}

impl DeviceModel for Model {
    #[inline]
    fn submit(&mut self, now_ns: u64, req: &DevRequest) -> u64 {
        match self {
            Model::Hdd(h) => h.submit(now_ns, req),
            Model::Ssd(s) => s.submit(now_ns, req),
            Model::Raid0(r) => r.submit(now_ns, req),
        }
    }
    fn capacity_bytes(&self) -> u64 {
        match self {
            Model::Hdd(h) => h.capacity_bytes(),
            Model::Ssd(s) => s.capacity_bytes(),
            Model::Raid0(r) => r.capacity_bytes(),
        }
    }
    fn kind(&self) -> DeviceKind {
        match self {
            Model::Hdd(_) => DeviceKind::Hdd,
            Model::Ssd(_) => DeviceKind::Ssd,
            Model::Raid0(r) => r.kind(),
        }
    }
    fn counters(&self) -> DeviceCounters {
        match self {
            Model::Hdd(h) => h.counters(),
            Model::Ssd(s) => s.counters(),
            Model::Raid0(r) => r.counters(),
        }
    }
}
