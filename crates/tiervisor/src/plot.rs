//! Plots for reproduction reports: each point's model / paper ratio on a log axis, the
//! band shaded, one row per point with its label (SVG, drawn with plotters).

use plotters::prelude::*;
use tiervisor_sim::reproduce::points::{BAND, Point};

const LABEL_PX: u32 = 600;
const ROW_PX: u32 = 18;

fn short(s: &str) -> String {
    if s.chars().count() <= 95 {
        return s.to_string();
    }
    let mut t: String = s.chars().take(92).collect();
    t.push_str("...");
    t
}

/// An SVG document: one row per point, its ratio as a dot (green within the band, red
/// outside), the band shaded and 1.0 marked.
pub fn ratio_svg(title: &str, points: &[Point]) -> Result<String, String> {
    let e = |x: &dyn std::fmt::Display| format!("plot {title}: {x}");
    let n = points.len().max(1) as f64;
    let positive = || points.iter().map(|p| p.ratio).filter(|r| *r > 0.0);
    let lo = positive().fold(BAND.0, f64::min) / 1.5;
    let hi = positive().fold(BAND.1, f64::max) * 1.5;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (LABEL_PX + 500, 90 + ROW_PX * n as u32))
            .into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .margin_left(LABEL_PX as i32)
            .x_label_area_size(36)
            .build_cartesian_2d((lo..hi).log_scale(), -1f64..n)
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_desc(format!(
                "model / paper (log scale); band [{}, {}] shaded",
                BAND.0, BAND.1
            ))
            .draw()
            .map_err(|x| e(&x))?;
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(BAND.0, -1.0), (BAND.1, n)],
                RGBColor(215, 235, 215).filled(),
            )))
            .map_err(|x| e(&x))?;
        chart
            .draw_series(LineSeries::new(vec![(1.0, -1.0), (1.0, n)], &BLACK))
            .map_err(|x| e(&x))?;
        chart
            .draw_series(
                points
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.ratio > 0.0)
                    .map(|(i, p)| {
                        let c = if p.in_band { GREEN } else { RED };
                        Circle::new((p.ratio, n - 1.0 - i as f64), 4, c.filled())
                    }),
            )
            .map_err(|x| e(&x))?;
        for (i, p) in points.iter().enumerate() {
            let (_, y) = chart.backend_coord(&(lo, n - 1.0 - i as f64));
            let label = format!("{}  ({:.2})", short(&p.what), p.ratio);
            root.draw(&Text::new(label, (10, y - 6), ("sans-serif", 11)))
                .map_err(|x| e(&x))?;
        }
        root.present().map_err(|x| e(&x))?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_point_is_a_labelled_dot_coloured_by_the_band() {
        let pts = [
            Point::new("x", "inside & fine", 10.0, 11.0),
            Point::new("x", "far outside", 10.0, 40.0),
            Point::new("x", "paper zero", 0.0, 1.0),
        ];
        let svg = ratio_svg("test figure", &pts).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("test figure"));
        assert!(
            svg.contains("inside &amp; fine  (1.10)"),
            "labels are escaped"
        );
        assert!(svg.contains("far outside  (4.00)"));
        // Two dots (the zero-paper point has no ratio to draw): one green, one red.
        assert_eq!(svg.matches("<circle").count(), 2, "{svg}");
        assert!(svg.contains("#00FF00") && svg.contains("#FF0000"));
    }
}
