//! Line parsers for the supported block-trace formats.

use serde::Serialize;

use super::{TraceOp, TraceRecord};

/// Trace formats tiervisor reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TraceFormat {
    /// `ArrivalTime Device StartLBA SizeInSectors Type` (whitespace). MQSim writes the
    /// time in integer nanoseconds, DiskSim in (fractional) milliseconds; Type 1 = read.
    Disksim,
    /// UMass/SPC: `ASU,LBA,Size,Opcode,Timestamp` (LBA in sectors, Size in bytes,
    /// Opcode r/w, Timestamp in seconds).
    Spc,
    /// MSR Cambridge: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`
    /// (Windows FILETIME ticks, Read/Write, bytes).
    Msr,
    /// `blkparse` default text output; `D` (issued) events by default, or `Q` (queued).
    Blkparse,
    /// fio iolog version 2 (no times) or 3 (leading time in ms).
    FioIolog,
    /// Tencent CBS: `Timestamp,Offset,Size,IOType,VolumeID` (seconds, sectors, sectors,
    /// 0 = read 1 = write).
    TencentCbs,
    /// SYSTOR'17: `Timestamp,Response,IOType,LUN,Offset,Size` (seconds, R/W, bytes).
    Systor17,
    /// CSV with a header line naming its columns (the CloudPhysics vSCSI CSV
    /// `version,time,op,size,lbn` among them); see [`super::csv`].
    Csv,
    /// ARC-style address-only trace: `StartingBlock NumberOfBlocks Ignore RequestNumber`
    /// (512-byte blocks, no operation, no time). Only by name, with an assumed operation.
    Arc,
    /// Raw little-endian uint32 block numbers, one block per request, no operation or time.
    /// Only by name, with a block size and an assumed operation.
    RawU32,
}

impl TraceFormat {
    pub fn all() -> &'static [TraceFormat] {
        &[
            TraceFormat::Disksim,
            TraceFormat::Spc,
            TraceFormat::Msr,
            TraceFormat::Blkparse,
            TraceFormat::FioIolog,
            TraceFormat::TencentCbs,
            TraceFormat::Systor17,
            TraceFormat::Csv,
            TraceFormat::Arc,
            TraceFormat::RawU32,
        ]
    }

    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Disksim => "disksim",
            TraceFormat::Spc => "spc",
            TraceFormat::Msr => "msr",
            TraceFormat::Blkparse => "blkparse",
            TraceFormat::FioIolog => "fio-iolog",
            TraceFormat::TencentCbs => "tencent-cbs",
            TraceFormat::Systor17 => "systor17",
            TraceFormat::Csv => "csv",
            TraceFormat::Arc => "arc",
            TraceFormat::RawU32 => "raw-u32",
        }
    }

    /// A format by name; `cloudphysics` is the header CSV reader.
    pub fn parse_name(s: &str) -> Option<TraceFormat> {
        if s == "cloudphysics" {
            return Some(TraceFormat::Csv);
        }
        Self::all().iter().copied().find(|f| f.name() == s)
    }

    /// A format by name, or a message listing the names.
    pub fn from_name(s: &str) -> Result<TraceFormat, String> {
        Self::parse_name(s).ok_or_else(|| {
            format!(
                "unknown trace format {s:?}; expected one of: {}, cloudphysics",
                Self::all()
                    .iter()
                    .map(|f| f.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
    }

    /// Formats without an operation per record: they need an assumed one, and their
    /// replays say they measure locality only.
    pub fn address_only(self) -> bool {
        matches!(self, TraceFormat::Arc | TraceFormat::RawU32)
    }

    /// What a line should look like, for error messages.
    pub fn expected(self) -> &'static str {
        match self {
            TraceFormat::Disksim => {
                "`ArrivalTime Device StartLBA SizeInSectors Type` (5 numbers, Type 1=read 0=write)"
            }
            TraceFormat::Spc => "`ASU,LBA,Size,Opcode,Timestamp` (Opcode r or w)",
            TraceFormat::Msr => {
                "`Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime` (Type Read or Write)"
            }
            TraceFormat::Blkparse => {
                "blkparse text: `maj,min cpu seq time pid action rwbs sector + count`"
            }
            TraceFormat::FioIolog => "fio iolog: `[time] filename action [offset length]`",
            TraceFormat::TencentCbs => {
                "`Timestamp,Offset,Size,IOType,VolumeID` (IOType 0=read 1=write)"
            }
            TraceFormat::Systor17 => "`Timestamp,Response,IOType,LUN,Offset,Size` (IOType R or W)",
            TraceFormat::Csv => {
                "a CSV header line naming the columns (offset or lba/lbn, size, and op, time, device if present), then one request per line"
            }
            TraceFormat::Arc => {
                "`StartingBlock NumberOfBlocks Ignore RequestNumber` (4 whole numbers, 512-byte blocks)"
            }
            TraceFormat::RawU32 => "binary little-endian uint32 block numbers",
        }
    }

    /// Guess the format from the first meaningful line.
    pub fn detect(line: &str) -> Option<TraceFormat> {
        let t = line.trim();
        if t.starts_with("fio version") {
            return Some(TraceFormat::FioIolog);
        }
        if t.to_ascii_lowercase()
            .starts_with("timestamp,response,iotype")
        {
            return Some(TraceFormat::Systor17);
        }
        let comma: Vec<&str> = t.split(',').map(str::trim).collect();
        let num = |s: &str| s.parse::<f64>().is_ok();
        if comma.len() >= 2
            && !comma.iter().any(|f| num(f))
            && super::csv::Columns::from_header(t).is_ok()
        {
            return Some(TraceFormat::Csv);
        }
        match comma.len() {
            7 if matches!(comma[3].to_ascii_lowercase().as_str(), "read" | "write") => {
                return Some(TraceFormat::Msr);
            }
            6 if matches!(comma[2], "R" | "W" | "r" | "w") => return Some(TraceFormat::Systor17),
            n if n >= 5
                && matches!(comma[3], "r" | "w" | "R" | "W")
                && num(comma[0])
                && num(comma[1]) =>
            {
                return Some(TraceFormat::Spc);
            }
            5 if comma.iter().all(|f| num(f)) && matches!(comma[3], "0" | "1") => {
                return Some(TraceFormat::TencentCbs);
            }
            _ => {}
        }
        let ws: Vec<&str> = t.split_whitespace().collect();
        if ws.len() == 5 && ws.iter().all(|f| num(f)) {
            return Some(TraceFormat::Disksim);
        }
        if ws.len() >= 10 && ws[0].contains(',') && ws[8] == "+" {
            return Some(TraceFormat::Blkparse);
        }
        None
    }
}

pub(super) fn int(s: &str, what: &str) -> Result<u64, String> {
    s.trim()
        .parse::<u64>()
        .map_err(|_| format!("{what} {s:?} is not a whole number"))
}

pub(super) fn float(s: &str, what: &str) -> Result<f64, String> {
    let v = s
        .trim()
        .parse::<f64>()
        .map_err(|_| format!("{what} {s:?} is not a number"))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!(
            "{what} {s:?} must be a finite, non-negative number"
        ))
    }
}

