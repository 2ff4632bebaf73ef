//! Seed 004's Figures 10-14 over Table 7's benchmarks: per benchmark and scheme,
//! λ_migration-time, λ_IO, λ_wear and MC (equations 1-4) from HDD to SSD (Figure 11),
//! SSD to HDD (Figure 12), SSD to SSD (Figure 13) and HDD to HDD (Figure 14; its best I/O
//! performance is the workload alone on the HDD), and the SSD writes under IOzone
//! (Figure 10, SSD to HDD, HDD to SSD and SSD to SSD), with the paper's stated numbers and
//! orderings judged, and `auto`'s pick (the engine's predicted lowest MC) against the
//! measured best.
//!
//! The benchmarks are block-level imitations (`tiervisor_workload::bench`, and the
//! Iometer-like fio job of the cost rows) on a smaller image: Table 7's 20 GB is
//! `image_mib` (256 MiB by default; the copy's share of the time is what the figures
//! measure, and it scales with the image, as does the workload's time beside it), and
//! KC_10's 10 GB half of it. MC is taken at γ 0, 0.1, ..., 1 (the paper's figures plot γ
//! from 0 to 1; its ticks are not in our copy).

use serde::Serialize;
use tiervisor_engine::jobs::migrate::{MigrationCost, MigrationParams, WorkloadProfile};

use super::migration::{
    CostRow, IOMETER, Load, MigrationOptions, Pair, RUNTIME_S, SCHEMES, ShareRow, job_params,
    migration_of, scenario_text_vm,
};
use super::migration_claims::claims;
use super::migration_mix::{MIX_SCHEMES, auto_pick};
use super::run_parallel;
use crate::SimReport;

/// The weights at which MC is computed for Figures 11 and 12 (c), (d).
pub const FIG_GAMMAS: [f64; 11] = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];

/// The workload a benchmark runs.
#[derive(Clone, Copy, Debug)]
enum BenchVm {
    Fio(Load),
    /// `[vm.bench]` of this kind with this many processes, on the first `size_mib` of the
    /// image (None: all of it).
    Bench {
        kind: &'static str,
        procs: u32,
        size_mib: Option<u64>,
    },
}

/// One of Table 7's benchmarks.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Bench {
    /// Table 7's name.
    pub name: &'static str,
    /// Table 7's description.
    pub paper: &'static str,
    /// What runs here.
    pub ours: &'static str,
    /// The image: `image_mib` times this over 2 (KC_10's 10 GB is half of the 20 GB).
    pub image_halves: u64,
    #[serde(skip)]
    vm: BenchVm,
}

/// A benchmark is its Table 7 name.
impl PartialEq for Bench {
    fn eq(&self, other: &Bench) -> bool {
        self.name == other.name
    }
}

/// Iometer at OIO 16 (Table 7's IOM_16).
const IOMETER_16: Load = Load {
    name: "Iometer-like (randrw 75 % reads, 4k, OIO 16)",
    iodepth: 16,
    ..IOMETER
};

