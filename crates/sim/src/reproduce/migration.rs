//! Seed 004 (live storage migration) in simulation, with the Intel 520 and the 7,200 rpm
//! Hitachi presets: Table 3 (downtime of DBT and IO Mirroring, Iometer-like 50/50 mix),
//! Table 5 (downtime of the five schemes for the four pool pairs), Table 6 (share of the
//! VM's writes that reach an SSD, beside the paper's formulas), the migration cost MC
//! (equations 1-4) behind Figures 11-14, with the orderings the paper reports checked, and
//! Figure 15 (Mix against each single scheme, `migration_mix.rs`).
//!
//! The scenarios are generated here (ordinary scenario text, see [`scenario_text`]). The
//! image is smaller than the paper's 30 GB (`image_mib`; Table 3 its own,
//! `table3_image_mib`), and the workloads are fio-like stand-ins for the paper's
//! benchmarks, named as such.
//!
//! The paper's rows copy DBT's dirty blocks one chunk at a time
//! ([`PAPER_COPY_WINDOW_CHUNKS`]): its copy was one process with one "copy address
//! offset" shared with the driver (section 6), and it states no copies in parallel.
//! They also copy each dirty run as an operation of its own, as a sector bitmap's copy
//! does ([`PAPER_COALESCE_RUNS`]). tiervisor's defaults (16 chunk copies in flight, QEMU
//! mirror's, and a chunk with 4 dirty runs or more copied whole) are its own mechanism:
//! DBT's rows with them are reported apart ([`WindowRows`]), beside the paper's numbers
//! but not counted as reproducing them.

use std::path::Path;

use serde::Serialize;
use tiervisor_engine::jobs::migrate::{
    CopyPriority, CostInputs, DEFAULT_COPY_WINDOW_CHUNKS, MigrationCost, MigrationParams,
    WorkloadProfile,
};

use super::migration_figs::{Figures, figures};
use super::migration_mix::{MixClaim, MixRow, mix_claims, mix_rows};
use super::run_parallel;
use crate::{MigrationReport, RunOptions, Scenario, SimReport, Simulation};

/// The five schemes, in the paper's column order.
pub const SCHEMES: [&str; 5] = ["dbt", "mirror", "lr", "slr", "aio"];
/// Weights of SSD wear against I/O performance at which MC is judged.
pub const GAMMAS: [f64; 3] = [0.0, 0.5, 1.0];

/// DBT's copy window in the paper's rows: one chunk copy at a time.
pub const PAPER_COPY_WINDOW_CHUNKS: u32 = 1;
/// DBT's whole-chunk copies in the paper's rows: none (every dirty run is copied alone).
pub const PAPER_COALESCE_RUNS: u32 = 0;

/// A source and destination pool pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Pair {
    SsdToSsd,
    HddToSsd,
    SsdToHdd,
    HddToHdd,
}

impl Pair {
    pub const ALL: [Pair; 4] = [
        Pair::SsdToSsd,
        Pair::HddToSsd,
        Pair::SsdToHdd,
        Pair::HddToHdd,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Pair::SsdToSsd => "SSD to SSD",
            Pair::HddToSsd => "HDD to SSD",
            Pair::SsdToHdd => "SSD to HDD",
            Pair::HddToHdd => "HDD to HDD",
        }
    }
    /// Source and destination models.
    pub(crate) fn models(self) -> (&'static str, &'static str) {
        const SSD: &str = "intel-520";
        const HDD: &str = "hitachi-7k1000c";
        match self {
            Pair::SsdToSsd => (SSD, SSD),
            Pair::HddToSsd => (HDD, SSD),
            Pair::SsdToHdd => (SSD, HDD),
            Pair::HddToHdd => (HDD, HDD),
        }
    }
    /// The pool the workload runs fastest on alone (eq. 1's "best I/O performance").
    pub(crate) fn best(self) -> &'static str {
        match self {
            Pair::HddToSsd => "dst",
            _ => "src",
        }
    }
}

