//! The papers' device micro-benchmarks, run against the presets.
//!
//! - Seed 000 section 3: Iometer with one outstanding request on an Intel 320 SSD and a
//!   Hitachi HDS721010CLA332, reporting SSD/HDD speed ratios per access pattern.
//! - Seed 004 Table 1: copying an idle 5 GB image between two devices, one 1 MiB chunk
//!   read then written at a time.
//!
//! Each figure is reported as model, paper and model/paper.

use serde::Serialize;

use crate::units::{GIB, KIB, MIB, NS_PER_S};
use crate::{DevRequest, DeviceModel, Model, preset};

/// One calibration figure.
#[derive(Clone, Debug, Serialize)]
pub struct CalRow {
    pub source: &'static str,
    pub figure: String,
    pub unit: &'static str,
    pub model: f64,
    /// The published value, if the paper gives a number.
    pub paper: Option<f64>,
    /// model / paper.
    pub ratio: Option<f64>,
    pub note: &'static str,
}

/// Iometer's test file: random offsets fall in this many bytes at the start of the disk.
pub const IOMETER_SPAN_BYTES: u64 = 8 * GIB;

/// SplitMix64: a tiny deterministic generator for benchmark offsets.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn model(name: &str) -> Model {
    let p = preset(name).unwrap_or_else(|| panic!("calibration preset {name} missing"));
    Model::from_preset(&p, None)
}

/// Mean service time in ns of `count` requests of `size` bytes at one outstanding request.
pub fn qd1_mean_ns(
    m: &mut Model,
    write: bool,
    random: bool,
    size: u64,
    count: u64,
    seed: u64,
) -> f64 {
    let mut rng = SplitMix(seed);
    let slots = IOMETER_SPAN_BYTES / size;
    let mut t = 0u64;
    let mut total = 0u64;
    for i in 0..count {
        let off = if random {
            (rng.next() % slots) * size
        } else {
            i * size
        };
        let req = if write {
            DevRequest::write(off, size)
        } else {
            DevRequest::read(off, size)
        };
        let done = m.submit(t, &req);
        total += done - t;
        t = done;
    }
    total as f64 / count as f64
}

/// 4 KiB random IOPS with `qd` requests always outstanding (a closed loop, as Iometer and
/// fio measure datasheet figures), over `count` requests of which the first quarter warms up.
pub fn random_4k_iops(m: &mut Model, write: bool, qd: u64, count: u64, seed: u64) -> f64 {
    let mut rng = SplitMix(seed);
    let size = 4 * KIB;
    let slots = IOMETER_SPAN_BYTES / size;
    // Completion times of the requests in flight; each one frees a slot for the next.
    let mut in_flight = std::collections::BinaryHeap::new();
    let (warm, mut from_ns, mut last_ns) = (count / 4, 0, 0);
    for i in 0..count {
        let t = if i < qd {
            0
        } else {
            in_flight.pop().map_or(0, |std::cmp::Reverse(t)| t)
        };
        if i == warm {
            from_ns = t;
        }
        let off = (rng.next() % slots) * size;
        let req = if write {
            DevRequest::write(off, size)
        } else {
            DevRequest::read(off, size)
        };
        let done = m.submit(t, &req);
        last_ns = last_ns.max(done);
        in_flight.push(std::cmp::Reverse(done));
    }
    (count - warm) as f64 * NS_PER_S as f64 / last_ns.saturating_sub(from_ns).max(1) as f64
}

