//! The command line: output, exit codes and error messages on bad input.

mod support;

use std::path::PathBuf;
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tiervisor"))
}

fn tmp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tiervisor-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn model_list_names_every_preset() {
    let o = bin().args(["model", "list"]).output().unwrap();
    assert!(o.status.success());
    let s = String::from_utf8_lossy(&o.stdout);
    for p in [
        "hitachi-7k1000c",
        "cheetah-15k4",
        "intel-320-160g",
        "intel-x25m-80g",
        "mtron-msd-sata3035",
        "intel-520",
        "openssd-jasmine",
    ] {
        assert!(s.contains(p), "missing {p}");
    }
}

#[test]
fn calibrate_json_reports_model_paper_ratio() {
    let o = bin().args(["calibrate", "--json"]).output().unwrap();
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert!(
        rows.iter()
            .any(|r| r["figure"].as_str().unwrap().contains("HDD->HDD"))
    );
    for r in rows {
        assert!(r.get("model").is_some() && r.get("paper").is_some() && r.get("ratio").is_some());
    }
}

#[test]
fn bad_scenario_exits_2_with_file_and_line() {
    let p = tmp("bad.toml", "[[pool]]\nname = \"x\"\nmodel = \"floppy\"\n");
    let o = bin().args(["sim"]).arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("bad.toml:3:") && e.contains("unknown model") && e.contains("hitachi-7k1000c"),
        "{e}"
    );
    let p = tmp("key.toml", "seed = 1\nwhat = 2\n");
    let o = bin().args(["sim"]).arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("key.toml:2:"));
}

#[test]
fn malformed_trace_line_exits_2_and_a_trace_without_requests_is_an_error() {
    let p = tmp("bad.trace", "1 0 8 8 1\n2 0 8 x 1\n");
    let o = bin().args(["trace", "info"]).arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("bad.trace:2:") && e.contains("SizeInSectors"),
        "{e}"
    );
    // Empty, all skipped, binary: exit 2 with what was found, never an empty report.
    let empty = tmp("empty.trace", "");
    let skipped = tmp(
        "skipped.txt",
        "  8,0  1  1  0.1  9  Q  W 8 + 8 [a]\n  8,0  1  2  0.2  9  C  W 8 + 8 [0]\n",
    );
    let binary = tmp("blocks.bin", "\u{7}\0\0\0\u{9}\0\0\0");
    for (f, says) in [
        (&empty, "no trace records"),
        (&skipped, "1 blkparse C events"),
        (&binary, "binary data"),
    ] {
        let o = bin()
            .args(["trace", "info", "--json"])
            .arg(f)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", f.display());
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(says), "{}: {e}", f.display());
        assert!(o.stdout.is_empty());
    }
    let sc = tmp(
        "empty.toml",
        &format!(
            "[[pool]]\nname=\"h\"\nmodel=\"hitachi-7k1000c\"\ncapacity=\"10g\"\n[[volume]]\nname=\"v\"\npool=\"h\"\nsize=\"1g\"\n[[vm]]\nvolume=\"v\"\ntrace=\"{}\"\n",
            empty.display()
        ),
    );
    let o = bin().args(["sim", "--json"]).arg(&sc).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("no trace records"));
}

