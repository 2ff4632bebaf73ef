//! Every reproduction's claimed points in one shape: the paper's number, ours, the ratio
//! and whether it falls within the project's band, for `tiervisor reproduce all`.

use serde::Serialize;
use tiervisor_model::calibrate::CalRow;

use super::{Check, LogwriteRow, SchedulingReport};

/// A reproduction is within the band when model / paper is in [0.67, 1.5].
pub const BAND: (f64, f64) = (0.67, 1.5);

/// One number the paper gives, beside ours.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Point {
    /// `calibrate`, `logwrite`, `flush`, `scheduling`, ...
    pub experiment: String,
    /// The paper's table or figure and what the point measures.
    pub what: String,
    pub paper: f64,
    pub model: f64,
    /// model / paper (0 where the paper's value is 0).
    pub ratio: f64,
    /// Within [`BAND`].
    pub in_band: bool,
    /// Outside the band: the measured reason, where one is recorded (`gaps.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl Point {
    pub fn new(experiment: &str, what: impl Into<String>, paper: f64, model: f64) -> Point {
        let ratio = if paper != 0.0 { model / paper } else { 0.0 };
        let what = what.into();
        let in_band = ratio.is_finite() && (BAND.0..=BAND.1).contains(&ratio);
        let why = if in_band {
            None
        } else {
            super::gaps::why(experiment, &what, ratio).map(str::to_string)
        };
        Point {
            experiment: experiment.to_string(),
            what,
            paper,
            model,
            ratio,
            in_band,
            why,
        }
    }
}

/// "N of the M points outside the band have a measured reason".
pub fn explained(points: &[Point]) -> String {
    let out: Vec<&Point> = points.iter().filter(|p| !p.in_band).collect();
    format!(
        "{} of the {} points outside the band have a measured reason",
        out.iter().filter(|p| p.why.is_some()).count(),
        out.len()
    )
}

/// "N of M points within [0.67, 1.5]".
pub fn summary(points: &[Point]) -> String {
    format!(
        "{} of {} points within [{}, {}]",
        points.iter().filter(|p| p.in_band).count(),
        points.len(),
        BAND.0,
        BAND.1
    )
}

/// Calibration rows that have a published number.
pub fn from_calibrate(rows: &[CalRow]) -> Vec<Point> {
    rows.iter()
        .filter_map(|r| {
            let paper = r.paper?;
            Some(Point::new(
                "calibrate",
                if r.unit.is_empty() {
                    format!("{}: {}", r.source, r.figure)
                } else {
                    format!("{}: {} ({})", r.source, r.figure, r.unit)
                },
                paper,
                r.model,
            ))
        })
        .collect()
}

/// Seed 002's points where the paper gives a number: MB/s of the log-off and `bitvisor`
/// bars and the `bitvisor` speed-up (the gathering log's rows have no paper number).
pub fn from_logwrite(rows: &[LogwriteRow]) -> Vec<Point> {
    let mut v = Vec::new();
    for r in rows {
        let what = |m: &str| {
            format!(
                "{} KiB random writes on {}: {m}",
                r.record_bytes / 1024,
                r.device
            )
        };
        if let Some(paper) = r.paper_mb_per_s {
            let bar = if r.log == "off" {
                "MB/s, log off (est. from figure)"
            } else {
                "MB/s, bitvisor mode (est. from figure)"
            };
            v.push(Point::new("logwrite", what(bar), paper, r.mb_per_s));
        }
        if let (Some(paper), Some(model)) = (r.paper_speedup, r.speedup) {
            v.push(Point::new(
                "logwrite",
                what("speed-up of bitvisor mode"),
                paper,
                model,
            ));
        }
    }
    v
}

/// Seed 001's claimed points.
pub fn from_flush(checks: &[Check]) -> Vec<Point> {
    checks
        .iter()
        .map(|c| Point::new("flush", c.what.clone(), c.paper, c.model))
        .collect()
}

/// Seed 003's judged means and throughputs (variances are shown, not judged).
pub fn from_scheduling(r: &SchedulingReport) -> Vec<Point> {
    let mut v = Vec::new();
    for row in &r.rows {
        for (name, m) in [
            ("mean service ms", &row.mean_service_ms),
            ("mean response ms", &row.mean_response_ms),
            ("sectors/ms", &row.sectors_per_ms),
        ] {
            if let (Some(paper), Some(_)) = (m.paper, m.verdict) {
                v.push(Point::new(
                    "scheduling",
                    format!("{} {} {}: {name}", row.table, row.scheduler, row.column),
                    paper,
                    m.ours,
                ));
            }
        }
    }
    v
}

