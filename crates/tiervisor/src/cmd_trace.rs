//! `tiervisor trace info`.

use std::path::PathBuf;

use clap::Subcommand;
use tiervisor_workload::{Trace, TraceFormat};

use crate::Failure;

#[derive(Subcommand)]
pub enum TraceCmd {
    /// Format, request count, read/write mix, sizes, time and LBA span, per-device counts.
    Info {
        file: PathBuf,
        /// Trace format (default: detected from the first line).
        #[arg(long)]
        format: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: TraceCmd) -> Result<(), Failure> {
    match cmd {
        TraceCmd::Info { file, format, json } => {
            let fmt = match format {
                Some(f) => Some(TraceFormat::parse_name(&f).ok_or_else(|| {
                    Failure::input(format!(
                        "unknown trace format {f:?}; expected one of: {}",
                        TraceFormat::all()
                            .iter()
                            .map(|f| f.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                })?),
                None => None,
            };
            let t = Trace::load(&file, fmt).map_err(|e| Failure::input(e.to_string()))?;
            let i = t.info();
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&i).map_err(|e| Failure::run(e.to_string()))?
                );
                return Ok(());
            }
            println!("file          {}", i.source);
            println!("format        {}", i.format.name());
            println!(
                "requests      {} ({} reads, {} writes, {:.2}% reads)",
                i.requests,
                i.reads,
                i.writes,
                i.read_fraction * 100.0
            );
            if i.zero_length_records > 0 {
                println!(
                    "zero-length   {} records of 0 bytes left out (nothing to replay)",
                    i.zero_length_records
                );
            }
            println!(
                "bytes         {} read, {} written, mean request {:.0} bytes",
                i.read_bytes, i.write_bytes, i.mean_size_bytes
            );
            println!("time span     {:.3} s", i.span_s);
            println!(
                "offset span   {} .. {} bytes ({} distinct MiB touched)",
                i.first_offset_bytes, i.last_byte, i.touched_mib
            );
            println!("sizes");
            for (b, n) in &i.size_histogram {
                println!("  {b:>12} bytes  {n}");
            }
            println!("devices");
            for (d, di) in &i.devices {
                println!(
                    "  {d:>6}  {} requests ({} reads, {} writes), last byte {}, {} MiB touched",
                    di.requests, di.reads, di.writes, di.last_byte, di.touched_mib
                );
            }
            Ok(())
        }
    }
}
