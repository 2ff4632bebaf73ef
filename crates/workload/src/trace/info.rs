//! What `tiervisor trace info` prints about a trace.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Trace, TraceFormat, TraceOp};

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
    /// Lines that carried no request, by reason.
    pub skipped: BTreeMap<String, u64>,
    /// Whether records carry arrival times (timed replay needs them).
    pub timed: bool,
    /// Distinct arrival times as read.
    pub distinct_times: u64,
    /// Set for address-only traces: what was assumed, and that replays measure locality.
    pub locality_only: Option<String>,
    /// Coarse timestamps and other things a reader of a replay should know.
    pub warnings: Vec<String>,
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
            skipped: t.skipped.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            timed: t.timed,
            distinct_times: t.distinct_times,
            locality_only: t.locality_only(),
            warnings: t.warnings(),
        }
    }
}