/// Table 7, in its order.
pub const TABLE7: [Bench; 8] = [
    Bench {
        name: "IOM_4",
        paper: "IOmeter with OIO=4, 75 % reads",
        ours: "fio randrw 75 % reads, 4k, depth 4",
        image_halves: 2,
        vm: BenchVm::Fio(IOMETER),
    },
    Bench {
        name: "IOM_16",
        paper: "IOmeter with OIO=16, 75 % reads",
        ours: "fio randrw 75 % reads, 4k, depth 16",
        image_halves: 2,
        vm: BenchVm::Fio(IOMETER_16),
    },
    Bench {
        name: "Db_2",
        paper: "Dbench with proc=2, -R 99999",
        ours: "[vm.bench] dbench, procs 2",
        image_halves: 2,
        vm: BenchVm::Bench {
            kind: "dbench",
            procs: 2,
            size_mib: None,
        },
    },
    Bench {
        name: "Db_16",
        paper: "Dbench with proc=16, -R 99999",
        ours: "[vm.bench] dbench, procs 16",
        image_halves: 2,
        vm: BenchVm::Bench {
            kind: "dbench",
            procs: 16,
            size_mib: None,
        },
    },
    Bench {
        name: "IOZ_R",
        paper: "IOzone read file test",
        ours: "[vm.bench] iozone-read, a file over the image, 128k records",
        image_halves: 2,
        vm: BenchVm::Bench {
            kind: "iozone-read",
            procs: 1,
            size_mib: None,
        },
    },
    Bench {
        name: "IOZ_W",
        paper: "IOzone write file test",
        ours: "[vm.bench] iozone-write, a file over the image, 128k records",
        image_halves: 2,
        vm: BenchVm::Bench {
            kind: "iozone-write",
            procs: 1,
            size_mib: None,
        },
    },
    Bench {
        name: "KC_10",
        paper: "Kernel compilation in a 10 GB image",
        ours: "[vm.bench] kernel-compile, 1 job, a 32 MiB tree, half the image",
        image_halves: 1,
        vm: BenchVm::Bench {
            kind: "kernel-compile",
            procs: 1,
            size_mib: Some(KC_TREE_MIB),
        },
    },
    Bench {
        name: "KC_20",
        paper: "Kernel compilation in a 20 GB image",
        ours: "[vm.bench] kernel-compile, 1 job, a 32 MiB tree",
        image_halves: 2,
        vm: BenchVm::Bench {
            kind: "kernel-compile",
            procs: 1,
            size_mib: Some(KC_TREE_MIB),
        },
    },
];

/// The kernel tree and its objects (ours: 2.6.32's ~1.5 GB built tree scaled as the
/// image is, 20 GB to 256 MiB).
const KC_TREE_MIB: u64 = 32;

/// IOzone's write test on a smaller file (a quarter of the default image), for Figure 10's
/// "different input parameters".
const IOZ_W_SMALL: Bench = Bench {
    name: "IOZ_W_64m",
    paper: "IOzone write file test, a smaller input",
    ours: "[vm.bench] iozone-write, a 64 MiB file, 128k records",
    image_halves: 2,
    vm: BenchVm::Bench {
        kind: "iozone-write",
        procs: 1,
        size_mib: Some(64),
    },
};

/// Every benchmark run: Table 7's, then [`IOZ_W_SMALL`].
pub(crate) const ALL: [Bench; 9] = [
    TABLE7[0],
    TABLE7[1],
    TABLE7[2],
    TABLE7[3],
    TABLE7[4],
    TABLE7[5],
    TABLE7[6],
    TABLE7[7],
    IOZ_W_SMALL,
];

/// Figure 10's benchmarks (in [`ALL`]): IOzone's write test on two file sizes. Its read
/// test writes nothing, so every scheme's SSD writes there are the copy's alone.
pub(crate) const FIG10_BENCHES: [usize; 2] = [8, 5];

impl Bench {
    fn image_mib(&self, o: &MigrationOptions) -> u64 {
        o.image_mib * self.image_halves / 2
    }

    fn vm_table(&self, image_mib: u64) -> String {
        match self.vm {
            BenchVm::Fio(l) => format!(
                "[vm.fio]\nrw = \"{}\"\nbs = \"{}k\"\nrwmixread = {}\niodepth = {}\nruntime_s = {RUNTIME_S}\n",
                l.rw, l.bs_kib, l.rwmixread, l.iodepth
            ),
            BenchVm::Bench {
                kind,
                procs,
                size_mib,
            } => format!(
                "[vm.bench]\nkind = \"{kind}\"\nprocs = {procs}\nsize = \"{}m\"\nruntime_s = {RUNTIME_S}\n{}",
                size_mib.unwrap_or(image_mib).min(image_mib),
                // The image is a raw file the copy reads whole (the paper's data disk):
                // one read over it maps every chunk (`prefill` maps what VMs touch).
                if size_mib.is_some() {
                    "[[vm]]\nvolume = \"vm\"\n[vm.fio]\nrw = \"randread\"\nbs = \"4k\"\nios = 1\n"
                } else {
                    ""
                }
            ),
        }
    }
}