/// 4 KiB random read IOPS with `qd` reads always outstanding at a drive that queues them
/// (`crate::queue`), over offsets in the whole drive, as reviews measure a disk's random
/// access; the first quarter of `count` warms up. Also returns the queue's counters.
pub fn queued_random_4k_read_iops(
    m: &mut Model,
    mut queue: crate::queue::CommandQueue,
    qd: u64,
    count: u64,
    seed: u64,
) -> (f64, crate::queue::QueueStats) {
    let mut rng = SplitMix(seed);
    let size = 4 * KIB;
    let slots = m.capacity_bytes() / size;
    let mut issued = 0u64;
    let mut issue = |queue: &mut crate::queue::CommandQueue, t: u64| {
        let off = (rng.next() % slots) * size;
        queue.push(t, issued, DevRequest::read(off, size));
        issued += 1;
        issued
    };
    let mut n = 0;
    while n < qd.min(count) {
        n = issue(&mut queue, 0);
    }
    let (warm, mut from_ns, mut t) = (count / 4, 0, 0);
    let mut done = 0u64;
    while let Some((_, end_ns)) = queue.start_next(t, m) {
        t = end_ns;
        queue.finished();
        done += 1;
        if done == warm {
            from_ns = t;
        }
        if n < count {
            n = issue(&mut queue, t);
        }
    }
    let iops = (count - warm) as f64 * NS_PER_S as f64 / t.saturating_sub(from_ns).max(1) as f64;
    (iops, queue.stats())
}

/// Seconds to copy `bytes` from one device to another, 1 MiB read then written at a time.
pub fn copy_seconds(src: &mut Model, dst: &mut Model, bytes: u64, fua: bool) -> f64 {
    let mut t = 0u64;
    for i in 0..bytes / MIB {
        t = src.submit(t, &DevRequest::read(i * MIB, MIB));
        t = dst.submit(
            t,
            &DevRequest {
                fua,
                ..DevRequest::write(i * MIB, MIB)
            },
        );
    }
    t as f64 / NS_PER_S as f64
}

fn row(
    source: &'static str,
    figure: String,
    unit: &'static str,
    model: f64,
    paper: Option<f64>,
    note: &'static str,
) -> CalRow {
    CalRow {
        source,
        figure,
        unit,
        model,
        paper,
        ratio: paper.map(|p| model / p),
        note,
    }
}