/// The paper's Table 5 (downtime in ms), by pair and scheme.
fn paper_downtime_ms(pair: Pair, scheme: &str) -> f64 {
    let row = match pair {
        Pair::SsdToSsd => [232.0, 198.0, 197.0, 120.0, 124.0],
        Pair::HddToSsd => [266.0, 249.0, 197.0, 140.0, 200.0],
        Pair::SsdToHdd => [4000.0, 298.0, 200.0, 150.0, 201.0],
        Pair::HddToHdd => [900.0, 199.0, 246.0, 179.0, 260.0],
    };
    row[SCHEMES.iter().position(|s| *s == scheme).unwrap_or(0)]
}

/// The paper's Table 3 (downtime in ms, 30 GB image, Iometer 50 % reads), DBT and IO
/// Mirroring only.
fn paper_table3_ms(pair: Pair, scheme: &str) -> f64 {
    let (dbt, mirror) = match pair {
        Pair::SsdToSsd => (232.0, 198.0),
        Pair::SsdToHdd => (4000.0, 249.0),
        Pair::HddToSsd => (266.0, 298.0),
        Pair::HddToHdd => (900.0, 199.0),
    };
    if scheme == "dbt" { dbt } else { mirror }
}

/// Table 3's schemes.
pub const TABLE3_SCHEMES: [&str; 2] = ["dbt", "mirror"];

/// The paper's Table 6 formula: share of VM writes issued to an SSD, for `alpha` (share
/// of writes to the copied area) and `beta` (share of writes to distinct blocks).
pub fn paper_ssd_share(pair: Pair, scheme: &str, alpha: f64, beta: f64) -> f64 {
    match (pair, scheme) {
        (Pair::SsdToSsd, "dbt") => 1.0 + beta,
        (Pair::SsdToSsd, "mirror" | "aio") => 1.0 + alpha,
        (Pair::SsdToSsd, "lr") => alpha,
        (Pair::SsdToSsd, _) => 1.0,
        (Pair::HddToSsd, "dbt") => beta,
        (Pair::HddToSsd, _) => alpha,
        (Pair::SsdToHdd, "lr") => 0.0,
        (Pair::SsdToHdd, "slr") => 1.0 - alpha,
        (Pair::SsdToHdd, _) => 1.0,
        (Pair::HddToHdd, _) => 0.0,
    }
}

/// A workload stand-in: fio-like random I/O at a depth.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Load {
    pub name: &'static str,
    pub rw: &'static str,
    pub bs_kib: u32,
    pub rwmixread: u32,
    pub iodepth: u32,
}

/// Table 5's kernel compile: small reads and writes, a few outstanding.
pub const KERNEL_COMPILE: Load = Load {
    name: "kernel-compile-like (randrw 60 % reads, 8k, depth 2)",
    rw: "randrw",
    bs_kib: 8,
    rwmixread: 60,
    iodepth: 2,
};
/// Figures 11-14's Iometer: 75 % reads at OIO 4.
pub const IOMETER: Load = Load {
    name: "Iometer-like (randrw 75 % reads, 4k, OIO 4)",
    rw: "randrw",
    bs_kib: 4,
    rwmixread: 75,
    iodepth: 4,
};
/// Table 3's Iometer: 50 % reads at OIO 4.
pub const IOMETER_5050: Load = Load {
    name: "Iometer-like (randrw 50 % reads, 4k, OIO 4)",
    rw: "randrw",
    bs_kib: 4,
    rwmixread: 50,
    iodepth: 4,
};
/// Table 6: writes only, each block once (beta = 1), at DBT's tracking unit.
pub const DISTINCT_WRITES: Load = Load {
    name: "distinct writes (randwrite 16k, each block once, depth 2)",
    rw: "randwrite",
    bs_kib: 16,
    rwmixread: 0,
    iodepth: 2,
};

