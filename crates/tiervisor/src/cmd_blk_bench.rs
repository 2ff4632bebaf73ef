//! `tiervisor blk-bench`: random reads at a fixed depth against one volume, over NBD or
//! over vhost-user-blk (the small frontend in `tiervisor_server::vhost::client`, so the
//! backend is measured without a VM: fio in a TCG guest measures the emulator). Both loops
//! have the same shape: reap what has completed, queue as many new reads, send them in one
//! go (one socket write for NBD, one kick for vhost-user).
//!
//! It prints one JSON object; `bench/vhost_nbd.py` adds the server's CPU time.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use tiervisor_server::vhost::client::BlkClient;

use crate::Failure;
use crate::nbd_client::{self, Cmd, NbdUri};

#[derive(Args)]
pub struct BlkBenchArgs {
    /// An NBD URI (nbd://HOST:PORT/EXPORT or nbd+unix:///EXPORT?socket=PATH) or a
    /// vhost-user socket path (vhost-user:PATH).
    target: String,
    /// Requests in flight.
    #[arg(long, default_value_t = 32)]
    qd: u16,
    /// Request size in bytes (a multiple of 512).
    #[arg(long, default_value_t = 4096)]
    bs: u32,
    /// Seconds to run (after a one-second warm-up).
    #[arg(long, default_value_t = 5.0)]
    runtime_s: f64,
    /// Seed of the offsets.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

/// xorshift64*: offsets need not be good random numbers, only cheap and repeatable.
struct Offsets {
    s: u64,
    blocks: u64,
    bs: u64,
}

impl Offsets {
    fn next(&mut self) -> u64 {
        self.s ^= self.s >> 12;
        self.s ^= self.s << 25;
        self.s ^= self.s >> 27;
        (self.s.wrapping_mul(0x2545_f491_4f6c_dd1d) % self.blocks) * self.bs
    }
}

struct Counts {
    done: u64,
    errors: u64,
}

pub fn run(a: BlkBenchArgs) -> Result<(), Failure> {
    if a.bs == 0 || !a.bs.is_multiple_of(512) || a.qd == 0 || a.qd > 256 {
        return Err(Failure::input(
            "--bs must be a positive multiple of 512 and --qd 1..=256",
        ));
    }
    if !(a.runtime_s > 0.0 && a.runtime_s.is_finite()) {
        return Err(Failure::input("--runtime-s must be a positive number"));
    }
    let warm = Duration::from_secs(1);
    let run = Duration::from_secs_f64(a.runtime_s);
    let (kind, counts, secs) = if let Some(path) = a.target.strip_prefix("vhost-user:") {
        let (c, s) = vhost(&PathBuf::from(path), &a, warm, run).map_err(Failure::run)?;
        ("vhost-user-blk", c, s)
    } else {
        let uri = NbdUri::parse(&a.target).map_err(Failure::input)?;
        let (c, s) = nbd(&uri, &a, warm, run).map_err(Failure::run)?;
        ("nbd", c, s)
    };
    println!(
        "{}",
        serde_json::json!({
            "transport": kind,
            "qd": a.qd,
            "bs": a.bs,
            "seconds": secs,
            "requests": counts.done,
            "errors": counts.errors,
            "iops": counts.done as f64 / secs,
        })
    );
    if counts.errors > 0 {
        return Err(Failure::run(format!("{} request(s) failed", counts.errors)));
    }
    Ok(())
}

/// Runs `step` (which returns completions) until warm-up plus `run`; counts only after the
/// warm-up. Returns the counts and the measured seconds.
fn timed(
    warm: Duration,
    run: Duration,
    mut step: impl FnMut() -> Result<(u64, u64), String>,
) -> Result<(Counts, f64), String> {
    let t0 = Instant::now();
    let mut counts = Counts { done: 0, errors: 0 };
    let mut measuring_since = None;
    loop {
        let (done, errors) = step()?;
        let now = Instant::now();
        match measuring_since {
            None if now >= t0 + warm => measuring_since = Some(now),
            Some(since) => {
                counts.done += done;
                counts.errors += errors;
                if now >= since + run {
                    return Ok((counts, (now - since).as_secs_f64()));
                }
            }
            None => counts.errors += errors,
        }
    }
}

fn vhost(
    path: &std::path::Path,
    a: &BlkBenchArgs,
    warm: Duration,
    run: Duration,
) -> Result<(Counts, f64), String> {
    let mut c = BlkClient::connect(path, 1, a.qd, a.bs)?;
    let mut off = Offsets {
        s: a.seed | 1,
        blocks: c.capacity_bytes() / u64::from(a.bs),
        bs: u64::from(a.bs),
    };
    for slot in 0..a.qd {
        c.push(0, slot, 0, off.next() / 512, &[], a.bs);
    }
    c.kick(0)?;
    timed(warm, run, || {
        let got = c.reap(0, 10_000)?;
        let errors = got.iter().filter(|r| r.status != 0).count() as u64;
        for r in &got {
            c.push(0, r.slot, 0, off.next() / 512, &[], a.bs);
        }
        c.kick(0)?;
        Ok((got.len() as u64, errors))
    })
}

fn nbd(
    uri: &NbdUri,
    a: &BlkBenchArgs,
    warm: Duration,
    run: Duration,
) -> Result<(Counts, f64), String> {
    let (mut tx, mut rx, info) = nbd_client::connect(uri, &uri.export)?;
    let mut off = Offsets {
        s: a.seed | 1,
        blocks: info.size_bytes / u64::from(a.bs),
        bs: u64::from(a.bs),
    };
    let bs = a.bs;
    for h in 0..u64::from(a.qd) {
        tx.push(Cmd::Read, h, off.next(), bs, &[])?;
    }
    tx.send()?;
    timed(warm, run, || {
        // Every reply already buffered, then the replacements in one write.
        let mut n = 0u64;
        let mut errors = 0u64;
        loop {
            let r = rx.next(|_| Some(bs))?;
            n += 1;
            errors += u64::from(r.error != 0);
            tx.push(Cmd::Read, r.handle, off.next(), bs, &[])?;
            if rx.buffered_bytes() < 16 {
                break;
            }
        }
        tx.send()?;
        Ok((n, errors))
    })
}
