//! `tiervisor reproduce flush`: seed 001 in simulation, tables and a report directory.

use std::fmt::Write as _;
use std::path::Path;

use tiervisor_sim::reproduce::{FlushOptions, FlushResult, flush};

use crate::Failure;
use crate::cmd_reproduce::{FlushArgs, default_jobs};

pub fn run(a: FlushArgs) -> Result<(), Failure> {
    let (runtime_s, jobs, json, out) = a.parts();
    if !(runtime_s.is_finite() && runtime_s > 0.0) {
        return Err(Failure::input("--runtime-s: expected a positive number"));
    }
    let opts = FlushOptions {
        micro_runtime_s: runtime_s,
        app_runtime_s: runtime_s,
        jobs: default_jobs(jobs),
    };
    let r = flush(&opts).map_err(Failure::run)?;
    let text = tables(&r);
    if json {
        let v = serde_json::to_string_pretty(&r).map_err(|e| Failure::run(e.to_string()))?;
        println!("{v}");
    } else {
        print!("{text}");
    }
    if let Some(dir) = out {
        write_out(dir, &r, &text).map_err(|e| Failure::run(format!("{}: {e}", dir.display())))?;
        eprintln!("report written to {}", dir.join("flush.md").display());
    }
    if let Some(dir) = a.plot_dir() {
        for (name, svg) in crate::plot_flush::figures(&r).map_err(Failure::run)? {
            crate::plot_migration::write(dir, &name, &svg)?;
        }
        eprintln!("Figures 1/8, 2/6 and 7 drawn in {}", dir.display());
    }
    Ok(())
}

/// Every table, as printed and as written to the report.
fn tables(r: &FlushResult) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Figures 1/8: bandwidth (MB/s) of VM1 (no fsync) and VM2 (fsync every N writes)"
    );
    let _ = writeln!(
        s,
        "{:>4} {:>9} {:>9} {:>9} {:>9}",
        "N", "VM1 base", "VM1 tag", "VM2 base", "VM2 tag"
    );
    for m in &r.micro {
        let _ = writeln!(
            s,
            "{:>4} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            m.fsync_every,
            m.baseline.vm1_mb_per_s,
            m.tagged.vm1_mb_per_s,
            m.baseline.vm2_mb_per_s,
            m.tagged.vm2_mb_per_s
        );
    }
    let _ = writeln!(
        s,
        "\nFigures 2/6: per FLUSH, Baseline -> tagged: latency (us), KiB of the flushing VM's data (VM2's fsyncs, either VM's 5 s commits), other VMs' data, mapping, host"
    );
    let _ = writeln!(
        s,
        "{:>4} {:>17} {:>15} {:>15} {:>15} {:>11} {:>9} {:>9}",
        "N", "latency us", "own KiB", "other KiB", "map KiB", "host KiB", "lat x", "map x"
    );
    for m in r.micro.iter().filter(|m| m.fsync_every > 0) {
        let (b, t) = (&m.baseline, &m.tagged);
        let x = |t: f64, b: f64| if b > 0.0 { t / b } else { 0.0 };
        let _ = writeln!(
            s,
            "{:>4} {:>8.0}->{:<8.0} {:>7.1}->{:<7.1} {:>7.1}->{:<7.1} {:>7.1}->{:<7.1} {:>5.1}->{:<5.1} {:>9.2} {:>9.2}",
            m.fsync_every,
            b.flush_latency_us,
            t.flush_latency_us,
            b.own_data_kib_per_flush,
            t.own_data_kib_per_flush,
            b.other_data_kib_per_flush,
            t.other_data_kib_per_flush,
            b.map_kib_per_flush,
            t.map_kib_per_flush,
            b.host_kib_per_flush,
            t.host_kib_per_flush,
            x(t.flush_latency_us, b.flush_latency_us),
            x(t.map_kib_per_flush, b.map_kib_per_flush),
        );
    }
    let _ = writeln!(
        s,
        "\nWhere a FLUSH's time goes, us per FLUSH, Baseline / tagged: waiting for an earlier FLUSH, the command, its data programs and log-area fill and mapping pages on idle dies, and waiting for dies busy with earlier work"
    );
    let _ = writeln!(
        s,
        "{:>4} {:>13} {:>11} {:>13} {:>13} {:>11} {:>15}",
        "N", "barrier", "command", "data", "log fill", "map", "queued"
    );
    for m in r.micro.iter().filter(|m| m.fsync_every > 0) {
        let (b, t) = (&m.baseline.time_us_per_flush, &m.tagged.time_us_per_flush);
        let _ = writeln!(
            s,
            "{:>4} {:>6.0}/{:<6.0} {:>5.0}/{:<5.0} {:>6.0}/{:<6.0} {:>6.0}/{:<6.0} {:>5.0}/{:<5.0} {:>7.0}/{:<7.0}",
            m.fsync_every,
            b.barrier_wait,
            t.barrier_wait,
            b.command,
            t.command,
            b.data,
            t.data,
            b.log_fill,
            t.log_fill,
            b.map,
            t.map,
            b.queued,
            t.queued,
        );
    }
    flushers(&mut s, r);
    let _ = writeln!(s, "\nFigure 7: mean write-buffer utilisation");
    let _ = writeln!(s, "{:>4} {:>9} {:>9}", "N", "Baseline", "tagged");
    for m in &r.micro {
        let _ = writeln!(
            s,
            "{:>4} {:>8.1}% {:>8.1}%",
            m.fsync_every,
            100.0 * m.baseline.mean_buffer_utilisation,
            100.0 * m.tagged.mean_buffer_utilisation
        );
    }
    let _ = writeln!(
        s,
        "\nFigure 9: VM1's loops/s (Filebench loops, TPC-C transactions), tagged normalized to Baseline (fileserver's neighbours run varmail)"
    );
    let _ = writeln!(
        s,
        "{:<11} {:>3} {:>10} {:>10} {:>7} {:>6} {:>6}",
        "app", "vms", "base ops/s", "tag ops/s", "norm", "paper", "ratio"
    );
    for a in &r.apps {
        let p = a.paper.unwrap_or(0.0);
        let _ = writeln!(
            s,
            "{:<11} {:>3} {:>10.0} {:>10.0} {:>7.3} {:>6.3} {:>6.2}",
            a.app,
            a.vms,
            a.baseline_ops_per_s,
            a.tagged_ops_per_s,
            a.normalized,
            p,
            if p > 0.0 { a.normalized / p } else { 0.0 }
        );
    }
    let _ = writeln!(s, "\nThe paper's claims against ours");
    let _ = writeln!(
        s,
        "{:<62} {:>7} {:>7} {:>6} {:>8}  target",
        "point", "paper", "model", "ratio", "in band"
    );
    for c in &r.checks {
        let _ = writeln!(
            s,
            "{:<62} {:>7.3} {:>7.3} {:>6.2} {:>8}  {}: {}",
            c.what,
            c.paper,
            c.model,
            c.ratio,
            if c.in_band { "yes" } else { "NO" },
            c.target,
            if c.target_met { "met" } else { "NOT met" }
        );
    }
    let _ = writeln!(s, "\n{}", r.summary);
    s
}