#[derive(Clone, Copy, Debug)]
pub struct MigrationOptions {
    pub image_mib: u64,
    /// Table 3's image (the paper's was 30 GB).
    pub table3_image_mib: u64,
    /// Copy rate cap, MB/s.
    pub rate_mb_s: u64,
    /// The copy's share of a busy disk: `Equal` is the paper's setup (its copy process
    /// competed with the VM for the disk, section 3.1), `Background` tiervisor's default
    /// (the VM's I/O first).
    pub copy_priority: CopyPriority,
    /// DBT's chunk copies in flight in the paper's rows ([`PAPER_COPY_WINDOW_CHUNKS`]);
    /// tiervisor's rows use the engine's default.
    pub copy_window_chunks: u32,
    /// DBT's `coalesce_runs` in the paper's rows ([`PAPER_COALESCE_RUNS`]); None: the
    /// engine's default by the destination's medium.
    pub coalesce_runs: Option<u32>,
    /// DBT's `coalesce_runs` in tiervisor's rows (None: the engine's default by the
    /// destination's medium, 4 into an HDD and never into an SSD).
    pub tiervisor_coalesce_runs: Option<u32>,
    pub jobs: usize,
}

impl Default for MigrationOptions {
    fn default() -> Self {
        MigrationOptions {
            image_mib: 256,
            table3_image_mib: 30720,
            rate_mb_s: 64,
            copy_priority: CopyPriority::Equal,
            copy_window_chunks: PAPER_COPY_WINDOW_CHUNKS,
            coalesce_runs: Some(PAPER_COALESCE_RUNS),
            tiervisor_coalesce_runs: None,
            jobs: 2,
        }
    }
}

/// What a run does: a workload alone (`scheme` None), a copy alone (`load` None), or both.
#[derive(Clone, Copy, Debug)]
struct Run {
    pair: Pair,
    /// The image size (MiB) of this run.
    image_mib: u64,
    load: Option<Load>,
    scheme: Option<&'static str>,
    /// The workload runs on this pool alone (no migration); "src" or "dst".
    alone_on: &'static str,
    /// DBT's copy window (chunks).
    window: u32,
    /// DBT's `coalesce_runs` (0: never; None: by the destination's medium).
    coalesce: Option<u32>,
}

/// The workload runs until the migration ends (the run stops then): at 30 GB the copy
/// takes over 15 simulated minutes, and a workload that stopped first left DBT nothing
/// dirty to copy at the pause.
pub(crate) const RUNTIME_S: u64 = 86_400;

/// The scenario text of a run.
pub fn scenario_text(
    pair: Pair,
    load: Option<Load>,
    scheme: Option<&str>,
    alone_on: &str,
    o: &MigrationOptions,
) -> String {
    scenario_text_vm(pair, load.map(fio_vm).as_deref(), scheme, alone_on, o)
}

/// A `[vm.fio]` table of `l`, running until the migration ends.
fn fio_vm(l: Load) -> String {
    format!(
        "[vm.fio]\nrw = \"{}\"\nbs = \"{}k\"\nrwmixread = {}\niodepth = {}\nruntime_s = {RUNTIME_S}\nrandom_map = {}\n",
        l.rw,
        l.bs_kib,
        l.rwmixread,
        l.iodepth,
        l.rwmixread == 0
    )
}

/// The scenario text of a run whose VM's workload is the table `vm` (`[vm.fio]`,
/// `[vm.bench]`, ...), or one read when None (the copy alone).
pub(crate) fn scenario_text_vm(
    pair: Pair,
    vm: Option<&str>,
    scheme: Option<&str>,
    alone_on: &str,
    o: &MigrationOptions,
) -> String {
    let (src, dst) = pair.models();
    let cap_mib = o.image_mib * 4;
    let mut s = format!(
        "seed = 1\n[[pool]]\nname = \"src\"\nmodel = \"{src}\"\ncapacity = \"{cap_mib}m\"\n\
         [[pool]]\nname = \"dst\"\nmodel = \"{dst}\"\ncapacity = \"{cap_mib}m\"\n\
         [[volume]]\nname = \"vm\"\npool = \"{}\"\nsize = \"{}m\"\nprefill = true\n",
        if scheme.is_some() { "src" } else { alone_on },
        o.image_mib
    );
    match vm {
        Some(table) => {
            s += "[[vm]]\nvolume = \"vm\"\n";
            s += table;
        }
        // One read: the whole image is mapped (prefilled), nothing else runs.
        None => s += "[[vm]]\nvolume = \"vm\"\n[vm.fio]\nrw = \"randread\"\nbs = \"4k\"\nios = 1\n",
    }
    if let Some(sc) = scheme {
        s += &format!(
            "[[migration]]\nvolume = \"vm\"\nto = \"dst\"\nscheme = \"{sc}\"\nat_s = {}\nrate_mb_s = {}\ngranularity = \"512\"\ncopy_priority = \"{}\"\ncopy_window_chunks = {}\n{}",
            if vm.is_some() { 0.5 } else { 0.0 },
            o.rate_mb_s,
            o.copy_priority.name(),
            o.copy_window_chunks,
            o.coalesce_runs
                .map_or(String::new(), |n| format!("coalesce_runs = {n}\n"))
        );
    }
    s
}