/// Address-only traces: read only by name with an assumed operation, reported as
/// locality-only, and refused for timed replay with the scenario's line.
#[test]
fn address_only_traces_state_their_assumptions() {
    let blocks: Vec<u8> = (0u32..64).flat_map(|b| (b % 8).to_le_bytes()).collect();
    let raw = tmp("stream.u32", "");
    std::fs::write(&raw, &blocks).unwrap();
    let o = bin()
        .args(["trace", "info", "--format", "raw-u32", "--block-size", "4k"])
        .arg(&raw)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("assume-op"));
    let o = bin()
        .args([
            "trace",
            "info",
            "--json",
            "--format",
            "raw-u32",
            "--block-size",
            "4k",
        ])
        .args(["--assume-op", "mix:0.5", "--seed", "3"])
        .arg(&raw)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["requests"], 64);
    assert_eq!(v["touched_mib"], 1);
    assert_eq!(v["timed"], false);
    assert!(
        v["locality_only"]
            .as_str()
            .unwrap()
            .contains("50.0% reads (seed 3)")
    );
    let arc = tmp("p1.lis", "100 8 0 1\n108 8 0 2\n100 8 0 3\n");
    let scenario = |mode: &str| {
        tmp(
            "arc.toml",
            &format!(
                "[[pool]]\nname=\"h\"\nmodel=\"hitachi-7k1000c\"\ncapacity=\"10g\"\n[[volume]]\nname=\"v\"\npool=\"h\"\nsize=\"1g\"\n[[vm]]\nvolume=\"v\"\ntrace=\"{}\"\nformat=\"arc\"\nassume_op=\"read\"\n{mode}\n",
                arc.display()
            ),
        )
    };
    let o = bin()
        .args(["sim", "--json"])
        .arg(scenario("mode=\"timed\""))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("arc.toml:14:") && e.contains("no arrival times"),
        "{e}"
    );
    let o = bin()
        .args(["sim", "--json"])
        .arg(scenario("mode=\"rate\"\niops=100.0"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ios"], 3);
}

#[test]
fn trace_info_reads_compressed_input() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/traces");
    if !dir.exists() {
        support::skip("../shared/traces not found next to the repository (see README: traces)");
        return;
    }
    let o = bin()
        .args(["trace", "info", "--json"])
        .arg(dir.join("tpcc-small.trace.xz"))
        .output()
        .unwrap();
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["requests"], 6999);
    assert_eq!(v["format"], "disksim");
    assert_eq!(v["devices"].as_object().unwrap().len(), 16);
    // gzip and zstd too
    let raw = std::process::Command::new("xz")
        .arg("-dc")
        .arg(dir.join("tpcc-small.trace.xz"))
        .output()
        .unwrap()
        .stdout;
    let gz = tmp("t.trace.gz", "");
    let mut enc = std::process::Command::new("gzip")
        .arg("-c")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    enc.stdin.take().unwrap().write_all(&raw).unwrap();
    std::fs::write(&gz, enc.wait_with_output().unwrap().stdout).unwrap();
    let o = bin()
        .args(["trace", "info", "--json"])
        .arg(&gz)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["requests"], 6999);
}

