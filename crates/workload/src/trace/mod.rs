//! Block traces: loading (any supported format, compressed or not), summaries, replay.

mod formats;

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

pub use formats::{MAX_RECORD_BYTES, TraceFormat, parse_line};
use serde::Serialize;

use crate::error::WorkloadError;
use crate::{WlKind, WlRequest, Workload};

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
#[derive(Clone, Debug)]
pub struct Trace {
    pub source: String,
    pub format: TraceFormat,
    pub records: Vec<TraceRecord>,
    /// Records of zero bytes, left out of `records` (nothing to replay) but reported.
    pub zero_length_records: u64,
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
        let name = path.display().to_string();
        let reader = open_decompressed(path)?;
        Self::parse(&name, reader, format)
    }

    /// Parse a trace from any reader; `name` is used in error messages.
    pub fn parse(
        name: &str,
        reader: impl BufRead,
        format: Option<TraceFormat>,
    ) -> Result<Trace, WorkloadError> {
        let mut fmt = format;
        let mut records = Vec::new();
        let mut zero_length_records = 0;
        for (i, line) in reader.lines().enumerate() {
            let lineno = i as u64 + 1;
            let line = line
                .map_err(|e| WorkloadError::at(name, lineno, format!("cannot read line: {e}")))?;
            let t = line.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            let f = match fmt {
                Some(f) => f,
                None => {
                    let f = TraceFormat::detect(t).ok_or_else(|| {
                        WorkloadError::at(
                            name,
                            lineno,
                            format!(
                                "unrecognised trace format; expected one of: {}",
                                Self::formats_list()
                            ),
                        )
                    })?;
                    fmt = Some(f);
                    f
                }
            };
            if let Some(r) = parse_line(f, t).map_err(|m| WorkloadError::at(name, lineno, m))? {
                if r.len_bytes == 0 {
                    zero_length_records += 1;
                    continue;
                }
                records.push(r);
            }
        }
        let format = fmt.unwrap_or(TraceFormat::Disksim);
        // Rebase times to the first request and keep arrival order.
        if let Some(t0) = records.iter().map(|r| r.arrival_ns).min() {
            for r in &mut records {
                r.arrival_ns -= t0;
            }
        }
        if records
            .windows(2)
            .any(|w| w[1].arrival_ns < w[0].arrival_ns)
        {
            records.sort_by_key(|r| r.arrival_ns);
        }
        Ok(Trace {
            source: name.to_string(),
            format,
            records,
            zero_length_records,
        })
    }

    fn formats_list() -> String {
        TraceFormat::all()
            .iter()
            .map(|f| format!("{} {}", f.name(), f.expected()))
            .collect::<Vec<_>>()
            .join("; ")
    }

    pub fn info(&self) -> TraceInfo {
        TraceInfo::of(self)
    }

    /// Time from the first to the last arrival.
    pub fn span_ns(&self) -> u64 {
        self.records.last().map_or(0, |r| r.arrival_ns)
    }
}