/// The parameters the runs' migrations get (`scenario_text`), for `auto`'s prediction.
pub(crate) fn job_params(o: &MigrationOptions) -> MigrationParams {
    MigrationParams {
        rate_bytes_per_s: o.rate_mb_s * 1_000_000,
        granularity_bytes: 512,
        copy_priority: o.copy_priority,
        copy_window_chunks: o.copy_window_chunks,
        coalesce_runs: o.coalesce_runs,
        ..MigrationParams::new(tiervisor_engine::PoolId(1))
    }
}

fn run_one(r: Run, o: &MigrationOptions) -> Result<SimReport, String> {
    let o = MigrationOptions {
        image_mib: r.image_mib,
        copy_window_chunks: r.window,
        coalesce_runs: r.coalesce,
        ..*o
    };
    let text = scenario_text(r.pair, r.load, r.scheme, r.alone_on, &o);
    let load = r.load.map_or("copy alone", |l| l.name);
    run_scenario("migration.toml", &text, r.pair, r.scheme, load)
}

/// Run a generated scenario of `pair` until its migration ends, or, with no `scheme`
/// (a workload alone), for 5 simulated seconds, its rate. Errors name the run.
pub(crate) fn run_scenario(
    file: &str,
    text: &str,
    pair: Pair,
    scheme: Option<&str>,
    load: &str,
) -> Result<SimReport, String> {
    let sc = Scenario::parse(file, text, Path::new(".")).map_err(|e| e.to_string())?;
    let opts = RunOptions {
        stop_after_migrations: true,
        max_sim_ns: scheme.is_none().then_some(5_000_000_000),
        ..RunOptions::default()
    };
    Simulation::new(sc, &opts)?
        .run()
        .map_err(|e| format!("{} {} {load}: {e}", pair.name(), scheme.unwrap_or("-")))
}

pub(crate) fn migration_of(r: &SimReport) -> Result<&MigrationReport, String> {
    let m = r.migrations.first().ok_or("the run started no migration")?;
    if m.phase != "done" {
        return Err(format!(
            "{} migration ended {}: {}",
            m.scheme,
            m.phase,
            m.error.as_deref().unwrap_or("")
        ));
    }
    Ok(m)
}

/// Table 5: one scheme's downtime for one pair.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct DowntimeRow {
    pub pair: &'static str,
    pub scheme: &'static str,
    pub paper_ms: f64,
    /// The pause (requests wait).
    pub ours_ms: f64,
    pub ratio: f64,
    /// From the pause until the switch was durable.
    pub durable_ms: f64,
    pub migration_time_s: f64,
    pub passes: u32,
}

impl DowntimeRow {
    /// Migration `m`'s pause beside the paper's `paper_ms`.
    fn of(pair: &'static str, scheme: &'static str, paper_ms: f64, m: &MigrationReport) -> Self {
        DowntimeRow {
            pair,
            scheme,
            paper_ms,
            ours_ms: m.downtime_ms,
            ratio: m.downtime_ms / paper_ms,
            durable_ms: m.pivot_durable_ms,
            migration_time_s: m.migration_time_s.unwrap_or(0.0),
            passes: m.passes,
        }
    }
}

/// Table 3: DBT's or IO Mirroring's downtime for one pair (Table 5's fields).
pub type Table3Row = DowntimeRow;