/// `flush.md` (the tables) and CSV files with the plotted series.
fn write_out(dir: &Path, r: &FlushResult, text: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("flush.md"),
        format!("# Seed 001 (vFLUSH) in simulation\n\n```\n{text}```\n"),
    )?;
    let mut bw = String::from("fsync_every,vm1_baseline,vm1_tagged,vm2_baseline,vm2_tagged\n");
    for m in &r.micro {
        let _ = writeln!(
            bw,
            "{},{:.3},{:.3},{:.3},{:.3}",
            m.fsync_every,
            m.baseline.vm1_mb_per_s,
            m.tagged.vm1_mb_per_s,
            m.baseline.vm2_mb_per_s,
            m.tagged.vm2_mb_per_s
        );
    }
    std::fs::write(dir.join("fig8_bandwidth.csv"), bw)?;
    let mut util = String::from("fsync_every,mode,t_s,utilisation\n");
    for m in &r.micro {
        for (mode, side) in [("baseline", &m.baseline), ("tagged", &m.tagged)] {
            for (t, u) in &side.buffer_utilisation {
                let _ = writeln!(util, "{},{mode},{t:.3},{u:.4}", m.fsync_every);
            }
        }
    }
    std::fs::write(dir.join("fig7_buffer.csv"), util)?;
    Ok(())
}

/// Per-FLUSH latency by who sent it: the means Figure 6b averages, taken apart.
fn flushers(s: &mut String, r: &FlushResult) {
    let _ = writeln!(
        s,
        "\nFLUSH latency by who sent it, Baseline -> tagged: count, median and mean us (VM2: its fsyncs and 5 s commits; VM1: its 5 s commits; the paper's Figure 6b averages every FLUSH)"
    );
    let _ = writeln!(
        s,
        "{:>4} {:>6} {:>11} {:>17} {:>17} {:>7} {:>7}",
        "N", "who", "FLUSHes", "median us", "mean us", "med x", "mean x"
    );
    for m in r.micro.iter().filter(|m| m.fsync_every > 0) {
        for who in ["vm2", "vm1"] {
            let (Some(b), Some(t)) = (m.baseline.flusher(who), m.tagged.flusher(who)) else {
                continue;
            };
            let x = |t: f64, b: f64| if b > 0.0 { t / b } else { 0.0 };
            let _ = writeln!(
                s,
                "{:>4} {:>6} {:>5}->{:<5} {:>8.0}->{:<8.0} {:>8.0}->{:<8.0} {:>7.2} {:>7.2}",
                m.fsync_every,
                who,
                b.flushes,
                t.flushes,
                b.median_us,
                t.median_us,
                b.mean_us,
                t.mean_us,
                x(t.median_us, b.median_us),
                x(t.mean_us, b.mean_us),
            );
        }
    }
}
