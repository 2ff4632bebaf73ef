//! Seed 002's experiment from `scenarios/logwrite/` (scaled from a 6 GiB to a 512 MiB
//! file, and the page cache's dirty limit with it, so the suite stays fast): the paper's
//! mechanism (`bitvisor` mode) within the band of its figures at 4 KiB, tiervisor's
//! gathering log reported beside it; and the steady-state scenarios clean, amplify and
//! keep cost-benefit ahead on skewed overwrites.

mod common;

use tiervisor_sim::reproduce::logwrite;
use tiervisor_sim::reproduce::points::{BAND, from_logwrite};
use tiervisor_sim::{RunOptions, Scenario, Simulation};

#[test]
fn bitvisor_mode_is_within_the_papers_band_and_gathering_adds_to_it() {
    let src = common::scenarios_dir().join("logwrite");
    let dir = std::env::temp_dir().join(format!("tv-logwrite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut n = 0;
    for e in std::fs::read_dir(&src).unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("size = \"6g\""), "{}", path.display());
        assert!(text.contains("dirty = \"640m\""), "{}", path.display());
        // 6 GiB / 512 MiB = 12: the dirty limit keeps its share of the file.
        let scaled = text
            .replace("size = \"6g\"", "size = \"512m\"")
            .replace("dirty = \"640m\"", "dirty = \"53m\"");
        std::fs::write(dir.join(path.file_name().unwrap()), scaled).unwrap();
        n += 1;
    }
    assert_eq!(
        n, 72,
        "3 devices x 8 record sizes x log off/bitvisor/gather"
    );
    let rows = logwrite(&dir, 2).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(rows.len(), 72);
    // Every point the paper gives (4 KiB on both of its drives: MB/s off and converted,
    // and the speed-up) within the band, but one: the X25-M with the log off runs at our
    // preset's datasheet random-write limit (3,300 IOPS, a fresh first-generation drive),
    // 1.7x the paper's bar, which implies about 2,000 writes/s (a drive in a used state,
    // whose fragmentation the model does not have). Reported as out, never as met.
    let points = from_logwrite(&rows);
    assert_eq!(points.len(), 6, "{points:?}");
    let (out, claimed): (Vec<_>, Vec<_>) = points
        .iter()
        .partition(|p| p.what.contains("intel-x25m-80g: MB/s, log off"));
    assert_eq!(out.len(), 1);
    assert!(!out[0].in_band && out[0].ratio > 1.5, "{:?}", out[0]);
    for p in claimed {
        assert!(
            (BAND.0..=BAND.1).contains(&p.ratio),
            "{}: paper {} model {:.2} ratio {:.2}",
            p.what,
            p.paper,
            p.model,
            p.ratio
        );
    }
    let speedup = |dev: &str, rec: u64, log: &str| {
        rows.iter()
            .find(|r| r.device == dev && r.record_bytes == rec && r.log == log)
            .and_then(|r| r.speedup)
            .unwrap()
    };
    for dev in ["mtron-msd-sata3035", "intel-x25m-80g", "hitachi-7k1000c"] {
        // Acknowledging from RAM and gathering adds to the paper's write-through.
        assert!(
            speedup(dev, 4096, "gather") > speedup(dev, 4096, "bitvisor"),
            "{dev}"
        );
        // At 512 KiB the writeback's requests already run near the drive's sequential
        // rate on the SSD (the scaled file merges more): the log may gain nothing there,
        // but must not cost (0.99 measured on the X25-M).
        assert!(
            speedup(dev, 512 << 10, "gather") >= 0.97,
            "{dev} slower at 512 KiB"
        );
    }
    // Each record written once: nothing to clean.
    for r in rows.iter().filter(|r| r.log != "off") {
        let waf = r.log_write_amplification.unwrap();
        assert!((0.99..1.01).contains(&waf), "{r:?}");
    }
}

#[test]
fn steady_state_cleaning_amplifies_and_cost_benefit_wins_on_skew() {
    let dir = common::scenarios_dir().join("logwrite-steady");
    let run = |name: &str| {
        let mut sc = Scenario::load(&dir.join(format!("{name}.toml"))).unwrap();
        // A shorter run: two passes over the volume instead of three.
        if let tiervisor_sim::WorkloadSpec::Fio(j) = &mut sc.vms[0].workload {
            j.ios = Some(800_000);
        }
        Simulation::new(sc, &RunOptions::default())
            .unwrap()
            .run()
            .unwrap()
    };
    let mut mbps = Vec::new();
    for name in ["greedy-zoned", "cost-benefit-zoned"] {
        let r = run(name);
        let l = &r.logs["ssd"];
        assert!(l.segments_cleaned > 100, "{name}: {l:?}");
        assert!(l.write_amplification > 1.02, "{name}: {l:?}");
        assert_eq!(l.home_fallbacks, 0, "{name}: {l:?}");
        assert!(r.timeline.len() > 10, "{name}: timeline");
        // No second without progress (the driver once dropped a commit timer's wake-up
        // asked for while a sooner one was pending; writers parked for free segments
        // then waited seconds for the commit that released them).
        let writing_s = r.vms["writer"].exec_time_s;
        let stalled: Vec<f64> = r
            .timeline
            .iter()
            .filter(|s| s.t_s + 1.0 < writing_s && s.write_mb_per_s < 5.0)
            .map(|s| s.t_s)
            .collect();
        assert!(stalled.is_empty(), "{name}: stalled at {stalled:?} s");
        let v = &r.vms["writer"];
        mbps.push(v.write_bytes as f64 / v.exec_time_s / 1e6);
    }
    assert!(
        mbps[1] > mbps[0],
        "cost-benefit {} vs greedy {}",
        mbps[1],
        mbps[0]
    );
}