/// Table 6: one scheme's SSD share for one pair.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ShareRow {
    pub pair: &'static str,
    pub scheme: &'static str,
    /// Measured share of writes to the copied area (the mirror run's duplicated share).
    pub alpha: f64,
    /// The paper's formula at our alpha and beta = 1.
    pub paper_formula: f64,
    /// VM-caused bytes written to SSD pools per VM byte written, with LR's skipped
    /// copy counted into the copy as the paper does.
    pub ours: f64,
}

impl ShareRow {
    /// Migration `m`'s SSD share (Table 6's run) beside the formula at `alpha`.
    pub(crate) fn of(
        pair: Pair,
        scheme: &'static str,
        alpha: f64,
        m: &MigrationReport,
        image_mib: u64,
    ) -> Self {
        let mut ssd = m.ssd_write_bytes as f64;
        if scheme == "lr" && pair.models().1 == "intel-520" {
            // What LR's writes spared the copy is the copy's, as in the paper.
            let image = (image_mib << 20) as f64;
            let copied_once = (m.copied_bytes - m.redundant_bytes) as f64;
            ssd -= (image - copied_once).max(0.0);
        }
        ShareRow {
            pair: pair.name(),
            scheme,
            alpha,
            paper_formula: paper_ssd_share(pair, scheme, alpha, 1.0),
            ours: ssd.max(0.0) / m.vm_write_bytes.max(1) as f64,
        }
    }
}

/// Equations 1-4 for one scheme and pair.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CostRow {
    pub pair: &'static str,
    pub scheme: &'static str,
    pub lambda_io: f64,
    pub lambda_migration_time: f64,
    pub lambda_wear: f64,
    /// MC at each of [`GAMMAS`].
    pub mc: Vec<f64>,
    pub downtime_ms: f64,
    pub migration_time_s: f64,
    /// The workload as the engine saw it at the job's start (`auto`'s input).
    pub profile: WorkloadProfile,
}

impl CostRow {
    /// Migration `m`'s cost (the Iometer-like run) against the image copy alone
    /// (`copy_s`) and the workload alone on the faster pool (`best` IOPS).
    pub(crate) fn of(
        pair: Pair,
        scheme: &'static str,
        m: &MigrationReport,
        copy_s: f64,
        best: f64,
    ) -> Self {
        let time_s = m.migration_time_s.unwrap_or(0.0);
        let inputs = CostInputs {
            migration_time_ns: (time_s * 1e9) as u64,
            image_copy_time_ns: (copy_s * 1e9) as u64,
            best_io: best,
            io_during: m.iops_during.unwrap_or(0.0),
            workload_write_bytes: m.vm_write_bytes,
            ssd_write_bytes: m.ssd_write_bytes,
        };
        let mc: Vec<MigrationCost> = GAMMAS
            .iter()
            .map(|&g| MigrationCost::measured(&inputs, g))
            .collect();
        CostRow {
            pair: pair.name(),
            scheme,
            lambda_io: mc[0].lambda_io,
            lambda_migration_time: mc[0].lambda_migration_time,
            lambda_wear: mc[0].lambda_wear,
            mc: mc.iter().map(|c| c.mc).collect(),
            downtime_ms: m.downtime_ms,
            migration_time_s: time_s,
            profile: m.profile,
        }
    }
}

/// An ordering the paper reports, checked on our numbers.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct OrderCheck {
    pub claim: String,
    pub holds: bool,
    pub detail: String,
}

/// DBT with tiervisor's copy window and whole-chunk copies (its own mechanism, not the
/// paper's):
/// the same experiments as the paper's DBT rows, each beside the paper's number and the
/// ratio, reported apart and not counted as reproducing the paper.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct WindowRows {
    pub copy_window_chunks: u32,
    /// DBT copies a dirty chunk whole from this many dirty runs (None: the engine's
    /// default by the destination's medium).
    pub coalesce_runs: Option<u32>,
    pub table3: Vec<Table3Row>,
    pub downtime: Vec<DowntimeRow>,
    pub share: Vec<ShareRow>,
    pub cost: Vec<CostRow>,
}

