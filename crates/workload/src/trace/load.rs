//! Reading a whole trace: binary detection, format detection, the per-format line
//! readers, assumptions for address-only traces, and the checks that a trace holds
//! something to replay.

use std::collections::BTreeMap;
use std::io::BufRead;

use serde::Serialize;

use super::address::{self, AssumeOp};
use super::csv::Columns;
use super::formats::{Parsed, parse_line};
use super::{Trace, TraceFormat, TraceRecord, blkparse, ticks};
use crate::error::WorkloadError;

/// Which blkparse event is the request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum BlkEvent {
    /// `Q`: queued by the file system, before merging (what the application asked).
    Queue,
    /// `D`: issued to the driver, after merging (what the device saw).
    #[default]
    Issue,
}

impl BlkEvent {
    pub fn parse(s: &str) -> Option<BlkEvent> {
        match s {
            "Q" | "q" => Some(BlkEvent::Queue),
            "D" | "d" => Some(BlkEvent::Issue),
            _ => None,
        }
    }

    pub(crate) fn action(self) -> &'static str {
        match self {
            BlkEvent::Queue => "Q",
            BlkEvent::Issue => "D",
        }
    }
}

/// How to read a trace. The default detects a text format from its first line.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    pub format: Option<TraceFormat>,
    pub blkparse_event: BlkEvent,
    /// Bytes per block number, for `raw-u32`.
    pub block_size_bytes: Option<u64>,
    /// The operation of records that carry none (address-only traces); required for them,
    /// refused for traces with operations.
    pub assume_op: Option<AssumeOp>,
    /// Spread records sharing a timestamp evenly over the time to the next one.
    pub spread_ticks: bool,
}

/// The reader of one format's lines, chosen by name or by the first line.
enum LineReader {
    Detect,
    Simple(TraceFormat),
    Blkparse(blkparse::Parser),
    CsvHeader,
    Csv(Columns),
    Arc,
}

impl LineReader {
    fn new(opts: &LoadOptions) -> LineReader {
        match opts.format {
            None => LineReader::Detect,
            Some(f) => Self::of(f, opts),
        }
    }

    fn of(f: TraceFormat, opts: &LoadOptions) -> LineReader {
        match f {
            TraceFormat::Blkparse => {
                LineReader::Blkparse(blkparse::Parser::new(opts.blkparse_event))
            }
            TraceFormat::Csv => LineReader::CsvHeader,
            TraceFormat::Arc => LineReader::Arc,
            f => LineReader::Simple(f),
        }
    }

    fn format(&self) -> Option<TraceFormat> {
        match self {
            LineReader::Detect => None,
            LineReader::Simple(f) => Some(*f),
            LineReader::Blkparse(_) => Some(TraceFormat::Blkparse),
            LineReader::CsvHeader | LineReader::Csv(_) => Some(TraceFormat::Csv),
            LineReader::Arc => Some(TraceFormat::Arc),
        }
    }

    fn line(&mut self, t: &str, opts: &LoadOptions) -> Result<Parsed, String> {
        if let LineReader::Detect = self {
            let f = TraceFormat::detect(t).ok_or_else(|| {
                format!(
                    "unrecognised trace format; expected one of: {}",
                    formats_list()
                )
            })?;
            *self = Self::of(f, opts);
        }
        match self {
            LineReader::Detect => unreachable!("detected above"),
            LineReader::Simple(f) => parse_line(*f, t),
            LineReader::Blkparse(p) => p.line(t),
            LineReader::CsvHeader => {
                *self = LineReader::Csv(Columns::from_header(t)?);
                Ok(Parsed::Blank)
            }
            LineReader::Csv(c) => c.line(t),
            LineReader::Arc => address::arc_line(t),
        }
    }

    /// Whether the records carry an operation and a time.
    fn carries(&self) -> (bool, bool) {
        match self {
            LineReader::Csv(c) => (c.has_op(), c.has_time()),
            LineReader::Arc => (false, false),
            _ => (true, true),
        }
    }
}

