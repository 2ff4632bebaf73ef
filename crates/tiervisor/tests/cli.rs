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
fn malformed_trace_line_exits_2_and_empty_trace_is_an_empty_report() {
    let p = tmp("bad.trace", "1 0 8 8 1\n2 0 8 x 1\n");
    let o = bin().args(["trace", "info"]).arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("bad.trace:2:") && e.contains("SizeInSectors"),
        "{e}"
    );
    let empty = tmp("empty.trace", "");
    let o = bin()
        .args(["trace", "info", "--json"])
        .arg(&empty)
        .output()
        .unwrap();
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["requests"], 0);
    let sc = tmp(
        "empty.toml",
        &format!(
            "[[pool]]\nname=\"h\"\nmodel=\"hitachi-7k1000c\"\ncapacity=\"10g\"\n[[volume]]\nname=\"v\"\npool=\"h\"\nsize=\"1g\"\n[[vm]]\nvolume=\"v\"\ntrace=\"{}\"\n",
            empty.display()
        ),
    );
    let o = bin().args(["sim", "--json"]).arg(&sc).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ios"], 0);
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