/// Run every calibration benchmark.
pub fn run() -> Vec<CalRow> {
    let mut rows = Vec::new();
    let (ssd, hdd) = ("intel-320-160g", "hitachi-7k1000c");
    // (figure, write, random, size, paper ratio)
    let cases: [(&str, bool, bool, u64, Option<f64>); 8] = [
        ("random 4 KB read", false, true, 4 * KIB, Some(35.0)),
        ("random 4 KB write", true, true, 4 * KIB, Some(40.0)),
        ("random 512 KB read", false, true, 512 * KIB, Some(4.0)),
        ("random 512 KB write", true, true, 512 * KIB, Some(4.0)),
        ("sequential 4 KB read", false, false, 4 * KIB, Some(4.0)),
        ("sequential 4 KB write", true, false, 4 * KIB, Some(4.0)),
        ("sequential 512 KB read", false, false, 512 * KIB, Some(2.0)),
        // "sequential accesses could favor Hitachi HDD, especially when the request size
        // of sequential writes is increased": no number for writes alone.
        ("sequential 512 KB write", true, false, 512 * KIB, None),
    ];
    for (i, (figure, write, random, size, paper)) in cases.into_iter().enumerate() {
        let count = if size >= 512 * KIB { 400 } else { 4000 };
        let h = qd1_mean_ns(&mut model(hdd), write, random, size, count, 1000 + i as u64);
        let s = qd1_mean_ns(&mut model(ssd), write, random, size, count, 1000 + i as u64);
        rows.push(row(
            "seed 000 sec. 3",
            format!("{figure}: SSD/HDD speed"),
            "x",
            h / s,
            paper,
            if paper.is_some() {
                "Intel 320 vs Hitachi 7K1000.C, QD1"
            } else {
                "paper: HDD catches up on large sequential writes (no number)"
            },
        ));
    }
    // "When request size is above 64KB, the performance of Intel SSD increases slowly."
    for write in [false, true] {
        let mbps = |size: u64| {
            let ns = qd1_mean_ns(&mut model(ssd), write, true, size, 400, 77);
            size as f64 / ns * 1e3
        };
        rows.push(row(
            "seed 000 sec. 3",
            format!(
                "SSD random {} MB/s gain 512 KB over 64 KB",
                if write { "write" } else { "read" }
            ),
            "x",
            mbps(512 * KIB) / mbps(64 * KIB),
            None,
            "paper: increases slowly above 64 KB (no number)",
        ));
    }
    // Datasheet random 4 KB IOPS at QD32: what the controller limit is fitted to (the host
    // link and the dies alone gave 1.3-2.9x these).
    let datasheets = [
        ("intel-320-160g", "spec", 39_500.0, 21_000.0),
        ("intel-x25m-80g", "spec (G1, 50 nm)", 35_000.0, 3_300.0),
        ("intel-520", "seed 004 Table 4", 50_000.0, 60_000.0),
    ];
    for (name, source, read_iops, write_iops) in datasheets {
        for (write, paper) in [(false, read_iops), (true, write_iops)] {
            rows.push(row(
                source,
                format!(
                    "{name} random 4 KB {} IOPS, QD32",
                    if write { "write" } else { "read" }
                ),
                "",
                random_4k_iops(&mut model(name), write, 32, 40_000, 7),
                Some(paper),
                "datasheet figure; controller limit fitted to it",
            ));
        }
    }
    // The Hitachi's command queueing (NCQ), random 4 KiB reads over the whole drive.
    // QD1: the datasheet's random-read formula (command overhead + 8.2 ms average seek +
    // 4.17 ms average rotational latency; the model's overhead is the 0.6 ms fitted to
    // seed 000's host path, so the estimate uses it too). QD32: no published figure for
    // this drive was found; shortest-positioning-time-first at 32 commands is usually
    // quoted at about twice QD1 for 7,200 rpm SATA drives, so 2x the QD1 figure (est.).
    if let Some(crate::Preset::Hdd { params, .. }) = preset(hdd) {
        let qd1_est = NS_PER_S as f64
            / (params.command_overhead_ns + params.seek_avg_ns + params.rotation_ns() / 2) as f64;
        for (qd, est) in [(1u64, qd1_est), (32, 2.0 * qd1_est)] {
            let mut m = model(hdd);
            let queue = crate::queue::CommandQueue::for_model(&m)
                .expect("the Hitachi preset queues commands");
            let (iops, _) = queued_random_4k_read_iops(&mut m, queue, qd, 8_000, 11);
            rows.push(row(
                "spec / est.",
                format!("{hdd} random 4 KB read IOPS, whole drive, NCQ on, QD{qd}"),
                "",
                iops,
                Some(est),
                if qd == 1 {
                    "est. from the datasheet: 1 / (overhead + avg seek + half a rotation)"
                } else {
                    "est.: about 2x QD1 (no published figure for this drive found)"
                },
            ));
        }
    }
    // Seed 004 Table 1. The paper's 81 s HDD->HDD equals reading plus writing 5 GB at the
    // drives' 125 MB/s with no overlap, so the copy writes through (FUA), as blktap's
    // O_DIRECT image copy on write-through arrays does.
    let copies = [
        ("SSD->SSD", "intel-520", "intel-520", 30.0),
        ("SSD->HDD", "intel-520", hdd, 59.0),
        ("HDD->SSD", hdd, "intel-520", 55.0),
        ("HDD->HDD", hdd, hdd, 81.0),
    ];
    for (figure, src, dst, paper) in copies {
        let secs = copy_seconds(&mut model(src), &mut model(dst), 5 * GIB, true);
        rows.push(row(
            "seed 004 Table 1",
            format!("copy 5 GB idle image {figure}"),
            "s",
            secs,
            Some(paper),
            "1 MiB chunks, read then write",
        ));
    }
    // Seed 003 section 5: random single-page reads on the Cheetah 15K.4, cache off.
    if let Some(crate::Preset::Hdd { params, .. }) = preset("cheetah-15k4") {
        let bands = crate::seekline::measure(&params, 20_000, 3);
        let n = bands.len().max(1) as f64;
        let model_ms = bands.iter().map(|b| b.model_ms).sum::<f64>() / n;
        let paper_ms = bands.iter().map(|b| b.paper_ms).sum::<f64>() / n;
        rows.push(row(
            "seed 003 sec. 5",
            format!(
                "cheetah-15k4 random 4 KB read vs 4.25 + 5.25 d/D ms (mean over {} bands; mean band error {:.1} %)",
                bands.len(),
                100.0 * crate::seekline::mean_relative_error(&bands)
            ),
            "ms",
            model_ms,
            Some(paper_ms),
            "cache off, QD1, bands of d/D",
        ));
    }
    rows
}

