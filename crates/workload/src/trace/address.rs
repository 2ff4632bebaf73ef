//! Address-only traces: block addresses without an operation or a time.
//!
//! Cache-replacement traces (ARC's `StartingBlock NumberOfBlocks Ignore RequestNumber`,
//! streams of uint32 block numbers) say only which blocks were touched, in order. They
//! can measure locality (what a placement or cache keeps), not timing: tiervisor reads
//! them only when told the format and an assumed operation, replays them closed-loop or at
//! a fixed rate, and labels their reports as locality-only.

use std::io::Read;

use rand::{RngCore, SeedableRng};
use rand_xoshiro::Xoshiro256PlusPlus;
use serde::Serialize;

use super::formats::{Parsed, fields, record, sectors};
use super::{TraceFormat, TraceOp, TraceRecord};

/// The operation given to records that carry none.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AssumeOp {
    Read,
    Write,
    /// Each record is a read with this probability, drawn from a seeded generator.
    Mix {
        read_fraction: f64,
        seed: u64,
    },
}

impl AssumeOp {
    /// `read`, `write` or `mix:FRACTION` (the share of reads, 0 to 1).
    pub fn parse(s: &str, seed: u64) -> Result<AssumeOp, String> {
        match s {
            "read" => Ok(AssumeOp::Read),
            "write" => Ok(AssumeOp::Write),
            _ => match s.strip_prefix("mix:").map(str::parse::<f64>) {
                Some(Ok(f)) if (0.0..=1.0).contains(&f) => Ok(AssumeOp::Mix {
                    read_fraction: f,
                    seed,
                }),
                _ => Err(format!(
                    "assumed operation {s:?}: expected read, write or mix:FRACTION (the share of reads, 0 to 1)"
                )),
            },
        }
    }

    pub fn describe(&self) -> String {
        match self {
            AssumeOp::Read => "every request assumed a read".to_string(),
            AssumeOp::Write => "every request assumed a write".to_string(),
            AssumeOp::Mix {
                read_fraction,
                seed,
            } => format!(
                "operations drawn: {:.1}% reads (seed {seed})",
                read_fraction * 100.0
            ),
        }
    }

    /// Give every record its assumed operation, in file order (deterministic per seed).
    pub(crate) fn apply(&self, records: &mut [TraceRecord]) {
        let mut rng = match self {
            AssumeOp::Mix { seed, .. } => Some(Xoshiro256PlusPlus::seed_from_u64(*seed)),
            _ => None,
        };
        for r in records {
            r.op = match (self, rng.as_mut()) {
                (AssumeOp::Read, _) => TraceOp::Read,
                (AssumeOp::Write, _) => TraceOp::Write,
                (AssumeOp::Mix { read_fraction, .. }, Some(rng)) => {
                    let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                    if u < *read_fraction {
                        TraceOp::Read
                    } else {
                        TraceOp::Write
                    }
                }
                (AssumeOp::Mix { .. }, None) => unreachable!("a mix always has its generator"),
            };
        }
    }
}

/// One ARC-style line: `StartingBlock NumberOfBlocks Ignore RequestNumber`.
pub(crate) fn arc_line(line: &str) -> Result<Parsed, String> {
    let f = fields(line, None, 4, TraceFormat::Arc)?;
    if f.len() != 4 {
        return Err(format!(
            "expected {}, got {} fields",
            TraceFormat::Arc.expected(),
            f.len()
        ));
    }
    // The third and fourth fields are an unused value and a request counter: checked as
    // numbers so another format is not silently taken for this one.
    for (v, what) in [(f[2], "Ignore"), (f[3], "RequestNumber")] {
        if v.parse::<u64>().is_err() {
            return Err(format!("{what} {v:?} is not a whole number"));
        }
    }
    record(
        0,
        0,
        sectors(f[0], "StartingBlock")?,
        sectors(f[1], "NumberOfBlocks")?,
        TraceOp::Write,
    )
    .map(Parsed::Record)
}

/// Read a stream of little-endian uint32 block numbers, one block per request.
pub(crate) fn raw_u32(
    name: &str,
    mut reader: impl Read,
    block_size_bytes: u64,
) -> Result<Vec<TraceRecord>, String> {
    let mut bytes = Vec::new();
    reader
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{name}: cannot read: {e}"))?;
    if bytes.len() % 4 != 0 {
        return Err(format!(
            "{name}: {} bytes is not a whole number of 4-byte block numbers ({} left over)",
            bytes.len(),
            bytes.len() % 4
        ));
    }
    bytes
        .chunks_exact(4)
        .enumerate()
        .map(|(i, b)| {
            let block = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64;
            // A u32 block number times a block size of at most 2^40 bytes fits in u64
            // with room for the length; `record` still checks.
            record(
                0,
                0,
                block * block_size_bytes,
                block_size_bytes,
                TraceOp::Write,
            )
            .map_err(|e| format!("{name}: block number {} (byte {}): {e}", i, i * 4))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assumed_operations_are_seeded_and_near_the_fraction() {
        let mk = || {
            (0..10_000)
                .map(|i| TraceRecord {
                    arrival_ns: 0,
                    device: 0,
                    offset_bytes: i * 512,
                    len_bytes: 512,
                    op: TraceOp::Write,
                })
                .collect::<Vec<_>>()
        };
        let a = AssumeOp::parse("mix:0.7", 9).unwrap();
        let (mut x, mut y) = (mk(), mk());
        a.apply(&mut x);
        a.apply(&mut y);
        assert_eq!(x, y, "same seed, same operations");
        let reads = x.iter().filter(|r| r.op == TraceOp::Read).count();
        assert!((6_700..7_300).contains(&reads), "{reads}");
        let mut z = mk();
        AssumeOp::parse("mix:0.7", 10).unwrap().apply(&mut z);
        assert_ne!(x, z, "another seed, other operations");
        AssumeOp::Read.apply(&mut z);
        assert!(z.iter().all(|r| r.op == TraceOp::Read));
        for bad in ["mix:1.5", "mix:", "reads", "mix:x"] {
            assert!(AssumeOp::parse(bad, 0).is_err(), "{bad}");
        }
    }

    #[test]
    fn arc_lines_are_512_byte_blocks() {
        let Ok(Parsed::Record(r)) = arc_line("100 8 0 1") else {
            panic!()
        };
        assert_eq!((r.offset_bytes, r.len_bytes), (51_200, 4096));
        assert!(arc_line("100 8 0").unwrap_err().contains("StartingBlock"));
        assert!(arc_line("100 8 0 1 5").unwrap_err().contains("5 fields"));
        assert!(arc_line("100 8 x 1").unwrap_err().contains("Ignore"));
    }

    #[test]
    fn raw_u32_streams_are_little_endian_blocks() {
        let bytes: Vec<u8> = [7u32, 0, u32::MAX]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect();
        let r = raw_u32("x.bin", &bytes[..], 4096).unwrap();
        assert_eq!(
            r.iter().map(|r| r.offset_bytes).collect::<Vec<_>>(),
            vec![7 * 4096, 0, u32::MAX as u64 * 4096]
        );
        assert!(r.iter().all(|r| r.len_bytes == 4096));
        let e = raw_u32("x.bin", &bytes[..5], 4096).unwrap_err();
        assert!(e.contains("1 left over"), "{e}");
    }
}
