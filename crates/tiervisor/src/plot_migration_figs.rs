//! Plots of seed 004's Figures 10-14 over Table 7's benchmarks (`reproduce migration
//! --out DIR`): for each pool pair (Figures 11-14), lambda_migration_time
//! and lambda_IO per benchmark (x: the benchmark's number in Table 7's order, named in the
//! caption) and MC against gamma averaged over the benchmarks, one line per scheme; and
//! Figure 10, the SSD writes under IOzone's write test against the file size, one panel per
//! pair. Same result, same bytes.

use tiervisor_sim::reproduce::migration::{MigrationResult, SCHEMES};
use tiervisor_sim::reproduce::migration_figs::{FigRow, Figures};

use crate::plot_migration::{Panel, Series, draw_panels};

/// One line per scheme of `pair`'s rows: `f` per benchmark, at x = 1, 2, ...
fn per_bench(f: &Figures, pair: &str, y: fn(&FigRow) -> f64) -> Vec<Series> {
    SCHEMES
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let pts = f
                .benches
                .iter()
                .enumerate()
                .filter_map(|(k, b)| {
                    f.rows
                        .iter()
                        .find(|r| r.pair == pair && r.bench == b.name && r.scheme == *s)
                        .map(|r| ((k + 1) as f64, y(r)))
                })
                .collect();
            (s.to_uppercase(), i, pts)
        })
        .collect()
}

/// Figure 11, 12, 13 or 14 over the benchmarks.
fn pair_svg(f: &Figures, fig: u32, pair: &str) -> Result<String, String> {
    let names: Vec<String> = f
        .benches
        .iter()
        .enumerate()
        .map(|(k, b)| format!("{} {}", k + 1, b.name))
        .collect();
    let mean_mc: Vec<Series> = SCHEMES
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let rows: Vec<&FigRow> = f
                .rows
                .iter()
                .filter(|r| r.pair == pair && r.scheme == *s)
                .collect();
            let pts = f
                .gammas
                .iter()
                .enumerate()
                .map(|(g, &gamma)| {
                    let sum: f64 = rows.iter().map(|r| r.mc[g]).sum();
                    (gamma, sum / rows.len().max(1) as f64)
                })
                .collect();
            (s.to_uppercase(), i, pts)
        })
        .collect();
    let panels = [
        Panel {
            caption: "(a) lambda_time per benchmark".into(),
            x_desc: "benchmark (Table 7 order)",
            y_desc: "migration time / image copy time",
            series: per_bench(f, pair, |r| r.lambda_migration_time),
        },
        Panel {
            caption: "(b) lambda_IO per benchmark".into(),
            x_desc: "benchmark (Table 7 order)",
            y_desc: "(best - during) / best",
            series: per_bench(f, pair, |r| r.lambda_io),
        },
        Panel {
            caption: "(c) MC, mean over the benchmarks".into(),
            x_desc: "gamma (weight of SSD wear)",
            y_desc: "MC",
            series: mean_mc,
        },
    ];
    draw_panels(
        &format!(
            "Figure {fig}: {pair}, Table 7's benchmarks ({}), simulated",
            names.join(", ")
        ),
        &panels,
    )
}

/// Figure 10: MiB written to the SSD against IOzone's file size, one panel per pair.
fn fig10_svg(f: &Figures, image_mib: u64) -> Result<String, String> {
    let size = |bench: &str| {
        if bench == "IOZ_W" {
            image_mib as f64
        } else {
            64f64.min(image_mib as f64)
        }
    };
    let mut pairs: Vec<&str> = Vec::new();
    for r in &f.fig10 {
        if !pairs.contains(&r.pair) {
            pairs.push(r.pair);
        }
    }
    let panels: Vec<Panel> = pairs
        .iter()
        .enumerate()
        .map(|(k, &pair)| Panel {
            caption: format!("({}) {pair}", ['a', 'b', 'c', 'd'][k % 4]),
            x_desc: "IOzone file, MiB",
            y_desc: "MiB written to the SSD",
            series: SCHEMES
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    let mut pts: Vec<(f64, f64)> = f
                        .fig10
                        .iter()
                        .filter(|r| r.pair == pair && r.scheme == *s)
                        .map(|r| (size(r.bench), r.ssd_write_mib))
                        .collect();
                    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                    (s.to_uppercase(), i, pts)
                })
                .collect(),
        })
        .collect();
    draw_panels(
        "Figure 10: SSD writes under IOzone's write test, simulated",
        &panels,
    )
}

/// Figures 10-14 over the benchmarks, when the result has them: (file name, SVG).
pub fn figures(r: &MigrationResult) -> Result<Vec<(String, String)>, String> {
    let f = &r.figures;
    if f.rows.is_empty() {
        return Ok(Vec::new());
    }
    Ok(vec![
        ("fig10.svg".into(), fig10_svg(f, r.image_mib)?),
        ("fig11-table7.svg".into(), pair_svg(f, 11, "HDD to SSD")?),
        ("fig12-table7.svg".into(), pair_svg(f, 12, "SSD to HDD")?),
        ("fig13-table7.svg".into(), pair_svg(f, 13, "SSD to SSD")?),
        ("fig14-table7.svg".into(), pair_svg(f, 14, "HDD to HDD")?),
    ])
}