/// One simulation: a benchmark with a migration, alone on the SSD (`scheme` None), or
/// the copy alone (`bench` None).
#[derive(Clone, Copy, Debug)]
struct FigRun {
    pair: Pair,
    bench: Option<usize>,
    scheme: Option<&'static str>,
    image_mib: u64,
}

fn run_one(r: FigRun, o: &MigrationOptions) -> Result<SimReport, String> {
    let o = MigrationOptions {
        image_mib: r.image_mib,
        ..*o
    };
    let vm = r.bench.map(|b| ALL[b].vm_table(r.image_mib));
    // Alone: on the pair's faster pool (an SSD in every pair here).
    let text = scenario_text_vm(r.pair, vm.as_deref(), r.scheme, r.pair.best(), &o);
    let bench = r.bench.map_or("copy alone", |b| ALL[b].name);
    super::migration::run_scenario("figure.toml", &text, r.pair, r.scheme, bench)
}

/// One benchmark, scheme and pair.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FigRow {
    pub pair: &'static str,
    pub bench: &'static str,
    pub scheme: &'static str,
    pub lambda_io: f64,
    pub lambda_migration_time: f64,
    pub lambda_wear: f64,
    /// MC at each of [`FIG_GAMMAS`].
    pub mc: Vec<f64>,
    pub migration_time_s: f64,
    pub downtime_ms: f64,
    pub passes: u32,
    /// DBT only: its dirty passes reached the pass limit (the merge did not converge).
    pub hit_pass_limit: bool,
}

/// Figure 10: bytes written to SSD pools during one migration.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Fig10Row {
    pub pair: &'static str,
    pub bench: &'static str,
    pub scheme: &'static str,
    /// The copy's first writes of the image (to an SSD destination) plus the VM-caused
    /// SSD writes (its writes there, duplicates, DBT's recopies), with what LR's writes
    /// spared the copy counted as the copy's (Table 6's rule).
    pub ssd_write_mib: f64,
    pub vm_write_mib: f64,
}

/// A claim of the paper's text, judged on our numbers: a number (`paper`, `ours`,
/// `ratio`, `holds` = within the band) or an ordering (`holds`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct FigClaim {
    pub figure: &'static str,
    pub claim: String,
    pub paper: Option<f64>,
    pub ours: Option<f64>,
    pub ratio: Option<f64>,
    pub holds: bool,
    pub detail: String,
}

/// `auto`'s pick for one pair, benchmark and gamma, against the measured best.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct AutoPoint {
    pub pair: &'static str,
    pub bench: &'static str,
    pub gamma: f64,
    /// The workload's share of bytes written (measured alone).
    pub write_share: f64,
    /// The workload as the engine saw it at the job's start, `auto`'s input.
    pub profile: WorkloadProfile,
    pub pick: &'static str,
    pub pick_mc: f64,
    /// The lowest measured of LR, SLR and AIO (`auto`'s candidates, the paper's Mix).
    pub best_design: &'static str,
    pub best_design_mc: f64,
    /// The lowest measured of all five.
    pub best_any: &'static str,
    pub best_any_mc: f64,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Figures {
    pub benches: Vec<Bench>,
    pub gammas: Vec<f64>,
    /// Figures 11 (HDD to SSD), 12 (SSD to HDD), 13 (SSD to SSD) and 14 (HDD to HDD).
    pub rows: Vec<FigRow>,
    pub fig10: Vec<Fig10Row>,
    pub claims: Vec<FigClaim>,
    pub auto: Vec<AutoPoint>,
    /// Points where `auto`'s pick costs more than the best of its candidates, and than
    /// the best of all five schemes.
    pub auto_worse_than_best_design: usize,
    pub auto_worse_than_best_any: usize,
}

