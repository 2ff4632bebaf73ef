//! CSV traces whose first line names the columns.
//!
//! Recognised column names (case-insensitive; other columns are ignored):
//! - offset: `offset`, `offset_bytes`, `byte_offset` in bytes; `lba`, `lbn`, `sector` in
//!   512-byte sectors (required);
//! - size: `size`, `size_bytes`, `length`, `len`, `bytes` in bytes; `sectors`,
//!   `size_sectors` in sectors (required);
//! - op: `op`, `opcode`, `type`, `iotype`, `rw`, `operation`: `r`/`read`/`w`/`write`, or a
//!   SCSI opcode in hex (`28` READ(10), `2a` WRITE(10), and the 6-, 12- and 16-byte
//!   forms); other SCSI commands (SYNCHRONIZE CACHE, INQUIRY, ...) are counted as skipped.
//!   Without an op column the trace is address-only and needs an assumed operation;
//! - time: `time`, `timestamp`, `ts` in seconds; `time_ms`, `time_us`, `time_ns`;
//!   without one the trace has no arrival times (closed-loop or fixed-rate replay only);
//! - device: `device`, `dev`, `disk`, `disknumber`, `lun`, `volume`, `volumeid`, `asu`.
//!
//! The CloudPhysics vSCSI CSV (`version,time,op,size,lbn`: time in seconds, op a SCSI
//! opcode in hex, size in bytes, lbn in 512-byte sectors) is read by these rules.

use super::TraceOp;
use super::formats::{Parsed, int, record, small, time_ns, times};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Bytes,
    Sectors,
}

/// Which column holds what, from the header line.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Columns {
    offset: (usize, Unit),
    size: (usize, Unit),
    op: Option<usize>,
    /// Column and its unit in nanoseconds.
    time: Option<(usize, f64)>,
    device: Option<usize>,
    width: usize,
}

impl Columns {
    /// The columns of a header line, or what is missing.
    pub(crate) fn from_header(line: &str) -> Result<Columns, String> {
        let names: Vec<String> = line
            .split(',')
            .map(|n| n.trim().trim_matches('"').to_ascii_lowercase())
            .collect();
        let find = |set: &[&str]| names.iter().position(|n| set.contains(&n.as_str()));
        let offset = find(&["offset", "offset_bytes", "byte_offset"])
            .map(|i| (i, Unit::Bytes))
            .or_else(|| find(&["lba", "lbn", "sector"]).map(|i| (i, Unit::Sectors)));
        let size = find(&["size", "size_bytes", "length", "len", "bytes"])
            .map(|i| (i, Unit::Bytes))
            .or_else(|| find(&["sectors", "size_sectors"]).map(|i| (i, Unit::Sectors)));
        let time = find(&["time", "timestamp", "ts", "time_s"])
            .map(|i| (i, 1e9))
            .or_else(|| find(&["time_ms"]).map(|i| (i, 1e6)))
            .or_else(|| find(&["time_us"]).map(|i| (i, 1e3)))
            .or_else(|| find(&["time_ns"]).map(|i| (i, 1.0)));
        match (offset, size) {
            (Some(offset), Some(size)) => Ok(Columns {
                offset,
                size,
                op: find(&["op", "opcode", "type", "iotype", "rw", "operation"]),
                time,
                device: find(&[
                    "device",
                    "dev",
                    "disk",
                    "disknumber",
                    "lun",
                    "volume",
                    "volumeid",
                    "asu",
                ]),
                width: names.len(),
            }),
            _ => Err(format!(
                "CSV header {line:?} names no {} column (offset: offset, lba or lbn; size: size, length or sectors)",
                if offset.is_none() { "offset" } else { "size" }
            )),
        }
    }

    pub(crate) fn has_op(&self) -> bool {
        self.op.is_some()
    }

    pub(crate) fn has_time(&self) -> bool {
        self.time.is_some()
    }