pub(super) fn fields(
    line: &str,
    sep: Option<char>,
    n: usize,
    fmt: TraceFormat,
) -> Result<Vec<&str>, String> {
    let f: Vec<&str> = match sep {
        Some(c) => line.split(c).map(str::trim).collect(),
        None => line.split_whitespace().collect(),
    };
    if f.len() < n {
        return Err(format!(
            "expected {}, got {} field(s)",
            fmt.expected(),
            f.len()
        ));
    }
    Ok(f)
}

/// Largest request a trace may describe. Real traces stay far below; the bound keeps a
/// corrupt size from making summaries walk billions of chunks.
pub const MAX_RECORD_BYTES: u64 = 1 << 40;

/// `v * unit`, or a message naming the field if it does not fit in 64 bits.
pub(super) fn times(v: u64, unit: u64, what: &str, unit_name: &str) -> Result<u64, String> {
    v.checked_mul(unit).ok_or_else(|| {
        format!(
            "{what} {v} {unit_name} does not fit in 64 bits (at most {} {unit_name})",
            u64::MAX / unit
        )
    })
}

pub(super) fn sectors(s: &str, what: &str) -> Result<u64, String> {
    times(int(s, what)?, 512, what, "sectors")
}

pub(super) fn small(s: &str, what: &str) -> Result<u32, String> {
    let v = int(s, what)?;
    u32::try_from(v).map_err(|_| format!("{what} {v} is too large (at most {})", u32::MAX))
}

/// A record whose size is within [`MAX_RECORD_BYTES`] and whose end fits in 64 bits.
pub(super) fn record(
    arrival_ns: u64,
    device: u32,
    offset_bytes: u64,
    len_bytes: u64,
    op: TraceOp,
) -> Result<TraceRecord, String> {
    if len_bytes > MAX_RECORD_BYTES {
        return Err(format!(
            "request size {len_bytes} bytes is over the {MAX_RECORD_BYTES}-byte limit"
        ));
    }
    if offset_bytes.checked_add(len_bytes).is_none() {
        return Err(format!(
            "request at byte {offset_bytes} of {len_bytes} bytes ends beyond 2^64"
        ));
    }
    Ok(TraceRecord {
        arrival_ns,
        device,
        offset_bytes,
        len_bytes,
        op,
    })
}