#[cfg(test)]
mod tests {
    /// The issue's bar: every published figure reproduced within [0.67, 1.5].
    #[test]
    fn every_paper_figure_within_band() {
        let rows = super::run();
        assert!(rows.iter().filter(|r| r.paper.is_some()).count() >= 17);
        for r in &rows {
            if let Some(ratio) = r.ratio {
                assert!(
                    (0.67..=1.5).contains(&ratio),
                    "{}: model {:.2} vs paper {:?} (ratio {ratio:.2})",
                    r.figure,
                    r.model,
                    r.paper
                );
            }
        }
        // "When request size is above 64KB, the performance of Intel SSD increases slowly."
        for r in rows
            .iter()
            .filter(|r| r.figure.contains("gain 512 KB over 64 KB"))
        {
            assert!(r.model < 1.8, "{}: {:.2}", r.figure, r.model);
        }
    }

    /// Issue 16's bar for the controller limit: QD32 IOPS within 15 % of the datasheet.
    #[test]
    fn qd32_iops_within_15_percent_of_the_datasheets() {
        let rows = super::run();
        let qd32: Vec<_> = rows
            .iter()
            .filter(|r| r.figure.contains("QD32") && !r.figure.contains("NCQ"))
            .collect();
        assert_eq!(qd32.len(), 6);
        for r in qd32 {
            let ratio = r.ratio.unwrap_or(0.0);
            assert!(
                (0.85..=1.15).contains(&ratio),
                "{}: {:.0} vs {:?}",
                r.figure,
                r.model,
                r.paper
            );
        }
    }

    /// At one outstanding request the controller is free again before the next arrives.
    #[test]
    fn the_controller_limit_leaves_qd1_alone() {
        for name in ["intel-320-160g", "intel-520"] {
            let Some(crate::Preset::Ssd { params, .. }) = crate::preset(name) else {
                panic!("{name}");
            };
            let unlimited = crate::ssd::SsdParams {
                controller_read_iops: 0,
                controller_write_iops: 0,
                ..params.clone()
            };
            for write in [false, true] {
                let limited = super::random_4k_iops(&mut super::model(name), write, 1, 4000, 3);
                let mut free = crate::Model::Ssd(Box::new(crate::Ssd::new(unlimited.clone())));
                let free = super::random_4k_iops(&mut free, write, 1, 4000, 3);
                assert!(
                    (limited / free - 1.0).abs() < 0.02,
                    "{name} {write}: {limited} vs {free}"
                );
                let limited32 = super::random_4k_iops(&mut super::model(name), write, 32, 8000, 3);
                let mut free = crate::Model::Ssd(Box::new(crate::Ssd::new(unlimited.clone())));
                let free32 = super::random_4k_iops(&mut free, write, 32, 8000, 3);
                assert!(
                    limited32 < 0.8 * free32,
                    "{name} {write}: {limited32} vs {free32}"
                );
            }
        }
    }
}
