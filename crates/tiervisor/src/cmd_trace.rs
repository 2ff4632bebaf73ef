//! `tiervisor trace info`.

use std::path::PathBuf;

use clap::Subcommand;
use tiervisor_workload::trace::{AssumeOp, BlkEvent, LoadOptions};
use tiervisor_workload::{Trace, TraceFormat};

use crate::Failure;

#[derive(Subcommand)]
pub enum TraceCmd {
    /// Format, request count, read/write mix, sizes, time and LBA span, per-device counts.
    Info {
        file: PathBuf,
        /// Trace format (default: detected from the first line; `arc` and `raw-u32`
        /// only by name).
        #[arg(long)]
        format: Option<String>,
        /// blkparse: which event is the request, `D` (issued, after merging) or `Q`
        /// (queued, before merging).
        #[arg(long, default_value = "D")]
        event: String,
        /// raw-u32: bytes per block number.
        #[arg(long)]
        block_size: Option<String>,
        /// Address-only traces: `read`, `write` or `mix:FRACTION` (share of reads).
        #[arg(long)]
        assume_op: Option<String>,
        /// Seed for `--assume-op mix:...`.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Spread requests that share a timestamp evenly over its tick.
        #[arg(long)]
        spread_ticks: bool,
        #[arg(long)]
        json: bool,
    },
}

fn options(
    format: Option<String>,
    event: &str,
    block_size: Option<String>,
    assume_op: Option<String>,
    seed: u64,
    spread_ticks: bool,
) -> Result<LoadOptions, Failure> {
    let format = format
        .map(|f| TraceFormat::from_name(&f))
        .transpose()
        .map_err(Failure::input)?;
    let blkparse_event = BlkEvent::parse(event).ok_or_else(|| {
        Failure::input(format!(
            "--event {event:?}: expected D (issued) or Q (queued)"
        ))
    })?;
    let block_size_bytes = match block_size {
        Some(b) => Some(
            tiervisor_conf::parse_size(&b)
                .map_err(|e| Failure::input(format!("--block-size {b:?}: {e}")))?,
        ),
        None => None,
    };
    let assume_op = match assume_op {
        Some(a) => Some(AssumeOp::parse(&a, seed).map_err(Failure::input)?),
        None => None,
    };
    Ok(LoadOptions {
        format,
        blkparse_event,
        block_size_bytes,
        assume_op,
        spread_ticks,
    })
}

pub fn run(cmd: TraceCmd) -> Result<(), Failure> {
    match cmd {
        TraceCmd::Info {
            file,
            format,
            event,
            block_size,
            assume_op,
            seed,
            spread_ticks,
            json,
        } => {
            let opts = options(format, &event, block_size, assume_op, seed, spread_ticks)?;
            let t = Trace::load_with(&file, &opts).map_err(|e| Failure::input(e.to_string()))?;
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
            if i.timed {
                println!(
                    "time span     {:.3} s ({} distinct times)",
                    i.span_s, i.distinct_times
                );
            } else {
                println!("time span     none: the trace has no arrival times");
            }
            for (why, n) in &i.skipped {
                println!("skipped       {n} {why}");
            }
            for w in &i.warnings {
                println!("warning       {w}");
            }
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