#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MigrationResult {
    pub image_mib: u64,
    pub rate_mb_s: u64,
    /// `background` or `equal` (`MigrationOptions::copy_priority`).
    pub copy_priority: &'static str,
    /// DBT's copy window in the paper's rows.
    pub copy_window_chunks: u32,
    pub table3_image_mib: u64,
    pub table3_load: &'static str,
    pub table3: Vec<Table3Row>,
    pub downtime_load: &'static str,
    pub share_load: &'static str,
    pub cost_load: &'static str,
    pub downtime: Vec<DowntimeRow>,
    pub share: Vec<ShareRow>,
    pub cost: Vec<CostRow>,
    /// Copying the image alone, per pair (eq. 2's denominator), in seconds.
    pub image_copy_s: Vec<(&'static str, f64)>,
    /// The workload alone on the faster pool (eq. 1's best), requests per second.
    pub best_iops: Vec<(&'static str, f64)>,
    pub orderings: Vec<OrderCheck>,
    /// Figure 15 over the Iometer-like cost rows (`migration_mix.rs`).
    pub mix: Vec<MixRow>,
    pub mix_claims: Vec<MixClaim>,
    /// tiervisor's DBT rows with its copy window (not judged against the paper).
    pub tiervisor: WindowRows,
    /// Figures 10-14 over Table 7's benchmarks (`migration_figs.rs`).
    pub figures: Figures,
}

/// The lowest-MC scheme of `pair` at gamma index `g`.
fn lowest(cost: &[CostRow], pair: Pair, g: usize) -> (&'static str, f64) {
    cost.iter()
        .filter(|c| c.pair == pair.name())
        .map(|c| (c.scheme, c.mc[g]))
        .fold(("-", f64::INFINITY), |a, b| if b.1 < a.1 { b } else { a })
}

fn orderings(cost: &[CostRow], downtime: &[DowntimeRow], share: &[ShareRow]) -> Vec<OrderCheck> {
    let mut v = Vec::new();
    let mut lowest_is = |pair: Pair, g: usize, want: &str, claim: &str| {
        let (s, mc) = lowest(cost, pair, g);
        v.push(OrderCheck {
            claim: format!("{}: {claim} (gamma {})", pair.name(), GAMMAS[g]),
            holds: s == want,
            detail: format!("lowest MC: {s} ({mc:.3})"),
        });
    };
    for g in 0..GAMMAS.len() {
        lowest_is(Pair::HddToSsd, g, "lr", "LR has the lowest MC (Figure 11)");
    }
    lowest_is(
        Pair::SsdToHdd,
        0,
        "aio",
        "AIO has the lowest MC (Figure 12)",
    );
    lowest_is(
        Pair::SsdToHdd,
        1,
        "slr",
        "SLR has the lowest MC (Figure 12)",
    );
    lowest_is(Pair::SsdToHdd, 2, "lr", "LR has the lowest MC (Figure 12)");
    for g in 1..GAMMAS.len() {
        lowest_is(Pair::SsdToSsd, g, "lr", "LR has the lowest MC (Figure 13)");
    }
    lowest_is(
        Pair::HddToHdd,
        1,
        "slr",
        "SLR has the lowest MC (Figure 14)",
    );
    let dt = |pair: Pair, s: &str| {
        downtime
            .iter()
            .find(|d| d.pair == pair.name() && d.scheme == s)
            .map_or(0.0, |d| d.ours_ms)
    };
    let others = SCHEMES[1..]
        .iter()
        .map(|s| dt(Pair::SsdToHdd, s))
        .fold(0.0, f64::max);
    v.push(OrderCheck {
        claim: "SSD to HDD: DBT's downtime is several times every other scheme's (Table 5, 4000 ms against at most 298 ms)".into(),
        holds: dt(Pair::SsdToHdd, "dbt") > 3.0 * others,
        detail: format!(
            "DBT {:.1} ms, others at most {others:.1} ms",
            dt(Pair::SsdToHdd, "dbt")
        ),
    });
    for pair in [Pair::SsdToSsd, Pair::HddToSsd, Pair::SsdToHdd] {
        let rows: Vec<&ShareRow> = share.iter().filter(|r| r.pair == pair.name()).collect();
        let lr = rows
            .iter()
            .find(|r| r.scheme == "lr")
            .map_or(f64::NAN, |r| r.ours);
        let min = rows.iter().map(|r| r.ours).fold(f64::INFINITY, f64::min);
        v.push(OrderCheck {
            claim: format!("{}: LR writes least to the SSD (Table 6)", pair.name()),
            holds: lr <= min + 1e-9,
            detail: format!("LR {lr:.3}, lowest {min:.3}"),
        });
    }
    v
}

/// Run every experiment.
pub fn migration(o: &MigrationOptions) -> Result<MigrationResult, String> {
    let mut runs = Vec::new();
    let image_mib = o.image_mib;
    let (paper_w, ours_w) = (o.copy_window_chunks, DEFAULT_COPY_WINDOW_CHUNKS);
    for pair in Pair::ALL {
        for load in [KERNEL_COMPILE, DISTINCT_WRITES, IOMETER] {
            for scheme in SCHEMES {
                runs.push(Run {
                    pair,
                    image_mib,
                    load: Some(load),
                    scheme: Some(scheme),
                    alone_on: "src",
                    window: paper_w,
                    coalesce: o.coalesce_runs,
                });
            }
        }
        for scheme in TABLE3_SCHEMES {
            runs.push(Run {
                pair,
                image_mib: o.table3_image_mib,
                load: Some(IOMETER_5050),
                scheme: Some(scheme),
                alone_on: "src",
                window: paper_w,
                coalesce: o.coalesce_runs,
            });
        }
        // The window changes only DBT's dirty passes and final copy: tiervisor's rows
        // are DBT's.
        for (load, size) in [
            (KERNEL_COMPILE, image_mib),
            (DISTINCT_WRITES, image_mib),
            (IOMETER, image_mib),
            (IOMETER_5050, o.table3_image_mib),
        ] {
            if ours_w != paper_w {
                runs.push(Run {
                    pair,
                    image_mib: size,
                    load: Some(load),
                    scheme: Some("dbt"),
                    alone_on: "src",
                    window: ours_w,
                    coalesce: o.tiervisor_coalesce_runs,
                });
            }
        }
        runs.push(Run {
            pair,
            image_mib,
            load: None,
            scheme: Some("mirror"),
            alone_on: "src",
            window: paper_w,
            coalesce: o.coalesce_runs,
        });
        runs.push(Run {
            pair,
            image_mib,
            load: Some(IOMETER),
            scheme: None,
            alone_on: pair.best(),
            window: paper_w,
            coalesce: o.coalesce_runs,
        });
    }
    let reports = run_parallel(runs.clone(), o.jobs, |r| run_one(r, o))?;
    let find_w = |pair: Pair, load: Option<&str>, scheme: Option<&str>, window: u32| {
        runs.iter()
            .zip(&reports)
            .find(|(r, _)| {
                r.pair == pair
                    && r.load.map(|l| l.name) == load
                    && r.scheme == scheme
                    && r.window == window
            })
            .map(|(_, rep)| rep)
            .ok_or_else(|| format!("no run for {} {scheme:?} window {window}", pair.name()))
    };
    let find =
        |pair: Pair, load: Option<&str>, scheme: Option<&str>| find_w(pair, load, scheme, paper_w);
    let (mut downtime, mut share, mut cost) = (Vec::new(), Vec::new(), Vec::new());
    let mut window = WindowRows {
        copy_window_chunks: ours_w,
        coalesce_runs: o.tiervisor_coalesce_runs,
        table3: Vec::new(),
        downtime: Vec::new(),
        share: Vec::new(),
        cost: Vec::new(),
    };
    let mut table3 = Vec::new();
    let (mut image_copy_s, mut best_iops) = (Vec::new(), Vec::new());
    for pair in Pair::ALL {
        let copy = migration_of(find(pair, None, Some("mirror"))?)?
            .migration_time_s
            .unwrap_or(0.0);
        let best = find(pair, Some(IOMETER.name), None)?
            .volumes
            .get("vm")
            .map_or(0.0, |v| v.iops);
        image_copy_s.push((pair.name(), copy));
        best_iops.push((pair.name(), best));
        let mirror = migration_of(find(pair, Some(DISTINCT_WRITES.name), Some("mirror"))?)?;
        let alpha = mirror.mirrored_bytes as f64 / mirror.vm_write_bytes.max(1) as f64;
        for scheme in TABLE3_SCHEMES {
            let m = migration_of(find(pair, Some(IOMETER_5050.name), Some(scheme))?)?;
            table3.push(DowntimeRow::of(
                pair.name(),
                scheme,
                paper_table3_ms(pair, scheme),
                m,
            ));
        }
        for scheme in SCHEMES {
            let m = migration_of(find(pair, Some(KERNEL_COMPILE.name), Some(scheme))?)?;
            downtime.push(DowntimeRow::of(
                pair.name(),
                scheme,
                paper_downtime_ms(pair, scheme),
                m,
            ));
            let m = migration_of(find(pair, Some(DISTINCT_WRITES.name), Some(scheme))?)?;
            share.push(ShareRow::of(pair, scheme, alpha, m, o.image_mib));
            let m = migration_of(find(pair, Some(IOMETER.name), Some(scheme))?)?;
            cost.push(CostRow::of(pair, scheme, m, copy, best));
        }
        if ours_w != paper_w {
            let dbt =
                |load: Load| migration_of(find_w(pair, Some(load.name), Some("dbt"), ours_w)?);
            let (n, paper) = (pair.name(), paper_table3_ms(pair, "dbt"));
            window
                .table3
                .push(DowntimeRow::of(n, "dbt", paper, dbt(IOMETER_5050)?));
            let paper = paper_downtime_ms(pair, "dbt");
            window
                .downtime
                .push(DowntimeRow::of(n, "dbt", paper, dbt(KERNEL_COMPILE)?));
            let m = dbt(DISTINCT_WRITES)?;
            window
                .share
                .push(ShareRow::of(pair, "dbt", alpha, m, o.image_mib));
            window
                .cost
                .push(CostRow::of(pair, "dbt", dbt(IOMETER)?, copy, best));
        }
    }
    let orderings = orderings(&cost, &downtime, &share);
    let mix = mix_rows(&cost, &job_params(o))?;
    let mix_claims = mix_claims(&mix);
    let figures = figures(o)?;
    Ok(MigrationResult {
        image_mib: o.image_mib,
        table3_image_mib: o.table3_image_mib,
        table3_load: IOMETER_5050.name,
        table3,
        rate_mb_s: o.rate_mb_s,
        copy_priority: o.copy_priority.name(),
        copy_window_chunks: paper_w,
        downtime_load: KERNEL_COMPILE.name,
        share_load: DISTINCT_WRITES.name,
        cost_load: IOMETER.name,
        downtime,
        share,
        cost,
        image_copy_s,
        best_iops,
        orderings,
        mix,
        mix_claims,
        tiervisor: window,
        figures,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_scenarios_parse() {
        let o = MigrationOptions::default();
        for pair in Pair::ALL {
            for load in [None, Some(IOMETER), Some(DISTINCT_WRITES)] {
                for scheme in [None, Some("lr")] {
                    let text = scenario_text(pair, load, scheme, "src", &o);
                    let sc = Scenario::parse("x.toml", &text, Path::new("."));
                    assert!(sc.is_ok(), "{text}\n{:?}", sc.err());
                    assert_eq!(
                        sc.map(|s| s.migrations.len()).ok(),
                        Some(scheme.is_some() as usize)
                    );
                }
            }
        }
    }

    #[test]
    fn table_6_formulas() {
        assert_eq!(paper_ssd_share(Pair::SsdToSsd, "dbt", 0.3, 0.8), 1.8);
        assert_eq!(paper_ssd_share(Pair::SsdToSsd, "lr", 0.3, 0.8), 0.3);
        assert_eq!(paper_ssd_share(Pair::HddToSsd, "dbt", 0.3, 0.8), 0.8);
        assert_eq!(paper_ssd_share(Pair::SsdToHdd, "slr", 0.25, 0.8), 0.75);
        assert_eq!(paper_ssd_share(Pair::HddToHdd, "aio", 0.3, 0.8), 0.0);
    }
}