    /// One data line. Records of traces without an op column are writes until the loader
    /// applies the assumed operation.
    pub(crate) fn line(&self, line: &str) -> Result<Parsed, String> {
        let f: Vec<&str> = line
            .split(',')
            .map(|s| s.trim().trim_matches('"'))
            .collect();
        if f.len() < self.width {
            return Err(format!(
                "expected {} comma-separated fields as the header names, got {}",
                self.width,
                f.len()
            ));
        }
        let op = match self.op {
            None => TraceOp::Write,
            Some(i) => match op_of(f[i])? {
                Some(op) => op,
                None => return Ok(Parsed::Skip("SCSI commands other than READ and WRITE")),
            },
        };
        let value = |(i, unit): (usize, Unit), what: &str| -> Result<u64, String> {
            let v = int(f[i], what)?;
            match unit {
                Unit::Bytes => Ok(v),
                Unit::Sectors => times(v, 512, what, "sectors"),
            }
        };
        let arrival_ns = match self.time {
            Some((i, unit_ns)) => time_ns(f[i], "time", unit_ns)?,
            None => 0,
        };
        let device = match self.device {
            Some(i) => small(f[i], "device")?,
            None => 0,
        };
        record(
            arrival_ns,
            device,
            value(self.offset, "offset")?,
            value(self.size, "size")?,
            op,
        )
        .map(Parsed::Record)
    }
}

/// An op field: a word, or a SCSI opcode in hex. `Ok(None)`: a command without data.
fn op_of(s: &str) -> Result<Option<TraceOp>, String> {
    match s.to_ascii_lowercase().as_str() {
        "r" | "read" => return Ok(Some(TraceOp::Read)),
        "w" | "write" => return Ok(Some(TraceOp::Write)),
        _ => {}
    }
    let hex = s.trim_start_matches("0x").trim_start_matches("0X");
    let code = (hex.len() == 2)
        .then(|| u8::from_str_radix(hex, 16).ok())
        .flatten()
        .ok_or_else(|| {
            format!(
                "op {s:?} is not r, read, w, write or a two-digit SCSI opcode in hex (28 READ(10), 2a WRITE(10))"
            )
        })?;
    Ok(match code {
        0x08 | 0x28 | 0xa8 | 0x88 => Some(TraceOp::Read),
        0x0a | 0x2a | 0xaa | 0x8a => Some(TraceOp::Write),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(c: &Columns, line: &str) -> (u64, u32, u64, u64, TraceOp) {
        match c.line(line) {
            Ok(Parsed::Record(r)) => (r.arrival_ns, r.device, r.offset_bytes, r.len_bytes, r.op),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn cloudphysics_vscsi_columns() {
        let c = Columns::from_header("version,time,op,size,lbn").unwrap();
        assert!(c.has_op() && c.has_time());
        assert_eq!(
            rec(&c, "1,0.5,28,4096,100"),
            (500_000_000, 0, 51200, 4096, TraceOp::Read)
        );
        assert_eq!(
            rec(&c, "1,1.25,2a,8192,8"),
            (1_250_000_000, 0, 4096, 8192, TraceOp::Write)
        );
        assert_eq!(rec(&c, "1,2,0x8A,512,1").4, TraceOp::Write);
        // SYNCHRONIZE CACHE(10) carries no data.
        assert_eq!(
            c.line("1,2,35,0,0"),
            Ok(Parsed::Skip("SCSI commands other than READ and WRITE"))
        );
        let e = c.line("1,2,zz,512,1").unwrap_err();
        assert!(e.contains("SCSI opcode"), "{e}");
        let e = c.line("1,2,28,512").unwrap_err();
        assert!(e.contains("expected 5"), "{e}");
    }

    #[test]
    fn named_columns_in_any_order_with_units() {
        let c = Columns::from_header("Disk, Type, Offset, Size, Time_us, Response").unwrap();
        assert_eq!(
            rec(&c, "3,Read,4096,512,7,99"),
            (7_000, 3, 4096, 512, TraceOp::Read)
        );
        let c = Columns::from_header("lba,sectors").unwrap();
        assert!(!c.has_op() && !c.has_time());
        assert_eq!(rec(&c, "2,8"), (0, 0, 1024, 4096, TraceOp::Write));
        let e = Columns::from_header("time,op,size").unwrap_err();
        assert!(e.contains("no offset"), "{e}");
        let e = Columns::from_header("time,op,lba").unwrap_err();
        assert!(e.contains("no size"), "{e}");
    }
}
