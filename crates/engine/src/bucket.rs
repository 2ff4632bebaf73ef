//! A token bucket for background bandwidth caps (tier migration, the log cleaner).

/// Bytes that may be spent now; refilled at a rate, up to a burst.
#[derive(Clone, Debug, Default)]
pub(crate) struct TokenBucket {
    tokens: u64,
    last_ns: u64,
}

impl TokenBucket {
    /// Add what `rate_per_s` earned since the last refill, capped at `burst`.
    pub fn refill(&mut self, now: u64, rate_per_s: u64, burst: u64) {
        let elapsed = now.saturating_sub(self.last_ns);
        self.last_ns = self.last_ns.max(now);
        let earned = (rate_per_s as u128 * elapsed as u128 / 1_000_000_000) as u64;
        self.tokens = self.tokens.saturating_add(earned).min(burst);
    }

    /// Start full at `now` (a job's first burst need not be earned).
    pub fn fill(&mut self, now: u64, burst: u64) {
        self.last_ns = now;
        self.tokens = burst;
    }

    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// Spend `n` (what is not there is simply not owed).
    pub fn take(&mut self, n: u64) {
        self.tokens = self.tokens.saturating_sub(n);
    }

    /// When the bucket, refilled at `rate_per_s`, will hold `need`.
    pub fn ready_at(&self, need: u64, rate_per_s: u64) -> u64 {
        let missing = need.saturating_sub(self.tokens) as u128;
        let wait_ns = (missing * 1_000_000_000).div_ceil(rate_per_s.max(1) as u128);
        self.last_ns
            .saturating_add(u64::try_from(wait_ns).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refills_at_the_rate_up_to_the_burst_and_says_when_it_is_ready() {
        let mut b = TokenBucket::default();
        b.refill(500_000_000, 1000, 10_000); // half a second at 1000/s
        assert_eq!(b.tokens(), 500);
        assert_eq!(b.ready_at(800, 1000), 800_000_000);
        b.take(200);
        assert_eq!(b.tokens(), 300);
        b.take(1000);
        assert_eq!(b.tokens(), 0);
        b.refill(100_000_000_000, 1000, 10_000); // long idle: capped
        assert_eq!(b.tokens(), 10_000);
        b.refill(50_000_000_000, 1000, 10_000); // time never runs backwards
        assert_eq!(b.tokens(), 10_000);
        assert_eq!(b.ready_at(5, 1000), 100_000_000_000, "already there");
    }
}
