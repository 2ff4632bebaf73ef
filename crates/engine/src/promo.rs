//! Whether a `hot` volume's promotions pay off: the accesses each promoted chunk gets on
//! the fast pool until it is demoted, averaged over the volume's recent demotions. A
//! volume whose promotions are re-read (websearch) may displace the coldest fast chunk
//! found anywhere in the volume; one whose promotions were bursts that never come back
//! (the `wsrch` trace: chunks read 4-8 times at once) searches a small window only, so it
//! rarely finds a victim and does not churn (issue 17).

use std::collections::BTreeMap;

/// Promoted chunks followed at once per volume (the rest are not scored).
const TRACKED_MAX: usize = 1024;
/// Mean hits per promotion from which a volume's promotions pay for their swaps. A swap
/// moves two chunks over the HDD (the victim down, the candidate up: at 1 MiB about
/// 2 x (8 ms + 10 ms)); each later hit on the SSD saves a random HDD access (a few ms).
/// `tiervisor reproduce tiering` at 2, 4 and 8: 8 keeps every `wsrch` row as it was
/// (its chunks read in bursts are promoted after the burst and seldom read again), 2 and 4
/// made those 4-15 % slower (BENCHMARKS.md, issue 17).
const PAYS_HITS: u64 = 8;
/// A promotion is scored after this many decay periods on the fast pool (or at its
/// demotion, if sooner).
const AGE_EPOCHS: u16 = 1;

#[derive(Clone, Debug, Default)]
pub struct PromoHits {
    /// Promoted chunk -> (accesses since it landed on the fast pool, the decay epoch
    /// it landed in).
    tracked: BTreeMap<u64, (u32, u16)>,
    /// Mean hits per demoted promotion, times 16, as a moving average over about the last
    /// 16 demotions; `None` until one was scored.
    mean_x16: Option<u64>,
}

impl PromoHits {
    /// Chunk `c` landed on the fast pool.
    pub fn promoted(&mut self, c: u64, epoch: u16) {
        if self.tracked.len() < TRACKED_MAX {
            self.tracked.insert(c, (0, epoch));
        }
    }

    /// A request touched chunk `c`, which is on the fast pool.
    pub fn hit(&mut self, c: u64) {
        if let Some((h, _)) = self.tracked.get_mut(&c) {
            *h = h.saturating_add(1);
        }
    }

    /// Chunk `c` left the fast pool: score what its stay earned.
    pub fn demoted(&mut self, c: u64) {
        if let Some((h, _)) = self.tracked.remove(&c) {
            self.score(h);
        }
    }

    /// Score the promotions that have stayed `AGE_EPOCHS` decay periods: what they
    /// earned by then is what a promotion of this volume earns.
    pub fn age(&mut self, epoch: u16) {
        let old: Vec<(u64, u32)> = (self.tracked.iter())
            .filter(|(_, (_, at))| epoch.wrapping_sub(*at) >= AGE_EPOCHS)
            .map(|(&c, &(h, _))| (c, h))
            .collect();
        for (c, h) in old {
            self.tracked.remove(&c);
            self.score(h);
        }
    }

    fn score(&mut self, h: u32) {
        let x16 = h as u64 * 16;
        self.mean_x16 = Some(match self.mean_x16 {
            None => x16,
            Some(m) => (m * 15 + x16) / 16,
        });
    }

    /// Mean hits per promotion (times 16), if any was scored.
    pub fn mean_x16(&self) -> Option<u64> {
        self.mean_x16
    }

    /// Whether this volume's promotions pay for their swaps: scored, and at least
    /// [`PAYS_HITS`] hits each on average.
    pub fn pays(&self) -> bool {
        self.mean_x16.is_some_and(|m| m >= PAYS_HITS * 16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_promotion_is_scored_at_its_demotion_or_once_it_has_aged() {
        let mut p = PromoHits::default();
        p.promoted(1, 5);
        p.promoted(2, 5);
        for _ in 0..10 {
            p.hit(1);
        }
        p.hit(3); // not a tracked promotion: ignored
        assert_eq!(p.mean_x16(), None);
        assert!(!p.pays(), "no evidence yet: the window");
        p.age(5);
        assert_eq!(p.mean_x16(), None, "not aged yet");
        p.demoted(1);
        assert_eq!(p.mean_x16(), Some(160));
        assert!(p.pays(), "10 hits pay");
        p.age(5 + AGE_EPOCHS);
        // Chunk 2 aged with no hit: (160 * 15 + 0) / 16.
        assert_eq!(p.mean_x16(), Some(150));
        p.demoted(2);
        assert_eq!(p.mean_x16(), Some(150), "scored once only");
    }

    #[test]
    fn promotions_never_re_read_stop_paying() {
        let mut p = PromoHits::default();
        p.promoted(0, 0);
        for _ in 0..20 {
            p.hit(0);
        }
        p.demoted(0);
        assert!(p.pays());
        let mut c = 1;
        while p.pays() {
            p.promoted(c, 0);
            p.demoted(c);
            c += 1;
            assert!(c < 100, "the average never fell");
        }
        // 320 -> below 128 takes about 15 idle promotions (the average spans ~16).
        assert!((10..=20).contains(&c), "{c}");
    }

    #[test]
    fn tracking_is_bounded() {
        let mut p = PromoHits::default();
        for c in 0..(TRACKED_MAX as u64 + 10) {
            p.promoted(c, 0);
        }
        assert_eq!(p.tracked.len(), TRACKED_MAX);
    }
}