/// The figures' pairs: Figures 11, 12, 13 and 14.
pub const FIG_PAIRS: [Pair; 4] = [
    Pair::HddToSsd,
    Pair::SsdToHdd,
    Pair::SsdToSsd,
    Pair::HddToHdd,
];

/// Run Figures 10-12's experiments.
pub fn figures(o: &MigrationOptions) -> Result<Figures, String> {
    let mut runs = Vec::new();
    for (b, bench) in ALL.iter().enumerate() {
        let image_mib = bench.image_mib(o);
        let table7 = b < TABLE7.len();
        let pairs: &[Pair] = if table7 {
            &FIG_PAIRS
        } else {
            &[Pair::HddToSsd, Pair::SsdToHdd, Pair::SsdToSsd]
        };
        for &pair in pairs {
            for scheme in SCHEMES {
                runs.push(FigRun {
                    pair,
                    bench: Some(b),
                    scheme: Some(scheme),
                    image_mib,
                });
            }
        }
        // The best I/O performance: alone on the SSD (the faster pool of every pair with
        // one), and alone on the HDD (HDD to HDD's).
        if table7 {
            for pair in [Pair::SsdToSsd, Pair::HddToHdd] {
                runs.push(FigRun {
                    pair,
                    bench: Some(b),
                    scheme: None,
                    image_mib,
                });
            }
        }
    }
    let mut sizes: Vec<u64> = TABLE7.iter().map(|b| b.image_mib(o)).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for &image_mib in &sizes {
        for pair in FIG_PAIRS {
            runs.push(FigRun {
                pair,
                bench: None,
                scheme: Some("mirror"),
                image_mib,
            });
        }
    }
    let reports = run_parallel(runs.clone(), o.jobs, |r| run_one(r, o))?;
    let find = |pair: Pair, bench: Option<usize>, scheme: Option<&str>, image_mib: u64| {
        runs.iter()
            .zip(&reports)
            .find(|(r, _)| {
                r.pair == pair && r.bench == bench && r.scheme == scheme && r.image_mib == image_mib
            })
            .map(|(_, rep)| rep)
            .ok_or_else(|| format!("Figures 10-12: no run for {} {scheme:?}", pair.name()))
    };
    let max_passes = MigrationParams::new(tiervisor_engine::PoolId(1)).dbt_max_passes;
    let (mut rows, mut fig10, mut auto) = (Vec::new(), Vec::new(), Vec::new());
    let job = job_params(o);
    for b in FIG10_BENCHES {
        let bench = &ALL[b];
        let image_mib = bench.image_mib(o);
        for pair in [Pair::SsdToHdd, Pair::HddToSsd, Pair::SsdToSsd] {
            for scheme in SCHEMES {
                let m = migration_of(find(pair, Some(b), Some(scheme), image_mib)?)?;
                let share = ShareRow::of(pair, scheme, 0.0, m, image_mib);
                let copy = if pair.models().1 == "intel-520" {
                    (image_mib << 20) as f64
                } else {
                    0.0
                };
                fig10.push(Fig10Row {
                    pair: pair.name(),
                    bench: bench.name,
                    scheme,
                    ssd_write_mib: (share.ours * m.vm_write_bytes as f64 + copy) / (1 << 20) as f64,
                    vm_write_mib: m.vm_write_bytes as f64 / (1 << 20) as f64,
                });
            }
        }
    }
    for (b, bench) in TABLE7.iter().enumerate() {
        let image_mib = bench.image_mib(o);
        let alone = find(Pair::SsdToSsd, Some(b), None, image_mib)?;
        let vol = alone.volumes.get("vm").ok_or("the run has no volume vm")?;
        let best_ssd = vol.iops;
        let best_hdd = find(Pair::HddToHdd, Some(b), None, image_mib)?
            .volumes
            .get("vm")
            .map_or(0.0, |v| v.iops);
        let write_share = vol.write_bytes as f64 / (vol.read_bytes + vol.write_bytes).max(1) as f64;
        for pair in FIG_PAIRS {
            let copy_s = migration_of(find(pair, None, Some("mirror"), image_mib)?)?
                .migration_time_s
                .unwrap_or(0.0);
            let first = rows.len();
            let best = if pair == Pair::HddToHdd {
                best_hdd
            } else {
                best_ssd
            };
            let mut profiles = Vec::new();
            for scheme in SCHEMES {
                let m = migration_of(find(pair, Some(b), Some(scheme), image_mib)?)?;
                let c = CostRow::of(pair, scheme, m, copy_s, best);
                profiles.push((scheme, c.profile));
                rows.push(FigRow {
                    pair: pair.name(),
                    bench: bench.name,
                    scheme,
                    mc: FIG_GAMMAS
                        .iter()
                        .map(|&g| {
                            MigrationCost::from_factors(
                                c.lambda_io,
                                c.lambda_migration_time,
                                c.lambda_wear,
                                g,
                            )
                            .mc
                        })
                        .collect(),
                    lambda_io: c.lambda_io,
                    lambda_migration_time: c.lambda_migration_time,
                    lambda_wear: c.lambda_wear,
                    migration_time_s: c.migration_time_s,
                    downtime_ms: c.downtime_ms,
                    passes: m.passes,
                    hit_pass_limit: scheme == "dbt" && m.passes >= max_passes,
                });
            }
            let these = &rows[first..];
            // What the engine saw at the start: the same in every scheme's run (the
            // workload ran alone on the source until then); LR's.
            let profile = profiles
                .iter()
                .find(|(s, _)| *s == "lr")
                .map(|(_, p)| *p)
                .ok_or("Figures 11-14: no LR run")?;
            for (gi, &gamma) in FIG_GAMMAS.iter().enumerate() {
                let mc = |s: &str| {
                    these
                        .iter()
                        .find(|r| r.scheme == s)
                        .map_or(f64::NAN, |r| r.mc[gi])
                };
                let lowest = |set: &[&'static str]| {
                    set.iter()
                        .map(|&s| (s, mc(s)))
                        .fold(("-", f64::INFINITY), |a, b| if b.1 < a.1 { b } else { a })
                };
                let pick = auto_pick(pair, &profile, gamma, &job);
                let (bd, bd_mc) = lowest(&MIX_SCHEMES);
                let (ba, ba_mc) = lowest(&SCHEMES);
                auto.push(AutoPoint {
                    pair: pair.name(),
                    bench: bench.name,
                    gamma,
                    write_share,
                    profile,
                    pick,
                    pick_mc: mc(pick),
                    best_design: bd,
                    best_design_mc: bd_mc,
                    best_any: ba,
                    best_any_mc: ba_mc,
                });
            }
        }
    }
    let worse = |f: fn(&AutoPoint) -> f64| {
        auto.iter()
            .filter(|a| a.pick_mc > f(a) * (1.0 + 1e-9) + 1e-12)
            .count()
    };
    Ok(Figures {
        benches: TABLE7.to_vec(),
        gammas: FIG_GAMMAS.to_vec(),
        claims: claims(&rows, &fig10),
        auto_worse_than_best_design: worse(|a| a.best_design_mc),
        auto_worse_than_best_any: worse(|a| a.best_any_mc),
        rows,
        fig10,
        auto,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Scenario;

    #[test]
    fn every_benchmark_makes_a_scenario_that_parses() {
        let o = MigrationOptions::default();
        for b in &TABLE7 {
            let image = b.image_mib(&o);
            let text = scenario_text_vm(
                Pair::HddToSsd,
                Some(&b.vm_table(image)),
                Some("lr"),
                "src",
                &MigrationOptions {
                    image_mib: image,
                    ..o
                },
            );
            let sc = Scenario::parse("x.toml", &text, std::path::Path::new("."));
            assert!(sc.is_ok(), "{}: {text}\n{:?}", b.name, sc.err());
        }
        assert_eq!(TABLE7[6].image_mib(&o) * 2, TABLE7[7].image_mib(&o));
    }
}