/// Seed 004's Table 3 and Table 5 downtimes, Table 6 shares where the paper's formula (at
/// our measured alpha, beta = 1) is not zero, the numbers section 7.3 states of Figures
/// 11 and 12, and the Mix figures section 7.4 states.
pub fn from_migration(r: &super::MigrationResult) -> Vec<Point> {
    let mut v: Vec<Point> = r
        .table3
        .iter()
        .map(|d| {
            Point::new(
                "migration",
                format!(
                    "Table 3 downtime ms ({} MiB image), {} {}",
                    r.table3_image_mib, d.pair, d.scheme
                ),
                d.paper_ms,
                d.ours_ms,
            )
        })
        .collect();
    v.extend(r.downtime.iter().map(|d| {
        Point::new(
            "migration",
            format!("Table 5 downtime ms, {} {}", d.pair, d.scheme),
            d.paper_ms,
            d.ours_ms,
        )
    }));
    v.extend(r.share.iter().filter(|x| x.paper_formula > 0.0).map(|x| {
        Point::new(
            "migration",
            format!(
                "Table 6 share of writes to SSD (formula at alpha {:.2}), {} {}",
                x.alpha, x.pair, x.scheme
            ),
            x.paper_formula,
            x.ours,
        )
    }));
    v.extend(r.figures.claims.iter().filter_map(|c| {
        Some(Point::new(
            "migration",
            format!("Figure {} {}", c.figure, c.claim),
            c.paper?,
            c.ours?,
        ))
    }));
    v.extend(r.mix_claims.iter().map(|c| {
        Point::new(
            "migration",
            format!(
                "Figure 15 {} at gamma {} epsilon {}",
                c.claim, c.gamma, c.epsilon
            ),
            c.paper,
            c.ours,
        )
    }));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduling_points_carry_both_columns_and_skip_variances() {
        use super::super::{Measure, SchedulingRow};
        let m = |ours: f64, paper: Option<f64>, judged: bool| Measure {
            ours,
            paper,
            ratio: paper.map(|p| ours / p),
            verdict: paper.filter(|_| judged).map(|_| "met"),
        };
        let row = |column| SchedulingRow {
            table: "o_direct".into(),
            scheduler: "cats".into(),
            column,
            requests: 1,
            mean_service_ms: m(2.0, Some(2.58), true),
            variance_service_ms2: m(4.0, Some(9.03), false),
            mean_response_ms: m(50.0, Some(53.79), true),
            variance_response_ms2: m(9.0, Some(16641.07), false),
            sectors_per_ms: m(6.0, None, true),
            drive_cache_hits: 0,
        };
        let r = SchedulingReport {
            rows: vec![row("real"), row("virtual")],
            rankings: vec![],
            missing: vec![],
            virtual_column: "",
        };
        let p = from_scheduling(&r);
        // Two judged means with a paper value per row; variances and the throughput
        // without one are not points.
        assert_eq!(p.len(), 4);
        assert!(
            p[2].what.contains("cats virtual: mean service ms"),
            "{:?}",
            p[2]
        );
        assert_eq!(p[3].paper, 53.79);
    }

    #[test]
    fn band_edges_and_summary() {
        let p = [
            Point::new("x", "a", 10.0, 6.7),
            Point::new("x", "b", 10.0, 15.0),
            Point::new("x", "c", 10.0, 15.1),
            Point::new("x", "d", 10.0, 6.6),
            Point::new("x", "e", 0.0, 1.0),
        ];
        assert_eq!(
            p.iter().map(|p| p.in_band).collect::<Vec<_>>(),
            vec![true, true, false, false, false]
        );
        assert_eq!(summary(&p), "2 of 5 points within [0.67, 1.5]");
    }

    #[test]
    fn calibrate_rows_without_a_paper_value_are_not_points() {
        let rows = tiervisor_model::calibrate::run();
        let points = from_calibrate(&rows);
        assert_eq!(
            points.len(),
            rows.iter().filter(|r| r.paper.is_some()).count()
        );
        assert!(points.iter().all(|p| p.ratio > 0.0));
    }
}
