//! Plots of seed 004's figures from `reproduce migration` (SVG, drawn with plotters):
//! Figures 11-14 (one per pool pair: MC, migration time and IO penalty against gamma, one
//! line per scheme) and Figure 15 (total MC per VM against epsilon at gamma 0.1, 0.5 and
//! 0.8, one line per single scheme and the Mix). Nothing random and no timestamps: the
//! same result draws the same bytes.

use std::path::Path;

use plotters::prelude::*;
use tiervisor_engine::jobs::migrate::MigrationCost;
use tiervisor_sim::reproduce::migration::{CostRow, MigrationResult, Pair, SCHEMES};
use tiervisor_sim::reproduce::migration_mix::{EPSILONS, MIX_GAMMAS, MIX_SCHEMES, MixRow};

use crate::Failure;

/// Gamma from 0 to 1 in steps of 0.1.
const GAMMA_STEPS: usize = 10;

/// The colour of series `i` (schemes in [`SCHEMES`] order, then the Mix).
pub(crate) fn colour(i: usize) -> RGBColor {
    const C: [RGBColor; 6] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(0, 0, 0),
    ];
    C[i % C.len()]
}

/// A line: its legend name, colour index and (x, y) points.
pub(crate) type Series = (String, usize, Vec<(f64, f64)>);

/// One panel: lines with a legend.
pub(crate) struct Panel<'a> {
    pub caption: String,
    pub x_desc: &'a str,
    pub y_desc: &'a str,
    pub series: Vec<Series>,
}

pub(crate) fn draw_panels(title: &str, panels: &[Panel]) -> Result<String, String> {
    let e = |x: &dyn std::fmt::Display| format!("plot {title}: {x}");
    let mut svg = String::new();
    {
        let w = 420 * panels.len() as u32;
        let root = SVGBackend::with_string(&mut svg, (w, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let root = root.titled(title, ("sans-serif", 16)).map_err(|x| e(&x))?;
        for (area, p) in root.split_evenly((1, panels.len())).iter().zip(panels) {
            let pts = || p.series.iter().flat_map(|s| s.2.iter());
            let x_hi = pts().map(|q| q.0).fold(0.0, f64::max).max(1e-9);
            let y_hi = pts().map(|q| q.1).fold(0.0, f64::max).max(1e-9) * 1.1;
            let mut chart = ChartBuilder::on(area)
                .caption(&p.caption, ("sans-serif", 13))
                .margin(8)
                .x_label_area_size(34)
                .y_label_area_size(48)
                .build_cartesian_2d(0f64..x_hi, 0f64..y_hi)
                .map_err(|x| e(&x))?;
            chart
                .configure_mesh()
                .x_desc(p.x_desc)
                .y_desc(p.y_desc)
                .draw()
                .map_err(|x| e(&x))?;
            for (name, c, points) in &p.series {
                let style = colour(*c).stroke_width(2);
                chart
                    .draw_series(LineSeries::new(points.iter().copied(), style))
                    .map_err(|x| e(&x))?
                    .label(name.clone())
                    .legend(move |(x, y)| Rectangle::new([(x, y - 3), (x + 14, y + 3)], style));
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperLeft)
                .draw()
                .map_err(|x| e(&x))?;
        }
        root.present().map_err(|x| e(&x))?;
    }
    Ok(svg)
}

/// The paper's figure number for a pair's MC figure.
fn figure_of(pair: Pair) -> u32 {
    match pair {
        Pair::HddToSsd => 11,
        Pair::SsdToHdd => 12,
        Pair::SsdToSsd => 13,
        Pair::HddToHdd => 14,
    }
}

/// Figures 11-14 for one pair: MC, migration time and IO penalty against gamma.
fn pair_svg(pair: Pair, cost: &[CostRow], load: &str) -> Result<String, String> {
    let rows: Vec<(usize, &CostRow)> = SCHEMES
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            cost.iter()
                .find(|c| c.pair == pair.name() && c.scheme == *s)
                .map(|c| (i, c))
        })
        .collect();
    let gammas: Vec<f64> = (0..=GAMMA_STEPS)
        .map(|i| i as f64 / GAMMA_STEPS as f64)
        .collect();
    let line = |f: &dyn Fn(&CostRow, f64) -> f64| {
        rows.iter()
            .map(|&(i, c)| {
                let pts = gammas.iter().map(|&g| (g, f(c, g))).collect();
                (c.scheme.to_uppercase(), i, pts)
            })
            .collect::<Vec<_>>()
    };
    let mc = |c: &CostRow, g: f64| {
        MigrationCost::from_factors(c.lambda_io, c.lambda_migration_time, c.lambda_wear, g).mc
    };
    let panels = [
        Panel {
            caption: "(a) migration cost MC".into(),
            x_desc: "gamma (weight of SSD wear)",
            y_desc: "MC",
            series: line(&mc),
        },
        Panel {
            caption: "(b) migration time (lambda_time)".into(),
            x_desc: "gamma",
            y_desc: "migration time / image copy time",
            series: line(&|c, _| c.lambda_migration_time),
        },
        Panel {
            caption: "(c) IO penalty (lambda_IO)".into(),
            x_desc: "gamma",
            y_desc: "(best - during) / best",
            series: line(&|c, _| c.lambda_io),
        },
    ];
    let title = format!(
        "Figure {}: {} ({load}), simulated",
        figure_of(pair),
        pair.name()
    );
    draw_panels(&title, &panels)
}