/// A time in `unit_ns` units (fractions allowed) as nanoseconds, if it fits in 64 bits.
pub(super) fn time_ns(s: &str, what: &str, unit_ns: f64) -> Result<u64, String> {
    let ns = (float(s, what)? * unit_ns).round();
    if ns >= u64::MAX as f64 {
        return Err(format!(
            "{what} {s:?} is too far in the future (over 2^64 ns)"
        ));
    }
    Ok(ns as u64)
}

/// What one line of a trace holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A request.
    Record(TraceRecord),
    /// A line that carries no request, and why (counted per reason in [`super::Trace`]).
    Skip(&'static str),
    /// A blank or comment line.
    Blank,
}

/// Parse one line of a stateless line format (every format but `csv`, `blkparse`'s event
/// choice and the address-only ones, which [`super::LineParser`] handles).
pub fn parse_line(fmt: TraceFormat, line: &str) -> Result<Parsed, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(Parsed::Blank);
    }
    let r = match fmt {
        TraceFormat::Disksim => {
            let f = fields(line, None, 5, fmt)?;
            let arrival_ns = if f[0].contains('.') || f[0].contains('e') {
                time_ns(f[0], "ArrivalTime", 1e6)?
            } else {
                int(f[0], "ArrivalTime")?
            };
            let device = small(f[1], "Device")?;
            let offset_bytes = sectors(f[2], "StartLBA")?;
            let len_bytes = sectors(f[3], "SizeInSectors")?;
            let op = match int(f[4], "Type")? & 1 {
                1 => TraceOp::Read,
                _ => TraceOp::Write,
            };
            record(arrival_ns, device, offset_bytes, len_bytes, op)
        }
        TraceFormat::Spc => {
            let f = fields(line, Some(','), 5, fmt)?;
            let op = match f[3] {
                "r" | "R" => TraceOp::Read,
                "w" | "W" => TraceOp::Write,
                o => return Err(format!("Opcode {o:?} is not r or w")),
            };
            record(
                time_ns(f[4], "Timestamp", 1e9)?,
                small(f[0], "ASU")?,
                sectors(f[1], "LBA")?,
                int(f[2], "Size")?,
                op,
            )
        }
        TraceFormat::Msr => {
            let f = fields(line, Some(','), 7, fmt)?;
            let op = match f[3].to_ascii_lowercase().as_str() {
                "read" => TraceOp::Read,
                "write" => TraceOp::Write,
                o => return Err(format!("Type {o:?} is not Read or Write")),
            };
            record(
                // FILETIME ticks are 100 ns; the caller rebases to the first record.
                times(int(f[0], "Timestamp")?, 100, "Timestamp", "ticks")?,
                small(f[2], "DiskNumber")?,
                int(f[4], "Offset")?,
                int(f[5], "Size")?,
                op,
            )
        }
        TraceFormat::Blkparse => {
            return super::blkparse::Parser::new(super::BlkEvent::Issue).line(line);
        }
        TraceFormat::FioIolog => {
            if line.starts_with("fio version") {
                return Ok(Parsed::Skip("fio iolog header"));
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            // v3 lines start with a time in ms.
            let (t, rest) = match f.first().map(|s| s.parse::<u64>()) {
                Some(Ok(ms)) if f.len() >= 3 => (times(ms, 1_000_000, "time", "ms")?, &f[1..]),
                _ => (0, &f[..]),
            };
            match rest.get(1).copied() {
                Some("read") | Some("write") if rest.len() >= 4 => record(
                    t,
                    0,
                    int(rest[2], "offset")?,
                    int(rest[3], "length")?,
                    if rest[1] == "read" {
                        TraceOp::Read
                    } else {
                        TraceOp::Write
                    },
                ),
                Some("read") | Some("write") => {
                    Err(format!("expected {}, got {:?}", fmt.expected(), line))
                }
                Some(_) => return Ok(Parsed::Skip("fio iolog file action (open, close, wait)")),
                None => Err(format!("expected {}, got {:?}", fmt.expected(), line)),
            }
        }
        TraceFormat::TencentCbs => {
            let f = fields(line, Some(','), 5, fmt)?;
            let op = match f[3] {
                "0" => TraceOp::Read,
                "1" => TraceOp::Write,
                o => return Err(format!("IOType {o:?} is not 0 or 1")),
            };
            record(
                times(int(f[0], "Timestamp")?, 1_000_000_000, "Timestamp", "s")?,
                small(f[4], "VolumeID")?,
                sectors(f[1], "Offset")?,
                sectors(f[2], "Size")?,
                op,
            )
        }
        TraceFormat::Systor17 => {
            if line.to_ascii_lowercase().starts_with("timestamp") {
                return Ok(Parsed::Skip("header line"));
            }
            let f = fields(line, Some(','), 6, fmt)?;
            let op = match f[2] {
                "R" | "r" => TraceOp::Read,
                "W" | "w" => TraceOp::Write,
                o => return Err(format!("IOType {o:?} is not R or W")),
            };
            record(
                time_ns(f[0], "Timestamp", 1e9)?,
                small(f[3], "LUN")?,
                int(f[4], "Offset")?,
                int(f[5], "Size")?,
                op,
            )
        }
        TraceFormat::Csv | TraceFormat::Arc | TraceFormat::RawU32 => {
            return Err(format!(
                "{} is read with its header or assumptions (internal: use the trace loader)",
                fmt.name()
            ));
        }
    };
    r.map(Parsed::Record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(p: Parsed) -> TraceRecord {
        match p {
            Parsed::Record(r) => r,
            other => panic!("expected a record, got {other:?}"),
        }
    }

    #[test]
    fn detects_each_format_from_a_sample_line() {
        let cases = [
            ("11413000 0 657728 16 1", TraceFormat::Disksim),
            ("0.125 1 2048 8 0", TraceFormat::Disksim),
            ("0,20941264,8192,W,0.551706", TraceFormat::Spc),
            ("1,8,4096,r,1.5,extra", TraceFormat::Spc),
            (
                "128166385295514663,hm,0,Write,9056014336,2048,2833",
                TraceFormat::Msr,
            ),
            (
                "  8,0    3        1     0.000000000  697  Q   W 223490 + 8 [kjournald]",
                TraceFormat::Blkparse,
            ),
            ("fio version 2 iolog", TraceFormat::FioIolog),
            ("1538323200,23567,8,1,1063", TraceFormat::TencentCbs),
            (
                "Timestamp,Response,IOType,LUN,Offset,Size",
                TraceFormat::Systor17,
            ),
            ("1487894400.055,0.0012,R,3,4096,8192", TraceFormat::Systor17),
        ];
        for (line, f) in cases {
            assert_eq!(TraceFormat::detect(line), Some(f), "{line}");
            parse_line(f, line).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
        assert_eq!(TraceFormat::detect("hello world"), None);
    }

    #[test]
    fn fields_are_converted_to_bytes_and_nanoseconds() {
        let r = parse_line(TraceFormat::Disksim, "11413000 0 657728 16 1")
            .map(rec)
            .unwrap();
        assert_eq!(
            r,
            TraceRecord {
                arrival_ns: 11_413_000,
                device: 0,
                offset_bytes: 657728 * 512,
                len_bytes: 8192,
                op: TraceOp::Read
            }
        );
        let r = parse_line(TraceFormat::Spc, "2,100,4096,w,1.5")
            .map(rec)
            .unwrap();
        assert_eq!(
            r,
            TraceRecord {
                arrival_ns: 1_500_000_000,
                device: 2,
                offset_bytes: 51200,
                len_bytes: 4096,
                op: TraceOp::Write
            }
        );
        let r = parse_line(TraceFormat::Blkparse, "8,16 0 5 1.25 99 D R 100 + 8 [x]")
            .map(rec)
            .unwrap();
        assert_eq!(
            (r.device, r.offset_bytes, r.len_bytes, r.op),
            ((8 << 8) | 16, 51200, 4096, TraceOp::Read)
        );
        assert_eq!(
            parse_line(TraceFormat::Blkparse, "8,16 0 5 1.25 99 C R 100 + 8 [0]").unwrap(),
            Parsed::Skip("blkparse C events (completions)")
        );
        let r = parse_line(TraceFormat::FioIolog, "17 /dev/x write 4096 512")
            .map(rec)
            .unwrap();
        assert_eq!(
            (r.arrival_ns, r.offset_bytes, r.op),
            (17_000_000, 4096, TraceOp::Write)
        );
        assert_eq!(
            parse_line(TraceFormat::FioIolog, "/dev/x open").unwrap(),
            Parsed::Skip("fio iolog file action (open, close, wait)")
        );
    }

    #[test]
    fn malformed_lines_say_what_was_expected() {
        let e = parse_line(TraceFormat::Disksim, "1 2 3").unwrap_err();
        assert!(
            e.contains("ArrivalTime Device StartLBA") && e.contains("got 3"),
            "{e}"
        );
        let e = parse_line(TraceFormat::Spc, "0,1,2,x,3").unwrap_err();
        assert!(e.contains("Opcode"), "{e}");
        let e = parse_line(TraceFormat::Disksim, "1 2 -3 4 1").unwrap_err();
        assert!(e.contains("StartLBA"), "{e}");
        let e = parse_line(TraceFormat::Spc, "0,1,2,r,nan").unwrap_err();
        assert!(e.contains("Timestamp"), "{e}");
    }
}
