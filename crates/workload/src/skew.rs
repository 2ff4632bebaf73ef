//! Skewed choice of blocks: fio's `random_distribution` (zoned, zipf, pareto).
//!
//! Semantics follow fio's HOWTO and its `lib/zipf.c`: `zipf:θ` draws a rank `k` in
//! `1..=n` with probability proportional to `1 / k^θ`; `pareto:h` (0 < h < 1) draws rank
//! `⌊(n − 1) · u^p⌋` with `p = ln h / ln(1 − h)` and `u` uniform, so about `h` of the
//! region receives `1 − h` of the accesses (h = 0.2: the 80/20 rule). fio then hashes the
//! rank so that hot blocks are spread over the region rather than all at its start; we
//! scatter ranks with a pseudo-random permutation instead (a hash can send two ranks to
//! one block, a permutation cannot, so the block frequencies are exactly the law's).
//!
//! Differences from fio, on purpose: fio refuses θ = 1.0 (its generator, from Gray et
//! al., divides by 1 − θ) and sums its normalising constant over at most 10 M ranks; we
//! sample the exact Zipf law for any θ > 0 by rejection-inversion (Hörmann and
//! Derflinger, 1996), which needs no table and no sum. A real fio run of `zipf:1.0` needs
//! 0.99 or 1.01 instead.

use rand::RngCore;

/// How random I/Os choose their block.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    /// Every block equally likely.
    Uniform,
    /// `zoned:A/B`: A % of I/Os to the first B % of the region, the rest to the remainder.
    Zoned { io_pct: u32, region_pct: u32 },
    /// `zipf:θ`, θ > 0.
    Zipf { theta: f64 },
    /// `pareto:h`, 0 < h < 1.
    Pareto { h: f64 },
}

impl Distribution {
    /// Parse fio's `random_distribution` value; the error says what was expected.
    pub fn parse(s: &str) -> Result<Distribution, String> {
        let expected = "expected \"random\", \"zoned:A/B\" (A % of I/Os to the first B % of \
                        the region), \"zipf:THETA\" (THETA > 0, e.g. 1.2) or \"pareto:H\" \
                        (0 < H < 1, e.g. 0.2), as fio's random_distribution";
        let bad = |why: &str| Err(format!("random_distribution {s:?}: {why}{expected}"));
        let number = |v: &str| v.trim().parse::<f64>().ok().filter(|x| x.is_finite());
        if s == "random" {
            return Ok(Distribution::Uniform);
        }
        if let Some(v) = s.strip_prefix("zoned:") {
            let parsed = v.split_once('/').and_then(|(a, b)| {
                let (a, b) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                (a <= 100 && b <= 100).then_some((a, b))
            });
            return match parsed {
                Some((io_pct, region_pct)) => Ok(Distribution::Zoned { io_pct, region_pct }),
                None => bad("A and B must be percentages; "),
            };
        }
        if let Some(v) = s.strip_prefix("zipf:") {
            return match number(v) {
                Some(theta) if theta > 0.0 && theta <= 100.0 => Ok(Distribution::Zipf { theta }),
                _ => bad("THETA must be a number above 0 (at most 100); "),
            };
        }
        if let Some(v) = s.strip_prefix("pareto:") {
            return match number(v) {
                Some(h) if h > 0.0 && h < 1.0 => Ok(Distribution::Pareto { h }),
                _ => bad("H must be a number strictly between 0 and 1; "),
            };
        }
        bad("")
    }

    /// Whether choices depend on anything but a uniform draw (fio then turns its random
    /// map off).
    pub fn skewed(&self) -> bool {
        !matches!(self, Distribution::Uniform)
    }
}

/// A uniform f64 in [0, 1) from 53 random bits.
pub fn unit(rng: &mut impl RngCore) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Exact Zipf ranks in `1..=n` with exponent `theta` by rejection-inversion: propose from
/// the continuous envelope `x^-θ`, accept so that each integer keeps its exact weight.
#[derive(Clone, Debug)]
pub struct ZipfSampler {
    n: f64,
    theta: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    s: f64,
}

/// `ln(1 + x) / x`, accurate near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x − 1) / x`, accurate near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

impl ZipfSampler {
    pub fn new(n: u64, theta: f64) -> ZipfSampler {
        let mut z = ZipfSampler {
            n: n.max(1) as f64,
            theta,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            s: 0.0,
        };
        z.h_integral_x1 = z.h_integral(1.5) - 1.0;
        z.h_integral_n = z.h_integral(z.n + 0.5);
        z.s = 2.0 - z.h_integral_inverse(z.h_integral(2.5) - z.h(2.0));
        z
    }

    fn h(&self, x: f64) -> f64 {
        (-self.theta * x.ln()).exp()
    }

    /// The integral of `h` from 1 to `x` (`ln x` at θ = 1, without a special case).
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.theta) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.theta)).max(-1.0);
        (helper1(t) * x).exp()
    }

    /// A rank in `1..=n`.
    pub fn sample(&self, rng: &mut impl RngCore) -> u64 {
        loop {
            let u = self.h_integral_n + unit(rng) * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.s || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }
}

/// fio's Pareto rank in `0..n`: `⌊(n − 1) · u^p⌋`, `p = ln h / ln(1 − h)`.
pub fn pareto_rank(rng: &mut impl RngCore, n: u64, h: f64) -> u64 {
    let p = h.ln() / (1.0 - h).ln();
    (((n.max(1) - 1) as f64 * unit(rng).powf(p)) as u64).min(n.max(1) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    #[test]
    fn values_parse_and_bad_ones_say_what_was_expected() {
        assert_eq!(Distribution::parse("random"), Ok(Distribution::Uniform));
        assert_eq!(
            Distribution::parse("zipf:1.2"),
            Ok(Distribution::Zipf { theta: 1.2 })
        );
        assert_eq!(
            Distribution::parse("pareto:0.2"),
            Ok(Distribution::Pareto { h: 0.2 })
        );
        assert_eq!(
            Distribution::parse("zoned:80/20"),
            Ok(Distribution::Zoned {
                io_pct: 80,
                region_pct: 20
            })
        );
        for bad in [
            "zipf:0", "zipf:-1", "zipf:x", "zipf:inf", "pareto:1", "pareto:0", "gauss",
        ] {
            let e = Distribution::parse(bad).unwrap_err();
            assert!(e.contains(bad) && e.contains("zipf:THETA"), "{e}");
        }
        assert!(
            Distribution::parse("pareto:1.5")
                .unwrap_err()
                .contains("strictly between 0 and 1")
        );
    }

    #[test]
    fn zipf_ranks_follow_the_law_even_at_theta_one() {
        for theta in [0.5, 1.0, 1.2, 2.0] {
            let n = 50u64;
            let z = ZipfSampler::new(n, theta);
            let mut rng = Xoshiro256PlusPlus::seed_from_u64(3);
            let draws = 200_000;
            let mut counts = vec![0u64; n as usize + 1];
            for _ in 0..draws {
                let k = z.sample(&mut rng);
                assert!((1..=n).contains(&k));
                counts[k as usize] += 1;
            }
            let norm: f64 = (1..=n).map(|k| (k as f64).powf(-theta)).sum();
            for k in [1u64, 2, 5, 20] {
                let want = (k as f64).powf(-theta) / norm * draws as f64;
                let got = counts[k as usize] as f64;
                assert!(
                    (got - want).abs() < 5.0 * want.sqrt() + 10.0,
                    "θ {theta} rank {k}: {got} drawn, {want:.0} expected"
                );
            }
        }
    }
}
