//! Block traces: loading (any supported format, compressed or not), summaries, replay.

mod address;
mod blkparse;
mod csv;
mod formats;
mod info;
mod load;
mod replay;
mod ticks;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

pub use address::AssumeOp;
pub use formats::{MAX_RECORD_BYTES, Parsed, TraceFormat, parse_line};
pub use info::{DeviceInfo, TraceInfo};
pub use load::{BlkEvent, LoadOptions};
pub use replay::{ReplayMode, TraceWorkload};
use serde::Serialize;

use crate::error::WorkloadError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceOp {
    Read,
    Write,
}

/// One request of a trace, in bytes and nanoseconds from the trace's start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    pub arrival_ns: u64,
    /// Device, ASU, disk number or LUN.
    pub device: u32,
    pub offset_bytes: u64,
    /// Never 0 (such records are counted in [`Trace::zero_length_records`]), at most
    /// [`MAX_RECORD_BYTES`], and `offset_bytes + len_bytes` fits in a `u64`.
    pub len_bytes: u64,
    pub op: TraceOp,
}

/// A whole trace in memory, arrival times rebased so the first request is at 0.
/// Never empty: a file without a single request is an error when loading.
#[derive(Clone, Debug)]
pub struct Trace {
    pub source: String,
    pub format: TraceFormat,
    pub records: Vec<TraceRecord>,
    /// Records of zero bytes, left out of `records` (nothing to replay) but reported.
    pub zero_length_records: u64,
    /// Lines that carry no request, by reason (blkparse's other events, headers, SCSI
    /// commands without data, ...).
    pub skipped: BTreeMap<&'static str, u64>,
    /// Whether records carry arrival times (timed replay needs them).
    pub timed: bool,
    /// The operation given to records that carry none (address-only traces): their
    /// replays measure locality only.
    pub assumed_op: Option<AssumeOp>,
    /// Distinct arrival times as read, before any spreading.
    pub distinct_times: u64,
    /// Whether records sharing a timestamp were spread evenly over its tick.
    pub spread_ticks: bool,
}

/// Open a file, decompressing xz, gzip, bzip2 or zstd by its magic bytes.
pub fn open_decompressed(path: &Path) -> Result<Box<dyn BufRead>, WorkloadError> {
    let name = path.display().to_string();
    let mut f =
        File::open(path).map_err(|e| WorkloadError::file(&name, format!("cannot open: {e}")))?;
    let mut magic = [0u8; 6];
    let n = f
        .read(&mut magic)
        .map_err(|e| WorkloadError::file(&name, format!("cannot read: {e}")))?;
    let f =
        File::open(path).map_err(|e| WorkloadError::file(&name, format!("cannot open: {e}")))?;
    let m = &magic[..n];
    let r: Box<dyn Read> = if m.starts_with(&[0xFD, b'7', b'z', b'X', b'Z', 0]) {
        Box::new(liblzma::read::XzDecoder::new(f))
    } else if m.starts_with(&[0x1F, 0x8B]) {
        Box::new(flate2::read::MultiGzDecoder::new(f))
    } else if m.starts_with(b"BZh") {
        Box::new(bzip2::read::MultiBzDecoder::new(f))
    } else if m.starts_with(&[0x28, 0xB5, 0x2F, 0xFD]) {
        Box::new(
            zstd::stream::read::Decoder::new(f)
                .map_err(|e| WorkloadError::file(&name, format!("zstd: {e}")))?,
        )
    } else {
        Box::new(f)
    };
    Ok(Box::new(BufReader::with_capacity(1 << 16, r)))
}

impl Trace {
    /// Load a trace file; the format is detected unless given.
    pub fn load(path: &Path, format: Option<TraceFormat>) -> Result<Trace, WorkloadError> {
        Self::load_with(
            path,
            &LoadOptions {
                format,
                ..LoadOptions::default()
            },
        )
    }

    /// Load a trace file with every reading option.
    pub fn load_with(path: &Path, opts: &LoadOptions) -> Result<Trace, WorkloadError> {
        let name = path.display().to_string();
        let reader = open_decompressed(path)?;
        Self::parse_with(&name, reader, opts)
    }

    /// Parse a trace from any reader; `name` is used in error messages.
    pub fn parse(
        name: &str,
        reader: impl BufRead,
        format: Option<TraceFormat>,
    ) -> Result<Trace, WorkloadError> {
        Self::parse_with(
            name,
            reader,
            &LoadOptions {
                format,
                ..LoadOptions::default()
            },
        )
    }

    /// Parse a trace from any reader with every reading option.
    pub fn parse_with(
        name: &str,
        reader: impl BufRead,
        opts: &LoadOptions,
    ) -> Result<Trace, WorkloadError> {
        load::parse(name, reader, opts)
    }

    pub fn info(&self) -> TraceInfo {
        TraceInfo::of(self)
    }

    /// Time from the first to the last arrival.
    pub fn span_ns(&self) -> u64 {
        self.records.last().map_or(0, |r| r.arrival_ns)
    }

    /// What a replay of this trace can stand for, if less than timing: address-only
    /// traces measure locality only.
    pub fn locality_only(&self) -> Option<String> {
        self.assumed_op.map(|a| {
            format!(
                "locality only: {} trace without operations ({}){}",
                self.format.name(),
                a.describe(),
                if self.timed { "" } else { ", no arrival times" }
            )
        })
    }

    /// Whether this trace can be replayed so.
    pub fn check_mode(&self, mode: ReplayMode) -> Result<(), String> {
        match mode {
            ReplayMode::Timed { .. } if !self.timed => Err(format!(
                "{} has no arrival times ({} trace): replay it closed-loop (mode = \"closed\") or at a fixed rate (mode = \"rate\", iops = N)",
                self.source,
                self.format.name()
            )),
            _ => Ok(()),
        }
    }

    /// Warnings a reader of this trace's replay should see.
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        let n = self.records.len() as u64;
        if self.timed && !self.spread_ticks && n >= 64 && self.distinct_times * 4 <= n {
            w.push(format!(
                "coarse timestamps: {n} requests share {} distinct times ({:.1} per time); timed replay issues each group at once (spread_ticks spreads them over their tick)",
                self.distinct_times,
                n as f64 / self.distinct_times.max(1) as f64
            ));
        }
        if let Some(l) = self.locality_only() {
            w.push(l);
        }
        w
    }
}

#[cfg(test)]
mod tests;