/// Figure 15: total MC per VM against epsilon, one panel per gamma.
fn mix_svg(mix: &[MixRow], load: &str) -> Result<String, String> {
    let panels: Vec<Panel> = MIX_GAMMAS
        .iter()
        .map(|&g| {
            let rows: Vec<&MixRow> = mix.iter().filter(|m| (m.gamma - g).abs() < 1e-9).collect();
            let mut series: Vec<Series> = MIX_SCHEMES
                .iter()
                .enumerate()
                .map(|(k, s)| {
                    let c = SCHEMES.iter().position(|x| x == s).unwrap_or(k);
                    let pts = rows.iter().map(|m| (m.epsilon, m.single[k])).collect();
                    (s.to_uppercase(), c, pts)
                })
                .collect();
            series.push((
                "Mix".into(),
                SCHEMES.len(),
                rows.iter().map(|m| (m.epsilon, m.mix)).collect(),
            ));
            Panel {
                caption: format!("gamma {g}"),
                x_desc: "epsilon (share SSD-SSD, and HDD-HDD)",
                y_desc: "MC per VM",
                series,
            }
        })
        .collect();
    debug_assert!(EPSILONS.len() > 1);
    draw_panels(
        &format!("Figure 15: massive migration, Mix against single schemes ({load}), simulated"),
        &panels,
    )
}

/// Every figure: (file name, SVG).
pub fn figures(r: &MigrationResult) -> Result<Vec<(String, String)>, String> {
    let mut v = Vec::new();
    let mut pairs = Pair::ALL;
    pairs.sort_by_key(|&p| figure_of(p));
    for pair in pairs {
        v.push((
            format!("fig{}.svg", figure_of(pair)),
            pair_svg(pair, &r.cost, r.cost_load)?,
        ));
    }
    v.push(("fig15.svg".into(), mix_svg(&r.mix, r.cost_load)?));
    v.extend(crate::plot_migration_figs::figures(r)?);
    Ok(v)
}

/// Write one figure into `dir` (created if missing).
pub fn write(dir: &Path, name: &str, svg: &str) -> Result<(), Failure> {
    std::fs::create_dir_all(dir).map_err(|e| Failure::run(format!("{}: {e}", dir.display())))?;
    let path = dir.join(name);
    std::fs::write(&path, svg).map_err(|e| Failure::run(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tiervisor_sim::reproduce::migration::WindowRows;
    use tiervisor_sim::reproduce::migration_mix::{mix_claims, mix_rows};

    fn result() -> MigrationResult {
        let mut cost = Vec::new();
        for pair in Pair::ALL {
            for (i, s) in SCHEMES.iter().enumerate() {
                cost.push(CostRow {
                    pair: pair.name(),
                    scheme: s,
                    lambda_io: 0.1 * i as f64,
                    lambda_migration_time: 1.0 + 0.2 * i as f64,
                    lambda_wear: 1.0 - 0.15 * i as f64,
                    mc: vec![],
                    downtime_ms: 0.0,
                    migration_time_s: 0.0,
                    profile: tiervisor_engine::jobs::migrate::WorkloadProfile::uniform(0.25),
                });
            }
        }
        let job =
            tiervisor_engine::jobs::migrate::MigrationParams::new(tiervisor_engine::PoolId(1));
        let mix = mix_rows(&cost, &job).unwrap();
        MigrationResult {
            image_mib: 8,
            rate_mb_s: 64,
            copy_priority: "equal",
            table3_image_mib: 8,
            table3_load: "t3",
            table3: vec![],
            downtime_load: "k",
            share_load: "s",
            cost_load: "c",
            downtime: vec![],
            share: vec![],
            cost,
            image_copy_s: vec![],
            best_iops: vec![],
            orderings: vec![],
            mix_claims: mix_claims(&mix),
            mix,
            copy_window_chunks: 1,
            tiervisor: WindowRows {
                copy_window_chunks: 16,
                coalesce_runs: None,
                table3: vec![],
                downtime: vec![],
                share: vec![],
                cost: vec![],
            },
            figures: Default::default(),
        }
    }

    #[test]
    fn each_figure_has_one_series_per_scheme_and_draws_the_same_bytes() {
        let r = result();
        let figs = figures(&r).unwrap();
        let names: Vec<&str> = figs.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "fig11.svg",
                "fig12.svg",
                "fig13.svg",
                "fig14.svg",
                "fig15.svg"
            ]
        );
        for (name, svg) in &figs {
            assert!(svg.starts_with("<svg"), "{name}");
            let (panels, per_panel): (usize, Vec<&str>) = if name == "fig15.svg" {
                (3, vec!["LR", "SLR", "AIO", "Mix"])
            } else {
                (3, vec!["DBT", "MIRROR", "LR", "SLR", "AIO"])
            };
            // One polyline per series and panel, drawn 2 px wide (the mesh's are 1 px;
            // legend marks are rectangles).
            assert_eq!(
                svg.matches("stroke-width=\"2\" points=").count(),
                panels * per_panel.len(),
                "{name}"
            );
            for s in per_panel {
                // Each panel's legend names it (a text element of its own line).
                let label = format!(">\n{s}\n</text>");
                assert_eq!(svg.matches(&label).count(), panels, "{name}: {s}");
            }
        }
        assert_eq!(figs, figures(&r).unwrap());
        let dir = std::env::temp_dir().join(format!("tv-plot-mig-{}", std::process::id()));
        for (name, svg) in &figs {
            assert!(write(&dir, name, svg).is_ok(), "{name}");
            assert!(dir.join(name).is_file());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
