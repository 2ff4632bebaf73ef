//! Plots of seed 001's figures from `reproduce flush --plot DIR` (SVG, drawn with
//! plotters through `plot_migration`'s panels): Figures 1/8 (both VMs' bandwidth against
//! the fsync frequency), 2/6 (FLUSH latency and bytes flushed per FLUSH, by kind) and 7
//! (write-buffer utilisation over time). Baseline lines are the even colours, tagged the
//! odd ones. Nothing random and no timestamps: the same result draws the same bytes.

use tiervisor_sim::reproduce::FlushResult;
use tiervisor_sim::reproduce::flush::{MicroRow, MicroSide};

use crate::plot_migration::{Panel, Series, draw_panels};

/// fsync frequencies whose buffer utilisation Figure 7 draws (one panel each).
const FIG7_FSYNC_EVERY: [u32; 3] = [1, 4, 16];

/// A Baseline line and a tagged line of `f` against N, over the rows `rows`.
fn both(name: &str, c: usize, rows: &[&MicroRow], f: &dyn Fn(&MicroSide) -> f64) -> [Series; 2] {
    let line = |side: &dyn Fn(&MicroRow) -> &MicroSide| {
        rows.iter()
            .map(|r| (f64::from(r.fsync_every), f(side(r))))
            .collect::<Vec<_>>()
    };
    [
        (format!("{name}, Baseline"), c, line(&|r| &r.baseline)),
        (format!("{name}, tagged"), c + 1, line(&|r| &r.tagged)),
    ]
}

/// Figures 1/8: VM1's and VM2's bandwidth against N.
fn fig8(r: &FlushResult) -> Result<String, String> {
    let rows: Vec<&MicroRow> = r.micro.iter().collect();
    let series = [
        both("VM1 (no fsync)", 0, &rows, &|s| s.vm1_mb_per_s),
        both("VM2 (fsync every N)", 2, &rows, &|s| s.vm2_mb_per_s),
    ]
    .concat();
    let panel = Panel {
        caption: "bandwidth of each VM".into(),
        x_desc: "N: VM2 fsyncs every N writes (0: never)",
        y_desc: "MB/s",
        series,
    };
    draw_panels(
        "Figures 1/8: two VMs, 4 KiB random writes at QD1, simulated openssd-jasmine",
        &[panel],
    )
}

/// Figures 2/6: mean FLUSH latency, and KiB programmed per FLUSH by kind.
fn fig6(r: &FlushResult) -> Result<String, String> {
    let rows: Vec<&MicroRow> = r.micro.iter().filter(|m| m.fsync_every > 0).collect();
    let latency = Panel {
        caption: "(a) mean FLUSH latency".into(),
        x_desc: "N",
        y_desc: "us",
        series: both("latency", 0, &rows, &|s| s.flush_latency_us).to_vec(),
    };
    let bytes = Panel {
        caption: "(b) KiB programmed per FLUSH".into(),
        x_desc: "N",
        y_desc: "KiB per FLUSH",
        series: [
            both("own data", 0, &rows, &|s| s.own_data_kib_per_flush),
            both("other VMs' data", 2, &rows, &|s| s.other_data_kib_per_flush),
            both("mapping", 4, &rows, &|s| s.map_kib_per_flush),
        ]
        .concat(),
    };
    draw_panels(
        "Figures 2/6: what a FLUSH costs, Baseline against tagged, simulated",
        &[latency, bytes],
    )
}

/// Figure 7: write-buffer utilisation over time, one panel per N of [`FIG7_FSYNC_EVERY`].
fn fig7(r: &FlushResult) -> Result<String, String> {
    let panels: Vec<Panel> = FIG7_FSYNC_EVERY
        .iter()
        .filter_map(|&n| r.micro.iter().find(|m| m.fsync_every == n))
        .map(|m| {
            let pct = |s: &MicroSide| -> Vec<(f64, f64)> {
                s.buffer_utilisation
                    .iter()
                    .map(|&(t, u)| (t, 100.0 * u))
                    .collect()
            };
            Panel {
                caption: format!("N = {}", m.fsync_every),
                x_desc: "time (s)",
                y_desc: "buffer utilisation (%)",
                series: vec![
                    ("Baseline".into(), 0, pct(&m.baseline)),
                    ("tagged".into(), 1, pct(&m.tagged)),
                ],
            }
        })
        .collect();
    if panels.is_empty() {
        return Err("plot Figure 7: no micro-benchmark run with N = 1, 4 or 16".into());
    }
    draw_panels(
        "Figure 7: write-buffer utilisation over time, simulated",
        &panels,
    )
}

/// Every figure: (file name, SVG).
pub fn figures(r: &FlushResult) -> Result<Vec<(String, String)>, String> {
    Ok(vec![
        ("fig1_8_bandwidth.svg".into(), fig8(r)?),
        ("fig2_6_flush_cost.svg".into(), fig6(r)?),
        ("fig7_buffer.svg".into(), fig7(r)?),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiervisor_sim::reproduce::flush::FSYNC_EVERY;

    fn side(x: f64) -> MicroSide {
        MicroSide {
            vm1_mb_per_s: 6.0 + x,
            vm2_mb_per_s: 2.0 + x,
            flushes: 10,
            flush_latency_us: 3000.0 - 100.0 * x,
            own_data_kib_per_flush: 8.0 * x,
            other_data_kib_per_flush: 16.0,
            map_kib_per_flush: 24.0 - x,
            host_kib_per_flush: 0.0,
            mean_buffer_utilisation: 0.5,
            buffer_utilisation: (1..=20)
                .map(|i| (0.05 * i as f64, 0.04 * i as f64))
                .collect(),
            time_us_per_flush: Default::default(),
            by_flusher: vec![],
        }
    }

    fn result() -> FlushResult {
        FlushResult {
            micro: FSYNC_EVERY
                .iter()
                .map(|&n| MicroRow {
                    fsync_every: n,
                    baseline: side(n as f64 / 8.0),
                    tagged: side(n as f64 / 4.0),
                })
                .collect(),
            apps: vec![],
            checks: vec![],
            summary: String::new(),
        }
    }

    #[test]
    fn each_figure_has_its_lines_and_draws_the_same_bytes() {
        let r = result();
        let figs = figures(&r).unwrap();
        // Lines per figure: 4 (Fig. 8), 2 + 6 (Fig. 6), 2 per panel of Fig. 7.
        for ((name, svg), lines) in figs.iter().zip([4, 8, 6]) {
            assert!(svg.starts_with("<svg"), "{name}");
            let n = svg.matches("stroke-width=\"2\" points=").count();
            assert_eq!(n, lines, "{name}");
        }
        assert_eq!(figs, figures(&r).unwrap());
        let dir = std::env::temp_dir().join(format!("tv-plot-flush-{}", std::process::id()));
        for (name, svg) in &figs {
            assert!(crate::plot_migration::write(&dir, name, svg).is_ok());
            let len = std::fs::metadata(dir.join(name)).map_or(0, |m| m.len());
            assert!(len > 1000, "{name}: {len} bytes");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn figure_7_without_its_runs_is_an_error_not_an_empty_plot() {
        let mut r = result();
        r.micro.retain(|m| m.fsync_every == 0);
        let e = figures(&r).unwrap_err();
        assert!(e.contains("Figure 7"), "{e}");
    }
}
