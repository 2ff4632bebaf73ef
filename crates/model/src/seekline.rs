//! Seed 003 section 5: the Cheetah 15K.4's measured service time of random single-page
//! reads against seek distance, X = 4.25 + 5.25 (d/D) ms (on-board cache disabled,
//! O_DIRECT, 100,000 reads, least-squares line through the smoothed data).
//!
//! [`measure`] repeats the experiment on a model and compares, per band of d/D, the mean
//! model time with the paper's line.

use crate::hdd::{Hdd, HddParams};
use crate::units::{NS_PER_MS, SECTOR_BYTES};
use crate::{DevRequest, DeviceModel};

/// The paper's line: intercept and slope in ms, against d/D.
pub const PAPER_INTERCEPT_MS: f64 = 4.25;
pub const PAPER_SLOPE_MS: f64 = 5.25;

/// Bands of d/D the comparison averages over.
pub const BANDS: usize = 10;

/// One band of d/D: the mean model time and the paper's line at the band's mean d/D.
#[derive(Clone, Copy, Debug)]
pub struct Band {
    pub mean_d_over_d: f64,
    pub model_ms: f64,
    pub paper_ms: f64,
    pub reads: u64,
}

/// Random 4 KiB reads over the whole drive, cache off, one outstanding; `reads` of them
/// from a fixed seed. Returns the bands that received reads.
pub fn measure(params: &HddParams, reads: u64, seed: u64) -> Vec<Band> {
    let mut p = params.clone();
    p.cache_bytes = 0;
    p.cache_segments = 0;
    p.readahead_bytes = 0;
    p.write_cache = false;
    let mut hdd = Hdd::new(p);
    let page = 4096u64;
    let slots = hdd.capacity_bytes() / page;
    let max_d = (hdd.capacity_bytes() / SECTOR_BYTES) as f64;
    let mut state = seed;
    let mut next = || {
        // SplitMix64: deterministic offsets without a dependency.
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut sums = [(0.0f64, 0.0f64, 0u64); BANDS];
    let mut t = 0u64;
    let mut last_sector = 0u64;
    for _ in 0..reads {
        let off = (next() % slots) * page;
        let sector = off / SECTOR_BYTES;
        let frac = sector.abs_diff(last_sector) as f64 / max_d;
        let done = hdd.submit(t, &DevRequest::read(off, page));
        let band = ((frac * BANDS as f64) as usize).min(BANDS - 1);
        sums[band].0 += frac;
        sums[band].1 += (done - t) as f64 / NS_PER_MS as f64;
        sums[band].2 += 1;
        // The host issues the next read a little after the completion, as a user-space
        // reader does; it keeps the rotational position from repeating.
        t = done + (next() % 1000) * 1000;
        last_sector = sector;
    }
    sums.iter()
        .filter(|s| s.2 > 0)
        .map(|&(f, ms, n)| {
            let d = f / n as f64;
            Band {
                mean_d_over_d: d,
                model_ms: ms / n as f64,
                paper_ms: PAPER_INTERCEPT_MS + PAPER_SLOPE_MS * d,
                reads: n,
            }
        })
        .collect()
}

/// Mean over bands of |model - paper| / paper.
pub fn mean_relative_error(bands: &[Band]) -> f64 {
    bands
        .iter()
        .map(|b| (b.model_ms - b.paper_ms).abs() / b.paper_ms)
        .sum::<f64>()
        / bands.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Preset, preset};

    fn params(name: &str) -> HddParams {
        match preset(name) {
            Some(Preset::Hdd { params, .. }) => params,
            _ => panic!("{name} is not an HDD preset"),
        }
    }

    /// The bar: the Cheetah preset follows the paper's line within 10 % on
    /// average over the bands of d/D, and no band is off by more than a quarter.
    #[test]
    fn cheetah_follows_the_papers_line() {
        let bands = measure(&params("cheetah-15k4"), 20_000, 7);
        assert_eq!(bands.len(), BANDS);
        let err = mean_relative_error(&bands);
        assert!(err <= 0.10, "mean relative error {err:.3}: {bands:?}");
        for b in &bands {
            let r = b.model_ms / b.paper_ms;
            assert!((0.75..=1.25).contains(&r), "band {b:?} ratio {r:.2}");
        }
        // 50,864 tracks per surface (paper).
        let cyl = Hdd::new(params("cheetah-15k4")).cylinders();
        assert!(cyl.abs_diff(50_864) * 100 < 50_864, "{cyl} cylinders");
    }

    /// The measurement can fail: a 7,200 rpm drive is far off the Cheetah's line.
    #[test]
    fn a_slower_drive_misses_the_line() {
        let bands = measure(&params("hitachi-7k1000c"), 5_000, 7);
        assert!(mean_relative_error(&bands) > 0.3);
    }
}
