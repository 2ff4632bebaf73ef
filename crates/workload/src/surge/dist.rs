//! The distributions of seed 003 section 5 (after Barford and Crovella's SURGE).

use rand::RngCore;

/// A uniform draw in (0, 1]: never 0, so `1 / u` and `ln u` stay finite.
pub fn unit(rng: &mut impl RngCore) -> f64 {
    ((rng.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64
}

/// Pareto(alpha, k): F(x) = 1 - (k/x)^alpha for x >= k.
pub fn pareto(rng: &mut impl RngCore, alpha: f64, k: f64) -> f64 {
    k / unit(rng).powf(1.0 / alpha)
}

/// A standard normal draw (Box-Muller; one of the pair is enough here).
pub fn normal(rng: &mut impl RngCore) -> f64 {
    let (u1, u2) = (unit(rng), unit(rng));
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// lognormal(mu, sigma).
pub fn lognormal(rng: &mut impl RngCore, mu: f64, sigma: f64) -> f64 {
    (mu + sigma * normal(rng)).exp()
}

/// Zipf popularity over ranks 0..n by the paper's continuous approximation
/// F(x) = log(x + 1) / log(n + 1), so rank 0 is the most popular.
pub fn zipf_rank(rng: &mut impl RngCore, n: u64) -> u64 {
    let x = ((n as f64 + 1.0).ln() * (1.0 - unit(rng))).exp() - 1.0;
    (x as u64).min(n.saturating_sub(1))
}

/// File sizes: lognormal(mu, sigma) below `cut` bytes and Pareto(alpha, cut) above.
/// A lognormal draw at or above the cut is replaced by a Pareto draw, so the body keeps
/// the lognormal's shape and the tail holds its mass (3.2 % with the paper's numbers).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SizeMix {
    pub mu: f64,
    pub sigma: f64,
    pub cut_bytes: f64,
    pub tail_alpha: f64,
    /// Larger files are truncated to this (the paper: 100 MB).
    pub max_bytes: f64,
}

impl SizeMix {
    /// The paper's mixture: lognormal(9.357, 1.318) below 133 KB, Pareto(1.1, 133 KB)
    /// above, truncated at 100 MB.
    pub const PAPER: SizeMix = SizeMix {
        mu: 9.357,
        sigma: 1.318,
        cut_bytes: 133_000.0,
        tail_alpha: 1.1,
        max_bytes: 100e6,
    };

    pub fn draw(&self, rng: &mut impl RngCore) -> u64 {
        let body = lognormal(rng, self.mu, self.sigma);
        let x = if body < self.cut_bytes {
            body
        } else {
            pareto(rng, self.tail_alpha, self.cut_bytes)
        };
        (x.min(self.max_bytes) as u64).max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_xoshiro::Xoshiro256PlusPlus;

    fn rng() -> Xoshiro256PlusPlus {
        Xoshiro256PlusPlus::seed_from_u64(42)
    }

    #[test]
    fn pareto_tail_follows_its_cdf() {
        let mut r = rng();
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| pareto(&mut r, 1.5, 2.0)).collect();
        assert!(xs.iter().all(|&x| x >= 2.0));
        // P(X > 4) = (2/4)^1.5 = 0.3536; P(X > 10) = 0.2^1.5 = 0.0894.
        for (t, p) in [(4.0, 0.5f64.powf(1.5)), (10.0, 0.2f64.powf(1.5))] {
            let got = xs.iter().filter(|&&x| x > t).count() as f64 / n as f64;
            assert!((got - p).abs() < 0.005, "P(X > {t}) = {got}, want {p}");
        }
        // Pareto(2.43, 1): mean alpha k / (alpha - 1) = 1.699.
        let m = (0..n).map(|_| pareto(&mut r, 2.43, 1.0)).sum::<f64>() / n as f64;
        assert!((m - 1.699).abs() < 0.03, "mean {m}");
    }

    #[test]
    fn lognormal_median_and_spread() {
        let mut r = rng();
        let mut xs: Vec<f64> = (0..100_001)
            .map(|_| lognormal(&mut r, 9.357, 1.318))
            .collect();
        xs.sort_by(f64::total_cmp);
        let median = xs[50_000];
        // Median e^mu = 11,582; the 84th percentile e^(mu + sigma) = 43,270.
        assert!((median / 11_582.0 - 1.0).abs() < 0.03, "median {median}");
        let p84 = xs[84_134];
        assert!((p84 / 43_270.0 - 1.0).abs() < 0.04, "p84 {p84}");
    }

    #[test]
    fn size_mixture_has_the_papers_tail_mass() {
        let mut r = rng();
        let n = 200_000;
        let xs: Vec<u64> = (0..n).map(|_| SizeMix::PAPER.draw(&mut r)).collect();
        let tail = xs.iter().filter(|&&x| x >= 133_000).count() as f64 / n as f64;
        // Phi((ln 133000 - 9.357) / 1.318) = 0.968.
        assert!((tail - 0.032).abs() < 0.003, "tail mass {tail}");
        assert!(xs.iter().all(|&x| x <= 100_000_000));
    }

    #[test]
    fn zipf_rank_zero_is_most_popular() {
        let mut r = rng();
        let n = 1000u64;
        let mut counts = vec![0u64; n as usize];
        for _ in 0..200_000 {
            counts[zipf_rank(&mut r, n) as usize] += 1;
        }
        // F(x) = ln(x + 1) / ln(n + 1): P(rank 0) = ln 2 / ln 1001 = 0.1003.
        let p0 = counts[0] as f64 / 200_000.0;
        assert!((p0 - 0.1003).abs() < 0.005, "P(0) = {p0}");
        // Ranks below 31: ln 32 / ln 1001 = 0.5017.
        let head: u64 = counts[..31].iter().sum();
        assert!((head as f64 / 200_000.0 - 0.5017).abs() < 0.006);
    }
}
