//! `tiervisor ctl migrate`: move a volume of a running server to another pool (seed 004).

use std::time::Duration;

use clap::Subcommand;
use serde_json::{Value, json};
use tiervisor_server::{admin, admin_migrate};

use crate::Failure;
use crate::cmd_serve::Target;

#[derive(Subcommand)]
pub enum MigrateCmd {
    /// Start moving VOLUME (thin, pinned placement) to pool --to while it serves I/O.
    Start {
        /// The volume (export) name.
        volume: String,
        /// The destination pool's name.
        #[arg(long)]
        to: String,
        /// dbt, mirror, lr, slr, aio, or auto (the lowest predicted migration cost).
        #[arg(long, default_value = "auto")]
        scheme: String,
        /// Copy rate cap in MB/s (10^6 bytes; default 64 MiB/s).
        #[arg(long)]
        rate_mb_s: Option<f64>,
        /// Weight of SSD wear against I/O performance (0 to 1), for `auto`.
        #[arg(long)]
        gamma: Option<f64>,
        /// DBT's dirty-tracking unit (a power of two from 512 to the chunk size, e.g. 4k).
        #[arg(long)]
        granularity: Option<String>,
        /// Largest single copy operation (e.g. 1m).
        #[arg(long)]
        buffer: Option<String>,
        /// DBT pauses the volume after this many passes even if the dirty set shrinks.
        #[arg(long)]
        max_passes: Option<u32>,
        /// The copy's share of a disk the VM keeps busy: background (the VM's I/O first)
        /// or equal (the copy queues with it, as seed 004's copy process did).
        #[arg(long)]
        copy_priority: Option<String>,
        /// DBT's dirty-pass and final-copy chunk copies in flight, 1 to 64 (default 16,
        /// QEMU mirror's; 1 copies one chunk at a time, as seed 004's copy process).
        #[arg(long)]
        copy_window: Option<u32>,
        /// DBT copies a dirty chunk whole (one read, one write) once its dirty blocks form
        /// this many separate runs or more; 0 never (seed 004's copy). Default 4.
        #[arg(long)]
        coalesce_runs: Option<u32>,
        /// Show progress until the job is over, then its report (non-zero exit unless done).
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Phase, bytes copied of the total, dirty and redundant bytes, pass, elapsed time,
    /// rate and ETA of VOLUME's migration (running or last), or of every volume's.
    Status {
        volume: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// Change a running migration's copy rate cap (MB/s).
    SetRate {
        volume: String,
        rate_mb_s: f64,
        #[command(flatten)]
        target: Target,
    },
    /// Cancel VOLUME's migration: the source stays (or becomes again) authoritative.
    Cancel {
        volume: String,
        /// Wait until the cancel is complete.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        target: Target,
    },
}

/// Send one request; the server's refusal becomes an input error (exit status 2).
pub(crate) fn ask(target: &Target, req: Value) -> Result<Value, Failure> {
    let r = admin::request(&target.socket(), &req.to_string()).map_err(Failure::run)?;
    let v: Value = serde_json::from_str(&r)
        .map_err(|e| Failure::run(format!("bad answer from the server: {e}")))?;
    if let Some(e) = v["error"].as_str() {
        return Err(Failure::input(e.to_string()));
    }
    Ok(v)
}

fn size(s: &Option<String>, what: &str) -> Result<Option<u64>, Failure> {
    s.as_deref()
        .map(|s| {
            tiervisor_conf::parse_size(s).map_err(|e| Failure::input(format!("--{what} {s}: {e}")))
        })
        .transpose()
}

pub fn run(cmd: MigrateCmd) -> Result<(), Failure> {
    match cmd {
        MigrateCmd::Start {
            volume,
            to,
            scheme,
            rate_mb_s,
            gamma,
            granularity,
            buffer,
            max_passes,
            copy_priority,
            copy_window,
            coalesce_runs,
            wait,
            target,
        } => {
            let req = json!({
                "cmd": "migrate",
                "action": "start",
                "volume": volume,
                "to": to,
                "scheme": scheme,
                "rate_mb_s": rate_mb_s,
                "gamma": gamma,
                "granularity_bytes": size(&granularity, "granularity")?,
                "buffer_bytes": size(&buffer, "buffer")?,
                "dbt_max_passes": max_passes,
                "copy_priority": copy_priority,
                "copy_window_chunks": copy_window,
                "coalesce_runs": coalesce_runs,
            });
            let v = ask(&target, req)?;
            let m = &v["migration"];
            if target.json && !wait {
                println!("{v}");
                return Ok(());
            }
            println!(
                "{volume}: migrating to {} with {}{}",
                m["to"].as_str().unwrap_or("?"),
                m["scheme"].as_str().unwrap_or("?"),
                match m["why"].as_str() {
                    Some(w) if !w.is_empty() => format!(" ({w})"),
                    _ => String::new(),
                }
            );
            if wait {
                return wait_over(&target, &volume, "done");
            }
            Ok(())
        }
        MigrateCmd::Status { volume, target } => {
            let v = ask(
                &target,
                json!({"cmd": "migrate", "action": "status", "volume": volume}),
            )?;
            if target.json {
                println!("{}", v["migrations"]);
                return Ok(());
            }
            let all = v["migrations"].as_array().cloned().unwrap_or_default();
            if all.is_empty() {
                println!("no migrations since the server started");
            }
            for m in &all {
                println!("{}", admin_migrate::status_line(m));
            }
            Ok(())
        }
        MigrateCmd::SetRate {
            volume,
            rate_mb_s,
            target,
        } => {
            let v = ask(
                &target,
                json!({"cmd": "migrate", "action": "set-rate", "volume": volume, "rate_mb_s": rate_mb_s}),
            )?;
            if target.json {
                println!("{v}");
                return Ok(());
            }
            println!(
                "{volume}: copy rate cap {:.1} MB/s",
                v["migration"]["rate_bytes_per_s"].as_f64().unwrap_or(0.0) / 1e6
            );
            Ok(())
        }
        MigrateCmd::Cancel {
            volume,
            wait,
            target,
        } => {
            let v = ask(
                &target,
                json!({"cmd": "migrate", "action": "cancel", "volume": volume}),
            )?;
            if target.json && !wait {
                println!("{v}");
                return Ok(());
            }
            println!("{volume}: cancel asked; the source stays authoritative");
            if wait {
                return wait_over(&target, &volume, "cancelled");
            }
            Ok(())
        }
    }
}

/// Poll the job with a progress bar until it is over; its last status line (with --json,
/// its status object) is the report. Anything but the `want`ed end is a failure.
fn wait_over(target: &Target, volume: &str, want: &str) -> Result<(), Failure> {
    let bar = indicatif::ProgressBar::new(1000);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {percent:>3}% {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    if target.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    loop {
        let v = ask(
            target,
            json!({"cmd": "migrate", "action": "status", "volume": volume}),
        )?;
        let m = &v["migrations"][0];
        bar.set_position((m["percent_copied"].as_f64().unwrap_or(0.0) * 10.0) as u64);
        bar.set_message(format!(
            "{} pass {}",
            m["phase"].as_str().unwrap_or("?"),
            m["pass"]
        ));
        if m["running"] == false {
            bar.finish_and_clear();
            if target.json {
                println!("{m}");
            } else {
                println!("{}", admin_migrate::status_line(m));
            }
            return match m["phase"].as_str() {
                Some(p) if p == want => Ok(()),
                p => Err(Failure::run(format!(
                    "{volume}: the migration ended {}",
                    p.unwrap_or("?")
                ))),
            };
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