/// Summary of a trace, as `tiervisor trace info` prints it.
#[derive(Clone, Debug, Serialize)]
pub struct TraceInfo {
    pub source: String,
    pub format: TraceFormat,
    pub requests: u64,
    /// Zero-byte records in the file, not counted in `requests` and not replayed.
    pub zero_length_records: u64,
    pub reads: u64,
    pub writes: u64,
    pub read_fraction: f64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub mean_size_bytes: f64,
    /// Request count by size, in power-of-two buckets ("<=4096" etc.).
    /// In increasing size order.
    pub size_histogram: Vec<(String, u64)>,
    pub span_s: f64,
    pub first_offset_bytes: u64,
    pub last_byte: u64,
    /// Distinct 1 MiB chunks touched.
    pub touched_mib: u64,
    pub devices: BTreeMap<u32, DeviceInfo>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct DeviceInfo {
    pub requests: u64,
    /// Zero-byte records in the file, not counted in `requests` and not replayed.
    pub zero_length_records: u64,
    pub reads: u64,
    pub writes: u64,
    pub last_byte: u64,
    pub touched_mib: u64,
}

fn bucket(size: u64) -> (u64, String) {
    let b = size.max(512).next_power_of_two();
    (b, format!("<={b}"))
}

impl TraceInfo {
    pub fn of(t: &Trace) -> TraceInfo {
        let mut hist: BTreeMap<u64, (String, u64)> = BTreeMap::new();
        let mut devices: BTreeMap<u32, DeviceInfo> = BTreeMap::new();
        let mut touched = std::collections::BTreeSet::new();
        let mut dev_touched: BTreeMap<u32, std::collections::BTreeSet<u64>> = BTreeMap::new();
        let (mut reads, mut writes, mut rb, mut wb) = (0, 0, 0, 0);
        let (mut first, mut last) = (u64::MAX, 0);
        for r in &t.records {
            let len = r.len_bytes;
            match r.op {
                TraceOp::Read => {
                    reads += 1;
                    rb += len;
                }
                TraceOp::Write => {
                    writes += 1;
                    wb += len;
                }
            }
            let (k, label) = bucket(len);
            hist.entry(k).or_insert((label, 0)).1 += 1;
            first = first.min(r.offset_bytes);
            let end = r.offset_bytes + len;
            last = last.max(end);
            let d = devices.entry(r.device).or_default();
            d.requests += 1;
            if r.op == TraceOp::Read {
                d.reads += 1
            } else {
                d.writes += 1
            }
            d.last_byte = d.last_byte.max(end);
            for c in r.offset_bytes >> 20..=(end - 1) >> 20 {
                touched.insert((r.device, c));
                dev_touched.entry(r.device).or_default().insert(c);
            }
        }
        for (dev, set) in dev_touched {
            if let Some(d) = devices.get_mut(&dev) {
                d.touched_mib = set.len() as u64;
            }
        }
        let n = t.records.len() as u64;
        TraceInfo {
            source: t.source.clone(),
            format: t.format,
            requests: n,
            zero_length_records: t.zero_length_records,
            reads,
            writes,
            read_fraction: if n > 0 { reads as f64 / n as f64 } else { 0.0 },
            read_bytes: rb,
            write_bytes: wb,
            mean_size_bytes: if n > 0 {
                (rb + wb) as f64 / n as f64
            } else {
                0.0
            },
            size_histogram: hist.into_values().collect(),
            span_s: t.span_ns() as f64 / 1e9,
            first_offset_bytes: if n > 0 { first } else { 0 },
            last_byte: last,
            touched_mib: touched.len() as u64,
            devices,
        }
    }
}

/// How a trace is replayed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReplayMode {
    /// At the recorded arrival times, divided by `speed`.
    Timed { speed: f64 },
    /// Ignore times; keep `depth` requests outstanding.
    Closed { depth: u32 },
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
        })
    }

    fn depth(&self) -> u32 {
        match self.mode {
            ReplayMode::Closed { depth } => depth.max(1),
            ReplayMode::Timed { .. } => u32::MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Trace {
        let text = "# comment\n100 0 8 8 1\n300 1 16 16 0\n200 0 1000000 8 1\n";
        Trace::parse("t.trace", text.as_bytes(), None).unwrap()
    }

    #[test]
    fn parse_rebases_and_sorts() {
        let t = sample();
        assert_eq!(t.format, TraceFormat::Disksim);
        assert_eq!(
            t.records.iter().map(|r| r.arrival_ns).collect::<Vec<_>>(),
            vec![0, 100, 200]
        );
        let i = t.info();
        assert_eq!((i.requests, i.reads, i.writes), (3, 2, 1));
        assert_eq!(i.devices[&0].requests, 2);
        assert_eq!(
            i.size_histogram,
            vec![("<=4096".to_string(), 2), ("<=8192".to_string(), 1)]
        );
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = Trace::parse("bad.trace", "1 0 8 8 1\n2 0 8\n".as_bytes(), None).unwrap_err();
        assert_eq!(
            e.to_string().split(':').take(2).collect::<Vec<_>>(),
            vec!["bad.trace", "2"]
        );
        let e = Trace::parse("x.csv", "what is this\n".as_bytes(), None).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("x.csv:1: unrecognised trace format"),
            "{e}"
        );
    }

    /// Issue 11: `0 0 36028797018963968 8 1` overflowed `lba * 512` (a panic in debug, a
    /// wrapped offset in release); every reader checks its arithmetic and says where.
    #[test]
    fn out_of_range_fields_are_errors_with_file_and_line() {
        let cases = [
            ("1 0 8 8 1\n0 0 36028797018963968 8 1\n", "StartLBA"),
            ("0 0 8 36028797018963968 1\n", "SizeInSectors"),
            ("0 4294967296 8 8 1\n", "Device"),
            ("0 0 36028797018963960 8 1\n", "ends beyond 2^64"),
            ("1e30 0 8 8 1\n", "ArrivalTime"),
            ("0,36028797018963968,4096,W,0.5\n", "LBA"),
            ("0,8,4096,W,1e30\n", "Timestamp"),
            ("200000000000000000,h,0,Read,0,4096,1\n", "Timestamp"),
            ("18446744073709551615,h,0,Read,1,4096,1\n", "Timestamp"),
            (
                "0,h,0,Read,18446744073709551615,4096,1\n",
                "ends beyond 2^64",
            ),
            ("0,h,0,Read,0,2199023255553,1\n", "limit"),
            ("8,16 0 1 0.5 7 Q W 36028797018963968 + 8 [x]\n", "sector"),
            ("16777216,16 0 1 0.5 7 Q W 8 + 8 [x]\n", "major"),
            ("18446744073709551615 /dev/x write 0 4096\n", "time"),
            ("18446744073709551615,0,8,1,0\n", "Timestamp"),
            ("0,0,36028797018963968,1,0\n", "Size"),
            ("0,0,W,4294967296,0,4096\n", "LUN"),
        ];
        for (text, what) in cases {
            let e = Trace::parse("big.trace", text.as_bytes(), None)
                .expect_err(&format!("{text:?} must be rejected"))
                .to_string();
            let line = text.lines().count();
            assert!(
                e.starts_with(&format!("big.trace:{line}:")),
                "{text:?}: {e}"
            );
            assert!(e.contains(what), "{text:?}: {e}");
        }
    }

    /// Sizes over 4 GiB are kept, not truncated by a cast to `u32`.
    #[test]
    fn sizes_over_4_gib_are_kept() {
        let t = Trace::parse("t", "0 0 0 16777216 0\n".as_bytes(), None).unwrap();
        assert_eq!(t.records[0].len_bytes, 8 << 30);
        let t = Trace::parse("t", "0,h,0,Write,0,8589934592,1\n".as_bytes(), None).unwrap();
        assert_eq!(t.records[0].len_bytes, 8 << 30);
        assert_eq!(t.info().write_bytes, 8 << 30);
    }

    #[test]
    fn zero_length_records_are_counted_not_replayed() {
        let t = Trace::parse("t", "0 0 8 0 1\n1 0 8 8 1\n2 0 16 0 0\n".as_bytes(), None).unwrap();
        assert_eq!(t.records.len(), 1);
        assert_eq!(t.zero_length_records, 2);
        let i = t.info();
        assert_eq!((i.requests, i.zero_length_records), (1, 2));
    }

    #[test]
    fn empty_trace_is_empty_not_an_error() {
        let t = Trace::parse("empty", "".as_bytes(), None).unwrap();
        assert!(t.records.is_empty());
        assert_eq!(t.info().requests, 0);
    }

    #[test]
    fn replay_filters_devices_wraps_offsets_and_repeats() {
        let t = Arc::new(sample());
        let mut w = TraceWorkload::new(
            t.clone(),
            &[0],
            ReplayMode::Timed { speed: 2.0 },
            2,
            1 << 20,
        );
        let reqs: Vec<WlRequest> = std::iter::from_fn(|| w.next(0)).collect();
        assert_eq!(reqs.len(), 4);
        assert!(
            reqs.iter()
                .all(|r| r.offset_bytes + r.len_bytes <= 1 << 20 && r.offset_bytes % 512 == 0)
        );
        assert_eq!(reqs[0].at_ns, Some(0));
        assert!(reqs[2].at_ns.unwrap() > reqs[1].at_ns.unwrap());
    }
}