fn formats_list() -> String {
    TraceFormat::all()
        .iter()
        .filter(|f| !f.address_only())
        .map(|f| format!("{} {}", f.name(), f.expected()))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why the start of a stream is not text, if it is not.
fn binary(head: &[u8]) -> Option<String> {
    // blktrace's own per-CPU files start with the magic 0x65617400 plus a version byte.
    if head.len() >= 4 && head[1..4] == *b"tae" {
        return Some(
            "a binary blktrace file, not blkparse text: convert it with `blkparse -i FILE -o FILE.txt` and read the text"
                .to_string(),
        );
    }
    let bad = head.iter().position(|&b| b == 0).or_else(|| {
        std::str::from_utf8(head)
            .err()
            .filter(|e| e.error_len().is_some())
            .map(|e| e.valid_up_to())
    })?;
    Some(format!(
        "binary data, not a text trace (byte {bad} is 0x{:02x}); a stream of little-endian uint32 block numbers is read with format raw-u32, a block size and an assumed operation; other binary formats need converting to text first",
        head[bad]
    ))
}

pub(super) fn parse(
    name: &str,
    mut reader: impl BufRead,
    opts: &LoadOptions,
) -> Result<Trace, WorkloadError> {
    let file_err = |m: String| WorkloadError::file(name, m);
    if opts.format == Some(TraceFormat::RawU32) {
        let block = opts.block_size_bytes.filter(|b| *b > 0).ok_or_else(|| {
            file_err(
                "raw-u32 needs a block size (--block-size BYTES, scenario key block_size)".into(),
            )
        })?;
        let records = address::raw_u32(name, reader, block).map_err(file_err)?;
        return finish(
            name,
            TraceFormat::RawU32,
            records,
            Tally::default(),
            (false, false),
            opts,
        );
    }
    let head = reader
        .fill_buf()
        .map_err(|e| file_err(format!("cannot read: {e}")))?;
    if let Some(why) = binary(head) {
        return Err(file_err(why));
    }
    let mut lines = LineReader::new(opts);
    let mut records = Vec::new();
    let mut tally = Tally::default();
    for (i, line) in reader.lines().enumerate() {
        let lineno = i as u64 + 1;
        let line =
            line.map_err(|e| WorkloadError::at(name, lineno, format!("cannot read line: {e}")))?;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        match lines
            .line(t, opts)
            .map_err(|m| WorkloadError::at(name, lineno, m))?
        {
            Parsed::Record(r) if r.len_bytes == 0 => tally.zero_length += 1,
            Parsed::Record(r) => records.push(r),
            Parsed::Skip(why) => *tally.skipped.entry(why).or_default() += 1,
            Parsed::Blank => {}
        }
    }
    let format = lines.format().ok_or_else(|| {
        file_err("no trace records: the file is empty or holds only comments".into())
    })?;
    let carries = lines.carries();
    finish(name, format, records, tally, carries, opts)
}

/// What was read besides requests.
#[derive(Default)]
struct Tally {
    zero_length: u64,
    skipped: BTreeMap<&'static str, u64>,
}

fn finish(
    name: &str,
    format: TraceFormat,
    mut records: Vec<TraceRecord>,
    tally: Tally,
    (has_op, has_time): (bool, bool),
    opts: &LoadOptions,
) -> Result<Trace, WorkloadError> {
    let file_err = |m: String| WorkloadError::file(name, m);
    if records.is_empty() {
        let mut what: Vec<String> = tally
            .skipped
            .iter()
            .map(|(why, n)| format!("{n} {why}"))
            .collect();
        if tally.zero_length > 0 {
            what.push(format!("{} of zero bytes", tally.zero_length));
        }
        return Err(file_err(format!(
            "no request records ({} trace{}); expected {}",
            format.name(),
            if what.is_empty() {
                String::new()
            } else {
                format!(", skipped: {}", what.join(", "))
            },
            format.expected()
        )));
    }
    match (has_op, opts.assume_op) {
        (false, None) => {
            return Err(file_err(format!(
                "a {} trace carries no operations: give one to assume (--assume-op read|write|mix:FRACTION, scenario key assume_op); its replays measure locality only",
                format.name()
            )));
        }
        (false, Some(a)) => a.apply(&mut records),
        (true, Some(_)) => {
            return Err(file_err(format!(
                "an assumed operation applies only to traces without one (arc, raw-u32, csv without an op column); this {} trace has its own",
                format.name()
            )));
        }
        (true, None) => {}
    }
    // Rebase times to the first request and keep arrival order (a stable sort keeps file
    // order among equal times).
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
    let distinct_times = ticks::distinct(&records);
    if opts.spread_ticks {
        if !has_time {
            return Err(file_err(format!(
                "spread_ticks: this {} trace has no times to spread",
                format.name()
            )));
        }
        ticks::spread(&mut records);
    }
    Ok(Trace {
        source: name.to_string(),
        format,
        records,
        zero_length_records: tally.zero_length,
        skipped: tally.skipped,
        timed: has_time,
        assumed_op: if has_op { None } else { opts.assume_op },
        distinct_times,
        spread_ticks: opts.spread_ticks,
    })
}