/// Sparse writes to a thin volume zero-fill the rest of each chunk: the report counts those
/// bytes and `sim` warns when they exceed the workload's own writes; a thick volume has none.
#[test]
fn thin_zero_fill_is_reported_when_it_inflates_writes() {
    let scenario = |prov: &str| {
        tmp(
            &format!("zf-{prov}.toml"),
            &format!(
                "[[pool]]\nname=\"s\"\nmodel=\"intel-x25m-80g\"\ncapacity=\"4g\"\n[[volume]]\nname=\"v\"\npool=\"s\"\nsize=\"1g\"\nprovisioning=\"{prov}\"\n[[vm]]\nvolume=\"v\"\n[vm.fio]\nrw=\"randwrite\"\nbs=\"4k\"\nios=200\n"
            ),
        )
    };
    let o = bin()
        .args(["sim", "--json"])
        .arg(scenario("thin"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (zf, wb) = (
        v["volumes"]["v"]["zero_fill_bytes"].as_u64().unwrap(),
        v["volumes"]["v"]["write_bytes"].as_u64().unwrap(),
    );
    assert_eq!(wb, 200 * 4096);
    assert!(zf > 10 * wb, "{zf} vs {wb}");
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("zero-fill wrote") && e.contains("volume v"),
        "{e}"
    );
    let o = bin()
        .args(["sim", "--json"])
        .arg(scenario("thick"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["volumes"]["v"]["zero_fill_bytes"], 0);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("zero-fill"));
}

/// `reproduce all` writes one report, a plot per experiment and every point with its
/// paper value, ratio and verdict; the summary counts the points within the band.
#[test]
fn reproduce_all_writes_report_points_and_plots() {
    let out = std::env::temp_dir().join(format!("tiervisor-all-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let o = bin()
        .args([
            "reproduce",
            "all",
            "--skip",
            "logwrite,tiering,scheduling,flush,migration",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("points.json")).unwrap()).unwrap();
    let points = v["points"].as_array().unwrap();
    assert!(!points.is_empty());
    let within = points
        .iter()
        .filter(|p| {
            let r = p["model"].as_f64().unwrap() / p["paper"].as_f64().unwrap();
            assert!((r - p["ratio"].as_f64().unwrap()).abs() < 1e-9);
            assert_eq!(p["in_band"], (0.67..=1.5).contains(&r), "{p}");
            // A reason is given only for a point outside the band.
            assert!(p["in_band"] == false || p.get("why").is_none(), "{p}");
            (0.67..=1.5).contains(&r)
        })
        .count();
    let summary = format!("{within} of {} points within [0.67, 1.5]", points.len());
    assert_eq!(v["summary"], summary.as_str());
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains(&summary) && report.contains("(calibrate.svg)"));
    let out_of_band = points.len() - within;
    let with_why = points.iter().filter(|p| p.get("why").is_some()).count();
    let explained =
        format!("{with_why} of the {out_of_band} points outside the band have a measured reason");
    assert!(report.contains(&explained), "{explained}");
    assert!(report.contains("| why not |"));
    let svg = std::fs::read_to_string(out.join("calibrate.svg")).unwrap();
    assert_eq!(svg.matches("<circle").count(), points.len());
    let o = bin()
        .args(["reproduce", "all", "--skip", "nothing", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&out);
}

/// `--threads` is parsed and checked before anything is created: out of 1..=64 is an
/// input error.
#[test]
fn serve_refuses_a_thread_count_out_of_range_and_creates_nothing() {
    let dir = std::env::temp_dir().join(format!("tiervisor-cli-threads-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (n, want) in [("65", "expected 1..=64"), ("0", "expected 1..=64")] {
        let o = bin()
            .args(["serve", "--threads", n, "--listen", "", "--data-dir"])
            .arg(&dir)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "--threads {n}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains(&format!("--threads {n}: ")) && e.contains(want),
            "{e}"
        );
        assert!(
            !dir.join("ssd.pool").exists(),
            "a refused start created a pool"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `reproduce migration --out DIR` writes Figures 11-15 as SVG, and Figures 10-14 over
/// Table 7's benchmarks, each with one line per scheme in each of its three panels (2 px
/// wide; the mesh's are 1 px), and prints Table 3, Figure 15 and Figures 10-14 beside the
/// paper's figures.
#[test]
fn reproduce_migration_writes_one_plot_per_figure_with_a_line_per_scheme() {
    let out = std::env::temp_dir().join(format!("tiervisor-mig-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let o = bin()
        .args([
            "reproduce",
            "migration",
            "--image-mib",
            "16",
            "--table3-image-mib",
            "16",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("Table 3, downtime")
            && text.contains("Figure 15")
            && text.contains("Figure 12 (SSD to HDD)")
            && text.contains("auto on Table 7's benchmarks"),
        "{text}"
    );
    for (fig, lines) in [
        ("11", 5),
        ("12", 5),
        ("13", 5),
        ("14", 5),
        ("15", 4),
        ("10", 5),
        ("11-table7", 5),
        ("12-table7", 5),
        ("13-table7", 5),
        ("14-table7", 5),
    ] {
        let svg = std::fs::read_to_string(out.join(format!("fig{fig}.svg"))).unwrap();
        let n = svg.matches("stroke-width=\"2\" points=").count();
        assert_eq!(n, 3 * lines, "fig{fig}.svg");
    }
    let _ = std::fs::remove_dir_all(&out);
}

/// `reproduce flush --plot DIR` draws Figures 1/8, 2/6 and 7 as non-empty SVG files in the
/// directory named, and nowhere else.
#[test]
fn reproduce_flush_plot_draws_figures_1_8_2_6_and_7() {
    let dir = std::env::temp_dir().join(format!("tiervisor-flush-plot-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let o = bin()
        .args([
            "reproduce",
            "flush",
            "--runtime-s",
            "0.2",
            "--jobs",
            "2",
            "--plot",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "fig1_8_bandwidth.svg",
            "fig2_6_flush_cost.svg",
            "fig7_buffer.svg"
        ]
    );
    for n in &names {
        let svg = std::fs::read_to_string(dir.join(n)).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("points="), "{n}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
