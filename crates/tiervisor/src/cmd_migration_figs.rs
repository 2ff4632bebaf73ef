//! `reproduce migration`'s Figures 10-14 over Table 7's benchmarks, as text tables.

use std::fmt::Write as _;

use tiervisor_sim::reproduce::migration::MigrationResult;
use tiervisor_sim::reproduce::migration_figs::Figures;
use tiervisor_sim::reproduce::points::BAND;

/// The gammas shown in the MC columns (all are in the JSON).
const SHOWN: [usize; 5] = [0, 2, 5, 8, 10];

/// Figures 10-14 and `auto`'s picks on Table 7's benchmarks.
pub(crate) fn figure_tables(r: &MigrationResult, s: &mut String) {
    let f = &r.figures;
    if f.rows.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nTable 7's benchmarks (block-level imitations, crates/workload/src/bench; a {} MiB image stands for the paper's 20 GB):",
        r.image_mib
    );
    for b in &f.benches {
        let _ = writeln!(
            s,
            "  {:<7} paper: {:<40} ours: {} ({} MiB image)",
            b.name,
            b.paper,
            b.ours,
            r.image_mib * b.image_halves / 2
        );
    }
    for (fig, pair) in [
        ("11", "HDD to SSD"),
        ("12", "SSD to HDD"),
        ("13", "SSD to SSD"),
        ("14", "HDD to HDD"),
    ] {
        let _ = writeln!(
            s,
            "\nFigure {fig} ({pair}): lambda_migration_time, lambda_IO, lambda_wear and MC per benchmark and scheme{}",
            match fig {
                "12" =>
                    "; the paper excludes DBT (its merge does not converge): shown, not compared",
                "14" =>
                    "; no SSD (lambda_wear 0); the paper excludes DBT from the I/O and cost comparison; the best I/O is the workload alone on the HDD",
                _ => "",
            }
        );
        let g: Vec<String> = SHOWN
            .iter()
            .map(|&i| format!("MC g={}", f.gammas[i]))
            .collect();
        let _ = writeln!(
            s,
            "{:<7} {:<7} {:>8} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7} {:>6}",
            "bench",
            "scheme",
            "l_time",
            "l_IO",
            "l_wear",
            g[0],
            g[1],
            g[2],
            g[3],
            g[4],
            "time s",
            "passes"
        );
        for x in f.rows.iter().filter(|x| x.pair == pair) {
            let _ = writeln!(
                s,
                "{:<7} {:<7} {:>8.2} {:>7.3} {:>7.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>7.1} {:>5}{}",
                x.bench,
                x.scheme,
                x.lambda_migration_time,
                x.lambda_io,
                x.lambda_wear,
                x.mc[SHOWN[0]],
                x.mc[SHOWN[1]],
                x.mc[SHOWN[2]],
                x.mc[SHOWN[3]],
                x.mc[SHOWN[4]],
                x.migration_time_s,
                x.passes,
                if x.hit_pass_limit { "*" } else { " " }
            );
        }
    }
    let _ = writeln!(
        s,
        "(* DBT at its pass limit: the dirty set did not converge)"
    );
    let _ = writeln!(
        s,
        "\nFigure 10: MiB written to the SSD during the migration under IOzone (the copy's first writes of the image to an SSD destination, plus the VM's writes there, duplicates and recopies; LR's spared copy counted as the copy's)"
    );
    let _ = writeln!(
        s,
        "{:<9} {:<11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "bench", "pair", "dbt", "mirror", "lr", "slr", "aio", "VM MiB"
    );
    let mut seen = Vec::new();
    for x in &f.fig10 {
        if seen.contains(&(x.bench, x.pair)) {
            continue;
        }
        seen.push((x.bench, x.pair));
        let w: Vec<f64> = f
            .fig10
            .iter()
            .filter(|y| y.bench == x.bench && y.pair == x.pair)
            .map(|y| y.ssd_write_mib)
            .collect();
        let vm = f
            .fig10
            .iter()
            .filter(|y| y.bench == x.bench && y.pair == x.pair)
            .map(|y| y.vm_write_mib)
            .fold(0.0, f64::max);
        let _ = write!(s, "{:<9} {:<11}", x.bench, x.pair);
        for v in &w {
            let _ = write!(s, " {v:>9.1}");
        }
        let _ = writeln!(s, " {vm:>9.1}");
    }
    claim_table(f, s);
    auto_table(f, s);
}

fn claim_table(f: &Figures, s: &mut String) {
    let held = f.claims.iter().filter(|c| c.holds).count();
    let _ = writeln!(
        s,
        "\nThe paper's statements on Figures 10-14 (numbers judged in [{}, {}]): {held} of {} hold",
        BAND.0,
        BAND.1,
        f.claims.len()
    );
    for c in &f.claims {
        let number = match (c.paper, c.ours, c.ratio) {
            (Some(p), Some(o), Some(q)) => format!(" paper {p:.2}, ours {o:.3}, ratio {q:.3};"),
            _ => String::new(),
        };
        let verdict = match (c.paper, c.holds) {
            (Some(_), true) => "within",
            (Some(_), false) => "outside",
            (None, true) => "holds",
            (None, false) => "does not hold",
        };
        let _ = writeln!(
            s,
            "  [{verdict}] Figure {}: {}:{number} {}",
            c.figure, c.claim, c.detail
        );
    }
}

fn auto_table(f: &Figures, s: &mut String) {
    let _ = writeln!(
        s,
        "\nauto on Table 7's benchmarks (the engine's predicted pick for the workload it saw at the job's start, at its measured MC): worse than the best of LR, SLR and AIO at {} of {} points, than the best of all five at {}",
        f.auto_worse_than_best_design,
        f.auto.len(),
        f.auto_worse_than_best_any
    );
    let _ = writeln!(
        s,
        "{:<11} {:<7} {:>6} {:>5} {:>5} {:>5}  {:<28} {:<28} {:>8}",
        "pair",
        "bench",
        "writes",
        "busy",
        "rd@cp",
        "wr@cp",
        "picks at g=0,0.2,0.5,0.8,1",
        "best design",
        "worst x"
    );
    let mut seen = Vec::new();
    for a in &f.auto {
        if seen.contains(&(a.pair, a.bench)) {
            continue;
        }
        seen.push((a.pair, a.bench));
        let pts: Vec<_> = f
            .auto
            .iter()
            .filter(|b| b.pair == a.pair && b.bench == a.bench)
            .collect();
        let at = |i: usize, g: fn(&&tiervisor_sim::reproduce::migration_figs::AutoPoint) -> &'static str| {
            pts.get(i).map_or("-", g)
        };
        let picks: Vec<&str> = SHOWN.iter().map(|&i| at(i, |p| p.pick)).collect();
        let best: Vec<&str> = SHOWN.iter().map(|&i| at(i, |p| p.best_design)).collect();
        let worst = pts
            .iter()
            .map(|p| p.pick_mc / p.best_design_mc.max(1e-12))
            .fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "{:<11} {:<7} {:>6.2} {:>5.2} {:>5.2} {:>5.2}  {:<28} {:<28} {:>8.3}",
            a.pair,
            a.bench,
            a.profile.write_share,
            a.profile.busy_share,
            a.profile.copied_read_share,
            a.profile.copied_write_share,
            picks.join(","),
            best.join(","),
            worst
        );
    }
}
